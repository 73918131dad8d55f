/* rt_dataset.c: what every reader and the loader share about a data set:
 * dims in messages, the model's input size, an autoencoder's targets,
 * freeing a set. */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>

/* "28x28 = 784" for a sample of several dims, "785" for one */
static const char *show_dims(int rank, const int64_t *dim, char *buf, size_t cap)
{
    size_t at = 0;
    int64_t n = 1;
    buf[0] = 0;
    for (int d = 0; d < rank && at < cap; d++) {
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? "x" : "", (long long)dim[d]);
        n *= dim[d];
    }
    if (rank > 1 && at < cap)
        snprintf(buf + at, cap - at, " = %lld", (long long)n);
    return buf;
}

const char *rt_data_dims(const rt_dataset *s, char *buf, size_t cap)
{
    return show_dims(s->xrank, s->xdim, buf, cap);
}

/* the model's input per sample, likewise */
const char *rt_model_dims(const rt_model *m, char *buf, size_t cap)
{
    return show_dims(m->in_rank, m->in_dim, buf, cap);
}

int64_t rt_model_in_elems(const rt_model *m)
{
    int64_t n = 1;
    for (int d = 0; d < m->in_rank; d++)
        n *= m->in_dim[d];
    return n;
}

void rt_dataset_free(rt_dataset *s)
{
    free(s->x);
    free(s->y);
    memset(s, 0, sizeof *s);
}

int rt_dataset_no_targets(rt_dataset *s, int64_t n, const char *path)
{
    s->ysize = 1;
    s->y_float = 0;
    if (!(s->y = rt_calloc((size_t)(n > 0 ? n : 1), sizeof(int32_t)))) {
        rt_err("%s: out of memory for %lld samples", path, (long long)n);
        return -1;
    }
    return 0;
}
