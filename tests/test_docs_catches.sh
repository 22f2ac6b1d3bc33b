#!/usr/bin/env bash
# tests/test_docs.py finds each kind of mistake it checks for: on
# tests/fixtures/docs-broken.md (a missing command, a missing path, a link
# to a missing page and one to a missing heading) it names all four, and
# only those, and exits 1.
set -uo pipefail
root=$1
out=$(python3 "$root/tests/test_docs.py" "$root" "$root/tests/fixtures/docs-broken.md")
rc=$?
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
((rc == 1)) || fail "test_docs.py exited $rc on the broken page, not 1"
for want in "scripts/no_such_script.sh: no such file" "\`kernels/cuda/renamed.cu\`: no such file or folder" \
    "link no-such-page.md: no such file" "link ../../README.md#no-such-heading: README.md has no heading"; do
    grep -qF "$want" <<<"$out" || fail "not reported: $want"
done
problems=$(grep -c '^tests/fixtures/docs-broken.md:' <<<"$out")
((problems == 4)) || fail "$problems problems reported, not 4 (a path that exists reported?)"
echo "ok: the four mistakes of tests/fixtures/docs-broken.md reported, and nothing else"
