#!/usr/bin/env bash
# scripts/deps.sh on a machine without a package registry (a GPU node with
# no internet), with apt-get and
# dpkg-query replaced by fakes that record their calls: with bundle/ present
# it never calls apt-get; with neither the packages nor a bundle, and an
# apt-get that cannot reach a registry, it fails with one line that says to
# run scripts/bundle.sh and carry bundle/.
# Usage: test_deps.sh DEPS_SH
set -uo pipefail
deps=$1
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A checkout of just the script, and fakes first on PATH.
mkdir -p "$tmp/repo/scripts" "$tmp/repo/data" "$tmp/bin"
cp "$deps" "$tmp/repo/scripts/deps.sh"
cat >"$tmp/bin/apt-get" <<FAKE
#!/bin/sh
echo "apt-get \$*" >>"$tmp/calls"
exit 100
FAKE
cat >"$tmp/bin/dpkg-query" <<FAKE
#!/bin/sh
exit 1
FAKE
printf '#!/bin/sh\necho 0\n' >"$tmp/bin/id"  # as root, as on such a node
chmod +x "$tmp/bin/"*
run() { PATH="$tmp/bin:$PATH" "$tmp/repo/scripts/deps.sh" "$@" >"$tmp/out" 2>"$tmp/err"; }

# 1. With a bundle: nothing to install, no apt-get, the data linked.
mkdir -p "$tmp/repo/bundle/include" "$tmp/repo/bundle/fashion-mnist"
run --with-plot
rc=$?
[[ $rc -eq 0 ]] || fail "with bundle/: exit $rc: $(cat "$tmp/err")"
[[ -e $tmp/calls ]] && fail "with bundle/: apt-get was called: $(cat "$tmp/calls")"
[[ -L $tmp/repo/data/fashion-mnist ]] || fail "with bundle/: data/fashion-mnist is not linked to the bundle's data"
[[ $failures -eq 0 ]] && echo "ok: with bundle/, deps.sh installs nothing and never calls apt-get"

# 2. Neither packages nor bundle, and no registry: one line, exit 1. The
# data link into the removed bundle (as an interrupted test.sh could leave
# it) is taken away, not left to hide the packaged data.
rm -rf "$tmp/repo/bundle"
run
rc=$?
[[ -L $tmp/repo/data/fashion-mnist ]] && fail "a data link into a removed bundle/ was left behind"
lines=$(wc -l <"$tmp/err")
if [[ $rc -eq 1 && $lines -eq 1 ]] && grep -q "run scripts/bundle.sh .* carry bundle/" "$tmp/err"; then
    echo "ok: without packages, bundle or registry: $(cat "$tmp/err")"
else
    fail "without packages, bundle or registry: exit $rc, $lines line(s): $(cat "$tmp/err")"
fi
grep -q "update" "$tmp/calls" 2>/dev/null || fail "apt-get update was not even tried"
grep -q "install" "$tmp/calls" 2>/dev/null && fail "apt-get install was called after update failed"

# 3. No apt-get at all (not a Debian machine): the same one line. PATH
# holds the fakes and links to the few tools the script uses, nothing else.
rm "$tmp/bin/apt-get"
for tool in env bash dirname grep ln timeout; do ln -s "$(command -v "$tool")" "$tmp/bin/$tool"; done
PATH="$tmp/bin" "$tmp/repo/scripts/deps.sh" >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 1 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "no apt-get here: run scripts/bundle.sh" "$tmp/err" \
    && echo "ok: without apt-get: $(cat "$tmp/err")" || fail "without apt-get: exit $rc: $(cat "$tmp/err")"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
