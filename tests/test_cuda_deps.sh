#!/usr/bin/env bash
# Whether ninja knows what each CUDA kernel source includes: for every
# kernels/cuda/*.cu, its object's recorded dependencies (ninja -t deps) name
# each header the source includes from kernels/. Without them a changed
# header (tiles.cuh, conv.cuh, ...) rebuilds nothing, and a warm build tests
# and times the kernels of before. Run after the build.
# Usage: test_cuda_deps.sh SOURCE_ROOT BUILD_DIR
set -uo pipefail
root=$1 build=$2
fail=0 checked=0
for source in "$root"/kernels/cuda/*.cu; do
    name=$(basename "$source")
    objects=("$build"/kernels/cuda/*.a.p/"$name".o)
    if [[ ${#objects[@]} -ne 1 || ! -f ${objects[0]} ]]; then
        echo "FAIL: $name: not one object in $build/kernels/cuda/*.a.p/ (${objects[*]})"; fail=1; continue
    fi
    object=${objects[0]#"$build"/}
    deps=$(ninja -C "$build" -t deps "$object" 2>&1)
    while read -r header; do
        [[ -f $root/kernels/cuda/$header || -f $root/kernels/$header ]] || continue  # (a system header)
        if grep -qE "(^|/)$header\$" <<<"$deps"; then
            checked=$((checked + 1))
        else
            echo "FAIL: $object: ninja does not know it includes $header ($(head -1 <<<"$deps"))"; fail=1
        fi
    done < <(sed -nE 's/^#include "([^"]+)".*/\1/p' "$source")
done
[[ $checked -gt 0 ]] || { echo "FAIL: no header checked"; fail=1; }
[[ $fail -eq 0 ]] || exit 1
echo "ok: $checked includes of $(ls "$root"/kernels/cuda/*.cu | wc -l) CUDA sources known to ninja"
