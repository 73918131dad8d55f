#!/usr/bin/env bash
# tests/runtime/test_fake_train.sh FAKE_MODEL: the runtime's epoch loop,
# options and logs, driven through the hand-written fake model (softmax
# regression on Fashion-MNIST, tests/runtime/rt_fake_model.c).
# Invoked as "sh script" too (tests/Makefile.inc): re-run under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=${1:?usage: test_fake_train.sh FAKE_MODEL}
PY=/usr/bin/python3
DATA=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fake_train.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
pass() { echo "PASS train: $1"; }
fail() { echo "FAIL train: $1"; fails=$((fails + 1)); }
ok() { if eval "$2"; then pass "$1"; else fail "$1"; fi; }
# Most runs use one thread: the answers do not depend on it, and one
# thread is fastest and steadiest on a small, shared machine.
run() { timeout 120 "$PROG" --data "$DATA" --threads 1 "$@"; }
rows() { tail -n +2 "$1" | wc -l; }

# ---- one full epoch -----------------------------------------------------
t0=$(date +%s.%N)
run --epochs 1 --metrics "$TMP/m.csv" --step-log "$TMP/s.csv" --save "$TMP/p1.safetensors" \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
t1=$(date +%s.%N)
ok "1 epoch exits 0" "[ $rc -eq 0 ]"
ok "stderr is empty when it is not a terminal" "[ ! -s $TMP/err ]"
line=$(grep '^epoch' "$TMP/out")
echo "  $line  (wall $($PY -c "print('%.2f s' % ($t1 - $t0))"))"
ok "epoch line format" "echo '$line' | grep -qE '^epoch 1/1  train_loss [0-9.]+  test_loss [0-9.]+  test_acc [0-9.]+  [0-9.]+ s  [0-9]+ img/s$'"
acc=$(tail -1 "$TMP/m.csv" | cut -d, -f4)
ok "test accuracy $acc >= 0.80 after one epoch" "$PY -c 'import sys; sys.exit(not float(\"$acc\") >= 0.80)'"
ok "metrics header" "[ \"\$(head -1 $TMP/m.csv)\" = 'epoch,train_loss,test_loss,test_acc,seconds,images_per_s,lr' ]"
ok "step-log header" "[ \"\$(head -1 $TMP/s.csv)\" = 'step,epoch,loss,lr' ]"
ok "938 steps for 60000 samples in batches of 64 (last one partial)" "[ $(rows "$TMP/s.csv") -eq 938 ]"
ok "steps numbered 1..938, epoch 1" "awk -F, 'NR>1 && (\$1 != NR-1 || \$2 != 1) {bad=1} END {exit bad}' $TMP/s.csv"
ok "metrics: one row, positive time and rate" "awk -F, 'NR==2 && \$5 > 0 && \$6 > 0 {n++} END {exit n != 1}' $TMP/m.csv"
# train_loss is the exact mean over samples: batch means weighted by size
ok "train_loss = exact per-sample mean of the step losses" "$PY - $TMP/s.csv $TMP/m.csv <<'P'
import sys, csv
steps = list(csv.DictReader(open(sys.argv[1])))
tot = sum(float(r['loss']) * (64 if i < len(steps) - 1 else 60000 - 64 * (len(steps) - 1))
          for i, r in enumerate(steps))
m = list(csv.DictReader(open(sys.argv[2])))[0]
sys.exit(not abs(tot / 60000 - float(m['train_loss'])) < 1e-6)
P"
ok "CSV floats carry 9 significant digits" "grep -qE '^1,[0-9]\.[0-9]{8}' $TMP/m.csv"

# ---- determinism ----------------------------------------------------------
run --epochs 1 --step-log "$TMP/s2.csv" --save "$TMP/p2.safetensors" >/dev/null 2>&1
ok "same seed: identical step log" "cmp -s $TMP/s.csv $TMP/s2.csv"
ok "same seed: identical parameters" "cmp -s $TMP/p1.safetensors $TMP/p2.safetensors"
run --max-steps 20 --seed 43 --step-log "$TMP/s3.csv" >/dev/null 2>&1
ok "other seed: other run" "! cmp -s <(head -21 $TMP/s.csv) $TMP/s3.csv"
run --max-steps 20 --seed=43 --step-log="$TMP/s4.csv" >/dev/null 2>&1
ok "--opt=VALUE is --opt VALUE" "cmp -s $TMP/s3.csv $TMP/s4.csv"
run --max-steps 20 --shuffle off --step-log "$TMP/o1.csv" >/dev/null 2>&1
ok "--shuffle off: file order differs from shuffled order" "! cmp -s <(head -21 $TMP/s.csv) $TMP/o1.csv"
# With lr 0 the weights never move, so step 1's loss must be PyTorch's
# mean cross entropy over the first 64 images of the file.
run --max-steps 1 --lr 0 --shuffle off --step-log "$TMP/o3.csv" --save "$TMP/o3.safetensors" >/dev/null 2>&1
ok "--shuffle off: step 1 is the file's first 64 samples (loss matches PyTorch)" "$PY - $TMP/o3.safetensors $DATA $TMP/o3.csv <<'P'
import sys, json, struct, gzip, numpy as np, torch, torch.nn.functional as F
raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
t = {k: torch.from_numpy(np.frombuffer(raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]],
     '<f4').reshape(v['shape']).copy()) for k, v in h.items() if k != '__metadata__'}
