#!/usr/bin/env bash
# scripts/ncu_step.py on a fixture from a real run (tests/fixtures/
# ncu-lenet-step.csv: ncu on an H200, 80 launches of LeNet steps at batch
# 256 with every launcher at its latest version): the steps counted by the
# SGD launches, each kernel's time a step heaviest first, adding up to the
# total; with --by-grid, a row for each grid a kernel ran on; and a file
# without the table, or without an update, refused.
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

# --by-grid: the same total, a row for each of the two grids of the 32-row
# dense product (dense1's forward split 16 ways, dense2's 4), and rows that
# still add up to the total. Then with conv2's forward launches moved, every
# other one, to another grid: one more row with --by-grid, none without.
python3 "$script" --by-grid "$fixture" >"$tmp/by-grid" 2>&1 || fail "ncu_step.py --by-grid failed: $(cat "$tmp/by-grid")"
[[ $(head -1 "$tmp/by-grid") == "$first" ]] && echo "ok: --by-grid: the same steps and total" \
    || fail "--by-grid first line: $(head -1 "$tmp/by-grid")"
grid_rows=$(grep -cE '\(1, 8, (16|4)\) +\(128, 1, 1\)  void tiled::gemm_kernel_v2<tiled::Tile<32, ' "$tmp/by-grid")
[[ $grid_rows -eq 2 ]] && echo "ok: --by-grid: the 32-row product's two grids on rows of their own" \
    || fail "--by-grid rows: $grid_rows of the 32-row product; $(cat "$tmp/by-grid")"
awk 'NR > 2 { sum += $1; rows++ } END { d = sum - 808.6; if (d < 0) d = -d; if (d > 0.1 * rows) exit 1 }' "$tmp/by-grid" \
    && echo "ok: --by-grid: the rows add up" || fail "--by-grid rows do not add up"
awk '/"\(162, 1, 1\)"/ && ++moved % 2 { sub(/"\(162, 1, 1\)"/, "\"(81, 2, 1)\"") } { print }' "$fixture" >"$tmp/moved.csv"
python3 "$script" "$tmp/moved.csv" >"$tmp/moved" 2>&1
python3 "$script" --by-grid "$tmp/moved.csv" >"$tmp/moved-by-grid" 2>&1
[[ $(wc -l <"$tmp/moved") -eq $(wc -l <"$tmp/out") && $(wc -l <"$tmp/moved-by-grid") -eq $(($(wc -l <"$tmp/by-grid") + 1)) ]] &&
    grep -qE '^ +43\.[0-9] +3 .*\(81, 2, 1\)' "$tmp/moved-by-grid" \
    && echo "ok: --by-grid: a kernel's launches on two grids are two rows: $(grep -c '' "$tmp/moved-by-grid") lines" \
    || fail "--by-grid on two grids: $(cat "$tmp/moved" "$tmp/moved-by-grid")"
python3 "$script" --by-grid "$tmp/no-such.csv" >/dev/null 2>&1; [[ $? -eq 1 ]] && echo "ok: a missing file -> 1" \
    || fail "a missing file"

head -4 "$fixture" | tail -1 >"$tmp/header-only.csv"
python3 "$script" "$tmp/header-only.csv" >"$tmp/out" 2>&1
[[ $? -eq 1 ]] && grep -q "no SGD update among the launches" "$tmp/out" && echo "ok: no update -> 1: $(cat "$tmp/out")" \
    || fail "a table without an update: $(cat "$tmp/out")"
echo "not,a,table" >"$tmp/bad.csv"
python3 "$script" "$tmp/bad.csv" >"$tmp/out" 2>&1
[[ $? -eq 1 ]] && grep -q "has no kernel table" "$tmp/out" && echo "ok: no table -> 1: $(cat "$tmp/out")" \
    || fail "a file without the table: $(cat "$tmp/out")"
exit $((failures > 0))
