#!/usr/bin/env python3
"""Why each kernel of a training step takes the time it does, from Nsight Compute.

    ncu --clock-control none --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --section SchedulerStats --section WarpStateStats \\
        --metrics gpu__time_duration.sum --launch-skip 200 --launch-count 20 \\
        -o why build/dptrain --gpus 1 --batch 256 --epochs 1 --limit-train 25600 --no-graphs
    ncu --import why.ncu-rep --page raw --csv > why.csv
    scripts/ncu_why.py why.csv

A row a kernel (its launches of one grid and block averaged), longest
first: its mean time; how busy its multiprocessors were (SM %, the
busiest of their pipelines against its peak) and its memory (mem %); the
warps it kept resident (occupancy, achieved against the most a
multiprocessor holds) and the share of cycles in which a scheduler issued
an instruction (issue %); and the three reasons its warps most often
waited, each with its share of the warps' cycles. A kernel that issues
in most cycles is bound by its instructions (fewer of them, or cheaper
ones, help); one that waits is bound by what it waits for:
`long_scoreboard` (global memory), `short_scoreboard` (shared memory),
`barrier` (a __syncthreads that some warps reach late), `math_pipe_throttle`
or `mio_throttle` (a pipeline or the shared-memory queue full),
`not_selected` (another warp issued: enough warps), `wait` (fixed
latencies between dependent instructions); `issuing` is the share of
cycles a warp issued.

Reads ncu's raw page (a column a metric, a row a launch, units on the
second row) or its details page of named metrics (a row a metric). Names
differ between ncu versions: each column takes the first of its
candidate metrics that the CSV holds and shows - where there is none,
and the stall reasons are every metric named `...issue_stalled_REASON...`
of one family (PC sampling's counts where present). The last line names
the columns that found no metric. (scripts/gpu.sh runs it.)
"""
import collections
import csv
import re
import sys

TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}

# Each column's candidate metrics, the first found wins.
COLUMNS = {
    "SM %": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
    "mem %": ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
              "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"],
    "occupancy %": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "issue %": ["smsp__issue_active.avg.pct_of_peak_sustained_active",
                "sm__inst_issued.avg.pct_of_peak_sustained_active"],
}
TIME = "gpu__time_duration.sum"

# A stall metric's reason, and its family: PC sampling's counts
# (smsp__pcsamp_warps_issue_stalled_REASON), the cycles per issued
# instruction (smsp__average_warps_issue_stalled_REASON_per_issue_active.ratio)
# or per warp (smsp__average_warp_latency_issue_stalled_REASON). `selected`
# is the warp issuing, shown as `issuing`.
STALL = re.compile(r"^smsp__(pcsamp_warps|average_warps?|average_warp_latency|warps?)_issue_stalled_([a-z0-9_]+?)"
                   r"(_per_issue_active\.ratio|_per_warp_active\.pct|\.sum|\.avg|\.ratio)?$")
FAMILY_ORDER = ["pcsamp_warps", "average_warps", "average_warp", "average_warp_latency", "warps", "warp"]


def number(text):
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def read_rows(path):
    """[(kernel, grid, block, {metric: (value, unit)})], one a launch."""
    try:
        lines = [r for r in csv.reader(open(path, newline="")) if r]
    except OSError as e:
        sys.exit(f"ncu_why.py: {e}")
    start = next((i for i, r in enumerate(lines) if "Kernel Name" in r), None)
    if start is None:
        sys.exit(f"ncu_why.py: {path} has no kernel table (was it made with --csv?)")
    header = lines[start]
    col = {name: i for i, name in enumerate(header)}
    body = [r for r in lines[start + 1:] if len(r) == len(header)]

    def key(r):
        return (r[col["Kernel Name"]], r[col["Grid Size"]] if "Grid Size" in col else "",
                r[col["Block Size"]] if "Block Size" in col else "")

    launches = collections.OrderedDict()
    if "Metric Name" in col:  # details page: a row a metric of a launch
        for r in body:
            launch = (r[col["ID"]],) + key(r)
            launches.setdefault(launch, {})[r[col["Metric Name"]]] = (number(r[col["Metric Value"]]),
                                                                    r[col["Metric Unit"]])
        return [(k[1], k[2], k[3], m) for k, m in launches.items()]
    # raw page: a column a metric; the row after the header holds the units
    units = body[0] if body and not body[0][col["ID"]].strip() else [""] * len(header)
    rows = body[1:] if units is body[0] else body
    metrics = [(i, name) for i, name in enumerate(header) if "__" in name]
    return [key(r) + ({name: (number(r[i]), units[i]) for i, name in metrics},) for r in rows]


