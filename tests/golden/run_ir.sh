#!/bin/sh
# IR and kernel-list goldens: for each tests/golden/X.ir (resp. X.fused),
# the training-step IR after autodiff (resp. the fused kernel list) that
# `cddpc -d autodiff` (resp. `-d fuse`) prints for X.net must match.
# UPDATE=1 rewrites the expected files (review the diff before committing).
cddpc=${1:-build/cddpc}
dir=tests/golden
fail=0
for exp in "$dir"/*.ir "$dir"/*.fused; do
    [ -e "$exp" ] || continue
    base=${exp%.*}
    case $exp in *.ir) pass=autodiff ;; *) pass=fuse ;; esac
    got=$(mktemp)
    if ! "$cddpc" "$base.net" -d "$pass" >"$got" 2>&1; then
        echo "FAIL $exp (cddpc exited non-zero)"; cat "$got"; fail=1
    elif [ "${UPDATE:-0}" = 1 ]; then
        cp "$got" "$exp"; echo "UPDATED $exp"
    elif diff -u "$exp" "$got"; then
        echo "PASS $exp"
    else
        echo "FAIL $exp"; fail=1
    fi
    rm -f "$got"
done
exit $fail
