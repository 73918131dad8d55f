#!/usr/bin/env bash
# tests/data/ddp_data.sh DIGITS IRIS: the npz and csv sources on two MPI
# ranks. Every rank reads the file, holds out the same samples (split is
# seeded by the run's seed alone) and measures the same normalize = auto
# numbers, so 2 ranks x batch B must take the steps of 1 rank x 2B: every
# step's loss within 1e-5 relative (the first 40 steps: at the end of an
# epoch of an odd count DistributedSampler pads by wrapping, so the last
# global batch differs from one rank's). Rank 0 alone prints the class mapping,
# the split and the normalization (each line once).
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIGITS=$(realpath "${1:?usage: ddp_data.sh DIGITS IRIS}")
IRIS=$(realpath "$2")
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ddp_data.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null || skip_all "no mpirun"
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
"$PY" "$ROOT/scripts/sklearn_data.py" "$TMP" || { echo "FAIL: cannot write the data sets"; exit 1; }
fails=0
for c in "digits $DIGITS $TMP/digits.npz 16" "iris $IRIS $TMP/iris.csv 4"; do
    set -- $c
    name=$1 prog=$2 data=$3 b=$4
    R=("$prog" --data "$data" --threads 1 --epochs 2 --max-steps 40)
    timeout 300 "${MPI[@]}" "${R[@]}" --batch "$b" --step-log "$TMP/$name.2.csv" >"$TMP/$name.2.out" 2>&1 \
        && "${R[@]}" --batch $((2 * b)) --step-log "$TMP/$name.1.csv" >"$TMP/$name.1.out" 2>&1
    if [ $? -ne 0 ]; then
        echo "FAIL: $name: a run failed"; sed 's/^/    /' "$TMP/$name.2.out" "$TMP/$name.1.out" | tail; fails=1; continue
    fi
    for what in '^normalize auto' '^split ' '^classes of'; do
        n1=$(grep -c "$what" "$TMP/$name.1.out") n2=$(grep -c "$what" "$TMP/$name.2.out")
        if [ "$n1" != "$n2" ] || [ "$n2" -gt 1 ]; then
            echo "FAIL: $name: '$what' printed $n2 times by 2 ranks, $n1 by one"; fails=1
        fi
    done
    "$PY" - "$TMP/$name.2.csv" "$TMP/$name.1.csv" "$name" <<'P' || fails=1
import csv, sys
a, b = [list(csv.DictReader(open(f))) for f in sys.argv[1:3]]
w = max([abs(float(x["loss"]) - float(y["loss"])) / abs(float(y["loss"])) for x, y in zip(a, b)] or [9])
ok = len(a) == len(b) > 0 and w <= 1e-5
print("%s %s: 2 ranks %d steps, 1 rank %d steps, step losses max rel diff %.2e (tol 1e-5)"
      % ("PASS" if ok else "FAIL", sys.argv[3], len(a), len(b), w))
sys.exit(0 if ok else 1)
P
done
exit $fails
