#!/usr/bin/env bash
# tests/runtime/test_integrity.sh PROGRAM DATA: checkpoints and --save files
# (PROGRAM: SimpleNet with Adam, tests/torch/optim_adam_step.net)
# carry CRC-32C checksums (rt_safetensors.c) that --resume, --init and
# --evaluate verify; the training state is checked against the data.
#   - an intact checkpoint resumes with no warning;
#   - a bit flipped in a parameter's data: all three refuse it, naming the
#     file, the tensor and "checksum mismatch"; in the optimizer state
#     (only --resume reads it): refused the same;
#   - a digit of the training state changed (cddp.skip): "header checksum
#     mismatch", from all three;
#   - 24 single-bit flips at random places of the file (seeded): every one
#     refused by --resume with exit status 1 (no crash, no signal);
#   - a file without checksums (as PyTorch writes them: the same tensors,
#     no cddp.* checksum entries) loads through --init and --evaluate with
#     one line saying it is unverified;
#   - such an unverified checkpoint with damaged state is still refused:
#     skip past the epoch's batches, rows that are not the batches', a
#     negative time;
#   - a temporary file a killed checkpoint write left is removed at the
#     next start, with one line.
set -u
prog=$1 data=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
ok() { echo "PASS $*"; }
no() { echo "FAIL $*"; fail=1; }
run() { "$prog" --data "$data" --epochs 1 "$@"; }
run --max-steps 20 --checkpoint "$t/ck.st" --save "$t/w.st" > "$t/train.log" 2>&1 || { cat "$t/train.log"; exit 1; }
out=$(run --max-steps 21 --resume "$t/ck.st" 2>&1) && ! grep -q warning <<< "$out" &&
    ok "an intact checkpoint resumes without a warning" || no "intact resume: $out"

# edit.py IN OUT WHAT: a copy of IN damaged as WHAT says
cat > "$t/edit.py" <<'P'
import json, random, struct, sys
src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
raw = bytearray(open(src, 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8 + n])
md = h['__metadata__']
def tensor_flip(name):
    a, b = h[name]['data_offsets']
    raw[8 + n + (a + b) // 2] ^= 0x10
if what.startswith('flip:'):
    tensor_flip(what[5:])
elif what == 'skip+1':
    old = '"cddp.skip":"%s"' % md['cddp.skip']
    new = '"cddp.skip":"%s"' % str(int(md['cddp.skip']) + 1).rjust(len(md['cddp.skip']), '0')
    hdr = raw[8:8 + n].decode().replace(old, new)
    assert len(hdr) == n and old in raw[8:8 + n].decode()
    raw[8:8 + n] = hdr.encode()
elif what.startswith('random:'):
    i = random.Random(int(what[7:])).randrange(len(raw) * 8)
    raw[i // 8] ^= 1 << (i % 8)
else:   # unverified, with metadata set: "plain" or "plain:key=value,..."
    md = {k: v for k, v in md.items() if not k.startswith('cddp.crc32c.') and k != 'cddp.metadata_crc32c'}
    for kv in what[6:].split(',') if ':' in what else []:
        k, v = kv.split('=')
        md[k] = v
    h['__metadata__'] = md
    hb = json.dumps(h, separators=(',', ':')).encode()
    hb += b' ' * (-len(hb) % 8)
    raw = bytearray(struct.pack('<Q', len(hb)) + hb + raw[8 + n:])
open(dst, 'wb').write(raw)
P
edit() { /usr/bin/python3 "$t/edit.py" "$@" || { no "edit.py $*"; return 1; }; }
# refused WHAT FILE WANT MODE...: each mode refuses FILE with a message holding WANT
refused() {
    local what=$1 f=$2 want=$3 mode out rc
    shift 3
    for mode in "$@"; do
        case $mode in
            resume) out=$(run --max-steps 21 --resume "$f" 2>&1) ;;
            init) out=$(run --max-steps 1 --init "$f" 2>&1) ;;
            evaluate) out=$("$prog" --data "$data" --evaluate "$f" 2>&1) ;;
        esac
        rc=$?
        if [ $rc -eq 1 ] && grep -qF -- "$want" <<< "$out" && grep -qF "$f" <<< "$out"; then
            ok "$what: --$mode refuses it: $(grep -F -- "$want" <<< "$out" | head -1 | cut -c1-150)"
        else
            no "$what: --$mode gave exit $rc: $(tail -2 <<< "$out")"
        fi
    done
}
edit "$t/ck.st" "$t/p.st" flip:fc2.weight &&
    refused "a bit of fc2.weight flipped" "$t/p.st" 'tensor "fc2.weight": checksum mismatch' resume init evaluate
