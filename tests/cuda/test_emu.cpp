/* tests/cuda/test_emu.cpp: the CUDA emulation header checked on its own,
 * with hand-written kernels against plain loops, before it is trusted to
 * judge the kernels cddpc emits. Also checks that misuse (a thread that
 * leaves a block whose other threads wait at __syncthreads, a divergent
 * barrier, a shuffle over absent lanes) is reported, not hung on.
 * Build: g++ -std=c++17 -O2 -Itests/cuda tests/cuda/test_emu.cpp */
#include "emu.h"

#include <vector>

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                                                                            \
    do {                                                                                            \
        checks++;                                                                                   \
        if (!(cond)) {                                                                              \
            failures++;                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                           \
            fputc('\n', stderr);                                                                    \
        }                                                                                           \
    } while (0)

/* the kernels' argument block, like rt_exec: one struct in "device memory" */
struct Args {
    int n, m, k;
    const float *a, *b;
    float *out;
    int *iout;
    double *dout;
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand()
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

static double maxrel(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(a[i]) != std::isnan(b[i]))
            return INFINITY;
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)a[i]));
        if (d > m)
            m = d;
    }
    return m;
}

/* ---- 1. block reduction: shared memory tree with __syncthreads ---------- */
extern "C" __global__ void __launch_bounds__(256) k_block_sum(const Args *__restrict__ e)
{
    __shared__ float buf[256];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < e->n ? e->a[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        e->out[blockIdx.x] = buf[0];
        atomicAdd(e->dout, (double)buf[0]);
    }
}

static void test_block_sum()
{
    for (int n : {1, 255, 256, 1000, 4097}) {
        std::vector<float> a(n);
        for (auto &x : a)
            x = frand();
        int g = (n + 255) / 256;
        std::vector<float> out(g, -7.0f);
        double tot = 0;
        Args e{};
        e.n = n, e.a = a.data(), e.out = out.data(), e.dout = &tot;
        int rc = emu_launch(k_block_sum, dim3(g), dim3(256), &e, "k_block_sum");
        CHECK(rc == 0, "n=%d: %s", n, emu_last_error());
        double ref = 0;
        for (int b = 0; b < g; b++) {
            double s = 0;
            for (int i = b * 256; i < n && i < (b + 1) * 256; i++)
                s += a[i];
            ref += s;
            CHECK(fabs(out[b] - s) <= 1e-5 * fmax(1, fabs(s)), "n=%d block %d: %g vs %g", n, b, out[b], s);
        }
        CHECK(fabs(tot - ref) <= 1e-5 * fmax(1, fabs(ref)), "n=%d total %g vs %g", n, tot, ref);
    }
}

/* ---- 2. warp shuffles ---------------------------------------------------- */
/* one warp per row: lanes stride the row, then a butterfly (xor) sum and a
 * max; lane 0 writes. Rows past n return early (no block barrier used). */
