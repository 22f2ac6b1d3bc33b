#!/usr/bin/env python3
"""Checks a dptrain --trace file against the trace event format and dptrain's own promises.

    check_trace.py FILE... [--devices N] [--steps A-B] [--overlap] [--copies] [--one-clock]

- the file is a JSON array of events; every event has name, ph, pid and tid;
  each complete event ("X") has ts and dur (microseconds, dur >= 0) and its
  epoch and step as args; each process and thread is named by a metadata
  event ("M"), and every span's process is one of N named devices;
- within a track (pid, tid) spans follow one another: none starts before
  the one before it ends (to a nanosecond);
- every step in A-B appears, on every device, with one split_and_load, at
  least one forward and one backward, the first forward before the first
  backward, and no other step does;
- with --overlap: the allreduce's spans are on a second track (tid 1); none
  starts before its step's last backward span does (where backward hands
  the buckets over), and in at least one step one starts before that span
  ends (the sums travelled while backward went on);
- with --copies: every step has a span of gradients copied between devices;
- several files (an mpirun job's, a file a rank) are read as one trace;
  with --one-clock they must share a clock: in every step each device's last
  allreduce or copy span ends no earlier than every device's last backward
  span (the sum waits for every device's gradients).
Prints one line of figures; exits 1 with the first broken promise.
"""
import argparse
import collections
import json
import sys


ALLREDUCE = ("allreduce", "copy between devices", "waiting for peers")  # the allreduce's spans


def fail(message):
    print(f"check_trace.py: {message}")
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--devices", type=int, default=0)
    p.add_argument("--steps", default="")
    p.add_argument("--overlap", action="store_true")
    p.add_argument("--copies", action="store_true")
    p.add_argument("--one-clock", action="store_true")
    a = p.parse_args()
    events = []
    for path in a.files:
        try:
            part = json.load(open(path))
        except (OSError, ValueError) as e:
            fail(f"{path} is not JSON: {e}")
        if not isinstance(part, list):
            fail(f"{path}: the trace is not a JSON array")
        events += part
    names, threads, spans = {}, set(), []
    for e in events:
        for key in ("name", "ph", "pid", "tid"):
            if key not in e:
                fail(f"an event without '{key}': {e}")
        if e["ph"] == "M":
            if e["name"] == "process_name":
                names[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                threads.add((e["pid"], e["tid"]))
        elif e["ph"] == "X":
            for key in ("ts", "dur", "args"):
                if key not in e:
                    fail(f"a span without '{key}': {e}")
            if e["dur"] < 0 or "epoch" not in e["args"] or "step" not in e["args"]:
                fail(f"a span with a negative duration, or no epoch or step: {e}")
            spans.append(e)
        else:
            fail(f"an event of phase {e['ph']!r}: dptrain writes X and M")
    if not spans:
        fail("no spans")
    if a.devices and len(names) != a.devices:
        fail(f"{len(names)} devices named, not {a.devices}: {names}")
    tracks = collections.defaultdict(list)
    for e in spans:
        if e["pid"] not in names or (e["pid"], e["tid"]) not in threads:
            fail(f"a span on an unnamed process or thread: {e}")
        tracks[(e["pid"], e["tid"])].append(e)
    for track, es in tracks.items():
        es.sort(key=lambda e: e["ts"])
        for before, after in zip(es, es[1:]):
            if after["ts"] < before["ts"] + before["dur"] - 1e-3:
                fail(f"on track {track} {after['name']} (step {after['args']['step']}) starts at {after['ts']} us, "
                     f"before {before['name']} (step {before['args']['step']}) ends at {before['ts'] + before['dur']}")
    steps = sorted({e["args"]["step"] for e in spans})
    if a.steps:
        first, _, last = a.steps.partition("-")
        want = list(range(int(first), int(last or first) + 1))
        if steps != want:
            fail(f"steps {steps[:3]}...{steps[-3:]} in the trace, not {a.steps}")
    by_device_step = collections.defaultdict(collections.Counter)
    for e in spans:
        by_device_step[(e["pid"], e["args"]["step"])][e["name"]] += 1
    for pid in names:
        for s in steps:
            c = by_device_step[(pid, s)]
            if c["split_and_load"] != 1 or c["forward"] < 1 or c["backward"] < 1:
                fail(f"{names[pid]}, step {s}: {dict(c)} (one split_and_load, a forward and a backward at least)")
    for (pid, tid), track in tracks.items():
        first = {}
        for e in track:
            if e["name"] in ("forward", "backward"):
                first.setdefault((e["args"]["step"], e["name"]), e["ts"])
        for s in steps:
            if (s, "forward") in first and (s, "backward") in first and first[(s, "backward")] < first[(s, "forward")]:
                fail(f"{names[pid]}, step {s}: backward begins before forward")
    overlapped = 0
    if a.overlap:
        for pid in names:
            backward = {}  # step -> its last backward span's (start, end)
            for e in tracks[(pid, 0)]:
                if e["name"] == "backward":
                    backward[e["args"]["step"]] = (e["ts"], e["ts"] + e["dur"])
            sums = [e for e in tracks.get((pid, 1), []) if e["name"] in ALLREDUCE]
            if not sums:
                fail(f"{names[pid]}: no allreduce spans on the allreduce stream (tid 1)")
            early = set()
            for e in sums:
                start, end = backward[e["args"]["step"]]
                if e["ts"] < start - 1e-3:
                    fail(f"{names[pid]}: an allreduce span of step {e['args']['step']} starts before its last backward span")
                if e["ts"] < end:
                    early.add(e["args"]["step"])
            overlapped += len(early)
        if overlapped == 0:
            fail("with --overlap, no step's allreduce started before its last backward span ended")
    if a.copies:
        copied = {e["args"]["step"] for e in spans if e["name"] == "copy between devices"}
        if set(steps) - copied:
            fail(f"steps {sorted(set(steps) - copied)[:5]} have no span of gradients copied between devices")
    slack = None  # the least time from the last backward's end to a device's sum's end
    if a.one_clock:
        def last_end(kinds, pid, step):
            ends = [e["ts"] + e["dur"] for e in spans if e["name"] in kinds and e["pid"] == pid and e["args"]["step"] == step]
            if not ends:
                fail(f"{names[pid]}, step {step}: no {' or '.join(kinds)} span")
            return max(ends)
        for s in steps:
            gradients_in = max(last_end(("backward",), pid, s) for pid in names)
            for pid in names:
                summed = last_end(("allreduce", "copy between devices"), pid, s)
                if summed < gradients_in - 1e-3:
                    fail(f"{names[pid]}, step {s}: its sum ends at {summed} us, before the last device's backward "
                         f"ends at {gradients_in} us: the files are not on one clock")
                slack = summed - gradients_in if slack is None else min(slack, summed - gradients_in)
    print(f"ok: {len(spans)} spans, {len(names)} devices, {len(tracks)} tracks, steps {steps[0]}-{steps[-1]}"
          + (f", allreduce under backward in {overlapped} device-steps" if a.overlap else "")
          + (f", one clock: every sum ends at least {slack:.0f} us after the last backward" if a.one_clock else ""))


if __name__ == "__main__":
    main()
