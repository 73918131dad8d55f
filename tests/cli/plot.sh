#!/usr/bin/env bash
# tests/cli/plot.sh: `cddpc plot` (runtime/rt_plot.c) draws what the notes'
# matplotlib plot draws, as SVG that a browser renders.
#   - two runs' metrics (one with its step log) -> SVG: well-formed XML with
#     the title, axis labels, and per run the train, test and metric curves
#     (and the raw and smoothed steps of the run that has them);
#   - headless Chromium renders it; tests/cli/plot_png.py finds the frame,
#     the title, tick labels and each run's colour on the pixels, and the
#     same checks fail on a plot without data (the control);
#   - bad input: a missing file, a malformed row (file:line), no -o: a
#     clear error, non-zero exit, and no SVG or temp file left behind.
# Usage: tests/cli/plot.sh CDDPC
set -u
CDDPC=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/plot.XXXXXX")
trap 'rm -rf "$T"' EXIT
nfail=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; nfail=$((nfail + 1)); }

# two runs as the program writes them (--metrics, --step-log)
cat > "$T/a.csv" <<'C'
epoch,train_loss,test_loss,test_acc,seconds,images_per_s
1,0.92,0.71,0.74,1.9,31000
2,0.61,0.58,0.79,1.8,32000
3,0.52,0.55,0.81,1.8,32000
4,0.47,0.53,0.82,1.8,32000
C
cat > "$T/b.csv" <<'C'
epoch,train_loss,test_loss,test_acc,seconds,images_per_s
1,0.80,0.66,0.76,1.9,31000
2,0.55,0.56,0.80,1.8,32000
3,0.48,0.52,0.83,1.8,32000
4,0.43,0.51,0.84,1.8,32000
C
awk 'BEGIN { print "step,epoch,loss"; s = 0
             for (e = 1; e <= 4; e++) for (i = 0; i < 60; i++) { s++
                 printf "%d,%d,%.6f\n", s, e, 0.45 + 1.8 * exp(-s / 25.0) + 0.08 * sin(s * 1.7) } }' > "$T/a-steps.csv"

if "$CDDPC" plot sgd=$T/a.csv:$T/a-steps.csv adam=$T/b.csv -o "$T/p.svg" --title "Two runs" > "$T/out" 2>&1; then
    pass "cddpc plot: $(cat "$T/out")"
else
    fail "cddpc plot exited $?: $(cat "$T/out")"
fi
if $PY - "$T/p.svg" > "$T/xml" 2>&1 <<'P'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
ids = {e.get("id"): e for e in root.iter() if e.get("id")}
text = lambda i: "".join(ids[i].itertext())
assert text("title") == "Two runs", text("title")
assert text("xlabel") == "Epoch" and text("ylabel") == "Loss" and text("y2label") == "test accuracy"
def classes(run):
    return sorted({p.get("class") for p in ids[run].iter(ns + "polyline")})
assert classes("run0") == ["metric", "smooth", "step", "test", "train"], classes("run0")
assert classes("run1") == ["metric", "test", "train"], classes("run1")
marks = len(list(ids["run1"].iter(ns + "circle")))
assert marks == 8, marks   # train and test loss, 4 epochs each
legend = [t for t in ("".join(x.itertext()) for x in ids["legend"].iter(ns + "text"))]
assert "sgd: train loss" in legend and "adam: test accuracy (right)" in legend, legend
print("svg: title, axis labels, 5 + 3 curves, 8 markers, %d legend entries" % len(legend))
P
then pass "$(cat "$T/xml")"; else fail "svg structure: $(tail -n 3 "$T/xml")"; fi

