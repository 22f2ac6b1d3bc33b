#!/usr/bin/env bash
# The compute capabilities of the GPUs nvidia-smi lists here, without their
# dots and each once, comma-separated (e.g. "90", or "80,90"): what
# -Dgpu_archs takes for a build that runs on this machine alone. Prints
# nothing, and exits 0, where no GPU is listed (no nvidia-smi, no driver).
set -euo pipefail
command -v nvidia-smi >/dev/null || exit 0
[[ $(nvidia-smi -L 2>/dev/null) == *GPU\ * ]] || exit 0
nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
    tr -d '. \r' | { grep -E '^[0-9]+$' || true; } | sort -un | paste -sd, -
