#!/usr/bin/env bash
# tests/runtime/test_log_kill.sh MNIST_PROG FASHION
#
# Logs that survive (runtime/rt_log.c): a 2-epoch run with --metrics and
# --step-log is killed with SIGKILL at a random moment of its training.
# Every line of both CSVs must be a whole row (the header's number of
# fields, each a number, ending in a newline), the steps numbered from 1
# without a gap, every row equal to the uninterrupted run's row (loss and
# lr; the metrics without their time columns), and the step log must reach
# into the epoch the run was in (at most a span, ~0.25 s, behind).
# Control: the same checker refuses a copy with a torn last line.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
MNIST=$(realpath "$1") FASHION=$2
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/logkill.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
fails=0 passes=0
pass() { echo "PASS log-kill: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL log-kill: $1"; fails=$((fails + 1)); }
# check STEPS METRICS REF_STEPS REF_METRICS: prints "steps N, epochs M, last epoch E"
check() {
    $PY - "$@" <<'P'
import sys
def rows(path):
    data = open(path, "rb").read().decode()
    if data and not data.endswith("\n"):
        sys.exit("%s: the last line is not whole: %r" % (path, data.rsplit("\n", 1)[-1]))
    lines = data.split("\n")[:-1]
    head = lines[0].split(",")
    out = []
    for i, l in enumerate(lines[1:], 2):
        f = l.split(",")
        if len(f) != len(head):
            sys.exit("%s:%d: %d fields, the header has %d: %r" % (path, i, len(f), len(head), l))
        try:
            out.append(dict(zip(head, map(float, f))))
        except ValueError:
            sys.exit("%s:%d: not numbers: %r" % (path, i, l))
    return out
s, m, rs, rm = (rows(p) for p in sys.argv[1:5])
if [r["step"] for r in s] != list(range(1, len(s) + 1)):
    sys.exit("steps are not 1..%d" % len(s))
key = lambda r: (r["epoch"], r["loss"], r["lr"])
if [key(r) for r in s] != [key(r) for r in rs[:len(s)]]:
    sys.exit("a step row differs from the uninterrupted run's")
mk = lambda r: (r["epoch"], r["train_loss"], r["test_loss"], r["test_acc"], r["lr"])
if [mk(r) for r in m] != [mk(r) for r in rm[:len(m)]]:
    sys.exit("a metrics row differs from the uninterrupted run's")
print("steps %d, epochs %d, last step's epoch %d" % (len(s), len(m), s[-1]["epoch"] if s else 0))
P
}
R=("$MNIST" --data "$FASHION" --threads 1 --epochs 2 --seed 7)
t0=$(date +%s.%N)
"${R[@]}" --metrics "$TMP/rm.csv" --step-log "$TMP/rs.csv" >"$TMP/ref" 2>&1 || { fail "uninterrupted run"; exit 1; }
T=$($PY -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
S=$($PY -c "import random, sys; print('%.2f' % (float(sys.argv[1]) * random.uniform(0.2, 0.9)))" "$T")
"${R[@]}" --metrics "$TMP/m.csv" --step-log "$TMP/s.csv" >"$TMP/out" 2>&1 &
pid=$!
sleep "$S"
kill -9 $pid
wait $pid 2>/dev/null
if r=$(check "$TMP/s.csv" "$TMP/m.csv" "$TMP/rs.csv" "$TMP/rm.csv" 2>&1); then
    ep=$(( $(wc -l < "$TMP/m.csv") ))       # epochs done + 1: the epoch it was in
    last=$(echo "$r" | sed 's/.*epoch //')
    per=$(( $(wc -l < "$TMP/rs.csv") / 2 ))  # steps per epoch
    steps=$(echo "$r" | sed 's/steps \([0-9]*\),.*/\1/')
    # in the epoch it was in, or (killed in its first span or evaluation) at its start
    if [ "$last" = "$ep" ] || [ "$steps" = $(( (ep - 1) * per )) ]; then
        pass "SIGKILL after ${S}s of ${T%.*}s: every row whole and as the uninterrupted run's; $r"
    else fail "SIGKILL after ${S}s: the step log is behind: $r, metrics rows $((ep - 1))"; fi
else fail "SIGKILL after ${S}s: $r"; fi
# control: a torn last line is caught
cp "$TMP/s.csv" "$TMP/torn.csv"; printf '99999,2,0.12' >>"$TMP/torn.csv"
if ! check "$TMP/torn.csv" "$TMP/m.csv" "$TMP/rs.csv" "$TMP/rm.csv" >/dev/null 2>&1; then pass "control: a torn last line is refused"
else fail "control: a torn line passed the check"; fi
echo "log-kill: $passes passed, $fails failed"
[ $fails = 0 ]
