#!/usr/bin/env bash
# One command from a fresh clone to every test: installs what is missing,
# builds, runs `meson test`. CI runs this (.ci/run). Arguments go to
# `meson test` (e.g. --suite cpu, or a test's name).
#
# When the build has the CUDA backend, the CPU tests run a second time in a
# build without it (build-nocuda/), so both configurations stay green. The GPU
# tests (suite gpu) report SKIP on machines without a usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
dir=${DPTRAIN_BUILD_DIR:-build}
scripts/build.sh
meson test -C "$dir" --print-errorlogs "$@"
if [[ -e $dir/tests/gpu/gpu_tests ]]; then
    echo "== the same tests in a build without CUDA (-Dcuda=disabled) =="
    DPTRAIN_BUILD_DIR=$dir-nocuda scripts/build.sh -Dcuda=disabled
    meson test -C "$dir-nocuda" --print-errorlogs "$@"
fi
