/* kernel_check.c: every CUDA kernel of a compiled model against its C
 * kernel, on a real GPU, from identical random state.
 *
 * Built by tests/gpu/run.sh around the C source cddpc emits for the model
 * (cddpc MODEL --emit c DIR writes DIR/program.c: the C kernels, the
 * CUDA source, the launch tables, the rt_model); that file is included
 * here, so both backends' kernels and tables are at hand:
 *   cc -DPROGRAM_C='"DIR/program.c"' -Iruntime tests/gpu/kernel_check.c libcddprt.a ...
 *
 *   kernel_check --compile-only   NVRTC compile of every kernel for the
 *                                 device's arch (no cache): time, and per
 *                                 kernel registers, local memory, shared memory
 *   kernel_check [--seed N]       the comparison
 *
 * The comparison, for each plan (train, eval), batch sizes n = nmax, a
 * partial batch and 1 (nmax = the model's batch), and e->step 0 and 3:
 *   state S: parameters from the model's initializer, optimizer state,
 *   activations and scratch random, gradients and statistics zero (the
 *   runtime zeroes them before a plan), a random uint8 dataset and batch
 *   indices. For each kernel k in plan order:
 *     1. the C kernel on S gives R; the elements of act and fix it changed
 *        are its outputs;
 *     2. those outputs are poisoned (NaN) in a copy P of S -- except any the
 *        C kernel reads before writing, found by running it on P -- and the
 *        C kernel on P gives the reference;
 *     3. P goes to the device, the CUDA kernel runs on it with its launch
 *        geometry, and every arena comes back: act, fix, param, grad, opt,
 *        stat. Elements the reference left alone must be bit-identical;
 *        the rest within a relative difference of 1e-4 of the element's
 *        magnitude m = max(|ref|, 0.1 * the largest |ref| of its region (a
 *        parameter's slice, a run of outputs, a stat slot), |dref| / 1e-6),
 *        where dref is the most the C result moves when every float input
 *        is perturbed by a random relative 1e-6 (4 tries): a long sum that cancels to near
 *        zero carries the rounding of its large terms (measured: a dX of
 *        1.5e-8 from terms summing to 1.5e-3 in absolute value), and the
 *        perturbation measures exactly that, for any kernel; an indexing
 *        error is of the order of the values themselves;
 *        integers stored in float arenas (labels) must match exactly;
 *     4. S := R for the next kernel.
 * A kernel that skips an output leaves NaN; one that reads an output it
 * should have written reads NaN; one that writes rows >= n or outside its
 * outputs changes bits it must not. Prints one line per kernel and check,
 * and last "kernels: ... max rel diff X (limit 1e-4): PASS|FAIL".
 * Exit status 0 only when every check passed. */
#define main cddp_program_main
#include PROGRAM_C
#undef main

#include "rt_cuda.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT 1e-4
#define PERTURB 1e-6    /* relative perturbation of the inputs for the error scale */
#define NPERTURB 4
#define NSAMPLE 512     /* samples in the random dataset */

static const rt_model *M = &cddp_model;

/* The arenas of one state, host side. */
typedef struct state {
    float *act, *fix, *param, *grad, *opt;
    double *stat;
} state;

static int64_t n_act, n_fix, n_par, n_opt, n_stat;

static void *xalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "kernel_check: out of memory\n");
        exit(1);
    }
    return p;
}

static void st_alloc(state *s)
{
    s->act = xalloc((size_t)n_act * 4);
    s->fix = xalloc((size_t)n_fix * 4);
    s->param = xalloc((size_t)n_par * 4);
    s->grad = xalloc((size_t)n_par * 4);
    s->opt = xalloc((size_t)n_opt * 4);
    s->stat = xalloc((size_t)n_stat * 8);
}

static void st_free(state *s)
{
    free(s->act);
    free(s->fix);
    free(s->param);
    free(s->grad);
    free(s->opt);
    free(s->stat);
}

static void st_copy(state *d, const state *s)
{
    memcpy(d->act, s->act, (size_t)n_act * 4);
    memcpy(d->fix, s->fix, (size_t)n_fix * 4);
    memcpy(d->param, s->param, (size_t)n_par * 4);
    memcpy(d->grad, s->grad, (size_t)n_par * 4);
    memcpy(d->opt, s->opt, (size_t)n_opt * 4);
    memcpy(d->stat, s->stat, (size_t)n_stat * 8);
}

