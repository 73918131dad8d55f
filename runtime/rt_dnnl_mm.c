/* rt_dnnl_mm.c: the bf16 matrix product of `precision bf16` on bf16
 * operands, through oneDNN's matmul (AVX512-BF16 dot products, fp32
 * accumulation), instead of an fp32 GEMM on rounded fp32 copies.
 *
 * Same numbers as that emulation up to the order of the fp32 sums: the
 * operands are rounded here with rt_round_bf16 (round to nearest even,
 * bf16 subnormals kept: not oneDNN's own conversion, which flushes them),
 * a product of two bf16 values is exact in fp32, and only the accumulation
 * rounds. The one other difference is the instruction's: VDPBF16PS treats
 * bf16 subnormal operands (|x| < 2^-126) as 0 and flushes subnormal
 * results, which the emulation does not.
 *
 * Used only where oneDNN reports the AVX512-BF16 ISA (elsewhere it would
 * emulate bf16 itself, slower than the fp32 path), and only when oneDNN
 * gives a JIT kernel for the shape; rt_dnnl_sgemm_bf16 returns 0 otherwise
 * and rt_sgemm_prec keeps its emulation. The primitives are created on a
 * shape's first call and kept until exit, as rt_dnnl.c does for the
 * convolutions: a step has a handful of shapes (each layer's three GEMMs,
 * at the train, last partial and eval batch). */
#include "rt_internal.h"

#ifdef CDDP_NO_DNNL
int rt_dnnl_sgemm_bf16(int round_c, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc)
{
    (void)round_c, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
    return 0;
}

int rt_dnnl_has_bf16(void) { return 0; }
#else
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

typedef struct Mm {
    struct Mm *next;
    int ta, tb;
    int64_t m, n, k, ldc;
    int ok;                         /* 0: no JIT kernel for it: the emulation */
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;          /* handles set per call */
} Mm;

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static Mm *cache;
/* the kernels call GEMMs from one thread; the lock keeps the cache, the
 * stream and the scratch right should two threads ever call at once */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint16_t *scratch;           /* both bf16 operands, grown as needed */
static size_t scratch_n;

/* CDDP_DNNL=0 turns this off with the convolutions (the emulation then
 * runs every bf16 GEMM); no AVX512-BF16, or no engine: off. */
static int started(void)
{
    static int state;               /* 0 untried, 1 ready, -1 off */
    if (state == 0) {
        const char *env = getenv("CDDP_DNNL");
        const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
        int bf16 = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16;
        state = (env && strcmp(env, "0") == 0) || !bf16 ? -1 : 0;
    }
    if (state == 0)
        state = dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success &&
                        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success
                    ? 1
                    : -1;
    return state == 1;
}

/* A 2-D operand [rows, cols] as the product reads it: dense, stored
 * row-major, or column-major when transposed (the bf16 copies are dense;
 * C keeps the caller's row stride). */
static int md2(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans, int64_t ld, dnnl_data_type_t t)
{
    dnnl_dims_t d = {rows, cols};
    dnnl_dims_t s = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, d, t, s) == dnnl_success;
}

static int build(Mm *p)
{
    dnnl_memory_desc_t a, b, c;
    if (!md2(&a, p->m, p->k, p->ta, p->ta ? p->m : p->k, dnnl_bf16) ||
        !md2(&b, p->k, p->n, p->tb, p->tb ? p->k : p->n, dnnl_bf16) || !md2(&c, p->m, p->n, 0, p->ldc, dnnl_f32))
        return 0;
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd;
    if (dnnl_matmul_desc_init(&d, &a, &b, NULL, &c) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &d, NULL, engine, NULL) != dnnl_success)
        return 0;
    /* the reference implementation is far slower than the emulation */
    const char *impl = NULL;
    int ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
             strncmp(impl, "ref", 3) != 0 && dnnl_primitive_create(&p->prim, pd) == dnnl_success &&
             dnnl_memory_create(&p->a, &a, engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&p->b, &b, engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&p->c, &c, engine, DNNL_MEMORY_NONE) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* The conversions are vector code: scalar, rounding the operands cost
 * more than the bf16 product saved (measured: 0.39 ms of 0.63 ms for
 * 64x784 . 784x512 on one thread). AVX-512 is safe to ask for: these run
 * only where oneDNN found AVX512-BF16. Lane by lane they are
 * rt_round_bf16; a NaN stays a NaN (quiet, as its high half alone could
 * read as inf). */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
