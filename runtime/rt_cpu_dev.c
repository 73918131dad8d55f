/* rt_cpu_dev.c: the CPU device -- the compiler's C kernels on host memory.
 *
 * The kernels do all the math (forward, loss, backward, and the optimizer
 * with its settings baked in); this device hands them the batch, e.lr and
 * e.step, runs the gradient buckets' all-reduces on a comm thread while
 * backward goes on (rt_reducer.c), and keeps each step's loss sum for the
 * loop (rt_loop.c), which owns the epoch.
 *
 * Two settings of the train block act between the kernels, here:
 *   - accumulate N (DDP's no_sync): a micro-batch that is not its group's
 *     last runs forward and backward only -- no all-reduce, no update --
 *     and adds its gradients into the accumulation slab (the first copies
 *     them). The last one's gradients become (slab + them) / N before
 *     their all-reduce, bucket by bucket on the comm thread with several
 *     ranks: torch's p.grad, summed over the micro-batches in their order,
 *     each divided by N as `loss / N` does (exactly so for a power of two).
 *   - clip_grad_value, clip_grad_norm: once every bucket is reduced, each
 *     gradient clamped to [-v, v]; then the global 2-norm of the gradients
 *     and torch's coefficient max_norm / (norm + 1e-6), clamped to 1,
 *     multiply them; then the optimizer kernels run. */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What one plan invocation records besides its results. */
typedef struct rt_instr {
    rt_prof *prof;
    rt_trace *trace;
    int kind;               /* RT_TEV_TRAIN / RT_TEV_EVAL */
    int64_t step;           /* for the trace */
    rt_amp *amp;            /* train plan of an fp16 model: the loss scaler */
    int64_t param_floats;   /* with amp: the grad slab it scans */
    int found_inf;          /* with amp: the step was skipped */
    rt_coll *coll;          /* with amp: found_inf over the ranks */
    /* the train plan's settings (rt_cpu_dev.c's comment) */
    float clip;             /* clip_grad_norm's max_norm, 0 off */
    float clip_value;       /* clip_grad_value's clip_value, 0 off */
    int micro;              /* this step is a micro-batch, not its group's last */
    int acc_first;          /* ... and its group's first */
    float *acc;             /* [param_floats] the accumulation slab, NULL without accumulate */
    const float *fold;      /* the last micro-batch: acc to add (NULL: the group is this one alone) */
    float fold_scale;       /* ... and 1/N to scale by; 0: no fold (accumulate 1) */
} rt_instr;

/* torch.nn.utils.clip_grad_norm_ (norm_type 2) on n gradients: the norm in
 * double, torch's coefficient in float. */
static void clip_grads(float *g, int64_t n, float max_norm)
{
    double sq = 0;
    for (int64_t i = 0; i < n; i++)
        sq += (double)g[i] * g[i];
    const float coef = max_norm / ((float)sqrt(sq) + 1e-6f);
    if (coef < 1.0f)
        for (int64_t i = 0; i < n; i++)
            g[i] *= coef;
}

/* torch.nn.utils.clip_grad_value_: each gradient clamped to [-v, v] (a
 * NaN stays, as torch's clamp keeps it) */
static void clip_values(float *g, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] > v ? v : g[i] < -v ? -v : g[i];
}

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
        rt_prof_add(in->prof, k, t1 - t);
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
    const int fold = in->fold_scale != 0.0f, ranks = red && red->active;
    /* the optimizer kernels after everything else: behind found_inf, the
     * norm of all gradients, or the fold of one rank's whole slab */
    const int late = amp || in->clip > 0 || in->clip_value > 0 || (fold && !ranks);
    if (!timed && !ranks && !late && !in->micro) {
        for (int k = 0; k < p->nk; k++)
            p->k[k].fn(e);
        return;
    }
    if (in->micro)
        red = NULL;     /* no_sync: this micro-batch's gradients stay here */
    if (red) {
        rt_reducer_fold(red, fold ? in->fold : NULL, fold ? in->fold_scale : 0.0f);
        rt_reducer_step_begin(red, in->step);
    }
    for (int k = 0; k < p->nk; k++) {
        if ((late || in->micro) && p->k[k].phase == RT_PH_OPTIMIZER)
            continue;
        if (red)
            rt_reducer_before(red, k);
        run_kernel(p, k, e, in, timed);
        if (red)
            rt_reducer_after(red, k);
    }
    if (red)
        rt_reducer_step_end(red);
    in->prof->calls++;
    if (in->micro) {
        float *acc = in->acc;
        const float *g = e->grad;
        if (in->acc_first)
            memcpy(acc, g, (size_t)in->param_floats * sizeof(float));
        else
            for (int64_t i = 0; i < in->param_floats; i++)
                acc[i] += g[i];
        return;
    }
    if (fold && !ranks)
        rt_fold_grads(e->grad, in->fold, in->fold_scale, in->param_floats);
    if (amp) {
        in->found_inf = rt_amp_found_inf(amp, in->coll, e->grad, in->param_floats, in->step);
        e->found_inf = in->found_inf;   /* the kernels would return at once too */
    }
    if (in->clip_value > 0)
        clip_values(e->grad, in->param_floats, in->clip_value);
    if (in->clip > 0)
        clip_grads(e->grad, in->param_floats, in->clip);
    for (int k = 0; late && k < p->nk && !in->found_inf; k++)
        if (p->k[k].phase == RT_PH_OPTIMIZER)
            run_kernel(p, k, e, in, timed);
}



