/* study_out.c: `cddpc study`'s table (stdout) and its CSV rows. */
#include <stdio.h>
#include <string.h>

#include "study.h"

void study_table(FILE *f, const StudyRow *rows, int n, const StudySetup *s)
{
    fprintf(f, "fusion study on %s: %ld warm-up steps, then %ld steps x %ld runs per row; step time: "
               "median [min, max] of the measured steps; ratio: median / the %s level's\n",
            s->device, s->warmup, s->steps, s->repeat, s->baseline);
    int wm = 16, wf = 12;       /* columns as wide as the longest name ("all,-epilogue,-reduction") */
    for (int i = 0; i < n; i++) {
        wm = (int)strlen(rows[i].model) > wm ? (int)strlen(rows[i].model) : wm;
        wf = (int)strlen(rows[i].fusion) > wf ? (int)strlen(rows[i].fusion) : wf;
    }
    fprintf(f, "%-*s %-*s %6s %8s %11s %9s %9s %24s %10s %6s\n", wm, "model", wf, "fusion", "batch", "kernels",
            "MiB/step", "MFLOP", "GFLOP/s", "step ms [min, max]", "images/s", "ratio");
    for (int i = 0; i < n; i++) {
        const StudyRow *r = &rows[i];
        char step[64];
        snprintf(step, sizeof step, "%.3f [%.3f, %.3f]", 1e3 * r->step_median, 1e3 * r->step_min,
                 1e3 * r->step_max);
        fprintf(f, "%-*s %-*s %6lld %8d %11.3f %9.2f %9.2f %24s %10.0f %6.2f\n", wm, r->model, wf, r->fusion,
                (long long)r->batch, r->kernels, r->cost.bytes / (1024.0 * 1024), r->cost.flops / 1e6,
                r->cost.flops / r->step_median / 1e9, step, (double)r->batch / r->step_median, r->ratio);
    }
    fprintf(f, "kernels: per training step, one launch each; MiB and MFLOP: the cost model "
               "(cddpc MODEL.net --report), per step\n");
}

const char *study_csv_field(const char *s)
{
    if (!strpbrk(s, ",\"\n"))
        return s;
    char *q = util_fmt("\"");
    for (; *s; s++)
        q = util_fmt("%s%s", q, *s == '"' ? "\"\"" : util_fmt("%c", *s));
    return util_fmt("%s\"", q);
}

int study_csv(const char *path, const StudyRow *rows, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "model,fusion,batch,kernels,launches,bytes,flops,step_s_median,step_s_min,step_s_max,"
               "measured_steps,images_per_s,ratio\n");
    for (int i = 0; i < n; i++) {
        const StudyRow *r = &rows[i];
        fprintf(f, "%s,%s,%lld,%d,%d,%.0f,%.0f,%.9g,%.9g,%.9g,%d,%.3f,%.4f\n", study_csv_field(r->model),
                study_csv_field(r->fusion),
                (long long)r->batch, r->kernels, r->kernels, r->cost.bytes, r->cost.flops, r->step_median,
                r->step_min, r->step_max, r->nsteps, (double)r->batch / r->step_median, r->ratio);
    }
    return fclose(f);
}
