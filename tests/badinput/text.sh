#!/usr/bin/env bash
# tests/badinput/text.sh CDDPC: the text reader (runtime/rt_text.c) and the
# token checks of the other readers on broken input. Each must make the
# program exit 1 with ONE line naming the file and the reason: an empty
# file, bytes that are not UTF-8 under the character vocabulary (with the
# byte offset), a block longer than the text, more characters than the
# model's embeddings have rows, no split, a split that leaves a set empty;
# an npz of tokens out of the vocabulary (the sample and position named),
# and labels of -100 without ignore_index (PyTorch's default named);
# --generate without --load, and a prompt outside the vocabulary. A
# text of one line of UTF-8 with a non-ASCII character trains (vocabulary
# by code point), as does vocab = bytes on bytes that are not UTF-8.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
CDDPC=${1:?usage: text.sh CDDPC}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/text.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0 passes=0
pass() { echo "PASS text: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL text: $1"; fails=$((fails + 1)); }

net() { # NAME VOCAB_ROWS BLOCK DATA_ARGS: a bigram model over windows of BLOCK
    cat >"$TMP/$1.net" <<N
model Bi {
    self.table = nn.Embedding($2, $2)
    forward(idx: i64[N, $3]) {
        return self.table(idx)
    }
}
train {
    model     Bi
    data      $4
    loss      cross_entropy()
    optimizer sgd(lr = 0.1)
    batch     4
    epochs    1
}
N
    "$CDDPC" "$TMP/$1.net" -o "$TMP/$1" || { fail "cannot compile $1.net"; return 1; }
}
# bad FILE WANT PROGRAM ARGS...: exit 1, one line on stderr holding FILE and WANT
bad() {
    local file=$1 want=$2
    shift 2
    "$@" --threads 1 --epochs 1 >"$TMP/out" 2>"$TMP/err" </dev/null
    local rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qF -- "$file" "$TMP/err" && grep -qF -- "$want" "$TMP/err"
    then pass "$(basename "$file"): $(cat "$TMP/err")"
    else fail "$(basename "$file"): exit $rc, expected 1 and one line with '$want':"; sed 's/^/      /' "$TMP/err" "$TMP/out" | head -8; fi
}
good() {
    local what=$1
    shift
    if "$@" --threads 1 --epochs 1 >"$TMP/out" 2>&1 && grep -q '^epoch 1/1' "$TMP/out"
    then pass "$what trains: $(grep -m1 '^text' "$TMP/out")"
    else fail "$what does not train:"; sed 's/^/      /' "$TMP/out" | tail -5; fi
}

printf '' >"$TMP/empty.txt"
printf 'In the beginning \xff\xfe God created\n%.0s' $(seq 20) >"$TMP/latin1.txt"
printf 'short\n' >"$TMP/short.txt"
for i in $(seq 40); do printf 'Caf\xc3\xa9 au lait, na\xc3\xafve r\xc3\xa9sum\xc3\xa9 %d\n' $i; done >"$TMP/utf8.txt"
/usr/bin/python3 -c "import sys; sys.stdout.write(''.join(chr(48 + i % 60) for i in range(2000)))" >"$TMP/wide.txt"

net t8 73 8 'text("x", block = 8, split = 0.1)' || exit 1
bad "$TMP/empty.txt" "the text is empty" "$TMP/t8" --data "$TMP/empty.txt"
bad "$TMP/latin1.txt" "byte offset 17: not UTF-8 (byte 0xff)" "$TMP/t8" --data "$TMP/latin1.txt"
bad "$TMP/short.txt" "a window of block 8 needs 9" "$TMP/t8" --data "$TMP/short.txt"
net t8s 40 8 'text("x", block = 8, split = 0.1)' || exit 1
bad "$TMP/wide.txt" "the text has 60 distinct characters" "$TMP/t8s" --data "$TMP/wide.txt"
net t8n 73 8 'text("x", block = 8)' || exit 1
bad "$TMP/utf8.txt" "text data needs split = F" "$TMP/t8n" --data "$TMP/utf8.txt"
net t8z 73 8 'text("x", block = 8, split = 0.0001)' || exit 1
bad "$TMP/utf8.txt" "split leaves the training or the test set empty" "$TMP/t8z" --data "$TMP/utf8.txt"
good "UTF-8 text with non-ASCII characters" "$TMP/t8" --data "$TMP/utf8.txt"
net t8b 256 8 'text("x", block = 8, split = 0.1, vocab = bytes)' || exit 1
good "vocab = bytes over bytes that are not UTF-8" "$TMP/t8b" --data "$TMP/latin1.txt"

# tokens and labels in an npz
/usr/bin/python3 - "$TMP" <<'PY' || { echo "FAIL text: cannot write the npz files"; exit 1; }
import sys
import numpy as np
t = sys.argv[1]
x = np.arange(64 * 8).reshape(64, 8) % 73
y = (x + 1) % 73
bad = x.copy(); bad[5, 3] = 80
np.savez(t + "/tok_bad.npz", x_train=bad, y_train=y, x_test=x[:8], y_test=y[:8])
yi = y.copy(); yi[2, 1] = -100
np.savez(t + "/lab_ignored.npz", x_train=x, y_train=yi, x_test=x[:8], y_test=y[:8])
PY
net n8 73 8 'npz("x")' || exit 1
bad "$TMP/tok_bad.npz" "x_train sample 5, position 3: token 80 is not in [0, 73)" "$TMP/n8" --data "$TMP/tok_bad.npz"
bad "$TMP/lab_ignored.npz" "label -100 is out of range for 73 classes (PyTorch's cross_entropy skips targets of -100" "$TMP/n8" --data "$TMP/lab_ignored.npz"
# --generate's own mistakes: no weights; weights of another vocabulary's model
"$TMP/t8" --generate 5 --prompt "In" >"$TMP/out" 2>&1
if [ $? -eq 2 ] && grep -q -- "--generate N needs the trained weights: --load FILE" "$TMP/out"
then pass "--generate without --load: $(head -n 1 "$TMP/out")"
else fail "--generate without --load:"; sed 's/^/      /' "$TMP/out"; fi
"$TMP/t8" --data "$TMP/utf8.txt" --threads 1 --max-steps 2 --save "$TMP/t8.st" >/dev/null 2>&1
"$TMP/t8" --generate 5 --load "$TMP/t8.st" --prompt "Zebra" >"$TMP/out" 2>&1
if [ $? -eq 1 ] && grep -q "the character at byte 0 ('Zebr') is not in the model's vocabulary" "$TMP/out"
then pass "a prompt outside the vocabulary: $(head -n 1 "$TMP/out")"
else fail "a prompt outside the vocabulary:"; sed 's/^/      /' "$TMP/out"; fi
echo "text: $passes passed, $fails failed"
[ $fails -eq 0 ]
