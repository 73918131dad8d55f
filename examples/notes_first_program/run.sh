#!/usr/bin/env bash
# examples/notes_first_program/run.sh [OUT_DIR]: the notes' first program,
# in PyTorch and in cddpc, trained on data/mnist; their loss curves overlaid
# in OUT_DIR/loss.svg (default build/examples/notes_first_program).
# EPOCHS=N shortens the run (default 10, as the notes).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/examples/notes_first_program}
EPOCHS=${EPOCHS:-10}
DATA=$ROOT/data/mnist
PY=${PY:-/usr/bin/python3}
mkdir -p "$OUT"
cd "$ROOT"

echo "\$ cddpc simplenet.net -o simplenet"
build/cddpc "$HERE/simplenet.net" -o "$OUT/simplenet"
echo "\$ ./simplenet --data data/mnist --epochs $EPOCHS --metrics ours.csv --step-log ours-steps.csv"
"$OUT/simplenet" --data "$DATA" --epochs "$EPOCHS" --threads 1 --metrics "$OUT/ours.csv" --step-log "$OUT/ours-steps.csv"
echo "\$ python3 simplenet.py data/mnist pytorch.csv $EPOCHS"
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $PY "$HERE/simplenet.py" "$DATA" "$OUT/pytorch.csv" "$EPOCHS"
echo "\$ cddpc plot cddpc=ours.csv:ours-steps.csv pytorch=pytorch.csv -o loss.svg"
build/cddpc plot --title "SimpleNet on MNIST: cddpc and PyTorch" \
    cddpc="$OUT/ours.csv:$OUT/ours-steps.csv" pytorch="$OUT/pytorch.csv" -o "$OUT/loss.svg"

# the two programs must agree on what they learn: the last epoch's loss
# within 15% of each other (different initial weights and shuffles)
$PY - "$OUT/ours.csv" "$OUT/pytorch.csv" <<'P'
import csv, sys
ours = [float(r["train_loss"]) for r in csv.DictReader(open(sys.argv[1]))]
torch = [float(r["train_loss"]) for r in csv.DictReader(open(sys.argv[2]))]
assert len(ours) == len(torch), (len(ours), len(torch))
rel = abs(ours[-1] - torch[-1]) / torch[-1]
print("last epoch loss: cddpc %.4f, PyTorch %.4f (%.1f%% apart)" % (ours[-1], torch[-1], 100 * rel))
sys.exit(0 if rel < 0.15 and ours[-1] < ours[0] else 1)
P
