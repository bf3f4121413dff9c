#!/bin/sh
# gen-checkpoint writes valid sharded bf16 Llama checkpoints whose steps
# change about the requested share of stored values, reproducibly.
set -eu

command -v python3 >/dev/null 2>&1 || { echo "skip: python3 not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Usage: -h to stdout with status 0, bad usage 129.
gen-checkpoint -h >"$tmp/help"
grep -q '^usage: gen-checkpoint' "$tmp/help"
st=0; gen-checkpoint --no-such-option "$tmp/x" 2>"$tmp/err" || st=$?
test "$st" = 129
grep -q '^gen-checkpoint: error: ' "$tmp/err"

gen-checkpoint -j 3 --size 1M --steps 2 --shards 2 --change 0.03 --seed 7 \
	"$tmp/a" 2>"$tmp/log"
gen-checkpoint -j 1 -q --size 1M --steps 2 --shards 2 --change 0.03 --seed 7 "$tmp/b"
gen-checkpoint -q --size 1M --steps 1 --shards 2 --change 0.03 --seed 8 "$tmp/c"
gen-checkpoint -q --size 1M --steps 1 --change 1 "$tmp/d"

# Same seed, any thread count: identical bytes. Another seed: different.
for v in v0 v1 v2; do
	for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors \
		 model.safetensors.index.json; do
		cmp "$tmp/a/$v/$f" "$tmp/b/$v/$f"
	done
done
if cmp -s "$tmp/a/v0/model-00001-of-00002.safetensors" \
	  "$tmp/c/v0/model-00001-of-00002.safetensors"; then
	echo "different seeds gave identical output" >&2
	exit 1
fi

python3 - "$tmp" <<'EOF'
import json, os, re, struct, sys
from array import array

tmp = sys.argv[1]

def fail(msg):
    sys.exit("t0010: " + msg)

def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hl,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + hl])
    data = raw[8 + hl:]
    meta = hdr.pop("__metadata__", {})
    if meta.get("format") != "pt":
        fail(f"{path}: __metadata__ format is not pt: {meta}")
    out, spans = {}, []
    for name, t in hdr.items():
        if t["dtype"] != "BF16":
            fail(f"{path}: {name} is {t['dtype']}")
        b, e = t["data_offsets"]
        n = 1
        for d in t["shape"]:
            n *= d
        if e - b != 2 * n:
            fail(f"{path}: {name}: offsets do not match the shape")
        spans.append((b, e))
        a = array("H")
        a.frombytes(data[b:e])
        if sys.byteorder == "big":
            a.byteswap()
        out[name] = (tuple(t["shape"]), a)
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            fail(f"{path}: data is not contiguous")
        pos = e
    if pos != len(data):
        fail(f"{path}: {len(data) - pos} bytes after the last tensor")
    return out

def read_ckpt(d, sharded=True):
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors, where = {}, {}
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    for f in files:
        for name, val in read_st(os.path.join(d, f)).items():
            if name in tensors:
                fail(f"{d}: {name} in two files")
            tensors[name] = val
            where[name] = f
    if sharded:
        if files != ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]:
            fail(f"{d}: unexpected files {files}")
        idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        if idx["weight_map"] != where:
            fail(f"{d}: index weight_map does not match the files")
        total = sum(2 * len(a) for _, a in tensors.values())
        if idx["metadata"]["total_size"] != total:
            fail(f"{d}: index total_size {idx['metadata']['total_size']} != {total}")
    else:
        if files != ["model.safetensors"] or os.path.exists(
                os.path.join(d, "model.safetensors.index.json")):
            fail(f"{d}: unexpected files {sorted(os.listdir(d))}")
    return cfg, tensors

def expected_shapes(c):
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    if q != h or c["num_attention_heads"] % c["num_key_value_heads"]:
        fail(f"bad head config {c}")
    s = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,),
         "lm_head.weight": (v, h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                  p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                  p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                  p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
                  p + "post_attention_layernorm.weight": (h,)})
    return s

def bf16(b):
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]

vers = [read_ckpt(os.path.join(tmp, "a", f"v{k}")) for k in range(3)]
cfg = vers[0][0]
shapes = expected_shapes(cfg)
total = 0
for k, (c, t) in enumerate(vers):
    if c != cfg:
        fail(f"v{k}: config.json differs")
    got = {n: s for n, (s, _) in t.items()}
    if got != shapes:
        bad = sorted(n for n in set(got) | set(shapes) if got.get(n) != shapes.get(n))
        fail(f"v{k}: names/shapes differ from the Llama layout: {bad[:5]}")
total = sum(len(a) for _, a in vers[0][1].values())
if not 0.9 * 2**19 <= total <= 1.1 * 2**19:
    fail(f"--size 1M gave {total} parameters")

# Initial values: matrices about N(0, 0.02), norm weights about 1.
emb = vers[0][1]["model.embed_tokens.weight"][1]
xs = [bf16(b) for b in emb[:20000]]
mean = sum(xs) / len(xs)
sd = (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5
if abs(mean) > 0.002 or not 0.018 < sd < 0.022:
    fail(f"embedding mean {mean} sd {sd}")
norm = [bf16(b) for b in vers[0][1]["model.norm.weight"][1]]
if not all(0.8 < x < 1.2 for x in norm):
    fail("norm weights are not near 1")

# Steps: about 3% of stored values change, mostly by one ULP.
log = open(os.path.join(tmp, "log")).read()
for k in (1, 2):
    changed = ulp1 = 0
    for name, (_, new) in vers[k][1].items():
        old = vers[k - 1][1][name][1]
        for x, y in zip(old, new):
            if x != y:
                changed += 1
                if (x ^ y) & 0x8000 == 0 and abs(x - y) == 1:
                    ulp1 += 1
    share = changed / total
    if not 0.025 <= share <= 0.035:
        fail(f"step {k}: {share:.4f} of values changed, want about 0.03")
    if ulp1 < 0.8 * changed:
        fail(f"step {k}: only {ulp1} of {changed} changes are one ULP")
    m = re.search(rf"step {k}: [0-9.]+% of stored values changed \((\d+) of (\d+)\)", log)
    if not m or int(m.group(1)) != changed or int(m.group(2)) != total:
        fail(f"step {k}: reported change count does not match {changed} of {total}")

# --change 1: every stored value changes; one file, no index.
c, d0 = read_ckpt(os.path.join(tmp, "d", "v0"), sharded=False)
_, d1 = read_ckpt(os.path.join(tmp, "d", "v1"), sharded=False)
same = sum(x == y for n in d0 for x, y in zip(d0[n][1], d1[n][1]))
if same:
    fail(f"--change 1: {same} values did not change")
EOF
