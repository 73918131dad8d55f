#!/usr/bin/python3
"""export_check.py CDDPC ROOT: --export-onnx checked by others' code.

usage: export_check.py CDDPC ROOT [NAME ...]   (NAME: a case below, or refusal)

For each model (SimpleNet, the ConvNet, LeNet-5, the attention-over-rows
model, GoogLeNet-style with its auxiliary head, and the tabular ones:
iris with class names, breast_cancer's one logit, diabetes' regression,
digits from an npz, digits_multilabel's three labels; the character GPT,
MLP and GRU on the first 120000 characters of the KJV; the recurrent
networks: a 2-layer LSTM over an image's rows, an LSTM without biases
over the sequence-first layout, a bidirectional GRU read through h_n, a
ReLU RNN; ConvTranspose2d and bilinear and nearest upsampling; the VAE
with its noise under `if self.training`, against its test MSE): compile
it, train
it briefly with --save and --export-onnx (the file after training), then

  1. onnx's checker (full_check) and strict shape inference pass, and the
     graph's input and output are "input" (the data as stored, a symbolic
     batch) and "y";
  2. --load WEIGHTS --export-onnx writes the same bytes (no training: the
     normalization comes from the weights' saved metadata; --save with it
     is refused);
  3. onnxruntime-node (tests/onnx/ort_run.js: Microsoft's runtime, not
     ours) runs the file on the whole test set as stored (uint8 IDX
     images, an npz's x_test, a CSV's feature columns), and the loss and
     metrics computed in float64 from its outputs equal the program's own
     --evaluate: the loss within 1e-5 absolute + 1e-4 relative, the
     correct predictions (classes, labels) identical (GoogLeNet's: its
     loss block's loss adds the auxiliary head, which "y" leaves out).

A model with an op that has no export (a VAE's noise in eval mode) is
refused naming the op, before any training. The CSV models' train block
takes a test file here (the train block's split = 0.2 picks its rows
itself): the same rows split 80/20 after a fixed shuffle.
"""
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

STEPS = 60
STEPS_OF = {"updown": 400}     # it learns slowly: an untrained net's outputs are near constant


def idx_images(path):
    raw = gzip.open(path + ".gz").read() if os.path.exists(path + ".gz") else open(path, "rb").read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(nd)]
    a = np.frombuffer(raw[4 + 4 * nd:], np.uint8)
    return a.reshape(dims)


def csv_split(src, work, name):
    """src's rows shuffled (seed 0), 80% to train, 20% to test"""
    lines = open(src).read().splitlines()
    head, rows = lines[0], lines[1:]
    order = np.random.default_rng(0).permutation(len(rows))
    cut = int(len(rows) * 0.8)
    paths = []
    for part, sel in (("train", order[:cut]), ("test", order[cut:])):
        p = os.path.join(work, "%s_%s.csv" % (name, part))
        with open(p, "w") as f:
            f.write("\n".join([head] + [rows[i] for i in sel]) + "\n")
        paths.append(p)
    return paths


def csv_columns(path):
    lines = open(path).read().splitlines()
    head = lines[0].split(",")
    rows = [l.split(",") for l in lines[1:]]
    return head, rows


