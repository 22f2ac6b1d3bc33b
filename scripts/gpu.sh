#!/usr/bin/env bash
# Everything dptrain has to prove on a GPU, in stages that each fit a job of
# 10 minutes (each is planned for under 8 on a 16-core H100 machine, and
# stops starting new work when its budget, STAGE_BUDGET_S, is spent):
#
#   build     the CUDA build (from bundle/ where there are no Debian packages),
#             machine code for the GPUs nvidia-smi lists alone (GPU_ARCHS=90
#             chooses; without a GPU and without it, every architecture)
#             and the GPU test suite alone: every kernel against its CPU twin,
#             replicas against CPU devices, graphs against queued kernels
#   sanitize  compute-sanitizer memcheck, racecheck, initcheck and synccheck
#             on tiny training runs (1 and 2 replicas, graphs and not, and a
#             GPU beside a CPU device)
#   train     resume on 2 replicas with and without graphs (byte-identical),
#             --breakdown on GPU replicas, the classroom runs, mixed runs (a
#             GPU beside a CPU device, --split auto), ring, nccl and
#             --overlap runs, inspect, the demos and `dptrain devices`
#   bench     the trainer's CUDA launchers and every version of dev/cuda/
#             beside them, checked and timed (bench/kernel_bench), in FP32
#             and with --tf32; a LeNet and a ResNet-18
#             step's kernels by ncu, heaviest first (scripts/ncu_step.py,
#             tables in $LOGS/ncu-*.txt) and why LeNet's and ResNet-18's
#             GEMM products take their time (scripts/ncu_why.py); full
#             epochs, FP32 and
#             --tf32, against the PyTorch peer (bench/pytorch_lenet.py,
#             eager, torch.compile and one CUDA graph a step, FP32 and
#             TF32) in the same call; 1, 2 and 4 replicas
#             sharing the GPU, with and without --overlap; `dptrain compare
#             --gpus 1,2,4` and its plot;
#             `dptrain bench-allreduce` on 1, 2 and 4 replicas
#
#   quick     for a call of under 10 minutes on a fresh machine (planned
#             for 6 to 7 on an H200): the build and the GPU and dev test
#             suites, then what decides the next defaults: every version of
#             dev/cuda/ checked and timed against the trainer's kernel
#             (bench/kernel_bench --dev, FP32 and --tf32) and in whole
#             epochs against dptrain (bench/dev_epochs.sh), memcheck on a
#             tiny run with each; dptrain against the PyTorch peer's three
#             modes (eager, torch.compile, one CUDA graph a step); the
#             classroom pair; why LeNet's kernels and ResNet-18's GEMM
#             products take their time (ncu's occupancy, issue slots and
#             waits: scripts/ncu_why.py); a ResNet-18 step's kernels by ncu
#
#   usage: scripts/gpu.sh STAGE... | all        (e.g. scripts/gpu.sh build train)
#
# Knobs: GPU_ARCHS (above), STAGE_BUDGET_S (seconds a stage, default 450),
# EPOCHS and RESNET_EPOCHS (a bench run's epochs, 5 and 3), PYTORCH_COMPILE=0
# (the peer's torch.compile rows left out: they cost a minute each),
# UPDATE_DOCS=1 (quick writes its table against the PyTorch peer into
# docs/performance.md; it is in $LOGS/performance-gpu.md either way).
#
# Every stage builds first (with every version of dev/cuda/ as a dptrain of
# its own: -Ddev_candidate=all); the build is incremental, so on a warm machine
# (one still held from the previous call: build/ is git-ignored and stays
# there) it costs seconds, on a fresh one about a minute. The script says
# which it found.
#
# Logs: one file a stage in $LOGS, default build/gpu-logs. The end of the
# output is a summary, a line per check, that fits on a screen.
#
# On a machine without a GPU, `build` still builds and reports the GPU tests
# as skipped (exit 0).
# Where a GPU is visible (nvidia-smi lists one), a skipped GPU test fails.
set -uo pipefail
cd "$(dirname "$0")/.."

stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[[ ${stages[*]} == all ]] && stages=(build sanitize train bench)
for s in "${stages[@]}"; do
    [[ $s =~ ^(build|sanitize|train|bench|quick)$ ]] || { echo "scripts/gpu.sh: unknown stage '$s' (build, sanitize, train, bench, quick or all)" >&2; exit 2; }
done

# --allreduce nccl loads libnccl.so.2 at run time. A machine with none on the
# loader's path may still have one from its PyTorch wheel: use it.
if [[ $(ldconfig -p 2>/dev/null) != *libnccl.so.2* ]]; then
    nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
    [[ -n $nccl_dir && -e $nccl_dir/libnccl.so.2 ]] && export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

logs=${LOGS:-build/gpu-logs}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
budget_s=${STAGE_BUDGET_S:-450}  # per stage: no new run starts past this
summary=()
status=0
note() { summary+=("$*"); echo "$*"; }
ok() { note "ok    $*"; }
fail() { note "FAIL  $*"; status=1; }
# Tails of a failed run's log go into the stage log and the output.
show_tail() { echo "---- last lines of $1:"; tail -n "${2:-15}" "$1"; echo "----"; }

stage_start=0
begin_stage() {
    stage_start=$SECONDS
    log=$logs/$1.log
    : >"$log"
    echo
    echo "======== stage $1 ========"
}
over_budget() {
    if ((SECONDS - stage_start > budget_s)); then
        note "skip  $1: the stage's ${budget_s} s budget is spent"
        return 0
    fi
    return 1
}

gpu_visible() { command -v nvidia-smi >/dev/null && [[ $(nvidia-smi -L 2>/dev/null) == *GPU\ * ]]; }
gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; }
# Whether meson found MPI for the build in $dir.
mpi_build() { grep -qE '^Dependency mpi found: YES' "$dir/meson-logs/meson-log.txt" 2>/dev/null; }

find_data() {
    for d in data/fashion-mnist /usr/share/datasets/fashion-mnist; do [[ -e $d ]] && { echo "$d"; return; }; done
    echo ""
}

