/* rt_csv.c: tables in CSV, as Python's csv module and pandas write them.
 *
 * A header row names the columns; fields are separated by commas, a field
 * in double quotes may hold commas, newlines and doubled quotes ("");
 * lines end in LF or CRLF; blank lines are skipped (files often end in
 * several); a UTF-8 byte order mark is skipped. The features are numbers;
 * the target is one column of class labels (integers used as the class
 * index, or any other text mapped to indices in sorted order, as
 * sklearn's LabelEncoder), or one or more numeric columns of float
 * targets.
 *
 * The file is parsed from memory (rt_csv_parse), so the fuzz harness
 * drives the code a run uses. Every failure is one line naming the file,
 * the line and, for a cell, the column. */
#include "rt_internal.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct csv_rd {
    const char *path;
    const char *p, *end;
    int64_t line;           /* the physical line p is on, 1-based */
    char *buf;              /* the record's fields, decoded, NUL-terminated */
    size_t cap, len;
    size_t *off;            /* field i starts at buf + off[i] */
    int nf, fcap;
} csv_rd;

static int push(csv_rd *r, char c)
{
    if (r->len == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 256;
        char *nb = rt_realloc(r->buf, nc);
        if (!nb) {
            rt_err("%s: out of memory", r->path);
            return -1;
        }
        r->buf = nb;
        r->cap = nc;
    }
    r->buf[r->len++] = c;
    return 0;
}

static int new_field(csv_rd *r)
{
    if (r->nf == r->fcap) {
        int nc = r->fcap ? r->fcap * 2 : 16;
        size_t *no = rt_realloc(r->off, (size_t)nc * sizeof *no);
        if (!no) {
            rt_err("%s: out of memory", r->path);
            return -1;
        }
        r->off = no;
        r->fcap = nc;
    }
    r->off[r->nf++] = r->len;
    return 0;
}

/* The next record into r's fields. 1: a record (*at: its first line),
 * 0: end of file, -1: error. Blank lines are skipped. */
static int next_record(csv_rd *r, int64_t *at)
{
    while (r->p < r->end && (*r->p == '\n' || *r->p == '\r')) {
        if (*r->p == '\n')
            r->line++;
        r->p++;
    }
    if (r->p >= r->end)
        return 0;
    *at = r->line;
    r->nf = 0;
    r->len = 0;
    if (new_field(r) != 0)
        return -1;
    int quoted = 0;
    for (;;) {
        if (r->p >= r->end) {
            if (quoted) {
                rt_err("%s: line %lld: a quoted field is not closed before the end of the file", r->path,
                       (long long)*at);
                return -1;
            }
            break;
        }
        char c = *r->p++;
        if (quoted) {
            if (c == '"') {
                if (r->p < r->end && *r->p == '"') {
                    r->p++;
                    if (push(r, '"') != 0)
                        return -1;
                } else
                    quoted = 0;
                continue;
            }
            if (c == '\n')
                r->line++;
            if (push(r, c) != 0)
                return -1;
            continue;
        }
        if (c == '"' && r->len == r->off[r->nf - 1]) {
            quoted = 1;
            continue;
        }
        if (c == ',') {
            if (push(r, 0) != 0 || new_field(r) != 0)
                return -1;
            continue;
        }
        if (c == '\r' && r->p < r->end && *r->p == '\n')
            continue;
        if (c == '\n' || c == '\r') {
            if (c == '\n')
                r->line++;
            break;
        }
        if (push(r, c) != 0)
            return -1;
    }
    return push(r, 0) != 0 ? -1 : 1;
}

static const char *field(const csv_rd *r, int i) { return r->buf + r->off[i]; }

/* a header column's name and place, sorted by name */
typedef struct col_name { const char *name; int col; } col_name;

static int col_cmp(const void *a, const void *b)
{
    return strcmp(((const col_name *)a)->name, ((const col_name *)b)->name);
}

static const char *clean(const char *s, char *buf, size_t cap) { return rt_data_show(s, strlen(s), buf, cap); }

/* field i's length, with any NUL inside it */
static size_t field_len(const csv_rd *r, int i)
{
    return (i + 1 < r->nf ? r->off[i + 1] - 1 : r->len - 1) - r->off[i];
}

/* field i as a number: 0, or NUM_NOT (not a number), NUM_HEX (C's
 * hexadecimal floats: strtod reads them, the model file and PyTorch's
 * loaders do not), NUM_NUL (a NUL byte inside); *v may be NaN or inf
 * (the callers say so) */
