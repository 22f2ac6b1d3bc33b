#!/usr/bin/env bash
# What --trace costs: the same training run without it, with --breakdown
# (the same phase marks, summed) and with --trace, timed as whole commands
# by hyperfine (-N: no shell between) in turns, and the ratios to the run
# without; then the epochs' own times (--metrics), since the whole command
# also loads the data and evaluates.
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
# In turns: a round runs each command once (hyperfine -N --runs 1), the
# epochs' times read from that round's metrics; medians over the rounds.
names=("without" "with --breakdown" "with --trace")
extra=("" "--breakdown" "--trace $tmp/t.json")
"$dptrain" "${args[@]}" >/dev/null  # warm-up: the data in the page cache
for ((r = 0; r < runs; r++)); do
    cmds=()
    for i in 0 1 2; do cmds+=(-n "${names[$i]}" "$base ${extra[$i]} --metrics $tmp/m$i.jsonl"); done
    hyperfine -N --runs 1 --export-json "$tmp/h$r.json" "${cmds[@]}" >/dev/null
    for i in 0 1 2; do cat "$tmp/m$i.jsonl" >>"$tmp/epochs$i.jsonl"; done
done
python3 - "$tmp" "$base" "$runs" <<'PY'
import json, statistics, sys, os
tmp, base, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
names = ["without", "with --breakdown", "with --trace"]
times = {n: [] for n in names}
for r in range(runs):
    for res in json.load(open(os.path.join(tmp, f"h{r}.json")))["results"]:
        times[res["command"]].extend(res["times"])
epochs = {n: [json.loads(l)["train_time_s"] for l in open(os.path.join(tmp, f"epochs{i}.jsonl"))]
          for i, n in enumerate(names)}
print(f"{base}: {runs} rounds, each command once a round, in turns (hyperfine -N)")
print(f"{'run':<18}{'command (s)':>14}{'vs without':>12}{'epoch (s)':>12}{'vs without':>12}")
t0, e0 = statistics.median(times["without"]), statistics.median(epochs["without"])
for n in names:
    t, e = statistics.median(times[n]), statistics.median(epochs[n])
    print(f"{n:<18}{t:>14.3f}{t / t0:>11.3f}x{e:>12.3f}{e / e0:>11.3f}x")
spans = sum(1 for e in json.load(open(os.path.join(tmp, "t.json"))) if e["ph"] == "X")
print(f"(medians of {runs} commands and {len(epochs['without'])} epochs each; a --trace file held {spans} spans)")
PY
