/* rt_data.c: the data set whatever file it came from: the source named
 * by the train block (rt_idx.c, ...), the checks against the model, the
 * normalization the kernels apply, and rt_exec's view of a set. */
#include "rt_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The normalization the kernels apply: one mean/std for every element, or
 * one per channel (the sample's first dim: C of [C, H, W], the features
 * of [F]). */
static int set_norm(const rt_model *m, rt_data *d)
{
    const rt_data_src *s = &m->data;
    int n = s->nnorm > 0 ? s->nnorm : 1;
    if (s->norm_auto) {
        rt_err("normalize = auto is not supported by this runtime yet");
        return -1;
    }
    if (n > 1 && (m->in_rank < 1 || m->in_dim[0] != n)) {
        char b[64];
        rt_err("model '%s': normalize gives %d means and stds, but its input %s has %lld channels", m->name, n,
               rt_model_dims(m, b, sizeof b), (long long)(m->in_rank ? m->in_dim[0] : 0));
        return -1;
    }
    if (!(d->norm = malloc(2 * (size_t)n * sizeof(float)))) {
        rt_err("out of memory");
        return -1;
    }
    d->norm_n = n;
    d->norm_div = n > 1 ? d->train.xsize / n : d->train.xsize;
    for (int c = 0; c < n; c++) {
        d->norm[c] = s->nnorm ? s->norm_mean[c] : 0.0f;
        d->norm[n + c] = s->nnorm ? s->norm_std[c] : 1.0f;
    }
    return 0;
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

int rt_data_load(const rt_model *m, const char *path, rt_data *d)
{
    memset(d, 0, sizeof *d);
    if (!path)
        path = m->data.path;
    if (m->data.kind != RT_SRC_IDX) {
        rt_err("%s: this runtime reads only idx data sets", path);
        return -1;
    }
    if (rt_idx_load(m, path, "train", &d->train) != 0 || rt_idx_load(m, path, "t10k", &d->test) != 0 ||
        set_norm(m, d) != 0) {
        rt_data_free(d);
        return -1;
    }
    return 0;
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
    memset(d, 0, sizeof *d);
}
