#!/bin/bash
# tests/ddp/run.sh PROGRAM_MNIST PROGRAM_KAGGLE DATA: data-parallel training
# on CPU ranks under mpirun (Open MPI, shared memory).
#   (a) equivalence: 2 ranks x batch 32 == 1 rank x batch 64 (weights,
#       per-step losses, epoch metrics), shuffle off and on; and the
#       evaluation split on 3 ranks gives the single-rank test metrics
#   (b) overlap: on kaggle_mlp an all-reduce starts before backward ends
#   (c) sampler: tests/ddp/sampler_check.py (run separately, needs torch)
#   (d) a rank killed with kill -9 ends the job, non-zero, in time
#   (e) bad data on one rank: all exit non-zero promptly, the error named;
#       a rank that stops answering: the watchdog's message and abort;
#       ranks that disagree on settings or data sizes: rank 0 says which
# Skipped (exit 77) when mpirun is missing or the program was built
# without MPI.
. "$(dirname "$0")/../skip.sh"
mnist=$1 kaggle=$2 data=$3
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
fails=0 passes=0
t=$(mktemp -d)
cleanup() {
    # whatever a failed test left running (only our own processes)
    for p in $(cat "$t/pids" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$t"
}
trap cleanup EXIT
ok() { echo "PASS $1"; passes=$((passes + 1)); }
no() { echo "FAIL $1"; fails=$((fails + 1)); }
show() { sed 's/^/      /' "$1" | tail -n 40; }

if ! command -v mpirun >/dev/null 2>&1; then
    skip_all "ddp: mpirun not found"
fi
if ! strings "$mnist" 2>/dev/null | grep -q MPI_Init_thread; then
    skip_all "ddp: $mnist was built without MPI"
fi

# Shared memory between local ranks, root allowed, no binding (the comm
# thread must be able to run beside the kernels on a 2-core machine), and
# more ranks than cores allowed.
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun -np 2"

# ---- (a) equivalence ---------------------------------------------------------
# One initial checkpoint for every run: a step at lr 0 leaves the weights
# as initialized.
"$mnist" --data "$data" --threads 1 --lr 0 --max-steps 1 --save "$t/init.st" >/dev/null 2>&1 ||
    no "writing the initial checkpoint"
common="--data $data --threads 1 --init $t/init.st --max-steps 100 --epochs 1"
for sh in off on; do
    "$mnist" $common --shuffle $sh --batch 64 --save "$t/w1.st" --step-log "$t/s1.csv" \
        --metrics "$t/m1.csv" >"$t/one.out" 2>&1 || { no "1 rank, batch 64, shuffle $sh"; show "$t/one.out"; }
    $MPI "$mnist" $common --shuffle $sh --batch 32 --save "$t/w2.st" --step-log "$t/s2.csv" \
        --metrics "$t/m2.csv" >"$t/two.out" 2>&1 || { no "2 ranks, batch 32, shuffle $sh"; show "$t/two.out"; }
    if $PY "$here/compare.py" "$t/w1.st" "$t/w2.st" "$t/s1.csv" "$t/s2.csv" "$t/m1.csv" "$t/m2.csv" 1e-5 \
        >"$t/cmp.out" 2>&1; then
        ok "equivalence, shuffle $sh: $(cat "$t/cmp.out")"
    else no "equivalence, shuffle $sh:"; show "$t/cmp.out"; fi
done
if [ "$(grep -c '^epoch 1/1' "$t/two.out")" = 1 ] && [ "$(grep -c '^model ' "$t/two.out")" = 1 ] &&
    grep -q 'ranks 2 (global batch 64)' "$t/two.out"; then
    ok "only rank 0 prints the header and epoch lines"
else no "only rank 0 prints the header and epoch lines"; show "$t/two.out"; fi

# Evaluation: 3 ranks (N not divisible by 3) must see every test sample
# exactly once: at lr 0 the test metrics equal the single-rank ones.
$PY "$here/make_data.py" "$data" "$t/d"
ev="--data $t/d/small --threads 1 --init $t/init.st --lr 0 --epochs 1 --batch 50"
"$mnist" $ev --metrics "$t/e1.csv" >/dev/null 2>&1
mpirun -np 3 "$mnist" $ev --metrics "$t/e3.csv" >"$t/e3.out" 2>&1
if $PY - "$t/e1.csv" "$t/e3.csv" <<'EOF'
import csv, sys
a, b = (list(csv.DictReader(open(p)))[0] for p in sys.argv[1:3])
# the same samples, summed in other groups: equal to rounding; the
# accuracy is a count, so exactly equal
x, y = float(a["test_loss"]), float(b["test_loss"])
assert abs(x - y) <= 1e-6 * abs(x), (x, y)
assert a["test_acc"] == b["test_acc"], (a["test_acc"], b["test_acc"])
EOF
then ok "evaluation split over 3 ranks: each test sample once (test metrics as 1 rank)"
else no "evaluation split over 3 ranks"; show "$t/e3.out"; fi
# drop_last on 3 ranks: 1000 samples -> 333 each, 6 full batches of 50
mpirun -np 3 "$mnist" $ev --drop-last --step-log "$t/d3.csv" >"$t/d3.out" 2>&1
if [ "$(tail -n +2 "$t/d3.csv" | wc -l)" = 6 ]; then ok "--drop-last on 3 ranks: floor(1000/3)=333 per rank, 6 steps"
else no "--drop-last on 3 ranks: steps"; show "$t/d3.out"; fi

# ---- (b) overlap -------------------------------------------------------------
$MPI "$kaggle" --data "$data" --threads 1 --max-steps 12 --epochs 1 --trace "$t/k.json" \
    >"$t/k.out" 2>&1 || { no "kaggle_mlp on 2 ranks with --trace"; show "$t/k.out"; }
if $PY "$here/trace_stats.py" validate "$t/k.json" >"$t/v.out" 2>&1; then ok "trace: $(cat "$t/v.out")"
else no "trace is well-formed"; show "$t/v.out"; fi
if $PY "$here/trace_stats.py" check-overlap "$t/k.json" >"$t/o.out" 2>&1; then ok "$(cat "$t/o.out")"
else no "all-reduce overlaps backward"; show "$t/o.out"; fi
"$mnist" --data "$data" --threads 1 --max-steps 5 --trace "$t/one.json" >/dev/null 2>&1
if $PY "$here/trace_stats.py" validate "$t/one.json" >"$t/v.out" 2>&1 && ! grep -q '"cat":"comm"' "$t/one.json"; then
    ok "trace on one rank: $(cat "$t/v.out")"
else no "trace on one rank"; show "$t/v.out"; fi

# ---- (d) kill -9 of one rank mid-epoch -------------------------------------------
# start_job OUT ARGS...: mpirun in the background; waits until training runs
start_job() {
    out=$1
    shift
    "$@" >"$out" 2>&1 &
    job=$!
    echo "$job" >>"$t/pids"
    for _ in $(seq 150); do
        grep -q '^model ' "$out" && break
        sleep 0.2
    done
    sleep 1
    # the rank processes: children of mpirun, told apart by their rank variable
    for p in $(pgrep -P "$job"); do
        echo "$p" >>"$t/pids"
        r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ "$r" = 1 ] && rank1=$p
    done
}
# wait_job LIMIT: the job's exit status, or 124 if it outlives LIMIT seconds
wait_job() {
    for _ in $(seq $(($1 * 10))); do
        kill -0 "$job" 2>/dev/null || { wait "$job"; return $?; }
        sleep 0.1
    done
    return 124
}
long="--data $data --threads 1 --epochs 1000"
rank1=
start_job "$t/kill.out" $MPI "$kaggle" $long --comm-timeout 20
t0=$SECONDS
if [ -n "$rank1" ] && kill -9 "$rank1"; then
    wait_job 25
    st=$?
    if [ $st -ne 0 ] && [ $st -ne 124 ] && grep -qi 'signal 9\|killed' "$t/kill.out"; then
        ok "rank 1 killed with kill -9: job ended (status $st) after $((SECONDS - t0)) s, output names it"
    else no "rank 1 killed with kill -9 (status $st)"; show "$t/kill.out"; fi
