#!/usr/bin/python3
"""nanoGPT's baby GPT trained by PyTorch for the comparison in
docs/transformers.md: bench/gpt.py's model (torch 1.13: LayerNorm without
bias by F.layer_norm, attention written out), nanoGPT's init (N(0, 0.02),
the residual projections 0.02 / sqrt(2 n_layer)), AdamW with its two
groups, its get_lr (warmup 100, cosine to 1e-4 at 2000), clipping 1.0,
batch 12 of random windows of 64 from the first 90% of the windows, 2000
iterations on THREADS threads; then the mean loss over every position of
the test windows the program evaluates (the last 10% of the text's
windows of 64, window i the tokens [64 i, 64 i + 65)).

usage: gpt_torch2000.py TEXT [THREADS] [ITERS]
"""
import math
import sys
import time

import torch
import torch.nn.functional as F

sys.argv += [] if len(sys.argv) > 1 else [None]
text_path = sys.argv[1]
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
torch.set_num_threads(threads)
import os  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402

ns = {}
code = gpt.TORCH % {"L": gpt.L, "H": gpt.H, "C": gpt.C, "T": gpt.T, "B": gpt.B, "threads": threads,
                    "data": text_path, "steps": 0}
code = code[:code.index("torch.manual_seed(1337)")]
exec(code, ns)
GPT, data, T, B = ns["GPT"], ns["data"], gpt.T, gpt.B
torch.manual_seed(1337)
model = GPT()
for name, p in model.named_parameters():
    if p.dim() >= 2:
        std = 0.02 / math.sqrt(2 * gpt.L) if name.endswith("c_proj.weight") else 0.02
        torch.nn.init.normal_(p, mean=0.0, std=std)
params = list(model.parameters())
opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))
nwin = (len(data) - 1) // T
ntest = int(nwin * 0.1)
ntrain = nwin - ntest
train_end = ntrain * T + 1


def get_lr(it, lr=1e-3, warmup=100, decay=2000, min_lr=1e-4):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


t0 = time.perf_counter()
for it in range(iters):
    for g in opt.param_groups:
        g["lr"] = get_lr(it)
    ix = torch.randint(train_end - T - 1, (B,))
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
train_s = time.perf_counter() - t0
model.eval()
tot, cnt = 0.0, 0
with torch.no_grad():
    for s in range(ntrain, nwin, 256):
        idx = torch.arange(s, min(s + 256, nwin))
        x = torch.stack([data[i * T:i * T + T] for i in idx])
        y = torch.stack([data[i * T + 1:i * T + 1 + T] for i in idx])
        logits = model(x)
        tot += F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction="sum").item()
        cnt += y.numel()
print("torch: %d iterations on %d thread(s): %.1f s training (%.1f ms a step), test loss %.4f over %d windows"
      % (iters, threads, train_s, train_s / iters * 1e3, tot / cnt, nwin - ntrain))
