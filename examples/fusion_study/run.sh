#!/bin/sh
# examples/fusion_study/run.sh [OUT_DIR]: what fusion buys SimpleNet and the
# ConvNet on this machine's CPU (README.md). Everything goes to OUT_DIR
# (default build/examples/fusion_study): the study's programs, traces and
# logs, its table, study.csv, study.svg and kernels.csv, the two models'
# graphs (.dot, .svg with Graphviz), their --explain-fusion and their
# predicted H200 step. results/ beside this script holds one such run's
# outputs (copied from OUT_DIR, not the programs and traces).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/examples/fusion_study}
cd "$ROOT"
mkdir -p "$OUT"
build/cddpc study models/mnist.net models/mnist_convnet.net --fusion none,elementwise,all \
    --batch 64,256 --steps 20 --repeat 3 --warmup 3 --threads 1 --kernels --data data/mnist \
    --out "$OUT" > "$OUT/table.txt"
cat "$OUT/table.txt"
for m in mnist mnist_convnet; do
    build/cddpc models/$m.net --graph "$OUT/$m.dot"        # and $m.svg when Graphviz is installed
    build/cddpc models/$m.net --explain-fusion > "$OUT/$m.explain.txt"
    build/cddpc models/$m.net --report --target h200 > "$OUT/$m.h200.txt"
done
uptime > "$OUT/load.txt"        # how busy the machine was as the study ended
