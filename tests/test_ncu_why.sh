#!/usr/bin/env bash
# scripts/ncu_why.py on three CSVs:
# - tests/fixtures/ncu-why-raw.csv, in ncu's raw page (a column a metric,
#   units on the second row), written by hand: 6 launches of 3 kernels with
#   made-up figures, PC sampling's stall counts beside another family's
#   (which they outrank), a time with a thousands separator;
# - tests/fixtures/ncu-why-details.csv, the same launches on ncu's details
#   page (a row a metric), times in ns, the stalls as cycles per issued
#   instruction, and no memory metric;
# - tests/fixtures/ncu-lenet-step.csv, a real run's details page with its
#   times alone.
# Each kernel's launches averaged, longest first; the stall reasons as
# shares of their family, the top three; the same table from either page;
# a column with no metric shown as - and named on the last line.
# Usage: test_ncu_why.sh NCU_WHY_PY RAW_FIXTURE DETAILS_FIXTURE STEP_FIXTURE
set -uo pipefail
script=$1 raw=$2 details=$3 step=$4
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

python3 "$script" "$raw" >"$tmp/raw" 2>&1 || fail "ncu_why.py on the raw page failed: $(cat "$tmp/raw")"
first=$(head -1 "$tmp/raw")
[[ $first == "6 launches of 3 kernels (a kernel: one name, grid and block); mean times add up to 557.5 us" ]] \
    && echo "ok: $first" || fail "first line: $first"
# dense_loss_wide's two launches, 18 and 1,002 us, average 510; it comes first.
sed -n 3p "$tmp/raw" | grep -qE '^ +510\.0 +2 +12 +30 +40 +10 .*  dense_loss_wide<false>$' \
    && echo "ok: the longest first, its launches averaged" || fail "first row: $(sed -n 3p "$tmp/raw")"
# rows_forward_tiled: 44 and 46 us; SM 70.1 and 69.9, memory 20 and 22,
# occupancy 24.5 and 25.5, issue 61 and 59; stalls sampled 500 issuing,
# 250 barrier, 150 long_scoreboard, 50 short_scoreboard, 50 wait of 1,000.
sed -n 4p "$tmp/raw" | grep -qE '^ +45\.0 +2 +70 +21 +25 +60 .*  issuing 50%, barrier 25%, long_scoreboard 15% +rows_forward_tiled<5, 9, 4>$' \
    && echo "ok: $(sed -n 4p "$tmp/raw" | tr -s ' ')" || fail "second row: $(sed -n 4p "$tmp/raw")"
sed -n 5p "$tmp/raw" | grep -qE '^ +2\.5 +2 .* +\(505, 1, 1\) +\(256, 1, 1\)  long_scoreboard 90%.* sgd_checked$' \
    && echo "ok: the grid and block of each kernel" || fail "third row: $(sed -n 5p "$tmp/raw")"
grep -q "no metric" "$tmp/raw" && fail "the raw page has every metric: $(tail -1 "$tmp/raw")" || echo "ok: no column missing"

# The details page: the same rows, memory shown as - and named as missing.
python3 "$script" "$details" >"$tmp/details" 2>&1 || fail "ncu_why.py on the details page failed: $(cat "$tmp/details")"
sed -E 's/ +(30|21|60) +([0-9]+ +[0-9]+  )/ - \2/' "$tmp/raw" | tr -s ' ' >"$tmp/raw-less-memory"
head -5 "$tmp/details" | tr -s ' ' | diff - "$tmp/raw-less-memory" >"$tmp/diff" \
    && echo "ok: the details page gives the same rows" || fail "details page rows differ: $(cat "$tmp/diff")"
[[ $(tail -1 "$tmp/details") == "no metric in the CSV for: mem %" ]] && echo "ok: $(tail -1 "$tmp/details")" \
    || fail "last line: $(tail -1 "$tmp/details")"

# A real run's details page, times alone: conv1's weight gradient first at
# its mean (scripts/ncu_step.py: 226.78 us over 6 launches), its name
# without namespaces (ncu writes the anonymous one as "unnamed>::").
python3 "$script" "$step" >"$tmp/step" 2>&1 || fail "ncu_why.py on a real run failed: $(cat "$tmp/step")"
sed -n 3p "$tmp/step" | grep -qE '^ +226\.8 +6 +- +- +- +- .*  small_weight_grad_partials<OutputGradThroughPoolFromColumns<0>>$' \
    && echo "ok: a real run: $(sed -n 3p "$tmp/step" | tr -s ' ' | cut -c1-80)" || fail "real run: $(sed -n 3p "$tmp/step")"
[[ $(tail -1 "$tmp/step") == "no metric in the CSV for: SM %, issue %, mem %, occupancy %, stalls" ]] \
    && echo "ok: a real run names what it lacks" || fail "real run, last line: $(tail -1 "$tmp/step")"

echo "not,a,table" >"$tmp/bad.csv"
python3 "$script" "$tmp/bad.csv" >"$tmp/out" 2>&1
[[ $? -eq 1 ]] && grep -q "has no kernel table" "$tmp/out" && echo "ok: no table -> 1: $(cat "$tmp/out")" \
    || fail "a file without the table: $(cat "$tmp/out")"
sed 's/"nsecond"/"furlong"/' "$details" >"$tmp/unit.csv"
python3 "$script" "$tmp/unit.csv" >"$tmp/out" 2>&1
[[ $? -eq 1 ]] && grep -q "unknown time unit 'furlong'" "$tmp/out" && echo "ok: an unknown unit -> 1" \
    || fail "an unknown time unit: $(cat "$tmp/out")"
exit $((failures > 0))
