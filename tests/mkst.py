#!/usr/bin/env python3
"""mkst.py - craft safetensors files and checkpoints for dcr's tests.

Standard library only. A CKPT argument is either a .safetensors file or a
directory of them (with model.safetensors.index.json when it has one).

  mkst.py new CKPT SPEC...          write a checkpoint (a directory gets one
                                    model.safetensors; --files N spreads the
                                    tensors over N files with an index)
  mkst.py set CKPT NAME IDX=HEX...  set element IDX of NAME to the stored bits
                                    HEX (an element is the dtype's width, or
                                    one byte for the sub-byte F4/F6 dtypes)
  mkst.py xor CKPT NAME IDX=HEX...  XOR element IDX's stored bits with HEX
  mkst.py get CKPT NAME IDX...      print elements' stored bits in hex
  mkst.py add CKPT SPEC [--file F]  add a tensor (to file F, created if new)
  mkst.py rm CKPT NAME...           remove tensors (a file left empty goes)
  mkst.py retype CKPT SPEC          replace a tensor by SPEC (same name)
  mkst.py move CKPT NAME FILE       move a tensor to FILE (created if new)
  mkst.py shard CKPT OUTDIR N       rewrite CKPT as N files plus an index
  mkst.py raw OUT HEADER [DATALEN] [--hlen N]
                                    write an arbitrary header (a string, as
                                    given, UTF-8 unless it starts with 'hex:')
                                    and DATALEN zero bytes; --hlen overrides
                                    the 8-byte header length
  mkst.py same A B                  exit 0 when A and B hold the same tensors
                                    (names, dtypes, shapes, stored bytes),
                                    else print the first difference, exit 1
  mkst.py list CKPT                 print "name dtype shape file nbytes sha256"

SPEC is NAME:DTYPE:SHAPE[:FILL], SHAPE like 4x8 (or "" / "scalar" for a
scalar, 0x3 for an empty tensor), FILL one of
  rand[/SEED]   random bytes (default; seeded by the name and SEED)
  zero          zero bytes
  hex/HEX       the exact bytes
  rep/HEX       HEX repeated to the tensor's size
"""
import hashlib
import json
import os
import random
import struct
import sys

BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
    "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
INDEX = "model.safetensors.index.json"


def die(msg):
    sys.stderr.write("mkst.py: " + msg + "\n")
    sys.exit(2)


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    bits = n * BITS[dtype]
    if bits % 8:
        die("%s%s is not a whole number of bytes" % (dtype, shape))
    return bits // 8


