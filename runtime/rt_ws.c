/* rt_ws.c: memory for a run. All buffers are allocated once, before the
 * first step, so a step never allocates and an out-of-memory shows up at
 * start-up, not hours in. The CPU device computes in them; the CUDA device
 * uses the parameter and optimizer slabs as the host side of its copies. */
#include "rt_internal.h"
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

