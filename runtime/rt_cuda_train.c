/* rt_cuda_train.c: the epoch loop on the CUDA device.
 *
 * The same loop as rt_train.c -- same batches, same sums, same log lines
 * and CSV rows (through rt_log_*) -- arranged so that the host never waits
 * inside an epoch:
 *
 *   - Both splits are copied to the device once, as uint8 images and
 *     labels; the model's first kernel gathers and normalizes a batch from
 *     them, exactly as the C kernel does from host memory.
 *   - A training step is captured ONCE as a CUDA graph:
 *         memset grad, fix, stat         (the kernels accumulate into them)
 *         cddprt_step_begin(ctl)          e->n, e->idx, e->lr for batch ctl->b
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
 *   - At the start of an epoch the host queues two copies: the epoch's
 *     sample order and a fresh control block (b = 0, sums = 0). At its end
 *     it queues the read-back of the control blocks and the step losses,
 *     then waits once (bounded: rt_cuda_wait) and logs.
 *   - Sample order: computed on the host with the same rt_shuffle the CPU
 *     path uses -- a deliberate choice, so that --device cpu and cuda see
 *     identical batches for a seed and a run can be compared step by step
 *     (tests/gpu/run.sh does). It costs about a millisecond per epoch, done
 *     while the GPU runs the previous epoch, and one 240 KB copy from
 *     pinned memory. The order and control-block buffers are double
 *     buffered (slot = epoch % 2), on the host and on the device: the host
 *     fills slot k+1 while the copies and graphs of epoch k may still be
 *     queued, and the last user of slot k+1 (epoch k-1) finished before
 *     epoch k's results were read.
 *   - The epoch time is measured on the device: events around the train
 *     graph launches (evaluation excluded, as on the CPU).
 *   - Pacing: the host runs at most PACE graph launches ahead of the GPU
 *     (an event recorded after each launch, the one PACE launches back
 *     waited for). Every wait is then about a few steps of work, so its
 *     bound means "no progress for that long", whatever an epoch costs.
 *   - Several ranks (cu->nccl): DDP inside the graph. Each rank trains its
 *     DistributedSampler shard (rt_sampler, as on the CPU). After the
 *     kernel that completes a gradient bucket, an event forks a second
 *     stream, which waits for it and all-reduces the bucket with NCCL
 *     (ncclAvg) while the main stream goes on with backward; the
 *     optimizer kernel that reads the bucket waits for its all-reduce's
 *     event; the step ends by joining the comm stream. All of it is
 *     captured once, so the overlap costs no host work per step. The loss
 *     and evaluation sums are reduced over MPI once per epoch, after the
 *     read-back; evaluation splits the test set into contiguous blocks,
 *     every sample once.
 *   - --trace: the training steps are issued one by one instead of as
 *     the graph -- the same operations in the same order on the same
 *     streams -- with timing events around every kernel (main stream,
 *     tid 0) and every all-reduce (comm stream, tid 1), read back after
 *     each step. Times are the device's, placed on the host clock at the
 *     step's start (the device is idle then). A traced run therefore pays
 *     a launch per kernel and a sync per step; evaluation stays a graph
 *     and is not traced.
 * --max-steps launches only that many steps; --init and --save go through
 * the host parameter slab (copied in before, out after). */
#include "rt_internal.h"
#include "rt_cuda_kernels.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { CAPTURE_THREAD_LOCAL = 1, FUNC_MAX_THREADS = 0, EVENT_DISABLE_TIMING = 2,
       STREAM_NON_BLOCKING = 1, PACE = 8 };

typedef struct plan_dev {
    const rt_plan *p;
    CUfunction *f;          /* [nk] */
    unsigned (*grid)[3];    /* [nk] */
} plan_dev;