extern "C" __global__ void __launch_bounds__(256) k_warp_rows(const Args *__restrict__ e)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= e->n)
        return;
    const float *x = e->a + (int64_t)row * e->k;
    float s = 0.0f, mx = -INFINITY;
    for (int j = lane; j < e->k; j += 32) {
        s += x[j];
        mx = fmaxf(mx, x[j]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    int cnt = 0;
    for (int j = lane; j < e->k; j += 32)
        cnt += x[j] > 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        cnt += __shfl_down_sync(0xffffffffu, cnt, o); /* ints, down: lane 0 holds the sum */
    if (lane == 0) {
        e->out[2 * row] = s;
        e->out[2 * row + 1] = mx;
        e->iout[row] = cnt;
    }
}

static void test_warp_rows()
{
    for (int n : {1, 7, 8, 19}) {
        for (int k : {1, 31, 32, 100}) {
            std::vector<float> a((size_t)n * k), out(2 * n, -7.0f);
            std::vector<int> cnt(n, -7);
            for (auto &x : a)
                x = frand();
            Args e{};
            e.n = n, e.k = k, e.a = a.data(), e.out = out.data(), e.iout = cnt.data();
            int rc = emu_launch(k_warp_rows, dim3((n + 7) / 8), dim3(256), &e, "k_warp_rows");
            CHECK(rc == 0, "n=%d k=%d: %s", n, k, emu_last_error());
            for (int r = 0; r < n; r++) {
                double s = 0;
                float mx = -INFINITY;
                int c = 0;
                for (int j = 0; j < k; j++) {
                    float v = a[(size_t)r * k + j];
                    s += v, mx = fmaxf(mx, v), c += v > 0;
                }
                CHECK(fabs(out[2 * r] - s) <= 1e-5 * fmax(1, fabs(s)), "row %d sum %g vs %g", r, out[2 * r], s);
                CHECK(out[2 * r + 1] == mx, "row %d max %g vs %g", r, out[2 * r + 1], mx);
                CHECK(cnt[r] == c, "row %d count %d vs %d", r, cnt[r], c);
            }
        }
    }
}

/* up (inclusive scan), idx (broadcast), xor within width 8 */
extern "C" __global__ void k_shfl_modes(const Args *__restrict__ e)
{
    const int t = threadIdx.x, lane = t & 31;
    int v = e->iout[t];
    for (int d = 1; d < 32; d <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d)
            v += u;
    }
    e->iout[64 + t] = v;                                          /* scan */
    e->iout[128 + t] = __shfl_sync(0xffffffffu, e->iout[t], 5);   /* lane 5 of the warp */
    e->iout[192 + t] = __shfl_sync(0xffffffffu, e->iout[t], 3, 8);/* lane 3 of its 8-group */
    int w = e->iout[t];
    for (int o = 4; o > 0; o >>= 1)
        w += __shfl_xor_sync(0xffffffffu, w, o, 8);               /* sum of its 8-group */
    e->iout[256 + t] = w;
    e->iout[320 + t] = __shfl_down_sync(0xffffffffu, e->iout[t], 3, 16); /* clamp at 16-segment */
    unsigned b = __ballot_sync(0xffffffffu, e->iout[t] & 1);
    e->iout[384 + t] = (int)b;
    double dv = 0.5 * t;                                          /* 8-byte values */
    e->dout[t] = __shfl_xor_sync(0xffffffffu, dv, 1);
}

static void test_shfl_modes()
{
    std::vector<int> io(448, 0);
    std::vector<double> d(64, -1);
    for (int i = 0; i < 64; i++)
        io[i] = (int)(frand() * 100);
    Args e{};
    e.iout = io.data(), e.dout = d.data();
    int rc = emu_launch(k_shfl_modes, dim3(1), dim3(64), &e, "k_shfl_modes");
    CHECK(rc == 0, "%s", emu_last_error());
    for (int t = 0; t < 64; t++) {
        int base = t & ~31, lane = t & 31;
        int scan = 0;
        for (int l = 0; l <= lane; l++)
            scan += io[base + l];
        CHECK(io[64 + t] == scan, "scan t=%d: %d vs %d", t, io[64 + t], scan);
        CHECK(io[128 + t] == io[base + 5], "idx t=%d", t);
        CHECK(io[192 + t] == io[(t & ~7) + 3], "idx width 8 t=%d", t);
        int g = 0;
        for (int l = 0; l < 8; l++)
            g += io[(t & ~7) + l];
        CHECK(io[256 + t] == g, "xor width 8 t=%d: %d vs %d", t, io[256 + t], g);
        int dn = (lane & 15) + 3 < 16 ? io[t + 3] : io[t];
        CHECK(io[320 + t] == dn, "down width 16 t=%d: %d vs %d", t, io[320 + t], dn);
        unsigned bal = 0;
        for (int l = 0; l < 32; l++)
            bal |= (unsigned)(io[base + l] & 1) << l;
        CHECK((unsigned)io[384 + t] == bal, "ballot t=%d", t);
        CHECK(d[t] == 0.5 * (t ^ 1), "double xor t=%d: %g", t, d[t]);
    }
}

