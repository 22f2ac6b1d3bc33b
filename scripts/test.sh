#!/usr/bin/env bash
# One command from a fresh clone to every test: installs what is missing,
# builds, runs `meson test`. CI runs this (.ci/run). Arguments go to
# `meson test` (e.g. --suite cpu, or a test's name); --slow runs only the
# long checks of the slow suite (whole epochs under mpirun), which CI leaves
# out: the CI suite keeps short versions of them.
#
# When the build has the CUDA backend, the CPU tests run a second time in a
# build without it and without MPI (build-nocuda/), so both configurations
# stay green (without MPI, dptrain must refuse a job of several processes). The GPU
# tests (suite gpu) report SKIP on machines without a usable GPU. Last, the
# CPU tests run under AddressSanitizer and UndefinedBehaviorSanitizer
# (build-sanitize/); any report fails them. DPTRAIN_SANITIZE=0 skips that.
# Then the GPU machine's offline build: scripts/bundle.sh, and the `build`
# stage of scripts/gpu.sh from bundle/ with pkg-config's packages hidden
# (DPTRAIN_BUNDLE_CHECK=0 skips it). Then scripts/fuzz.sh fuzzes the IDX and
# checkpoint readers for $DPTRAIN_FUZZ seconds each (default 60; 0 skips it).
# Given arguments, only the main build's `meson test` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --with-plot
dir=${DPTRAIN_BUILD_DIR:-build}
scripts/build.sh
if [[ ${1:-} == --slow ]]; then
    exec meson test -C "$dir" --no-rebuild --print-errorlogs --suite slow "${@:2}"
fi
meson test -C "$dir" --no-rebuild --print-errorlogs --no-suite slow "$@"
if [[ $# -eq 0 && -e $dir/tests/gpu/gpu_tests ]]; then
    echo "== the same tests in a build without CUDA and MPI (-Dcuda=disabled -Dmpi=disabled) =="
    DPTRAIN_BUILD_DIR=$dir-nocuda scripts/build.sh -Dcuda=disabled -Dmpi=disabled
    meson test -C "$dir-nocuda" --no-rebuild --print-errorlogs --no-suite slow "$@"
fi
if [[ $# -eq 0 && ${DPTRAIN_SANITIZE:-1} != 0 ]]; then
    echo "== the CPU tests under ASan and UBSan (-Db_sanitize=address,undefined) =="
    # (Without MPI: Open MPI's own allocations would fill LeakSanitizer's report.)
    DPTRAIN_BUILD_DIR=$dir-sanitize scripts/build.sh -Dcuda=disabled -Dmpi=disabled -Db_sanitize=address,undefined \
        -Db_lundef=false -Dcpp_args=-fno-sanitize-recover=all -Dcpp_link_args=-fno-sanitize-recover=all
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 meson test -C "$dir-sanitize" --no-rebuild --print-errorlogs --no-suite slow "$@"
fi
if [[ $# -eq 0 && ${DPTRAIN_BUNDLE_CHECK:-1} != 0 ]]; then
    # The lent GPU machine has no Debian packages: it builds from bundle/.
    # Prove that path here, with pkg-config's packages hidden, by running the
    # `build` stage of scripts/gpu.sh (its GPU tests report SKIP here).
    echo "== the GPU machine's build: from bundle/, system packages hidden (scripts/gpu.sh build) =="
    had_bundle=$([[ -d bundle ]] && echo yes || echo no)
    had_data_link=$([[ -e data/fashion-mnist || -L data/fashion-mnist ]] && echo yes || echo no)
    scripts/bundle.sh
    rm -rf "$dir-bundle"
    PKG_CONFIG_LIBDIR=/nonexistent DPTRAIN_BUILD_DIR=$dir-bundle LOGS=$dir-bundle/gpu-logs scripts/gpu.sh build
    # Leave the tree as it was: a bundle/ left behind would stand in for the
    # packages in every later build here.
    if [[ $had_bundle == no ]]; then
        rm -rf bundle
        [[ $had_data_link == no && -L data/fashion-mnist ]] && rm data/fashion-mnist
    fi
fi
if [[ $# -eq 0 && ${DPTRAIN_FUZZ:-60} != 0 ]]; then
    echo "== the IDX and checkpoint readers under libFuzzer, ${DPTRAIN_FUZZ:-60} s each =="
    scripts/fuzz.sh "${DPTRAIN_FUZZ:-60}"
fi
