/* test_bf16_gemm.c: the bf16 GEMM of `precision bf16` (runtime/rt_dnnl_mm.c,
 * oneDNN's matmul on AVX512-BF16) against a float64 product of the
 * operands rounded to bf16 here, independently of rt_round_bf16 (frexp,
 * then nearbyint: round half to even on 8 significant bits).
 *
 * Odd shapes, every transpose, padded leading dimensions, and exact ties
 * among the operands (1 + 2^-8 rounds to 1, truncation would agree there,
 * 1 + 3 * 2^-8 rounds up to 1 + 2^-6): each element must lie within
 * k * 2^-23 * sum |a||b| of the float64 value (fp32 accumulation in any
 * order is within (k - 1) * 2^-24 of it), far below what truncated or
 * unrounded operands give. rt_sgemm_prec(RT_PREC_BF16) must return the
 * same bits (it dispatches here), and its rounded result the bf16 of them.
 * The padding of C must stay untouched; NaN operands give NaN (check_nan).
 * The bf16 convolutions round their operands the same way
 * (check_conv_rounding).
 *
 * On a CPU with avx512_bf16 (/proc/cpuinfo) the oneDNN path must be taken;
 * without it, rt_sgemm_prec's emulation is checked against the same
 * reference. Exit status 0: all good. */
#include "rt_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* round half to even to 8 significant bits (bf16's normal range) */
static double ref_bf16(float x)
{
    if (x == 0.0f)
        return 0.0;
    int e;
    double f = frexp((double)x, &e);        /* x = f 2^e, 0.5 <= |f| < 1 */
    return ldexp(nearbyint(ldexp(f, 8)), e - 8);
}

static float value(void)
{
    double u = urand();
    if (u < 0.1)        /* ties: halfway between two bf16 values */
        return (urand() < 0.5 ? -1.0f : 1.0f) * (1.0f + (float)(1 + 2 * (int)(urand() * 64)) / 256.0f);
    return (float)((urand() * 2.0 - 1.0) * ldexp(1.0, (int)(urand() * 8) - 4));
}

static int cpu_has_bf16(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int yes = 0;
    while (f && !yes && fgets(line, sizeof line, f))
        yes = strncmp(line, "flags", 5) == 0 && strstr(line, " avx512_bf16") != NULL;
    if (f)
        fclose(f);
    return yes;
}

static int check(int want_dnnl, int ta, int tb, int64_t m, int64_t n, int64_t k)
{
    const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    const int64_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
    float *a = malloc(sizeof(float) * (size_t)(ar * lda)), *b = malloc(sizeof(float) * (size_t)(br * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc)), *c2 = malloc(sizeof(float) * (size_t)(m * ldc));
    float *c3 = malloc(sizeof(float) * (size_t)(m * ldc));
    for (int64_t i = 0; i < ar * lda; i++)
        a[i] = value();
    for (int64_t i = 0; i < br * ldb; i++)
        b[i] = value();
    for (int64_t i = 0; i < m * ldc; i++)
        c[i] = c2[i] = c3[i] = -7.0f;
    int bad = 0;
    const int took = rt_dnnl_sgemm_bf16(0, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
    if (took != want_dnnl) {
        printf("FAIL %dx%dx%d ta=%d tb=%d: oneDNN path %s\n", (int)m, (int)n, (int)k, ta, tb,
               took ? "taken without avx512_bf16" : "not taken on an avx512_bf16 CPU");
        bad = 1;
    }
    rt_sgemm_prec(RT_PREC_BF16 | RT_PREC_KEEP_C, ta, tb, m, n, k, a, lda, b, ldb, c2, ldc);
    rt_sgemm_prec(RT_PREC_BF16, ta, tb, m, n, k, a, lda, b, ldb, c3, ldc);
    if (!took)
        memcpy(c, c2, sizeof(float) * (size_t)(m * ldc));
    /* op(A), op(B) rounded, in float64, as [m, k] and [n, k] */
    double *ra = malloc(sizeof(double) * (size_t)(m * k)), *rb = malloc(sizeof(double) * (size_t)(n * k));
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++)
            ra[i * k + p] = ref_bf16(ta ? a[p * lda + i] : a[i * lda + p]);
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++)
            rb[j * k + p] = ref_bf16(tb ? b[j * ldb + p] : b[p * ldb + j]);
    double worst = 0.0;
    for (int64_t i = 0; i < m && bad < 5; i++)
        for (int64_t j = 0; j < ldc && bad < 5; j++) {
            const float got = c[i * ldc + j];
            if (j >= n) {
                if (got != -7.0f || c2[i * ldc + j] != -7.0f || c3[i * ldc + j] != -7.0f)
                    printf("FAIL %dx%dx%d ta=%d tb=%d: C padding [%d,%d] written\n", (int)m, (int)n, (int)k, ta, tb,
                           (int)i, (int)j), bad++;
                continue;
            }
            double s = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; p++)
                s += ra[i * k + p] * rb[j * k + p], mag += fabs(ra[i * k + p] * rb[j * k + p]);
            const double err = fabs((double)got - s), tol = (double)k * ldexp(mag, -23);
            if (mag > 0 && err / mag > worst)
                worst = err / mag;
            if (!(err <= tol))
                printf("FAIL %dx%dx%d ta=%d tb=%d: C[%d,%d] = %.9g, float64 %.9g (|err| %.3g > %.3g)\n", (int)m,
                       (int)n, (int)k, ta, tb, (int)i, (int)j, got, s, err, tol), bad++;
            if (rt_f2u(c2[i * ldc + j]) != rt_f2u(got) || rt_f2u(c3[i * ldc + j]) != rt_f2u(rt_round_bf16(got)))
                printf("FAIL %dx%dx%d ta=%d tb=%d: rt_sgemm_prec C[%d,%d] = %.9g / %.9g, not %.9g rounded\n",
                       (int)m, (int)n, (int)k, ta, tb, (int)i, (int)j, c2[i * ldc + j], c3[i * ldc + j], got),
                    bad++;
        }
    if (!bad)
        printf("ok   %4dx%-4dx%-4d ta=%d tb=%d %s  max |err|/sum|ab| %.2g\n", (int)m, (int)n, (int)k, ta, tb,
               took ? "oneDNN bf16" : "emulation  ", worst);
    free(a), free(b), free(c), free(c2), free(c3), free(ra), free(rb);
    return bad != 0;
}

