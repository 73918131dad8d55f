#!/bin/sh
# tests/cuda/nvrtc_rnn.sh CDDPC: every design of the recurrences' CUDA
# kernels (emit_rnn_cuda.c: R samples a block x each unit's sums over K
# threads) that the scheduler may choose compiles whole with NVRTC for
# sm_80 and sm_90 with an empty log, no spill and at most 48 KiB of static
# shared memory. The scheduler (sched_gpu.c) keeps only the designs whose
# registers gpu_rnn_fits estimates within __launch_bounds__'s cap;
# `--report --target h100` lists them for each recurrence kernel, and this
# compiles each listed design (forced with --gpu-rnn) of every recurrence
# kernel of the models below (the widest cells, whose registers the
# designs strain most; cuda-nvrtc-all compiles rnn_mix's and seq2seq's
# chosen designs): an estimate too generous fails here.
#   models/lstm_rows.net   LSTM 128 wide, 2 layers (G = 4 gates)
#   models/char_gru.net    GRU 256 wide, 2 layers (two units a thread)
# A unit a model and design: all.cu's prelude and the train plan's
# recurrence kernels that list the design. Compilations that passed are kept by content (the
# cache nvrtc_check.sh keeps). Skips (exit 77) only without the toolkit.
set -eu
. "$(dirname "$0")/toolkit.sh"
[ $# -eq 1 ] || { echo "usage: $0 CDDPC" >&2; exit 2; }
CDDPC=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$ROOT/build/tests/cuda/nvrtc-rnn
CACHE=$ROOT/build/tests/cuda/nvrtc-cache
JOBS=$(nproc 2>/dev/null || echo 2)
rm -rf "$W"
mkdir -p "$W" "$CACHE"
${CC:-cc} -std=c11 -O2 -Wall -Wextra -I"$CUDA_HOME/include" "$ROOT/tests/cuda/nvrtc_check.c" \
    -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc -o "$W/nvrtc_check"

: > "$W/units"
for model in "$ROOT/models/lstm_rows.net" "$ROOT/models/char_gru.net"; do
    name=$(basename "$model" .net)
    # the designs the report lists for each train-plan recurrence kernel:
    # lines "KERNEL DESIGN"
    "$CDDPC" "$model" --report --target h100 -o "$W/$name.bin" > "$W/$name.report" 2>&1
    awk '/^  t[0-9]+_recurrence(_grad)? / { k = $1 }
         /^    \(designs, rows x split: / && k { s = $0; sub(/.*split: /, "", s); sub(/\)$/, "", s)
             n = split(s, a, ","); for (i = 1; i <= n; i++) { d = a[i]; gsub(/^ *\*?/, "", d); sub(/ .*/, "", d); print k, d }
             k = "" }' "$W/$name.report" > "$W/$name.designs"
    designs=$(cut -d' ' -f2 "$W/$name.designs" | sort -u)
    [ -n "$designs" ] || { echo "FAIL: $name: the report lists no recurrence designs"; exit 1; }
    for d in $designs; do
        "$CDDPC" "$model" --gpu-rnn "$d" --emit cuda "$W/$name-$d" -o "$W/$name-$d.bin" > /dev/null
        # the prelude, then the recurrence kernels that may take design d
        awk -v d="$d" -v list="$W/$name.designs" '
            BEGIN { while ((getline l < list) > 0) { split(l, a, " "); if (a[2] == d) may[a[1] ":"] = 1 } }
            /^\/\* [te][0-9]+_/ { started = 1; keep = ($2 in may) }
            !started || keep' "$W/$name-$d/all.cu" > "$W/$name-$d.cu"
        echo "$W/$name-$d.cu" >> "$W/units"
    done
    echo "$name: designs $(echo $designs)"
done

xargs -n 1 -P "$JOBS" sh -c '"$0" --arch sm_80,sm_90 --cache "$1" --ptxas-info "$2" "$3" > "$3.nvrtc" 2>&1 || true' \
    "$W/nvrtc_check" "$CACHE" "$W" < "$W/units"
fail=0 nk=0
while read -r u; do
    if grep -q '^FAIL' "$u.nvrtc" || ! grep -q '^ok ' "$u.nvrtc"; then
        fail=1
        echo "FAIL: $(basename "$u")"
        sed 's/^/    /' "$u.nvrtc"
        continue
    fi
    for info in "${u%.cu}".sm_*.ptxas; do
        # "N bytes stack frame, S bytes spill stores, L bytes spill loads"; "Used R registers, M bytes smem"
        if ! awk -v unit="$(basename "$info" .ptxas)" '
            /Compiling entry function/ { k = $0; sub(/.*function \047/, "", k); sub(/\047 for .*/, "", k); n++ }
            /bytes stack frame/ { if ($7 + 0 > 0 || $11 + 0 > 0) { printf "  %s %s: %s bytes spilled\n", unit, k, $7 + $11; bad = 1 } }
            /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/ && $i + 0 > 49152) {
                                          printf "  %s %s: %s bytes of shared memory\n", unit, k, $i; bad = 1 } }
            END { if (!n) { print "  " unit ": no kernels in ptxas -v"; bad = 1 }; exit bad }' "$info"; then
            fail=1
        fi
        nk=$((nk + $(grep -c 'Compiling entry function' "$info")))
    done
done < "$W/units"
if [ $fail -ne 0 ]; then
    echo "nvrtc_rnn: FAIL"
    exit 1
fi
echo "nvrtc_rnn: $(wc -l < "$W/units") units ($nk kernel compiles over sm_80 and sm_90): clean, no spills, shared memory within 48 KiB"
