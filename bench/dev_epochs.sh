#!/usr/bin/env bash
# Whole training epochs on one GPU with a version of dev/cuda/ in place of
# the trainer's launchers (dptrain-<launcher>-<file>, which
# `meson setup -Ddev_candidate=all` or `=<launcher>/<file>` builds beside
# dptrain) against dptrain itself: what the version is worth in training,
# where bench/kernel_bench times its kernel alone. Each version with the
# model and options dev/cuda/versions.txt gives it; dptrain and the version
# take turns, REPEATS times; a figure is the median over the runs of the
# median epoch after the first (the warm-up: module load and graph
# recording).
#   usage: bench/dev_epochs.sh [BUILD] [REPEATS] [EPOCHS]
#   ONLY="<launcher>/<file> ..." times those versions alone (default: every
#   one BUILD holds a dptrain-... of); DPTRAIN_ARGS replaces every version's
#   options (e.g. add --limit-train); LIST=1 prints the versions, one a
#   line, with their options, and times none.
set -euo pipefail
build=${1:-build}
repeats=${2:-2}
epochs=${3:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
dptrain=$build/dptrain
[[ -x $dptrain ]] || { echo "bench/dev_epochs.sh: no dptrain in '$build'" >&2; exit 2; }
[[ $repeats =~ ^[1-9][0-9]*$ && $epochs =~ ^[1-9][0-9]*$ ]] \
    || { echo "bench/dev_epochs.sh: REPEATS and EPOCHS are whole numbers from 1 (got '$repeats', '$epochs')" >&2; exit 2; }
data=""
for d in data/fashion-mnist /usr/share/datasets/fashion-mnist bundle/fashion-mnist; do [[ -e $d ]] && { data=$d; break; }; done
[[ -n $data ]] || { echo "bench/dev_epochs.sh: no Fashion-MNIST (data/, /usr/share/datasets or bundle/)" >&2; exit 2; }

# The versions and their options (versions.txt: id | source | launchers | options | kernel).
trim() { local v=${1#"${1%%[![:space:]]*}"}; echo "${v%"${v##*[![:space:]]}"}"; }
declare -A options=()
ids=()
while IFS='|' read -r id _ _ opts _; do
    [[ $id =~ ^[[:space:]]*(#|$) ]] && continue
    id=$(trim "$id") opts=$(trim "$opts")
    [[ $opts == - ]] && continue  # (no epochs: kernel_bench times it alone)
    options[$id]=$opts
    ids+=("$id")
done <"$root/dev/cuda/versions.txt"
if [[ -n ${ONLY:-} ]]; then
    read -r -a wanted <<<"$ONLY"
    for id in "${wanted[@]}"; do
        [[ -n ${options[$id]+set} ]] || { echo "bench/dev_epochs.sh: '$id' is not a version of dev/cuda/versions.txt" >&2; exit 2; }
        [[ -x $build/dev/cuda/dptrain-${id//\//-} ]] || {
            echo "bench/dev_epochs.sh: no $build/dev/cuda/dptrain-${id//\//-}: build it with meson configure $build -Ddev_candidate=$id (or =all)" >&2
            exit 2
        }
    done
    ids=("${wanted[@]}")
else
    held=()
    for id in "${ids[@]}"; do [[ -x $build/dev/cuda/dptrain-${id//\//-} ]] && held+=("$id"); done
    ids=("${held[@]}")
    [[ ${#ids[@]} -gt 0 ]] || { echo "bench/dev_epochs.sh: $build holds no version: meson configure $build -Ddev_candidate=all, then ninja -C $build" >&2; exit 2; }
fi
if [[ -n ${LIST:-} ]]; then
    for id in "${ids[@]}"; do echo "$id ${DPTRAIN_ARGS:-${options[$id]}}"; done
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
epoch() {  # BINARY OPTIONS...: the median epoch after the first, in seconds; nan where the run failed
    local binary=$1
    shift
    if "$binary" --gpus 1 --data "$data" --epochs "$epochs" "$@" --metrics "$tmp/m.jsonl" >"$tmp/run.log" 2>&1; then
        sed -E 's/.*"train_time_s": ?([0-9.]+).*/\1/' "$tmp/m.jsonl" | tail -n +2 | median
    else
        echo "bench/dev_epochs.sh: $binary failed:" >&2
        tail -3 "$tmp/run.log" >&2
        echo nan
    fi
    rm -f "$tmp/m.jsonl"
}

printf "%-40s %-40s %10s %10s %11s\n" "version (dev/cuda/)" "options" "dptrain ms" "version ms" "vs dptrain"
for id in "${ids[@]}"; do
    read -r -a args <<<"${DPTRAIN_ARGS:-${options[$id]}}"
    base="" mine=""
    for ((r = 0; r < repeats; r++)); do
        base+="$(epoch "$dptrain" "${args[@]}") "
        mine+="$(epoch "$build/dev/cuda/dptrain-${id//\//-}" "${args[@]}") "
    done
    b=$(tr ' ' '\n' <<<"$base" | grep -vE '^$|nan' | median) t=$(tr ' ' '\n' <<<"$mine" | grep -vE '^$|nan' | median)
    awk -v id="$id" -v o="${args[*]}" -v t="$t" -v b="$b" 'BEGIN {
        if (t == "nan" || b == "nan") { printf "%-40s %-40s %10s %10s\n", id, o, b == "nan" ? "failed" : b * 1000, t == "nan" ? "failed" : t * 1000; exit }
        printf "%-40s %-40s %10.1f %10.1f %10.2fx\n", id, o, b * 1000, t * 1000, t / b }'
done
echo "one GPU ($(grep -m1 -oE 'on 1 physical GPU \([^)]*\)|on 1 emulated GPU' "$tmp/run.log" || echo "GPU 0")), epochs 2..$epochs of $epochs; median of $repeats runs each, in turns"
