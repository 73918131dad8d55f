/* rt_reducer.c: gradient all-reduce overlapped with backward (DDP's Reducer).
 *
 * The compiler groups the gradient slab into buckets (rt_model.buckets):
 * bucket b is one contiguous range, complete once train kernel ready[b]
 * has run, and read only by optimizer kernel opt[b]. With more than one
 * rank a comm thread owns the all-reduces:
 *   - after train kernel k returns, the main thread hands over every
 *     bucket whose ready kernel has run, in bucket order (the same order
 *     on every rank, so the collectives match), and goes straight on with
 *     the next backward kernel: that is the overlap;
 *   - the comm thread all-reduces each bucket in place (MPI_SUM) and scales
 *     it by 1/W, so every rank holds the average gradient, as DDP does;
 *   - before train kernel j the main thread waits only for the buckets
 *     that kernel updates (opt == j); at the end of the step for all of
 *     them, so the next step's backward never writes a slab being sent.
 * Hand-over and completion are counters under one mutex with two
 * condition variables: nobody spins. Counters are absolute (step * nb +
 * bucket), so a step never has to reset them. With one rank nothing here
 * runs and no thread exists. */
#include "rt_internal.h"
#include <string.h>

static void *comm_main(void *arg)
{
    rt_reducer *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->quit && r->done == r->launched)
            pthread_cond_wait(&r->work, &r->mu);
        if (r->done == r->launched)
            break;                          /* quit, and nothing left */
        int b = (int)(r->done - r->base);
        int64_t step = r->step;
        pthread_mutex_unlock(&r->mu);

        const rt_bucket *bk = &r->b[b];
        float *g = r->grad + bk->off;
        double t0 = rt_comm_time();
        rt_comm_allreduce_bucket(g, bk->size, b);
        const float s = r->scale;
        for (int64_t i = 0; i < bk->size; i++)
            g[i] *= s;
        rt_trace_add(r->trace, 1, RT_TEV_BUCKET, b, step, t0, rt_comm_time());

        pthread_mutex_lock(&r->mu);
        r->done++;
        pthread_cond_broadcast(&r->done_cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The model's bucket table, or for a model without one (hand-written
 * programs) a single bucket over the whole slab, reduced just before the
 * first optimizer kernel. -1 when the table cannot be followed without
 * deadlock or out-of-range access. Shared with the CUDA device loop. */
int rt_bucket_table(const rt_model *m, rt_bucket *one, const rt_bucket **tb, int *nb)
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

int rt_reducer_init(rt_reducer *r, const rt_model *m, float *grad, rt_trace *trace)
{
    memset(r, 0, sizeof *r);
    if (rt_world.size <= 1)
        return 0;
    if (rt_bucket_table(m, &r->one, &r->b, &r->nb) != 0)
        return -1;
    r->nk = m->train.nk;
    r->grad = grad;
    r->trace = trace;
    r->scale = 1.0f / (float)rt_world.size;
    r->launch_upto = rt_alloc((size_t)(r->nk + 1) * sizeof(int), "reducer tables");
    r->wait_upto = rt_alloc((size_t)(r->nk + 1) * sizeof(int), "reducer tables");
    if (!r->launch_upto || !r->wait_upto) {
        rt_free(r->launch_upto);
        rt_free(r->wait_upto);
        return -1;
    }
    for (int k = 0, b = 0; k < r->nk; k++) {
        while (b < r->nb && r->b[b].ready <= k)
            b++;
        r->launch_upto[k] = b;
    }
    for (int b = 0; b < r->nb; b++)
        if (r->b[b].opt >= 0)
            r->wait_upto[r->b[b].opt] = b + 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->done_cv, NULL);
    int e = pthread_create(&r->th, NULL, comm_main, r);
    if (e != 0) {
        rt_err("cannot start the gradient comm thread: %s", strerror(e));
        pthread_cond_destroy(&r->work);
        pthread_cond_destroy(&r->done_cv);
        pthread_mutex_destroy(&r->mu);
        rt_free(r->launch_upto);
        rt_free(r->wait_upto);
        return -1;
    }
    r->active = 1;
    return 0;
}

void rt_reducer_step_begin(rt_reducer *r, int64_t step)
{
    if (!r->active)
        return;
    pthread_mutex_lock(&r->mu);
    r->base = r->launched;          /* == done: the last step waited for all */
    r->step = step;
    pthread_mutex_unlock(&r->mu);
    r->my_launched = 0;
    r->my_done = 0;
}

/* Blocks until the first `need` buckets of this step are reduced. */
static void wait_for(rt_reducer *r, int need)
{
    if (need <= r->my_done)
        return;
    pthread_mutex_lock(&r->mu);
    while (r->done - r->base < need)
        pthread_cond_wait(&r->done_cv, &r->mu);
    r->my_done = (int)(r->done - r->base);
    pthread_mutex_unlock(&r->mu);
}

void rt_reducer_before(rt_reducer *r, int k)
{
    if (r->active)
        wait_for(r, r->wait_upto[k]);
}

void rt_reducer_after(rt_reducer *r, int k)
{
    if (!r->active || r->launch_upto[k] <= r->my_launched)
        return;
    r->my_launched = r->launch_upto[k];
    pthread_mutex_lock(&r->mu);
    r->launched = r->base + r->my_launched;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
}

void rt_reducer_step_end(rt_reducer *r)
{
    if (!r->active)
        return;
    if (r->my_launched < r->nb) {   /* cannot happen with a valid table; never hang on it */
        r->my_launched = r->nb;
        pthread_mutex_lock(&r->mu);
        r->launched = r->base + r->nb;
        pthread_cond_signal(&r->work);
        pthread_mutex_unlock(&r->mu);
    }
    wait_for(r, r->nb);
}

void rt_reducer_free(rt_reducer *r)
{
    if (r->active) {
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_cond_signal(&r->work);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        pthread_cond_destroy(&r->work);
        pthread_cond_destroy(&r->done_cv);
        pthread_mutex_destroy(&r->mu);
        rt_free(r->launch_upto);
        rt_free(r->wait_upto);
    }
    memset(r, 0, sizeof *r);
}
