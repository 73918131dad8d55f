#!/usr/bin/python3
"""PyTorch equivalence test for models/vae.net: noise in forward and a loss block.

usage: vae_equiv.py CDDPC FASHION_DIR

models/vae.net is pytorch/examples' VAE: its forward draws the
reparameterization's noise with torch.randn_like, and its loss block sums
the reconstruction's binary cross-entropy and the KL term. The noise is
rebuilt here from an independent reimplementation of the stream the
program documents (compiler/dropout_rng.h; the dropout's, shared with
tests/torch/dropout_equiv.py): for step s (optimizer steps before it),
rank r and the run's seed, noise site k (0: the model's only one),

    key  = mix(mix(mix(mix(seed ^ 0x6a09e667f3bcc909) ^ r) ^ s) ^ k)
    u(i) = (mix(mix(key + i * 0x9e3779b97f4a7c15)) >> 40) * 2^-24
    eps[i] = sqrt(-2 log(1 - u(2 i))) cos(2 pi u(2 i + 1))     (float32)

for element i of the [N, 20] tensor in row-major order, and given to
PyTorch in place of torch.randn_like. The program trains from the same
initialization on Fashion-MNIST in file order with Adam for STEPS steps;
every step's loss must agree to relative 1e-4 and the final parameters to
relative L2 1e-4. Controls: PyTorch with other noise (another seed) must
not match. A variant written as PyTorch code that skips the noise in
evaluation (z = mu + eps * std if self.training else mu) must train step
for step as the original and report as test_loss the loss of PyTorch's
model.eval() over the test set in float64 (the batches' values weighted
by their rows), which the original's noisy evaluation must not. Then: 2 MPI ranks (each its own noise, DDP's mean of their
gradients) against the same computed in one process; a run stopped at
step 25 and resumed must end bit for bit where the straight run does.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
from dropout_equiv import mix_np, read_csv, read_idx, rel, stream_key  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
SEED = 5
STEPS = 100
BATCH = 32
LR = 1e-3
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4
RANK_STEPS = 40


def randn(seed, rank, step, k, shape):
    """The program's noise, from the documented formula."""
    n = int(np.prod(shape))
    key = np.uint64(stream_key(seed, rank, step, k))
    i = np.arange(2 * n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = mix_np(mix_np(key + i * np.uint64(0x9e3779b97f4a7c15)))
    u = (x >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    u1, u2 = u[0::2], u[1::2]
    z = np.sqrt(np.float32(-2.0) * np.log(np.float32(1.0) - u1)) * np.cos(np.float32(6.28318530717958647692) * u2)
    return torch.from_numpy(z.astype(np.float32).reshape(shape))


class VAE(nn.Module):
    """pytorch/examples vae/main.py, its noise given from outside"""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)
        self.eps = None

    def forward(self, x):
        h1 = F.relu(self.fc1(x.view(-1, 784)))
        mu, logvar = self.fc21(h1), self.fc22(h1)
        std = torch.exp(0.5 * logvar)
        z = mu + self.eps * std
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def oracle(init_sd, X, seed, ranks=1, steps=STEPS):
    """Adam on the batches in file order; with 2 ranks, DDP's: each rank's
    sum-loss on its shard (samples r, r + 2, ...) and its own noise, the
    gradients averaged."""
    model = VAE()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for s in range(steps):
        opt.zero_grad()
        total = 0
        for r in range(ranks):
            idx = torch.arange(s * BATCH, (s + 1) * BATCH) * ranks + r
            x = X[idx]
            model.eps = randn(seed, r, s, 0, (BATCH, 20))
            recon, mu, logvar = model(x)
            total = total + loss_function(recon, x, mu, logvar) / ranks
        total.backward()
        losses.append(total.item())
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def eval_loss(sd, T):
    """The test loss as the program reports a loss block's: each batch's
    value (here a sum over its samples) times its rows, over the samples;
    no noise (model.eval()'s z = mu)"""
    model = VAE().double()
    model.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()})
    total = 0.0
    with torch.no_grad():
        for b in range(0, len(T), BATCH):
            x = T[b:b + BATCH].double()
            model.eps = torch.zeros(len(x), 20, dtype=torch.float64)
            recon, mu, logvar = model(x)
            total += loss_function(recon, x, mu, logvar).item() * len(x)
    return total / len(T)


