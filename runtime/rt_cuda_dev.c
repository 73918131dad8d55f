/* rt_cuda_dev.c: the CUDA device -- the model's NVRTC kernels, a whole
 * training step as one CUDA graph.
 *
 * The epoch belongs to the loop (rt_loop.c: the same batches, sums, log
 * lines and checkpoints as on the CPU); this device implements rt_device
 * so that the host never waits inside a range of steps:
 *
 *   - Both splits are copied to the device once, as uint8 images and
 *     labels; the model's first kernel gathers and normalizes a batch from
 *     them, exactly as the C kernel does from host memory.
 *   - A training step is captured ONCE as a CUDA graph:
 *         cddprt_step_begin(ctl)          zeroes fix, stat and the grad ranges
 *                                         (rt_plan.zero) the kernels accumulate
 *                                         into; e->n, e->idx,
 *                                         e->lr for batch ctl->b
 *         the train plan's kernels        geometry for nmax rows
 *         cddprt_step_end(ctl)            loss sums, step loss, ++b, ++e->step
 *     With fp16's loss scaler (GradScaler, see rt_amp.c) the optimizer
 *     kernels move behind the whole backward and the all-reduces:
 *         ... backward, all-reduces joined
 *         cddprt_amp_check(ctl)           inf/NaN in grad -> *found
 *         all-reduce of *found            (several ranks: all skip together)
 *         cddprt_amp_decide(ctl)          e->found_inf: optimizer kernels return
 *         the optimizer kernels
 *         cddprt_step_end(ctl)            scale update, ++e->step unless skipped
 *     The scaler's state lives in the train control block and is carried
 *     from epoch to epoch by the host (it rewrites the block per epoch).
 *     and an epoch is that graph launched once per batch. Evaluation is a
 *     second graph over the test set, launched right behind it.
 *   - Runs: while RT_CUDA_RUN_STEPS steps are left in a call of
 *     cuda_train (or of the evaluation), a graph of that many steps is
 *     launched instead, captured once as well: between two steps one
 *     cddprt_step_turn (the first's step_end and the next's step_begin in
 *     one node). Not with accumulate (the graph changes per batch) nor
 *     when steps are timed. When the train plan ends with an optimizer
 *     kernel and step_turn's zeroing is small (rt_cuda_turn_body), a
 *     training step followed by another launches that kernel as
 *     cddprt_opt_turn instead, whose last block does step_turn's work:
 *     one graph node fewer per step.
 *   - Sibling pairs (rt_cuda_launch.pair): two GEMM kernels the compiler
 *     found independent are launched as their one pair kernel, except in
 *     a traced step, which times each kernel.
 *   - begin_epoch queues two copies: the epoch's sample order and a fresh
 *     control block (b = the first batch, sums = 0). collect queues the
 *     read-back of the control blocks and the step losses, then waits
 *     once (bounded: rt_cuda_wait); the loop reduces and logs.
 *   - Sample order: the loop's sampler, on the host, the same rt_shuffle
 *     the CPU device gets -- a deliberate choice, so that --device cpu and
 *     cuda see identical batches for a seed and a run can be compared
 *     step by step (tests/gpu/run.sh does). The loop computes the next
 *     epoch's while the GPU evaluates; one 240 KB copy from pinned memory.
 *     The order buffers are double buffered (slot = epoch % 2).
 *   - The epoch time is measured on the device: events around the train
 *     graph launches (evaluation excluded, as on the CPU).
 *   - Pacing: the host runs at most PACE graph launches ahead of the GPU
 *     (an event recorded after each launch, the one PACE launches back
 *     waited for). Every wait is then about a few steps of work, so its
 *     bound means "no progress for that long", whatever an epoch costs.
 *   - Several ranks (an "nccl" rt_coll): DDP inside the graph. Each rank trains its
 *     DistributedSampler shard (rt_sampler, as on the CPU). After the
 *     kernel that completes a gradient bucket, an event forks a second
 *     stream, which waits for it and all-reduces the bucket with NCCL
 *     (ncclAvg) while the main stream goes on with backward; the
 *     optimizer kernel that reads the bucket waits for its all-reduce's
 *     event; the step ends by joining the comm stream. All of it is
 *     captured once, so the overlap costs no host work per step. When the
 *     buckets are handed over and waited for is rt_buckets.c's schedule,
 *     the one the CPU reducer follows. The loop reduces the loss and
 *     evaluation sums once per epoch; evaluation splits the test set into
 *     contiguous blocks, every sample once.
 *   - --trace: the training steps are issued one by one instead of as
 *     the graph -- the same operations in the same order on the same
 *     streams -- with timing events around every kernel (main stream,
 *     tid 0) and every all-reduce (comm stream, tid 1), read back after
 *     each step. Times are the device's, placed on the host clock at the
 *     step's start (the device is idle then). A traced run therefore pays
 *     a launch per kernel and a sync per step; evaluation stays a graph
 *     and is not traced. --profile times the same way (its table is the
 *     train plan's only).
 *   - The train block's settings, inside the graph as well (rt_cpu_dev.c
 *     says what they compute; the order of the operations is the same):
 *       * each batch's lr from a table the loop fills per epoch (a step
 *         schedule changes it every optimizer step), copied with the
 *         order; step_begin takes lrs[b];
 *       * accumulate N: a second graph for the micro-batches that are not
 *         their group's last: the plan without the optimizer kernels and
 *         without the all-reduces (no_sync), then cddprt_acc_add; the
 *         step graph folds each bucket (cddprt_fold: (slab + grad) / N)
 *         right after the kernel that completes it, before its
 *         all-reduce. The host picks the graph per batch;
 *       * clip_grad_value, clip_grad_norm: after the all-reduces,
 *         cddprt_clip_value, then cddprt_gnorm and cddprt_clip, then the
 *         optimizer kernels (they move behind the join as with the loss
 *         scaler).
 * The parameters come from the host slab at open (after init, --init or
 * --resume) and go back to it by pull (checkpoints, --save). */
#include "rt_cuda.h"
#include "rt_cuda_kernels.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { CAPTURE_THREAD_LOCAL = 1, FUNC_MAX_THREADS = 0, EVENT_DISABLE_TIMING = 2,
       STREAM_NON_BLOCKING = 1, PACE = 8, RUN_STEPS = RT_CUDA_RUN_STEPS };

typedef struct plan_dev {
    const rt_plan *p;
    CUfunction *f;          /* [nk] */
    unsigned (*grid)[3];    /* [nk] */
    CUfunction *fpair;      /* [nk]: kernels k and k + 1 as one (rt_cuda_launch.pair), or NULL */
    unsigned (*pgrid)[3];   /* [nk]: its grid */
} plan_dev;

