/* rt_labels.c: which class labels a model trains on, for every data
 * reader (idx, npz, csv) alike. */
#include "rt_internal.h"
#include <math.h>

int rt_label_ok(const rt_model *m, double v)
{
    return (v >= 0 && v < m->nclass && v == floor(v)) || (m->has_ignore && v == (double)m->ignore_index);
}

const char *rt_label_hint(const rt_model *m, double v)
{
    if (v == -100 && !m->has_ignore)    /* PyTorch skips these silently; here the loss names it */
        return " (PyTorch's cross_entropy skips targets of -100, its default ignore_index: say so in the model "
               "file, loss cross_entropy(ignore_index = -100))";
    return "";
}
