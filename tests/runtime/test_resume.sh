#!/usr/bin/env bash
# tests/runtime/test_resume.sh MNIST MOMENTUM_PROG KAGGLE CONVNET ADAM_PROG FASHION MNIST_DATA [FAKE_LIBCUDA]
#
# --checkpoint / --resume:
#   1. kill -9 in the middle of epoch 2 of a 3-epoch run (checkpoints every
#      100 steps), --resume: the final weights equal the uninterrupted
#      run's bit for bit (cmp of the --save files), and so do epochs 2 and
#      3 of the metrics (train_loss is the exact epoch mean across the cut);
#   2. SGD with momentum (MOMENTUM_PROG: the optimizer state is saved as
#      optimizer.<param>.momentum_buffer), resumed at an epoch boundary;
#   2b. the ConvNet (batch norm: running statistics and the I64
#      num_batches_tracked are in the checkpoint), resumed inside an epoch;
#   2c. Adam with a step schedule (ADAM_PROG: exp_avg and exp_avg_sq saved;
#      the bias correction and the epoch's lr come from the restored step
#      and epoch), resumed inside epoch 2;
#   3. two ranks under mpirun, stopped by --max-steps inside an epoch and
#      resumed: bit for bit the uninterrupted 2-rank run;
#   4. the emulated CUDA device (when FAKE_LIBCUDA is given and NVRTC and
#      g++ are there): --checkpoint-every inside an epoch, resumed, bit for
#      bit the uninterrupted device run;
#   5. refusals, each one line naming the file and the reason: truncated,
#      corrupt header, a plain --save file, another model's checkpoint, a
#      tensor of the wrong shape, a mid-epoch checkpoint with another batch;
#      and the usage errors (--init with --resume, --checkpoint-every alone).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/../skip.sh"
set -u
MNIST=$(realpath "$1") MOM=$(realpath "$2") KAGGLE=$(realpath "$3") CONV=$(realpath "$4")
ADAM=$(realpath "$5") FASHION=$6 MDATA=$7 FAKE=${8:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/resume.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
fails=0 passes=0
pass() { echo "PASS resume: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL resume: $1"; fails=$((fails + 1)); }
show() { sed 's/^/      /' "$1" | tail -n 12; }
# the metrics of epochs FROM.. of two CSVs, without the time columns
same_metrics() {
    $PY - "$@" <<'P'
import csv, sys
a, b, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
cut = lambda p: [(r['epoch'], r['train_loss'], r['test_loss'], r['test_acc'])
                 for r in csv.DictReader(open(p)) if int(r['epoch']) >= first]
x, y = cut(a), cut(b)
sys.exit(0 if x == y and x else "%s\n   vs %s" % (x, y))
P
}

# ---- 1. kill -9 inside epoch 2, resume ------------------------------------------------
R=("$MNIST" --data "$FASHION" --threads 1 --epochs 3 --seed 5)
"${R[@]}" --save "$TMP/a.st" --metrics "$TMP/ma.csv" >"$TMP/oa" 2>&1 || { fail "uninterrupted run"; show "$TMP/oa"; }
"${R[@]}" --save "$TMP/b.st" --checkpoint "$TMP/ck.st" --checkpoint-every 100 >"$TMP/ob" 2>&1 &
pid=$!
# kill it once a checkpoint from inside epoch 2 exists
$PY - "$TMP/ck.st" "$pid" <<'P' >"$TMP/kill.out" 2>&1
import json, os, signal, struct, sys, time
path, pid = sys.argv[1], int(sys.argv[2])
t0 = time.time()
while time.time() - t0 < 120:
    try:
        raw = open(path, 'rb').read()
        n = struct.unpack('<Q', raw[:8])[0]
        md = json.loads(raw[8:8 + n])['__metadata__']
        if md['cddp.epoch'] == '2' and int(md['cddp.skip']) > 0:
            os.kill(pid, signal.SIGKILL)
            print('killed at step %s (epoch 2, batch %s)' % (md['cddp.step'], md['cddp.skip']))
            sys.exit(0)
    except (OSError, ValueError, KeyError, struct.error):
        pass
    time.sleep(0.02)
sys.exit('no checkpoint inside epoch 2 appeared')
P
killed=$?
wait $pid
st=$?
if [ $killed -eq 0 ] && [ $st -eq 137 ] && [ ! -e "$TMP/b.st" ]; then
    pass "kill -9 inside epoch 2: $(cat "$TMP/kill.out"), exit $st"
    "${R[@]}" --save "$TMP/b.st" --resume "$TMP/ck.st" --metrics "$TMP/mb.csv" >"$TMP/or" 2>&1 ||
        { fail "the resumed run"; show "$TMP/or"; }
    grep -q '^resuming from .*: epoch 2, [1-9][0-9]* batches of it done' "$TMP/or" &&
        pass "resumed run says where it continues: $(grep '^resuming' "$TMP/or")" || { fail "resume line"; show "$TMP/or"; }
    cmp -s "$TMP/a.st" "$TMP/b.st" && pass "final weights bitwise equal to the uninterrupted run" ||
        fail "final weights differ from the uninterrupted run"
    d=$(same_metrics "$TMP/mb.csv" "$TMP/ma.csv" 2) && pass "epochs 2-3: train_loss, test_loss, test_acc identical" ||
        fail "metrics after resuming: $d"
else
    fail "kill -9 inside epoch 2 (poller $killed, exit $st): $(cat "$TMP/kill.out")"; show "$TMP/ob"
fi

# ---- 2. momentum, epoch boundary --------------------------------------------------------
M=("$MOM" --data "$MDATA" --threads 1 --seed 3)
"${M[@]}" --epochs 3 --save "$TMP/ma.st" >/dev/null 2>&1
"${M[@]}" --epochs 2 --checkpoint "$TMP/mck.st" >/dev/null 2>&1
"${M[@]}" --epochs 3 --resume "$TMP/mck.st" --save "$TMP/mb.st" >"$TMP/om" 2>&1
if cmp -s "$TMP/ma.st" "$TMP/mb.st" && $PY - "$TMP/mck.st" <<'P'; then
import json, struct, sys
raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
mom = [k for k in h if k.startswith('optimizer.') and k.endswith('.momentum_buffer')]
params = [k for k in h if k != '__metadata__' and not k.startswith('optimizer.')]
assert len(mom) == len(params) == 8, (mom, params)
assert all(h['optimizer.%s.momentum_buffer' % p]['shape'] == h[p]['shape'] for p in params)
assert h['__metadata__']['cddp.epoch'] == '3' and h['__metadata__']['cddp.skip'] == '0', h['__metadata__']
P
    pass "momentum SGD: checkpoint after epoch 2 (8 momentum buffers), resumed: bitwise equal"
else fail "momentum SGD resumed at an epoch boundary"; show "$TMP/om"; fi

# ---- 2b. batch norm buffers -------------------------------------------------------------
V=("$CONV" --data "$MDATA" --threads 1 --epochs 1 --seed 1)
"${V[@]}" --max-steps 40 --save "$TMP/va.st" >/dev/null 2>&1
"${V[@]}" --max-steps 25 --checkpoint "$TMP/vck.st" --checkpoint-every 10 >/dev/null 2>&1
"${V[@]}" --max-steps 40 --resume "$TMP/vck.st" --save "$TMP/vb.st" >"$TMP/ov" 2>&1
if cmp -s "$TMP/va.st" "$TMP/vb.st" && $PY - "$TMP/vck.st" <<'P'; then
import json, struct, sys
raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
assert h['layer1.1.num_batches_tracked']['dtype'] == 'I64', h['layer1.1.num_batches_tracked']
assert h['layer2.1.running_var']['shape'] == [32], h['layer2.1.running_var']
assert not [k for k in h if k.startswith('optimizer.')], 'plain SGD keeps no state'
assert h['__metadata__']['cddp.skip'] == '25', h['__metadata__']
P
    pass "ConvNet (batch norm buffers, I64 num_batches_tracked): stopped at step 25, resumed: bitwise equal"
else fail "ConvNet resumed"; show "$TMP/ov"; fi

# ---- 2c. Adam, a schedule -----------------------------------------------------------------
A=("$ADAM" --data "$MDATA" --threads 1 --epochs 3 --batch 256 --seed 2)
"${A[@]}" --save "$TMP/aa.st" >/dev/null 2>&1
"${A[@]}" --max-steps 40 --checkpoint "$TMP/ack.st" >/dev/null 2>&1
"${A[@]}" --resume "$TMP/ack.st" --save "$TMP/ab.st" >"$TMP/oad" 2>&1
if cmp -s "$TMP/aa.st" "$TMP/ab.st" && grep -q 'epoch 2, 8 batches of it done, 40 steps' "$TMP/oad" &&
    $PY - "$TMP/ack.st" <<'P'; then
import json, struct, sys
raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
params = [k for k in h if k != '__metadata__' and not k.startswith('optimizer.')]
for p in params:
    for slot in ('exp_avg', 'exp_avg_sq'):
        assert h['optimizer.%s.%s' % (p, slot)]['shape'] == h[p]['shape'], (p, slot)
P
    pass "Adam + step schedule: stopped at step 40 (epoch 2, batch 8), exp_avg and exp_avg_sq saved, resumed: bitwise equal"
else fail "Adam resumed"; show "$TMP/oad"; fi

# ---- 3. two ranks, stopped inside an epoch by --max-steps ---------------------------------
if command -v mpirun >/dev/null 2>&1 && strings "$MNIST" | grep -q MPI_Init_thread; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    P2=(mpirun -np 2 "$MNIST" --data "$MDATA" --threads 1 --epochs 2 --batch 32 --seed 9)
    "${P2[@]}" --save "$TMP/pa.st" --metrics "$TMP/pma.csv" >/dev/null 2>&1
    "${P2[@]}" --max-steps 180 --checkpoint "$TMP/pck.st" >"$TMP/op1" 2>&1
    "${P2[@]}" --resume "$TMP/pck.st" --save "$TMP/pb.st" --metrics "$TMP/pmb.csv" >"$TMP/op2" 2>&1
    if cmp -s "$TMP/pa.st" "$TMP/pb.st" && grep -q 'epoch 2, 55 batches of it done, 180 steps' "$TMP/op2" &&
        d=$(same_metrics "$TMP/pmb.csv" "$TMP/pma.csv" 2); then
        pass "2 ranks: stopped at step 180 (epoch 2, batch 55), resumed: bitwise equal, same epoch-2 metrics"
    else fail "2 ranks resumed: ${d:-}"; show "$TMP/op2"; fi
else skip_part "2 ranks (no mpirun or no MPI in the program)"; fi

# ---- 4. the emulated CUDA device ----------------------------------------------------------
if [ -n "$FAKE" ] && [ -d /usr/local/cuda ] && command -v g++ >/dev/null; then
    SMALL=$TMP/small
    $PY "$ROOT/tests/runtime/small_idx.py" "$FASHION" "$SMALL" 150 40
    export CDDP_LIBCUDA=$(realpath "$FAKE") XDG_CACHE_HOME=$TMP/cache
    env CDDP_CUDA_DUMP="$TMP/src.cu" "$MOM" --data "$SMALL" --device cuda --max-steps 1 >/dev/null 2>&1
    if bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src.cu" "$TMP/kernels.so" 2>"$TMP/gxx"; then
        export FAKE_CUDA_KERNELS=$TMP/kernels.so
        D=("$MOM" --data "$SMALL" --device cuda --epochs 2 --batch 32 --seed 4)
        "${D[@]}" --save "$TMP/da.st" >/dev/null 2>&1
        "${D[@]}" --max-steps 7 --checkpoint "$TMP/dck.st" --checkpoint-every 2 >"$TMP/od1" 2>&1
        "${D[@]}" --resume "$TMP/dck.st" --save "$TMP/db.st" >"$TMP/od2" 2>&1
        if cmp -s "$TMP/da.st" "$TMP/db.st" && grep -q 'epoch 2, 2 batches of it done, 7 steps' "$TMP/od2"; then
            pass "emulated CUDA device: checkpoints every 2 steps, stopped at step 7 (epoch 2), resumed: bitwise equal"
        else fail "emulated CUDA device resume"; show "$TMP/od1"; show "$TMP/od2"; fi
    else fail "cannot build the emulated kernels"; show "$TMP/gxx"; fi
    unset CDDP_LIBCUDA FAKE_CUDA_KERNELS
else skip_part "emulated CUDA device (no fake driver, NVRTC or g++)"; fi

# ---- 5. refusals --------------------------------------------------------------------------
one_line() {    # one_line NAME STATUS PATTERN CMD...: that status, one stderr line matching
    local name=$1 want=$2 pat=$3
    shift 3
    "$@" >"$TMP/o1" 2>"$TMP/e1"
    local got=$?
    if [ $got -eq "$want" ] && [ "$(wc -l <"$TMP/e1")" -eq 1 ] && grep -qE -- "$pat" "$TMP/e1" &&
        ! grep -q '^epoch' "$TMP/o1"; then
        pass "$name: $(cat "$TMP/e1")"
    else fail "$name (status $got)"; show "$TMP/e1"; fi
}
C=("$MNIST" --data "$MDATA" --threads 1 --epochs 1)
"${C[@]}" --max-steps 30 --checkpoint "$TMP/c.st" >/dev/null 2>&1
"${C[@]}" --max-steps 1 --save "$TMP/plain.st" >/dev/null 2>&1
head -c 100000 "$TMP/c.st" >"$TMP/trunc.st"
$PY - "$TMP/c.st" "$TMP" <<'P'
import json, struct, sys
raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]
hdr, data = raw[8:8 + n], raw[8 + n:]
bad = bytearray(raw); bad[8] = ord('#')                         # not JSON any more
open(sys.argv[2] + '/hdr.st', 'wb').write(bytes(bad))
h = json.loads(hdr)                                             # fc1.weight one column short
w = h['fc1.weight']; a, b = w['data_offsets']; w['shape'] = [512, 783]
cut = 512 * 4
keep = data[:a] + data[a:b - cut] + data[b:]
for k, v in h.items():
    if k != '__metadata__' and v['data_offsets'][0] >= b:
        v['data_offsets'] = [v['data_offsets'][0] - cut, v['data_offsets'][1] - cut]
