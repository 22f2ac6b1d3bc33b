#!/usr/bin/env bash
# Times one of README.md's two commands on a fresh minimal Debian 12, from
# nothing installed to its exit: the figures of README.md's table "How long
# they took".
#
#   sudo scripts/fresh_debian.sh [--cuda] run|test
#
# Makes a chroot with `debootstrap --variant=minbase bookworm` (kept as a
# tarball in $DPTRAIN_CHROOT, default /var/tmp/dptrain-fresh-debian, so that
# later runs skip the download), puts a clone of this repository's HEAD in
# it, and runs scripts/run.sh or scripts/test.sh there as root, the way a
# user on a new machine would. With --cuda, this machine's /usr/local/cuda
# is seen in the chroot (read-only): a toolkit that is present, no GPU
# needed. Each call starts from the tarball again; the chroot is removed at
# the end unless DPTRAIN_KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: sudo scripts/fresh_debian.sh [--cuda] run|test" >&2; exit 2; }
cuda=no
if [[ ${1:-} == --cuda ]]; then cuda=yes; shift; fi
[[ $# -eq 1 && ( $1 == run || $1 == test ) ]] || usage
command=$1
if [[ $(id -u) -ne 0 ]]; then
    echo "fresh_debian.sh: needs root (debootstrap, chroot and mounts)" >&2
    exit 2
fi
if ! command -v debootstrap >/dev/null; then
    echo "fresh_debian.sh: needs debootstrap (apt-get install debootstrap)" >&2
    exit 2
fi
if [[ $cuda == yes && ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "fresh_debian.sh: --cuda: no toolkit at /usr/local/cuda" >&2
    exit 2
fi

store=${DPTRAIN_CHROOT:-/var/tmp/dptrain-fresh-debian}
base=$store/bookworm-minbase.tar
mkdir -p "$store"
if [[ ! -f $base ]]; then
    echo "debootstrap: a minimal Debian 12 into $store/base (once; a few minutes)"
    rm -rf "$store/base"
    debootstrap --variant=minbase bookworm "$store/base" http://deb.debian.org/debian >"$store/debootstrap.log" ||
        { tail -20 "$store/debootstrap.log"; exit 1; }
    tar -C "$store/base" -cf "$base.tmp" . && mv "$base.tmp" "$base"
    rm -rf "$store/base"
fi

label=$command$([[ $cuda == yes ]] && echo -cuda || true)
dir=$store/$label
cleanup() {
    # Every mount inside the chroot, deepest first: this script's and what
    # the run mounted itself (ip netns's /run/netns).
    local m
    while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
    if [[ ${DPTRAIN_KEEP:-0} != 1 ]]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bind() { mkdir -p "$dir$2"; mount "${@:3}" --bind "$1" "$dir$2"; }

rm -rf "$dir"
mkdir -p "$dir"
tar -C "$dir" -xf "$base"
cp /etc/resolv.conf "$dir/etc/resolv.conf"
git clone -q "$PWD" "$dir/root/dptrain"
mount -t proc proc "$dir/proc"
bind /sys /sys
bind /dev /dev
bind /dev/pts /dev/pts
if [[ $cuda == yes ]]; then
    bind "$(readlink -f /usr/local/cuda)" /usr/local/cuda
    mount -o remount,ro,bind "$dir/usr/local/cuda"
fi

echo "scripts/$command.sh in a fresh Debian 12 ($dir), CUDA: $cuda, commit $(git rev-parse --short HEAD)"
t0=$SECONDS rc=0
chroot "$dir" /usr/bin/env -i HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/dptrain && scripts/$command.sh" || rc=$?
s=$((SECONDS - t0))
echo "fresh_debian.sh: scripts/$command.sh, CUDA $cuda: exit $rc after $((s / 60)) min $((s % 60)) s ($(nproc) cores, $(date -u +%F))"
exit $rc
