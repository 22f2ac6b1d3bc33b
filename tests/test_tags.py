#!/usr/bin/env python3
"""Every test case of tests/test_AREA.cpp carries the tag [AREA], and none
carries another file's area: then `unit_tests [AREA]`, one meson test a
file (tests/meson.build), runs exactly that file's test cases, and a test
case outside every area cannot exist. Every test_*.cpp of the folder but
test_main.cpp is in the meson list.

    test_tags.py TESTS_DIR FILE...      (the meson list's files)
"""
import glob
import os
import re
import sys

tests_dir, listed = sys.argv[1], sys.argv[2:]
on_disk = {os.path.basename(f) for f in glob.glob(os.path.join(tests_dir, "test_*.cpp"))} - {"test_main.cpp"}
areas = {f[len("test_"):-len(".cpp")] for f in on_disk}
problems = [f"{f}: not in tests/meson.build's unit_test_files" for f in sorted(on_disk - set(listed))]
cases = 0
for name in sorted(listed):
    area = name[len("test_"):-len(".cpp")]
    text = open(os.path.join(tests_dir, name)).read()
    for m in re.finditer(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"(?:,\s*"([^"]*)")?', text):
        cases += 1
        tags = re.findall(r"\[([^\]]*)\]", m.group(2) or "")
        line = text.count("\n", 0, m.start()) + 1
        if area not in tags:
            problems.append(f"{name}:{line}: \"{m.group(1)}\" lacks the tag [{area}]")
        for other in sorted(set(tags) & areas - {area}):
            problems.append(f"{name}:{line}: \"{m.group(1)}\" is tagged [{other}], another file's area")
for p in problems:
    print("FAIL:", p)
if not problems:
    print(f"ok: {cases} test cases in {len(listed)} files, each tagged with its file's area and no other")
sys.exit(1 if problems else 0)
