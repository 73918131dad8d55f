/* study_svg.c: `cddpc study`'s chart, a self-contained SVG: two panels of
 * grouped bars, one group per model and batch size, one bar per fusion
 * level: the median step time with a whisker from the fastest to the
 * slowest measured step, and the bytes moved per step (cost model). Bars
 * are relative to the baseline level of their group (models differ by
 * orders of magnitude: on one axis the small ones vanish); the absolute
 * value is written over each bar. */
#include <math.h>
#include <stdio.h>

#include "study.h"

static const char *colour[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"};

/* A round upper bound for an axis: 1, 2 or 5 times a power of ten. */
static double axis_top(double v)
{
    if (!(v > 0))
        return 1;
    double p = pow(10, floor(log10(v)));
    return v <= p ? p : v <= 2 * p ? 2 * p : v <= 5 * p ? 5 * p : 10 * p;
}

static void esc(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
}

/* One panel at x0: value(row) per bar, optional whiskers lo..hi. */
static void panel(FILE *f, double x0, const char *title, const StudyRow *rows, int n, int nlevels,
                  double (*value)(const StudyRow *), double (*lo)(const StudyRow *), double (*hi)(const StudyRow *),
                  const char *(*label)(const StudyRow *))
{
    const double W = 420, Y0 = 50, Y1 = 330, left = 55;
    /* the axis fits the bars; a whisker past it is cut at the top with a
     * caret (one slow step must not flatten every bar) */
    double top = 0;
    for (int i = 0; i < n; i++)
        top = fmax(top, value(&rows[i]));
    top = axis_top(1.25 * top);
    fprintf(f, "<text x=\"%.1f\" y=\"30\" font-size=\"14\" text-anchor=\"middle\">", x0 + left + (W - left) / 2);
    esc(f, title);
    fprintf(f, "</text>\n");
    for (int t = 0; t <= 5; t++) {
        double y = Y1 - (Y1 - Y0) * t / 5;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0 + left, x0 + W, y, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", x0 + left - 4,
                y + 4, top * t / 5);
    }
    int ngroups = n / nlevels;
    double gw = (W - left) / ngroups, bw = gw * 0.8 / nlevels;
    for (int g = 0; g < ngroups; g++) {
        double gx = x0 + left + g * gw + gw * 0.1;
        for (int l = 0; l < nlevels; l++) {
            const StudyRow *r = &rows[g * nlevels + l];
            double v = value(r), h = (Y1 - Y0) * v / top, x = gx + l * bw;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s %s "
                       "batch %lld: %s (%.3g x)</title></rect>\n", x, Y1 - h, bw * 0.9, h, colour[l % 6], r->model,
                    r->fusion, (long long)r->batch, label(r), v);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\">%s</text>\n",
                    x + bw * 0.45, Y1 - h - 3, label(r));
            if (lo && hi) {
                double ya = Y1 - (Y1 - Y0) * lo(r) / top, yb = Y1 - (Y1 - Y0) * hi(r) / top, xm = x + bw * 0.45;
                int cut = yb < Y0;
                yb = cut ? Y0 : yb;
                fprintf(f, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1f\" stroke=\"#222\"/>\n", xm, ya, yb, xm - 3, ya,
                        xm + 3);
                if (cut)    /* a caret: the slowest step is off the axis */
                    fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1f\" stroke=\"#222\" fill=\"none\"/>\n",
                            xm - 3, yb + 4, xm, yb, xm + 3, yb + 4);
                else
                    fprintf(f, "<path d=\"M%.1f %.1fH%.1f\" stroke=\"#222\"/>\n", xm - 3, yb, xm + 3);
            }
        }
        const StudyRow *r = &rows[g * nlevels];
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">", gx + gw * 0.4, Y1 + 16);
        esc(f, r->model);
        fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">batch %lld</text>\n",
                gx + gw * 0.4, Y1 + 30, (long long)r->batch);
    }
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x0 + left, x0 + W, Y1, Y1);
}

static double ms(const StudyRow *r) { return r->step_median / r->base_median; }
static double ms_lo(const StudyRow *r) { return r->step_min / r->base_median; }
static double ms_hi(const StudyRow *r) { return r->step_max / r->base_median; }
static double mib(const StudyRow *r) { return r->cost.bytes / r->base_bytes; }
static const char *ms_text(const StudyRow *r) { return util_fmt("%.3g ms", 1e3 * r->step_median); }
static const char *mib_text(const StudyRow *r) { return util_fmt("%.3g MiB", r->cost.bytes / (1024.0 * 1024)); }

int study_svg(const char *path, const StudyRow *rows, int n, int nlevels, const StudySetup *s)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"400\" "
               "font-family=\"sans-serif\">\n<rect width=\"900\" height=\"400\" fill=\"white\"/>\n");
    panel(f, 0, util_fmt("step time / --fusion=%s's (median; whisker: min, max)", s->baseline), rows, n, nlevels, ms,
          ms_lo, ms_hi, ms_text);
    panel(f, 450, util_fmt("bytes per step / --fusion=%s's (cost model)", s->baseline), rows, n, nlevels, mib, NULL,
          NULL, mib_text);
    for (int l = 0; l < nlevels; l++) {
        fprintf(f, "<rect x=\"%d\" y=\"372\" width=\"12\" height=\"12\" fill=\"%s\"/>", 60 + 150 * l, colour[l % 6]);
        fprintf(f, "<text x=\"%d\" y=\"382\" font-size=\"12\">--fusion=%s</text>\n", 76 + 150 * l, rows[l].fusion);
    }
    fprintf(f, "<text x=\"890\" y=\"396\" font-size=\"10\" text-anchor=\"end\">cddpc study on %s: %ld steps x %ld "
               "runs after %ld warm-up steps</text>\n</svg>\n", s->device, s->steps, s->repeat, s->warmup);
    return fclose(f);
}