# (name, model, kind, data): kind says how the test set's inputs, targets
# and metrics are read
CASES = [
    ("simplenet", "models/mnist.net", "idx", "data/mnist"),
    ("convnet", "models/mnist_convnet.net", "idx", "data/mnist"),
    ("lenet5", "models/lenet5.net", "idx", "data/fashion-mnist"),
    ("row_attention", "models/row_attention.net", "idx", "data/fashion-mnist"),
    ("googlenet_aux", "models/googlenet_aux.net", "idx_aux", "data/fashion-mnist"),
    ("digits", "models/digits.net", "npz", "data/sklearn/digits.npz"),
    ("iris", "models/iris.net", "csv_class", "data/sklearn/iris.csv"),
    ("breast_cancer", "models/breast_cancer.net", "csv_bin", "data/sklearn/breast_cancer.csv"),
    ("diabetes", "models/diabetes.net", "csv_reg", "data/sklearn/diabetes.csv"),
    ("gpt_char", "models/gpt_char.net", "text", "data/kjv.txt"),
    ("char_lm", "models/char_lm.net", "text", "data/kjv.txt"),
    ("lstm_rows", "models/lstm_rows.net", "idx", "data/fashion-mnist"),
    ("lstm_seq", "tests/torch/lstm_seq.net", "idx", "data/fashion-mnist"),
    ("gru_bi", "tests/torch/gru_bi.net", "idx", "data/fashion-mnist"),
    ("rnn_relu", "tests/torch/rnn_relu.net", "idx", "data/fashion-mnist"),
    ("char_gru", "models/char_gru.net", "text", "data/kjv.txt"),
    ("updown", "tests/torch/updown_net.net", "idx", "data/fashion-mnist"),
    ("vae_eval", "models/vae.net", "idx_recon", "data/fashion-mnist"),
    ("digits_multilabel", "models/digits_multilabel.net", "csv_bin", "data/sklearn/digits_multilabel.csv"),
]


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, **kw)
    return r.returncode, r.stdout.decode(errors="replace")


def log_softmax(z):
    m = z.max(1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(1, keepdims=True))


def metrics_of(kind, y, t):
    """the program's test metrics, recomputed in float64 from outputs y"""
    y = y.astype(np.float64)
    if kind == "idx_recon":     # target = input: the reconstruction against the input scaled to [0, 1]
        d = y - t.reshape(len(y), -1) / 255.0
        return {"test_mse": (d * d).mean(), "test_mae": np.abs(d).mean()}, None
    if kind == "idx_aux":   # y is the main head; the loss block's loss adds the auxiliary head's
        return {}, int((y.argmax(1) == t).sum())
    if kind in ("idx", "npz", "csv_class", "text"):
        y = y.reshape(len(t), -1)       # a language model's: a row a position
        lp = log_softmax(y)
        loss = -lp[np.arange(len(t)), t].mean()
        extra = {"test_ppl": np.exp(loss)} if kind == "text" else {}
        return dict(test_loss=loss, **extra), int((y.argmax(1) == t).sum())
    if kind == "csv_reg":
        d = y - t
        return {"test_loss": (d * d).mean(), "test_mse": (d * d).mean(), "test_mae": np.abs(d).mean()}, None
    # binary_cross_entropy_with_logits, mean over the elements; labels on where the logit is over 0
    bce = np.maximum(y, 0) - y * t + np.log1p(np.exp(-np.abs(y)))
    return {"test_loss": bce.mean()}, int(((y > 0) == (t > 0.5)).sum())


