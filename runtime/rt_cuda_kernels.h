/* rt_cuda_kernels.h: the runtime's own CUDA kernels, compiled by NVRTC
 * together with the model's (rt_cuda_source appends them to cuda_src).
 *
 * They are what lets a whole training step be one CUDA graph replayed
 * without the host: before the plan's kernels, step_begin points the
 * device rt_exec at batch b of the pass (e->n, e->idx, e->lr); after them,
 * step_end adds the step's loss (and correct count) to the pass's sums in
 * double, records the loss sum of step b for --step-log, and advances b
 * and e->step. The host only resets a pass's control block (one copy) and
 * reads it back when the pass is over.
 *
 * Everything is in namespace cddprt or prefixed cddprt_, so nothing can
 * collide with the model's source; no macros, no includes. Every field of
 * the control block is 8 bytes wide, so host and device agree on its
 * layout without padding rules; rt_cuda_source appends a kernel that
 * reports every offset as the device compiler laid it out (and those of
 * the model's rt_exec), checked against the host's at start-up. */
#ifndef RT_CUDA_KERNELS_H
#define RT_CUDA_KERNELS_H

#include <stdint.h>
#include "rt_amp_rule.h"

#include "cddprt.h"         /* RT_EXEC_FIELDS: cddprt::exec is rt_exec */

/* Host view of cddprt::ctl: one pass (a training epoch or an evaluation)
 * over a split. The host writes it whole before the pass. */
typedef struct rt_cuda_ctl {
    uint64_t e;             /* device rt_exec this pass drives */
    uint64_t order;         /* device int32[nsample]: sample order of the pass */
    uint64_t steploss;      /* device double[steps]: each step's loss sum, or 0 */
    double loss_sum;        /* sum of stat[loss_stat] over the steps so far */
    double correct_sum;     /* sum of stat[correct_stat], if correct_stat >= 0 */
    int64_t b;              /* the next step's batch number */
    int64_t nsample;        /* samples in the pass */
    int64_t batch;          /* rows per batch (the last one may be short) */
    int64_t loss_stat, correct_stat;
    int64_t train;          /* 1: step_end advances e->step */
    double lr;              /* e->lr for every step of the pass */
    /* fp16 loss scaling (amp = 1; GradScaler, as rt_amp.c on the host):
     * step_begin sets e->scale from scale; cddprt_amp_check raises *found
     * for an inf/NaN among the ngrad gradients (then, with several ranks,
     * the graph all-reduces it); cddprt_amp_decide sets e->found_inf, so
     * the optimizer kernels return; step_end logs (scale, found) of step b
     * into amp_log[2b], [2b+1], and updates the scale and tracker. */
    int64_t amp;
    double scale;           /* a float value */
    double growth, backoff;
    int64_t tracker, skipped, interval, ngrad;
    uint64_t found;         /* device float: > 0 when some rank overflowed */
    uint64_t amp_log;       /* device double[2 * steps], or 0 */
    /* the train block's settings (rt_cuda_dev.c's comment):
     * lrs: device float[steps], each batch's lr (then lr is not used), or 0;
     * clip: clip_grad_norm's max_norm (0 off), gsq the sum of the squared
     * gradients (cddprt_gnorm, zeroed by step_begin); clip_value:
     * clip_grad_value's (0 off, cddprt_clip_value); accumulate: batches
     * per optimizer step, acc the device float[ngrad] accumulation slab */
    uint64_t lrs;
    double clip, gsq, clip_value;
    int64_t accumulate;
    uint64_t acc;
    int64_t nmetric;        /* metric sums after correct_stat's (rt_plan.nmetric) */
    double metric[RT_METRIC_MAX];   /* [k]: the sum of stat[correct_stat + k], k >= 1 */
    /* what step_begin zeroes before the plan (the kernels accumulate
     * into it): zero_grad ranges of grad (zranges, device int64 pairs
     * of offset and floats: rt_plan.zero), floats of fix, doubles of stat */
    int64_t zero_grad, zero_fix, zero_stat;
    uint64_t zranges;
    /* cddprt_opt_turn's blocks done in this step (the last one ends it,
     * then sets it back to 0); the host writes 0 */
    uint64_t turned;
    /* a loss over counted targets (rt_plan.has_count): count_stat its
     * slot (-1: none); stepcount device double[steps], each step's count,
     * or 0; count_sum their sum over the pass */
    uint64_t stepcount;
    double count_sum;
    int64_t count_stat;
} rt_cuda_ctl;

/* Host view of cddprt::fold: the range of the gradients cddprt_fold
 * works on (a bucket, or all of them), in device memory. */
typedef struct rt_cuda_fold {
    uint64_t ctl;           /* the train control block */
    int64_t off, n;         /* floats into grad */
} rt_cuda_fold;

