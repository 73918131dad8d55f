/* rt_data.c: the data set whatever file it came from: the source named
 * by the train block (rt_idx.c, ...), the checks against the model, the
 * normalization the kernels apply, and rt_exec's view of a set. */
#include "rt_internal.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Channels of the model's input: the first dim of [C, H, W] or [C, L],
 * each feature of [F]. */
static int channels(const rt_model *m)
{
    return m->in_rank >= 1 ? (int)m->in_dim[0] : 1;
}

/* normalize = auto: each channel's mean and std over the training set, in
 * double; the std with Bessel's correction (n - 1), as torch's x.std(0)
 * that users write in (x - x.mean(0)) / x.std(0). uint8 data is measured
 * as the kernels see it, x / 255. A constant channel gets std 1. */
static void measure(const rt_dataset *s, int n, float *mean, float *std)
{
    int64_t per = s->xsize / n;
    for (int c = 0; c < n; c++) {
        double sum = 0, sq = 0, cnt = (double)s->n * (double)per;
        for (int pass = 0; pass < 2; pass++) {
            double mu = sum / cnt;
            for (int64_t i = 0; i < s->n; i++)
                for (int64_t k = 0; k < per; k++) {
                    int64_t at = i * s->xsize + c * per + k;
                    double v = s->x_u8 ? ((const uint8_t *)s->x)[at] / 255.0 : ((const float *)s->x)[at];
                    if (pass == 0)
                        sum += v;
                    else
                        sq += (v - mu) * (v - mu);
                }
        }
        double sd = cnt > 1 ? sqrt(sq / (cnt - 1)) : 0;
        mean[c] = (float)(sum / cnt);
        std[c] = sd > 0 && (float)sd > 0 ? (float)sd : 1.0f;
    }
}

/* The normalization the kernels apply: one mean/std for every element, or
 * one per channel (the sample's first dim: C of [C, H, W], the features
 * of [F]). */
static int set_norm(const rt_model *m, const rt_data_saved *sv, rt_data *d)
{
    const rt_data_src *s = &m->data;
    int n = s->norm_auto ? channels(m) : s->nnorm > 0 ? s->nnorm : 1;
    if (s->norm_auto && sv && sv->norm_n && sv->norm_n != n) {
        rt_err("%s: holds the means and stds of %d channels, but model '%s' normalizes %d", sv->from, sv->norm_n,
               m->name, n);
        return -1;
    }
    if (n > 1 && (m->in_rank < 1 || m->in_dim[0] != n)) {
        char b[64];
        rt_err("model '%s': normalize gives %d means and stds, but its input %s has %lld channels", m->name, n,
               rt_model_dims(m, b, sizeof b), (long long)(m->in_rank ? m->in_dim[0] : 0));
        return -1;
    }
    if (!(d->norm = rt_malloc(2 * (size_t)n * sizeof(float)))) {
        rt_err("out of memory");
        return -1;
    }
    d->norm_n = n;
    d->norm_div = n > 1 ? d->train.xsize / n : d->train.xsize;
    if (s->norm_auto) {
        const char *what = m->in_rank >= 2 ? (n == 1 ? "channel" : "channels") : (n == 1 ? "feature" : "features");
        if (sv && sv->norm_n) {
            memcpy(d->norm, sv->norm, 2 * (size_t)n * sizeof(float));
            if (rt_world.rank == 0)
                printf("normalize auto: the training run's %d %s, from %s: mean [", n, what, sv->from);
        } else {
            measure(&d->train, n, d->norm, d->norm + n);
            if (rt_world.rank == 0)
                printf("normalize auto: %d %s from %lld training samples (std with n - 1, as torch.std): mean [",
                       n, what, (long long)d->train.n);
        }
        if (rt_world.rank == 0) {
            for (int c = 0; c < n; c++)
                printf("%s%.6g", c ? ", " : "", (double)d->norm[c]);
            printf("]  std [");
            for (int c = 0; c < n; c++)
                printf("%s%.6g", c ? ", " : "", (double)d->norm[n + c]);
            printf("]\n");
        }
        return 0;
    }
    for (int c = 0; c < n; c++) {
        d->norm[c] = s->nnorm ? s->norm_mean[c] : 0.0f;
        d->norm[n + c] = s->nnorm ? s->norm_std[c] : 1.0f;
    }
    return 0;
}

/* What --save keeps about the data, so an evaluation uses the same
 * numbers: normalize = auto's means and stds ("data.mean.C",
 * "data.std.C", exact as %a), a csv target's labels ("data.class.I") and
 * a text's characters ("data.vocab.I", token I). */
