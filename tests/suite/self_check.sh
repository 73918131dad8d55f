#!/usr/bin/env bash
# tests/suite/self_check.sh: tests/suite.sh itself, on an index of its own
# (SUITE_INDEX) with its logs and times in a folder of its own (SUITE_OUT):
# a pass, a failure, a skip (exit 77 and its reason), an entry over its
# budget; the closing line; --allow-skips failing a skip it does not list
# and passing one it does; --times.
set -u
cd "$(dirname "$0")/../.." || exit 1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "PASS $*"; }
no() { echo "FAIL $*"; fails=$((fails + 1)); }
has() { # FILE TEXT NAME: FILE has a line with TEXT
    if grep -qF -- "$2" "$1"; then ok "$3"; else no "$3: no line with '$2' in:"; sed 's/^/    /' "$1"; fi
}

cat >"$T/index" <<'IDX'
sc-pass   check  ir  -  echo all good
sc-fail   check  ir  -  echo broken; exit 3
sc-skip   check  ir  -  echo "looking for the frobnicator"; echo "SKIP: no frobnicator here"; exit 77
sc-slow   check  ir  -  sleep 2
IDX
run() { # OUT-NAME ARGS...: the suite on the index above, budgets at 1%
    local n=$1
    shift
    SUITE_INDEX=$T/index SUITE_OUT=$T/out SUITE_BUDGET_PCT=1 tests/suite.sh -j 2 "$@" >"$T/$n" 2>&1
}

run all -t check,test
st=$?
[ $st -eq 1 ] && ok "a failed entry fails the run" || no "exit status $st with a failed entry, want 1"
[ "$(tail -n 1 "$T/all")" = "suite: 2 passed, 1 failed, 1 skipped" ] &&
    ok "closing line: $(tail -n 1 "$T/all")" || no "closing line '$(tail -n 1 "$T/all")'"
has "$T/all" "SKIP sc-skip" "the skip is reported as a skip"
has "$T/all" "sc-skip                    SKIP: no frobnicator here" "the skip is listed with its reason"
has "$T/all" "over budget (check 1 s, test 2 s an entry):" "budgets reported"
has "$T/all" "sc-slow (check): 2 s, budget 1 s" "the entry over its budget is named"
grep -q "sc-pass (check)" "$T/all" && no "an entry within its budget is reported over it" || ok "sc-pass within budget"
grep -q "sc-skip [^ ]* does not allow" "$T/all" && no "a skip failed without --allow-skips" || ok "no allow-list: a skip is a skip"
[ -f "$T/out/logs/sc-fail.log" ] && [ ! -f build/tests/logs/sc-fail.log ] &&
    ok "logs under SUITE_OUT" || no "logs not under SUITE_OUT"

: >"$T/allow"
run strict --allow-skips "$T/allow" sc-pass sc-skip
st=$?
[ $st -eq 1 ] && ok "--allow-skips: an unlisted skip fails the run" || no "--allow-skips with an unlisted skip: exit $st, want 1"
has "$T/strict" "skipped, and $T/allow does not allow it: SKIP: no frobnicator here" "the failure says why"
has "$T/strict" "suite: 1 passed, 1 failed, 0 skipped" "an unlisted skip counts as failed"

printf '# comment\nsc-skip  a frobnicator is not on every machine\n' >"$T/allow"
run allowed --allow-skips "$T/allow" sc-pass sc-skip
st=$?
[ $st -eq 0 ] && ok "--allow-skips: a listed skip passes the run" || no "--allow-skips with a listed skip: exit $st, want 0"
has "$T/allowed" "suite: 1 passed, 0 failed, 1 skipped" "a listed skip counts as skipped"

run times --times
has "$T/times" "2s  check sc-slow  OVER BUDGET (1 s)" "--times marks the entry over its budget"
sed -n 2p "$T/times" | grep -q sc-slow && ok "--times: slowest first" || no "--times order: $(sed -n 2p "$T/times")"

# a planted skip of a real CUDA entry (no toolkit where it looks) under
# CI's allow-list: the run must fail, naming the entry and its reason
grep '^cuda-nvrtc ' tests/SUITE >"$T/index"
CUDA_HOME=$T/no-cuda run planted --allow-skips tests/SKIPS
st=$?
[ $st -eq 1 ] && ok "a planted skip of cuda-nvrtc fails under tests/SKIPS" || no "planted skip of cuda-nvrtc: exit $st, want 1"
has "$T/planted" "skipped, and tests/SKIPS does not allow it: SKIP: no CUDA toolkit at $T/no-cuda" "... with its reason"

echo "suite-self: $fails failed"
[ $fails -eq 0 ]
