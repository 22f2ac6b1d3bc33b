#!/usr/bin/env bash
# One command from a fresh clone to a trained LeNet: installs what is missing
# (scripts/deps.sh), builds (scripts/build.sh), and trains. Arguments go to
# dptrain, e.g.  scripts/run.sh --cpus 2 --batch 512 --lr 0.6
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
[[ -f build/build.ninja ]] || echo "configuring and building build/ (the first time takes a few minutes: every kernel is compiled)"
scripts/build.sh >/dev/null
exec build/dptrain "$@"
