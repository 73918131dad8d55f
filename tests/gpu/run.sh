#!/usr/bin/env bash
# tests/gpu/run.sh: the one prepared script for a lent GPU machine.
#
#   here, first:      tests/gpu/prepare.sh      (writes build/gen and build/gpu-data)
#   on the device:    bash tests/gpu/run.sh     carry: build/gen build/gpu-data
#
# The GPU host has gcc, nvcc and PyTorch with CUDA, and no MPI, OpenBLAS,
# flex, bison or network. So everything is built here with plain cc: the
# compiler from the pre-generated parser (build/gen), the runtime with
# -DCDDP_NO_BLAS (rt_blas.c's own GEMM) and a libcddprt.ldflags without
# OpenBLAS, programs through tests/gpu/cc.sh (which also drops -lopenblas,
# for a cddpc that ignores ldflags), and zlib's headers replaced by
# tests/gpu/zshim when absent. Steps, each timed, each one row of the table printed LAST:
#   build    cddpc, libcddprt, SimpleNet (models/mnist.net), kernel_check for
#            SimpleNet, the ConvNet (fp32 and bf16) and the mma models
#   nvrtc    NVRTC compile of every kernel for the device's arch (no cache):
#            time; registers, local and shared memory per kernel in the log
#   kernels  every CUDA kernel of SimpleNet, the ConvNet and the attention
#            model (tests/torch/attn_net.net: batched products, reductions
#            over dimensions, tensor-chain kernels) and the masks model
#            (tests/torch/mask_net.net: masks, argmax, gathers and their
#            scatter-add gradients) and the recurrences
#            (tests/cuda/models/rnn_mix.net: LSTM, GRU and RNN kernels in
#            the designs the H100 model picks at batch 16;
#            models/lstm_rows.net: at batch 64) against its C kernel on
#            fresh random state with poisoned outputs
#            (tests/cuda/kc_core.c, tests/gpu/kc_gpu.c): max rel diff
#   kernels_mma  the same for tests/cuda/models/amp_bf16.net, amp_fp16.net and
#            convnet_bf16.net (the ConvNet at precision bf16): their GEMMs on
#            the tensor cores (mma.sync m16n8k16, sm_80 on)
#   train    SimpleNet, 2 epochs of Fashion-MNIST, --device cuda: test_acc
#            (>= 0.80) and the epoch times
#   parity   100 steps on cuda and on the cpu from the same seed: step losses
#            and final parameters (within 1e-3 relative; expect ~1e-6)
#   nccl     the GPU data-parallel path on this one GPU (CDDP_NCCL_FORCE=1:
#            a communicator of one rank, the bucket all-reduces captured on
#            the comm stream with their fork/join events): the same 100
#            steps as parity's cuda run (n/a without a libnccl.so.2)
#   convnet  the notes' ConvNet (models/mnist_convnet.net: Conv2d, SyncBatchNorm,
#            pooling) through the NCCL path (its SyncBatchNorm sums as NCCL
#            all-reduces in the step graph) against the cpu: 50 steps
#   predict  the GPU model's kernel times (cddpc --report --target, picked
#            from nvidia-smi's name) against the measured ones, per kernel,
#            for SimpleNet, the ConvNet and the LSTM classifier (its
#            recurrences' designs: tests/gpu/predict.sh; n/a on a
#            GPU outside the model's table)
#   speed    the timed epoch (device events) against the 15 ms target
#            (a target, reported, not a failure)
#   torch    PyTorch eager epochs with resident data on the same GPU (n/a
#            when unusable); torch.compile(mode="reduce-overhead") too with
#            CDDP_GPU_TORCH_COMPILE=1 (its compile takes minutes of GPU time,
#            outside the budget)
# A step that cannot run for want of a library (NCCL missing, or built for
# a newer CUDA major than the driver's) is n/a with the reason, not FAIL.
# Exit status non-zero when any check FAILs. Logs: build/gpu/logs/.
# Results: the device tool brings back at most 8 files, at most 2 folders
# down, so when OUT names a folder (the device tool's $OUT) exactly four
# are written to OUT/gpu/, after every step (a run cut short still leaves
# what it did): summary.txt (the table), predict.txt (predicted against
# measured, per kernel), torch.txt (the epoch against PyTorch's) and
# logs.tar.gz (every step's log and detail, the kernel tables, the CSVs
# and the run outputs).
# Budgets: all steps together CDDP_GPU_BUDGET seconds (default 300, so a
# rerun fits a 15-minute lease with the machine's start); each step its
# own limit (the run_step lines at the end), cut to what the budget has
# left. The build runs on every core.
# Options (environment): CDDP_GPU_DATA (default build/gpu-data), PYTHON (the
# one with torch; default: python3 or python, whichever imports torch),
# CDDP_GPU_BUDGET (seconds for all steps, default 300: GPU time is short and
# a rerun must fit), CDDP_GPU_TORCH_COMPILE=1, CDDP_GPU_ZSHIM=1 (use the
# zlib shim even where zlib.h exists: to rehearse it), CDDP_GPU_REUSE_BUILD=1
# (keep a build already in build/gpu: tests/gpu/rehearse.sh).
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
B=build/gpu
DATA=${CDDP_GPU_DATA:-build/gpu-data}
LOGS=$B/logs
export XDG_CACHE_HOME=$ROOT/$B/cache    # the kernel cache, kept inside the tree
PY=${PYTHON:-python3}
CC=${CC:-$(command -v cc || command -v gcc || echo cc)}
export CDDP_GPU_CC=$CC                  # what tests/gpu/cc.sh runs for cddpc
CF="-std=c11 -O3 -march=native -D_GNU_SOURCE"
JOBS=$(nproc 2>/dev/null || echo 4)
# NVRTC: the runtime searches the loader's path, then $CUDA_HOME (here: the
# toolkit of nvcc); as a last resort the NVRTC PyTorch's wheels bring (the
# runtime takes the newest one the driver supports).
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then
    CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    export CUDA_HOME