typedef struct cpu_dev {
    const rt_model *m;
    const rt_opts *o;
    rt_ws *w;
    rt_coll *coll;
    const rt_data *data;
    rt_exec e;
    rt_amp amp;
    rt_reducer red;
    rt_prof tprof, eprof;
    rt_instr tin, ein;
    const int32_t *order;
    const float *lr;                /* [nbatch] each batch's learning rate (the loop's) */
    rt_shape sh;
    int64_t batch;
    int64_t acc;                    /* micro-batches per optimizer step */
    double *steploss, *amp_log;     /* [nbatch] per batch of the epoch; [2 nbatch] (scale, found_inf) */
    double *stepcount;              /* [nbatch] the counted targets (rt_plan.has_count) */
    double secs;                    /* the epoch's training time */
    double eval[1 + RT_METRIC_MAX];
    double eval_count;
    int evaluated;
} cpu_dev;

static int cpu_begin_epoch(rt_device *d, int epoch, const int32_t *order, const float *lr, int64_t first_batch)
{
    cpu_dev *c = d->impl;
    (void)epoch, (void)first_batch;
    c->order = order;
    c->lr = lr;
    c->secs = 0;
    c->evaluated = 0;
    return 0;
}

static int cpu_train(rt_device *d, int64_t b0, int64_t b1, int64_t step0)
{
    cpu_dev *c = d->impl;
    rt_ws *w = c->w;
    rt_exec *e = &c->e;
    const double t0 = rt_now();
    rt_data_exec(c->data, &c->data->train, e);
    for (int64_t b = b0; b < b1; b++) {
        int n = rt_batch_rows(&c->sh, c->batch, b);
        memcpy(w->idx, c->order + b * c->batch, (size_t)n * sizeof(int32_t));
        e->n = n;
        e->lr = c->lr[b];
        c->tin.step = step0 + (b - b0) / c->acc + 1;
        e->scale = c->amp.scale;
        c->tin.found_inf = 0;
        /* accumulate: where batch b stands in its group */
        const int64_t g0 = b - b % c->acc, gn = c->sh.nbatch - g0 < c->acc ? c->sh.nbatch - g0 : c->acc;
        const int last = b == g0 + gn - 1;
        c->tin.micro = !last;
        c->tin.acc_first = b == g0;
        c->tin.fold = gn > 1 ? c->tin.acc : NULL;
        c->tin.fold_scale = c->acc > 1 ? 1.0f / (float)c->acc : 0.0f;
        run_plan(&c->m->train, e, w->nstat, &c->tin, &c->red);
        if (c->amp.on) {
            c->amp_log[2 * b] = c->amp.scale;
            c->amp_log[2 * b + 1] = c->tin.found_inf;
            rt_amp_update(&c->amp, c->tin.found_inf);
        }
        if (last && !c->tin.found_inf)
            e->step++;
        c->steploss[b] = w->stat[c->m->train.loss_stat];
        c->stepcount[b] = c->m->train.has_count ? w->stat[c->m->train.count_stat] : 0;
    }
    c->secs += rt_now() - t0;
    return 0;
}

/* The eval plan over the test set in file order, batches of nmax. With
 * several ranks each evaluates its own contiguous block, [r*N/W,
 * (r+1)*N/W): every sample exactly once, no padding (the loop sums the
 * loss sums and correct counts over the ranks). */
static int cpu_evaluate(rt_device *d)
{
    cpu_dev *c = d->impl;
    rt_ws *w = c->w;
    rt_exec *e = &c->e;
    const int64_t lo = c->sh.test_lo, hi = c->sh.test_hi;
    double sums[1 + RT_METRIC_MAX] = {0};   /* loss, then the metric sums */
    double count = 0;                       /* the targets counted (has_count) */
    const int nm = rt_plan_metrics(&c->m->eval);
    if (rt_coll_bcast_buffers(c->coll, c->m, w->param, NULL) != 0)
        return -1;
    rt_data_exec(c->data, &c->data->test, e);
    c->ein.step = e->step;
    for (int64_t i = lo; i < hi; i += w->nmax) {
        int n = (int)(hi - i < w->nmax ? hi - i : w->nmax);
        for (int j = 0; j < n; j++)
            w->idx[j] = (int32_t)(i + j);
        e->n = n;
        run_plan(&c->m->eval, e, w->nstat, &c->ein, NULL);
        sums[0] += w->stat[c->m->eval.loss_stat];
        count += c->m->eval.has_count ? w->stat[c->m->eval.count_stat] : 0;
        for (int k = 0; k < nm; k++)
            sums[1 + k] += w->stat[c->m->eval.correct_stat + k];
    }
    memcpy(c->eval, sums, sizeof sums);
    c->eval_count = count;
    c->evaluated = 1;
    return 0;
}