def stall_shares(metrics):
    """{reason: share of the sampled (or stalled) warp cycles}, from one family."""
    families = collections.defaultdict(dict)
    for name, (value, _) in metrics.items():
        m = STALL.match(name)
        if m and value is not None:
            families[m.group(1)]["issuing" if m.group(2) == "selected" else m.group(2)] = value
    for family in FAMILY_ORDER:
        reasons = families.get(family)
        if reasons:
            total = sum(v for v in reasons.values() if v > 0)
            return {r: v / total for r, v in reasons.items() if v > 0} if total > 0 else {}
    return {}


def short_name(kernel):
    """A demangled kernel name without namespaces and parameters (its template
    arguments tell ResNet-18's GEMM products apart)."""
    name = kernel.split("(")[0].replace("unnamed>::", "")  # ncu's anonymous namespace
    name = re.sub(r"\b[A-Za-z_]\w*::", "", name)
    return name.split(" ", 1)[1] if name.startswith("void ") else name


def main():
    args = sys.argv[1:]
    if len(args) != 1 or args[0].startswith("-"):
        sys.exit(__doc__.split("\n\n")[0] + "\nusage: scripts/ncu_why.py NCU_CSV")
    rows = read_rows(args[0])
    if not rows:
        sys.exit(f"ncu_why.py: {args[0]} lists no launches")
    groups = collections.OrderedDict()
    for kernel, grid, block, metrics in rows:
        groups.setdefault((kernel, grid, block), []).append(metrics)
    missing = set()
    table = []
    for (kernel, grid, block), launches in groups.items():
        def mean(name):
            values = [m[name][0] for m in launches if name in m and m[name][0] is not None]
            return sum(values) / len(values) if values else None

        time = mean(TIME)
        unit = next((m[TIME][1] for m in launches if TIME in m), "")
        if time is not None:
            if unit not in TIME_UNITS:
                sys.exit(f"ncu_why.py: unknown time unit {unit!r} for {TIME}")
            time *= TIME_UNITS[unit]
        else:
            missing.add("time")
        cells = []
        for column, candidates in COLUMNS.items():
            found = next((m for m in map(mean, candidates) if m is not None), None)
            if found is None:
                missing.add(column)
            cells.append("-" if found is None else f"{found:.0f}")
        shares = collections.Counter()
        for m in launches:
            for reason, share in stall_shares(m).items():
                shares[reason] += share / len(launches)
        if not shares:
            missing.add("stalls")
        top = ", ".join(f"{r} {s:.0%}" for r, s in shares.most_common(3)) or "-"
        table.append((time or 0.0, time, len(launches), cells, top, short_name(kernel), grid, block))
    table.sort(key=lambda t: -t[0])
    total = sum(t[0] for t in table)
    print(f"{len(rows)} launches of {len(table)} kernels (a kernel: one name, grid and block); "
          f"mean times add up to {total:.1f} us")
    print(f"{'mean us':>8} {'launches':>8} " + " ".join(f"{c:>11}" for c in COLUMNS) +
          f" {'grid':>14} {'block':>13}  {'waits (share of warp cycles)':<52}  kernel")
    for _, time, n, cells, top, name, grid, block in table:
        shown = "-" if time is None else f"{time:.1f}"
        print(f"{shown:>8} {n:>8} " + " ".join(f"{c:>11}" for c in cells) +
              f" {grid:>14} {block:>13}  {top:<52}  {name}")
    if missing:
        print("no metric in the CSV for: " + ", ".join(sorted(missing)))


if __name__ == "__main__":
    main()
