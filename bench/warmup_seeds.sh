#!/usr/bin/env bash
# The tutorial's 2-device command (batch 512, lr 0.6) over seeds 0..5 with
# both inits, without and with --warmup 1: the test accuracy after each of 2
# epochs. Prints a Markdown table (README: "Initialisation").
#   usage: bench/warmup_seeds.sh [DPTRAIN]   (EPOCHS=2 SEEDS="0 1 2 3 4 5" CPUS=2)
set -euo pipefail
cd "$(dirname "$0")/.."
dptrain=${1:-build/dptrain}
epochs=${EPOCHS:-2}
seeds=${SEEDS:-0 1 2 3 4 5}
cpus=${CPUS:-2}
accuracies() {  # the test accuracies after each epoch, comma-separated
    "$dptrain" --cpus "$cpus" --batch 512 --lr 0.6 --epochs "$epochs" "$@" | sed -nE 's/^epoch [0-9]+ .*test_acc ([0-9.]+).*/\1/p' | paste -sd, -
}
echo "| init | seed | test accuracy by epoch, constant lr 0.6 | with --warmup 1 |"
echo "| --- | --- | --- | --- |"
for init in xavier normal; do
    for seed in $seeds; do
        echo "| $init | $seed | $(accuracies --init "$init" --seed "$seed") | $(accuracies --init "$init" --seed "$seed" --warmup 1) |"
    done
done
