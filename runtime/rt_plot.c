/* rt_plot.c: the loss curve of the notes' first program, drawn by the
 * program itself as SVG (see rt_plot.h).
 *
 * Layout follows the notes' matplotlib plot: title, x axis "Epoch" with
 * integer ticks, y axis "Loss", a grid, epoch losses with 'o' markers.
 * Added: the test loss, the per-step loss (faint) with an exponential
 * moving average over it (bias-corrected, as TensorBoard smooths), and
 * the metric on a right-hand axis. Long step series are averaged down to
 * at most MAX_POINTS points per curve so a million-step run still gives a
 * small file. */
#include "rt_plot.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W 960
#define H 540
#define X0 90.0                 /* plot area */
#define X1 860.0
#define Y0 70.0
#define Y1 460.0
#define MAX_POINTS 1500
#define SMOOTH 0.9              /* EMA weight of the past */

/* one colour per run; the series of a run differ by line style */
static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"};
#define NCOLOURS (int)(sizeof colours / sizeof colours[0])

typedef struct {
    FILE *f;
    double xlo, xhi, ylo, yhi, mlo, mhi;
} canvas;

static double px(const canvas *c, double x) { return X0 + (x - c->xlo) / (c->xhi - c->xlo) * (X1 - X0); }
static double py(const canvas *c, double y) { return Y1 - (y - c->ylo) / (c->yhi - c->ylo) * (Y1 - Y0); }
static double pm(const canvas *c, double m) { return Y1 - (m - c->mlo) / (c->mhi - c->mlo) * (Y1 - Y0); }

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            /* control characters are not allowed in XML 1.0 */
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                fputc(*s, f);
        }
    }
}

/* 1, 2 or 5 times a power of ten, so that about n steps cover span */
static double nice_step(double span, int n)
{
    if (!(span > 0) || !isfinite(span))
        return 1;
    double raw = span / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* [lo, hi] widened to whole ticks; a flat or empty range gets some height */
static void nice_range(double *lo, double *hi, double *step)
{
    if (!isfinite(*lo) || !isfinite(*hi)) {
        *lo = 0;
        *hi = 1;
    }
    if (*hi - *lo < 1e-12 * fmax(1, fabs(*hi))) {
        double d = fabs(*hi) > 0 ? fabs(*hi) * 0.1 : 1;
        *lo -= d;
        *hi += d;
    }
    *step = nice_step(*hi - *lo, 6);
    *lo = floor(*lo / *step) * *step;
    *hi = ceil(*hi / *step) * *step;
}

static void range_of(const double *v, long n, double *lo, double *hi)
{
    for (long i = 0; v && i < n; i++)
        if (isfinite(v[i])) {
            if (v[i] < *lo)
                *lo = v[i];
            if (v[i] > *hi)
                *hi = v[i];
        }
}

/* A polyline through the finite points, broken at NaN/inf. */
static void polyline(const canvas *c, const double *x, const double *y, long n, int right, const char *style)
{
    int open = 0;
    for (long i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            if (open)
                fprintf(c->f, "\"/>\n");
            open = 0;
            continue;
        }
        if (!open)
            fprintf(c->f, "<polyline fill=\"none\" %s points=\"", style);
        fprintf(c->f, "%s%.1f,%.1f", open ? " " : "", px(c, x[i]), right ? pm(c, y[i]) : py(c, y[i]));
        open = 1;
    }
    if (open)
        fprintf(c->f, "\"/>\n");
}

static void markers(const canvas *c, const double *y, int n, int right, const char *colour)
{
    for (int e = 0; e < n; e++)
        if (isfinite(y[e]))
            fprintf(c->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px(c, e + 1),
                    right ? pm(c, y[e]) : py(c, y[e]), colour);
}