fi
for p in ${PYTHON:-} python3 python; do
    d=$($p - 2>/dev/null <<'P'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = sorted({os.path.dirname(f) for r in roots for n in ('libnvrtc.so*', 'libnccl.so*')
               for f in glob.glob(os.path.join(r, 'nvidia', '*', 'lib', n))})
print(':'.join(dirs))
P
) && [ -n "$d" ] && { export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d; break; }
done

# ---- the steps (each runs as: bash run.sh --step NAME, under a timeout) ------
# A step writes one line to $LOGS/NAME.detail and exits 0 (PASS), 1 (FAIL),
# 3 (n/a) or 4 (WARN).
detail() { echo "$*" >"$LOGS/$STEP.detail"; }

zlib_flags() {
    if [ -z "${CDDP_GPU_ZSHIM:-}" ] && printf '#include <zlib.h>\n' | $CC -E -x c - >/dev/null 2>&1; then
        ZINC="" ZLIB="-lz" ZWHICH=system
    else
        ZINC="-I$ROOT/tests/gpu/zshim" ZLIB="-l:libz.so.1" ZWHICH="shim (no zlib.h)"
    fi
}

# build_kc MODEL DIR OUT: kernel_check for MODEL (its C kernels emitted into DIR)
build_kc() {
    rm -rf "$2" && $B/cddpc "$1" --emit c "$2" || { detail "cddpc $1 --emit c failed"; return 1; }
    $CC $CF -fopenmp -Iruntime -Itests/cuda -I"$2" tests/gpu/kc_gpu.c tests/cuda/kc_core.c tests/cuda/kc_act16.c tests/cuda/kc_program.c \
        $B/libcddprt.a $ZLIB -lm -ldl -lpthread -o "$3" || { detail "kernel_check ($1) build failed"; return 1; }
}

