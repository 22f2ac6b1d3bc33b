#!/usr/bin/env python3
"""The docs point at what exists: in README.md, docs/*.md and dev/cuda/README.md,
- every repository path written in backticks (a top-level file, or a path under
  one of the project's folders) exists, or is a program built from a source of
  that name (bench/kernel_bench: bench/kernel_bench.cpp);
- every scripts/... or bench/... command shown (in backticks or a code block)
  names a file that exists and is executable;
- every relative link resolves: its file exists, and its #anchor, where it has
  one, is a heading of that page (GitHub's anchors: lower case, spaces to
  hyphens, punctuation dropped).

Usage: test_docs.py ROOT [FILE.md ...]  (default: those pages of ROOT). Prints a
line for each problem, file:line first, and exits 1 when there is one.
"""
import os
import re
import sys

FOLDERS = ("src/", "kernels/", "dev/", "tests/", "data/", "scripts/", "bench/", "docs/", ".ci/")
TOP_FILES = ("meson.build", "meson_options.txt", "README.md")
# Paths the scripts make: the dataset's link (scripts/deps.sh).
MADE = ("data/fashion-mnist",)
# What a backticked path is not: a build's output, a placeholder, a pattern.
NOT_A_PATH = re.compile(r"[<>*${}\[\]|]|\.\.\.")


def anchors_of(path):
    """The #anchors GitHub gives the headings of a Markdown page."""
    found, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
            m = None if fenced else re.match(r"#+\s+(.*)", line)
            if not m:
                continue
            # (Markup goes: code quotes, emphasis, a link's target. An
            # underscore inside a word, as in layers_cpu, is text.)
            text = re.sub(r"`|\*|(?<!\w)_(?=\w)|(?<=\w)_(?!\w)|\[([^]]*)\]\([^)]*\)", lambda g: g.group(1) or "",
                          m.group(1).strip())
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            base, n = slug, 1
            while slug in found:
                slug, n = f"{base}-{n}", n + 1
            found.add(slug)
    return found


def repo_path(token):
    """The repository path a backticked token names, or None."""
    token = token.strip().split()[0] if token.strip() else ""
    token = re.sub(r"[:#].*$", "", token).rstrip(".,;)")  # file:line, page#anchor
    if not token or NOT_A_PATH.search(token) or "://" in token:
        return None
    if token.rstrip("/") in MADE:
        return None
    if token in TOP_FILES or token.startswith(FOLDERS):
        return token
    return None


def check(root, page, problems):
    rel_page = os.path.relpath(page, root)
    here = os.path.dirname(page)
    fenced = False
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, 1):
        where = f"{rel_page}:{number}"
        if line.startswith("```"):
            fenced = not fenced
            continue
        spans = [line] if fenced else re.findall(r"`([^`]+)`", line)
        for span in spans:
            # Commands: each scripts/... or bench/... word of a span.
            for word in re.findall(r"(?:^|[\s(=])((?:scripts|bench)/[\w./-]+)", span):
                word = word.rstrip(".,;)")
                if NOT_A_PATH.search(word) or word.endswith("/"):
                    continue
                full = os.path.join(root, word)
                if os.path.isfile(full):
                    if word.endswith((".sh", ".py")) and not os.access(full, os.X_OK):
                        problems.append(f"{where}: {word} is shown as a command but is not executable")
                elif not any(os.path.isfile(full + ext) for ext in (".cpp", ".cu")):
                    problems.append(f"{where}: {word}: no such file")
            if fenced:
                continue
            path = repo_path(span)
            if path and not path.startswith(("scripts/", "bench/")):
                full = os.path.join(root, path)
                if not (os.path.exists(full) or any(os.path.isfile(full + e) for e in (".cpp", ".cu"))):
                    problems.append(f"{where}: `{path}`: no such file or folder")
        if fenced:
            continue
        # Relative links.
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(here, file)) if file else page
            if not os.path.exists(full):
                problems.append(f"{where}: link {target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in anchors_of(full):
                problems.append(f"{where}: link {target}: {os.path.relpath(full, root)} has no heading #{anchor}")


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
        return 2
    root = os.path.abspath(sys.argv[1])
    pages = sys.argv[2:] or (
        [os.path.join(root, "README.md"), os.path.join(root, "dev/cuda/README.md")]
        + sorted(os.path.join(root, "docs", p) for p in os.listdir(os.path.join(root, "docs")) if p.endswith(".md")))
    problems = []
    for page in pages:
        check(root, os.path.abspath(page), problems)
    for p in problems:
        print(p)
    print(f"{len(pages)} pages read: {len(problems) or 'no'} problem{'' if len(problems) == 1 else 's'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
