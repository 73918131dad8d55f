/* rt_blas.c: the one matrix product every CPU kernel calls.
 *
 * With OpenBLAS (the default build) this is cblas_sgemm; the fallback
 * (CDDP_NO_BLAS, for machines without a BLAS such as the GPU hosts) is a
 * plain loop ordered for unit-stride inner access, correct but slow. */
#include "cddprt.h"

#ifndef CDDP_NO_BLAS
/* Declared here rather than via <cblas.h>: Debian puts that header under
 * per-variant paths; the CBLAS ABI itself is fixed (enums are ints). */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

void rt_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float *c, int64_t ldc)
{
    if (m == 0 || n == 0)
        return;
    cblas_sgemm(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, (int)m, (int)n, (int)k, 1.0f, a, (int)lda,
                b, (int)ldb, 0.0f, c, (int)ldc);
}
#else
void rt_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = 0; j < n; j++)
            ci[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            float av = ta ? a[p * lda + i] : a[i * lda + p];
            if (tb)
                for (int64_t j = 0; j < n; j++)
                    ci[j] += av * b[j * ldb + p];
            else
                for (int64_t j = 0; j < n; j++)
                    ci[j] += av * b[p * ldb + j];
        }
    }
}
#endif
