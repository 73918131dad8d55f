/* rt_amp.c: fp16 dynamic loss scaling with torch.cuda.amp.GradScaler's
 * semantics, shared by the CPU and CUDA training loops.
 *
 * Each step the backward is seeded with S * dloss (the CE_GRAD kernel
 * reads e->scale); after the gradient all-reduce, found_inf says whether
 * any gradient on any rank overflowed. If so the optimizer step is
 * skipped (params, optimizer state and Adam's step count unchanged) and S
 * backs off; else the optimizer kernels unscale by 1/S and update, and S
 * grows after growth_interval clean steps in a row. */
#include "rt_internal.h"
#include "rt_amp_rule.h"
#include <math.h>
#include <stdlib.h>

void rt_amp_init(rt_amp *a, const rt_model *m, const rt_resume *rs)
{
    *a = (rt_amp){0};
    a->on = m->precision == RT_PREC_FP16;
    a->scale = a->on ? m->init_scale : 1.0f;
    a->growth = m->growth_factor;
    a->backoff = m->backoff_factor;
    a->interval = m->growth_interval;
    a->inject_rank = -1;
    if (a->on && rs->active) {
        a->scale = rs->scale;
        a->tracker = rs->tracker;
        a->skipped = rs->skipped;
    }
    /* Test hook: force found_inf on one rank at one step (1-based), to
     * check that the others skip with it. */
    const char *t = getenv("CDDP_TEST_FOUND_INF");
    long long r, s;
    if (a->on && t && sscanf(t, "%lld:%lld", &r, &s) == 2) {
        a->inject_rank = (int)r;
        a->inject_step = s;
    }
}

int rt_amp_found_inf(const rt_amp *a, rt_coll *c, const float *grad, int64_t n, int64_t step)
{
    /* x - x is 0 for finite x, NaN for inf and NaN: one test for both */
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++)
        acc += grad[i] - grad[i];
    float found = acc != 0.0f;
    if (a->inject_rank == c->rank && a->inject_step == step)
        found = 1;
    c->any(c, &found, NULL);
    return found > 0;
}

RT_AMP_RULE(static)

void rt_amp_update(rt_amp *a, int found_inf)
{
    long long tracker = a->tracker, skipped = a->skipped;
    rt_amp_rule(&a->scale, &tracker, &skipped, a->growth, a->backoff, a->interval, found_inf);
    a->tracker = tracker;
    a->skipped = skipped;
}
