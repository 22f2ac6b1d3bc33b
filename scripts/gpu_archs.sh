#!/usr/bin/env bash
# The compute capabilities of the GPUs nvidia-smi lists here, without their
# dots and each once, comma-separated (e.g. "90", or "80,90"): what
# -Dgpu_archs takes for a build that runs on this machine alone. A GPU the
# CUDA toolkit cannot build for (nvcc --list-gpu-code does not name it: CUDA
# 13 has nothing before sm_75) is left out, and said so on stderr. Prints
# nothing, and exits 0, where no GPU is listed (no nvidia-smi, no driver).
# NVCC names the compiler (default: nvcc on PATH, else /usr/local/cuda's).
set -euo pipefail
command -v nvidia-smi >/dev/null || exit 0
[[ $(nvidia-smi -L 2>/dev/null) == *GPU\ * ]] || exit 0
capabilities=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
    tr -d '. \r' | { grep -E '^[0-9]+$' || true; } | sort -un)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
codes=$("$nvcc" --list-gpu-code 2>/dev/null) || codes=""
kept=()
for c in $capabilities; do
    # Without nvcc, or one too old to list what it builds, every GPU is kept.
    if [[ -z $codes ]] || grep -qx "sm_$c" <<<"$codes"; then
        kept+=("$c")
    else
        echo "gpu_archs.sh: $nvcc cannot build for sm_$c, a GPU here; left out" >&2
    fi
done
[[ ${#kept[@]} -eq 0 ]] || (IFS=,; echo "${kept[*]}")
