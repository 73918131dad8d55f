#!/usr/bin/env bash
# tests/runtime/test_stop.sh MNIST_PROG FASHION [FAKE_LIBCUDA]
#
# The graceful stop (runtime/rt_stop.c, rt_loop.c): SIGTERM at a random
# step of a 2-epoch run with --checkpoint (the step log counts them); the run must exit 143 with
# one line naming --resume and the checkpoint, and the run resumed from
# that checkpoint must end bit for bit equal (cmp of the --save files) to
# the uninterrupted run, with the same metrics for the epochs after the
# stop. On 1 rank; on 2 ranks under mpirun (the signal sent to mpirun,
# which forwards it to the ranks); SIGINT (130) and SIGUSR1 (138); a
# second signal kills at once; without --checkpoint the line says so; the
# emulated CUDA device (when FAKE_LIBCUDA is given; slow: the emulator
# runs a step in about a second).
# Control: the checkpoint is at the stop step (the resume line's step),
# not at an epoch end, so a resume that ignored its batch would differ.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/../skip.sh"
set -u
MNIST=$(realpath "$1") FASHION=$2 FAKE=${3:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/stop.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
fails=0 passes=0
pass() { echo "PASS stop: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL stop: $1"; fails=$((fails + 1)); }
show() { sed 's/^/      /' "$1" | tail -n 12; }
same_metrics() {    # same_metrics A B FIRST: epochs >= FIRST alike (no time columns)
    $PY - "$@" <<'P'
import csv, sys
a, b, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
cut = lambda p: [(r['epoch'], r['train_loss'], r['test_loss'], r['test_acc'])
                 for r in csv.DictReader(open(p)) if int(r['epoch']) >= first]
x, y = cut(a), cut(b)
sys.exit(0 if x == y and x else "%s\n   vs %s" % (x, y))
P
}
# wait_line FILE: until the start-up line is there (the handlers are in place)
wait_line() {
    for _ in $(seq 600); do grep -q '^model ' "$1" 2>/dev/null && return 0; sleep 0.05; done
    return 1
}
# stop_run NAME SIG WANT STEPS LOG PID OUT ERR: signal PID once its --step-log
# LOG holds STEPS rows (a step count, not a time: under a loaded machine a
# run may go faster or slower than the uninterrupted one it is compared
# with, and a signal timed by the clock could come after its end); its exit
# status must be WANT and stderr one resume line
stop_run() {
    local name=$1 sig=$2 want=$3 steps=$4 log=$5 pid=$6 out=$7 err=$8
    wait_line "$out" || { fail "$name: no start-up line"; show "$err"; return 1; }
    while kill -0 "$pid" 2>/dev/null && [ "$(($(wc -l <"$log" 2>/dev/null || echo 1) - 1))" -lt "$steps" ]; do
        sleep 0.05
    done
    kill -"$sig" "$pid"
    wait "$pid"; local rc=$?
    if [ "$rc" != "$want" ]; then fail "$name: exit status $rc, want $want"; show "$err"; return 1; fi
    if [ "$(grep -c -- '--resume' "$err")" != 1 ]; then fail "$name: no one resume line"; show "$err"; return 1; fi
    return 0
}
# pick_step LOG: a step inside training, 15% to 60% of the steps of the
# uninterrupted run's step log (the step log lags by up to a second)
pick_step() {
    $PY -c "import random, sys; n = sum(1 for _ in open(sys.argv[1])) - 1; print(max(1, int(n * random.uniform(0.15, 0.6))))" "$1"
}
# the first epoch a resumed run reports, from the stop's line: E for
# "(epoch E, batch B ...", E + 1 for "(the end of epoch E)" (a signal in
# the last steps of an epoch lands there; the resumed run starts the next)
stop_epoch() {
    sed -n 's/.*stopped by .*(epoch \([0-9]*\),.*/\1/p; s/.*stopped by .*(the end of epoch \([0-9]*\)).*/+\1/p' "$1" |
        awk '/^\+/ { print substr($0, 2) + 1; next } { print }'
}

# ---- 1. one rank: SIGTERM at a random time, resumed bit for bit -------------------------
R=("$MNIST" --data "$FASHION" --threads 1 --epochs 2 --seed 5)
"${R[@]}" --save "$TMP/a.st" --metrics "$TMP/ma.csv" --step-log "$TMP/sa.csv" >"$TMP/oa" 2>&1 ||
    { fail "uninterrupted run"; show "$TMP/oa"; }
K=$(pick_step "$TMP/sa.csv") N=$(($(wc -l <"$TMP/sa.csv") - 1))
"${R[@]}" --save "$TMP/b.st" --checkpoint "$TMP/ck.st" --step-log "$TMP/sb.csv" >"$TMP/ob" 2>"$TMP/eb" &
if stop_run "1 rank SIGTERM" TERM 143 "$K" "$TMP/sb.csv" $! "$TMP/ob" "$TMP/eb"; then
    line=$(grep -- '--resume' "$TMP/eb")
    E=$(stop_epoch "$TMP/eb")
    "${R[@]}" --resume "$TMP/ck.st" --save "$TMP/b.st" --metrics "$TMP/mb.csv" >"$TMP/ob2" 2>&1
    if grep -q -- "--resume $TMP/ck.st\$" "$TMP/eb" && cmp -s "$TMP/a.st" "$TMP/b.st" &&
        d=$(same_metrics "$TMP/mb.csv" "$TMP/ma.csv" "$E"); then
        pass "1 rank: SIGTERM at step $K of $N -> 143, '${line#*: }'; resumed: bitwise equal, same metrics"
    else fail "1 rank resumed (stopped at step $K): ${d:-}"; show "$TMP/eb"; show "$TMP/ob2"; fi
fi

# ---- 2. SIGINT and SIGUSR1, no --checkpoint; a second signal ----------------------------
"${R[@]}" --epochs 1 --step-log "$TMP/sc.csv" >"$TMP/oc" 2>"$TMP/ec" &
if stop_run "SIGINT" INT 130 20 "$TMP/sc.csv" $! "$TMP/oc" "$TMP/ec"; then
    if grep -q 'stopped by SIGINT after step [0-9]* (epoch 1, batch .*no checkpoint written' "$TMP/ec"; then
        pass "SIGINT without --checkpoint -> 130, the line says none was written"
    else fail "SIGINT line"; show "$TMP/ec"; fi
fi
"${R[@]}" --epochs 1 --checkpoint "$TMP/ck1.st" --step-log "$TMP/sd.csv" >"$TMP/od" 2>"$TMP/ed" &
if stop_run "SIGUSR1" USR1 138 20 "$TMP/sd.csv" $! "$TMP/od" "$TMP/ed"; then
    if grep -q 'stopped by SIGUSR1' "$TMP/ed" && [ -s "$TMP/ck1.st" ]; then pass "SIGUSR1 -> 138 with a checkpoint"
    else fail "SIGUSR1"; show "$TMP/ed"; fi
fi
# two signals at once: the second one ends the process by its default action
"${R[@]}" --epochs 1 >"$TMP/oe" 2>"$TMP/ee" &
pid=$!
wait_line "$TMP/oe"; sleep 0.2
# Two different signals back to back (two SIGTERMs would merge while
# pending): whichever is handled second kills by its default action,
# before the loop reaches a span's end.
kill -TERM $pid; kill -INT $pid
wait $pid; rc=$?
if { [ $rc = 130 ] || [ $rc = 143 ]; } && ! grep -q 'stopped by' "$TMP/ee"; then
    pass "SIGTERM and SIGINT at once: the second kills at once ($rc, no stop line)"
else fail "second signal: status $rc"; show "$TMP/ee"; fi

# ---- 3. two ranks under mpirun: SIGTERM to mpirun ---------------------------------------
if command -v mpirun >/dev/null 2>&1 && strings "$MNIST" | grep -q MPI_Init_thread; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Open MPI 4.1's mpirun sends its ranks SIGTERM, SIGKILL a second later
    # (odls_base_sigkill_timeout), and exits 1 itself whatever they return
    P2=(mpirun -np 2 "$MNIST" --data "$FASHION" --threads 1 --epochs 2 --batch 32 --seed 9)
    "${P2[@]}" --save "$TMP/pa.st" --metrics "$TMP/pma.csv" --step-log "$TMP/spa.csv" >"$TMP/opa" 2>&1 ||
        { fail "2 ranks uninterrupted"; show "$TMP/opa"; }
    K=$(pick_step "$TMP/spa.csv")
    "${P2[@]}" --checkpoint "$TMP/pck.st" --step-log "$TMP/spb.csv" >"$TMP/opb" 2>"$TMP/epb" &
    if stop_run "2 ranks SIGTERM to mpirun" TERM 1 "$K" "$TMP/spb.csv" $! "$TMP/opb" "$TMP/epb"; then
        E=$(stop_epoch "$TMP/epb")
        "${P2[@]}" --resume "$TMP/pck.st" --save "$TMP/pb.st" --metrics "$TMP/pmb.csv" >"$TMP/opc" 2>&1
        if cmp -s "$TMP/pa.st" "$TMP/pb.st" && d=$(same_metrics "$TMP/pmb.csv" "$TMP/pma.csv" "$E"); then
            pass "2 ranks: SIGTERM to mpirun at step $K (mpirun exits 1), '$(grep -- --resume "$TMP/epb" | sed 's/^[^:]*: //')'; resumed: bitwise equal"
        else fail "2 ranks resumed: ${d:-}"; show "$TMP/epb"; show "$TMP/opc"; fi
    fi
else skip_part "2 ranks (no mpirun or no MPI in the program)"; fi

# ---- 4. the emulated CUDA device (FAKE_LIBCUDA given, NVRTC and g++ there) --------------
# The device queues a span's steps without waiting; the stop comes at the
# end of a span all the same, and the resumed run is the whole one's.
if [ -n "$FAKE" ] && [ -d /usr/local/cuda ] && command -v g++ >/dev/null; then
    SMALL=$TMP/small
    $PY "$ROOT/tests/runtime/small_idx.py" "$FASHION" "$SMALL" 1024 64 >/dev/null
    export CDDP_LIBCUDA=$(realpath "$FAKE") XDG_CACHE_HOME=$TMP/cache
    env CDDP_CUDA_DUMP="$TMP/src.cu" "$MNIST" --data "$SMALL" --device cuda --max-steps 1 >/dev/null 2>&1
    if bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src.cu" "$TMP/kernels.so" 2>"$TMP/gxx"; then
        export FAKE_CUDA_KERNELS=$TMP/kernels.so
        D=("$MNIST" --data "$SMALL" --device cuda --epochs 2 --batch 32 --seed 4)
        "${D[@]}" --save "$TMP/da.st" --metrics "$TMP/dma.csv" --step-log "$TMP/sda.csv" >"$TMP/oda" 2>&1 ||
            { fail "emulated device run"; show "$TMP/oda"; }
        K=$(pick_step "$TMP/sda.csv") N=$(($(wc -l <"$TMP/sda.csv") - 1))
        "${D[@]}" --checkpoint "$TMP/dck.st" --step-log "$TMP/sdb.csv" >"$TMP/odb" 2>"$TMP/edb" &
        if stop_run "emulated CUDA SIGTERM" TERM 143 "$K" "$TMP/sdb.csv" $! "$TMP/odb" "$TMP/edb"; then
            E=$(stop_epoch "$TMP/edb")
            "${D[@]}" --resume "$TMP/dck.st" --save "$TMP/db.st" --metrics "$TMP/dmb.csv" >"$TMP/odc" 2>&1
            if cmp -s "$TMP/da.st" "$TMP/db.st" && d=$(same_metrics "$TMP/dmb.csv" "$TMP/dma.csv" "$E"); then
                pass "emulated CUDA device: SIGTERM at step $K of $N -> 143, '$(grep -- --resume "$TMP/edb" | sed 's/^[^:]*: //')'; resumed: bitwise equal"
            else fail "emulated CUDA device resumed: ${d:-}"; show "$TMP/edb"; show "$TMP/odc"; fi
        fi
    else fail "cannot build the emulated kernels"; show "$TMP/gxx"; fi
    unset CDDP_LIBCUDA FAKE_CUDA_KERNELS
elif [ -n "$FAKE" ]; then skip_part "emulated CUDA device (no NVRTC or g++)"
fi   # without FAKE_LIBCUDA the device part is not asked for (graceful-stop-cuda asks)

echo "stop: $passes passed, $fails failed"
skip_end "$fails"
