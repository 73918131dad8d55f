#!/usr/bin/env bash
# tests/suite.sh: runs the entries of tests/SUITE, in parallel, each a
# command whose exit status is its verdict.
#
#   tests/suite.sh [-j N] [-t TIERS] [-s SUBJECTS] [--list] [--allow-skips FILE] [NAME ...]
#   tests/suite.sh --times
#     -j N        entries at once (default: the number of cores)
#     -t TIERS    comma list of tiers: check,test,slow (default: all three)
#     -s SUBJECTS comma list of subjects (frontend,ir,runtime,cuda,ddp,amp,torch,suite)
#     --list      print the selected entries instead of running them
#     --allow-skips FILE  a skipped entry not named in FILE fails (CI: tests/SKIPS)
#     --times     the slowest entries of the last runs, against their budgets
#     NAME ...    only these entries (any tier); a NAME may be a glob: 'cuda-emu-*'
#
# An entry's exit status is its verdict: 0 passed, 77 skipped (it could not
# run here; its last line starting with SKIP says why), anything else
# failed. A check-tier entry over 20 s or a test-tier entry over 120 s is
# reported as over its budget (SUITE_BUDGET_PCT scales the budgets: the
# sanitizer pass runs everything slower). SUITE_INDEX and SUITE_OUT name
# another index and another folder for the logs and times (tests/suite/self_check.sh).
#
# Each entry's output goes to build/tests/logs/NAME.log, and it runs with a
# TMPDIR and XDG_CACHE_HOME of its own, so entries cannot see each other's
# files. Entries flagged `alone` (timing and overlap checks, which load
# from other entries would blur) run after the others, one at a time. The
# longest entries of the last run start first, which keeps the cores busy
# to the end. A failed entry's log is printed in full, with the command
# that reruns it alone.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
INDEX=${SUITE_INDEX:-$ROOT/tests/SUITE}
OUTDIR=${SUITE_OUT:-$ROOT/build/tests}
LOGS=$OUTDIR/logs
TIMES=$OUTDIR/suite-times
SKIPPED=$OUTDIR/suite-skipped

jobs=$(nproc 2>/dev/null || echo 2)
tiers=check,test,slow
subjects=
list=0
times=0
allow=
names=()
while [ $# -gt 0 ]; do
    case $1 in
        -j) jobs=$2; shift 2 ;;
        -j*) jobs=${1#-j}; shift ;;
        -t) tiers=$2; shift 2 ;;
        -s) subjects=$2; shift 2 ;;
        --list) list=1; shift ;;
        --times) times=1; shift ;;
        --allow-skips) allow=$2; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "suite.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) names+=("$1"); shift ;;
    esac
done
case $jobs in ''|*[!0-9]*|0) echo "suite.sh: -j wants a positive number, got '$jobs'" >&2; exit 2 ;; esac

# what the commands in tests/SUITE may use
export PY=${PY:-/usr/bin/python3}
export FASHION=${FASHION:-data/fashion-mnist}
export MNIST=${MNIST:-data/mnist}
export KJV=${KJV:-data/kjv.txt}
export ROOT

# OpenBLAS 0.3.21 reads some newer x86 CPUs (a Sapphire Rapids VM) as
# Prescott: SSE3 kernels without FMA. The programs then run Haswell's
# (runtime/rt_blas.c); PyTorch, the oracle, loads the same OpenBLAS and
# must sum as they do, or Adam's and batch norm's comparisons drift apart
# for no fault of ours. So every entry gets the programs' choice;
# tests/runtime/blas_core.sh unsets it to check the programs' own.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo; then
    core=$("$PY" -c 'import ctypes, ctypes.util
lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' 2>/dev/null | tr 'A-Z' 'a-z')
    case $core in
    prescott|core2|penryn|dunnington|nehalem|atom|sandybridge|unknown) export OPENBLAS_CORETYPE=Haswell ;;
    esac
fi

# On an AVX-512 machine OpenBLAS runs its SkylakeX kernels and oneDNN its
# avx512_core ones. The first round differently for PyTorch's column-major
# call than for ours: act_mlp agreed with PyTorch to 1e-7 for 101 steps,
# then a kink flipped (hardtanh, leaky_relu) and step 116 was 3.7e-4 off.
# The second change in the last bits with the buffers' addresses (two runs
# of one program differ under ASLR; not with it off, nor at AVX2), which
# tips the 2-rank against 1-rank comparisons past 1e-4. The entries compare
# our arithmetic with PyTorch's, so both run the AVX2 kernels (Haswell's),
# as on every machine before; blas-core checks the programs' own choice.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx2 /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
fi
if [ -z "${DNNL_MAX_CPU_ISA:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx2 /proc/cpuinfo; then
    export DNNL_MAX_CPU_ISA=AVX2
fi

in_list() { # WORD COMMA-LIST
    case ",$2," in *",$1,"*) return 0 ;; esac
    return 1
}

