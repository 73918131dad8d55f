/* tests/cuda/kc_core.c: every CUDA kernel cddpc emits for a model, run by
 * a backend (kc_core.h: the CUDA emulator, or a real GPU), against its C
 * twin from the same compilation (DESIGN.md section 5, tier 4).
 *
 * For each plan (train, eval) and each size (nmax, n, step) of --sizes:
 *   state S: every arena random, uniform in [-1, 1]; parameters scaled to
 *   +-1/sqrt(fan_in) as PyTorch initializes them (so rounding in long dot
 *   products is that of training), a variance buffer positive, a counter
 *   a count; grad, fix and stat zero (the runtime zeroes them before a
 *   plan); a random uint8 dataset, labels below nclass (a quarter of them
 *   ignore_index where the loss has one), random batch
 *   indices. Then for each kernel k in plan order:
 *     1. the C kernel on S gives R; the act and fix elements it changed
 *        are its outputs;
 *     2. those outputs are poisoned (NaN) in a copy P of S -- except the
 *        ones the C kernel reads before writing, found by running it on P
 *        -- and the C kernel on P gives the reference;
 *     3. the error scale: the C kernel on P with every float perturbed by
 *        a random relative 1e-6, NPERTURB times; the widest move of each
 *        element (a sum that cancels to near zero carries the rounding of
 *        its large terms, and this measures exactly that, for any kernel).
 *        It only widens the bounds below, so it is made only when a
 *        comparison fails without it (four C runs saved almost always);
 *     4. the backend runs the CUDA kernel on P with its launch geometry
 *        (program.c's rt_cuda_launch, through rt_cuda_grid as the runtime
 *        does), once per thread order it can run, and every arena comes
 *        back and is judged (below);
 *     5. S := R, so that each kernel is judged alone.
 *   Last, the whole plan runs from the first state on both sides without
 *   resynchronizing (one full training step through the CUDA kernels
 *   against the C step), its error scale from whole perturbed C runs.
 *
 * Judging, element by element (start = before the kernel, ref = the C
 * result, got = the backend's):
 *   - an act element the C kernel left alone must come back bit for bit:
 *     a kernel that writes rows >= n or outside its outputs is caught
 *     (elsewhere unchanged bits do not prove that nothing was written:
 *     see judge_region);
 *   - NaN must meet NaN: a skipped output stays poisoned, an output read
 *     before it was written spreads the poison;
 *   - an integer kept in a float arena (a label: its bits read as a
 *     subnormal) must match exactly;
 *   - any other output needs both
 *       |got-ref| / max(1, |ref|) <= tol       (--tol, default 1e-5)
 *       |got-ref| / m            <= limit     (--limit, default 1e-4)
 *     with m = max(|ref|, 0.1 x the largest |ref| of its region (a
 *     parameter's slice, a run of outputs), |perturbed - ref| / 1e-6):
 *     the first bounds large values tightly, the second small ones
 *     relative to their own scale, where an absolute 1e-5 would let a
 *     gradient of 1e-3 be 1% wrong;
 *   - --flips F (bf16/fp16 models): the two targets round the same fp32
 *     values to low precision, but their fp32 sums differ in the last
 *     bits, so a value near a rounding midpoint may round apart: up to a
 *     fraction F of an arena's values (and 2 more) may miss the two bounds
 *     above by at most flip_tol (two bf16 ulps) each (the whole plan:
 *     WHOLE_FLIP_GAIN x F). A kernel that did not round, or rounded
 *     elsewhere, differs in most of its values;
 *   - the whole plan only: a value the C step itself moves by at least
 *     |got-ref| when its inputs are perturbed passes (whole_plan).
 * The report: a MISMATCH line per arena that fails (with its first
 * elements), a table of kernels, the whole-plan arenas, and last one line
 * "kernels: ...: PASS|FAIL". */
#include "kc_core.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h" /* rt_cuda_grid: the launch geometry as the runtime computes it */

#define PERTURB 1e-6  /* relative perturbation of the inputs for the error scale */
#define NPERTURB 4    /* one perturbation alone can cancel by chance for some element */
#define NFIRST 5      /* elements shown per failing arena */

static double tol = 1e-5, limit = 1e-4;
static double flip_frac = 0, flip_tol = 1.0 / 64;
/* The whole plan runs every kernel without resynchronizing, so a value
 * one kernel rounded apart feeds the rest of the step: a flipped GEMM
 * input moves its whole output row by a fraction of an ulp, and some of
 * those round apart again. Its flip allowance is this many times a single
 * kernel's (NormOdd's step in bf16: 5 of 688 fix values, 0.7%, with every
 * kernel alone within 0.1%); a kernel that does not round at all still
 * differs in most of its values. */
#define WHOLE_FLIP_GAIN 20
/* The whole plan also accepts a value that the C step itself moves by
 * more under PERTURB of its inputs than the backend differs from it: a
 * ReLU or a max pool's choice near a tie, flipped by a last-bit
 * difference kernels upstream, moves a batch-norm channel sum by one
 * gradient element (the ConvNet at 37:22:3: 1.6e-4 on a sum of 0.077,
 * with max pooling fused or not, depending on the seed). Each kernel
 * alone is still judged without it. */
static int whole_plan;
static int verbose;
static uint64_t rng_state = 0x243f6a8885a308d3ull;

static const rt_model *M;
static const kc_backend *B;

static int nchecks, nfailed, nscaled; /* nscaled: comparisons that needed the error scale */
static int64_t npoisoned, nreadfirst; /* outputs poisoned; outputs read before written (left as they were) */
static int nunpoisoned;               /* kernel runs left unpoisoned: the poison would reach a reduction */
static int64_t nuncompared;           /* values of 16-bit buffers overwritten in part, taken from the C result */
static int stopped;                   /* the backend failed and has fatal_errors */

/* ---- random numbers (splitmix64: the same stream on every host) ---------- */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* uniform in [-1, 1) */
static float frand(void) { return (float)((double)(rnd() >> 40) * (2.0 / 16777216.0) - 1.0); }

/* ---- states ------------------------------------------------------------------ */
enum { A_ACT, A_FIX, A_PARAM, A_GRAD, A_OPT, A_STAT, NARENA };
static const char *const arena_names[NARENA] = {"act", "fix", "param", "grad", "opt", "stat"};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "kernel_check: out of memory\n");
        exit(1);
    }
    return p;
}

static float *farena(const kc_state *s, int a)
{
    return a == A_ACT ? s->act : a == A_FIX ? s->fix : a == A_PARAM ? s->param : a == A_GRAD ? s->grad : s->opt;
}

