#!/usr/bin/env bash
# Epoch time with each allreduce algorithm, with and without --overlap, on 2
# and 3 CPU devices, in one run: for each device count the variants take
# turns (naive, ring, naive --overlap, ring --overlap, naive, ...), REPEATS
# times, and the table gives the median of each one's second-epoch time and
# the ratio to naive's.
#   usage: bench/allreduce_epochs.sh [DPTRAIN] [REPEATS] [SAMPLES] [BUCKET_KB]
set -euo pipefail
dptrain=${1:-build/dptrain}
repeats=${2:-3}
samples=${3:-12800}
bucket_kb=${4:-}
overlap="--overlap${bucket_kb:+ --bucket-kb $bucket_kb}"
variants=("--allreduce naive" "--allreduce ring" "--allreduce naive $overlap" "--allreduce ring $overlap")

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "epoch 2 of 2 on $samples samples, batch 256, lr 0.3; median of $repeats runs each, taken in turns"
printf "%-8s %-42s %10s %12s\n" devices variant "epoch s" "vs naive"
for n in 2 3; do
    declare -A times=()
    for ((r = 0; r < repeats; r++)); do
        for v in "${variants[@]}"; do
            # shellcheck disable=SC2086
            t=$("$dptrain" --cpus "$n" $v --epochs 2 --limit-train "$samples" --limit-test 500 |
                awk '/^epoch 2 /{ print $4 }')
            times[$v]+="$t "
        done
    done
    base=$(tr ' ' '\n' <<<"${times[${variants[0]}]}" | grep . | median)
    for v in "${variants[@]}"; do
        m=$(tr ' ' '\n' <<<"${times[$v]}" | grep . | median)
        printf "%-8s %-42s %10.3f %11.3fx\n" "cpu x$n" "$v" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN { print a / b }')"
    done
    unset times
done
