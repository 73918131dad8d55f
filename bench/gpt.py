#!/usr/bin/python3
"""Benchmark: nanoGPT's CPU "baby GPT" (models/gpt_char.net: 4 layers, 4
heads, 128 wide, block 64, batch 12, no dropout) training on the KJV
text, ours against PyTorch eager with the same model, batch and threads,
both against the step's floor, measured in the same run.

usage: gpt.py PROGRAM [--data FILE] [--steps N] [--repeats R] [--threads 1,2]

For each repeat and each thread count, in turn:
  blas   the floor's rate: float32 GEMMs of the step's shapes (768 x 384 x
         128, 768 x 512 x 128, 768 x 128 x 512, ...: the token rows times
         the layers' weights) through numpy's OpenBLAS (the library both
         sides call) in a child pinned to T threads; GFLOP/s over all of
         them
  torch  nanoGPT's model.py written for torch 1.13 (LayerNorm without
         bias by F.layer_norm, attention written out with a tril buffer as
         nanoGPT's slow path: 1.13 has no scaled_dot_product_attention),
         AdamW with nanoGPT's two groups, clipping 1.0, random windows of
         64 as nanoGPT's get_batch; a child started with OMP_NUM_THREADS,
         OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = T and glibc keeping
         freed memory (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_):
         PyTorch at its best here; 10 warm-up steps, then N timed
  ours   PROGRAM --max-steps N --threads T: the epoch's training seconds
         (the test pass after it is not counted) over N
The floor is the step's FLOPs (6 per weight and token for the products,
plus attention's 12 T C per token and layer, causal or not) at the BLAS
rate. Prints each side's ms a step, tokens a second, the fraction of the
floor it reaches, and ours / torch in tokens a second (the issue's
targets: at least 0.8 of the floor and 1.3x PyTorch's tokens a second).
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from convnet import ours_step_ms  # noqa: E402
from rows import torch_env  # noqa: E402

L, H, C, T, B, V = 4, 4, 128, 64, 12, 73

BLAS = r"""
import time, numpy as np
shapes = %(shapes)r
rng = np.random.default_rng(0)
mats = [(rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32))
        for m, n, k in shapes]
for a, b in mats:
    a @ b
best = 0.0
for rep in range(5):
    t0 = time.perf_counter()
    flops = 0
    for it in range(20):
        for a, b in mats:
            a @ b
            flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
    best = max(best, flops / (time.perf_counter() - t0) / 1e9)
print(best)
"""

TORCH = r"""
import math, sys, time
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
L, H, C, T, B = %(L)d, %(H)d, %(C)d, %(T)d, %(B)d
torch.set_num_threads(%(threads)d)
text = open(%(data)r, encoding="utf-8").read()
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
V = len(chars)

class LayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)

class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
    def forward(self, x):
        B_, T_, C_ = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B_, T_, H, C_ // H).transpose(1, 2)
        q = q.view(B_, T_, H, C_ // H).transpose(1, 2)
        v = v.view(B_, T_, H, C_ // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T_, :T_] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B_, T_, C_))

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=False)
        self.c_proj = nn.Linear(4 * C, C, bias=False)
    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(C), CausalSelfAttention(), LayerNorm(C), MLP()
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
                                              h=nn.ModuleList([Block() for _ in range(L)]), ln_f=LayerNorm(C)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
    def forward(self, idx):
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.size(1)))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

torch.manual_seed(1337)
model = GPT()
params = [p for p in model.parameters()]
opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.99))
def step():
    ix = torch.randint(len(data) - T, (B,))
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()
for s in range(10):
    step()
t0 = time.perf_counter()
for s in range(%(steps)d):
    step()
print((time.perf_counter() - t0) / %(steps)d * 1e3)
"""


def child(code, threads):
    r = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=torch_env(threads))
    if r.returncode != 0:
        sys.stdout.write(r.stderr.decode("utf-8", "replace")[-3000:])
        raise RuntimeError("a child exited with %d" % r.returncode)
    return float(r.stdout.decode().split()[-1])


def step_flops():
    """the products' 6 FLOPs per weight and token (forward 2, backward 4; the
    tied head's once) and attention's scores and values, 4 T C a token and
    layer forward, twice that backward"""
    weights = L * 12 * C * C + V * C
    tokens = B * T
    return 6 * weights * tokens + 12 * T * C * L * tokens


def main():
    ap = argparse.ArgumentParser(description="nanoGPT's baby GPT: a training step, ours against PyTorch")
    ap.add_argument("program")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "data", "kjv.txt"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    program, data = os.path.abspath(a.program), os.path.abspath(a.data)
    threads = [int(t) for t in a.threads.split(",")]
    rows = B * T
    shapes = [(rows, 3 * C, C), (rows, C, C), (rows, 4 * C, C), (rows, C, 4 * C), (rows, V, C),
              (C, 3 * C, rows), (C, 4 * C, rows), (4 * C, C, rows)]
    flops = step_flops()
    print("bench-gpt: nanoGPT's baby GPT (%d layers, %d heads, %d wide, block %d, batch %d), %d steps, median of "
          "%d runs; %.3f GFLOP a step; load %s" % (L, H, C, T, B, a.steps, a.repeats, flops / 1e9,
                                                   " ".join("%.2f" % x for x in os.getloadavg())))
    sys.stdout.flush()
    got = {(who, t): [] for who in ("blas", "torch", "ours") for t in threads}
    for r in range(a.repeats):
        for t in threads:
            got[("blas", t)].append(child(BLAS % {"shapes": shapes}, t))
            got[("torch", t)].append(child(TORCH % {"L": L, "H": H, "C": C, "T": T, "B": B, "threads": t,
                                                    "data": data, "steps": a.steps}, t))
            got[("ours", t)].append(ours_step_ms(program, data, a.steps, t))
            print("  run %d, %d thread(s): BLAS %.1f GFLOP/s, torch %.2f ms, ours %.2f ms"
                  % (r + 1, t, got[("blas", t)][-1], got[("torch", t)][-1], got[("ours", t)][-1]))
            sys.stdout.flush()
    print("%-8s %10s %9s %14s %12s %12s %11s %11s %11s" % ("threads", "BLAS GF/s", "floor ms", "torch ms/step",
                                                          "ours ms/step", "torch tok/s", "ours tok/s",
                                                          "floor/ours", "ours/torch"))
    for t in threads:
        gf = statistics.median(got[("blas", t)])
        mt, mo = statistics.median(got[("torch", t)]), statistics.median(got[("ours", t)])
        floor = flops / (gf * 1e9) * 1e3
        print("%-8d %10.1f %9.2f %14.2f %12.2f %12.0f %11.0f %11.2f %11.2f"
              % (t, gf, floor, mt, mo, rows / mt * 1e3, rows / mo * 1e3, floor / mo, mt / mo))
    print("load after: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
