/* tests/runtime/alloc_fail.c: the allocation hook of runtime/rt_mem.c for
 * the allocation-failure test (tests/runtime/alloc_fail.sh), linked into a
 * training program through CDDPC_CFLAGS. Allocation number CDDP_FAIL_AT
 * (from 1, counted over all threads) of the run fails; at exit the count
 * of allocations is written to the file CDDP_ALLOC_COUNT names. */
#include <stdio.h>
#include <stdlib.h>

static long fail_at = -1, count;

int rt_alloc_fail_hook(void);

int rt_alloc_fail_hook(void)
{
    if (fail_at < 0) {
        const char *e = getenv("CDDP_FAIL_AT");
        fail_at = e ? atol(e) : 0;
    }
    return __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED) == fail_at;
}

__attribute__((destructor)) static void report(void)
{
    const char *p = getenv("CDDP_ALLOC_COUNT");
    FILE *f = p ? fopen(p, "w") : NULL;
    if (f) {
        fprintf(f, "%ld\n", __atomic_load_n(&count, __ATOMIC_RELAXED));
        fclose(f);
    }
}
