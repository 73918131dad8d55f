#!/bin/sh
# tests/cli/cc_signals.sh CDDPC: cddpc interrupted while the C compiler
# runs (SIGTERM, SIGINT, SIGHUP) stops the compiler and everything it
# started, removes its temporary files (OUT.cddpc-XXXXXX.c, OUT.cddpc-tmp)
# and dies of the signal, leaving no OUT. The compiler is a stand-in
# (CDDPC_CC) that records its pid and that of a child it waits for (cc
# waits for cc1 so), so the test knows both are running before it signals.
# Then the same stand-in past --cc-timeout: stopped, with the limit named,
# nothing left.
set -u
cddpc=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
cat > "$t/slowcc" <<'SH'
#!/bin/sh
sleep 60 &
echo "$$ $!" > "$CC_PIDS.tmp" && mv "$CC_PIDS.tmp" "$CC_PIDS"
wait
SH
chmod +x "$t/slowcc"
for sig in TERM INT HUP; do
    mkdir -p "$t/$sig"
    CDDPC_CC="$t/slowcc" CC_PIDS="$t/$sig.pids" "$cddpc" models/mnist.net -o "$t/$sig/prog" 2> "$t/$sig.err" &
    pid=$!
    n=0
    while [ ! -s "$t/$sig.pids" ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    if [ ! -s "$t/$sig.pids" ]; then
        echo "FAIL SIG$sig: the compiler never started"; fail=1; kill $pid; continue
    fi
    left_before=$(ls "$t/$sig" | tr '\n' ' ')
    kill -s "$sig" $pid
    wait $pid
    rc=$?
    sleep 0.3
    alive=
    # alive: not gone and not a zombie (orphans wait for a reaper, which a
    # container's first process may never be)
    for p in $(cat "$t/$sig.pids"); do
        st=$(ps -o stat= -p "$p" 2>/dev/null)
        [ -n "$st" ] && [ "${st#Z}" = "$st" ] && alive="$alive $p"
    done
    left=$(ls "$t/$sig")
    case $sig in TERM) num=15 ;; INT) num=2 ;; HUP) num=1 ;; esac
    want=$((128 + num))
    if [ $rc -eq $want ] && [ -z "$alive" ] && [ -z "$left" ] && [ -n "$left_before" ]; then
        echo "PASS SIG$sig while cc runs: exit $rc, cc and its child stopped, removed: $left_before"
    else
        echo "FAIL SIG$sig: exit $rc (want $want), still running:${alive:- none}, left: ${left:-none} (before: $left_before)"
        fail=1
    fi
    for p in $alive; do kill "$p" 2>/dev/null; done
done
mkdir -p "$t/late"
start=$(date +%s)
CDDPC_CC="$t/slowcc" CC_PIDS="$t/late.pids" "$cddpc" models/mnist.net -o "$t/late/prog" --cc-timeout 1 2> "$t/late.err"
rc=$?
secs=$(( $(date +%s) - start ))
sleep 0.3
alive=
for p in $(cat "$t/late.pids" 2>/dev/null); do
    st=$(ps -o stat= -p "$p" 2>/dev/null)
    [ -n "$st" ] && [ "${st#Z}" = "$st" ] && alive="$alive $p"
done
left=$(ls "$t/late")
if [ $rc -eq 1 ] && [ $secs -le 5 ] && [ -z "$alive" ] && [ -z "$left" ] &&
   grep -q "the C compiler did not finish within 1 s .*--cc-timeout S sets the limit" "$t/late.err"; then
    echo "PASS --cc-timeout 1: exit 1 after ${secs} s, cc and its child stopped, nothing left: $(cat "$t/late.err")"
else
    echo "FAIL --cc-timeout 1: exit $rc after ${secs} s, still running:${alive:- none}, left: ${left:-none}: $(cat "$t/late.err")"
    fail=1
fi
for p in $alive; do kill "$p" 2>/dev/null; done
for bad in -1 abc 1e9 0x10; do
    if "$cddpc" models/mnist.net -o "$t/late/prog" --cc-timeout "$bad" 2>&1 | grep -q -- "--cc-timeout needs seconds"; then
        echo "PASS --cc-timeout $bad refused"
    else
        echo "FAIL --cc-timeout $bad not refused"; fail=1
    fi
done
exit $fail
