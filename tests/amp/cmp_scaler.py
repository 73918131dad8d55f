#!/usr/bin/python3
"""cmp_scaler.py DIR STEPS_A STEPS_B OUT_A OUT_B ST_A ST_B EPOCHS: two fp16 runs
(tests/amp/cuda_fake.sh: the device's and the CPU's) must have the same
per-step scale and found_inf (exactly), losses within 1e-4, the same
"loss scale" lines (EPOCHS of them) and parameters within 1e-4 relative
L2; and the run must both skip steps and grow the scale. Files are
DIR/NAME.csv, DIR/NAME, DIR/NAME.st."""
import array
import csv
import struct
import sys

t, sc, sh, oc, oh, pc, ph, epochs = sys.argv[1:]
c, h = (list(csv.DictReader(open("%s/%s.csv" % (t, n)))) for n in (sc, sh))
bad = []
if len(c) != len(h) or not c:
    bad.append("%d vs %d steps" % (len(c), len(h)))
for x, y in zip(c, h):
    if (x["scale"], x["found_inf"]) != (y["scale"], y["found_inf"]):
        bad.append("step %s: device scale %s found_inf %s, cpu %s %s" % (x["step"], x["scale"], x["found_inf"],
                                                                      y["scale"], y["found_inf"]))
    if abs(float(x["loss"]) - float(y["loss"])) > 1e-4 * abs(float(y["loss"])):
        bad.append("step %s: loss %s vs %s" % (x["step"], x["loss"], y["loss"]))
lines = [[l for l in open("%s/%s" % (t, n)) if l.startswith("loss scale")] for n in (oc, oh)]
if lines[0] != lines[1] or len(lines[0]) != int(epochs):
    bad.append("scaler lines differ: %s vs %s" % lines)
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    return raw[8 + n:]
a, b = (array.array("f", load("%s/%s.st" % (t, n))) for n in (pc, ph))
num = sum((p - q) ** 2 for p, q in zip(a, b)) ** 0.5
den = sum(q * q for q in b) ** 0.5
if num > 1e-4 * den:
    bad.append("parameters differ: rel %g" % (num / den))
found = [int(x["found_inf"]) for x in c]
grew = sum(1 for x, y in zip(c, c[1:]) if float(y["scale"]) > float(x["scale"]))
if not (0 < sum(found) < len(found)) or grew == 0:
    bad.append("the run should both skip and grow: %s" % found)
for m in bad:
    print("FAIL:", m)
if not bad:
    print("PASS %s: %d steps, %d skipped, %d growths: device scale/found_inf == cpu, params rel diff %.1e"
          % (sc, len(c), sum(found), grew, num / den))
sys.exit(1 if bad else 0)