static int64_t arena_n(const kc_dims *d, int a)
{
    return a == A_ACT ? d->act : a == A_FIX ? d->fix : a == A_PARAM || a == A_GRAD ? d->param
           : a == A_OPT ? d->opt : d->stat;
}

static void st_alloc(kc_state *s, const kc_dims *d)
{
    s->act = xcalloc((size_t)d->act, 4);
    s->fix = xcalloc((size_t)d->fix, 4);
    s->param = xcalloc((size_t)d->param, 4);
    s->grad = xcalloc((size_t)d->param, 4);
    s->opt = xcalloc((size_t)d->opt, 4);
    s->stat = xcalloc((size_t)d->stat, 8);
}

static void st_free(kc_state *s)
{
    free(s->act);
    free(s->fix);
    free(s->param);
    free(s->grad);
    free(s->opt);
    free(s->stat);
}

static void st_copy(kc_state *t, const kc_state *s, const kc_dims *d)
{
    for (int a = 0; a < A_STAT; a++)
        memcpy(farena(t, a), farena(s, a), (size_t)arena_n(d, a) * 4);
    memcpy(t->stat, s->stat, (size_t)d->stat * 8);
}

static int same_f(float a, float b) { return !memcmp(&a, &b, 4); }
static int same_d(double a, double b) { return !memcmp(&a, &b, 8); }

/* The slot of the optimizer state called name (rt_model.opt_state), or -1. */
static int opt_slot(const char *name)
{
    const char *l = M->opt_state;
    for (int i = 0; l && *l; i++) {
        const size_t n = strcspn(l, ",");
        if (n == strlen(name) && strncmp(l, name, n) == 0)
            return i;
        l += n + (l[n] == ',');
    }
    return -1;
}

/* S: see the top of the file */
static void st_random(kc_state *s, const kc_dims *d)
{
    for (int a = 0; a < A_STAT; a++) {
        float *v = farena(s, a);
        for (int64_t i = 0; i < arena_n(d, a); i++)
            v[i] = frand();
    }
    for (int i = 0; i < M->nparam; i++) {
        const rt_param *q = &M->params[i];
        const float bound = q->fan_in > 0 ? 1.0f / sqrtf((float)q->fan_in) : 1.0f;
        const int fl = rt_param_flags(M, i);
        for (int64_t j = 0; j < q->numel; j++) {
            float *v = &s->param[q->off + j];
            *v *= bound;
            /* buffers hold what they would in training: a variance (init
             * one) is positive -- a negative one would make both sides NaN,
             * which compares equal and checks nothing -- a counter counts */
            if ((fl & RT_PARAM_BUFFER) && (fl & RT_PARAM_I64))
                *v = (float)(rnd() % 1000);
            else if ((fl & RT_PARAM_BUFFER) && q->init == RT_INIT_ONE)
                *v = 0.5f + fabsf(*v);
        }
    }
    /* optimizer state non-negative: Adam's second moment is, and the
     * square root of a negative one is NaN on both sides, which compares
     * equal and checks nothing */
    for (int64_t i = 0; i < d->opt; i++)
        s->opt[i] = fabsf(s->opt[i]);
    /* centered RMSprop: square_avg is a mean of squares, grad_avg the mean,
     * so square_avg >= grad_avg^2. The variance square_avg - grad_avg^2 is
     * kept at least grad_avg^2 / 16: where it is barely positive the
     * subtraction cancels and one rounding difference (CUDA contracts a
     * multiply-add the C kernel rounds twice) becomes any relative error
     * at all, in training as here, which no tolerance can judge; at
     * m^2/16 the condition number is at most 17. */
    const int sq = opt_slot("square_avg"), ga = opt_slot("grad_avg");
    for (int64_t i = 0; sq >= 0 && ga >= 0 && i < d->param; i++) {
        const float m = s->opt[ga * d->param + i];
        float *v = &s->opt[sq * d->param + i];
        *v = m * m + fmaxf(*v, m * m / 16.0f);
    }
    /* the runtime zeroes grad, fix and stat before a plan (cddprt.h, CUDA device) */
    memset(s->grad, 0, (size_t)d->param * 4);
    memset(s->fix, 0, (size_t)d->fix * 4);
    memset(s->stat, 0, (size_t)d->stat * 8);
}

/* ---- the C side ---------------------------------------------------------------- */
static void run_c(const rt_plan *p, int k, kc_state *s, rt_exec *e)
{
    e->act = s->act;
    e->fix = s->fix;
    e->param = s->param;
    e->grad = s->grad;
    e->opt = s->opt;
    e->stat = s->stat;
    p->k[k].fn(e);
}

/* C kernels [k0, k1) of p on s, in plan order */
static void run_c_range(const rt_plan *p, int k0, int k1, kc_state *s, rt_exec *e)
{
    for (int k = k0; k < k1; k++)
        run_c(p, k, s, e);
}

/* Poison the C kernel's act/fix outputs in P (a copy of S); R is its
 * result from S. Outputs it reads before writing stay unpoisoned (a
 * kernel may accumulate into its output, or read back what it wrote
 * before a barrier): running it on P shows which, because their NaN
 * spreads. When a poisoned value feeds a reduction (the difference is
 * not in the poisoned elements themselves), nothing is poisoned. */
static void poison(const rt_plan *pl, int k, const kc_state *S, const kc_state *R, kc_state *P, kc_state *tmp,
                   rt_exec *e, const kc_dims *d)
{
    st_copy(P, S, d);
    for (int a = A_ACT; a <= A_FIX; a++) {
        const float *s = farena(S, a), *r = farena(R, a);
        float *p = farena(P, a);
        for (int64_t i = 0; i < arena_n(d, a); i++)
            if (!same_f(r[i], s[i]))
                p[i] = NAN;
    }
    for (int round = 0; round < 4; round++) {
        st_copy(tmp, P, d);
        run_c(pl, k, tmp, e);
        int64_t fixed = 0;
        for (int a = A_ACT; a <= A_FIX; a++) {
            const float *s = farena(S, a), *r = farena(R, a), *t = farena(tmp, a);
            float *p = farena(P, a);
            for (int64_t i = 0; i < arena_n(d, a); i++)
                if (!same_f(t[i], r[i]) && isnan(p[i]) && !isnan(s[i])) {
                    p[i] = s[i];
                    fixed++;
                }
        }
        const int differs = memcmp(tmp->param, R->param, (size_t)d->param * 4) ||
                            memcmp(tmp->grad, R->grad, (size_t)d->param * 4) ||
                            memcmp(tmp->opt, R->opt, (size_t)d->opt * 4) ||
                            memcmp(tmp->stat, R->stat, (size_t)d->stat * 8);
        if (!fixed && !differs)
            goto counted;
        if (!fixed)
            break;
    }
    st_copy(P, S, d); /* a poisoned input feeds a reduction: poison nothing */
    nunpoisoned++;
    return;
counted:
    for (int a = A_ACT; a <= A_FIX; a++) {
        const float *s = farena(S, a), *r = farena(R, a), *p = farena(P, a);
        for (int64_t i = 0; i < arena_n(d, a); i++)
            if (!same_f(r[i], s[i])) {
                npoisoned += isnan(p[i]) && !isnan(s[i]);
                nreadfirst += !isnan(p[i]);
            }
    }
}

