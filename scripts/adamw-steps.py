#!/usr/bin/python3
"""adamw-steps.py - real AdamW steps of a tiny transformer, as bf16 checkpoints.

Trains a small causal transformer language model on the CPU with torch's
AdamW (Debian's python3-torch, with libopenblas0-pthread: under Debian's
reference BLAS, its default, the pretraining takes hours instead of
minutes; no PyPI) and saves the bf16 copy of the fp32
master weights after each step, the way RL post-training stores a policy:

  OUT/v0           the weights after --pretrain steps at --pretrain-lr
                   (so the weights are trained, not fresh from the init)
  OUT/v1 .. vN     after each of --steps further steps at --lr, with the
                   optimizer state carried on from the pretraining (a fresh
                   AdamW with --fresh, as an RL run that starts a new
                   optimizer would have)

Each vK is a directory with one model.safetensors (written in plain Python:
8-byte header length, JSON header, raw little-endian bytes) and Hugging
Face-like tensor names. The data is a fixed random second-order Markov
source over the vocabulary, so a run depends on --seed and the options only.
Prints, per step, the share of stored bf16 values that changed.

A benchmark input, never a test; checkpoints stay out of git. Typical use:

  /usr/bin/python3 scripts/adamw-steps.py -o /tmp/aw-1e-6 --lr 1e-6 --steps 12 \
      --init /tmp/aw-pretrained.pt
  /usr/bin/python3 scripts/adamw-steps.py -o /tmp/aw-3e-6 --lr 3e-6 --steps 4 \
      --init /tmp/aw-pretrained.pt
  scripts/bench-codec --pair /tmp/aw-1e-6/v10 /tmp/aw-1e-6/v11
"""
import argparse
import json
import math
import os
import struct
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.stderr.write("adamw-steps.py: error: torch is missing "
                     "(apt-get install python3-torch libopenblas0-pthread, run with "
                     "/usr/bin/python3)\n")
    sys.exit(128)


class Block(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.input_layernorm = nn.LayerNorm(d)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.post_attention_layernorm = nn.LayerNorm(d)
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.input_layernorm(x)
        q, k, v = (p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.o_proj((att @ v).transpose(1, 2).reshape(b, t, d))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LM(nn.Module):
    def __init__(self, vocab, d, layers, heads, ff, ctx):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.layers = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        x = self.embed_tokens(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.layers:
            x = blk(x)
        return self.lm_head(self.norm(x))


def names(model):
    """Hugging Face-like names for the parameters."""
    out = {}
    for n, p in model.named_parameters():
        h = n
        if n.startswith("layers."):
            _, i, rest = n.split(".", 2)
            kind = "self_attn" if rest.split(".")[0] in ("q_proj", "k_proj", "v_proj",
                                                        "o_proj") else "mlp"
            if "layernorm" in rest:
                h = "model.layers.%s.%s" % (i, rest)
            else:
                h = "model.layers.%s.%s.%s" % (i, kind, rest)
        elif not n.startswith("lm_head"):
            h = "model." + n
        out[h] = p
    return out


def save(model, path):
    """bf16 copies (round to nearest even) in one safetensors file."""
    os.makedirs(path, exist_ok=True)
    header, blobs, off = {}, [], 0
    for name, p in sorted(names(model).items()):
        b = p.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(p.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = os.path.join(path, ".model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, os.path.join(path, "model.safetensors"))


def bf16_state(model):
    return torch.cat([p.detach().to(torch.bfloat16).view(torch.int16).flatten()
                      for p in model.parameters()])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("--lr", type=float, default=1e-6, help="learning rate of the saved steps")
    ap.add_argument("--steps", type=int, default=12, help="saved steps after v0")
    ap.add_argument("--pretrain", type=int, default=150, help="steps before v0")
    ap.add_argument("--pretrain-lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--init", metavar="FILE",
                    help="the pretrained model and optimizer: loaded when FILE exists, "
                    "else saved there after pretraining (shares one pretraining between runs)")
    ap.add_argument("--fresh", action="store_true", help="a fresh AdamW for the saved steps")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: its own)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    g = torch.Generator().manual_seed(a.seed + 1)
    # the source: each pair of tokens allows 8 successors, with Zipf weights
    succ = torch.randint(0, a.vocab, (a.vocab, 8), generator=g)
    wts = 1.0 / torch.arange(1, 9, dtype=torch.float32)

    def batch():
        x = torch.empty(a.batch, a.ctx + 1, dtype=torch.long)
        x[:, 0] = torch.randint(0, a.vocab, (a.batch,), generator=g)
        x[:, 1] = torch.randint(0, a.vocab, (a.batch,), generator=g)
        for t in range(2, a.ctx + 1):
            k = torch.multinomial(wts.expand(a.batch, 8), 1, generator=g).squeeze(1)
            x[:, t] = succ[(x[:, t - 1] * 31 + x[:, t - 2]) % a.vocab, k]
        return x[:, :-1], x[:, 1:]

    model = LM(a.vocab, a.dim, a.layers, a.heads, a.ff, a.ctx)
    nparams = sum(p.numel() for p in model.parameters())
    print("adamw-steps: %d parameters (%.1f MiB bf16)" % (nparams, nparams * 2 / 2**20))

    def step(opt):
        x, y = batch()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    opt = torch.optim.AdamW(model.parameters(), lr=a.pretrain_lr, weight_decay=a.weight_decay)
    pretrain = a.pretrain
    if a.init and os.path.exists(a.init):
        st = torch.load(a.init)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        g.set_state(st["rng"])
        pretrain = 0
        print("adamw-steps: pretrained state from %s" % a.init)
    for i in range(pretrain):
        for pg in opt.param_groups:  # linear warm-up over the first tenth
            pg["lr"] = a.pretrain_lr * min(1.0, (i + 1) / max(1, a.pretrain // 10))
        loss = step(opt)
        if i % 50 == 0 or i == a.pretrain - 1:
            print("adamw-steps: pretrain %d loss %.3f" % (i, loss), flush=True)
    if a.init and pretrain:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "rng": g.get_state()}, a.init + ".tmp")
        os.replace(a.init + ".tmp", a.init)
    if a.fresh:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    for pg in opt.param_groups:
        pg["lr"] = a.lr
    save(model, os.path.join(a.out, "v0"))
    prev = bf16_state(model)
    for k in range(1, a.steps + 1):
        loss = step(opt)
        save(model, os.path.join(a.out, "v%d" % k))
        cur = bf16_state(model)
        print("adamw-steps: step %d loss %.3f changed %.3f%%" %
              (k, loss, 100.0 * (cur != prev).sum().item() / cur.numel()), flush=True)
        prev = cur
    return 0


if __name__ == "__main__":
    sys.exit(main())
