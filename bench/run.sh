#!/usr/bin/env bash
# bench/run.sh PROGRAM [--quick] [--threads N] [--csv FILE]
# One-epoch Fashion-MNIST benchmark of PROGRAM against two PyTorch baselines
# (see bench/epoch.py). Lays out data/ first if it is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: bench/run.sh PROGRAM [--quick] [--threads N] [--csv FILE]" >&2; exit 2; }
PROGRAM="$1"; shift
[ -x "$PROGRAM" ] || { echo "bench/run.sh: $PROGRAM is not an executable" >&2; exit 2; }
"$ROOT/scripts/data.sh"
exec /usr/bin/python3 "$ROOT/bench/epoch.py" "$PROGRAM" --data "$ROOT/data/fashion-mnist" "$@"