/* t := s with every normal float scaled by 1 + PERTURB * U(-1, 1). Zeros,
 * NaN poison and integers kept in float arenas (subnormal bit patterns,
 * which such a tiny scaling rounds back to themselves) are unchanged. */
static void perturb(kc_state *t, const kc_state *s, const kc_dims *d)
{
    st_copy(t, s, d);
    for (int a = 0; a < A_STAT; a++) {
        float *v = farena(t, a);
        for (int64_t i = 0; i < arena_n(d, a); i++)
            if (fpclassify(v[i]) == FP_NORMAL)
                v[i] *= 1.0f + (float)PERTURB * frand();
    }
    for (int64_t i = 0; i < d->stat; i++)
        t->stat[i] *= 1.0 + PERTURB * frand();
}

/* w := whichever of w and t lies farther from ref, element by element
 * (w := t when first). */
static void widest(kc_state *w, const kc_state *t, const kc_state *ref, const kc_dims *d, int first)
{
    for (int a = 0; a < A_STAT; a++) {
        float *wv = farena(w, a);
        const float *tv = farena(t, a), *rv = farena(ref, a);
        for (int64_t i = 0; i < arena_n(d, a); i++)
            if (first || fabsf(tv[i] - rv[i]) > fabsf(wv[i] - rv[i]))
                wv[i] = tv[i];
    }
    for (int64_t i = 0; i < d->stat; i++)
        if (first || fabs(t->stat[i] - ref->stat[i]) > fabs(w->stat[i] - ref->stat[i]))
            w->stat[i] = t->stat[i];
}

/* ---- judging ------------------------------------------------------------------- */
typedef struct judged {        /* one arena */
    double worst1, worst2;     /* max |got-ref|/max(1,|ref|) and |got-ref|/m over outputs */
    int64_t bad, flips, outside, odd; /* wrong values; flips; writes outside the outputs; NaN/inf/integer */
    int64_t first[NFIRST];
    int nfirst;
} judged;

static void mark(judged *j, int64_t i)
{
    if (j->nfirst < NFIRST)
        j->first[j->nfirst++] = i;
}

/* One output element: ref r, got g; exact: an integer (must match);
 * floor: 0.1 x its region's largest |ref|; pert: the widest perturbed C
 * result. */
static int judge_value(judged *j, int64_t i, double r, double g, int exact, double floor, double pert)
{
    if (r == g)
        return 0;
    if (isnan(r) || isnan(g) || isinf(r) || isinf(g) || exact) {
        if (isnan(r) && isnan(g))
            return 0;
        j->worst1 = j->worst2 = INFINITY;
        j->odd++;
        j->bad++;
        mark(j, i);
        return 1;
    }
    const double e = fabs(g - r);
    const double d1 = e / fmax(1.0, fabs(r));
    double m = fmax(fabs(r), floor);
    if (isfinite(pert))
        m = fmax(m, fabs(pert - r) / PERTURB);
    const double d2 = e / m;
    j->worst1 = fmax(j->worst1, d1);
    j->worst2 = fmax(j->worst2, d2);
    if (d1 <= tol && d2 <= limit)
        return 0;
    if (whole_plan && isfinite(pert) && e <= fabs(pert - r))
        return 0;
    if (flip_frac > 0 && d1 <= flip_tol && d2 <= flip_tol) {
        j->flips++;
        return 0;
    }
    j->bad++;
    mark(j, i);
    return 1;
}

/* Elements [lo, hi) of a float arena, one region. written_exactly: the
 * arena's start values are random or NaN poison (act), so an element the
 * C kernel wrote has changed bits, and one it left alone must come back
 * bit for bit. Elsewhere (fix, grad and stat start at zero; an optimizer
 * step may leave a parameter's bits as they were) unchanged bits do not
 * prove that nothing was written, and such an element is judged like an
 * output, against the value it kept. */
