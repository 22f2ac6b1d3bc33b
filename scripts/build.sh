#!/usr/bin/env bash
# Configures (once) and builds dptrain in build/ (or $DPTRAIN_BUILD_DIR).
# Extra arguments go to `meson setup`, e.g. -Dcuda=disabled.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${DPTRAIN_BUILD_DIR:-build}
if [[ ! -f $dir/build.ninja ]]; then
    meson setup "$dir" --buildtype=release "$@"
elif [[ $# -gt 0 ]]; then
    meson configure "$dir" "$@"
fi
meson compile -C "$dir"
