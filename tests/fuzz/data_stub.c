/* tests/fuzz/data_stub.c: what the data readers take from rt_util.c,
 * for the harnesses that link the readers alone (without MPI, BLAS and
 * the rest of the runtime). Messages are dropped: a fuzzer prints
 * millions of them. CDDP_FUZZ_VERBOSE=1 prints them (to see a finding's). */
#include "rt_internal.h"
#include <stdarg.h>
#include <stdlib.h>

rt_comm rt_world;
const char *rt_prog = "fuzz";

static void say(const char *kind, const char *fmt, va_list ap)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("CDDP_FUZZ_VERBOSE") != NULL;
    if (!verbose)
        return;
    fprintf(stderr, "fuzz: %s: ", kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
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