/* Step losses averaged in buckets to at most MAX_POINTS, then the EMA. */
static long reduce_steps(const rt_plot_run *r, double *x, double *raw, double *ema)
{
    long n = r->nsteps, per = (n + MAX_POINTS - 1) / MAX_POINTS, m = 0;
    if (per < 1)
        per = 1;
    double avg = 0, wsum = 0;
    for (long i = 0; i < n; i += per) {
        double sx = 0, sy = 0;
        long k = 0;
        for (long j = i; j < n && j < i + per; j++)
            if (isfinite(r->step_loss[j])) {
                sx = r->step_x[j];
                sy += r->step_loss[j];
                k++;
            }
        x[m] = k ? sx : NAN;
        raw[m] = k ? sy / k : NAN;
        if (k) {
            /* bias-corrected EMA: early points are not pulled toward 0 */
            avg = SMOOTH * avg + (1 - SMOOTH) * raw[m];
            wsum = SMOOTH * wsum + (1 - SMOOTH);
            ema[m] = avg / wsum;
        } else {
            ema[m] = NAN;
        }
        m++;
    }
    return m;
}

static void text(FILE *f, double x, double y, const char *anchor, int size, const char *extra, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s>", x, y, anchor, size,
            extra ? extra : "");
    esc(f, s);
    fputs("</text>\n", f);
}

