#!/bin/sh
# tests/fuzz/seeds.sh: the fuzzer's seeds, one path a line: every model file
# in the repository (models/, examples/, tests/, the golden inputs among
# them) and the kept findings (tests/fuzz/findings/).
cd "$(dirname "$0")/../.." || exit 2
find models examples tests -name '*.net' -type f | sort
find tests/fuzz/findings -type f ! -name README.md | sort