static int same_f(float a, float b) { return !memcmp(&a, &b, 4); }

/* ---- the device side ---------------------------------------------------- */
typedef struct dev {
    CUdeviceptr act, fix, param, grad, opt, stat, img, lab, idx, exec;
} dev;

static int dev_put(rt_cuda *cu, const dev *d, const state *s)
{
    return rt_cuda_htod(cu, d->act, s->act, (size_t)n_act * 4) || rt_cuda_htod(cu, d->fix, s->fix, (size_t)n_fix * 4) ||
           rt_cuda_htod(cu, d->param, s->param, (size_t)n_par * 4) ||
           rt_cuda_htod(cu, d->grad, s->grad, (size_t)n_par * 4) || rt_cuda_htod(cu, d->opt, s->opt, (size_t)n_opt * 4) ||
           rt_cuda_htod(cu, d->stat, s->stat, (size_t)n_stat * 8);
}

static int dev_get(rt_cuda *cu, const dev *d, state *s)
{
    return rt_cuda_dtoh(cu, s->act, d->act, (size_t)n_act * 4) || rt_cuda_dtoh(cu, s->fix, d->fix, (size_t)n_fix * 4) ||
           rt_cuda_dtoh(cu, s->param, d->param, (size_t)n_par * 4) ||
           rt_cuda_dtoh(cu, s->grad, d->grad, (size_t)n_par * 4) || rt_cuda_dtoh(cu, s->opt, d->opt, (size_t)n_opt * 4) ||
           rt_cuda_dtoh(cu, s->stat, d->stat, (size_t)n_stat * 8);
}

/* ---- comparison ------------------------------------------------------------ */
typedef struct verdict {
    double worst;           /* max rel diff over judged elements */
    int64_t outside;        /* elements changed where the reference did not change */
    int64_t nan_mismatch;
    char where[160];        /* the worst or first bad element */
} verdict;

static void note(verdict *v, const char *arena, int64_t i, double got, double ref, double rel)
{
    if (rel > v->worst || (isinf(rel) && !v->where[0])) {
        v->worst = rel > v->worst ? rel : v->worst;
        snprintf(v->where, sizeof v->where, "%s[%lld]: device %.9g, C %.9g", arena, (long long)i, got, ref);
    }
}

/* Judge elements [lo, hi) of one float region: start = before the kernel,
 * ref = the C kernel's result, got = the device's. */
static void judge_region(verdict *v, const char *arena, const float *start, const float *ref, const float *pert,
                         const float *got, int64_t lo, int64_t hi)
{
    double scale = 0;
    for (int64_t i = lo; i < hi; i++)
        if (!same_f(ref[i], start[i]) && isfinite(ref[i]) && fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    const double floor = scale > 0 ? 0.1 * scale : 1e-30;
    for (int64_t i = lo; i < hi; i++) {
        if (same_f(ref[i], start[i])) {      /* not an output of the C kernel */
            if (!same_f(got[i], ref[i])) {
                if (!v->outside)
                    snprintf(v->where, sizeof v->where, "%s[%lld]: device wrote %.9g where C left %.9g", arena,
                             (long long)i, got[i], ref[i]);
                v->outside++;
            }
            continue;
        }
        if (isnan(got[i]) != isnan(ref[i]) || isinf(got[i]) != isinf(ref[i])) {
            v->nan_mismatch++;
            note(v, arena, i, got[i], ref[i], INFINITY);
            continue;
        }
        /* integers stored in a float arena (labels) read as subnormals:
         * they must match exactly, whatever the region's scale */
        if (fpclassify(ref[i]) == FP_SUBNORMAL || fpclassify(got[i]) == FP_SUBNORMAL) {
            if (!same_f(got[i], ref[i]))
                note(v, arena, i, got[i], ref[i], INFINITY);
            continue;
        }
        if (!isfinite(ref[i])) {
            if (!same_f(got[i], ref[i]) && !(isnan(got[i]) && isnan(ref[i])))
                note(v, arena, i, got[i], ref[i], INFINITY);
            continue;
        }
        double m = fmax(fabs(ref[i]), floor);
        if (isfinite(pert[i]))
            m = fmax(m, fabs((double)pert[i] - ref[i]) / PERTURB);
        double d = fabs((double)got[i] - ref[i]) / m;
        note(v, arena, i, got[i], ref[i], d);
    }
}

/* act and fix: regions are the runs of elements the C kernel changed (its
 * output buffers), unchanged elements between them. */
static void judge_runs(verdict *v, const char *arena, const float *start, const float *ref, const float *pert,
                       const float *got, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        int64_t j = i;
        int changed = !same_f(ref[i], start[i]);
        while (j < n && (!same_f(ref[j], start[j])) == changed)
            j++;
        judge_region(v, arena, start, ref, pert, got, i, j);
        i = j;
    }
}

