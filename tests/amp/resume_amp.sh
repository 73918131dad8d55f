#!/usr/bin/env bash
# tests/amp/resume_amp.sh PROG DATA: --resume of an fp16 run continues bit
# for bit. PROG: fp16 SimpleNet with Adam and a scaler from 2^40 growing
# every 3 clean steps, so by the cut the run has skipped steps (Adam's t
# is then less than the step number), backed off and grown: the
# checkpoint must carry the scale, the growth tracker and the steps taken.
#   - 45 steps uninterrupted vs 25 steps, checkpoint, resumed to 45:
#     the same weights (cmp) and the same step-log rows 26..45 (loss,
#     scale, found_inf); the checkpoint's metadata holds the scaler;
#   - a checkpoint with a corrupt scaler state is refused in one line.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=$(realpath "$1") DATA=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/amp_resume.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "PASS $1"; }
no() { echo "FAIL $1"; fails=$((fails + 1)); }
R=("$PROG" --data "$DATA" --threads 1 --epochs 1)
"${R[@]}" --max-steps 45 --save "$T/a.st" --step-log "$T/a.csv" >"$T/oa" 2>&1 || no "uninterrupted run"
"${R[@]}" --max-steps 25 --checkpoint "$T/ck.st" >"$T/o1" 2>&1 || no "first 25 steps"
"${R[@]}" --max-steps 45 --resume "$T/ck.st" --save "$T/b.st" --step-log "$T/b.csv" >"$T/ob" 2>&1 ||
    { no "resumed run"; tail "$T/ob"; }
if cmp -s "$T/a.st" "$T/b.st" && [ "$(sed -n '27,46p' "$T/a.csv")" = "$(sed -n '2,21p' "$T/b.csv")" ] &&
    [ "$(wc -l <"$T/b.csv")" = 21 ]; then
    ok "fp16 + Adam resumed at step 25: weights and steps 26..45 (loss, scale, found_inf) bit for bit"
else no "fp16 resume differs"; diff <(sed -n '27,46p' "$T/a.csv") <(sed -n '2,21p' "$T/b.csv") | head; fi
/usr/bin/python3 - "$T/ck.st" "$T/a.csv" "$T/bad.st" <<'P' && ok "checkpoint metadata: $(cat "$T/md")" || no "metadata"
import csv, json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
md = h["__metadata__"]
rows = list(csv.DictReader(open(sys.argv[2])))[:25]
skipped = sum(int(r["found_inf"]) for r in rows)
assert int(md["cddp.amp.skipped"]) == skipped and int(md["cddp.optimizer_steps"]) == 25 - skipped, md
assert 0 < skipped < 25, skipped
open(sys.argv[1].replace("ck.st", "md"), "w").write(
    "scale %g, tracker %s, %d skipped, %s taken" % (float.fromhex(md["cddp.amp.scale"]),
                                                   md["cddp.amp.growth_tracker"], skipped,
                                                   md["cddp.optimizer_steps"]))
# the same file with a negative scale, for the refusal below
md["cddp.amp.scale"] = "-0x1p+0"
# rewritten as another writer would: without cddp's checksums (loaded unverified)
h["__metadata__"] = md = {k: v for k, v in md.items() if not k.startswith('cddp.crc32c.') and k != 'cddp.metadata_crc32c'}
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[3], "wb").write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
P
"${R[@]}" --max-steps 45 --resume "$T/bad.st" >"$T/oc" 2>"$T/ec"
if [ $? -eq 1 ] && [ "$(wc -l <"$T/ec")" = 1 ] && grep -q 'corrupt checkpoint: loss scale' "$T/ec"; then
    ok "a corrupt scaler state is refused: $(cat "$T/ec")"
else no "corrupt scaler state"; cat "$T/ec"; fi
exit $((fails > 0))
