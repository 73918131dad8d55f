#!/usr/bin/env bash
# tests/ddp/test_cuda_ddp.sh PROG FAKE_LIBCUDA FAKE_LIBNCCL DATA
#
# Data-parallel training on GPU ranks, without GPUs: mpirun starts two
# ranks, each on its own device of the fake driver (tests/fakes/fake_cuda.c,
# kernels run by the CUDA emulator), with the fake NCCL
# (tests/fakes/fake_nccl.c: all-reduces over MPI, as nodes of the captured
# step graph). The graph is replayed in a random topological order, or
# with the all-reduces as late / as early as their edges allow, so only the
# runtime's event edges keep backward -> all-reduce -> optimizer in order.
# Every GPU-rank run here also checks that NCCL's first collective is run
# eagerly before the step is captured: the fake NCCL refuses it inside a
# capture, as real NCCL may fail there.
#   1. 2 GPU ranks x batch 16 = 2 CPU ranks x batch 16 = 1 CPU rank x batch
#      32: step losses, epoch metrics, saved weights (three buckets, SGD
#      with momentum), under each schedule;
#   2. the planted bug (the driver drops every cross-stream wait) makes the
#      same comparison fail: the test sees a missing edge;
#   3. one rank alone through NCCL (CDDP_NCCL_FORCE=1) = the plain device;
#   4. failures end the whole job, non-zero, with the reason: two ranks on
#      one GPU, more ranks than GPUs, NCCL missing or built for a newer CUDA
#      than the driver's (the next library is taken), (--device auto falls back to the CPU on
#      every rank), an asynchronous NCCL error on one rank, a device that
#      stops making progress (--comm-timeout).
# PROG: a cddpc-compiled tests/ddp/ddp_buckets.net. Skipped (exit 77) when
# mpirun, NVRTC, g++ or the fake NCCL is missing.
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=$(realpath "${1:?usage: test_cuda_ddp.sh PROG FAKE_LIBCUDA FAKE_LIBNCCL DATA}")
FAKE=$(realpath "$2")
DATA=$4
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
if ! command -v mpirun >/dev/null 2>&1 || [ ! -f "$3" ] || [ ! -d /usr/local/cuda ] ||
    ! command -v g++ >/dev/null 2>&1; then
    skip_all "cuda-ddp needs mpirun, the fake NCCL ($3), NVRTC and g++"
fi
FNCCL=$(realpath "$3")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cuda_ddp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP CDDP_CUDA_TIMEOUT CDDP_NCCL_FORCE FAKE_CUDA_SCHEDULE FAKE_CUDA_DROP_WAITS \
    FAKE_CUDA_HANG FAKE_NCCL_ASYNC_ERROR FAKE_NCCL_ERROR_RANK
export XDG_CACHE_HOME=$TMP/cache CDDP_LIBCUDA=$FAKE CDDP_LIBNCCL=$FNCCL FAKE_CUDA_DEVICES=2
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# what mpirun passes on to the ranks
XS="-x CDDP_LIBCUDA -x CDDP_LIBNCCL -x XDG_CACHE_HOME -x FAKE_CUDA_KERNELS -x FAKE_CUDA_DEVICES"
fails=0 passes=0
pass() { echo "PASS cuda-ddp: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL cuda-ddp: $1"; fails=$((fails + 1)); }
show() { sed '/WARNING: ASan doesn.t fully support makecontext/d; s/^/      /' "$1" | tail -n 15; }

# a small cut of the data: the emulator runs a few steps a second
SMALL=$TMP/small
$PY "$ROOT/tests/runtime/small_idx.py" "$DATA" "$SMALL" 200 90 || { echo "FAIL cuda-ddp: cannot make the small data set"; exit 1; }

# the emulated kernels, from the program's own NVRTC source
env CDDP_CUDA_DUMP="$TMP/src.cu" "$PROG" --data "$SMALL" --device cuda --max-steps 1 >/dev/null 2>&1
if bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src.cu" "$TMP/kernels.so" 2>"$TMP/gxx.err"; then
    export FAKE_CUDA_KERNELS=$TMP/kernels.so
else
    fail "cannot build the emulated kernels"; show "$TMP/gxx.err"; exit 1
fi