typedef struct dev_run {
    CUdeviceptr param, grad, opt, act, fix, stat;
    CUdeviceptr timg, tlab, vimg, vlab;     /* training and test split */
    CUdeviceptr order[2], vorder;           /* sample orders: train (per slot), test */
    CUdeviceptr steploss;                   /* double[nbatch] */
    CUdeviceptr blocks;                     /* exec train, exec eval, ctl train, ctl eval */
    CUdeviceptr exec_t, exec_v, ctl_t, ctl_v;
    int32_t *h_order[2];                    /* pinned */
    rt_cuda_ctl *h_ctl;                     /* pinned [5]: train slot 0/1, eval, back train, back eval */
    double *h_steploss;                     /* pinned [nbatch] */
    CUfunction fbegin, fend;
    int amp;                                /* fp16 loss scaling in the train step */
    CUfunction famp_check, famp_decide;
    CUdeviceptr found, amp_log;             /* float; double[2 * nbatch] */
    double *h_amp_log;                      /* pinned [2 * nbatch] */
    plan_dev train, eval;
    CUgraphExec gtrain, geval;
    CUevent ev0, ev1;
    CUevent pace[PACE];                     /* after launch i: pace[i % PACE] */
    int64_t launches;
    double pace_timeout;
    /* DDP: the comm stream and each bucket's fork and join events */
    CUstream comm;
    const rt_bucket *bk;
    int nb;
    rt_bucket one;
    CUevent *ev_ready, *ev_done;            /* [nb] */
    CUevent *ev_cfork, *ev_cjoin;           /* [nk]: around a SyncBatchNorm sum after kernel k */
    /* --trace: timing events, [nk] per kernel and [nb] per all-reduce */
    int tracing;                            /* the step being issued records them */
    CUevent tbase, *tk0, *tk1, *tb0, *tb1;
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

/* The functions and grids of a plan's kernels, checked against the
 * device's limits before anything is captured. */
static int plan_setup(rt_cuda *cu, const rt_plan *p, const char *which, int nmax, plan_dev *pd)
{
    pd->p = p;
    if (!p->cu) {
        rt_err("model is malformed: the %s plan has no CUDA launch table", which);
        return -1;
    }
    pd->f = calloc((size_t)(p->nk ? p->nk : 1), sizeof *pd->f);
    pd->grid = calloc((size_t)(p->nk ? p->nk : 1), sizeof *pd->grid);
    if (!pd->f || !pd->grid) {
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
        int maxt = 0;
        if (CU_CHECK(rt_cu.cuFuncGetAttribute(&maxt, FUNC_MAX_THREADS, pd->f[k])))
            return -1;
        uint64_t t = (uint64_t)l->block[0] * l->block[1] * l->block[2];
        if (t > (uint64_t)maxt) {
            rt_err("kernel %s: block of %llu threads, but compiled for at most %d on %s", l->name,
                   (unsigned long long)t, maxt, cu->arch);
            return -1;
        }
    }
    return 0;
}

/* Kernel k of the plan on the main stream, between its timing events
 * when the step is traced. */
static int launch_kernel(rt_cuda *cu, dev_run *d, const plan_dev *pd, int k, CUdeviceptr exec)
{
    return (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tk0[k], cu->stream))) ||
           rt_cuda_launch1(cu, pd->f[k], pd->p->cu[k].name, pd->grid[k], pd->p->cu[k].block, exec) ||
           (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tk1[k], cu->stream)));
}

/* The plan's kernel k inside a capture, with the gradient buckets around
 * it when ddp: first the main stream waits for the all-reduce of every
 * bucket kernel k updates; after it, each bucket kernel k completed is
 * handed to the comm stream (an event the comm stream waits for, the
 * all-reduce, an event the optimizer will wait for). Buckets go in table
 * order, the same on every rank, so the collectives match. */
static int launch_step_kernel(rt_cuda *cu, dev_run *d, const plan_dev *pd, int k, CUdeviceptr exec,
                              int ddp, int *next_bucket, int later)
{
    for (int b = 0; ddp && b < d->nb && !later; b++)
        if (d->bk[b].opt == k && CU_CHECK(rt_cu.cuStreamWaitEvent(cu->stream, d->ev_done[b], 0)))
            return -1;
    /* later: an optimizer kernel the loss scaler runs after all buckets */
    if (!later && launch_kernel(cu, d, pd, k, exec))
        return -1;
    /* SyncBatchNorm's sums: on the comm stream too, behind the buckets
     * handed over so far, because one NCCL communicator must see its
     * collectives in one order on every rank; the main stream waits,
     * since the next kernel reads the sums */
    const rt_cuda_launch *l = &pd->p->cu[k];
    if (ddp && l->coll_n > 0 &&
        (CU_CHECK(rt_cu.cuEventRecord(d->ev_cfork[k], cu->stream)) ||
         CU_CHECK(rt_cu.cuStreamWaitEvent(d->comm, d->ev_cfork[k], 0)) ||
         rt_nccl_allreduce_sum(cu->nccl, d->fix + (CUdeviceptr)l->coll_off * sizeof(float), (size_t)l->coll_n,
                               d->comm, l->name) ||
         CU_CHECK(rt_cu.cuEventRecord(d->ev_cjoin[k], d->comm)) ||
         CU_CHECK(rt_cu.cuStreamWaitEvent(cu->stream, d->ev_cjoin[k], 0))))
        return -1;
    for (; ddp && *next_bucket < d->nb && d->bk[*next_bucket].ready <= k; ++*next_bucket) {
        const int b = *next_bucket;
        const rt_bucket *bk = &d->bk[b];
        if (CU_CHECK(rt_cu.cuEventRecord(d->ev_ready[b], cu->stream)) ||
            CU_CHECK(rt_cu.cuStreamWaitEvent(d->comm, d->ev_ready[b], 0)) ||
            (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tb0[b], d->comm))) ||
            rt_nccl_allreduce_avg(cu->nccl, d->grad + (CUdeviceptr)bk->off * sizeof(float),
                                  (size_t)bk->size, d->comm, b) ||
            (d->tracing && CU_CHECK(rt_cu.cuEventRecord(d->tb1[b], d->comm))) ||
            CU_CHECK(rt_cu.cuEventRecord(d->ev_done[b], d->comm)))
            return -1;
    }
    return 0;
}

/* One step of plan p: the memsets, step_begin, the plan's kernels on exec
 * (with the bucket all-reduces when ddp), step_end. Captured once as the
 * step's graph, or issued as is for a traced step. */
