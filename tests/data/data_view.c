/* tests/data/data_view.c: a data file as the runtime's readers see it,
 * printed for an oracle (tests/data/reader_check.py compares it with
 * numpy's and Python's csv module's view of the same file).
 *
 *   data_view npz FILE class|float NCLASS IN_ELEMS
 *   data_view csv FILE class|float NCLASS IN_ELEMS TARGET... [-- FEATURE...]
 *
 * prints per set (train, then test when the file has one):
 *   set NAME n N xsize X ysize Y u8 U yfloat F
 *   x I v v ...      the first 3 samples and the last, %.9g
 *   y I v ...
 *   xsum c s         per element position c of a sample: the sum over samples (double)
 *   ysum c s
 * and for csv "class I NAME" per mapped label. Exit 1 after the reader's
 * error. The model is a stand-in: its input IN_ELEMS ("13", or dims such as
 * "3x2x2"), NCLASS outputs. With DATA_VIEW_AUTO=1 the file is loaded as a
 * run loads it (rt_data_load, normalize = auto, split = DATA_VIEW_SPLIT
 * when set, seed DATA_VIEW_SEED) and "norm C MEAN STD" lines follow. */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>

static double at(const void *p, int f, int u8, int64_t i)
{
    return u8 ? ((const uint8_t *)p)[i] : f ? ((const float *)p)[i] : ((const int32_t *)p)[i];
}

static void show(const char *name, const rt_dataset *s)
{
    printf("set %s n %lld xsize %lld ysize %lld u8 %d yfloat %d\n", name, (long long)s->n, (long long)s->xsize,
           (long long)s->ysize, s->x_u8, s->y_float);
    for (int64_t i = 0; i < s->n; i++) {
        if (i >= 3 && i != s->n - 1)
            continue;
        printf("x %lld", (long long)i);
        for (int64_t k = 0; k < s->xsize; k++)
            printf(" %.9g", at(s->x, 1, s->x_u8, i * s->xsize + k));
        printf("\ny %lld", (long long)i);
        for (int64_t k = 0; k < s->ysize; k++)
            printf(" %.9g", at(s->y, s->y_float, 0, i * s->ysize + k));
        printf("\n");
    }
    for (int64_t k = 0; k < s->xsize; k++) {
        double sum = 0;
        for (int64_t i = 0; i < s->n; i++)
            sum += at(s->x, 1, s->x_u8, i * s->xsize + k);
        printf("xsum %lld %.17g\n", (long long)k, sum);
    }
    for (int64_t k = 0; k < s->ysize; k++) {
        double sum = 0;
        for (int64_t i = 0; i < s->n; i++)
            sum += at(s->y, s->y_float, 0, i * s->ysize + k);
        printf("ysum %lld %.17g\n", (long long)k, sum);
    }
}

int main(int argc, char **argv)
{
    if (argc < 6 || (strcmp(argv[1], "npz") && strcmp(argv[1], "csv"))) {
        fprintf(stderr, "usage: data_view npz|csv FILE class|float NCLASS IN_ELEMS [TARGET... [-- FEATURE...]]\n");
        return 2;
    }
    rt_model m = {0};
    m.name = "view";
    for (char *d = argv[5]; *d && m.in_rank < 3; d = *d ? d + 1 : d)
        m.in_dim[m.in_rank++] = strtoll(d, &d, 10);
    m.nclass = atoi(argv[4]);
    m.target = strcmp(argv[3], "float") ? RT_TGT_CLASS : RT_TGT_FLOAT;
    rt_dataset tr, te;
    memset(&te, 0, sizeof te);
    int rc;
    rt_classes cls = {0};
    if (getenv("DATA_VIEW_AUTO")) {
        const char *sp = getenv("DATA_VIEW_SPLIT"), *sd = getenv("DATA_VIEW_SEED");
        m.data.kind = strcmp(argv[1], "npz") ? RT_SRC_CSV : RT_SRC_NPZ;
        m.data.norm_auto = 1;
        m.data.split = sp ? atof(sp) : 0;
        m.data.targets = (const char *const *)argv + 6;
        m.data.ntargets = argc - 6;
        rt_data d;
        if (rt_data_load(&m, argv[2], sd ? strtoull(sd, NULL, 10) : 0, NULL, &d) != 0)
            return 1;
        show("train", &d.train);
        show("test", &d.test);
        for (int c = 0; c < d.norm_n; c++)
            printf("norm %d %.9g %.9g\n", c, (double)d.norm[c], (double)d.norm[d.norm_n + c]);
        rt_data_free(&d);
        return 0;
    }
    if (!strcmp(argv[1], "npz")) {
        m.data.kind = RT_SRC_NPZ;
        rc = rt_npz_load(&m, argv[2], &tr, &te);
    } else {
        m.data.kind = RT_SRC_CSV;
        int i = 6;
        m.data.targets = (const char *const *)argv + 6;
        while (i < argc && strcmp(argv[i], "--"))
            i++;
        m.data.ntargets = i - 6;
        if (i < argc) {
            m.data.features = (const char *const *)argv + i + 1;
            m.data.nfeatures = argc - i - 1;
        }
        rc = rt_csv_load(&m, argv[2], &cls, 1, &tr);
    }
    if (rc != 0)
        return 1;
    show("train", &tr);
    if (te.n)
        show("test", &te);
    for (int i = 0; i < cls.n; i++)
        printf("class %d %s\n", i, cls.name[i]);
    rt_dataset_free(&tr);
    rt_dataset_free(&te);
    rt_classes_free(&cls);
    return 0;
}