static void judge_region(judged *j, const float *start, const float *ref, const float *pert, const float *got,
                         int64_t lo, int64_t hi, int written_exactly)
{
    double scale = 0;
    for (int64_t i = lo; i < hi; i++)
        if (!same_f(ref[i], start[i]) && isfinite(ref[i]) && fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    const double floor = scale > 0 ? 0.1 * scale : 1e-30;
    for (int64_t i = lo; i < hi; i++) {
        const int unwritten = same_f(ref[i], start[i]);
        if (unwritten && written_exactly) {
            if (!same_f(got[i], ref[i])) {
                j->outside++;
                j->bad++;
                mark(j, i);
            }
            continue;
        }
        const int exact = fpclassify(ref[i]) == FP_SUBNORMAL || fpclassify(got[i]) == FP_SUBNORMAL;
        if (judge_value(j, i, ref[i], got[i], exact, floor, pert ? pert[i] : NAN) && unwritten)
            j->outside++;
    }
}

/* act and fix: the regions are the runs of elements the C kernel changed
 * (its output buffers), and the unchanged runs between them */
static void judge_runs(judged *j, const float *start, const float *ref, const float *pert, const float *got,
                       int64_t lo, int64_t hi, int written_exactly)
{
    int64_t i = lo;
    while (i < hi) {
        int64_t k = i;
        const int changed = !same_f(ref[i], start[i]);
        while (k < hi && (!same_f(ref[k], start[k])) == changed)
            k++;
        judge_region(j, start, ref, pert, got, i, k, written_exactly);
        i = k;
    }
}

/* param, grad, opt: one region per parameter (opt holds one or more
 * parameter-shaped slabs: momentum, Adam's two moments); whatever lies
 * outside them (padding) as runs */
static void judge_params(judged *j, const float *start, const float *ref, const float *pert, const float *got,
                         int64_t n)
{
    /* the parameters in the order of their offsets (program.c lists them
     * in the model's order, which is not that of the slab) */
    int *order = xcalloc((size_t)M->nparam, sizeof *order);
    for (int p = 0; p < M->nparam; p++) {
        int at = p;
        while (at > 0 && M->params[order[at - 1]].off > M->params[p].off) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = p;
    }
    const int64_t slab = M->param_floats;
    int64_t base = 0;
    for (; slab > 0 && base + slab <= n; base += slab) {
        int64_t at = base; /* judged up to here; a gap before a parameter is padding */
        for (int p = 0; p < M->nparam; p++) {
            const rt_param *q = &M->params[order[p]];
            const int64_t lo = base + q->off > at ? base + q->off : at, hi = base + q->off + q->numel;
            if (base + q->off > at)
                judge_runs(j, start, ref, pert, got, at, base + q->off, 0);
            if (hi > lo)
                judge_region(j, start, ref, pert, got, lo, hi, 0);
            at = hi > at ? hi : at;
        }
        if (at < base + slab)
            judge_runs(j, start, ref, pert, got, at, base + slab, 0);
    }
    if (base < n)
        judge_runs(j, start, ref, pert, got, base, n, 0);
    free(order);
}

static void judge_stat(judged *j, const double *start, const double *ref, const double *pert, const double *got,
                       int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (judge_value(j, i, ref[i], got[i], 0, 1e-30, pert ? pert[i] : NAN) && same_d(ref[i], start[i]))
            j->outside++;
}

typedef struct verdict {
    double arena1[NARENA];     /* worst |got-ref|/max(1,|ref|) per arena */
    double worst1, worst2;
    const char *worst_arena;
    int ok;
} verdict;

/* Judge got against ref (both from start); print every failing arena
 * unless quiet. pert: the widest perturbed C results, or NULL: without
 * them m is smaller, so what passes without passes with them (the core
 * computes them only for a comparison that fails without). */
static verdict judge(const kc_state *start, const kc_state *ref, const kc_state *pert, const kc_state *got,
                     const kc_dims *d, const char *what, int nmax, int quiet, double flips_allowed)
{
    verdict v;
    memset(&v, 0, sizeof v);
    v.worst_arena = "-";
    v.ok = 1;
    for (int a = 0; a < NARENA; a++) {
        judged j;
        memset(&j, 0, sizeof j);
        const int64_t n = arena_n(d, a);
        if (a == A_STAT)
            judge_stat(&j, start->stat, ref->stat, pert ? pert->stat : NULL, got->stat, n);
        else if (a <= A_FIX)
            judge_runs(&j, farena(start, a), farena(ref, a), pert ? farena(pert, a) : NULL, farena(got, a), 0, n,
                       a == A_ACT);
        else
            judge_params(&j, farena(start, a), farena(ref, a), pert ? farena(pert, a) : NULL, farena(got, a), n);
        if (j.flips > (int64_t)(flips_allowed * (double)n) + 2)
            j.bad += j.flips;
        v.arena1[a] = j.worst1;
        if (j.worst1 > v.worst1 || (j.worst1 == v.worst1 && j.worst1 > 0 && v.worst_arena[0] == '-'))
            v.worst1 = j.worst1, v.worst_arena = arena_names[a];
        v.worst2 = fmax(v.worst2, j.worst2);
        if (!j.bad)
            continue;
        v.ok = 0;
        if (quiet)
            continue;
        printf("MISMATCH %s: %s: %" PRId64 " of %" PRId64 " values wrong (%" PRId64
               " outside the C kernel's outputs, %" PRId64 " NaN/inf/integer, %" PRId64
               " flips); worst rel diff %.3g (tol %g), scaled %.3g (limit %g)\n",
               what, arena_names[a], j.bad, n, j.outside, j.odd, j.flips, j.worst1, tol, j.worst2, limit);
        for (int f = 0; f < j.nfirst; f++) {
            const int64_t o = j.first[f];
            if (a == A_STAT) {
                printf("    stat[%" PRId64 "]: C %.17g  %s %.17g  (before %.17g)\n", o, ref->stat[o], B->name,
                       got->stat[o], start->stat[o]);
                continue;
            }
            const float r = farena(ref, a)[o], g = farena(got, a)[o], s = farena(start, a)[o];
            int32_t ir, ig;
            memcpy(&ir, &r, 4);
            memcpy(&ig, &g, 4);
            if (a == A_ACT)
                printf("    act[%" PRId64 "] (= %" PRId64 "*nmax + %" PRId64 "): C %.9g  %s %.9g  (before %.9g; "
                       "as int32: %d %d)\n", o, o / nmax, o % nmax, r, B->name, g, s, ir, ig);
            else
                printf("    %s[%" PRId64 "]: C %.9g  %s %.9g  (before %.9g)\n", arena_names[a], o, r, B->name, g, s);
        }
    }
    return v;
}

/* ---- sizes and plans --------------------------------------------------------------- */
typedef struct size3 {
    int nmax, n;
    int64_t step;
} size3;

typedef struct kstat {
    double worst1, worst2;
    const char *arena;
    int ok;
} kstat;


static int64_t in_elems(void)
{
    int64_t n = 1;
    for (int i = 0; i < M->in_rank; i++)
        n *= M->in_dim[i];
    return n;
}

/* per-channel normalization where the input has channels, so the
 * kernels' channel index is exercised */
static int norm_channels(void) { return M->in_rank >= 2 ? (int)M->in_dim[0] : 1; }

static void dims_for(kc_dims *d, int nmax)
{
    /* the CUDA kernels' arenas, which hold the C kernels' and the GPU's
     * workspaces after them */
    const int64_t ua = rt_plan_cuda_act(&M->train), ub = rt_plan_cuda_act(&M->eval);
    const int64_t fa = rt_plan_cuda_fix(&M->train), fb = rt_plan_cuda_fix(&M->eval);
    const int64_t units = ua > ub ? ua : ub, fix = fa > fb ? fa : fb;
    const int nstat = M->train.nstat > M->eval.nstat ? M->train.nstat : M->eval.nstat;
    d->act = units * nmax;
    d->fix = fix > 0 ? fix : 1;
    d->param = M->param_floats;
    d->opt = M->opt_floats > 0 ? M->opt_floats : 1;
    d->stat = nstat > 0 ? nstat : 1;
    d->nsample = nmax + 13; /* samples in the dataset: idx draws from more than a batch */
    d->x_bytes = d->nsample * in_elems() * 4;   /* room for float samples */
    d->y_bytes = d->nsample * (M->target == RT_TGT_FLOAT ? M->nclass : rt_model_positions(M)) * 4;
    d->norm_bytes = 2 * norm_channels() * 4;
    d->nidx = nmax;
}

/* One launch on the backend: put, run, get. 0 on success. Where the run
 * touches 16-bit activations, the act arena is translated to the
 * backend's layout and back (kc_act16.c); ref, the C result, stands in
 * for values that have no C-layout counterpart (NULL: none can). */
static int device_run(const kc_dims *d, const kc_state *in, kc_state *out, const rt_plan *p, const int *fn,
                      int k0, int k1, int nmax, int n, const kc_state *ref, int reverse)
{
    const int a16 = kc_act16_any(p, k0, k1);
    float *packed = NULL;
    kc_state put = *in;
    if (a16) {
        packed = xcalloc((size_t)d->act, 4);
        memcpy(packed, in->act, (size_t)d->act * 4);
        kc_act16_put(p, k0, k1, packed, nmax, n, M->precision);
        put.act = packed;
    }
    int rc = B->put(B->ctx, d, &put);
    for (int k = k0; !rc && k < k1; k++) {
        unsigned grid[3];
        /* kernels k and k + 1 both in the run: their sibling kernel, as
         * the runtime launches them (fn[nk + k], map_plan) */
        const int pair = k + 1 < k1 && fn[p->nk + k] >= 0;
        const char *name = pair ? p->cu[k].pair : p->cu[k].name;
        if ((pair ? rt_cuda_pair_grid(&p->cu[k], &p->cu[k + 1], nmax, grid) : rt_cuda_grid(&p->cu[k], nmax, grid)) ||
            B->launch(B->ctx, fn[pair ? p->nk + k : k], name, grid, p->cu[k].block, reverse)) {
            printf("FAIL %s (nmax %d): launch failed: %s\n", name, nmax, B->error(B->ctx));
            rc = -1;
        }
        k += pair;
    }
    rc = rc || B->get(B->ctx, d, out);
    if (!rc && a16) {
        char why[256] = "";
        if (kc_act16_get(p, k0, k1, out->act, packed, ref ? ref->act : NULL, d->act, nmax, n, M->precision,
                         &nuncompared, why, sizeof why)) {
            printf("FAIL %s (nmax %d): a store past a 16-bit buffer's rows: %s\n", p->cu[k0].name, nmax, why);
            rc = -1;
        }
    }
    free(packed);
    /* a split-K GEMM's partials and arrival counters are its own scratch,
     * which the C kernel does not have: restored, so that every other
     * element is still judged (a write past the scratch is caught) */
    for (int k = k0; !rc && k < k1; k++) {
        const rt_cuda_launch *l = &p->cu[k];
        if (l->ws_units)
            memcpy(out->act + l->ws_off * nmax, in->act + l->ws_off * nmax, (size_t)(l->ws_units * nmax) * 4);
        if (l->ctr_n)
            memcpy(out->fix + l->ctr_off, in->fix + l->ctr_off, (size_t)l->ctr_n * 4);
        if (l->wsf_n)
            memcpy(out->fix + l->wsf_off, in->fix + l->wsf_off, (size_t)l->wsf_n * 4);
    }
    if (rc && B->fatal_errors)
        stopped = 1;
    return rc;
}

/* The error scale of C kernels [k0, k1) from start (ref: their result
 * there): the widest move of each element over NPERTURB runs from
 * perturbed copies of start, into pert (tmp: scratch). */
static void error_scale(const rt_plan *p, int k0, int k1, const kc_state *start, const kc_state *ref, kc_state *tmp,
                        kc_state *pert, rt_exec *e, const kc_dims *d)
{
    for (int t = 0; t < NPERTURB; t++) {
        perturb(tmp, start, d);
        run_c_range(p, k0, k1, tmp, e);
        widest(pert, tmp, ref, d, t == 0);
    }
}

/* got (the backend's run of kernels [k0, k1) from start) judged against
 * the C result ref, quietly first, then with the error scale when that
 * fails. */
static verdict judge_scaled(const rt_plan *p, int k0, int k1, const kc_state *start, const kc_state *ref,
                            const kc_state *got, kc_state *tmp, kc_state *pert, rt_exec *e, const kc_dims *d,
                            const char *what, int nmax, double flips)
{
    verdict w = judge(start, ref, NULL, got, d, what, nmax, 1, flips);
    if (!w.ok) {
        error_scale(p, k0, k1, start, ref, tmp, pert, e, d);
        nscaled++;
        w = judge(start, ref, pert, got, d, what, nmax, 0, flips);
    }
    return w;
}

/* A sibling pair (kernels k and k + 1 as one launch) against the two C
 * kernels run one after the other: from start, the C result ref; got,
 * tmp and pert are scratch states. 1 when it passes. */
static int pair_check(const rt_plan *p, const int *fn, int k, const kc_dims *d, const kc_state *start,
                      const kc_state *ref, kc_state *got, kc_state *tmp, kc_state *pert, rt_exec *e, int nmax,
                      char *what, size_t wsize)
{
    nchecks++;
    snprintf(what, wsize, "%s (nmax %d, n %d)", p->cu[k].pair, nmax, e->n);
    if (device_run(d, start, got, p, fn, k, k + 2, nmax, e->n, ref, 0)) {
        printf("FAIL %s: the %s run failed\n", what, B->name);
        nfailed++;
        return 0;
    }
    const verdict w = judge_scaled(p, k, k + 2, start, ref, got, tmp, pert, e, d, what, nmax, flip_frac);
    nfailed += !w.ok;
    if (verbose)
        printf("  %-44s nmax %3d n %3d: rel diff %.3g (%s)%s\n", p->cu[k].pair, nmax, e->n, w.worst1, w.worst_arena,
               w.ok ? "" : "  FAIL");
    return w.ok;
}

/* One plan at one size: kernel by kernel, then the whole plan. */
static int run_size(const rt_plan *p, const char *which, const int *fn, size3 sz, int orders, kstat *ks,
                    verdict *whole)
{
    const int nmax = sz.nmax, n = sz.n;
    kc_dims d;
    dims_for(&d, nmax);
    /* the data set: uint8 samples at even sizes, float ones at odd (both
     * of rt_sample's paths); class labels or float targets as the loss
     * takes; a random normalization per channel */
    const int64_t x_size = in_elems(), y_size = M->target == RT_TGT_FLOAT ? M->nclass : rt_model_positions(M);
    const int nnorm = norm_channels(), x_u8 = nmax % 2 == 0 && !M->in_vocab;
    uint8_t *xs = xcalloc((size_t)d.x_bytes, 1);
    void *ys = xcalloc((size_t)d.y_bytes, 1);
    float *norm = xcalloc((size_t)d.norm_bytes, 1);
    int32_t *idx = xcalloc((size_t)d.nidx, 4);
    for (int64_t i = 0; i < d.nsample * x_size; i++) {
        if (x_u8)
            xs[i] = (uint8_t)(rnd() >> 56);
        else if (M->in_vocab)   /* tokens: an embedding's rows */
            ((float *)xs)[i] = (float)(rnd() % (uint64_t)M->in_vocab);
        else
            ((float *)xs)[i] = (float)((double)(rnd() >> 11) * 0x1p-53 * 4.0 - 2.0);
    }
    for (int64_t i = 0; i < d.nsample * y_size; i++) {
        if (M->target == RT_TGT_FLOAT)
            ((float *)ys)[i] = (float)(rnd() >> 63);    /* 0/1: fits BCE as well as regression */
        else
            ((int32_t *)ys)[i] = (int32_t)(rnd() % (uint64_t)M->nclass);
        if (M->has_ignore && rnd() % 4 == 0)    /* a target the loss ignores, one in four */
            ((int32_t *)ys)[i] = M->ignore_index;
    }
    for (int c = 0; c < nnorm; c++) {   /* tokens are taken as they are: (0, 1) */
        norm[c] = M->in_vocab ? 0.0f : (float)((double)(rnd() >> 11) * 0x1p-53 - 0.5);
        norm[nnorm + c] = M->in_vocab ? 1.0f : (float)(0.25 + (double)(rnd() >> 11) * 0x1p-53);
    }
    for (int64_t i = 0; i < d.nidx; i++)
        idx[i] = (int32_t)(rnd() % (uint64_t)d.nsample);
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.n = n;
    e.nmax = nmax;
    e.x = xs;
    e.y = ys;
    e.norm = norm;
    e.idx = idx;
    e.x_size = x_size;
    e.y_size = y_size;
    e.x_u8 = x_u8;
    e.norm_n = nnorm;
    e.norm_div = x_size / nnorm;
    e.lr = M->lr;
    e.step = sz.step;
    e.nthreads = 1;
    /* dropout's streams see a rank and seed other than 0; SyncBatchNorm's
     * counts a world of 2 (its sums over the ranks are copies here: C
     * and CUDA compute the same thing either way) */
    e.rank = 1;
    e.world = 2;
    e.seed = 3407;
    e.scale = 1024.0f; /* fp16 models' loss scale (others ignore it) */

    enum { S0, S, R, P, REF, PERT, GOT, TMP, PAIR0, NST };
    kc_state st[NST];
    for (int i = 0; i < NST; i++)
        st_alloc(&st[i], &d);
    st_random(&st[S0], &d);
    st_copy(&st[S], &st[S0], &d);

    int ok = 1;
    char what[256];
    if (B->bind(B->ctx, &d, &e)) {
        printf("FAIL %s nmax %d: the backend cannot take the dataset: %s\n", which, nmax, B->error(B->ctx));
        ok = 0;
        nfailed++;
        stopped = B->fatal_errors;
        goto out;
    }
    for (int k = 0; k < p->nk; k++) {
        if (fn[p->nk + k] >= 0)     /* the start of a sibling pair (pair_check) */
            st_copy(&st[PAIR0], &st[S], &d);
        st_copy(&st[R], &st[S], &d);
        run_c(p, k, &st[R], &e);
        char why[256];
        if (kc_act16_check_c(p, k, st[R].act, nmax, n, M->precision, why, sizeof why)) {
            /* the compiler gave a buffer 16 bits that its values do not fit */
            printf("FAIL %s (nmax %d, n %d): C kernel: %s\n", p->k[k].name, nmax, n, why);
            nfailed++;
            ok = 0;
        }
        poison(p, k, &st[S], &st[R], &st[P], &st[TMP], &e, &d);
        kc_act16_canon(p, k, k + 1, st[P].act, nmax, n, M->precision);
        st_copy(&st[REF], &st[P], &d);
        run_c(p, k, &st[REF], &e);
        int scaled = 0; /* PERT holds this kernel's error scale */
        verdict v;
        memset(&v, 0, sizeof v);
        v.ok = 1;
        v.worst_arena = "-";
        for (int o = 0; o < orders; o++) {
            nchecks++;
            snprintf(what, sizeof what, "%s (nmax %d, n %d, step %" PRId64 "%s)", p->k[k].name, nmax, n, sz.step,
                     o ? ", threads in reverse order" : "");
            if (device_run(&d, &st[P], &st[GOT], p, fn, k, k + 1, nmax, n, NULL, o)) {
                printf("FAIL %s: the %s run failed\n", what, B->name);
                v.ok = 0;
                nfailed++;
                if (stopped)
                    break;
                continue;
            }
            verdict w = judge(&st[P], &st[REF], NULL, &st[GOT], &d, what, nmax, 1, flip_frac);
            if (!w.ok) {
                if (!scaled) {
                    error_scale(p, k, k + 1, &st[P], &st[REF], &st[TMP], &st[PERT], &e, &d);
                    scaled = 1;
                }
                nscaled++;
                w = judge(&st[P], &st[REF], &st[PERT], &st[GOT], &d, what, nmax, 0, flip_frac);
            }
            nfailed += !w.ok;
            if (w.worst1 > v.worst1 || (w.worst1 == v.worst1 && v.worst_arena[0] == '-'))
                v.worst1 = w.worst1, v.worst_arena = w.worst_arena;
            v.worst2 = fmax(v.worst2, w.worst2);
            v.ok = v.ok && w.ok;
        }
        if (verbose)
            printf("  %-44s nmax %3d n %3d step %" PRId64 ": rel diff %.3g (%s), scaled %.3g%s\n", p->k[k].name, nmax,
                   n, sz.step, v.worst1, v.worst_arena, v.worst2, v.ok ? "" : "  FAIL");
        if (v.worst1 > ks[k].worst1 || (v.worst1 == ks[k].worst1 && ks[k].arena[0] == '-'))
            ks[k].worst1 = v.worst1, ks[k].arena = v.worst_arena;
        ks[k].worst2 = fmax(ks[k].worst2, v.worst2);
        ks[k].ok = ks[k].ok && v.ok;
        ok = ok && v.ok;
        if (stopped) {
            whole->ok = 0;
            goto out;
        }
        const kc_state next = st[R]; /* S := R */
        st[R] = st[S];
        st[S] = next;
        if (k > 0 && fn[p->nk + k - 1] >= 0 &&
            !pair_check(p, fn, k - 1, &d, &st[PAIR0], &st[S], &st[GOT], &st[TMP], &st[PERT], &e, nmax, what,
                        sizeof what)) {
            ks[k].ok = 0;
            ok = 0;
        }
    }

    /* the whole plan from S0 without resynchronizing */
    kc_act16_canon(p, 0, p->nk, st[S0].act, nmax, n, M->precision);
    st_copy(&st[REF], &st[S0], &d);
    run_c_range(p, 0, p->nk, &st[REF], &e);
    nchecks++;
    snprintf(what, sizeof what, "whole %s plan (nmax %d, n %d, step %" PRId64 ")", which, nmax, n, sz.step);
    if (device_run(&d, &st[S0], &st[GOT], p, fn, 0, p->nk, nmax, n, &st[REF], 0)) {
        printf("FAIL %s: the %s run failed\n", what, B->name);
        whole->ok = 0;
    } else {
        whole_plan = 1;
        *whole = judge_scaled(p, 0, p->nk, &st[S0], &st[REF], &st[GOT], &st[TMP], &st[PERT], &e, &d, what, nmax,
                              flip_frac * WHOLE_FLIP_GAIN);
        whole_plan = 0;
    }
    nfailed += !whole->ok;
    ok = ok && whole->ok;
out:
    for (int i = 0; i < NST; i++)
        st_free(&st[i]);
    free(xs);
    free(ys);
    free(norm);
    free(idx);
    return ok;
}

/* The backend's kernel of each C kernel of plan p, by name. */
static int map_plan(const rt_plan *p, const char *which, int *fn)
{
    int ok = 1;
    if (!p->cu) {
        printf("FAIL %s plan: program.c has no CUDA launch table\n", which);
        return 0;
    }
    for (int k = 0; k < p->nk; k++) {
        if (strcmp(p->cu[k].name, p->k[k].name)) {
            printf("FAIL %s kernel %d is %s in the C plan but %s in program.c's CUDA launch table\n", which, k,
                   p->k[k].name, p->cu[k].name);
            ok = 0;
            continue;
        }
        fn[k] = B->find(B->ctx, p->cu[k].name);
        if (fn[k] < 0) {
            printf("FAIL %s kernel %s: the %s backend has no such kernel\n", which, p->k[k].name, B->name);
            ok = 0;
        }
        fn[p->nk + k] = p->cu[k].pair && k + 1 < p->nk ? B->find(B->ctx, p->cu[k].pair) : -1;
        if (p->cu[k].pair && fn[p->nk + k] < 0) {
            printf("FAIL %s kernel %s: the %s backend has no such kernel\n", which, p->cu[k].pair, B->name);
            ok = 0;
        }
    }
    if (ok && B->check_plan && B->check_plan(B->ctx, which, p))
        ok = 0;
    return ok;
}

static int parse_sizes(const char *s, size3 **out, int *nout)
{
    size3 *v = NULL;
    int n = 0;
    while (*s) {
        size3 z = {0, 0, 0};
        long long st = 0;
        int used = 0;
        if (sscanf(s, "%d:%d%n", &z.nmax, &z.n, &used) < 2)
            goto bad;
        s += used;
        if (*s == ':') {
            if (sscanf(s, ":%lld%n", &st, &used) < 1)
                goto bad;
            s += used;
        }
        z.step = st;
        if (z.nmax < 1 || z.n < 1 || z.n > z.nmax)
            goto bad;
        v = realloc(v, sizeof *v * (size_t)(n + 1));
        if (!v)
            goto bad;
        v[n++] = z;
        if (*s == ',')
            s++;
        else if (*s)
            goto bad;
    }
    if (!n)
        goto bad;
    free(*out);
    *out = v;
    *nout = n;
    return 0;
bad:
    free(v);
    return -1;
}

/* --cuda-src FILE: what the runtime hands NVRTC (rt_model.cuda_src) must
 * be the file that was checked, byte for byte */
static int same_source(const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f) {
        printf("FAIL cannot read %s\n", file);
        return 0;
    }
    size_t cap = 1 << 16, len = 0, got;
    char *text = xcalloc(cap, 1);
    while ((got = fread(text + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            text = realloc(text, cap *= 2);
            if (!text) {
                fprintf(stderr, "kernel_check: out of memory\n");
                exit(1);
            }
        }
    }
    fclose(f);
    int ok = 0;
    if (!M->cuda_src)
        printf("FAIL program.c has no cuda_src (rt_model.cuda_src is NULL)\n");
    else if (strlen(M->cuda_src) != len || memcmp(M->cuda_src, text, len))
        printf("FAIL rt_model.cuda_src in program.c differs from %s\n", file);
    else {
        printf("rt_model.cuda_src in program.c is %s byte for byte (%zu bytes)\n", file, len);
        ok = 1;
    }
    free(text);
    return ok;
}

const char *const kc_layout_names[] = {"sizeof", "n",   "nmax",     "act", "fix",  "param", "grad",
                                       "opt",    "stat", "x",        "y",   "norm", "idx", "x_size",
                                       "y_size", "norm_div", "x_u8", "norm_n", "lr", "step", "nthreads",
                                       "rank",   "world", "seed", "scale", "found_inf"};

int kc_layout_host(size_t *out)
{
    int k = 0;
    out[k++] = sizeof(rt_exec);
#define F(f) out[k++] = offsetof(rt_exec, f)
    F(n); F(nmax); F(act); F(fix); F(param); F(grad); F(opt); F(stat); F(x); F(y); F(norm); F(idx);
    F(x_size); F(y_size); F(norm_div); F(x_u8); F(norm_n); F(lr); F(step); F(nthreads); F(rank); F(world); F(seed); F(scale); F(found_inf);
#undef F
    return k;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--sizes NMAX:N[:STEP],...] [--tol X] [--limit X] [--flips F] [--orders 1|2]\n"
            "          [--plan train|eval|both] [--seed N] [--cuda-src FILE] [--compile-only] [-v]\n",
            prog);
}

