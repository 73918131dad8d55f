#!/usr/bin/env bash
# tests/data/resume_data.sh IRIS: a run on a csv source with split and
# normalize = auto (models/iris.net compiled), stopped at step 20 of 24 by
# --max-steps after checkpoints every 7 steps, then --resume'd, must save
# the very bytes of the uninterrupted run (parameters and the data's
# metadata: the split is made again alike; the normalization and the class
# map are the checkpoint's, said so, and stay the checkpoint's when the
# file resumed on has other values: its first feature + 1).
. "$(dirname "$0")/../skip.sh"
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
grep -q "^normalize auto: the training run's 4 features, from $TMP/ck.st" "$TMP/res.out" &&
    grep -q "^classes of 'species': the training run's, from $TMP/ck.st" "$TMP/res.out" ||
    { echo "FAIL: the resumed run did not take the checkpoint's normalization and classes"; cat "$TMP/res.out"; exit 1; }
# the data's metadata (data.*) of a safetensors file, one "key=value" a line
meta() { /usr/bin/python3 -c '
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
md = json.loads(f.read(n)).get("__metadata__", {})
print("\n".join(k + "=" + v for k, v in sorted(md.items()) if k.startswith("data.")))' "$1"; }
awk -F, 'NR == 1 { print; next } { $1 = $1 + 1; print }' OFS=, "$TMP/iris.csv" > "$TMP/shifted.csv"
"$IRIS" --data "$TMP/shifted.csv" --threads 1 --epochs 3 --seed 7 --resume "$TMP/ck.st" --save "$TMP/shifted.st" \
    >"$TMP/shifted.out" 2>&1 || { echo "FAIL: the run resumed on the shifted file"; cat "$TMP/shifted.out"; exit 1; }
if [ -n "$(meta "$TMP/full.st")" ] && [ "$(meta "$TMP/full.st")" = "$(meta "$TMP/shifted.st")" ]; then
    echo "PASS: resumed on a file whose first feature is + 1: the normalization saved is still the checkpoint's"
else
    echo "FAIL: resumed on a shifted file, the data's metadata changed:"; diff <(meta "$TMP/full.st") <(meta "$TMP/shifted.st")
    exit 1
fi
# two ranks: only rank 0 reads the checkpoint; rank 1 gets its data's
# normalization and classes by broadcast, and the result is still the
# uninterrupted run's
if command -v mpirun >/dev/null 2>&1 && strings "$IRIS" | grep -q MPI_Init_thread; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    P2=(mpirun -np 2 "${R[@]}")
    "${P2[@]}" --save "$TMP/full2.st" >/dev/null 2>&1 || { echo "FAIL: the uninterrupted run, 2 ranks"; exit 1; }
    "${P2[@]}" --checkpoint "$TMP/ck2.st" --checkpoint-every 3 --max-steps 7 >/dev/null 2>&1 ||
        { echo "FAIL: the first part, 2 ranks"; exit 1; }
    "${P2[@]}" --resume "$TMP/ck2.st" --save "$TMP/res2.st" >"$TMP/res2.out" 2>&1 ||
        { echo "FAIL: the resumed run, 2 ranks"; cat "$TMP/res2.out"; exit 1; }
    if cmp -s "$TMP/full2.st" "$TMP/res2.st" && grep -q "^normalize auto: the training run's" "$TMP/res2.out"; then
        echo "PASS: 2 ranks resumed at step 7 with the checkpoint's normalization: byte for byte the uninterrupted run's"
    else
        echo "FAIL: 2 ranks resumed: other bytes, or not the checkpoint's normalization"; cat "$TMP/res2.out"; exit 1
    fi
else
    skip_all "2 ranks (no mpirun or no MPI in the program); the 1-rank resume passed"
fi