static void draw(FILE *f, const char *title, const rt_plot_run *runs, int nruns)
{
    canvas c = {.f = f};
    int maxe = 0, anysteps = 0, anymetric = 0;
    double ylo = INFINITY, yhi = -INFINITY, mlo = INFINITY, mhi = -INFINITY;
    const char *mname = NULL;
    for (int r = 0; r < nruns; r++) {
        const rt_plot_run *u = &runs[r];
        if (u->nepochs > maxe)
            maxe = u->nepochs;
        range_of(u->train_loss, u->nepochs, &ylo, &yhi);
        range_of(u->test_loss, u->nepochs, &ylo, &yhi);
        range_of(u->step_loss, u->nsteps, &ylo, &yhi);
        if (u->metric && u->nepochs > 0) {
            range_of(u->metric, u->nepochs, &mlo, &mhi);
            if (!mname)
                mname = u->metric_name;
        }
        if (u->nsteps > 0) {
            anysteps = 1;
            double xl = 0, xh = 0;
            range_of(u->step_x, u->nsteps, &xl, &xh);
            if (xh > maxe)
                maxe = (int)ceil(xh);
        }
    }
    anymetric = isfinite(mhi);
    if (maxe < 1)
        maxe = 1;
    c.xlo = anysteps ? 0 : (maxe == 1 ? 0.5 : 1);
    c.xhi = (maxe == 1 && !anysteps) ? 1.5 : maxe;
    double ystep, mstep;
    nice_range(&ylo, &yhi, &ystep);
    c.ylo = ylo;
    c.yhi = yhi;
    if (anymetric && mlo >= 0 && mhi <= 1) {
        /* a fraction (accuracy, F1): from a nice floor to 1 */
        mhi = 1;
        nice_range(&mlo, &mhi, &mstep);
    } else {
        nice_range(&mlo, &mhi, &mstep);
    }
    c.mlo = mlo;
    c.mhi = mhi;

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    text(f, (X0 + X1) / 2, 36, "middle", 20, " id=\"title\"", title && *title ? title : "Training Loss Curve");

    /* grid and ticks */
    fputs("<g id=\"grid\" stroke=\"#d8d8d8\" stroke-width=\"1\">\n", f);
    int xstep = (int)ceil(nice_step(c.xhi - c.xlo, 10));
    if (xstep < 1)
        xstep = 1;
    for (int e = (int)ceil(c.xlo); e <= c.xhi + 1e-9; e += xstep)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px(&c, e), Y0, px(&c, e), Y1);
    for (double y = c.ylo; y <= c.yhi + ystep * 1e-6; y += ystep)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", X0, py(&c, y), X1, py(&c, y));
    fputs("</g>\n", f);
    fprintf(f, "<rect id=\"axes\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#222\" stroke-width=\"1.5\"/>\n",
            X0, Y0, X1 - X0, Y1 - Y0);
    char buf[64];
    for (int e = (int)ceil(c.xlo); e <= c.xhi + 1e-9; e += xstep) {
        snprintf(buf, sizeof buf, "%d", e);
        text(f, px(&c, e), Y1 + 20, "middle", 13, NULL, buf);
    }
    for (double y = c.ylo; y <= c.yhi + ystep * 1e-6; y += ystep) {
        snprintf(buf, sizeof buf, "%.4g", fabs(y) < ystep * 1e-6 ? 0.0 : y);
        text(f, X0 - 8, py(&c, y) + 4, "end", 13, NULL, buf);
    }
    text(f, (X0 + X1) / 2, Y1 + 48, "middle", 15, " id=\"xlabel\"", "Epoch");
    fprintf(f, "<text id=\"ylabel\" x=\"0\" y=\"0\" text-anchor=\"middle\" font-size=\"15\" "
               "transform=\"translate(%.1f,%.1f) rotate(-90)\">Loss</text>\n",
            X0 - 58, (Y0 + Y1) / 2);
    if (anymetric) {
        for (double m = c.mlo; m <= c.mhi + mstep * 1e-6; m += mstep) {
            snprintf(buf, sizeof buf, "%.4g", fabs(m) < mstep * 1e-6 ? 0.0 : m);
            text(f, X1 + 8, pm(&c, m) + 4, "start", 13, NULL, buf);
        }
        fprintf(f, "<text id=\"y2label\" x=\"0\" y=\"0\" text-anchor=\"middle\" font-size=\"15\" "
                   "transform=\"translate(%.1f,%.1f) rotate(90)\">",
                X1 + 62, (Y0 + Y1) / 2);
        esc(f, mname ? mname : "test accuracy");
        fputs("</text>\n", f);
    }

    /* curves: steps underneath, then epochs */
    /* legend entries, in drawing order: a series kind and its run */
    enum { NLEGEND = 4 * NCOLOURS };
    int legend_n = 0, legend_run[NLEGEND];
    const char *legend_style[NLEGEND];
    char legend_text[NLEGEND][160];
    for (int r = 0; r < nruns; r++) {
        const rt_plot_run *u = &runs[r];
        const char *col = colours[r % NCOLOURS];
        char style[160], prefix[100] = "";
        if (nruns > 1 && u->name)
            snprintf(prefix, sizeof prefix, "%s: ", u->name);
        fprintf(f, "<g id=\"run%d\">\n", r);
        if (u->nsteps > 0 && u->step_x && u->step_loss) {
            long cap = u->nsteps < MAX_POINTS ? u->nsteps : MAX_POINTS + 1;
            double *x = malloc(3 * (size_t)cap * sizeof *x);
            if (x) {
                long m = reduce_steps(u, x, x + cap, x + 2 * cap);
                snprintf(style, sizeof style, "class=\"step\" stroke=\"%s\" stroke-opacity=\"0.25\" stroke-width=\"1\"", col);
                polyline(&c, x, x + cap, m, 0, style);
                snprintf(style, sizeof style, "class=\"smooth\" stroke=\"%s\" stroke-width=\"1.5\"", col);
                polyline(&c, x, x + 2 * cap, m, 0, style);
                free(x);
                if (legend_n < NLEGEND) {
                    legend_run[legend_n] = r;
                    legend_style[legend_n] = "step";
                    snprintf(legend_text[legend_n++], 160, "%sstep loss (smoothed)", prefix);
                }
            }
        }
        double ex[u->nepochs > 0 ? u->nepochs : 1];
        for (int e = 0; e < u->nepochs; e++)
            ex[e] = e + 1;
        if (u->train_loss && u->nepochs > 0) {
            snprintf(style, sizeof style, "class=\"train\" stroke=\"%s\" stroke-width=\"2.5\"", col);
            polyline(&c, ex, u->train_loss, u->nepochs, 0, style);
            markers(&c, u->train_loss, u->nepochs, 0, col);
            if (legend_n < NLEGEND) {
                legend_run[legend_n] = r;
                legend_style[legend_n] = "train";
                snprintf(legend_text[legend_n++], 160, "%strain loss", prefix);
            }
        }
        if (u->test_loss && u->nepochs > 0) {
            snprintf(style, sizeof style, "class=\"test\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"7 4\"", col);
            polyline(&c, ex, u->test_loss, u->nepochs, 0, style);
            markers(&c, u->test_loss, u->nepochs, 0, col);
            if (legend_n < NLEGEND) {
                legend_run[legend_n] = r;
                legend_style[legend_n] = "test";
                snprintf(legend_text[legend_n++], 160, "%stest loss", prefix);
            }
        }
        if (anymetric && u->metric && u->nepochs > 0) {
            snprintf(style, sizeof style, "class=\"metric\" stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"2 3\"", col);
            polyline(&c, ex, u->metric, u->nepochs, 1, style);
            if (legend_n < NLEGEND) {
                legend_run[legend_n] = r;
                legend_style[legend_n] = "metric";
                snprintf(legend_text[legend_n++], 160, "%s%s (right)", prefix, u->metric_name ? u->metric_name : "test accuracy");
            }
        }
        fputs("</g>\n", f);
    }

    /* legend, top right inside the plot */
    fprintf(f, "<g id=\"legend\" font-size=\"12\">\n<rect x=\"%.1f\" y=\"%.1f\" width=\"250\" height=\"%d\" "
               "fill=\"white\" fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n",
            X1 - 260, Y0 + 10, 8 + 18 * legend_n);
    for (int li = 0; li < legend_n; li++) {
        const char *col = colours[legend_run[li] % NCOLOURS], *k = legend_style[li];
        double y = Y0 + 24 + 18 * li;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                X1 - 250, y - 4, X1 - 222, y - 4, col,
                !strcmp(k, "test")     ? " stroke-dasharray=\"7 4\""
                : !strcmp(k, "metric") ? " stroke-dasharray=\"2 3\""
                : !strcmp(k, "step")   ? " stroke-opacity=\"0.6\""
                                       : "");
        text(f, X1 - 214, y, "start", 12, NULL, legend_text[li]);
    }
    fputs("</g>\n</svg>\n", f);
}