static int issue_step(rt_cuda *cu, dev_run *d, const plan_dev *pd, CUdeviceptr exec, CUdeviceptr ctl,
                      int64_t grad_floats, int nstat, int ddp)
{
    static const unsigned one[3] = {1, 1, 1};
    int ok = 1;
    if (grad_floats > 0)
        ok = !CU_CHECK(rt_cu.cuMemsetD32Async(d->grad, 0, (size_t)grad_floats, cu->stream));
    /* fused row reductions may accumulate into fix too (cddprt.h) */
    if (pd->p->fix_floats > 0)
        ok = ok && !CU_CHECK(rt_cu.cuMemsetD32Async(d->fix, 0, (size_t)pd->p->fix_floats, cu->stream));
    ok = ok && !CU_CHECK(rt_cu.cuMemsetD32Async(d->stat, 0, 2 * (size_t)nstat, cu->stream));
    ok = ok && !rt_cuda_launch1(cu, d->fbegin, "cddprt_step_begin", one, one, ctl);
    int next_bucket = 0;
    const int amp = d->amp && pd == &d->train;
    for (int k = 0; ok && k < pd->p->nk; k++)
        ok = !launch_step_kernel(cu, d, pd, k, exec, ddp, &next_bucket,
                                 amp && pd->p->k[k].phase == RT_PH_OPTIMIZER);
    /* join: the comm stream's last all-reduce (it runs them in order) */
    if (ok && ddp && d->nb > 0 && next_bucket != d->nb) {
        rt_err("the step cannot be captured: gradient bucket %d (complete after train kernel %d) was never "
               "handed to the comm stream; the model's bucket table does not fit its %d train kernels",
               next_bucket, d->bk[next_bucket].ready, pd->p->nk);
        ok = 0;
    }
    if (ok && ddp && d->nb > 0)
        ok = !CU_CHECK(rt_cu.cuStreamWaitEvent(cu->stream, d->ev_done[d->nb - 1], 0));
    if (ok && amp) {
        const unsigned threads[3] = {256, 1, 1};
        int64_t blocks = (grad_floats + 255) / 256;
        const unsigned grid[3] = {(unsigned)(blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks), 1, 1};
        ok = !rt_cuda_launch1(cu, d->famp_check, "cddprt_amp_check", grid, threads, ctl) &&
             (!ddp || !rt_nccl_allreduce_avg(cu->nccl, d->found, 1, cu->stream, d->nb)) &&
             !rt_cuda_launch1(cu, d->famp_decide, "cddprt_amp_decide", one, one, ctl);
        for (int k = 0; ok && k < pd->p->nk; k++)
            if (pd->p->k[k].phase == RT_PH_OPTIMIZER)
                ok = !launch_kernel(cu, d, pd, k, exec);
    }
    ok = ok && !rt_cuda_launch1(cu, d->fend, "cddprt_step_end", one, one, ctl);
    return ok ? 0 : -1;
}

/* issue_step as a graph. The capture is always ended, even after a failed
 * launch, so the stream stays usable. */