def test_set(kind, root, data, work, name):
    """(inputs as stored, their ONNX dtype, targets, the data path and a
    train block data line for the program)"""
    if kind.startswith("idx"):
        x = idx_images(os.path.join(root, data, "t10k-images-idx3-ubyte"))
        t = idx_images(os.path.join(root, data, "t10k-labels-idx1-ubyte")).astype(np.int64)
        if kind == "idx_recon":
            t = x.astype(np.float64)
        return x.reshape(len(x), 1, 28, 28), "uint8", t, os.path.join(root, data), None
    if kind == "text":      # rt_text.c's windows of the first 120000 characters (a quick run)
        text = open(os.path.join(root, data), encoding="utf-8").read()[:120000]
        path = os.path.join(work, name + ".txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        vocab = sorted(set(text))
        tok = np.array([vocab.index(c) for c in text], np.int64)
        B = 64
        nwin = (len(tok) - 1) // B
        ntest = int(round(0.1 * nwin))
        w = np.arange(nwin - ntest, nwin)
        x = np.stack([tok[i * B:i * B + B] for i in w])
        t = np.stack([tok[i * B + 1:i * B + B + 1] for i in w]).reshape(-1)
        return x, "int64", t, path, None
    if kind == "npz":
        z = np.load(os.path.join(root, data))
        return z["x_test"].astype(np.float32), "float32", z["y_test"].astype(np.int64), os.path.join(root, data), None
    train, test = csv_split(os.path.join(root, data), work, name)
    head, rows = csv_columns(test)
    return head, rows, train, test


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    cddpc, root = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    only = set(argv[2:])
    unknown = only - {c[0] for c in CASES} - {"refusal"}
    if unknown:
        sys.stderr.write("export_check: no case %s\n" % ", ".join(sorted(unknown)))
        return 2
    import onnx
    from onnx import shape_inference
    node_modules = os.path.join(root, ".deps", "node_modules")
    if not os.path.isdir(os.path.join(node_modules, "onnxruntime-node")) or not shutil.which("node"):
        print("SKIP: onnxruntime-node is not installed in %s (scripts/deps.sh installs it)" % node_modules)
        return 77
    work = tempfile.mkdtemp(prefix="cddpc-onnx-")
    failures = []
    for name, model, kind, data in CASES:
        if only and name not in only:
            continue
        src = open(os.path.join(root, model)).read()
        if name == "vae_eval":  # the noise in training only, as PyTorch code skips it in eval mode
            src = src.replace("z = mu + eps * std", "z = mu + eps * std if self.training else mu")
        net = os.path.join(work, name + ".net")
        if kind.startswith("csv"):
            head, rows, train, test = test_set(kind, root, data, work, name)
            m = re.search(r'csv\("([^"]*)"(.*?),\s*split = 0\.2\)', src, re.S)
            src = src.replace(m.group(0), 'csv("%s", test = "%s"%s)' % (train, test, m.group(2)))
            tcols = re.findall(r'targets? = \[?([^\]\)]*)', m.group(2))[0]
            tnames = [s.strip().strip('"') for s in tcols.split(",") if s.strip().strip('"') in head]
            feat = [i for i, h in enumerate(head) if h not in tnames]
            x = np.array([[float(r[i]) for i in feat] for r in rows], np.float32)
            dtype = "float32"
            if kind == "csv_class":
                labels = [r[head.index(tnames[0])] for r in rows]
                classes = sorted(set(csv_columns(train)[1][k][head.index(tnames[0])]
                                     for k in range(len(csv_columns(train)[1]))))
                t = np.array([classes.index(l) for l in labels], np.int64)
            else:
                t = np.array([[float(r[head.index(c)]) for c in tnames] for r in rows], np.float64)
            path = train
        else:
            x, dtype, t, path, _ = test_set(kind, root, data, work, name)
        with open(net, "w") as f:
            f.write(src)
        prog = os.path.join(work, name)
        rc, out = run([cddpc, net, "-o", prog])
        if rc:
            failures.append("%s: cddpc: %s" % (name, out[-1500:]))
            continue
        st, o1, o2 = (os.path.join(work, name + s) for s in (".st", ".onnx", ".load.onnx"))
        rc, out = run([prog, "--data", path, "--epochs", "1", "--max-steps", str(STEPS_OF.get(name, STEPS)), "--threads", "1",
                       "--save", st, "--export-onnx", o1])
        if rc or not os.path.exists(o1):
            failures.append("%s: training with --export-onnx: %s" % (name, out[-1500:]))
            continue
        rc, out = run([prog, "--data", path, "--threads", "1", "--load", st, "--export-onnx", o2])
        same = rc == 0 and open(o1, "rb").read() == open(o2, "rb").read()
        if not same:
            failures.append("%s: --load --export-onnx wrote another file (rc %d): %s" % (name, rc, out[-800:]))
        if name == "simplenet":     # exporting --load's weights trains nothing: --save is refused, not ignored
            rc, out = run([prog, "--data", path, "--load", st, "--export-onnx", o2, "--save", st + ".no"])
            if rc != 2 or "trains nothing: --save" not in out or os.path.exists(st + ".no"):
                failures.append("--load --export-onnx --save: rc %d, %s" % (rc, out[-300:]))
        # 1. the checker, strict shape inference, the names
        mp = onnx.load(o1)
        try:
            onnx.checker.check_model(mp, full_check=True)
            shape_inference.infer_shapes(mp, check_type=True, strict_mode=True)
        except Exception as e:  # noqa: BLE001 (any failure of theirs is ours)
            failures.append("%s: onnx checker: %s" % (name, str(e)[:600]))
            continue
        if kind == "csv_class":     # the class names, output j's, in the file's metadata
            props = {p.key: p.value for p in mp.metadata_props}
            import json
            if json.loads(props.get("classes", "null")) != classes:
                failures.append("%s: metadata classes %s, want %s" % (name, props.get("classes"), classes))
        gi, go = mp.graph.input[0], mp.graph.output[0]
        dim0 = gi.type.tensor_type.shape.dim[0]
        if gi.name != "input" or go.name != "y" or dim0.dim_param != "batch":
            failures.append("%s: input %s (dim 0 %s), output %s" % (name, gi.name, dim0, go.name))
        # 3. onnxruntime-node on the test set
        xin, yout = os.path.join(work, name + ".in"), os.path.join(work, name + ".out")
        np.ascontiguousarray(x).tofile(xin)
        rc, out = run(["node", os.path.join(root, "tests", "onnx", "ort_run.js"), o1, xin, dtype,
                       "x".join(str(d) for d in x.shape), yout], env=dict(os.environ, ORT_NODE_MODULES=node_modules))
        if rc:
            failures.append("%s: onnxruntime-node: %s" % (name, out[-800:]))
            continue
        y = np.fromfile(yout, np.float32).reshape(len(x), -1)
        mine, correct = metrics_of(kind, y, t)
        rc, out = run([prog, "--data", path, "--threads", "1", "--evaluate", st])
        ev = dict((k, float(v)) for k, v in re.findall(r"(test_\w+) (\S+)", out))
        bad = []
        for k, v in mine.items():
            if k in ev and not abs(ev[k] - v) <= 1e-5 + 1e-4 * abs(v):
                bad.append("%s %.7g (onnxruntime %.7g)" % (k, ev[k], v))
        n = t.size if kind in ("csv_bin", "text") else len(t)
        acc_key = "test_acc" if "test_acc" in ev else "test_label_acc" if "test_label_acc" in ev else None
        if correct is not None and acc_key and round(ev[acc_key] * n) != correct:
            bad.append("%s %.6f: %d of %d, onnxruntime %d" % (acc_key, ev[acc_key], round(ev[acc_key] * n), n, correct))
        if rc or not ev or not set(mine) <= set(ev):
            bad.append("--evaluate: %s" % out[-500:])
        print("%-18s %8d bytes, %3d nodes; %5d test samples: --evaluate %s; onnxruntime %s%s" % (
            name, os.path.getsize(o1), len(mp.graph.node), len(x),
            " ".join("%s %.6g" % kv for kv in sorted(ev.items())),
            " ".join("%s %.6g" % kv for kv in sorted(mine.items())),
            "" if correct is None else ", %d correct" % correct))
        if bad:
            failures.append("%s: %s" % (name, "; ".join(bad)))
    if not only or "refusal" in only:   # an op with no export: refused before training, naming it
        prog = os.path.join(work, "vae")
        rc, out = run([cddpc, os.path.join(root, "models", "vae.net"), "-o", prog])
        rc, out = run([prog, "--data", os.path.join(root, "data", "fashion-mnist"), "--export-onnx",
                       os.path.join(work, "vae.onnx")]) if rc == 0 else (rc, out)
        ok = rc != 0 and "randn" in out and "no ONNX export" in out and "epoch" not in out \
            and not os.path.exists(os.path.join(work, "vae.onnx"))
        print("refusal: %s" % out.strip().splitlines()[-1] if out.strip() else "refusal: (no output)")
        if not ok:
            failures.append("the VAE's noise in eval mode was not refused as it should be: rc %d, %s" % (rc, out[-500:]))
    if failures:
        print("export_check: FAIL: " + "\n  ".join(failures) + "\n(work dir %s)" % work)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("export_check: PASS: every file passes onnx's checker and runs in onnxruntime-node as --evaluate runs it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
