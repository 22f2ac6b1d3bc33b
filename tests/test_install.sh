#!/usr/bin/env bash
# `meson install` into a scratch DESTDIR: the binary, its man page (when the
# build found help2man) and the docs land where Debian puts them, and the
# installed binary runs from there. Usage: test_install.sh BUILD_DIR PREFIX MAN(true|false)
set -uo pipefail
build=$1 prefix=$2 man=$3
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

DESTDIR=$tmp meson install -C "$build" --no-rebuild --quiet >"$tmp.log" 2>&1 || { cat "$tmp.log"; fail "meson install failed"; }
rm -f "$tmp.log"
root=$tmp$prefix
bin=$root/bin/dptrain
if [[ -x $bin ]]; then
    "$bin" --version >"$tmp/version" 2>&1 || fail "the installed dptrain --version failed: $(cat "$tmp/version")"
    grep -qE '^dptrain [0-9]+\.[0-9]+\.[0-9]+$' "$tmp/version" && grep -q '^GPUs: ' "$tmp/version" \
        && grep -q '^several processes: ' "$tmp/version" \
        && grep -qE '^CPU kernels: .* \(([A-Z0-9 +-]+|baseline)\): the (AVX-512|AVX2\+FMA|baseline) path: ' "$tmp/version" \
        && echo "ok: $bin --version: $(paste -sd';' "$tmp/version")" || fail "--version printed: $(cat "$tmp/version")"
else
    fail "no executable at $bin: $(cd "$tmp" && find . -type f | head)"
fi
page=$root/share/man/man1/dptrain.1
if [[ $man == true ]]; then
    [[ -f $page ]] && grep -q '^\.TH DPTRAIN "1"' "$page" && grep -q 'cpus' "$page" && grep -q 'checkpoint' "$page" \
        && echo "ok: the man page at share/man/man1/dptrain.1 ($(wc -l <"$page") lines, every option of --help)" \
        || fail "no man page with the options at $page"
else
    echo "ok: no man page expected (this build found no help2man)"
fi
docs=$root/share/doc/dptrain
[[ -f $docs/README.md && -f $docs/docs/usage.md ]] \
    && echo "ok: README.md and $(find "$docs/docs" -name '*.md' | wc -l) pages of docs in share/doc/dptrain/" \
    || fail "docs missing under $docs: $(ls -R "$docs" 2>&1 | head)"
[[ $failures -eq 0 ]] || exit 1
