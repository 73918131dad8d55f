/* rt_labels.c: which class labels and which input tokens a model takes,
 * for every data reader (idx, npz, csv, text) alike. */
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

int rt_tokens_check(const rt_model *m, const char *path, const char *what, const float *x, int64_t n,
                    int64_t xsize)
{
    if (!m->in_vocab)
        return 0;
    for (int64_t i = 0; i < n * xsize; i++)
        if (!(x[i] >= 0 && x[i] < (float)m->in_vocab && x[i] == floorf(x[i]))) {
            rt_err("%s: %s sample %lld, position %lld: token %g is not in [0, %lld), the vocabulary of model '%s' "
                   "(its input is i64 tokens: an embedding's rows)", path, what, (long long)(i / xsize),
                   (long long)(i % xsize), (double)x[i], (long long)m->in_vocab, m->name);
            return -1;
        }
    return 0;
}