/* ---- 3. tiled matmul, shared tiles, 2-D blocks, ragged edges -------------- */
#define TS 16
extern "C" __global__ void __launch_bounds__(256) k_matmul(const Args *__restrict__ e)
{
    __shared__ float As[TS][TS + 1];
    __shared__ float Bs[TS][TS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TS + ty, col = blockIdx.x * TS + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < e->k; k0 += TS) {
        As[ty][tx] = row < e->m && k0 + tx < e->k ? e->a[(int64_t)row * e->k + k0 + tx] : 0.0f;
        Bs[ty][tx] = k0 + ty < e->k && col < e->n ? e->b[(int64_t)(k0 + ty) * e->n + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TS; kk++)
            acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    if (row < e->m && col < e->n)
        e->out[(int64_t)row * e->n + col] = acc;
}

static void test_matmul()
{
    const int shapes[][3] = {{1, 1, 1}, {16, 16, 16}, {19, 37, 70}, {64, 13, 33}, {5, 100, 17}};
    for (auto &sh : shapes) {
        int m = sh[0], n = sh[1], k = sh[2];
        std::vector<float> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n, NAN), r((size_t)m * n);
        for (auto &x : a)
            x = frand();
        for (auto &x : b)
            x = frand();
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int l = 0; l < k; l++)
                    s += (double)a[(size_t)i * k + l] * b[(size_t)l * n + j];
                r[(size_t)i * n + j] = (float)s;
            }
        Args e{};
        e.m = m, e.n = n, e.k = k, e.a = a.data(), e.b = b.data(), e.out = c.data();
        int rc = emu_launch(k_matmul, dim3((n + TS - 1) / TS, (m + TS - 1) / TS), dim3(TS, TS), &e, "k_matmul");
        CHECK(rc == 0, "%dx%dx%d: %s", m, n, k, emu_last_error());
        double d = maxrel(r.data(), c.data(), r.size());
        CHECK(d <= 1e-5, "%dx%dx%d: max rel diff %g", m, n, k, d);
    }
}

/* ---- 4. early return for rows past n, 3-D blocks ------------------------- */
extern "C" __global__ void k_rows_early(const Args *__restrict__ e)
{
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= e->n)
        return;
    for (int j = threadIdx.x; j < e->k; j += blockDim.x)
        e->out[(int64_t)row * e->k + j] = 2.0f * e->a[(int64_t)row * e->k + j] + 1.0f;
}

extern "C" __global__ void k_ids(const Args *__restrict__ e)
{
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int nt = blockDim.x * blockDim.y * blockDim.z;
    e->iout[b * nt + t] += 1 + (t == 0 ? 1000 * (int)(gridDim.x * gridDim.y * gridDim.z) : 0);
}

static void test_early_and_ids()
{
    for (int n : {1, 5, 37}) {
        const int k = 45, nmax = 40;
        std::vector<float> a((size_t)nmax * k), out((size_t)nmax * k, 3.0f);
        for (auto &x : a)
            x = frand();
        Args e{};
        e.n = n, e.k = k, e.a = a.data(), e.out = out.data();
        int rc = emu_launch(k_rows_early, dim3((nmax + 3) / 4), dim3(32, 4), &e, "k_rows_early");
        CHECK(rc == 0, "%s", emu_last_error());
        int bad = 0;
        for (int i = 0; i < nmax; i++)
            for (int j = 0; j < k; j++) {
                float want = i < n ? 2.0f * a[(size_t)i * k + j] + 1.0f : 3.0f;
                bad += out[(size_t)i * k + j] != want;
            }
        CHECK(bad == 0, "n=%d: %d wrong elements", n, bad);
    }
    std::vector<int> ids(3 * 2 * 2 * 8 * 4 * 2, 0);
    Args e{};
    e.iout = ids.data();
    int rc = emu_launch(k_ids, dim3(3, 2, 2), dim3(8, 4, 2), &e, "k_ids");
    CHECK(rc == 0, "%s", emu_last_error());
    int bad = 0;
    for (size_t i = 0; i < ids.size(); i++)
        bad += ids[i] != (i % 64 == 0 ? 12001 : 1);
    CHECK(bad == 0, "%d thread/block ids wrong (each thread once, 3-D)", bad);
}

