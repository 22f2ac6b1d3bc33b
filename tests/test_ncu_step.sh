#!/usr/bin/env bash
# scripts/ncu_step.py on a fixture from a real run (tests/fixtures/
# ncu-lenet-step.csv: ncu on an H200, 80 launches of LeNet steps at batch
# 256 with every launcher at its latest version): the steps counted by the
# SGD launches, each kernel's time a step heaviest first, adding up to the
# total; and a file without the table, or without an update, refused.
# Usage: test_ncu_step.sh NCU_STEP_PY FIXTURE
set -uo pipefail
script=$1 fixture=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

python3 "$script" "$fixture" >"$tmp/out" 2>&1 || fail "ncu_step.py failed: $(cat "$tmp/out")"
first=$(head -1 "$tmp/out")
[[ $first == "6 steps in 80 launches; kernel time a step 808.6 us" ]] && echo "ok: $first" || fail "first line: $first"
# The heaviest kernel first: conv1's weight gradient with conv2's gather.
sed -n 3p "$tmp/out" | grep -qE '^ +226\.8 +6 +226\.78  .*small_weight_grad_partials' \
    && echo "ok: heaviest: $(sed -n 3p "$tmp/out" | cut -c1-80)" || fail "heaviest row: $(sed -n 3p "$tmp/out")"
# The rows add up to the step's total (each rounded to 0.1 us).
awk 'NR > 2 { sum += $1; rows++ } END { d = sum - 808.6; if (d < 0) d = -d; if (rows < 10 || d > 0.1 * rows) exit 1;
    printf "ok: %d kernels, %.1f us a step in all\n", rows, sum }' "$tmp/out" || fail "the rows do not add up: $(cat "$tmp/out")"
# Sorted heaviest first.
awk 'NR > 2 { if (NR > 3 && $1 > last) exit 1; last = $1 }' "$tmp/out" && echo "ok: heaviest first" || fail "not sorted"

head -4 "$fixture" | tail -1 >"$tmp/header-only.csv"
python3 "$script" "$tmp/header-only.csv" >"$tmp/out" 2>&1
[[ $? -eq 1 ]] && grep -q "no SGD update among the launches" "$tmp/out" && echo "ok: no update -> 1: $(cat "$tmp/out")" \
    || fail "a table without an update: $(cat "$tmp/out")"
echo "not,a,table" >"$tmp/bad.csv"
python3 "$script" "$tmp/bad.csv" >"$tmp/out" 2>&1
[[ $? -eq 1 ]] && grep -q "has no kernel table" "$tmp/out" && echo "ok: no table -> 1: $(cat "$tmp/out")" \
    || fail "a file without the table: $(cat "$tmp/out")"
exit $((failures > 0))
