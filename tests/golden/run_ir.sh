#!/bin/sh
# IR, kernel-list and bucket goldens: for each tests/golden/X.ir (X.fused,
# X.buckets), the training-step IR after autodiff (the fused kernel list,
# the gradient buckets) that `cddpc -d autodiff` (-d fuse, -d buckets)
# prints for X.net must match. X@MB.buckets compiles X.net with
# --bucket-mb MB. X~RULE.fused compiles X.net with --no-fuse RULE (a rule
# switched off: its kernel list). X.explain is `cddpc --explain-fusion`.
# UPDATE=1 rewrites the expected files (review the diff before committing).
cddpc=${1:-build/cddpc}
dir=tests/golden
fail=0
for exp in "$dir"/*.ir "$dir"/*.fused "$dir"/*.buckets "$dir"/*.explain; do
    [ -e "$exp" ] || continue
    base=${exp%.*}
    flags=""
    case $base in *@*) flags="--bucket-mb ${base##*@}"; base=${base%@*} ;; esac
    case $base in *~*) flags="--no-fuse ${base##*~}"; base=${base%~*} ;; esac
    case $exp in *.ir) pass="-d autodiff" ;; *.fused) pass="-d fuse" ;; *.explain) pass=--explain-fusion ;; *) pass="-d buckets" ;; esac
    got=$(mktemp)
    if ! "$cddpc" "$base.net" $pass $flags >"$got" 2>&1; then
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
