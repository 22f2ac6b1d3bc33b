#!/usr/bin/env python3
"""src/'s folders are layers: a file includes headers of its own folder and of
the folders below it, never above. The order, lowest first, is the one
src/README.md describes; this check reads every #include "..." of src/ and
fails naming each that runs upward or names a file that is not there.

    test_layers.py SRC_DIR
"""
import os
import re
import sys

ORDER = ['base', 'model', 'devices', 'parallel', 'run', 'commands', '.']  # '.': src/main.cpp

def main() -> int:
    src = sys.argv[1]
    rank = {name: i for i, name in enumerate(ORDER)}
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    problems, checked = [], 0
    for folder, _, names in os.walk(src):
        rel = os.path.relpath(folder, src)
        top = rel.split(os.sep)[0]
        if top not in rank:
            problems.append(f'{rel}/: a folder that is no layer (add it to ORDER and src/README.md)')
            continue
        if top == 'devices' and rel != 'devices':  # the emulated CUDA runtime: headers of its own
            continue
        for name in names:
            if not name.endswith(('.cpp', '.hpp')):
                continue
            path = os.path.join(folder, name)
            for target in include.findall(open(path, encoding='utf-8').read()):
                layer = target.split('/')[0] if '/' in target else None
                if layer not in rank or layer == '.':
                    continue  # kernels/ (cpu/, cuda/, shapes.hpp), generated build_info.hpp
                checked += 1
                if not os.path.isfile(os.path.join(src, target)):
                    problems.append(f'{os.path.relpath(path, src)}: includes "{target}", which is not in src/')
                elif rank[layer] > rank[top]:
                    problems.append(f'{os.path.relpath(path, src)} ({top}) includes "{target}" ({layer}), a layer above')
    for p in problems:
        print('FAIL:', p)
    print(f'{checked} includes between the layers of {src} checked: {len(problems)} problem(s)')
    return 1 if problems or checked == 0 else 0

if __name__ == '__main__':
    sys.exit(main())
