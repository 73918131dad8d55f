#!/usr/bin/env bash
# examples/pytorch_load/run.sh [OUT_DIR]: train SimpleNet with cddpc, load
# its --save file into PyTorch's SimpleNet and evaluate it there; the test
# loss and accuracy equal what the program printed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/examples/pytorch_load}
DATA=$ROOT/data/mnist
PY=${PY:-/usr/bin/python3}
mkdir -p "$OUT"
cd "$ROOT"
echo "\$ cddpc models/mnist.net -o mnist"
build/cddpc models/mnist.net -o "$OUT/mnist"
echo "\$ ./mnist --data data/mnist --epochs 2 --save simplenet.safetensors --metrics metrics.csv"
"$OUT/mnist" --data "$DATA" --epochs 2 --threads 1 --save "$OUT/simplenet.safetensors" --metrics "$OUT/metrics.csv"
echo "\$ python3 evaluate.py simplenet.safetensors data/mnist metrics.csv"
OPENBLAS_NUM_THREADS=1 $PY "$HERE/evaluate.py" "$OUT/simplenet.safetensors" "$DATA" "$OUT/metrics.csv"
