#!/usr/bin/env bash
# Epoch time with each allreduce algorithm on 2 and 3 CPU devices, in one
# run: for each device count, the algorithms take turns (naive, ring, naive,
# ring, ...), REPEATS times, and the table gives the median of each one's
# second-epoch time and the ratio to naive's.
#   usage: bench/allreduce_epochs.sh [DPTRAIN] [REPEATS] [SAMPLES]
set -euo pipefail
dptrain=${1:-build/dptrain}
repeats=${2:-3}
samples=${3:-12800}
algorithms=(naive ring)

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "epoch 2 of 2 on $samples samples, batch 256, lr 0.3; median of $repeats runs each, taken in turns"
printf "%-8s %-10s %10s %12s\n" devices allreduce "epoch s" "vs naive"
for n in 2 3; do
    declare -A times=()
    for ((r = 0; r < repeats; r++)); do
        for a in "${algorithms[@]}"; do
            t=$("$dptrain" --cpus "$n" --allreduce "$a" --epochs 2 --limit-train "$samples" --limit-test 500 |
                awk '/^epoch 2 /{ print $4 }')
            times[$a]+="$t "
        done
    done
    base=$(tr ' ' '\n' <<<"${times[naive]}" | grep . | median)
    for a in "${algorithms[@]}"; do
        m=$(tr ' ' '\n' <<<"${times[$a]}" | grep . | median)
        printf "%-8s %-10s %10.3f %11.3fx\n" "cpu x$n" "$a" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN { print a / b }')"
    done
    unset times
done
