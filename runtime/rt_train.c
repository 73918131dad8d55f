/* rt_train.c: memory for a run and the epoch loop.
 *
 * All buffers are allocated once, before the first step, so a step never
 * allocates and an out-of-memory shows up at start-up, not hours in. The
 * loop itself only sequences work: the compiler's kernels do all the math
 * (forward, loss, backward, and the optimizer with its momentum, weight
 * decay, ... settings baked in); the runtime hands them the batch, e.lr
 * and e.step. */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int rt_ws_alloc_params(const rt_model *m, rt_ws *w)
{
    memset(w, 0, sizeof *w);
    if (!(w->param = rt_alloc_n(m->param_floats, sizeof(float), "parameters")) ||
        !(w->grad = rt_alloc_n(m->param_floats, sizeof(float), "gradients")) ||
        !(w->opt = rt_alloc_n(m->opt_floats, sizeof(float), "optimizer state")))
        return -1;
    return 0;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int rt_ws_alloc_batch(const rt_model *m, rt_ws *w, int nmax)
{
    int64_t units = max64(m->train.act_units, m->eval.act_units);
    if (units > 0 && nmax > INT64_MAX / units) {
        rt_err("cannot allocate activations: %lld floats per sample x batch %d overflows",
               (long long)units, nmax);
        return -1;
    }
    w->nmax = nmax;
    w->nstat = m->train.nstat > m->eval.nstat ? m->train.nstat : m->eval.nstat;
    if (w->nstat < 1)
        w->nstat = 1;
    if (!(w->act = rt_alloc_n(units * nmax, sizeof(float), "activations")) ||
        !(w->fix = rt_alloc_n(max64(m->train.fix_floats, m->eval.fix_floats), sizeof(float),
                           "scratch")) ||
        !(w->stat = rt_alloc_n(w->nstat, sizeof(double), "statistics")) ||
        !(w->idx = rt_alloc_n(nmax, sizeof(int32_t), "batch indices")))
        return -1;
    return 0;
}

void rt_ws_free(rt_ws *w)
{
    rt_free(w->param);
    rt_free(w->grad);
    rt_free(w->opt);
    rt_free(w->act);
    rt_free(w->fix);
    rt_free(w->stat);
    rt_free(w->idx);
    memset(w, 0, sizeof *w);
}

/* --profile: wall time per kernel, summed over the run. Timing costs two
 * clock reads per kernel, so it is only done when asked for (--profile or
 * --trace). */
typedef struct rt_prof {
    double *secs;           /* [nk] */
    int64_t calls;          /* plan invocations */
} rt_prof;

/* What one plan invocation records besides its results. */
typedef struct rt_instr {
    rt_prof *prof;
    rt_trace *trace;
    int kind;               /* RT_TEV_TRAIN / RT_TEV_EVAL */
    int64_t step;           /* for the trace */
    rt_amp *amp;            /* train plan of an fp16 model: the loss scaler */
    int64_t param_floats;   /* with amp: the grad slab it scans */
    int found_inf;          /* with amp: the step was skipped */
} rt_instr;

/* One plan invocation. stat is cleared first so kernels may either assign
 * or accumulate their per-step results. With a reducer (train plan,
 * several ranks) each kernel first waits for the buckets it updates and,
 * once done, hands over the buckets it completed; the comm thread reduces
 * them while the next kernels run. */
static void run_kernel(const rt_plan *p, int k, rt_exec *e, const rt_instr *in, int timed)
{
    if (!timed) {
        p->k[k].fn(e);
        return;
    }
    double t = rt_comm_time();
    p->k[k].fn(e);
    double t1 = rt_comm_time();
    if (in->prof->secs)
        in->prof->secs[k] += t1 - t;
    rt_trace_add(in->trace, 0, in->kind, k, in->step, t, t1);
}

/* With the fp16 loss scaler (in->amp) the optimizer kernels cannot run as
 * each bucket is reduced: they wait for found_inf over the whole grad
 * slab of every rank, so they run after all buckets, or not at all when
 * the step is skipped. (fp16 loses the overlap of updates with backward.) */
static void run_plan(const rt_plan *p, rt_exec *e, int nstat, rt_instr *in, rt_reducer *red)
{
    memset(e->stat, 0, (size_t)nstat * sizeof(double));
    int timed = in->prof->secs || (in->trace && in->trace->on);
    rt_amp *amp = in->amp && in->amp->on ? in->amp : NULL;
    if (!timed && !(red && red->active) && !amp) {
        for (int k = 0; k < p->nk; k++)
            p->k[k].fn(e);
        return;
    }
    if (red)
        rt_reducer_step_begin(red, in->step);
    for (int k = 0; k < p->nk; k++) {
        if (amp && p->k[k].phase == RT_PH_OPTIMIZER)
            continue;
        if (red)
            rt_reducer_before(red, k);
        run_kernel(p, k, e, in, timed);
        if (red)
            rt_reducer_after(red, k);
    }
    if (red)
        rt_reducer_step_end(red);
    if (amp) {
        in->found_inf = rt_amp_found_inf(amp, e->grad, in->param_floats, in->step);
        e->found_inf = in->found_inf;   /* the kernels would return at once too */
        for (int k = 0; k < p->nk && !in->found_inf; k++)
            if (p->k[k].phase == RT_PH_OPTIMIZER)
                run_kernel(p, k, e, in, timed);
    }
    in->prof->calls++;
}

static void print_profile(const char *name, const rt_plan *p, const rt_prof *prof)
{
    double total = 0;
    for (int k = 0; k < p->nk; k++)
        total += prof->secs[k];
    printf("profile: %s plan, %d kernels, %lld calls, %.3f ms per call\n", name, p->nk,
           (long long)prof->calls, prof->calls ? 1e3 * total / (double)prof->calls : 0.0);
    printf("  %-40s %12s %10s %7s\n", "kernel", "total ms", "us/call", "share");
    for (int k = 0; k < p->nk; k++)
        printf("  %-40s %12.2f %10.2f %6.1f%%\n", p->k[k].name, 1e3 * prof->secs[k],
               prof->calls ? 1e6 * prof->secs[k] / (double)prof->calls : 0.0,
               total > 0 ? 100.0 * prof->secs[k] / total : 0.0);
}

/* DDP's broadcast_buffers: rank 0's buffers (batch norm's running
 * statistics) onto every rank before it evaluates, so every rank
 * evaluates the model rank 0 saves. During training each rank keeps its
 * own: in train mode batch norm reads only the batch, and PyTorch's
 * broadcast before each forward leaves rank 0's buffers what rank 0's own
 * updates made them, so the evaluated model is PyTorch's. (With
 * SyncBatchNorm they are the same on every rank anyway.) */
void rt_bcast_buffers(const rt_model *m, float *param)
{
    for (int i = 0; rt_world.size > 1 && i < m->nparam; i++)
        if (rt_param_flags(m, i) & RT_PARAM_BUFFER)
            rt_comm_bcast_f32(param + m->params[i].off, m->params[i].numel, "the broadcast of the buffers");
}

/* The eval plan over the test set in file order, batches of nmax. With
 * several ranks each evaluates its own contiguous block, [r*N/W,
 * (r+1)*N/W): every sample exactly once, no padding; the loss sums and
 * correct counts are then summed across ranks. */
static void evaluate(const rt_model *m, rt_ws *w, rt_exec *e, const rt_dataset *test,
                     double *loss, double *acc, rt_instr *in)
{
    const int64_t W = rt_world.size, r = rt_world.rank;
    const int64_t lo = test->n * r / W, hi = test->n * (r + 1) / W;
    double sums[2] = {0, 0};    /* loss, correct */
    rt_bcast_buffers(m, w->param);
    e->img = test->img;
    e->lab = test->lab;
    in->kind = RT_TEV_EVAL;
    in->step = e->step;
    for (int64_t i = lo; i < hi; i += w->nmax) {
        int n = (int)(hi - i < w->nmax ? hi - i : w->nmax);
        for (int j = 0; j < n; j++)
            w->idx[j] = (int32_t)(i + j);
        e->n = n;
        run_plan(&m->eval, e, w->nstat, in, NULL);
        sums[0] += w->stat[m->eval.loss_stat];
        if (m->eval.correct_stat >= 0)
            sums[1] += w->stat[m->eval.correct_stat];
    }
    rt_comm_sum_f64(sums, 2, "the evaluation's all-reduce");
    *loss = sums[0] / (double)test->n;
    *acc = m->eval.correct_stat >= 0 ? sums[1] / (double)test->n : NAN;
}

float rt_lr_at(const rt_model *m, float lr, int epoch)
{
    const double e = epoch - 1;     /* the scheduler has stepped once per epoch done */
    switch (m->sched) {
    case RT_SCHED_STEP:
        return (float)((double)lr * pow(m->sched_b, floor(e / m->sched_a)));
    case RT_SCHED_COSINE:
        return (float)(m->sched_b + ((double)lr - m->sched_b) * (1 + cos(M_PI * e / m->sched_a)) / 2);
    default:
        return lr;
    }
}

/* Sums over the ranks of the first n step losses and rows (steps[0..n),
 * steps[cap..cap+n)), added in step order to the epoch's sums so far: the
 * same additions, in the same order, as at the epoch's end, so a resumed
 * epoch's loss is the uninterrupted one's to the last bit. */
static void partial_sums(const double *steps, int64_t cap, int64_t n, double *tmp, double *loss,
                         double *rows)
{
    memcpy(tmp, steps, (size_t)n * sizeof *tmp);
    memcpy(tmp + n, steps + cap, (size_t)n * sizeof *tmp);
    rt_comm_sum_f64(tmp, 2 * n, "the checkpoint's loss all-reduce");
    for (int64_t b = 0; b < n; b++) {
        *loss += tmp[b];
        *rows += tmp[n + b];
    }
}

/* The epoch loop. Each rank trains on its DistributedSampler shard with
 * --batch rows per step; every rank takes the same number of steps (equal
 * shards), and gradients are averaged over the ranks before each update.
 * The per-step loss sums and sample counts stay local during the epoch
 * and are summed across ranks once at its end: no step waits for a loss.
 * Resuming (rs->active), it starts at epoch rs->epoch, batch rs->skip,
 * with that epoch's sums so far. */
int rt_train(const rt_model *m, const rt_opts *o, rt_ws *w, const rt_resume *rs,
             const rt_dataset *train, const rt_dataset *test, rt_log *log)
{
    const int64_t batch = o->batch;
    rt_sampler smp;
    if (rt_sampler_init(&smp, train->n, rt_world.rank, rt_world.size, o->shuffle, o->drop_last,
                        o->seed) != 0)
        return -1;
    const int64_t per_rank = smp.per_rank;
    const int64_t nbatch = o->drop_last ? per_rank / batch : (per_rank + batch - 1) / batch;
    const int64_t epoch_samples = o->drop_last ? nbatch * batch : per_rank;  /* this rank's */

    int rc = -1;
    rt_prof tprof = {0}, eprof = {0};
    rt_trace trace;
    rt_reducer red;
    memset(&trace, 0, sizeof trace);
    memset(&red, 0, sizeof red);
    /* per step of an epoch: [0, nbatch) loss sums, [nbatch, 2 nbatch) rows;
     * then room for a copy of both (checkpoints) */
    double *steps = rt_alloc_n(6 * nbatch + 1, sizeof(double), "step losses");
    if (!steps)
        goto out;
    double *tmp = steps + 2 * nbatch;
    /* fp16: each step's loss scale and found_inf, for --step-log */
    double *amp_log = steps + 4 * nbatch;
    if (o->profile && (!(tprof.secs = rt_alloc_n(m->train.nk, sizeof(double), "profile")) ||
                       !(eprof.secs = rt_alloc_n(m->eval.nk, sizeof(double), "profile"))))
        goto out;
    if (rt_trace_open(&trace, o->trace_path) != 0 ||
        rt_reducer_init(&red, m, w->grad, &trace) != 0)
        goto out;

    rt_exec e;
    memset(&e, 0, sizeof e);
    e.nmax = w->nmax;
    e.act = w->act;
    e.fix = w->fix;
    e.param = w->param;
    e.grad = w->grad;
    e.opt = w->opt;
    e.stat = w->stat;
    e.idx = w->idx;
    e.img_size = train->rows * train->cols;
    e.lr = o->lr;
    /* e.step counts optimizer steps taken (Adam's t; torch's state
     * 'step'), `it` the training steps: they differ by the steps the fp16
     * loss scaler skipped */
    rt_amp amp;
    rt_amp_init(&amp, m, rs);
    int64_t it = rs->active ? rs->step : 0;
    e.step = rs->active ? (amp.on ? rs->opt_steps : rs->step) : 0;
    e.scale = amp.scale;
    e.nthreads = o->threads;
    e.rank = rt_world.rank;
    e.world = (int)rt_world.size;
    e.seed = o->seed;
    int warned_nan = 0;
    const int64_t W = rt_world.size;
    rt_instr tin = { &tprof, &trace, RT_TEV_TRAIN, 0, &amp, m->param_floats, 0 },
             ein = { &eprof, &trace, RT_TEV_EVAL, 0, NULL, 0, 0 };

    for (int epoch = rs->active ? rs->epoch : 1; epoch <= o->epochs; epoch++) {
        rt_sampler_set_epoch(&smp, (uint64_t)epoch);
        /* the part of this epoch a resumed run has done already */
        const int resumed = rs->active && epoch == rs->epoch;
        const int64_t skip = resumed ? (rs->skip < nbatch ? rs->skip : nbatch) : 0;
        double t0 = rt_now() - (resumed ? rs->secs : 0);
        double loss0 = resumed ? rs->loss_sum : 0, rows0 = resumed ? rs->rows : 0;
        int64_t trained = 0, done = 0, first_step = it, skipped0 = amp.skipped;
        int stop = 0;
        e.img = train->img;
        e.lab = train->lab;
        e.lr = rt_lr_at(m, o->lr, epoch);
        for (int64_t b = skip; b < nbatch; b++) {
            if (o->max_steps && it >= o->max_steps) {
                stop = 1;
                break;
            }
            int n = (int)(per_rank - b * batch < batch ? per_rank - b * batch : batch);
            memcpy(w->idx, smp.shard + b * batch, (size_t)n * sizeof(int32_t));
            e.n = n;
            tin.step = it + 1;
            e.scale = amp.scale;
            run_plan(&m->train, &e, w->nstat, &tin, &red);
            it++;
            if (amp.on) {
                amp_log[done] = amp.scale;
                amp_log[nbatch + done] = tin.found_inf;
                rt_amp_update(&amp, tin.found_inf);
            }
            if (!tin.found_inf)
                e.step++;
            double s = w->stat[m->train.loss_stat];
            steps[done] = s;
            steps[nbatch + done] = n;
            done++;
            trained += n;
            if (!isfinite(s) && !warned_nan) {
                rt_warn("loss is %s at step %lld; training continues", isnan(s) ? "NaN" : "inf",
                        (long long)it);
                warned_nan = 1;
            }
            /* the bar shows this rank's own loss: the global one is only
             * known at the epoch's end */
            int64_t seen = (b + 1) * batch < epoch_samples ? (b + 1) * batch : epoch_samples;
            rt_log_progress(log, epoch, o->epochs, seen * W, epoch_samples * W,
                            m->reduction == RT_RED_MEAN ? s / n : s, b + 1 == nbatch);
            /* --checkpoint-every inside the epoch (its end writes its own) */
            if (o->ckpt_every && it % o->ckpt_every == 0 && b + 1 < nbatch) {
                rt_resume st = {1, epoch, it, b + 1, loss0, rows0, rt_now() - t0, e.step, amp.scale,
                                amp.tracker, amp.skipped};
                partial_sums(steps, nbatch, done, tmp, &st.loss_sum, &st.rows);
                if (rt_ckpt_save(m, o, o->ckpt_path, w->param, w->opt, &st) != 0)
                    goto out;
            }
        }
        double secs = rt_now() - t0;
        if (o->max_steps && it >= o->max_steps)
            stop = 1;

        /* Every rank took the same steps: one all-reduce of their sums
         * and counts (the loss sums, then the rows, packed together). */
        memmove(steps + done, steps + nbatch, (size_t)done * sizeof(double));
        rt_comm_sum_f64(steps, 2 * done, "the epoch's loss all-reduce");
        double loss_sum = loss0, rows = rows0;
        for (int64_t b = 0; b < done; b++) {
            double s = steps[b], n = steps[done + b];
            loss_sum += s;
            rows += n;
            /* The step's loss as PyTorch's loss.item() would show it for
             * the whole global batch (W ranks x their rows): mean divides
             * the global sum by the global rows; sum is the sum; for
             * 'none' the kernels backpropagate ones per sample
             * (loss.backward(torch.ones_like(loss))), the same gradient as
             * 'sum', so the sum is reported too. */
            rt_log_step(log, first_step + b + 1, epoch, m->reduction == RT_RED_MEAN ? s / n : s,
                        amp.on ? amp_log[b] : NAN, amp.on ? (int)amp_log[nbatch + b] : -1);
        }

        double test_loss, test_acc;
        evaluate(m, w, &e, test, &test_loss, &test_acc, &ein);
        double train_loss = rows > 0 ? loss_sum / rows : NAN;
        rt_log_scaler(log, amp.scale, amp.skipped - skipped0, amp.skipped);
        rt_log_epoch(log, epoch, o->epochs, train_loss, test_loss, test_acc, secs,
                     (int64_t)rows);
        if (o->ckpt_path) {
            /* the next epoch, or where --max-steps stopped this one */
            int64_t at = skip + done;
            rt_resume st = {1, epoch + 1, it, 0, 0, 0, 0, e.step, amp.scale, amp.tracker, amp.skipped};
            if (at < nbatch)
                st = (rt_resume){1, epoch, it, at, loss_sum, rows, secs, e.step, amp.scale, amp.tracker,
                                 amp.skipped};
            /* a checkpoint that cannot be written stops the run */
            if (rt_ckpt_save(m, o, o->ckpt_path, w->param, w->opt, &st) != 0)
                goto out;
        }
        if (stop)
            break;
    }
    if (o->profile && rt_world.rank == 0) {
        print_profile("train", &m->train, &tprof);
        print_profile("eval", &m->eval, &eprof);
    }
    rt_reducer_free(&red);          /* the comm thread's events are complete */
    rc = rt_trace_write(&trace, m);
out:
    rt_reducer_free(&red);
    rt_trace_free(&trace);
    rt_free(tprof.secs);
    rt_free(eprof.secs);
    rt_free(steps);
    rt_sampler_free(&smp);
    return rc;
}