/* param, grad, opt: one region per parameter. */
static void judge_params(verdict *v, const char *arena, const float *start, const float *ref, const float *pert,
                         const float *got, int64_t n)
{
    int64_t covered = 0;
    for (int p = 0; p < M->nparam; p++) {
        const rt_param *q = &M->params[p];
        if (q->off + q->numel <= n) {
            judge_region(v, arena, start, ref, pert, got, q->off, q->off + q->numel);
            covered += q->numel;
        }
    }
    if (covered < n)    /* slab padding, if any: must stay as it was */
        judge_runs(v, arena, start, ref, pert, got, n);
}

static void judge_stat(verdict *v, const double *start, const double *ref, const double *pert, const double *got)
{
    for (int64_t i = 0; i < n_stat; i++) {
        if (!memcmp(&ref[i], &start[i], 8)) {
            if (memcmp(&got[i], &ref[i], 8)) {
                if (!v->outside)
                    snprintf(v->where, sizeof v->where, "stat[%lld]: device wrote %.17g where C left %.17g",
                             (long long)i, got[i], ref[i]);
                v->outside++;
            }
            continue;
        }
        if (isnan(got[i]) != isnan(ref[i])) {
            v->nan_mismatch++;
            note(v, "stat", i, got[i], ref[i], INFINITY);
            continue;
        }
        double m = fmax(fabs(ref[i]), 1e-30);
        if (isfinite(pert[i]))
            m = fmax(m, fabs(pert[i] - ref[i]) / PERTURB);
        double d = fabs(got[i] - ref[i]) / m;
        note(v, "stat", i, got[i], ref[i], d);
    }
}

/* ---- one kernel ------------------------------------------------------------- */
static void run_c(const rt_plan *p, int k, state *s, rt_exec *e)
{
    e->act = s->act;
    e->fix = s->fix;
    e->param = s->param;
    e->grad = s->grad;
    e->opt = s->opt;
    e->stat = s->stat;
    p->k[k].fn(e);
}

/* Poison the C kernel's act/fix outputs in p (a copy of s); r is its
 * result from s. Outputs it reads before writing stay unpoisoned. */
static void poison(const rt_plan *pl, int k, const state *s, const state *r, state *p, state *tmp, rt_exec *e)
{
    st_copy(p, s);
    for (int64_t i = 0; i < n_act; i++)
        if (!same_f(r->act[i], s->act[i]))
            p->act[i] = NAN;
    for (int64_t i = 0; i < n_fix; i++)
        if (!same_f(r->fix[i], s->fix[i]))
            p->fix[i] = NAN;
    for (int round = 0; round < 4; round++) {
        st_copy(tmp, p);
        run_c(pl, k, tmp, e);
        int64_t fixed = 0;
        /* any difference from r anywhere means a poisoned value was read:
         * restore the poisoned elements whose result differs */
        for (int64_t i = 0; i < n_act; i++)
            if (!same_f(tmp->act[i], r->act[i]) && isnan(p->act[i]) && !isnan(s->act[i])) {
                p->act[i] = s->act[i];
                fixed++;
            }
        for (int64_t i = 0; i < n_fix; i++)
            if (!same_f(tmp->fix[i], r->fix[i]) && isnan(p->fix[i]) && !isnan(s->fix[i])) {
                p->fix[i] = s->fix[i];
                fixed++;
            }
        int differs = memcmp(tmp->param, r->param, (size_t)n_par * 4) || memcmp(tmp->grad, r->grad, (size_t)n_par * 4) ||
                      memcmp(tmp->stat, r->stat, (size_t)n_stat * 8);
        if (!fixed && !differs)
            return;
        if (!fixed && differs) {    /* a poisoned input feeds a reduction: poison nothing */
            st_copy(p, s);
            return;
        }
    }
    st_copy(p, s);
}

static float frand(rt_rng *r, float lo, float hi) { return lo + (hi - lo) * (float)rt_rng_uniform(r); }

