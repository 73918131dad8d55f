/* util.c: allocation and strings.
 *
 * The compiler is a short-lived batch program: everything it allocates
 * lives until exit, so there is no free(). Every allocation goes through
 * util_alloc, the one place where out-of-memory is reported, and is listed
 * so that util_free_all can end the arena when one process compiles many
 * inputs (tests/fuzz: otherwise every input's memory would accumulate). */
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"

static void **blocks;       /* every block util_alloc returned */
static size_t nblocks, cap_blocks;

static _Noreturn void out_of_memory(size_t n)
{
    fprintf(stderr, "cddpc: error: out of memory (%zu bytes)\n", n);
    exit(1);
}

void *util_alloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p)
        out_of_memory(n);
    if (nblocks == cap_blocks) {
        size_t cap = cap_blocks ? 2 * cap_blocks : 1024;
        void **b = realloc(blocks, cap * sizeof *b);
        if (!b)
            out_of_memory(cap * sizeof *b);
        blocks = b;
        cap_blocks = cap;
    }
    blocks[nblocks++] = p;
    return p;
}

void util_free_all(void)
{
    for (size_t i = 0; i < nblocks; i++)
        free(blocks[i]);
    free(blocks);
    blocks = NULL;
    nblocks = cap_blocks = 0;
}

void *util_grow(void *p, size_t old, size_t n)
{
    void *q = util_alloc(n);
    if (p)
        memcpy(q, p, old < n ? old : n);
    return q;
}

char *util_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(util_alloc(n), s, n);
}

char *util_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = util_alloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* A float as a C literal that round-trips through float (9 digits). */
char *util_cfloat(double v)
{
    char *s = util_fmt("%.9g", v);
    if (!strpbrk(s, ".eEn"))        /* 0 -> 0.0f; inf/nan never reach here */
        s = util_fmt("%s.0", s);
    return util_fmt("%sf", s);
}

int util_set_add(IdSet *s, int id)
{
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == id)
            return 0;
    if ((s->n & (s->n - 1)) == 0)       /* capacity: the next power of two */
        s->v = util_grow(s->v, sizeof(int) * (size_t)s->n, sizeof(int) * (size_t)(s->n ? 2 * s->n : 1));
    s->v[s->n++] = id;
    return 1;
}
