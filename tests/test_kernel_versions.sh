#!/usr/bin/env bash
# bench/kernel_versions.sh, which a GPU's bench stage runs (scripts/gpu.sh),
# on the emulated GPU: the variants it chooses (every other version of each
# launcher alone, every launcher at its latest, and the same with gemm_split
# at its default), and a run of two variants on a few steps, each timed.
# Usage: test_kernel_versions.sh DPTRAIN (from the source root).
set -uo pipefail
dptrain=$1
fail() { echo "FAIL: $*"; exit 1; }
variants=$(LIST=1 bench/kernel_versions.sh "$dptrain" lenet 2>&1) || fail "LIST=1: $variants"
latest=$(grep -E '^[a-z0-9_]+=[0-9]+(,[a-z0-9_]+=[0-9]+)+$' <<<"$variants" | grep -E '(^|,)gemm_split=' | head -1)
[[ $(head -1 <<<"$variants") == default && -n $latest ]] || fail "no defaults or every launcher at its latest: $variants"
all_but_split=$(tr ',' '\n' <<<"$latest" | grep -v '^gemm_split=' | paste -sd, -)
grep -qx "$all_but_split" <<<"$variants" || fail "no variant of every launcher at its latest but gemm_split ($all_but_split)"
grep -qx "dense=1" <<<"$variants" || fail "no variant with dense 1 alone"
echo "ok: $(wc -l <<<"$variants") variants, among them $latest and $all_but_split"
# The lists of versions that scripts/gpu.sh's quick stage times (UNTIMED_*):
# each names launchers and versions that exist, or a GPU's run would end
# at its first epoch; a misspelt one is refused before any epoch.
lists=$(sed -nE 's/^(UNTIMED_[A-Z0-9_]+)=\$\{[A-Z0-9_]+-"(.*)"\}$/\1 \2/p' scripts/gpu.sh)
[[ $(wc -l <<<"$lists") -ge 4 ]] || fail "scripts/gpu.sh: fewer than 4 UNTIMED_ lists found: $lists"
while read -r name only; do
    out=$(ONLY=$only LIST=1 bench/kernel_versions.sh "$dptrain" lenet 2>&1) || fail "scripts/gpu.sh's $name: $out"
done <<<"$lists"
out=$(ONLY="dense=1,gemm=99" LIST=1 bench/kernel_versions.sh "$dptrain" lenet 2>&1)
[[ $? -eq 2 && $out == *"'gemm=99'"* ]] || fail "a variant with gemm 99 was not refused: $out"
echo "ok: scripts/gpu.sh's $(wc -l <<<"$lists") UNTIMED_ lists name versions that exist; gemm=99 is refused"
out=$(DPTRAIN_ARGS="--batch 64 --lr 0.3 --limit-train 128 --limit-test 64" ONLY="dense=10 $all_but_split" \
    bench/kernel_versions.sh "$dptrain" lenet 1 2 2>&1) || fail "kernel_versions.sh: $out"
echo "$out"
[[ $(grep -cE ' [0-9.]+x$' <<<"$out") -eq 3 ]] && ! grep -q failed <<<"$out" \
    || fail "kernel_versions.sh did not time the defaults and both variants"
echo "ok: the defaults, dense=10 and $all_but_split timed"
