#!/bin/bash
# bench/ddp.sh PROGRAM_KAGGLE [DATA]: data-parallel step time on CPU ranks.
# kaggle_mlp (3.7 M parameters, 2 gradient buckets: 2.0 MB ready before
# the last weight-gradient GEMM, 12.3 MB after it), --threads 1 per rank,
# on one machine over shared memory. Every configuration runs 3 times; the
# table shows the fastest (the machine may be shared). Read from --trace:
#   step ms    median time from one step's first kernel to the next's
#   img/s      global batch / step time
#   comm ms    all-reduce time per step (comm thread)
#   hidden     share of that time during which a backward kernel of the
#              same step was running on the main thread (overlap)
prog=${1:?usage: bench/ddp.sh PROGRAM_KAGGLE [DATA]}
data=${2:-data/mnist}
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
stats=$here/../tests/ddp/trace_stats.py
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
steps=30
base=

run() {     # ranks batch -> "ranks steps step_ms comm_ms hidden" of the fastest run
    local np=$1 batch=$2 best=
    for _ in 1 2 3; do
        if [ "$np" = 1 ]; then
            "$prog" --data "$data" --threads 1 --batch "$batch" --max-steps $steps --trace "$t/t.json" >/dev/null 2>&1
        else
            mpirun -np "$np" "$prog" --data "$data" --threads 1 --batch "$batch" --max-steps $steps \
                --trace "$t/t.json" >/dev/null 2>&1
        fi || { echo "run failed: $np ranks, batch $batch" >&2; exit 1; }
        line=$($PY "$stats" stats "$t/t.json")
        ms=$(echo "$line" | cut -d' ' -f3)
        if [ -z "$best" ] || $PY -c "import sys; sys.exit(not $ms < $(echo "$best" | cut -d' ' -f3))"; then
            best=$line
        fi
    done
    echo "$best"
}

printf '%-6s %-11s %-12s %8s %8s %8s %9s %8s\n' ranks batch/rank global-batch "step ms" "img/s" speedup "comm ms" hidden
for cfg in "1 128" "2 128" "2 64"; do
    set -- $cfg
    np=$1 batch=$2
    r=$(run "$np" "$batch")
    ms=$(echo "$r" | cut -d' ' -f3) comm=$(echo "$r" | cut -d' ' -f4) hid=$(echo "$r" | cut -d' ' -f5)
    gb=$((np * batch))
    ips=$($PY -c "print('%.0f' % ($gb / ($ms / 1e3)))")
    [ -z "$base" ] && base=$ips
    sp=$($PY -c "print('%.2f' % ($ips / $base))")
    if [ "$np" = 1 ]; then comm=- hid=-; else hid=$($PY -c "print('%.0f%%' % (100 * $hid))"); fi
    printf '%-6s %-11s %-12s %8s %8s %8s %9s %8s\n' "$np" "$batch" "$gb" "$ms" "$ips" "${sp}x" "$comm" "$hid"
done
echo "($(nproc) cores; $steps steps per run, step 1 excluded; Open MPI $(mpirun --version 2>/dev/null | head -n 1 | grep -o '[0-9.]*$'), btl self,vader, no binding)"
