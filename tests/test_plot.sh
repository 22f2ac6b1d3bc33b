#!/usr/bin/env bash
# scripts/plot.py on a fixture compare result (tests/fixtures/compare.json,
# from a real `dptrain compare --cpus 1,2` run), and on the drift,
# bench-allreduce and --trace fixtures beside it: it writes a PNG that is a
# real image, and refuses a result that is not one with exit status 2.
# Skips (77) when no Python with matplotlib is installed (scripts/deps.sh
# --with-plot installs it; scripts/test.sh does).
# Usage: test_plot.sh PLOT_PY FIXTURE
set -uo pipefail
plot=$1 fixture=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

python=/usr/bin/python3  # Debian's python3-matplotlib installs for this one
if ! "$python" -c 'import matplotlib' 2>/dev/null; then
    echo "SKIP: $python has no matplotlib (scripts/deps.sh --with-plot installs it)"
    exit 77
fi

"$python" "$plot" "$fixture" -o "$tmp/out.png" --title "fixture" >"$tmp/log" 2>&1 || fail "plot.py failed: $(cat "$tmp/log")"
size=$(stat -c %s "$tmp/out.png" 2>/dev/null || echo 0)
# A PNG starts with these 8 bytes; two panels with lines and bars are well over 10 KB.
if [[ $(head -c 8 "$tmp/out.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a && $size -gt 10000 ]]; then
    echo "ok: plot.py wrote a $size-byte PNG"
else
    fail "plot.py wrote no PNG, or a tiny one ($size bytes)"
fi
grep -qF "wrote $tmp/out.png" "$tmp/log" || fail "plot.py does not say what it wrote: $(cat "$tmp/log")"

# Without -o, the PNG goes beside the result.
cp "$fixture" "$tmp/compare.json"
"$python" "$plot" "$tmp/compare.json" >/dev/null 2>&1 && [[ -s $tmp/compare.png ]] \
    && echo "ok: without -o, compare.png beside the result" || fail "no compare.png beside the result"

# The --out directory of compare works as well as the file in it.
rm -f "$tmp/compare.png"
"$python" "$plot" "$tmp" >/dev/null 2>&1 && [[ -s $tmp/compare.png ]] \
    && echo "ok: given compare's --out directory, it reads compare.json there" || fail "a directory is not accepted"

# One epoch: the accuracy's epoch axis still spans whole epochs (matplotlib
# alone would draw 0.96 to 1.04 around the one point), and the times' axis
# starts at zero.
"$python" - "$plot" "$fixture" "$tmp" <<'PY' && echo "ok: a one-epoch result's axes: epochs 0.5 to 1.5, seconds from 0" || fail "a one-epoch result's axes"
import json, runpy, sys
plot, fixture, tmp = sys.argv[1:]
result = json.load(open(fixture))
for c in result["configs"]:
    c["epochs"] = c["epochs"][:1]
json.dump(result, open(f"{tmp}/one-epoch.json", "w"))
functions = runpy.run_path(plot)  # its functions, without running main()
sys.argv = [plot, f"{tmp}/one-epoch.json", "-o", f"{tmp}/one-epoch.png"]
functions["main"]()
import matplotlib.pyplot as plt
accuracy, seconds = plt.gcf().axes[:2]
print(f"   epoch axis {accuracy.get_xlim()}, seconds axis {seconds.get_ylim()}")
assert accuracy.get_xlim() == (0.5, 1.5) and seconds.get_ylim()[0] == 0
PY

for bad in '{}' '{"configs": []}' 'not json' '{"configs": [{"devices": 1}]}'; do
    printf '%s' "$bad" >"$tmp/bad.json"
    "$python" "$plot" "$tmp/bad.json" -o "$tmp/bad.png" >"$tmp/log" 2>&1
    rc=$?
    if [[ $rc -eq 2 && ! -e $tmp/bad.png ]] && grep -q "plot.py: " "$tmp/log"; then
        echo "ok: '$bad' -> 2: $(cat "$tmp/log")"
    else
        fail "'$bad' -> exit $rc: $(cat "$tmp/log")"
    fi
done
"$python" "$plot" "$tmp/missing.json" >/dev/null 2>&1
[[ $? -eq 2 ]] && echo "ok: a missing file -> 2" || fail "a missing file does not exit 2"

# draws_from_dir FILE: given a directory holding the fixture FILE (beside
# the compare one), plot.py writes a real PNG of that name beside it.
draws_from_dir() {
    local file=$1 dir=$tmp/${1%.*}
    local png=$dir/${1%.*}.png
    mkdir -p "$dir" && cp "$(dirname "$fixture")/$file" "$dir/"
    "$python" "$plot" "$dir" >"$tmp/log" 2>&1
    local size
    size=$(stat -c %s "$png" 2>/dev/null || echo 0)
    [[ $(head -c 8 "$png" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a && $size -gt 10000 ]] \
        && echo "ok: $file drawn as a $size-byte PNG" || fail "$file plot: $(cat "$tmp/log")"
}

# A drift result (tests/fixtures/drift.json, from a real `dptrain drift --cpus 1,2` run), by its directory.
draws_from_dir drift.json
printf '{"drift": {"steps": [0, 1]}}' >"$tmp/bad-drift.json"
"$python" "$plot" "$tmp/bad-drift.json" >"$tmp/log" 2>&1
[[ $? -eq 2 ]] && grep -q "not a dptrain drift result" "$tmp/log" && echo "ok: a malformed drift result -> 2" || fail "bad drift: $(cat "$tmp/log")"

# A simulate result (tests/fixtures/simulate.json, from a real `dptrain
# simulate --samples 12800` on 2 CPU devices), by its directory; then with
# compare.json beside it: the measured points of a compare --global-batch
# run of the same batch (tests/fixtures/compare-global-batch.json), and a
# word on a compare.json whose batch grows with the devices (the compare fixture) instead.
draws_from_dir simulate.json
grep -q "left out" "$tmp/log" && fail "simulate alone: $(cat "$tmp/log")"
cp "$(dirname "$fixture")/compare-global-batch.json" "$tmp/simulate/compare.json"
"$python" "$plot" "$tmp/simulate" >"$tmp/log" 2>&1 && grep -q "wrote $tmp/simulate/simulate.png" "$tmp/log" && ! grep -q "left out" "$tmp/log" \
    && echo "ok: simulate.json drawn with the measured runs of compare.json beside it" || fail "simulate with compare: $(cat "$tmp/log")"
cp "$fixture" "$tmp/simulate/compare.json"
"$python" "$plot" "$tmp/simulate" >"$tmp/log" 2>&1 \
    && grep -q "compare.json left out: its runs grow the batch with the devices" "$tmp/log" \
    && echo "ok: a compare.json whose batch grows with the devices is left out, and plot.py says why" || fail "simulate beside another batch: $(cat "$tmp/log")"
printf '{"simulate": {"runs": [{"devices": 1}]}}' >"$tmp/bad-sim.json"
"$python" "$plot" "$tmp/bad-sim.json" >"$tmp/log" 2>&1
[[ $? -eq 2 ]] && grep -q "not a dptrain simulate result" "$tmp/log" && echo "ok: a malformed simulate result -> 2" || fail "bad simulate: $(cat "$tmp/log")"

# A bench-allreduce result (tests/fixtures/bench-allreduce.csv, from a real
# `dptrain bench-allreduce --cpus 2` run), by its directory.
draws_from_dir bench-allreduce.csv
printf 'device_kind,devices\ncpu,2\n' >"$tmp/bad.csv"
"$python" "$plot" "$tmp/bad.csv" >"$tmp/log" 2>&1
[[ $? -eq 2 ]] && grep -q "is not a bench-allreduce.csv" "$tmp/log" && echo "ok: a malformed bench result -> 2" || fail "bad bench: $(cat "$tmp/log")"

# A --trace timeline (tests/fixtures/trace.json, steps 2-4 of a real
# `dptrain --cpus 2 --overlap --trace` run): a real PNG of the steps asked
# for; steps it does not hold -> 2.
"$python" "$plot" "$(dirname "$fixture")/trace.json" -o "$tmp/trace.png" --steps 3-4 >"$tmp/log" 2>&1
size=$(stat -c %s "$tmp/trace.png" 2>/dev/null || echo 0)
[[ $(head -c 8 "$tmp/trace.png" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a && $size -gt 10000 ]] \
    && echo "ok: trace.json drawn as a $size-byte PNG" || fail "trace plot: $(cat "$tmp/log")"
"$python" "$plot" "$(dirname "$fixture")/trace.json" -o "$tmp/none.png" --steps 50-60 >"$tmp/log" 2>&1
[[ $? -eq 2 && ! -e $tmp/none.png ]] && grep -q "has no such steps" "$tmp/log" && echo "ok: steps the trace lacks -> 2" \
    || fail "steps the trace lacks: $(cat "$tmp/log")"

# Two traces, one under the other on one time axis (compare --trace's runs); a compare result among them -> 2.
"$python" "$plot" "$(dirname "$fixture")/trace.json" "$(dirname "$fixture")/trace.json" -o "$tmp/two.png" >"$tmp/log" 2>&1
[[ $(head -c 8 "$tmp/two.png" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] \
    && echo "ok: two traces drawn in one PNG" || fail "two traces: $(cat "$tmp/log")"
# An mpirun job's files (FILE.rank0, FILE.rank1: one clock, devices numbered
# apart) are one trace: one panel, so a shorter picture than two files' two.
python3 - "$(dirname "$fixture")/trace.json" "$tmp/job.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))
for rank in (0, 1):
    moved = [dict(e, pid=e["pid"] + 2 * rank) for e in events]
    json.dump(moved, open(f"{sys.argv[2]}.rank{rank}", "w"))
PY
"$python" "$plot" "$tmp/job.json.rank0" "$tmp/job.json.rank1" -o "$tmp/job.png" >"$tmp/log" 2>&1 || fail "a job's files: $(cat "$tmp/log")"
height() { od -An -j20 -N4 -tu1 "$1" | awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4}'; }
[[ -s $tmp/job.png && $(height "$tmp/job.png") -lt $(height "$tmp/two.png") ]] \
    && echo "ok: an mpirun job's two files drawn as one trace ($(height "$tmp/job.png") px high, two traces $(height "$tmp/two.png"))" \
    || fail "a job's files were not drawn as one trace: $(cat "$tmp/log")"
"$python" "$plot" "$(dirname "$fixture")/trace.json" "$fixture" -o "$tmp/mixed.png" >"$tmp/log" 2>&1
[[ $? -eq 2 ]] && grep -q "is not a dptrain --trace file" "$tmp/log" && echo "ok: a compare result beside a trace -> 2" \
    || fail "a compare result beside a trace: $(cat "$tmp/log")"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
