# tests/skip.sh: sourced by the suite's shell entries (POSIX sh). An entry
# that cannot run here says why in one line and exits 77, which
# tests/suite.sh counts as skipped, never as passed; CI fails on a skip
# that tests/SKIPS does not list. A part of an entry that cannot run here
# is noted with skip_part, and the entry ends with skip_end: exit 1 after
# a failure, 77 when a part went unchecked, 0 only when all of it ran.
skip_all() { # REASON...
    echo "SKIP: $*"
    exit 77
}
SKIP_PARTS=
skip_part() { # REASON...
    echo "SKIP part: $*"
    SKIP_PARTS="${SKIP_PARTS:+$SKIP_PARTS; }$*"
}
skip_end() { # FAILURES
    [ "${1:-0}" -eq 0 ] || exit 1
    if [ -n "$SKIP_PARTS" ]; then
        echo "SKIP: not checked here: $SKIP_PARTS"
        exit 77
    fi
    exit 0
}