typedef struct dev_run {
    CUdeviceptr param, grad, opt, act, fix, stat;
    CUdeviceptr tx, ty, vx, vy, norm;       /* training and test split, normalization */
    CUdeviceptr order[2], vorder;           /* sample orders: train (per slot), test */
    CUdeviceptr steploss, stepcount;        /* double[nbatch] each */
    CUdeviceptr blocks;                     /* exec train, exec eval, ctl train, ctl eval */
    CUdeviceptr exec_t, exec_v, ctl_t, ctl_v;
    int32_t *h_order[2];                    /* pinned */
    rt_cuda_ctl *h_ctl;                     /* pinned [5]: train slot 0/1, eval, back train, back eval */
    double *h_steploss, *h_stepcount;       /* pinned [nbatch] each */
    CUfunction fbegin, fend, fturn;
    /* cddprt_opt_turn (rt_cuda_turn_body), or NULL; turn_now: inside a
     * run's capture, launch the train plan's last kernel as it with
     * turn_ctl, in place of that kernel and step_turn */
    CUfunction fopt_turn;
    int turn_now;
    CUdeviceptr turn_ctl;
    int amp;                                /* fp16 loss scaling in the train step */
    CUfunction famp_check, famp_decide;
    /* the train block's settings */
    CUfunction facc_add, ffold, fgnorm, fclip, fclipv;
    int64_t acc;                            /* micro-batches per optimizer step */
    int clip, clipv;                        /* clip_grad_norm, clip_grad_value */
    CUdeviceptr lrs[2], accbuf, folds;      /* float[nbatch] per slot; float[ngrad]; rt_cuda_fold[nb + 1] */
    CUdeviceptr zranges;                    /* int64[2 * nzero]: rt_plan.zero, the grad ranges to zero */
    int64_t zero_floats;                    /* their floats */
    float *h_lrs[2];                        /* pinned */
    CUgraphExec gmicro;                     /* a micro-batch's graph (accumulate > 1) */
    CUdeviceptr found, amp_log;             /* float; double[2 * nbatch] */
    double *h_amp_log;                      /* pinned [2 * nbatch] */
    plan_dev train, eval;
    CUgraphExec gtrain, geval;
    CUgraphExec gtrain_run, geval_run;      /* RUN_STEPS steps each, or NULL */
    CUevent ev0, ev1;
    CUevent pace[PACE];                     /* after launch i: pace[i % PACE] */
    int64_t launches;
    double pace_timeout;
    /* DDP: the comm stream and each bucket's fork and join events */
    CUstream comm;
    rt_coll *coll;                          /* "nccl": device memory, streams */
    rt_bsched s;                            /* when each bucket is handed over / waited for */
    const rt_bucket *bk;                    /* s.b, s.nb */
    int nb;
    CUevent *ev_ready, *ev_done;            /* [nb] */
    CUevent *ev_cfork, *ev_cjoin;           /* [nk]: around a SyncBatchNorm sum after kernel k */
    /* --trace: timing events, [nk] per kernel and [nb] per all-reduce */
    int tracing;                            /* the step being issued records them */
    CUevent tbase, *tk0, *tk1, *tb0, *tb1;
    rt_prof prof;                           /* --profile: the same events, per kernel */
    int timed;                              /* --trace or --profile: steps issued eagerly */
    /* the run, as the loop drives it (rt_device) */
    rt_cuda *cu;
    const rt_model *m;
    const rt_opts *o;
    rt_ws *w;
    rt_trace *trace;
    int ddp, nstat, nmax;
    int64_t per_rank, nbatch, nbatch_v;
    int epoch, slot, evaluated;
    int64_t skip;                           /* the epoch's first batch */
    CUevent evc;                            /* where a mid-epoch collect stands */
    int fold_now, no_sync;                  /* the step being issued: accumulate's (issue_step) */
} dev_run;

enum { CTL_EVAL = 2, CTL_BACK_T = 3, CTL_BACK_V = 4, NCTL = 5 };

static size_t align16(size_t n) { return (n + 15) / 16 * 16; }

/* Bytes of n elements of each; -1 (after an error) if that overflows. */
static int nbytes(int64_t n, size_t each, size_t *out, const char *what)
{
    if (n < 0 || (n > 0 && (uint64_t)n > SIZE_MAX / each)) {
        rt_err("cannot allocate %s on the device: %lld elements is too many", what, (long long)n);
        return -1;
    }
    *out = (size_t)n * each;
    return 0;
}

static int dalloc(rt_cuda *cu, CUdeviceptr *p, int64_t n, size_t each, const char *what)
{
    size_t b;
    return nbytes(n, each, &b, what) ? -1 : rt_cuda_alloc(cu, p, b, what);
}

/* 0 when kernel f, compiled, takes a block of that many threads */
static int block_fits(rt_cuda *cu, CUfunction f, const char *name, const unsigned block[3])
{
    int maxt = 0;
    if (CU_CHECK(rt_cu.cuFuncGetAttribute(&maxt, FUNC_MAX_THREADS, f)))
        return -1;
    uint64_t t = (uint64_t)block[0] * block[1] * block[2];
    if (t > (uint64_t)maxt) {
        rt_err("kernel %s: block of %llu threads, but compiled for at most %d on %s", name, (unsigned long long)t,
               maxt, cu->arch);
        return -1;
    }
    return 0;
}

/* The functions and grids of a plan's kernels, checked against the
 * device's limits before anything is captured. */
static int plan_setup(rt_cuda *cu, const rt_plan *p, const char *which, int nmax, plan_dev *pd)
{
    pd->p = p;
    if (!p->cu) {
        rt_err("model is malformed: the %s plan has no CUDA launch table", which);
        return -1;
    }
    pd->f = rt_calloc((size_t)(p->nk ? p->nk : 1), sizeof *pd->f);
    pd->grid = rt_calloc((size_t)(p->nk ? p->nk : 1), sizeof *pd->grid);
    pd->fpair = rt_calloc((size_t)(p->nk ? p->nk : 1), sizeof *pd->fpair);
    pd->pgrid = rt_calloc((size_t)(p->nk ? p->nk : 1), sizeof *pd->pgrid);
    if (!pd->f || !pd->grid || !pd->fpair || !pd->pgrid) {
        rt_err("out of memory");
        return -1;
    }
    for (int k = 0; k < p->nk; k++) {
        const rt_cuda_launch *l = &p->cu[k];
        if (!l->name) {
            rt_err("model is malformed: %s kernel %d has no CUDA name", which, k);
            return -1;
        }
        if (rt_cuda_function(cu, l->name, &pd->f[k]) != 0 || rt_cuda_grid(l, nmax, pd->grid[k]) != 0)
            return -1;
        if (l->pair && k + 1 < p->nk &&
            (rt_cuda_function(cu, l->pair, &pd->fpair[k]) != 0 || rt_cuda_pair_grid(l, l + 1, nmax, pd->pgrid[k]) != 0))
            return -1;
        if (block_fits(cu, pd->f[k], l->name, l->block) ||
            (pd->fpair[k] && block_fits(cu, pd->fpair[k], l->pair, l->block)))
            return -1;
    }
    return 0;
}

/* A grid-stride runtime kernel over n floats: 256 threads a block. */
static int launch_stride(rt_cuda *cu, CUfunction f, const char *name, int64_t n, CUdeviceptr arg)
{
    static const unsigned threads[3] = {256, 1, 1};
    const int64_t blocks = (n + 255) / 256;
    const unsigned grid[3] = {(unsigned)(blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks), 1, 1};
    return rt_cuda_launch1(cu, f, name, grid, threads, arg);
}

/* accumulate's fold of bucket b (d->nb: the whole slab) */
static int launch_fold(rt_cuda *cu, dev_run *d, int b, int64_t n)
{
    return launch_stride(cu, d->ffold, "cddprt_fold", n, d->folds + (CUdeviceptr)b * sizeof(rt_cuda_fold));
}

/* Kernel k of the plan on the main stream, between its timing events
 * when the step is traced. */
static int launch_kernel(rt_cuda *cu, dev_run *d, const plan_dev *pd, int k, CUdeviceptr exec)
{
    if (d->turn_now && pd == &d->train && k == pd->p->nk - 1)
        return rt_cuda_launch1(cu, d->fopt_turn, "cddprt_opt_turn", pd->grid[k], pd->p->cu[k].block, d->turn_ctl);
    return (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tk0[k], cu->stream))) ||
           rt_cuda_launch1(cu, pd->f[k], pd->p->cu[k].name, pd->grid[k], pd->p->cu[k].block, exec) ||
           (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tk1[k], cu->stream)));
}

