#!/usr/bin/env python3
"""A training step's kernels from Nsight Compute's CSV, heaviest first.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv \\
        --launch-skip 200 --launch-count 80 --log-file step.csv \\
        build/dptrain --gpus 1 --batch 256 --epochs 1 --limit-train 25600 --no-graphs
    scripts/ncu_step.py [--by-grid] step.csv

Each kernel's launches, its mean time and its time a step, where a step is
one launch of the SGD update (`sgd*`): a range of launches that cuts steps
in two, or holds a test batch, counts them as they fall. ncu times each
kernel alone with the caches flushed before it (its default), so the sum
is more than the step takes in a CUDA graph: use it to rank kernels, not
to time the step. With --by-grid, a kernel's launches of each grid and
block size are a row of their own: ResNet-18 runs one GEMM kernel for many
layers, and the grid tells them apart. (scripts/gpu.sh bench runs it.)
"""
import collections
import csv
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def is_update(name):
    """Whether a kernel's (demangled) name is the SGD update's."""
    return name.split("(")[0].split("<")[0].split()[-1].split("::")[-1].startswith("sgd")


def main():
    args = sys.argv[1:]
    by_grid = "--by-grid" in args
    if by_grid:
        args.remove("--by-grid")
    if len(args) != 1 or args[0].startswith("-"):
        sys.exit(__doc__.split("\n\n")[0] + "\nusage: scripts/ncu_step.py [--by-grid] NCU_CSV")
    path = args[0]
    try:
        rows = [r for r in csv.reader(open(path, newline="")) if len(r) > 10]
    except OSError as e:
        sys.exit(f"ncu_step.py: {e}")
    if not rows or "Kernel Name" not in rows[0]:
        sys.exit(f"ncu_step.py: {path} has no kernel table (was ncu run with --csv?)")
    header = rows[0]
    name_at, value_at, unit_at = header.index("Kernel Name"), header.index("Metric Value"), header.index("Metric Unit")
    if by_grid and not {"Grid Size", "Block Size"} <= set(header):
        sys.exit(f"ncu_step.py: {path} has no Grid Size and Block Size columns for --by-grid")
    times = collections.defaultdict(list)
    for r in rows[1:]:
        if r[unit_at] not in UNITS:
            sys.exit(f"ncu_step.py: unknown time unit {r[unit_at]!r}")
        key = (r[name_at],) + ((r[header.index("Grid Size")], r[header.index("Block Size")]) if by_grid else ())
        times[key].append(float(r[value_at].replace(",", "")) * UNITS[r[unit_at]])
    steps = sum(len(t) for key, t in times.items() if is_update(key[0]))
    if steps == 0:
        sys.exit("ncu_step.py: no SGD update among the launches: widen --launch-count")
    total = sum(sum(t) for t in times.values())
    print(f"{steps} steps in {sum(len(t) for t in times.values())} launches; kernel time a step {total / steps:.1f} us")
    grid_column = f" {'grid':>14} {'block':>13}" if by_grid else ""
    print(f"{'us a step':>10} {'launches':>9} {'mean us':>9}{grid_column}  kernel")
    for key, t in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        grid = f" {key[1]:>14} {key[2]:>13}" if by_grid else ""
        print(f"{sum(t) / steps:10.1f} {len(t):9d} {sum(t) / len(t):9.2f}{grid}  {key[0][:110]}")


if __name__ == "__main__":
    main()
