#!/usr/bin/env bash
# tests/data/resume_data.sh IRIS: a run on a csv source with split and
# normalize = auto (models/iris.net compiled), stopped at step 20 of 24 by
# --max-steps after checkpoints every 7 steps, then --resume'd, must save
# the very bytes of the uninterrupted run (parameters and the data's
# metadata: the split and the normalization are measured again alike).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
IRIS=$(realpath "${1:?usage: resume_data.sh IRIS}")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/resume_data.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 "$ROOT/scripts/sklearn_data.py" "$TMP" || { echo "FAIL: cannot write the data sets"; exit 1; }
R=("$IRIS" --data "$TMP/iris.csv" --threads 1 --epochs 3 --seed 7)
"${R[@]}" --save "$TMP/full.st" >/dev/null 2>&1 || { echo "FAIL: the uninterrupted run"; exit 1; }
"${R[@]}" --checkpoint "$TMP/ck.st" --checkpoint-every 7 --max-steps 20 >/dev/null 2>&1 \
    || { echo "FAIL: the first part"; exit 1; }
"${R[@]}" --resume "$TMP/ck.st" --save "$TMP/res.st" >"$TMP/res.out" 2>&1 || { echo "FAIL: the resumed run"; exit 1; }
grep -q "resuming from .*, 20 steps in all" "$TMP/res.out" || { echo "FAIL: did not resume at step 20"; exit 1; }
if cmp -s "$TMP/full.st" "$TMP/res.st"; then
    echo "PASS: resumed at step 20: the saved file equals the uninterrupted run's byte for byte"
else
    echo "FAIL: the resumed run saved other bytes than the uninterrupted run"; exit 1
fi
