/* dropout_stats.c: the statistics of dropout's mask stream, on the very
 * functions the kernels are emitted with (compiler/dropout_rng.h).
 *
 * For several p over a large tensor (2^22 elements, as one batch tensor's
 * counters 0..n-1): the kept fraction is within 4 sigma of 1 - p. Streams
 * that must be independent -- rank 0 vs 1, step s vs s + 1, one dropout
 * node vs the next, seed vs seed + 1 -- agree on an element about as often
 * as independent masks would (p^2 + (1-p)^2, within 4 sigma), so they are
 * neither equal nor complementary nor correlated; the same key gives the
 * same mask (what backward and --resume rely on). Exits 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "dropout_rng.h"

CDDP_DROP_RNG(static inline)

#define NELEM (1 << 22)

static int fails;

static void verdict(int ok, const char *fmt, double a, double b, double c)
{
    printf("%s ", ok ? "PASS" : "FAIL");
    printf(fmt, a, b, c);
    printf("\n");
    fails += !ok;
}

static int keep(unsigned long long key, long long i, float p) { return cddp_drop_u(key, i) >= p; }

/* kept fraction of one stream vs 1 - p */
static void check_rate(float p, unsigned long long seed, int rank, long long step, int node)
{
    unsigned long long key = cddp_drop_key(seed, rank, step, node);
    long long kept = 0;
    for (long long i = 0; i < NELEM; i++)
        kept += keep(key, i, p);
    double q = 1.0 - p, sigma = sqrt((double)NELEM * p * q), z = (kept - NELEM * q) / sigma;
    verdict(fabs(z) <= 4, "p=%.2f: kept fraction %.6f (expected %.6f, within 4 sigma)", p, (double)kept / NELEM, q);
    printf("     z = %.2f\n", z);
}

/* two streams agree on as many elements as independent masks would */
static void check_independent(const char *what, float p, unsigned long long ka, unsigned long long kb)
{
    long long agree = 0;
    for (long long i = 0; i < NELEM; i++)
        agree += keep(ka, i, p) == keep(kb, i, p);
    double e = (double)p * p + (1.0 - p) * (1.0 - p), sigma = sqrt((double)NELEM * e * (1 - e));
    double z = (agree - NELEM * e) / sigma;
    printf("%s %s: masks agree on %.6f of elements (independent: %.6f), z = %.2f\n", fabs(z) <= 4 ? "PASS" : "FAIL",
           what, (double)agree / NELEM, e, z);
    fails += !(fabs(z) <= 4);
}

int main(void)
{
    const unsigned long long seed = 3407;
    const float ps[] = {0.1f, 0.25f, 0.5f, 0.9f};
    for (int k = 0; k < 4; k++)
        check_rate(ps[k], seed, 0, 0, 0);
    check_rate(0.3f, 7, 3, 123456, 2);
    /* the uniform itself: mean 1/2 - 2^-25, variance about 1/12 */
    {
        unsigned long long key = cddp_drop_key(seed, 1, 5, 0);
        double s = 0, s2 = 0;
        for (long long i = 0; i < NELEM; i++) {
            double u = cddp_drop_u(key, i);
            s += u;
            s2 += u * u;
        }
        double mean = s / NELEM, var = s2 / NELEM - mean * mean, z = (mean - 0.5) / sqrt(1.0 / 12 / NELEM);
        verdict(fabs(z) <= 4 && fabs(var - 1.0 / 12) < 1e-3, "u: mean %.6f, variance %.6f (1/12 = %.6f)", mean, var,
                1.0 / 12);
    }
    unsigned long long base = cddp_drop_key(seed, 0, 10, 0);
    check_independent("rank 0 vs rank 1", 0.5f, base, cddp_drop_key(seed, 1, 10, 0));
    check_independent("step 10 vs step 11", 0.5f, base, cddp_drop_key(seed, 0, 11, 0));
    check_independent("dropout 0 vs dropout 1", 0.5f, base, cddp_drop_key(seed, 0, 10, 1));
    check_independent("seed vs seed + 1", 0.5f, base, cddp_drop_key(seed + 1, 0, 10, 0));
    check_independent("rank 1 step 0 vs rank 0 step 1", 0.3f, cddp_drop_key(seed, 1, 0, 0), cddp_drop_key(seed, 0, 1, 0));
    /* a sample's mask must not repeat in the next sample (counter = i * row + j) */
    {
        long long agree = 0, row = 784, n = NELEM / row * row;
        for (long long i = 0; i + row < n; i++)
            agree += keep(base, i, 0.5f) == keep(base, i + row, 0.5f);
        double z = (agree - (n - row) * 0.5) / sqrt((n - row) * 0.25);
        verdict(fabs(z) <= 4, "row r vs row r + 1 (784 wide): agree on %.6f (independent: %.1f), z = %.2f",
                (double)agree / (n - row), 0.5, z);
    }
    /* determinism: the same key, computed again, gives the same mask */
    {
        unsigned long long again = cddp_drop_key(seed, 0, 10, 0);
        long long same = 0;
        for (long long i = 0; i < 4096; i++)
            same += cddp_drop_u(base, i) == cddp_drop_u(again, i);
        verdict(same == 4096, "same (seed, rank, step, node): %.0f of %.0f elements equal%.0s", (double)same, 4096.0,
                0.0);
    }
    if (fails)
        printf("%d dropout statistics checks failed\n", fails);
    return fails != 0;
}
