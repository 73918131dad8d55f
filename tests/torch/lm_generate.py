#!/usr/bin/python3
"""Generated text against PyTorch's, token for token.

usage: lm_generate.py PROGRAM TEXT [MODEL]      MODEL: bengio (the default) | gpt

gpt: tests/torch/gpt_net.net (nanoGPT's model, causal attention over a
window of 32) against gpt_equiv.py's GPT, which runs on the context as it
is (up to 32 tokens), as nanoGPT's generate() does; the program trains
1500 steps at --lr 0.01 first (its greedy text then has words: "the
there thean"). bengio:
tests/torch/lm_bengio.net (compiled as PROGRAM: each position sees its
last 8 characters, so the text depends on the context) trains 300 steps on TEXT
and saves its weights (with the vocabulary in the file's metadata); then
`PROGRAM --generate 100 --load FILE --prompt P --temperature 0` writes
greedily, and PyTorch's copy of the network (lm_equiv.py's Blocks), the
same weights loaded (lm_equiv.py's Bengio, its position table cut to
the context's length), decodes greedily as nanoGPT's generate() does (the
context cropped to the last 64 tokens, the next token the argmax of the
last position's logits): the 100 tokens must be PyTorch's. Where
PyTorch's top two logits are within 1e-5 of each other, either token is
right: PyTorch's is taken and the program is run again from there. Two
prompts: a short one (the context shorter than the window: positions 0..L-1)
and one longer than the window. Then sampling (temperature 0.8, top-k 10)
with one seed twice gives the same text, and with another seed other text.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from lm_equiv import BLOCK, Bengio  # noqa: E402


class Shorter(Bengio):
    """nanoGPT's generate() runs the model on the context as it is, up to
    64 tokens: the position table cut to its length"""

    def forward(self, idx):
        T = idx.size(1)
        x = self.wte(idx) + self.pos[:, :T]
        p = F.pad(x, (0, 0, 7, 0))
        c = torch.cat([p[:, k:k + T] for k in range(8)], dim=-1)
        return self.lm_head(self.proj(torch.tanh(self.hidden(c))))

N = 100


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] not in ("bengio", "gpt")):
        sys.stderr.write(__doc__)
        return 2
    program, text = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    which = argv[2] if len(argv) == 3 else "bengio"
    if which == "gpt":
        import gpt_equiv
        make, block, steps, lr = gpt_equiv.GPT, gpt_equiv.BLOCK, 1500, ["--lr", "0.01"]
    else:
        make, block, steps, lr = Shorter, BLOCK, 300, []
    work = tempfile.mkdtemp(prefix="cddpc-lm-generate-")
    weights = os.path.join(work, "w.st")
    r = subprocess.run([program, "--data", text, "--max-steps", str(steps), "--threads", "2", "--save", weights] + lr,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    if r.returncode != 0:
        print(r.stdout.decode()[-2000:])
        print("lm_generate: FAIL: training")
        return 1
    chars = sorted(set(open(text, encoding="utf-8").read()))
    stoi = {c: i for i, c in enumerate(chars)}
    torch.set_num_threads(1)
    model = make(len(chars), "same")
    model.load_state_dict({k: torch.from_numpy(v) for k, v in st.load(weights).items()})
    model.eval()

    def ours(prompt, n, extra=()):
        cmd = [program, "--generate", str(n), "--load", weights, "--prompt", prompt] + list(extra)
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        return out.returncode, out.stdout.decode("utf-8", "replace").rstrip("\n")

    fails = []
    long_prompt = open(text, encoding="utf-8").read()[1000:1000 + block + 30]
    for prompt in ("In the beginning God", long_prompt):
        idx = [stoi[c] for c in prompt]
        rc, got = ours(prompt, N, ["--temperature", "0"])
        if rc != 0 or not got.startswith(prompt):
            fails.append("the program's greedy text (exit %d): %r" % (rc, got[-200:]))
            continue
        produced, ties, restarts = got[len(prompt):], 0, 0
        with torch.no_grad():
            for k in range(N):
                logits = model(torch.tensor([idx[-block:]]))[0, -1]
                top = torch.topk(logits, 2)
                want = int(top.indices[0])
                have = stoi.get(produced[k]) if k < len(produced) else None
                if have != want:
                    if float(top.values[0] - top.values[1]) < 1e-5 and restarts < 5:
                        # either is right: go on from PyTorch's token
                        ties += 1
                        restarts += 1
                        ctx = "".join(chars[i] for i in idx + [want])
                        rc, again = ours(ctx, N - k - 1, ["--temperature", "0"])
                        produced = produced[:k] + chars[want] + again[len(ctx):]
                    else:
                        fails.append("prompt %r: token %d is %r, PyTorch's %r (gap %.2e)" % (
                            prompt[:20], k, chars[have] if have is not None else None, chars[want],
                            float(top.values[0] - top.values[1])))
                        break
                idx.append(want)
        print("prompt of %d characters: %d greedy tokens equal PyTorch's (%d near-ties taken as PyTorch's): %r"
              % (len(prompt), N, ties, produced[:60]))
    a = ours("And the LORD", 80, ["--temperature", "0.8", "--top-k", "10", "--seed", "5"])[1]
    b = ours("And the LORD", 80, ["--temperature", "0.8", "--top-k", "10", "--seed", "5"])[1]
    c = ours("And the LORD", 80, ["--temperature", "0.8", "--top-k", "10", "--seed", "6"])[1]
    print("sampling, seed 5 twice %s; seed 6 %s" % ("equal" if a == b else "DIFFERENT",
                                                    "differs" if a != c else "THE SAME"))
    if a != b or a == c or len(a) != len("And the LORD") + 80:
        fails.append("sampling is not repeatable with a seed, or not moved by it")
    if fails:
        print("lm_generate %s: FAIL: %s (work dir %s)" % (which, "; ".join(fails), work))
        return 1
    print("lm_generate %s: PASS" % which)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
