/* study_kernels.c: `cddpc study --kernels`: each kernel of the train step
 * on its own, from the same --trace runs as the step times: the median,
 * fastest and slowest of its measured calls, its GFLOP/s and GB/s from
 * the cost model, and the fraction of its roofline bound reached: the
 * bound is the longer of FLOPs / peak FLOP rate and bytes / peak
 * bandwidth (which of the two names the bound), the fraction that bound
 * over the median time (1: the kernel runs at the machine's peak). The
 * bandwidth is main memory's: a kernel whose buffers stay in cache (most
 * of a small model's) can pass 100%, which says just that. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "study.h"

int study_kernel_costs(const char *tsv, KernelStat **out, int cap_times)
{
    FILE *f = fopen(tsv, "r");
    if (!f)
        return -1;
    int n = 0, cap = 16;
    KernelStat *ks = util_alloc(sizeof(KernelStat) * (size_t)cap);
    char name[256];
    double fl, by;
    while (fscanf(f, "%255s %lf %lf", name, &fl, &by) == 3) {
        if (n == cap) {
            ks = util_grow(ks, sizeof(KernelStat) * (size_t)cap, sizeof(KernelStat) * (size_t)cap * 2);
            cap *= 2;
        }
        ks[n++] = (KernelStat){util_strdup(name), fl, by, util_alloc(sizeof(double) * (size_t)cap_times), 0};
    }
    fclose(f);
    *out = ks;
    return n;
}

/* rt_trace.c's format, one event a line; kernels of the train plan on the
 * main thread, steps first..last. */
void study_kernel_times(const char *trace, int first, int last, KernelStat *ks, int nk)
{
    FILE *f = fopen(trace, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *name = strstr(line, "\"name\":\""), *dur = strstr(line, "\"dur\":"),
                   *step = strstr(line, "\"step\":"), *cat = strstr(line, "\"cat\":\"");
        if (!name || !dur || !step || !cat || !strstr(line, "\"tid\":0,") || !strncmp(cat + 7, "eval\"", 5))
            continue;
        long s = strtol(step + 7, NULL, 10);
        if (s < first || s > last)
            continue;
        name += 8;
        const char *end = strchr(name, '"');
        for (int k = 0; end && k < nk; k++)
            if ((size_t)(end - name) == strlen(ks[k].name) && !strncmp(name, ks[k].name, (size_t)(end - name))) {
                ks[k].secs[ks[k].n++] = strtod(dur + 6, NULL) * 1e-6;
                break;
            }
    }
    fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void study_kernel_table(FILE *f, FILE *csv, const StudyRow *r, KernelStat *ks, int nk, double gflops, double gbs)
{
    fprintf(f, "\nkernels of %s --fusion=%s --batch %lld (roofline: %.1f GFLOP/s, %.1f GB/s)\n", r->model, r->fusion,
            (long long)r->batch, gflops, gbs);
    fprintf(f, "  %-38s %5s %10s %10s %10s %9s %11s %8s %7s %7s %9s\n", "kernel", "calls", "median us", "min us",
            "max us", "MFLOP", "KiB", "GFLOP/s", "GB/s", "bound", "roofline");
    for (int k = 0; k < nk; k++) {
        KernelStat *s = &ks[k];
        if (!s->n)
            continue;
        qsort(s->secs, (size_t)s->n, sizeof(double), cmp_double);
        double med = s->n % 2 ? s->secs[s->n / 2] : 0.5 * (s->secs[s->n / 2 - 1] + s->secs[s->n / 2]);
        double tf = s->flops / (gflops * 1e9), tb = s->bytes / (gbs * 1e9);
        double frac = med > 0 ? fmax(tf, tb) / med : 0;
        const char *bound = tf >= tb ? "flops" : "memory";
        fprintf(f, "  %-38s %5d %10.1f %10.1f %10.1f %9.3f %11.1f %8.2f %7.2f %7s %8.1f%%\n", s->name, s->n, 1e6 * med,
                1e6 * s->secs[0], 1e6 * s->secs[s->n - 1], s->flops / 1e6, s->bytes / 1024,
                med > 0 ? s->flops / med / 1e9 : 0, med > 0 ? s->bytes / med / 1e9 : 0, bound, 100 * frac);
        if (csv)
            fprintf(csv, "%s,%s,%lld,%s,%d,%.9g,%.9g,%.9g,%.0f,%.0f,%.4f,%.4f,%s,%.5f\n", study_csv_field(r->model),
                    study_csv_field(r->fusion),
                    (long long)r->batch, s->name, s->n, med, s->secs[0], s->secs[s->n - 1], s->flops, s->bytes,
                    med > 0 ? s->flops / med / 1e9 : 0, med > 0 ? s->bytes / med / 1e9 : 0, bound, frac);
    }
}
