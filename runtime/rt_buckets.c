/* rt_buckets.c: when each gradient bucket is reduced, for both devices.
 *
 * The compiler groups the gradient slab into buckets (rt_model.buckets):
 * bucket b is complete once train kernel ready[b] has run and is read only
 * by optimizer kernel opt[b]. From that, two tables over the train plan's
 * kernels, which the CPU reducer (rt_reducer.c: a comm thread) and the
 * CUDA device (events between its compute and comm streams, captured in
 * the step graph) both follow:
 *   launch_upto[k]: buckets handed to the communicator once kernel k ran
 *                   (in bucket order, the same on every rank, so the
 *                   collectives match);
 *   wait_upto[k]:   buckets that must be reduced before kernel k runs
 *                   (the prefix up to the last one kernel k updates; the
 *                   communicator reduces them in order). */
#include "rt_internal.h"
#include <string.h>

/* The model's bucket table, or for a model without one (hand-written
 * programs) a single bucket over the whole slab, reduced just before the
 * first optimizer kernel. -1 when the table cannot be followed without
 * deadlock or out-of-range access. (static: rt_bsched_init is the interface) */
static int bucket_table(const rt_model *m, rt_bucket *one, const rt_bucket **tb, int *nb)
{
    const rt_plan *p = &m->train;
    *tb = NULL;
    *nb = 0;
    if (m->nbuckets > 0) {
        *tb = m->buckets;
        *nb = m->nbuckets;
    } else if (m->param_floats > 0) {
        int opt = -1;
        for (int k = 0; k < p->nk && opt < 0; k++)
            if (p->k[k].phase == RT_PH_OPTIMIZER)
                opt = k;
        if (opt <= 0) {
            rt_err("model '%s' has no gradient buckets and no optimizer kernel to reduce "
                   "before: it cannot train on several ranks", m->name);
            return -1;
        }
        *one = (rt_bucket){ 0, m->param_floats, opt - 1, opt, m->nparam };
        *tb = one;
        *nb = 1;
    }
    int maxready = -1;
    for (int b = 0; b < *nb; b++) {
        const rt_bucket *bk = &(*tb)[b];
        if (bk->ready > maxready)
            maxready = bk->ready;
        /* launched after kernel maxready (bucket order), so its update
         * kernel must come later */
        if (bk->off < 0 || bk->size < 0 || bk->off > m->param_floats - bk->size ||
            bk->ready < 0 || bk->ready >= p->nk || bk->opt < -1 || bk->opt >= p->nk ||
            (bk->opt >= 0 && bk->opt <= maxready)) {
            rt_err("model '%s' is malformed: gradient bucket %d is inconsistent", m->name, b);
            return -1;
        }
    }
    return 0;
}

int rt_bsched_init(rt_bsched *s, const rt_model *m)
{
    memset(s, 0, sizeof *s);
    if (bucket_table(m, &s->one, &s->b, &s->nb) != 0)
        return -1;
    s->nk = m->train.nk;
    s->launch_upto = rt_alloc((size_t)(s->nk + 1) * sizeof(int), "bucket tables");
    s->wait_upto = rt_alloc((size_t)(s->nk + 1) * sizeof(int), "bucket tables");
    if (!s->launch_upto || !s->wait_upto) {
        rt_bsched_free(s);
        return -1;
    }
    for (int k = 0, b = 0; k < s->nk; k++) {
        while (b < s->nb && s->b[b].ready <= k)
            b++;
        s->launch_upto[k] = b;
    }
    for (int b = 0; b < s->nb; b++)
        if (s->b[b].opt >= 0)
            s->wait_upto[s->b[b].opt] = b + 1;
    /* every bucket is handed over by the last kernel (bucket_table checked
     * ready < nk); said here rather than found missing mid-step */
    if (s->nk > 0 && s->launch_upto[s->nk - 1] != s->nb) {
        rt_err("model '%s' is malformed: gradient bucket %d is never complete in the %d train kernels",
               m->name, s->launch_upto[s->nk - 1], s->nk);
        rt_bsched_free(s);
        return -1;
    }
    return 0;
}

void rt_bsched_free(rt_bsched *s)
{
    rt_free(s->launch_upto);
    rt_free(s->wait_upto);
    memset(s, 0, sizeof *s);
}
