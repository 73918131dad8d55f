/* rt_util.c: what every runtime file may use and that uses nothing of the
 * others: memory, messages, the clock, and who this process is among the
 * ranks. It sits at the bottom of the runtime's files so that none of them
 * has to import the training loop (or the communicator) to allocate or to
 * report an error (tests/runtime/rt_deps.py checks there are no circles). */
#include "rt_internal.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ALIGN 64

const char *rt_prog = "cddp";

/* Filled in by rt_comm_init; messages read it to say whose they are. */
rt_comm rt_world = { .rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .timeout = 300 };

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    /* One write per message, so parallel runs sharing a terminal do not
     * interleave half lines. With several ranks every rank may report, so
     * each line says whose it is. */
    if (rt_world.size > 1)
        fprintf(stderr, "%s: %s: rank %d: %s\n", rt_prog, kind, rt_world.rank, line);
    else
        fprintf(stderr, "%s: %s: %s\n", rt_prog, kind, line);
    fflush(stderr);
}

void rt_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("error", fmt, ap);
    va_end(ap);
}

void rt_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning", fmt, ap);
    va_end(ap);
}

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *rt_alloc(size_t bytes, const char *what)
{
    /* aligned_alloc wants a multiple of the alignment; round up, and give
     * a real (non-NULL) block for zero bytes. */
    if (bytes > SIZE_MAX - ALIGN) {
        rt_err("cannot allocate %s: size overflows", what);
        return NULL;
    }
    size_t sz = bytes ? (bytes + ALIGN - 1) / ALIGN * ALIGN : ALIGN;
    void *p = rt_aligned_alloc(ALIGN, sz);
    if (!p) {
        rt_err("cannot allocate %s (%zu bytes): out of memory", what, sz);
        return NULL;
    }
    memset(p, 0, sz);
    return p;
}

void rt_free(void *p) { free(p); }

void *rt_alloc_n(int64_t n, size_t each, const char *what)
{
    if (n < 0 || (n > 0 && (uint64_t)n > SIZE_MAX / each)) {
        rt_err("cannot allocate %s: %lld elements is too many", what, (long long)n);
        return NULL;
    }
    return rt_alloc((size_t)n * each, what);
}
