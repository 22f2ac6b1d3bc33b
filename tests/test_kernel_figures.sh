#!/usr/bin/env bash
# scripts/kernel_figures.py on the emulated GPU's build: every kernel of a
# LeNet step, as the emulation records it, is found among the kernels nvcc
# compiles (by name and parameter types), and both tables are printed.
# Usage: test_kernel_figures.sh SOURCE_ROOT BUILD_DIR
# With DPTRAIN_KERNEL_OBJECTS naming a CUDA build's library of kernels (built
# for sm_90 among others), the kernels are read from it, not compiled again:
# scripts/test.sh passes its main build's, which holds the same machine code.
set -uo pipefail
root=$1 build=$2
objects=()
if [[ -n ${DPTRAIN_KERNEL_OBJECTS:-} ]]; then
    objects=(--objects "$DPTRAIN_KERNEL_OBJECTS")
elif ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "SKIP: no nvcc here: the figures are of nvcc's machine code"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# PyPI's cuobjdump, when the toolkit has none, is kept between runs here.
"$root/scripts/kernel_figures.py" --emulated "$build" --work "$build/kernel-figures" --batch 64 --check "${objects[@]}" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
if [[ $rc -eq 2 ]] && grep -q "pip" "$tmp/err"; then
    echo "SKIP: cuobjdump could not be had from PyPI: $(tail -1 "$tmp/err")"
    exit 77
fi
cat "$tmp/out"
[[ $rc -eq 0 ]] || { echo "FAIL: kernel_figures.py --check exit $rc: $(cat "$tmp/err")"; exit 1; }
grep -q "^## The kernels as nvcc compiles them" "$tmp/out" && grep -q "^## One training step of lenet at batch 64" "$tmp/out" \
    && grep -qE "^- [0-9]+ kernels and [0-9]+ pieces of work a step \(graph nodes\)" "$tmp/out" \
    || { echo "FAIL: a table or the step's count is missing"; exit 1; }
# The rows kernels that stage in batches (kernels/cuda/conv.cuh: Staging)
# keep several loads in flight before they store one into shared memory.
batched=$(grep -E '^\| [a-z_]+\.cu \| `[a-z_]+_batched<' "$tmp/out")
[[ -n $batched ]] || { echo "FAIL: no kernel that stages in batches in the table"; exit 1; }
few=$(awk -F'|' '$(NF-1) + 0 < 8' <<<"$batched")
[[ -z $few ]] || { echo "FAIL: a kernel that stages in batches has fewer than 8 loads before a store:"; echo "$few"; exit 1; }
# The tiled and prefetching rows kernels (LeNet's conv2: several channels a
# thread; the next chunk or sample loaded while one is summed) keep their
# main loop on the FMA units and several loads in flight.
tiled=$(grep -E '^\| [a-z_]+\.cu \| `[a-z_]+_(tiled|tiled_wide|prefetched)[<`]' "$tmp/out")
[[ $(wc -l <<<"$tiled") -ge 3 ]] || { echo "FAIL: the tiled and prefetching rows kernels are missing from the table"; exit 1; }
off=$(awk -F'|' '$(NF-3) + 0 < 85 || $(NF-1) + 0 < 6' <<<"$tiled")
[[ -z $off ]] || { echo "FAIL: a tiled or prefetching rows kernel has under 85% FFMA in its main loop or under 6 loads before a store:"; echo "$off"; exit 1; }
echo "ok: every kernel of the step found; $(grep -E '^- [0-9]+ kernels' "$tmp/out")"
echo "ok: $(wc -l <<<"$batched") kernels stage in batches, each with 8 or more loads before a store"
echo "ok: $(wc -l <<<"$tiled") tiled or prefetching rows kernels, each with 85% or more FFMA in its main loop and 6 or more loads before a store"
