#!/usr/bin/env bash
# One command from a fresh clone to every test: installs what is missing,
# builds, runs `meson test`. CI runs this (.ci/run). Arguments go to
# `meson test` of the main build alone (e.g. --suite cpu, or a test's name);
# --quick runs the main build's tests alone, every one but the slow suite
# (the edit-compile-test loop: a few minutes); --slow runs only the long
# checks of the slow suite (whole epochs under mpirun), which the default
# run leaves out: it keeps short versions of them.
#
# Without arguments, in turn (each stage runs even when one before failed;
# the summary at the end lists them all):
#   build/            the main build (the CUDA backend when nvcc is found),
#                     every test but the slow suite; the GPU tests say SKIP
#                     where no GPU is usable
#   build-sanitize/   the CPU tests again in a build without CUDA and MPI
#                     (which must refuse a job of several processes), under
#                     AddressSanitizer and UndefinedBehaviorSanitizer
#   build-nocuda/     with DPTRAIN_SANITIZE=0 instead (and when the main build
#                     has CUDA): the same build without the sanitizers, and
#                     its CPU tests but the suite 'training'
#   build-emulated/   the CUDA backend on emulated GPUs (-Demulated_gpu=true,
#                     no nvcc needed), built whole as README.md says: the GPU
#                     suite, every kernel against its CPU twin, replicas,
#                     graphs and the binary on GPU replicas; the dev suite,
#                     every version of dev/cuda/ checked and one trained with
#   build-tsan/       the GPU tests' programs under ThreadSanitizer, on the
#                     runs where streams meet (replicas, --overlap, mixed): a
#                     missing wait between streams is a reported race
#                     (DPTRAIN_EMULATED=0 skips both)
#   build-doc-N/      every other build README.md and docs/ tell a user to
#                     type (scripts/doc_builds.sh lists them), built whole
#   build-bundle/     the offline build of a GPU node without internet:
#                     scripts/bundle.sh, then the CPU build from bundle/ with
#                     pkg-config's packages hidden, and a few of its tests
#                     (DPTRAIN_BUNDLE_CHECK=0 skips it)
#   build-fuzz/       scripts/fuzz.sh: the IDX and checkpoint readers under
#                     libFuzzer, $DPTRAIN_FUZZ seconds each (default 30; 0 skips)
#
# A test that fails has the end of its own output printed here; a test that
# cannot run on this machine says SKIP and why. A failed or interrupted run
# leaves the tree as it found it (bundle/ and the data link it makes are
# removed again), so the next run starts the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
scripts/deps.sh --with-tests
dir=${DPTRAIN_BUILD_DIR:-build}

# Whatever happens from here on (a failure, Ctrl-C), take back what this
# script put in the tree: a bundle/ left behind would stand in for the
# system's packages in every later build here.
made_bundle=no made_data_link=no
restore_tree() {
    if [[ $made_bundle == yes ]]; then rm -rf bundle bundle.tmp; fi
    if [[ $made_data_link == yes && -L data/fashion-mnist ]]; then rm -f data/fashion-mnist; fi
}
trap restore_tree EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# report BUILD_DIR: a line for each test that did not pass, from meson's
# record of the last `meson test` there: SKIP with the test's reason (its
# last line), and for a failure the end of its output, so that the reason is
# where the user is looking and not only in BUILD_DIR/meson-logs/.
report() {
    [[ -f $1/meson-logs/testlog.json ]] || return 0
    python3 - "$1/meson-logs/testlog.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    out = [l for l in ((t.get("stdout") or "") + (t.get("stderr") or "")).splitlines() if l.strip()]
    if t["result"] == "SKIP":
        print(f"SKIP  {t['name']}: {out[-1] if out else 'no reason given'}")
    elif t["result"] not in ("OK", "EXPECTEDFAIL"):
        fails = [l for l in out if l.startswith("FAIL")]
        print(f"---- {t['name']}: {t['result']}, the end of its output "
              f"(all of it: {sys.argv[1].replace('testlog.json', 'testlog.txt')})")
        for l in (fails[:10] + ["..."] if len(fails) > 10 else fails):
            print("  " + l[:400])
        if fails: print("  (last lines:)")
        for l in out[-25:]:
            print("  " + l[:400])
PY
}