/* The gradient buckets around the plan's kernel k inside a capture, when
 * ddp: first (bucket_wait) the main stream waits for the all-reduce of
 * every bucket kernel k updates; after it (kernel_done), each bucket
 * kernel k completed is handed to the comm stream (an event the comm
 * stream waits for, the all-reduce, an event the optimizer will wait
 * for). Buckets go in table order, the same on every rank, so the
 * collectives match. later: an optimizer kernel the loss scaler runs
 * after all buckets. */
static int bucket_wait(rt_cuda *cu, dev_run *d, int k, int ddp, int later)
{
    /* the comm stream reduces in bucket order: the last bucket kernel k
     * needs stands for all before it (rt_buckets.c) */
    const int need = ddp && !later && !d->no_sync ? d->s.wait_upto[k] : 0;
    return need > 0 && CU_CHECK(rt_cu.cuStreamWaitEvent(cu->stream, d->ev_done[need - 1], 0));
}

static int kernel_done(rt_cuda *cu, dev_run *d, const plan_dev *pd, int k, int ddp, int *next_bucket)
{
    /* SyncBatchNorm's sums: on the comm stream too, behind the buckets
     * handed over so far, because one NCCL communicator must see its
     * collectives in one order on every rank; the main stream waits,
     * since the next kernel reads the sums */
    const rt_cuda_launch *l = &pd->p->cu[k];
    if (ddp && l->coll_n > 0 &&
        (CU_CHECK(rt_cu.cuEventRecord(d->ev_cfork[k], cu->stream)) ||
         CU_CHECK(rt_cu.cuStreamWaitEvent(d->comm, d->ev_cfork[k], 0)) ||
         d->coll->sum_f32(d->coll, (void *)(uintptr_t)(d->fix + (CUdeviceptr)l->coll_off * sizeof(float)),
                          l->coll_n, l->name, d->comm) ||
         CU_CHECK(rt_cu.cuEventRecord(d->ev_cjoin[k], d->comm)) ||
         CU_CHECK(rt_cu.cuStreamWaitEvent(cu->stream, d->ev_cjoin[k], 0))))
        return -1;
    for (; ddp && !d->no_sync && *next_bucket < d->s.launch_upto[k]; ++*next_bucket) {
        const int b = *next_bucket;
        const rt_bucket *bk = &d->bk[b];
        if ((d->fold_now && launch_fold(cu, d, b, bk->size)) ||
            CU_CHECK(rt_cu.cuEventRecord(d->ev_ready[b], cu->stream)) ||
            CU_CHECK(rt_cu.cuStreamWaitEvent(d->comm, d->ev_ready[b], 0)) ||
            (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tb0[b], d->comm))) ||
            d->coll->bucket_avg(d->coll, (void *)(uintptr_t)(d->grad + (CUdeviceptr)bk->off * sizeof(float)),
                                bk->size, b, d->comm) ||
            (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tb1[b], d->comm))) ||
            CU_CHECK(rt_cu.cuEventRecord(d->ev_done[b], d->comm)))
            return -1;
    }
    return 0;
}

/* The plan's kernel k inside a capture, with its buckets around it. */
static int launch_step_kernel(rt_cuda *cu, dev_run *d, const plan_dev *pd, int k, CUdeviceptr exec,
                              int ddp, int *next_bucket, int later)
{
    return bucket_wait(cu, d, k, ddp, later) || (!later && launch_kernel(cu, d, pd, k, exec)) ||
           kernel_done(cu, d, pd, k, ddp, next_bucket);
}

/* Kernels k and k + 1 as their one sibling kernel (rule siblings), the
 * buckets of both around it. Not in a traced step, which times each
 * kernel by itself. */
static int launch_step_pair(rt_cuda *cu, dev_run *d, const plan_dev *pd, int k, CUdeviceptr exec, int ddp,
                            int *next_bucket)
{
    return bucket_wait(cu, d, k, ddp, 0) || bucket_wait(cu, d, k + 1, ddp, 0) ||
           rt_cuda_launch1(cu, pd->fpair[k], pd->p->cu[k].pair, pd->pgrid[k], pd->p->cu[k].block, exec) ||
           kernel_done(cu, d, pd, k, ddp, next_bucket) || kernel_done(cu, d, pd, k + 1, ddp, next_bucket);
}

/* What a captured step does: STEP_FULL, a whole training step (an
 * evaluation step too); STEP_MICRO, an accumulated micro-batch that is not
 * its group's last (no all-reduce, no update). */
enum { STEP_FULL = 0, STEP_MICRO = 1 };

/* Where a step stands in a captured run of steps: the first begins with
 * step_begin, the last ends with step_end, and between two steps one
 * step_turn does both (a single step is both first and last). */
enum { RUN_FIRST = 1, RUN_LAST = 2, RUN_ALONE = 3 };

/* One step of plan p: step_begin, the plan's kernels on exec (with the
 * bucket all-reduces when ddp), step_end, or step_turn in their place
 * inside a run (pos). Captured once as a graph, or issued as is for a
 * traced step. */
static int issue_step(rt_cuda *cu, dev_run *d, const plan_dev *pd, CUdeviceptr exec, CUdeviceptr ctl,
                      int64_t grad_floats, int nstat, int ddp, int mode, int pos)
{
    static const unsigned one[3] = {1, 1, 1};
    const int train = pd == &d->train, micro = mode == STEP_MICRO;
    /* accumulate's fold, done per bucket on the way to its all-reduce */
    d->fold_now = train && !micro && d->acc > 1;
    /* step_begin zeroes the grad ranges and fix that fused row reductions
     * accumulate into (rt_plan.zero), and stat, as the control block says (ctl_init):
     * one graph node, not three memsets and a kernel */
    const int64_t zg = train ? d->zero_floats : 0;
    int64_t words = zg > pd->p->fix_zero ? zg : pd->p->fix_zero;
    words = words > 2 * (int64_t)nstat ? words : 2 * (int64_t)nstat;
    const unsigned bgrid[3] = {rt_cuda_begin_blocks(words), 1, 1}, bthreads[3] = {256, 1, 1};
    int ok = !(pos & RUN_FIRST) || !rt_cuda_launch1(cu, d->fbegin, "cddprt_step_begin", bgrid, bthreads, ctl);
    int next_bucket = 0;
    const int amp = d->amp && train;
    /* the optimizer kernels behind everything: found_inf, the norm, the
     * fold of one rank's whole slab; none at all for a micro-batch */
    const int late = amp || (train && (d->clip || d->clipv)) || (d->fold_now && !ddp);
    d->no_sync = micro;
    /* a step followed by another in the run: its last kernel also turns
     * to the next (cddprt_opt_turn), no step_turn node */
    d->turn_now = train && !micro && !(pos & RUN_LAST) && d->fopt_turn && !d->tracing;
    d->turn_ctl = ctl;
    for (int k = 0; ok && k < pd->p->nk; k++) {
        const int opt = pd->p->k[k].phase == RT_PH_OPTIMIZER;
        if (pd->fpair[k] && !d->tracing && !opt && pd->p->k[k + 1].phase != RT_PH_OPTIMIZER)
            ok = !launch_step_pair(cu, d, pd, k++, exec, ddp, &next_bucket);
        else
            ok = !launch_step_kernel(cu, d, pd, k, exec, ddp, &next_bucket, (late || micro) && opt);
    }
    d->no_sync = 0;
    if (ok && micro) {
        ok = !launch_stride(cu, d->facc_add, "cddprt_acc_add", grad_floats, ctl) &&
             !rt_cuda_launch1(cu, d->fend, "cddprt_step_end", one, one, ctl);
        return ok ? 0 : -1;
    }
    /* join: the comm stream's last all-reduce (it runs them in order) */
    if (ok && ddp && d->nb > 0 && next_bucket != d->nb) {
        rt_err("the step cannot be captured: gradient bucket %d (complete after train kernel %d) was never "
               "handed to the comm stream; the model's bucket table does not fit its %d train kernels",
               next_bucket, d->bk[next_bucket].ready, pd->p->nk);
        ok = 0;
    }
    if (ok && ddp && d->nb > 0)
        ok = !CU_CHECK(rt_cu.cuStreamWaitEvent(cu->stream, d->ev_done[d->nb - 1], 0));
    if (ok && d->fold_now && !ddp)
        ok = !launch_fold(cu, d, d->nb, grad_floats);
    if (ok && amp) {
        const unsigned threads[3] = {256, 1, 1};
        int64_t blocks = (grad_floats + 255) / 256;
        const unsigned grid[3] = {(unsigned)(blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks), 1, 1};
        ok = !rt_cuda_launch1(cu, d->famp_check, "cddprt_amp_check", grid, threads, ctl) &&
             (!ddp || !d->coll->any(d->coll, (void *)(uintptr_t)d->found, cu->stream)) &&
             !rt_cuda_launch1(cu, d->famp_decide, "cddprt_amp_decide", one, one, ctl);
    }
    if (ok && train && d->clipv)
        ok = !launch_stride(cu, d->fclipv, "cddprt_clip_value", grad_floats, ctl);
    if (ok && train && d->clip)
        ok = !launch_stride(cu, d->fgnorm, "cddprt_gnorm", grad_floats, ctl) &&
             !launch_stride(cu, d->fclip, "cddprt_clip", grad_floats, ctl);
    for (int k = 0; ok && late && k < pd->p->nk; k++)
        if (pd->p->k[k].phase == RT_PH_OPTIMIZER)
            ok = !launch_kernel(cu, d, pd, k, exec);
    d->fold_now = 0;
    if (pos & RUN_LAST)
        ok = ok && !rt_cuda_launch1(cu, d->fend, "cddprt_step_end", one, one, ctl);
    else if (!d->turn_now)
        ok = ok && !rt_cuda_launch1(cu, d->fturn, "cddprt_step_turn", bgrid, bthreads, ctl);
    d->turn_now = 0;
    return ok ? 0 : -1;
}