static int cpu_collect(rt_device *d, int64_t b0, int64_t b1, rt_dev_out *out)
{
    cpu_dev *c = d->impl;
    for (int64_t b = b0; b < b1; b++) {
        out->loss[b - b0] = c->steploss[b];
        out->count[b - b0] = c->stepcount[b];
        if (c->amp.on) {
            out->scale[b - b0] = c->amp_log[2 * b];
            out->found[b - b0] = c->amp_log[2 * b + 1];
        }
    }
    for (int k = 0; k < 1 + RT_METRIC_MAX; k++)
        out->eval[k] = c->evaluated ? c->eval[k] : 0;
    out->eval_count = c->evaluated ? c->eval_count : 0;
    out->secs = c->secs;
    out->amp_scale = c->amp.scale;
    out->amp_tracker = c->amp.tracker;
    out->amp_skipped = c->amp.skipped;
    return 0;
}

static int cpu_pull(rt_device *d, float *param, float *opt)
{
    cpu_dev *c = d->impl;       /* the kernels work in the host slabs themselves */
    return param == c->w->param && opt == c->w->opt ? 0 : -1;
}

static void cpu_close(rt_device *d)
{
    cpu_dev *c = d->impl;
    if (!c)
        return;
    if (c->o->profile && c->coll->rank == 0) {
        double gf = c->o->peak_gflops, bw = c->o->peak_gbs;
        rt_prof_calibrate(&gf, &bw);
        rt_prof_print("train", &c->m->train, &c->tprof, c->batch, gf, bw);
        rt_prof_print("eval", &c->m->eval, &c->eprof, c->w->nmax, gf, bw);
    }
    rt_reducer_free(&c->red);
    rt_prof_free(&c->tprof);
    rt_prof_free(&c->eprof);
    rt_free(c->steploss);
    rt_free(c->tin.acc);
    free(c);
    d->impl = NULL;
}

int rt_cpu_dev_open(rt_device *dev, const rt_model *m, const rt_opts *o, rt_ws *w, const rt_start *st,
                    const rt_data *data, rt_coll *coll, rt_trace *trace)
{
    *dev = (rt_device){"cpu", 0, NULL, cpu_begin_epoch, cpu_train, cpu_evaluate, cpu_collect, cpu_pull,
                       cpu_close};
    cpu_dev *c = rt_calloc(1, sizeof *c);
    if (!c) {
        rt_err("out of memory");
        return -1;
    }
    dev->impl = c;
    c->m = m;
    c->o = o;
    c->w = w;
    c->coll = coll;
    c->data = data;
    c->batch = o->batch;
    c->sh = rt_loop_shape(o, data->train.n, data->test.n, coll->rank, coll->size);
    c->amp = st->amp;
    if (!(c->steploss = rt_alloc_n(4 * c->sh.nbatch + 1, sizeof(double), "step losses")))
        return -1;
    c->amp_log = c->steploss + c->sh.nbatch;
    c->stepcount = c->steploss + 3 * c->sh.nbatch;
    if (o->profile && (rt_prof_init(&c->tprof, m->train.nk) != 0 || rt_prof_init(&c->eprof, m->eval.nk) != 0))
        return -1;
    if (rt_reducer_init(&c->red, m, coll, w->grad, trace) != 0)
        return -1;
    rt_coll_for_kernels(coll);
    rt_exec *e = &c->e;
    e->nmax = w->nmax;
    e->act = w->act;
    e->fix = w->fix;
    e->param = w->param;
    e->grad = w->grad;
    e->opt = w->opt;
    e->stat = w->stat;
    e->idx = w->idx;
    rt_data_exec(data, &data->train, e);
    e->lr = o->lr;
    e->step = st->opt_steps;
    e->scale = c->amp.scale;
    e->nthreads = o->threads;
    e->rank = coll->rank;
    e->world = coll->size;
    e->seed = o->seed;
    c->tin = (rt_instr){&c->tprof, trace, RT_TEV_TRAIN, 0, &c->amp, m->param_floats, 0, coll, m->clip_norm,
                        m->clip_value, 0, 0, NULL, NULL, 0.0f};
    c->ein = (rt_instr){&c->eprof, trace, RT_TEV_EVAL, 0, NULL, 0, 0, coll, 0, 0, 0, 0, NULL, NULL, 0.0f};
    c->acc = m->accumulate > 1 ? m->accumulate : 1;
    if (c->acc > 1 && !(c->tin.acc = rt_alloc_n(m->param_floats, sizeof(float), "the accumulated gradients")))
        return -1;
    return 0;
}
