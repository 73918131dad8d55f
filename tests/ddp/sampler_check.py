#!/usr/bin/python3
"""rt_sampler against torch.utils.data.distributed.DistributedSampler.

  sampler_check.py TEST_SAMPLER

For each case (N, W, drop_last) and shuffle on/off, runs TEST_SAMPLER and
checks, per epoch:
  - each rank's shard is exactly what DistributedSampler(shuffle=False)
    yields for that rank, mapped through the epoch's order (torch shuffles
    with its own generator; the arithmetic -- padding by wrapping, drop_last
    trimming, rank::world interleave -- is what must match);
  - without drop_last the shards cover every sample, each exactly once
    except the `pad` padded ones (total - N), which are the first samples
    of the order repeated; with drop_last they are disjoint and cover
    floor(N/W)*W samples;
  - with shuffle on, the order changes from epoch to epoch (set_epoch) and
    is a permutation; with shuffle off it is file order.
"""
import subprocess
import sys
from collections import Counter

from torch.utils.data.distributed import DistributedSampler

CASES = [(10, 3), (10, 4), (7, 2), (3, 4), (1, 3), (12, 4), (101, 8), (8000, 2), (2000, 3)]
SEED, EPOCHS = 3407, 3


def run(binary, n, w, shuffle, drop):
    out = subprocess.run([binary, str(n), str(w), str(shuffle), str(drop), str(SEED), str(EPOCHS)],
                         check=True, capture_output=True, text=True).stdout
    orders, shards = {}, {}
    for line in out.splitlines():
        f = line.split()
        if f[0] == "order":
            orders[int(f[1])] = [int(x) for x in f[2:]]
        else:
            e, r, per, pad = map(int, f[1:5])
            shards[e, r] = (per, pad, [int(x) for x in f[5:]])
    return orders, shards


def check(binary, n, w, shuffle, drop):
    orders, shards = run(binary, n, w, shuffle, drop)
    name = "N=%d W=%d shuffle=%d drop_last=%d" % (n, w, shuffle, drop)
    for e in range(1, EPOCHS + 1):
        order = orders[e]
        assert sorted(order) == list(range(n)), name + ": order is not a permutation"
        if not shuffle:
            assert order == list(range(n)), name + ": shuffle off must keep file order"
        got_all = []
        for r in range(w):
            ds = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=False,
                                    drop_last=bool(drop))
            want = [order[p] for p in ds]
            per, pad, got = shards[e, r]
            assert got == want, "%s epoch %d rank %d: %s != torch's %s" % (name, e, r, got[:8],
                                                                         want[:8])
            assert per == len(ds) == ds.num_samples, name
            assert pad == max(0, ds.total_size - n), name
            got_all += got
        c = Counter(got_all)
        if drop:
            assert len(got_all) == n // w * w and all(v == 1 for v in c.values()), \
                name + ": drop_last shards must be disjoint"
        else:
            total = -(-n // w) * w
            assert len(got_all) == total, name
            assert set(c) == set(range(n)), name + ": shards must cover every sample"
            extra = sum(v - 1 for v in c.values())
            assert extra == total - n, name + ": padding count"
            # the repeated samples are the first ones of the order
            rep = Counter({k: v - 1 for k, v in c.items() if v > 1})
            want_rep = Counter(order[i % n] for i in range(total - n)) if n else Counter()
            assert rep == want_rep, name + ": padding must wrap the order around"
    if shuffle and n > 2:
        assert orders[1] != orders[2] != orders[3], name + ": set_epoch must reshuffle"
    return name


def main():
    binary = sys.argv[1]
    n_cases = 0
    for n, w in CASES:
        for shuffle in (0, 1):
            for drop in (0, 1):
                check(binary, n, w, shuffle, drop)
                n_cases += 1
    print("sampler: %d cases match DistributedSampler (padding, drop_last, interleave, "
          "set_epoch)" % n_cases)


if __name__ == "__main__":
    main()
