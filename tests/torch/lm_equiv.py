#!/usr/bin/python3
"""PyTorch equivalence tests for character language models on text data.

usage: lm_equiv.py PROGRAM TEXT MODEL     MODEL: bigram | tokmlp | bengio | blocks | dict

The program (tests/torch/lm_MODEL.net, data text(TEXT, block = 64,
split = 0.1)) trains 100 steps of batch 32 from PyTorch's own initial
weights with --shuffle off; PyTorch trains the same network on the same
windows, cut as nanoGPT's shakespeare_char prepare.py cuts its data: the
vocabulary the sorted set of the text's characters, window i the tokens
[64 i, 64 i + 65), x its first 64 and y the next ones, the loss
F.cross_entropy(logits.view(-1, V), y.view(-1)). Every step's loss must
agree to 1e-4 relative, the final parameters to 1e-4 relative L2 (the
driver is equiv.py's comparison). Controls that must not match: the
targets not shifted (each position predicting itself) and, for tokmlp,
the position embedding of the positions reversed and the token
embedding's padding_idx row (0, the newline) trained; for bigram, the
loss of the last position alone; for bengio (an output layer tied to the
embedding, an nn.Parameter position table, nn.init statements), the
output layer untied (its own copy of the embedding's initial weight) and
the position table left out; for blocks (a block model of the file
with a constructor, n_layer of them in an nn.ModuleList looped over in
forward, parameters named h.0.fc.weight as PyTorch nests them), the last
block left out of the loop; for dict (nanoGPT's layout without
attention: a ModuleDict of the embeddings, the blocks and the last
LayerNorm, the head tied as nanoGPT ties it), the head untied. The
program's --init file holds both names
of the tied weight, as PyTorch's state_dict lists them, and its --save
file too, equal.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

STEPS, BATCH, BLOCK, MOMENTUM = 100, 32, 64, 0.9
TOL = 1e-4


class Bigram(nn.Module):
    def __init__(self, V, variant):
        super().__init__()
        self.table = nn.Embedding(V, V)

    def forward(self, idx):
        return self.table(idx)


class TokMLP(nn.Module):
    def __init__(self, V, variant):
        super().__init__()
        self.wte = nn.Embedding(V, 32, padding_idx=None if variant == "trained_pad" else 0)
        self.wpe = nn.Embedding(BLOCK, 32)
        self.fc = nn.Linear(32, 64)
        self.head = nn.Linear(64, V)
        self.variant = variant

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(T)
        if self.variant == "reversed":
            pos = pos.flip(0)
        x = self.wte(idx) + self.wpe(pos)
        return self.head(F.relu(self.fc(x)))


class Bengio(nn.Module):
    """the last 8 characters' embeddings concatenated at each position, an
    output layer tied to the embedding, a learned position table"""

    def __init__(self, V, variant):
        super().__init__()
        self.wte = nn.Embedding(V, 24)
        self.pos = nn.Parameter(torch.zeros(1, BLOCK, 24))
        self.hidden = nn.Linear(8 * 24, 96)
        self.proj = nn.Linear(96, 24)
        self.lm_head = nn.Linear(24, V, bias=False)
        nn.init.normal_(self.pos, mean=0.0, std=0.02)
        nn.init.zeros_(self.hidden.bias)
        self.variant = variant
        if variant != "untied":
            self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + (0 if self.variant == "nopos" else self.pos)
        p = F.pad(x, (0, 0, 7, 0))
        c = torch.cat([p[:, k:k + BLOCK] for k in range(8)], dim=-1)
        return self.lm_head(self.proj(torch.tanh(self.hidden(c))))


class MLPBlock(nn.Module):
    def __init__(self, n_embd, hidden=64):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, hidden)
        self.proj = nn.Linear(hidden, n_embd)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x))))


class Blocks(nn.Module):
    """n_layer blocks in a ModuleList, looped over in forward"""

    def __init__(self, V, variant):
        super().__init__()
        self.n_layer = 3
        self.wte = nn.Embedding(V, 32)
        self.wpe = nn.Embedding(BLOCK, 32)
        self.h = nn.ModuleList([MLPBlock(32) for _ in range(self.n_layer)])
        self.ln_f = nn.LayerNorm(32)
        self.head = nn.Linear(32, V)
        self.variant = variant

    def forward(self, idx):
        B, T = idx.size()
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in (self.h[:2] if self.variant == "two" else self.h):
            x = block(x)
        return self.head(self.ln_f(x))


class DictLM(nn.Module):
    """nanoGPT's layout without attention: a ModuleDict, blocks, a tied head"""

    def __init__(self, V, variant):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, 32),
            wpe=nn.Embedding(BLOCK, 32),
            h=nn.ModuleList([MLPBlock(32) for _ in range(2)]),
            ln_f=nn.LayerNorm(32)))
        self.lm_head = nn.Linear(32, V, bias=False)
        if variant != "untied":
            self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        B, T = idx.size()
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


MODELS = {"bigram": (Bigram, 0.5, "last"), "tokmlp": (TokMLP, 0.1, "reversed"), "bengio": (Bengio, 0.05, "untied"),
          "blocks": (Blocks, 0.1, "two"), "dict": (DictLM, 0.1, "untied")}


