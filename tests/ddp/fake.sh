#!/bin/bash
# tests/ddp/fake.sh FAKE_MODEL DATA: data-parallel training of the
# hand-written fake model (tests/runtime/rt_fake_model.c), which has no bucket
# table (the reducer reduces the whole slab before its optimizer kernel),
# momentum SGD and its own kernels; and the runtime built without MPI
# (CDDP_NO_MPI, as on the GPU machines): single-rank, warning-free, and
# refusing to start as one of several ranks.
. "$(dirname "$0")/../skip.sh"
fake=$1 data=$2
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
fails=0 passes=0
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
ok() { echo "PASS $1"; passes=$((passes + 1)); }
no() { echo "FAIL $1"; fails=$((fails + 1)); }
show() { sed 's/^/      /' "$1" | tail -n 30; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
have_mpi=0
command -v mpirun >/dev/null 2>&1 && strings "$fake" | grep -q MPI_Init_thread && have_mpi=1

if [ $have_mpi = 1 ]; then
    common="--data $data --threads 1 --max-steps 60 --shuffle on"
    "$fake" $common --batch 64 --save "$t/w1.st" --step-log "$t/s1.csv" --metrics "$t/m1.csv" \
        >"$t/one.out" 2>&1 || { no "fake model, 1 rank"; show "$t/one.out"; }
    mpirun -np 2 "$fake" $common --batch 32 --save "$t/w2.st" --step-log "$t/s2.csv" \
        --metrics "$t/m2.csv" >"$t/two.out" 2>&1 || { no "fake model, 2 ranks"; show "$t/two.out"; }
    if $PY "$here/compare.py" "$t/w1.st" "$t/w2.st" "$t/s1.csv" "$t/s2.csv" "$t/m1.csv" "$t/m2.csv" 1e-5 \
        >"$t/cmp.out" 2>&1; then
        ok "fake model (no bucket table, momentum): 2 x 32 == 1 x 64: $(cat "$t/cmp.out")"
    else no "fake model 2 x 32 == 1 x 64"; show "$t/cmp.out"; fi
else
    skip_part "the multi-rank part (no mpirun or no MPI in $fake)"
fi

# ---- the runtime without MPI --------------------------------------------------------
mkdir -p "$t/obj"
cf="-std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -fopenmp -DCDDP_NO_MPI -DCDDP_NO_DNNL -Iruntime"
built=1
for f in runtime/rt_*.c; do
    ${CC:-cc} $cf -c "$f" -o "$t/obj/$(basename "${f%.c}").o" 2>>"$t/cc.out" || built=0
done
if [ $built = 1 ] && ar rcs "$t/lib.a" "$t/obj"/*.o &&
    ${CC:-cc} $cf tests/runtime/rt_fake_model.c "$t/lib.a" -lopenblas -lz -lm -lpthread -ldl -o "$t/fake" 2>>"$t/cc.out"; then
    ok "runtime builds warning-free with CDDP_NO_MPI"
else no "runtime builds with CDDP_NO_MPI"; show "$t/cc.out"; exit 1; fi
if nm "$t/fake" | grep -q ' U MPI_'; then no "CDDP_NO_MPI build references MPI"; else ok "CDDP_NO_MPI build makes no MPI call"; fi
if "$t/fake" --data "$data" --threads 1 --max-steps 5 >"$t/n1.out" 2>&1 && grep -q '^epoch 1/' "$t/n1.out"; then
    ok "CDDP_NO_MPI build trains on one rank"
else no "CDDP_NO_MPI build trains on one rank"; show "$t/n1.out"; fi
# as one of two ranks (the launcher's variables, no launcher needed)
OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 "$t/fake" --data "$data" --threads 1 --max-steps 5 >"$t/n2.out" 2>&1
st=$?
if [ $st = 1 ] && grep -q 'built without MPI' "$t/n2.out"; then
    ok "CDDP_NO_MPI build refuses to be one of several ranks: $(head -n 1 "$t/n2.out")"
else no "CDDP_NO_MPI build under a launcher (status $st)"; show "$t/n2.out"; fi

echo "ddp-fake: $passes passed, $fails failed"
skip_end "$fails"
