#!/usr/bin/env bash
# Drives the real dptrain binary: its command-line contract (exit status 2 and
# a message naming the problem), determinism of --save, --load, --metrics, and
# that a short run learns. Usage: test_cli.sh DPTRAIN {errors|files|learning}
set -uo pipefail
dptrain=$1 mode=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error "what stderr must contain" args...: exit 2, that text on stderr, nothing on stdout.
expect_error() {
    local want=$1; shift
    "$dptrain" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [[ $rc -ne 2 ]]; then fail "dptrain $* exited $rc, not 2"; return; fi
    grep -qF -- "$want" "$tmp/err" || fail "dptrain $*: stderr lacks '$want': $(cat "$tmp/err")"
    [[ -s $tmp/out ]] && fail "dptrain $*: printed to stdout: $(cat "$tmp/out")"
    echo "ok: dptrain $* -> 2: $(cat "$tmp/err")"
}

quick=(--epochs 1 --limit-train 512 --limit-test 256 --batch 64)

case $mode in
errors)
    expect_error "--cpus must be" --cpus 0
    expect_error "--cpus must be" --cpus two
    expect_error "--batch must be" --batch 0
    expect_error "--lr must be a positive number" --lr -1
    expect_error "--lr must be a positive number" --lr nan
    expect_error "--lr must be a positive number" --lr inf
    expect_error "--epochs must be" --epochs -3
    expect_error "--seed must be" --seed 1.5
    expect_error "--pool must be avg or max" --pool median
    expect_error "--init must be xavier or normal" --init zeros
    expect_error "bogus" --bogus
    expect_error "unexpected argument 'extra'" extra
    expect_error "cannot be combined" --cpus 1 --gpus 1
    expect_error "--gpus must be" --gpus 0
    # With no GPU (hidden here, so this holds on GPU machines too): exit 2 and
    # a pointer to --cpus, whether the build has CUDA or not.
    CUDA_VISIBLE_DEVICES= expect_error "; train on CPU devices with --cpus N" --gpus 1
    expect_error "smaller than the number of devices" --cpus 4 --batch 3
    expect_error "--data $tmp/missing: no such directory" --data "$tmp/missing"
    expect_error "larger than the training set" --limit-train 100 --batch 101
    expect_error "--load $tmp/none" --load "$tmp/none" "${quick[@]}"
    expect_error "--save $tmp/no/dir/p: directory $tmp/no/dir does not exist" --save "$tmp/no/dir/p" "${quick[@]}"
    mkdir -p "$tmp/bad" && head -c 5000 /dev/urandom >"$tmp/bad/train-images-idx3-ubyte.gz"
    for f in train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do cp "$tmp/bad/train-images-idx3-ubyte.gz" "$tmp/bad/$f.gz"; done
    expect_error "$tmp/bad/train-images-idx3-ubyte.gz" --data "$tmp/bad"
    printf 'dptrain-params 1\nconv1.weight 3 3\n' >"$tmp/other.params"
    expect_error "do not match this LeNet" --load "$tmp/other.params" "${quick[@]}"
    "$dptrain" --help >"$tmp/out" 2>&1 && grep -q -- "--cpus N" "$tmp/out" || fail "--help does not describe --cpus"
    # Neither --cpus nor --gpus, and no GPU: 1 CPU device, and the run says why.
    CUDA_VISIBLE_DEVICES= "$dptrain" "${quick[@]}" --epochs 0 >"$tmp/out" 2>&1 || fail "no-GPU fallback run failed: $(cat "$tmp/out")"
    grep -E "^devices: 1 CPU device.*(no CUDA GPU is usable|built without CUDA).*so 1 CPU device" "$tmp/out" \
        && echo "ok: without a GPU, dptrain falls back to 1 CPU device and says why" \
        || fail "no fallback notice: $(cat "$tmp/out")"
    ;;
files)
    # Same arguments and seed -> byte-identical parameters (2 devices, a batch not divisible by 2).
    "$dptrain" --cpus 2 "${quick[@]}" --batch 63 --seed 7 --save "$tmp/a.params" --metrics "$tmp/m.jsonl" >"$tmp/run1" || fail "run 1 failed"
    "$dptrain" --cpus 2 "${quick[@]}" --batch 63 --seed 7 --save "$tmp/b.params" >/dev/null || fail "run 2 failed"
    cmp "$tmp/a.params" "$tmp/b.params" && echo "ok: same seed, byte-identical --save files" || fail "--save files differ"
    "$dptrain" --cpus 2 "${quick[@]}" --batch 63 --seed 8 --save "$tmp/c.params" >/dev/null
    cmp -s "$tmp/a.params" "$tmp/c.params" && fail "another seed gave the same parameters"
    size=$(stat -c %s "$tmp/a.params")
    [[ $size -gt $((129068 * 4)) ]] || fail "params file is only $size bytes"
    ls "$tmp" | grep -q '\.tmp\.' && fail "a temporary file was left behind"
    # --load with --epochs 0 reproduces the saved model's test accuracy.
    want=$(grep -o 'test_acc [0-9.]*' "$tmp/run1" | tail -1)
    got=$("$dptrain" --cpus 1 --epochs 0 --limit-test 256 --load "$tmp/a.params" | grep -o 'test_acc [0-9.]*')
    [[ "$want" == "$got" ]] && echo "ok: --load reproduces $got" || fail "--load gave '$got', the run ended with '$want'"
    # --metrics: one JSON object per epoch with the contract's keys.
    for key in epoch train_time_s samples_per_s train_loss test_acc devices device_kind; do
        grep -q "\"$key\"" "$tmp/m.jsonl" || fail "--metrics lacks $key"
    done
    if command -v python3 >/dev/null; then
        python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$tmp/m.jsonl" \
            && echo "ok: --metrics is valid JSON Lines" || fail "--metrics is not valid JSON Lines"
    fi
    [[ $(wc -l <"$tmp/m.jsonl") -eq 1 ]] || fail "--metrics should have 1 line for 1 epoch"
    ;;
learning)
    # 2 epochs on the first 10,000 training samples, scored on all 10,000 test
    # samples. Chance is 0.10; with every gradient right this reaches 0.67..0.72
    # (seeds 0..3 measured). A sign error, a lost 1/B or a dead layer leaves the
    # loss near ln 10 = 2.30 and the accuracy near chance, or diverges.
    # (Subtle gradient errors are the finite-difference tests' job.)
    "$dptrain" --cpus 2 --epochs 2 --limit-train 10000 --batch 64 --lr 0.2 --seed 0 | tee "$tmp/out"
    acc=$(grep -o 'test_acc [0-9.]*' "$tmp/out" | tail -1 | cut -d' ' -f2)
    loss=$(grep -o 'loss [0-9.]*' "$tmp/out" | tail -1 | cut -d' ' -f2)
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.60) }' && echo "ok: test accuracy $acc >= 0.60" || fail "test accuracy $acc < 0.60"
    awk -v l="$loss" 'BEGIN { exit !(l <= 0.9) }' && echo "ok: training loss $loss <= 0.9" || fail "training loss $loss > 0.9"
    ;;
*) echo "unknown mode $mode"; exit 1 ;;
esac
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