def windows(path, n, block=BLOCK):
    """the text's first n windows of block + 1 characters at stride block,
    as the program's text reader takes them: inputs, targets, vocabulary"""
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text[:n * block + 1]], dtype=torch.long)
    x = torch.stack([data[i * block:i * block + block] for i in range(n)])
    y = torch.stack([data[i * block + 1:i * block + block + 1] for i in range(n)])
    return x, y, len(chars)


def run_program(tag, program, text, init_sd, args):
    """the program trained from init_sd with args: (step losses, final
    parameters, work dir), or None when it failed (said)"""
    work = tempfile.mkdtemp(prefix="cddpc-%s-" % tag.replace("_", "-"))
    init = os.path.join(work, "init.safetensors")
    st.save(init, init_sd)
    steps_csv, final = os.path.join(work, "steps.csv"), os.path.join(work, "final.st")
    cmd = [program, "--data", text, "--init", init, "--shuffle", "off", "--threads", "1", "--step-log", steps_csv,
           "--save", final] + args
    print("%s: %s" % (tag, " ".join(cmd)))
    sys.stdout.flush()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode("utf-8", "replace")[-3000:])
        print("%s: FAIL: the program exited with %d" % (tag, r.returncode))
        return None
    import csv
    with open(steps_csv, newline="") as f:
        got = [float(row["loss"]) for row in csv.DictReader(f)]
    return got, st.load(final), work


def compare(got, got_sd, ref_sd, ref, part=None):
    """the worst step loss relative error and the worst parameter's relative
    L2 error; part(name, a, b) -> (error, a, b) takes a tensor's part out to
    be judged its own way"""
    if len(got) != len(ref):
        return float("inf"), float("inf")
    lw = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    pw = 0.0
    for k in ref_sd:
        a, b = got_sd[k].astype(np.float64), ref_sd[k].astype(np.float64)
        if part:
            e, a, b = part(k, a, b)
            pw = max(pw, e)
        pw = max(pw, np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))
    return lw, pw


def oracle(make, V, init_sd, X, Y, lr, variant):
    model = make(V, variant)
    model.load_state_dict({k: torch.from_numpy(v).clone() for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        x, y = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
        if variant == "unshifted":
            y = x
        opt.zero_grad()
        out = model(x)
        V_ = out.size(-1)
        if variant == "last":
            loss = F.cross_entropy(out[:, -1, :], y[:, -1])
        else:
            loss = F.cross_entropy(out.view(-1, V_), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def main(argv):
    if len(argv) != 3 or argv[2] not in MODELS:
        sys.stderr.write(__doc__)
        return 2
    program, text, which = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2]
    make, lr, control = MODELS[which]
    torch.set_num_threads(1)
    torch.manual_seed(5)
    X, Y, V = windows(text, STEPS * BATCH)
    init_sd = {k: v.detach().numpy().copy() for k, v in make(V, "same").state_dict().items()}
    ran = run_program("lm_equiv %s" % which, program, text, init_sd,
                      ["--max-steps", str(STEPS), "--batch", str(BATCH), "--lr", str(lr)])
    if not ran:
        return 1
    got, got_sd, work = ran

    fails = []
    tied = {"bengio": ("lm_head.weight", "wte.weight"), "dict": ("lm_head.weight", "transformer.wte.weight")}
    if which in tied and not (all(k in got_sd for k in tied[which]) and
                              np.array_equal(got_sd[tied[which][0]], got_sd[tied[which][1]])):
        fails.append("the saved file lacks the tied weight's second name, or its two names differ")
    lw, pw = compare(got, got_sd, *oracle(make, V, init_sd, X, Y, lr, "same"))
    print("%s: %d steps, losses %.4f .. %.4f; worst step loss rel err %.2e, final params rel L2 %.2e (tol %.0e)"
          % (which, STEPS, got[0], got[-1], lw, pw, TOL))
    if not (lw <= TOL and pw <= TOL):
        fails.append("the program does not train as PyTorch's network does")
    controls = [("unshifted", "the targets not shifted"),
                (control, "the loss of the last position alone" if control == "last"
                 else "the position embedding of the positions reversed")]
    if which == "tokmlp":
        controls.append(("trained_pad", "padding_idx's row trained"))
    if which == "blocks":
        controls[1] = ("two", "the last block left out of the loop")
    if which in ("bengio", "dict"):
        controls[1] = ("untied", "the output layer untied (its own copy of the embedding)")
    if which == "bengio":
        controls.append(("nopos", "without the position table"))
    for variant, what in controls:
        l2, p2 = compare(got, got_sd, *oracle(make, V, init_sd, X, Y, lr, variant))
        print("control, %s: loss rel err %.2e, params rel L2 %.2e (one must exceed its tol)" % (what, l2, p2))
        if l2 <= TOL and p2 <= TOL:
            fails.append("the program also matches PyTorch with %s" % what)
    if fails:
        print("lm_equiv %s: FAIL: %s (work dir %s)" % (which, "; ".join(fails), work))
        return 1
    print("lm_equiv %s: PASS: losses and parameters equal PyTorch's within 1e-4 over %d steps" % (which, STEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
