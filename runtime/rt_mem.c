/* rt_mem.c: the runtime's allocations, through one hook.
 *
 * Every malloc, calloc, realloc and strdup of the runtime is one of these
 * (rt_alloc's aligned blocks too), so that a test can make any one of them
 * fail: rt_alloc_fail_hook is a weak symbol, absent from every program
 * cddpc builds (one predictable branch a call); the allocation-failure
 * test links an object defining it (tests/runtime/alloc_fail.c, through
 * CDDPC_CFLAGS) and fails the Nth allocation of a run, for each N. */
#include "rt_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int rt_alloc_fail_hook(void) __attribute__((weak));

static int fail(void)
{
    if (!rt_alloc_fail_hook || !rt_alloc_fail_hook())
        return 0;
    errno = ENOMEM;     /* as a failing malloc sets it */
    return 1;
}

void *rt_malloc(size_t n) { return fail() ? NULL : malloc(n); }

void *rt_calloc(size_t n, size_t each) { return fail() ? NULL : calloc(n, each); }

void *rt_realloc(void *p, size_t n) { return fail() ? NULL : realloc(p, n); }

void *rt_aligned_alloc(size_t align, size_t n) { return fail() ? NULL : aligned_alloc(align, n); }

char *rt_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = rt_malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}
