#!/usr/bin/env bash
# Fuzzes dptrain's two readers of untrusted files with libFuzzer: the IDX
# reader (tests/fuzz/fuzz_idx.cpp) and the checkpoint reader
# (tests/fuzz/fuzz_checkpoint.cpp), under AddressSanitizer and
# UndefinedBehaviorSanitizer, side by side. Usage: scripts/fuzz.sh [SECONDS per
# target, default 60]
#
# Builds with clang in build-fuzz/. Each target starts from its seed corpus in
# tests/fuzz/corpus/ (plus a full-size valid checkpoint made here, too big for
# git) and keeps what it finds in build-fuzz/corpus/; a crash leaves the input
# as build-fuzz/crash-* and fails the script. Reproduce one with
#   build-fuzz/tests/fuzz/fuzz_checkpoint build-fuzz/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS per target]" >&2; exit 2; }
scripts/deps.sh --with-fuzz
dir=build-fuzz
if [[ ! -f $dir/build.ninja ]]; then
    # Everything is instrumented for coverage (fuzzer-no-link); the two
    # targets link libFuzzer's main (tests/fuzz/meson.build).
    setup_args=()
    [[ -d bundle/include ]] && setup_args+=(-Dbundle=bundle)
    CC=clang CXX=clang++ meson setup "$dir" --buildtype=debugoptimized "${setup_args[@]}" -Dcuda=disabled \
        -Dtests=disabled -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
        -Dcpp_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=all"
fi
ninja -C "$dir" tests/fuzz/fuzz_idx tests/fuzz/fuzz_checkpoint tests/fuzz/make_checkpoint_seed

# fuzz TARGET: one target for $seconds s; its report in $dir/fuzz_TARGET.report.
fuzz() {
    local target=$1 corpus=$dir/corpus/$1 max_len report=$dir/fuzz_$1.report
    mkdir -p "$corpus"
    cp tests/fuzz/corpus/$target/* "$corpus/"
    [[ $target == checkpoint ]] && "$dir/tests/fuzz/make_checkpoint_seed" "$corpus/valid.ck"
    # -max_len: room for a whole checkpoint (516 KB) and small IDX files.
    max_len=$([[ $target == checkpoint ]] && echo 600000 || echo 8192)
    if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$dir/tests/fuzz/fuzz_$target" "$corpus" \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$dir/crash-$target-" -print_final_stats=1 2>"$dir/fuzz_$target.log"; then
        { tail -40 "$dir/fuzz_$target.log"
          echo "fuzz_$target FAILED: the input is $(ls "$dir"/crash-$target-* 2>/dev/null | head -1)"; } >"$report"
        return 1
    fi
    { grep -E "^(stat::number_of_executed_units|stat::new_units_added)" "$dir/fuzz_$target.log" || true
      grep -E "^#[0-9]+.*DONE" "$dir/fuzz_$target.log" | tail -1 || true; } >"$report"
}

# The two side by side (each keeps one core busy), then their reports in turn.
echo "fuzz_idx and fuzz_checkpoint for $seconds s, side by side"
fuzz idx & idx=$!
fuzz checkpoint & checkpoint=$!
status=0
wait $idx || status=1
wait $checkpoint || status=1
for target in idx checkpoint; do
    echo "== fuzz_$target =="
    cat "$dir/fuzz_$target.report"
done
exit $status
