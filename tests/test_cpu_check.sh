#!/usr/bin/env bash
# dptrain on a CPU without the instruction sets its kernels were built for:
# under QEMU's user-mode emulator (qemu-user, a Debian package), whose CPU
# has AVX2 and FMA but no AVX-512. An AVX-512 build must stop at once with
# exit 1 and a message naming what is missing and what to build, not die
# of SIGILL; an AVX2 or baseline build must run there.
# Usage: test_cpu_check.sh DPTRAIN
set -uo pipefail
dptrain=$1
if [[ $(uname -m) != x86_64 ]]; then echo "SKIP: not an x86-64 machine"; exit 77; fi
if ! command -v qemu-x86_64 >/dev/null; then echo "SKIP: no qemu-x86_64 here (Debian's qemu-user)"; exit 77; fi
if [[ ${DPTRAIN_SANITIZED:-0} == 1 ]]; then echo "SKIP: a sanitized build does not run under qemu-user"; exit 77; fi
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$dptrain" --version >"$tmp/native" 2>&1 || fail "dptrain --version: $(cat "$tmp/native")"
timeout 120 qemu-x86_64 "$dptrain" --version >"$tmp/out" 2>"$tmp/err"
rc=$?
if grep -q "the AVX-512 path" "$tmp/native"; then
    [[ $rc -eq 1 ]] || fail "an AVX-512 build on a CPU without it: exit $rc (want 1): $(cat "$tmp/err")"
    grep -q "^dptrain: error: this CPU has no AVX-512" "$tmp/err" || fail "no message naming AVX-512: $(cat "$tmp/err")"
    grep -q "Dcpu_arch=x86-64-v3" "$tmp/err" || fail "the message names no build to make: $(cat "$tmp/err")"
    [[ ! -s $tmp/out ]] || fail "it printed before stopping: $(cat "$tmp/out")"
    echo "ok: an AVX-512 build on a CPU without AVX-512 stops with exit 1: $(cat "$tmp/err")"
else
    [[ $rc -eq 0 ]] || fail "a build without AVX-512 did not run on QEMU's AVX2 CPU: exit $rc: $(cat "$tmp/err")"
    cmp -s "$tmp/out" "$tmp/native" || fail "--version differs under QEMU: $(diff "$tmp/native" "$tmp/out")"
    echo "ok: a build without AVX-512 runs on QEMU's AVX2 CPU (--version as on this one)"
fi
