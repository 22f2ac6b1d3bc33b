#!/usr/bin/env bash
# A version of dev/cuda/ in place of the trainer's launchers, on the
# emulated GPU: its dptrain-<launcher>-<file> trains an epoch and launches
# the version's own kernel (the launch log shows it), and
# bench/dev_epochs.sh times it against dptrain as docs/gpus.md says.
# Usage (from the source root): test_dev_candidate.sh BUILD VERSION KERNEL
set -uo pipefail
build=$1 version=$2 kernel=$3
candidate=$build/dev/cuda/dptrain-${version//\//-}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[[ -x $candidate ]] || fail "no $candidate"
small=(--batch 64 --limit-train 256 --limit-test 64)
read -r -a options < <(grep -F "$version |" dev/cuda/versions.txt | cut -d'|' -f4)
DPTRAIN_EMULATED_GPUS=1 DPTRAIN_EMULATED_LAUNCH_LOG=$tmp/launches.log "$candidate" --gpus 1 --epochs 1 \
    "${options[@]}" "${small[@]}" >"$tmp/out" 2>&1 || fail "$candidate: $(tail -3 "$tmp/out")"
grep -qE '^epoch 1 +time ' "$tmp/out" || fail "$candidate printed no epoch line: $(tail -3 "$tmp/out")"
launched=$(grep -c $'\tkernel '"$kernel"'\b' "$tmp/launches.log")
((launched > 0)) && echo "ok: $version: an epoch ($(grep -E '^epoch 1 ' "$tmp/out")), $kernel launched $launched times" \
    || fail "$version: $kernel is not in the launch log ($(grep -c $'\tkernel ' "$tmp/launches.log") launches)"
out=$(DPTRAIN_EMULATED_GPUS=1 ONLY=$version DPTRAIN_ARGS="${options[*]} ${small[*]}" bench/dev_epochs.sh "$build" 1 2 2>&1) \
    || fail "bench/dev_epochs.sh: $out"
grep -qE "^${version//\//\\/} .* [0-9.]+x$" <<<"$out" && echo "ok: bench/dev_epochs.sh: $(grep -E "^$version " <<<"$out")" \
    || fail "bench/dev_epochs.sh printed no row for $version: $out"
