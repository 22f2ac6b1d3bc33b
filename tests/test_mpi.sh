#!/usr/bin/env bash
# dptrain under mpirun, on CPU devices, on this one machine. Usage:
#   test_mpi.sh DPTRAIN quick|slow   (a build with MPI: quick in CI, slow with scripts/test.sh --slow)
#   test_mpi.sh DPTRAIN refuses      (a build without MPI: it must refuse a job of several processes)
# quick: P processes follow one process with as many devices (5 steps, within
# 1e-5 of the largest weight); a resumed run and a run stopped by SIGTERM
# and resumed equal an uninterrupted one byte for byte; a killed rank and a
# hung rank end the job; bad input or other options on one rank exit 2 on all.
# slow: whole epochs, 2 processes against 1 process with 2 devices.
set -uo pipefail
dptrain=$1 mode=$2
tmp=$(mktemp -d)
nodes=()  # network namespaces made by two_nodes, removed at the end
# children PID: the pids of PID's children, read from /proc (no procps needed).
children() {
    local stat rest
    for stat in /proc/[0-9]*/stat; do
        read -r rest <"$stat" 2>/dev/null || continue
        rest=${rest##*) }  # past "pid (command) ": state, then the parent's pid
        rest=${rest#* }
        [[ ${rest%% *} == "$1" ]] && { stat=${stat#/proc/}; echo "${stat%/stat}"; }
    done
    return 0
}
cleanup() {
    local child
    for child in $(children $$); do kill -9 "$child" 2>/dev/null; done
    local n
    for n in "${nodes[@]}"; do ip netns del "$n" 2>/dev/null; done
    [[ ${#nodes[@]} -gt 0 ]] && ip link del "dpb$$" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # params_file.py

if [[ $mode == refuses ]]; then
    # What mpirun -np 2 sets (Open MPI), without needing mpirun here.
    OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$dptrain" --cpus 1 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 2 ]] && grep -q "built without MPI" "$tmp/err" && grep -q "Open MPI" "$tmp/err" \
        && echo "ok: a build without MPI started as rank 0 of 2 exits 2: $(cat "$tmp/err")" \
        || fail "a build without MPI under mpirun: exit $rc, $(cat "$tmp/err")"
    OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 "$dptrain" --cpus 1 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 2 && ! -s $tmp/err ]] && echo "ok: and rank 1 exits 2 quietly (one message for the job)" \
        || fail "rank 1 of a build without MPI: exit $rc, $(cat "$tmp/err")"
    [[ $failures -eq 0 ]] && exit 0 || exit 1
fi

command -v mpirun >/dev/null || { echo "FAIL: mpirun is missing (scripts/deps.sh installs openmpi-bin)"; exit 1; }
# Oversubscribe: this machine may have fewer cores than the ranks; CI runs as root.
mpi=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)

# same_within SINGLE MULTI LABEL: the two --save files agree within 1e-5 of
# the largest weight.
same_within() {
    python3 - "$1" "$2" <<'PY' && echo "ok: $3" || fail "$3"
import sys
from params_file import floats
a, b = floats(sys.argv[1]), floats(sys.argv[2])
largest = max(abs(x) for x in a)
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"   largest difference {worst:.2e}, largest weight {largest:.3f}, over {len(a)} parameters")
assert len(a) == len(b) and worst <= 1e-5 * largest, worst
PY
}

# rank_pid MPIRUN_PID RANK: the pid of rank RANK of that mpirun's job,
# looked for over up to 10 s (a loaded machine once had none found at once);
# nothing, and a line on stderr naming mpirun's children, when there is none.
rank_pid() {
    local pid tries=100
    while ((tries-- > 0)); do
        for pid in $(children "$1"); do
            tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$pid"; return; }
        done
        sleep 0.1
    done
    echo "rank_pid: no rank $2 among the children of mpirun $1: $(for pid in $(children "$1"); do printf '%s %s;' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"; done)" >&2
}

# wait_for_line FILE TEXT SECONDS: until FILE holds TEXT.
wait_for_line() {
    local tries=$(($3 * 10))
    while ((tries-- > 0)); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

# two_nodes: two "machines" on this one, as network namespaces node 1 and 2
# (10.77.X.1 and .2 on a bridge, the host at .254), and what mpirun needs to
# use them from a hostfile: an rsh agent that runs its command in the
# namespace of the host it is given, where ssh would log in. Sets `hosts`
# and `remote` (mpirun's options); returns 1, saying why, where this
# machine cannot make namespaces (not root, no ip, a container without
# CAP_NET_ADMIN).
two_nodes() {
    local net=10.77.$(($$ % 250)) i
    command -v ip >/dev/null || { echo "no ip command (Debian: iproute2; scripts/deps.sh installs it)"; return 1; }
    [[ $(id -u) -eq 0 ]] || { echo "not root: network namespaces need root"; return 1; }
    ip link add "dpb$$" type bridge 2>"$tmp/ip.err" || { echo "ip link add: $(cat "$tmp/ip.err")"; return 1; }
    nodes=(dpt$$n1 dpt$$n2)
    ip addr add "$net.254/24" dev "dpb$$" && ip link set "dpb$$" up || return 1
    for i in 1 2; do
        { ip netns add "dpt$$n$i" && ip link add "dpv$$$i" type veth peer name eth0 netns "dpt$$n$i" &&
            ip link set "dpv$$$i" master "dpb$$" up && ip -n "dpt$$n$i" addr add "$net.$i/24" dev eth0 &&
            ip -n "dpt$$n$i" link set eth0 up && ip -n "dpt$$n$i" link set lo up; } 2>"$tmp/ip.err" ||
            { echo "ip netns: $(cat "$tmp/ip.err")"; return 1; }
    done
    printf '%s slots=1\n' "$net.1" "$net.2" >"$tmp/hosts"
    cat >"$tmp/agent" <<AGENT
#!/bin/sh
# mpirun's rsh agent: HOST COMMAND... -> COMMAND in HOST's namespace
host=\$1; shift
echo "\$host" >>"$tmp/agent.log"
exec ip netns exec "dpt$$n\${host##*.}" /bin/sh -c "\$*"
AGENT
    chmod +x "$tmp/agent"
    # (rtc_hwloc_vmhole none: a daemon on the same kernel as mpirun sometimes
    # crashed mapping mpirun's shared hwloc topology into its stack's range.
    # routed direct: on a loaded machine mpirun once found "no OOB path" to
    # the second node's daemon through its routing tree, and Open MPI's
    # message names this setting as the way round it.)
    remote=(--hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/agent" --mca oob_tcp_if_include "$net.0/24"
            --mca btl_tcp_if_include "$net.0/24" --mca btl tcp,self --mca rtc_hwloc_vmhole none --mca routed direct)
}

case $mode in
quick)
    # 5 steps of 128: a short horizon, before ReLU ties fork runs, compared tightly.
    five=(--epochs 1 --limit-train 640 --limit-test 128 --batch 128 --lr 0.3 --seed 4)
    "$dptrain" --cpus 2 "${five[@]}" --save "$tmp/one.params" >/dev/null || fail "--cpus 2 run failed"
    for across in mpi ring; do
        "${mpi[@]}" -np 2 "$dptrain" --cpus 1 "${five[@]}" --across $across --save "$tmp/two-$across.params" \
            --metrics "$tmp/m-$across.jsonl" --trace "$tmp/t-$across.json" >"$tmp/out" 2>"$tmp/err" || fail "mpirun -np 2 --cpus 1 --across $across: $(cat "$tmp/err")"
        # --trace: a file a rank, its device named by its rank.
        for r in 0 1; do
            python3 "$(dirname "$0")/check_trace.py" "$tmp/t-$across.json.rank$r" --devices 1 --steps 1-5 >"$tmp/check" \
                && grep -q "\"name\":\"rank $r cpu:0\"" "$tmp/t-$across.json.rank$r" \
                && echo "ok: --trace under mpirun, rank $r: $(cat "$tmp/check")" || fail "rank $r's trace: $(cat "$tmp/check")"
        done
        # Read together, the ranks' files are on one clock: no rank's sum ends before the other's backward.
        python3 "$(dirname "$0")/check_trace.py" "$tmp/t-$across.json.rank"{0,1} --devices 2 --steps 1-5 --one-clock >"$tmp/check" \
            && echo "ok: --trace under mpirun, the ranks' files together: $(cat "$tmp/check")" || fail "the ranks' traces together: $(cat "$tmp/check")"
        grep -qF "trace: $tmp/t-$across.json.rank0 to $tmp/t-$across.json.rank1, a file a process" "$tmp/out" \
            || fail "the banner does not name every rank's trace: $(grep '^trace' "$tmp/out")"
        grep -q '^processes: 2 (mpirun)' "$tmp/out" || fail "no processes line: $(cat "$tmp/out")"
        [[ $(grep -c '^epoch 1 ' "$tmp/out") -eq 1 ]] || fail "not one epoch line from rank 0 alone: $(cat "$tmp/out")"
        grep -qE '"devices": ?2, ?.*"processes": ?2, ?"across": ?"'$across'"' "$tmp/m-$across.jsonl" \
            || fail "metrics: $(cat "$tmp/m-$across.jsonl")"
        same_within "$tmp/one.params" "$tmp/two-$across.params" \
            "mpirun -np 2 --cpus 1 --across $across follows --cpus 2 for 5 steps (replicas checked bit for bit across ranks)"
    done

    # 4 devices in one process or in two sum in other orders (the other
    # comparisons above give the same bits): 2 steps, as rounding can flip a
    # ReLU input at its kink by the 5th (seed 4 does so on the AVX-512 build:
    # 5e-3 apart after 5 steps, 3e-8 after 4).
    two=(--epochs 1 --limit-train 256 --limit-test 128 --batch 128 --lr 0.3 --seed 4)
    "$dptrain" --cpus 4 "${two[@]}" --save "$tmp/four.params" >/dev/null || fail "--cpus 4 run failed"
    "${mpi[@]}" --bind-to none -np 2 "$dptrain" --cpus 2 "${two[@]}" --save "$tmp/twotwo.params" \
        --metrics "$tmp/m-auto.jsonl" >"$tmp/out" 2>"$tmp/err" || fail "mpirun -np 2 --cpus 2: $(cat "$tmp/err")"
    same_within "$tmp/four.params" "$tmp/twotwo.params" "mpirun -np 2 --cpus 2 follows --cpus 4 for 2 steps"
    # Without --across (auto), CPU devices sum with MPI_Allreduce, and no note says why not NCCL.
    grep -qE '"across": ?"mpi"' "$tmp/m-auto.jsonl" && grep -q -- '--across mpi: MPI_Allreduce' "$tmp/out" && ! grep -q NCCL "$tmp/out" \
        && echo "ok: --across auto on CPU devices is mpi, silently" || fail "--across auto on CPU devices: $(cat "$tmp/out" "$tmp/m-auto.jsonl")"
    "${mpi[@]}" --bind-to none -np 2 "$dptrain" --cpus 2 "${two[@]}" --allreduce ring --overlap --across ring \
        --save "$tmp/ring.params" >/dev/null 2>"$tmp/err" || fail "mpirun -np 2 --cpus 2 --allreduce ring --overlap: $(cat "$tmp/err")"
    same_within "$tmp/four.params" "$tmp/ring.params" \
        "mpirun -np 2 --cpus 2 --allreduce ring --overlap --across ring follows --cpus 4 for 2 steps"

    # Batch norm synchronised across processes: 2 steps of a ResNet-18.
    bn=(--model resnet18 --bn sync --epochs 1 --limit-train 64 --limit-test 16 --batch 32 --lr 0.1 --seed 2)
    "$dptrain" --cpus 2 "${bn[@]}" --save "$tmp/bn-one.params" >/dev/null || fail "resnet18 --cpus 2 failed"
    "${mpi[@]}" -np 2 "$dptrain" --cpus 1 "${bn[@]}" --save "$tmp/bn-two.params" >/dev/null 2>"$tmp/err" \
        || fail "resnet18 under mpirun: $(cat "$tmp/err")"
    same_within "$tmp/bn-one.params" "$tmp/bn-two.params" \
        "resnet18 --bn sync: mpirun -np 2 --cpus 1 follows --cpus 2 for 2 steps (running statistics included)"

    # Resume under mpirun: 1 epoch + --resume to 2 == 2 epochs.
    run=(--cpus 1 --batch 256 --lr 0.3 --limit-train 4096 --limit-test 256 --seed 5)
    "${mpi[@]}" -np 2 "$dptrain" "${run[@]}" --epochs 2 --save "$tmp/whole.params" >/dev/null 2>&1 || fail "2 epochs failed"
    "${mpi[@]}" -np 2 "$dptrain" "${run[@]}" --epochs 1 --checkpoint "$tmp/run.ck" >/dev/null 2>&1 || fail "1 epoch failed"
    cp "$tmp/run.ck" "$tmp/alone.ck" && cp "$tmp/run.ck" "$tmp/three.ck"
    grep -aqx "processes 2" "$tmp/run.ck" || fail "the checkpoint does not record 2 processes: $(grep -a '^devices' -A1 "$tmp/run.ck")"
    "${mpi[@]}" -np 2 "$dptrain" --resume "$tmp/run.ck" --epochs 2 --save "$tmp/resumed.params" >"$tmp/out" 2>&1 \
        || fail "the resume failed: $(cat "$tmp/out")"
    cmp "$tmp/whole.params" "$tmp/resumed.params" && echo "ok: under mpirun, 1 epoch + resume to 2 == 2 epochs, byte for byte" \
        || fail "resumed parameters differ"
    # The same checkpoint in one process: its 2 devices in all, as --cpus 2;
    # 3 processes cannot share them: exit 2 and say what to give.
    "$dptrain" --resume "$tmp/alone.ck" --epochs 2 --save "$tmp/alone.params" >"$tmp/out" 2>&1 || fail "the resume in one process failed: $(cat "$tmp/out")"
    grep -q "^devices: 2 CPU devices, .*the checkpoint's 2 devices (2 processes of 1 CPU device each), as 2 CPU devices" "$tmp/out" \
        || fail "the resume in one process does not say how it took the devices: $(grep '^devices' "$tmp/out")"
    same_within "$tmp/whole.params" "$tmp/alone.params" "the 2-process checkpoint resumed in one process (as --cpus 2) ends with the 2-process run"
    "${mpi[@]}" -np 3 "$dptrain" --resume "$tmp/three.ck" --epochs 2 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 2 && $(grep -c "^dptrain: --resume $tmp/three.ck: its run had 2 processes of 1 CPU device each, which 3 processes cannot share equally: give --gpus G or --cpus G" "$tmp/err") -eq 1 ]] \
        && echo "ok: resumed by 3 processes -> exit 2: $(grep '^dptrain' "$tmp/err")" || fail "3 processes resuming 2 devices: exit $rc, $(cat "$tmp/err")"

    # SIGTERM to mpirun (as Ctrl-C): every rank stops at the same step, rank
    # 0 writes the checkpoint within mpirun's grace second, and the resumed
    # run ends where an uninterrupted one does. The signal goes as soon as
    # rank 0 has written epoch 1 to its metrics file (what it prints reaches
    # $tmp/out through mpirun, later and by a varying delay); the ranks then
    # stop 2.3 to 2.6 s into epoch 2 here, which the epoch must outlast.
    # (Epochs of 128 steps took 2.7 s once the CPU kernels got faster: the
    # stops came at steps 111 to 126, and one try in six at the end of the
    # epoch instead; with LeNet's conv2 in the vector lanes, 192 steps ended
    # before the stop came. 384 steps: 6.3 s here.)
    long=(--cpus 1 --batch 128 --lr 0.3 --limit-train 49152 --limit-test 256 --seed 6 --epochs 3)
    "${mpi[@]}" -np 2 "$dptrain" "${long[@]}" --save "$tmp/long.params" >/dev/null 2>&1 || fail "3 epochs failed"
    rm -f "$tmp/int.jsonl"
    "${mpi[@]}" -np 2 "$dptrain" "${long[@]}" --checkpoint "$tmp/int.ck" --metrics "$tmp/int.jsonl" >"$tmp/out" 2>"$tmp/err" &
    job=$!
    wait_for_line "$tmp/int.jsonl" '"epoch":1,' 60 || fail "no epoch 1 in the metrics file within 60 s"
    kill -TERM $job
    wait $job
    grep -q "stopped by SIGTERM in epoch [2-3] after step" "$tmp/err" || fail "no stop message mid-epoch: $(cat "$tmp/err")"
    [[ $(grep -c "stopped by SIGTERM" "$tmp/err") -eq 1 ]] || fail "not one stop message: $(cat "$tmp/err")"
    "${mpi[@]}" -np 2 "$dptrain" --resume "$tmp/int.ck" --save "$tmp/int.params" >/dev/null 2>&1 || fail "resume after SIGTERM failed"
    cmp "$tmp/long.params" "$tmp/int.params" \
        && echo "ok: mpirun stopped by SIGTERM ($(grep -o 'in epoch [0-9] after step [0-9]* of [0-9]*' "$tmp/err")), resumed == uninterrupted, byte for byte" \
        || fail "resume after SIGTERM differs"

    # start_training NAME ARGS...: a 2-rank job in the background (`job`),
    # its output in $tmp/NAME.out and .err, files of its own: the wait below
    # must not find the epoch line of the job before, which a reused file
    # holds until the new job's shell has truncated it (seen on a loaded
    # machine: the rank was then stopped inside MPI_Init, where no timeout
    # runs, and the job hung). Returns 1, with the job killed, when no epoch
    # has ended within 120 s.
    start_training() {
        local name=$1
        shift
        rm -f "$tmp/$name.out" "$tmp/$name.err"
        "${mpi[@]}" -np 2 "$dptrain" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
        job=$!
        wait_for_line "$tmp/$name.out" "^epoch 1 " 120 && return 0
        fail "$name: no epoch line within 120 s: $(cat "$tmp/$name.err")"
        kill -9 $job 2>/dev/null
        wait $job 2>/dev/null
        return 1
    }

    # A killed rank ends the job (mpirun notices), well within the timeout.
    if start_training killed "${long[@]}" --epochs 50 --collective-timeout 20; then
        killed=$(rank_pid $job 1)
        [[ -n $killed ]] && kill -9 "$killed" || { fail "rank 1 not found to kill"; kill -9 $job; }
        start=$SECONDS
        wait $job
        rc=$?
        [[ $rc -ne 0 && $((SECONDS - start)) -le 20 ]] && echo "ok: rank 1 killed -> the job exited $rc within $((SECONDS - start)) s" \
            || fail "killed rank: exit $rc after $((SECONDS - start)) s"
    fi

    # A hung rank (stopped): the others give up after --collective-timeout,
    # naming themselves and the step.
    if start_training hung "${long[@]}" --epochs 50 --collective-timeout 3; then
        hung=$(rank_pid $job 1)
        [[ -n $hung ]] && kill -STOP "$hung" || { fail "rank 1 not found to stop"; kill -9 $job; }
        start=$SECONDS
        wait $job
        rc=$?
        kill -9 "$hung" 2>/dev/null
        grep -q "rank 0 (.*): no answer from the other ranks within 3 s during the gradient sum of epoch [0-9]*, step [0-9]*" "$tmp/hung.err" \
            && [[ $rc -ne 0 && $((SECONDS - start)) -le 15 ]] \
            && echo "ok: rank 1 hung -> exit $rc within $((SECONDS - start)) s: $(grep 'no answer' "$tmp/hung.err")" \
            || fail "hung rank: exit $rc after $((SECONDS - start)) s: $(cat "$tmp/hung.err")"
    fi

    # Bad input on one rank: exit 2 on every rank, one message naming it.
    # The jobs are independent and spend most of their time in mpirun's
    # abort (a second or two each, idle), so they run side by side; their
    # checks follow. refused NAME ARGS...: mpirun ARGS, its output and exit
    # status in $tmp/NAME.out, .err and .rc.
    quick=(--cpus 1 --epochs 1 --limit-train 512 --limit-test 128 --batch 64)
    refused() {
        local name=$1
        shift
        "${mpi[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
        echo $? >"$tmp/$name.rc"
    }
    refused data -np 1 "$dptrain" "${quick[@]}" : -np 1 "$dptrain" "${quick[@]}" --data "$tmp/nowhere" &
    refused lr -np 1 "$dptrain" "${quick[@]}" : -np 1 "$dptrain" "${quick[@]}" --lr 0.5 &
    one_process=("--split auto" "--split 3,1" "--slowdown cpu:0=2")
    # --across: nccl is for GPU replicas; a name it does not know exits 2.
    across=("--across nccl" "--across gloo")
    for bad in "${one_process[@]}" "${across[@]}"; do
        # shellcheck disable=SC2086
        refused "${bad// /-}" -np 2 "$dptrain" "${quick[@]}" $bad &
    done
    refused inspect -np 2 "$dptrain" inspect &
    wait
    rc=$(cat "$tmp/data.rc")
    [[ $rc -eq 2 && $(grep -c "^dptrain: rank 1: --data $tmp/nowhere" "$tmp/data.err") -eq 1 && ! -s $tmp/data.out ]] \
        && echo "ok: a missing --data on rank 1 -> exit 2: $(grep '^dptrain' "$tmp/data.err")" \
        || fail "bad input on rank 1: exit $rc, $(cat "$tmp/data.err")"
    rc=$(cat "$tmp/lr.rc")
    [[ $rc -eq 2 ]] && grep -q "^dptrain: rank 1: its --lr 0.5 differs from rank 0's --lr 0.3" "$tmp/lr.err" \
        && echo "ok: other options on rank 1 -> exit 2: $(grep '^dptrain' "$tmp/lr.err")" || fail "other options: exit $rc, $(cat "$tmp/lr.err")"
    for bad in "${one_process[@]}"; do
        rc=$(cat "$tmp/${bad// /-}.rc") err=$tmp/${bad// /-}.err
        [[ $rc -eq 2 ]] && grep -q "^dptrain: ${bad%% *} .*one process" "$err" \
            && echo "ok: $bad under mpirun -> exit 2: $(grep '^dptrain' "$err")" || fail "$bad: exit $rc, $(cat "$err")"
    done
    rc=$(cat "$tmp/inspect.rc")
    [[ $rc -eq 2 ]] && grep -q "runs as one process" "$tmp/inspect.err" && echo "ok: dptrain inspect under mpirun -> exit 2" \
        || fail "inspect under mpirun: exit $rc, $(cat "$tmp/inspect.err")"
    for bad in "${across[@]}"; do
        rc=$(cat "$tmp/${bad// /-}.rc") err=$tmp/${bad// /-}.err
        [[ $rc -eq 2 && $(grep -c "^dptrain: --across" "$err") -eq 1 ]] \
            && echo "ok: $bad with CPU devices under mpirun -> exit 2: $(grep '^dptrain' "$err")" || fail "$bad: exit $rc, $(cat "$err")"
    done
    "$dptrain" --cpus 1 --across ring >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 2 ]] && grep -q "^dptrain: --across is for a run of several processes" "$tmp/err" \
        && echo "ok: --across in one process -> exit 2" || fail "--across alone: exit $rc, $(cat "$tmp/err")"
    ;;
two-nodes)
    # Two machines from a hostfile (network namespaces here): each rank on
    # its own node, the sums over TCP between them.
    two_nodes >"$tmp/why" 2>&1 || { echo "SKIP: two nodes as network namespaces cannot be made here: $(tail -1 "$tmp/why")"; exit 77; }
    five=(--epochs 1 --limit-train 640 --limit-test 128 --batch 128 --lr 0.3 --seed 4)
    "$dptrain" --cpus 2 "${five[@]}" --save "$tmp/one.params" >/dev/null || fail "--cpus 2 run failed"
    : >"$tmp/agent.log"
    for across in mpi ring; do
        "${mpi[@]}" "${remote[@]}" -np 2 "$dptrain" --cpus 1 "${five[@]}" --across $across \
            --save "$tmp/nodes-$across.params" >"$tmp/out" 2>"$tmp/err" || fail "mpirun --hostfile (2 nodes) --across $across: $(cat "$tmp/err")"
        same_within "$tmp/one.params" "$tmp/nodes-$across.params" \
            "mpirun --hostfile, one rank on each of 2 nodes (namespaces, TCP), --across $across, follows --cpus 2 for 5 steps"
    done
    [[ $(sort -u "$tmp/agent.log" | wc -l) -eq 2 && $(wc -l <"$tmp/agent.log") -eq 4 ]] \
        || fail "mpirun did not start a daemon on each node through the agent: $(cat "$tmp/agent.log")"
    ;;
