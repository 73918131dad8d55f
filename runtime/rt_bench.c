/* rt_bench.c: --bench-kernel NAME|all: train-step kernels timed on their
 * own, as Inductor's benchmark of each generated kernel (-k) does.
 *
 * One whole training step runs first, so every buffer a kernel reads
 * holds what it holds in training (the first batch, the initial weights);
 * then each chosen kernel runs alone, 3 calls to warm the caches and
 * then BENCH_CALLS timed calls (stopping early after BENCH_SECS), and
 * the median, fastest and slowest call are printed. Kernels that update
 * in place (optimizers, running statistics) keep updating: the values
 * drift, the work per call does not. CPU only: on a GPU the per-kernel
 * times come from --trace's events (cddpc study --device cuda --kernels). */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>

#define BENCH_CALLS 50
#define BENCH_SECS 2.0

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int rt_bench_check_name(const rt_model *m, const char *name)
{
    if (!strcmp(name, "all"))
        return 0;
    for (int k = 0; k < m->train.nk; k++)
        if (!strcmp(m->train.k[k].name, name))
            return 0;
    fprintf(stderr, "%s: error: --bench-kernel: no train kernel '%s'; this program's are:", rt_prog, name);
    for (int k = 0; k < m->train.nk; k++)
        fprintf(stderr, " %s", m->train.k[k].name);
    fprintf(stderr, " (or all)\n");
    return -1;
}

int rt_bench_kernels(const rt_model *m, const rt_opts *o, rt_ws *w, const rt_data *data)
{
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
    rt_data_exec(data, &data->train, &e);
    e.lr = o->lr;
    e.step = 1;
    e.scale = 1.0f;
    e.nthreads = o->threads;
    e.rank = 0;
    e.world = 1;
    e.seed = o->seed;
    e.n = w->nmax;
    for (int i = 0; i < e.n; i++)       /* the first batch, unshuffled */
        w->idx[i] = i;
    memset(w->stat, 0, (size_t)w->nstat * sizeof(double));
    for (int k = 0; k < m->train.nk; k++)
        m->train.k[k].fn(&e);

    double *t = rt_alloc(sizeof(double) * BENCH_CALLS, "kernel times");
    if (!t)
        return -1;
    printf("bench-kernel: train kernels on their own, batch %d, %d threads: %d calls after 3 warm-up calls "
           "(at most %.0f s each)\n", e.n, o->threads, BENCH_CALLS, BENCH_SECS);
    printf("  %-40s %6s %11s %11s %11s\n", "kernel", "calls", "median us", "min us", "max us");
    for (int k = 0; k < m->train.nk; k++) {
        const rt_kernel *kn = &m->train.k[k];
        if (strcmp(o->bench_kernel, "all") && strcmp(o->bench_kernel, kn->name))
            continue;
        for (int i = 0; i < 3; i++)
            kn->fn(&e);
        int n = 0;
        double start = rt_now();
        while (n < BENCH_CALLS && (n < 3 || rt_now() - start < BENCH_SECS)) {
            double t0 = rt_now();
            kn->fn(&e);
            t[n++] = rt_now() - t0;
        }
        qsort(t, (size_t)n, sizeof *t, cmp_double);
        double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
        printf("  %-40s %6d %11.2f %11.2f %11.2f\n", kn->name, n, 1e6 * med, 1e6 * t[0], 1e6 * t[n - 1]);
    }
    rt_free(t);
    return 0;
}