w['data_offsets'] = [a, b - cut]
js = json.dumps(h).encode(); js += b' ' * (-len(js) % 8)
open(sys.argv[2] + '/shape.st', 'wb').write(struct.pack('<Q', len(js)) + js + keep)
P
"$KAGGLE" --data "$MDATA" --threads 1 --epochs 1 --max-steps 1 --checkpoint "$TMP/k.st" >/dev/null 2>&1
one_line "truncated checkpoint" 1 "trunc.st: truncated" "${C[@]}" --resume "$TMP/trunc.st"
one_line "corrupt header" 1 "hdr.st: corrupt header" "${C[@]}" --resume "$TMP/hdr.st"
one_line "a --save file is not a checkpoint" 1 'plain.st: not a cddp checkpoint: its metadata has no "cddp.checkpoint"' \
    "${C[@]}" --resume "$TMP/plain.st"
one_line "another model's checkpoint" 1 "k.st: a checkpoint of model 'KaggleMLP'; this program trains 'SimpleNet'" \
    "${C[@]}" --resume "$TMP/k.st"
one_line "a tensor of the wrong shape" 1 'shape.st: tensor "fc1.weight" has shape \[512, 783\], expected \[512, 784\]' \
    "${C[@]}" --resume "$TMP/shape.st"
