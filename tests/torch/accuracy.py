#!/usr/bin/python3
"""Accuracy test: one epoch of a cddpc program must reach test_acc >= 0.80.

usage: accuracy.py PROGRAM DATA_DIR [--min ACC] [--epochs N] [--lr X] [--threads N]

Runs `PROGRAM --data DATA_DIR --epochs N --metrics m.csv` (N default 1; --lr
and --threads passed on when given) with every other setting left to the
model file (for models/mnist.net: batch 64, lr 0.01, shuffle on, the file's
seed), reads test_acc from the metrics CSV (a header naming the columns, one
row per epoch; test_acc is a fraction in [0,1]) and checks the last epoch's
value against ACC (default 0.80).
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time

RUN_TIMEOUT = 1800


def main(argv):
    args, min_acc, epochs, passed = [], 0.80, 1, []
    i = 0
    while i < len(argv):
        if argv[i] == "--min" and i + 1 < len(argv):
            min_acc = float(argv[i + 1])
            i += 2
        elif argv[i] == "--epochs" and i + 1 < len(argv):
            epochs = int(argv[i + 1])
            i += 2
        elif argv[i] in ("--lr", "--threads") and i + 1 < len(argv):
            passed += [argv[i], argv[i + 1]]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 2 or any(a.startswith("--") for a in args):
        sys.stderr.write(__doc__)
        return 2
    program, data_dir = os.path.abspath(args[0]), os.path.abspath(args[1])
    name = "accuracy[%s]" % os.path.basename(data_dir.rstrip("/"))
    work = tempfile.mkdtemp(prefix="cddpc-acc-")
    metrics = os.path.join(work, "m.csv")
    cmd = [program, "--data", data_dir, "--epochs", str(epochs), "--metrics", metrics] + passed
    print("%s: %s" % (name, " ".join(cmd)))
    sys.stdout.flush()
    t0 = time.time()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        print("%s: FAIL: program ran past %d s (work dir %s)" % (name, RUN_TIMEOUT, work))
        return 1
    wall = time.time() - t0
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode("utf-8", "replace")[-4000:])
        print("%s: FAIL: program exited with %d (work dir %s)" % (name, r.returncode, work))
        return 1
    try:
        with open(metrics, newline="") as f:
            rows = [row for row in csv.DictReader(f)]
        rows = [{(k or "").strip().lower(): (v or "").strip() for k, v in row.items()} for row in rows]
        if not rows:
            raise ValueError("no rows")
        if "test_acc" not in rows[-1]:
            raise ValueError("no test_acc column (columns: %s)" % ", ".join(rows[-1]))
        acc = float(rows[-1]["test_acc"])
    except (OSError, ValueError) as e:
        print("%s: FAIL: metrics %s: %s (work dir %s)" % (name, metrics, e, work))
        return 1
    extra = ""
    if "seconds" in rows[-1]:
        extra = ", epoch %.2f s" % float(rows[-1]["seconds"])
    print("%s: test_acc %.4f after %d epoch%s (min %.2f%s, wall %.1f s)"
          % (name, acc, epochs, "" if epochs == 1 else "s", min_acc, extra, wall))
    if not 0.0 <= acc <= 1.0:
        print("%s: FAIL: test_acc %g is not a fraction in [0,1] (work dir %s)" % (name, acc, work))
        return 1
    if not acc >= min_acc:
        print("%s: FAIL: test_acc %.4f < %.2f (work dir %s)" % (name, acc, min_acc, work))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("%s: OK" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
