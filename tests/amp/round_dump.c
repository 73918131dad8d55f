/* round_dump.c: the mixed-precision rounding helpers of cddprt.h on many
 * floats, for round_check.py to compare with PyTorch's
 * tensor.to(torch.bfloat16 / torch.float16).float().
 *
 * Writes to stdout, little-endian uint32 triples: x, bf16(x), fp16(x).
 * The values: hand-picked edges (ties at both precisions, the fp16
 * overflow threshold 65504..65520, the fp16 subnormal range and its
 * ties, float subnormals, zeros, infinities, NaN), every float whose
 * low 16 bits sit at a rounding edge, and random bit patterns. */
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "cddprt.h"

static void put(uint32_t u)
{
    float x, r[2];
    memcpy(&x, &u, 4);
    r[0] = rt_round_bf16(x);
    r[1] = rt_round_fp16(x);
    uint32_t out[3] = {u, 0, 0};
    memcpy(&out[1], &r[0], 4);
    memcpy(&out[2], &r[1], 4);
    fwrite(out, 4, 3, stdout);
}

static void putf(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    put(u);
    put(u ^ 0x80000000u);
}

int main(void)
{
    static const float edges[] = {0.0f, 1.0f, 65504.0f, 65505.0f, 65519.0f, 65519.996f, 65520.0f, 65536.0f,
                                  1e10f, 6.103515625e-05f /* 2^-14 */, 6.0975552e-05f, 5.9604645e-08f /* 2^-24 */,
                                  2.9802322e-08f /* 2^-25: tie to 0 */, 2.9802326e-08f, 8.940697e-08f /* 1.5 ulp */,
                                  1.1920929e-07f /* 2 ulp */, 1.4901161e-07f /* 2.5 ulp: tie to 2 */,
                                  1e-45f, 1.1754942e-38f, 1.17549435e-38f, 3.4028235e38f, 3.3961776e38f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        putf(edges[i]);
    put(0x7f800000u);   /* inf */
    put(0xff800000u);
    put(0x7fc00000u);   /* NaN */
    /* ties and their neighbours at bf16 (16 dropped bits) and normal fp16
     * (13 dropped bits), for many exponents */
    for (uint32_t e = 0; e < 255; e++)
        for (uint32_t m = 0; m < 8; m++) {
            uint32_t base = (e << 23) | (m << 17);
            put(base | 0x8000u);
            put(base | 0x8001u);
            put(base | 0x7fffu);
            put(base | 0x18000u);
            put(base | 0x1000u);
            put(base | 0x1001u);
            put(base | 0x0fffu);
            put(base | 0x3000u);
            put((base | 0x1000u) ^ 0x80000000u);
        }
    /* the whole fp16 subnormal range's ties: k * 2^-25 for odd and even k */
    for (uint32_t k = 0; k < 4096; k++)
        putf((float)k * 2.98023223876953125e-08f);
    uint64_t s = 0x9e3779b97f4a7c15ull;     /* xorshift: random bit patterns */
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        put((uint32_t)s);
    }
    return 0;
}