edit "$t/ck.st" "$t/o.st" flip:optimizer.fc1.weight.exp_avg &&
    refused "a bit of Adam's exp_avg flipped" "$t/o.st" 'tensor "optimizer.fc1.weight.exp_avg": checksum mismatch' resume
edit "$t/w.st" "$t/ws.st" flip:fc1.bias && refused "a bit of a --save file's fc1.bias flipped" "$t/ws.st" \
    'tensor "fc1.bias": checksum mismatch' init evaluate
edit "$t/ck.st" "$t/s.st" skip+1 && refused "cddp.skip one more" "$t/s.st" 'metadata checksum mismatch' resume init evaluate
bad=0
for seed in $(seq 1 24); do
    edit "$t/ck.st" "$t/r.st" random:$seed || continue
    run --max-steps 21 --resume "$t/r.st" > "$t/r.log" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q 'error: .*r.st' "$t/r.log" || { bad=$((bad + 1)); echo "  flip $seed: exit $rc: $(tail -1 "$t/r.log")"; }
done
[ $bad -eq 0 ] && ok "24 random bit flips: each refused by --resume with exit 1" || no "$bad of 24 random flips not refused"

edit "$t/w.st" "$t/plain.st" plain
for mode in init evaluate; do
    if [ $mode = init ]; then out=$(run --max-steps 1 --init "$t/plain.st" 2>&1); else out=$("$prog" --data "$data" --evaluate "$t/plain.st" 2>&1); fi
    rc=$?
    [ $rc -eq 0 ] && [ "$(grep -c 'no checksums.*loaded unverified' <<< "$out")" = 1 ] &&
        ok "a file without checksums: --$mode loads it, one line: $(grep unverified <<< "$out")" ||
        no "a file without checksums, --$mode: exit $rc: $out"
done
nb=$(sed -n 's/.*train \([0-9]*\) .*batch \([0-9]*\) .*/\1 \2/p' "$t/train.log" | awk '{ print int(($1 + $2 - 1) / $2) }')
edit "$t/ck.st" "$t/u1.st" plain:cddp.skip=99999999 && refused "unverified, skip 99999999" "$t/u1.st" \
    "at batch 99999999 of epoch 1, which has $nb batches" resume
edit "$t/ck.st" "$t/u2.st" plain:cddp.rows=0x1p+60 && refused "unverified, rows 2^60" "$t/u2.st" \
    "rows for the 20 batches of epoch 1 it did, which hold 1280 here" resume
edit "$t/ck.st" "$t/u3.st" plain:cddp.seconds=-0x1p+3 && refused "unverified, -8 s" "$t/u3.st" "corrupt checkpoint" resume
# what a kill -9 during a checkpoint's write leaves (NAME.tmp.XXXXXX) is
# removed when the next run starts, with one line: only a minute old or
# more (a write in progress beside it is kept), only that name's
mkdir -p "$t/dir"
touch -d '2 minutes ago' "$t/dir/ck.st.tmp.AbC123" "$t/dir/ck.st.tmp.short" "$t/dir/other.st.tmp.AbC123"
touch "$t/dir/ck.st.tmp.XyZ789"
out=$(run --max-steps 1 --checkpoint "$t/dir/ck.st" 2>&1)
left=$(cd "$t/dir" && ls | tr '\n' ' ')
[ "$(grep -c 'removed 1 temporary file of an interrupted write of it: ck.st.tmp.AbC123' <<< "$out")" = 1 ] &&
    [ "$left" = "ck.st ck.st.tmp.XyZ789 ck.st.tmp.short other.st.tmp.AbC123 " ] &&
    ok "a stale ck.st.tmp.AbC123 removed at start: $(grep removed <<< "$out")" ||
    no "stale temporary files: left '$left': $out"
exit $fail