/* w := whichever of w and t lies farther from ref, element by element
 * (w := t when first). */
static void widest_f(float *w, const float *t, const float *ref, int64_t n, int first)
{
    for (int64_t i = 0; i < n; i++)
        if (first || fabsf(t[i] - ref[i]) > fabsf(w[i] - ref[i]))
            w[i] = t[i];
}

static void widest(state *w, const state *t, const state *ref, int first)
{
    widest_f(w->act, t->act, ref->act, n_act, first);
    widest_f(w->fix, t->fix, ref->fix, n_fix, first);
    widest_f(w->param, t->param, ref->param, n_par, first);
    widest_f(w->grad, t->grad, ref->grad, n_par, first);
    widest_f(w->opt, t->opt, ref->opt, n_opt, first);
    for (int64_t i = 0; i < n_stat; i++)
        if (first || fabs(t->stat[i] - ref->stat[i]) > fabs(w->stat[i] - ref->stat[i]))
            w->stat[i] = t->stat[i];
}

/* d := s with every float scaled by 1 + PERTURB * U(-1, 1). Zeros, NaN
 * poison and integers kept in float arenas (subnormal bit patterns, which
 * such a tiny scaling rounds back to themselves) are unchanged. */
static void perturb(state *d, const state *s, rt_rng *r)
{
    st_copy(d, s);
    float *arenas[5] = {d->act, d->fix, d->param, d->grad, d->opt};
    int64_t sizes[5] = {n_act, n_fix, n_par, n_par, n_opt};
    for (int a = 0; a < 5; a++)
        for (int64_t i = 0; i < sizes[a]; i++)
            if (fpclassify(arenas[a][i]) == FP_NORMAL)
                arenas[a][i] *= 1.0f + (float)PERTURB * frand(r, -1, 1);
    for (int64_t i = 0; i < n_stat; i++)
        d->stat[i] *= 1.0 + PERTURB * (2 * rt_rng_uniform(r) - 1);
}