/* ---- 5. shared memory: poisoned per block, shared across the block ------- */
extern "C" __global__ void k_shared_poison(const Args *__restrict__ e)
{
    __shared__ float s[64];
    __shared__ int si[4];
    if (threadIdx.x == 0)
        e->out[blockIdx.x] = s[5]; /* never written before: must read garbage */
    if (threadIdx.x == 1)
        e->iout[blockIdx.x] = si[2];
    __syncthreads();
    s[threadIdx.x] = (float)(blockIdx.x * 100 + threadIdx.x);
    si[threadIdx.x & 3] = 7;
    __syncthreads();
    e->out[16 + blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];
}

static void test_shared()
{
    std::vector<float> out(16 + 3 * 64, 0.0f);
    std::vector<int> io(3, 0);
    Args e{};
    e.out = out.data(), e.iout = io.data();
    int rc = emu_launch(k_shared_poison, dim3(3), dim3(64), &e, "k_shared_poison");
    CHECK(rc == 0, "%s", emu_last_error());
    for (int b = 0; b < 3; b++) {
        CHECK(std::isnan(out[b]), "block %d read unwritten shared as %g, expected the NaN poison", b, out[b]);
        CHECK(io[b] == -1, "block %d read unwritten shared int as %d, expected -1", b, io[b]);
        for (int t = 0; t < 64; t++)
            CHECK(out[16 + b * 64 + t] == (float)(b * 100 + 63 - t), "block %d thread %d", b, t);
    }
}

/* ---- 6. misuse is reported, not hung on ------------------------------------ */
extern "C" __global__ void k_exit_while_waiting(const Args *__restrict__ e)
{
    if (threadIdx.x >= 100) /* threads 0..99 wait first, then 100 leaves */
        return;
    __syncthreads();
    e->out[threadIdx.x] = 1.0f;
}

extern "C" __global__ void k_sync_after_exit(const Args *__restrict__ e)
{
    if (threadIdx.x < 5)
        return;
    __syncthreads();
    e->out[threadIdx.x] = 1.0f;
}

extern "C" __global__ void k_divergent(const Args *__restrict__ e)
{
    float v = (float)threadIdx.x;
    if (threadIdx.x & 1)
        __syncthreads();
    else
        v = __shfl_xor_sync(0xffffffffu, v, 2);
    e->out[threadIdx.x] = v;
}

extern "C" __global__ void k_partial_warp(const Args *__restrict__ e)
{
    float v = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
    e->out[threadIdx.x] = v;
}

extern "C" __global__ void k_outside_mask(const Args *__restrict__ e)
{
    if (threadIdx.x < 16) {
        float v = __shfl_xor_sync(0x0000ffffu, (float)threadIdx.x, 16);
        e->out[threadIdx.x] = v;
    }
}

extern "C" __global__ void k_ok_after_bad(const Args *__restrict__ e) { e->out[threadIdx.x] = 2.0f; }

static void expect_error(int rc, const char *kernel, const char *needle)
{
    CHECK(rc == -1, "%s: expected an error, got rc %d", kernel, rc);
    CHECK(strstr(emu_last_error(), needle) != nullptr, "%s: message \"%s\" lacks \"%s\"", kernel,
          emu_last_error(), needle);
    printf("  %-22s -> %s\n", kernel, emu_last_error());
}

