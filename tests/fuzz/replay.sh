#!/bin/sh
# tests/fuzz/replay.sh HARNESS: the fuzz harness over its seeds and the
# kept findings (tests/fuzz/seeds.sh), each input once, no fuzzing: an
# input that once crashed the compiler, tripped a sanitizer, hung or hit an
# internal error must not do it again. Fails when the harness fails or did
# not run every input.
set -u
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 HARNESS (build/fuzz/frontend)" >&2
    exit 2
fi
harness=$1
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
tests/fuzz/seeds.sh >"$tmp/inputs"
n=$(wc -l <"$tmp/inputs")
# -timeout: a hang is a failure; inputs as arguments run once each
xargs "$harness" -timeout=10 -rss_limit_mb=2048 <"$tmp/inputs" >"$tmp/log" 2>&1
rc=$?
ran=$(grep -c '^Executed ' "$tmp/log")
if [ $rc -ne 0 ] || [ "$ran" -ne "$n" ]; then
    grep -v '^Running: \|^Executed ' "$tmp/log" | tail -40
    echo "fuzz-replay: FAIL: exit status $rc, ran $ran of $n inputs"
    exit 1
fi
echo "fuzz-replay: $n inputs (seeds and kept findings), no crash, no sanitizer report, no timeout"
