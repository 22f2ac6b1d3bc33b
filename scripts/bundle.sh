#!/usr/bin/env bash
# Assembles bundle/: everything dptrain needs from Debian to build, test and
# train on a machine that has a compiler, nvcc, meson and ninja but no package
# registry (a GPU node without internet access). Run it on a Debian machine
# with the packages installed (scripts/deps.sh), copy the repository with
# bundle/ in it to the node, and there run scripts/build.sh, scripts/test.sh
# or scripts/run.sh as usual: they see bundle/ and use it.
#
#   bundle/include/    cxxopts.hpp, nlohmann/, catch2/, zlib.h, zconf.h
#   bundle/lib/        libz.a (linked statically: no zlib package needed there)
#   bundle/fashion-mnist/  the four IDX files of dataset-fashion-mnist (30 MB)
#
# No pkg-config is needed on the node: meson reads the folder (-Dbundle=...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
out=bundle
rm -rf "$out.tmp" && mkdir -p "$out.tmp/include" "$out.tmp/lib" "$out.tmp/fashion-mnist"
cp /usr/include/cxxopts.hpp /usr/include/zlib.h /usr/include/zconf.h "$out.tmp/include/"
cp -r /usr/include/catch2 /usr/include/nlohmann "$out.tmp/include/"
cp "$(dpkg -L zlib1g-dev | grep '/libz\.a$')" "$out.tmp/lib/"
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$out.tmp/fashion-mnist/"
cat >"$out.tmp/README" <<TEXT
dptrain offline bundle, made by scripts/bundle.sh on $(hostname) from Debian packages:
$(dpkg-query -W -f='  ${Package} ${Version}\n' libcxxopts-dev nlohmann-json3-dev catch2 zlib1g-dev dataset-fashion-mnist)
TEXT
rm -rf "$out" && mv "$out.tmp" "$out"
echo "bundle/: $(du -sh "$out" | cut -f1) ($(find "$out" -type f | wc -l) files); copy the repository with it to the offline machine"