/* nsteps of issue_step as one graph. The capture is always ended, even
 * after a failed launch, so the stream stays usable. */
static int capture(rt_cuda *cu, dev_run *d, const plan_dev *pd, CUdeviceptr exec, CUdeviceptr ctl,
                   int64_t grad_floats, int nstat, int ddp, int mode, int nsteps, CUgraphExec *out)
{
    *out = NULL;
    if (CU_CHECK(rt_cu.cuStreamBeginCapture_v2(cu->stream, CAPTURE_THREAD_LOCAL)))
        return -1;
    int ok = 1;
    for (int s = 0; ok && s < nsteps; s++)
        ok = !issue_step(cu, d, pd, exec, ctl, grad_floats, nstat, ddp, mode,
                         (s == 0 ? RUN_FIRST : 0) | (s == nsteps - 1 ? RUN_LAST : 0));
    CUgraph g = NULL;
    CUresult r = rt_cu.cuStreamEndCapture(cu->stream, &g);
    if (ok && CU_CHECK(r))
        ok = 0;
    if (ok && !g) {
        rt_err("CUDA graph capture produced no graph");
        ok = 0;
    }
    if (ok && CU_CHECK(rt_cu.cuGraphInstantiateWithFlags(out, g, 0)))
        ok = 0;
    if (g)
        CU_CHECK(rt_cu.cuGraphDestroy(g));
    if (ok && CU_CHECK(rt_cu.cuGraphUpload(*out, cu->stream)))
        ok = 0;
    return ok ? 0 : -1;
}

/* Host image of a device rt_exec: device pointers in the host layout. */
static rt_exec exec_image(const dev_run *d, int nmax, const rt_data *data, const rt_dataset *set, CUdeviceptr x,
                          CUdeviceptr y, CUdeviceptr order, float lr)
{
    rt_exec e;
    memset(&e, 0, sizeof e);
    rt_data_exec(data, set, &e);    /* the sizes; the pointers are the device's */
    e.x = (const void *)(uintptr_t)x;
    e.y = (const void *)(uintptr_t)y;
    e.norm = (const float *)(uintptr_t)d->norm;
    e.n = nmax;
    e.nmax = nmax;
    e.act = (float *)(uintptr_t)d->act;
    e.fix = (float *)(uintptr_t)d->fix;
    e.param = (float *)(uintptr_t)d->param;
    e.grad = (float *)(uintptr_t)d->grad;
    e.opt = (float *)(uintptr_t)d->opt;
    e.stat = (double *)(uintptr_t)d->stat;
    e.idx = (const int32_t *)(uintptr_t)order;
    e.lr = lr;
    e.step = 0;
    e.nthreads = 1;
    e.rank = d->coll->rank;
    e.world = d->coll->size;
    return e;
}

/* Records launch i's event and waits for launch i - PACE's: the host
 * stays at most PACE launches ahead, and each wait is bounded. */
static int pace(rt_cuda *cu, dev_run *d, int epoch)
{
    const int slot = (int)(d->launches % PACE);
    if (d->launches >= PACE) {
        char what[96];
        snprintf(what, sizeof what, "graph launch %lld (of 1 or %d steps) in epoch %d", (long long)(d->launches - PACE),
                 RUN_STEPS, epoch);
        if (rt_cuda_event_wait(cu, d->pace[slot], d->pace_timeout, what) != 0)
            return -1;
    }
    d->launches++;
    return CU_CHECK(rt_cu.cuEventRecord(d->pace[slot], cu->stream));
}

/* The comm stream and the buckets' events, when several ranks train. */
static int ddp_setup(const rt_model *m, dev_run *d)
{
    if (rt_bsched_init(&d->s, m) != 0)
        return -1;
    d->bk = d->s.b;
    d->nb = d->s.nb;
    d->ev_ready = rt_calloc((size_t)d->nb + 1, sizeof(CUevent));
    d->ev_done = rt_calloc((size_t)d->nb + 1, sizeof(CUevent));
    d->ev_cfork = rt_calloc((size_t)m->train.nk + 1, sizeof(CUevent));
    d->ev_cjoin = rt_calloc((size_t)m->train.nk + 1, sizeof(CUevent));
    if (!d->ev_ready || !d->ev_done || !d->ev_cfork || !d->ev_cjoin) {
        rt_err("out of memory");
        return -1;
    }
    if (CU_CHECK(rt_cu.cuStreamCreate(&d->comm, STREAM_NON_BLOCKING)))
        return -1;
    for (int b = 0; b < d->nb; b++)
        if (CU_CHECK(rt_cu.cuEventCreate(&d->ev_ready[b], EVENT_DISABLE_TIMING)) ||
            CU_CHECK(rt_cu.cuEventCreate(&d->ev_done[b], EVENT_DISABLE_TIMING)))
            return -1;
    for (int k = 0; k < m->train.nk; k++)
        if (m->train.cu[k].coll_n > 0 &&
            (CU_CHECK(rt_cu.cuEventCreate(&d->ev_cfork[k], EVENT_DISABLE_TIMING)) ||
             CU_CHECK(rt_cu.cuEventCreate(&d->ev_cjoin[k], EVENT_DISABLE_TIMING))))
            return -1;
    return 0;
}