# ---- read the index ----------------------------------------------------------
sel_name=() sel_tier=() sel_flags=() sel_cmd=()
declare -A seen=() tier_of=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case $line in ''|'#'*) continue ;; esac
    read -r name tier subject flags cmd <<<"$line"
    if [ -z "${cmd:-}" ]; then
        echo "tests/SUITE:$lineno: want 'name tier subject flags command', got: $line" >&2; exit 2
    fi
    in_list "$tier" check,test,slow ||
        { echo "tests/SUITE:$lineno: tier '$tier' is not one of check, test, slow" >&2; exit 2; }
    in_list "$subject" frontend,ir,runtime,cuda,ddp,amp,torch,suite ||
        { echo "tests/SUITE:$lineno: subject '$subject' is not one of frontend, ir, runtime, cuda, ddp, amp, torch, suite" >&2; exit 2; }
    [ -z "${seen[$name]:-}" ] || { echo "tests/SUITE:$lineno: '$name' is listed twice" >&2; exit 2; }
    seen[$name]=1
    tier_of[$name]=$tier
    if [ ${#names[@]} -gt 0 ]; then
        hit=0
        for n in "${names[@]}"; do
            # shellcheck disable=SC2053  # a NAME may be a glob on purpose
            [[ $name == $n ]] && hit=1
        done
        [ $hit -eq 1 ] || continue
    else
        in_list "$tier" "$tiers" || continue
        [ -z "$subjects" ] || in_list "$subject" "$subjects" || continue
    fi
    sel_name+=("$name") sel_tier+=("$tier") sel_flags+=("$flags") sel_cmd+=("$cmd")
done <"$INDEX"

for n in "${names[@]}"; do
    hit=0
    for s in "${sel_name[@]}"; do [[ $s == $n ]] && hit=1; done
    [ $hit -eq 1 ] || { echo "suite.sh: no entry '$n' in tests/SUITE (tests/suite.sh --list shows them)" >&2; exit 2; }
done

# ---- budgets: a check-tier entry 20 s, a test-tier entry 120 s ----------------
pct=${SUITE_BUDGET_PCT:-100}
case $pct in ''|*[!0-9]*|0) echo "suite.sh: SUITE_BUDGET_PCT wants a positive whole number, got '$pct'" >&2; exit 2 ;; esac
budget() { # TIER -> seconds (0: none)
    case $1 in check) echo $(((20 * pct + 99) / 100)) ;; test) echo $(((120 * pct + 99) / 100)) ;; *) echo 0 ;; esac
}
budgets="check $(budget check) s, test $(budget test) s an entry"

if [ $times -eq 1 ]; then
    [ -f "$TIMES" ] || { echo "suite.sh: no times yet ($TIMES): run the suite first" >&2; exit 2; }
    echo "slowest entries of the last runs (budgets: $budgets):"
    sort -k2,2nr "$TIMES" | head -n "${SUITE_TIMES_TOP:-25}" | while read -r n s; do
        t=${tier_of[$n]:-gone}
        b=$(budget "$t")
        mark=
        [ "$b" -gt 0 ] && [ "$s" -gt "$b" ] && mark="  OVER BUDGET ($b s)"
        printf '  %5ss  %-5s %s%s\n' "$s" "$t" "$n" "$mark"
    done
    awk '{ s += $2 } END { printf "%d entries, %d s in all\n", NR, s }' "$TIMES"
    exit 0
fi

declare -A allowed=()
if [ -n "$allow" ]; then
    [ -f "$allow" ] || { echo "suite.sh: --allow-skips: no file '$allow'" >&2; exit 2; }
    while read -r n _; do
        case $n in ''|'#'*) continue ;; esac
        allowed[$n]=1
    done <"$allow"
fi

