#!/bin/sh
# tests/fuzz/data_replay.sh DIR: the data readers' fuzz harnesses (DIR/npz,
# DIR/csv, DIR/idx, DIR/st, DIR/text: build/fuzz-data) over their seeds (tests/fuzz/data_seeds/NAME)
# and kept findings (tests/fuzz/data_findings/NAME), each input once, no
# fuzzing: an input that once crashed a reader, tripped a sanitizer or hung
# must not do it again. Fails when a harness fails or did not run every input.
set -u
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 DIR (build/fuzz-data)" >&2
    exit 2
fi
bins=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
total=0
for n in npz csv idx st text; do
    find "tests/fuzz/data_seeds/$n" "tests/fuzz/data_findings/$n" -type f 2>/dev/null | sort >"$tmp/$n.inputs"
    k=$(wc -l <"$tmp/$n.inputs")
    xargs "$bins/$n" -timeout=10 -rss_limit_mb=2048 <"$tmp/$n.inputs" >"$tmp/$n.log" 2>&1
    rc=$?
    ran=$(grep -c '^Executed ' "$tmp/$n.log")
    if [ $rc -ne 0 ] || [ "$ran" -ne "$k" ] || [ "$k" -eq 0 ]; then
        grep -v '^Running: \|^Executed ' "$tmp/$n.log" | tail -40
        echo "fuzz-data-replay: FAIL: $n: exit status $rc, ran $ran of $k inputs"
        exit 1
    fi
    total=$((total + k))
    echo "fuzz-data-replay: $n: $k inputs"
done
echo "fuzz-data-replay: $total inputs (seeds and kept findings), no crash, no sanitizer report, no timeout"
