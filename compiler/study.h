/* study.h: what `cddpc study` measured, and its three outputs: the table
 * (study_out.c), the CSV (study_out.c) and the SVG chart (study_svg.c). */
#ifndef STUDY_H
#define STUDY_H
#include <stdio.h>

#include "cddpc.h"

typedef struct StudyRow {
    const char *model, *fusion;
    int64_t batch;
    int kernels;                /* train plan kernels: one launch each per step */
    KernelCost cost;            /* per step, cost.c's model */
    double step_median, step_min, step_max;  /* seconds, over all measured steps */
    int nsteps;                 /* measured: steps x repeats */
    double ratio;               /* median / the baseline level's median */
    double base_median, base_bytes;  /* the baseline row's, for the chart */
} StudyRow;

typedef struct StudySetup {
    const char *device, *baseline;
    long steps, repeat, warmup;
} StudySetup;

/* ---- study_out.c: the table and the CSV ------------------------------ */
void study_table(FILE *f, const StudyRow *rows, int n, const StudySetup *s);
/* a CSV field: quoted when it holds a comma ("all,-epilogue") or a quote */
const char *study_csv_field(const char *s);
int study_csv(const char *path, const StudyRow *rows, int n);
/* study_svg.c: the chart, rows grouped by model and batch, nlevels
 * consecutive rows each */
int study_svg(const char *path, const StudyRow *rows, int n, int nlevels, const StudySetup *s);
/* study_calib.c: peak GFLOP/s and GB/s of this machine, measured by a
 * program compiled as the studied ones are; fills *gflops and *gbs where
 * they are not > 0 already. 0, or -1 when it cannot be built or run. */
int study_calibrate(const char *dir, const char *threads, double *gflops, double *gbs);

/* study_kernels.c: one kernel's measured times (seconds) and its cost. */
typedef struct KernelStat {
    char *name;
    double flops, bytes;
    double *secs;
    int n;
} KernelStat;
int study_kernel_costs(const char *tsv, KernelStat **out, int cap_times);   /* kernels, or -1 */
void study_kernel_times(const char *trace, int first, int last, KernelStat *ks, int nk);
void study_kernel_table(FILE *f, FILE *csv, const StudyRow *r, KernelStat *ks, int nk, double gflops, double gbs);
#endif