/* --trace: a timing event before and after every kernel and all-reduce. */
static int trace_setup(const rt_plan *p, dev_run *d)
{
    CUevent **sets[4] = {&d->tk0, &d->tk1, &d->tb0, &d->tb1};
    for (int i = 0; i < 4; i++) {
        int n = i < 2 ? p->nk : d->nb;
        if (!(*sets[i] = rt_calloc((size_t)n + 1, sizeof(CUevent)))) {
            rt_err("out of memory");
            return -1;
        }
        for (int j = 0; j < n; j++)
            if (CU_CHECK(rt_cu.cuEventCreate(&(*sets[i])[j], 0)))
                return -1;
    }
    return CU_CHECK(rt_cu.cuEventCreate(&d->tbase, 0));
}

/* One traced training step (see the file comment): issued eagerly with
 * its timing events, waited for, and its events added to the trace with
 * the host time of its start (the device was idle: the two clocks meet). */
static int traced_step(rt_cuda *cu, dev_run *d, const rt_model *m, rt_trace *tr, int64_t step,
                       int nstat, int ddp, int mode)
{
    if (rt_cuda_wait(cu, "the step before a traced one") != 0)
        return -1;
    const double h0 = rt_comm_time();
    d->tracing = 1;
    int bad = CU_CHECK(rt_cu.cuEventRecord(d->tbase, cu->stream)) ||
              issue_step(cu, d, &d->train, d->exec_t, d->ctl_t, m->param_floats, nstat, ddp, mode, RUN_ALONE);
    d->tracing = 0;
    if (bad || rt_cuda_wait(cu, "a traced step") != 0)
        return -1;
    float a, b;
    for (int k = 0; k < m->train.nk; k++) {
        if (mode == STEP_MICRO && m->train.k[k].phase == RT_PH_OPTIMIZER)
            continue;           /* not run: no_sync's micro-batch */
        if (CU_CHECK(rt_cu.cuEventElapsedTime(&a, d->tbase, d->tk0[k])) ||
            CU_CHECK(rt_cu.cuEventElapsedTime(&b, d->tbase, d->tk1[k])))
            return -1;
        rt_trace_add(tr, 0, RT_TEV_TRAIN, k, step, h0 + a / 1e3, h0 + b / 1e3);
        if (d->prof.secs)
            rt_prof_add(&d->prof, k, (b - a) / 1e3);
    }
    d->prof.calls++;
    for (int i = 0; ddp && mode != STEP_MICRO && i < d->nb; i++) {
        if (CU_CHECK(rt_cu.cuEventElapsedTime(&a, d->tbase, d->tb0[i])) ||
            CU_CHECK(rt_cu.cuEventElapsedTime(&b, d->tbase, d->tb1[i])))
            return -1;
        rt_trace_add(tr, 1, RT_TEV_BUCKET, i, step, h0 + a / 1e3, h0 + b / 1e3);
    }
    return 0;
}

static void dev_free(dev_run *d)
{
    /* after a failure, sticky errors would repeat here: stay quiet */
    if (!rt_cuda_failed()) {
        if (d->gtrain)
            CU_CHECK(rt_cu.cuGraphExecDestroy(d->gtrain));
        if (d->gmicro)
            CU_CHECK(rt_cu.cuGraphExecDestroy(d->gmicro));
        if (d->geval)
            CU_CHECK(rt_cu.cuGraphExecDestroy(d->geval));
        if (d->gtrain_run)
            CU_CHECK(rt_cu.cuGraphExecDestroy(d->gtrain_run));
        if (d->geval_run)
            CU_CHECK(rt_cu.cuGraphExecDestroy(d->geval_run));
        if (d->ev0)
            CU_CHECK(rt_cu.cuEventDestroy_v2(d->ev0));
        if (d->ev1)
            CU_CHECK(rt_cu.cuEventDestroy_v2(d->ev1));
        if (d->evc)
            CU_CHECK(rt_cu.cuEventDestroy_v2(d->evc));
        for (int i = 0; i < PACE; i++)
            if (d->pace[i])
                CU_CHECK(rt_cu.cuEventDestroy_v2(d->pace[i]));
        for (int b = 0; b < d->nb; b++) {
            if (d->ev_ready && d->ev_ready[b])
                CU_CHECK(rt_cu.cuEventDestroy_v2(d->ev_ready[b]));
            if (d->ev_done && d->ev_done[b])
                CU_CHECK(rt_cu.cuEventDestroy_v2(d->ev_done[b]));
        }
        if (d->comm)
            CU_CHECK(rt_cu.cuStreamDestroy_v2(d->comm));
        if (d->tbase)
            CU_CHECK(rt_cu.cuEventDestroy_v2(d->tbase));
        const int nk = d->train.p ? d->train.p->nk : 0;
        CUevent *sets[6] = {d->tk0, d->tk1, d->tb0, d->tb1, d->ev_cfork, d->ev_cjoin};
        int counts[6] = {nk, nk, d->nb, d->nb, nk, nk};
        for (int i = 0; i < 6; i++)
            for (int j = 0; sets[i] && j < counts[i]; j++)
                if (sets[i][j])
                    CU_CHECK(rt_cu.cuEventDestroy_v2(sets[i][j]));
    }
    free(d->tk0);
    free(d->tk1);
    free(d->tb0);
    free(d->tb1);
    free(d->ev_ready);
    free(d->ev_done);
    free(d->ev_cfork);
    free(d->ev_cjoin);
    CUdeviceptr *ptrs[] = {&d->param, &d->grad, &d->opt, &d->act, &d->fix, &d->stat, &d->tx,
                           &d->ty, &d->vx, &d->vy, &d->norm, &d->order[0], &d->order[1], &d->vorder,
                           &d->steploss, &d->stepcount, &d->blocks, &d->found, &d->amp_log, &d->lrs[0], &d->lrs[1],
                           &d->accbuf, &d->folds, &d->zranges};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        rt_cuda_free(*ptrs[i]);
    rt_cuda_host_free(d->h_order[0]);
    rt_cuda_host_free(d->h_order[1]);
    rt_cuda_host_free(d->h_ctl);
    rt_cuda_host_free(d->h_steploss);
    rt_cuda_host_free(d->h_stepcount);
    rt_cuda_host_free(d->h_amp_log);
    rt_cuda_host_free(d->h_lrs[0]);
    rt_cuda_host_free(d->h_lrs[1]);
    free(d->train.f);
    free(d->train.grid);
    free(d->train.fpair);
    free(d->train.pgrid);
    free(d->eval.fpair);
    free(d->eval.pgrid);
    free(d->eval.f);
    free(d->eval.grid);
    rt_bsched_free(&d->s);
    memset(d, 0, sizeof *d);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- the device's operations (rt_device), as the loop drives them ---------- */

static int cuda_begin_epoch(rt_device *dv, int epoch, const int32_t *order, const float *lr, int64_t first_batch)
{
    dev_run *d = dv->impl;
    rt_cuda *cu = d->cu;
    /* The host's order (the loop's sampler: the same rt_shuffle as on the
     * cpu, so both devices see identical batches for a seed) into a
     * pinned slot, copied behind whatever is queued. Slots alternate, so
     * a copy still queued never reads a slot being filled. */
    const int slot = epoch % 2;
    d->epoch = epoch;
    d->slot = slot;
    d->skip = first_batch;
    d->evaluated = 0;
    memcpy(d->h_order[slot], order, (size_t)d->per_rank * sizeof(int32_t));
    memcpy(d->h_lrs[slot], lr, (size_t)d->nbatch * sizeof(float));
    d->h_ctl[slot].b = first_batch;     /* step_begin takes batch b of the order */
    size_t ob = (size_t)d->per_rank * sizeof(int32_t), lb = (size_t)d->nbatch * sizeof(float);
    return (ob && CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(d->order[slot], d->h_order[slot], ob, cu->stream))) ||
                   (lb && CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(d->lrs[slot], d->h_lrs[slot], lb, cu->stream))) ||
                   CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(d->ctl_t, &d->h_ctl[slot], sizeof(rt_cuda_ctl),
                                                       cu->stream)) ||
                   CU_CHECK(rt_cu.cuEventRecord(d->ev0, cu->stream))
               ? -1
               : 0;
}

