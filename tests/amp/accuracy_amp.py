#!/usr/bin/python3
"""accuracy_amp.py FP32 BF16 FP16 DATA_DIR: one epoch of the same model at
each precision; bf16 and fp16 must reach fp32's test accuracy within 1
point (acc >= acc_fp32 - 0.01), fp32 measured here in the same run.

The three programs are models/mnist.net compiled as is and with
`precision bf16` / `precision fp16` (default scaler); every setting but
the precision comes from the model file (batch 64, lr 0.01, seed 3407).
"""
import csv
import os
import subprocess
import sys
import tempfile


def accuracy(program, data, work):
    metrics = os.path.join(work, os.path.basename(program) + ".csv")
    cmd = [program, "--data", data, "--epochs", "1", "--metrics", metrics]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        sys.stdout.write(out[-3000:])
        raise SystemExit("FAIL: %s exited with %d" % (" ".join(cmd), r.returncode))
    rows = list(csv.DictReader(open(metrics)))
    extra = [l for l in out.splitlines() if l.startswith("loss scale")]
    return float(rows[-1]["test_acc"]), extra


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    progs, data = [os.path.abspath(p) for p in argv[:3]], os.path.abspath(argv[3])
    work = tempfile.mkdtemp(prefix="cddpc-ampacc-")
    base, _ = accuracy(progs[0], data, work)
    print("fp32: test_acc %.4f" % base)
    bad = 0
    for name, prog in zip(("bf16", "fp16"), progs[1:]):
        acc, extra = accuracy(prog, data, work)
        ok = acc >= base - 0.01
        bad += not ok
        print("%s: test_acc %.4f (%+.2f points vs fp32)%s: %s" % (name, acc, 100 * (acc - base),
              "; " + extra[-1] if extra else "", "PASS" if ok else "FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
