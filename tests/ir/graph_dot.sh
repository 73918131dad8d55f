#!/usr/bin/env bash
# tests/ir/graph_dot.sh CDDPC: `cddpc --graph FILE.dot` parsed by
# Graphviz's dot (-Tjson0), for SimpleNet, the ConvNet and the DDP bucket
# model at each fusion level: one cluster per kernel that --report lists,
# labelled with its name, in the same order, for the train and the eval
# plan; every op node inside a kernel cluster appears in --report's fused
# list of that kernel; one all-reduce hexagon per gradient bucket; and
# FILE.svg drawn beside it.
set -u
CDDPC=$1
PY=${PY:-/usr/bin/python3}
command -v dot >/dev/null || { echo "FAIL Graphviz's dot is not installed (scripts/deps.sh installs graphviz)"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/graph.XXXXXX")
trap 'rm -rf "$T"' EXIT
nfail=0
for m in models/mnist.net models/mnist_convnet.net tests/ddp/ddp_buckets.net; do
    for l in none elementwise all; do
        what="$(basename "$m") --fusion=$l"
        if ! "$CDDPC" "$m" --fusion=$l --graph "$T/g.dot" --report > "$T/report" 2> "$T/err"; then
            echo "FAIL $what: cddpc: $(cat "$T/err")"; nfail=$((nfail + 1)); continue
        fi
        [ -s "$T/g.svg" ] || { echo "FAIL $what: no g.svg"; nfail=$((nfail + 1)); }
        if ! dot -Tjson0 "$T/g.dot" > "$T/g.json" 2> "$T/err"; then
            echo "FAIL $what: dot cannot parse it: $(cat "$T/err")"; nfail=$((nfail + 1)); continue
        fi
        if "$PY" - "$T/g.json" "$T/report" <<'P'; then echo "PASS $what"; else echo "FAIL $what"; nfail=$((nfail + 1)); fi
import json, re, sys
g = json.load(open(sys.argv[1]))
report = open(sys.argv[2]).read()
# --report: per plan, the kernels in order and the ops each fused (op%id)
plans = {}
for block in re.split(r'^(?=plan )', report, flags=re.M)[1:]:
    name = block.split()[1]
    rows = re.findall(r'^  ([te]\d+_\S+) +\d+ +\S+ +\S+ +(.*)$', block, flags=re.M)
    plans[name] = [(k, set(re.findall(r'%(\d+)', ops))) for k, ops in rows]
    plans[name + '_buckets'] = len(re.findall(r'^  \d+ +\S+ +t\d+_', block, flags=re.M))
objs = g['objects']
by_gvid = {o['_gvid']: o for o in objs}
ok = True
for plan, pre in (('train', 't'), ('eval', 'e')):
    clusters = sorted((o for o in objs if re.fullmatch('cluster_%s_k\\d+' % pre, o['name'])),
                      key=lambda o: int(o['name'].split('_k')[1]))
    want = plans[plan]
    if [o['label'] for o in clusters] != [k for k, _ in want]:
        print('%s: clusters %s, --report %s' % (plan, [o['label'] for o in clusters], [k for k, _ in want]))
        ok = False
        continue
    for o, (k, ids) in zip(clusters, want):
        inside = {by_gvid[n]['name'][1:] for n in o.get('nodes', []) if by_gvid[n]['name'][0] == pre}
        if inside != ids:
            print('%s: cluster nodes %s, --report fused %s' % (k, sorted(inside), sorted(ids)))
            ok = False
hexes = [o for o in objs if o.get('shape') == 'hexagon']
if len(hexes) != plans['train_buckets']:
    print('buckets: %d hexagons, --report %d' % (len(hexes), plans['train_buckets']))
    ok = False
sys.exit(0 if ok else 1)
P
    done
done
exit $((nfail > 0))
