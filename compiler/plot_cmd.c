/* plot_cmd.c: `cddpc plot`, several runs' metrics overlaid in one SVG
 * (runtime/rt_plot.c draws it, as a training program's --plot does):
 *
 *   cddpc plot [NAME=]METRICS.csv[:STEPS.csv] ... -o FILE.svg [--title T]
 *
 * NAME labels the run in the legend (default: the file name without
 * .csv); STEPS.csv is the run's --step-log, drawn raw and smoothed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_plot.h"

#define MAX_RUNS 16

static int plot_usage(FILE *f, int rc)
{
    fprintf(f, "usage: cddpc plot [NAME=]METRICS.csv[:STEPS.csv] ... -o FILE.svg [--title TEXT]\n"
               "  overlays the runs' train and test loss per epoch, test accuracy on a second axis,\n"
               "  and the per-step loss (smoothed) of runs given with their --step-log file\n");
    return rc;
}

int cddpc_plot_main(int argc, char **argv)
{
    const char *out = NULL, *title = NULL;
    char *specs[MAX_RUNS];
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return plot_usage(stdout, 0);
        if (!strcmp(a, "-o") || !strcmp(a, "--title")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "cddpc plot: error: %s needs a value\n", a);
                return plot_usage(stderr, 2);
            }
            *(a[1] == 'o' ? &out : &title) = argv[++i];
        } else if (!strncmp(a, "-o", 2) || !strncmp(a, "--title=", 8)) {
            *(a[1] == 'o' ? &out : &title) = a[1] == 'o' ? a + 2 : a + 8;
        } else if (a[0] == '-') {
            fprintf(stderr, "cddpc plot: error: unknown option '%s'\n", a);
            return plot_usage(stderr, 2);
        } else if (n == MAX_RUNS) {
            fprintf(stderr, "cddpc plot: error: at most %d runs in one plot\n", MAX_RUNS);
            return 2;
        } else {
            specs[n++] = argv[i];
        }
    }
    if (!out || !n) {
        fprintf(stderr, "cddpc plot: error: %s\n", !n ? "no metrics file given" : "no output: -o FILE.svg");
        return plot_usage(stderr, 2);
    }

    rt_plot_csv csv[MAX_RUNS];
    rt_plot_run runs[MAX_RUNS] = {0};
    char names[MAX_RUNS][256], err[512];
    int rc = 0, nread = 0;
    for (int r = 0; r < n && !rc; r++) {
        char *spec = specs[r], *eq = strchr(spec, '='), *metrics = spec, *steps;
        if (eq) {
            *eq = 0;
            snprintf(names[r], sizeof names[r], "%s", spec);
            metrics = eq + 1;
        }
        steps = strchr(metrics, ':');
        if (steps)
            *steps++ = 0;
        if (!eq) {
            const char *b = strrchr(metrics, '/');
            b = b ? b + 1 : metrics;
            size_t len = strlen(b);
            if (len > 4 && !strcmp(b + len - 4, ".csv"))
                len -= 4;
            snprintf(names[r], sizeof names[r], "%.*s", (int)len, b);
        }
        if (rt_plot_csv_read(&csv[r], names[r], metrics, steps && *steps ? steps : NULL, err, sizeof err) != 0) {
            fprintf(stderr, "cddpc plot: error: %s\n", err);
            rc = 1;
            break;
        }
        runs[r] = csv[r].run;
        nread++;
    }
    if (!rc && rt_plot_write(out, title, runs, n, err, sizeof err) != 0) {
        fprintf(stderr, "cddpc plot: error: %s\n", err);
        rc = 1;
    }
    for (int r = 0; r < nread; r++)
        rt_plot_csv_free(&csv[r]);
    if (!rc)
        printf("cddpc plot: %d run%s -> %s\n", n, n == 1 ? "" : "s", out);
    return rc;
}
