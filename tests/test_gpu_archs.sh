#!/usr/bin/env bash
# scripts/gpu_archs.sh against stand-ins for nvidia-smi: the compute
# capabilities of the GPUs it lists, each once, in the form -Dgpu_archs
# takes; nothing where it lists no GPU or is not there at all.
# Usage: test_gpu_archs.sh SOURCE_ROOT
set -uo pipefail
script=$1/scripts/gpu_archs.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A PATH with the tools the script uses and no nvidia-smi, even on a machine
# that has one.
mkdir "$work/tools"
for tool in bash tr grep sort paste; do ln -s "$(command -v "$tool")" "$work/tools/$tool"; done
fail=0
# expect NAME WANTED [NVIDIA-SMI-LIST-EXIT CAPABILITY...]: a stand-in that
# lists a GPU a capability (or fails its -L as without a driver), then the check.
expect() {
    local name=$1 wanted=$2 path=$work/tools
    if [[ $# -gt 2 ]]; then
        path=$work/$name:$work/tools
        mkdir "$work/$name"
        {
            echo '#!/bin/bash'
            echo "if [[ \$1 == -L ]]; then"
            echo "    [[ $3 == 0 ]] || { echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit $3; }"
            local i=0 cap
            for cap in "${@:4}"; do echo "    echo 'GPU $i: NVIDIA stand-in (UUID: GPU-$i)'"; i=$((i + 1)); done
            echo "    exit 0"
            echo "fi"
            echo "[[ \$* == '--query-gpu=compute_cap --format=csv,noheader' ]] || exit 2"
            for cap in "${@:4}"; do echo "echo '$cap'"; done
        } >"$work/$name/nvidia-smi"
        chmod +x "$work/$name/nvidia-smi"
    fi
    local got rc=0
    got=$(PATH=$path bash "$script" 2>&1) || rc=$?
    if [[ $rc -ne 0 || $got != "$wanted" ]]; then
        echo "FAIL: $name: printed '$got' (exit $rc), wanted '$wanted' (exit 0)"; fail=1
    else
        echo "ok: $name: '$got'"
    fi
}
expect one-h100 90 0 9.0
expect mixed 80,90 0 9.0 8.0 9.0
expect newer-sorts-last 90,120 0 12.0 9.0
expect no-driver "" 9 9.0
expect no-nvidia-smi ""
exit $fail