static int capture(rt_cuda *cu, dev_run *d, const plan_dev *pd, CUdeviceptr exec, CUdeviceptr ctl,
                   int64_t grad_floats, int nstat, int ddp, CUgraphExec *out)
{
    *out = NULL;
    if (CU_CHECK(rt_cu.cuStreamBeginCapture_v2(cu->stream, CAPTURE_THREAD_LOCAL)))
        return -1;
    int ok = !issue_step(cu, d, pd, exec, ctl, grad_floats, nstat, ddp);
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
static rt_exec exec_image(const dev_run *d, int nmax, CUdeviceptr img, CUdeviceptr lab, CUdeviceptr order,
                          int64_t img_size, float lr)
{
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.n = nmax;
    e.nmax = nmax;
    e.act = (float *)(uintptr_t)d->act;
    e.fix = (float *)(uintptr_t)d->fix;
    e.param = (float *)(uintptr_t)d->param;
    e.grad = (float *)(uintptr_t)d->grad;
    e.opt = (float *)(uintptr_t)d->opt;
    e.stat = (double *)(uintptr_t)d->stat;
    e.img = (const uint8_t *)(uintptr_t)img;
    e.lab = (const uint8_t *)(uintptr_t)lab;
    e.idx = (const int32_t *)(uintptr_t)order;
    e.img_size = img_size;
    e.lr = lr;
    e.step = 0;
    e.nthreads = 1;
    e.rank = rt_world.rank;
    e.world = rt_world.size;
    return e;
}

/* This rank's samples of the epoch into a pinned slot: the sampler's
 * shard, which with one rank is the host's rt_shuffle order itself (see
 * the file comment for why the host computes it). */
static void fill_order(int32_t *o, rt_sampler *smp, int epoch)
{
    rt_sampler_set_epoch(smp, (uint64_t)epoch);
    memcpy(o, smp->shard, (size_t)smp->per_rank * sizeof(int32_t));
}

/* Records launch i's event and waits for launch i - PACE's: the host
 * stays at most PACE launches ahead, and each wait is bounded. */
static int pace(rt_cuda *cu, dev_run *d, int epoch)
{
    const int slot = (int)(d->launches % PACE);
    if (d->launches >= PACE) {
        char what[96];
        snprintf(what, sizeof what, "step %lld of epoch %d", (long long)(d->launches - PACE), epoch);
        if (rt_cuda_event_wait(cu, d->pace[slot], d->pace_timeout, what) != 0)
            return -1;
    }
    d->launches++;
    return CU_CHECK(rt_cu.cuEventRecord(d->pace[slot], cu->stream));
}

/* The comm stream and the buckets' events, when several ranks train. */
static int ddp_setup(const rt_model *m, dev_run *d)
{
    if (rt_bucket_table(m, &d->one, &d->bk, &d->nb) != 0)
        return -1;
    d->ev_ready = calloc((size_t)d->nb + 1, sizeof(CUevent));
    d->ev_done = calloc((size_t)d->nb + 1, sizeof(CUevent));
    d->ev_cfork = calloc((size_t)m->train.nk + 1, sizeof(CUevent));
    d->ev_cjoin = calloc((size_t)m->train.nk + 1, sizeof(CUevent));
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
        if (!(*sets[i] = calloc((size_t)n + 1, sizeof(CUevent)))) {
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
                       int nstat, int ddp)
{
    if (rt_cuda_wait(cu, "the step before a traced one") != 0)
        return -1;
    const double h0 = rt_comm_time();
    d->tracing = 1;
    int bad = CU_CHECK(rt_cu.cuEventRecord(d->tbase, cu->stream)) ||
              issue_step(cu, d, &d->train, d->exec_t, d->ctl_t, m->param_floats, nstat, ddp);
    d->tracing = 0;
    if (bad || rt_cuda_wait(cu, "a traced step") != 0)
        return -1;
    float a, b;
    for (int k = 0; k < m->train.nk; k++) {
        if (CU_CHECK(rt_cu.cuEventElapsedTime(&a, d->tbase, d->tk0[k])) ||
            CU_CHECK(rt_cu.cuEventElapsedTime(&b, d->tbase, d->tk1[k])))
            return -1;
        rt_trace_add(tr, 0, RT_TEV_TRAIN, k, step, h0 + a / 1e3, h0 + b / 1e3);
    }
    for (int i = 0; ddp && i < d->nb; i++) {
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
        if (d->geval)
            CU_CHECK(rt_cu.cuGraphExecDestroy(d->geval));
        if (d->ev0)
            CU_CHECK(rt_cu.cuEventDestroy_v2(d->ev0));
        if (d->ev1)
            CU_CHECK(rt_cu.cuEventDestroy_v2(d->ev1));
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
    CUdeviceptr *ptrs[] = {&d->param, &d->grad, &d->opt, &d->act, &d->fix, &d->stat, &d->timg,
                           &d->tlab, &d->vimg, &d->vlab, &d->order[0], &d->order[1], &d->vorder,
                           &d->steploss, &d->blocks, &d->found, &d->amp_log};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        rt_cuda_free(*ptrs[i]);
    rt_cuda_host_free(d->h_order[0]);
    rt_cuda_host_free(d->h_order[1]);
    rt_cuda_host_free(d->h_ctl);
    rt_cuda_host_free(d->h_steploss);
    rt_cuda_host_free(d->h_amp_log);
    free(d->train.f);
    free(d->train.grid);
    free(d->eval.f);
    free(d->eval.grid);
    memset(d, 0, sizeof *d);
}

/* rt_bcast_buffers for the device's copy: through the host, once an
 * epoch, when several ranks hold buffers (it waits for the epoch's steps). */
static int bcast_buffers(rt_cuda *cu, dev_run *d, const rt_model *m, rt_ws *w)
{
    if (rt_world.size <= 1)
        return 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < m->nparam; i++) {
            const rt_param *p = &m->params[i];
            const CUdeviceptr at = d->param + (CUdeviceptr)p->off * sizeof(float);
            const size_t bytes = (size_t)p->numel * sizeof(float);
            if ((rt_param_flags(m, i) & RT_PARAM_BUFFER) &&
                (pass ? rt_cuda_htod(cu, at, w->param + p->off, bytes) : rt_cuda_dtoh(cu, w->param + p->off, at, bytes)))
                return -1;
        }
        if (pass == 0)
            rt_bcast_buffers(m, w->param);
    }
    return 0;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* --checkpoint: the device's parameters and optimizer state through the
 * host slabs (every rank copies: the loop stays the same on all of them,
 * and the copies are cheap next to an epoch; rank 0 writes). */
static int save_from_device(rt_cuda *cu, dev_run *d, const rt_model *m, const rt_opts *o, rt_ws *w,
                            const rt_resume *st)
{
    if (rt_cuda_dtoh(cu, w->param, d->param, (size_t)m->param_floats * sizeof(float)) != 0 ||
        rt_cuda_dtoh(cu, w->opt, d->opt, (size_t)m->opt_floats * sizeof(float)) != 0)
        return -1;
    return rt_ckpt_save(m, o, o->ckpt_path, w->param, w->opt, st);
}

/* --checkpoint-every inside an epoch: after `done` steps of it (from batch
 * skip), the step losses so far summed over the ranks and added in step
 * order to st's sums (as the epoch's end adds them), then the save. */
static int device_checkpoint(rt_cuda *cu, dev_run *d, const rt_model *m, const rt_opts *o, rt_ws *w,
                             int64_t skip, int64_t done, int64_t per_rank, int64_t batch, double *buf,
                             rt_resume *st)
{
    if (rt_cuda_wait(cu, "the steps before a checkpoint") != 0 ||
        rt_cuda_dtoh(cu, buf, d->steploss + (CUdeviceptr)skip * sizeof(double),
                     (size_t)done * sizeof(double)) != 0)
        return -1;
    rt_comm_sum_f64(buf, done, "the checkpoint's loss all-reduce");
    if (d->amp) {       /* the scaler's state now: from the train control block */
        rt_cuda_ctl c;
        if (rt_cuda_dtoh(cu, &c, d->ctl_t, sizeof c) != 0)
            return -1;
        st->scale = (float)c.scale;
        st->tracker = c.tracker;
        st->skipped = c.skipped;
        st->opt_steps = st->step - c.skipped;
    }
    for (int64_t s = 0; s < done; s++) {
        const int64_t b = skip + s;
        st->loss_sum += buf[s];
        st->rows += (double)(per_rank - b * batch < batch ? per_rank - b * batch : batch) * rt_world.size;
    }
    return save_from_device(cu, d, m, o, w, st);
}

int rt_cuda_train(rt_cuda *cu, const rt_model *m, const rt_opts *o, rt_ws *w, const rt_resume *rs,
                  const rt_dataset *train,
                  const rt_dataset *test, rt_log *log)
{
    dev_run d;
    memset(&d, 0, sizeof d);
    rt_sampler smp;
    memset(&smp, 0, sizeof smp);
    double *sums = NULL;
    int rc = -1;
    const int ddp = cu->nccl != NULL;
    rt_trace trace;
    memset(&trace, 0, sizeof trace);
    const int64_t W = rt_world.size, rank = rt_world.rank;
    const int nmax = w->nmax, nstat = w->nstat;
    const int64_t batch = o->batch, N = train->n, NV = test->n;
    if (rt_sampler_init(&smp, N, (int)rank, (int)W, o->shuffle, o->drop_last, o->seed) != 0)
        return -1;
    /* this rank's samples: its shard, and a contiguous block of the test set */
    const int64_t per_rank = smp.per_rank;
    const int64_t nbatch = o->drop_last ? per_rank / batch : (per_rank + batch - 1) / batch;
    const int64_t epoch_samples = o->drop_last ? nbatch * batch : per_rank;
    const int64_t vlo = NV * rank / W, nv_mine = NV * (rank + 1) / W - vlo;
    const int64_t nbatch_v = (nv_mine + nmax - 1) / nmax;
    const int64_t img_size = train->rows * train->cols;
    const int64_t units = max64(m->train.act_units, m->eval.act_units);
    const int64_t fix = max64(m->train.fix_floats, m->eval.fix_floats);
    d.pace_timeout = ddp ? o->comm_timeout : cu->timeout;
    if (units > 0 && nmax > INT64_MAX / units) {
        rt_err("cannot allocate activations: %lld floats per sample x batch %d overflows",
               (long long)units, nmax);
        goto out;
    }
    /* step losses, then the pass sums: reduced over the ranks in one call */
    if (!(sums = calloc((size_t)nbatch + 3, sizeof *sums))) {
        rt_err("out of memory");
        goto out;
    }

    /* ---- kernels ---- */
    if (rt_cuda_check_layout(cu, m->cuda_src) != 0 ||
        rt_cuda_function(cu, "cddprt_step_begin", &d.fbegin) != 0 ||
        rt_cuda_function(cu, "cddprt_step_end", &d.fend) != 0 ||
        rt_cuda_function(cu, "cddprt_amp_check", &d.famp_check) != 0 ||
        rt_cuda_function(cu, "cddprt_amp_decide", &d.famp_decide) != 0 ||
        plan_setup(cu, &m->train, "train", nmax, &d.train) != 0 ||
        plan_setup(cu, &m->eval, "eval", nmax, &d.eval) != 0 || (ddp && ddp_setup(m, &d) != 0) ||
        rt_trace_open(&trace, o->trace_path) != 0 || (trace.on && trace_setup(&m->train, &d) != 0))
        goto out;
    trace.gpu = 1;

    /* ---- device memory: everything a run touches, allocated once ---- */
    const size_t off_ev = align16(sizeof(rt_exec)), off_ct = 2 * off_ev,
                 off_cv = off_ct + align16(sizeof(rt_cuda_ctl)), blocks = off_cv + align16(sizeof(rt_cuda_ctl));
    if (dalloc(cu, &d.param, m->param_floats, sizeof(float), "parameters") ||
        dalloc(cu, &d.grad, m->param_floats, sizeof(float), "gradients") ||
        dalloc(cu, &d.opt, m->opt_floats, sizeof(float), "optimizer state") ||
        dalloc(cu, &d.act, units * nmax, sizeof(float), "activations") ||
        dalloc(cu, &d.fix, fix, sizeof(float), "scratch") ||
        dalloc(cu, &d.stat, nstat, sizeof(double), "statistics") ||
        dalloc(cu, &d.timg, N * img_size, 1, "training images") ||
        dalloc(cu, &d.tlab, N, 1, "training labels") ||
        dalloc(cu, &d.vimg, NV * img_size, 1, "test images") ||
        dalloc(cu, &d.vlab, NV, 1, "test labels") ||
        dalloc(cu, &d.order[0], per_rank, sizeof(int32_t), "sample order") ||
        dalloc(cu, &d.order[1], per_rank, sizeof(int32_t), "sample order") ||
        dalloc(cu, &d.vorder, nv_mine, sizeof(int32_t), "test order") ||
        dalloc(cu, &d.steploss, nbatch, sizeof(double), "step losses") ||
        rt_cuda_alloc(cu, &d.blocks, blocks, "control blocks") ||
        dalloc(cu, &d.found, 1, sizeof(float), "the loss scaler's flag") ||
        dalloc(cu, &d.amp_log, 2 * nbatch, sizeof(double), "the loss scaler's log"))
        goto out;
    d.amp = m->precision == RT_PREC_FP16;
    d.exec_t = d.blocks;
    d.exec_v = d.blocks + off_ev;
    d.ctl_t = d.blocks + off_ct;
    d.ctl_v = d.blocks + off_cv;
    size_t order_b, steps_b;
    if (nbytes(per_rank, sizeof(int32_t), &order_b, "sample order") ||
        nbytes(nbatch, sizeof(double), &steps_b, "step losses") ||
        rt_cuda_host_alloc(cu, (void **)&d.h_order[0], order_b, "sample order") ||
        rt_cuda_host_alloc(cu, (void **)&d.h_order[1], order_b, "sample order") ||
        rt_cuda_host_alloc(cu, (void **)&d.h_ctl, NCTL * sizeof(rt_cuda_ctl), "control blocks") ||
        rt_cuda_host_alloc(cu, (void **)&d.h_steploss, steps_b, "step losses") ||
        rt_cuda_host_alloc(cu, (void **)&d.h_amp_log, 2 * steps_b, "the loss scaler's log"))
        goto out;

    /* ---- contents: parameters (after init / --init), data, tables ---- */
    int32_t *iota = malloc(nv_mine > 0 ? (size_t)nv_mine * sizeof(int32_t) : 1);
    if (!iota) {
        rt_err("out of memory");
        goto out;
    }
    for (int64_t i = 0; i < nv_mine; i++)
        iota[i] = (int32_t)(vlo + i);
    rt_exec et = exec_image(&d, nmax, d.timg, d.tlab, d.order[1], img_size, o->lr);
    et.seed = o->seed;
    /* optimizer steps taken (Adam's t): fewer than steps when fp16 skipped some */
    et.step = rs->active ? (d.amp ? rs->opt_steps : rs->step) : 0;
    et.scale = 1.0f;
    rt_amp amp;     /* the scaler's settings and starting state */
    rt_amp_init(&amp, m, rs);
    rt_exec ev = exec_image(&d, nmax, d.vimg, d.vlab, d.vorder, img_size, o->lr);
    int up = rt_cuda_htod(cu, d.param, w->param, (size_t)m->param_floats * sizeof(float)) ||
             (m->param_floats > 0 &&
              CU_CHECK(rt_cu.cuMemsetD32Async(d.grad, 0, (size_t)m->param_floats, cu->stream))) ||
             rt_cuda_htod(cu, d.opt, w->opt, (size_t)m->opt_floats * sizeof(float)) ||
             rt_cuda_htod(cu, d.timg, train->img, (size_t)(N * img_size)) ||
             rt_cuda_htod(cu, d.tlab, train->lab, (size_t)N) ||
             rt_cuda_htod(cu, d.vimg, test->img, (size_t)(NV * img_size)) ||
             rt_cuda_htod(cu, d.vlab, test->lab, (size_t)NV) ||
             rt_cuda_htod(cu, d.vorder, iota, (size_t)nv_mine * sizeof(int32_t)) ||
             rt_cuda_htod(cu, d.exec_t, &et, sizeof et) || rt_cuda_htod(cu, d.exec_v, &ev, sizeof ev);
    free(iota);
    if (up)
        goto out;
    /* control blocks: the static fields; b and the sums are reset per pass */
    for (int s = 0; s < 2; s++) {
        rt_cuda_ctl *c = &d.h_ctl[s];
        memset(c, 0, sizeof *c);
        c->e = d.exec_t;
        c->order = d.order[s];
        c->steploss = d.steploss;
        c->nsample = per_rank;
        c->batch = batch;
        c->loss_stat = m->train.loss_stat;
        c->correct_stat = m->train.correct_stat;
        c->train = 1;
        c->lr = o->lr;
        c->amp = d.amp;
        c->scale = amp.scale;
        c->growth = amp.growth;
        c->backoff = amp.backoff;
        c->tracker = amp.tracker;
        c->skipped = amp.skipped;
        c->interval = amp.interval;
        c->ngrad = m->param_floats;
        c->found = d.found;
        c->amp_log = d.amp_log;
    }
    rt_cuda_ctl *cv = &d.h_ctl[CTL_EVAL];
    memset(cv, 0, sizeof *cv);
    cv->e = d.exec_v;
    cv->order = d.vorder;
    cv->nsample = nv_mine;
    cv->batch = nmax;
    cv->loss_stat = m->eval.loss_stat;
    cv->correct_stat = m->eval.correct_stat;
    cv->lr = o->lr;
    if (rt_cuda_htod(cu, d.ctl_t, &d.h_ctl[0], sizeof(rt_cuda_ctl)) ||
        rt_cuda_htod(cu, d.ctl_v, cv, sizeof(rt_cuda_ctl)))
        goto out;

    /* ---- the two graphs, captured once ---- */
    if (capture(cu, &d, &d.train, d.exec_t, d.ctl_t, m->param_floats, nstat, ddp, &d.gtrain) != 0 ||
        capture(cu, &d, &d.eval, d.exec_v, d.ctl_v, 0, nstat, 0, &d.geval) != 0 ||
        CU_CHECK(rt_cu.cuEventCreate(&d.ev0, 0)) || CU_CHECK(rt_cu.cuEventCreate(&d.ev1, 0)) ||
        rt_cuda_wait(cu, "preparing the CUDA graphs") != 0)
        goto out;
    for (int i = 0; i < PACE; i++)
        if (CU_CHECK(rt_cu.cuEventCreate(&d.pace[i], EVENT_DISABLE_TIMING)))
            goto out;

    /* ---- epochs ---- */
    int64_t step = rs->active ? rs->step : 0;
    int warned_nan = 0;
    const int first_epoch = rs->active ? rs->epoch : 1;
    fill_order(d.h_order[first_epoch % 2 ? 1 : 0], &smp, first_epoch);
    for (int epoch = first_epoch; epoch <= o->epochs; epoch++) {
        const int slot = epoch % 2;
        /* the part of this epoch a resumed run has done already */
        const int resumed = rs->active && epoch == rs->epoch;
        const int64_t skip = resumed ? (rs->skip < nbatch ? rs->skip : nbatch) : 0;
        const double loss0 = resumed ? rs->loss_sum : 0, rows0 = resumed ? rs->rows : 0;
        int64_t nsteps = nbatch - skip;
        if (o->max_steps && nsteps > o->max_steps - step)
            nsteps = o->max_steps - step > 0 ? o->max_steps - step : 0;
        d.h_ctl[slot].b = skip;     /* step_begin takes batch b of the order */
        d.h_ctl[slot].lr = rt_lr_at(m, o->lr, epoch);
        size_t ob = (size_t)per_rank * sizeof(int32_t);
        int ok = (ob == 0 ||
                  !CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(d.order[slot], d.h_order[slot], ob, cu->stream))) &&
                 !CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(d.ctl_t, &d.h_ctl[slot], sizeof(rt_cuda_ctl),
                                                      cu->stream)) &&
                 !CU_CHECK(rt_cu.cuEventRecord(d.ev0, cu->stream));
        for (int64_t s = 0; ok && s < nsteps; s++) {
            ok = trace.on ? !traced_step(cu, &d, m, &trace, step + s + 1, nstat, ddp)
                          : !CU_CHECK(rt_cu.cuGraphLaunch(d.gtrain, cu->stream)) && !pace(cu, &d, epoch);
            /* --checkpoint-every inside the epoch (its end writes its own) */
            if (ok && o->ckpt_every && (step + s + 1) % o->ckpt_every == 0 && skip + s + 1 < nbatch) {
                rt_resume st = {1, epoch, step + s + 1, skip + s + 1, loss0, rows0, 0, step + s + 1, 1.0f, 0, 0};
                /* device_checkpoint reads the scaler's state (fp16) */
                ok = !device_checkpoint(cu, &d, m, o, w, skip, s + 1, per_rank, batch, sums, &st);
            }
        }
        ok = ok && !CU_CHECK(rt_cu.cuEventRecord(d.ev1, cu->stream)) && !bcast_buffers(cu, &d, m, w) &&
             !CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(d.ctl_v, cv, sizeof(rt_cuda_ctl), cu->stream));
        for (int64_t s = 0; ok && s < nbatch_v; s++)
            ok = !CU_CHECK(rt_cu.cuGraphLaunch(d.geval, cu->stream)) && !pace(cu, &d, epoch);
        ok = ok &&
             !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(&d.h_ctl[CTL_BACK_T], d.ctl_t, sizeof(rt_cuda_ctl),
                                                  cu->stream)) &&
             !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(&d.h_ctl[CTL_BACK_V], d.ctl_v, sizeof(rt_cuda_ctl),
                                                  cu->stream)) &&
             (nsteps == 0 || !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(d.h_steploss,
                                                                  d.steploss + (CUdeviceptr)skip * sizeof(double),
                                                                  (size_t)nsteps * sizeof(double),
                                                                  cu->stream))) &&
             (nsteps == 0 || !d.amp ||
              !CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(d.h_amp_log, d.amp_log + (CUdeviceptr)(2 * skip) * sizeof(double),
                                                   (size_t)(2 * nsteps) * sizeof(double), cu->stream)));
        if (!ok)
            goto out;
        /* While the GPU works: the next epoch's order into the other slot. */
        if (epoch < o->epochs)
            fill_order(d.h_order[1 - slot], &smp, epoch + 1);
        char what[64];
        snprintf(what, sizeof what, "epoch %d", epoch);
        if (rt_cuda_wait(cu, what) != 0)
            goto out;
        d.h_ctl[slot].b = 0;
        float ms = 0;
        if (CU_CHECK(rt_cu.cuEventElapsedTime(&ms, d.ev0, d.ev1)))
            goto out;

        /* ---- the epoch's results, logged as the CPU loop logs them ---- */
        const rt_cuda_ctl *bt = &d.h_ctl[CTL_BACK_T], *bv = &d.h_ctl[CTL_BACK_V];
        if (bt->b != skip + nsteps || bv->b != nbatch_v) {
            rt_err("epoch %d: the device ran %lld training and %lld evaluation steps, expected %lld and %lld",
                   epoch, (long long)(bt->b - skip), (long long)bv->b, (long long)nsteps,
                   (long long)nbatch_v);
            goto out;
        }
        /* Every rank ran the same steps on equal shards: one sum over the
         * ranks of the step losses and the three pass sums. */
        memcpy(sums, d.h_steploss, (size_t)nsteps * sizeof(double));
        sums[nsteps] = bt->loss_sum;
        sums[nsteps + 1] = bv->loss_sum;
        sums[nsteps + 2] = bv->correct_sum;
        rt_comm_sum_f64(sums, nsteps + 3, "the epoch's loss all-reduce");
        int64_t trained = 0;
        for (int64_t s = 0; s < nsteps; s++) {
            const int64_t b = skip + s;
            int n = (int)(per_rank - b * batch < batch ? per_rank - b * batch : batch);
            double sl = sums[s];
            trained += n;
            step++;
            /* as on the CPU: the global batch's mean for 'mean', else its sum */
            double step_loss = m->reduction == RT_RED_MEAN ? sl / ((double)n * (double)W) : sl;
            if (!isfinite(sl) && !warned_nan) {
                rt_warn("loss is %s at step %lld; training continues", isnan(sl) ? "NaN" : "inf",
                        (long long)step);
                warned_nan = 1;
            }
            rt_log_step(log, step, epoch, step_loss, d.amp ? d.h_amp_log[2 * s] : NAN,
                        d.amp ? (int)d.h_amp_log[2 * s + 1] : -1);
            if (s + 1 == nsteps) {
                int64_t seen = (b + 1) * batch < epoch_samples ? (b + 1) * batch : epoch_samples;
                rt_log_progress(log, epoch, o->epochs, seen * W, epoch_samples * W, step_loss, 1);
            }
        }
        const double rows = rows0 + (double)trained * (double)W;
        const double secs = ms / 1000.0 + (resumed ? rs->secs : 0);
        double train_loss = rows > 0 ? (loss0 + sums[nsteps]) / rows : NAN;
        double test_loss = sums[nsteps + 1] / (double)NV;
        double test_acc = m->eval.correct_stat >= 0 ? sums[nsteps + 2] / (double)NV : NAN;
        rt_log_scaler(log, bt->scale, bt->skipped - d.h_ctl[slot].skipped, bt->skipped);
        rt_log_epoch(log, epoch, o->epochs, train_loss, test_loss, test_acc, secs, (int64_t)rows);
        /* the scaler's state goes on into the next epoch's control block */
        for (int s2 = 0; s2 < 2; s2++) {
            d.h_ctl[s2].scale = bt->scale;
            d.h_ctl[s2].tracker = bt->tracker;
            d.h_ctl[s2].skipped = bt->skipped;
        }
        if (o->ckpt_path) {
            /* the next epoch, or where --max-steps stopped this one */
            const int64_t sk = bt->skipped, taken = step - sk;   /* skipped: in all, as step */
            const float sc = (float)bt->scale;
            rt_resume st = {1, epoch + 1, step, 0, 0, 0, 0, taken, sc, bt->tracker, sk};
            if (skip + nsteps < nbatch)
                st = (rt_resume){1, epoch, step, skip + nsteps, loss0 + sums[nsteps], rows, secs, taken, sc,
                                 bt->tracker, sk};
            if (save_from_device(cu, &d, m, o, w, &st) != 0)
                goto out;
        }
        if (o->max_steps && step >= o->max_steps)
            break;
    }
    /* --save (and anything after) reads the host slab */
    if (rt_cuda_dtoh(cu, w->param, d.param, (size_t)m->param_floats * sizeof(float)) != 0)
        goto out;
    rc = rt_trace_write(&trace, m);
out:
    rt_trace_free(&trace);
    dev_free(&d);
    rt_sampler_free(&smp);
    free(sums);
    return rc;
}