static const char rt_cuda_kernels_src[] =
    "\n/* ---- cddp runtime kernels (runtime/rt_cuda_kernels.h) ---- */\n"
    "namespace cddprt {\n"
    "struct exec { " RT_STR(RT_EXEC_FIELDS(int, long long, unsigned long long, unsigned char)) " };\n"
    "struct ctl {               /* rt_cuda_ctl of rt_cuda_kernels.h */\n"
    "    exec *e;\n"
    "    const int *order;\n"
    "    double *steploss;\n"
    "    double loss_sum, correct_sum;\n"
    "    long long b, nsample, batch, loss_stat, correct_stat, train;\n"
    "    double lr;\n"
    "    long long amp;\n"
    "    double scale, growth, backoff;\n"
    "    long long tracker, skipped, interval, ngrad;\n"
    "    float *found;\n"
    "    double *amp_log;\n"
    "    const float *lrs;\n"
    "    double clip, gsq, clip_value;\n"
    "    long long accumulate;\n"
    "    float *acc;\n"
    "    long long nmetric;\n"
    "    double metric[" RT_STR(RT_METRIC_MAX) "];\n"
    "    long long zero_grad, zero_fix, zero_stat;\n"
    "    const long long *zranges;\n"
    "    unsigned long long turned;\n"
    "    double *stepcount;\n"
    "    double count_sum;\n"
    "    long long count_stat;\n"
    "};\n"
    "struct fold {               /* rt_cuda_fold of rt_cuda_kernels.h */\n"
    "    ctl *c;\n"
    "    long long off, n;\n"
    "};\n"
    "/* where batch c->b stands in its group of c->accumulate */\n"
    "__device__ inline long long group_first(const ctl *c) { return c->b - c->b % c->accumulate; }\n"
    "__device__ inline long long group_size(const ctl *c)\n"
    "{\n"
    "    const long long left = (c->nsample + c->batch - 1) / c->batch - group_first(c);\n"
    "    return left < c->accumulate ? left : c->accumulate;\n"
    "}\n"
    "}\n"
    "\n"
    RT_AMP_RULE_SRC
    "\n"
    "namespace cddprt {\n"
    "/* step_begin's zeroing: the grad ranges and fix, which the plan's\n"
    " * kernels accumulate into, by the whole grid; stat by the threads\n"
    " * [t0, stride) given (step_turn keeps it to one block, behind its\n"
    " * step_end part) */\n"
    "__device__ inline void zero_grad_fix(const ctl *c, long long t0, long long stride)\n"
    "{\n"
    "    exec *e = c->e;\n"
    "    for (long long r = 0; r < c->zero_grad; r++)\n"
    "        for (long long k = t0; k < c->zranges[2 * r + 1]; k += stride)\n"
    "            e->grad[c->zranges[2 * r] + k] = 0.0f;\n"
    "    for (long long k = t0; k < c->zero_fix; k += stride)\n"
    "        e->fix[k] = 0.0f;\n"
    "}\n"
    "__device__ inline void zero_stat(const ctl *c, long long t0, long long stride)\n"
    "{\n"
    "    for (long long k = t0; k < c->zero_stat; k += stride)\n"
    "        c->e->stat[k] = 0.0;\n"
    "}\n"
    "/* one thread: batch b is rows [b*batch, min(nsample, (b+1)*batch)) of\n"
    " * the pass's sample order */\n"
    "__device__ inline void point_at_batch(ctl *c)\n"
    "{\n"
    "    exec *e = c->e;\n"
    "    const long long off = c->b * c->batch;\n"
    "    long long n = c->nsample - off;\n"
    "    if (n > c->batch)\n"
    "        n = c->batch;\n"
    "    if (n < 0)\n"
    "        n = 0;\n"
    "    e->n = (int)n;\n"
    "    e->idx = c->order + off;\n"
    "    e->lr = c->lrs ? c->lrs[c->b] : (float)c->lr;\n"
    "    c->gsq = 0.0;\n"
    "    if (c->amp) {\n"
    "        e->scale = (float)c->scale;\n"
    "        e->found_inf = 0;\n"
    "        *c->found = 0.0f;\n"
    "    }\n"
    "}\n"
    "/* one thread, after the plan: the step's sums into the pass's */\n"
    "__device__ inline void end_step(ctl *c)\n"
    "{\n"
    "    exec *e = c->e;\n"
    "    const double s = e->stat[c->loss_stat];\n"
    "    c->loss_sum += s;\n"
    "    if (c->correct_stat >= 0)\n"
    "        c->correct_sum += e->stat[c->correct_stat];\n"
    "    for (long long k = 1; k < c->nmetric; k++)\n"
    "        c->metric[k] += e->stat[c->correct_stat + k];\n"
    "    if (c->steploss)\n"
    "        c->steploss[c->b] = s;\n"
    "    if (c->count_stat >= 0) {\n"
    "        const double k = e->stat[c->count_stat];\n"
    "        c->count_sum += k;\n"
    "        if (c->stepcount)\n"
    "            c->stepcount[c->b] = k;\n"
    "    }\n"
    "    if (c->amp) {       /* torch._amp_update_scale_: rt_amp_rule.h */\n"
    "        if (c->amp_log) {\n"
    "            c->amp_log[2 * c->b] = c->scale;\n"
    "            c->amp_log[2 * c->b + 1] = e->found_inf;\n"
    "        }\n"
    "        float s = (float)c->scale;\n"
    "        rt_amp_rule(&s, &c->tracker, &c->skipped, (float)c->growth, (float)c->backoff, c->interval,\n"
    "                    e->found_inf);\n"
    "        c->scale = s;\n"
    "    }\n"
    "    const int last = c->b == group_first(c) + group_size(c) - 1;\n"
    "    c->b++;\n"
    "    if (c->train && last && !e->found_inf)\n"
    "        e->step++;      /* optimizer steps taken */\n"
    "}\n"
    "}\n"
    "\n"
    "/* Before the plan: zeroes grad, fix and stat (c->zero_*), which the plan's\n"
    " * kernels accumulate into, in place of three memset nodes; nothing in\n"
    " * this kernel reads them. Then points e at batch b. Any grid\n"
    " * (rt_cuda_begin_blocks). */\n"
    "extern \"C\" __global__ void cddprt_step_begin(cddprt::ctl *c)\n"
    "{\n"
    "    const long long t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "    cddprt::zero_grad_fix(c, t0, stride);\n"
    "    cddprt::zero_stat(c, t0, stride);\n"
    "    if (threadIdx.x == 0 && blockIdx.x == 0)\n"
    "        cddprt::point_at_batch(c);\n"
    "}\n"
    "\n"
    "/* Between two steps of a captured run of steps (rt_cuda_dev.c): the\n"
    " * first's step_end and the second's step_begin as one graph node. Only\n"
    " * step_end reads stat, so block 0 ends the step, then zeroes stat and\n"
    " * points e at the next batch; every block zeroes grad and fix, which\n"
    " * step_end does not read. Any grid (rt_cuda_begin_blocks). */\n"
    "namespace cddprt {\n"
    "/* one block: the step ends, stat is zeroed, e points at the next batch */\n"
    "__device__ inline void end_and_point(ctl *c)\n"
    "{\n"
    "    if (threadIdx.x == 0)\n"
    "        end_step(c);\n"
    "    __syncthreads();\n"
    "    zero_stat(c, threadIdx.x, blockDim.x);\n"
    "    if (threadIdx.x == 0)\n"
    "        point_at_batch(c);\n"
    "}\n"
    "}\n"
    "extern \"C\" __global__ void cddprt_step_turn(cddprt::ctl *c)\n"
    "{\n"
    "    if (blockIdx.x == 0)\n"
    "        cddprt::end_and_point(c);\n"
    "    cddprt::zero_grad_fix(c, (long long)blockIdx.x * blockDim.x + threadIdx.x, (long long)gridDim.x * blockDim.x);\n"
    "}\n"
    "\n"
    "/* step_turn's work at the end of the step's last kernel (an optimizer\n"
    " * kernel: rt_cuda_source's cddprt_opt_turn), which saves its graph node:\n"
    " * each block counts itself done in c->turned, and the grid's last block\n"
    " * (every other block has read the gradients, e->lr and e->step by then)\n"
    " * ends the step, zeroes what the next one accumulates into and points\n"
    " * e at the next batch. Only when that zeroing is small enough for one\n"
    " * block (rt_cuda_turn_fits). last: a __shared__ int of the kernel. */\n"
    "namespace cddprt {\n"
    "__device__ inline void turn_in_last_block(ctl *c, int *last)\n"
    "{\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) {\n"
    "        __threadfence();\n"
    "        const unsigned long long blocks = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;\n"
    "        *last = atomicAdd(&c->turned, 1ULL) == blocks - 1;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if (!*last)\n"
    "        return;\n"
    "    __threadfence();\n"
    "    end_and_point(c);\n"
    "    zero_grad_fix(c, threadIdx.x, blockDim.x);\n"
    "    if (threadIdx.x == 0)\n"
    "        c->turned = 0;\n"
    "}\n"
    "}\n"
    "\n"
    "/* fp16: any inf/NaN among the gradients (after their all-reduce) raises\n"
    " * *found. x - x is 0 for finite x, NaN otherwise. Any grid. */\n"
    "extern \"C\" __global__ void cddprt_amp_check(cddprt::ctl *c)\n"
    "{\n"
    "    const float *g = c->e->grad;\n"
    "    float acc = 0.0f;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < c->ngrad;\n"
    "         k += (long long)gridDim.x * blockDim.x)\n"
    "        acc += g[k] - g[k];\n"
    "    if (acc != 0.0f)\n"
    "        *c->found = 1.0f;   /* every writer writes the same */\n"
    "}\n"
    "\n"
    "/* fp16: the (all-reduced) flag into e->found_inf, before the optimizer\n"
    " * kernels. Launched <<<1, 1>>>. */\n"
    "extern \"C\" __global__ void cddprt_amp_decide(cddprt::ctl *c)\n"
    "{\n"
    "    if (threadIdx.x == 0 && blockIdx.x == 0)\n"
    "        c->e->found_inf = *c->found > 0.0f;\n"
    "}\n"
    "\n"
    "/* accumulate, a micro-batch that is not its group's last: its gradients\n"
    " * into the accumulation slab (the group's first copies). Any grid. */\n"
    "extern \"C\" __global__ void cddprt_acc_add(cddprt::ctl *c)\n"
    "{\n"
    "    const float *g = c->e->grad;\n"
    "    float *a = c->acc;\n"
    "    const int first = c->b == cddprt::group_first(c);\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < c->ngrad;\n"
    "         k += (long long)gridDim.x * blockDim.x)\n"
    "        a[k] = first ? g[k] : a[k] + g[k];\n"
    "}\n"
    "\n"
    "/* accumulate, the group's last micro-batch: its gradients in f's range\n"
    " * become (slab + them) / accumulate, before their all-reduce; a group of\n"
    " * one batch only divides. Any grid. */\n"
    "extern \"C\" __global__ void cddprt_fold(const cddprt::fold *f)\n"
    "{\n"
    "    const cddprt::ctl *c = f->c;\n"
    "    float *g = c->e->grad + f->off;\n"
    "    const float *a = c->acc + f->off;\n"
    "    const float s = 1.0f / (float)c->accumulate;\n"
    "    const int sum = cddprt::group_size(c) > 1;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < f->n;\n"
    "         k += (long long)gridDim.x * blockDim.x)\n"
    "        g[k] = sum ? (a[k] + g[k]) * s : g[k] * s;\n"
    "}\n"
    "\n"
    "/* clip_grad_norm: the sum of the squared gradients (after their\n"
    " * all-reduce) into c->gsq, a block's in double, one atomic per block.\n"
    " * Launched with 256 threads a block. */\n"
    "extern \"C\" __global__ void cddprt_gnorm(cddprt::ctl *c)\n"
    "{\n"
    "    __shared__ double part[256];\n"
    "    const float *g = c->e->grad;\n"
    "    double s = 0.0;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < c->ngrad;\n"
    "         k += (long long)gridDim.x * blockDim.x)\n"
    "        s += (double)g[k] * g[k];\n"
    "    part[threadIdx.x] = s;\n"
    "    __syncthreads();\n"
    "    for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {\n"
    "        if (threadIdx.x < h)\n"
    "            part[threadIdx.x] += part[threadIdx.x + h];\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (threadIdx.x == 0)\n"
    "        atomicAdd(&c->gsq, part[0]);\n"
    "}\n"
    "\n"
    "/* clip_grad_value: each gradient clamped to [-v, v] (a NaN stays, as\n"
    " * torch's clamp keeps it); before clip_grad_norm's kernels. Any grid. */\n"
    "extern \"C\" __global__ void cddprt_clip_value(cddprt::ctl *c)\n"
    "{\n"
    "    const float v = (float)c->clip_value;\n"
    "    float *g = c->e->grad;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < c->ngrad;\n"
    "         k += (long long)gridDim.x * blockDim.x)\n"
    "        g[k] = g[k] > v ? v : g[k] < -v ? -v : g[k];\n"
    "}\n"
    "\n"
    "/* clip_grad_norm: torch's coefficient max_norm / (norm + 1e-6), clamped\n"
    " * to 1, multiplies the gradients. Any grid. */\n"
    "extern \"C\" __global__ void cddprt_clip(cddprt::ctl *c)\n"
    "{\n"
    "    const float coef = (float)c->clip / ((float)sqrt(c->gsq) + 1e-6f);\n"
    "    if (coef >= 1.0f)\n"
    "        return;\n"
    "    float *g = c->e->grad;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < c->ngrad;\n"
    "         k += (long long)gridDim.x * blockDim.x)\n"
    "        g[k] *= coef;\n"
    "}\n"
    "\n"
    "/* After the plan: the step's results into the pass's sums. The kernels\n"
    " * accumulated into stat, which the graph zeroed before them. */\n"
    "extern \"C\" __global__ void cddprt_step_end(cddprt::ctl *c)\n"
    "{\n"
    "    if (threadIdx.x == 0 && blockIdx.x == 0)\n"
    "        cddprt::end_step(c);\n"
    "}\n";

#endif
