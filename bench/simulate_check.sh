#!/usr/bin/env bash
# dptrain simulate against real runs on CPU devices: the prediction for 1 to
# MAX devices (each allreduce, with and without --overlap; compute and link
# measured here) beside the measured second-epoch time of the same runs,
# REPEATS of each taken in turns (median), and the error of each prediction.
#   usage: bench/simulate_check.sh [DPTRAIN] [MAX] [REPEATS] [SAMPLES]
set -euo pipefail
dptrain=${1:-build/dptrain}
max=${2:-4}
repeats=${3:-3}
samples=${4:-12800}
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

"$dptrain" simulate --cpus "$max" --samples "$samples" --out "$tmp" | sed -n '1,4p'
runs=("1 - 0")
for ((n = 2; n <= max; n++)); do
    for a in naive ring; do runs+=("$n $a 0" "$n $a 1"); done
done
declare -A times=()
for ((r = 0; r < repeats; r++)); do
    for run in "${runs[@]}"; do
        read -r n a o <<<"$run"
        args=(--cpus "$n" --epochs 2 --limit-train "$samples" --limit-test 500)
        [[ $a != - ]] && args+=(--allreduce "$a")
        [[ $o == 1 ]] && args+=(--overlap)
        times[$run]+="$("$dptrain" "${args[@]}" | awk '/^epoch 2 /{ print $4 }') "
    done
done
echo
echo "epoch 2 of 2 on $samples samples, batch 256; measured: median of $repeats runs taken in turns"
printf "%-8s %-10s %-8s %12s %12s %8s\n" devices allreduce overlap "predicted s" "measured s" error
errors=()
for run in "${runs[@]}"; do
    read -r n a o <<<"$run"
    predicted=$(awk -F, -v n="$n" -v a="$a" -v o="$o" '$1 == n && $2 == a && $3 == o { print $8 }' "$tmp/simulate.csv")
    measured=$(tr ' ' '\n' <<<"${times[$run]}" | grep . | median)
    error=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%+.1f", 100 * (p - m) / m }')
    errors+=("${error#+}")
    printf "%-8s %-10s %-8s %12.3f %12.3f %7s%%\n" "cpu x$n" "$a" "$([[ $o == 1 ]] && echo yes || echo no)" \
        "$predicted" "$measured" "$error"
done
printf '%s\n' "${errors[@]}" | awk '{ e = $1 < 0 ? -$1 : $1; s += e; if (e > m) m = e } END {
    printf "mean absolute error %.1f%%, largest %.1f%% (%d runs)\n", s / NR, m, NR }'
