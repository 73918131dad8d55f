#!/usr/bin/env bash
# examples/convnet_resume/run.sh [OUT_DIR]: the notes' ConvNet with
# SyncBatchNorm and fp16 on 2 MPI ranks, one epoch of data/mnist (125
# steps); the job is stopped with SIGTERM inside the epoch (after step 80,
# as its step log shows) and stops gracefully: both ranks finish the same
# step, the checkpoint is written at it, the job exits 143 with the line to
# resume; resumed from that checkpoint it ends with the same weights and
# buffers, bit for bit, as a run that was never stopped.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/examples/convnet_resume}
DATA=$ROOT/data/mnist
PY=${PY:-/usr/bin/python3}
mkdir -p "$OUT"
rm -f "$OUT"/*.safetensors "$OUT"/*.csv "$OUT"/*.out
cd "$ROOT"
command -v mpirun > /dev/null 2>&1 || { echo "examples/convnet_resume: mpirun not found"; exit 1; }
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN=(mpirun -np 2 "$OUT/convnet" --data "$DATA" --batch 32 --epochs 1 --threads 1)

echo "\$ cddpc convnet_fp16.net -o convnet"
build/cddpc "$HERE/convnet_fp16.net" -o "$OUT/convnet"

echo "\$ mpirun -np 2 ./convnet --batch 32 --epochs 1 --save whole.safetensors          # never stopped"
"${RUN[@]}" --save "$OUT/whole.safetensors"

echo "\$ mpirun -np 2 ./convnet --batch 32 --epochs 1 --checkpoint ck.safetensors --step-log steps.csv --save resumed.safetensors &"
"${RUN[@]}" --checkpoint "$OUT/ck.safetensors" --step-log "$OUT/steps.csv" --save "$OUT/resumed.safetensors" \
    > "$OUT/first.out" 2> "$OUT/first.err" &
job=$!
# the step log's rows reach the file within about a second: stop the job
# once it shows step 80
for _ in $(seq 6000); do
    [ -f "$OUT/steps.csv" ] && [ "$(wc -l < "$OUT/steps.csv")" -gt 80 ] && break
    sleep 0.05
done
echo "(the step log shows step $(tail -n 1 "$OUT/steps.csv" | cut -d, -f1))"
# SIGTERM to the ranks, as Slurm's scancel or --signal delivers it (a
# SIGTERM to mpirun reaches them too, but Open MPI's mpirun then exits 1
# and kills them a second later)
echo "\$ kill -TERM <the ranks>"
kill -TERM $(pgrep -P "$job")
set +e; wait "$job"; rc=$?; set -e
sed 's/^/    /' "$OUT/first.out"
grep -- '--resume' "$OUT/first.err" | sed 's/^/    /'
echo "    (exit $rc)"
[ "$rc" -eq 143 ] || { echo "the stopped job exited $rc, not 143"; sed 's/^/    /' "$OUT/first.err"; exit 1; }
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
