/* rt_reducer.c: gradient all-reduce overlapped with backward (DDP's Reducer).
 *
 * The compiler groups the gradient slab into buckets (rt_model.buckets):
 * bucket b is one contiguous range, complete once train kernel ready[b]
 * has run, and read only by optimizer kernel opt[b] (rt_buckets.c turns
 * that into the tables both devices follow). With more than one
 * rank a comm thread owns the all-reduces:
 *   - after train kernel k returns, the main thread hands over every
 *     bucket whose ready kernel has run, in bucket order (the same order
 *     on every rank, so the collectives match), and goes straight on with
 *     the next backward kernel: that is the overlap;
 *   - the comm thread averages each bucket over the ranks in place
 *     (rt_coll's bucket_avg), so every rank holds the average gradient, as
 *     DDP does;
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

        const rt_bucket *bk = &r->s.b[b];
        double t0 = rt_comm_time();
        if (r->fold_scale != 0.0f)      /* accumulate's last micro-batch: before its all-reduce */
            rt_fold_grads(r->grad + bk->off, r->fold ? r->fold + bk->off : NULL, r->fold_scale, bk->size);
        r->coll->bucket_avg(r->coll, r->grad + bk->off, bk->size, b, NULL);
        rt_trace_add(r->trace, 1, RT_TEV_BUCKET, b, step, t0, rt_comm_time());

        pthread_mutex_lock(&r->mu);
        r->done++;
        pthread_cond_broadcast(&r->done_cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int rt_reducer_init(rt_reducer *r, const rt_model *m, rt_coll *coll, float *grad, rt_trace *trace)
{
    memset(r, 0, sizeof *r);
    if (coll->size <= 1)
        return 0;
    if (rt_bsched_init(&r->s, m) != 0)
        return -1;
    r->coll = coll;
    r->grad = grad;
    r->trace = trace;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->done_cv, NULL);
    int e = pthread_create(&r->th, NULL, comm_main, r);
    if (e != 0) {
        rt_err("cannot start the gradient comm thread: %s", strerror(e));
        pthread_cond_destroy(&r->work);
        pthread_cond_destroy(&r->done_cv);
        pthread_mutex_destroy(&r->mu);
        rt_bsched_free(&r->s);
        return -1;
    }
    r->active = 1;
    return 0;
}

void rt_fold_grads(float *g, const float *acc, float scale, int64_t n)
{
    if (acc)
        for (int64_t i = 0; i < n; i++)
            g[i] = (acc[i] + g[i]) * scale;
    else
        for (int64_t i = 0; i < n; i++)
            g[i] *= scale;
}

void rt_reducer_fold(rt_reducer *r, const float *acc, float scale)
{
    if (!r->active)
        return;
    pthread_mutex_lock(&r->mu);     /* the comm thread is idle between steps */
    r->fold = acc;
    r->fold_scale = scale;
    pthread_mutex_unlock(&r->mu);
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
        wait_for(r, r->s.wait_upto[k]);
}

void rt_reducer_after(rt_reducer *r, int k)
{
    if (!r->active || r->s.launch_upto[k] <= r->my_launched)
        return;
    r->my_launched = r->s.launch_upto[k];
    pthread_mutex_lock(&r->mu);
    r->launched = r->base + r->my_launched;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
}

void rt_reducer_step_end(rt_reducer *r)
{
    if (!r->active)
        return;
    if (r->my_launched < r->s.nb) {   /* cannot happen with a valid table; never hang on it */
        r->my_launched = r->s.nb;
        pthread_mutex_lock(&r->mu);
        r->launched = r->base + r->s.nb;
        pthread_cond_signal(&r->work);
        pthread_mutex_unlock(&r->mu);
    }
    wait_for(r, r->s.nb);
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
        rt_bsched_free(&r->s);
    }
    memset(r, 0, sizeof *r);
}