else no "rank 1 killed with kill -9: rank 1 not found"; show "$t/kill.out"; fi

# ---- (e) failures on one rank ------------------------------------------------------
# rank1 CMD...: run CMD with extra arguments on rank 1 only (RANK1_ARGS)
per_rank='if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$0" "$@" $RANK1_ARGS; else exec "$0" "$@"; fi'
t0=$SECONDS
RANK1_ARGS="--data $t/d/bad" $MPI sh -c "$per_rank" "$mnist" --data "$data" --threads 1 \
    --max-steps 20 >"$t/bad.out" 2>&1
st=$?
# (mpirun's own "MPI_ABORT was invoked on rank 1" banner is not checked:
# Open MPI 4.1 sometimes loses it, "ORTE_ERROR_LOG: Data unpack would read
# past end of buffer ... show_help.c"; the rank's own line names it)
if [ $st -ne 0 ] && grep -q 'error: rank 1: .*train-labels-idx1-ubyte' "$t/bad.out" &&
    [ $((SECONDS - t0)) -lt 30 ]; then
    ok "bad data on rank 1: all exit (status $st) in $((SECONDS - t0)) s: $(grep -o 'rank 1: .*ubyte' "$t/bad.out" | head -n 1 | cut -c1-60)..."
else no "bad data on rank 1 (status $st)"; show "$t/bad.out"; fi

