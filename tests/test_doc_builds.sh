#!/usr/bin/env bash
# The builds README.md and docs/ tell a user to type are the builds
# scripts/test.sh makes: scripts/doc_builds.sh lists them, test.sh builds
# each, and this checks that the list holds every `meson setup` command the
# docs write (none wrapped across lines, where the list would miss it), on
# the real docs and on made-up ones.
# Usage: test_doc_builds.sh SOURCE_ROOT
set -uo pipefail
root=$1
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# unreadable ROOT: the `meson setup` commands of ROOT's docs that
# doc_builds.sh cannot read, a line each (FILE:LINE: text): a command whose
# inline code span does not close on its line.
unreadable() {
    python3 - "$1" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
    fence = False
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        for m in re.finditer(r"meson setup(?=\s|$)", line):
            rest = line[m.end():]
            if not fence and line[:m.start()].count("`") % 2 == 1 and "`" not in rest:
                print(f"{doc.relative_to(root)}:{n}: {line.strip()}")
PY
}

# The real docs: every command readable, and README.md's emulated build
# among them, as test.sh builds it.
found=$(unreadable "$root")
[[ -z $found ]] && echo "ok: every meson setup command in README.md and docs/ is on one line" \
    || fail "commands the list cannot read (write each on one line): $found"
listed=$("$root/scripts/doc_builds.sh" "$root") || fail "scripts/doc_builds.sh failed"
echo "the builds the docs show:"; sed 's/^/  /' <<<"$listed"
emulated=$(sed -n 's/^emulated_options=//p' "$root/scripts/test.sh")
grep -qxF -- "$emulated" <<<"$listed" && echo "ok: test.sh's emulated stage builds README.md's '$emulated'" \
    || fail "test.sh's emulated_options '$emulated' is not a build the docs show"
grep -q 'done < <(scripts/doc_builds.sh)' "$root/scripts/test.sh" && echo "ok: test.sh builds each listed build" \
    || fail "scripts/test.sh does not build what scripts/doc_builds.sh lists"

# Made-up docs: a new command is listed; one wrapped across lines is caught.
mkdir -p "$tmp/docs" && cp "$root/scripts/doc_builds.sh" "$tmp/" && mkdir "$tmp/scripts" && mv "$tmp/doc_builds.sh" "$tmp/scripts/"
printf 'Build it: `meson setup b -Demulated_gpu=true`.\n' >"$tmp/README.md"
printf '```sh\nmeson setup b2 -Dcuda=disabled -Dcpu_arch=x86-64 && ninja -C b2\n```\nThe `summary` of `meson setup` says.\n' >"$tmp/docs/a.md"
got=$("$tmp/scripts/doc_builds.sh" "$tmp")
[[ $got == $'-Demulated_gpu=true\n-Dcuda=disabled -Dcpu_arch=x86-64' ]] && echo "ok: a new command in a doc is listed" \
    || fail "made-up docs listed '$got'"
printf 'Build it: `meson setup b\n-Dfuzz=true`.\n' >"$tmp/README.md"
[[ -n $(unreadable "$tmp") ]] && echo "ok: a command wrapped across lines is caught: $(unreadable "$tmp")" \
    || fail "a wrapped command went unnoticed"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
