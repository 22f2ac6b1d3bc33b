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
# dense 11's paired weight and data gradients (dy^T read as runs down dy's
# columns, dense.cu: ColumnsOfByRuns): each FP32 instance with fewer
# instructions in its main loop than version 10's of the same tile and
# epilogue, and 60% or more of them FFMA.
pairs=$(grep -E '^\| dense\.cu \| `gemm_pair_kernel<[^`]*FmaCore' "$tmp/out")
runs=$(awk -F'|' '$3 ~ /ColumnsOfByRuns/' <<<"$pairs")
[[ $(wc -l <<<"$runs") -ge 3 ]] || { echo "FAIL: dense 11's pair kernels are missing from the table"; exit 1; }
worse=$(awk -F'|' '{ key = $3; gsub(/ColumnsOfByRuns/, "ColumnsOf", key) }
    $3 !~ /ColumnsOfByRuns/ { before[key] = $(NF-4) + 0; next }
    { after[key] = $(NF-4) + 0; share[key] = $(NF-3) + 0 }
    END { for (k in after) if (!(k in before) || after[k] >= before[k] || share[k] < 60) print k, before[k], "->", after[k], share[k] "%" }' <<<"$pairs")
[[ -z $worse ]] || { echo "FAIL: a dense 11 pair kernel has no fewer main-loop instructions than version 10's, or under 60% FFMA:"; echo "$worse"; exit 1; }
# The step with the versions not yet trained with: dense 11 (the last layer
# and the loss in dense_loss_wide, which also adds dense1's forward splits;
# dense1's two gradients in one launch and their splits in one more,
# conv2's pooling gradient on the way: no pool_backward, no softmax_xent,
# no finish_splits for dense1's forward), conv1 a pooling window a thread
# (conv2d_forward 11, conv2d_backward_weight 12), conv2's weight
# gradient's slices added by its input gradient's kernel
# (conv2d_backward_weight 13), and conv2's forward and input gradient with
# one channel a thread (conv2d_forward 12, conv2d_backward_data 12): each
# kernel found among nvcc's, no finish_splits left, at most 10 kernels, no
# FP32 GEMM main loop under 60% FFMA (version 10's pair had 59.95% at batch
# 64), and two blocks of each one-channel kernel a multiprocessor (the
# forward's 480 threads fit twice only at 64 registers a thread).
versions=dense=11,conv2d_forward=12,conv2d_backward_data=12,conv2d_backward_weight=13
DPTRAIN_KERNEL_VERSIONS=$versions "$root/scripts/kernel_figures.py" --emulated "$build" --work "$build/kernel-figures" \
    --batch 64 --check "${objects[@]}" >"$tmp/newer" 2>"$tmp/err" \
    || { echo "FAIL: kernel_figures.py --check with $versions: $(cat "$tmp/err")"; exit 1; }
step_newer=$(sed -n '/^## One training step/,$p' "$tmp/newer")
kernels_newer=$(grep -oE '^- [0-9]+ kernels' <<<"$step_newer" | grep -oE '[0-9]+')
for k in dense_loss_wide finish_pair_splits window_forward bank_weight_grad_windows rows_forward_tiled_single \
    input_grad_rows_tiled_single_finishing; do
    [[ $(grep -c "| \`$k" <<<"$step_newer") -eq 1 ]] \
        || { echo "FAIL: the step with $versions does not launch $k once"; echo "$step_newer"; exit 1; }
done
! grep -qE "pool_backward|softmax_xent" <<<"$step_newer" || { echo "FAIL: the step with $versions launches a pooling or loss kernel"; exit 1; }
! grep -q "| \`finish_splits" <<<"$step_newer" || { echo "FAIL: the step with $versions adds a split product's sums in a kernel of their own"; exit 1; }
[[ -n $kernels_newer && $kernels_newer -le 10 ]] || { echo "FAIL: the step with $versions launches ${kernels_newer:-?} kernels, more than 10"; exit 1; }
single=$(grep -E '^\| [0-9]+ \| `(rows_forward_tiled_single|input_grad_rows_tiled_single)' <<<"$step_newer" \
    | awk -F'|' '$(NF-3) + 0 != 2')
[[ -z $single ]] || { echo "FAIL: a one-channel rows kernel does not fit 2 blocks a multiprocessor:"; echo "$single"; exit 1; }
under=$(grep -E '^- FP32 GEMM main loops under 60% FFMA:' <<<"$step_newer")
[[ $under == *": none "* ]] || { echo "FAIL: the step with $versions: ${under:-no line on the 60% aim}"; exit 1; }
# --tf32 at tf32 10: conv2's three products each on a tensor-core kernel of
# its own (rows_forward_mma, input_grad_mma, weight_grad_mma), none on the
# FP32 rows kernels, each kernel found among nvcc's; dense1's bias summed by
# the loss's kernel (no dense_bias_grad), so at most 10 kernels; and the
# weight gradient's kernel with no stack frame (its registers bounded to
# 128 for 4 blocks a multiprocessor: a spill would show here).
DPTRAIN_KERNEL_VERSIONS=tf32=10 "$root/scripts/kernel_figures.py" --emulated "$build" --work "$build/kernel-figures" \
    --batch 64 --tf32 --check "${objects[@]}" >"$tmp/tf32" 2>"$tmp/err" \
    || { echo "FAIL: kernel_figures.py --check --tf32 with tf32=10: $(cat "$tmp/err")"; exit 1; }
step_tf32=$(sed -n '/^## One training step/,$p' "$tmp/tf32")
kernels_tf32=$(grep -oE '^- [0-9]+ kernels' <<<"$step_tf32" | grep -oE '[0-9]+')
for k in rows_forward_mma input_grad_mma weight_grad_mma; do
    [[ $(grep -c "| \`$k" <<<"$step_tf32") -eq 1 ]] \
        || { echo "FAIL: the --tf32 step with tf32=10 does not launch $k once"; echo "$step_tf32"; exit 1; }
done
! grep -qE "weight_grad_rows|input_grad_rows|rows_forward_tiled" <<<"$step_tf32" \
    || { echo "FAIL: the --tf32 step with tf32=10 runs a product of conv2 on the FP32 rows kernels"; exit 1; }
! grep -q "| \`dense_bias_grad" <<<"$step_tf32" \
    || { echo "FAIL: the --tf32 step with tf32=10 sums a dense layer's bias in a kernel of its own"; exit 1; }
[[ -n $kernels_tf32 && $kernels_tf32 -le 10 ]] \
    || { echo "FAIL: the --tf32 step with tf32=10 launches ${kernels_tf32:-?} kernels, more than 10"; exit 1; }
stack=$(awk -F'|' '$2 ~ /\.cu / && $3 ~ /`weight_grad_mma`/ { print $6 + 0 }' "$tmp/tf32")
[[ $stack == 0 ]] || { echo "FAIL: weight_grad_mma has a stack frame of ${stack:-?} bytes (spills)"; exit 1; }
# ResNet-18 at batch 32: with batch_norm 7, each split convolution before a
# batch norm is finish_splits then stats_kernel; with batch_norm 8 no such
# pair is left (finish_stats_kernel does both), and the step is that many
# kernels fewer.
resnet_step() {  # VERSION: the step's table, checked
    DPTRAIN_KERNEL_VERSIONS=batch_norm=$1 "$root/scripts/kernel_figures.py" --emulated "$build" \
        --work "$build/kernel-figures" --model resnet18 --batch 32 --check "${objects[@]}" 2>"$tmp/err" \
        | sed -n '/^## One training step/,$p' \
        || { echo "FAIL: kernel_figures.py --check --model resnet18 with batch_norm=$1: $(cat "$tmp/err")" >&2; return 1; }
}
pairs() { awk -F'|' '/^\| [0-9]+ \|/ { if (prev ~ /finish_splits/ && $3 ~ /stats_kernel/) n++; prev = $3 } END { print n + 0 }'; }
count() { grep -oE '^- [0-9]+ kernels' | grep -oE '[0-9]+'; }
step7=$(resnet_step 7) && step8=$(resnet_step 8) || exit 1
pairs7=$(pairs <<<"$step7") pairs8=$(pairs <<<"$step8") kernels7=$(count <<<"$step7") kernels8=$(count <<<"$step8")
[[ $pairs7 -gt 0 && $pairs8 -eq 0 ]] \
    || { echo "FAIL: finish_splits then stats_kernel: $pairs7 times with batch_norm 7 (want some), $pairs8 with 8 (want none)"; exit 1; }
[[ -n $kernels7 && -n $kernels8 && $kernels8 -eq $((kernels7 - pairs7)) ]] \
    || { echo "FAIL: ResNet-18's step: ${kernels7:-?} kernels with batch_norm 7, ${kernels8:-?} with 8, not $pairs7 fewer"; exit 1; }
echo "ok: every kernel of the step found; $(grep -E '^- [0-9]+ kernels' "$tmp/out")"
echo "ok: ResNet-18 at batch 32, $kernels7 kernels a step with batch_norm 7 ($pairs7 finish_splits then stats_kernel), $kernels8 with batch_norm 8 (none)"
echo "ok: --tf32 with tf32=10, $kernels_tf32 kernels a step, no dense_bias_grad, conv2's products on rows_forward_mma, input_grad_mma and weight_grad_mma, the last with no stack frame"
echo "ok: with $versions, $kernels_newer kernels a step, no finish_splits, dense_loss_wide, finish_pair_splits, window_forward, bank_weight_grad_windows, rows_forward_tiled_single and input_grad_rows_tiled_single_finishing (2 blocks a multiprocessor each) among them; ${under#- }"
echo "ok: dense 11's $(wc -l <<<"$runs") FP32 pair kernels each with fewer main-loop instructions than version 10's, and 60% or more FFMA"
echo "ok: $(wc -l <<<"$batched") kernels stage in batches, each with 8 or more loads before a store"
echo "ok: $(wc -l <<<"$tiled") tiled or prefetching rows kernels, each with 85% or more FFMA in its main loop and 6 or more loads before a store"