int main(int argc, char **argv)
{
    int compile_only = 0;
    uint64_t seed = 20261202;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--compile-only"))
            compile_only = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: kernel_check [--compile-only] [--seed N]\n");
            return 2;
        }
    }
    rt_prog = "kernel_check";
    if (!M->cuda_src) {
        fprintf(stderr, "kernel_check: the model has no CUDA source\n");
        return 1;
    }
    rt_cuda cu;
    char why[640];
    if (rt_cuda_open(&cu, 0, 1, why, sizeof why) != 0) {
        fprintf(stderr, "kernel_check: %s\n", why);
        return 1;
    }
    char *src = rt_cuda_source(M->cuda_src);
    double t0 = rt_now();
    if (!src || rt_cuda_load_module(&cu, src, compile_only ? 0 : 1) != 0) {
        free(src);
        rt_cuda_close(&cu);
        return 1;
    }
    double tc = rt_now() - t0;
    free(src);
    const rt_plan *plans[2] = {&M->train, &M->eval};
    const char *pname[2] = {"train", "eval"};
    int rc = 0;

    if (compile_only) {
        int nk = 0;
        printf("  %-6s %-44s %5s %8s %8s %7s\n", "plan", "kernel", "regs", "local B", "shared B", "maxthr");
        for (int q = 0; q < 2; q++)
            for (int k = 0; k < plans[q]->nk; k++) {
                CUfunction f;
                int regs = 0, local = 0, shared = 0, maxt = 0;
                if (rt_cuda_function(&cu, plans[q]->cu[k].name, &f) != 0 ||
                    CU_CHECK(rt_cu.cuFuncGetAttribute(&regs, 4, f)) ||
                    CU_CHECK(rt_cu.cuFuncGetAttribute(&local, 3, f)) ||
                    CU_CHECK(rt_cu.cuFuncGetAttribute(&shared, 1, f)) ||
                    CU_CHECK(rt_cu.cuFuncGetAttribute(&maxt, 0, f))) {
                    rc = 1;
                    continue;
                }
                printf("  %-6s %-44s %5d %8d %8d %7d%s\n", pname[q], plans[q]->cu[k].name, regs, local, shared, maxt,
                       local ? "  (local memory: spills?)" : "");
                nk++;
            }
        printf("compiled %d kernels for %s in %.2f s (NVRTC %d.%d, %s)\n", nk, cu.arch, tc, rt_nv.major,
               rt_nv.minor, cu.name);
        rt_cuda_close(&cu);
        return rc;
    }

    if (rt_cuda_check_layout(&cu, M->cuda_src) != 0) {
        rt_cuda_close(&cu);
        return 1;
    }
    const int nmax = M->batch > 0 ? M->batch : 64;
    n_act = (M->train.act_units > M->eval.act_units ? M->train.act_units : M->eval.act_units) * nmax;
    n_fix = M->train.fix_floats > M->eval.fix_floats ? M->train.fix_floats : M->eval.fix_floats;
    n_par = M->param_floats;
    n_opt = M->opt_floats;
    n_stat = M->train.nstat > M->eval.nstat ? M->train.nstat : M->eval.nstat;
    if (n_stat < 1)
        n_stat = 1;
    const int64_t img_size = (int64_t)M->in_c * M->in_h * M->in_w;

    rt_rng rng;
    rt_rng_init(&rng, seed, 7);
    uint8_t *img = xalloc((size_t)(NSAMPLE * img_size));
    uint8_t *lab = xalloc(NSAMPLE);
    int32_t *idx = xalloc((size_t)nmax * 4);
    for (int64_t i = 0; i < NSAMPLE * img_size; i++)
        img[i] = (uint8_t)rt_rng_below(&rng, 256);
    for (int i = 0; i < NSAMPLE; i++)
        lab[i] = (uint8_t)rt_rng_below(&rng, (uint64_t)M->nclass);

    dev d;
    memset(&d, 0, sizeof d);
    if (rt_cuda_alloc(&cu, &d.act, (size_t)n_act * 4, "activations") ||
        rt_cuda_alloc(&cu, &d.fix, (size_t)n_fix * 4, "scratch") ||
        rt_cuda_alloc(&cu, &d.param, (size_t)n_par * 4, "parameters") ||
        rt_cuda_alloc(&cu, &d.grad, (size_t)n_par * 4, "gradients") ||
        rt_cuda_alloc(&cu, &d.opt, (size_t)n_opt * 4, "optimizer state") ||
        rt_cuda_alloc(&cu, &d.stat, (size_t)n_stat * 8, "statistics") ||
        rt_cuda_alloc(&cu, &d.img, (size_t)(NSAMPLE * img_size), "images") ||
        rt_cuda_alloc(&cu, &d.lab, NSAMPLE, "labels") || rt_cuda_alloc(&cu, &d.idx, (size_t)nmax * 4, "indices") ||
        rt_cuda_alloc(&cu, &d.exec, sizeof(rt_exec), "exec") ||
        rt_cuda_htod(&cu, d.img, img, (size_t)(NSAMPLE * img_size)) || rt_cuda_htod(&cu, d.lab, lab, NSAMPLE)) {
        rt_cuda_close(&cu);
        return 1;
    }

    state s, r, p, ref, got, tmp, pert;
    st_alloc(&pert);
    st_alloc(&s);
    st_alloc(&r);
    st_alloc(&p);
    st_alloc(&ref);
    st_alloc(&got);
    st_alloc(&tmp);
    const int ns[3] = {nmax, nmax > 2 ? nmax / 2 + 5 < nmax ? nmax / 2 + 5 : nmax - 1 : 1, 1};
    double worst = 0;
    int checks = 0, bad = 0;
    for (int q = 0; q < 2 && !rc; q++) {
        const rt_plan *pl = plans[q];
        for (int ni = 0; ni < 3; ni++) {
            const int n = ns[ni];
            if (ni > 0 && ns[ni] == ns[ni - 1])
                continue;
            for (int stepi = 0; stepi < (q == 0 ? 2 : 1); stepi++) {
                const int64_t step = stepi ? 3 : 0;
                /* fresh random state for this pass */
                rt_init_params(M, s.param, rt_rng_next(&rng));
                for (int64_t i = 0; i < n_act; i++)
                    s.act[i] = frand(&rng, -1, 1);
                for (int64_t i = 0; i < n_fix; i++)
                    s.fix[i] = frand(&rng, -1, 1);
                for (int64_t i = 0; i < n_opt; i++)
                    s.opt[i] = frand(&rng, -0.01f, 0.01f);
                memset(s.grad, 0, (size_t)n_par * 4);
                memset(s.stat, 0, (size_t)n_stat * 8);
                for (int i = 0; i < nmax; i++)
                    idx[i] = (int32_t)rt_rng_below(&rng, NSAMPLE);
                rt_exec he;
                memset(&he, 0, sizeof he);
                he.n = n;
                he.nmax = nmax;
                he.img = img;
                he.lab = lab;
                he.idx = idx;
                he.img_size = img_size;
                he.lr = 0.05f;
                he.step = step;
                he.nthreads = 1;
                rt_exec de = he;
                de.act = (float *)(uintptr_t)d.act;
                de.fix = (float *)(uintptr_t)d.fix;
                de.param = (float *)(uintptr_t)d.param;
                de.grad = (float *)(uintptr_t)d.grad;
                de.opt = (float *)(uintptr_t)d.opt;
                de.stat = (double *)(uintptr_t)d.stat;
                de.img = (const uint8_t *)(uintptr_t)d.img;
                de.lab = (const uint8_t *)(uintptr_t)d.lab;
                de.idx = (const int32_t *)(uintptr_t)d.idx;
                if (rt_cuda_htod(&cu, d.idx, idx, (size_t)nmax * 4) || rt_cuda_htod(&cu, d.exec, &de, sizeof de)) {
                    rc = 1;
                    break;
                }
                for (int k = 0; k < pl->nk; k++) {
                    const rt_cuda_launch *l = &pl->cu[k];
                    st_copy(&r, &s);
                    run_c(pl, k, &r, &he);
                    poison(pl, k, &s, &r, &p, &tmp, &he);
                    st_copy(&ref, &p);
                    run_c(pl, k, &ref, &he);
                    /* the error scale: the largest move of the C result over
                     * NPERTURB random perturbations (one alone can cancel by
                     * chance for some of thousands of elements) */
                    for (int t = 0; t < NPERTURB; t++) {
                        perturb(&tmp, &p, &rng);
                        run_c(pl, k, &tmp, &he);
                        widest(&pert, &tmp, &ref, t == 0);
                    }
                    CUfunction f;
                    unsigned grid[3];
                    if (rt_cuda_function(&cu, l->name, &f) || rt_cuda_grid(l, nmax, grid) || dev_put(&cu, &d, &p) ||
                        rt_cuda_launch1(&cu, f, l->name, grid, l->block, d.exec) ||
                        rt_cuda_wait(&cu, l->name) || dev_get(&cu, &d, &got)) {
                        rc = 1;
                        break;
                    }
                    verdict v;
                    memset(&v, 0, sizeof v);
                    judge_runs(&v, "act", p.act, ref.act, pert.act, got.act, n_act);
                    judge_runs(&v, "fix", p.fix, ref.fix, pert.fix, got.fix, n_fix);
                    judge_params(&v, "param", p.param, ref.param, pert.param, got.param, n_par);
                    judge_params(&v, "grad", p.grad, ref.grad, pert.grad, got.grad, n_par);
                    judge_params(&v, "opt", p.opt, ref.opt, pert.opt, got.opt, n_opt);
                    judge_stat(&v, p.stat, ref.stat, pert.stat, got.stat);
                    int ok = v.worst <= LIMIT && !v.outside && !v.nan_mismatch;
                    checks++;
                    bad += !ok;
                    if (v.worst > worst)
                        worst = v.worst;
                    printf("  %-5s %-40s n=%-4d step=%lld  max rel %.2e%s%s%s%s\n", pname[q], l->name, n,
                           (long long)step, v.worst, ok ? "  ok" : "  FAIL", ok ? "" : " at ", ok ? "" : v.where,
                           v.outside ? "  (writes outside the outputs)" : "");
                    st_copy(&s, &r);
                }
                if (rc)
                    break;
            }
            if (rc)
                break;
        }
    }
    CUdeviceptr all[] = {d.act, d.fix, d.param, d.grad, d.opt, d.stat, d.img, d.lab, d.idx, d.exec};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        rt_cuda_free(all[i]);
    st_free(&s);
    st_free(&r);
    st_free(&p);
    st_free(&ref);
    st_free(&got);
    st_free(&tmp);
    st_free(&pert);
    free(img);
    free(lab);
    free(idx);
    rt_cuda_close(&cu);
    if (rc) {
        printf("kernels: stopped by a CUDA error after %d checks: FAIL\n", checks);
        return 1;
    }
    printf("kernels: %d checks of %d kernels, %d failed, max rel diff %.2e (limit %.0e): %s\n", checks,
           M->train.nk + M->eval.nk, bad, worst, LIMIT, bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}
