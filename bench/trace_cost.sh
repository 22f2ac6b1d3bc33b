#!/usr/bin/env bash
# What --trace costs: the same training run without it, with --breakdown
# (the same phase marks, summed) and with --trace, timed as whole commands
# by hyperfine, in turns (-N: no shell between), and the ratios to the run
# without; then the epochs' own times of each command's last run
# (--metrics), since the whole command also loads the data and evaluates.
#   usage: bench/trace_cost.sh [DPTRAIN] [RUNS]      (default build/dptrain, 5)
#   DPTRAIN_ARGS: the run (default --cpus 2 --epochs 2 --limit-train 16384 --limit-test 512)
# Needs hyperfine (scripts/deps.sh --with-bench).
set -euo pipefail
dptrain=${1:-build/dptrain}
runs=${2:-5}
[[ -x $dptrain ]] || { echo "bench/trace_cost.sh: no dptrain at '$dptrain'" >&2; exit 2; }
command -v hyperfine >/dev/null || { echo "bench/trace_cost.sh: needs hyperfine (scripts/deps.sh --with-bench)" >&2; exit 2; }
read -r -a args <<<"${DPTRAIN_ARGS:---cpus 2 --epochs 2 --limit-train 16384 --limit-test 512}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base="$dptrain ${args[*]}"
hyperfine -N --warmup 1 --runs "$runs" --export-json "$tmp/h.json" \
    -n "without" "$base --metrics $tmp/without.jsonl" \
    -n "--breakdown" "$base --breakdown --metrics $tmp/breakdown.jsonl" \
    -n "--trace" "$base --trace $tmp/t.json --metrics $tmp/trace.jsonl" >"$tmp/out"
python3 - "$tmp" "$base" <<'PY'
import json, statistics, sys, os
tmp, base = sys.argv[1], sys.argv[2]
results = json.load(open(os.path.join(tmp, "h.json")))["results"]
# Each command's metrics file holds its last run's epochs.
def epochs(name):
    return [json.loads(line)["train_time_s"] for line in open(os.path.join(tmp, name + ".jsonl"))]
print(f"{base}: {len(results[0]['times'])} runs each, in turns (hyperfine -N, 1 warm-up)")
print(f"{'run':<14}{'command (s)':>14}{'vs without':>12}{'epoch (s)':>12}{'vs without':>12}")
t0 = statistics.median(results[0]["times"])
e0 = statistics.median(epochs("without"))
for r, name in zip(results, ("without", "breakdown", "trace")):
    t, e = statistics.median(r["times"]), statistics.median(epochs(name))
    print(f"{r['command']:<14}{t:>14.3f}{t / t0:>11.3f}x{e:>12.3f}{e / e0:>11.3f}x")
spans = sum(1 for e in json.load(open(os.path.join(tmp, "t.json"))) if e["ph"] == "X")
print(f"(medians; the last --trace file held {spans} spans)")
PY