int rt_plot_write(const char *path, const char *title, const rt_plot_run *runs, int nruns, char *err, size_t errlen)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    draw(f, title, runs, nruns);
    int ok = fflush(f) == 0 && !ferror(f) && fsync(fileno(f)) == 0;
    int e = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(e));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- reading CSVs back ------------------------------------------------------ */

/* column index of name in a header line, or -1 */
static int column(const char *header, const char *name)
{
    int col = 0;
    size_t n = strlen(name);
    for (const char *p = header; p && *p; col++) {
        const char *end = p + strcspn(p, ",\r\n");
        if ((size_t)(end - p) == n && !strncmp(p, name, n))
            return col;
        p = *end == ',' ? end + 1 : NULL;
    }
    return -1;
}

/* the field at col of line as a double; 0 when it is not a number */
static int field(const char *line, int col, double *out)
{
    const char *p = line;
    for (int i = 0; i < col; i++) {
        p = strchr(p, ',');
        if (!p)
            return 0;
        p++;
    }
    char *end;
    errno = 0;
    *out = strtod(p, &end);
    return end != p && (*end == ',' || *end == '\n' || *end == '\r' || *end == 0);
}

/* Reads columns cols[0..ncols) of every data row; rows must have them. */
static long read_columns(const char *path, const char *const *names, int ncols, double **out, char *err,
                         size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    long n = 0, alloc = 0, lineno = 1;
    int cols[8];
    if (getline(&line, &cap, f) < 0) {
        snprintf(err, errlen, "%s: empty file (want a CSV header)", path);
        goto fail;
    }
    for (int k = 0; k < ncols; k++)
        if ((cols[k] = column(line, names[k])) < 0) {
            snprintf(err, errlen, "%s:1: no column '%s' in the header", path, names[k]);
            goto fail;
        }
    for (int k = 0; k < ncols; k++)
        out[k] = NULL;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        if (line[0] == '\n' || line[0] == 0)
            continue;
        /* a row cut short by a kill has no newline: the writer's next
         * row would have completed it, so it is not data yet */
        if (line[strlen(line) - 1] != '\n')
            break;
        if (n == alloc) {
            alloc = alloc ? 2 * alloc : 64;
            for (int k = 0; k < ncols; k++) {
                double *p = realloc(out[k], (size_t)alloc * sizeof *p);
                if (!p) {
                    snprintf(err, errlen, "%s: out of memory", path);
                    goto fail_cols;
                }
                out[k] = p;
            }
        }
        for (int k = 0; k < ncols; k++)
            if (!field(line, cols[k], &out[k][n])) {
                snprintf(err, errlen, "%s:%ld: column '%s' is not a number", path, lineno, names[k]);
                goto fail_cols;
            }
        n++;
    }
    free(line);
    fclose(f);
    return n;
