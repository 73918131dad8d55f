#!/usr/bin/python3
"""PyTorch equivalence of attention models: a character GPT written as
nanoGPT writes it, trained with nanoGPT's recipe.

usage: gpt_equiv.py PROGRAM TEXT MODEL      MODEL: gpt

gpt: tests/torch/gpt_net.net (2 layers, 2 heads, 32 wide, block 32,
F.scaled_dot_product_attention(is_causal = True), the head tied to the
token embedding), AdamW (lr 0.002, betas (0.9, 0.99), weight decay 0.1),
a linear warmup over 10 steps from lr/11 then a cosine to 0.0002 at step
100 (nanoGPT's get_lr: LinearLR + CosineAnnealingLR in a SequentialLR),
gradients clipped to norm 1.0. PyTorch's side writes attention out as
nanoGPT's slow path does (torch 1.13 has no scaled_dot_product_attention):
softmax((q @ k^T) / sqrt(hs) masked by a tril buffer) @ v.

The program trains 100 steps of batch 12 from PyTorch's own initial
weights with --shuffle off; PyTorch trains the same network on the same
windows (window i: tokens [32 i, 32 i + 33) of the text, x the first 32,
y the next). Every step's loss must agree to 1e-4 relative, the final
parameters to 1e-4 relative L2 -- but for the key's third of each
c_attn bias, whose true gradient is exactly 0 (a constant added to a
query row's scores leaves its softmax unchanged): its gradient is float
rounding on both sides, which Adam scales up to lr-sized steps, so its
values (norm about 1e-5 after 100 steps) are compared in absolute terms,
each within 1e-3 of PyTorch's. Controls that must not match: attention
not causal, and a causal mask one key too wide (each query also sees the
next position: the off-by-one a mask can have).
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_equiv  # noqa: E402

STEPS, BATCH, BLOCK = 100, 12, 32
TOL = 1e-4


def attention(q, k, v, variant):
    """nanoGPT's slow path: the scores, the causal mask, softmax, the values"""
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    if variant != "full":
        diag = 1 if variant == "wide" else 0
        keep = torch.tril(torch.ones(T, T), diagonal=diag).view(1, 1, T, T)
        att = att.masked_fill(keep == 0, float("-inf"))
    return F.softmax(att, dim=-1) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, variant):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.variant = n_head, n_embd, variant

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = attention(q, k, v, self.variant)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, variant):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, variant)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, V, variant):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, 32),
            wpe=nn.Embedding(BLOCK, 32),
            h=nn.ModuleList([Block(32, 2, variant) for _ in range(2)]),
            ln_f=nn.LayerNorm(32)))
        self.lm_head = nn.Linear(32, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        # nanoGPT's init: N(0, 0.02) weights, zero biases, the residual
        # projections scaled down by sqrt(2 n_layer)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * 2) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx):
        B, T = idx.size()
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def gpt_recipe(model):
    opt = torch.optim.AdamW(model.parameters(), lr=0.002, betas=(0.9, 0.99), weight_decay=0.1)
    S = torch.optim.lr_scheduler
    sched = S.SequentialLR(opt, [S.LinearLR(opt, start_factor=1 / 11, total_iters=10),
                                 S.CosineAnnealingLR(opt, T_max=90, eta_min=0.0002)], milestones=[10])
    return opt, sched, 1.0


MODELS = {"gpt": (GPT, gpt_recipe, [("full", "attention not causal"),
                                    ("wide", "a causal mask one key too wide")])}


def oracle(make, recipe, V, init_sd, X, Y, variant):
    model = make(V, variant)
    model.load_state_dict({k: torch.from_numpy(v).clone() for k, v in init_sd.items()})
    opt, sched, clip = recipe(model)
    losses = []
    for s in range(STEPS):
        x, y = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out.view(-1, out.size(-1)), y.reshape(-1))
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def main(argv):
    if len(argv) != 3 or argv[2] not in MODELS:
        sys.stderr.write(__doc__)
        return 2
    program, text, which = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2]
    make, recipe, controls = MODELS[which]
    torch.set_num_threads(1)
    torch.manual_seed(11)
    X, Y, V = lm_equiv.windows(text, STEPS * BATCH, BLOCK)
    init_sd = {k: v.detach().numpy().copy() for k, v in make(V, "same").state_dict().items()}
    ran = lm_equiv.run_program("gpt_equiv %s" % which, program, text, init_sd,
                               ["--max-steps", str(STEPS), "--batch", str(BATCH)])
    if not ran:
        return 1
    got, got_sd, work = ran

    def key_third(k, a, b):
        """the key's third of c_attn's bias: compared absolutely (see above)"""
        if not k.endswith("c_attn.bias"):
            return 0.0, a, b
        C = b.shape[0] // 3
        return (np.abs(a[C:2 * C] - b[C:2 * C]).max() * TOL / 1e-3, np.concatenate([a[:C], a[2 * C:]]),
                np.concatenate([b[:C], b[2 * C:]]))

    def compare(ref_sd, ref):
        return lm_equiv.compare(got, got_sd, ref_sd, ref, key_third)

    fails = []
    lw, pw = compare(*oracle(make, recipe, V, init_sd, X, Y, "same"))
    print("%s: %d steps, losses %.4f .. %.4f; worst step loss rel err %.2e, final params rel L2 %.2e (tol %.0e)"
          % (which, STEPS, got[0], got[-1], lw, pw, TOL))
    if not (lw <= TOL and pw <= TOL):
        fails.append("the program does not train as PyTorch's network does")
    for variant, what in controls:
        l2, p2 = compare(*oracle(make, recipe, V, init_sd, X, Y, variant))
        print("control, %s: loss rel err %.2e, params rel L2 %.2e (one must exceed its tol)" % (what, l2, p2))
        if l2 <= TOL and p2 <= TOL:
            fails.append("the program also matches PyTorch with %s" % what)
    if fails:
        print("gpt_equiv %s: FAIL: %s (work dir %s)" % (which, "; ".join(fails), work))
        return 1
    print("gpt_equiv %s: PASS: losses and parameters equal PyTorch's within 1e-4 over %d steps" % (which, STEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
