/* tests/cuda/kc_act16.c: the CUDA kernels' act arena against the C
 * kernels', where precision bf16|fp16 stores activations as 16 bits.
 *
 * The C kernels hold every act value as a float: element e of a buffer at
 * float e of its slot. The CUDA kernels hold a buffer flagged RT_ACT_16
 * (rt_cuda_launch.acts) as 16-bit values: element e at byte 2e of the
 * same slot, the first n rows of a batch of n. The checker keeps its
 * states in the C layout and translates around the backend's run of
 * kernels [k0, k1):
 *   - put: each 16-bit buffer the run touches is packed (its n rows),
 *     unless a buffer the run touched earlier shares its slot (then the
 *     slot holds that one's values when the run starts: the 16-bit one is
 *     written before it is read). Packing is exact for the C state made
 *     canonical (kc_act16_canon: every such value as its 16 bits read);
 *   - get: a 16-bit buffer's n rows are unpacked where it is the last
 *     buffer of the run to hold values there; anything else is judged as
 *     it comes back. Between the packed
 *     values and the rows' end (floats [n*row/2, n*row) of the slot) the
 *     kernels must write nothing: a store past the rows is caught there.
 *     A 16-bit buffer another buffer later overwrote in part (the whole
 *     plan, where slots are reused) has no C-layout counterpart left: its
 *     values are taken from the C result and counted as not compared.
 * The C side is held to the rule that makes 16 bits exact (the compiler's
 * mem_rounded): every value a C kernel stores in a 16-bit buffer must be
 * exact in 16 bits (kc_act16_check_c).
 *
 * The conversions are written from the formats' definitions (ldexp), not
 * from the kernels' bit tricks, so that those are checked too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_core.h"

static uint16_t enc_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x))
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)(u >> 16);     /* exact for a bf16 value; a canonical one otherwise */
}