static int set_meta(const rt_model *m, rt_data *d)
{
    int nn = m->data.norm_auto ? d->norm_n : 0, nc = d->classes.n;
    for (int i = 0; i < nc; i++)
        if (strlen(d->classes.name[i]) >= sizeof d->meta->val) {
            if (rt_world.rank == 0)
                rt_warn("the label '%.40s...' is longer than %zu bytes: --save keeps no class map (an evaluation "
                        "maps the labels again, in sorted order)", d->classes.name[i], sizeof d->meta->val - 1);
            nc = 0;
        }
    const int nv = d->vocab.name ? d->vocab.n : 0;   /* text: the characters of the tokens */
    int n = 2 * nn + nc + nv;
    if (!n)
        return 0;
    d->meta = rt_calloc((size_t)n, sizeof *d->meta);
    char *keys = d->meta ? rt_malloc((size_t)n * 32) : NULL;
    if (!keys) {
        rt_err("out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char *k = keys + 32 * i;
        if (i < 2 * nn) {
            snprintf(k, 32, "data.%s.%d", i < nn ? "mean" : "std", i % nn);
            snprintf(d->meta[i].val, sizeof d->meta[i].val, "%a", (double)d->norm[i]);
        } else if (i < 2 * nn + nc) {
            snprintf(k, 32, "data.class.%d", i - 2 * nn);
            snprintf(d->meta[i].val, sizeof d->meta[i].val, "%s", d->classes.name[i - 2 * nn]);
        } else {
            snprintf(k, 32, "data.vocab.%d", i - 2 * nn - nc);
            snprintf(d->meta[i].val, sizeof d->meta[i].val, "%s", d->vocab.name[i - 2 * nn - nc]);
        }
        d->meta[i].key = k;
    }
    d->nmeta = n;
    return 0;
}

static int copy_classes(const rt_classes *from, rt_classes *to)
{
    if (!(to->name = rt_calloc((size_t)from->n, sizeof *to->name))) {
        rt_err("out of memory");
        return -1;
    }
    for (to->n = 0; to->n < from->n; to->n++)
        if (!(to->name[to->n] = rt_strdup(from->name[to->n]))) {
            rt_err("out of memory");
            return -1;
        }
    return 0;
}

/* "data.KIND.I" with I in [0, 4096): I, or -1 */
static int meta_index(const char *key, const char *kind)
{
    size_t l = strlen(kind);
    if (strncmp(key + 5, kind, l) != 0 || key[5 + l] != '.')
        return -1;
    const char *p = key + 6 + l;
    char *e;
    long i = strtol(p, &e, 10);
    return *p >= '0' && *p <= '9' && !*e && i >= 0 && i < 4096 && (i == 0 || *p != '0') ? (int)i : -1;
}

int rt_data_saved_read(const char *path, rt_data_saved *sv)
{
    memset(sv, 0, sizeof *sv);
    sv->from = path;
    rt_st_kv *kv;
    int n, rc = -1;
    char *seen = NULL;
    if (rt_st_meta_prefix(path, "data.", &kv, &n) != 0)
        return -1;
    int nm = 0, ns = 0, nc = 0;
    for (int i = 0; i < n; i++) {
        nm += meta_index(kv[i].key, "mean") >= 0;
        ns += meta_index(kv[i].key, "std") >= 0;
        nc += meta_index(kv[i].key, "class") >= 0;
    }
    if (nm != ns) {
        rt_err("%s: corrupt metadata: %d data.mean entries but %d data.std", path, nm, ns);
        goto out;
    }
    seen = rt_calloc(2 * (size_t)nm + 1, 1);
    if (!seen || (nm && !(sv->norm = rt_calloc(2 * (size_t)nm, sizeof(float)))) ||
        (nc && !(sv->classes.name = rt_calloc((size_t)nc, sizeof(char *))))) {
        rt_err("out of memory");
        goto out;
    }
    sv->norm_n = nm;
    sv->classes.n = nc;
    char ks[84], vs[84];    /* a key or value as a message shows it: one line */
    for (int i = 0; i < n; i++) {
        int im = meta_index(kv[i].key, "mean"), is = meta_index(kv[i].key, "std"), ic = meta_index(kv[i].key, "class");
        if (ic >= 0) {
            if (ic >= nc || sv->classes.name[ic] || !(sv->classes.name[ic] = rt_strdup(kv[i].val))) {
                rt_err("%s: corrupt metadata: \"%s\" is out of order or repeated (%d classes)", path,
                       rt_data_show(kv[i].key, strlen(kv[i].key), ks, sizeof ks), nc);
                goto out;
            }
            continue;
        }
        int at = im >= 0 ? im : is;
        if (at < 0)
            continue;       /* a later version's key */
        char *e;
        double v = strtod(kv[i].val, &e);
        if (at >= nm || !*kv[i].val || *e || !isfinite(v) || (is >= 0 && !(v > 0)) || seen[(is >= 0) * nm + at]++) {
            rt_err("%s: corrupt metadata: \"%s\" = \"%s\" (%d channels)", path,
                   rt_data_show(kv[i].key, strlen(kv[i].key), ks, sizeof ks),
                   rt_data_show(kv[i].val, strlen(kv[i].val), vs, sizeof vs), nm);
            goto out;
        }
        sv->norm[(is >= 0) * nm + at] = (float)v;
    }
    /* the training file's labels were sorted (rt_csv.c): the lookup bisects */
    for (int i = 1; i < nc; i++)
        if (strcmp(sv->classes.name[i - 1], sv->classes.name[i]) >= 0) {
            rt_err("%s: corrupt metadata: the classes data.class.%d and .%d are not in sorted order", path, i - 1, i);
            goto out;
        }
    rc = 0;
out:
    free(seen);
    rt_st_kv_free(kv, n);
    if (rc)
        rt_data_saved_free(sv);
    return rc;
}

void rt_data_saved_free(rt_data_saved *sv)
{
    free(sv->norm);
    rt_classes_free(&sv->classes);
    sv->norm = NULL;
    sv->norm_n = 0;
}

int rt_data_check_path(const rt_model *m, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        rt_err("%s: cannot open data %s: %s", path, m->data.kind == RT_SRC_IDX ? "directory" : "file",
               strerror(errno));
        return -1;
    }
    if (m->data.kind == RT_SRC_IDX && !S_ISDIR(st.st_mode)) {
        rt_err("%s: data path is not a directory", path);
        return -1;
    }
    if (m->data.kind != RT_SRC_IDX && S_ISDIR(st.st_mode)) {
        rt_err("%s: is a directory, expected a data file", path);
        return -1;
    }
    return 0;
}

