#!/usr/bin/env bash
# GPU benchmark: full Fashion-MNIST epochs of LeNet at batch 256 on one GPU,
# against the PyTorch peer (../shared/bench/pytorch_lenet.py, same model, data
# on the GPU) run eagerly and with --compile, in the same call; then 1, 2 and
# 4 replicas sharing that GPU at the same global batch (what the allreduce and
# the smaller parts cost when no second GPU adds compute).
#
# Each run trains EPOCHS epochs (default 5); the figure is the median of the
# epochs after the first, so start-up, graph recording and torch.compile's
# compilation stay out. dptrain's epoch time is measured after a device
# synchronise (the tutorial's waitall), the peer's likewise.
# Last, `dptrain compare --gpus 1,2,4` with its table, verdict and files.
#   usage: scripts/bench_gpu.sh     (EPOCHS=5 PEER=... PYTHON=python3 DATA=dir)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${EPOCHS:-5}
peer=${PEER:-../shared/bench/pytorch_lenet.py}
python=${PYTHON:-python3}
scripts/deps.sh
scripts/build.sh >/dev/null
[[ -x build/tests/gpu/gpu_tests ]] || { echo "build/ has no CUDA backend (no nvcc when it was configured?)" >&2; exit 1; }
data=${DATA:-}
if [[ -z $data ]]; then
    for d in data/fashion-mnist /usr/share/datasets/fashion-mnist; do [[ -e $d ]] && { data=$d; break; }; done
fi
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT

# Median of column 1 over lines 2.. of stdin (epochs after the first).
median_after_first() { tail -n +2 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# dptrain ARGS...: median epoch seconds, from --metrics.
dptrain_epoch() {
    build/dptrain --data "$data" --batch 256 --lr 0.3 --epochs "$epochs" --metrics "$tmp/m.jsonl" "$@" >&2
    sed -E 's/.*"train_time_s": ([0-9.]+).*/\1/' "$tmp/m.jsonl" | median_after_first
}
# pytorch ARGS...: median epoch seconds, from the peer's "epoch N time T s" lines.
pytorch_epoch() {
    PYTHONUNBUFFERED=1 "$python" "$peer" --device cuda --data "$data" --batch 256 --lr 0.3 --init xavier \
        --epochs "$epochs" "$@" | tee /dev/stderr | sed -nE 's/^epoch [0-9]+ time ([0-9.]+) s.*/\1/p' | median_after_first
}

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
echo "GPU: ${gpu:-unknown}; $epochs epochs per run, median of epochs 2..$epochs" >&2
t_graph=$(dptrain_epoch --gpus 1)
t_eager=$(dptrain_epoch --gpus 1 --no-graphs)
t_pt=$(pytorch_epoch)
t_ptc=$(pytorch_epoch --compile)
t_r2=$(dptrain_epoch --gpus 2)
t_r4=$(dptrain_epoch --gpus 4)

row() { awk -v name="$1" -v t="$2" -v ref="$3" -v refname="$4" \
    'BEGIN { printf "%-36s %10.1f %12.0f %s\n", name, t * 1000, 60000 / t, (ref > 0 ? sprintf("%6.2fx %s", t / ref, refname) : "") }'; }
echo
echo "LeNet, Fashion-MNIST, batch 256, one ${gpu:-GPU}"
printf '%-36s %10s %12s %s\n' "run" "epoch (ms)" "samples/s" "epoch time relative to"
row "dptrain --gpus 1 (CUDA graph)" "$t_graph" "$t_pt" "PyTorch eager"
row "dptrain --gpus 1 --no-graphs" "$t_eager" "$t_pt" "PyTorch eager"
row "PyTorch eager" "$t_pt" 0 ""
row "PyTorch --compile" "$t_ptc" "$t_pt" "PyTorch eager"
row "dptrain vs PyTorch --compile" "$t_graph" "$t_ptc" "PyTorch --compile"
echo
echo "Replicas sharing the GPU, global batch 256"
row "1 replica (256 per replica)" "$t_graph" "$t_graph" "1 replica"
row "2 replicas (128 each)" "$t_r2" "$t_graph" "1 replica"
row "4 replicas (64 each)" "$t_r4" "$t_graph" "1 replica"

# The classroom comparison on this GPU: 1, 2 and 4 replicas at 256 samples a
# replica (lr scaled linearly), with the phase breakdown; the result and its
# plot go to $RESULTS (default build/gpu-compare/).
results=${RESULTS:-build/gpu-compare}
echo
build/dptrain compare --gpus 1,2,4 --data "$data" --batch 256 --lr 0.3 --epochs "$epochs" --out "$results" \
    | sed -n '/^compare:/,$p'
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then scripts/plot.py "$results/compare.json" --title "${gpu:-GPU}"; fi
