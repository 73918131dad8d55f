#!/bin/sh
# tests/cli/run.sh CDDPC PROGRAM DATA: the compiler's and the program's
# command lines, and the training-loop semantics a PyTorch user expects:
# bit-identical runs for one seed, drop_last, the exact epoch mean loss.
cddpc=$1 prog=$2 data=$3
fails=0
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
ok() { echo "PASS $1"; }
no() { echo "FAIL $1"; fails=$((fails + 1)); }
# expect STATUS PATTERN NAME -- CMD...: exit status and a stderr/stdout line
expect() {
    st=$1 pat=$2 name=$3
    shift 4
    "$@" >"$t/out" 2>&1
    got=$?
    if [ "$got" -eq "$st" ] && grep -q -- "$pat" "$t/out"; then ok "$name"; else
        no "$name (status $got, want $st; output:)"; sed 's/^/      /' "$t/out"; fi
}

# ---- compiler invocation ------------------------------------------------
expect 1 "cannot open 'nope.net': No such file" "cddpc: missing model file" -- "$cddpc" nope.net -o "$t/x"
expect 1 "is a directory" "cddpc: directory as model file" -- "$cddpc" "$t" -o "$t/x"
expect 2 "no model file" "cddpc: no arguments" -- "$cddpc"
expect 2 "unknown option" "cddpc: unknown option" -- "$cddpc" --frobnicate
expect 0 "usage: cddpc" "cddpc: --help" -- "$cddpc" --help
expect 0 "cddpc " "cddpc: --version" -- "$cddpc" --version
expect 0 "t1_mm_nt_bias_add_relu__epilogue" "cddpc: --report lists fused kernels" -- "$cddpc" models/mnist.net --report
[ -e "$t/x" ] && no "no output file after failed compiles" || ok "no output file after failed compiles"
# '--opt VALUE' and '--opt=VALUE' alike (as the training program): the
# same kernels, and --fusion none really unfuses (control: 'all' differs)
expect 0 "'--opt VALUE' or '--opt=VALUE'" "cddpc: --help shows both option forms" -- "$cddpc" --help
"$cddpc" models/mnist.net --fusion none --bucket-mb 4 --report >"$t/sp" 2>&1
"$cddpc" models/mnist.net --fusion=none --bucket-mb=4 --report >"$t/eq" 2>&1
"$cddpc" models/mnist.net --fusion all --report >"$t/all" 2>&1
if cmp -s "$t/sp" "$t/eq" && ! cmp -s "$t/sp" "$t/all" && ! grep -q t1_mm_nt_bias_add_relu__epilogue "$t/sp"; then
    ok "cddpc: --fusion none / --bucket-mb 4 as --fusion=none / --bucket-mb=4 (and unlike --fusion all)"
else no "cddpc: '--opt VALUE' differs from '--opt=VALUE'"; fi
expect 2 "--fusion needs a value" "cddpc: --fusion without a value" -- "$cddpc" models/mnist.net --fusion
expect 2 "--gpu-tile takes auto, 64, 32 or 16, not 48" "cddpc: --gpu-tile 48 refused" -- "$cddpc" models/mnist.net --gpu-tile 48
# --help names every rule --no-fuse knows (its error lists them)
"$cddpc" --help >"$t/help" 2>&1
rules=$("$cddpc" models/mnist.net --no-fuse bogus 2>&1 | sed -n 's/.*needs a rule: \(.*\); got.*/\1/p' | tr -d ',')
missing=
for r in $rules; do grep -q -- "[ ,]$r\(,\|\$\)" "$t/help" || missing="$missing $r"; done
[ -n "$rules" ] && [ -z "$missing" ] && ok "cddpc: --help lists the $(echo $rules | wc -w) fusion rules" ||
    no "cddpc: --help lacks rules:$missing (rules: '$rules')"

