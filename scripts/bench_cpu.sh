#!/usr/bin/env bash
# CPU benchmark: one full Fashion-MNIST epoch of LeNet at batch 256 on 1 and
# 2 CPU devices, and, in the same run, the PyTorch peer
# (bench/pytorch_lenet.py, same model, data held in memory) on
# 1 and 2 threads, eager and, where this PyTorch has it and it works,
# compiled (torch.compile: Inductor writes C++ for the step). Each runs
# EPOCHS epochs (default 2); the figures are the last epoch's, so start-up,
# compilation and first-touch costs stay out.
# Prints a table: epoch time, samples/s, speedup of 2 devices over 1, the
# ratio of dptrain's epoch time to PyTorch's best (eager or compiled) at the
# same core count, and the arithmetic rate each reached (training FLOPs a
# sample x samples/s) as a share of the cores' FP32 peak, measured in the
# same run by bench/fma_peak.cpp. DPTRAIN_BUILD_DIR: the build to time
# (default build/; scripts/build.sh makes it).
#   usage: scripts/bench_cpu.sh            (PEER=path/to/pytorch_lenet.py, PYTHON=python3)
#          scripts/bench_cpu.sh --update-docs
#                                          (also writes the table into docs/performance.md,
#                                          between <!-- cpu-MODEL --> markers)
#          MODEL=resnet18 LIMIT=12800 scripts/bench_cpu.sh
#                                          (ResNet-18 at lr 0.1; LIMIT: the first N training
#                                          samples, an "epoch" of N, for both sides)
#          CPU_ARCH=haswell scripts/bench_cpu.sh [--update-docs]
#                                          (dptrain built with -Dcpu_arch=haswell in
#                                          build-haswell/: the AVX2+FMA path forced on a
#                                          machine with AVX-512; --update-docs writes
#                                          between <!-- cpu-MODEL-haswell --> markers)
set -euo pipefail
cd "$(dirname "$0")/.."
update_docs=no
case ${1:-} in
--update-docs) update_docs=yes ;;
"") ;;
*) echo "scripts/bench_cpu.sh: unknown argument '$1' (--update-docs, or none)" >&2; exit 2 ;;
esac
epochs=${EPOCHS:-2}
peer=${PEER:-bench/pytorch_lenet.py}
model=${MODEL:-lenet}
limit=${LIMIT:-0}
lr=$([[ $model == lenet ]] && echo 0.3 || echo 0.1)
samples=$([[ $limit -gt 0 ]] && echo "$limit" || echo 60000)
limit_args=()
[[ $limit -gt 0 ]] && limit_args=(--limit-train "$limit")
arch=${CPU_ARCH:-}
scripts/deps.sh
if [[ -n $arch ]]; then
    export DPTRAIN_BUILD_DIR=${DPTRAIN_BUILD_DIR:-build-$arch}
    scripts/build.sh -Dcpu_arch="$arch" >/dev/null
else
    scripts/build.sh >/dev/null
fi
dir=${DPTRAIN_BUILD_DIR:-build}
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT

# "time samples_per_s" of the last epoch from dptrain's JSON Lines.
dptrain_epoch() {
    "$dir/dptrain" --model "$model" --cpus "$1" --batch 256 --lr "$lr" --epochs "$epochs" "${limit_args[@]}" \
        --metrics "$tmp/m$1.jsonl" >&2
    tail -1 "$tmp/m$1.jsonl" | sed -E 's/.*"train_time_s": ?([0-9.]+), ?"samples_per_s": ?([0-9.]+).*/\1 \2/'
}
# The same from the peer's "epoch N time T s  R samples/s" lines; THREADS,
# then --compile or nothing. Prints nothing when the peer failed.
pytorch_epoch() {
    "$python" "$peer" --model "$model" --threads "$1" --batch 256 --lr "$lr" --init xavier --epochs "$epochs" \
        "${limit_args[@]}" "${@:2}" | tee /dev/stderr |
        tail -1 | sed -nE 's/.*time ([0-9.]+) s +([0-9,]+) samples.*/\1 \2/p' | sed 's/,//g'
}
# The smaller of two times, either of which may be missing.
best() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" >&2
# Training FLOPs a sample: forward + both backward GEMMs, 3x the forward
# (README: LeNet 4.45 MFLOP forward, ResNet-18 119).
flops=$([[ $model == lenet ]] && echo 13.3e6 || echo 357e6)
# The FP32 peak of one core: fused multiply-adds in registers, one copy per
# core at once (both cores run during a 2-device epoch), built for the
# same -march as dptrain (CPU_ARCH=haswell: the AVX2 peak). Not fatal: a
# machine without a C++ compiler gets the table without the last column.
peak=""
if ${CXX:-g++} -O2 -march="${arch:-native}" -ffp-contract=fast bench/fma_peak.cpp -o "$tmp/fma_peak" 2>/dev/null; then
    for ((i = 0; i < $(nproc); ++i)); do "$tmp/fma_peak" 2 >"$tmp/peak$i" & done
    wait
    peak=$(cat "$tmp"/peak* | awk '{ s += $2; n++ } END { printf "%.1f", s / n }')
    echo "FP32 peak: $peak GFLOP/s a core (fused multiply-adds, every core at once)" >&2
fi
read -r t1 r1 < <(dptrain_epoch 1)
read -r t2 r2 < <(dptrain_epoch 2)

python=${PYTHON:-}
if [[ -z $python ]]; then  # Debian's python3-torch installs for /usr/bin/python3
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch' 2>/dev/null && { python=$p; break; }; done
fi
pe1="" pe2="" pc1="" pc2="" compiled="not run: this PyTorch has no torch.compile"
if [[ -n $python && -f $peer ]]; then
    read -r pe1 _ < <(pytorch_epoch 1)
    read -r pe2 _ < <(pytorch_epoch 2)
    if "$python" -c 'import sys, torch; sys.exit(not hasattr(torch, "compile"))'; then
        read -r pc1 _ < <(pytorch_epoch 1 --compile) || true
        read -r pc2 _ < <(pytorch_epoch 2 --compile) || true
        compiled=$([[ -n $pc1 && -n $pc2 ]] && echo yes || echo "failed on this machine (its output is above)")
    fi
else
    echo "PyTorch peer skipped: no python with torch (apt-get install python3-torch) or no $peer" >&2
fi
# PyTorch's best at each core count: what dptrain is held against.
pt1=$(best "$pe1" "$pc1") pt2=$(best "$pe2" "$pc2")
faster() { [[ -z $2 ]] && echo "eager" || awk -v e="$1" -v c="$2" 'BEGIN { print (e + 0 <= c + 0) ? "eager" : "compiled" }'; }

