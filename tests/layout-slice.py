#!/usr/bin/env python3
"""layout-slice.py - training and serving shards by plain slicing.

An oracle for the layout-map tests, written without the map code: it cuts a
canonical (Hugging Face) checkpoint into Megatron training shards and vLLM
serving shards the way those frameworks' converters do, by explicit slicing
and concatenation of rows and columns. Elements are opaque byte strings of
the dtype's width (python stdlib only).

  layout-slice.py canon CONFIG -o DIR [--seed N]
      write DIR/model.safetensors: every canonical tensor, random bytes
  layout-slice.py slice CONFIG CANON --framework megatron|vllm --tp T [--ep E]
                  [--vocab-multiple N] -o DIR
      write DIR/rank-R/model.safetensors for every rank
  layout-slice.py compare A B
      compare two layouts tensor by tensor (names, dtypes, shapes, bytes);
      exit 0 if equal, 1 with the first difference otherwise
"""
import argparse
import json
import os
import random
import struct
import sys

ESIZE = {"BF16": 2, "F16": 2, "F32": 4}
DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


# ---- safetensors ----------------------------------------------------------

def st_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], list(t["shape"]), raw[base + b:base + e])
    return out


def st_write(path, tensors):
    """tensors: list of (name, dtype, shape, bytes)."""
    hdr, off = {}, 0
    for name, dt, shape, data in tensors:
        n = ESIZE[dt]
        for s in shape:
            n *= s
        assert n == len(data), (name, shape, len(data))
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors:
            f.write(t[3])


# ---- the model ------------------------------------------------------------

class Model:
    def __init__(self, cfg):
        self.type = cfg.get("model_type", "llama")
        self.h = cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.K = cfg.get("num_key_value_heads") or self.H
        self.d = cfg.get("head_dim") or self.h // self.H
        self.I = cfg["intermediate_size"]
        self.L = cfg["num_hidden_layers"]
        self.V = cfg["vocab_size"]
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        self.dt = DTYPE[cfg.get("torch_dtype", "bfloat16")]
        self.es = ESIZE[self.dt]
        self.bias = self.type.startswith("qwen2") or bool(cfg.get("attention_bias"))
        self.qknorm = self.type.startswith("qwen3")
        self.E = cfg.get("num_experts", 0) if self.type.endswith("_moe") else 0
        self.Imoe = cfg.get("moe_intermediate_size", 0)
        self.Ish = cfg.get("shared_expert_intermediate_size", 0) or 0
        self.step = cfg.get("decoder_sparse_step", 1) or 1
        self.mlp_only = set(cfg.get("mlp_only_layers", []) or [])

    def moe(self, i):
        return self.E > 0 and i not in self.mlp_only and (i + 1) % self.step == 0

    def canonical(self):
        h, qd, kd = self.h, self.H * self.d, self.K * self.d
        out = [("model.embed_tokens.weight", [self.V, h])]
        for i in range(self.L):
            p = "model.layers.%d." % i
            out.append((p + "input_layernorm.weight", [h]))
            for n, r in (("q", qd), ("k", kd), ("v", kd)):
                out.append((p + "self_attn.%s_proj.weight" % n, [r, h]))
                if self.bias:
                    out.append((p + "self_attn.%s_proj.bias" % n, [r]))
            if self.qknorm:
                out.append((p + "self_attn.q_norm.weight", [self.d]))
                out.append((p + "self_attn.k_norm.weight", [self.d]))
            out.append((p + "self_attn.o_proj.weight", [h, qd]))
            out.append((p + "post_attention_layernorm.weight", [h]))
            if not self.moe(i):
                out += [(p + "mlp.gate_proj.weight", [self.I, h]),
                        (p + "mlp.up_proj.weight", [self.I, h]),
                        (p + "mlp.down_proj.weight", [h, self.I])]
                continue
            out.append((p + "mlp.gate.weight", [self.E, h]))
            for x in range(self.E):
                q = p + "mlp.experts.%d." % x
                out += [(q + "gate_proj.weight", [self.Imoe, h]),
                        (q + "up_proj.weight", [self.Imoe, h]),
                        (q + "down_proj.weight", [h, self.Imoe])]
            if self.Ish:
                q = p + "mlp.shared_expert."
                out += [(q + "gate_proj.weight", [self.Ish, h]),
                        (q + "up_proj.weight", [self.Ish, h]),
                        (q + "down_proj.weight", [h, self.Ish]),
                        (p + "mlp.shared_expert_gate.weight", [1, h])]
        out.append(("model.norm.weight", [h]))
        if not self.tie:
            out.append(("lm_head.weight", [self.V, h]))
        return out