img = np.frombuffer(gzip.open(sys.argv[2] + '/train-images-idx3-ubyte.gz').read(), np.uint8, offset=16)[:64 * 784]
lab = np.frombuffer(gzip.open(sys.argv[2] + '/train-labels-idx1-ubyte.gz').read(), np.uint8, offset=8)[:64]
x = (torch.from_numpy(img.reshape(64, 784).astype(np.float32)) / 255 - 0.2860) / 0.3530
want = F.cross_entropy(x @ t['fc.weight'].T + t['fc.bias'], torch.from_numpy(lab.astype(np.int64))).item()
got = float(open(sys.argv[3]).read().split()[1].split(',')[2])
sys.exit(not abs(want - got) < 1e-5 * max(1, abs(want)))
P"
timeout 120 "$PROG" --data "$DATA" --threads 2 --max-steps 30 --step-log "$TMP/t2.csv" >/dev/null 2>&1
ok "--threads 2 trains (30 steps)" "[ $(rows "$TMP/t2.csv") -eq 30 ]"

# ---- initialization ---------------------------------------------------------
# PyTorch's nn.Linear default: weight and bias ~ U(-1/sqrt(fan_in), +1/sqrt(fan_in)).
ok "init: U(-1/sqrt(784), 1/sqrt(784)) for fc.weight and fc.bias" "$PY - $TMP/o3.safetensors <<'P'
import sys, json, struct, numpy as np
raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
t = {k: np.frombuffer(raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]], '<f4')
     for k, v in h.items() if k != '__metadata__'}
b = 1 / 28.0
w = t['fc.weight']
ok = (np.abs(w).max() <= b and np.abs(w).max() > 0.99 * b and abs(w.mean()) < 0.01 * b
      and abs(w.std() / (b / 3 ** 0.5) - 1) < 0.03 and np.abs(t['fc.bias']).max() <= b
      and len(set(t['fc.bias'].tolist())) == 10)
sys.exit(not ok)
P"

# ---- batching, --drop-last, --max-steps ------------------------------------
run --batch 7000 --step-log "$TMP/b.csv" >/dev/null 2>&1
ok "batch 7000: 9 steps (last partial kept)" "[ $(rows "$TMP/b.csv") -eq 9 ]"
run --batch 7000 --drop-last --step-log "$TMP/b.csv" --metrics "$TMP/bm.csv" >/dev/null 2>&1
ok "batch 7000 --drop-last: 8 steps" "[ $(rows "$TMP/b.csv") -eq 8 ]"
ok "--drop-last: images/s counts trained samples" "awk -F, 'NR==2 {exit !(\$6 > 0)}' $TMP/bm.csv"
run --batch 7000 --drop-last=off --step-log "$TMP/b.csv" >/dev/null 2>&1
ok "--drop-last=off: 9 steps" "[ $(rows "$TMP/b.csv") -eq 9 ]"
run --max-steps 940 --epochs 3 --step-log "$TMP/ms.csv" --metrics "$TMP/mm.csv" --save "$TMP/ms.safetensors" >"$TMP/ms.out" 2>&1
ok "--max-steps 940 over 3 epochs: 940 steps" "[ $(rows "$TMP/ms.csv") -eq 940 ]"
ok "--max-steps: stops in epoch 2, which is still evaluated and logged" "[ $(rows "$TMP/mm.csv") -eq 2 ] && tail -1 $TMP/ms.csv | grep -q '^940,2,'"
ok "--max-steps: still saves" "[ -s $TMP/ms.safetensors ]"
run --max-steps 938 --epochs 3 --metrics "$TMP/mm.csv" >/dev/null 2>&1
ok "--max-steps at an epoch boundary: no empty extra epoch" "[ $(rows "$TMP/mm.csv") -eq 1 ]"
run --batch 100000 --max-steps 1 --step-log "$TMP/big.csv" >/dev/null 2>&1
ok "batch larger than the data set: one step on all of it" "[ $(rows "$TMP/big.csv") -eq 1 ]"
run --batch 100000 --drop-last --metrics "$TMP/none.csv" >/dev/null 2>"$TMP/none.err"
ok "--drop-last with batch > samples: warns, trains nothing, exits 0" "grep -q 'no step' $TMP/none.err && grep -q '^1,nan,' $TMP/none.csv"

