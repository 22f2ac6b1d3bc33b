#!/usr/bin/env bash
# Everything to run on a machine with a GPU, in one go: builds, runs every
# test (the GPU suite included; not the fuzzers, which need clang), then a
# short training under compute-sanitizer's memcheck and racecheck, with 1 and
# 2 replicas, and the resume check on 2 replicas: 1 epoch, then --resume to 3,
# against 3 epochs straight, byte for byte. Last, the classroom commands on
# 2 GPU replicas (inspect's checks, the demos' checks) and `dptrain devices`.
# Logs go to $LOGS (default build/gpu-check/).
#   usage: scripts/check_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${LOGS:-build/gpu-check}
status=0
mkdir -p "$logs"
DPTRAIN_SANITIZE=0 DPTRAIN_FUZZ=0 scripts/test.sh 2>&1 | tee "$logs/test.log" || status=1
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
short=(--epochs 1 --limit-train 1024 --limit-test 256 --batch 128)
for tool in memcheck racecheck; do
    for gpus in 1 2; do
        echo "== compute-sanitizer --tool $tool: dptrain --gpus $gpus ${short[*]}"
        "$sanitizer" --tool "$tool" --error-exitcode 9 build/dptrain --gpus "$gpus" "${short[@]}" \
            >"$logs/$tool-$gpus.log" 2>&1 || status=1
        tail -3 "$logs/$tool-$gpus.log"
    done
done
ck=(--gpus 2 --limit-train 4096 --limit-test 512 --batch 128 --seed 3)
for graphs in "" --no-graphs; do
    echo "== resume on 2 GPU replicas ${graphs:-(graphs)}"
    build/dptrain "${ck[@]}" $graphs --epochs 3 --save "$logs/whole.params" >"$logs/resume.log" 2>&1 || status=1
    build/dptrain "${ck[@]}" $graphs --epochs 1 --checkpoint "$logs/one.ck" >>"$logs/resume.log" 2>&1 || status=1
    build/dptrain --resume "$logs/one.ck" $graphs --epochs 3 --save "$logs/resumed.params" >>"$logs/resume.log" 2>&1 || status=1
    if cmp "$logs/whole.params" "$logs/resumed.params"; then echo "ok: byte-identical"; else echo "FAIL: resumed parameters differ"; status=1; fi
done
echo "== classroom commands on GPU replicas"
for cmd in "inspect --gpus 2" "inspect --gpus 3 --batch 7" "demo allreduce --gpus 2" "demo split --gpus 2"; do
    # shellcheck disable=SC2086
    if build/dptrain $cmd >"$logs/classroom.log" 2>&1; then echo "ok: dptrain $cmd: $(tail -1 "$logs/classroom.log")"
    else echo "FAIL: dptrain $cmd:"; cat "$logs/classroom.log"; status=1; fi
done
build/dptrain devices 2>&1 | tee "$logs/devices.log" || status=1
exit $status