one_line "inside an epoch with another batch" 1 'c.st: the checkpoint was taken inside epoch 1, with batch 64 .*this run: batch 32' \
    "${C[@]}" --resume "$TMP/c.st" --batch 32
usage() {      # usage NAME PATTERN CMD...: exit 2, the reason first, nothing trained
    local name=$1 pat=$2
    shift 2
    "$@" >"$TMP/o1" 2>"$TMP/e1"
    local got=$?
    if [ $got -eq 2 ] && head -1 "$TMP/e1" | grep -qE -- "$pat" && [ ! -s "$TMP/o1" ]; then
        pass "$name: $(head -1 "$TMP/e1")"
    else fail "$name (status $got)"; show "$TMP/e1"; fi
}
usage "--init with --resume" 'use one' "${C[@]}" --resume "$TMP/c.st" --init "$TMP/plain.st"
usage "--checkpoint-every alone" 'needs --checkpoint FILE' "${C[@]}" --checkpoint-every 5
# a plain PyTorch load of the parameters still works: the checkpoint is a superset of --save
$PY - "$TMP/c.st" "$TMP/plain.st" <<'P' && pass "the checkpoint's parameters load as a --save file does (names, shapes)" || fail "checkpoint vs --save names"
import json, struct, sys
def hdr(p):
    raw = open(p, 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; return json.loads(raw[8:8 + n])
a, b = hdr(sys.argv[1]), hdr(sys.argv[2])
pa = {k: v['shape'] for k, v in a.items() if k != '__metadata__' and not k.startswith('optimizer.')}
pb = {k: v['shape'] for k, v in b.items() if k != '__metadata__'}
sys.exit(0 if pa == pb else 1)
P

echo "$passes passed, $fails failed"
skip_end "$fails"
