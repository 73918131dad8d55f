#!/usr/bin/python3
"""The npz and csv readers against numpy's and Python's csv module's view
of the same files: float targets (one and several per sample), integer,
unsigned and float x of every width, the class mapping.

usage: reader_check.py DATA_VIEW

DATA_VIEW is tests/data/data_view.c built (the runtime's readers behind a
stand-in model). The files are scikit-learn's data sets as
scripts/sklearn_data.py writes them, and npz/csv variants written here.
For each, the sample count and sizes must be numpy's, the first three
samples and the last equal to numpy's values rounded to float32 (x) or
as targets, and every column's sum over the samples equal to numpy's
sum of the same float32 values within 1e-12 relative.
"""
import csv
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
fails = 0


def parse(out):
    sets, cur, classes = {}, None, []
    for line in out.splitlines():
        w = line.split()
        if w[0] == "set":
            cur = sets[w[1]] = {"n": int(w[3]), "xsize": int(w[5]), "ysize": int(w[7]), "u8": int(w[9]),
                                "x": {}, "y": {}, "xsum": [], "ysum": []}
        elif w[0] in ("x", "y"):
            cur[w[0]][int(w[1])] = np.array([float(v) for v in w[2:]])
        elif w[0] in ("xsum", "ysum"):
            cur[w[0]].append(float(w[2]))
        elif w[0] == "class":
            classes.append(w[2])
    return sets, classes


