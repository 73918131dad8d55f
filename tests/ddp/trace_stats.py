#!/usr/bin/python3
"""Reads a --trace file (Chrome trace events) of a cddpc program.

  trace_stats.py check-overlap TRACE   exit 1 unless, on every rank and in
      every step after the first, an all-reduce (tid 1) starts before the
      end of the step's last backward kernel (the comm thread overlaps
      backward instead of waiting for it)
  trace_stats.py stats TRACE           one line: ranks steps step_ms
      comm_ms hidden_share (the share of all-reduce time that ran while a
      backward kernel of the same step and rank was running)
  trace_stats.py validate TRACE        structure: fields, categories, tids
"""
import json
import statistics
import sys
from collections import defaultdict

CATS = {"data", "forward", "backward", "comm", "optimizer", "eval"}


def load(path):
    with open(path) as f:
        d = json.load(f)
    return [e for e in d["traceEvents"] if e.get("ph") == "X"], d


def by_rank_step(ev):
    out = defaultdict(lambda: defaultdict(list))
    for e in ev:
        if e["cat"] != "eval":
            out[e["pid"]][e["args"]["step"]].append(e)
    return out


def overlap(a0, a1, ivs):
    """Length of [a0, a1) covered by the union of intervals ivs."""
    tot, cur = 0.0, a0
    for s, t in sorted(ivs):
        s, t = max(s, cur), min(t, a1)
        if t > s:
            tot += t - s
            cur = t
    return tot


def validate(ev, d):
    assert ev, "no events"
    for e in ev:
        for k in ("name", "cat", "ts", "dur", "pid", "tid", "args"):
            assert k in e, (k, e)
        assert e["cat"] in CATS, e
        assert e["tid"] == (1 if e["cat"] == "comm" else 0), e
        assert e["dur"] >= 0 and e["ts"] >= 0, e
        assert isinstance(e["args"]["step"], int), e
        if e["cat"] == "comm":
            assert e["name"].startswith("allreduce bucket "), e
    ranks = sorted({e["pid"] for e in ev})
    assert ranks == list(range(len(ranks))), ranks
    assert d["otherData"]["ranks"] == len(ranks), d["otherData"]
    print("valid: %d events, %d ranks, categories %s" % (
        len(ev), len(ranks), ",".join(sorted({e["cat"] for e in ev}))))


def check_overlap(ev):
    rs = by_rank_step(ev)
    bad, checked = [], 0
    for pid, steps in sorted(rs.items()):
        for step, es in sorted(steps.items()):
            if step <= 1:
                continue
            bw = [e for e in es if e["cat"] == "backward"]
            ar = [e for e in es if e["cat"] == "comm"]
            if not bw:
                continue
            last_bw_end = max(e["ts"] + e["dur"] for e in bw)
            checked += 1
            if not any(e["ts"] < last_bw_end for e in ar):
                bad.append((pid, step))
    if checked == 0:
        print("no steps to check")
        return 1
    if bad:
        print("no all-reduce started before the last backward kernel ended in %d of %d "
              "rank-steps, e.g. (rank, step) %s" % (len(bad), checked, bad[:5]))
        return 1
    print("overlap: in all %d rank-steps after the first an all-reduce starts before "
          "backward ends" % checked)
    return 0


def stats(ev):
    rs = by_rank_step(ev)
    periods, comm, hidden = [], 0.0, 0.0
    for pid, steps in rs.items():
        order = sorted(steps)
        starts = {s: min(e["ts"] for e in steps[s] if e["tid"] == 0) for s in order}
        for a, b in zip(order, order[1:]):
            # consecutive steps of one epoch (an evaluation in between is
            # not step time); the first step warms caches up
            if b == a + 1 and a > 1:
                evals = [e for e in ev if e["pid"] == pid and e["cat"] == "eval"
                         and starts[a] < e["ts"] < starts[b]]
                if not evals:
                    periods.append(starts[b] - starts[a])
        for s in order:
            if s <= 1:
                continue
            bw = [(e["ts"], e["ts"] + e["dur"]) for e in steps[s] if e["cat"] == "backward"]
            for e in steps[s]:
                if e["cat"] == "comm":
                    comm += e["dur"]
                    hidden += overlap(e["ts"], e["ts"] + e["dur"], bw)
    nranks = len(rs)
    nsteps = max(len(s) for s in rs.values())
    step_ms = statistics.median(periods) / 1e3 if periods else float("nan")
    comm_ms = comm / 1e3 / max(1, sum(max(0, len(s) - 1) for s in rs.values()))
    share = hidden / comm if comm > 0 else float("nan")
    print("%d %d %.3f %.3f %.3f" % (nranks, nsteps, step_ms, comm_ms, share))
    return 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("check-overlap", "stats", "validate"):
        sys.exit(__doc__)
    ev, d = load(sys.argv[2])
    if sys.argv[1] == "validate":
        validate(ev, d)
        return 0
    return check_overlap(ev) if sys.argv[1] == "check-overlap" else stats(ev)


if __name__ == "__main__":
    sys.exit(main())
