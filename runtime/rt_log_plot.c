/* rt_log_plot.c: --plot FILE.svg, the run's loss curve redrawn after every
 * epoch (rank 0, through rt_log): train and test loss per epoch, test
 * accuracy (or the task's metric: macro-F1, MAE) on the second axis, and every step's loss (rt_plot smooths it),
 * kept in memory whether or not --step-log is given. The picture is
 * written atomically by rt_plot_write, so whoever opens it mid-run sees the
 * last whole one. A picture that cannot be written is warned about once
 * and the training goes on: the numbers are in the CSVs. */
#include "rt_internal.h"
#include "rt_plot.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rt_live_plot {
    const char *path;
    const char *metric;         /* the right axis: the task's metric */
    int64_t epoch_steps;        /* steps per epoch: a step's x is its epoch's fraction */
    double *train, *test, *acc; /* [cap_e], NaN where an epoch was not run here */
    int nepochs, cap_e;
    double *step_x, *step_loss; /* [cap_s] */
    long nsteps, cap_s;
    int warned;
};

rt_live_plot *rt_live_plot_open(const char *path, const char *metric)
{
    rt_live_plot *p = rt_calloc(1, sizeof *p);
    if (!p) {
        rt_err("out of memory");
        return NULL;
    }
    p->path = path;
    p->metric = metric;
    return p;
}

void rt_live_plot_epoch_steps(rt_live_plot *p, int64_t n)
{
    if (p)
        p->epoch_steps = n;
}

static int grow(double **a, long n, long cap)
{
    double *x = rt_realloc(*a, (size_t)cap * sizeof(double));
    if (!x)
        return -1;
    for (long i = n; i < cap; i++)
        x[i] = NAN;
    *a = x;
    return 0;
}

void rt_live_plot_step(rt_live_plot *p, int64_t step, int epoch, double loss)
{
    if (!p || p->epoch_steps <= 0)
        return;
    if (p->nsteps == p->cap_s) {
        long cap = p->cap_s ? 2 * p->cap_s : 1024;
        if (grow(&p->step_x, p->nsteps, cap) || grow(&p->step_loss, p->nsteps, cap))
            return;             /* out of memory: the curve misses steps, the run goes on */
        p->cap_s = cap;
    }
    /* epochs have the same number of steps; step counts from 1 */
    p->step_x[p->nsteps] = (epoch - 1) + (double)((step - 1) % p->epoch_steps + 1) / (double)p->epoch_steps;
    p->step_loss[p->nsteps++] = loss;
}

void rt_live_plot_epoch(rt_live_plot *p, int epoch, double train, double test, double acc, const char *title)
{
    if (!p || epoch < 1)
        return;
    if (epoch > p->cap_e) {
        int cap = epoch > 2 * p->cap_e ? epoch + 8 : 2 * p->cap_e;
        if (grow(&p->train, p->cap_e, cap) || grow(&p->test, p->cap_e, cap) || grow(&p->acc, p->cap_e, cap))
            return;
        p->cap_e = cap;
    }
    p->train[epoch - 1] = train;
    p->test[epoch - 1] = test;
    p->acc[epoch - 1] = acc;
    if (epoch > p->nepochs)
        p->nepochs = epoch;
    rt_plot_run run = {NULL, p->nepochs, p->train, p->test, p->acc, p->metric, p->nsteps, p->step_x,
                       p->step_loss};
    char err[512];
    if (rt_plot_write(p->path, title, &run, 1, err, sizeof err) != 0 && !p->warned) {
        rt_warn("--plot: %s; training goes on without the picture", err);
        p->warned = 1;
    }
}

void rt_live_plot_close(rt_live_plot *p)
{
    if (!p)
        return;
    free(p->train);
    free(p->test);
    free(p->acc);
    free(p->step_x);
    free(p->step_loss);
    free(p);
}
