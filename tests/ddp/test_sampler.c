/* tests/ddp/test_sampler.c: rt_sampler's shards, printed for an oracle.
 *
 *   test_sampler N W SHUFFLE DROP_LAST SEED EPOCHS
 * prints, for each epoch e (1-based) the epoch order, then each rank's
 * shard:
 *   order E i0 i1 ...
 *   shard E R per_rank pad i0 i1 ...
 * tests/ddp/sampler_check.py compares them with torch's DistributedSampler
 * and checks coverage and the per-epoch reshuffle. The order is also
 * checked here against rt_shuffle (what single-rank training uses). */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s N W SHUFFLE DROP_LAST SEED EPOCHS\n", argv[0]);
        return 2;
    }
    int64_t n = atoll(argv[1]);
    int W = atoi(argv[2]), shuffle = atoi(argv[3]), drop = atoi(argv[4]);
    uint64_t seed = strtoull(argv[5], NULL, 10);
    int epochs = atoi(argv[6]);
    int32_t *ref = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    rt_sampler *s = calloc((size_t)W, sizeof *s);
    if (!ref || !s)
        return 1;
    for (int r = 0; r < W; r++)
        if (rt_sampler_init(&s[r], n, r, W, shuffle, drop, seed) != 0)
            return 1;
    int bad = 0;
    for (int e = 1; e <= epochs; e++) {
        if (shuffle)
            rt_shuffle(ref, n, seed, (uint64_t)e);
        else
            for (int64_t i = 0; i < n; i++)
                ref[i] = (int32_t)i;
        for (int r = 0; r < W; r++) {
            rt_sampler_set_epoch(&s[r], (uint64_t)e);
            if (n && memcmp(s[r].order, ref, (size_t)n * sizeof(int32_t)) != 0) {
                fprintf(stderr, "epoch %d rank %d: order is not rt_shuffle's\n", e, r);
                bad = 1;
            }
        }
        printf("order %d", e);
        for (int64_t i = 0; i < n; i++)
            printf(" %d", ref[i]);
        printf("\n");
        for (int r = 0; r < W; r++) {
            printf("shard %d %d %lld %lld", e, r, (long long)s[r].per_rank, (long long)s[r].pad);
            for (int64_t j = 0; j < s[r].per_rank; j++)
                printf(" %d", s[r].shard[j]);
            printf("\n");
        }
    }
    for (int r = 0; r < W; r++)
        rt_sampler_free(&s[r]);
    free(s);
    free(ref);
    return bad;
}
