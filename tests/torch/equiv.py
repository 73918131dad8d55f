"""The driver the small PyTorch-equivalence tests share (act, gate, nll,
smooth, tanh, norm, pool, softmax).

The program trains from PyTorch's own initialization (init.safetensors, the
oracle's state_dict) on the data in file order (--shuffle off), SGD with
momentum, for `steps` steps of batch 64; PyTorch trains the same network
from the same weights on the same batches. Every step's loss must agree to
relative LOSS_TOL, the final parameters and buffers to relative L2
PARAM_TOL. Each control (the same oracle with one thing changed: another
op, a parameter, a derivative) must not match: the test sees what it
claims to test. A control fails the test's own tolerances (`either`: the
losses or the parameters out of tolerance) or, with control_rule="params",
its parameters must be 100 x PARAM_TOL away.
"""
import csv
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from simplenet_ref import read_idx  # noqa: E402

SEED = 2024
BATCH = 64
MOMENTUM = 0.9
MEAN, STD = 0.1307, 0.3081
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4


def cross_entropy(out, y, variant):
    return F.cross_entropy(out, y)


def oracle(make_model, init_sd, X, Y, variant, steps, lr, loss_fn, dtype=torch.float32, clip=None):
    """dtype float64: the network's exact training (as near as float64 is),
    for a network whose training PyTorch's own float32 rounding moves by
    more than the tolerance (the program is then held to the truth); clip:
    the gradients' norm clipped to it (clip_grad_norm_) before each step,
    or ("value", v): each gradient clamped to [-v, v] (clip_grad_value_)"""
    model = make_model(variant).to(dtype)
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in init_sd.items()})
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    losses = []
    for s in range(steps):
        x, y = X[s * BATCH:(s + 1) * BATCH].to(dtype), Y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        loss = loss_fn(model(x), y, variant)
        loss.backward()
        if isinstance(clip, tuple):
            torch.nn.utils.clip_grad_value_(model.parameters(), clip[1])
        elif clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        losses.append(loss.item())
        opt.step()
    return {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}, losses


def normalize(img_u8):
    x = torch.from_numpy(np.array(img_u8)).to(torch.float32).div(255.0)
    return x.sub(MEAN).div(STD).reshape(-1, 1, 28, 28)


def read_csv(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head = [c.strip() for c in rows[0]]
    return [dict(zip(head, r)) for r in rows[1:]]


def run(argv, name, label, make_model, steps, lr, controls, main_variant="same", loss_fn=cross_entropy,
        control_rule="either", doc="", targets=None, labels=True, oracle_dtype=torch.float32, clip=None):
    """argv: PROGRAM DATA_DIR. make_model(variant) builds the oracle's
    network; controls: (variant, what) pairs that must not match.
    targets(images_u8, labels_u8) -> int64 array: the program's targets
    made from the data set's (then both train on an npz of the images and
    those). labels=False: the program's data directory holds the images
    alone (an autoencoder reads no labels). oracle_dtype: the oracle's
    precision (oracle()); clip: its clipping (the model file's
    clip_grad_norm, or ("value", v) for clip_grad_value; a control variant
    "noclip" trains without it). Returns
    the exit status."""
    if len(argv) != 2:
        sys.stderr.write(doc)
        return 2
    program, data_dir = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    work = tempfile.mkdtemp(prefix="cddpc-%s-" % name.replace("_", "-"))
    init_path = os.path.join(work, "init.safetensors")
    init_sd = {k: v.detach().numpy().copy() for k, v in make_model(main_variant).state_dict().items()}
    st.save(init_path, init_sd)
    Xu8 = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    Yu8 = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    data = data_dir
    if targets is not None:
        n = steps * BATCH
        Xt, Yt = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")), \
            read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"))
        Yu8 = targets(Xu8[:n], Yu8[:n])
        data = os.path.join(work, "data.npz")
        np.savez(data, x_train=Xu8[:n].reshape(-1, 1, 28, 28), y_train=Yu8,
                 x_test=Xt[:1000].reshape(-1, 1, 28, 28), y_test=targets(Xt[:1000], Yt[:1000]))
    if not labels:
        data = os.path.join(work, "images")
        os.mkdir(data)
        for f in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
            os.symlink(os.path.join(data_dir, f), os.path.join(data, f))
    X, Y = normalize(Xu8[:steps * BATCH]), torch.from_numpy(Yu8[:steps * BATCH].astype(np.int64))

    steps_csv, final = os.path.join(work, "steps.csv"), os.path.join(work, "final.st")
    cmd = [program, "--data", data, "--init", init_path, "--shuffle", "off", "--epochs", "1",
           "--max-steps", str(steps), "--batch", str(BATCH), "--lr", str(lr), "--threads", "1",
           "--step-log", steps_csv, "--save", final]
    print("%s: %s" % (name, " ".join(cmd)))
    sys.stdout.flush()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode("utf-8", "replace")[-4000:])
        print("%s: FAIL: program exited with %d (work dir %s)" % (name, r.returncode, work))
        return 1
    got = [float(row["loss"]) for row in read_csv(steps_csv)]
    got_sd = st.load(final)

    def compare(ref_sd, ref_losses):
        if len(got) != len(ref_losses):
            return float("inf"), float("inf")
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref_losses))
        pw = 0.0
        for k in ref_sd:
            ref = ref_sd[k].astype(np.float64)
            if k not in got_sd:
                return lw, float("inf")
            d = np.linalg.norm(got_sd[k].astype(np.float64) - ref)
            pw = max(pw, d / np.linalg.norm(ref) if np.linalg.norm(ref) > 0 else d)
        return lw, pw

    failures = []
    loss_err, param_err = compare(*oracle(make_model, init_sd, X, Y, main_variant, steps, lr, loss_fn, oracle_dtype,
                                          clip))
    print("%s: %d steps, losses %.4f .. %.4f; worst step loss rel err %.2e (tol %.0e), final params rel L2 %.2e "
          "(tol %.0e)" % (label, steps, got[0], got[-1], loss_err, LOSS_TOL, param_err, PARAM_TOL))
    if not (loss_err <= LOSS_TOL and param_err <= PARAM_TOL):
        failures.append("the program does not train as PyTorch's network does")
    for variant, what in controls:
        l2, p2 = compare(*oracle(make_model, init_sd, X, Y, variant, steps, lr, loss_fn, oracle_dtype,
                                 None if variant == "noclip" else clip))
        if control_rule == "params":
            print("control, %s: loss rel err %.2e, params rel L2 %.2e (must exceed %.0e)" % (what, l2, p2,
                                                                                             100 * PARAM_TOL))
            matched = not p2 > 100 * PARAM_TOL
        else:
            # the control must fail the test's own tolerances
            print("control, %s: loss rel err %.2e, params rel L2 %.2e (one must exceed its tol)" % (what, l2, p2))
            matched = l2 <= LOSS_TOL and p2 <= PARAM_TOL
        if matched:
            failures.append("the program also matches PyTorch with %s" % what)
    if failures:
        print("%s: FAIL: %s (work dir %s)" % (name, "; ".join(failures), work))
        return 1
    print("%s: PASS: losses and parameters equal PyTorch's within 1e-4 over %d steps" % (name, steps))
    return 0