# ---- slicing helpers: a tensor is (shape, bytes) --------------------------

class T2:
    """A row-major tensor viewed as rows of `cols` elements."""

    def __init__(self, shape, data, es):
        self.rows = shape[0]
        self.cols = 1
        for s in shape[1:]:
            self.cols *= s
        self.rest = shape[1:]
        self.data = data
        self.es = es

    def row_bytes(self):
        return self.cols * self.es

    def rows_(self, a, b):
        rb = self.row_bytes()
        return self.data[a * rb:b * rb]

    def chunk_rows(self, n, k):
        """k-th of n equal row chunks."""
        assert self.rows % n == 0
        c = self.rows // n
        return self.rows_(k * c, (k + 1) * c)

    def chunk_cols(self, n, k):
        """k-th of n equal column chunks of a 2-D tensor."""
        assert self.cols % n == 0
        c = self.cols // n
        rb, es = self.row_bytes(), self.es
        return b"".join(self.data[r * rb + k * c * es:r * rb + (k + 1) * c * es]
                        for r in range(self.rows))


def pad_rows(t, rows):
    return t.data + bytes((rows - t.rows) * t.row_bytes())


def round_up(v, m):
    return (v + m - 1) // m * m


class Slicer:
    def __init__(self, model, canon, tp, ep, vocab_multiple):
        self.m = model
        self.c = canon
        self.T = tp
        self.EP = ep
        self.vm = vocab_multiple
        self.ranks = {}

    def t(self, name):
        dt, shape, data = self.c[name]
        assert dt == self.m.dt
        return T2(shape, data, self.m.es)

    def put(self, r, name, shape, data):
        self.ranks.setdefault(r, []).append((name, self.m.dt, shape, data))

    # Megatron-LM (mcore GPT, TE spec) ------------------------------------
    def megatron(self):
        m, T, EP = self.m, self.T, self.EP
        if m.K % T:
            raise SystemExit("megatron: num_key_value_heads %d not divisible by tp %d" % (m.K, T))
        Vp = round_up(m.V, (self.vm or 128) * T)
        emb = pad_rows(self.t("model.embed_tokens.weight"), Vp)
        emb = T2([Vp, m.h], emb, m.es)
        out = None
        if not m.tie:
            out = T2([Vp, m.h], pad_rows(self.t("lm_head.weight"), Vp), m.es)
        p, d = m.H // m.K, m.d
        for r in range(T * EP):
            t, e = r % T, r // T
            self.put(r, "embedding.word_embeddings.weight", [Vp // T, m.h], emb.chunk_rows(T, t))
            for i in range(m.L):
                hp, mp = "model.layers.%d." % i, "decoder.layers.%d." % i
                self.put(r, mp + "self_attention.linear_qkv.layer_norm_weight", [m.h],
                         self.c[hp + "input_layernorm.weight"][2])
                for what in (["weight", "bias"] if m.bias else ["weight"]):
                    q = self.t(hp + "self_attn.q_proj." + what)
                    k = self.t(hp + "self_attn.k_proj." + what)
                    v = self.t(hp + "self_attn.v_proj." + what)
                    # The whole fused tensor, one query group after another.
                    fused = b"".join(q.rows_(g * p * d, (g + 1) * p * d) + k.rows_(g * d, (g + 1) * d)
                                     + v.rows_(g * d, (g + 1) * d) for g in range(m.K))
                    rows = (m.H + 2 * m.K) * d
                    shape = [rows] + q.rest
                    ft = T2(shape, fused, m.es)
                    self.put(r, mp + "self_attention.linear_qkv." + what,
                             [rows // T] + q.rest, ft.chunk_rows(T, t))
                if m.qknorm:
                    self.put(r, mp + "self_attention.q_layernorm.weight", [d], self.c[hp + "self_attn.q_norm.weight"][2])
                    self.put(r, mp + "self_attention.k_layernorm.weight", [d], self.c[hp + "self_attn.k_norm.weight"][2])
                o = self.t(hp + "self_attn.o_proj.weight")
                self.put(r, mp + "self_attention.linear_proj.weight", [m.h, o.cols // T], o.chunk_cols(T, t))
                ln = self.c[hp + "post_attention_layernorm.weight"][2]
                if not m.moe(i):
                    self.put(r, mp + "mlp.linear_fc1.layer_norm_weight", [m.h], ln)
                    self.mlp(r, hp + "mlp.", mp + "mlp.", m.I, T, t)
                    continue
                self.put(r, mp + "pre_mlp_layernorm.weight", [m.h], ln)
                self.put(r, mp + "mlp.router.weight", [m.E, m.h], self.c[hp + "mlp.gate.weight"][2])
                El = m.E // EP
                for j in range(El):
                    self.mlp(r, hp + "mlp.experts.%d." % (e * El + j),
                             mp + "mlp.experts.local_experts.%d." % j, m.Imoe, T, t)
                if m.Ish:
                    self.mlp(r, hp + "mlp.shared_expert.", mp + "mlp.shared_experts.", m.Ish, T, t)
                    self.put(r, mp + "mlp.shared_experts.gate_weight", [1, m.h],
                             self.c[hp + "mlp.shared_expert_gate.weight"][2])
            self.put(r, "decoder.final_layernorm.weight", [m.h], self.c["model.norm.weight"][2])
            if out:
                self.put(r, "output_layer.weight", [Vp // T, m.h], out.chunk_rows(T, t))

    def mlp(self, r, hp, mp, I, T, t):
        g, u, dn = (self.t(hp + n + "_proj.weight") for n in ("gate", "up", "down"))
        self.put(r, mp + "linear_fc1.weight", [2 * I // T, self.m.h], g.chunk_rows(T, t) + u.chunk_rows(T, t))
        self.put(r, mp + "linear_fc2.weight", [self.m.h, I // T], dn.chunk_cols(T, t))

    # vLLM ------------------------------------------------------------------
    def vllm(self):
        m, T = self.m, self.T
        Vp = round_up(m.V, self.vm or 64)
        emb = T2([Vp, m.h], pad_rows(self.t("model.embed_tokens.weight"), Vp), m.es)
        out = None
        if not m.tie:
            out = T2([Vp, m.h], pad_rows(self.t("lm_head.weight"), Vp), m.es)
        for t in range(T):
            self.put(t, "model.embed_tokens.weight", [Vp // T, m.h], emb.chunk_rows(T, t))
            for i in range(m.L):
                p = "model.layers.%d." % i
                self.put(t, p + "input_layernorm.weight", [m.h], self.c[p + "input_layernorm.weight"][2])
                for what in (["weight", "bias"] if m.bias else ["weight"]):
                    q = self.t(p + "self_attn.q_proj." + what)
                    k = self.t(p + "self_attn.k_proj." + what)
                    v = self.t(p + "self_attn.v_proj." + what)
                    if T <= m.K:
                        kk, vv = k.chunk_rows(T, t), v.chunk_rows(T, t)
                        nk = m.K // T
                    else:  # each KV head on T/K ranks
                        head = t * m.K // T
                        kk, vv = k.chunk_rows(m.K, head), v.chunk_rows(m.K, head)
                        nk = 1
                    self.put(t, p + "self_attn.qkv_proj." + what,
                             [(m.H // T + 2 * nk) * m.d] + q.rest, q.chunk_rows(T, t) + kk + vv)
                if m.qknorm:
                    for n in ("q_norm", "k_norm"):
                        self.put(t, p + "self_attn.%s.weight" % n, [m.d], self.c[p + "self_attn.%s.weight" % n][2])
                o = self.t(p + "self_attn.o_proj.weight")
                self.put(t, p + "self_attn.o_proj.weight", [m.h, o.cols // T], o.chunk_cols(T, t))
                self.put(t, p + "post_attention_layernorm.weight", [m.h],
                         self.c[p + "post_attention_layernorm.weight"][2])
                if not m.moe(i):
                    self.gate_up(t, p + "mlp.", p + "mlp.", m.I, T, t)
                    continue
                self.put(t, p + "mlp.gate.weight", [m.E, m.h], self.c[p + "mlp.gate.weight"][2])
                if self.EP > 1:  # whole experts, E/T per rank
                    experts, n, k = range(t * m.E // T, (t + 1) * m.E // T), 1, 0
                else:
                    experts, n, k = range(m.E), T, t
                w13, w2 = b"", b""
                for x in experts:
                    q = p + "mlp.experts.%d." % x
                    w13 += self.t(q + "gate_proj.weight").chunk_rows(n, k) + self.t(q + "up_proj.weight").chunk_rows(n, k)
                    w2 += self.t(q + "down_proj.weight").chunk_cols(n, k)
                It = m.Imoe // n
                self.put(t, p + "mlp.experts.w13_weight", [len(experts), 2 * It, m.h], w13)
                self.put(t, p + "mlp.experts.w2_weight", [len(experts), m.h, It], w2)
                if m.Ish:
                    self.gate_up(t, p + "mlp.shared_expert.", p + "mlp.shared_expert.", m.Ish, T, t)
                    self.put(t, p + "mlp.shared_expert_gate.weight", [1, m.h],
                             self.c[p + "mlp.shared_expert_gate.weight"][2])
            self.put(t, "model.norm.weight", [m.h], self.c["model.norm.weight"][2])
            if out:
                self.put(t, "lm_head.weight", [Vp // T, m.h], out.chunk_rows(T, t))

    def gate_up(self, r, hp, vp, I, T, t):
        g, u, dn = (self.t(hp + n + "_proj.weight") for n in ("gate", "up", "down"))
        self.put(r, vp + "gate_up_proj.weight", [2 * I // T, self.m.h], g.chunk_rows(T, t) + u.chunk_rows(T, t))
        self.put(r, vp + "down_proj.weight", [self.m.h, I // T], dn.chunk_cols(T, t))


# ---- commands ---------------------------------------------------------------

def cmd_canon(a):
    m = Model(json.load(open(a.config)))
    rnd = random.Random(a.seed)
    ts = []
    for name, shape in m.canonical():
        n = m.es
        for s in shape:
            n *= s
        ts.append((name, m.dt, shape, rnd.randbytes(n)))
    st_write(os.path.join(a.output, "model.safetensors"), ts)


def cmd_slice(a):
    m = Model(json.load(open(a.config)))
    canon = {}
    path = a.canon
    files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in sorted(os.listdir(path))
                                                  if f.endswith(".safetensors")]
    for f in files:
        canon.update(st_read(f))
    s = Slicer(m, canon, a.tp, a.ep, a.vocab_multiple)
    s.megatron() if a.framework == "megatron" else s.vllm()
    for r, ts in sorted(s.ranks.items()):
        st_write(os.path.join(a.output, "rank-%d" % r, "model.safetensors"), ts)


def cmd_compare(a):
    ra = sorted(d for d in os.listdir(a.a) if d.startswith("rank-"))
    rb = sorted(d for d in os.listdir(a.b) if d.startswith("rank-"))
    if ra != rb:
        print("rank directories differ: %s vs %s" % (ra, rb), file=sys.stderr)
        return 1
    n = 0
    for r in ra:
        x = st_read(os.path.join(a.a, r, "model.safetensors"))
        y = st_read(os.path.join(a.b, r, "model.safetensors"))
        if sorted(x) != sorted(y):
            print("%s: tensor names differ: only in A %s, only in B %s" % (
                r, sorted(set(x) - set(y))[:5], sorted(set(y) - set(x))[:5]), file=sys.stderr)
            return 1
        for name in sorted(x):
            if x[name][:2] != y[name][:2]:
                print("%s: %s: dtype/shape %s vs %s" % (r, name, x[name][:2], y[name][:2]), file=sys.stderr)
                return 1
            if x[name][2] != y[name][2]:
                da, db = x[name][2], y[name][2]
                i = next(k for k in range(len(da)) if da[k] != db[k])
                print("%s: %s: bytes differ first at byte %d" % (r, name, i), file=sys.stderr)
                return 1
            n += 1
    print("%d ranks, %d tensors equal" % (len(ra), n))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("canon")
    c.add_argument("config")
    c.add_argument("-o", "--output", required=True)
    c.add_argument("--seed", type=int, default=1)
    s = sub.add_parser("slice")
    s.add_argument("config")
    s.add_argument("canon")
    s.add_argument("--framework", choices=["megatron", "vllm"], required=True)
    s.add_argument("--tp", type=int, required=True)
    s.add_argument("--ep", type=int, default=1)
    s.add_argument("--vocab-multiple", type=int, default=0)
    s.add_argument("-o", "--output", required=True)
    k = sub.add_parser("compare")
    k.add_argument("a")
    k.add_argument("b")
    a = ap.parse_args()
    if a.cmd == "canon":
        return cmd_canon(a)
    if a.cmd == "slice":
        return cmd_slice(a)
    return cmd_compare(a)


if __name__ == "__main__":
    sys.exit(main() or 0)
