#!/usr/bin/env python3
"""Puts a measured table into a page of the docs: the Markdown on standard
input replaces what lies between the page's markers <!-- NAME --> and
<!-- /NAME -->, so that the script that measures a table also writes it (the
scripts that call this: scripts/bench_cpu.sh, scripts/gpu.sh quick,
scripts/kernel_figures.py --counts).

  some_table | scripts/update_docs.py NAME [PAGE]    (PAGE: docs/performance.md)

Exit status: 0; 2 when the page lacks the markers or the input is empty.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    name = sys.argv[1]
    page = sys.argv[2] if len(sys.argv) == 3 else os.path.join(ROOT, "docs", "performance.md")
    table = sys.stdin.read().strip("\n")
    if not table:
        print(f"update_docs.py: nothing on standard input for <!-- {name} -->", file=sys.stderr)
        return 2
    text = open(page, encoding="utf-8").read()
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    a, b = text.find(start), text.find(end)
    if a < 0 or b < a:
        print(f"update_docs.py: {page} has no {start} ... {end}", file=sys.stderr)
        return 2
    text = text[: a + len(start)] + "\n" + table + "\n" + text[b:]
    tmp = page + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, page)
    print(f"update_docs.py: {os.path.relpath(page)}: <!-- {name} --> rewritten ({table.count(chr(10)) + 1} lines)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