def unit(dtype):
    return max(1, BITS[dtype] // 8)


class Tensor:
    def __init__(self, name, dtype, shape, data):
        self.name, self.dtype, self.shape, self.data = name, dtype, list(shape), bytearray(data)
        if len(self.data) != nbytes(dtype, shape):
            die("tensor %s: %d bytes for %s%s" % (name, len(data), dtype, shape))


def parse_spec(spec):
    parts = spec.split(":")
    if len(parts) < 3 or len(parts) > 4:
        die("bad SPEC '%s'" % spec)
    name, dtype, shp = parts[0], parts[1], parts[2]
    fill = parts[3] if len(parts) == 4 else "rand"
    if dtype not in BITS:
        die("unknown dtype '%s'" % dtype)
    shape = [] if shp in ("", "scalar") else [int(x) for x in shp.split("x")]
    n = nbytes(dtype, shape)
    if fill.startswith("rand"):
        seed = fill[5:] if fill.startswith("rand/") else "0"
        data = random.Random(name + "/" + seed).randbytes(n)
    elif fill == "zero":
        data = bytes(n)
    elif fill.startswith("hex/"):
        data = bytes.fromhex(fill[4:])
    elif fill.startswith("rep/"):
        pat = bytes.fromhex(fill[4:])
        data = (pat * (n // max(1, len(pat)) + 1))[:n]
    else:
        die("bad FILL '%s'" % fill)
    return Tensor(name, dtype, shape, data)


# ---- reading and writing files ----

def read_file(path):
    """Tensors (in data order) and metadata of one safetensors file."""
    with open(path, "rb") as f:
        buf = f.read()
    (hl,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + hl].decode("utf-8"))
    meta = hdr.pop("__metadata__", None)
    base = 8 + hl
    ts = []
    for name, v in hdr.items():
        b, e = v["data_offsets"]
        ts.append((b, Tensor(name, v["dtype"], v["shape"], buf[base + b:base + e])))
    ts.sort(key=lambda x: x[0])
    return [t for _, t in ts], meta


def write_file(path, tensors, meta=None):
    hdr = {}
    if meta:
        hdr["__metadata__"] = meta
    pos = 0
    for t in tensors:
        hdr[t.name] = {"dtype": t.dtype, "shape": t.shape,
                       "data_offsets": [pos, pos + len(t.data)]}
        pos += len(t.data)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".mkst-tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors:
            f.write(t.data)
    os.replace(tmp, path)


class Ckpt:
    """files: ordered dict file name -> [Tensor]; a single file when not is_dir."""

    def __init__(self, path):
        self.path = path
        self.is_dir = os.path.isdir(path)
        self.files, self.meta, self.has_index = {}, {}, False
        if not self.is_dir:
            if os.path.exists(path):
                ts, m = read_file(path)
                self.files[os.path.basename(path)] = ts
                self.meta[os.path.basename(path)] = m
            return
        ip = os.path.join(path, INDEX)
        if os.path.exists(ip):
            self.has_index = True
            with open(ip) as f:
                names = sorted(set(json.load(f)["weight_map"].values()))
        else:
            names = sorted(n for n in os.listdir(path)
                           if n.endswith(".safetensors") and not n.startswith("."))
        for n in names:
            ts, m = read_file(os.path.join(path, n))
            self.files[n], self.meta[n] = ts, m

    def tensors(self):
        for fn, ts in self.files.items():
            for t in ts:
                yield fn, t

    def find(self, name):
        for fn, t in self.tensors():
            if t.name == name:
                return fn, t
        die("no tensor '%s' in '%s'" % (name, self.path))

    def save(self, old_files=()):
        if not self.is_dir:
            (fn, ts), = self.files.items()
            write_file(self.path, ts, self.meta.get(fn))
            return
        for fn, ts in self.files.items():
            write_file(os.path.join(self.path, fn), ts, self.meta.get(fn))
        for fn in old_files:
            if fn not in self.files and os.path.exists(os.path.join(self.path, fn)):
                os.unlink(os.path.join(self.path, fn))
        ip = os.path.join(self.path, INDEX)
        if self.has_index or len(self.files) > 1:
            total = sum(len(t.data) for _, t in self.tensors())
            wm = {t.name: fn for fn, t in self.tensors()}
            with open(ip + ".tmp", "w") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)
            os.replace(ip + ".tmp", ip)
        elif os.path.exists(ip):
            os.unlink(ip)


def shard_names(n):
    if n == 1:
        return ["model.safetensors"]
    return ["model-%05d-of-%05d.safetensors" % (i + 1, n) for i in range(n)]


def spread(tensors, n):
    names = shard_names(n)
    files = {fn: [] for fn in names}
    for i, t in enumerate(tensors):
        files[names[i * n // max(1, len(tensors))]].append(t)
    return files


# ---- commands ----

def cmd_new(args):
    files = 1
    if args[:1] == ["--files"]:
        files, args = int(args[1]), args[2:]
    path, specs = args[0], args[1:]
    ts = [parse_spec(s) for s in specs]
    if path.endswith(".safetensors"):
        write_file(path, ts)
        return
    os.makedirs(path, exist_ok=True)
    c = Ckpt(path)
    old = list(c.files)
    c.files, c.meta = spread(ts, files), {}
    c.has_index = files > 1
    c.save(old)


def cmd_set(args):
    c = Ckpt(args[0])
    fn, t = c.find(args[1])
    u = unit(t.dtype)
    for a in args[2:]:
        i, h = a.split("=")
        i, v = int(i), int(h, 16)
        if (i + 1) * u > len(t.data):
            die("element %d is past the end of '%s'" % (i, t.name))
        t.data[i * u:(i + 1) * u] = v.to_bytes(u, "little")
    c.save()


def cmd_xor(args):
    c = Ckpt(args[0])
    fn, t = c.find(args[1])
    u = unit(t.dtype)
    for a in args[2:]:
        i, h = a.split("=")
        i, v = int(i), int(h, 16)
        if (i + 1) * u > len(t.data):
            die("element %d is past the end of '%s'" % (i, t.name))
        old = int.from_bytes(t.data[i * u:(i + 1) * u], "little")
        t.data[i * u:(i + 1) * u] = (old ^ v).to_bytes(u, "little")
    c.save()


def cmd_get(args):
    c = Ckpt(args[0])
    fn, t = c.find(args[1])
    u = unit(t.dtype)
    for a in args[2:]:
        i = int(a)
        print("%x" % int.from_bytes(t.data[i * u:(i + 1) * u], "little"))


def cmd_add(args):
    fname = None
    if "--file" in args:
        k = args.index("--file")
        fname = args[k + 1]
        args = args[:k] + args[k + 2:]
    c = Ckpt(args[0])
    t = parse_spec(args[1])
    if fname is None:
        fname = list(c.files)[-1] if c.files else "model.safetensors"
    c.files.setdefault(fname, []).append(t)
    c.save()


def cmd_rm(args):
    c = Ckpt(args[0])
    for name in args[1:]:
        fn, t = c.find(name)
        c.files[fn].remove(t)
    old = list(c.files)
    if c.is_dir:
        c.files = {fn: ts for fn, ts in c.files.items() if ts}
    c.save(old)


def cmd_retype(args):
    c = Ckpt(args[0])
    t = parse_spec(args[1])
    fn, old = c.find(t.name)
    ts = c.files[fn]
    ts[ts.index(old)] = t
    c.save()


def cmd_move(args):
    c = Ckpt(args[0])
    fn, t = c.find(args[1])
    c.files[fn].remove(t)
    c.files.setdefault(args[2], []).append(t)
    old = list(c.files)
    c.files = {f: ts for f, ts in c.files.items() if ts}
    c.save(old)


def cmd_shard(args):
    c = Ckpt(args[0])
    out = Ckpt.__new__(Ckpt)
    out.path, out.is_dir, out.meta = args[1], True, {}
    os.makedirs(args[1], exist_ok=True)
    out.files = spread(sorted((t for _, t in c.tensors()), key=lambda t: t.name), int(args[2]))
    out.has_index = int(args[2]) > 1
    out.save()


def cmd_raw(args):
    hlen = None
    if "--hlen" in args:
        k = args.index("--hlen")
        hlen = int(args[k + 1])
        args = args[:k] + args[k + 2:]
    out, hdr = args[0], args[1]
    datalen = int(args[2]) if len(args) > 2 else 0
    h = bytes.fromhex(hdr[4:]) if hdr.startswith("hex:") else hdr.encode("utf-8")
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h) if hlen is None else hlen) + h + bytes(datalen))


