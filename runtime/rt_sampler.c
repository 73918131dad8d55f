/* rt_sampler.c: which samples each rank trains on, epoch by epoch.
 *
 * torch.utils.data.distributed.DistributedSampler's arithmetic, over the
 * runtime's own epoch order:
 *   order   the rt_shuffle permutation of (seed, epoch) that single-rank
 *           training uses, or file order with --shuffle off;
 *   total   ceil(N / W) * W: the order padded by wrapping around
 *           (order[i mod N]), so every rank gets as many samples; with
 *           --drop-last floor(N / W) * W: the tail is cut instead;
 *   shard   rank r takes order[r], order[r + W], order[r + 2W], ...
 * With one rank the shard is the order itself, so single-rank runs are
 * unchanged. Equal shard sizes on every rank mean every rank takes the
 * same number of steps, which the gradient all-reduces rely on. */
#include "rt_internal.h"
#include <string.h>

int rt_sampler_init(rt_sampler *s, int64_t n, int rank, int world, int shuffle, int drop_last,
                    uint64_t seed)
{
    memset(s, 0, sizeof *s);
    if (n < 0 || n > INT32_MAX || world < 1 || rank < 0 || rank >= world) {
        rt_err("sampler: %lld samples for rank %d of %d is out of range", (long long)n, rank,
               world);
        return -1;
    }
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->seed = seed;
    s->per_rank = drop_last ? n / world : (n + world - 1) / world;
    s->total = s->per_rank * world;
    s->pad = s->total > n ? s->total - n : 0;
    if (!(s->order = rt_alloc((size_t)n * sizeof(int32_t), "sample order")) ||
        !(s->shard = rt_alloc((size_t)s->per_rank * sizeof(int32_t), "sample shard"))) {
        rt_sampler_free(s);
        return -1;
    }
    return 0;
}

void rt_sampler_set_epoch(rt_sampler *s, uint64_t epoch)
{
    if (s->shuffle)
        rt_shuffle(s->order, s->n, s->seed, epoch);
    else
        for (int64_t i = 0; i < s->n; i++)
            s->order[i] = (int32_t)i;
    /* Position p of the padded (or cut) order is order[p mod N]; rank r's
     * j-th sample sits at position r + j*W. Positions beyond N only exist
     * with padding, and then N > 0. */
    for (int64_t j = 0; j < s->per_rank; j++) {
        int64_t p = s->rank + j * s->world;
        s->shard[j] = s->order[p < s->n ? p : p % s->n];
    }
}

void rt_sampler_free(rt_sampler *s)
{
    rt_free(s->order);
    rt_free(s->shard);
    s->order = s->shard = NULL;
}
