#!/usr/bin/env bash
# Whole epochs on one GPU with each other version of each CUDA launcher
# (kernels/cuda/versions.cu lists them), one launcher changed at a time
# through DPTRAIN_KERNEL_VERSIONS, against every launcher at its default (the
# version dptrain trains with): what each version is worth in the trainer,
# where bench/kernel_bench times a launcher alone. The variants take turns
# (default, gemm=1, ...), REPEATS times; a variant's figure is the median
# over its runs of the median epoch after the first (the warm-up: module
# load and graph recording).
#   usage: bench/kernel_versions.sh [DPTRAIN] [MODEL] [REPEATS] [EPOCHS]
#   After the one-launcher variants comes every launcher at its latest
#   version (the fewest kernels a step), where that is not the default; then
#   the same with gemm_split at its default, whose kernel adds each split
#   product's sums (gemm_split 2's last blocks add a whole tile's alone).
#   MORE="a=1,b=2 c=3" adds variants that change several launchers at once;
#   ONLY="a=1 ..." times those variants alone (and the defaults); LIST=1
#   prints the variants, one a line, and times none.
#   Other dptrain options through DPTRAIN_ARGS (default: --batch 256 --lr 0.3
#   for lenet, --batch 256 --lr 0.1 for resnet18; e.g. add --tf32).
set -euo pipefail
dptrain=${1:-build/dptrain}
model=${2:-lenet}
repeats=${3:-2}
epochs=${4:-4}
[[ -x $dptrain ]] || { echo "bench/kernel_versions.sh: no dptrain at '$dptrain'" >&2; exit 2; }
[[ $model =~ ^(lenet|resnet18)$ ]] || { echo "bench/kernel_versions.sh: MODEL is lenet or resnet18, not '$model'" >&2; exit 2; }
if [[ $model == lenet ]]; then default_args="--batch 256 --lr 0.3"; else default_args="--batch 256 --lr 0.1"; fi
read -r -a args <<<"${DPTRAIN_ARGS:-$default_args}"
data=""
for d in data/fashion-mnist /usr/share/datasets/fashion-mnist bundle/fashion-mnist; do [[ -e $d ]] && { data=$d; break; }; done
[[ -n $data ]] || { echo "bench/kernel_versions.sh: no Fashion-MNIST (data/, /usr/share/datasets or bundle/)" >&2; exit 2; }

# The launchers, their versions and defaults, as kernel_bench lists them
# (a launcher's name, then "  N description" a version, "(trained with)"
# after the default's number).
kernel_bench=$(dirname "$dptrain")/bench/kernel_bench
[[ -x $kernel_bench ]] || { echo "bench/kernel_versions.sh: no $kernel_bench beside $dptrain" >&2; exit 2; }
variants=(default)
# (The tf32 launcher's versions change only --tf32 runs.)
tf32=0
for a in "${args[@]}"; do [[ $a == --tf32 ]] && tf32=1; done
while read -r variant; do variants+=("$variant"); done < <("$kernel_bench" --list | awk -v tf32="$tf32" '
    /^[^ ]/ { name = $1; next }
    $2 != "(trained" && (tf32 || name != "tf32") { print name "=" $1 }')
latest=$("$kernel_bench" --list | awk '
    /^[^ ]/ { if (name != "" && !at_latest) out = out (out == "" ? "" : ",") name "=" last; name = $1; next }
    { last = $1; at_latest = $2 == "(trained" }
    END { if (name != "" && !at_latest) out = out (out == "" ? "" : ",") name "=" last; print out }')
[[ $latest == *,* ]] && variants+=("$latest")  # (one launcher alone is a variant above already)
all_but_split=$(tr ',' '\n' <<<"$latest" | grep -v '^gemm_split=' | paste -sd, -)
[[ $all_but_split != "$latest" && $all_but_split == *,* ]] && variants+=("$all_but_split")
read -r -a more <<<"${MORE:-}"
variants+=("${more[@]}")
[[ -n ${ONLY:-} ]] && read -r -a variants <<<"$ONLY"
[[ ${variants[0]} == default ]] || variants=(default "${variants[@]}")
# Each variant's launchers and versions, checked against kernel_bench's list
# before any epoch runs: a misspelt one would otherwise cost a whole run.
known=$("$kernel_bench" --list | awk '/^[^ ]/ { name = $1; next } { print name "=" $1 }')
for variant in "${variants[@]}"; do
    [[ $variant == default ]] && continue
    IFS=, read -r -a pairs <<<"$variant"
    for pair in "${pairs[@]}"; do
        grep -qx -- "$pair" <<<"$known" || {
            echo "bench/kernel_versions.sh: '$pair' in the variant '$variant' is not a launcher's version (kernel_bench --list)" >&2
            exit 2
        }
    done
done
if [[ -n ${LIST:-} ]]; then
    printf '%s\n' "${variants[@]}"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A times=()
for ((r = 0; r < repeats; r++)); do
    for v in "${variants[@]}"; do
        setting=$v
        [[ $v == default ]] && setting=""
        if DPTRAIN_KERNEL_VERSIONS=$setting "$dptrain" --model "$model" --gpus 1 --data "$data" --epochs "$epochs" \
            "${args[@]}" --metrics "$tmp/m.jsonl" >"$tmp/run.log" 2>&1; then
            t=$(sed -E 's/.*"train_time_s": ?([0-9.]+).*/\1/' "$tmp/m.jsonl" | tail -n +2 | median)
        else
            echo "bench/kernel_versions.sh: $v failed:" >&2
            tail -3 "$tmp/run.log" >&2
            t=nan
        fi
        times[$v]+="$t "
    done
done

echo "$model, $(grep -m1 -oE 'on 1 physical GPU \([^)]*\)|on 1 emulated GPU' "$tmp/run.log" || echo "1 GPU"), ${args[*]}, epochs 2..$epochs of $epochs; median of $repeats runs each, in turns"
printf "%-62s %10s %11s\n" "kernel versions (the others at their defaults)" "epoch ms" "vs default"
base=$(tr ' ' '\n' <<<"${times[default]}" | grep -v '^$' | median)
for v in "${variants[@]}"; do
    t=$(tr ' ' '\n' <<<"${times[$v]}" | grep -v '^$' | grep -v nan | median)
    awk -v v="$v" -v t="$t" -v b="$base" 'BEGIN {
        if (t == "nan") { printf "%-62s %10s\n", v, "failed"; exit }
        printf "%-62s %10.1f %10.2fx\n", v, t * 1000, (b != "nan" && b > 0) ? t / b : 0 }'
done