static void test_misuse()
{
    std::vector<float> out(256, 0.0f);
    double dd = 0;
    Args e{};
    e.out = out.data(), e.dout = &dd;
    expect_error(emu_launch(k_exit_while_waiting, dim3(2), dim3(128), &e, "k_exit_while_waiting", true),
                 "k_exit_while_waiting", "thread (100,0,0) exited while 100 other threads wait at __syncthreads");
    expect_error(emu_launch(k_sync_after_exit, dim3(1), dim3(64), &e, "k_sync_after_exit", true),
                 "k_sync_after_exit", "thread (5,0,0) reached __syncthreads after thread (0,0,0)");
    expect_error(emu_launch(k_divergent, dim3(1), dim3(64), &e, "k_divergent", true), "k_divergent", "deadlock");
    expect_error(emu_launch(k_partial_warp, dim3(1), dim3(48), &e, "k_partial_warp", true), "k_partial_warp",
                 "names lanes absent");
    expect_error(emu_launch(k_outside_mask, dim3(1), dim3(32), &e, "k_outside_mask", true), "k_outside_mask",
                 "outside mask");
    expect_error(emu_launch(k_ok_after_bad, dim3(1), dim3(2048), &e, "k_ok_after_bad", true), "k_ok_after_bad",
                 "invalid launch");
    /* the emulator is usable again after a reported error */
    int rc = emu_launch(k_ok_after_bad, dim3(1), dim3(256), &e, "k_ok_after_bad");
    CHECK(rc == 0 && out[255] == 2.0f, "launch after errors: rc %d, %s", rc, emu_last_error());
    rc = emu_launch(k_block_sum, dim3(1), dim3(256), &e, "k_block_sum"); /* n = 0: all zeros */
    CHECK(rc == 0 && out[0] == 0.0f, "barrier kernel after errors: rc %d, %s", rc, emu_last_error());
}

/* ---- 8. tensor cores: mma.sync m16n8k16 through rt_mma_bf16/fp16 --------
 * One warp loads A (16x16, row-major) and B (16x8, [k][n]) into fragments
 * as PTX ISA lays them out (g = lane / 4, t = lane % 4), multiplies and
 * stores D (16x8): against the plain product of the same rounded values.
 * m says which: 0 bf16, 1 fp16; e->k = 1 leaves lane 5 out (misuse). */
extern "C" __global__ void k_mma(const Args *__restrict__ e)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t2 = 2 * (lane & 3);
    const float *A = e->a, *B = e->b;
    auto pk = [e](float lo, float hi) { return e->m ? rt_pack_fp16x2(lo, hi) : rt_pack_bf16x2(lo, hi); };
    unsigned a[4] = {pk(A[g * 16 + t2], A[g * 16 + t2 + 1]), pk(A[(g + 8) * 16 + t2], A[(g + 8) * 16 + t2 + 1]),
                     pk(A[g * 16 + t2 + 8], A[g * 16 + t2 + 9]), pk(A[(g + 8) * 16 + t2 + 8], A[(g + 8) * 16 + t2 + 9])};
    unsigned b[2] = {pk(B[t2 * 8 + g], B[(t2 + 1) * 8 + g]), pk(B[(t2 + 8) * 8 + g], B[(t2 + 9) * 8 + g])};
    float d[4] = {1.0f, 1.0f, 1.0f, 1.0f};      /* C = 1: D = A B + C */
    if (e->k && lane == 5)
        return;
    if (e->m)
        rt_mma_fp16(d, a, b);
    else
        rt_mma_bf16(d, a, b);
    e->out[g * 8 + t2] = d[0], e->out[g * 8 + t2 + 1] = d[1];
    e->out[(g + 8) * 8 + t2] = d[2], e->out[(g + 8) * 8 + t2 + 1] = d[3];
}

/* a float rounded to the 16-bit type's grid, to nearest even (bf16: the
 * top half; fp16: 11 significant bits, for the normal range used here) */
