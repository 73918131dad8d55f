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

#define ALIGN 64

void *rt_alloc(size_t bytes, const char *what)
{
    /* aligned_alloc wants a multiple of the alignment; round up, and give
     * a real (non-NULL) block for zero bytes. */
    if (bytes > SIZE_MAX - ALIGN) {
        rt_err("cannot allocate %s: size overflows", what);
        return NULL;
    }
    size_t sz = bytes ? (bytes + ALIGN - 1) / ALIGN * ALIGN : ALIGN;
    void *p = aligned_alloc(ALIGN, sz);
    if (!p) {
        rt_err("cannot allocate %s (%zu bytes): out of memory", what, sz);
        return NULL;
    }
    memset(p, 0, sz);
    return p;
}

void rt_free(void *p) { free(p); }

/* n * each bytes, or -1 (after an error line) if that overflows. */
static int mul_size(int64_t n, size_t each, size_t *out, const char *what)
{
    if (n < 0 || (n > 0 && (uint64_t)n > SIZE_MAX / each)) {
        rt_err("cannot allocate %s: %lld elements is too many", what, (long long)n);
        return -1;
    }
    *out = (size_t)n * each;
    return 0;
}

static void *alloc_n(int64_t n, size_t each, const char *what)
{
    size_t bytes;
    return mul_size(n, each, &bytes, what) ? NULL : rt_alloc(bytes, what);
}

int rt_ws_alloc_params(const rt_model *m, rt_ws *w)
{
    memset(w, 0, sizeof *w);
    if (!(w->param = alloc_n(m->param_floats, sizeof(float), "parameters")) ||
        !(w->grad = alloc_n(m->param_floats, sizeof(float), "gradients")) ||
        !(w->opt = alloc_n(m->opt_floats, sizeof(float), "optimizer state")))
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
    if (!(w->act = alloc_n(units * nmax, sizeof(float), "activations")) ||
        !(w->fix = alloc_n(max64(m->train.fix_floats, m->eval.fix_floats), sizeof(float),
                           "scratch")) ||
        !(w->stat = alloc_n(w->nstat, sizeof(double), "statistics")) ||
        !(w->idx = alloc_n(nmax, sizeof(int32_t), "batch indices")))
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
 * clock reads per kernel, so it is only done when asked for. */
typedef struct rt_prof {
    double *secs;           /* [nk] */
    int64_t calls;          /* plan invocations */
} rt_prof;

/* One plan invocation. stat is cleared first so kernels may either assign
 * or accumulate their per-step results. */
static void run_plan(const rt_plan *p, rt_exec *e, int nstat, rt_prof *prof)
{
    memset(e->stat, 0, (size_t)nstat * sizeof(double));
    if (!prof->secs) {
        for (int k = 0; k < p->nk; k++)
            p->k[k].fn(e);
        return;
    }
    for (int k = 0; k < p->nk; k++) {
        double t = rt_now();
        p->k[k].fn(e);
        prof->secs[k] += rt_now() - t;
    }
    prof->calls++;
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

/* The eval plan over the whole test set in file order, batches of nmax. */
static void evaluate(const rt_model *m, rt_ws *w, rt_exec *e, const rt_dataset *test,
                     double *loss, double *acc, rt_prof *prof)
{
    double lsum = 0, csum = 0;
    e->img = test->img;
    e->lab = test->lab;
    for (int64_t i = 0; i < test->n; i += w->nmax) {
        int n = (int)(test->n - i < w->nmax ? test->n - i : w->nmax);
        for (int j = 0; j < n; j++)
            w->idx[j] = (int32_t)(i + j);
        e->n = n;
        run_plan(&m->eval, e, w->nstat, prof);
        lsum += w->stat[m->eval.loss_stat];
        if (m->eval.correct_stat >= 0)
            csum += w->stat[m->eval.correct_stat];
    }
    *loss = lsum / (double)test->n;
    *acc = m->eval.correct_stat >= 0 ? csum / (double)test->n : NAN;
}

int rt_train(const rt_model *m, const rt_opts *o, rt_ws *w, const rt_dataset *train,
             const rt_dataset *test, rt_log *log)
{
    int32_t *perm = alloc_n(train->n, sizeof(int32_t), "sample order");
    if (!perm)
        return -1;
    rt_prof tprof = {0}, eprof = {0};
    if (o->profile && (!(tprof.secs = alloc_n(m->train.nk, sizeof(double), "profile")) ||
                       !(eprof.secs = alloc_n(m->eval.nk, sizeof(double), "profile")))) {
        rt_free(tprof.secs);
        rt_free(perm);
        return -1;
    }
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
    e.step = 0;
    e.nthreads = o->threads;

    const int64_t batch = o->batch, N = train->n;
    const int64_t nbatch = o->drop_last ? N / batch : (N + batch - 1) / batch;
    const int64_t epoch_samples = o->drop_last ? nbatch * batch : N;
    int warned_nan = 0;

    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        if (o->shuffle)
            rt_shuffle(perm, N, o->seed, (uint64_t)epoch);
        else
            for (int64_t i = 0; i < N; i++)
                perm[i] = (int32_t)i;

        double t0 = rt_now();
        double loss_sum = 0;        /* exact epoch mean: sum of sums / count */
        int64_t trained = 0;
        int stop = 0;
        e.img = train->img;
        e.lab = train->lab;
        for (int64_t b = 0; b < nbatch; b++) {
            if (o->max_steps && e.step >= o->max_steps) {
                stop = 1;
                break;
            }
            int n = (int)(N - b * batch < batch ? N - b * batch : batch);
            memcpy(w->idx, perm + b * batch, (size_t)n * sizeof(int32_t));
            e.n = n;
            run_plan(&m->train, &e, w->nstat, &tprof);
            e.step++;
            double s = w->stat[m->train.loss_stat];
            loss_sum += s;
            trained += n;
            /* The step's loss as PyTorch's loss.item() would show it: mean
             * divides by the batch; sum is the sum; for 'none' the kernels
             * backpropagate ones per sample (loss.backward(
             * torch.ones_like(loss))), the same gradient as 'sum', so the
             * sum is reported too. */
            double step_loss = m->reduction == RT_RED_MEAN ? s / n : s;
            if (!isfinite(s) && !warned_nan) {
                rt_warn("loss is %s at step %lld; training continues", isnan(s) ? "NaN" : "inf",
                        (long long)e.step);
                warned_nan = 1;
            }
            rt_log_step(log, e.step, epoch, step_loss);
            rt_log_progress(log, epoch, o->epochs, trained, epoch_samples, step_loss,
                            b + 1 == nbatch);
        }
        double secs = rt_now() - t0;
        if (o->max_steps && e.step >= o->max_steps)
            stop = 1;

        double test_loss, test_acc;
        evaluate(m, w, &e, test, &test_loss, &test_acc, &eprof);
        double train_loss = trained ? loss_sum / (double)trained : NAN;
        rt_log_epoch(log, epoch, o->epochs, train_loss, test_loss, test_acc, secs, trained);
        if (stop)
            break;
    }
    if (o->profile) {
        print_profile("train", &m->train, &tprof);
        print_profile("eval", &m->eval, &eprof);
    }
    rt_free(tprof.secs);
    rt_free(eprof.secs);
    rt_free(perm);
    return 0;
}