enum { NUM_NOT = -1, NUM_HEX = -2, NUM_NUL = -3 };
static int num(const csv_rd *r, int i, double *v)
{
    const char *s = field(r, i);
    size_t n = field_len(r, i);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (strlen(s) < n)
        return NUM_NUL;
    if (!n)
        return NUM_NOT;
    char *e;
    errno = 0;
    *v = strtod(s, &e);
    if (e == s || (size_t)(e - s) != n)
        return NUM_NOT;
    return memchr(s, 'x', n) || memchr(s, 'X', n) ? NUM_HEX : 0;
}

/* why field i is not a number, for "line L, column C: WHY" */
static const char *num_why(const csv_rd *r, int i, int code, char *buf, size_t cap)
{
    char cv[64];
    const char *f = clean(field(r, i), cv, sizeof cv);
    if (code == NUM_NUL)
        snprintf(buf, cap, "the cell holds a NUL byte at byte %zu", strlen(field(r, i)) + 1);
    else if (code == NUM_HEX)
        snprintf(buf, cap, "'%s' is a hexadecimal number; numbers in data files are decimal", f);
    else
        snprintf(buf, cap, "'%s' is not a number", f);
    return buf;
}

/* "a, b, c" of the header, cut short for a message */
static const char *header_list(const csv_rd *r, char *b, size_t cap)
{
    size_t at = 0;
    b[0] = 0;
    char c[64];
    for (int i = 0; i < r->nf && at < cap; i++)
        at += (size_t)snprintf(b + at, cap - at, "%s'%s'", i ? ", " : "", clean(field(r, i), c, sizeof c));
    if (at >= cap && cap > 4)
        memcpy(b + cap - 4, "...", 4);
    return b;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void rt_classes_free(rt_classes *c)
{
    for (int i = 0; c->name && i < c->n; i++)    /* a bytes vocabulary counts 256 and names none */
        free(c->name[i]);
    free(c->name);
    memset(c, 0, sizeof *c);
}

int rt_csv_parse(const rt_model *m, const char *path, const char *text, size_t len, rt_classes *cls, int fit,
                 rt_dataset *out)
{
    const rt_data_src *s = &m->data;
    csv_rd r = {.path = path, .p = text, .end = text + len, .line = 1};
    int rc = -1, nt = s->ntargets, nfeat = 0;
    int *tcol = NULL, *fcol = NULL;
    col_name *byname = NULL;    /* the header sorted by name */
    char **labels = NULL;
    int64_t *lines = NULL;  /* each row's line, for the label messages */
    float *x = NULL, *yf = NULL;
    int32_t *yi = NULL;
    int64_t n = 0, cap = 0, at;
    char hl[400];
    memset(out, 0, sizeof *out);
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
        r.p += 3;
    int got = next_record(&r, &at);
    if (got <= 0) {
        if (got == 0)
            rt_err("%s: empty file (expected a header row naming the columns)", path);
        goto out;
    }
    int ncol = r.nf;
    /* the header's names sorted, for duplicates and lookups in
     * O(n log n): a header of 160,000 columns compared pairwise took a minute */
    byname = rt_malloc((size_t)ncol * sizeof *byname);
    if (!byname) {
        rt_err("%s: out of memory for a header of %d columns", path, ncol);
        goto out;
    }
    for (int i = 0; i < ncol; i++)
        byname[i] = (col_name){field(&r, i), i};
    qsort(byname, (size_t)ncol, sizeof *byname, col_cmp);
    for (int i = 1; i < ncol; i++)
        if (!strcmp(byname[i].name, byname[i - 1].name)) {
            rt_err("%s: line %lld: the header names column '%s' twice", path, (long long)at,
                   clean(byname[i].name, hl, 80));
            goto out;
        }
    if (nt < 1) {
        rt_err("%s: no target column given (csv(..., target = \"COLUMN\"))", path);
        goto out;
    }
    tcol = rt_malloc((size_t)nt * sizeof *tcol);
    fcol = rt_malloc((size_t)(ncol + s->nfeatures) * sizeof *fcol);
    if (!tcol || !fcol) {
        rt_err("%s: out of memory", path);
        goto out;
    }
    /* the columns by name */
    for (int t = 0; t < nt + s->nfeatures; t++) {
        const char *want = t < nt ? s->targets[t] : s->features[t - nt];
        const col_name key = {want, 0}, *hit = bsearch(&key, byname, (size_t)ncol, sizeof *byname, col_cmp);
        const int c = hit ? hit->col : -1;
        if (c < 0) {
            rt_err("%s: line %lld: no column '%s' (the header has %d: %s)", path, (long long)at, want, ncol,
                   header_list(&r, hl, sizeof hl));
            goto out;
        }
        if (t < nt)
            tcol[t] = c;
        else
            fcol[nfeat++] = c;
    }
    if (!s->nfeatures) {    /* every column but the targets, in order */
        char *is_t = rt_calloc((size_t)ncol + 1, 1);
        if (!is_t) {
            rt_err("%s: out of memory", path);
            goto out;
        }
        for (int t = 0; t < nt; t++)
            is_t[tcol[t]] = 1;
        for (int i = 0; i < ncol; i++)
            if (!is_t[i])
                fcol[nfeat++] = i;
        free(is_t);
    }
    if (nfeat != rt_model_in_elems(m)) {
        char b[64];
        rt_err("%s: %d feature columns, but model '%s' expects %s values per sample", path, nfeat, m->name,
               rt_model_dims(m, b, sizeof b));
        goto out;
    }
    int classes = m->target == RT_TGT_CLASS;
    if (classes && rt_model_positions(m) > 1) {
        rt_err("%s: model '%s' classifies each of %lld positions a sample; a csv row holds one class (give the data "
               "as npz(...) with y of shape [samples, %lld])", path, m->name, (long long)rt_model_positions(m),
               (long long)rt_model_positions(m));
        goto out;
    }
    if (classes && nt != 1) {
        rt_err("%s: %d target columns, but model '%s' trains on one class index per sample", path, nt, m->name);
        goto out;
    }
    if (!classes && nt != m->nclass) {
        rt_err("%s: %d target column%s, but model '%s' outputs %d value%s per sample", path, nt, nt == 1 ? "" : "s",
               m->name, m->nclass, m->nclass == 1 ? "" : "s");
        goto out;
    }
    int textual = 0;            /* some label is not an integer: map them all in sorted order */
    char hname[84], cn[84], cv[44], why[160];   /* the target's name, a column's, why a cell is no number, for messages */
    clean(field(&r, tcol[0]), hname, sizeof hname);
    /* the header's names are lost with the next record: keep them */
    char **cname = rt_calloc((size_t)ncol, sizeof *cname);
    if (!cname) {
        rt_err("%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < ncol; i++)
        if (!(cname[i] = rt_strdup(field(&r, i)))) {
            rt_err("%s: out of memory", path);
            goto out_names;
        }
    for (;;) {
        got = next_record(&r, &at);
        if (got < 0)
            goto out_names;
        if (got == 0)
            break;
        if (r.nf != ncol) {
            rt_err("%s: line %lld: %d field%s, but the header has %d columns", path, (long long)at, r.nf,
                   r.nf == 1 ? "" : "s", ncol);
            goto out_names;
        }
        if (n == cap) {
            int64_t nc = cap ? cap * 2 : 1024;
            if (nc > INT32_MAX)
                nc = INT32_MAX;
            if (n == nc) {
                rt_err("%s: more than %d rows", path, INT32_MAX);
                goto out_names;
            }
            float *nx = rt_realloc(x, (size_t)(nc * nfeat) * sizeof *nx);
            if (nx)
                x = nx;
            void *ny = classes ? rt_realloc(labels, (size_t)nc * sizeof *labels)
                               : rt_realloc(yf, (size_t)(nc * nt) * sizeof *yf);
            if (ny && classes)
                labels = ny;
            else if (ny)
                yf = ny;
            int64_t *nl = classes ? rt_realloc(lines, (size_t)nc * sizeof *lines) : lines;
            if (nl)
                lines = nl;
            if (!nx || !ny || (classes && !nl)) {
                rt_err("%s: out of memory at line %lld", path, (long long)at);
                goto out_names;
            }
            cap = nc;
        }
        for (int j = 0; j < nfeat; j++) {
            double v;
            const int bad = num(&r, fcol[j], &v);
            if (bad != 0) {
                rt_err("%s: line %lld, column '%s': %s", path, (long long)at, clean(cname[fcol[j]], cn, sizeof cn),
                       num_why(&r, fcol[j], bad, why, sizeof why));
                goto out_names;
            }
            float f = (float)v;
            if (!isfinite(f)) {
                rt_err("%s: line %lld, column '%s': %s (features must be finite)", path, (long long)at,
                       clean(cname[fcol[j]], cn, sizeof cn), isnan(v) ? "NaN" : "infinite or beyond float32's range");
                goto out_names;
            }
            x[n * nfeat + j] = f;
        }
        if (classes) {
            double v;
            const char *l = field(&r, tcol[0]);
            if (!*l) {
                rt_err("%s: line %lld, column '%s': the label is empty", path, (long long)at, hname);
                goto out_names;
            }
            const int bad = num(&r, tcol[0], &v);
            if (bad == NUM_NUL) {
                rt_err("%s: line %lld, column '%s': %s", path, (long long)at, hname,
                       num_why(&r, tcol[0], bad, why, sizeof why));
                goto out_names;
            }
            if (bad != 0 || v != floor(v) || !(fabs(v) < 1e9))
                textual = 1;
            lines[n] = at;
            if (!(labels[n] = rt_strdup(l))) {
                rt_err("%s: out of memory", path);
                goto out_names;
            }
        } else
            for (int t = 0; t < nt; t++) {
                double v;
                const int bad = num(&r, tcol[t], &v);
                if (bad != 0) {
                    rt_err("%s: line %lld, column '%s': %s (the targets of a model with float outputs are numbers)",
                           path, (long long)at, clean(cname[tcol[t]], cn, sizeof cn),
                           num_why(&r, tcol[t], bad, why, sizeof why));
                    goto out_names;
                }
                float f = (float)v;
                if (!isfinite(f)) {
                    rt_err("%s: line %lld, column '%s': the target is %s", path, (long long)at,
                           clean(cname[tcol[t]], cn, sizeof cn),
                           isnan(v) ? "NaN" : "infinite or beyond float32's range");
                    goto out_names;
                }
                yf[n * nt + t] = f;
            }
        n++;
    }
    if (n == 0) {
        rt_err("%s: has a header but no data rows", path);
        goto out_names;
    }
    if (classes) {
        if (!(yi = rt_malloc((size_t)n * sizeof *yi))) {
            rt_err("%s: out of memory", path);
            goto out_names;
        }
        /* the training file fixes the mapping; a test file uses it */
        if (fit && textual) {
            char **u = rt_malloc((size_t)n * sizeof *u);
            if (!u) {
                rt_err("%s: out of memory", path);
                goto out_names;
            }
            memcpy(u, labels, (size_t)n * sizeof *u);
            qsort(u, (size_t)n, sizeof *u, cmp_str);
            int k = 0;
            for (int64_t i = 0; i < n; i++)
                if (!k || strcmp(u[k - 1], u[i]))
                    u[k++] = u[i];
            if (k > m->nclass) {
                rt_err("%s: column '%s' has %d distinct labels, but model '%s' outputs %d classes", path, hname, k,
                       m->name, m->nclass);
                free(u);
                goto out_names;
            }
            cls->name = rt_calloc((size_t)k, sizeof *cls->name);
            for (int i = 0; cls->name && i < k && (cls->name[i] = rt_strdup(u[i])); i++)
                cls->n = i + 1;     /* the names up to the first that failed: those to free */
            free(u);
            if (cls->n != k) {
                rt_err("%s: out of memory", path);
                goto out_names;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            if (cls->name) {
                char **hit = bsearch(&labels[i], cls->name, (size_t)cls->n, sizeof *cls->name, cmp_str);
                if (!hit) {
                    rt_err("%s: line %lld, column '%s': label '%s' is not among the %d labels of the training "
                           "file", path, (long long)lines[i], hname, clean(labels[i], cv, sizeof cv), cls->n);
                    goto out_names;
                }
                yi[i] = (int32_t)(hit - cls->name);
                continue;
            }
            char *e;
            double v = strtod(labels[i], &e);
            if (textual && !fit) {
                rt_err("%s: line %lld, column '%s': label '%s' is not an integer class index, as the training "
                       "file's labels are", path, (long long)lines[i], hname, clean(labels[i], cv, sizeof cv));
                goto out_names;
            }
            if (!rt_label_ok(m, v)) {
                rt_err("%s: line %lld, column '%s': label %s is out of range for %d classes (integer labels "
                       "are the class index)%s", path, (long long)lines[i], hname, clean(labels[i], cv, sizeof cv),
                       m->nclass, rt_label_hint(m, v));
                goto out_names;
            }
            yi[i] = (int32_t)v;
        }
    }
    out->n = n;
    out->xrank = 1;
    out->xdim[0] = nfeat;
    out->xsize = nfeat;
    out->x = x;
    x = NULL;
    out->ysize = classes ? 1 : nt;
    out->y_float = !classes;
    out->y = classes ? (void *)yi : (void *)yf;
    if (classes)
        yi = NULL;
    else
        yf = NULL;
    rc = 0;
out_names:
    for (int i = 0; i < ncol; i++)
        free(cname[i]);
    free(cname);
out:
    for (int64_t i = 0; labels && i < n; i++)
        free(labels[i]);
    free(labels);
    free(lines);
    free(x);
    free(yf);
    free(yi);
    free(tcol);
    free(byname);
    free(fcol);
    free(r.buf);
    free(r.off);
    return rc;
}

int rt_csv_load(const rt_model *m, const char *path, rt_classes *cls, int fit, rt_dataset *out)
{
    uint8_t *buf;
    size_t len;
    memset(out, 0, sizeof *out);
    if (rt_data_read_file(path, &buf, &len) != 0)
        return -1;
    int rc = rt_csv_parse(m, path, (const char *)buf, len, cls, fit, out);
    free(buf);
    return rc;
}
