#!/usr/bin/env python3
"""cmp_runs.py STEPS_A STEPS_B WEIGHTS_A WEIGHTS_B TOL LABEL: two runs of 100
steps, their --step-log CSVs and --save safetensors files; prints one line
(LABEL, the worst relative step-loss difference and parameter L2
difference) and exits 1 unless both are within TOL. No torch needed."""
import csv
import json
import struct
import sys

sa, sb, wa, wb, tol, label = sys.argv[1:7]
tol = float(tol)
a, b = list(csv.DictReader(open(sa))), list(csv.DictReader(open(sb)))


def load(p):
    raw = open(p, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: struct.unpack('<%df' % ((v['data_offsets'][1] - v['data_offsets'][0]) // 4),
                             raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
            for k, v in h.items() if k != '__metadata__' and v['dtype'] == 'F32'}


if not len(a) == len(b) == 100:
    print('%s: expected 100 steps each, got %d and %d' % (label, len(a), len(b)))
    sys.exit(1)
sl = max(abs(float(x['loss']) - float(y['loss'])) / abs(float(y['loss'])) for x, y in zip(a, b))
pa, pb = load(wa), load(wb)
pr = max((sum((p - q) ** 2 for p, q in zip(pa[k], pb[k])) / sum(q * q for q in pb[k])) ** 0.5 for k in pb)
print('%s, 100 steps: step loss max rel %.2e, parameters max rel L2 %.2e (<= %g)' % (label, sl, pr, tol))
sys.exit(0 if sl <= tol and pr <= tol else 1)
