#!/usr/bin/env bash
# The build configurations that README.md and docs/*.md tell a user to type:
# the options of each `meson setup DIR OPTIONS...` they show, a line each
# (the folder left out, each configuration once). scripts/test.sh builds
# every one of them, whole; tests/test_doc_builds.sh checks that no command
# in the docs is written in a way this cannot read (across two lines).
# Usage: scripts/doc_builds.sh [ROOT]   (default: this checkout)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
grep -ohE 'meson setup [^ `]+( +-[^ `&;|]+)*' "$root/README.md" "$root"/docs/*.md |
    sed -E 's/^meson setup [^ ]+ *//' | awk '!seen[$0]++'
