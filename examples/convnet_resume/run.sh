#!/usr/bin/env bash
# examples/convnet_resume/run.sh [OUT_DIR]: the notes' ConvNet with
# SyncBatchNorm and fp16 on 2 MPI ranks, one epoch of data/mnist (125
# steps), checkpointing every 40 steps; the job is stopped with SIGTERM
# inside the epoch and resumed from its checkpoint; it ends with the same
# weights and buffers, bit for bit, as a run that was never stopped.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/examples/convnet_resume}
DATA=$ROOT/data/mnist
PY=${PY:-/usr/bin/python3}
mkdir -p "$OUT"
rm -f "$OUT"/*.safetensors "$OUT"/*.csv
cd "$ROOT"
command -v mpirun > /dev/null 2>&1 || { echo "examples/convnet_resume: mpirun not found"; exit 1; }
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN=(mpirun -np 2 "$OUT/convnet" --data "$DATA" --batch 32 --epochs 1 --threads 1)

echo "\$ cddpc convnet_fp16.net -o convnet"
build/cddpc "$HERE/convnet_fp16.net" -o "$OUT/convnet"

echo "\$ mpirun -np 2 ./convnet --batch 32 --epochs 1 --save whole.safetensors          # never stopped"
"${RUN[@]}" --save "$OUT/whole.safetensors"

echo "\$ mpirun -np 2 ./convnet --batch 32 --epochs 1 --checkpoint ck.safetensors --checkpoint-every 40 --save resumed.safetensors &"
"${RUN[@]}" --checkpoint "$OUT/ck.safetensors" --checkpoint-every 40 --save "$OUT/resumed.safetensors" > "$OUT/first.out" 2>&1 &
job=$!
# stop it once a checkpoint from inside the epoch (step 80) is on disk
PYTHONPATH=$ROOT/tests/torch $PY - "$OUT/ck.safetensors" <<'P'
import os, sys, time
import st
for _ in range(6000):
    try:
        md = st.load_with_metadata(sys.argv[1])[1]
        if int(md.get("cddp.step", 0)) >= 80:
            print("checkpoint at step %s: stopping the job" % md["cddp.step"]); sys.exit(0)
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.05)
sys.exit("no checkpoint at step 80 appeared")
P
echo "\$ kill -TERM <mpirun>"
kill -TERM "$job"
set +e; wait "$job"; rc=$?; set -e
sed 's/^/    /' "$OUT/first.out" | tail -n 4
echo "    (exit $rc)"
[ ! -e "$OUT/resumed.safetensors" ] || { echo "the stopped job wrote its final weights"; exit 1; }

echo "\$ mpirun -np 2 ./convnet --batch 32 --epochs 1 --resume ck.safetensors --checkpoint ck.safetensors --save resumed.safetensors"
"${RUN[@]}" --resume "$OUT/ck.safetensors" --checkpoint "$OUT/ck.safetensors" --save "$OUT/resumed.safetensors"

PYTHONPATH=$ROOT/tests/torch $PY - "$OUT" <<'P'
import sys
import numpy as np
import st
d = sys.argv[1]
a, b = st.load(d + "/whole.safetensors"), st.load(d + "/resumed.safetensors")
assert a.keys() == b.keys()
same = all(a[k].tobytes() == b[k].tobytes() for k in a)
print("resumed run vs never stopped: %d tensors (weights, running statistics), %s"
      % (len(a), "bit for bit equal" if same else "DIFFERENT"))
sys.exit(0 if same else 1)
P
