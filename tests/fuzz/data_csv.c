/* tests/fuzz/data_csv.c: libFuzzer harness for the csv reader:
 * rt_csv_parse on the input's text as a training file (fit: the labels
 * set the classes), then again as a test file against those classes. The
 * first byte picks the model: class targets (3 classes, target column
 * "t") or float targets (columns "t" and "u"), and whether features are
 * named (["a", "b"]) or every other column; two features per sample.
 * Any outcome is fine but a crash, a sanitizer report, a leak or a hang;
 * a set that loads must be consistent. */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const t1[] = {"t"}, *const t2[] = {"t", "u"}, *const feats[] = {"a", "b"};
    if (size < 1)
        return 0;
    rt_model m = {0};
    m.name = "fuzz";
    m.in_rank = 1;
    m.in_dim[0] = 2;
    m.target = data[0] & 1 ? RT_TGT_FLOAT : RT_TGT_CLASS;
    m.nclass = m.target == RT_TGT_FLOAT ? 2 : 3;
    m.data.kind = RT_SRC_CSV;
    m.data.targets = m.target == RT_TGT_FLOAT ? t2 : t1;
    m.data.ntargets = m.target == RT_TGT_FLOAT ? 2 : 1;
    if (data[0] & 2) {
        m.data.features = feats;
        m.data.nfeatures = 2;
    }
    char *text = malloc(size - 1 ? size - 1 : 1);
    memcpy(text, data + 1, size - 1);
    rt_classes cls = {0};
    for (int fit = 1; fit >= 0; fit--) {
        rt_dataset s;
        if (rt_csv_parse(&m, "fuzz.csv", text, size - 1, &cls, fit, &s) != 0)
            break;
        if (s.xsize != 2 || s.n < 1)
            abort();
        for (int64_t i = 0; i < s.n * s.ysize; i++)
            if (s.y_float ? !isfinite(((float *)s.y)[i]) : ((int32_t *)s.y)[i] < 0 || ((int32_t *)s.y)[i] >= m.nclass)
                abort();
        for (int64_t i = 0; i < s.n * 2; i++)
            if (!isfinite(((float *)s.x)[i]))
                abort();
        rt_dataset_free(&s);
    }
    rt_classes_free(&cls);
    free(text);
    return 0;
}