# The CUDA build in build/ (or $DPTRAIN_BUILD_DIR), as scripts/build.sh makes
# it, but with machine code for this machine's GPUs alone (about half of
# nvcc's time): their compute capabilities as nvidia-smi gives them, or $GPU_ARCHS
# (e.g. 90; -Dgpu_archs), or without either the fat binary of every
# architecture.
dir=${DPTRAIN_BUILD_DIR:-build}
gpu_archs() {
    if [[ -n ${GPU_ARCHS:-} ]]; then echo "$GPU_ARCHS"; return; fi
    scripts/gpu_archs.sh
}
ensure_build() {
    local started=$SECONDS
    if ! scripts/deps.sh >>"$log" 2>&1; then
        fail "dependencies: $(tail -1 "$log")"
        return 1
    fi
    local found="configured afresh"
    [[ -f $dir/build.ninja ]] && found="reused from an earlier call on this machine"
    local archs setup=(-Dcuda=enabled -Ddev_candidate=all)
    archs=$(gpu_archs)
    [[ -n $archs ]] && setup+=("-Dgpu_archs=$archs")
    if ! DPTRAIN_BUILD_DIR=$dir scripts/build.sh "${setup[@]}" >>"$log" 2>&1; then
        fail "CUDA build in $dir/ ($found): see $log"
        show_tail "$log" 25
        return 1
    fi
    if [[ ! -x $dir/tests/gpu/gpu_tests ]]; then
        fail "$dir/ has no CUDA backend (configured without nvcc?); remove $dir/ and run again"
        return 1
    fi
    note "info  $dir/: $found; built in $((SECONDS - started)) s, machine code for $(
        [[ -n $archs ]] && echo "sm_${archs//,/, sm_}" || echo "every architecture (sm_75, sm_80, sm_90)")"
    # What an offline bundle of Open MPI would have to match (multi-process runs).
    note "info  system: $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || uname -sr), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}'), mpirun: $(command -v mpirun || echo none), $(mpi_build && echo "an MPI build" || echo "no MPI in this build")"
}

stage_build() {
    begin_stage build
    ensure_build || return
    gpu_test_suite
}

# The GPU test suite, a line each test in the summary.
gpu_test_suite() {
    local started=$SECONDS
    meson test -C "$dir" --suite gpu --suite dev --print-errorlogs >>"$log" 2>&1
    local tests_status=$?
    # One line a test from meson's record: name, result, and the test's last line
    # ("N of M checks passed", or why it skipped).
    local name result last
    while IFS='|' read -r name result last; do
        case $result in
            OK) ok "$name: $last" ;;
            SKIP)
                if gpu_visible; then fail "$name skipped although nvidia-smi lists a GPU: $last"
                else note "skip  $name: $last"; fi ;;
            *) fail "$name: $result, $last (the failed checks are in $log)" ;;
        esac
    done < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    out = [l for l in (t.get("stdout") or "").splitlines() if l.strip()]
    print("%s|%s|%s" % (t["name"], t["result"], out[-1] if out else ""))' "$dir/meson-logs/testlog.json")
    grep -E '^FAIL ' "$log" | head -20
    [[ $tests_status -ne 0 ]] && status=1
    note "info  GPU tests took $((SECONDS - started)) s"
}

stage_sanitize() {
    begin_stage sanitize
    ensure_build || return
    local sanitizer
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [[ ! -x $sanitizer ]]; then fail "no compute-sanitizer (looked on PATH and in /usr/local/cuda/bin)"; return; fi
    # Tiny runs: 4 steps of 64 (racecheck checks every shared-memory access
    # of every GEMM tile, so it is the slow one: 2 steps).
    local tiny=(--epochs 1 --limit-train 256 --limit-test 64 --batch 64)
    local tinier=(--epochs 1 --limit-train 128 --limit-test 32 --batch 64)
    local runs=(
        "memcheck|--gpus 1 ${tiny[*]}"
        "memcheck|--gpus 2 ${tiny[*]}"
        "memcheck|--gpus 2 --no-graphs ${tiny[*]}"
        "racecheck|--gpus 1 --no-graphs ${tinier[*]}"
        "racecheck|--gpus 2 ${tinier[*]}"
        "initcheck|--gpus 2 ${tiny[*]}"
        "synccheck|--gpus 2 --no-graphs ${tinier[*]}"
        "memcheck|--gpus 2 --overlap --bucket-kb 0 ${tiny[*]}"
        "racecheck|--gpus 2 --overlap --bucket-kb 0 --no-graphs ${tinier[*]}"
        "synccheck|--gpus 2 --overlap --no-graphs ${tinier[*]}"
        "memcheck|--gpus 1 --cpus 1 ${tiny[*]}"
        "racecheck|--gpus 1 --cpus 1 ${tinier[*]}"
    )
    local run
    for run in "${runs[@]}"; do
        over_budget "${run%%|*} dptrain ${run#*|}" && continue
        sanitize_run "$sanitizer" "${run%%|*}" "${run#*|}"
    done
}

