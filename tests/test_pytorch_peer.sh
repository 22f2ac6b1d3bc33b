#!/usr/bin/env bash
# bench/pytorch_lenet.py, the PyTorch peer, where no GPU is: its modes'
# arguments are checked before PyTorch is needed (exit 2, naming the
# option), and where PyTorch is installed, --graph on a machine without a
# CUDA GPU is refused rather than run on the CPU.
# Usage: test_pytorch_peer.sh SOURCE_ROOT
set -uo pipefail
peer=$1/bench/pytorch_lenet.py
fail() { echo "FAIL: $*"; exit 1; }
refused() {  # MESSAGE ARGS...: exit 2 and MESSAGE on stderr
    local want=$1 out rc
    shift
    out=$(python3 "$peer" "$@" 2>&1 >/dev/null)
    rc=$?
    [[ $rc -eq 2 && $out == *"$want"* ]] && echo "ok: $* -> exit 2: ${out##*$'\n'}" \
        || fail "$*: exit $rc, $out"
}
refused "--graph captures the step in a CUDA graph: it needs --device cuda" --graph
refused "--graph and --compile are two ways to run the step: give one" --graph --compile --device cuda
refused "--epochs and --batch must be at least 1" --batch 0
grep -q -- "--graph" < <(python3 "$peer" --help) && echo "ok: --help names --graph" || fail "--help does not name --graph"
if python3 -c 'import torch, numpy' 2>/dev/null; then
    if python3 -c 'import torch, sys; sys.exit(torch.cuda.is_available())'; then
        out=$(python3 "$peer" --device cuda --graph --epochs 1 2>&1)
        rc=$?
        [[ $rc -ne 0 && $out == *"torch sees no CUDA GPU"* ]] && echo "ok: --device cuda --graph without a GPU -> exit $rc: $out" \
            || fail "--device cuda --graph without a GPU: exit $rc, $out"
    else
        echo "ok: (a CUDA GPU is here: scripts/gpu.sh times --graph)"
    fi
else
    out=$(python3 "$peer" --device cuda --graph 2>&1)
    rc=$?
    [[ $rc -eq 2 && $out == *"needs PyTorch and numpy"* ]] && echo "ok: without PyTorch -> exit 2: $out" \
        || fail "without PyTorch: exit $rc, $out"
fi
