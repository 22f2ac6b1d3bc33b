#!/usr/bin/env bash
# Installs what dptrain needs to build, test and train on a Debian machine.
# As root it runs apt-get; otherwise it names the missing packages and how to get them.
# Run by run.sh and test.sh; safe to run again (it installs only what is missing).
#
# With an offline bundle (bundle/, made by scripts/bundle.sh) it installs
# nothing and never calls apt-get: that is how a machine without a package
# registry (a GPU node without internet) builds. With neither the packages nor a
# bundle, and no registry to fetch them from, it says so in one line.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# A link into a bundle/ that is gone (an interrupted run's) would hide the data.
if [[ -L $root/data/fashion-mnist && ! -e $root/data/fashion-mnist ]]; then rm -f "$root/data/fashion-mnist"; fi
if [[ -d $root/bundle/include ]]; then
    if [[ ! -e $root/data/fashion-mnist ]]; then ln -s ../bundle/fashion-mnist "$root/data/fashion-mnist"; fi
    if [[ " $* " == *" --with-fuzz "* ]] && ! command -v clang++ >/dev/null; then
        echo "dptrain: the fuzzers need clang++, which a bundle does not carry: install clang and libclang-rt-dev, or remove bundle/ to let this script install them" >&2
        exit 1
    fi
    exit 0
fi

# Open MPI: training as several processes under mpirun (docs/multi-process.md).
# help2man: the man page `meson install` puts in place, made from --help.
packages=(g++ pkg-config meson ninja-build python3 libcxxopts-dev nlohmann-json3-dev catch2 zlib1g-dev dataset-fashion-mnist
          openmpi-bin libopenmpi-dev help2man)
# --with-plot adds matplotlib for scripts/plot.py.
[[ " $* " == *" --with-plot "* || " $* " == *" --with-tests "* ]] && packages+=(python3-matplotlib)
# --with-fuzz adds clang and its libFuzzer runtime for scripts/fuzz.sh.
[[ " $* " == *" --with-fuzz "* || " $* " == *" --with-tests "* ]] && packages+=(clang libclang-rt-dev)
# --with-bench adds hyperfine, which the scripts in bench/ that time whole
# commands use (bench/trace_cost.sh).
[[ " $* " == *" --with-bench "* ]] && packages+=(hyperfine)
# --with-tests (scripts/test.sh): both of the above, iproute2 for the test
# that runs mpirun over two network namespaces as two machines, procps
# (pkill) for the one that stops a run on a terminal, ccache, through
# which the emulated build takes the objects it shares with the main build,
# and qemu-user, whose x86-64 CPU without AVX-512 the start-up check of the
# kernels' instruction sets is tested on (tests/test_cpu_check.sh).
[[ " $* " == *" --with-tests "* ]] && packages+=(iproute2 procps ccache qemu-user)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

no_registry() {
    echo "dptrain: missing ${missing[*]}, no bundle/ and $1: run scripts/bundle.sh on a Debian machine that has them, then carry bundle/ with the repository (docs/gpus.md: \"GPU machines without internet\")" >&2
    exit 1
}
command -v apt-get >/dev/null && command -v dpkg-query >/dev/null || no_registry "no apt-get here"

if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        exec sudo "$0" "$@"
    fi
    echo "dptrain needs these Debian packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "installing with apt-get (a minute or two on a fresh machine): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A machine without a registry fails here within seconds, not after apt's retries.
timeout 120 apt-get -o Acquire::Retries=0 -o Acquire::http::Timeout=15 update -qq >/dev/null 2>&1 ||
    no_registry "apt-get update failed (no package registry reachable)"
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
