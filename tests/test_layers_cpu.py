#!/usr/bin/env python3
"""bench/layers_cpu's profile adds up: run on a small ResNet-18 step on two
devices and a LeNet step on one, its rows by layer and its rows by kind of
layer must describe the same step. Checked: every layer row's part is one
of the three; the rows' times and the left-out remainder make the step; the
kinds' times are the step's, less the remainder at most; the kinds'
MFLOP are the step's, and the convolutions' and dense layers' kinds hold
at least their rows' MFLOP (the rows under 0.05% of the step are not
shown; the kinds count them); and
ResNet-18's step has Winograd's convolutions, the others and batch norm
among its kinds. Times are not asserted, only how the figures agree.

    test_layers_cpu.py LAYERS_CPU
"""
import re
import subprocess
import sys

ROW = re.compile(r'^(\S+)\s+(forward|weight grad|data grad)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)')
KIND = re.compile(r'^(.+?)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)')


def profile(binary, args):
    run = subprocess.run([binary] + args, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise SystemExit(f'layers_cpu {" ".join(args)}: exit {run.returncode}\n{run.stderr}')
    lines = run.stdout.splitlines()
    step = float(re.search(r'forward\+backward ([\d.]+) ms a step', run.stdout).group(1))
    left_out = float(re.search(r'left out: ([\d.]+) ms', run.stdout).group(1))
    total_flops = float(re.search(r'^all \(per device\)\s+[\d.]+\s+[\d.]+%\s+([\d.]+)', run.stdout, re.M).group(1))
    split = lines.index(next(line for line in lines if line.startswith('by kind of layer')))
    rows = [ROW.match(line) for line in lines[:split]]
    rows = [(m.group(1), m.group(2), float(m.group(3)), float(m.group(5))) for m in rows if m]
    kinds = {}
    for line in lines[split + 1:]:
        m = KIND.match(line)
        if m:
            kinds[m.group(1)] = (float(m.group(2)), float(m.group(4)))
    return step, left_out, total_flops, rows, kinds


def check(binary, args, must_have):
    problems = []
    name = ' '.join(args)
    step, left_out, total_flops, rows, kinds = profile(binary, args)
    if not rows or not kinds:
        return [f'{name}: no rows by layer or by kind']
    listed = sum(ms for _, _, ms, _ in rows)
    if abs(listed + left_out - step) > 0.01 + 0.002 * len(rows):
        problems.append(f'{name}: rows {listed:.3f} + left out {left_out:.3f} ms is not the step {step:.3f}')
    by_kind = sum(ms for ms, _ in kinds.values())
    if by_kind > step + 0.01 * len(kinds) or by_kind < step - left_out - 0.01 * len(kinds):
        problems.append(f'{name}: kinds sum to {by_kind:.3f} ms, the step is {step:.3f} (left out {left_out:.3f})')
    all_flops = sum(f for _, f in kinds.values())
    if abs(all_flops - total_flops) > 0.1 * len(kinds):
        problems.append(f'{name}: kinds {all_flops:.1f} MFLOP, the step {total_flops:.1f}')
    for prefix in ['conv', 'dense']:  # rows under 0.05% of the step are left out of the rows, not the kinds
        in_rows = sum(f for layer, _, _, f in rows if layer.startswith(prefix))
        in_kinds = sum(f for kind, (_, f) in kinds.items() if kind.startswith(prefix))
        if in_rows > in_kinds + 0.1 * len(rows):
            problems.append(f'{name}: {prefix} rows {in_rows:.1f} MFLOP, {prefix} kinds {in_kinds:.1f}')
    for kind in must_have:
        if kind not in kinds:
            problems.append(f'{name}: no "{kind}" among the kinds {sorted(kinds)}')
    return problems


def main() -> int:
    binary = sys.argv[1]
    problems = check(binary, ['resnet18', '--batch', '4', '--devices', '2', '--steps', '2'],
                     ['conv, Winograd', 'conv, other', 'batch norm'])
    problems += check(binary, ['lenet', '--batch', '32', '--steps', '2'], ['conv, other', 'dense'])
    for p in problems:
        print(p)
    print('layers_cpu: the rows by layer and by kind agree' if not problems else f'{len(problems)} problems')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
