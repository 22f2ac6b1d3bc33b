#!/usr/bin/env bash
# scripts/gpu_archs.sh against stand-ins for nvidia-smi and nvcc: the
# compute capabilities of the GPUs listed, each once, in the form
# -Dgpu_archs takes, without those nvcc cannot build for; nothing where no
# GPU is listed or nvidia-smi is not there at all.
# Usage: test_gpu_archs.sh SOURCE_ROOT
set -uo pipefail
script=$1/scripts/gpu_archs.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A PATH with the tools the script uses and no nvidia-smi or nvcc, even on a
# machine that has them.
mkdir "$work/tools"
for tool in bash tr grep sort; do ln -s "$(command -v "$tool")" "$work/tools/$tool"; done
# An nvcc that builds for what CUDA 13 does.
printf '#!/bin/bash\n[[ $1 == --list-gpu-code ]] || exit 2\nprintf "sm_%%s\\n" 75 80 86 89 90 100 120\n' >"$work/nvcc"
chmod +x "$work/nvcc"
fail=0
# expect NAME STDOUT STDERR-PART NVCC [SMI-LIST-EXIT CAPABILITY...]: a
# stand-in nvidia-smi that lists a GPU a capability (or whose -L fails, as
# without a driver), then the script's output and a part of its stderr.
expect() {
    local name=$1 wanted=$2 said=$3 nvcc=$4 path=$work/tools
    if [[ $# -gt 4 ]]; then
        path=$work/$name:$work/tools
        mkdir "$work/$name"
        {
            echo '#!/bin/bash'
            echo "if [[ \$1 == -L ]]; then"
            echo "    [[ $5 == 0 ]] || { echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit $5; }"
            local i=0 cap
            for cap in "${@:6}"; do echo "    echo 'GPU $i: NVIDIA stand-in (UUID: GPU-$i)'"; i=$((i + 1)); done
            echo "    exit 0"
            echo "fi"
            echo "[[ \$* == '--query-gpu=compute_cap --format=csv,noheader' ]] || exit 2"
            for cap in "${@:6}"; do echo "echo '$cap'"; done
        } >"$work/$name/nvidia-smi"
        chmod +x "$work/$name/nvidia-smi"
    fi
    local got rc=0
    got=$(PATH=$path NVCC=$nvcc bash "$script" 2>"$work/$name.err") || rc=$?
    if [[ $rc -ne 0 || $got != "$wanted" ]]; then
        echo "FAIL: $name: printed '$got' (exit $rc), wanted '$wanted' (exit 0); stderr: $(cat "$work/$name.err")"; fail=1
    elif [[ -n $said ]] && ! grep -qF -- "$said" "$work/$name.err"; then
        echo "FAIL: $name: stderr does not say '$said': $(cat "$work/$name.err")"; fail=1
    elif [[ -z $said && -s $work/$name.err ]]; then
        echo "FAIL: $name: unexpected stderr: $(cat "$work/$name.err")"; fail=1
    else
        echo "ok: $name: '$got'${said:+ ($said)}"
    fi
}
expect one-h100 90 "" "$work/nvcc" 0 9.0
expect mixed 80,90 "" "$work/nvcc" 0 9.0 8.0 9.0
expect newer-sorts-last 90,120 "" "$work/nvcc" 0 12.0 9.0
expect too-old-left-out 90 "cannot build for sm_61" "$work/nvcc" 0 6.1 9.0
expect only-too-old "" "cannot build for sm_61" "$work/nvcc" 0 6.1
expect no-nvcc-keeps-all 61,90 "" "$work/no-such-nvcc" 0 9.0 6.1
expect no-driver "" "" "$work/nvcc" 9 9.0
expect no-nvidia-smi "" "" "$work/nvcc"
exit $fail
