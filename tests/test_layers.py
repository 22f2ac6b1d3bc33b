#!/usr/bin/env python3
"""src/'s folders are layers: a file includes headers of its own folder and of
the folders below it, never above. The order, lowest first, is the one
src/README.md describes; this check reads every #include "..." of src/ and
fails naming each that runs upward or names a file that is not there. It
also holds the trainer to asking devices what they can do (Capabilities),
never what kind they are: no GPU header, no DeviceKind, no count of GPUs
or CPU devices in run/trainer.cpp's or trainer.hpp's code (comments aside).

    test_layers.py SRC_DIR
"""
import os
import re
import sys

ORDER = ['base', 'model', 'devices', 'parallel', 'run', 'commands', '.']  # '.': src/main.cpp
KIND_BLIND = ['run/trainer.cpp', 'run/trainer.hpp']
KIND_WORDS = re.compile(r'devices/gpu\.hpp|\bDeviceKind\b|\.gpus\b|\.cpus\b|\.mixed\(\)|\bkind\(\)')
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/', re.S)

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
    for name in KIND_BLIND:
        text = open(os.path.join(src, name), encoding='utf-8').read()
        code = COMMENT.sub(lambda m: '\n' * m.group(0).count('\n'), text)  # lines keep their numbers
        for line_no, line in enumerate(code.split('\n'), 1):
            for word in KIND_WORDS.findall(line):
                problems.append(f'{name}:{line_no}: "{word}": the trainer asks capabilities, not kinds')
    for p in problems:
        print('FAIL:', p)
    print(f'{checked} includes between the layers of {src} checked: {len(problems)} problem(s)')
    return 1 if problems or checked == 0 else 0

if __name__ == '__main__':
    sys.exit(main())
