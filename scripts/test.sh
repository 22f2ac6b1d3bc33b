#!/usr/bin/env bash
# One command from a fresh clone to every test: installs what is missing,
# builds, runs `meson test`. CI runs this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
meson test -C "${DPTRAIN_BUILD_DIR:-build}" --print-errorlogs "$@"