/* DIR/NAME or DIR/NAME.gz exists */
static int idx_has(const char *dir, const char *name)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (stat(p, &st) == 0)
        return 1;
    snprintf(p, sizeof p, "%s/%s.gz", dir, name);
    return stat(p, &st) == 0;
}

/* The directory that holds the IDX files: DIR itself, or torchvision's
 * layout under it (DIR/MNIST/raw, DIR/FashionMNIST/raw) when DIR has none. */
static const char *idx_dir(const char *dir, char *buf, size_t cap)
{
    static const char *const sub[] = {"MNIST/raw", "FashionMNIST/raw", "KMNIST/raw", "EMNIST/raw"};
    if (idx_has(dir, "train-images-idx3-ubyte"))
        return dir;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    for (size_t i = 0; i < sizeof sub / sizeof *sub; i++) {
        int r = snprintf(buf, cap, "%.*s/%s", (int)dl, dir, sub[i]);
        if (r > 0 && (size_t)r < cap && idx_has(buf, "train-images-idx3-ubyte"))
            return buf;
    }
    return dir;     /* rt_idx_load names the missing file */
}

/* A tuple of targets' class columns (rt_model.target_classes): each value
 * a class index below the column's count, as a class loss reads it. */
static int check_class_columns(const rt_model *m, const char *where, const rt_dataset *s, const char *set)
{
    for (int64_t k = 0; m->target_classes && s->y_float && k < s->ysize; k++) {
        const int c = m->target_classes[k];
        for (int64_t i = 0; c > 0 && i < s->n; i++) {
            const float v = ((const float *)s->y)[i * s->ysize + k];
            if (!(v >= 0 && v < (float)c && v == floorf(v))) {
                rt_err("%s: %s sample %lld, target %lld: %g is not a class index (model '%s' has %d classes there: "
                       "0 to %d)", where, set, (long long)i, (long long)k, (double)v, m->name, c, c - 1);
                return -1;
            }
        }
    }
    return 0;
}