def check(name, view, args, ref, classes=None):
    """ref: {"train": (x [n, xsize], y [n, ysize]), "test": ...} as numpy's view"""
    global fails
    r = subprocess.run([view] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout.decode()
    if r.returncode != 0:
        print("FAIL reader-check: %s: data_view exited %d: %s" % (name, r.returncode, out[-400:]))
        fails += 1
        return
    sets, got_classes = parse(out)
    bad = []
    if sorted(sets) != sorted(ref):
        bad.append("sets %s, expected %s" % (sorted(sets), sorted(ref)))
    for part, (x, y) in ref.items():
        s = sets.get(part)
        if not s:
            continue
        x32 = x.reshape(len(x), -1).astype(np.float32).astype(np.float64)
        y2 = y.reshape(len(y), -1).astype(np.float64)
        if (s["n"], s["xsize"], s["ysize"]) != (len(x), x32.shape[1], y2.shape[1]):
            bad.append("%s: n/xsize/ysize %d/%d/%d, numpy %d/%d/%d" % (part, s["n"], s["xsize"], s["ysize"], len(x),
                                                                     x32.shape[1], y2.shape[1]))
            continue
        for i, v in s["x"].items():
            # %.9g round-trips a float32: compare as float32
            if not np.array_equal(v.astype(np.float32), x32[i].astype(np.float32)):
                bad.append("%s: x[%d] differs" % (part, i))
            if not np.array_equal(s["y"][i].astype(np.float32), y2[i].astype(np.float32)):
                bad.append("%s: y[%d] %s, numpy %s" % (part, i, s["y"][i], y2[i]))
        for key, ref_sum in (("xsum", x32.sum(0)), ("ysum", y2.astype(np.float32).astype(np.float64).sum(0))):
            if not np.allclose(s[key], ref_sum, rtol=1e-12, atol=1e-9):
                bad.append("%s: %s differ" % (part, key))
    if classes is not None and got_classes != classes:
        bad.append("classes %s, expected %s" % (got_classes, classes))
    if bad:
        fails += 1
        print("FAIL reader-check: %s: %s" % (name, "; ".join(bad[:6])))
    else:
        print("PASS reader-check: %s: %s" % (name, ", ".join("%s %d x %d" % (p, s["n"], s["xsize"])
                                                              for p, s in sorted(sets.items()))))


def check_auto(view, tmp, r):
    """normalize = auto through rt_data_load: per channel of [C, H, W] against
    torch's mean and std (n - 1) over (N, H, W), uint8 measured as x/255;
    per feature of [F]; and with split, the stratified sizes"""
    global fails
    import torch
    cases = []
    x = (r.randn(50, 3, 2, 2) * np.array([1, 10, 100]).reshape(1, 3, 1, 1)
         + np.array([5, -3, 0]).reshape(1, 3, 1, 1)).astype(np.float32)
    cases.append(("float [50, 3, 2, 2]", x, torch.from_numpy(x), "3x2x2"))
    xu = r.randint(0, 256, (40, 2, 4, 4)).astype(np.uint8)
    xu[:, 1] //= 4
    cases.append(("uint8 [40, 2, 4, 4]", xu, torch.from_numpy(xu).float() / 255, "2x4x4"))
    xf = r.randn(30, 5).astype(np.float64) * np.arange(1, 6)
    xf[:, 2] = 7.0      # a constant feature: std 1
    cases.append(("float64 [30, 5]", xf, torch.from_numpy(xf.astype(np.float32)), "5"))
    for name, xs, t, dims in cases:
        f = os.path.join(tmp, "auto_%d.npz" % len(name))
        np.savez(f, x_train=xs, y_train=r.randint(0, 2, len(xs)), x_test=xs[:3], y_test=np.zeros(3, np.int64))
        out = subprocess.run([view, "npz", f, "class", "2", dims], env=dict(os.environ, DATA_VIEW_AUTO="1"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
        got = np.array([[float(v) for v in l.split()[2:]] for l in out.splitlines() if l.startswith("norm ")])
        dimsr = (0,) + tuple(range(2, t.dim()))
        mean, std = t.double().mean(dimsr).numpy(), t.double().std(dimsr).numpy()
        std[std == 0] = 1
        ok = got.shape == (len(mean), 2) and np.allclose(got[:, 0], mean, rtol=1e-6, atol=1e-7) and \
            np.allclose(got[:, 1], std, rtol=1e-6)
        print("%s reader-check: normalize auto, %s: %d channels, means and stds %s torch's (n - 1)"
              % ("PASS" if ok else "FAIL", name, len(got), "equal" if ok else "differ from"))
        if not ok:
            print(out[-800:])
            fails += 1
    # split: 3 classes of 40, 25 and 9 rows; 0.2 held out of each, rounded
    y = np.repeat([0, 1, 2], [40, 25, 9])
    r.shuffle(y)
    f = os.path.join(tmp, "split.npz")
    np.savez(f, x_train=np.arange(len(y) * 2, dtype=np.float32).reshape(-1, 2), y_train=y)
    sizes = []
    for seed in ("1", "1", "2"):
        out = subprocess.run([view, "npz", f, "class", "3", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=dict(os.environ, DATA_VIEW_AUTO="1", DATA_VIEW_SPLIT="0.2",
                                      DATA_VIEW_SEED=seed)).stdout.decode()
        sets, _ = parse(out)
        sizes.append((sets.get("train", {}).get("n"), sets.get("test", {}).get("n"),
                      sets.get("test", {}).get("xsum")))
    want = sum(int(np.floor(0.2 * c + 0.5)) for c in (40, 25, 9))
    ok = sizes[0][:2] == (len(y) - want, want) and sizes[0] == sizes[1] and sizes[2][2] != sizes[0][2]
    print("%s reader-check: split 0.2 of 74 rows (classes 40, 25, 9): train %s, test %s (expected %d, %d); "
          "same seed same rows, another seed other rows" % ("PASS" if ok else "FAIL", sizes[0][0], sizes[0][1],
                                                            len(y) - want, want))
    fails += not ok


def read_csv(path, targets, features=None):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    head = list(rows[0].keys())
    feats = features or [c for c in head if c not in targets]
    x = np.array([[float(r[c]) for c in feats] for r in rows])
    return x, rows


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    view = os.path.abspath(argv[0])
    tmp = tempfile.mkdtemp(prefix="cddpc-reader-check-")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "sklearn_data.py"), tmp], check=True)
    p = lambda n: os.path.join(tmp, n)  # noqa: E731

    for f, t in (("diabetes.csv", ["progression"]), ("breast_cancer.csv", ["benign"]),
                 ("digits_multilabel.csv", ["is_even", "is_gt4", "is_prime"])):
        x, rows = read_csv(p(f), t)
        y = np.array([[float(r[c]) for c in t] for r in rows])
        check(f + " (float targets)", view, ["csv", p(f), "float", str(len(t)), str(x.shape[1])] + t,
              {"train": (x, y)})
    feats = ["worst_area", "mean_radius", "mean_texture"]
    x, rows = read_csv(p("breast_cancer.csv"), ["benign"], feats)
    check("breast_cancer.csv, features named, in their order", view,
          ["csv", p("breast_cancer.csv"), "class", "2", "3", "benign", "--"] + feats,
          {"train": (x, np.array([int(r["benign"]) for r in rows]))})
    x, rows = read_csv(p("iris.csv"), ["species"])
    names = sorted(set(r["species"] for r in rows))
    check("iris.csv (labels as text)", view, ["csv", p("iris.csv"), "class", "3", "4", "species"],
          {"train": (x, np.array([names.index(r["species"]) for r in rows]))}, names)

    # Python's csv module: every field quoted, CRLF, a text column with commas and line breaks
    r = np.random.RandomState(1)
    xq, yq = r.randn(40, 3) * 1e3, r.rand(40, 2)
    with open(p("quoted.csv"), "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\r\n")
        w.writerow(["t1", "a", "note", "b", "c", "t2"])
        for i in range(40):
            w.writerow([yq[i, 0], xq[i, 0], 'say "%d",\nthen, stop' % i, xq[i, 1], xq[i, 2], yq[i, 1]])
    check("quoted.csv (QUOTE_NONNUMERIC, CRLF)", view,
          ["csv", p("quoted.csv"), "float", "2", "3", "t1", "t2", "--", "a", "b", "c"], {"train": (xq, yq)})

    z = np.load(p("digits.npz"))
    check("digits.npz", view, ["npz", p("digits.npz"), "class", "10", "64"],
          {"train": (z["x_train"], z["y_train"]), "test": (z["x_test"], z["y_test"])})
    for xt, yt, save in ((np.int16, np.float64, np.savez), (np.uint8, np.float32, np.savez_compressed),
                         (np.int64, np.float32, np.savez), (np.float64, np.int32, np.savez_compressed),
                         (np.int8, np.uint16, np.savez), (np.uint32, np.int64, np.savez_compressed)):
        x = (r.randn(25, 5) * 100).astype(xt) if np.dtype(xt).kind != "u" else r.randint(0, 250, (25, 5)).astype(xt)
        y = (r.rand(25, 3) * 10).astype(yt)
        f = p("v_%s_%s.npz" % (np.dtype(xt).name, np.dtype(yt).name))
        save(f, x_train=x, y_train=y)
        check(os.path.basename(f) + " (float targets [n, 3])", view, ["npz", f, "float", "3", "5"],
              {"train": (x, y)})
    check_auto(view, tmp, r)
    if fails:
        print("reader-check: %d failed (files in %s)" % (fails, tmp))
        return 1
    print("reader-check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
