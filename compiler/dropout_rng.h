/* dropout_rng.h: dropout's random stream, the one definition of it.
 *
 * Why counter-based: a kernel element computes its own random number from
 * (key, index) alone, so there is no generator state to store, advance,
 * checkpoint or split between threads; any thread order, any fusion, the
 * C and the CUDA backend and a resumed run (--resume) all see the same
 * mask, and backward regenerates forward's mask instead of reading a mask
 * buffer.
 *
 * The stream of one dropout node in one step is keyed by (seed, rank,
 * step, node key): each is mixed in with splitmix64's finalizer, so ranks
 * and steps get unrelated streams. Element idx (row i * row_elems + j of
 * the batch tensor) is the counter: key + idx * golden ratio, finalized
 * twice. u = (top 24 bits) * 2^-24 is exact in float on every target, and
 * the element is kept when u >= p (p rounded to float).
 *
 * The noise functions of forward (torch.rand_like, torch.randn_like,
 * torch.randn) take the same streams, keyed by their call site's ordinal
 * among the dropouts and noises: rand's element idx is u(idx); randn's is
 * Box-Muller's sqrt(-2 log(1 - u(2 idx))) cos(2 pi u(2 idx + 1)) in float
 * (1 - u in (0, 1]: the log is finite).
 *
 * The text is a macro so that the compiler emits it verbatim (stringified:
 * CDDP_DROP_RNG_TEXT) into the C kernels' prelude (static inline) and the
 * CUDA prelude (__device__ __forceinline__), and the tests compile the very
 * same code (CDDP_DROP_RNG(static inline)).
 * Integer arithmetic only: unsigned long long is 64 bits on both targets. */
#ifndef CDDP_DROPOUT_RNG_H
#define CDDP_DROPOUT_RNG_H

#define CDDP_DROP_RNG(Q)                                                                             \
    Q unsigned long long cddp_mix64(unsigned long long z)                                            \
    {                                                                                                \
        z ^= z >> 30;                                                                                \
        z *= 0xbf58476d1ce4e5b9ULL;                                                                  \
        z ^= z >> 27;                                                                                \
        z *= 0x94d049bb133111ebULL;                                                                  \
        return z ^ (z >> 31);                                                                        \
    }                                                                                                \
    Q unsigned long long cddp_drop_key(unsigned long long seed, int rank, long long step, int node)  \
    {                                                                                                \
        unsigned long long h = cddp_mix64(seed ^ 0x6a09e667f3bcc909ULL);                             \
        h = cddp_mix64(h ^ (unsigned long long)(unsigned)rank);                                      \
        h = cddp_mix64(h ^ (unsigned long long)step);                                                \
        return cddp_mix64(h ^ (unsigned long long)(unsigned)node);                                   \
    }                                                                                                \
    Q float cddp_drop_u(unsigned long long key, long long idx)                                      \
    {                                                                                                \
        unsigned long long x = cddp_mix64(cddp_mix64(key + (unsigned long long)idx * 0x9e3779b97f4a7c15ULL)); \
        return (float)(unsigned)(x >> 40) * 5.9604644775390625e-8f;                                  \
    }                                                                                                \
    Q float cddp_randn(unsigned long long key, long long idx)                                        \
    {                                                                                                \
        float u1 = cddp_drop_u(key, 2 * idx), u2 = cddp_drop_u(key, 2 * idx + 1);                    \
        return sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530717958647692f * u2);                  \
    }

#define CDDP_STR_(...) #__VA_ARGS__
#define CDDP_STR(...) CDDP_STR_(__VA_ARGS__)
/* The functions as one line of source text (a string literal), qualified by Q. */
#define CDDP_DROP_RNG_TEXT(Q) CDDP_STR(CDDP_DROP_RNG(Q))

#endif
