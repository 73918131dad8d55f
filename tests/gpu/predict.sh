#!/usr/bin/env bash
# tests/gpu/predict.sh [CDDPC] [DATA]: on a lent GPU, cddpc's predicted
# kernel times (--report --target T, compiler/gpu_model.c) next to the
# measured ones (cddpc study --device cuda --kernels: each kernel's median
# over 20 steps x 3 runs, timed by events around each kernel of an eagerly
# issued step, as --trace does) for SimpleNet, the ConvNet and
# models/lstm_rows.net, and the
# ratio measured / predicted (the LSTM classifier's recurrence kernels:
# the design model of gpu_rates.c's gpu_rnn_secs). T is chosen from nvidia-smi's name (H200,
# H100, A100, T4). It prints; it does not judge (the model's overheads are
# assumptions this output is there to fit). Not yet run on a GPU.
set -u
CDDPC=${1:-build/cddpc}
DATA=${2:-data/mnist}
T=$(mktemp -d "${TMPDIR:-/tmp}/predict.XXXXXX")
trap 'rm -rf "$T"' EXIT
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$name" in
    *H200*) target=h200 ;; *H100*) target=h100 ;; *A100*) target=a100 ;; *T4*) target=t4 ;;
    *) echo "SKIP: predict: no GPU of the model's table (nvidia-smi: '${name:-none}')"; exit 77 ;;
esac
for m in mnist mnist_convnet lstm_rows; do
    "$CDDPC" "models/$m.net" --report --target $target > "$T/$m.pred" || exit 1
    # the peaks of the table, so the study does not calibrate the CPU
    read -r gf gb < <(sed -n 's/^predicted train .*: \([0-9.]*\) TFLOP\/s FP32, \([0-9.]*\) GB\/s.*/\1 \2/p' "$T/$m.pred")
    "$CDDPC" study "models/$m.net" --fusion all --device cuda --steps 20 --repeat 3 --kernels --data "$DATA" \
        --peak-gflops "$(awk -v x="$gf" 'BEGIN { print x * 1000 }')" --peak-gbs "$gb" --out "$T/s_$m" \
        > "$T/$m.study" 2> "$T/$m.err" || { echo "predict: study failed: $(tail -3 "$T/$m.err")"; exit 1; }
    echo "$m on $name (target $target): predicted (graph node overhead included) vs measured (eager, events)"
    awk -F, -v pred="$T/$m.pred" '
        BEGIN { while ((getline l < pred) > 0) { split(l, f, " "); if (on && f[1] ~ /^t[0-9]+_/) p[f[1]] = f[8]
                                                   if (l ~ /^predicted train/) on = 1 } }
        NR > 1 { us = $6 * 1e6; printf "  %-40s %10.2f us predicted %10.2f us measured  %6.2fx\n", $4, p[$4], us,
                 (p[$4] > 0 ? us / p[$4] : 0); sp += p[$4]; sm += us }
        END { printf "  %-40s %10.2f us predicted %10.2f us measured  %6.2fx\n", "sum of kernels", sp, sm, sm / sp }
    ' "$T/s_$m/kernels.csv"
    grep -E "^$m +all " "$T/$m.study" | sed 's/^/  study: /'
done
