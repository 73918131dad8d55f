/* rt_split.c: the held-out split (split = F) when the data has no test
 * set. The choice depends on the run's seed alone, so every rank holds
 * out the same samples; for class targets each class gives the same
 * fraction (rounded per class), as sklearn's train_test_split(stratify=y)
 * (one label a sample; labels per position are held out as samples).
 * Both parts keep the file's order. */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* samples where take[i] == want, in order, into *out */
static int gather(const rt_dataset *s, const uint8_t *take, int want, int64_t count, rt_dataset *out)
{
    size_t xb = (size_t)s->xsize * (s->x_u8 ? 1 : sizeof(float));
    size_t yb = (size_t)s->ysize * (s->y_float ? sizeof(float) : sizeof(int32_t));
    *out = *s;
    out->n = count;
    out->x = rt_malloc((size_t)count * xb);
    out->y = rt_malloc((size_t)count * yb);
    if (!out->x || !out->y) {
        free(out->x);
        free(out->y);
        out->x = out->y = NULL;
        return -1;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < s->n; i++)
        if (take[i] == want) {
            memcpy((char *)out->x + k * xb, (const char *)s->x + i * xb, xb);
            memcpy((char *)out->y + k * yb, (const char *)s->y + i * yb, yb);
            k++;
        }
    return 0;
}

/* Stratified by class: one class label a sample, none of them ignored
 * (ignore_index), so each names a class. */
int rt_split_stratified(const rt_dataset *s)
{
    if (s->y_float || s->ysize != 1)
        return 0;
    for (int64_t i = 0; i < s->n; i++)
        if (((const int32_t *)s->y)[i] < 0)
            return 0;
    return 1;
}

int rt_split(const char *path, rt_dataset *train, rt_dataset *test, double frac, uint64_t seed)
{
    int64_t n = train->n;
    if (n < 1 || n > INT32_MAX) {
        rt_err("%s: split = %g of %lld samples leaves a set empty", path, frac, (long long)n);
        return -1;
    }
    int64_t nclass = 1;     /* the readers checked every label is in [0, the model's classes) */
    const int32_t *y = train->y;
    const int strat = rt_split_stratified(train);
    if (strat)
        for (int64_t i = 0; i < n; i++)
            if ((int64_t)y[i] + 1 > nclass)
                nclass = (int64_t)y[i] + 1;
    /* the samples grouped by class, each group in file order */
    int64_t *idx = rt_malloc((size_t)n * sizeof *idx), *start = rt_calloc((size_t)nclass + 1, sizeof *start);
    uint8_t *take = rt_calloc((size_t)n, 1);
    if (!idx || !start || !take) {
        free(idx);
        free(start);
        free(take);
        rt_err("%s: out of memory for the split", path);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        start[(strat ? y[i] : 0) + 1]++;
    for (int64_t c = 0; c < nclass; c++)
        start[c + 1] += start[c];
    for (int64_t i = 0, *fill = start; i < n; i++)
        idx[fill[strat ? y[i] : 0]++] = i;
    for (int64_t c = nclass; c > 0; c--)     /* fill moved each start to the next group's */
        start[c] = start[c - 1];
    start[0] = 0;
    rt_rng r;
    rt_rng_init(&r, seed, rt_hash_str("split"));
    int64_t held = 0;
    for (int64_t c = 0; c < nclass; c++) {
        int64_t *g = idx + start[c], k = start[c + 1] - start[c];
        /* the first round(frac * k) of a seeded shuffle of the class */
        int64_t want = (int64_t)floor(frac * (double)k + 0.5);
        for (int64_t i = 0; i < want; i++) {
            int64_t j = i + (int64_t)rt_rng_below(&r, (uint64_t)(k - i));
            int64_t t = g[i];
            g[i] = g[j];
            g[j] = t;
            take[g[i]] = 1;
        }
        held += want;
    }
    free(idx);
    free(start);
    if (held == 0 || held == n) {
        free(take);
        rt_err("%s: split = %g of %lld samples leaves the %s set empty", path, frac, (long long)n,
               held == 0 ? "test" : "training");
        return -1;
    }
    rt_dataset a, b;
    if (gather(train, take, 0, n - held, &a) != 0 || gather(train, take, 1, held, &b) != 0) {
        if (a.x)
            rt_dataset_free(&a);
        free(take);
        rt_err("%s: out of memory for the split", path);
        return -1;
    }
    free(take);
    rt_dataset_free(train);
    *train = a;
    *test = b;
    return 0;
}