int kc_main(int argc, char **argv, const rt_model *m, const kc_backend *b, const char *default_sizes)
{
    M = m;
    B = b;
    size3 *sizes = NULL;
    int nsizes = 0, orders = b->orders, compile_only = 0;
    const char *plans = "both", *cuda_src_file = NULL;
    if (parse_sizes(default_sizes, &sizes, &nsizes)) {
        fprintf(stderr, "kernel_check: bad default sizes %s\n", default_sizes);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sizes") && next) {
            if (parse_sizes(argv[++i], &sizes, &nsizes)) {
                fprintf(stderr, "kernel_check: --sizes wants NMAX:N[:STEP],... with 1 <= N <= NMAX\n");
                return 2;
            }
        } else if (!strcmp(a, "--tol") && next)
            tol = atof(argv[++i]);
        else if (!strcmp(a, "--limit") && next)
            limit = atof(argv[++i]);
        else if (!strcmp(a, "--flips") && next)
            flip_frac = atof(argv[++i]);
        else if (!strcmp(a, "--orders") && next) {
            orders = atoi(argv[++i]);
            if (orders < 1 || orders > b->orders) {
                fprintf(stderr, "kernel_check: --orders: the %s backend runs 1 to %d thread orders\n", b->name,
                        b->orders);
                return 2;
            }
        } else if (!strcmp(a, "--plan") && next)
            plans = argv[++i];
        else if (!strcmp(a, "--seed") && next)
            rng_state = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(a, "--cuda-src") && next)
            cuda_src_file = argv[++i];
        else if (!strcmp(a, "--compile-only"))
            compile_only = 1;
        else if (!strcmp(a, "-v"))
            verbose = 1;
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (compile_only) {
        free(sizes);
        if (!b->compile_only) {
            fprintf(stderr, "kernel_check: --compile-only: the %s backend compiles nothing\n", b->name);
            return 2;
        }
        return b->compile_only(b->ctx, m);
    }
    printf("model %s (%s): %lld parameter floats, %d train + %d eval kernels; backend %s; tol %g, limit %g\n",
           m->name, m->source, (long long)m->param_floats, m->train.nk, m->eval.nk, b->name, tol, limit);
    int ok = 1;
    if (cuda_src_file && !same_source(cuda_src_file))
        ok = 0;
    int maxn = 1;
    for (int s = 0; s < nsizes; s++)
        maxn = sizes[s].nmax > maxn ? sizes[s].nmax : maxn;
    kc_dims maxd;
    dims_for(&maxd, maxn);
    if (b->open(b->ctx, &maxd)) {
        printf("FAIL the %s backend did not open: %s\n", b->name, b->error(b->ctx));
        b->close(b->ctx);
        free(sizes);
        return 1;
    }
    if (b->layout && b->layout(b->ctx, m))
        ok = 0;
    int kernels = 0, kernels_failed = 0;
    double worst1 = 0, worst2 = 0;
    for (int pi = 0; pi < 2; pi++) {
        const char *which = pi == 0 ? "train" : "eval";
        if (strcmp(plans, "both") && strcmp(plans, which))
            continue;
        const rt_plan *p = pi == 0 ? &m->train : &m->eval;
        kernels += p->nk;
        int *fn = xcalloc((size_t)p->nk * 2 + 1, sizeof *fn);   /* [nk + k]: the pair of k and k + 1 */
        kstat *ks = xcalloc((size_t)p->nk, sizeof *ks);
        verdict *whole = xcalloc((size_t)nsizes, sizeof *whole);
        if (!map_plan(p, which, fn)) {
            ok = 0;
            kernels_failed += p->nk;
            goto next;
        }
        for (int k = 0; k < p->nk; k++)
            ks[k].ok = 1, ks[k].arena = "-";
        for (int s = 0; s < nsizes; s++) {
            whole[s].ok = 1;
            if (!stopped)
                ok = run_size(p, which, fn, sizes[s], orders, ks, &whole[s]) && ok;
        }
        printf("\n%s plan: max difference per kernel over nmax:n:step", which);
        for (int s = 0; s < nsizes; s++)
            printf(" %d:%d:%lld", sizes[s].nmax, sizes[s].n, (long long)sizes[s].step);
        printf("%s; rel diff = |got-C|/max(1,|C|), scaled = |got-C|/m\n", orders > 1 ? ", both thread orders" : "");
        printf("  %-44s %-22s %-16s %10s %10s %s\n", "kernel", "grid@nmax", "block", "rel diff", "scaled", "arena");
        const int lastn = sizes[nsizes - 1].nmax;
        for (int k = 0; k < p->nk; k++) {
            unsigned g[3] = {0, 0, 0};
            const unsigned *bl = p->cu[k].block;
            rt_cuda_grid(&p->cu[k], lastn, g);
            char gs[48], bs[48];
            snprintf(gs, sizeof gs, "(%u,%u,%u)@%d", g[0], g[1], g[2], lastn);
            snprintf(bs, sizeof bs, "(%u,%u,%u)", bl[0], bl[1], bl[2]);
            printf("  %-44s %-22s %-16s %10.3g %10.3g %-5s %s\n", p->k[k].name, gs, bs, ks[k].worst1, ks[k].worst2,
                   ks[k].arena, ks[k].ok ? "ok" : "FAIL");
            kernels_failed += !ks[k].ok;
            worst1 = fmax(worst1, ks[k].worst1);
            worst2 = fmax(worst2, ks[k].worst2);
        }
        printf("  whole %s plan from one state, no resync: max rel diff per arena\n", which);
        for (int s = 0; s < nsizes; s++) {
            const verdict *v = &whole[s];
            printf("    nmax %3d n %3d step %lld: param %.3g  opt %.3g  grad %.3g  stat %.3g  act %.3g  fix %.3g"
                   "  (scaled %.3g)  %s\n",
                   sizes[s].nmax, sizes[s].n, (long long)sizes[s].step, v->arena1[A_PARAM], v->arena1[A_OPT],
                   v->arena1[A_GRAD], v->arena1[A_STAT], v->arena1[A_ACT], v->arena1[A_FIX], v->worst2,
                   v->ok ? "ok" : "FAIL");
            worst1 = fmax(worst1, v->worst1);
            worst2 = fmax(worst2, v->worst2);
        }
    next:
        free(fn);
        free(ks);
        free(whole);
    }
    char extra[160] = "";
    if (b->summary)
        b->summary(b->ctx, extra, sizeof extra);
    b->close(b->ctx);
    free(sizes);
    ok = ok && !nfailed && !kernels_failed;
    printf("\npoisoned %" PRId64 " act/fix outputs with NaN; %" PRId64 " more are read before written and kept; "
           "%d kernel runs unpoisoned (the poison would reach a reduction)\n", npoisoned, nreadfirst, nunpoisoned);
    if (nuncompared)
        printf("16-bit activations: %" PRId64 " values of buffers a later one overwrote in part (whole plans) "
               "were not compared\n", nuncompared);
    if (stopped)
        printf("\nkernels: stopped by a %s error after %d checks: FAIL\n", b->name, nchecks);
    else
        printf("\nkernels: %s on the %s: %d checks of %d kernels (%d needed the error scale), %d failed, max rel "
               "diff %.2e (tol %g), scaled %.2e (limit %g)%s%s: %s\n",
               m->name, b->name, nchecks, kernels, nscaled, nfailed, worst1, tol, worst2, limit,
               extra[0] ? "; " : "", extra, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
