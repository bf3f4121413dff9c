#!/usr/bin/env python3
"""apply-base.py - write the tensors of fuzz-parsers.c's apply target (or,
with --place, the canonical tensors of its place target) as a checkpoint,
and a step from it, so that dcr-diff and dcr-pack make seeds that apply
whole to what the harness holds.

usage: apply-base.py [--place] DIR
  DIR/v0/model.safetensors  the harness's tensors: byte j of tensor k is
                            apply_byte(k, j), as in fuzz-parsers.c
  DIR/v1/model.safetensors  about 3% of each tensor's elements changed
                            (10% of model.d, model.g whole; model.h's new
                            values finite, which its residual piece keeps)
The tables below must match, in their order, ftab[] in fuzz-parsers.c and
the canonical tensors of its place target's map (pmap).
"""
import json
import os
import random
import struct
import sys

# name, dtype, shape, bits per element
TENSORS = [
    ("model.a", "BF16", [64, 48], 16),
    ("model.b", "F32", [500], 32),
    ("model.c", "F16", [33, 17], 16),
    ("model.d", "U8", [1024], 8),
    ("model.e", "F64", [100], 64),
    ("model.f", "F4", [4, 64], 4),
    ("model.g", "F8_E4M3", [300], 8),
]
# the place target's canonical tensors: no sub-byte dtype (a layout map
# has none), and one held through a residual piece
PLACE = [t for t in TENSORS if t[0] != "model.f"] + [("model.h", "BF16", [256], 16)]


def apply_byte(k, j):
    return ((j * 2654435761 + k * 40503) >> 11) & 0xff


def nelem(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def write(path, tensors, datas):
    header, off = {}, 0
    for (name, dtype, shape, _), d in zip(tensors, datas):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(d)]}
        off += len(d)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(datas))


def main():
    args = sys.argv[1:]
    tensors = TENSORS
    if args[:1] == ["--place"]:
        tensors, args = PLACE, args[1:]
    out = args[0]
    base = []
    for k, (_, _, shape, bits) in enumerate(tensors):
        n = nelem(shape) * bits // 8
        base.append(bytes(apply_byte(k, j) for j in range(n)))
    write(os.path.join(out, "v0", "model.safetensors"), tensors, base)
    rnd = random.Random(1)
    step = []
    for (name, _, shape, bits), b in zip(tensors, base):
        d = bytearray(b)
        if name == "model.h":
            for _ in range(max(1, len(d) // 2 * 3 // 100)):
                at = rnd.randrange(len(d) // 2) * 2
                d[at:at + 2] = rnd.randrange(0x3f00, 0x4100).to_bytes(2, "little")
        elif name == "model.g":
            d = bytearray(rnd.randrange(256) for _ in d)
        else:
            width = max(bits // 8, 1)  # F4: a byte, two elements
            share = 0.10 if name == "model.d" else 0.03
            for _ in range(max(1, int(len(d) // width * share))):
                at = rnd.randrange(len(d) // width) * width
                d[at:at + width] = bytes(rnd.randrange(256) for _ in range(width))
        step.append(bytes(d))
    write(os.path.join(out, "v1", "model.safetensors"), tensors, step)


if __name__ == "__main__":
    main()
