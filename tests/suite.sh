#!/bin/sh
# tests/suite.sh: runs every test of `make test`, each a command whose exit
# status is the verdict, and prints one summary line. Output of a failing
# test is shown in full; of a passing one, only its last line.
# Usage: tests/suite.sh NAME 'COMMAND' [NAME 'COMMAND' ...]
pass=0 fail=0 failed=""
log=$(mktemp)
while [ $# -ge 2 ]; do
    name=$1 cmd=$2
    shift 2
    start=$(date +%s)
    if sh -c "$cmd" >"$log" 2>&1; then
        pass=$((pass + 1))
        printf 'PASS %-28s %4ss  %s\n' "$name" "$(($(date +%s) - start))" "$(tail -n 1 "$log")"
    else
        fail=$((fail + 1))
        failed="$failed $name"
        printf 'FAIL %-28s %4ss\n' "$name" "$(($(date +%s) - start))"
        sed 's/^/    /' "$log"
    fi
done
rm -f "$log"
echo "$pass passed, $fail failed${failed:+:$failed}"
[ "$fail" -eq 0 ]