def canon(path):
    c = Ckpt(path)
    return {t.name: (t.dtype, t.shape, bytes(t.data)) for _, t in c.tensors()}


def cmd_same(args):
    a, b = canon(args[0]), canon(args[1])
    for n in sorted(set(a) | set(b)):
        if n not in a or n not in b:
            print("tensor '%s' only in %s" % (n, args[0] if n in a else args[1]))
            sys.exit(1)
        if a[n][:2] != b[n][:2]:
            print("tensor '%s': %s%s vs %s%s" % (n, a[n][0], a[n][1], b[n][0], b[n][1]))
            sys.exit(1)
        if a[n][2] != b[n][2]:
            k = next(i for i in range(len(a[n][2])) if a[n][2][i] != b[n][2][i])
            print("tensor '%s': byte %d differs" % (n, k))
            sys.exit(1)


def cmd_list(args):
    c = Ckpt(args[0])
    for fn, t in sorted(c.tensors(), key=lambda x: x[1].name):
        print("%s %s %s %s %d %s" % (t.name, t.dtype, "x".join(map(str, t.shape)) or "scalar",
                                     fn, len(t.data), hashlib.sha256(t.data).hexdigest()))


CMDS = {"new": cmd_new, "set": cmd_set, "xor": cmd_xor, "get": cmd_get, "add": cmd_add, "rm": cmd_rm, "retype": cmd_retype,
        "move": cmd_move, "shard": cmd_shard, "raw": cmd_raw, "same": cmd_same,
        "list": cmd_list}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in CMDS:
        sys.stderr.write(__doc__)
        sys.exit(2)
    CMDS[sys.argv[1]](sys.argv[2:])
