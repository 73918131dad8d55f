/* tests/ir/vector_select.c: the kernel shape that GCC 12 (-O3, AVX)
 * mis-vectorizes: a [R, 16] loop whose select reads memory in one arm
 * (relu_grad as the emitter once wrote it). The loads become masked loads
 * and the unrolled loop gives two vectors' loads one vector's mask.
 * Prints how many of the 256 results are wrong: the C compiler at hand is
 * affected when that is not 0 (tests/ir/vector_select.sh). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int64_t n;
    int nmax;
    float *act;
} Exec;

__attribute__((noinline)) static void relu_grad(Exec *e)
{
    const int64_t n = e->n;
    float *const out = e->act + (int64_t)32 * e->nmax;
    float *const dy = e->act + (int64_t)16 * e->nmax;
    float *const x = e->act + (int64_t)64 * e->nmax;
    const int64_t R = n, C = 16;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            out[i * C + j] = x[i * C + j] > 0.0f ? dy[i * C + j] : 0.0f;
}

int main(void)
{
    Exec e = {16, 16, calloc(96 * 16, sizeof(float))};
    if (!e.act)
        return 2;
    float *dy = e.act + 16 * 16, *x = e.act + 64 * 16, *out = e.act + 32 * 16;
    srand(1);
    for (int i = 0; i < 256; i++) {
        dy[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    }
    relu_grad(&e);
    int bad = 0;
    for (int i = 0; i < 256; i++)
        bad += out[i] != (x[i] > 0.0f ? dy[i] : 0.0f);
    printf("%d\n", bad);
    free(e.act);
    return 0;
}
