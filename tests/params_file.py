"""Reads a --save file (README: "Parameter files") for the shell tests:
floats(path) is its parameters, in file order. The test scripts put this
folder on PYTHONPATH."""
import struct


def floats(path):
    data = open(path, "rb").read()
    at = data.index(b"\ndata float32-le ") + 1
    start = data.index(b"\n", at) + 1
    count = int(data[at:start - 1].split()[-1])
    return struct.unpack(f"<{count}f", data[start:start + 4 * count])
