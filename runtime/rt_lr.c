/* rt_lr.c: the learning rate of every optimizer step, as
 * torch.optim.lr_scheduler's schedulers give it (closed forms: the
 * recursive ones torch uses agree to rounding).
 *
 * Epoch schedules (StepLR, CosineAnnealingLR, MultiStepLR, ExponentialLR)
 * are stepped once an epoch, so every step of epoch e uses the value after
 * e - 1 scheduler steps; step schedules (warm-up then cosine, OneCycleLR)
 * are stepped after every optimizer step, so step t (0-based over the run)
 * uses the value after t scheduler steps. The position is therefore the
 * run's (epoch, optimizer step), which checkpoints keep: a resumed run
 * continues the schedule without saving anything more. */
#include "rt_internal.h"
#include <math.h>

int rt_lr_per_step(const rt_model *m)
{
    return m->sched == RT_SCHED_WARMUP_COSINE || m->sched == RT_SCHED_ONECYCLE;
}

/* torch.optim.lr_scheduler.OneCycleLR.get_lr at step_num t */
static double onecycle(const double *v, int64_t t, int64_t total)
{
    const double max_lr = v[0], pct = v[2], initial = max_lr / v[4], min_lr = initial / v[5];
    const int linear = v[3] != 0, three = v[6] != 0;
    const double T = (double)total;
    double end[3], lo[3], hi[3];
    int n;
    if (three) {
        n = 3;
        end[0] = pct * T - 1, lo[0] = initial, hi[0] = max_lr;
        end[1] = 2 * pct * T - 2, lo[1] = max_lr, hi[1] = initial;
        end[2] = T - 1, lo[2] = initial, hi[2] = min_lr;
    } else {
        n = 2;
        end[0] = pct * T - 1, lo[0] = initial, hi[0] = max_lr;
        end[1] = T - 1, lo[1] = max_lr, hi[1] = min_lr;
    }
    double start = 0;
    for (int i = 0; i < n; i++) {
        if ((double)t <= end[i] || i == n - 1) {
            const double p = ((double)t - start) / (end[i] - start);
            return linear ? (hi[i] - lo[i]) * p + lo[i] : hi[i] + (lo[i] - hi[i]) / 2.0 * (cos(M_PI * p) + 1);
        }
        start = end[i];
    }
    return initial;     /* not reached */
}

double rt_lr(const rt_model *m, double lr, int epoch, int64_t t, int64_t total)
{
    const double e = epoch - 1;     /* epoch scheduler steps done */
    const double *v = m->sched_v;
    switch (m->sched) {
    case RT_SCHED_STEP:
        return lr * pow(m->sched_b, floor(e / m->sched_a));
    case RT_SCHED_COSINE:
        return m->sched_b + (lr - m->sched_b) * (1 + cos(M_PI * e / m->sched_a)) / 2;
    case RT_SCHED_MULTISTEP: {
        int passed = 0;         /* bisect_right(milestones, e) */
        while (passed < m->sched_n && v[passed] <= e)
            passed++;
        return lr * pow(m->sched_b, passed);
    }
    case RT_SCHED_EXPONENTIAL:
        return lr * pow(m->sched_b, e);
    case RT_SCHED_WARMUP_COSINE: {
        const double w = v[0], T = v[1] > 0 ? v[1] : (double)total, sf = v[2], eta = v[3];
        if ((double)t < w)      /* LinearLR(start_factor, end_factor 1, total_iters w) */
            return lr * (sf + (1 - sf) * (double)t / w);
        /* CosineAnnealingLR(T_max = T - w, eta_min), from the milestone on */
        return eta + (lr - eta) * (1 + cos(M_PI * ((double)t - w) / (T - w))) / 2;
    }
    case RT_SCHED_ONECYCLE:
        return onecycle(v, t, v[1] > 0 ? (int64_t)v[1] : total);
    default:
        return lr;
    }
}

int rt_lr_check(const rt_model *m, int64_t steps, int64_t total)
{
    const int64_t given = m->sched_n > 1 ? (int64_t)m->sched_v[1] : 0;
    if (m->sched == RT_SCHED_ONECYCLE && given > 0 && steps > given) {
        rt_err("schedule onecycle: total_steps is %lld, but this run takes %lld optimizer steps (torch's "
               "OneCycleLR would fail there); raise total_steps or leave it out (then it is the run's)",
               (long long)given, (long long)steps);
        return -1;
    }
    if (m->sched == RT_SCHED_WARMUP_COSINE && given == 0 && total <= (int64_t)m->sched_v[0]) {
        rt_err("schedule warmup_cosine: the run's %lld optimizer steps do not exceed warmup_steps %lld; give "
               "total_steps, or fewer warm-up steps", (long long)total, (long long)m->sched_v[0]);
        return -1;
    }
    return 0;
}
