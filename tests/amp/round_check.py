#!/usr/bin/python3
"""round_check.py ROUND_DUMP: cddprt.h's bf16/fp16 rounding vs PyTorch.

Runs ROUND_DUMP (tests/amp/round_dump.c), which prints (x, bf16(x),
fp16(x)) as float32 bit patterns, and checks each against
torch.tensor(x).to(torch.bfloat16 / torch.float16).float(), bit for bit
(any NaN matches any NaN). Prints how many values and the first mismatches.
"""
import subprocess
import sys

import numpy as np
import torch


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    raw = subprocess.run([argv[0]], stdout=subprocess.PIPE, check=True).stdout
    v = np.frombuffer(raw, dtype="<u4").reshape(-1, 3)
    x = torch.from_numpy(v[:, 0].copy().view(np.float32))
    bad = 0
    for col, dt, name in ((1, torch.bfloat16, "bf16"), (2, torch.float16, "fp16")):
        want = x.to(dt).float().numpy()
        got = v[:, col].copy().view(np.float32)
        same = (want.view(np.uint32) == got.view(np.uint32)) | (np.isnan(want) & np.isnan(got))
        for i in np.flatnonzero(~same)[:10]:
            print("%s: x=%r (0x%08x): cddprt %r, torch %r" % (name, float(x[i]), v[i, 0], float(got[i]),
                                                              float(want[i])))
        bad += int((~same).sum())
        print("%s: %d values, %d mismatches (%d inf, %d subnormal results)" % (
            name, len(got), int((~same).sum()), int(np.isinf(want).sum()),
            int(((want != 0) & (np.abs(want) < (6.103515625e-05 if name == "fp16" else 1.1754944e-38))).sum())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