slow)
    # Whole epochs: 2 processes against 1 process with 2 devices. SGD is
    # chaotic, so over 3 epochs they are compared statistically: test
    # accuracy within 0.02, the same loss curve within 2%.
    full=(--batch 256 --lr 0.3 --epochs 3 --seed 7)
    "$dptrain" --cpus 2 "${full[@]}" --metrics "$tmp/one.jsonl" >/dev/null || fail "--cpus 2 failed"
    "${mpi[@]}" -np 2 "$dptrain" --cpus 1 "${full[@]}" --metrics "$tmp/two.jsonl" >/dev/null 2>&1 || fail "mpirun failed"
    python3 - "$tmp/one.jsonl" "$tmp/two.jsonl" <<'PY' && echo "ok: 3 epochs under mpirun -np 2 match --cpus 2 statistically" || fail "3 epochs differ"
import json, sys
one, two = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
for a, b in zip(one, two):
    print(f"   epoch {a['epoch']}: loss {a['train_loss']:.4f} / {b['train_loss']:.4f}, acc {a['test_acc']:.4f} / {b['test_acc']:.4f}, "
          f"time {a['train_time_s']:.1f} / {b['train_time_s']:.1f} s")
    assert abs(a["test_acc"] - b["test_acc"]) <= 0.02 and abs(a["train_loss"] - b["train_loss"]) <= 0.02 * a["train_loss"]
PY
    ;;
*)
    echo "unknown mode $mode"
    exit 2
    ;;
esac
[[ $failures -eq 0 ]] && exit 0 || exit 1
