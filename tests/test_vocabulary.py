#!/usr/bin/env python3
"""One vocabulary: the phases of a step and the units of sizes are spelled
the same in the binary's output, its trace, scripts/plot.py and the docs.

- The phases' names are those of phase_name() in src/devices/device.hpp
  (and "forward", a trace's name for forward alone). Every phase label of
  scripts/plot.py (PHASES, TRACE_COLOURS) must be one of them.
- Where a name is quoted (a string literal in code, `code` or a fenced
  block in Markdown), no other spelling of a phase: "sgd update",
  "wait for peers", "split and load", ...
- Sizes are decimal everywhere (1 KB = 1,000 bytes, as in GB/s): no KiB,
  MiB, GiB or kB in any text of the project.

    test_vocabulary.py ROOT              exit 1 naming each FILE:LINE
    test_vocabulary.py --catches ROOT    a copy with strays must fail
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

FOLDERS = ("src", "kernels", "dev", "scripts", "bench", "tests", "docs", ".ci")
SUFFIXES = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".py", ".sh", ".md", ".build", ".txt", ".options")
SKIPPED = ("tests/fixtures", "tests/test_vocabulary.py")  # recorded outputs; the strays' list

# Other spellings of the names, each a pattern of a stray.
STRAY_NAMES = [
    r"\b[Ss]gd update\b", r"\bSGD Update\b", r"\bupdate \(SGD\)",
    r"\bwait for (peers|the allreduce|a bucket)\b",
    r"\bsplit[ -]and[ -]load\b", r"\bsplit_load\b",
    r"\bforward ?\+ ?backward\b(?<!forward\+backward)", r"\bforward/backward\b", r"\bfwd\+bwd\b",
    r"\bwaiting for the slowest device\"",  # a legend's old name for waiting for peers
]
BINARY_UNITS = r"\b(KiB|MiB|GiB|TiB|kB)\b"


def phase_names(root):
    text = open(os.path.join(root, "src/devices/device.hpp"), encoding="utf-8").read()
    body = re.search(r"inline const char\* phase_name\(Phase phase\) \{(.*?)\n\}", text, re.S)
    if not body:
        sys.exit("test_vocabulary.py: no phase_name() in src/devices/device.hpp")
    names = re.findall(r'return "([^"?]+)";', body.group(1))
    if len(names) < 10:
        sys.exit(f"test_vocabulary.py: phase_name() names {len(names)} phases: {names}")
    return set(names) | {"forward"}


def files(root):
    for folder in FOLDERS:
        for where, dirs, names in os.walk(os.path.join(root, folder)):
            relative = os.path.relpath(where, root)
            dirs[:] = [d for d in dirs if os.path.join(relative, d) not in SKIPPED]
            for name in names:
                path = os.path.join(relative, name)
                if (name.endswith(SUFFIXES) or name == "run") and path not in SKIPPED:
                    yield path
    yield "README.md"
    yield "meson.build"
    yield "meson_options.txt"


def quoted(path, text):
    """(offset, snippet) of each place a name is quoted in `text`."""
    if path.endswith(".md"):
        for m in re.finditer(r"```.*?```|`[^`\n]+`", text, re.S):
            yield m.start(), m.group(0)
    else:
        for m in re.finditer(r'"(?:[^"\\\n]|\\.)*"', text):
            yield m.start(), m.group(0)


def check(root):
    problems = []
    names = phase_names(root)
    plot = open(os.path.join(root, "scripts/plot.py"), encoding="utf-8").read()
    phases = re.search(r"PHASES = \[.*?\n\]", plot, re.S)
    colours = re.search(r"TRACE_COLOURS = \{.*?\n\}", plot, re.S)
    if not phases or not colours:
        problems.append("scripts/plot.py: no PHASES or TRACE_COLOURS")
    else:
        labels = re.findall(r'\("\w+", "([^"]+)"', phases.group(0)) + re.findall(r'"([^"]+)": "#', colours.group(0))
        for label in labels:
            if label not in names:
                problems.append(f"scripts/plot.py: the phase label \"{label}\" is not one of phase_name()'s")
    for path in files(root):
        try:
            text = open(os.path.join(root, path), encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        for m in re.finditer(BINARY_UNITS, text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{path}:{line}: {m.group(0)}: sizes are decimal here (KB, MB, GB)")
        for at, snippet in quoted(path, text):
            for pattern in STRAY_NAMES:
                for m in re.finditer(pattern, snippet):
                    line = text.count("\n", 0, at + m.start()) + 1
                    problems.append(f"{path}:{line}: \"{m.group(0)}\" is not a phase's name")
    return problems


def catches(root):
    """A copy of the files checked, with three strays put in: each must be named."""
    with tempfile.TemporaryDirectory() as copy:
        for path in files(root):
            if os.path.exists(os.path.join(root, path)):
                os.makedirs(os.path.join(copy, os.path.dirname(path)), exist_ok=True)
                shutil.copy(os.path.join(root, path), os.path.join(copy, path))
        strays = {  # file: (text, its stray, a word of the report on it)
            "scripts/plot.py": ('"SGD update"', '"sgd update"', "sgd update"),
            "docs/usage.md": ("`SGD update`", "`wait for peers`", "wait for peers"),
            "src/commands/bench_allreduce.cpp": ("4 KB to 64 MB", "4 KiB to 64 MiB", "KiB"),
        }
        for path, (text, stray, _) in strays.items():
            full = os.path.join(copy, path)
            content = open(full, encoding="utf-8").read()
            if text not in content:
                return [f"--catches: {path} no longer holds {text!r} to replace"]
            open(full, "w", encoding="utf-8").write(content.replace(text, stray, 1))
        run = subprocess.run([sys.executable, __file__, copy], capture_output=True, text=True)
        print(run.stdout, end="")
        problems = [] if run.returncode == 1 else [f"--catches: exit {run.returncode} on a copy with strays, not 1"]
        for path, (_, stray, word) in strays.items():
            if not any(l.startswith(path + ":") and word in l for l in run.stdout.splitlines()):
                problems.append(f"--catches: the stray {stray} in {path} was not named")
        return problems


def main():
    if sys.argv[1:2] == ["--catches"]:
        problems = catches(sys.argv[2])
        if not problems:
            print("ok: each of the 3 strays put into a copy was named, and the check failed")
    else:
        problems = check(sys.argv[1])
        if not problems:
            print(f"ok: one spelling of each of the {len(phase_names(sys.argv[1]))} phase names, decimal sizes everywhere")
    for p in problems:
        print(p)
    if problems and sys.argv[1:2] != ["--catches"]:
        print(f"the phases' names (src/devices/device.hpp, phase_name()): {', '.join(sorted(phase_names(sys.argv[1])))}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