static float to_grid(int fp16, float x)
{
    if (fp16)
        return (float)std::nearbyint(std::ldexp((double)x, 10 - std::ilogb(x))) * std::ldexp(1.0f, std::ilogb(x) - 10);
    unsigned u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void test_mma()
{
    for (int fp16 = 0; fp16 < 2; fp16++) {
        std::vector<float> A(256), B(128), D(128, NAN);
        for (auto &v : A)
            v = to_grid(fp16, frand());
        for (auto &v : B)
            v = to_grid(fp16, frand());
        Args e{};
        e.m = fp16, e.a = A.data(), e.b = B.data(), e.out = D.data();
        int rc = emu_launch(k_mma, dim3(1), dim3(64), &e, "k_mma");   /* two warps, each the whole product */
        double worst = 0;
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                double ref = 1;
                for (int k = 0; k < 16; k++)
                    ref += (double)A[i * 16 + k] * B[k * 8 + j];
                worst = fmax(worst, fabs(D[i * 8 + j] - ref) / fmax(1.0, fabs(ref)));
            }
        CHECK(rc == 0 && worst < 1e-6, "mma %s: rc %d, max rel diff %.3g (%s)", fp16 ? "fp16" : "bf16", rc, worst,
              emu_last_error());
        printf("  k_mma %s: 16x8x16 + C against the double product, max rel diff %.2g\n", fp16 ? "fp16" : "bf16", worst);
        e.k = 1;
        expect_error(emu_launch(k_mma, dim3(1), dim3(32), &e, "k_mma", true), "k_mma (lane 5 out)",
                     "wait for it at a warp operation");
    }
    /* fp16 packing: IEEE half encodings, round to nearest even */
    const struct { float x; unsigned h; } enc[] = {
        {1.0f, 0x3c00u}, {-2.0f, 0xc000u}, {0.1f, 0x2e66u}, {65504.0f, 0x7bffu}, {65519.0f, 0x7bffu},
        {65520.0f, 0x7c00u}, {5.9604644775390625e-8f, 0x0001u}, {2.98023223876953125e-8f, 0x0000u},
        {8.94069671630859375e-8f, 0x0002u}, {6.103515625e-5f, 0x0400u}};
    for (const auto &c : enc) {
        unsigned got = rt_pack_fp16x2(c.x, 0.0f) & 0xffffu;
        CHECK(got == c.h, "fp16 of %.9g: 0x%04x, expected 0x%04x", (double)c.x, got, c.h);
    }
    CHECK(rt_pack_bf16x2(1.0f, -2.0f) == 0xc0003f80u, "bf16 pair of 1, -2: 0x%08x", rt_pack_bf16x2(1.0f, -2.0f));
}

/* ---- 7. a missing barrier shows as a difference between the two orders -- */
extern "C" __global__ void k_racy(const Args *__restrict__ e)
{
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    /* __syncthreads() missing here */
    e->out[threadIdx.x] = s[(threadIdx.x + 1) & 63];
}

static void test_race_orders()
{
    std::vector<float> fwd(64), rev(64);
    Args e{};
    e.out = fwd.data();
    emu_set_reverse(false);
    CHECK(emu_launch(k_racy, dim3(1), dim3(64), &e, "k_racy") == 0, "%s", emu_last_error());
    e.out = rev.data();
    emu_set_reverse(true);
    CHECK(emu_launch(k_racy, dim3(1), dim3(64), &e, "k_racy") == 0, "%s", emu_last_error());
    emu_set_reverse(false);
    int differ = 0;
    for (int t = 0; t < 64; t++)
        differ += !(fwd[t] == rev[t]);
    CHECK(differ > 0, "a missing __syncthreads went unnoticed in both orders");
    printf("  k_racy: %d of 64 outputs differ between ascending and descending thread order\n", differ);
}

int main()
{
    for (int reverse = 0; reverse < 2; reverse++) {
        emu_set_reverse(reverse);
        test_block_sum();
        test_warp_rows();
        test_shfl_modes();
        test_matmul();
        test_early_and_ids();
        test_shared();
    }
    emu_set_reverse(false);
    test_misuse();
    test_race_orders();
    test_mma();
    printf("test_emu: %d checks, %d failed, %llu context switches\n", checks, failures, emu_switches());
    return failures != 0;
}
