#!/usr/bin/env bash
# examples/notebook/run.sh: the notebook's cells, run in order without
# Jupyter (run_notebook.py); train.ipynb must be what make_notebook.py writes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/nb.XXXXXX")
trap 'rm -rf "$T"' EXIT
cp "$HERE/make_notebook.py" "$T/" && (cd "$T" && $PY make_notebook.py)
cmp -s "$T/train.ipynb" "$HERE/train.ipynb" || { echo "train.ipynb is stale: run python3 make_notebook.py in $HERE"; exit 1; }
OPENBLAS_NUM_THREADS=1 $PY "$HERE/run_notebook.py" "$HERE/train.ipynb"