# sanitize_run SANITIZER TOOL "DPTRAIN ARGS": one run under
# compute-sanitizer, a line in the summary.
sanitize_run() {  # SANITIZER TOOL ARGS [BINARY: default dptrain]
    local sanitizer=$1 tool=$2 args=$3 binary=${4:-$dir/dptrain} out=$logs/sanitize-run.tmp started=$SECONDS rc verdict
    local name=${binary##*/}
    # shellcheck disable=SC2086
    timeout 240 "$sanitizer" --tool "$tool" --error-exitcode 9 --print-limit 20 "$binary" $args >"$out" 2>&1
    rc=$?
    { echo "== compute-sanitizer --tool $tool $name $args (exit $rc, $((SECONDS - started)) s)"; cat "$out"; } >>"$log"
    verdict=$(grep -E '^========= (ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY)' "$out" | head -2 | sed 's/^========= //' | paste -sd';')
    if grep -qiE 'not supported|unable to|could not|refused' "$out" && ! grep -q '^epoch 1' "$out"; then
        fail "compute-sanitizer $tool refused here: $(grep -m1 -iE 'not supported|unable to|could not|refused' "$out")"
    elif [[ $rc -eq 124 ]]; then
        fail "$tool $name $args: over 240 s, stopped"
    elif [[ $rc -eq 0 ]]; then
        ok "$tool $name $args: ${verdict:-no errors} ($((SECONDS - started)) s)"
    else
        fail "$tool $name $args: exit $rc, ${verdict:-see $log}"
        show_tail "$out" 20
    fi
    rm -f "$out"
}

stage_train() {
    begin_stage train
    ensure_build || return
    local work=$dir/gpu-train
    rm -rf "$work" && mkdir -p "$work"
    local d=$dir/dptrain
    # Resume: 3 epochs straight against 1, then --resume to 3, byte for byte.
    local ck=(--gpus 2 --limit-train 4096 --limit-test 512 --batch 128 --seed 3)
    local graphs
    for graphs in "" --no-graphs; do
        over_budget "resume ${graphs:-(graphs)}" && continue
        local name="resume on 2 GPU replicas ${graphs:-with graphs}"
        {
            echo "== $name"
            "$d" "${ck[@]}" $graphs --epochs 3 --save "$work/whole.params" &&
                "$d" "${ck[@]}" $graphs --epochs 1 --checkpoint "$work/one.ck" &&
                "$d" --resume "$work/one.ck" $graphs --epochs 3 --save "$work/resumed.params"
        } >>"$log" 2>&1
        if [[ $? -ne 0 ]]; then fail "$name: a run failed"; show_tail "$log"
        elif cmp -s "$work/whole.params" "$work/resumed.params"; then ok "$name: 1 + resume to 3 epochs is byte-identical to 3"
        else fail "$name: the resumed parameters differ from the uninterrupted run's"; fi
    done
    # Full-data runs: the classroom pair, and --breakdown.
    local data
    data=$(find_data)
    local runs=(
        "--gpus 1 --batch 256 --lr 0.3 --epochs 3"
        "--gpus 2 --batch 512 --lr 0.6 --epochs 3"
        "--gpus 2 --batch 512 --lr 0.6 --epochs 2 --breakdown"
        "--gpus 2 --batch 512 --lr 0.6 --epochs 2 --no-graphs"
        "--gpus 1 --cpus 1 --batch 256 --epochs 1 --limit-train 12800 --breakdown"
        "--devices gpu:0,cpu:0 --batch 256 --epochs 1 --limit-train 12800 --split auto --breakdown"
        "--gpus 2 --batch 512 --lr 0.6 --epochs 2 --allreduce ring"
        "--gpus 2 --batch 512 --lr 0.6 --epochs 2 --overlap --breakdown"
        "--gpus 2 --batch 512 --lr 0.6 --epochs 2 --allreduce ring --overlap --bucket-kb 0"
        "--gpus 1 --cpus 1 --batch 256 --epochs 1 --limit-train 12800 --overlap --breakdown"
        "--gpus 1 --batch 256 --epochs 1 --allreduce nccl"
        "--model resnet18 --gpus 1 --batch 128 --lr 0.1 --epochs 2"
        "--model resnet18 --gpus 2 --batch 256 --lr 0.1 --epochs 2"
        "--model resnet18 --gpus 2 --batch 256 --lr 0.1 --epochs 1 --bn sync --limit-train 12800"
    )
    local args
    for args in "${runs[@]}"; do
        over_budget "dptrain $args" && continue
        # shellcheck disable=SC2086
        "$d" --data "$data" $args >"$work/run.log" 2>&1
        local rc=$?
        { echo "== dptrain $args (exit $rc)"; cat "$work/run.log"; } >>"$log"
        local last
        last=$(grep '^epoch ' "$work/run.log" | tail -1)
        if [[ $rc -ne 0 ]]; then fail "dptrain $args: exit $rc"; show_tail "$work/run.log"
        elif [[ $args == *--breakdown* ]] && ! grep -q '^  phases on gpu:0: split_and_load' "$work/run.log"; then
            fail "dptrain $args: no phase line"; show_tail "$work/run.log"
        else ok "dptrain $args: $last"; fi
        grep -E '^(devices|CUDA graph|note):' "$work/run.log" | head -3 | sed 's/^/      /'
        [[ $args == *--breakdown* ]] && grep '^  phases' "$work/run.log" | tail -1 | sed 's/^ */      /'
    done
    # Several processes on the one GPU (issue: past one machine), where this
    # machine has mpirun and the build found MPI: 5 steps of mpirun -np 2
    # --gpus 1 against --gpus 2 in one process, the sum through host memory
    # (--across mpi, and auto, which must fall back from NCCL and say why),
    # and --across nccl refused with the reason.
    if ! command -v mpirun >/dev/null || ! mpi_build; then
        note "skip  mpirun -np 2 --gpus 1: no mpirun here, or the build has no MPI"
    elif ! over_budget "mpirun -np 2 --gpus 1"; then
        local mpi=(mpirun --oversubscribe -np 2) five=(--data "$data" --epochs 1 --limit-train 640 --limit-test 64 --batch 128 --seed 5)
        [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
        "$d" --gpus 2 "${five[@]}" --save "$work/one.params" >>"$log" 2>&1
        local across
        for across in mpi auto; do
            "${mpi[@]}" "$d" --gpus 1 "${five[@]}" --across $across --save "$work/two.params" >"$work/run.log" 2>&1
            local rc=$?
            { echo "== mpirun -np 2 dptrain --gpus 1 --across $across (exit $rc)"; cat "$work/run.log"; } >>"$log"
            if [[ $rc -ne 0 ]]; then fail "mpirun -np 2 --gpus 1 --across $across: exit $rc"; show_tail "$work/run.log"; continue; fi
            [[ $across == auto ]] && { grep -q "not NCCL: ranks 0 and 1 both have their device 0 on" "$work/run.log" \
                || fail "mpirun -np 2 --gpus 1 --across auto: no note on why not NCCL"; }
            PYTHONPATH=$PWD/tests python3 - "$work/one.params" "$work/two.params" <<'PY' >>"$log" 2>&1 && ok "mpirun -np 2 --gpus 1 --across $across follows --gpus 2 for 5 steps (1e-5 of the largest weight)" || fail "mpirun -np 2 --gpus 1 --across $across differs from --gpus 2 (see $log)"
import sys
from params_file import floats
a, b = floats(sys.argv[1]), floats(sys.argv[2])
worst, scale = max(abs(x - y) for x, y in zip(a, b)), max(abs(x) for x in a)
print(f"largest difference {worst:.2e}, largest weight {scale:.3f}")
assert len(a) == len(b) and worst <= 1e-5 * scale
PY
        done
        "${mpi[@]}" "$d" --gpus 1 "${five[@]}" --across nccl >"$work/run.log" 2>&1
        local rc=$?
        { echo "== mpirun -np 2 dptrain --gpus 1 --across nccl (exit $rc)"; cat "$work/run.log"; } >>"$log"
        if [[ $rc -eq 2 ]] && grep -q "NCCL refuses two ranks on one GPU" "$work/run.log"; then ok "mpirun -np 2 --gpus 1 --across nccl: exit 2, $(grep -m1 -o 'ranks 0 and 1 both.*one GPU' "$work/run.log")"
        else fail "mpirun -np 2 --gpus 1 --across nccl: exit $rc, not the refusal"; show_tail "$work/run.log"; fi
    fi
    local cmd
    for cmd in "inspect --gpus 2" "inspect --gpus 3 --batch 7" "inspect --gpus 2 --perturb 1" \
               "inspect --gpus 2 --model resnet18 --bn local --batch 6" "inspect --gpus 2 --model resnet18 --bn sync --batch 6" \
               "demo allreduce --gpus 2" "demo allreduce --gpus 4 --size 3" "demo split --gpus 2"; do
        over_budget "dptrain $cmd" && continue
        local extra=()
        [[ $cmd == inspect* ]] && extra=(--data "$data")
        # shellcheck disable=SC2086
        "$d" $cmd "${extra[@]}" >"$work/run.log" 2>&1
        local rc=$?
        { echo "== dptrain $cmd (exit $rc)"; cat "$work/run.log"; } >>"$log"
        local verdict
        verdict=$(grep -E '^(inspect:|check )' "$work/run.log" | tail -1)
        if [[ $cmd == *--perturb* ]]; then
            # The nudged replica must be caught: exit 1 and the identity checks failed.
            if [[ $rc -eq 1 ]] && grep -q '^inspect: FAILED' "$work/run.log"; then ok "dptrain $cmd: caught ($verdict)"
            else fail "dptrain $cmd: exit $rc, the nudged replica went unnoticed"; show_tail "$work/run.log"; fi
        elif [[ $rc -eq 0 ]] && grep -qE '^(inspect: all|check ok)' "$work/run.log"; then ok "dptrain $cmd: $verdict"
        else fail "dptrain $cmd: exit $rc, $verdict"; show_tail "$work/run.log" 25; fi
    done
    if "$d" devices >"$work/run.log" 2>&1; then
        ok "dptrain devices"
        sed 's/^/      /' "$work/run.log"
    else
        fail "dptrain devices"; show_tail "$work/run.log"
    fi
    cat "$work/run.log" >>"$log"
}

# Median of the numbers on stdin after the first (the warm-up epoch); with
# only one number, that one.
median_after_first() {
    awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        first = NR > 1 ? 2 : 1; m = 0
        for (i = first; i <= NR; i++) w[++m] = v[i]
        for (i = 2; i <= m; i++) { x = w[i]; for (j = i - 1; j >= 1 && w[j] > x; j--) w[j + 1] = w[j]; w[j + 1] = x }
        print (m % 2 ? w[(m + 1) / 2] : (w[m / 2] + w[m / 2 + 1]) / 2) }'
}

# pytorch_epoch ARGS...: the PyTorch peer's median LeNet epoch after the
# first, in seconds, from its "epoch N time T s" lines (nan where it could
# not run), with the caller's $python, $data, $epochs and $work.
pytorch_epoch() {
    [[ -z $python ]] && { echo "nan"; return; }
    PYTHONUNBUFFERED=1 timeout 300 "$python" bench/pytorch_lenet.py --device cuda --data "$data" --batch 256 \
        --lr 0.3 --init xavier --epochs "$epochs" "$@" >"$work/pt.log" 2>&1
    cat "$work/pt.log" >>"$log"
    sed -nE 's/^epoch [0-9]+ time ([0-9.]+) s.*/\1/p' "$work/pt.log" | median_after_first
}

# kernel_bench_tables NAME KERNEL_BENCH_ARGS...: bench/kernel_bench in FP32
# and with --tf32 (on the tensor cores, against the CPU twin's TF32-rounded
# operands), tables in $logs/kernel-bench[NAME][-tf32].txt.
kernel_bench_tables() {
    local name=$1 math table
    shift
    for math in "" --tf32; do
        table=$logs/kernel-bench$name${math:+-tf32}.txt
        if "$dir/bench/kernel_bench" "$@" $math >"$table" 2>&1; then
            cat "$table"
            ok "kernel_bench $* $math: $(grep -c ' ok ' "$table") kernels checked and timed (table in $table)"
        else
            fail "kernel_bench $* $math: a kernel failed its check or could not run"; show_tail "$table"
        fi
    done
}

# ncu_step NAME SKIP COUNT NCU_STEP_ARGS -- DPTRAIN_ARGS...: a step's
# kernels by Nsight Compute, heaviest first (scripts/ncu_step.py; tables in
# $logs/ncu-NAME.txt), from the caller's $work, $data and stage budget.
ncu_step() {
    local name=$1 skip=$2 count=$3 step_args=$4 ncu_rc ncu
    shift 5
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
    if [[ -z $ncu ]]; then
        note "skip  ncu $name: not on PATH or in /usr/local/cuda/bin"; return
    fi
    over_budget "ncu $name" && return
    timeout 300 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip "$skip" \
        --launch-count "$count" --log-file "$work/ncu-$name.csv" "$dir/dptrain" --data "$data" --epochs 1 \
        --limit-test 256 --no-graphs "$@" >"$work/ncu-$name.log" 2>&1
    ncu_rc=$?
    cat "$work/ncu-$name.log" >>"$log"
    cp "$work/ncu-$name.csv" "$logs/ncu-$name.csv" 2>/dev/null
    if [[ $ncu_rc -ne 0 ]]; then
        note "skip  ncu $name could not profile here (exit $ncu_rc): $(cat "$work/ncu-$name.log" \
            "$work/ncu-$name.csv" 2>/dev/null | grep -m1 -iE 'error|fail' || echo 'no message')"
    elif python3 scripts/ncu_step.py $step_args "$work/ncu-$name.csv" >"$logs/ncu-$name.txt" 2>&1; then
        cat "$logs/ncu-$name.txt" >>"$log"
        head -n 27 "$logs/ncu-$name.txt"  # the 25 heaviest
        ok "ncu $name: $(head -1 "$logs/ncu-$name.txt") (table in $logs/ncu-$name.txt)"
    else
        fail "scripts/ncu_step.py $name: $(tail -1 "$logs/ncu-$name.txt")"
    fi
}

# ncu_why NAME SKIP COUNT [NCU_ARGS...] -- DPTRAIN_ARGS...: why each kernel of a step
# takes its time, from Nsight Compute's sections (occupancy, issue slots,
# the reasons warps wait; scripts/ncu_why.py; the table in
# $logs/ncu-why-NAME.txt, the report beside it for Nsight Compute's UI),
# from the caller's $work, $data and stage budget. Each kernel is replayed
# once a section pass, so COUNT stays small: a step or two. NCU_ARGS
# (e.g. --kernel-name regex:gemm) choose the kernels; SKIP and COUNT then
# count the launches they choose.
ncu_why() {
    local name=$1 skip=$2 count=$3 ncu_rc ncu ncu_args=()
    shift 3
    while [[ $# -gt 0 && $1 != -- ]]; do ncu_args+=("$1"); shift; done
    shift
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
    if [[ -z $ncu ]]; then
        note "skip  ncu why $name: not on PATH or in /usr/local/cuda/bin"; return
    fi
    over_budget "ncu why $name" && return
    # At most 4 minutes, and no more than 2 past the stage's budget.
    local limit=$((budget_s + 120 - (SECONDS - stage_start)))
    ((limit > 240)) && limit=240
    timeout "$limit" "$ncu" --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section SchedulerStats --section WarpStateStats --metrics gpu__time_duration.sum "${ncu_args[@]}" \
        --launch-skip "$skip" --launch-count "$count" --export "$work/why-$name" --force-overwrite \
        "$dir/dptrain" --data "$data" --epochs 1 --limit-test 256 --no-graphs "$@" >"$work/why-$name.log" 2>&1
    ncu_rc=$?
    cat "$work/why-$name.log" >>"$log"
    if [[ $ncu_rc -ne 0 || ! -s $work/why-$name.ncu-rep ]]; then
        note "skip  ncu why $name could not profile here (exit $ncu_rc): $(grep -m1 -iE 'error|fail' \
            "$work/why-$name.log" || echo 'no message')"
        return
    fi
    cp "$work/why-$name.ncu-rep" "$logs/ncu-why-$name.ncu-rep"
    "$ncu" --import "$work/why-$name.ncu-rep" --page raw --csv >"$logs/ncu-why-$name.csv" 2>>"$log"
    if python3 scripts/ncu_why.py "$logs/ncu-why-$name.csv" >"$logs/ncu-why-$name.txt" 2>&1; then
        tee -a "$log" <"$logs/ncu-why-$name.txt"
        ok "ncu why $name: $(head -1 "$logs/ncu-why-$name.txt") (table in $logs/ncu-why-$name.txt)"
    else
        fail "scripts/ncu_why.py $name: $(tail -1 "$logs/ncu-why-$name.txt")"
    fi
}

stage_bench() {
    begin_stage bench
    ensure_build || return
    local epochs=${EPOCHS:-5} data gpu python=""
    data=$(find_data)
    gpu=$(gpu_name)
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch' 2>/dev/null && { python=$p; break; }; done
    local work=$dir/gpu-bench
    rm -rf "$work" && mkdir -p "$work"
    note "info  ${gpu:-no GPU name}; $epochs epochs a run, the median of epochs 2..$epochs; data $data"

    # First, the trainer's launchers and every dev version beside them,
    # checked against the CPU twin and timed at LeNet's and ResNet-18's layer
    # shapes (bench/kernel_bench.cpp), FP32 and --tf32.
    kernel_bench_tables "" --batch 256

    # A step's kernels by Nsight Compute, heaviest first: each kernel alone
    # with the caches flushed, so a ranking, not the step's time
    # (scripts/ncu_step.py). LeNet's 80 launches hold 6 steps; ResNet-18's
    # 450 about 2, each GEMM layer on a row of its own (--by-grid). Where
    # ncu cannot read this GPU's counters (some virtual machines), it says
    # so and the stage goes on.
    ncu_step lenet 200 80 "" -- --gpus 1 --batch 256 --limit-train 25600
    ncu_step resnet18 500 450 --by-grid -- --model resnet18 --gpus 1 --batch 256 --limit-train 12800
    # Why: two LeNet steps' kernels, FP32 and --tf32, and a ResNet-18
    # step's GEMM products, by the reasons their warps wait
    # (scripts/ncu_why.py).
    ncu_why lenet 200 20 -- --gpus 1 --batch 256 --limit-train 25600
    ncu_why lenet-tf32 200 20 -- --gpus 1 --batch 256 --limit-train 25600 --tf32
    ncu_why resnet18-gemm 80 40 --kernel-name regex:gemm -- --model resnet18 --gpus 1 --batch 256 --limit-train 12800

    # dptrain ARGS...: the median epoch seconds, from --metrics.
    dptrain_epoch() {
        "$dir/dptrain" --data "$data" --batch 256 --lr 0.3 --epochs "$epochs" --metrics "$work/m.jsonl" "$@" >>"$log" 2>&1 ||
            { echo "nan"; return; }
        sed -E 's/.*"train_time_s": ?([0-9.]+).*/\1/' "$work/m.jsonl" | median_after_first
    }
    local t_graph t_eager t_tf32 t_pt t_ptc t_ptg t_pt32 t_ptc32 t_ptg32 t_r2 t_r4 t_o2 t_o4 t_o2b0
    echo "== dptrain --gpus 1" >>"$log"; t_graph=$(dptrain_epoch --gpus 1)
    echo "== dptrain --gpus 1 --tf32" >>"$log"; t_tf32=$(dptrain_epoch --gpus 1 --tf32)
    echo "== dptrain --gpus 1 --no-graphs" >>"$log"; t_eager=$(dptrain_epoch --gpus 1 --no-graphs)
    echo "== PyTorch eager" >>"$log"; t_pt=$(pytorch_epoch)
    echo "== PyTorch eager --tf32" >>"$log"; t_pt32=$(pytorch_epoch --tf32)
    echo "== PyTorch CUDA graph" >>"$log"; t_ptg=$(pytorch_epoch --graph)
    echo "== PyTorch CUDA graph --tf32" >>"$log"; t_ptg32=$(pytorch_epoch --graph --tf32)
    # torch.compile spends about a minute compiling each run: PYTORCH_COMPILE=0
    # leaves it out where the call is short of time.
    t_ptc=skip t_ptc32=skip
    if [[ ${PYTORCH_COMPILE:-1} != 0 ]]; then
        echo "== PyTorch torch.compile" >>"$log"; t_ptc=$(pytorch_epoch --compile)
        echo "== PyTorch torch.compile --tf32" >>"$log"; t_ptc32=$(pytorch_epoch --compile --tf32)
    elif [[ -n $python ]]; then
        note "skip  PyTorch torch.compile: PYTORCH_COMPILE=0"
    fi
    echo "== dptrain --gpus 2" >>"$log"; t_r2=$(dptrain_epoch --gpus 2)
    echo "== dptrain --gpus 4" >>"$log"; t_r4=$(dptrain_epoch --gpus 4)
    echo "== dptrain --gpus 2 --overlap" >>"$log"; t_o2=$(dptrain_epoch --gpus 2 --overlap)
    echo "== dptrain --gpus 2 --overlap --bucket-kb 0" >>"$log"; t_o2b0=$(dptrain_epoch --gpus 2 --overlap --bucket-kb 0)
    echo "== dptrain --gpus 4 --overlap" >>"$log"; t_o4=$(dptrain_epoch --gpus 4 --overlap)
    [[ -z $python ]] && note "skip  PyTorch peer: no python3 with torch here"

    row() {
        awk -v name="$1" -v t="$2" -v ref="${3:-nan}" -v refname="${4:-}" 'BEGIN {
            if (t == "nan" || t == "skip") { printf "%-34s %10s\n", name, t == "nan" ? "failed" : "not run"; exit }
            printf "%-34s %10.1f %12.0f", name, t * 1000, 60000 / t
            if (ref != "nan" && ref != "skip" && ref > 0) printf "  %6.2fx %s", t / ref, refname
            printf "\n" }'
    }
    {
        echo
        echo "LeNet, Fashion-MNIST, batch 256, one ${gpu:-GPU} (epoch: median of epochs 2..$epochs)"
        printf '%-34s %10s %12s  %s\n' "run" "epoch (ms)" "samples/s" "epoch time relative to"
        row "dptrain --gpus 1 (CUDA graph)" "$t_graph" "$t_pt" "PyTorch eager"
        row "dptrain --gpus 1 --no-graphs" "$t_eager" "$t_pt" "PyTorch eager"
        row "dptrain --gpus 1 --tf32" "$t_tf32" "$t_pt32" "PyTorch eager, TF32"
        row "PyTorch eager, FP32" "$t_pt"
        row "PyTorch torch.compile, FP32" "$t_ptc" "$t_pt" "PyTorch eager"
        row "PyTorch eager, TF32" "$t_pt32" "$t_pt" "PyTorch eager"
        row "PyTorch torch.compile, TF32" "$t_ptc32" "$t_pt" "PyTorch eager"
        row "PyTorch CUDA graph, FP32" "$t_ptg" "$t_pt" "PyTorch eager"
        row "PyTorch CUDA graph, TF32" "$t_ptg32" "$t_pt" "PyTorch eager"
        row "dptrain vs torch.compile" "$t_graph" "$t_ptc" "torch.compile"
        row "dptrain vs PyTorch's CUDA graph" "$t_graph" "$t_ptg" "PyTorch CUDA graph"
        row "dptrain --tf32 vs its CUDA graph" "$t_tf32" "$t_ptg32" "PyTorch CUDA graph, TF32"
        echo
        echo "Replicas sharing the GPU, global batch 256"
        row "1 replica (256 a replica)" "$t_graph" "$t_graph" "1 replica"
        row "2 replicas (128 each)" "$t_r2" "$t_graph" "1 replica"
        row "4 replicas (64 each)" "$t_r4" "$t_graph" "1 replica"
        row "2 replicas --overlap" "$t_o2" "$t_r2" "2 replicas"
        row "2 replicas --overlap --bucket-kb 0" "$t_o2b0" "$t_r2" "2 replicas"
        row "4 replicas --overlap" "$t_o4" "$t_r4" "4 replicas"
    } | tee -a "$log"
    # dptrain simulate against those replicas (they share one GPU: --cores 1),
    # and its prediction for 8 GPUs of this kind over NVLink and PCIe.
    if "$dir/dptrain" simulate --gpus 4 --link measured --cores 1 --out "$work/sim" >"$work/sim.log" 2>&1; then
        sed -n '1,4p' "$work/sim.log"
        awk -F, -v r2="$t_r2" -v r4="$t_r4" -v o2="$t_o2" -v o4="$t_o4" '
            $1 == 2 && $2 == "naive" && $3 == 0 { m = r2 } $1 == 2 && $2 == "naive" && $3 == 1 { m = o2 }
            $1 == 4 && $2 == "naive" && $3 == 0 { m = r4 } $1 == 4 && $2 == "naive" && $3 == 1 { m = o4 }
            m != "" { if (m != "nan") printf "simulate: %s replicas %s overlap: predicted %.3f s, measured %.3f s (%+.0f%%)\n", $1, ($3 ? "with" : "without"), $8, m, 100 * ($8 - m) / m; m = "" }' \
            "$work/sim/simulate.csv" | tee -a "$log"
        ok "dptrain simulate --gpus 4 --link measured --cores 1"
    else
        fail "dptrain simulate --gpus 4"; show_tail "$work/sim.log"
    fi
    cat "$work/sim.log" >>"$log"
    for link in nvlink pcie; do
        "$dir/dptrain" simulate --gpus 8 --link "$link" >"$work/sim.log" 2>&1 && grep -E '^ +8 ' "$work/sim.log" | sed "s/^/$link /" | tee -a "$log" \
            || { fail "dptrain simulate --gpus 8 --link $link"; show_tail "$work/sim.log"; }
    done
    for t in "$t_graph" "$t_eager" "$t_tf32" "$t_r2" "$t_r4" "$t_o2" "$t_o2b0" "$t_o4"; do [[ $t == nan ]] && fail "a dptrain benchmark run failed: see $log"; done
    awk -v t="$t_graph" -v pt="$t_pt" -v ptc="$t_ptc" -v ptg="$t_ptg" -v t32="$t_tf32" 'BEGIN {
        if (t == "nan") exit
        printf "info  goals: epoch %.1f ms (goal <= 45 in FP32)", t * 1000
        if (t32 != "nan") printf ", %.1f ms with --tf32 (goal <= 25)", t32 * 1000
        if (pt != "nan") printf ", %.2fx PyTorch eager (goal <= 0.5)", t / pt
        if (ptc != "nan" && ptc != "skip") printf ", %.2fx torch.compile (goal <= 1.0)", t / ptc
        if (ptg != "nan") printf ", %.2fx PyTorch as one CUDA graph a step", t / ptg
        printf "\n" }' | while read -r line; do note "$line"; done

    local plotter=""
    for p in python3 /usr/bin/python3; do "$p" -c 'import matplotlib' 2>/dev/null && { plotter=$p; break; }; done
    # The classroom comparison on this GPU, with its plot.
    if ! over_budget "compare --gpus 1,2,4"; then
        if "$dir/dptrain" compare --gpus 1,2,4 --data "$data" --batch 256 --lr 0.3 --epochs "$epochs" --out "$logs" \
            >"$work/compare.log" 2>&1; then
            sed -n '/^compare:/,$p' "$work/compare.log"
            ok "dptrain compare --gpus 1,2,4: $logs/compare.json"
        else
            fail "dptrain compare --gpus 1,2,4"; show_tail "$work/compare.log"
        fi
        cat "$work/compare.log" >>"$log"
        rm -f "$logs/compare.csv"  # compare.json holds the same; keep the log folder small
        if [[ -n $plotter && -f $logs/compare.json ]]; then
            "$plotter" scripts/plot.py "$logs/compare.json" -o "$logs/compare.png" --title "${gpu:-GPU}" >>"$log" 2>&1 &&
                ok "plot: $logs/compare.png" || fail "plot.py: see $log"
        else
            note "skip  plot: no python3 with matplotlib"
        fi
    fi
    # ResNet-18 (issue: the model where N devices pay off): the tutorial's
    # batch 128 on one replica against PyTorch eager, then 1, 2 and 4
    # replicas at batch 256 with each allreduce. 3 epochs a run.
    if ! over_budget "resnet18"; then
        local r_epochs=${RESNET_EPOCHS:-3}
        resnet_epoch() {
            "$dir/dptrain" --model resnet18 --data "$data" --lr 0.1 --epochs "$r_epochs" --metrics "$work/m.jsonl" "$@" \
                >>"$log" 2>&1 || { echo "nan"; return; }
            sed -E 's/.*"train_time_s": ?([0-9.]+).*/\1/' "$work/m.jsonl" | median_after_first
        }
        local r1 rpt rn
        echo "== dptrain --model resnet18 --gpus 1 --batch 128" >>"$log"; r1=$(resnet_epoch --gpus 1 --batch 128)
        rpt=nan
        if [[ -n $python ]]; then
            PYTHONUNBUFFERED=1 timeout 300 "$python" bench/pytorch_lenet.py --model resnet18 --device cuda --data "$data" \
                --batch 128 --lr 0.1 --epochs "$r_epochs" >"$work/pt.log" 2>&1
            cat "$work/pt.log" >>"$log"
            rpt=$(sed -nE 's/^epoch [0-9]+ time ([0-9.]+) s.*/\1/p' "$work/pt.log" | median_after_first)
        fi
        {
            echo
            echo "ResNet-18, batch 128, one ${gpu:-GPU} (the tutorial's GPU: 15.5 s an epoch; median of epochs 2..$r_epochs)"
            row "dptrain --model resnet18 --gpus 1" "$r1" "$rpt" "PyTorch eager"
            row "PyTorch eager, resnet18" "$rpt"
            echo "ResNet-18, global batch 256, replicas sharing the GPU"
        } | tee -a "$log"
        local n algo
        for n in 1 2 4; do
            for algo in naive ring; do
                [[ $n == 1 && $algo == ring ]] && continue
                over_budget "resnet18 --gpus $n --allreduce $algo" && continue
                echo "== dptrain --model resnet18 --gpus $n --batch 256 --allreduce $algo --breakdown" >>"$log"
                rn=$(resnet_epoch --gpus "$n" --batch 256 --allreduce "$algo" --breakdown)
                row "$n replica(s), --allreduce $algo" "$rn" | tee -a "$log"
                grep '^  phases' "$log" | tail -1 | sed 's/^ */      /'
            done
        done
        [[ $r1 == nan ]] && fail "dptrain --model resnet18 --gpus 1: see $log"
    fi
    # Each allreduce by message size: naive and ring on 2 and 4 replicas, and
    # NCCL where it can run (one replica per GPU).
    local n
    for n in 1 2 4; do
        over_budget "bench-allreduce --gpus $n" && continue
        mkdir -p "$logs/allreduce-$n"
        if "$dir/dptrain" bench-allreduce --gpus "$n" --out "$logs/allreduce-$n" >"$work/ba.log" 2>&1; then
            sed -n '/^bench-allreduce on/,$p' "$work/ba.log"
            ok "dptrain bench-allreduce --gpus $n: $(grep -c , "$logs/allreduce-$n/bench-allreduce.csv") rows"
            [[ -n $plotter ]] && "$plotter" scripts/plot.py "$logs/allreduce-$n" >>"$log" 2>&1
        else
            fail "dptrain bench-allreduce --gpus $n"; show_tail "$work/ba.log"
        fi
        cat "$work/ba.log" >>"$log"
    done
}

stage_quick() {
    begin_stage quick
    ensure_build || return
    gpu_test_suite
    if ! gpu_visible; then
        note "skip  the quick stage's timings, sanitizers and profile: nvidia-smi lists no GPU"
        return
    fi
    local data work=$dir/gpu-quick python="" epochs=5
    data=$(find_data)
    rm -rf "$work" && mkdir -p "$work"
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch' 2>/dev/null && { python=$p; break; }; done
    note "info  $(gpu_name); data $data"
    # Every version of dev/cuda/ beside the trainer's launcher it stands in
    # for, checked and timed, FP32 and --tf32; then in whole epochs against
    # dptrain (the median of 2 runs in turns, each the median of epochs 2 to 4).
    kernel_bench_tables -dev --dev --batch 256
    if ! over_budget "bench/dev_epochs.sh"; then
        if bench/dev_epochs.sh "$dir" 2 4 >"$logs/dev-epochs.txt" 2>&1; then
            cat "$logs/dev-epochs.txt"
            ok "bench/dev_epochs.sh: $(grep -cE ' [0-9.]+x$' "$logs/dev-epochs.txt") versions timed in whole epochs (table in $logs/dev-epochs.txt)"
        else
            fail "bench/dev_epochs.sh"; show_tail "$logs/dev-epochs.txt"
        fi
    fi
    # Each version under memcheck: one tiny run of its model.
    local sanitizer
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [[ ! -x $sanitizer ]]; then
        note "skip  sanitizers: no compute-sanitizer"
    else
        local id options
        while IFS='|' read -r id _ _ options _; do
            [[ $id =~ ^[[:space:]]*(#|$) ]] && continue
            read -r id <<<"$id"
            read -r options <<<"$options"
            [[ $options == - || ! -x $dir/dev/cuda/dptrain-${id//\//-} ]] && continue
            over_budget "memcheck $id" && continue
            sanitize_run "$sanitizer" memcheck "--data $data $options --gpus 1 --epochs 1 --limit-train 64 --limit-test 32 --batch 32" \
                "$dir/dev/cuda/dptrain-${id//\//-}"
        done <dev/cuda/versions.txt
    fi
    # dptrain against the PyTorch peer's three modes (eager, torch.compile,
    # the whole step as one CUDA graph), FP32, LeNet at batch 256.
    if ! over_budget "the PyTorch peer"; then
        local t_d t_pt t_ptc=skip t_ptg
        "$dir/dptrain" --data "$data" --gpus 1 --batch 256 --lr 0.3 --epochs "$epochs" --metrics "$work/m.jsonl" \
            >>"$log" 2>&1 && t_d=$(sed -E 's/.*"train_time_s": ?([0-9.]+).*/\1/' "$work/m.jsonl" | median_after_first) \
            || t_d=nan
        t_pt=$(pytorch_epoch)
        t_ptg=$(pytorch_epoch --graph)
        [[ ${PYTORCH_COMPILE:-1} != 0 ]] && t_ptc=$(pytorch_epoch --compile)
        if [[ -z $python ]]; then
            note "skip  the PyTorch peer: no python3 with torch here"
        else
            awk -v d="$t_d" -v e="$t_pt" -v c="$t_ptc" -v g="$t_ptg" 'function ms(t) { return t == "nan" ? "failed" : t == "skip" ? "not run" : sprintf("%.1f ms", t * 1000) }
                function x(t) { return (t == "nan" || t == "skip" || d == "nan") ? "" : sprintf(" (dptrain %.2fx)", d / t) }
                BEGIN { printf "info  LeNet epoch, batch 256, FP32: dptrain %s; PyTorch eager %s%s, torch.compile %s%s, one CUDA graph a step %s%s\n",
                    ms(d), ms(e), x(e), ms(c), x(c), ms(g), x(g) }' | while read -r line; do note "$line"; done
            [[ $t_d == nan || $t_pt == nan || $t_ptg == nan || $t_ptc == nan ]] && fail "a run against the PyTorch peer failed: see $log"
            # The same as docs/performance.md's GPU table (<!-- gpu -->): in
            # $logs/performance-gpu.md, and with UPDATE_DOCS=1 in the page.
            awk -v d="$t_d" -v e="$t_pt" -v c="$t_ptc" -v g="$t_ptg" -v gpu="$(gpu_name)" -v epochs="$epochs" \
                -v when="$(date +%Y-%m-%d)" -v commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
                -v torch="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)" '
                function ms(t) { return t == "nan" ? "failed" : t == "skip" ? "not run" : sprintf("%.1f", t * 1000) }
                function x(t) { return (t == "nan" || t == "skip" || d == "nan") ? "" : sprintf("%.2fx", d / t) }
                BEGIN {
                    print "| LeNet epoch, batch 256, FP32, one GPU | epoch (ms) | dptrain against it |"
                    print "| --- | ---: | ---: |"
                    printf "| dptrain | %s | |\n", ms(d)
                    printf "| PyTorch %s, eager | %s | %s |\n", torch, ms(e), x(e)
                    printf "| PyTorch, torch.compile | %s | %s |\n", ms(c), x(c)
                    printf "| PyTorch, the step as one CUDA graph | %s | %s |\n", ms(g), x(g)
                    print ""
                    printf "%s, %s, commit %s; `UPDATE_DOCS=1 scripts/gpu.sh quick` (the median epoch after the first of %s, each).\n", gpu, when, commit, epochs
                }' >"$logs/performance-gpu.md"
            if [[ ${UPDATE_DOCS:-0} == 1 ]]; then
                scripts/update_docs.py gpu <"$logs/performance-gpu.md" && ok "docs/performance.md: the GPU table rewritten"
            fi
        fi
    fi
    # The classroom pair: 2 replicas sharing this GPU, the test accuracy.
    if ! over_budget "classroom pair"; then
        if "$dir/dptrain" --data "$data" --gpus 2 --batch 512 --lr 0.6 --epochs 4 >"$work/classroom.log" 2>&1; then
            ok "dptrain --gpus 2 --batch 512 --lr 0.6 --epochs 4: $(tail -1 "$work/classroom.log")"
        else
            fail "the classroom pair"; show_tail "$work/classroom.log"
        fi
        cat "$work/classroom.log" >>"$log"
    fi
    # Why the kernels take their time: two LeNet steps' and a ResNet-18
    # step's GEMM products (about 40 launches a step: the third step's),
    # then where a ResNet-18 step's time goes.
    ncu_why lenet 200 20 -- --gpus 1 --batch 256 --limit-train 25600
    ncu_why resnet18-gemm 80 40 --kernel-name regex:gemm -- --model resnet18 --gpus 1 --batch 256 --limit-train 12800
    ncu_step resnet18 500 450 --by-grid -- --model resnet18 --gpus 1 --batch 256 --limit-train 12800
}

for s in "${stages[@]}"; do "stage_$s"; done
echo
echo "======== summary: scripts/gpu.sh ${stages[*]} ($SECONDS s; logs in $logs) ========"
printf '%s\n' "${summary[@]}"
exit $status