/* One graph launch per RUN_STEPS steps while that many are left, then
 * per step, paced, no wait for a result (a traced run issues the steps
 * one by one instead: see the file comment). */
static int cuda_train(rt_device *dv, int64_t b0, int64_t b1, int64_t step0)
{
    dev_run *d = dv->impl;
    rt_cuda *cu = d->cu;
    for (; d->gtrain_run && b0 + RUN_STEPS <= b1; b0 += RUN_STEPS)
        if (CU_CHECK(rt_cu.cuGraphLaunch(d->gtrain_run, cu->stream)) || pace(cu, d, d->epoch))
            return -1;
    for (int64_t b = b0; b < b1; b++) {
        /* accumulate: a micro-batch before its group's last gets the no_sync graph */
        const int64_t g0 = b - b % d->acc, gn = d->nbatch - g0 < d->acc ? d->nbatch - g0 : d->acc;
        const int mode = b == g0 + gn - 1 ? STEP_FULL : STEP_MICRO;
        if (d->timed ? traced_step(cu, d, d->m, d->trace, step0 + (b - b0) / d->acc + 1, d->nstat, d->ddp,
                                       mode) != 0
                         : CU_CHECK(rt_cu.cuGraphLaunch(mode == STEP_MICRO ? d->gmicro : d->gtrain, cu->stream)) ||
                               pace(cu, d, d->epoch))
            return -1;
    }
    return 0;
}

/* The eval graph over this rank's test block, right behind the training
 * steps; rank 0's buffers first (DDP's broadcast_buffers), on the device
 * through the collectives. */
static int cuda_evaluate(rt_device *dv)
{
    dev_run *d = dv->impl;
    rt_cuda *cu = d->cu;
    if (CU_CHECK(rt_cu.cuEventRecord(d->ev1, cu->stream)) ||
        (d->ddp && rt_coll_bcast_buffers(d->coll, d->m, (void *)(uintptr_t)d->param, cu->stream) != 0) ||
        CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(d->ctl_v, &d->h_ctl[CTL_EVAL], sizeof(rt_cuda_ctl), cu->stream)))
        return -1;
    for (int64_t s = 0; s < d->nbatch_v;) {
        const int run = d->geval_run && s + RUN_STEPS <= d->nbatch_v;
        if (CU_CHECK(rt_cu.cuGraphLaunch(run ? d->geval_run : d->geval, cu->stream)) || pace(cu, d, d->epoch))
            return -1;
        s += run ? RUN_STEPS : 1;
    }
    d->evaluated = 1;
    return 0;
}

/* Queues the read-back of the control blocks and of the step losses of
 * batches [b0, b1), then waits once (bounded: rt_cuda_wait). */
static int cuda_collect(rt_device *dv, int64_t b0, int64_t b1, rt_dev_out *out)
{
    dev_run *d = dv->impl;
    rt_cuda *cu = d->cu;
    const int64_t n = b1 - b0;
    const int end = d->evaluated;
    int ok = (end || !CU_CHECK(rt_cu.cuEventRecord(d->evc, cu->stream))) &&
             !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(&d->h_ctl[CTL_BACK_T], d->ctl_t, sizeof(rt_cuda_ctl), cu->stream)) &&
             (!end || !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(&d->h_ctl[CTL_BACK_V], d->ctl_v, sizeof(rt_cuda_ctl),
                                                           cu->stream))) &&
             (n == 0 || !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(d->h_steploss,
                                                             d->steploss + (CUdeviceptr)b0 * sizeof(double),
                                                             (size_t)n * sizeof(double), cu->stream))) &&
             (n == 0 || !d->m->train.has_count ||
              !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(d->h_stepcount, d->stepcount + (CUdeviceptr)b0 * sizeof(double),
                                                   (size_t)n * sizeof(double), cu->stream))) &&
             (n == 0 || !d->amp ||
              !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(d->h_amp_log, d->amp_log + (CUdeviceptr)(2 * b0) * sizeof(double),
                                                   (size_t)(2 * n) * sizeof(double), cu->stream)));
    char what[64];
    snprintf(what, sizeof what, "epoch %d", d->epoch);
    if (!ok || rt_cuda_wait(cu, what) != 0)
        return -1;
    float ms = 0;
    if (CU_CHECK(rt_cu.cuEventElapsedTime(&ms, d->ev0, end ? d->ev1 : d->evc)))
        return -1;
    const rt_cuda_ctl *bt = &d->h_ctl[CTL_BACK_T], *bv = &d->h_ctl[CTL_BACK_V];
    if (bt->b != b1 || (end && bv->b != d->nbatch_v)) {
        rt_err("epoch %d: the device ran %lld training and %lld evaluation steps, expected %lld and %lld", d->epoch,
               (long long)(bt->b - d->skip), (long long)(end ? bv->b : 0), (long long)(b1 - d->skip),
               (long long)(end ? d->nbatch_v : 0));
        return -1;
    }
    for (int64_t s = 0; s < n; s++) {
        out->loss[s] = d->h_steploss[s];
        out->count[s] = d->m->train.has_count ? d->h_stepcount[s] : 0;
        if (d->amp) {
            out->scale[s] = d->h_amp_log[2 * s];
            out->found[s] = d->h_amp_log[2 * s + 1];
        }
    }
    out->eval[0] = end ? bv->loss_sum : 0;
    out->eval_count = end ? bv->count_sum : 0;
    out->eval[1] = end ? bv->correct_sum : 0;
    for (int k = 1; k < RT_METRIC_MAX; k++)
        out->eval[1 + k] = end ? bv->metric[k] : 0;
    out->secs = ms / 1000.0;
    out->amp_scale = (float)bt->scale;
    out->amp_tracker = bt->tracker;
    out->amp_skipped = bt->skipped;
    if (end)        /* the scaler's state goes on into the next epoch's control block */
        for (int s2 = 0; s2 < 2; s2++) {
            d->h_ctl[s2].scale = bt->scale;
            d->h_ctl[s2].tracker = bt->tracker;
            d->h_ctl[s2].skipped = bt->skipped;
        }
    return 0;
}

/* Through the host slabs (every rank copies: the loop stays the same on
 * all of them, and the copies are cheap next to an epoch; rank 0 writes). */
static int cuda_pull(rt_device *dv, float *param, float *opt)
{
    dev_run *d = dv->impl;
    return rt_cuda_dtoh(d->cu, param, d->param, (size_t)d->m->param_floats * sizeof(float)) != 0 ||
                   rt_cuda_dtoh(d->cu, opt, d->opt, (size_t)d->m->opt_floats * sizeof(float)) != 0
               ? -1
               : 0;
}

static void cuda_close(rt_device *dv)
{
    dev_run *d = dv->impl;
    if (!d)
        return;
    if (d->prof.secs && d->coll->rank == 0)
        /* no calibration: the host's peaks are not the GPU's */
        rt_prof_print("train", &d->m->train, &d->prof, d->o->batch, d->o->peak_gflops, d->o->peak_gbs);
    rt_prof_free(&d->prof);
    dev_free(d);
    free(d);
    dv->impl = NULL;
}