static float dec_bf16(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* IEEE half, round to nearest even (exact for a half value) */
static uint16_t enc_fp16(float x)
{
    const uint16_t s = signbit(x) ? 0x8000u : 0;
    const float a = fabsf(x);
    if (isnan(x))
        return 0x7e00u;
    if (a >= 65520.0f)
        return s | 0x7c00u;
    if (a < 0x1p-14f)                                   /* subnormal: q * 2^-24 */
        return s | (uint16_t)lrintf(a * 0x1p24f);
    int ex;
    const float f = frexpf(a, &ex);                     /* a = f 2^ex, f in [0.5, 1) */
    const long mant = lrintf((2.0f * f - 1.0f) * 1024.0f);    /* may carry into the exponent */
    return s | (uint16_t)(((long)(ex - 1 + 15) << 10) + mant);
}

static float dec_fp16(uint16_t h)
{
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const float s = (h & 0x8000u) ? -1.0f : 1.0f;
    if (e == 0)
        return s * ldexpf((float)m, -24);
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return s * ldexpf(1.0f + (float)m / 1024.0f, e - 15);
}

static uint16_t enc(int prec, float x) { return prec == RT_PREC_FP16 ? enc_fp16(x) : enc_bf16(x); }
static float dec(int prec, uint16_t h) { return prec == RT_PREC_FP16 ? dec_fp16(h) : dec_bf16(h); }

/* One buffer the run touches: its slot [base, base + cap) in act floats,
 * its n rows [base, base + live), the kernels that touch it first and last */
typedef struct region {
    int64_t base, cap, live;
    int h16, first, last;
} region;

/* The buffers kernels [k0, k1) of p touch, each once, in order of first
 * touch; NULL (*nr = 0) when none of them is 16-bit. */
static region *regions(const rt_plan *p, int k0, int k1, int64_t nmax, int64_t n, int *nr)
{
    int cap = 0, any = 0;
    for (int k = k0; k < k1; k++)
        cap += p->cu[k].nacts;
    region *r = calloc((size_t)(cap ? cap : 1), sizeof *r);
    *nr = 0;
    if (!r) {
        fprintf(stderr, "kernel_check: out of memory\n");
        exit(1);
    }
    for (int k = k0; k < k1; k++)
        for (int j = 0; j < p->cu[k].nacts; j++) {
            const int64_t *a = p->cu[k].acts + RT_ACT_FIELDS * j;
            const region x = {a[0] * nmax, a[1] * nmax, n * a[2], (a[3] & RT_ACT_16) != 0, k, k};
            int at = 0;
            while (at < *nr && !(r[at].base == x.base && r[at].cap == x.cap && r[at].live == x.live &&
                                 r[at].h16 == x.h16))
                at++;
            if (at == *nr)
                r[(*nr)++] = x;
            r[at].last = k;
            any |= x.h16;
        }
    if (!any) {
        free(r);
        *nr = 0;
        return NULL;
    }
    return r;
}

static int overlap(const region *a, const region *b)
{
    return a != b && a->base < b->base + b->cap && b->base < a->base + a->cap;
}

/* whether a 16-bit buffer's values are in its slot when the run starts */
static int packed_at_put(const region *r, int nr, int i)
{
    for (int j = 0; j < nr; j++)
        if (overlap(&r[i], &r[j]) && r[j].first < r[i].first)
            return 0;
    return 1;
}

int kc_act16_any(const rt_plan *p, int k0, int k1)
{
    for (int k = k0; k < k1; k++)
        for (int j = 0; j < p->cu[k].nacts; j++)
            if (p->cu[k].acts[RT_ACT_FIELDS * j + 3] & RT_ACT_16)
                return 1;
    return 0;
}

void kc_act16_canon(const rt_plan *p, int k0, int k1, float *act, int64_t nmax, int64_t n, int prec)
{
    int nr;
    region *r = regions(p, k0, k1, nmax, n, &nr);
    for (int i = 0; i < nr; i++)
        if (r[i].h16 && packed_at_put(r, nr, i))
            for (int64_t e = 0; e < r[i].live; e++)
                act[r[i].base + e] = dec(prec, enc(prec, act[r[i].base + e]));
    free(r);
}

void kc_act16_put(const rt_plan *p, int k0, int k1, float *act, int64_t nmax, int64_t n, int prec)
{
    int nr;
    region *r = regions(p, k0, k1, nmax, n, &nr);
    for (int i = 0; i < nr; i++) {
        if (!r[i].h16 || !packed_at_put(r, nr, i))
            continue;
        uint16_t *h = (uint16_t *)(act + r[i].base);
        for (int64_t e = 0; e < r[i].live; e++)     /* ascending: 16-bit e lies at or below float e */
            h[e] = enc(prec, act[r[i].base + e]);
    }
    free(r);
}

int64_t kc_act16_get(const rt_plan *p, int k0, int k1, float *act, const float *put, const float *ref, int64_t total,
                     int64_t nmax, int64_t n, int prec, int64_t *uncompared, char *why, size_t wlen)
{
    int nr;
    region *r = regions(p, k0, k1, nmax, n, &nr);
    if (!r)
        return 0;
    /* The run's last buffer to hold values in act float f: in the C
     * layout, owner[f] (a buffer's n rows); in the backend's, dev[f] (a
     * 16-bit buffer's packed values, half as many floats) */
    int *owner = malloc(sizeof(int) * (size_t)(total ? total : 1));
    int *devown = malloc(sizeof(int) * (size_t)(total ? total : 1));
    float *dev = malloc(sizeof(float) * (size_t)(total ? total : 1));
    if (!owner || !devown || !dev) {
        fprintf(stderr, "kernel_check: out of memory\n");
        exit(1);
    }
    memcpy(dev, act, sizeof(float) * (size_t)total);
    for (int64_t f = 0; f < total; f++)
        owner[f] = devown[f] = -1;
    for (int k = k0; k < k1; k++)
        for (int i = 0; i < nr; i++)
            if (r[i].last == k) {
                const int64_t packed = r[i].h16 ? (r[i].live + 1) / 2 : r[i].live;
                for (int64_t f = r[i].base; f < r[i].base + r[i].live && f < total; f++)
                    owner[f] = i;
                for (int64_t f = r[i].base; f < r[i].base + packed && f < total; f++)
                    devown[f] = i;
            }
    int64_t stray = 0;
    for (int i = 0; i < nr; i++) {
        if (!r[i].h16)
            continue;
        const region *x = &r[i];
        const uint16_t *h = (const uint16_t *)(dev + x->base);
        int alone = 1;
        for (int j = 0; j < nr; j++)
            alone &= !overlap(x, &r[j]);
        /* past the packed values, up to the rows' end: as put */
        for (int64_t f = x->base + (x->live + 1) / 2; alone && f < x->base + x->live; f++)
            if (memcmp(&dev[f], &put[f], 4)) {
                if (!stray++)
                    snprintf(why, wlen, "act[%lld], past the %lld 16-bit values of the buffer at act[%lld], changed",
                             (long long)f, (long long)x->live, (long long)x->base);
            }
        for (int64_t e = 0; e < x->live; e++) {
            const int64_t f = x->base + e;
            if (owner[f] != i)
                continue;
            if (devown[x->base + e / 2] == i) {
                act[f] = dec(prec, h[e]);
            } else {
                act[f] = ref ? ref[f] : NAN;
                ++*uncompared;
            }
        }
    }
    free(owner);
    free(devown);
    free(dev);
    free(r);
    return stray;
}

int64_t kc_act16_check_c(const rt_plan *p, int k, const float *act, int64_t nmax, int64_t n, int prec, char *why,
                         size_t wlen)
{
    int64_t bad = 0;
    for (int j = 0; j < p->cu[k].nacts; j++) {
        const int64_t *a = p->cu[k].acts + RT_ACT_FIELDS * j;
        if (!(a[3] & RT_ACT_16) || !(a[3] & RT_ACT_WRITE))
            continue;
        for (int64_t e = 0; e < n * a[2]; e++) {
            const float v = act[a[0] * nmax + e], back = dec(prec, enc(prec, v));
            if (memcmp(&v, &back, 4) && !(isnan(v) && isnan(back)) && !bad++)
                snprintf(why, wlen, "it stores %.9g at act[%lld] (element %lld of the 16-bit buffer at act[%lld]), "
                         "which is not a %s value", (double)v, (long long)(a[0] * nmax + e), (long long)e,
                         (long long)(a[0] * nmax), prec == RT_PREC_FP16 ? "fp16" : "bf16");
        }
    }
    return bad;
}
