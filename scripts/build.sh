#!/usr/bin/env bash
# Configures (once) and builds dptrain in build/ (or $DPTRAIN_BUILD_DIR).
# Extra arguments go to `meson setup` (or `meson configure` once set up),
# e.g. -Dcuda=disabled. DPTRAIN_TARGETS, where set, names the targets to
# build as `meson compile` takes them (default: all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
# -Dcuda=auto builds the GPU backend when it finds nvcc: on PATH, or in the
# CUDA toolkit's usual home.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
dir=${DPTRAIN_BUILD_DIR:-build}
# An offline bundle (scripts/bundle.sh) stands in for the Debian packages.
bundle=$([[ -d bundle/include ]] && echo bundle || true)
# A meson folder whose setup was interrupted (no build.ninja) is set up afresh.
if [[ -d $dir/meson-private && ! -f $dir/build.ninja ]]; then rm -rf "$dir"; fi
if [[ ! -f $dir/build.ninja ]]; then
    meson setup "$dir" --buildtype=release -Dbundle="$bundle" "$@"
else
    # Set up while a bundle/ was here that is gone now, or the other way
    # round: follow the tree as it is.
    configured=$(scripts/build_option.sh "$dir" bundle)
    if [[ $configured != "$bundle" ]]; then set -- -Dbundle="$bundle" "$@"; fi
    if [[ $# -gt 0 ]]; then meson configure "$dir" "$@"; fi
fi
# A build with nothing to do says nothing (test.sh builds three times).
# shellcheck disable=SC2086  # a list of targets
meson compile -C "$dir" ${DPTRAIN_TARGETS:-} | { grep -v '^ninja: no work to do\.$' || true; }