# one initial state for every run (lr 0: the weights as initialized)
"$PROG" --data "$SMALL" --device cpu --lr 0 --max-steps 1 --save "$TMP/init.st" >/dev/null 2>&1 ||
    { fail "writing the initial weights"; exit 1; }
C=(--data "$SMALL" --init "$TMP/init.st" --threads 1 --epochs 1 --max-steps 4)
"$PROG" "${C[@]}" --device cpu --batch 32 --step-log "$TMP/s1.csv" --metrics "$TMP/m1.csv" \
    --save "$TMP/w1.st" >"$TMP/o1" 2>&1 || { fail "1 cpu rank"; show "$TMP/o1"; }
mpirun -np 2 "$PROG" "${C[@]}" --device cpu --batch 16 --step-log "$TMP/s2.csv" --metrics "$TMP/m2.csv" \
    --save "$TMP/w2.st" >"$TMP/o2" 2>&1 || { fail "2 cpu ranks"; show "$TMP/o2"; }

# cmp NAME STEPS_A STEPS_B METRICS_A METRICS_B WEIGHTS_A WEIGHTS_B: worst relative difference
cmp_runs() {
    $PY - "$@" <<'P'
import sys, csv, json, struct
name, sa, sb, ma, mb, wa, wb = sys.argv[1:8]
worst = 0.0
def rel(x, y): return abs(x - y) / max(1e-6, abs(y))
ra, rb = list(csv.DictReader(open(sa))), list(csv.DictReader(open(sb)))
if len(ra) != len(rb) or not ra: sys.exit("%s: %d vs %d steps" % (name, len(ra), len(rb)))
for x, y in zip(ra, rb): worst = max(worst, rel(float(x['loss']), float(y['loss'])))
for x, y in zip(csv.DictReader(open(ma)), csv.DictReader(open(mb))):
    for k in ('train_loss', 'test_loss', 'test_acc'): worst = max(worst, rel(float(x[k]), float(y[k])))
def load(p):
    raw = open(p, 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
    return {k: struct.unpack('<%df' % ((v['data_offsets'][1] - v['data_offsets'][0]) // 4),
            raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
            for k, v in h.items() if k != '__metadata__'}
pa, pb = load(wa), load(wb)
if pa.keys() != pb.keys(): sys.exit("%s: parameter names differ" % name)
for k in pa:
    num = sum((p - q) ** 2 for p, q in zip(pa[k], pb[k])) ** 0.5
    worst = max(worst, num / max(sum(q * q for q in pb[k]) ** 0.5, 1e-12))
print("max rel diff %.2e" % worst)
sys.exit(0 if worst <= 1e-4 else 1)
P
}

# ---- 1. GPU ranks = CPU ranks = one CPU rank with the global batch -------------------
d=$(cmp_runs "2 cpu ranks vs 1" "$TMP/s2.csv" "$TMP/s1.csv" "$TMP/m2.csv" "$TMP/m1.csv" "$TMP/w2.st" "$TMP/w1.st") &&
    pass "reference: 2 cpu ranks x 16 = 1 cpu rank x 32 ($d)" || fail "reference: 2 cpu ranks vs 1: $d"
gpu2() {    # gpu2 TAG [ENV=VALUE...]: two GPU ranks, outputs under $TMP/*TAG*
    local tag=$1
    shift
    env "$@" mpirun -np 2 $XS -x FAKE_CUDA_SCHEDULE -x FAKE_CUDA_DROP_WAITS "$PROG" "${C[@]}" --device cuda \
        --batch 16 --step-log "$TMP/s$tag.csv" --metrics "$TMP/m$tag.csv" --save "$TMP/w$tag.st" \
        >"$TMP/o$tag" 2>&1
}
for sched in random late early; do
    if gpu2 "g$sched" FAKE_CUDA_SCHEDULE=$sched; then
        d1=$(cmp_runs "gpu vs cpu ranks" "$TMP/sg$sched.csv" "$TMP/s2.csv" "$TMP/mg$sched.csv" "$TMP/m2.csv" \
            "$TMP/wg$sched.st" "$TMP/w2.st") &&
        d2=$(cmp_runs "gpu ranks vs 1 cpu" "$TMP/sg$sched.csv" "$TMP/s1.csv" "$TMP/mg$sched.csv" "$TMP/m1.csv" \
            "$TMP/wg$sched.st" "$TMP/w1.st") &&
            pass "2 GPU ranks, schedule $sched: = 2 cpu ranks ($d1), = 1 cpu rank x 32 ($d2)" ||
            fail "2 GPU ranks, schedule $sched: ${d1:-} ${d2:-}"
    else fail "2 GPU ranks, schedule $sched: exit status"; show "$TMP/og$sched"; fi
done
# runs of 16 steps in one graph (RT_CUDA_RUN_STEPS), the bucket all-reduces
# captured 16 times in it: batch 4 a rank, 25 steps, the first 16 of them
# one run (the loop's first stop agreement comes after 16 steps)
RUNS=(--data "$SMALL" --init "$TMP/init.st" --threads 1 --epochs 1 --batch 4)
mpirun -np 2 "$PROG" "${RUNS[@]}" --device cpu --step-log "$TMP/srunc.csv" --metrics "$TMP/mrunc.csv" \
    --save "$TMP/wrunc.st" >"$TMP/orunc" 2>&1 || { fail "2 cpu ranks, batch 4"; show "$TMP/orunc"; }
if env FAKE_CUDA_SCHEDULE=random mpirun -np 2 $XS -x FAKE_CUDA_SCHEDULE "$PROG" "${RUNS[@]}" --device cuda \
    --step-log "$TMP/srung.csv" --metrics "$TMP/mrung.csv" --save "$TMP/wrung.st" >"$TMP/orung" 2>&1; then
    d=$(cmp_runs "runs: gpu vs cpu ranks" "$TMP/srung.csv" "$TMP/srunc.csv" "$TMP/mrung.csv" "$TMP/mrunc.csv" \
        "$TMP/wrung.st" "$TMP/wrunc.st") && pass "2 GPU ranks, 25 steps (a run of 16 and singles) = 2 cpu ranks ($d)" ||
        fail "2 GPU ranks in runs: $d"
else fail "2 GPU ranks, batch 4: exit status"; show "$TMP/orung"; fi
grep -q 'device cuda:0 (Fake GPU (emulated), sm_90, driver 13.0, NVRTC [0-9.]*, NCCL 2.28.3, kernels [a-z]*; launches scheduled for h100 (cddpc --target))  ranks 2 (global batch 32)' \
    "$TMP/ograndom" && [ "$(grep -c '^model ' "$TMP/ograndom")" = 1 ] &&
    pass "rank 0 alone prints the header: device, NCCL, ranks" || { fail "header"; show "$TMP/ograndom"; }

# --trace on GPU ranks: the steps issued one by one with timing events
mpirun -np 2 $XS "$PROG" "${C[@]}" --device cuda --batch 16 --max-steps 2 --trace "$TMP/t.json" \
    --step-log "$TMP/st.csv" >"$TMP/ot" 2>&1 || { fail "traced run"; show "$TMP/ot"; }
if v=$($PY "$ROOT/tests/ddp/trace_stats.py" validate "$TMP/t.json" 2>&1) &&
    o=$($PY "$ROOT/tests/ddp/trace_stats.py" check-overlap "$TMP/t.json" 2>&1) &&
    grep -q '"comm stream (NCCL)"' "$TMP/t.json" &&
    [ "$(grep -c '"name":"allreduce bucket' "$TMP/t.json")" -eq 12 ] &&
    $PY - "$TMP/st.csv" "$TMP/sgrandom.csv" <<'P'
import csv, sys
a, b = list(csv.DictReader(open(sys.argv[1]))), list(csv.DictReader(open(sys.argv[2])))
assert len(a) == 2 and all(abs(float(x['loss']) - float(y['loss'])) <= 1e-6 * abs(float(y['loss']))
                           for x, y in zip(a, b)), (a, b[:2])
P
then pass "--trace: $v; 2 ranks x 2 steps x 3 all-reduces on the comm stream; $o; same losses as the graph"
else fail "--trace on GPU ranks: ${v:-} ${o:-}"; show "$TMP/ot"; fi

# ---- 2. the planted bug: without the event edges the runs differ ----------------------
for sched in late early; do
    gpu2 "b$sched" FAKE_CUDA_SCHEDULE=$sched FAKE_CUDA_DROP_WAITS=1
    if d=$(cmp_runs "dropped waits" "$TMP/sb$sched.csv" "$TMP/s2.csv" "$TMP/mb$sched.csv" "$TMP/m2.csv" \
        "$TMP/wb$sched.st" "$TMP/w2.st" 2>&1); then
        fail "planted bug (cross-stream waits dropped, schedule $sched) not detected: $d"
    else pass "planted bug (cross-stream waits dropped, schedule $sched) is detected: $d"; fi
done

# ---- 3. one rank through NCCL --------------------------------------------------------
"$PROG" "${C[@]}" --device cuda --batch 32 --step-log "$TMP/sp.csv" --metrics "$TMP/mp.csv" \
    --save "$TMP/wp.st" >"$TMP/op" 2>&1
CDDP_NCCL_FORCE=1 "$PROG" "${C[@]}" --device cuda --batch 32 --step-log "$TMP/sf.csv" --metrics "$TMP/mf.csv" \
    --save "$TMP/wf.st" >"$TMP/of" 2>&1
if grep -q 'NCCL 2.28.3' "$TMP/of" && ! grep -q NCCL "$TMP/op" &&
    d=$(cmp_runs "nccl alone" "$TMP/sf.csv" "$TMP/sp.csv" "$TMP/mf.csv" "$TMP/mp.csv" "$TMP/wf.st" "$TMP/wp.st"); then
    pass "one rank through NCCL (CDDP_NCCL_FORCE=1) = the plain device ($d)"
else fail "one rank through NCCL: ${d:-}"; show "$TMP/of"; fi

# ---- 4. failures end the job ---------------------------------------------------------
# expect NAME PATTERN ENV... -- ARGS...: non-zero within 60 s, PATTERN in the output
expect() {
    local name=$1 pat=$2
    shift 2
    local envs=() xs=()
    while [ "$1" != -- ]; do envs+=("$1"); xs+=(-x "${1%%=*}"); shift; done
    shift
    local t0=$SECONDS
    env "${envs[@]}" timeout 120 mpirun -np 2 $XS "${xs[@]}" \
        "$PROG" --data "$SMALL" --threads 1 --epochs 1 "$@" >"$TMP/out" 2>&1
    local st=$? dt=$((SECONDS - t0))
    if [ $st -ne 0 ] && [ $st -ne 124 ] && [ $dt -lt 60 ] && grep -qE -- "$pat" "$TMP/out"; then
        pass "$name: exit $st in ${dt} s"
    else fail "$name (status $st after $dt s)"; show "$TMP/out"; fi
}
# (before per-rank visibility was understood, rank 1 asked for a device 1
# it could not see; now both see one device, the same GPU: said by its bus)
expect "2 ranks, 1 GPU: refused" 'error: rank 0: --device cuda: ranks 0 and 1 both use the GPU at PCI 0000:10:00.0' \
    FAKE_CUDA_DEVICES=1 -- --device cuda
t0=$SECONDS
FAKE_CUDA_DEVICES=2 timeout 120 mpirun -np 3 $XS "$PROG" --data "$SMALL" --threads 1 --device cuda >"$TMP/out" 2>&1
st=$?
[ $st -ne 0 ] && [ $st -ne 124 ] && grep -q '3 ranks on this node but 2 CUDA devices visible' "$TMP/out" &&
    pass "3 ranks, 2 GPUs: refused, naming the counts and the remedies: exit $st in $((SECONDS - t0)) s" ||
    { fail "3 ranks, 2 GPUs (status $st)"; show "$TMP/out"; }
# a launcher that shows each rank only its own GPU (Slurm --gpus-per-task=1,
# or a wrapper setting CUDA_VISIBLE_DEVICES per rank): each opens its device 0
mpirun -np 2 $XS bash -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"' own_gpu "$PROG" "${C[@]}" --device cuda --batch 16 --step-log "$TMP/sv.csv" \
    --metrics "$TMP/mv.csv" --save "$TMP/wv.st" >"$TMP/ov" 2>&1
if [ $? -eq 0 ] && grep -q 'device cuda:0 (Fake GPU' "$TMP/ov" &&
    d=$(cmp_runs "own gpu" "$TMP/sv.csv" "$TMP/s2.csv" "$TMP/mv.csv" "$TMP/m2.csv" "$TMP/wv.st" "$TMP/w2.st"); then
    pass "each rank sees only its own GPU (CUDA_VISIBLE_DEVICES per rank): trains, = 2 cpu ranks ($d)"
else fail "CUDA_VISIBLE_DEVICES per rank: ${d:-}"; show "$TMP/ov"; fi
# NCCL built for a newer CUDA than the driver's: skipped for the next one
F14=$(dirname "$FNCCL")/libfakenccl_cuda14.so
if [ -f "$F14" ]; then
    expect "NCCL built for CUDA 14.0, driver 13.0: refused" \
        'NCCL .*libfakenccl_cuda14.so was built for CUDA 14.0, and the driver supports CUDA 13.0' \
        CDDP_LIBNCCL=$F14 -- --device cuda
    CDDP_LIBNCCL=$F14:$FNCCL mpirun -np 2 $XS "$PROG" "${C[@]}" --device cuda --batch 16 --max-steps 1 \
        >"$TMP/on" 2>&1 && grep -q 'NCCL 2.28.3, kernels' "$TMP/on" &&
        pass "CDDP_LIBNCCL=cuda14:cuda13: the CUDA 14 one skipped, the next one used" ||
        { fail "NCCL search past a library for CUDA 14"; show "$TMP/on"; }
else fail "no $F14"; fi
# built for a newer minor of the driver's major: taken (minor-version compatibility)
F139=$(dirname "$FNCCL")/libfakenccl_cuda13_9.so
if [ -f "$F139" ]; then
    CDDP_LIBNCCL=$F139 mpirun -np 2 $XS "$PROG" "${C[@]}" --device cuda --batch 16 --max-steps 1 \
        >"$TMP/om" 2>&1 && grep -q 'NCCL 2.28.3, kernels' "$TMP/om" &&
        pass "NCCL built for CUDA 13.9, driver 13.0: taken (CUDA's minor-version compatibility)" ||
        { fail "NCCL built for a newer minor of the driver's CUDA was refused"; show "$TMP/om"; }
else fail "no $F139"; fi
expect "NCCL missing: --device cuda refused" 'error: rank [01]: --device cuda: NCCL missing: cannot load CDDP_LIBNCCL' \
    CDDP_LIBNCCL=$TMP/none.so -- --device cuda
CDDP_LIBNCCL=$TMP/none.so mpirun -np 2 $XS "$PROG" --data "$SMALL" --threads 1 --device auto --max-steps 2 \
    >"$TMP/oa" 2>&1 && grep -q 'device cpu (auto: NCCL missing' "$TMP/oa" &&
    pass "NCCL missing: --device auto trains on the cpu on every rank" || { fail "NCCL missing, auto"; show "$TMP/oa"; }
mpirun -np 2 $XS bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export CUDA_VISIBLE_DEVICES=; exec "$@"' no_gpu_on_1 "$PROG" --data "$SMALL" --threads 1 --device auto --max-steps 2 \
    >"$TMP/ob" 2>&1 && grep -q 'device cpu (auto: 1 of 2 ranks have no usable GPU)' "$TMP/ob" &&
    pass "a rank without a GPU: --device auto trains on the cpu on every rank" || { fail "auto, 1 GPU"; show "$TMP/ob"; }
FAKE_CUDA_DEVICES=1 mpirun -np 2 $XS "$PROG" --data "$SMALL" --threads 1 --device auto --max-steps 2 \
    >"$TMP/ob" 2>&1 && grep -q 'device cpu (auto: ranks 0 and 1 both use the GPU at PCI' "$TMP/ob" &&
    pass "two ranks on one GPU: --device auto trains on the cpu on every rank" || { fail "auto, shared GPU"; show "$TMP/ob"; }
expect "an NCCL error on rank 1 ends the job" 'error: rank 1: NCCL failed while .*error 6 \(remote process' \
    FAKE_NCCL_ASYNC_ERROR=6 FAKE_NCCL_ERROR_RANK=1 -- --device cuda
expect "no progress: bounded by --comm-timeout" 'did not finish .* within 2 s: another rank failed or hung' \
    FAKE_CUDA_HANG=1 -- --device cuda --comm-timeout 2

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