# the task's metric on the right axis: macro-F1 (multi-label), MAE (regression)
printf 'epoch,train_loss,test_loss,test_label_acc,test_macro_f1,seconds\n1,0.5,0.4,0.7,0.6,1\n2,0.4,0.3,0.8,0.7,1\n' > "$T/ml.csv"
printf 'epoch,train_loss,test_loss,test_mse,test_mae,seconds\n1,0.5,0.4,0.4,0.5,1\n2,0.4,0.3,0.3,0.45,1\n' > "$T/reg.csv"
for m in ml:test_macro-F1 reg:test_MAE; do
    f=${m%%:*} want=$(echo "${m#*:}" | tr _ ' ')
    if "$CDDPC" plot "$T/$f.csv" -o "$T/$f.svg" > "$T/out" 2>&1 &&
       $PY -c 'import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
e = [x for x in r.iter() if x.get("id") == "y2label"]
sys.exit(0 if e and "".join(e[0].itertext()) == sys.argv[2] else 1)' "$T/$f.svg" "$want"; then
        pass "$f.csv: the right axis is $want"
    else
        fail "$f.csv: the right axis is not $want: $(cat "$T/out")"
    fi
done

render() { # SVG PNG
    timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$T/chrome" \
        --window-size=960,540 --screenshot="$2" "file://$1" > "$T/chrome.log" 2>&1 && [ -s "$2" ]
}
if ! command -v chromium > /dev/null 2>&1; then
    fail "chromium not found (scripts/deps.sh installs it): the rendering is not checked"
elif ! render "$T/p.svg" "$T/p.png"; then
    fail "chromium did not render the plot: $(tail -n 3 "$T/chrome.log")"
else
    if $PY "$ROOT/tests/cli/plot_png.py" "$T/p.png" 2 > "$T/png" 2>&1; then pass "rendered: $(tail -n 1 "$T/png")"
    else fail "rendered: $(cat "$T/png")"; fi
    # the control: a run with no epochs yet draws a frame and no curve
    head -n 1 "$T/a.csv" > "$T/empty.csv"
    "$CDDPC" plot "$T/empty.csv" -o "$T/e.svg" > /dev/null 2>&1 && render "$T/e.svg" "$T/e.png" &&
        $PY "$ROOT/tests/cli/plot_png.py" "$T/e.png" 1 --expect-blank > "$T/epng" 2>&1 &&
        pass "$(cat "$T/epng")" || fail "control: $(cat "$T/epng" 2>/dev/null)"
fi

# bad input
expect() { # NAME WANT-RC WANT-TEXT ARGS...
    local name=$1 want=$2 text=$3
    shift 3
    "$CDDPC" plot "$@" > "$T/bo" 2> "$T/be"
    local rc=$?
    if [ $rc -eq "$want" ] && grep -qF -- "$text" "$T/be"; then pass "$name: exit $rc: $(head -n 1 "$T/be")"
    else fail "$name: exit $rc (want $want), stderr: $(head -n 2 "$T/be" | tr '\n' ' ') (want '$text')"; fi
}
printf 'epoch,train_loss,test_loss,test_acc\n1,0.5,0.4,0.8\n2,0.4,oops,0.8\n' > "$T/bad.csv"
expect missing-file 1 "$T/none.csv: cannot open" "$T/none.csv" -o "$T/x.svg"
expect bad-row 1 "$T/bad.csv:3: column 'test_loss' is not a number" "$T/bad.csv" -o "$T/x.svg"
printf 'epoch,loss\n1,0.5\n' > "$T/nocol.csv"
expect no-column 1 "$T/nocol.csv:1: no column 'train_loss'" "$T/nocol.csv" -o "$T/x.svg"
expect no-output 2 "no output" "$T/a.csv"
expect bad-dir 1 "cannot create" "$T/a.csv" -o "$T/no/such/dir/x.svg"
if [ -e "$T/x.svg" ] || ls "$T"/*.tmp.* > /dev/null 2>&1; then fail "bad input left an SVG or a temp file"
else pass "bad input left no SVG and no temp file"; fi

echo "$nfail failed"
[ $nfail -eq 0 ]
