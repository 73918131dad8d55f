#!/bin/sh
# tests/golden/run.sh CDDPC: the expected-diagnostics tests (cproc's layout).
#
# For every tests/golden/NAME.net beside a NAME.err, runs
#     CDDPC tests/golden/NAME.net -o TMP/out
# from the repository root (the .err files name paths relative to it) and
# checks that it exits with status 1, that its stderr is exactly NAME.err,
# and that it wrote no output file. Prints PASS/FAIL per test; exits 1 if
# any failed.
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 CDDPC" >&2
    exit 2
fi
case $1 in
/*) cddpc=$1 ;;
*) cddpc=$(pwd)/$1 ;;
esac
if [ ! -x "$cddpc" ]; then
    echo "$0: $1: not an executable" >&2
    exit 2
fi
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

pass=0 fail=0
for net in tests/golden/*.net; do
    err=${net%.net}.err
    [ -f "$err" ] || continue
    name=$(basename "$net" .net)
    "$cddpc" "$net" -o "$tmp/out" >"$tmp/stdout" 2>"$tmp/stderr" </dev/null
    rc=$?
    why=
    if [ $rc -ne 1 ]; then
        why="exit status $rc, expected 1"
    elif [ -e "$tmp/out" ]; then
        why="an output file was written"
    elif ! cmp -s "$err" "$tmp/stderr"; then
        why="stderr differs from $err"
    fi
    if [ -z "$why" ]; then
        echo "PASS $name"
        pass=$((pass + 1))
    else
        echo "FAIL $name: $why"
        diff -u "$err" "$tmp/stderr" | sed 's/^/    /'
        fail=$((fail + 1))
    fi
    rm -f "$tmp/out"
done
echo "golden: $pass passed, $fail failed"
[ $fail -eq 0 ]