# ---- options --------------------------------------------------------------
expect_rc() { # NAME RC REGEX ARGS...
  local name=$1 want=$2 re=$3; shift 3
  "$PROG" "$@" >"$TMP/o.out" 2>"$TMP/o.err"; local rc=$?
  if [ $rc -eq "$want" ] && grep -qiE -- "$re" "$TMP/o.out" "$TMP/o.err"; then pass "$name"
  else fail "$name: rc $rc (want $want), $(head -c 300 "$TMP/o.err")"; fi
}
expect_rc "--help exits 0 with usage" 0 '^usage:' --help
expect_rc "--version exits 0" 0 'runtime' --version
expect_rc "unknown option: exit 2 + hint" 2 "unknown option '--frobnicate'.*|Try .*--help" --frobnicate
expect_rc "--batch 0: exit 2" 2 'batch' --batch 0
expect_rc "--batch -4: exit 2" 2 'batch' --batch -4
expect_rc "--batch=abc: exit 2" 2 "expected an integer, got 'abc'" --batch=abc
expect_rc "--epochs 1.5: exit 2" 2 'epochs' --epochs 1.5
expect_rc "--lr x: exit 2" 2 'lr' --lr x
expect_rc "--lr -0.1: exit 2" 2 'lr' --lr -0.1
expect_rc "--lr nan: exit 2" 2 'lr' --lr nan
# the model file's rules for numbers (compiler/train_block.c): decimal, and
# an lr float32 keeps (1e-50 was taken as 0)
expect_rc "--lr 1e-50: exit 2, as lr = 1e-50 in the model file" 2 'lr is too small for float32 \(1e-50; the smallest is 1.17549435e-38\)' --lr 1e-50
expect_rc "--lr 0x1p-3: exit 2, decimal only" 2 "lr: expected a non-negative finite decimal number, got '0x1p-3'" --lr 0x1p-3
expect_rc "--lr infinity: exit 2" 2 "got 'infinity'" --lr infinity
expect_rc "--temperature 0x1: exit 2" 2 "temperature: expected a non-negative number" --temperature 0x1 --generate 1 --load x.st
expect_rc "--comm-timeout 1e400: exit 2" 2 "comm-timeout: expected a positive number" --comm-timeout 1e400
expect_rc "--seed -1: exit 2" 2 'seed' --seed -1
expect_rc "--threads 0: exit 2" 2 'threads' --threads 0
expect_rc "--max-steps 0: exit 2" 2 'max-steps' --max-steps 0
expect_rc "--shuffle maybe: exit 2" 2 'shuffle' --shuffle maybe
expect_rc "missing value: exit 2" 2 'needs a value' --epochs
expect_rc "positional argument: exit 2" 2 'unexpected argument' train.net
expect_rc "--help=x: exit 2" 2 'takes no value' --help=x
expect_rc "--device cuda: exit 1" 1 'this program was compiled without CUDA kernels' --device cuda
expect_rc "--device tpu: exit 2" 2 'device' --device tpu
expect_rc "--device auto runs on cpu" 0 '^epoch 1/1' --device auto --threads 1 --max-steps 2 --data "$DATA"
expect_rc "usage errors print a hint" 2 "Try '.*--help'" --batch 0
expect_rc "unwritable --metrics: exit 1" 1 'no/such/dir/m.csv' --metrics "$TMP/no/such/dir/m.csv" --data "$DATA"
expect_rc "default --data is the model's" 0 '^epoch' --threads 1 --max-steps 2
expect_rc "a trailing / in --data gives clean paths" 1 "$TMP/train-images-idx3-ubyte: cannot open" --data "$TMP/"
if [ -w /dev/full ]; then
  "$PROG" --data "$DATA" --threads 1 --max-steps 1 >/dev/full 2>"$TMP/full.err"; rc=$?
  ok "stdout write error (/dev/full): exit 1" "[ $rc -eq 1 ] && grep -q 'standard output' $TMP/full.err"
fi

# ---- progress bar on a terminal ----------------------------------------------
if command -v script >/dev/null 2>&1; then
  script -qec "$PROG --data $DATA --threads 1 --max-steps 300 >/dev/null" "$TMP/tty.log" >/dev/null 2>&1
  ok "progress bar drawn when stderr is a terminal" "grep -q 'epoch 1/1 \[' $TMP/tty.log"
fi

[ $fails -eq 0 ] && echo "train: all passed" || echo "train: $fails FAILED"
[ $fails -eq 0 ]
