/* tests/data/test_split.c: rt_split, the held-out split (split = F).
 *
 * Class targets: each class gives round(F * its count) samples; the two
 * parts are disjoint, cover the set and keep the file's order; the same
 * seed gives the same split, another seed another. Float targets: round(F
 * * n) samples. A split that would leave a part empty is refused. Exit 0
 * when every check holds; each failure is printed. */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#define CHECK(c, ...) do { if (!(c)) { fails++; printf("FAIL test_split: " __VA_ARGS__); printf("\n"); } } while (0)

/* n samples: x = the index (so where a sample went is visible), y = cls[i] */
static void make(rt_dataset *s, int64_t n, const int32_t *cls, int yfloat)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->xrank = 1;
    s->xdim[0] = s->xsize = 2;
    s->x = malloc((size_t)n * 2 * sizeof(float));
    s->y = malloc((size_t)n * 4);
    s->y_float = yfloat;
    s->ysize = 1;
    for (int64_t i = 0; i < n; i++) {
        ((float *)s->x)[2 * i] = (float)i;
        ((float *)s->x)[2 * i + 1] = (float)-i;
        if (yfloat)
            ((float *)s->y)[i] = (float)i * 0.5f;
        else
            ((int32_t *)s->y)[i] = cls[i];
    }
}

/* the test part's sample indices as a bitmap; checks order and coverage */
static void check_parts(const rt_dataset *a, const rt_dataset *b, int64_t n, const int32_t *cls, uint8_t *in_test)
{
    memset(in_test, 0, (size_t)n);
    const rt_dataset *p[2] = {a, b};
    int64_t seen = 0;
    for (int k = 0; k < 2; k++) {
        float last = -1;
        for (int64_t i = 0; i < p[k]->n; i++) {
            float v = ((const float *)p[k]->x)[2 * i];
            int64_t j = (int64_t)v;
            CHECK(v > last, "part %d not in file order at %lld", k, (long long)i);
            CHECK(((const float *)p[k]->x)[2 * i + 1] == -v, "a sample's elements were separated");
            CHECK(p[k]->y_float ? ((const float *)p[k]->y)[i] == v * 0.5f : ((const int32_t *)p[k]->y)[i] == cls[j],
                  "sample %lld lost its target", (long long)j);
            last = v;
            if (k)
                in_test[j] = 1;
            seen++;
        }
    }
    CHECK(seen == n, "parts hold %lld samples of %lld", (long long)seen, (long long)n);
}

int main(void)
{
    /* three classes of 50, 30 and 7, interleaved */
    int64_t n = 87, cnt[3] = {0};
    int32_t cls[87];
    for (int64_t i = 0; i < n; i++) {
        cls[i] = i % 3 == 2 && cnt[2] < 7 ? 2 : (cnt[1] < 30 && i % 2 ? 1 : 0);
        if (cls[i] == 0 && cnt[0] == 50)
            cls[i] = 1;
        cnt[cls[i]]++;
    }
    CHECK(cnt[0] == 50 && cnt[1] == 30 && cnt[2] == 7, "fixture: classes %lld %lld %lld", (long long)cnt[0],
          (long long)cnt[1], (long long)cnt[2]);
    uint8_t t1[87], t2[87], t3[87];
    rt_dataset a, b;
    make(&a, n, cls, 0);
    CHECK(rt_split("fixture", &a, &b, 0.2, 5) == 0, "split failed");
    check_parts(&a, &b, n, cls, t1);
    int64_t per[3] = {0};
    for (int64_t i = 0; i < n; i++)
        per[cls[i]] += t1[i];
    for (int c = 0; c < 3; c++)
        CHECK(per[c] == (int64_t)floor(0.2 * cnt[c] + 0.5), "class %d: %lld held out of %lld", c,
              (long long)per[c], (long long)cnt[c]);
    CHECK(b.n == 10 + 6 + 1, "test part has %lld samples", (long long)b.n);
    rt_dataset_free(&a);
    rt_dataset_free(&b);

    make(&a, n, cls, 0);
    rt_split("fixture", &a, &b, 0.2, 5);
    check_parts(&a, &b, n, cls, t2);
    CHECK(!memcmp(t1, t2, sizeof t1), "the same seed chose other samples");
    rt_dataset_free(&a);
    rt_dataset_free(&b);
    make(&a, n, cls, 0);
    rt_split("fixture", &a, &b, 0.2, 6);
    check_parts(&a, &b, n, cls, t3);
    CHECK(memcmp(t1, t3, sizeof t1) != 0, "another seed chose the same samples");
    rt_dataset_free(&a);
    rt_dataset_free(&b);

    /* float targets: no classes */
    make(&a, n, NULL, 1);
    CHECK(rt_split("fixture", &a, &b, 0.3, 5) == 0, "float split failed");
    check_parts(&a, &b, n, NULL, t1);
    CHECK(b.n == (int64_t)floor(0.3 * n + 0.5), "float targets: %lld held out of %lld", (long long)b.n,
          (long long)n);
    rt_dataset_free(&a);
    rt_dataset_free(&b);

    /* two samples, 0.2: nothing would be held out */
    make(&a, 2, NULL, 1);
    memset(&b, 0, sizeof b);
    printf("expected error: ");
    fflush(stdout);
    CHECK(rt_split("fixture", &a, &b, 0.2, 5) == -1 && a.n == 2 && b.n == 0, "an empty test part was accepted");
    rt_dataset_free(&a);
    printf("test_split: %s\n", fails ? "FAIL" : "PASS");
    return fails != 0;
}
