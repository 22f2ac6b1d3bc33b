#!/usr/bin/python3
"""Draws a `dptrain compare --out DIR`, `dptrain drift --out DIR`,
`dptrain simulate --out DIR` or `dptrain bench-allreduce --out DIR` result,
or a `dptrain --trace FILE` timeline, as one PNG.

trace: a few steps of the timeline, a row per device and stream, a bar per
phase, coloured as in compare's panel (--steps A-B: which; default the
trace's first three, or of a long trace three from its middle); several
traces (compare --trace's runs) one under another on one time axis; the
files of one mpirun job (FILE.rank0, FILE.rank1, ...), which share a clock,
as one trace.

bench-allreduce: bus bandwidth against message size, log scales, one line per
algorithm, the model's gradient buffer marked.

drift: how far the N-device weights are from the 1-device ones after each
sampled step, on log scales, with the test accuracies in the legend.

simulate: the predicted time of a step and speed-up against the device
count, a line per allreduce, the oversubscribed counts shaded; where a
compare.json lies beside simulate.json (`compare --global-batch --out` into
the same DIR) with the same kind of device and batch, its runs as measured
points.


Left: test accuracy after each epoch, one line per configuration. Right: where
an epoch's time went (the mean over the epochs after the first), one stacked
bar per configuration, with the measured epoch time marked beside each bar.

    scripts/plot.py DIR [-o DIR/compare.png] [--title TEXT]
        (DIR/simulate.json, DIR/compare.json, DIR/drift.json or DIR/bench-allreduce.csv,
         or the file itself)
    scripts/plot.py TRACE.json [MORE.json ...] [-o TRACE.png] [--steps A-B] [--title TEXT]

Needs Debian's python3-matplotlib (scripts/deps.sh --with-plot), hence
/usr/bin/python3 above. Exit status: 0 written, 2 a missing or malformed result.
"""
import argparse
import json
import os
import sys

PHASES = [  # (key in phases_s, legend label, colour)
    ("load", "split_and_load", "#9ecae1"),
    ("compute", "forward+backward", "#3182bd"),
    ("wait", "waiting for peers", "#fdae6b"),
    ("allreduce", "allreduce", "#e6550d"),
    ("update", "SGD update", "#a1d99b"),
]


def fail(message):
    print(f"plot.py: {message}", file=sys.stderr)
    sys.exit(2)


