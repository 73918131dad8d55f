#!/bin/sh
# tests/cuda/mutants.sh: kernel_check must reject broken CUDA kernels. Each
# mutant is the emitted all.cu of tests/cuda/models/odd.net (then of
# tests/cuda/models/conv.net, for the image kernels, and of tanh.net,
# acts.net, gate.net and smooth.net for the activations, the arithmetic
# and label smoothing, settings.net, amsgrad.net and adagrad.net for
# RMSprop, amsgrad and Adagrad,
# tests/ddp/syncbn.net for the channel passes split over blocks,
# loss_*.net for the losses of float targets, norm.net for the row
# normalizations, tests/ir/pool_chain.net for rule pool-chain,
# tests/torch/attn_net.net for the ops over tensors of any rank,
# tests/torch/mask_net.net for the integer and boolean ones,
# tests/torch/pos_net.net for a loss over positions, lm_tokmlp.net for
# the embeddings,
# models/bmm_tiles.net for the products' tiles, models/attn_causal.net,
# attn_masks.net and attn_odd.net for scaled dot-product attention,
# rnn_mix.net for the recurrences, tables.net for torch.tensor's
# constants and a loss block's fp16 seed; odd.net
# also with rule row-tail off, for the row kernel) with one
# edit (sed);
# kernel_check has to fail on every one of them (and pass on the unedited
# source, which kernel_check.sh's own test runs).
# Usage: tests/cuda/mutants.sh CDDPC [--part K/M]
#   --part K/M runs every M-th mutant from the K-th (the slow tier runs M
#   entries, one a core).
# The unmutated half of each build (cddpc's two emissions and the C
# kernels' object) depends only on the model and the flags: kernel_check
# keeps it in KC_BASE and reuses it, so a mutant costs one compile of the
# mutated CUDA source, a link and a run.
set -u
. "$(dirname "$0")/toolkit.sh"
[ $# -ge 1 ] || { echo "usage: $0 CDDPC [--part K/M]" >&2; exit 2; }
CDDPC=$1
PART=1 PARTS=1
if [ "${2:-}" = --part ]; then
    PART=${3%/*} PARTS=${3#*/}
    [ "$PART" -ge 1 ] 2>/dev/null && [ "$PART" -le "$PARTS" ] || { echo "$0: --part K/M, 1 <= K <= M" >&2; exit 2; }
fi
export KC_BASE="${TMPDIR:-/tmp}/kc_base.$$"
index=0
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=$HERE/models/odd.net
caught=0 missed=0
check() { # description, sed script, kernel_check options
    what=$1 script=$2
    shift 2
    index=$((index + 1))
    [ $(( (index - 1) % PARTS )) -eq $((PART - 1)) ] || return 0
    out=$(KC_WORKDIR="${TMPDIR:-/tmp}/kc_mutant.$$" KC_MUTATE="$script" \
          "$HERE/kernel_check.sh" "$CDDPC" "$MODEL" "$@" 2>&1)
    rc=$?
    # a sed that no longer matches the emitted source tests nothing: the
    # mutant itself is broken and must be brought up to date
    if printf '%s\n' "$out" | grep -q 'KC_MUTATE changed nothing'; then
        missed=$((missed + 1))
        printf 'MISSED  %s (the mutant no longer applies: %s)\n' "$what" "$script"
        return
    fi
    # under SAN=1 a write out of bounds is stopped by ASan before the
    # comparison: that rejects the mutant too
    if [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q 'MISMATCH\|FAIL\|ERROR: AddressSanitizer'; then
        caught=$((caught + 1))
        printf 'caught  %-58s %s\n' "$what" "$(printf '%s\n' "$out" | grep -m1 'MISMATCH\|FAIL\|ERROR: AddressSanitizer' | cut -c1-110)"
    else
        missed=$((missed + 1))
        printf 'MISSED  %s (rc %d)\n' "$what" "$rc"
        printf '%s\n' "$out" | tail -n 5 | sed 's/^/    /'
    fi
}
Q='--sizes 19:19:0,64:37:3 --orders 1 --plan train'
check 'no __syncthreads at all (race on the shared tiles)' 's/__syncthreads();//' $Q
check 'one __syncthreads less (second barrier of each K step)' '/acc\[r\]\[c\] += a\[r\] \* bb\[c\];/{n;n;s/__syncthreads();//;}' --sizes 64:37:3 --orders 2 --plan train
check 'epilogue writes one row past M' 's/if (i >= M || j >= N)/if (i > M || j >= N)/' $Q
# beta = 0 done as 0 * C: on a GPU the output buffer holds garbage, and
# 0 * NaN is NaN; only the NaN-poisoned outputs show it (0 * a random
# start value is 0)
check 'GEMM epilogue reads its output (0 * y + v)' 's/b10\[i \* C + j\] = v10;/b10[i * C + j] = 0.0f * b10[i * C + j] + v10;/' $Q
check 'bias gradient stored, not accumulated' 's/atomicAdd(&\(b[0-9]*\)\[j\], g);/\1[j] = g;/' $Q
check 'mean scaled by nmax instead of n' 's|1.0f / (float)n|1.0f / (float)e->nmax|' $Q
# the row kernel (a warp per sample) runs only with rule row-tail off:
# odd.net's 13 logits are otherwise the tail of their GEMM's kernel
export KC_CDDPC_FLAGS=--fusion=all,-row-tail
check 'softmax rows overlap (7 rows per block of 8 warps)' 's/blockIdx.x \* 8 + (threadIdx.x >> 5)/blockIdx.x * 7 + (threadIdx.x >> 5)/' $Q
check 'warp reduction stops at 8 lanes' 's|for (int o = RL / 2; o > 0; o >>= 1)|for (int o = 4; o > 0; o >>= 1)|' $Q
unset KC_CDDPC_FLAGS
# rule row-tail (emit_cuda.c emit_row_tail): the row ops after the GEMM's
# epilogue, in the block that stored the tile's rows, 256 / tile rows
# lanes a row (odd.net's fc3: 16x64 tiles, 16 lanes)
check 'row tail: lane groups twice as wide (half of the tile'"'"'s rows)' 's/const int RL = \([0-9]*\);/const int RL = 2 * \1;/' $Q
check 'row tail: shuffles reach into the next row'"'"'s lanes' 's|for (int o = RL / 2; o > 0; o >>= 1)|for (int o = RL; o > 0; o >>= 1)|' $Q
check 'row tail: the batch'"'"'s last row left out' 's/const int live = ri < M;/const int live = ri < M - 1;/' $Q
# thinner tiles (sched_gpu.c gemm_choose): odd.net's small GEMMs take
# 16x64 tiles, its fc1 weight gradient 32x64 tiles split over the batch
check '16-row tiles placed 64 rows apart' 's/row0 = (int64_t)by \* 16,/row0 = (int64_t)by * 64,/' $Q
check 'a 32-row tile loads only its first 16 rows of A' 's/for (int l = threadIdx.x; l < 512; l += 256)/for (int l = threadIdx.x; l < 256; l += 256)/' $Q
check 'optimizer misses the last parameter floats' 's/k < 32656;/k < 32640;/' $Q
# a small term off by 10%: |error| < 1e-5 absolute everywhere, so only the
# bound relative to each slab's own scale sees it
check 'SGD weight decay 10% short' 's/d += 0.0001f \* w\[k\];/d += 0.00009f * w[k];/' $Q
check 'momentum buffer not updated on the first step' 's/mb\[k\] = first ? d :/mb[k] = first ? mb[k] :/' $Q
check 'early return for the whole block even when row0 < M' 's/if (row0 >= M || col0 >= N)/if (row0 + 64 > M || col0 >= N)/' $Q
# rule data-prologue (emit_cuda.c emit_matmul): odd.net's first GEMM
# gathers the batch as it loads its left operand tiles
check 'labels read from idx[0] for every row' 's/b1\[i\] = ((const int32_t \*)e->y)\[e->idx\[i\]\];/b1[i] = ((const int32_t *)e->y)[e->idx[0]];/' $Q
check 'data prologue: the gathered images stored by no column of tiles' 's/if (bx == 0)$/if (bx == gx)/' $Q
check 'data prologue: sample i read instead of the sampler'"'"'s idx[i]' 's/a = rt_sample(e, (int64_t)e->idx\[gi\], gk);/a = rt_sample(e, gi, gk);/' $Q
# split-K (emit_cuda.c emit_matmul): odd.net's first GEMM runs K = 784 in
# 10 slices; the tile's last block sums the partials
check 'split-K sum leaves out slice 0' 's/for (int z = 0; z < \([0-9]*\); z++)/for (int z = 1; z < \1; z++)/' $Q
check 'split-K: the first block to arrive sums (counter compared with 0)' 's/, 1u) == [0-9]*u;/, 1u) == 0u;/' $Q
check 'split-K slices one k-slice short (a gap between slices)' 's/klo + kts < K ? klo + kts : K/klo + kts - 16 < K ? klo + kts - 16 : K/' $Q
# mnist.net's: 8 column tiles, so tiles sharing a counter can be seen
MODEL=$HERE/../../models/mnist.net
check 'split-K: one arrival counter for a whole row of tiles' 's/ctr\[by \* gx + bx\]/ctr[by]/' $Q
# kaggle_mlp.net's weight gradients split over the batch's rows, their
# partials in fix (SimpleNet's no longer pay for it on the GPU model)
MODEL=$HERE/../../models/kaggle_mlp.net
K='--sizes 19:13:0,33:33:2 --orders 1 --plan train'
check 'weight gradient split-K: slices of n / S rows, not whole k-slices' 's/const int64_t kts = ((K + 15) \/ 16 + \([0-9]*\)) \/ \([0-9]*\) \* 16;/const int64_t kts = K \/ \2;/' $K
check 'weight gradient split-K: partials at fix[0], over the counters' 's/float \*const ws = e->fix + [0-9]*;/float *const ws = e->fix;/' $K
# sibling pairs (emit_cuda_pair): a layer's dx and dW GEMMs as one launch (mnist.net's)
MODEL=$HERE/../../models/mnist.net
check 'sibling pair: the first part takes the second'"'"'s first block' 's/if (blockIdx.x < ax) {/if (blockIdx.x <= ax) {/' $Q
check 'sibling pair: the second part at the pair'"'"'s coordinates, not its own' 's/_tile(e, blockIdx.x - ax,/_tile(e, blockIdx.x,/' $Q
MODEL=$HERE/models/odd.net
# the image kernels: convolution, batch norm, pooling
MODEL=$HERE/models/conv.net
C='--sizes 9:7:0 --orders 1'
check 'conv2d_dx ignores the stride (gathers from every row)' 's/if (hh < 0 || hh % SH != 0 || hh \/ SH >= OH)/if (hh < 0 || hh \/ SH >= OH)/' $C --plan train
check 'conv2d_dw reads the first group'"'"'s input channels' 's/const int64_t ch = o \/ OG \* CG + cl;/const int64_t ch = cl;/' $C --plan train
check 'conv2d forward window one column short' 's/for (int64_t kj = 0; kj < KW; kj++) {/for (int64_t kj = 1; kj < KW; kj++) {/' $C --plan eval
check 'block reduction one level short (half the threads lost)' 's/for (int half = 128; half > 0; half >>= 1)/for (int half = 64; half > 0; half >>= 1)/' $C --plan train
check 'running variance not made unbiased' 's/ \* unbias)/)/' $C --plan train
check 'eval batch norm halves the running variance' 's/b\([0-9]*\)\[C + c\] = b\([0-9]*\)\[c\];/b\1[C + c] = 0.5f * b\2[c];/' $C --plan eval
check 'avgpool divides by one more' 's|/ (float)(KH \* KW)|/ (float)(KH * KW + 1)|' $C --plan train
check 'maxpool_dx sends every window'"'"'s gradient to its first element' 's/if (am == h \* W + w)/if (am == h * W + w || 1)/' $C --plan train
# the fused epilogues: the convolution's bias, and the batch-norm pass's
# channel results (fuse.c: conv_bias_epilogue, chan_pass_result)
check 'conv2d drops its fused bias' 's/b\([0-9]*\)\[t\] = acc + b[0-9]*\[o\];/b\1[t] = acc;/' $C --plan train
check 'fused sum of dx adds one per element (the sum is ~0 after batch norm)' 's/po += v;/po += v + 1.0f;/' $C --plan train
check 'fused running update never counts the batch' 's/if (c == 0)/if (c < 0)/' $C --plan train
# batch norm's passes hand on means (mean_chan, bn_sqdev), and on one rank
# bn_sqdev's last block writes the statistics (rule channel-pass)
check 'mean_chan stores the sum, not the mean' 's/b\([0-9]*\)\[c\] = (float)((double)s \/ (double)M);/b\1[c] = s;/' $C --plan train
check 'fused statistics: half the variance' 's/b\([0-9]*\)\[C + c\] = qm;/b\1[C + c] = 0.5f * qm;/' $C --plan train
# dropout: the CUDA masks must be the C ones (kernel_check runs rank 1, seed 3407)
MODEL=$HERE/models/dropout.net
D='--sizes 19:19:0,64:37:3 --orders 1 --plan train'
check 'dropout counter off by one' 's/cddp_drop_u(dk\([0-9]*\), i \* C + j)/cddp_drop_u(dk\1, i * C + j + 1)/' $D
check 'dropout stream ignores the rank' 's/cddp_drop_key(e->seed, e->rank,/cddp_drop_key(e->seed, 0,/' $D
check 'dropout stream ignores the step' 's/(long long)e->step, /(long long)0, /' $D
check 'dropout hash on the GPU differs from the C one' 's/z ^= z >> 27;/z ^= z >> 26;/' $D
check 'dropout threshold 0.31 instead of p = 0.3' 's/>= 0.300000012f/>= 0.310000012f/' $D
# mixed precision: the CUDA kernels must round and scale as the C ones
MODEL=$HERE/models/amp_bf16.net
A='--sizes 19:19:0 --orders 1 --flips 0.001'
check 'bf16: GEMM result not rounded' 's/rt_round_bf16(acc\[r\]\[c\])/(acc[r][c])/' $A --plan train
# 16-bit activations (rt_bf16s / rt_fp16s): the layout and the conversions
check 'bf16: a 16-bit activation stored as floats by its kernel' '0,/rt_bf16s \*const \(b[0-9]*\) = ((rt_bf16s \*)/s//float *const \1 = ((float *)/' $A --plan train
# every GEMM in 64x64 tiles, the tensor cores' (the model's choice gives
# most of these small GEMMs thinner ones, on the FMA loop): then also a
# row tail of 4 lanes a row, the tail's rows stored by other warps than
# read them
export KC_CDDPC_FLAGS=--gpu-tile=64
check 'row tail: no barrier between the stored rows and the tail' 's|__syncthreads();    /\* the rows this block stored|/* the rows this block stored|' --sizes 19:19:0,64:37:3 --orders 1 --flips 0.001 --plan train
check 'bf16: weights read unrounded by the GEMM' 's/Bs\[kk\]\[c\] = gj < N \&\& gk < K ? rt_round_bf16(\(b[0-9]*\[[^]]*\]\))/Bs[kk][c] = gj < N \&\& gk < K ? (\1)/' $A --plan eval
# the tensor-core k step (RT_MMA, the emulator's m16n8k16)
check 'bf16 mma: A registers 1 and 2 swapped (rows 8..15 read at k 8..15)' 's/fa\[1\] = rt_pack_bf16x2(As\[t2\]\[wr + 8\], As\[t2 + 1\]\[wr + 8\]);/fa[1] = rt_pack_bf16x2(As[t2 + 8][wr], As[t2 + 9][wr]);/' $A --plan train
check 'bf16 mma: B fragment halves swapped (k 2t+1 before 2t)' 's/fb\[0\] = rt_pack_bf16x2(Bs\[t2\]\[wc + 8 \* j\], Bs\[t2 + 1\]\[wc + 8 \* j\]);/fb[0] = rt_pack_bf16x2(Bs[t2 + 1][wc + 8 * j], Bs[t2][wc + 8 * j]);/' $A --plan train
check 'bf16 mma: accumulator rows g+8 stored at column 2t+1' 's/Cs\[wr + 8\]\[wc + 8 \* j\] = d\[j\]\[2\];/Cs[wr + 8][wc + 8 * j] = d[j][3];/' $A --plan train
check 'bf16 mma: the last 16 columns of the tile left out (3 n8 tiles)' 's/for (int j = 0; j < 4; j++) {\(.*\)$/for (int j = 0; j < 3; j++) {\1/' $A --plan train
MODEL=$HERE/models/amp_fp16.net
check 'fp16 mma: operands packed as bf16' 's/rt_pack_fp16x2(/rt_pack_bf16x2(/g' $A --plan train
# the thinner tiles' warp layouts: 32x64 (8 warps of 16x16), 16x64 (16x8)
MODEL=$HERE/models/amp_bf16.net
export KC_CDDPC_FLAGS=--gpu-tile=32
check 'bf16 mma 32x64: the warps 8 columns apart instead of 16' 's/wc = (w \/ 2) \* 16 + g;/wc = (w \/ 2) * 8 + g;/' $A --plan train
export KC_CDDPC_FLAGS=--gpu-tile=16
check 'bf16 mma 16x64: the accumulators gathered to column 0 of their pair' 's/wr = (w % 1) \* 16 + g, wc = (w \/ 1) \* 8 + t2;/wr = (w % 1) * 16 + g, wc = (w \/ 1) * 8;/' $A --plan train
MODEL=$HERE/models/amp_fp16.net
unset KC_CDDPC_FLAGS
check 'fp16: the loss gradient not scaled by S' 's/ \* e->scale;/;/' $A --plan train
check 'fp16: the optimizer does not unscale' 's/g\[k\] \* inv_scale/g[k]/' $A --plan train
check 'fp16: rounded to bf16 instead' 's/rt_round_fp16(acc)/rt_round_bf16(acc)/' $A --plan eval
check 'fp16: a 16-bit activation read with its exponent one too large' 's/(ex + 112u) << 23/(ex + 113u) << 23/' $A --plan train
check 'fp16: a 16-bit activation stored without its sign' 's/h = (unsigned short)(((u >> 16) \& 0x8000u) | v);/h = (unsigned short)v;/' $A --plan train
# a channel pass over several blocks a channel (SyncBatchNorm's sums):
# partials in fix, the channel's last block adds them
MODEL=$HERE/../ddp/syncbn.net
B='--sizes 19:19:0 --orders 1 --plan train'
check 'channel split: the first block to arrive adds the partials' 's/1u) == \([0-9]*\)u;   \/\* zeroed each step \*\//1u) == 0u;   \/* zeroed each step *\//' $B
check 'channel split: each slice one element short' 's/T1 = T0 + per < M ? T0 + per : M;/T1 = T0 + per < M ? T0 + per - 1 : M;/' $B
check 'channel split: every channel'"'"'s partials in channel 0'"'"'s' 's/ws\[(c \* \([0-9]*\) + blockIdx.y)/ws[(0 * \1 + blockIdx.y)/' $B
MODEL=$HERE/models/tanh.net
T='--sizes 19:19:0,64:37:3 --orders 1 --plan train'
check 'tanh derivative 1 - y instead of 1 - y^2' 's/(1\.0f - \(a[0-9]*_[0-9]\) \* \1)/(1.0f - \1)/' $T
check 'tanh left out of a GEMM epilogue (the identity)' '0,/= tanhf(\(v[0-9]*\));/s//= (\1);/' $T
MODEL=$HERE/models/acts.net
check 'gelu derivative without its x phi(x) term' 's/ + a[0-9]*_[0-9] \* 0\.39894228040143268f \* expf([^)]*)//' $T
check 'leaky_relu slope 0.1 taken as the default 0.01' 's/ : \(v[0-9]*\) \* 0\.100000001f;/ : \1 * 0.01f;/' $T
check 'elu derivative alpha without exp(x)' 's/ \* 0\.699999988f \* expf(a[0-9]*_[0-9])/ * 0.699999988f/' $T
check 'hardtanh gradient not cut outside [min, max]' 's/<= -0\.0500000007f || /<= -0.0500000007f \&\& /' $T
MODEL=$HERE/models/gate.net
check '1 - g with its sign lost (g + 1)' 's/\* -1\.0f + 1\.0f;/* 1.0f + 1.0f;/' $T
check 'h / 3 as h * 0.3 (not divided as torch divides)' '0,/\(a[0-9]*_[0-9]\) \/ 3\.0f;/s//\1 * 0.3f;/' $T
MODEL=$HERE/models/smooth.net
check 'label smoothing: the gradient without its e / C' 's| - 0\.150000006f / (float)C) \* scale| - 0.0f) * scale|' $T
check 'label smoothing: the row sum of logits not summed over the warp' 's|sx += __shfl_xor_sync(0xffffffffu, sx, o);|;|' $T
MODEL=$HERE/models/settings.net
check 'rmsprop centered: grad_avg not subtracted' 's/sqrtf(sa\[k\] - __fmul_rn(ga\[k\], ga\[k\]))/sqrtf(sa[k])/' $T
check 'rmsprop: momentum buffer without its decay' 's/mb\[k\] = mb\[k\] \* 0\.5f + d \/ avg;/mb[k] = d \/ avg;/' $T
MODEL=$HERE/models/amsgrad.net
check 'amsgrad: the maximum not kept (exp_avg_sq used)' 's/(sqrtf(m3\[k\])/(sqrtf(m2[k])/' $T
MODEL=$HERE/models/adagrad.net
check 'adagrad: initial_accumulator_value left out' 's/sm\[k\] = (first ? 0.5f : sm\[k\]) + d \* d;/sm[k] = sm[k] + d * d;/' $T
check 'adagrad: the lr not decayed with the step' 's/(1.0 + (double)e->step \* /(1.0 + 0.0 * /' $T
check 'adagrad: eps inside the square root' 's/(sqrtf(sm\[k\]) + 1e-06f)/(sqrtf(sm[k] + 1e-06f))/' $T
MODEL=$HERE/models/loss_mse.net
check 'mse: a row of 37 outputs not summed over the warp' 's|\(v[0-9]*\) += __shfl_xor_sync(0xffffffffu, v[0-9]*, o);|;|' $T
check 'mse: the mean gradient over n alone (torch divides by n K)' 's|\(scale[0-9]*\) = 1\.0f / ((float)n \* (float)C)|\1 = 1.0f / (float)n|' $T
MODEL=$HERE/models/loss_bce.net
check 'BCE: the gradient without pos_weight' 's|- w[0-9]*\[j\] \* t\[j\]) \* \(scale[0-9]*\)|- t[j]) * \1|' $T
E='--sizes 19:19:0,64:37:3 --orders 1 --plan eval'
check 'multi-label metric: false positives counted as true ones' 's|atomicAdd(&\(b[0-9]*\)\[C + j\], 1\.0);|atomicAdd(\&\1[j], 1.0);|' $E
MODEL=$HERE/models/loss_mse.net
check 'regression metric: absolute errors not summed over the warp' 's|ae[0-9]* += __shfl_xor_sync(0xffffffffu, ae[0-9]*, o);|;|' $E
MODEL=$HERE/models/loss_huber.net
check 'huber: the gradient not clamped at delta' 's|x\[j\] - t\[j\] >= 0\.600000024f ? 0\.600000024f :|x[j] - t[j] >= 0.600000024f ? x[j] - t[j] :|' $T
MODEL=$HERE/models/loss_smooth_l1.net
check 'smooth_l1: the quadratic part not divided by beta' 's|: (x\[j\] - t\[j\]) / 0\.400000006f) \* \(scale[0-9]*\)|: (x[j] - t[j])) * \1|' $T
MODEL=$HERE/models/loss_l1.net
check 'l1: the loss without its absolute value' 's|\(v[0-9]*\) += fabsf(x\[j\] - t\[j\]);|\1 += (x[j] - t[j]);|' $T
MODEL=$HERE/models/loss_weight.net
check 'class weights: the batch weight sum not summed over the warp' 's|sw += __shfl_xor_sync(0xffffffffu, sw, o);|;|' $T
check 'class weights: the smoothing term over unweighted logits' 's|swx += cw\[j\] \* x\[j\];|swx += x[j];|' $T
# the row normalizations (emit_norm.c): softmax, log_softmax, layer_norm
MODEL=$HERE/models/norm.net
check 'layer_norm variance unbiased (C - 1)' 's|q / (float)C + |q / (float)(C - 1) + |' $T
check 'layer_norm_dx without its xhat mean(dy xhat) term' 's| - (b\[j\] - mean) \* rstd \* (sgx / (float)C))|)|' $T
check 'softmax_grad without the row sum of dy y' 's|y\[j\] = b\[j\] \* (a\[j\] - s);|y[j] = b[j] * (a[j] - 0.0f * s);|' $T
check 'log_softmax_grad without its softmax term' 's|y\[j\] = a\[j\] - expf(b\[j\]) \* s;|y[j] = a[j] - 0.0f * s;|' $T
check 'log_softmax forgets the row maximum in lse' 's|const float lse = mx + logf(se);|const float lse = logf(se);|' $T
check 'row kernels skip the columns past a block (LayerNorm(300))' 's|for (int64_t j = threadIdx.x; j < C; j += blockDim.x)|for (int64_t j = threadIdx.x; j < C \&\& j < 256; j += blockDim.x)|' $T
check 'cat reads its second operand one column late' 's/b\[j - CA\]/b[j - CA + 1]/' $T
check 'slice (cat'"'"'s gradient) takes the columns one further' 's/OFF = \([0-9]*\),/OFF = \1 + 1,/' $T
check 'layer_norm variance sum loses the upper half block' 's|red_q\[threadIdx.x\] += red_q\[threadIdx.x + half\];|red_q[threadIdx.x] += half < 128 ? red_q[threadIdx.x + half] : 0.0f;|' $T
# rule pool-chain (emit_nchw.c): a pooling with its chain, window by window
MODEL=$HERE/../ir/pool_chain.net
check 'pool-chain: max pool keeps the smaller element' 's/mx = (v > mx) | (v != v) ? v : mx;/mx = (v < mx) | (v != v) ? v : mx;/' $T
check 'pool-chain: max pool gradient leaks to the window'"'"'s other elements' 's/hw == am ? g : 0.0f/hw == am ? g : 0.5f * g/' $T
check 'pool-chain: average pool gradient divided by KH only' 's|g = b\([0-9]*\)\[(pl \* OH + oh) \* OW + ow\] / (float)(KH \* KW)|g = b\1[(pl * OH + oh) * OW + ow] / (float)(KH)|' $T
# tensors of any rank (emit_tensor.c): products between activations, math
# (tol 4e-5: a product of two activations sums 16 or 28 terms of up to 1
# each, which BLAS and the CUDA loop round apart by 1.05e-5)
MODEL=$HERE/../torch/attn_net.net
A="$T --tol 4e-5"
check 'bmm: a^T read as a (the first operand'"'"'s transpose lost)' 's|(float)pa\[gk \* 28 + gi\]|(float)pa[gi * 28 + gk]|' $A
check 'bmm: its sum stops one term short' '0,/gk < 16 ?/s//gk < 15 ?/' $A
check 'bc_div_grad: -dy a / b, one division by b short' 's|= -x0 \* ((x1 / x2) / x2);|= -x0 * (x1 / x2);|' $A
check 'tensor-chain: a member reads 0 for its predecessor'"'"'s value' '0,/const float x0 = v\([0-9]*\);/s//const float x0 = 0.0f * v\1;/' $A
check 'amax keeps the smaller element' 's/acc = v > acc || v != v ? v : acc;/acc = v < acc || v != v ? v : acc;/' $A
check 'a reduction'"'"'s prologue reads its first element throughout' '0,/const int64_t i2 = k;/s//const int64_t i2 = 0;/' $A
check 'a reduction'"'"'s prologue stores its value at the row'"'"'s first place' '0,/b\([0-9]*\)\[o2_\] = v/s//b\1[o_] = v/' $A
# integer and boolean tensors (emit_tensor.c): masks, indices, selections
MODEL=$HERE/../torch/mask_net.net
check 'tril: the diagonal dropped from the causal mask' 's/i1 - i0 <= (int64_t)(0.0f)/i1 - i0 < (int64_t)(0.0f)/' $A
check 'argmax: the smallest element chosen' 's/v != v || v > best_/v != v || v < best_/' $A
check 'gather: the index read one place on' '0,/cddp_index(b\([0-9]*\)\[\([^]]*\)\], 16)/s//cddp_index(b\1[\2] + 1.0f, 16)/' $A
check 'gather_grad: dy added at every place, not the indexed one' 's/acc += k_ == i2 ? (double)d_ : 0.0;/acc += (double)d_;/' $A
check 'where: the branches swapped' 's/= x0 != 0.0f ? x1 : x2;/= x0 != 0.0f ? x2 : x1;/' $A
check 'keep_if gradient: dy passed where the mask is false' '0,/= x1 != 0.0f ? x0 : (0.0f);/s//= x0;/' $A
check 'a comparison with a constant reversed' '0,/= x0 > (0.0f) ? 1.0f : 0.0f;/s//= x0 < (0.0f) ? 1.0f : 0.0f;/' $A
# a class loss over positions with ignore_index (emit_expr.c: ex_row_ops,
# ex_label; emit_cuda.c: the data prologue over rows of samples)
MODEL=$HERE/../torch/pos_net.net
P="--sizes 19:19:0,37:22:3 --tol 4e-5"
check 'positions: the ignored targets counted in the mean'"'"'s denominator' 's/if (yk != -100) { sw += 1.0f; }/sw += 1.0f;/' $P
check 'positions: the ignored targets counted' 's/= y != -100 ? 1.0f : 0.0f;/= 1.0f;/' $P
check 'positions: a row'"'"'s label read from the next position' 's/e->idx\[(i) \/ 28\] \* 28 + (i) % 28\]/e->idx[(i) \/ 28] * 28 + ((i) + 1) % 28]/' $P
check 'positions: the data prologue gathers a row from the wrong place' 's/(gi % 28) \* 28 + gk/(gi % 28) * 27 + gk/' $P
MODEL=$HERE/../torch/pos_weight_net.net
check 'positions with class weights: the counted positions'"'"' weights summed without the ignored test' 's/if (yk != -100) { sw += cw\[yk\]; sc += 1.0f; }/sw += cw[yk < 0 ? 0 : yk]; if (yk != -100) { sc += 1.0f; }/' $P
check 'positions with class weights: a loss scaled by the rows, not the counted ones' 's/(cw\[y\] \* (lse - x\[y\])) \* (sc \/ sw)/(cw[y] * (lse - x[y])) * ((float)(n * 28) \/ sw)/' $P
# token models (emit_tensor.c: T_EMBED, T_EMBED_GRAD)
MODEL=$HERE/../torch/lm_tokmlp.net
check 'embedding: the next token'"'"'s row looked up' '0,/cddp_index(b0\[e \/ 32\], 73)/s//cddp_index(b0[e \/ 32] + 1.0f, 73)/' $P
check 'embedding grad: every position'"'"'s dy added to every row' 's/acc += cddp_index(b0\[p_\], 73) == i0 ? (double)\(b[0-9]*\[p_ \* 32 + i1\]\) : 0.0;/acc += (double)\1;/' $P
check 'embedding grad: the last position left out' 's/for (int64_t p_ = 0; p_ < (int64_t)64 \* n; p_++)/for (int64_t p_ = 0; p_ < (int64_t)64 * n - 1; p_++)/' $P
# the products' tiles (emit_tensor.c: bmm_cuda) over several tiles a matrix
MODEL=$HERE/models/bmm_tiles.net
C="--sizes 3:3:0,5:4:1 --orders 1 --plan train --tol 4e-5"
check 'bmm tiles: the k loop stops before its partial last slice' '0,/for (int64_t k0 = 0; k0 < 70; k0 += 16)/s//for (int64_t k0 = 0; k0 < 64; k0 += 16)/' $C
check 'bmm tiles: the right operand'"'"'s last column tile read as zeros' '0,/Bs\[kb\]\[c\] = gj < 70/s//Bs[kb][c] = gj < 64/' $C
# the same at precision bf16 (memplan.c: tensor_lowp): autocast's rounding
NETS="${TMPDIR:-/tmp}/kc_mutant_nets.$$"   # not the work dir, which each check removes
mkdir -p "$NETS"
MODEL="$NETS/mask_bf16.net"
sed 's/^    seed      37$/    seed      37\n    precision bf16/' "$HERE/../torch/mask_net.net" >"$MODEL"
B="$T --tol 4e-5 --flips 0.001"
check 'bf16: exp over tensors not rounded as stored' '0,/= rt_round_bf16(expf(x0));/s//= expf(x0);/' $B
# attention's Gram matrix of the images: float32 operands autocast rounds
MODEL="$NETS/attn_bf16.net"
sed 's/^    seed      31$/    seed      31\n    precision bf16/' "$HERE/../torch/attn_net.net" >"$MODEL"
check 'bf16: a product of float32 activations reads them unrounded' 's/rt_round_bf16((float)pb\[gj \* 28 + gkb\])/(float)pb[gj * 28 + gkb]/' $B
# scaled dot-product attention (emit_attn_cuda.c): FlashAttention-style
# kernels over tiles, which kernel_check holds to the C ones (emit_attn.c).
# attn_causal.net: 64 positions (two tiles of 32), heads of 16 causal
# (scale 0.25) and of 8 unmasked (scale 0.5)
MODEL=$HERE/models/attn_causal.net
S='--sizes 19:19:0,37:22:3 --orders 1 --plan train'
check 'attention: the causal mask takes the diagonal too (j >= i left out)' 's/if (i3 > i2)/if (i3 >= i2)/' $S
check 'attention dk: the causal diagonal one key late (key i + 1 seen)' '/_attention_dk: /,/^}/s/if (i3 > i2)/if (i3 > i2 + 1)/' $S
check 'attention: causal key tiles stop one key before the block'"'"'s last query' 's/const int64_t kend_ = q0_ + 32 < 64 ? q0_ + 32 : 64;/const int64_t kend_ = q0_ + 31 < 64 ? q0_ + 31 : 64;/' $S
check 'attention dk, dv: causal query tiles from one past the block'"'"'s first key' 's/for (int64_t r0_ = k0_; r0_ < 64; r0_ += 32)/for (int64_t r0_ = k0_ + 1; r0_ < 64; r0_ += 32)/' $S
check 'attention: online softmax, the accumulator not rescaled' 's/acc_\[u_\] \*= al_;/;/' $S
check 'attention: online softmax, the running sum not rescaled' 's/l_ \*= al_;/;/' $S
check 'attention dq: D_i not subtracted (ds = p dO.v scale)' 's/const float s_ = p_ \* (g_ - D_) \*/const float s_ = p_ * g_ */' $S
check 'attention dk: ds without the scale' 's/const float s_ = p_ \* (g_ - dd_\[a_\]) \* [0-9.]*f;/const float s_ = p_ * (g_ - dd_[a_]);/' $S
check 'attention: lse stored 1e-3 high' 's/m_ + logf(l_);/m_ + logf(l_) + 1e-3f;/' $S
check 'attention: lse without the maximum (log l alone)' 's/: m_ + logf(l_);/: logf(l_);/' $S
check 'attention dk, dv: every query of a tile reads the tile'"'"'s first lse' 's/ls_\[t_\] = t_ < nq_ ? lse_\[e \* 64 + r0_ + t_\]/ls_[t_] = t_ < nq_ ? lse_[e * 64 + r0_]/' $S
check 'attention: a row'"'"'s dot products summed over 2 of its 4 threads' 's/for (int o_ = 1; o_ < 4; o_ <<= 1)/for (int o_ = 1; o_ < 2; o_ <<= 1)/' $S
check 'attention: no __syncwarp between a row'"'"'s scores and their reads' 's|__syncwarp();   /\* the row.s scores, from its threads \*/||' --sizes 19:19:0,37:22:3 --orders 2 --plan train
check 'attention: no barrier before the next tile is staged' 's|__syncthreads();   /\* the previous tile read \*/||' --sizes 19:19:0,37:22:3 --orders 2 --plan train
# attn_masks.net: 17 positions (a partial tile), a bool band, a float mask, a
# bool mask per sample [N, 1, 1, T]
MODEL=$HERE/models/attn_masks.net
check 'attention: the bool band read transposed' 's/(float)\(b[0-9]*\)\[0 + i2 \* (int64_t)17 + i3 \* (int64_t)1\] == 0.0f/(float)\1[0 + i3 * (int64_t)17 + i2 * (int64_t)1] == 0.0f/' $S
check 'attention: a sample'"'"'s key mask read from sample 0'"'"'s' 's/(float)\(b[0-9]*\)\[0 + i0 \* (int64_t)17 + i3 \* (int64_t)1\] == 0.0f/(float)\1[0 + i3 * (int64_t)1] == 0.0f/' $S
check 'attention dq, dk, dv: the float mask not added (the forward adds it)' '/_attention_d[qkv]: /,/^}/s/z_ += (float)/z_ += 0.0f * (float)/' $S
check 'attention: a partial key tile'"'"'s last key staged as zeros' 's/ks_\[j_\]\[c_\] = j_ < nk_ /ks_[j_][c_] = j_ < nk_ - 1 /' $S
# attn_odd.net: queries and keys 6 wide, values 10 (4 threads a row), a
# head 128 wide (8 threads a row)
MODEL=$HERE/models/attn_odd.net
check 'attention: E = 6, a row'"'"'s query dims past 4 dropped' 's/q_\[u_\] = live_ \&\& c_ < 6 /q_[u_] = live_ \&\& c_ < 4 /' $S
check 'attention: Ev = 10, the outputs past 8 not stored' '/_attention: /,/^}/s/if (c_ < 10)/if (c_ < 8)/' $S
check 'attention: E = 128, a row of 8 threads summed over 4' 's/for (int o_ = 1; o_ < 8; o_ <<= 1)/for (int o_ = 1; o_ < 4; o_ <<= 1)/' $S
# the recurrences (emit_rnn_cuda.c): a block of samples looping over the
# steps, which kernel_check holds to the C kernels (emit_rnn.c). rnn_mix.net:
# a 2-layer bidirectional LSTM 12 wide from a given state whose c_n reaches
# the loss, a GRU 130 wide, a bidirectional tanh RNN, a relu RNN starting
# from the LSTM's h_n
MODEL=$HERE/models/rnn_mix.net
S='--sizes 19:19:0,37:22:3 --orders 1 --plan train'
check 'LSTM: the input and forget gates swapped' 's/(hg0_\([0-9]*\)_ + (float)\(b[0-9]*\)\[row_ \* 48 + 0 \* 12/(hg0_\1_ + (float)\2[row_ * 48 + 9 * 12/; s/(hg1_\([0-9]*\)_ + (float)\(b[0-9]*\)\[row_ \* 48 + 1 \* 12/(hg1_\1_ + (float)\2[row_ * 48 + 0 * 12/; s/row_ \* 48 + 9 \* 12/row_ * 48 + 1 * 12/' $S
check 'GRU: the reset and update gates swapped' 's/(hg0_\([0-9]*\)_ + (float)\(b[0-9]*\)\[row_ \* 390 + 0 \* 130/(hg0_\1_ + (float)\2[row_ * 390 + 9 * 130/; s/(hg1_\([0-9]*\)_ + (float)\(b[0-9]*\)\[row_ \* 390 + 1 \* 130/(hg1_\1_ + (float)\2[row_ * 390 + 0 * 130/; s/row_ \* 390 + 9 \* 130/row_ * 390 + 1 * 130/' $S
check 'recurrence: off by one in time (the steps from the second)' '/_recurrence: /,/^}/s/for (int64_t k_ = 0; k_ < 9; k_++) {/for (int64_t k_ = 1; k_ < 9; k_++) {/' $S
check 'recurrence gradient: one step short of the first' '/_recurrence_grad: /,/^}/s/k_ < 9;/k_ < 8;/' $S
check 'recurrence: the reverse direction run forward' '/_recurrence: /,/^}/{s/const int64_t t_ = 8 - k_, tp_ = t_ + 1;/const int64_t t_ = k_, tp_ = t_ - 1;/;s/const int first_ = t_ == 8;/const int first_ = t_ == 0;/}' $S
check 'recurrence gradient: dh from W_hh read transposed' 's/const float w_ = (float)\(b[0-9]*\)\[(int64_t)q_ \* 12 + jr_\];/const float w_ = (float)\1[(int64_t)jr_ * 48 + q_];/' $S
check 'LSTM c_n: the cell state of the step before the last' 's/= sv_\[(i_ \* 9 + 8) \* 60 + 48 + j_\];/= sv_[(i_ * 9 + 7) * 60 + 48 + j_];/' $S
check 'LSTM gradient: c_n'"'"'s gradient not carried into the last step' 's/dc_\[u_\]\[\([0-9]\)\] = [^?]* ? (float)b[0-9]*\[(n0_ + [0-9]) \* 12 + j_\] : 0.0f;/dc_[u_][\1] = 0.0f;/' $S
check 'recurrence gradient: h0'"'"'s gradient not kept' 's/\(b[0-9]*\[(int64_t)n \* 108 + (n0_ + [0-9]) \* 12 + j_\]\) = dh_\[u_\]\[[0-9]\];/\1 = 0.0f;/' $S
# the LSTM layers' design at batch 16 (sched_gpu.c, H100): 4 samples a
# block, each unit's sums over 4 lanes
check 'recurrence: a unit'"'"'s sums added over 2 of its 4 lanes' '/_recurrence: /,/^}/s/for (int o_ = 1; o_ < 4; o_ <<= 1) {/for (int o_ = 1; o_ < 2; o_ <<= 1) {/' $S
check 'recurrence: a block'"'"'s sample past the batch computed' 's/ \&\& n0_ + 3 < n) {   \/\* sample/) {   \/* sample/' $S
check 'recurrence: sample 1'"'"'s cell in lane 2, which holds none of its state' 's/if (p_ == 1 \&\& j_ < 12 \&\& n0_ + 1 < n) {   \/\* sample/if (p_ == 2 \&\& j_ < 12 \&\& n0_ + 1 < n) {   \/* sample/' $S
check 'GRU: units past the first 128 of a row dropped' '/_recurrence: /,/^}/s/for (int u_ = 0; u_ < 2; u_++) {/for (int u_ = 0; u_ < 1; u_++) {/' $S
# constants of the file's numbers (torch.tensor: each kernel's table) and a
# loss block's fp16 gradient seed (the loss scale, read once a kernel)
MODEL=$HERE/models/tables.net
TB='--sizes 19:19:0 --orders 1 --plan train'
check 'torch.tensor: class weights 0 and 1 swapped' 's/const float tb\([0-9]*\)\[5\] = {1.0f, 2.0f/const float tb\1[5] = {2.0f, 1.0f/' $TB
check 'torch.tensor: read one element on' 's/tb\([0-9]*\)\[\(.*\) + i0\]/tb\1[(\2 + i0 + 1) % 5]/' $TB
check 'loss block fp16: the gradient seeded with 1, not the loss scale' 's/const float ls\([0-9]*\) = e->scale;/const float ls\1 = 1.0f;/' $TB
rm -rf "${TMPDIR:-/tmp}/kc_mutant.$$" "$KC_BASE" "$NETS"
echo "mutants: $caught caught, $missed missed (part $PART of $PARTS, $index in all)"
[ $((caught + missed)) -gt 0 ] || { echo "FAIL: part $PART of $PARTS ran no mutant"; exit 1; }
[ "$missed" -eq 0 ]
