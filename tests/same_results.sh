#!/usr/bin/env bash
# The proof that a reshaping changed nothing: the SHA-256 of the --save files
# of a fixed set of short CPU runs (1, 2 and 3 devices; avg and max pooling;
# xavier and normal init; batches not divisible by the device count; a short
# last batch; a run stopped after an epoch and resumed). Record them before
# touching the code, check them after:
#
#   tests/same_results.sh DPTRAIN > before.txt
#   ...change the code, rebuild...
#   tests/same_results.sh DPTRAIN | diff before.txt -    (no output: the same bits)
#
# The bits depend on the CPU kernels' build (-march=native picks FMA and
# vector widths), so compare hashes made on one machine with one build type;
# the first line names the machine.
set -euo pipefail
dptrain=$1
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
small=(--limit-train 2000 --limit-test 500 --epochs 2 --seed 7)  # 2000 % 64 = 16: a short last batch
runs=(
    "--cpus 1 --batch 64"
    "--cpus 2 --batch 64"
    "--cpus 3 --batch 64"
    "--cpus 2 --batch 64 --pool max"
    "--cpus 2 --batch 64 --init normal"
    "--cpus 3 --batch 100 --pool max --init normal"
    "--cpus 1 --batch 5 --lr 0.05"
)
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(nproc) cores"
for args in "${runs[@]}"; do
    # shellcheck disable=SC2086
    "$dptrain" "${small[@]}" $args --save "$tmp/p" >/dev/null
    echo "$(sha256sum <"$tmp/p" | cut -c1-64)  $args"
done
# Stopped after epoch 1 and resumed to 2, on 2 devices.
"$dptrain" "${small[@]}" --cpus 2 --batch 64 --epochs 1 --checkpoint "$tmp/ck" >/dev/null
"$dptrain" --resume "$tmp/ck" --epochs 2 --save "$tmp/p" >/dev/null
echo "$(sha256sum <"$tmp/p" | cut -c1-64)  --cpus 2 --batch 64, 1 epoch then --resume to 2"
