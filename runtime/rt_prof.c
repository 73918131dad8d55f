/* rt_prof.c: --profile, the per-kernel table of a run.
 *
 * Every call of every kernel is timed; the first RT_PROF_WARMUP calls of
 * each plan are left out (first touches of the arenas, the BLAS's and
 * OpenMP's thread start-up), the rest kept, up to RT_PROF_KEEP per kernel.
 * The table gives per kernel the median, fastest and slowest call, the
 * rates at the median (the compiler's cost model: FLOPs and bytes per
 * call at the batch, rt_kernel.flops/bytes) and the fraction of the
 * kernel's roofline bound: max(FLOPs / peak FLOP rate, bytes / peak
 * bandwidth) over the median. The peaks are --peak-gflops / --peak-gbs or
 * measured once, after the run (rt_prof_calibrate), with the run's
 * threads: the best of ten 512^3 sgemm calls through the BLAS the kernels
 * use (the rate a GEMM kernel can reach here, not the FMA units' paper
 * peak) and the best of ten STREAM triads over three 64 MiB arrays (12
 * bytes an element). Best-of, short calls: on a shared machine a long
 * measurement is cut by time slices the kernels themselves may dodge. A
 * kernel whose buffers stay in cache can pass 100% of the bandwidth.
 * On the GPU (rt_cuda_dev.c: eager steps timed by events, the train plan
 * only) nothing is measured: the roofline needs the peaks as flags, and
 * the bytes are the CPU cost model's (a GPU epilogue moves less). */
#include "rt_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rt_prof_init(rt_prof *p, int nk)
{
    memset(p, 0, sizeof *p);
    p->nk = nk;
    if (!(p->secs = rt_alloc_n(nk > 0 ? nk : 1, sizeof(double), "profile")) ||
        !(p->t = rt_alloc_n((int64_t)(nk > 0 ? nk : 1) * RT_PROF_KEEP, sizeof(double), "profile")) ||
        !(p->nt = rt_alloc_n(nk > 0 ? nk : 1, sizeof(int64_t), "profile")))
        return -1;
    return 0;
}

void rt_prof_free(rt_prof *p)
{
    rt_free(p->secs);
    rt_free(p->t);
    rt_free(p->nt);
    memset(p, 0, sizeof *p);
}

void rt_prof_add(rt_prof *p, int k, double secs)
{
    p->secs[k] += secs;
    if (p->calls < RT_PROF_WARMUP || p->nt[k] >= RT_PROF_KEEP)
        return;
    p->t[(int64_t)k * RT_PROF_KEEP + p->nt[k]++] = secs;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void rt_prof_calibrate(double *gflops, double *gbs)
{
    if (*gflops <= 0) {
        const int64_t n = 512;
        float *a = rt_alloc_n(3 * n * n, sizeof(float), "calibration");
        if (a) {
            for (int64_t i = 0; i < 3 * n * n; i++)
                a[i] = (float)(i % 7) * 0.25f;
            double best = 1e30;
            for (int r = 0; r < 10; r++) {
                double t = rt_now();
                rt_sgemm(0, 0, n, n, n, a, n, a + n * n, n, a + 2 * n * n, n);
                t = rt_now() - t;
                best = t < best ? t : best;
            }
            *gflops = 2.0 * (double)n * n * n / best / 1e9;
            rt_free(a);
        }
    }
    if (*gbs <= 0) {
        const int64_t n = (int64_t)1 << 24;
        float *a = rt_alloc_n(3 * n, sizeof(float), "calibration");
        if (a) {
            float *b = a + n, *c = b + n;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++)
                a[i] = 0, b[i] = 1, c[i] = 2;
            double best = 1e30;
            for (int r = 0; r < 10; r++) {
                double t = rt_now();
#pragma omp parallel for schedule(static)
                for (int64_t i = 0; i < n; i++)
                    a[i] = b[i] + 1.5f * c[i];
                t = rt_now() - t;
                best = t < best ? t : best;
            }
            *gbs = 12.0 * (double)n / best / 1e9;
            rt_free(a);
        }
    }
}

void rt_prof_print(const char *name, const rt_plan *p, const rt_prof *prof, int64_t batch, double gflops,
                   double gbs)
{
    double total = 0;
    for (int k = 0; k < p->nk; k++)
        total += prof->secs[k];
    const int peaks = gflops > 0 && gbs > 0;
    char pk[96] = "no peaks given (--peak-gflops, --peak-gbs): no roofline";
    if (peaks)
        snprintf(pk, sizeof pk, "peaks %.1f GFLOP/s, %.1f GB/s", gflops, gbs);
    printf("profile: %s plan, %d kernels, %lld calls (%d warm-up calls not in the times), %.3f ms per call; "
           "batch %lld; %s\n",
           name, p->nk, (long long)prof->calls, RT_PROF_WARMUP,
           prof->calls ? 1e3 * total / (double)prof->calls : 0.0, (long long)batch, pk);
    printf("  %-40s %6s %9s %9s %9s %6s %9s %8s %6s\n", "kernel", "calls", "med us", "min us", "max us", "share",
           "GFLOP/s", "GB/s", "roof");
    double *v = rt_malloc(RT_PROF_KEEP * sizeof *v);
    for (int k = 0; v && k < p->nk; k++) {
        const int64_t n = prof->nt[k];
        memcpy(v, prof->t + (int64_t)k * RT_PROF_KEEP, (size_t)n * sizeof *v);
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        const double med = n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
        const double fl = p->k[k].flops[0] + p->k[k].flops[1] * (double)batch;
        const double by = p->k[k].bytes[0] + p->k[k].bytes[1] * (double)batch;
        const double tf = fl / (gflops * 1e9), tb = by / (gbs * 1e9), bound = tf > tb ? tf : tb;
        if (!n) {
            printf("  %-40s %6lld %9s\n", p->k[k].name, 0LL, "-");
            continue;
        }
        char roof[16] = "-";
        if (peaks && med > 0)
            snprintf(roof, sizeof roof, "%5.1f%%", 100.0 * bound / med);
        printf("  %-40s %6lld %9.2f %9.2f %9.2f %5.1f%% %9.2f %8.2f %6s\n", p->k[k].name, (long long)n,
               1e6 * med, 1e6 * v[0], 1e6 * v[n - 1], total > 0 ? 100.0 * prof->secs[k] / total : 0.0,
               med > 0 ? fl / med / 1e9 : 0.0, med > 0 ? by / med / 1e9 : 0.0, roof);
    }
    free(v);
}