# a rank that stops (SIGSTOP) hangs the collectives: the watchdog aborts
rank1=
start_job "$t/stop.out" $MPI "$kaggle" $long --comm-timeout 3
t0=$SECONDS
if [ -n "$rank1" ] && kill -STOP "$rank1"; then
    wait_job 30
    st=$?
    kill -9 "$rank1" 2>/dev/null
    if [ $st -ne 0 ] && [ $st -ne 124 ] &&
        grep -q 'rank 0: .* did not complete within 3 s (another rank failed or hung)' "$t/stop.out"; then
        ok "rank 1 stopped: watchdog on rank 0 aborted the job after $((SECONDS - t0)) s: $(grep -o 'rank 0: .*hung)' "$t/stop.out" | head -n 1)"
    else no "rank 1 stopped: watchdog (status $st)"; show "$t/stop.out"; fi
else no "rank 1 stopped: rank 1 not found"; show "$t/stop.out"; fi

# settings that differ: rank 0 names the rank and the setting, all exit 1
RANK1_ARGS="--lr 0.02 --batch 16" $MPI sh -c "$per_rank" "$mnist" --data "$data" --threads 1 --lr 0.01 --batch 64 \
    --max-steps 2 >"$t/mis.out" 2>&1
st=$?
if [ $st -eq 1 ] && grep -q 'rank 1 differs from rank 0 in its program and settings: --batch (16 there, 64 on rank 0), --lr (0.02 there, 0.01 on rank 0)' "$t/mis.out" &&
    ! grep -q MPI_ABORT "$t/mis.out"; then
    ok "settings differ on rank 1: rank 0 says so, all exit 1"
else no "settings differ on rank 1 (status $st)"; show "$t/mis.out"; fi
RANK1_ARGS="--data $t/d/small" $MPI sh -c "$per_rank" "$mnist" --data "$data" --threads 1 \
    --max-steps 2 >"$t/mis.out" 2>&1
st=$?
if [ $st -eq 1 ] && grep -q 'rank 1 differs from rank 0 in its data: training samples (1000 there, ' "$t/mis.out"; then
    ok "dataset sizes differ on rank 1: rank 0 says so, all exit 1"
else no "dataset sizes differ on rank 1 (status $st)"; show "$t/mis.out"; fi

echo "ddp: $passes passed, $fails failed"
[ $fails -eq 0 ]
