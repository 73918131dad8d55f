#!/usr/bin/python3
"""scaler_check.py PROGRAM DATA_DIR: fp16 dynamic loss scaling as GradScaler.

PROGRAM is an fp16 model whose scaler starts far too high (init_scale
2^40: the first gradients overflow fp16) and grows fast (growth_interval
3), so ~40 steps see skips, backoffs and growth: SimpleNet with the
one-line cross_entropy loss (tests/amp/overflow.net) or the same loss as
a loss block (overflow_block.net, whose gradient must be seeded with the
scale: seeded with 1 the first step would not overflow). Checks:
  1. the scale sequence of --step-log (the scale each step ran with) is
     exactly PyTorch's GradScaler update replayed on the program's own
     found_inf sequence, and so is the final scale on the epoch output;
  2. the found_inf decisions themselves: the first step is skipped (2^40
     times any cross-entropy gradient overflows fp16); a skipped step
     leaves the weights bitwise unchanged and a clean step changes them
     (--save after --max-steps k vs k-1); the first clean step's scale is
     one at which the logits' gradient fits fp16 (|g| <= S/batch < 65520);
  3. the decisions recomputed by PyTorch: with --shuffle off (batch t is
     samples 64(t-1)..64t-1 in file order) every step up to the first clean
     one starts from the initial weights (the skipped steps changed
     nothing); PyTorch computes SimpleNet's backward at each step's scale
     with the program's roundings (x.half().float() where it rounds) and
     its own found_inf must be the program's, step for step.

GradScaler's update is torch._amp_update_scale_, which PyTorch 1.13 has
for CUDA tensors only; on CPU the same kernel
(aten/src/ATen/native/cuda/AmpKernels.cu, amp_update_scale_cuda_kernel)
is replayed here in float32 tensor arithmetic, as written there.
"""
import csv
import os
import re
import struct
import subprocess
import sys
import tempfile

import gzip

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import st  # noqa: E402  (tests/torch/st.py: safetensors)

INIT, GROWTH, BACKOFF, INTERVAL, BATCH = 2.0 ** 40, 2.0, 0.5, 3, 64
STEPS = 40


def update_scale(scale, tracker, found_inf):
    """torch._amp_update_scale_(scale, growth_tracker, found_inf, 2, 0.5, 3)."""
    if scale.is_cuda:
        torch._amp_update_scale_(scale, tracker, found_inf, GROWTH, BACKOFF, INTERVAL)
        return
    if found_inf.item():
        scale.mul_(BACKOFF)                       # *current_scale *= backoff_factor
        tracker.zero_()
    else:
        successful = tracker.item() + 1
        if successful == INTERVAL:
            new_scale = scale * GROWTH            # float32 product, as static_cast<float>
            if torch.isfinite(new_scale).item():
                scale.copy_(new_scale)
            tracker.zero_()
        else:
            tracker.fill_(successful)


def f32(text):
    return struct.unpack("<f", struct.pack("<f", float(text)))[0]


def run(program, data, work, k, extra=()):
    out = os.path.join(work, "w%d.st" % k)
    cmd = [program, "--data", data, "--epochs", "1", "--threads", "1", "--max-steps", str(k),
           "--save", out] + list(extra)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode()[-3000:])
        raise SystemExit("FAIL: %s exited with %d" % (" ".join(cmd), r.returncode))
    return out, r.stdout.decode()


def tensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return b[8 + n:]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    program, data = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    work = tempfile.mkdtemp(prefix="cddpc-amp-")
    log = os.path.join(work, "steps.csv")
    _, text = run(program, data, work, STEPS, ["--step-log", log])
    rows = list(csv.DictReader(open(log)))
    assert len(rows) == STEPS, "FAIL: %d step rows, want %d" % (len(rows), STEPS)
    found = [int(r["found_inf"]) for r in rows]
    # %.9g round-trips a float32: compare as float32
    logged = [f32(r["scale"]) for r in rows]

    # 1. the scale sequence, replayed
    scale = torch.tensor([INIT], dtype=torch.float32)
    tracker = torch.zeros(1, dtype=torch.int32)
    bad = 0
    for t, f in enumerate(found):
        if logged[t] != scale.item():
            print("FAIL: step %d ran with scale %r, GradScaler's is %r" % (t + 1, logged[t], scale.item()))
            bad += 1
        update_scale(scale, tracker, torch.tensor([float(f)]))
    m = re.search(r"loss scale (\S+)\s+skipped (\d+) steps", text)
    if not m or f32(m.group(1)) != scale.item() or int(m.group(2)) != sum(found):
        print("FAIL: final scale/skips %s, GradScaler's %r with %d skipped" % (m and m.groups(), scale.item(),
                                                                              sum(found)))
        bad += 1
    grew = sum(1 for a, b in zip(logged, logged[1:]) if b > a)
    print("scale: %d steps, %d skipped, %d growths, final %g: %s GradScaler's sequence" % (
        STEPS, sum(found), grew, scale.item(), "equals" if not bad else "DIFFERS FROM"))
    if grew == 0 or sum(found) == 0 or sum(found) == STEPS:
        print("FAIL: the run should both skip and grow (found_inf %s)" % found)
        bad += 1

    # 2. the decisions
    if found[0] != 1:
        print("FAIL: the first step at scale 2^40 was not skipped")
        bad += 1
    first_clean = found.index(0) if 0 in found else None
    if first_clean is not None and not logged[first_clean] / BATCH < 65520:
        print("FAIL: first clean step at scale %g: the logits' gradient cannot fit fp16" % logged[first_clean])
        bad += 1
    # every step up to a few past the first clean one, and the first later skip
    ks = list(range(1, (first_clean or 0) + 4))
    later = [t for t in range((first_clean or 0) + 1, STEPS) if found[t]]
    if later:
        ks += [later[0], later[0] + 1]
    prev = {}
    for k in sorted(set(ks) | {k - 1 for k in ks if k > 1}):
        prev[k] = tensors(run(program, data, work, k)[0])
    checked = 0
    for k in ks:
        if k - 1 not in prev or k not in prev:
            continue
        same = prev[k] == prev[k - 1]
        if same != bool(found[k - 1]):
            print("FAIL: step %d (found_inf %d) %s the weights" % (k, found[k - 1],
                                                                  "left unchanged" if same else "changed"))
            bad += 1
        checked += 1
    print("weights: %d steps checked: skipped ones leave them bitwise unchanged, clean ones update" % checked)
    bad += torch_decisions(program, data, work)
    return 1 if bad else 0


def idx(path):
    if not os.path.exists(path):        # the plain file, or gzipped
        path += ".gz"
    raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    nd = raw[3]
    dims = struct.unpack(">%dI" % nd, raw[4:4 + 4 * nd])
    return torch.frombuffer(bytearray(raw[4 + 4 * nd:]), dtype=torch.uint8).reshape(dims)


def torch_found_inf(w, x, y, scale):
    """found_inf of one fp16 step of SimpleNet, rounding as the program's
    kernels do (README "Mixed precision"): GEMM operands and results,
    elementwise results, the scaled logits gradient; fp32 accumulation."""
    r = lambda t: t.half().float()
    mm = lambda a, b: r(r(a) @ r(b))
    h1 = r(mm(x, w["fc1.weight"].t()) + r(w["fc1.bias"])).clamp_min(0)
    h2 = r(mm(h1, w["fc2.weight"].t()) + r(w["fc2.bias"])).clamp_min(0)
    z = r(mm(h2, w["fc3.weight"].t()) + r(w["fc3.bias"]))
    g = r((F.softmax(z, 1) - F.one_hot(y, 10).float()) * (1.0 / len(y) * scale))
    grads = [mm(g.t(), h2), g.sum(0)]
    d2 = r(mm(g, w["fc3.weight"]) * (h2 > 0))
    grads += [mm(d2.t(), h1), d2.sum(0)]
    d1 = r(mm(d2, w["fc2.weight"]) * (h1 > 0))
    grads += [mm(d1.t(), x), d1.sum(0)]
    return int(not all(torch.isfinite(t).all() for t in grads))


def torch_decisions(program, data, work):
    log = os.path.join(work, "noshuffle.csv")
    init, _ = run(program, data, work, 1, ["--shuffle", "off"])
    run(program, data, work, STEPS, ["--shuffle", "off", "--step-log", log])
    rows = list(csv.DictReader(open(log)))
    found = [int(r["found_inf"]) for r in rows]
    if 0 not in found or found[0] != 1:
        print("FAIL: shuffle off: want a skipped first step and a clean one later, got %s" % found)
        return 1
    w = {k: torch.from_numpy(v.copy()) for k, v in st.load(init).items()}
    imgs = idx(os.path.join(data, "train-images-idx3-ubyte")).reshape(-1, 784).float()
    labs = idx(os.path.join(data, "train-labels-idx1-ubyte")).long()
    bad = 0
    last = found.index(0)
    for t in range(last + 1):
        x = (imgs[BATCH * t:BATCH * (t + 1)] / 255.0 - 0.1307) / 0.3081
        mine = torch_found_inf(w, x, labs[BATCH * t:BATCH * (t + 1)], f32(rows[t]["scale"]))
        if mine != found[t]:
            print("FAIL: step %d at scale %s: program found_inf %d, PyTorch %d" % (t + 1, rows[t]["scale"],
                                                                                 found[t], mine))
            bad += 1
    print("PyTorch found_inf: steps 1..%d (%d skipped, then the first clean one at scale %s): %s" % (
        last + 1, last, rows[last]["scale"], "the same decisions" if not bad else "DIFFERENT"))
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