summary=()
failed=0
# The emulated GPU as README.md and docs/emulated-gpu.md set it up.
emulated_options=-Demulated_gpu=true
# stage LABEL COMMAND...: runs COMMAND, notes LABEL's outcome and time.
# The time a stage spent in `meson test` (tests, below) is said apart from
# the rest of it (building, mostly), so that the summary says where the
# time goes.
tested_s=0
stage() {
    local label=$1 t0=$SECONDS rc=0 split
    shift
    echo
    echo "== $label =="
    tested_s=0
    "$@" || rc=$?
    split="$((SECONDS - t0)) s"
    ((tested_s > 0)) && split+=": tests $tested_s s, the rest $((SECONDS - t0 - tested_s)) s"
    if [[ $rc -eq 0 ]]; then summary+=("ok    $label ($split)")
    else summary+=("FAIL  $label (exit $rc, $split)"); failed=1; fi
    return 0
}
# tests BUILD_DIR ARGS...: meson test there, then the report. A test named
# in ARGS that BUILD_DIR does not have is an error: meson would run the
# others and say nothing of it.
tests() {
    local build=$1 rc=0 arg takes_value=no names
    shift
    # Listed once, whole: `meson ... --list | grep -q` would fail at random
    # under pipefail, when grep quits at its match before meson is done
    # writing (meson then exits 1 on the broken pipe).
    names=$(meson test -C "$build" --no-rebuild --list 2>/dev/null) || names=""
    for arg in "$@"; do
        if [[ $takes_value == yes ]]; then takes_value=no; continue; fi
        case $arg in
        --suite | --no-suite | --repeat | --num-processes | --setup | --test-args | --wrapper | \
            --timeout-multiplier | --logbase | -j | -t) takes_value=yes ;;
        -*) ;;
        *)
            if ! grep -q " / $arg\$" <<<"$names"; then
                echo "test.sh: $build/ has no test named $arg (meson test -C $build --list names them)" >&2
                return 2
            fi ;;
        esac
    done
    local t0=$SECONDS
    meson test -C "$build" --no-rebuild "$@" || rc=$?
    tested_s=$((tested_s + SECONDS - t0))
    report "$build"
    return $rc
}

# ccache (installed above; meson compiles through it where it finds it):
# the emulated build compiles most of its C++ with the main build's flags,
# and takes those objects from the main build's instead of compiling them
# again (152 s became 88 here). Every other build has flags of its own, for
# which the cache would only add its cost (local -x CCACHE_DISABLE=1 there).
# The cache is build-ccache/, beside the builds, unless CCACHE_DIR says.
export CCACHE_DIR=${CCACHE_DIR:-$PWD/build-ccache}
scripts/build.sh
summary=("ok    installing what is missing, and the main build ($dir/) ($((SECONDS - started)) s)")
if [[ ${1:-} == --quick ]]; then
    stage "every test in $dir/ but the slow suite" tests "$dir" --no-suite slow "${@:2}"
    echo
    echo "== summary: $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s (--quick: the main build alone; without it, every build) =="
    printf '%s\n' "${summary[@]}"
    exit $failed
fi
if [[ ${1:-} == --slow ]]; then
    tests "$dir" --suite slow "${@:2}"
    exit