def pyplot():
    """matplotlib's pyplot, drawing to files (no display needed)."""
    try:
        import matplotlib
    except ImportError:
        fail("needs matplotlib: sudo apt-get install python3-matplotlib (or scripts/deps.sh --with-plot)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, output, rect=(0, 0, 1, 1)):
    fig.tight_layout(rect=rect)
    try:
        fig.savefig(output, dpi=100)
    except OSError as e:
        fail(f"cannot write {output}: {e.strerror}")
    print(f"wrote {output}")


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{path} is not JSON ({e}); expected the compare.json that `dptrain compare --out DIR` writes")
    try:
        configs = result["configs"]
        for c in configs:
            for key in ("device_kind", "devices", "batch", "lr", "epoch_time_s", "phases_s", "epochs"):
                c[key]
            for key, _, _ in PHASES:
                float(c["phases_s"][key])
            for e in c["epochs"]:
                int(e["epoch"]), float(e["test_acc"])
    except (KeyError, TypeError, ValueError) as e:
        fail(f"{path} is not a dptrain compare result (missing or bad {e})")
    if not configs:
        fail(f"{path} holds no configurations")
    return result


TRACE_COLOURS = {  # a --trace span's name -> colour (compare's, and greys for the waits of --overlap)
    "split_and_load": "#9ecae1", "forward": "#3182bd", "backward": "#08519c", "waiting for peers": "#fdae6b",
    "forward+backward": "#3182bd",  # (traces written before forward and backward were apart)
    "allreduce": "#e6550d", "copy between devices": "#a63603", "SGD update": "#a1d99b",
    "waiting for the allreduce": "#fd8d3c", "waiting for a bucket": "#d9d9d9",
}


def read_trace(path):
    """The spans and the tracks' names of a --trace file, or None when it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            events = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(events, list) or not all(isinstance(e, dict) and "ph" in e for e in events):
        return None
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    return processes, threads, spans


def one_per_job(traces):
    """The files of one mpirun job (FILE.rank0, FILE.rank1, ...) as one trace:
    their ranks share a clock, and their devices are numbered apart."""
    jobs = {}  # (name, file number unless a job's) -> processes, threads, spans
    for i, (path, (processes, threads, spans)) in enumerate(traces):
        stem, dot, rank = path.rpartition(".rank")
        key = (stem + " (every rank)", -1) if dot and rank.isdigit() else (path, i)
        merged = jobs.setdefault(key, ({}, {}, []))
        merged[0].update(processes)
        merged[1].update(threads)
        merged[2].extend(spans)
    return [(name, trace) for (name, _), trace in jobs.items()]


def trace_steps(args, path, spans):
    """The spans of the steps to draw (--steps, or three), and the earliest start among them."""
    try:
        steps = sorted({int(e["args"]["step"]) for e in spans})
        if args.steps:
            first, _, last = args.steps.partition("-")
            shown = set(range(int(first), int(last or first) + 1))
        else:
            middle = steps[len(steps) // 2 - 1] if len(steps) > 6 else steps[0]
            shown = set(range(middle, middle + 3))
        spans = [e for e in spans if int(e["args"]["step"]) in shown]
        if not spans:
            raise ValueError(f"no spans in steps {args.steps or sorted(shown)}")
        return spans, min(float(e["ts"]) for e in spans), {int(e["args"]["step"]) for e in spans}  # (those there)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        fail(f"{path} is not a dptrain --trace file, or has no such steps ({e})")


def draw_trace(args, traces):
    """One panel per trace file, on one time axis: a row per device and stream, a bar per span."""
    drawn = [(path, processes, threads) + trace_steps(args, path, spans)
             for path, (processes, threads, spans) in traces]
    plt = pyplot()
    heights = [len({(e["pid"], e["tid"]) for e in d[3]}) for d in drawn]
    fig, axes = plt.subplots(len(drawn), 1, sharex=True, squeeze=False,
                             figsize=(12, 1.2 + 0.45 * sum(heights) + 0.5 * len(drawn)),
                             gridspec_kw={"height_ratios": heights})
    seen, right = set(), 0.0
    for ax, (path, processes, threads, spans, t0, shown) in zip(axes[:, 0], drawn):
        tracks = sorted({(e["pid"], e["tid"]) for e in spans})
        for row, track in enumerate(tracks):
            for e in spans:
                if (e["pid"], e["tid"]) != track:
                    continue
                ax.broken_barh([((float(e["ts"]) - t0) / 1e3, float(e["dur"]) / 1e3)], (row - 0.4, 0.8),
                               facecolors=TRACE_COLOURS.get(e["name"], "#756bb1"), edgecolor="white",
                               linewidth=0.3, label=None if e["name"] in seen else e["name"])
                seen.add(e["name"])
        ax.set_yticks(range(len(tracks)),
                      [f"{processes.get(p, p)} {threads.get((p, t), 'stream ' + str(t))}" for p, t in tracks])
        ax.set_ylim(len(tracks) - 0.5, -0.5)
        ax.grid(alpha=0.3, axis="x")
        ax.set_title(f"{os.path.basename(path)}: steps {min(shown)}-{max(shown)}", fontsize="small", loc="left")
        # An allreduce stream's last wait runs on into the next step: cut at the main streams' end.
        right = max(right, max((float(e["ts"]) + float(e["dur"]) - t0) / 1e3 for e in spans if e["tid"] == 0))
    axes[-1, 0].set_xlim(0, right * 1.02)
    axes[-1, 0].set_xlabel("milliseconds from the first step drawn")
    fig.legend(loc="lower center", ncol=7, fontsize="small", frameon=False)
    if args.title:
        fig.suptitle(args.title)
    legend_share = 0.35 / fig.get_figheight()  # inches of the legend's row, as a share of the figure
    save(fig, args.output or (traces[0][0].rsplit(".json", 1)[0] + ".png"), rect=(0, legend_share, 1, 1))


def is_drift(path):
    try:
        with open(path, encoding="utf-8") as f:
            return "drift" in json.load(f)
    except (OSError, ValueError, TypeError):
        return False  # load() says what is wrong


def draw_drift(args):
    with open(args.result, encoding="utf-8") as f:
        d = json.load(f)["drift"]
    try:
        steps, max_rel, mean_rel = d["steps"], d["max_rel"], d["mean_rel"]
        acc, n = d["test_acc"], d["devices"][1]
        if not steps or len(steps) != len(max_rel) or len(steps) != len(mean_rel):
            raise ValueError("steps")
    except (KeyError, TypeError, ValueError, IndexError) as e:
        fail(f"{args.result} is not a dptrain drift result (missing or bad {e})")
    plt = pyplot()
    # Step 0 (and any exact zero) has no place on a log scale.
    shown = [(s, a, b) for s, a, b in zip(steps, max_rel, mean_rel) if s > 0 and a > 0 and b > 0]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([s for s, _, _ in shown], [a for _, a, _ in shown], marker="o", label="largest |diff| / largest |w|")
    ax.plot([s for s, _, _ in shown], [b for _, _, b in shown], marker="s", label="mean |diff| / mean |w|")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{n} devices' weights against 1 device's")
    ax.grid(alpha=0.3, which="both")
    seeds = acc.get("other_seeds") or []
    spread = f"; 1 device, other seeds: {min(seeds):.3f}..{max(seeds):.3f}" if seeds else ""
    ax.set_title(f"test accuracy: 1 device {acc['one']:.3f}, {n} devices {acc['many']:.3f}{spread}", fontsize="small")
    ax.legend(loc="best", fontsize="small")
    if args.title:
        fig.suptitle(args.title)
    save(fig, args.output or (args.result.rsplit(".json", 1)[0] + ".png"))


def is_simulate(path):
    try:
        with open(path, encoding="utf-8") as f:
            return "simulate" in json.load(f)
    except (OSError, ValueError, TypeError):
        return False


def measured_beside(path, sim):
    """compare.json beside simulate.json, as (devices, step ms, speed-up)
    points comparable with the prediction: the same kind of device and the
    same global batch (compare --global-batch); [] otherwise, said why."""
    compare = os.path.join(os.path.dirname(path) or ".", "compare.json")
    if not os.path.exists(compare):
        return []
    try:
        with open(compare, encoding="utf-8") as f:
            result = json.load(f)
        configs = result["configs"]
        if result.get("batch_mode") != "global":
            print(f"plot.py: {compare} left out: its runs grow the batch with the devices, the prediction keeps it "
                  f"(compare --global-batch --batch {sim['batch']})")
            return []
        points = [(int(c["devices"]), 1e3 * int(c["batch"]) / float(c["samples_per_s"]), float(c["speedup"]))
                  for c in configs
                  if c["device_kind"] == sim["device_kind"] and int(c["batch"]) == int(sim["batch"])
                  and c.get("split", "even") == "even"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"plot.py: {compare} left out: not a compare result ({e!r})")
        return []
    if not points:
        print(f"plot.py: {compare} left out: none of its runs has {sim['device_kind']} devices and the global batch "
              f"{sim['batch']} (compare --global-batch --batch {sim['batch']})")
    return points


def draw_simulate(args):
    with open(args.result, encoding="utf-8") as f:
        sim = json.load(f)["simulate"]
    try:
        series = {}
        for r in sim["runs"]:
            name = "1 device" if r["devices"] == 1 else f"{r['algorithm']}{', --overlap' if r['overlap'] else ''}"
            series.setdefault(name, []).append((int(r["devices"]), float(r["step_ms"]), float(r["speedup"])))
        one = series.pop("1 device")
        most = max(int(r["devices"]) for r in sim["runs"])
        cores = int(sim.get("cores", 0))
    except (KeyError, TypeError, ValueError) as e:
        fail(f"{args.result} is not a dptrain simulate result (missing or bad {e!r})")
    measured = measured_beside(args.result, sim)
    plt = pyplot()
    fig, (steps, speedups) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, points in series.items():
        points = one + sorted(points)
        steps.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=f"predicted: {name}")
        speedups.plot([p[0] for p in points], [p[2] for p in points], marker=".", label=f"predicted: {name}")
    speedups.plot([1, most], [1, most], color="grey", linestyle=":", label="ideal")
    if measured:
        steps.scatter([p[0] for p in measured], [p[1] for p in measured], color="black", marker="x", s=60, zorder=3,
                      label="measured (compare)")
        speedups.scatter([p[0] for p in measured], [p[2] for p in measured], color="black", marker="x", s=60,
                         zorder=3, label="measured (compare)")
    for ax in (steps, speedups):
        if 0 < cores < most:
            ax.axvspan(cores + 0.5, most + 0.5, color="#f0f0f0", label=f"oversubscribed (> {cores} cores)")
        ax.set_xlabel(f"{sim['device_kind']} devices")
        ax.set_xlim(0.5, most + 0.5)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    steps.set_ylim(bottom=0)
    steps.set_ylabel("time of a step (ms)")
    steps.set_title(f"{sim['model']}, global batch {sim['batch']}", fontsize="small")
    speedups.set_ylim(bottom=0)
    speedups.set_ylabel("speed-up over 1 device")
    link = sim["link"]
    speedups.set_title(f"link: {link['name']}, {link['bandwidth_gbps']:.3g} GB/s, {link['latency_us']:.3g} us",
                       fontsize="small")
    if args.title:
        fig.suptitle(args.title)
    save(fig, args.output or (args.result.rsplit(".json", 1)[0] + ".png"))


def draw_bench(args):
    import csv
    try:
        with open(args.result, encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        series = {}
        for r in rows:
            series.setdefault(r["algorithm"], []).append((int(r["bytes"]), float(r["busbw_gbps"])))
        where = f"{rows[0]['devices']} {rows[0]['device_kind']} devices"
    except OSError as e:
        fail(f"cannot read {args.result}: {e.strerror}")
    except (KeyError, ValueError, IndexError) as e:
        fail(f"{args.result} is not a bench-allreduce.csv ({e!r})")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, points in series.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.axvline(129068 * 4, color="grey", linestyle=":", label="LeNet's gradients (516.3 KB)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="best", fontsize="small")
    ax.set_title(args.title or f"allreduce on {where}: busbw = algbw * 2(N-1)/N")
    save(fig, args.output or args.result.rsplit(".csv", 1)[0] + ".png")


def label(c):
    split = f", split {c['split']}" if c.get('split', 'even') != 'even' else ''
    return f"{c['device_kind']} x{c['devices']}, batch {c['batch']}, lr {c['lr']:g}{split}"


def main():
    parser = argparse.ArgumentParser(description="Draw a dptrain compare result (compare.json) as a PNG.")
    parser.add_argument("result", help="the --out DIR of dptrain compare, or the compare.json in it")
    parser.add_argument("more", nargs="*", help="more --trace files, drawn under the first on one time axis")
    parser.add_argument("-o", "--output", help="the PNG to write (default: beside the result, compare.png)")
    parser.add_argument("--title", help="a title over both panels")
    parser.add_argument("--steps", help="a trace's steps to draw, A-B (default: three)")
    args = parser.parse_args()
    if os.path.isdir(args.result):
        drift = os.path.join(args.result, "drift.json")
        bench = os.path.join(args.result, "bench-allreduce.csv")
        compare = os.path.join(args.result, "compare.json")
        simulate = os.path.join(args.result, "simulate.json")  # drawn with a compare.json beside it
        args.result = (simulate if os.path.exists(simulate) else compare if os.path.exists(compare)
                       else drift if os.path.exists(drift) else bench if os.path.exists(bench) else compare)
    if args.result.endswith(".csv"):
        draw_bench(args)
        return
    if is_drift(args.result):
        draw_drift(args)
        return
    if is_simulate(args.result):
        draw_simulate(args)
        return
    trace = read_trace(args.result)
    if trace is not None:
        traces = [(args.result, trace)]
        for path in args.more:
            more = read_trace(path)
            if more is None:
                fail(f"{path} is not a dptrain --trace file")
            traces.append((path, more))
        draw_trace(args, one_per_job(traces))
        return
    if args.more:
        fail("several files are drawn together only when each is a --trace file")
    result = load(args.result)
    output = args.output or (args.result.rsplit(".json", 1)[0] + ".png")

    plt = pyplot()

    configs = result["configs"]
    fig, (acc, phases) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1.2, 1]})

    for c in configs:
        epochs = [e["epoch"] for e in c["epochs"]]
        acc.plot(epochs, [e["test_acc"] for e in c["epochs"]], marker="o", label=label(c))
    acc.set_xlabel("epoch")
    acc.set_ylabel("test accuracy")
    acc.set_ylim(0, 1)
    # Half an epoch of margin each side: a one-epoch result is one point at
    # epoch 1, around which matplotlib's own limits would be 0.96 to 1.04.
    last = max(e["epoch"] for c in configs for e in c["epochs"])
    acc.set_xlim(0.5, last + 0.5)
    acc.xaxis.get_major_locator().set_params(integer=True)
    acc.grid(alpha=0.3)
    acc.legend(loc="best", fontsize="small")
    acc.set_title("test accuracy after each epoch")

    names = [f"{c['device_kind']} x{c['devices']}" + (f" ({c['split']})" if c.get("split", "even") != "even" else "")
             for c in configs]
    x = range(len(configs))
    bottom = [0.0] * len(configs)
    for key, text, colour in PHASES:
        heights = [float(c["phases_s"][key]) for c in configs]
        phases.bar(x, heights, bottom=bottom, color=colour, label=text, width=0.6)
        bottom = [b + h for b, h in zip(bottom, heights)]
    phases.scatter(x, [c["epoch_time_s"] for c in configs], marker="_", s=900, color="black", zorder=3,
                   label="measured epoch time")
    for i, c in enumerate(configs):
        speedup = c.get("speedup")
        if speedup is not None:
            phases.annotate(f"{float(speedup):.2f}x", (i, c["epoch_time_s"]), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize="small")
    phases.set_xticks(list(x), names)
    phases.set_ylabel("seconds per epoch (device 0)")
    phases.set_ylim(0, max(max(bottom), max(c["epoch_time_s"] for c in configs)) * 1.7)
    phases.legend(loc="upper center", ncol=2, fontsize="small")  # in the headroom above the bars
    phases.set_title("where an epoch's time goes")

    if args.title:
        fig.suptitle(args.title)
    save(fig, output)


if __name__ == "__main__":
    main()
