#!/usr/bin/env bash
# examples/ddp/run.sh [OUT_DIR]: the notes' DDP program without its
# boilerplate: the same executable on 1 rank (batch 64) and on 2 MPI ranks
# (batch 32 each, global 64), from the same initial weights; the per-step
# losses and the final weights agree. EPOCHS=N (default 2).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/examples/ddp}
EPOCHS=${EPOCHS:-2}
DATA=$ROOT/data/mnist
PY=${PY:-/usr/bin/python3}
mkdir -p "$OUT"
cd "$ROOT"
if ! command -v mpirun > /dev/null 2>&1; then
    echo "examples/ddp: mpirun not found (scripts/deps.sh installs Open MPI)"; exit 1
fi
# as root in a container: Open MPI's refusals turned off, no core binding
# (two ranks on a 2-core machine must not share one core)
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "\$ cddpc models/mnist.net -o mnist"
build/cddpc models/mnist.net -o "$OUT/mnist"
# the initial weights, saved once, so both runs start alike (as DDP
# broadcasts rank 0's initial weights to every rank)
"$OUT/mnist" --data "$DATA" --lr 0 --max-steps 1 --save "$OUT/init.safetensors" > /dev/null
C=(--data "$DATA" --init "$OUT/init.safetensors" --epochs "$EPOCHS" --threads 1)
echo "\$ ./mnist --batch 64 --step-log one.csv --save one.safetensors"
"$OUT/mnist" "${C[@]}" --batch 64 --step-log "$OUT/one.csv" --save "$OUT/one.safetensors"
echo "\$ mpirun -np 2 ./mnist --batch 32 --step-log two.csv --save two.safetensors"
mpirun -np 2 "$OUT/mnist" "${C[@]}" --batch 32 --step-log "$OUT/two.csv" --save "$OUT/two.safetensors"

PYTHONPATH=$ROOT/tests/torch $PY - "$OUT" <<'P'
import csv, sys
import numpy as np
import st
d = sys.argv[1]
one = [float(r["loss"]) for r in csv.DictReader(open(d + "/one.csv"))]
two = [float(r["loss"]) for r in csv.DictReader(open(d + "/two.csv"))]
assert len(one) == len(two), (len(one), len(two))
dl = max(abs(a - b) / abs(a) for a, b in zip(one, two))
w1, w2 = st.load(d + "/one.safetensors"), st.load(d + "/two.safetensors")
dw = max(np.linalg.norm(w1[k] - w2[k]) / np.linalg.norm(w1[k]) for k in w1)
print("%d steps: step losses within %.1e relative, weights within %.1e (relative L2)" % (len(one), dl, dw))
sys.exit(0 if dl < 1e-4 and dw < 1e-4 else 1)
P
