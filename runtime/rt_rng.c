/* rt_rng.c: deterministic random numbers for initialization and shuffling.
 *
 * xoshiro256** seeded through splitmix64 (the seeding its authors
 * recommend). Every consumer gets its own stream derived from (seed,
 * stream), so the numbers one parameter or one epoch sees do not depend on
 * how many numbers anything else drew: reordering parameters or resuming
 * at epoch k reproduces the same values. */
#include "rt_internal.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rt_rng_init(rt_rng *r, uint64_t seed, uint64_t stream)
{
    /* Mix the stream through splitmix first so that nearby (seed, stream)
     * pairs such as (1, 2) and (2, 1) give unrelated states. */
    uint64_t t = stream;
    uint64_t x = seed ^ splitmix64(&t);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    /* xoshiro must not start from the all-zero state. */
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        r->s[0] = 1;
}

uint64_t rt_rng_next(rt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rt_rng_uniform(rt_rng *r)
{
    return (double)(rt_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t rt_rng_below(rt_rng *r, uint64_t bound)
{
    /* Rejection on the low end keeps every value equally likely (a plain
     * modulo favours small values when bound does not divide 2^64). */
    if (bound <= 1)
        return 0;
    uint64_t threshold = (0 - bound) % bound;   /* 2^64 mod bound */
    for (;;) {
        uint64_t x = rt_rng_next(r);
        if (x >= threshold)
            return x % bound;
    }
}

uint64_t rt_hash_str(const char *s)
{
    uint64_t h = 0xCBF29CE484222325ull;          /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

void rt_shuffle(int32_t *a, int64_t n, uint64_t seed, uint64_t epoch)
{
    /* Start from the identity each epoch so the order of epoch e depends
     * only on (seed, e), not on the epochs before it. */
    for (int64_t i = 0; i < n; i++)
        a[i] = (int32_t)i;
    rt_rng r;
    rt_rng_init(&r, seed, 0x53485546464C4500ull ^ epoch);    /* "SHUFFLE" */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rt_rng_below(&r, (uint64_t)i + 1);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
