#!/usr/bin/env bash
# Installs what dptrain needs to build, test and train on a Debian machine.
# As root it runs apt-get; otherwise it names the missing packages and how to get them.
# Sourced by run.sh and test.sh; safe to run again (it installs only what is missing).
set -euo pipefail

# An offline bundle (scripts/bundle.sh) replaces the packages: nothing to install.
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -d $root/bundle/include ]]; then
    if [[ ! -e $root/data/fashion-mnist ]]; then ln -s ../bundle/fashion-mnist "$root/data/fashion-mnist"; fi
    exit 0
fi

packages=(g++ pkg-config meson ninja-build libcxxopts-dev catch2 zlib1g-dev dataset-fashion-mnist)
# --with-plot adds matplotlib for scripts/plot.py.
[[ " $* " == *" --with-plot "* ]] && packages+=(python3-matplotlib)
# --with-fuzz adds clang and its libFuzzer runtime for scripts/fuzz.sh.
[[ " $* " == *" --with-fuzz "* ]] && packages+=(clang libclang-rt-dev)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        exec sudo "$0" "$@"
    fi
    echo "dptrain needs these Debian packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