fi
if [[ $# -gt 0 ]]; then
    tests "$dir" --no-suite slow "$@"
    exit
fi

stage "every test in $dir/ but the slow suite" tests "$dir" --no-suite slow
# The sanitized build below is a build without CUDA and MPI too, and runs
# every CPU test: where it runs, a plain one would repeat it.
if [[ -e $dir/tests/gpu/gpu_tests && ${DPTRAIN_SANITIZE:-1} == 0 ]]; then
    # The CPU code is the same as the main build's: what differs without
    # CUDA and MPI is the build, the device probes and the refusals, so the
    # minutes-long training checks (suite 'training') are not run twice.
    nocuda() {
        DPTRAIN_BUILD_DIR=$dir-nocuda scripts/build.sh -Dcuda=disabled -Dmpi=disabled &&
            tests "$dir-nocuda" --no-suite slow --no-suite training
    }
    stage "the tests without CUDA and MPI but the long training ones ($dir-nocuda/)" nocuda
fi
if [[ ${DPTRAIN_SANITIZE:-1} != 0 ]]; then
    # (Without MPI: Open MPI's own allocations would fill LeakSanitizer's report.
    # -O1, as the sanitizers' authors advise, compiles in half the time of -O3;
    # the CPU kernels keep their own -O3.)
    sanitized() {
        local -x CCACHE_DISABLE=1
        DPTRAIN_BUILD_DIR=$dir-sanitize scripts/build.sh -Dcuda=disabled -Dmpi=disabled \
            -Db_sanitize=address,undefined -Db_lundef=false -Dcpp_args='-O1 -fno-sanitize-recover=all' \
            -Dcpp_link_args=-fno-sanitize-recover=all &&
            UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 tests "$dir-sanitize" --no-suite slow
    }
    stage "the CPU tests under ASan and UBSan ($dir-sanitize/)" sanitized
fi
if [[ ${DPTRAIN_EMULATED:-1} != 0 ]]; then
    emulated() {
        # The kernels' figures (test kernel-figures) read the machine code the
        # main build compiled for sm_90, where it has, instead of compiling
        # it all again.
        local objects=$dir/kernels/cuda/libdptrain_cuda_kernels.a figures_from=""
        if [[ -f $objects && ,$(scripts/build_option.sh "$dir" gpu_archs), == *,90,* ]]; then
            figures_from=$PWD/$objects
        fi
        # README.md's command, so that what it tells a user to type is built
        # whole (its unit tests and MPI too: the CPU tests run in the stages
        # above, and link here).
        DPTRAIN_BUILD_DIR=$dir-emulated scripts/build.sh $emulated_options -Dmpi=auto -Dtests=auto &&
            DPTRAIN_KERNEL_OBJECTS=$figures_from tests "$dir-emulated" --suite gpu --suite dev
    }
    stage "the CUDA backend on emulated GPUs ($dir-emulated/)" emulated
    # (halt_on_error: the first race fails the test at once, with its report.
    # No suppressions: host memory that a GPU thread polls is read atomically
    # on the emulated GPU, as the host writes it. -O1, as the sanitizer's
    # authors advise: it builds in 167 s instead of 264 here, and the tests
    # take 64 s instead of 39. Only the two programs those tests run are
    # built: the rest of this build, the dev versions and benchmarks, is the
    # emulated stage's, and compiling it here took a third of the stage.)
    tsan() {
        local -x CCACHE_DISABLE=1
        DPTRAIN_BUILD_DIR=$dir-tsan DPTRAIN_TARGETS="tests/gpu/gpu_tests tests/gpu/emulation_tests" \
            scripts/build.sh -Demulated_gpu=true -Dmpi=disabled -Dtests=disabled -Db_sanitize=thread -Dcpp_args=-O1 &&
            TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
                tests "$dir-tsan" emulated-gpu gpu-streams
    }
    stage "streams, --overlap and mixed runs under ThreadSanitizer on emulated GPUs ($dir-tsan/)" tsan
fi
# The builds README.md and docs/ show (scripts/doc_builds.sh), each built
# whole as a user would type it; one that a stage above builds is not built
# again. (doc-builds, a test of the cpu suite, checks that no command in
# the docs escapes the list.)
doc_builds() {
    local -x CCACHE_DISABLE=1
    local options n=0 rc=0
    while IFS= read -r options; do
        n=$((n + 1))
        if [[ -z $options ]]; then echo "(defaults): the build of $dir/"; continue; fi
        if [[ $options == "$emulated_options" && ${DPTRAIN_EMULATED:-1} != 0 ]]; then
            echo "$options: the build of $dir-emulated/"
            continue
        fi
        echo "$options: $dir-doc-$n/"
        if [[ ! -f $dir-doc-$n/build.ninja ]]; then
            rm -rf "$dir-doc-$n"
            # shellcheck disable=SC2086  # the options as the docs write them
            meson setup "$dir-doc-$n" $options >"$dir-doc-$n.log" 2>&1 || { cat "$dir-doc-$n.log"; rc=1; continue; }
        fi
        meson compile -C "$dir-doc-$n" | { grep -v '^ninja: no work to do\.$' || true; }
        [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    done < <(scripts/doc_builds.sh)
    return $rc
}
stage "the other builds README.md and docs/ show, whole ($dir-doc-N/)" doc_builds

if [[ ${DPTRAIN_BUNDLE_CHECK:-1} != 0 ]]; then
    # A GPU node without internet has no Debian packages: it builds from
    # bundle/. Prove that path here with pkg-config's packages hidden.
    offline() {
        local -x CCACHE_DISABLE=1
        if [[ ! -d bundle ]]; then made_bundle=yes; fi
        if [[ ! -e data/fashion-mnist && ! -L data/fashion-mnist ]]; then made_data_link=yes; fi
        scripts/bundle.sh || return
        rm -rf "$dir-bundle"
        # What bundle/ stands in for (cxxopts, nlohmann-json, Catch2, zlib)
        # only the C++ files include; the CUDA kernels include none of it,
        # and the main build has compiled them. So the CPU build proves the
        # bundle, in about half the time of a CUDA one; on a GPU node
        # `scripts/gpu.sh build` builds the kernels from it too. (-O1: what
        # is proven is where the headers and libraries come from; it builds
        # in 88 s instead of 121 here, and the CPU kernels keep their -O3.)
        echo "the CPU build from bundle/, and its model and data-reading tests"
        PKG_CONFIG_LIBDIR=/nonexistent DPTRAIN_BUILD_DIR=$dir-bundle scripts/build.sh -Dcuda=disabled -Dcpp_args=-O1 &&
            tests "$dir-bundle" kernels idx cli-errors
        local rc=$?
        restore_tree
        made_bundle=no made_data_link=no
        return $rc
    }
    stage "the offline build from bundle/ ($dir-bundle/)" offline
fi
if [[ ${DPTRAIN_FUZZ:-30} != 0 ]]; then
    stage "the IDX and checkpoint readers under libFuzzer, ${DPTRAIN_FUZZ:-30} s each (build-fuzz/)" \
        env CCACHE_DISABLE=1 scripts/fuzz.sh "${DPTRAIN_FUZZ:-30}"
fi

echo
echo "== summary: $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s =="
printf '%s\n' "${summary[@]}"
exit $failed