fail_cols:
    for (int k = 0; k < ncols; k++) {
        free(out[k]);
        out[k] = NULL;
    }
fail:
    free(line);
    fclose(f);
    return -1;
}

/* how many of names, in order, the file's header has (at least 1, so a
 * file without the first one fails in read_columns with its reason) */
static int has_columns(const char *path, const char *const *names, int n)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int k = 1;
    if (f && getline(&line, &cap, f) >= 0)
        while (k < n && column(line, names[k]) >= 0)
            k++;
    free(line);
    if (f)
        fclose(f);
    return k;
}

int rt_plot_csv_read(rt_plot_csv *r, const char *name, const char *metrics_path, const char *steps_path, char *err,
                     size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->run.name = name;
    r->run.metric_name = "test accuracy";
    if (metrics_path) {
        /* train_loss is required; a run without evaluation (the notes'
         * first program) has no test columns */
        /* the right axis: the task's metric (rt_log.c's columns) */
        static const char *const metric[][2] = {{"test_acc", "test accuracy"}, {"test_macro_f1", "test macro-F1"},
                                                 {"test_mae", "test MAE"}};
        const char *m[] = {"train_loss", "test_loss", "test_acc"};
        int have = has_columns(metrics_path, m, 3);
        for (int k = 1; have == 2 && k < 3; k++) {
            m[2] = metric[k][0];
            if ((have = has_columns(metrics_path, m, 3)) == 3)
                r->run.metric_name = metric[k][1];
        }
        long n = read_columns(metrics_path, m, have, r->buf, err, errlen);
        if (n < 0)
            return -1;
        r->run.nepochs = (int)n;
        r->run.train_loss = r->buf[0];
        r->run.test_loss = have > 1 ? r->buf[1] : NULL;
        r->run.metric = have > 2 ? r->buf[2] : NULL;
    }
    if (steps_path) {
        static const char *const s[] = {"epoch", "loss"};
        long n = read_columns(steps_path, s, 2, r->buf + 3, err, errlen);
        if (n < 0) {
            rt_plot_csv_free(r);
            return -1;
        }
        /* step i of epoch e (1-based) ends at x = e - 1 + (i + 1) / per,
         * per the steps of the first epoch (all full epochs have as many;
         * a run stopped inside its first epoch has only what it logged) */
        double *ep = r->buf[3];
        long per = 0;
        while (per < n && ep[per] == ep[0])
            per++;
        double prev = NAN;
        for (long i = 0, run = 0; i < n; i++) {
            run = ep[i] == prev ? run + 1 : 1;
            prev = ep[i];
            ep[i] = ep[i] - 1 + (double)run / (double)per;
        }
        r->run.nsteps = n;
        r->run.step_x = r->buf[3];
        r->run.step_loss = r->buf[4];
    }
    return 0;
}

void rt_plot_csv_free(rt_plot_csv *r)
{
    for (int k = 0; k < 5; k++)
        free(r->buf[k]);
    memset(r, 0, sizeof *r);
}