typedef unsigned v16u __attribute__((vector_size(64)));
typedef unsigned short v16h __attribute__((vector_size(32)));

static inline unsigned bf16_bits(unsigned u)    /* rt_round_bf16's bits, NaN kept */
{
    return (u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

AVX512 static inline v16u bf16_bits16(v16u u)
{
    const v16u nan = (v16u)((u & 0x7fffffffu) > 0x7f800000u);      /* all ones where NaN */
    return (((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u) & ~nan) | ((u | 0x00400000u) & nan);
}

/* x [rows, cols] (row stride ld) to dense bf16 */
AVX512 static void to_bf16(uint16_t *y, int64_t rows, int64_t cols, const float *x, int64_t ld)
{
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
    for (int64_t i = 0; i < rows; i++) {
        const float *xi = x + i * ld;
        uint16_t *yi = y + i * cols;
        int64_t j = 0;
        for (; j + 16 <= cols; j += 16) {
            v16u u;
            memcpy(&u, xi + j, sizeof u);
            const v16h h = __builtin_convertvector(bf16_bits16(u) >> 16, v16h);
            memcpy(yi + j, &h, sizeof h);
        }
        for (; j < cols; j++)
            yi[j] = (uint16_t)(bf16_bits(rt_f2u(xi[j])) >> 16);
    }
}

/* c [rows, cols] (row stride ld) := rt_round_bf16(c), as autocast stores it */
AVX512 static void round_rows(float *c, int64_t rows, int64_t cols, int64_t ld)
{
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
    for (int64_t i = 0; i < rows; i++) {
        float *ci = c + i * ld;
        int64_t j = 0;
        for (; j + 16 <= cols; j += 16) {
            v16u u;
            memcpy(&u, ci + j, sizeof u);
            u = bf16_bits16(u);
            memcpy(ci + j, &u, sizeof u);
        }
        for (; j < cols; j++)
            ci[j] = rt_round_bf16(ci[j]);
    }
}

void rt_bf16_round(float *x, int64_t n)
{
    round_rows(x, 1, n, n);
}

int rt_dnnl_has_bf16(void)
{
    pthread_mutex_lock(&lock);
    const int ok = started();
    pthread_mutex_unlock(&lock);
    return ok;
}

static int run(Mm *p, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int round_c)
{
    const int64_t ar = p->ta ? p->k : p->m, ac = p->ta ? p->m : p->k;
    const int64_t br = p->tb ? p->n : p->k, bc = p->tb ? p->k : p->n;
    const size_t need = (size_t)(ar * ac + br * bc);
    if (need > scratch_n) {
        uint16_t *s = rt_realloc(scratch, need * sizeof *s);
        if (!s)
            return 0;
        scratch = s, scratch_n = need;
    }
    uint16_t *ra = scratch, *rb = scratch + ar * ac;
    to_bf16(ra, ar, ac, a, lda);
    to_bf16(rb, br, bc, b, ldb);
    if (dnnl_memory_set_data_handle_v2(p->a, ra, stream) != dnnl_success ||
        dnnl_memory_set_data_handle_v2(p->b, rb, stream) != dnnl_success ||
        dnnl_memory_set_data_handle_v2(p->c, c, stream) != dnnl_success)
        return 0;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
    if (dnnl_primitive_execute(p->prim, stream, 3, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success)
        return 0;
    if (round_c)
        round_rows(c, p->m, p->n, p->ldc);
    return 1;
}

int rt_dnnl_sgemm_bf16(int round_c, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return 0;   /* k == 0: C = 0, the emulation's plain case */
    pthread_mutex_lock(&lock);
    int done = 0;
    if (started()) {
        Mm *p = cache;
        while (p && (p->ta != !!ta || p->tb != !!tb || p->m != m || p->n != n || p->k != k || p->ldc != ldc))
            p = p->next;
        if (!p && (p = rt_calloc(1, sizeof *p)) != NULL) {
            p->ta = !!ta, p->tb = !!tb, p->m = m, p->n = n, p->k = k, p->ldc = ldc;
            p->ok = build(p);   /* refused: kept, so the shape is not retried every step */
            p->next = cache, cache = p;
        }
        done = p && p->ok && run(p, a, lda, b, ldb, c, round_c);
    }
    pthread_mutex_unlock(&lock);
    return done;
}
#endif
