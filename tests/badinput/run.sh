#!/usr/bin/env bash
# tests/badinput/run.sh PROGRAM: the bad-input catalogue, for any program
# cddpc compiled (or the runtime's own fake model, tests/runtime/rt_fake_model.c).
#
# Every broken dataset or --init checkpoint must make PROGRAM exit with
# status 1 and print ONE line on stderr that names the offending path and
# the reason -- never crash, hang, or train on garbage. Prints PASS/FAIL per
# case and exits non-zero if any failed.
#
# Needs the real Fashion-MNIST (FMNIST_DIR, default
# /usr/share/datasets/fashion-mnist) to derive the cases from, and a model
# with 28x28 single-channel input (image sizes are cut to 14x14 for the
# wrong-size case, labels set to 255 for the out-of-range one).
# Invoked as "sh script" too (tests/Makefile.inc): re-run under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=${1:?usage: run.sh PROGRAM}
case $PROG in /*) ;; *) PROG=$PWD/$PROG ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
SRC=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/badinput.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0 passes=0

pass() { echo "PASS badinput: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL badinput: $1"; fails=$((fails + 1)); }

# expect CASE PATH REASON_REGEX ARGS...: run PROGRAM ARGS, check the result.
expect() {
  local name=$1 path=$2 reason=$3; shift 3
  local out=$TMP/$name.out err=$TMP/$name.err rc
  timeout 120 "$PROG" --threads 1 --epochs 1 --max-steps 1 "$@" >"$out" 2>"$err"
  rc=$?
  local lines msg
  lines=$(wc -l <"$err")
  msg=$(head -c 600 "$err" | tr '\n' ' ')
  if [ "$rc" -ne 1 ]; then
    fail "$name: exit status $rc, expected 1 (stderr: $msg)"
  elif [ "$lines" -ne 1 ]; then
    fail "$name: $lines lines on stderr, expected one (stderr: $msg)"
  elif ! grep -qF -- "$path" "$err"; then
    fail "$name: message does not name $path (stderr: $msg)"
  elif ! grep -qiE -- "$reason" "$err"; then
    fail "$name: message does not give the reason /$reason/ (stderr: $msg)"
  elif grep -qE 'Sanitizer|runtime error' "$err" "$out"; then
    fail "$name: sanitizer report"
  else
    pass "$name: $msg"
  fi
}

"$PY" "$HERE/make_bad.py" data "$SRC" "$TMP/data" || { echo "FAIL badinput: cannot build the catalogue"; exit 1; }
GOOD=$TMP/data/good

# The good dataset must work, or every "failure" below proves nothing. Its
# checkpoint is also the template for the --init cases.
if timeout 300 "$PROG" --threads 1 --epochs 1 --max-steps 2 --data "$GOOD" --save "$TMP/valid.safetensors" \
     >"$TMP/good.out" 2>"$TMP/good.err" && [ -s "$TMP/valid.safetensors" ]; then
  pass "good dataset trains and saves"
else
  fail "good dataset: $(head -c 600 "$TMP/good.err" | tr '\n' ' ')"
  echo "badinput: $passes passed, $fails failed"; exit 1
fi
if timeout 300 "$PROG" --threads 1 --epochs 1 --max-steps 1 --data "$GOOD" --init "$TMP/valid.safetensors" \
     >/dev/null 2>"$TMP/init.err"; then
  pass "--init with its own checkpoint"
else
  fail "--init with its own checkpoint: $(head -c 600 "$TMP/init.err" | tr '\n' ' ')"
fi

while IFS=$'\t' read -r name dir path reason; do
  expect "$name" "$path" "$reason" --data "$dir"
done <"$TMP/data/manifest"

"$PY" "$HERE/make_bad.py" st "$TMP/valid.safetensors" "$TMP/st" || { echo "FAIL badinput: cannot build checkpoints"; exit 1; }
while IFS=$'\t' read -r name file path reason; do
  expect "$name" "$path" "$reason" --data "$GOOD" --init "$file"
done <"$TMP/st/manifest"
expect st_missing_file "$TMP/st/none.safetensors" "no such file" --data "$GOOD" --init "$TMP/st/none.safetensors"

# a DistributedDataParallel state_dict ("module.fc1.weight", ...) loads, with
# one line saying so, into the same weights as the plain file
PYTHONPATH=$HERE/../torch "$PY" -c '
import sys, st
w, md = st.load_with_metadata(sys.argv[1])
st.save(sys.argv[2], {"module." + k: v for k, v in w.items()}, metadata=md)' "$TMP/valid.safetensors" "$TMP/ddp.safetensors"
if timeout 300 "$PROG" --threads 1 --epochs 1 --max-steps 1 --lr 0 --data "$GOOD" --init "$TMP/ddp.safetensors" \
     --save "$TMP/from_ddp.safetensors" >/dev/null 2>"$TMP/ddp.err" &&
   grep -q 'DDP.s "module." prefix' "$TMP/ddp.err" && [ "$(wc -l <"$TMP/ddp.err")" -eq 1 ] &&
   PYTHONPATH=$HERE/../torch "$PY" -c '
import sys, st
a, b = st.load(sys.argv[1]), st.load(sys.argv[2])
sys.exit(0 if a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a) else 1)' \
     "$TMP/valid.safetensors" "$TMP/from_ddp.safetensors"; then
  pass "--init with a DDP state_dict (module. prefix): $(cat "$TMP/ddp.err")"
else
  fail "--init with a DDP state_dict: $(head -c 600 "$TMP/ddp.err" | tr '\n' ' ')"
fi

echo "badinput: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