# --emit c writes kernels that compile on their own, warning-free, at every
# fusion level and for every shipped model
for model in models/*.net; do
    for level in none elementwise all; do
        if "$cddpc" "$model" --fusion=$level --emit c "$t/emit" \
            && cc -std=c11 -Wall -Wextra -Werror -fopenmp -c -Ibuild/include "$t/emit/program.c" -o "$t/p.o"; then
            ok "--emit c: $model --fusion=$level compiles standalone"
        else no "--emit c: $model --fusion=$level compiles standalone"; fi
    done
done

# ---- program options --------------------------------------------------------
expect 0 "--step-log" "program: --help" -- "$prog" --help
if [ -e /dev/nvidia0 ]; then
    expect 0 "device cuda" "program: --device auto picks the GPU" -- "$prog" --device auto --data "$data" --max-steps 2
else
    expect 1 "device cuda" "program: --device cuda refused without a GPU" -- "$prog" --device cuda --data "$data" --max-steps 1
    expect 0 "device cpu" "program: --device auto falls back to cpu" -- "$prog" --device auto --data "$data" --max-steps 2 --threads 1
fi
expect 2 "batch" "program: --batch 0 refused" -- "$prog" --batch 0
expect 2 "unknown option" "program: unknown option" -- "$prog" --frobnicate

# ---- same seed, same bits; another seed, other bits --------------------------
run() { "$prog" --data "$data" --threads 1 --max-steps 40 "$@" >/dev/null 2>&1; }
run --seed 7 --save "$t/a.st" && run --seed 7 --save "$t/b.st" && run --seed 8 --save "$t/c.st"
if cmp -s "$t/a.st" "$t/b.st" && ! cmp -s "$t/a.st" "$t/c.st"; then ok "seeded runs are bit-identical"
else no "seeded runs are bit-identical (and seeds differ)"; fi

# ---- max_steps in the train block (nanoGPT's max_iters): the run stops there,
# --max-steps overrides it ----------------------------------------------------
sed 's/^\(    seed .*\)$/\1\n    max_steps 7/' models/mnist.net > "$t/steps.net"
if "$cddpc" "$t/steps.net" -o "$t/steps" >/dev/null 2>&1 \
    && "$t/steps" --data "$data" --threads 1 --step-log "$t/s7.csv" >"$t/s7.out" 2>&1 \
    && "$t/steps" --data "$data" --threads 1 --max-steps 3 --step-log "$t/s3.csv" >/dev/null 2>&1 \
    && [ "$(tail -n +2 "$t/s7.csv" | wc -l)" -eq 7 ] && [ "$(tail -n +2 "$t/s3.csv" | wc -l)" -eq 3 ] \
    && grep -q "max_steps 7" "$t/s7.out"; then ok "train block max_steps 7 stops at 7 steps, --max-steps 3 at 3"
else no "train block max_steps 7 stops at 7 steps, --max-steps 3 at 3"; fi
sed 's/^\(    seed .*\)$/\1\n    max_iters 7/' models/mnist.net > "$t/iters.net"
expect 1 "did you mean 'max_steps'" "cddpc: max_iters suggests max_steps" -- "$cddpc" "$t/iters.net" -o "$t/x"

# ---- drop_last and the exact epoch mean ---------------------------------------
# With batch 96 the training set leaves a partial last batch. train_loss must
# be the per-sample mean: sum(batch mean * batch size) / samples.
ntrain=$(/usr/bin/python3 -c "import gzip,sys,struct
p='$data/train-labels-idx1-ubyte'
f=gzip.open(p+'.gz') if not __import__('os').path.exists(p) else open(p,'rb')
print(struct.unpack('>II', f.read(8))[1])")
"$prog" --data "$data" --threads 1 --epochs 1 --batch 96 --step-log "$t/s.csv" --metrics "$t/m.csv" >/dev/null 2>&1
"$prog" --data "$data" --threads 1 --epochs 1 --batch 96 --drop-last --step-log "$t/sd.csv" >/dev/null 2>&1
/usr/bin/python3 - "$t" "$ntrain" <<'PY' && ok "drop_last and exact epoch mean" || no "drop_last and exact epoch mean"
import csv, math, sys
t, n = sys.argv[1], int(sys.argv[2])
steps = [float(r["loss"]) for r in csv.DictReader(open(t + "/s.csv"))]
dropped = list(csv.DictReader(open(t + "/sd.csv")))
m = list(csv.DictReader(open(t + "/m.csv")))[0]
full, last = divmod(n, 96)
assert last, "test needs a partial batch"
assert len(steps) == full + 1, (len(steps), full + 1)
assert len(dropped) == full, (len(dropped), full)
sizes = [96] * full + [last]
exact = sum(l * s for l, s in zip(steps, sizes)) / n
notes = sum(steps) / len(steps)      # running_loss / len(train_loader)
got = float(m["train_loss"])
print("train_loss %.7f exact %.7f notes-style %.7f" % (got, exact, notes))
assert abs(got - exact) <= 1e-5 * exact, "train_loss is not the per-sample mean"
PY
echo "$fails failed"
[ "$fails" -eq 0 ]