ratio() { [[ -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }' || echo "-"; }
# "GFLOP/s (share of the peak of CORES cores)" for an epoch of $1 seconds.
rate() {
    awk -v t="$1" -v n="$samples" -v f="$flops" -v p="$peak" -v c="$2" \
        'BEGIN { g = n * f / t / 1e9; if (p == "") printf "%.0f", g; else printf "%.0f (%.0f%%)", g, 100 * g / (p * c) }'
}
# The peer's rows: LABEL, the 1-thread time, the 2-thread time.
peer_rows=()
[[ -n $pe1 ]] && peer_rows+=("PyTorch eager|$pe1|$pe2")
[[ -n $pc1 ]] && peer_rows+=("PyTorch compiled|$pc1|$pc2")
isa=$("$dir/dptrain" --version | sed -nE 's/.*CPU kernels: .*\((.*)\).*/\1/p' | head -1)
echo
printf '%-26s %10s %12s %9s %16s %18s\n' "$model, batch 256" "epoch (s)" "samples/s" "speedup" "vs PyTorch best" "GFLOP/s (of peak)"
[[ $limit -gt 0 ]] && echo "(an epoch of the first $limit training samples)"
printf '%-26s %10.2f %12.0f %9s %16s %18s\n' "dptrain --cpus 1" "$t1" "$r1" "1.00x" "$(ratio "$t1" "$pt1")" "$(rate "$t1" 1)"
printf '%-26s %10.2f %12.0f %9s %16s %18s\n' "dptrain --cpus 2" "$t2" "$r2" "$(ratio "$t1" "$t2")" "$(ratio "$t2" "$pt2")" "$(rate "$t2" 2)"
for row in "${peer_rows[@]}"; do
    IFS='|' read -r label a b <<<"$row"
    printf '%-26s %10.2f %12.0f %9s %16s %18s\n' "$label, 1 thread" "$a" "$(awk -v t="$a" -v n="$samples" 'BEGIN{print n/t}')" "" "" "$(rate "$a" 1)"
    [[ -n $b ]] && printf '%-26s %10.2f %12.0f %9s %16s %18s\n' "$label, 2 threads" "$b" "$(awk -v t="$b" -v n="$samples" 'BEGIN{print n/t}')" "$(ratio "$a" "$b")" "" "$(rate "$b" 2)"
done
[[ -n $pt1 ]] && echo "(PyTorch's best: $(faster "$pe1" "$pc1") on 1 thread, $(faster "$pe2" "$pc2") on 2; compiled: $compiled)"
[[ -n $peak ]] && echo "(GFLOP/s: $(awk -v f="$flops" 'BEGIN { printf "%.1f", f / 1e6 }') MFLOP of training a sample x samples/s; peak $peak GFLOP/s a core, measured above; CPU kernels: $isa)" || true

# The same as Markdown, with what it was measured on, into the docs.
if [[ $update_docs == yes ]]; then
    {
        echo "| $model, batch 256$([[ $limit -gt 0 ]] && echo ", an epoch of $limit samples") | epoch (s) | samples/s | 2 against 1 | against PyTorch's best | GFLOP/s (share of peak) |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: |"
        echo "| dptrain --cpus 1 | $(printf %.2f "$t1") | $(printf %.0f "$r1") | 1.00x | $(ratio "$t1" "$pt1") | $(rate "$t1" 1) |"
        echo "| dptrain --cpus 2 | $(printf %.2f "$t2") | $(printf %.0f "$r2") | $(ratio "$t1" "$t2") | $(ratio "$t2" "$pt2") | $(rate "$t2" 2) |"
        version=$([[ -n $python ]] && "$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
        for row in "${peer_rows[@]}"; do
            IFS='|' read -r label a b <<<"$row"
            echo "| $label (PyTorch $version), 1 thread | $(printf %.2f "$a") | $(awk -v t="$a" -v n="$samples" 'BEGIN{printf "%.0f", n/t}') | | | $(rate "$a" 1) |"
            [[ -n $b ]] && echo "| $label, 2 threads | $(printf %.2f "$b") | $(awk -v t="$b" -v n="$samples" 'BEGIN{printf "%.0f", n/t}') | $(ratio "$a" "$b") | | $(rate "$b" 2) |"
        done
        echo
        echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), CPU kernels for ${isa:-unknown}; FP32 peak ${peak:-not measured} GFLOP/s a core; $(date +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); \`$([[ -n $arch ]] && echo "CPU_ARCH=$arch ")scripts/bench_cpu.sh --update-docs\`$([[ $model != lenet ]] && echo " with MODEL=$model LIMIT=$limit"). The last of $epochs epochs each.$([[ -n $pt1 ]] && echo " PyTorch's best: $(faster "$pe1" "$pc1") on 1 thread, $(faster "$pe2" "$pc2") on 2; compiled: $compiled." || echo " PyTorch: not installed on that machine.")"
    } | scripts/update_docs.py "cpu-$model${arch:+-$arch}"
fi
