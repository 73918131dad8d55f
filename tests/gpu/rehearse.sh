#!/bin/bash
# tests/gpu/rehearse.sh: tests/gpu/run.sh's build step, run here as the
# GPU host runs it (prepare.sh first; the runtime without BLAS, MPI or
# oneDNN; the zlib shim; programs through tests/gpu/cc.sh), then the two
# programs the later steps compile, and a check that none of them needs a
# library the GPU host lacks. A lent GPU is minutes of time: a build that
# breaks there (as one did when the runtime gained oneDNN GEMMs and the
# GPU build did not turn them off) must break here first.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=build/gpu
fails=0
no() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "PASS $*"; }

tests/gpu/prepare.sh >/dev/null || { no "tests/gpu/prepare.sh"; exit 1; }
rm -rf $B/logs && mkdir -p $B/logs
if CDDP_GPU_ZSHIM=1 bash tests/gpu/run.sh --step build >$B/logs/build.log 2>&1; then
    ok "run.sh --step build: $(cat $B/logs/build.detail)"
else
    no "run.sh --step build: $(cat $B/logs/build.detail 2>/dev/null)"
    tail -n 30 $B/logs/build.log
    exit 1
fi
# the whole script as the device runs it, here without a GPU: every GPU
# step fails or is n/a fast, and what comes back must fit the device tool
# (at most 8 files, at most 2 folders down) and hold the table's rows
rm -rf $B/out && mkdir -p $B/out
OUT=$PWD/$B/out CDDP_GPU_REUSE_BUILD=1 CDDP_LIBCUDA=$PWD/$B/no-libcuda.so.1 CDDP_GPU_BUDGET=240 \
    bash tests/gpu/run.sh >$B/logs/run_all.log 2>&1
nfiles=$(find $B/out -type f | wc -l)
deep=$(find $B/out -mindepth 4 | head -n 3 | tr '\n' ' ')
if [ "$nfiles" -ge 1 ] && [ "$nfiles" -le 8 ] && [ -z "$deep" ]; then
    ok "run.sh leaves $nfiles files in OUT, none over 2 folders down: $(cd $B/out && find . -type f | sort | tr '\n' ' ')"
else
    no "run.sh left $nfiles files in OUT (at most 8), deeper than 2 folders: ${deep:-none}"
fi
want="build|NVRTC compile, device arch|kernels vs C (SimpleNet, ConvNet)|bf16/fp16 mma vs C (+ConvNet bf16)|train SimpleNet 2 epochs|cuda = cpu, 100 steps|NCCL path, 1 GPU|ConvNet + SyncBN, NCCL vs cpu|predicted vs measured kernels|torch eager epoch|torch.compile epoch|epoch time vs 15 ms"
got=$(awk '/^gpu: / { next }
           NR > 1 && !/^check / { if (!match($0, / (PASS|FAIL|n\/a|WARN|SLOW) +[0-9.]+  /)) { print "BAD " $0; exit }
                                  t = substr($0, 1, RSTART - 1); sub(/ +$/, "", t); printf "%s%s", (n++ ? "|" : ""), t }' \
      $B/out/gpu/summary.txt 2>/dev/null)
if [ "$got" = "$want" ] && head -n 1 $B/out/gpu/summary.txt | grep -q '^==== tests/gpu/run.sh: [0-9]* s in all (budget 240 s)'; then
    ok "summary.txt: the header and one row a step, each PASS, FAIL, n/a, WARN or SLOW"
else
    no "summary.txt's rows: '$got', want '$want'"
    cat $B/out/gpu/summary.txt 2>/dev/null | head -n 20
fi
if tar -tzf $B/out/gpu/logs.tar.gz 2>/dev/null | grep -q '^logs/train.log$' &&
    grep -q '^build  *PASS' $B/out/gpu/summary.txt && [ -s $B/out/gpu/torch.txt ] && [ -s $B/out/gpu/predict.txt ]; then
    ok "logs.tar.gz holds every step's log; torch.txt and predict.txt written"
else
    no "logs.tar.gz, torch.txt or predict.txt incomplete"
fi
# step_convnet compiles the notes' ConvNet the same way
if CDDPC_CC=$PWD/tests/gpu/cc.sh CDDP_GPU_ZLIB=-l:libz.so.1 $B/cddpc models/mnist_convnet.net -o $B/convnet \
    >$B/logs/convnet.log 2>&1; then
    ok "models/mnist_convnet.net compiles with the GPU host's runtime"
else
    no "models/mnist_convnet.net with the GPU host's runtime"
    tail -n 30 $B/logs/convnet.log
fi
# nothing the GPU host lacks: no OpenBLAS, MPI or oneDNN symbol or library
for p in $B/mnist $B/convnet $B/kernel_check $B/kernel_check_convnet $B/kernel_check_convnet_bf16 $B/kernel_check_attn $B/kernel_check_mask $B/kernel_check_bf16 $B/kernel_check_fp16; do
    [ -x "$p" ] || { no "$p was not built"; continue; }
    bad=$(nm -u "$p" 2>/dev/null | grep -E ' (dnnl_|MPI_|ompi_|cblas_|openblas_)' | head -n 3 | tr -s ' \n' ' ')
    libs=$(ldd "$p" 2>/dev/null | grep -oE 'lib(dnnl|openblas|blas|mpi)[^ ]*' | tr '\n' ' ')
    if [ -z "$bad$libs" ]; then
        ok "$p needs no OpenBLAS, MPI or oneDNN"
    else
        no "$p needs what the GPU host lacks: $bad$libs"
    fi
done
# the program runs (on the CPU here) with that runtime: one short step
if $B/mnist --device cpu --data build/gpu-data --max-steps 2 >$B/logs/run.log 2>&1; then
    ok "$B/mnist trains 2 steps on the cpu"
else
    no "$B/mnist --max-steps 2"
    tail -n 20 $B/logs/run.log
fi
# deflated .npz members through the shim's z_stream (digits.npz is
# np.savez_compressed): the same layout as the library's, or inflate fails
if [ -s data/sklearn/digits.npz ]; then
    if CDDPC_CC=$PWD/tests/gpu/cc.sh CDDP_GPU_ZLIB=-l:libz.so.1 $B/cddpc models/digits.net -o $B/digits \
        >$B/logs/digits.log 2>&1 && $B/digits --device cpu --max-steps 2 >>$B/logs/digits.log 2>&1; then
        ok "models/digits.net reads its deflated .npz through the shim and trains 2 steps"
    else
        no "models/digits.net with the GPU host's runtime"
        tail -n 20 $B/logs/digits.log
    fi
else
    echo "SKIP: the .npz part: data/sklearn/digits.npz missing (scripts/data.sh lays it out)"
    [ $fails = 0 ] || exit 1
    exit 77
fi
[ $fails = 0 ]
