#!/usr/bin/env python3
"""layout-step.py - training steps and fp32 training shards for the placement
tests, without the map code (python stdlib only).

  layout-step.py step CANON -o NEW [--rate P] [--seed N]
      NEW/model.safetensors: CANON with a fraction P of each tensor's elements
      given new random bits; about one tensor in five is left unchanged
  layout-step.py widen LAYOUT -o OUT [--jitter]
      every rank's BF16 tensors as F32 with low mantissa bits that depend on
      the value alone (so replicas agree): bf16 x -> f32 bits x<<16 | f(x);
      --jitter flips the lowest bit for about one value in eight where that
      cannot change the rounding (a training step below bf16 resolution);
      --exact: plain widening, low bits zero (an fp32 serving copy)
  layout-step.py export CANON -o OUT
      what a trainer exports from such fp32 weights: every BF16 element x
      becomes round-to-nearest-even(x<<16 | f(x)) (NaN: 0x7fc0)
  --zero-centered (widen, export): Megatron's zero-centered gamma
      (apply_layernorm_1p): a norm weight's fp32 master w is stored as
      fp32(w - 1) (widen: shard tensors named *layer_norm* or *layernorm*),
      and exported as round-to-nearest-even(fp32(fp32(w - 1) + 1)) (export:
      canonical tensors named *norm.weight*), both sums rounded in fp32
"""
import argparse
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "layout_slice", os.path.join(os.path.dirname(os.path.abspath(__file__)), "layout-slice.py"))
ls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ls)


def noise(x):
    return (x * 40503 + 12345) & 0xFFFF


def rne(u):
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return 0x7FC0
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def read_dir(path):
    files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in sorted(os.listdir(path))
                                                  if f.endswith(".safetensors")]
    out = {}
    for f in files:
        out.update(ls.st_read(f))
    return out


def cmd_step(a):
    rnd = random.Random(a.seed)
    src = read_dir(a.canon)
    ts = []
    for name in sorted(src):
        dt, shape, data = src[name]
        es = ls.ESIZE[dt]
        b = bytearray(data)
        n = len(b) // es
        if rnd.random() >= 0.2:
            k = max(1, int(n * a.rate))
            for i in rnd.sample(range(n), min(k, n)):
                b[i * es:(i + 1) * es] = rnd.randbytes(es)
        ts.append((name, dt, shape, bytes(b)))
    ls.st_write(os.path.join(a.output, "model.safetensors"), ts)


def jit(x):
    return ((x * 2654435761) >> 7) % 8 == 0 and noise(x) not in (0x8000, 0x8001) \
        and (x & 0x7F80) != 0x7F80


def f32_add(u, v):
    """fp32 bits of fp32(bits u) + v, rounded to fp32 (a double holds the
    exact sum of an fp32 and +-1, so the one rounding is struct's)"""
    f = struct.unpack("<f", struct.pack("<I", u))[0]
    if f != f or f in (float("inf"), float("-inf")):
        return u
    return struct.unpack("<I", struct.pack("<f", f + v))[0]


def widen(data, jitter=False, exact=False, zc=False):
    xs = struct.unpack("<%dH" % (len(data) // 2), data)
    if exact:
        ws = [x << 16 for x in xs]
    else:
        ws = [(x << 16) | (noise(x) ^ (1 if jitter and jit(x) else 0)) for x in xs]
    if zc:
        ws = [f32_add(w, -1.0) for w in ws]
    return struct.pack("<%dI" % len(ws), *ws)


def export(data, zc=False):
    xs = struct.unpack("<%dH" % (len(data) // 2), data)
    ws = [(x << 16) | noise(x) for x in xs]
    if zc:
        ws = [f32_add(f32_add(w, -1.0), 1.0) for w in ws]
    return struct.pack("<%dH" % len(ws), *[rne(w) for w in ws])


def cmd_widen(a):
    for r in sorted(d for d in os.listdir(a.layout) if d.startswith("rank-")):
        src = ls.st_read(os.path.join(a.layout, r, "model.safetensors"))
        ts = []
        # keep the file's tensor order (st_read returns header order)
        for name, (dt, shape, data) in src.items():
            assert dt == "BF16", (name, dt)
            zc = a.zero_centered and ("layer_norm" in name or "layernorm" in name)
            ts.append((name, "F32", shape, widen(data, a.jitter, a.exact, zc)))
        ls.ESIZE["F32"] = 4
        ls.st_write(os.path.join(a.output, r, "model.safetensors"), ts)


def cmd_export(a):
    src = read_dir(a.canon)
    ts = [(name, dt, shape, export(data, a.zero_centered and name.endswith("norm.weight")))
          for name, (dt, shape, data) in sorted(src.items())]
    ls.st_write(os.path.join(a.output, "model.safetensors"), ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step")
    s.add_argument("canon")
    s.add_argument("-o", "--output", required=True)
    s.add_argument("--rate", type=float, default=0.05)
    s.add_argument("--seed", type=int, default=2)
    w = sub.add_parser("widen")
    w.add_argument("layout")
    w.add_argument("-o", "--output", required=True)
    w.add_argument("--jitter", action="store_true")
    w.add_argument("--exact", action="store_true")
    w.add_argument("--zero-centered", action="store_true")
    x = sub.add_parser("export")
    x.add_argument("canon")
    x.add_argument("-o", "--output", required=True)
    x.add_argument("--zero-centered", action="store_true")
    a = ap.parse_args()
    return {"step": cmd_step, "widen": cmd_widen, "export": cmd_export}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main() or 0)