total=${#sel_name[@]}
[ "$total" -gt 0 ] || { echo "suite.sh: no entry selected" >&2; exit 2; }
mkdir -p "$OUTDIR"

if [ $list -eq 1 ]; then
    for i in "${!sel_name[@]}"; do
        printf '%-24s %-5s %-6s %s\n' "${sel_name[$i]}" "${sel_tier[$i]}" "${sel_flags[$i]}" "${sel_cmd[$i]}"
    done
    exit 0
fi

# ---- order: alone entries last; otherwise the longest of the last run first --
declare -A last=()
if [ -f "$TIMES" ]; then
    while read -r n s; do last[$n]=$s; done <"$TIMES"
fi
order=()
while read -r _ i; do order+=("$i"); done < <(
    for i in "${!sel_name[@]}"; do
        alone=0
        in_list alone "${sel_flags[$i]}" && alone=1
        # unknown durations count as long: a new entry should not start last
        printf '%d %06d %d\n' "$alone" "$((999999 - ${last[${sel_name[$i]}]:-600}))" "$i"
    done | sort -k1,1n -k2,2n | awk '{ print $1, $3 }')

mkdir -p "$LOGS"
TMPROOT=$(mktemp -d "${TMPDIR:-/tmp}/cddpc-suite.XXXXXX")
trap 'rm -rf "$TMPROOT"; kill $(jobs -p) 2>/dev/null' EXIT
trap 'exit 130' INT TERM

# one entry, in the background: its log, then a status file read by the parent
run_one() { # INDEX
    local i=$1 name=${sel_name[$1]} t0 rc
    local T=$TMPROOT/$name
    mkdir -p "$T/tmp" "$T/cache"
    t0=$(date +%s)
    TMPDIR=$T/tmp XDG_CACHE_HOME=$T/cache bash -c "${sel_cmd[$i]}" >"$LOGS/$name.log" 2>&1 </dev/null
    rc=$?
    echo "$rc $(($(date +%s) - t0))" >"$T/status"
    rm -rf "$T/tmp" "$T/cache"
}

pass=0 fail=0 skip=0 failed=() skipped=() over=() done_n=0
declare -A dur=() why=()
# the reason a skipped entry gives: its last line starting with SKIP
skip_reason() { # NAME
    local r
    r=$(grep -a '^SKIP' "$LOGS/$1.log" | tail -n 1)
    [ -n "$r" ] || r="(no SKIP line) $(tail -n 1 "$LOGS/$1.log")"
    printf '%s' "$r" | cut -c1-160
}
report() { # INDEX
    local i=$1 name=${sel_name[$1]} rc s b
    read -r rc s <"$TMPROOT/$name/status"
    dur[$name]=$s
    done_n=$((done_n + 1))
    b=$(budget "${sel_tier[$i]}")
    [ "$b" -gt 0 ] && [ "$s" -gt "$b" ] && over+=("$name (${sel_tier[$i]}): ${s} s, budget $b s")
    if [ "$rc" -eq 77 ]; then
        why[$name]=$(skip_reason "$name")
        if [ -n "$allow" ] && [ -z "${allowed[$name]:-}" ]; then
            fail=$((fail + 1))
            failed+=("$name")
            printf 'FAIL %-26s %4ss  skipped, and %s does not allow it: %s\n' "$name" "$s" "$allow" "${why[$name]}"
        else
            skip=$((skip + 1))
            skipped+=("$name")
            printf 'SKIP %-26s %4ss  %s\n' "$name" "$s" "${why[$name]}"
        fi
    elif [ "$rc" -eq 0 ]; then
        pass=$((pass + 1))
        printf 'PASS %-26s %4ss  %s\n' "$name" "$s" "$(tail -n 1 "$LOGS/$name.log" | cut -c1-110)"
    else
        fail=$((fail + 1))
        failed+=("$name")
        printf 'FAIL %-26s %4ss  (exit %s; log %s)\n' "$name" "$s" "$rc" "${LOGS#"$ROOT"/}/$name.log"
    fi
}

start=$(date +%s)
declare -A running=()
wait_one() { # reap whichever entry ends first
    local n
    while :; do
        for n in "${!running[@]}"; do
            if [ -f "$TMPROOT/${sel_name[$n]}/status" ]; then
                wait "${running[$n]}" 2>/dev/null
                unset "running[$n]"
                report "$n"
                return
            fi
        done
        wait -n 2>/dev/null || sleep 0.2
    done
}

for i in "${order[@]}"; do
    if in_list alone "${sel_flags[$i]}"; then
        while [ ${#running[@]} -gt 0 ]; do wait_one; done
        run_one "$i" &
        running[$i]=$!
        wait_one
    else
        while [ ${#running[@]} -ge "$jobs" ]; do wait_one; done
        run_one "$i" &
        running[$i]=$!
    fi
done
while [ ${#running[@]} -gt 0 ]; do wait_one; done
wall=$(($(date +%s) - start))

# remember durations for the next run's order (entries not run keep theirs)
for n in "${!dur[@]}"; do last[$n]=${dur[$n]}; done
for n in "${!last[@]}"; do echo "$n ${last[$n]}"; done | sort >"$TIMES.new" && mv "$TIMES.new" "$TIMES"

for name in "${failed[@]}"; do
    echo
    echo "---- FAIL $name: ${LOGS#"$ROOT"/}/$name.log"
    sed 's/^/    /' "$LOGS/$name.log" | tail -n 300
    echo "---- rerun alone: tests/suite.sh $name"
done

echo
echo "slowest:"
for n in "${!dur[@]}"; do echo "${dur[$n]} $n"; done | sort -rn | head -n 8 |
    while read -r s n; do printf '  %4ss  %s\n' "$s" "$n"; done
if [ ${#over[@]} -gt 0 ]; then
    echo "over budget ($budgets):"
    printf '  %s\n' "${over[@]}"
fi
: >"$SKIPPED"
if [ ${#skipped[@]} -gt 0 ]; then
    echo "skipped (not checked here):"
    for n in "${skipped[@]}"; do
        printf '  %-26s %s\n' "$n" "${why[$n]}"
        printf '%s %s\n' "$n" "${why[$n]}" >>"$SKIPPED"
    done
fi
[ ${#failed[@]} -eq 0 ] || echo "failed: ${failed[*]}"
echo "$total entries, -j $jobs, ${wall}s wall"
echo "suite: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