step_build() {
    for f in parse.c parse.h lex.c; do
        if [ ! -s build/gen/$f ]; then
            detail "build/gen/$f missing: run tests/gpu/prepare.sh on the build machine and carry build/gen"
            return 1
        fi
    done
    [ -s "$DATA/train-images-idx3-ubyte.gz" ] || [ -s "$DATA/train-images-idx3-ubyte" ] || {
        detail "$DATA has no Fashion-MNIST: run tests/gpu/prepare.sh and carry build/gpu-data"
        return 1
    }
    zlib_flags
    echo "zlib: $ZWHICH" >"$LOGS/zlib"
    if [ "${CDDP_GPU_REUSE_BUILD:-}" = 1 ] && [ -x $B/cddpc ] && [ -s $B/libcddprt.a ] && [ -x $B/mnist ] &&
        [ -x $B/kernel_check ] && [ -x $B/kernel_check_bf16 ] && [ -x $B/kernel_check_fp16 ] &&
        [ -x $B/kernel_check_convnet ] && [ -x $B/kernel_check_convnet_bf16 ] && [ -x $B/kernel_check_attn ] && [ -x $B/kernel_check_mask ] &&
        [ -x $B/kernel_check_rnn ] && [ -x $B/kernel_check_lstm ]; then
        detail "the build in $B kept (CDDP_GPU_REUSE_BUILD=1)"
        return 0
    fi
    mkdir -p $B/obj $B/cobj $B/include $B/emit
    set -x
    rm -f $B/obj/*.o $B/cobj/*.o
    # every file at once, on every core: the compiler (which draws `cddpc
    # plot` with the runtime's SVG writer, as the Makefile links it), then
    # the runtime without BLAS, MPI or oneDNN
    local srcs=()
    for f in compiler/*.c; do
        case $f in compiler/lex.c | compiler/parse.c) ;; *) srcs+=("$f") ;; esac
    done
    printf '%s\n' "${srcs[@]}" build/gen/parse.c build/gen/lex.c runtime/rt_plot.c |
        xargs -P "$JOBS" -I{} sh -c '$0 -std=c11 -O2 -D_GNU_SOURCE -w -Icompiler -Iruntime -Ibuild/gen -c "$2" -o "$1/$(basename "${2%.c}").o"' \
            "$CC" $B/cobj {} &&
        $CC $B/cobj/*.o -lm -o $B/cddpc || { detail "compiler build failed (see logs/build.log)"; return 1; }
    printf '%s\n' runtime/rt_*.c |
        xargs -P "$JOBS" -I{} sh -c '$0 $1 -c "$3" -o "$2/$(basename "${3%.c}").o"' "$CC" \
            "$CF -Wall -Wextra -DCDDP_NO_BLAS -DCDDP_NO_MPI -DCDDP_NO_DNNL -fopenmp $ZINC -Iruntime" $B/obj {} ||
        { detail "runtime build failed (see logs/build.log)"; return 1; }
    rm -f $B/libcddprt.a
    ar rcs $B/libcddprt.a $B/obj/*.o && cp runtime/cddprt.h $B/include/ || { detail "ar failed"; return 1; }
    # what cddpc links programs with, beside libcddprt.a: no OpenBLAS here
    echo "$ZLIB -lm -lpthread -ldl" >$B/libcddprt.ldflags
    # SimpleNet, and kernel_check for it, the ConvNet (fp32 and bf16) and
    # the tensor-core GEMMs (precision bf16 and fp16: mma.sync m16n8k16),
    # side by side
    local pids=() p rc=0
    CDDPC_CC=$ROOT/tests/gpu/cc.sh CDDP_GPU_ZLIB=$ZLIB $B/cddpc models/mnist.net -o $B/mnist & pids+=($!)
    build_kc models/mnist.net $B/emit $B/kernel_check & pids+=($!)
    build_kc models/mnist_convnet.net $B/emit_convnet $B/kernel_check_convnet & pids+=($!)
    build_kc tests/cuda/models/convnet_bf16.net $B/emit_convnet_bf16 $B/kernel_check_convnet_bf16 & pids+=($!)
    build_kc tests/torch/attn_net.net $B/emit_attn $B/kernel_check_attn & pids+=($!)
    build_kc tests/torch/mask_net.net $B/emit_mask $B/kernel_check_mask & pids+=($!)
    build_kc tests/cuda/models/rnn_mix.net $B/emit_rnn $B/kernel_check_rnn & pids+=($!)
    build_kc models/lstm_rows.net $B/emit_lstm $B/kernel_check_lstm & pids+=($!)
    build_kc tests/cuda/models/amp_bf16.net $B/emit_bf16 $B/kernel_check_bf16 & pids+=($!)
    build_kc tests/cuda/models/amp_fp16.net $B/emit_fp16 $B/kernel_check_fp16 & pids+=($!)
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $rc -eq 0 ] && [ -x $B/mnist ] || { [ -s "$LOGS/build.detail" ] || detail "cddpc models/mnist.net failed (see logs/build.log)"; return 1; }
    set +x
    detail "cddpc, libcddprt (no BLAS), SimpleNet, kernel_check (SimpleNet, ConvNet fp32 and bf16, attention, masks and indices, bf16, fp16) on $JOBS cores; $(basename "$CC") $($CC -dumpversion); zlib $ZWHICH"
}

step_nvrtc() {
    $B/kernel_check --compile-only | tee $B/nvrtc.txt
    local rc=${PIPESTATUS[0]}
    detail "$(tail -1 $B/nvrtc.txt)"
    return $rc
}

step_kernels() {   # SimpleNet's, the ConvNet's, the attention model's, the masks', the recurrences', fp32
    local m rc=0 out="" tol
    for m in "" _convnet _attn _mask _rnn _lstm; do
        # a product of two activations sums 16 or 28 terms of up to 1: the
        # two sides round those apart by 1e-5 (tests/SUITE: cuda-emu-attn)
        tol=""
        [ "$m" = _attn ] || [ "$m" = _mask ] && tol="--tol 4e-5"
        $B/kernel_check$m $tol | tee $B/kernels$m.txt
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
        out="$out$(tail -1 $B/kernels$m.txt | sed 's/^kernels: //')  "
    done
    detail "$out"
    return $rc
}

# the GEMMs of precision bf16|fp16 on the tensor cores (the emulator's
# m16n8k16 is checked here against the instruction itself); --flips as
# the emulator tiers allow (the two sides round the same sums apart)
step_kernels_mma() {
    local p rc=0 out=""
    for p in bf16 fp16 convnet_bf16; do
        $B/kernel_check_$p --flips 0.001 | tee $B/kernels_$p.txt
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
        out="$out$p: $(tail -1 $B/kernels_$p.txt | sed 's/^kernels: //')  "
    done
    detail "$out"
    return $rc
}

step_train() {
    rm -f $B/train.csv
    $B/mnist --device cuda --data "$DATA" --epochs 2 --metrics $B/train.csv --step-log $B/train_steps.csv |
        tee $B/train.out
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ] || [ ! -s $B/train.csv ]; then
        detail "the run failed (status $rc): $(tail -2 "$LOGS/train.log" | tr '\n' ' ')"
        return 1
    fi
    grep -q 'device cuda:0' $B/train.out || { detail "did not run on the GPU: $(head -1 $B/train.out)"; return 1; }
    $PY - $B/train.csv "$LOGS/train.detail" <<'P'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ok = len(rows) == 2 and float(rows[-1]['test_acc']) >= 0.80
ms = ', '.join('epoch %s %.2f ms' % (r['epoch'], 1e3 * float(r['seconds'])) for r in rows)
open(sys.argv[2], 'w').write('test_acc %.4f (>= 0.80), train_loss %.4f; %s\n'
                             % (float(rows[-1]['test_acc']), float(rows[-1]['train_loss']), ms))
sys.exit(0 if ok else 1)
P
}

step_parity() {
    $B/mnist --device cuda --data "$DATA" --max-steps 100 --step-log $B/par_cuda.csv --save $B/par_cuda.st ||
        { detail "cuda run failed"; return 1; }
    $B/mnist --device cpu --data "$DATA" --max-steps 100 --step-log $B/par_cpu.csv --save $B/par_cpu.st ||
        { detail "cpu run failed"; return 1; }
    $PY tests/gpu/cmp_runs.py $B/par_cuda.csv $B/par_cpu.csv $B/par_cuda.st $B/par_cpu.st 1e-3 "cuda vs cpu" \
        >"$LOGS/parity.detail"
}

step_nccl() {
    [ -s $B/par_cuda.st ] || { detail "no parity run to compare with"; return 1; }
    CDDP_NCCL_FORCE=1 $B/mnist --device cuda --data "$DATA" --max-steps 100 --step-log $B/nccl.csv \
        --save $B/nccl.st >$B/nccl.out 2>&1
    local rc=$?
    cat $B/nccl.out
    if grep -q 'NCCL missing\|NCCL .* was built for CUDA' $B/nccl.out; then
        detail "n/a: $(grep -o 'NCCL missing[^)]*\|NCCL .* was built for CUDA [^(]*' $B/nccl.out | head -1)"
        return 3
    fi
    [ $rc -eq 0 ] && grep -q ', NCCL ' $B/nccl.out || { detail "the NCCL run failed (status $rc)"; return 1; }
    # not bitwise: the bias-gradient atomics sum in another order each run
    $PY tests/gpu/cmp_runs.py $B/nccl.csv $B/par_cuda.csv $B/nccl.st $B/par_cuda.st 1e-4 \
        "$(grep -o 'NCCL [0-9.]*' $B/nccl.out), 1 rank vs the plain cuda run" >"$LOGS/nccl.detail"
}

step_convnet() {
    zlib_flags
    CDDPC_CC=$ROOT/tests/gpu/cc.sh CDDP_GPU_ZLIB=$ZLIB $B/cddpc models/mnist_convnet.net \
        -o $B/convnet || { detail "cddpc models/mnist_convnet.net failed"; return 1; }
    local common="--data $DATA --max-steps 50 --lr 0.03" force=1
    grep -q ', NCCL ' $B/nccl.out 2>/dev/null || force=     # no usable NCCL: the plain device path
    CDDP_NCCL_FORCE=$force $B/convnet --device cuda $common --step-log $B/cn_cuda.csv --save $B/cn_cuda.st \
        >$B/cn_cuda.out 2>&1
    local rc=$?
    cat $B/cn_cuda.out
    [ $rc -eq 0 ] && grep -q 'device cuda:0' $B/cn_cuda.out || { detail "the cuda run failed (status $rc)"; return 1; }
    $B/convnet --device cpu $common --step-log $B/cn_cpu.csv --save $B/cn_cpu.st >$B/cn_cpu.out 2>&1 ||
        { detail "the cpu run failed"; return 1; }
    $PY tests/gpu/cmp_runs.py $B/cn_cuda.csv $B/cn_cpu.csv $B/cn_cuda.st $B/cn_cpu.st 1e-3 \
        "ConvNet$(grep -o ', NCCL [0-9.]*' $B/cn_cuda.out) vs cpu" >"$LOGS/convnet.detail"
}

step_torch() {   # torch eager | compile
    # the python that has torch: $PYTHON, else python3, else python
    local tpy=$PY p
    for p in ${PYTHON:-} python3 python; do
        if $p -c 'import torch' >/dev/null 2>&1; then tpy=$p; break; fi
    done
    $tpy tests/gpu/torch_epoch.py "$DATA" --mode "$1" >$B/torch_$1.json
    local rc=$?
    local out
    out=$(tail -1 $B/torch_$1.json)
    echo "$out"
    $PY - "$out" "$LOGS/$STEP.detail" <<'P'
import json, sys
try:
    r = json.loads(sys.argv[1])
except Exception:
    open(sys.argv[2], 'w').write('no result (see the log)\n'); sys.exit(1)
if 'na' in r:
    open(sys.argv[2], 'w').write('n/a: %s\n' % r['na']); sys.exit(3)
open(sys.argv[2], 'w').write('epoch %.2f ms (wall %.1f ms), test_acc %.4f, warm-up %.1f s; torch %s\n'
                             % (r['epoch_ms'], r['wall_ms'], r['test_acc'], r['warmup_s'], r['torch']))
P
    local st=$?
    [ $rc -ne 0 ] && [ $st -eq 0 ] && st=1
    return $st
}

step_predict() {
    zlib_flags
    CDDPC_CC=$ROOT/tests/gpu/cc.sh CDDP_GPU_ZLIB=$ZLIB bash tests/gpu/predict.sh $B/cddpc "$DATA" >$B/predict.txt 2>&1
    local rc=$?
    cat $B/predict.txt
    case $rc in
    0) detail "$(grep 'sum of kernels' $B/predict.txt | awk '{printf "%s%.1f us predicted, %.1f measured (%sx)", (NR > 1 ? "; " : ""), $4, $7, $9}' | sed 's/^/SimpleNet then ConvNet: /')" ;;
    77) detail "n/a: $(grep -m1 '^SKIP' $B/predict.txt | sed 's/^SKIP: //')"; return 3 ;;
    *) detail "predict.sh failed: $(tail -1 $B/predict.txt)"; return 1 ;;
    esac
}

if [ "${1:-}" = "--step" ]; then
    STEP=$2
    shift 2
    case $STEP in
        build) step_build ;;
        nvrtc) step_nvrtc ;;
        kernels) step_kernels ;;
        kernels_mma) step_kernels_mma ;;
        train) step_train ;;
        parity) step_parity ;;
        nccl) step_nccl ;;
        convnet) step_convnet ;;
        predict) step_predict ;;
        torch_eager) step_torch eager ;;
        torch_compile) step_torch compile ;;
        *) echo "unknown step $STEP" >&2; exit 2 ;;
    esac
    exit $?
fi

# ---- the driver -----------------------------------------------------------------
rm -rf $LOGS
mkdir -p $LOGS
T_START=$(date +%s)
rows=()
fails=0
# Every step has its own limit, and all of them together the budget: the
# script ends within BUDGET seconds (plus the table) whatever hangs.
BUDGET=${CDDP_GPU_BUDGET:-300}
# a step past its limit gets 10 s to die (timeout --kill-after), and the
# table and the copy to OUT follow: keep that much of the budget back
MARGIN=15
# OUT/gpu: what the device tool brings back, four files (see the header)
save_out() {
    [ -n "${OUT:-}" ] || return 0
    mkdir -p "$OUT/gpu" || return 0
    print_table >"$OUT/gpu/summary.txt"
    if [ -s $B/predict.txt ]; then cp -f $B/predict.txt "$OUT/gpu/predict.txt"
    else echo "predict: not run yet" >"$OUT/gpu/predict.txt"; fi
    torch_table >"$OUT/gpu/torch.txt"
    local extra
    extra=$(cd $B && ls -- *.csv *.txt *.out *.json 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086  # the file names are ours, without spaces
    tar -czf "$OUT/gpu/logs.tar.gz.part" -C $B logs $extra 2>/dev/null &&
        mv -f "$OUT/gpu/logs.tar.gz.part" "$OUT/gpu/logs.tar.gz"
}
# the epoch against PyTorch's on the same GPU, as speed_row found them
torch_table() {
    echo "==== SimpleNet's epoch against PyTorch's on this GPU (Fashion-MNIST, batch 64, data resident)"
    [ -n "${GPU_LINE:-}" ] && echo "$GPU_LINE"
    local r
    for r in cddp torch_eager torch_compile; do
        case $r in
        cddp) printf '%-16s %s\n' "cddp" "$(awk -F, 'NR == 3 {printf "epoch 2: %.2f ms", 1000 * $5}' $B/train.csv 2>/dev/null || true)" ;;
        *) printf '%-16s %s\n' "${r/_/ }" "$(cat "$LOGS/$r.detail" 2>/dev/null || echo "not run")" ;;
        esac
    done
}
print_table() {
    echo "==== tests/gpu/run.sh: $(( $(date +%s) - T_START )) s in all (budget $BUDGET s); logs in $LOGS/"
    [ -n "${GPU_LINE:-}" ] && echo "$GPU_LINE"
    printf '%-32s %-5s %7s  %s\n' "check" "" "s" "result"
    local r title st secs d
    for r in "${rows[@]}"; do
        IFS='|' read -r title st secs d <<<"$r"
        printf '%-32s %-5s %7s  %s\n' "$title" "$st" "$secs" "$d"
    done
}
run_step() {    # run_step NAME LIMIT_S TITLE [needs_build]
    local name=$1 limit=$2 title=$3
    LAST_RC=1
    if [ "${4:-}" = needs_build ] && [ "$BUILD_OK" -ne 1 ]; then
        rows+=("$title|FAIL|0.0|not run: the build failed")
        fails=$((fails + 1))
        return
    fi
    local left=$((T_START + BUDGET - MARGIN - $(date +%s)))
    # torch.compile, opted in, takes minutes: its own limit, outside the budget
    [ "$name" != torch_compile ] && [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        rows+=("$title|FAIL|0.0|not run: the ${BUDGET} s budget is spent")
        fails=$((fails + 1))
        return
    fi
    echo "==== $title"
    local t0 t1 rc st
    t0=$(date +%s.%N)
    timeout --kill-after=10 "$limit" bash "$0" --step "$name" 2>&1 | tee "$LOGS/$name.log" | tail -n 40
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    case $rc in
        0) st=PASS ;;
        3) st=n/a ;;
        4) st=WARN ;;
        124 | 137) st=FAIL
           echo "timed out after $limit s" >"$LOGS/$name.detail" ;;
        *) st=FAIL ;;
    esac
    [ "$st" = FAIL ] && fails=$((fails + 1))
    local d
    d=$(cat "$LOGS/$name.detail" 2>/dev/null || echo "(no detail; see $LOGS/$name.log)")
    rows+=("$title|$st|$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')|$d")
    LAST_RC=$rc
    save_out
}

GPU_LINE=""
if command -v nvidia-smi >/dev/null; then
    GPU_LINE=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /')
    echo "$GPU_LINE"
fi
BUILD_OK=1
run_step build 120 "build"
BUILD_OK=$([ "$LAST_RC" -eq 0 ] && echo 1 || echo 0)
run_step nvrtc 45 "NVRTC compile, device arch" needs_build
run_step kernels 60 "kernels vs C (SimpleNet, ConvNet)" needs_build
run_step kernels_mma 60 "bf16/fp16 mma vs C (+ConvNet bf16)" needs_build
run_step train 60 "train SimpleNet 2 epochs" needs_build
run_step parity 60 "cuda = cpu, 100 steps" needs_build
run_step nccl 45 "NCCL path, 1 GPU" needs_build
run_step convnet 60 "ConvNet + SyncBN, NCCL vs cpu" needs_build
run_step predict 60 "predicted vs measured kernels" needs_build
run_step torch_eager 60 "torch eager epoch"
if [ "${CDDP_GPU_TORCH_COMPILE:-}" = 1 ]; then
    run_step torch_compile 180 "torch.compile epoch"
else
    rows+=("torch.compile epoch|n/a|0.0|not run: opt-in (CDDP_GPU_TORCH_COMPILE=1; minutes of compile)")
fi

# the timed epoch against the target and the PyTorch epochs
speed_row() {
    local ms
    ms=$(awk -F, 'NR == 3 {printf "%.2f", 1000 * $5}' $B/train.csv 2>/dev/null)
    if [ -z "$ms" ]; then
        rows+=("epoch time vs 15 ms|FAIL|0.0|no timed epoch (the train run failed)")
        fails=$((fails + 1))
        return
    fi
    local te tc
    te=$(sed -n 's/^epoch \([0-9.]*\) ms.*/\1/p' "$LOGS/torch_eager.detail" 2>/dev/null)
    tc=$(sed -n 's/^epoch \([0-9.]*\) ms.*/\1/p' "$LOGS/torch_compile.detail" 2>/dev/null)
    local vs=""
    [ -n "$te" ] && vs="$vs; $(awk -v a="$ms" -v b="$te" 'BEGIN {printf "%.2fx torch eager", a / b}')"
    [ -n "$tc" ] && vs="$vs; $(awk -v a="$ms" -v b="$tc" 'BEGIN {printf "%.2fx torch.compile", a / b}')"
    local st
    st=$(awk -v a="$ms" 'BEGIN {print (a <= 15.0) ? "PASS" : "SLOW"}')
    rows+=("epoch time vs 15 ms|$st|0.0|cddp epoch 2: $ms ms (target <= 15 ms)$vs")
}
speed_row

save_out
echo
print_table
[ "$fails" -eq 0 ]
