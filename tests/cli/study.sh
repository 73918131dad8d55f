#!/usr/bin/env bash
# tests/cli/study.sh: `cddpc study` on SimpleNet and the ConvNet.
#   - a level with a rule switched off (all,-epilogue) is a row of its own;
#   - bad input: an unknown fusion level names the known ones, an unknown
#     option, no model: status 2 and a clear message;
#   - two models x two fusion levels, short runs: the table has one row per
#     variant; in the CSV each row's kernels and bytes equal what
#     `cddpc MODEL --fusion=L --report` lists for the train plan (its kernel
#     count, its total KiB); the baseline (`all`) has ratio 1 and the other
#     rows median / baseline median; min <= median <= max; every row has
#     steps x repeats measured steps; images/s = batch / median;
#   - the SVG is well-formed XML with one bar per row in each panel;
#   - --kernels: the calibration measured positive peaks; OUT/kernels.csv
#     has each train kernel of each variant, with the FLOPs and bytes
#     --report gives it, steps x repeats calls, min <= median <= max, and
#     the roofline fraction recomputed from those peaks.
# Usage: tests/cli/study.sh CDDPC MNIST_DIR
set -u
CDDPC=$1
DATA=$2
PY=${PY:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/study.XXXXXX")
trap 'rm -rf "$T"' EXIT
nfail=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; nfail=$((nfail + 1)); }

expect_err() {  # WANT_TEXT DESCRIPTION -- ARGS...
    local want=$1 what=$2
    shift 3
    "$CDDPC" study "$@" > "$T/out" 2> "$T/err"
    local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$want" "$T/err"; then pass "$what"; else fail "$what (status $rc, stderr: $(cat "$T/err"))"; fi
}
expect_err "unknown fusion level or rule 'fast' in 'none,fast'" "unknown level lists the levels" -- models/mnist.net --fusion none,fast
expect_err "unknown option '--fusoin'" "unknown option" -- models/mnist.net --fusoin all
expect_err "no model file given" "no model" -- --steps 3
expect_err "--steps takes a count" "bad count" -- models/mnist.net --steps 0

"$CDDPC" study models/mnist.net models/mnist_convnet.net --fusion none,all --batch 64 --steps 3 --repeat 2 \
    --warmup 1 --threads 1 --data "$DATA" --kernels --out "$T/s" > "$T/table" 2> "$T/progress"
rc=$?
if [ $rc -ne 0 ]; then
    fail "cddpc study exited $rc: $(tail -5 "$T/progress")"
    exit 1
fi
cat "$T/table"
rows=$(grep -cE '^(mnist|mnist_convnet) +(none|all) +64 ' "$T/table")
[ "$rows" = 4 ] && pass "table: 4 rows" || fail "table: $rows rows, want 4"
grep -q 'compiling models/mnist_convnet.net at --fusion=all' "$T/progress" && grep -q '\[8/8\]' "$T/progress" \
    && pass "progress lines" || fail "progress lines: $(head -3 "$T/progress")"

for m in mnist mnist_convnet; do
    for l in none all; do
        "$CDDPC" models/$m.net --fusion=$l --report > "$T/r_${m}_$l" 2>&1
        k=$(sed -n 's/^plan train .*: \([0-9]*\) kernels$/\1/p' "$T/r_${m}_$l")
        b=$(awk '/^plan eval/ { exit } $1 == "total" { printf "%.0f", $3 * 1024 }' "$T/r_${m}_$l")
        # the CSV row: model,fusion,batch,kernels,launches,bytes,...
        row=$(grep "^$m,$l,64," "$T/s/study.csv")
        if awk -F, -v k="$k" -v b="$b" '{ d = $6 - b; exit !($4 == k && $5 == k && d < 2 && d > -2) }' <<< "$row"; then
            pass "$m $l: kernels $k and bytes $b as --report says"
        else
            fail "$m $l: csv '$row', --report: $k kernels, $b bytes"
        fi
    done
done

"$PY" - "$T/s/study.csv" <<'P' && pass "csv: ratios, spread, steps, images/s" || fail "csv checks"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, rows
base = {r['model']: float(r['step_s_median']) for r in rows if r['fusion'] == 'all'}
for r in rows:
    med, lo, hi = float(r['step_s_median']), float(r['step_s_min']), float(r['step_s_max'])
    assert 0 < lo <= med <= hi, r
    assert int(r['measured_steps']) == 6, r
    assert abs(float(r['ratio']) - med / base[r['model']]) < 1e-3, r
    assert abs(float(r['images_per_s']) - 64 / med) < 1e-3 * 64 / med, r
    assert float(r['flops']) > 0 and float(r['bytes']) > 0, r
P

"$PY" - "$T/s/study.svg" <<'P' && pass "svg: well-formed, 2 x 4 bars" || fail "svg checks"
import sys, xml.etree.ElementTree as E
t = E.parse(sys.argv[1])
bars = [e for e in t.iter() if e.tag.endswith('rect') and any(c.tag.endswith('title') for c in e)]
assert len(bars) == 8, len(bars)
P
for m in mnist mnist_convnet; do
    for l in none all; do
        # --report's train kernels: name, MFLOP and KiB to 3 places
        awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_/ { print $1, $3, $4 }' "$T/r_${m}_$l" > "$T/k_${m}_$l"
    done
done
"$PY" - "$T/s/kernels.csv" "$T/s/calibrate.txt" "$T" <<'P' && pass "kernels.csv: kernels, costs, calls, roofline" || fail "kernels.csv checks"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
gf, gb = map(float, open(sys.argv[2]).read().split()[:2])
assert gf > 0 and gb > 0, (gf, gb)
for m in ('mnist', 'mnist_convnet'):
    for l in ('none', 'all'):
        want = [line.split() for line in open('%s/k_%s_%s' % (sys.argv[3], m, l))]
        got = [r for r in rows if r['model'] == m and r['fusion'] == l]
        assert [r['kernel'] for r in got] == [w[0] for w in want], (m, l)
        for r, w in zip(got, want):
            assert abs(float(r['flops']) / 1e6 - float(w[1])) < 1e-3 and abs(float(r['bytes']) / 1024 - float(w[2])) < 1e-3, (r, w)
            assert int(r['calls']) == 6, r
            med, lo, hi = float(r['median_s']), float(r['min_s']), float(r['max_s'])
            assert 0 < lo <= med <= hi, r
            bound = max(float(r['flops']) / (gf * 1e9), float(r['bytes']) / (gb * 1e9))
            assert abs(float(r['roofline_fraction']) - bound / med) <= 1e-4 + 1e-3 * bound / med, r
P
# a level with a rule off: its own row, quoted in the CSV, its kernels as --no-fuse gives them
"$CDDPC" study models/mnist.net --fusion all,-epilogue --batch 64 --steps 1 --repeat 1 --warmup 1 --threads 1 \
    --data "$DATA" --out "$T/r" > "$T/rtable" 2> /dev/null || fail "study --fusion all,-epilogue"
k=$("$CDDPC" models/mnist.net --no-fuse epilogue --report | sed -n 's/^plan train .*: \([0-9]*\) kernels$/\1/p')
grep -q "^mnist,\"all,-epilogue\",64,$k,$k," "$T/r/study.csv" && grep -qE "^mnist +all,-epilogue +64 +$k " "$T/rtable" \
    && pass "all,-epilogue: $k kernels, quoted in the CSV" || fail "all,-epilogue: $(cat "$T/r/study.csv")"
[ $nfail -eq 0 ] && echo "study: all passed" || echo "study: $nfail failed"
exit $((nfail > 0))
