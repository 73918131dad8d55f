#!/usr/bin/env bash
# tests/suite.sh: runs the entries of tests/SUITE, in parallel, each a
# command whose exit status is its verdict.
#
#   tests/suite.sh [-j N] [-t TIERS] [-s SUBJECTS] [--list] [NAME ...]
#     -j N        entries at once (default: the number of cores)
#     -t TIERS    comma list of tiers: check,test,slow (default: all three)
#     -s SUBJECTS comma list of subjects (frontend,ir,runtime,cuda,ddp,amp,torch)
#     --list      print the selected entries instead of running them
#     NAME ...    only these entries (any tier); a NAME may be a glob: 'cuda-emu-*'
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
INDEX=$ROOT/tests/SUITE
LOGS=$ROOT/build/tests/logs
TIMES=$ROOT/build/tests/suite-times

jobs=$(nproc 2>/dev/null || echo 2)
tiers=check,test,slow
subjects=
list=0
names=()
while [ $# -gt 0 ]; do
    case $1 in
        -j) jobs=$2; shift 2 ;;
        -j*) jobs=${1#-j}; shift ;;
        -t) tiers=$2; shift 2 ;;
        -s) subjects=$2; shift 2 ;;
        --list) list=1; shift ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "suite.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) names+=("$1"); shift ;;
    esac
done
case $jobs in ''|*[!0-9]*|0) echo "suite.sh: -j wants a positive number, got '$jobs'" >&2; exit 2 ;; esac

# what the commands in tests/SUITE may use
export PY=${PY:-/usr/bin/python3}
export FASHION=${FASHION:-data/fashion-mnist}
export MNIST=${MNIST:-data/mnist}
export ROOT

in_list() { # WORD COMMA-LIST
    case ",$2," in *",$1,"*) return 0 ;; esac
    return 1
}

# ---- read the index ----------------------------------------------------------
sel_name=() sel_tier=() sel_flags=() sel_cmd=()
declare -A seen=()
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
    in_list "$subject" frontend,ir,runtime,cuda,ddp,amp,torch ||
        { echo "tests/SUITE:$lineno: subject '$subject' is not one of frontend, ir, runtime, cuda, ddp, amp, torch" >&2; exit 2; }
    [ -z "${seen[$name]:-}" ] || { echo "tests/SUITE:$lineno: '$name' is listed twice" >&2; exit 2; }
    seen[$name]=1
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
total=${#sel_name[@]}
[ "$total" -gt 0 ] || { echo "suite.sh: no entry selected" >&2; exit 2; }

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

pass=0 fail=0 failed=() done_n=0
declare -A dur=()
report() { # INDEX
    local i=$1 name=${sel_name[$1]} rc s
    read -r rc s <"$TMPROOT/$name/status"
    dur[$name]=$s
    done_n=$((done_n + 1))
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1))
        printf 'PASS %-26s %4ss  %s\n' "$name" "$s" "$(tail -n 1 "$LOGS/$name.log" | cut -c1-110)"
    else
        fail=$((fail + 1))
        failed+=("$name")
        printf 'FAIL %-26s %4ss  (exit %s; log %s)\n' "$name" "$s" "$rc" "build/tests/logs/$name.log"
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
    echo "---- FAIL $name: build/tests/logs/$name.log"
    sed 's/^/    /' "$LOGS/$name.log" | tail -n 300
    echo "---- rerun alone: tests/suite.sh $name"
done

echo
echo "slowest:"
for n in "${!dur[@]}"; do echo "${dur[$n]} $n"; done | sort -rn | head -n 8 |
    while read -r s n; do printf '  %4ss  %s\n' "$s" "$n"; done
echo "$pass passed, $fail failed${failed[*]:+: ${failed[*]}} ($total entries, -j $jobs, ${wall}s wall)"
[ "$fail" -eq 0 ]
