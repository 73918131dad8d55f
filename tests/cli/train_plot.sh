#!/usr/bin/env bash
# tests/cli/train_plot.sh PROGRAM DATA: --plot FILE.svg on a training run
# (runtime/rt_log_plot.c through rt_plot_write).
#   1. a 3-epoch run stopped (SIGTERM) once epoch 1's metrics row is out:
#      the SVG is already there, whole XML, with one train and one test
#      marker (epoch 1);
#   2. a whole 3-epoch run: one train and one test marker per epoch (6),
#      the train/test/accuracy curves and the raw and smoothed step curves,
#      the markers at the same heights as the metrics' losses relative to
#      each other (train above test where the CSV says so);
#   3. headless Chromium renders it (tests/cli/plot_png.py, whose control
#      is in tests/cli/plot.sh); skipped without chromium.
. "$(dirname "$0")/../skip.sh"
set -u
PROG=$(realpath "$1") DATA=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/trainplot.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
nfail=0
pass() { echo "PASS train-plot: $*"; }
fail() { echo "FAIL train-plot: $*"; nfail=$((nfail + 1)); }
$PY "$ROOT/tests/runtime/small_idx.py" "$DATA" "$T/d" 4000 1000 > /dev/null
# markers SVG METRICS: the circles of run0 against the metrics rows
markers() {
    $PY - "$@" <<'P'
import csv, sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
ids = {e.get("id"): e for e in root.iter() if e.get("id")}
rows = list(csv.DictReader(open(sys.argv[2])))
circles = [float(c.get("cy")) for c in ids["run0"].iter(ns + "circle")]
classes = sorted({p.get("class") for p in ids["run0"].iter(ns + "polyline")})
n = len(rows)
assert len(circles) == 2 * n, "%d markers for %d epochs" % (len(circles), n)
# the train markers, then the test ones; SVG y grows downwards
tr, te = circles[:n], circles[n:]
for r, a, b in zip(rows, tr, te):
    want = float(r["train_loss"]) > float(r["test_loss"])
    assert (a < b) == want, "epoch %s: train marker at y %g, test at %g, but losses %s / %s" % (
        r["epoch"], a, b, r["train_loss"], r["test_loss"])
print("%d epochs: %d markers, curves %s" % (n, len(circles), ",".join(classes)))
P
}
# 1. stopped after epoch 1
"$PROG" --data "$T/d" --epochs 3 --threads 1 --plot "$T/s.svg" --metrics "$T/sm.csv" --step-log "$T/ss.csv" > "$T/so" 2>&1 &
pid=$!
for _ in $(seq 1200); do [ -f "$T/sm.csv" ] && [ "$(wc -l < "$T/sm.csv")" -ge 2 ] && break; sleep 0.01; done
kill -TERM $pid; wait $pid; rc=$?
if [ $rc = 143 ] && r=$(markers "$T/s.svg" "$T/sm.csv" 2>&1); then pass "stopped after epoch 1 (exit 143): the SVG is there: $r"
else fail "stopped run: exit $rc, $r"; fi
# 2. the whole run
if "$PROG" --data "$T/d" --epochs 3 --threads 1 --plot "$T/p.svg" --metrics "$T/m.csv" > "$T/o" 2>&1 &&
    r=$(markers "$T/p.svg" "$T/m.csv" 2>&1) && echo "$r" | grep -q "curves metric,smooth,step,test,train"; then
    pass "3 epochs: $r"
else fail "whole run: ${r:-}"; sed 's/^/      /' "$T/o"; fi
ls "$T"/*.tmp* > /dev/null 2>&1 && fail "a temp file was left beside the SVG"
# 3. rendered
if command -v chromium > /dev/null 2>&1; then
    if timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$T/chrome" \
        --window-size=960,540 --screenshot="$T/p.png" "file://$T/p.svg" > "$T/chrome.log" 2>&1 && [ -s "$T/p.png" ] &&
        $PY "$ROOT/tests/cli/plot_png.py" "$T/p.png" 1 > "$T/png" 2>&1; then pass "rendered: $(tail -n 1 "$T/png")"
    else fail "rendering: $(tail -n 3 "$T/png" "$T/chrome.log" 2>/dev/null)"; fi
else skip_part "the rendering (chromium not found; scripts/deps.sh installs it)"; fi
echo "$nfail failed"
skip_end "$nfail"
