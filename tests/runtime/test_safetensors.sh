#!/usr/bin/env bash
# tests/runtime/test_safetensors.sh FAKE_MODEL: safetensors in and out.
#   - a reference file written by hand (numpy) loads through --init and is
#     saved back bit-identically (lr 0, one step), well-formed and aligned
#   - PyTorch loads the saved file into nn.Linear and computes the same test
#     loss/accuracy the program reports for those weights
#   - saving is atomic: no temp file left, an existing file is replaced, an
#     unwritable destination fails before training
#   - corrupt files beyond tests/badinput (duplicates, gaps, overlaps, bad
#     shapes and dtypes, NUL padding, ...) exit 1 naming file and reason
# Invoked as "sh script" too (tests/Makefile.inc): re-run under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=${1:?usage: test_safetensors.sh FAKE_MODEL}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
DATA=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/st_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
pass() { echo "PASS safetensors: $1"; }
fail() { echo "FAIL safetensors: $1"; fails=$((fails + 1)); }
run() { timeout 120 "$PROG" --threads 1 --epochs 1 "$@"; }

$PY "$HERE/st_ref.py" write-ref "$TMP/ref.safetensors" || exit 1

# round trip: --init, no parameter change (lr 0), --save
if run --max-steps 1 --lr 0 --init "$TMP/ref.safetensors" --save "$TMP/out.safetensors" \
     --metrics "$TMP/m.csv" >"$TMP/rt.out" 2>"$TMP/rt.err"; then
  pass "--init + --save run"
else
  fail "--init + --save run: $(cat "$TMP/rt.err")"
fi
$PY "$HERE/st_ref.py" check-saved "$TMP/out.safetensors" "$TMP/ref.safetensors" || fails=$((fails + 1))
ls "$TMP" | grep -q '\.tmp\.' && fail "temporary file left behind" || pass "no temporary file left"

# the program's evaluation of the loaded weights matches PyTorch's
read -r tl ta < <($PY "$HERE/st_ref.py" torch-eval "$TMP/out.safetensors" "$DATA")
read -r pl pa < <(tail -1 "$TMP/m.csv" | awk -F, '{print $3, $4}')
if $PY -c "import sys; a,b,c,d=map(float,sys.argv[1:]); sys.exit(not(abs(a-c)<1e-4*max(1,abs(a)) and abs(b-d)<2e-4))" \
     "$tl" "$ta" "$pl" "$pa"; then
  pass "test loss/acc match PyTorch (torch $tl $ta, program $pl $pa)"
else
  fail "test loss/acc differ from PyTorch (torch $tl $ta, program $pl $pa)"
fi

# saving over an existing file replaces it; its mode follows the umask
cp "$TMP/ref.safetensors" "$TMP/over.safetensors"
run --max-steps 1 --save "$TMP/over.safetensors" >/dev/null 2>&1
if ! cmp -s "$TMP/over.safetensors" "$TMP/ref.safetensors" &&
   $PY -c "import json,struct,sys; r=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',r[:8])[0]; json.loads(r[8:8+n])" "$TMP/over.safetensors"; then
  pass "--save replaces an existing file"
else
  fail "--save did not replace an existing file"
fi
mode=$(umask 022; run --max-steps 1 --save "$TMP/mode.safetensors" >/dev/null 2>&1; stat -c %a "$TMP/mode.safetensors")
[ "$mode" = 644 ] && pass "saved file mode 644 under umask 022" || fail "saved file mode $mode under umask 022"

# an impossible destination fails at start-up, before any training
run --save "$TMP/no/such/dir/x.safetensors" >"$TMP/bad.out" 2>"$TMP/bad.err"; rc=$?
if [ $rc -eq 1 ] && grep -q "no/such/dir/x.safetensors" "$TMP/bad.err" && ! grep -q '^epoch' "$TMP/bad.out"; then
  pass "unwritable --save fails before training: $(cat "$TMP/bad.err")"
else
  fail "unwritable --save: rc $rc, $(cat "$TMP/bad.err")"
fi
mkdir "$TMP/isdir.safetensors"
run --save "$TMP/isdir.safetensors" >/dev/null 2>"$TMP/bad.err"; rc=$?
[ $rc -eq 1 ] && grep -q "directory" "$TMP/bad.err" && pass "--save onto a directory: $(cat "$TMP/bad.err")" \
  || fail "--save onto a directory: rc $rc, $(cat "$TMP/bad.err")"

# corrupt files
$PY "$HERE/st_ref.py" variants "$TMP/ref.safetensors" "$TMP/v" || exit 1
while IFS=$'\t' read -r name file reason; do
  run --max-steps 1 --init "$file" >"$TMP/c.out" 2>"$TMP/c.err"; rc=$?
  msg=$(tr '\n' ' ' <"$TMP/c.err")
  if [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/c.err")" -eq 1 ] && grep -qF "$file" "$TMP/c.err" &&
     grep -qiE -- "$reason" "$TMP/c.err"; then
    pass "$name: $msg"
  else
    fail "$name: rc $rc, want /$reason/, got: $msg"
  fi
done <"$TMP/v/manifest"

[ $fails -eq 0 ] && echo "safetensors: all passed" || echo "safetensors: $fails FAILED"
[ $fails -eq 0 ]
