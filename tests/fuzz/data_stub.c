/* tests/fuzz/data_stub.c: what the data readers take from rt_util.c,
 * for the harnesses that link the readers alone (without MPI, BLAS and
 * the rest of the runtime). Messages are checked to be one line (a
 * line break taken from the file would split an error in two: abort, a
 * finding) and dropped: a fuzzer makes millions. CDDP_FUZZ_VERBOSE=1
 * prints them (to see a finding's). */
#include "rt_internal.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

rt_comm rt_world;
const char *rt_prog = "fuzz";

static void say(const char *kind, const char *fmt, va_list ap)
{
    static int verbose = -1;
    char msg[8192];
    if (verbose < 0)
        verbose = getenv("CDDP_FUZZ_VERBOSE") != NULL;
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (verbose)
        fprintf(stderr, "fuzz: %s: %s\n", kind, msg);
    if (strchr(msg, '\n') || strchr(msg, '\r')) {
        fprintf(stderr, "fuzz: the %s message has a line break: %s\n", kind, msg);
        abort();
    }
}

void rt_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say("error", fmt, ap);
    va_end(ap);
}

void rt_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say("warning", fmt, ap);
    va_end(ap);
}