def worst_param(got, ref):
    return max(np.linalg.norm(got[k].astype(np.float64) - ref[k]) / np.linalg.norm(ref[k]) for k in ref)


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, env=env)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode("utf-8", "replace")[-3000:])
        raise RuntimeError("%s exited with %d" % (cmd[0], r.returncode))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    cddpc, data_dir = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    work = tempfile.mkdtemp(prefix="cddpc-vae-equiv-")
    prog = os.path.join(work, "vae")
    init_path = os.path.join(work, "init.safetensors")
    init_sd = {k: v.detach().numpy().copy() for k, v in VAE().state_dict().items()}
    st.save(init_path, init_sd)
    Xu8 = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    X = torch.from_numpy(np.array(Xu8[:2 * STEPS * BATCH])).to(torch.float32).div(255.0).reshape(-1, 1, 28, 28)
    base = ["--data", data_dir, "--init", init_path, "--shuffle", "off", "--epochs", "1", "--batch", str(BATCH),
            "--threads", "1", "--seed", str(SEED)]
    failures = []
    try:
        run([cddpc, os.path.join(ROOT, "models", "vae.net"), "-o", prog])
        steps, final = os.path.join(work, "a.steps.csv"), os.path.join(work, "a.st")
        run([prog] + base + ["--max-steps", str(STEPS), "--step-log", steps, "--save", final])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print("vae_equiv: FAIL: %s (work dir %s)" % (e, work))
        return 1
    got = [float(r["loss"]) for r in read_csv(steps)]
    ref_sd, ref = oracle(init_sd, X, SEED)
    lw = max(rel(a, b) for a, b in zip(got, ref)) if len(got) == len(ref) else float("inf")
    pw = worst_param(st.load(final), ref_sd)
    print("1 rank, %d steps: loss %.2f .. %.2f (torch %.2f .. %.2f), step loss rel err %.2e, params rel L2 %.2e"
          % (STEPS, got[0], got[-1], ref[0], ref[-1], lw, pw))
    if not (lw <= LOSS_TOL and pw <= PARAM_TOL):
        failures.append("1 rank does not train as PyTorch with the documented noise")
    _, other = oracle(init_sd, X, SEED + 1)
    lo = max(rel(a, b) for a, b in zip(got, other))
    print("control: torch with another seed's noise: step loss rel err %.2e (must exceed %.0e)" % (lo, 100 * LOSS_TOL))
    if not lo > 100 * LOSS_TOL:
        failures.append("the losses do not depend on the noise")

    # self.training: the same training, and the evaluation without noise
    src = open(os.path.join(ROOT, "models", "vae.net")).read()
    line = "        z = mu + eps * std\n"
    assert line in src
    net_t, prog_t = os.path.join(work, "vae_t.net"), os.path.join(work, "vae_t")
    with open(net_t, "w") as f:
        f.write(src.replace(line, "        z = mu + eps * std if self.training else mu\n"))
    try:
        run([cddpc, net_t, "-o", prog_t])
        steps_t, final_t, met_t, met = (os.path.join(work, n) for n in ("t.steps.csv", "t.st", "t.metrics.csv",
                                                                           "a.metrics.csv"))
        run([prog_t] + base + ["--max-steps", str(STEPS), "--step-log", steps_t, "--save", final_t,
                               "--metrics", met_t])
        run([prog] + base + ["--max-steps", str(STEPS), "--metrics", met])
        got_t = [float(r["loss"]) for r in read_csv(steps_t)]
        Tu8 = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"))
        T = torch.from_numpy(np.array(Tu8)).to(torch.float32).div(255.0).reshape(-1, 1, 28, 28)
        ref_t = eval_loss(st.load(final_t), T)
        tl, tl_noisy = float(read_csv(met_t)[-1]["test_loss"]), float(read_csv(met)[-1]["test_loss"])
        print("self.training: steps %s the original's; test_loss %.6f, torch's eval() %.6f (rel %.1e); "
              "the original's noisy evaluation %.6f (rel %.1e, must exceed %.0e)"
              % ("equal to" if got_t == got else "DIFFERENT from", tl, ref_t, rel(tl, ref_t), tl_noisy,
                 rel(tl_noisy, ref_t), 100 * LOSS_TOL))
        if got_t != got or not rel(tl, ref_t) <= LOSS_TOL or not rel(tl_noisy, ref_t) > 100 * LOSS_TOL:
            failures.append("self.training does not skip the noise in evaluation only")
    except (RuntimeError, OSError, subprocess.TimeoutExpired, KeyError) as e:
        failures.append("self.training: %s" % e)

    # --resume: the noise depends on (seed, rank, step, site) only
    a, b, ck = (os.path.join(work, n) for n in ("r_full.st", "r_resumed.st", "r_ck.st"))
    try:
        run([prog] + base + ["--max-steps", "40", "--save", a])
        run([prog] + base + ["--max-steps", "25", "--checkpoint", ck, "--checkpoint-every", "10"])
        resumed = [a for a in base if a not in ("--init", init_path)]  # the checkpoint gives the weights
        run([prog] + resumed + ["--max-steps", "40", "--resume", ck, "--save", b])
        same = open(a, "rb").read() == open(b, "rb").read()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        same = False
        print("resume: %s" % e)
    print("resume: 40 steps straight vs 25 (checkpoint at 20) + resumed to 40: %s"
          % ("bit for bit equal" if same else "DIFFERENT"))
    if not same:
        failures.append("the resumed run's weights differ from the straight run's")

    skipped = None
    if shutil.which("mpirun"):
        env = dict(os.environ, OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1",
                   OMPI_MCA_hwloc_base_binding_policy="none", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        out, rsteps = os.path.join(work, "ranks.st"), os.path.join(work, "ranks.steps.csv")
        try:
            run(["mpirun", "-np", "2", prog] + base + ["--max-steps", str(RANK_STEPS), "--save", out,
                                                       "--step-log", rsteps], env=env)
            ref2_sd, ref2 = oracle(init_sd, X, SEED, ranks=2, steps=RANK_STEPS)
            g2 = [float(r["loss"]) for r in read_csv(rsteps)]
            l2 = max(rel(a, b) for a, b in zip(g2, ref2)) if len(g2) == len(ref2) else float("inf")
            p2 = worst_param(st.load(out), ref2_sd)
            print("2 MPI ranks, %d steps: step loss rel err %.2e, params rel L2 %.2e (DDP over 2 ranks in torch)"
                  % (RANK_STEPS, l2, p2))
            if not (l2 <= LOSS_TOL and p2 <= PARAM_TOL):
                failures.append("2 ranks differ from DDP's computation with each rank's noise")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            failures.append("2 ranks: %s" % e)
    else:
        skipped = "mpirun not found: 2 ranks not checked"
    if failures:
        print("vae_equiv: FAIL: %s (work dir %s)" % ("; ".join(failures), work))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    if skipped:
        print("vae_equiv: SKIP: %s (the rest passed)" % skipped)
        return 77
    print("vae_equiv: PASS: the VAE trains as PyTorch's with the documented noise, on 1 and 2 ranks, and resumes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
