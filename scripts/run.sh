#!/usr/bin/env bash
# One command from a fresh clone to a trained LeNet: installs what is missing
# (scripts/deps.sh), builds (scripts/build.sh), and trains. Arguments go to
# dptrain, e.g.  scripts/run.sh --cpus 2 --batch 512 --lr 0.6
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
setup=()
if [[ ! -f build/build.ninja ]]; then
    echo "configuring and building build/ (the first time takes a few minutes: every kernel is compiled)"
    # With a CUDA toolkit, machine code for the GPUs here alone, not the fat
    # binary of every architecture that scripts/test.sh and CI build: about
    # half the time nvcc adds to a first run. Without a GPU nvcc can build
    # for, sm_90 alone, which keeps build/ a CUDA build that test.sh can go
    # on to test.
    if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
        archs=$(scripts/gpu_archs.sh)
        if [[ -n $archs ]]; then
            echo "CUDA kernels for this machine's GPUs alone: sm_${archs//,/, sm_} (scripts/build.sh -Dgpu_archs=75,80,90 adds the others)"
        else
            archs=90
            echo "no GPU here that nvcc builds for: CUDA kernels for sm_90 alone (scripts/build.sh -Dgpu_archs=75,80,90 adds the others)"
        fi
        setup=(-Dgpu_archs="$archs")
    fi
fi
scripts/build.sh "${setup[@]}" >/dev/null
exec build/dptrain "$@"
