#!/bin/bash
# tests/amp/ddp_amp.sh PROGRAM_FP16 DATA: on 2 CPU ranks an overflow on
# ONE rank makes BOTH skip the step (found_inf is reduced across ranks).
# The overflow is forced by the runtime's test hook
# CDDP_TEST_FOUND_INF=RANK:STEP (rt_amp.c), set after the gradient
# all-reduce so only the found_inf reduction can tell the other rank.
#   - forced on rank 1 at step 3: rank 0's step log says found_inf 1 at
#     step 3, and rank 0's weights after 3 steps equal those after 2
#   - forced on rank 1 vs forced on rank 0, 6 steps: identical final
#     weights. Were the ranks to disagree, one rank would update at step 3
#     and the other not, and the runs would differ from then on.
# Skipped (exit 77) without mpirun or an MPI build.
. "$(dirname "$0")/../skip.sh"
prog=$1 data=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
ok() { echo "PASS $1"; }
no() { echo "FAIL $1"; fails=$((fails + 1)); }
if ! command -v mpirun >/dev/null 2>&1 || ! strings "$prog" | grep -q MPI_Init_thread; then
    skip_all "ddp-amp: no mpirun or no MPI build"
fi
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {     # run NAME HOOK STEPS [ARGS]: 2 ranks
    local name=$1 hook=$2 steps=$3
    shift 3
    mpirun -np 2 -x CDDP_TEST_FOUND_INF="$hook" "$prog" --data "$data" --threads 1 --epochs 1 --batch 32 \
        --max-steps "$steps" --save "$t/$name.st" "$@" >"$t/$name.out" 2>&1 ||
        { no "$name: exit status"; tail -20 "$t/$name.out"; }
}
run r1_2 1:3 2
run r1_3 1:3 3 --step-log "$t/r1.csv"
run r1_6 1:3 6
run r0_6 0:3 6
if [ "$(sed -n 4p "$t/r1.csv" | cut -d, -f5)" = 1 ] && [ "$(cut -d, -f5 "$t/r1.csv" | grep -c '^1$')" = 1 ]; then
    ok "rank 1's overflow at step 3 is rank 0's found_inf at step 3 (and only there)"
else no "found_inf at step 3 on rank 0"; cat "$t/r1.csv"; fi
if cmp -s "$t/r1_2.st" "$t/r1_3.st"; then ok "rank 0 skipped step 3: weights after 3 steps == after 2"
else no "rank 0 did not skip step 3"; fi
if cmp -s "$t/r1_6.st" "$t/r0_6.st" && ! cmp -s "$t/r1_3.st" "$t/r1_6.st"; then
    ok "overflow on rank 1 or on rank 0: the same 6-step weights (both ranks skipped together)"
else no "overflow on rank 1 vs rank 0: weights differ"; fi
if grep -q 'skipped 1 steps' "$t/r1_6.out"; then ok "epoch output: skipped 1 steps"
else no "epoch output"; cat "$t/r1_6.out"; fi
exit $((fails > 0))
