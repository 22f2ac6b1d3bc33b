#!/usr/bin/env bash
# The value of an option of a configured build, a list's values joined by
# commas: scripts/build_option.sh BUILD_DIR NAME (e.g. build gpu_archs).
set -euo pipefail
meson introspect "$1" --buildoptions | python3 -c '
import json, sys
value = next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1])
print(",".join(value) if isinstance(value, list) else value)' "$2"