/* NaNs whose payload is only in the low half (the high half alone reads
 * as inf: inf . 1 would not be NaN) stay NaN, in vector lanes and in the
 * tails of the conversion: A[0][0], B[1][3] and B[1][17]; ones elsewhere. */
static int check_nan(int want_dnnl)
{
    enum { M = 3, N = 20, K = 17 };
    float a[M * K], b[K * N], c[M * N], c2[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = 1.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = 1.0f;
    a[0] = rt_u2f(0x7f800001u), b[1 * N + 3] = rt_u2f(0xff800001u), b[1 * N + 17] = rt_u2f(0x7f800003u);
    const int took = rt_dnnl_sgemm_bf16(0, 0, 0, M, N, K, a, K, b, N, c, N);
    rt_sgemm_prec(RT_PREC_BF16, 0, 0, M, N, K, a, K, b, N, c2, N);
    int bad = took != want_dnnl;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const int nan = i == 0 || j == 3 || j == 17;
            if ((took && (nan ? !isnan(c[i * N + j]) : c[i * N + j] != (float)K)) ||
                (nan ? !isnan(c2[i * N + j]) : c2[i * N + j] != (float)K))
                bad = 1;
        }
    printf("%s NaN operands stay NaN (%s)\n", bad ? "FAIL" : "ok  ", took ? "oneDNN bf16" : "emulation");
    return bad;
}

/* The convolutions' conversion (RT_CONV_BF16: oneDNN's reorders round the
 * operands): a 1x1 convolution of one channel with weight 1 returns its
 * input rounded, forward (y = x) and data gradient (dx = dy); the values
 * include exact ties, so truncation or another tie rule fails. */
static int check_conv_rounding(int want_dnnl)
{
    enum { N = 3, H = 7, W = 9, E = N * H * W };
    float x[E], y[E], one = 1.0f;
    const rt_conv_geo g = {N, 1, H, W, 1, H, W, 1, 1, 1, 1, 0, 0, 1, 1, 1};
    int bad = 0;
    for (int kind = RT_CONV_FWD; kind <= RT_CONV_DX; kind++) {
        rt_dnnl_conv_cache *cache = NULL;
        for (int i = 0; i < E; i++)
            x[i] = value(), y[i] = -7.0f;
        /* forward reads x and writes y; the data gradient reads dy (y) and writes dx (x) */
        float *in = kind == RT_CONV_FWD ? x : y, *out = kind == RT_CONV_FWD ? y : x;
        if (kind == RT_CONV_DX)
            memcpy(y, x, sizeof x);
        float want[E];
        for (int i = 0; i < E; i++)
            want[i] = (float)ref_bf16(in[i]);
        const int took = rt_dnnl_conv(&cache, kind | RT_CONV_BF16, &g, x, &one, NULL, y);
        if (took != want_dnnl)
            bad = 1;
        for (int i = 0; took && i < E; i++)
            if (out[i] != want[i])
                bad = 1;
    }
    printf("%s bf16 convolution operands rounded to nearest even (%s)\n", bad ? "FAIL" : "ok  ",
           want_dnnl ? "oneDNN bf16" : "not run: no oneDNN bf16 here");
    return bad;
}

int main(void)
{
    /* odd sizes around the kernels' blockings, a SimpleNet layer's three
     * GEMMs (batch 64, and the last partial batch 32) and k = 1 */
    static const int shapes[][3] = {{1, 1, 1},   {3, 5, 7},     {17, 33, 65},   {31, 1, 130}, {1, 47, 29},
                                    {64, 512, 784}, {32, 10, 256}, {512, 784, 64}, {65, 67, 1}, {129, 18, 97}};
    /* the runtime's own path: the suite caps oneDNN at AVX2 on AVX-512
     * machines (tests/suite.sh), which oneDNN reads at its first call */
    unsetenv("DNNL_MAX_CPU_ISA");
    const int want = cpu_has_bf16();
#ifdef CDDP_NO_DNNL
    const int dnnl = 0;
#else
    const int dnnl = want;
#endif
    printf("avx512_bf16: %s; runtime with oneDNN: %s\n", want ? "yes" : "no", dnnl ? "yes" : "no");
    int fails = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            fails += check(dnnl, t >> 1, t & 1, shapes[s][0], shapes[s][1], shapes[s][2]);
    fails += check_nan(dnnl);
    fails += check_conv_rounding(dnnl);
    printf("%s: %d of %d cases failed\n", fails ? "FAIL" : "PASS", fails, 2 + (int)(4 * sizeof shapes / sizeof shapes[0]));
    return fails != 0;
}
