/* rt_plot.h: the loss curve as a self-contained SVG (no Python, no
 * matplotlib): train and test loss per epoch with markers, the per-step
 * loss raw and smoothed, and test accuracy (or the task's metric) on a
 * second axis; several runs overlaid. Used by a training program
 * (--plot FILE.svg, redrawn after every epoch) and by `cddpc plot`. Depends
 * on libc only, so the compiler links it too. */
#ifndef RT_PLOT_H
#define RT_PLOT_H
#include <stddef.h>

/* One run. Arrays may be NULL when their count is 0; NaN values are gaps. */
typedef struct rt_plot_run {
    const char *name;            /* legend prefix when several runs are drawn */
    int nepochs;                 /* epoch e (1-based) is drawn at x = e */
    const double *train_loss, *test_loss, *metric;
    const char *metric_name;     /* right axis title, e.g. "test accuracy" */
    long nsteps;                 /* step i ends at x = step_x[i] (epochs) */
    const double *step_x, *step_loss;
} rt_plot_run;

/* Writes the SVG to path atomically (a temp file beside it, fsync,
 * rename), so a reader or a kill never sees half a picture. Returns 0, or
 * -1 with the reason in err. */
int rt_plot_write(const char *path, const char *title, const rt_plot_run *runs, int nruns,
                  char *err, size_t errlen);

/* A run read back from CSV files written by --metrics and --step-log
 * (columns found by their header names, so older and newer files both
 * read). Owns its arrays; rt_plot_csv_free releases them. */
typedef struct rt_plot_csv {
    rt_plot_run run;
    double *buf[5];
} rt_plot_csv;

/* Reads a --metrics file (epoch,train_loss,test_loss,test_acc,...) into r;
 * with steps_path non-NULL also a --step-log file (step,epoch,loss). -1
 * and err (path, line and reason) on a missing file or a malformed row. */
int rt_plot_csv_read(rt_plot_csv *r, const char *name, const char *metrics_path, const char *steps_path,
                     char *err, size_t errlen);
void rt_plot_csv_free(rt_plot_csv *r);

#endif