int rt_data_load(const rt_model *m, const char *path, uint64_t seed, const rt_data_saved *sv, rt_data *d)
{
    const rt_data_src *s = &m->data;
    memset(d, 0, sizeof *d);
    if (!path)
        path = s->path;
    int r0 = rt_world.rank == 0, rc = -1;
    const char *where = path;
    char dir[4200];
    if (s->kind == RT_SRC_IDX) {
        where = idx_dir(path, dir, sizeof dir);
        if (rt_idx_load(m, where, "train", &d->train) != 0 ||
            (idx_has(where, "t10k-images-idx3-ubyte") && rt_idx_load(m, where, "t10k", &d->test) != 0))
            goto out;
    } else if (s->kind == RT_SRC_NPZ) {
        if (rt_npz_load(m, path, &d->train, &d->test) != 0)
            goto out;
    } else if (s->kind == RT_SRC_CSV) {
        /* saved classes: the training run's mapping, not this file's labels */
        const int saved = sv && sv->classes.n;
        if (saved && sv->classes.n > m->nclass) {     /* an index past the model's outputs */
            rt_err("%s: holds %d classes, but model '%s' outputs %d", sv->from, sv->classes.n, m->name, m->nclass);
            goto out;
        }
        if (saved && copy_classes(&sv->classes, &d->classes) != 0)
            goto out;
        if (rt_csv_load(m, path, &d->classes, !saved, &d->train) != 0 ||
            (s->test && rt_csv_load(m, s->test, &d->classes, 0, &d->test) != 0))
            goto out;
        if (r0 && saved)
            printf("classes of '%s': the training run's, from %s\n", s->targets[0], sv->from);
        if (r0 && d->classes.n) {
            printf("classes of '%s' (sorted):", s->targets[0]);
            for (int i = 0; i < d->classes.n; i++)
                printf(" %d = %s%s", i, d->classes.name[i], i + 1 < d->classes.n ? "," : "");
            printf("\n");
        }
    } else if (s->kind == RT_SRC_TEXT) {
        if (rt_text_load(m, path, d) != 0)     /* its split is the file's tail, taken there */
            goto out;
    } else {
        rt_err("%s: unknown data source kind %d", path, s->kind);
        goto out;
    }
    if (d->test.n == 0 && s->split > 0) {
        int64_t all = d->train.n;
        if (rt_split(where, &d->train, &d->test, s->split, seed) != 0)
            goto out;
        if (r0)
            printf("split %g: %lld samples held out of %lld%s (seed %llu): train %lld, test %lld\n", s->split,
                   (long long)d->test.n, (long long)all, rt_split_stratified(&d->train) ? ", stratified by class" : "",
                   (unsigned long long)seed, (long long)d->train.n, (long long)d->test.n);
    } else if (d->test.n == 0) {
        rt_err("%s: no test set (%s): add split = 0.2 to the data source to hold out a fraction of the training "
               "set, or give a test set", where,
               s->kind == RT_SRC_IDX ? "no t10k-images-idx3-ubyte[.gz]"
               : s->kind == RT_SRC_NPZ ? "no x_test and y_test arrays" : "csv(..., test = \"TEST.csv\")");
        goto out;
    } else if (s->split > 0 && r0 && s->kind != RT_SRC_TEXT)
        rt_warn("%s: has a test set, so split = %g is not used", where, s->split);
    if (d->test.xsize != d->train.xsize || d->test.x_u8 != d->train.x_u8) {
        rt_err("%s: the test samples (%s) differ from the training samples in size or type", where,
               d->test.x_u8 ? "uint8" : "float");
        goto out;
    }
    if (sv && sv->classes.n && !d->classes.n) {
        rt_err("%s: holds a class map, but %s's target is not a column of labels", sv->from, where);
        goto out;
    }
    if (check_class_columns(m, where, &d->train, "training") != 0 || check_class_columns(m, where, &d->test, "test") != 0
        || set_norm(m, sv, d) != 0 || set_meta(m, d) != 0)
        goto out;
    rc = 0;
out:
    if (rc)
        rt_data_free(d);
    return rc;
}

void rt_data_exec(const rt_data *d, const rt_dataset *s, rt_exec *e)
{
    e->x = s->x;
    e->y = s->y;
    e->x_u8 = s->x_u8;
    e->x_size = s->xsize;
    e->y_size = s->ysize;
    e->norm = d->norm;
    e->norm_n = d->norm_n;
    e->norm_div = d->norm_div;
}


void rt_data_free(rt_data *d)
{
    rt_dataset_free(&d->train);
    rt_dataset_free(&d->test);
    free(d->norm);
    rt_classes_free(&d->classes);
    rt_classes_free(&d->vocab);
    if (d->meta)
        free((char *)d->meta[0].key);   /* one block holds every key */
    free(d->meta);
    memset(d, 0, sizeof *d);
}
