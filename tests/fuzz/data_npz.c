/* tests/fuzz/data_npz.c: libFuzzer harness for the npz reader (the zip
 * container, inflate, the .npy headers, the arrays into data sets):
 * rt_npz_parse on the input's bytes, as a run parses a file. The first
 * byte picks the model: class targets (3 classes) or float targets
 * (1 or 3 per sample); the input is [1, 2, 2] per sample. Any outcome is
 * fine but a crash, a sanitizer report, a leak or a hang; a set that
 * loads must be consistent (every label < nclass, every float finite). */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    rt_model m = {0};
    m.name = "fuzz";
    m.in_rank = 3;
    m.in_dim[0] = 1;
    m.in_dim[1] = m.in_dim[2] = 2;
    m.target = data[0] & 1 ? RT_TGT_FLOAT : RT_TGT_CLASS;
    m.nclass = data[0] & 2 ? 1 : 3;
    m.data.kind = RT_SRC_NPZ;
    rt_dataset tr, te;
    /* a copy of exactly size bytes: ASan sees any read past the end */
    uint8_t *b = malloc(size - 1 ? size - 1 : 1);
    memcpy(b, data + 1, size - 1);
    if (rt_npz_parse(&m, "fuzz.npz", b, size - 1, &tr, &te) == 0) {
        rt_dataset *s[2] = {&tr, &te};
        for (int k = 0; k < 2; k++) {
            if (!s[k]->n)
                continue;
            if (s[k]->xsize != 4)
                abort();
            for (int64_t i = 0; i < s[k]->n * s[k]->ysize; i++)
                if (s[k]->y_float ? !isfinite(((float *)s[k]->y)[i])
                                  : ((int32_t *)s[k]->y)[i] < 0 || ((int32_t *)s[k]->y)[i] >= m.nclass)
                    abort();
            if (!s[k]->x_u8)
                for (int64_t i = 0; i < s[k]->n * 4; i++)
                    if (!isfinite(((float *)s[k]->x)[i]))
                        abort();
        }
        rt_dataset_free(&tr);
        rt_dataset_free(&te);
    }
    free(b);
    return 0;
}