int rt_cuda_dev_open(rt_device *dv, rt_cuda *cu, const rt_model *m, const rt_opts *o, rt_ws *w,
                     const rt_start *st, const rt_data *data, rt_coll *coll,
                     rt_trace *trace)
{
    *dv = (rt_device){"cuda", 1, NULL, cuda_begin_epoch, cuda_train, cuda_evaluate, cuda_collect, cuda_pull,
                      cuda_close};
    dev_run *dp = rt_calloc(1, sizeof *dp);
    if (!dp) {
        rt_err("out of memory");
        return -1;
    }
    dv->impl = dp;
    dev_run *d = dp;
    d->cu = cu;
    d->m = m;
    d->o = o;
    d->w = w;
    d->trace = trace;
    d->coll = coll;
    const int ddp = d->ddp = coll->on_device && coll->size >= 1;
    const int64_t W = coll->size, rank = coll->rank;
    const int nmax = d->nmax = w->nmax, nstat = d->nstat = w->nstat;
    const rt_dataset *train = &data->train, *test = &data->test;
    const int64_t batch = o->batch, N = train->n, NV = test->n;
    /* this rank's samples: its DistributedSampler shard (as the loop's
     * sampler computes it), and a contiguous block of the test set */
    const rt_shape sh = rt_loop_shape(o, N, NV, (int)rank, (int)W);
    const int64_t per_rank = d->per_rank = sh.per_rank;
    const int64_t nbatch = d->nbatch = sh.nbatch;
    const int64_t vlo = sh.test_lo, nv_mine = sh.test_hi - sh.test_lo;
    d->nbatch_v = (nv_mine + nmax - 1) / nmax;
    /* bytes per sample of x and y, as stored (uint8 stays uint8) */
    const int64_t xb = train->xsize * (train->x_u8 ? 1 : 4), yb = train->ysize * 4;
    const int64_t units = max64(rt_plan_cuda_act(&m->train), rt_plan_cuda_act(&m->eval));
    const int64_t fix = max64(rt_plan_cuda_fix(&m->train), rt_plan_cuda_fix(&m->eval));
    d->pace_timeout = ddp ? o->comm_timeout : cu->timeout;
        if (units > 0 && nmax > INT64_MAX / units) {
        rt_err("cannot allocate activations: %lld floats per sample x batch %d overflows",
               (long long)units, nmax);
        return -1;
    }

    /* ---- kernels ---- */
    if (rt_cuda_check_layout(cu, m->cuda_src) != 0 ||
        rt_cuda_function(cu, "cddprt_step_begin", &d->fbegin) != 0 ||
        rt_cuda_function(cu, "cddprt_step_end", &d->fend) != 0 ||
        rt_cuda_function(cu, "cddprt_step_turn", &d->fturn) != 0 ||
        (rt_cuda_turn_body(&m->train) && rt_cuda_function(cu, "cddprt_opt_turn", &d->fopt_turn) != 0) ||
        rt_cuda_function(cu, "cddprt_amp_check", &d->famp_check) != 0 ||
        rt_cuda_function(cu, "cddprt_amp_decide", &d->famp_decide) != 0 ||
        rt_cuda_function(cu, "cddprt_acc_add", &d->facc_add) != 0 ||
        rt_cuda_function(cu, "cddprt_fold", &d->ffold) != 0 ||
        rt_cuda_function(cu, "cddprt_gnorm", &d->fgnorm) != 0 ||
        rt_cuda_function(cu, "cddprt_clip", &d->fclip) != 0 ||
        rt_cuda_function(cu, "cddprt_clip_value", &d->fclipv) != 0 ||
        plan_setup(cu, &m->train, "train", nmax, &d->train) != 0 ||
        plan_setup(cu, &m->eval, "eval", nmax, &d->eval) != 0 || (ddp && ddp_setup(m, d) != 0) ||
        ((d->timed = trace->on || o->profile) && trace_setup(&m->train, d) != 0) ||
        (o->profile && rt_prof_init(&d->prof, m->train.nk) != 0))
        return -1;
    trace->gpu = 1;

    /* ---- device memory: everything a run touches, allocated once ---- */
    const size_t off_ev = align16(sizeof(rt_exec)), off_ct = 2 * off_ev,
                 off_cv = off_ct + align16(sizeof(rt_cuda_ctl)), blocks = off_cv + align16(sizeof(rt_cuda_ctl));
    if (dalloc(cu, &d->param, m->param_floats, sizeof(float), "parameters") ||
        dalloc(cu, &d->grad, m->param_floats, sizeof(float), "gradients") ||
        dalloc(cu, &d->opt, m->opt_floats, sizeof(float), "optimizer state") ||
        dalloc(cu, &d->act, units * nmax, sizeof(float), "activations") ||
        dalloc(cu, &d->fix, fix, sizeof(float), "scratch") ||
        dalloc(cu, &d->stat, nstat, sizeof(double), "statistics") ||
        dalloc(cu, &d->tx, N, xb, "training samples") ||
        dalloc(cu, &d->ty, N, yb, "training targets") ||
        dalloc(cu, &d->vx, NV, xb, "test samples") ||
        dalloc(cu, &d->vy, NV, yb, "test targets") ||
        dalloc(cu, &d->norm, 2 * data->norm_n, sizeof(float), "normalization") ||
        dalloc(cu, &d->order[0], per_rank, sizeof(int32_t), "sample order") ||
        dalloc(cu, &d->order[1], per_rank, sizeof(int32_t), "sample order") ||
        dalloc(cu, &d->vorder, nv_mine, sizeof(int32_t), "test order") ||
        dalloc(cu, &d->steploss, nbatch, sizeof(double), "step losses") ||
        dalloc(cu, &d->stepcount, nbatch, sizeof(double), "step counts") ||
        rt_cuda_alloc(cu, &d->blocks, blocks, "control blocks") ||
        dalloc(cu, &d->found, 1, sizeof(float), "the loss scaler's flag") ||
        dalloc(cu, &d->amp_log, 2 * nbatch, sizeof(double), "the loss scaler's log") ||
        dalloc(cu, &d->lrs[0], nbatch, sizeof(float), "learning rates") ||
        dalloc(cu, &d->lrs[1], nbatch, sizeof(float), "learning rates") ||
        dalloc(cu, &d->accbuf, m->accumulate > 1 ? m->param_floats : 1, sizeof(float), "the accumulated gradients") ||
        dalloc(cu, &d->folds, d->nb + 1, sizeof(rt_cuda_fold), "the gradient folds") ||
        dalloc(cu, &d->zranges, m->train.nzero > 0 ? 2 * m->train.nzero : 1, sizeof(int64_t), "the ranges to zero"))
        return -1;
    d->zero_floats = 0;
    for (int r = 0; r < m->train.nzero; r++)
        d->zero_floats += m->train.zero[2 * r + 1];
    if (m->train.nzero > 0 && rt_cuda_htod(cu, d->zranges, m->train.zero, 2 * (size_t)m->train.nzero * sizeof(int64_t)))
        return -1;
    d->acc = m->accumulate > 1 ? m->accumulate : 1;
    d->clip = m->clip_norm > 0;
    d->clipv = m->clip_value > 0;
    d->amp = m->precision == RT_PREC_FP16;
    d->exec_t = d->blocks;
    d->exec_v = d->blocks + off_ev;
    d->ctl_t = d->blocks + off_ct;
    d->ctl_v = d->blocks + off_cv;
    size_t order_b, steps_b;
    if (nbytes(per_rank, sizeof(int32_t), &order_b, "sample order") ||
        nbytes(nbatch, sizeof(double), &steps_b, "step losses") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_order[0], order_b, "sample order") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_order[1], order_b, "sample order") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_ctl, NCTL * sizeof(rt_cuda_ctl), "control blocks") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_steploss, steps_b, "step losses") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_stepcount, steps_b, "step counts") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_amp_log, 2 * steps_b, "the loss scaler's log") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_lrs[0], (size_t)nbatch * sizeof(float) + 1, "learning rates") ||
        rt_cuda_host_alloc(cu, (void **)&d->h_lrs[1], (size_t)nbatch * sizeof(float) + 1, "learning rates"))
        return -1;

    /* ---- contents: parameters (after init / --init), data, tables ---- */
    int32_t *iota = rt_malloc(nv_mine > 0 ? (size_t)nv_mine * sizeof(int32_t) : 1);
    if (!iota) {
        rt_err("out of memory");
        return -1;
    }
    for (int64_t i = 0; i < nv_mine; i++)
        iota[i] = (int32_t)(vlo + i);
    rt_exec et = exec_image(d, nmax, data, train, d->tx, d->ty, d->order[1], o->lr);
    et.seed = o->seed;
    /* optimizer steps taken (Adam's t): fewer than steps when fp16 skipped some */
    et.step = st->opt_steps;
    et.scale = 1.0f;
    const rt_amp amp = st->amp;     /* the scaler's settings and starting state */
    rt_exec ev = exec_image(d, nmax, data, test, d->vx, d->vy, d->vorder, o->lr);
    int up = rt_cuda_htod(cu, d->param, w->param, (size_t)m->param_floats * sizeof(float)) ||
             (m->param_floats > 0 &&
              CU_CHECK(rt_cu.cuMemsetD32Async(d->grad, 0, (size_t)m->param_floats, cu->stream))) ||
             rt_cuda_htod(cu, d->opt, w->opt, (size_t)m->opt_floats * sizeof(float)) ||
             rt_cuda_htod(cu, d->tx, train->x, (size_t)(N * xb)) ||
             rt_cuda_htod(cu, d->ty, train->y, (size_t)(N * yb)) ||
             rt_cuda_htod(cu, d->vx, test->x, (size_t)(NV * xb)) ||
             rt_cuda_htod(cu, d->vy, test->y, (size_t)(NV * yb)) ||
             rt_cuda_htod(cu, d->norm, data->norm, (size_t)(2 * data->norm_n) * sizeof(float)) ||
             rt_cuda_htod(cu, d->vorder, iota, (size_t)nv_mine * sizeof(int32_t)) ||
             rt_cuda_htod(cu, d->exec_t, &et, sizeof et) || rt_cuda_htod(cu, d->exec_v, &ev, sizeof ev);
    free(iota);
    if (up)
        return -1;
    /* control blocks: the static fields; b and the sums are reset per pass */
    for (int s = 0; s < 2; s++) {
        rt_cuda_ctl *c = &d->h_ctl[s];
        memset(c, 0, sizeof *c);
        c->e = d->exec_t;
        c->order = d->order[s];
        c->steploss = d->steploss;
        c->nsample = per_rank;
        c->batch = batch;
        c->loss_stat = m->train.loss_stat;
        c->correct_stat = m->train.correct_stat;
        c->stepcount = d->stepcount;
        c->count_stat = m->train.has_count ? m->train.count_stat : -1;
        c->train = 1;
        c->lr = o->lr;
        c->amp = d->amp;
        c->scale = amp.scale;
        c->growth = amp.growth;
        c->backoff = amp.backoff;
        c->tracker = amp.tracker;
        c->skipped = amp.skipped;
        c->interval = amp.interval;
        c->ngrad = m->param_floats;
        c->found = d->found;
        c->amp_log = d->amp_log;
        c->lrs = d->lrs[s];
        c->clip = m->clip_norm;
        c->clip_value = m->clip_value;
        c->accumulate = d->acc;
        c->acc = d->accbuf;
        c->zero_grad = m->train.nzero;
        c->zranges = d->zranges;
        c->zero_fix = m->train.fix_zero;
        c->zero_stat = nstat;
    }
    rt_cuda_ctl *cv = &d->h_ctl[CTL_EVAL];
    memset(cv, 0, sizeof *cv);
    cv->e = d->exec_v;
    cv->order = d->vorder;
    cv->nsample = nv_mine;
    cv->batch = nmax;
    cv->loss_stat = m->eval.loss_stat;
    cv->correct_stat = m->eval.correct_stat;
    cv->count_stat = m->eval.has_count ? m->eval.count_stat : -1;
    cv->nmetric = rt_plan_metrics(&m->eval);
    cv->lr = o->lr;
    cv->accumulate = 1;
    cv->zero_fix = m->eval.fix_zero;
    cv->zero_stat = nstat;
    /* the fold ranges: each bucket's, then the whole slab's (one rank) */
    rt_cuda_fold *fl = rt_calloc((size_t)d->nb + 1, sizeof *fl);
    if (!fl) {
        rt_err("out of memory");
        return -1;
    }
    for (int b = 0; b <= d->nb; b++)
        fl[b] = (rt_cuda_fold){d->ctl_t, b < d->nb ? d->bk[b].off : 0, b < d->nb ? d->bk[b].size : m->param_floats};
    int bad = rt_cuda_htod(cu, d->folds, fl, (size_t)(d->nb + 1) * sizeof *fl);
    free(fl);
    if (bad || rt_cuda_htod(cu, d->ctl_t, &d->h_ctl[0], sizeof(rt_cuda_ctl)) ||
        rt_cuda_htod(cu, d->ctl_v, cv, sizeof(rt_cuda_ctl)))
        return -1;

    /* ---- the two graphs, captured once ---- */
    /* runs of RUN_STEPS steps where they fit (not with accumulate, whose
     * graph changes from batch to batch, nor when steps are timed) */
    const int runs = d->acc == 1 && !d->timed;
    if (capture(cu, d, &d->train, d->exec_t, d->ctl_t, m->param_floats, nstat, ddp, STEP_FULL, 1, &d->gtrain) != 0 ||
        (d->acc > 1 && capture(cu, d, &d->train, d->exec_t, d->ctl_t, m->param_floats, nstat, ddp, STEP_MICRO, 1,
                               &d->gmicro) != 0) ||
        capture(cu, d, &d->eval, d->exec_v, d->ctl_v, 0, nstat, 0, STEP_FULL, 1, &d->geval) != 0 ||
        (runs && d->nbatch >= RUN_STEPS &&
         capture(cu, d, &d->train, d->exec_t, d->ctl_t, m->param_floats, nstat, ddp, STEP_FULL, RUN_STEPS,
                 &d->gtrain_run) != 0) ||
        (runs && d->nbatch_v >= RUN_STEPS &&
         capture(cu, d, &d->eval, d->exec_v, d->ctl_v, 0, nstat, 0, STEP_FULL, RUN_STEPS, &d->geval_run) != 0) ||
        CU_CHECK(rt_cu.cuEventCreate(&d->ev0, 0)) || CU_CHECK(rt_cu.cuEventCreate(&d->ev1, 0)) ||
        CU_CHECK(rt_cu.cuEventCreate(&d->evc, 0)) ||
        rt_cuda_wait(cu, "preparing the CUDA graphs") != 0)
        return -1;
    for (int i = 0; i < PACE; i++)
        if (CU_CHECK(rt_cu.cuEventCreate(&d->pace[i], EVENT_DISABLE_TIMING)))
            return -1;

    return 0;
}
