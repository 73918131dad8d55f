#!/bin/sh
# tests/runtime/alloc_fail.sh CDDPC DIGITS_NPZ IRIS_CSV KJV: every allocation
# of the runtime made to fail, once each, in the runs that load, plan,
# train, checkpoint, save, resume and evaluate.
#
# models/digits.net (npz), models/iris.net (csv, split) and models/char_lm.net
# (text: 20 KB of KJV) are compiled with
# the hook of tests/runtime/alloc_fail.c (through CDDPC_CFLAGS), which fails
# allocation number CDDP_FAIL_AT of a run. For each scenario the run is made
# once to count its allocations (T), then T times, failing the 1st, the
# 2nd, ... the T-th. Each must exit 0
# (a failure the runtime works around: then what it prints is what the run
# without one printed, for the runs whose output is deterministic)
# or 1 with an error line saying memory ran out; never a crash, a hang or a
# sanitizer report. The checkpoint and the saved weights must be whole or
# absent (a safetensors header whose offsets cover the file exactly), the
# run's earlier checkpoint untouched, and no temporary file left behind.
set -u
if [ $# -ne 4 ]; then
    echo "usage: $0 CDDPC DIGITS_NPZ IRIS_CSV KJV" >&2
    exit 2
fi
cddpc=$1 digits=$2 iris=$3 kjv=$4
for f in "$digits" "$iris" "$kjv"; do
    [ -r "$f" ] || { echo "SKIP: $f is missing (scripts/data.sh writes it)"; exit 77; }
done
here=$(cd "$(dirname "$0")" && pwd)
digits=$(realpath "$digits") iris=$(realpath "$iris")
t=$(mktemp -d) || exit 2
trap 'rm -rf "$t"' EXIT INT TERM
fail=0
head -c 20000 "$kjv" > "$t/text.txt"
for m in digits iris char_lm; do
    CDDPC_CFLAGS="${CDDPC_CFLAGS:-} $here/alloc_fail.c" "$cddpc" models/$m.net -o "$t/$m" || { echo "FAIL: cannot build $m"; exit 1; }
done

# whole FILE: 0 when FILE is a safetensors file whose header's offsets
# end exactly at its end
whole() {
    /usr/bin/python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
end = max([v["data_offsets"][1] for k, v in h.items() if k != "__metadata__"] + [0])
sys.exit(0 if 8 + n + end == len(b) else 1)
PY
}

# scenario NAME PROG ARGS...: run in $t/NAME (fresh each time, with
# $t/good.st as the earlier checkpoint where ARGS name it)
scenario() {
    name=$1 prog=$2
    shift 2
    rm -rf "$t/run" && mkdir "$t/run" && cp "$t/good_$prog.st" "$t/run/prev.st"
    (cd "$t/run" && CDDP_ALLOC_COUNT="$t/count" "$t/$prog" "$@" >"$t/ref" 2>"$t/err")
    rc=$?
    total=$(cat "$t/count" 2>/dev/null || echo 0)
    if [ $rc -ne 0 ] || [ "$total" -lt 1 ]; then
        echo "FAIL $name: the run without a failure exits $rc after $total allocations: $(head -c 300 "$t/err")"
        fail=1
        return
    fi
    ok=0 worked=0 bad=0
    i=1
    while [ $i -le "$total" ]; do
        rm -rf "$t/run" && mkdir "$t/run" && cp "$t/good_$prog.st" "$t/run/prev.st"
        (cd "$t/run" && CDDP_FAIL_AT=$i timeout 60 "$t/$prog" "$@" >"$t/out" 2>"$t/err")
        rc=$?
        why=
        if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
            why="exit status $rc"
        elif [ $rc -eq 1 ] && ! grep -qi "error: .*\(out of memory\|cannot allocate\)" "$t/err"; then
            why="exit 1 without saying memory ran out"
        elif [ $rc -eq 0 ] && [ -n "${same_output:-}" ] && ! cmp -s "$t/out" "$t/ref"; then
            why="exit 0 with other output: $(head -c 200 "$t/out")"
        elif grep -q "Sanitizer\|runtime error" "$t/err"; then
            why="a sanitizer report"
        elif ls "$t/run" | grep -q "\.tmp\."; then
            why="a temporary file left: $(ls "$t/run" | tr '\n' ' ')"
        elif ! cmp -s "$t/run/prev.st" "$t/good_$prog.st"; then
            why="the earlier checkpoint changed"
        else
            for f in ck.st w.st; do
                if [ -e "$t/run/$f" ] && ! whole "$t/run/$f"; then
                    why="$f is not whole"
                fi
            done
        fi
        if [ -n "$why" ]; then
            [ $bad -lt 5 ] && echo "FAIL $name: allocation $i of $total failed: $why: $(head -c 300 "$t/err" | tr '\n' ' ')"
            bad=$((bad + 1))
            fail=1
        elif [ $rc -eq 0 ]; then
            worked=$((worked + 1))
        else
            ok=$((ok + 1))
        fi
        i=$((i + 1))
    done
    [ $bad -gt 5 ] && echo "FAIL $name: $bad of $total allocations in all"
    [ $bad -eq 0 ] && echo "PASS $name: each of $total allocations failed once: $ok refused with exit 1 and the reason, $worked worked around, nothing partial or left behind"
}

# the earlier checkpoints the runs resume from (and must leave alone)
(cd "$t" && "$t/digits" --data "$digits" --threads 1 --epochs 1 --max-steps 2 --checkpoint good_digits.st >/dev/null 2>&1) &&
    (cd "$t" && "$t/iris" --data "$iris" --threads 1 --epochs 1 --max-steps 2 --checkpoint good_iris.st >/dev/null 2>&1) &&
    (cd "$t" && "$t/char_lm" --data "$t/text.txt" --threads 1 --epochs 1 --max-steps 2 --checkpoint good_char_lm.st \
        >/dev/null 2>&1) ||
    { echo "FAIL: cannot write the first checkpoints"; exit 1; }
run="--threads 1 --epochs 1 --max-steps 3"
scenario "digits: train, checkpoint and save" digits --data "$digits" $run --checkpoint ck.st --save w.st --metrics m.csv
scenario "digits: resume" digits --data "$digits" --threads 1 --epochs 2 --max-steps 5 --resume prev.st --checkpoint ck.st
scenario "digits: evaluate" digits --data "$digits" --threads 1 --evaluate prev.st
scenario "iris (csv): train, checkpoint and save" iris --data "$iris" $run --checkpoint ck.st --save w.st
scenario "iris (csv): init" iris --data "$iris" $run --init prev.st --save w.st
scenario "char_lm (text): train, checkpoint and save" char_lm --data "$t/text.txt" $run --checkpoint ck.st --save w.st
same_output=1 scenario "char_lm (text): generate" char_lm --data "$t/text.txt" --threads 1 --generate 20 --load prev.st --prompt "In the"
exit $fail
