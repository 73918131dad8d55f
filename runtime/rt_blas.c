/* rt_blas.c: the one matrix product every CPU kernel calls.
 *
 * With OpenBLAS (the default build) this is cblas_sgemm; the fallback
 * (CDDP_NO_BLAS, for machines without a BLAS such as the GPU hosts) is a
 * plain loop ordered for unit-stride inner access, correct but slow. */
#include <stdlib.h>
#include <strings.h>

#include "rt_internal.h"

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

void rt_sgemm_acc(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                  int64_t ldb, float *c, int64_t ldc)
{
    if (m == 0 || n == 0 || k == 0)
        return;
    cblas_sgemm(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, (int)m, (int)n, (int)k, 1.0f, a, (int)lda,
                b, (int)ldb, 1.0f, c, (int)ldc);
}

char *openblas_get_corename(void);

/* OpenBLAS 0.3.21 (Debian 12's) has no entry for newer Xeons' CPUID models
 * (a Sapphire Rapids VM reads to it as "Prescott") and takes its oldest
 * x86-64 kernels: SSE3 without FMA, several times slower, and their sums
 * rounded apart from every other library's (a BatchNorm MLP's 100 steps
 * ended 3.8e-4 from PyTorch's weights instead of 1.1e-5). Where the CPU
 * has AVX2 and FMA and OpenBLAS took a core older than that, Haswell's
 * kernels are the right ones; OpenBLAS reads OPENBLAS_CORETYPE once, when
 * it loads, so the caller runs the program again. A user's own
 * OPENBLAS_CORETYPE is left alone. */
int rt_blas_core_env(void)
{
    static const char *before_fma[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                                       "sandybridge", "katmai", "coppermine", "northwood", "banias", "unknown"};
    if (getenv("OPENBLAS_CORETYPE") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return 0;
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < sizeof before_fma / sizeof before_fma[0]; i++)
        if (!strcasecmp(core, before_fma[i]))
            return setenv("OPENBLAS_CORETYPE", "Haswell", 1) == 0;
    return 0;
}
#else
int rt_blas_core_env(void)
{
    return 0;
}

static void gemm_loop(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int acc)
{
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = 0; j < n && !acc; j++)
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

void rt_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float *c, int64_t ldc)
{
    gemm_loop(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, 0);
}

void rt_sgemm_acc(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                  int64_t ldb, float *c, int64_t ldc)
{
    gemm_loop(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, 1);
}
#endif

/* Low precision: bf16 on bf16 operands through oneDNN where the CPU has
 * AVX512-BF16 (rt_dnnl_mm.c); otherwise, and for fp16, emulated in fp32:
 * rounded copies of the operands (a product of two rounded values is exact
 * in fp32 for bf16 and fp16, so only the accumulation rounds, in fp32, as
 * tensor cores do). Either way the result is rounded as autocast stores
 * it. Copies per call keep the emulation simple; it is not the fast path. */
#include <stdlib.h>

static float *rounded_copy(int prec, int64_t rows, int64_t cols, const float *x, int64_t ld)
{
    float *y = rt_malloc(sizeof(float) * (size_t)(rows * cols > 0 ? rows * cols : 1));
    if (!y)
        abort();    /* kernels cannot fail; an emulation-only path */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            y[i * cols + j] = rt_round_prec(prec, x[i * ld + j]);
    return y;
}

void rt_sgemm_prec(int prec, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float *c, int64_t ldc)
{
    if (m == 0 || n == 0)
        return;
    const int keep_c = prec & RT_PREC_KEEP_C;
    prec &= ~RT_PREC_KEEP_C;
    if (prec == RT_PREC_BF16 && rt_dnnl_sgemm_bf16(!keep_c, ta, tb, m, n, k, a, lda, b, ldb, c, ldc))
        return;
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    float *ra = rounded_copy(prec, ar, ac, a, lda), *rb = rounded_copy(prec, br, bc, b, ldb);
    rt_sgemm(ta, tb, m, n, k, ra, ac, rb, bc, c, ldc);
    free(ra);
    free(rb);
    for (int64_t i = 0; i < m && !keep_c; i++)
        for (int64_t j = 0; j < n; j++)
            c[i * ldc + j] = rt_round_prec(prec, c[i * ldc + j]);
}
