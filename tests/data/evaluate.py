#!/usr/bin/env python3
"""tests/data/evaluate.py CDDPC: a program's --evaluate FILE.

Iris from a training and a test csv (species names as the target,
normalize = auto) trained a few epochs with --save and --checkpoint, then:
  - --evaluate of the --save file prints the last epoch's test loss and
    accuracy (the same plan on the same parameters and numbers);
  - given another training file (two of the three species, a third of the
    rows), the evaluation still normalizes with the saved means and stds
    and labels with the saved classes: the same numbers again. The same
    file with its data.* metadata stripped gives other numbers or an error
    (the control: without the saved numbers the new file is measured);
  - a checkpoint evaluates too, with the same saved numbers and classes
    (given the other training file);
  - errors: a missing file, training options beside --evaluate, corrupt
    class metadata, another model's parameters; each exit 1 or 2 with a
    line naming the cause.
"""
import csv
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
cddpc = os.path.abspath(sys.argv[1])
fails = 0


def check(ok, what, detail=""):
    global fails
    print(("PASS " if ok else "FAIL ") + what + (("\n    " + detail) if detail and not ok else ""))
    fails += not ok


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def evaluated(out):
    m = re.search(r"^evaluate .*: (\d+) test samples  test_loss ([0-9.naif-]+)  test_acc ([0-9.naif-]+)", out, re.M)
    return (int(m.group(1)), float(m.group(2)), float(m.group(3))) if m else None


def restamp(src, dst, edit):
    """Copies a safetensors file with its __metadata__ passed through edit."""
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        rest = f.read()
    # rewritten as another writer would: without cddp's checksums (loaded unverified)
    head["__metadata__"] = edit({k: v for k, v in head.get("__metadata__", {}).items() if not k.startswith('cddp.crc32c.') and k != 'cddp.metadata_crc32c'})
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + rest)


with tempfile.TemporaryDirectory() as t:
    rows = list(csv.reader(open(os.path.join(ROOT, "data/sklearn/iris.csv"))))
    head, body = rows[0], rows[1:]
    train = [r for i, r in enumerate(body) if i % 5]
    test = [r for i, r in enumerate(body) if i % 5 == 0]
    sub = [r for r in train if r[-1] != "setosa"][::3]      # two species: sorted, they would be 0 and 1
    few = train[::4]                                        # three species, other means and stds
    for name, part in (("train", train), ("test", test), ("sub", sub), ("few", few)):
        with open(os.path.join(t, name + ".csv"), "w", newline="") as f:
            csv.writer(f).writerows([head] + part)
    src = open(os.path.join(ROOT, "models/iris.net")).read()
    src = re.sub(r'data\s+csv\([^)]*\)',
                 'data csv("%s/train.csv", test = "%s/test.csv", target = "species", normalize = auto)' % (t, t), src)
    net = os.path.join(t, "iris.net")
    open(net, "w").write(src)
    prog = os.path.join(t, "iris")
    r = run([cddpc, net, "-o", prog])
    if r.returncode:
        print("FAIL cddpc", r.stderr)
        sys.exit(1)
    st, ck, mc = (os.path.join(t, n) for n in ("w.st", "ck.st", "m.csv"))
    r = run([prog, "--threads", "1", "--epochs", "6", "--save", st, "--checkpoint", ck, "--metrics", mc])
    check(r.returncode == 0, "trains 6 epochs with --save and --checkpoint", r.stderr)
    last = list(csv.DictReader(open(mc)))[-1]
    want = (len(test), float(last["test_loss"]), float(last["test_acc"]))

    def same(got):
        return got is not None and got[0] == want[0] and abs(got[1] - want[1]) <= 1e-6 and abs(got[2] - want[2]) <= 1e-6

    r = run([prog, "--threads", "1", "--evaluate", st])
    got = evaluated(r.stdout)
    check(r.returncode == 0 and same(got),
          "--evaluate the --save file: %s = the last epoch's (n, test_loss, test_acc) %s" % (got, want), r.stdout + r.stderr)

    r = run([prog, "--threads", "1", "--evaluate", st, "--data", os.path.join(t, "sub.csv")])
    got = evaluated(r.stdout)
    check(r.returncode == 0 and same(got) and "the training run's" in r.stdout,
          "--evaluate with another training file (%d rows, two species): the saved numbers and classes, %s"
          % (len(sub), got), r.stdout + r.stderr)

    r = run([prog, "--threads", "1", "--evaluate", st, "--data", os.path.join(t, "few.csv")])
    got = evaluated(r.stdout)
    check(r.returncode == 0 and same(got),
          "--evaluate with a quarter of the training rows: the saved means and stds, %s" % (got,), r.stdout + r.stderr)

    bare = os.path.join(t, "bare.st")
    restamp(st, bare, lambda md: {k: v for k, v in md.items() if not k.startswith("data.")})
    for data in ("sub", "few"):
        r = run([prog, "--threads", "1", "--evaluate", bare, "--data", os.path.join(t, data + ".csv")])
        got = evaluated(r.stdout)
        check(r.returncode != 0 or not same(got),
              "control: without the data metadata %s.csv is measured again (%s)"
              % (data, "exit %d: %s" % (r.returncode, r.stderr.strip()[:120]) if r.returncode else got), r.stdout)

    r = run([prog, "--threads", "1", "--evaluate", ck, "--data", os.path.join(t, "sub.csv")])
    got = evaluated(r.stdout)
    check(r.returncode == 0 and same(got) and "the training run's" in r.stdout,
          "--evaluate the checkpoint, with the other training file: its saved numbers and classes, %s" % (got,),
          r.stdout + r.stderr)

    # errors
    def refused(args, code, words, what):
        r = run([prog, "--threads", "1"] + args)
        ok = r.returncode == code and all(w in r.stderr for w in words) and "Traceback" not in r.stderr
        check(ok, "%s: exit %d: %s" % (what, r.returncode, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""),
              r.stdout + r.stderr)

    refused(["--evaluate", os.path.join(t, "none.st")], 1, ["none.st"], "a missing file")
    refused(["--evaluate", st, "--save", os.path.join(t, "x.st")], 2, ["--save", "--evaluate"], "--save beside --evaluate")
    refused(["--evaluate", st, "--init", st], 2, ["--init"], "--init beside --evaluate")
    unsorted = os.path.join(t, "unsorted.st")
    restamp(st, unsorted, lambda md: dict(md, **{"data.class.0": "virginica", "data.class.2": "setosa"}))
    refused(["--evaluate", unsorted], 1, ["unsorted.st", "corrupt metadata", "sorted"], "classes out of order")
    many = os.path.join(t, "many.st")
    restamp(st, many, lambda md: dict(md, **{"data.class.3": "zebra"}))
    refused(["--evaluate", many], 1, ["many.st", "4 classes", "outputs 3"], "more saved classes than outputs")
    short = os.path.join(t, "short.st")
    restamp(st, short, lambda md: {k: v for k, v in md.items() if k != "data.std.3"})
    refused(["--evaluate", short], 1, ["short.st", "corrupt metadata"], "a mean without its std")
    other = os.path.join(t, "other.st")
    r = run([cddpc, os.path.join(ROOT, "models/breast_cancer.net"), "-o", os.path.join(t, "bc")])
    r = run([os.path.join(t, "bc"), "--threads", "1", "--max-steps", "1", "--save", other])
    refused(["--evaluate", other], 1, ["other.st"], "another model's parameters")

print("evaluate: %d failed" % fails)
sys.exit(1 if fails else 0)
