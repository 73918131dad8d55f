#!/usr/bin/env bash
# tests/ddp/metrics.sh CDDPC: the evaluation's metrics of float targets over
# 2 MPI ranks equal 1 rank's. tests/torch/loss_mlp.net is compiled with
# mse_loss (metrics MSE, MAE) and binary_cross_entropy_with_logits (accuracy
# per label, macro-F1); with lr 0 both runs evaluate the same weights, each
# rank its own block of the test set, and the sums are reduced over the
# ranks: the per-output counts must give the same label accuracy and
# macro-F1 exactly, MSE and MAE within 1e-12 relative (double sums in
# another order). Skipped (exit 77) without mpirun or without MPI in the
# runtime, as tests/ddp/run.sh.
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
CDDPC=${1:?usage: metrics.sh CDDPC}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v mpirun >/dev/null 2>&1 || skip_all "metrics: mpirun not found"
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d "${TMPDIR:-/tmp}/ddp-metrics.XXXXXX")
trap 'rm -rf "$T"' EXIT
/usr/bin/python3 - "$T" <<'PY' || { echo "FAIL metrics: cannot write the data"; exit 1; }
import os, struct, sys
import numpy as np
r = np.random.default_rng(11)
A = r.standard_normal((8, 3))
for kind in ("reg", "bin"):
    os.makedirs(os.path.join(sys.argv[1], kind))
for pre, n in (("train", 256), ("t10k", 301)):     # 301: the ranks' blocks differ by one
    x = r.standard_normal((n, 8)).astype(np.float32)
    z = x.astype(np.float64) @ A
    for kind, y, code, dt in (("reg", z + 0.3 * r.standard_normal((n, 3)), 0x0D, ">f4"),
                              ("bin", (z + r.standard_normal((n, 3)) > 0.8), 0x08, ">u1")):
        for name, a, c, t in (("images", x, 0x0D, ">f4"), ("labels", y, code, dt)):
            with open(os.path.join(sys.argv[1], kind, "%s-%s-idx%d-ubyte" % (pre, name, 3 if name == "images" else 1)), "wb") as f:
                f.write(bytes([0, 0, c, a.ndim]) + b"".join(struct.pack(">I", d) for d in a.shape) + a.astype(t).tobytes())
PY
fails=0
for loss in "mse_loss()" "binary_cross_entropy_with_logits(pos_weight = [1.0, 2.0, 3.0])"; do
  kind=reg; [ "${loss#binary}" != "$loss" ] && kind=bin
  sed "s|    loss      mse_loss(reduction = mean)|    loss      $loss|" "$ROOT/tests/torch/loss_mlp.net" >"$T/$kind.net"
  "$CDDPC" "$T/$kind.net" -o "$T/prog_$kind" || { echo "FAIL metrics: cddpc $kind"; exit 1; }
  if ! strings "$T/prog_$kind" | grep -q MPI_Init_thread; then skip_all "metrics: no MPI in the runtime"; fi
  common="--data $T/$kind --threads 1 --epochs 1 --lr 0 --batch 16"
  "$T/prog_$kind" $common --metrics "$T/${kind}1.csv" >"$T/${kind}1.out" 2>&1 &&
  mpirun -np 2 "$T/prog_$kind" $common --metrics "$T/${kind}2.csv" >"$T/${kind}2.out" 2>&1 ||
    { echo "FAIL metrics: $kind runs failed: $(tail -5 "$T/${kind}2.out")"; fails=$((fails + 1)); continue; }
  /usr/bin/python3 - "$T/${kind}1.csv" "$T/${kind}2.csv" "$kind" <<'PY' || fails=$((fails + 1))
import csv, sys
a, b = (list(csv.DictReader(open(p)))[-1] for p in sys.argv[1:3])
cols = ["test_mse", "test_mae"] if sys.argv[3] == "reg" else ["test_label_acc", "test_macro_f1"]
bad = []
for c in cols:
    x, y = float(a[c]), float(b[c])
    tol = 1e-12 if sys.argv[3] == "reg" else 0.0
    print("metrics %s: %s 1 rank %.12g, 2 ranks %.12g" % (sys.argv[3], c, x, y))
    if not abs(x - y) <= tol * abs(x):
        bad.append(c)
if abs(float(a["test_loss"]) - float(b["test_loss"])) > 1e-7 * abs(float(a["test_loss"])):
    bad.append("test_loss")
if bad:
    print("FAIL metrics: 2 ranks differ in " + ", ".join(bad))
    sys.exit(1)
PY
done
[ $fails -eq 0 ] && echo "metrics: PASS: 2 ranks report 1 rank's metrics"
[ $fails -eq 0 ]
