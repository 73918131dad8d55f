/* rt_data_file.c: what the readers that parse from memory share (rt_npz.c,
 * rt_csv.c: their fuzz harnesses feed the same parsers bytes): a data file
 * read whole, and a file's text made fit for a one-line message. */
#include "rt_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_MAX ((size_t)1 << 40)

/* The whole file, read into memory (malloc'd); -1 after an error. */
int rt_data_read_file(const char *path, uint8_t **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        rt_err("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = rt_malloc(cap);
    for (;;) {
        if (!b) {
            rt_err("%s: out of memory reading it", path);
            fclose(f);
            return -1;
        }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        if (cap >= FILE_MAX) {
            rt_err("%s: larger than this runtime reads (1 TiB)", path);
            free(b);
            fclose(f);
            return -1;
        }
        uint8_t *nb = rt_realloc(b, cap * 2);
        if (!nb)
            free(b);
        b = nb;
        cap *= 2;
    }
    if (ferror(f)) {
        rt_err("%s: read error: %s", path, strerror(errno));
        free(b);
        fclose(f);
        return -1;
    }
    fclose(f);
    *buf = b;
    *len = n;
    return 0;
}

int64_t rt_data_limit;

/* "1.5 GiB": a size in a message */
static const char *human(int64_t b, char *buf, size_t cap)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

int rt_data_limit_check(const char *path, const char *what, int64_t used, int64_t bytes)
{
    int64_t lim = rt_data_limit;
    const char *why = "";
    if (lim <= 0) {
        /* by default half the memory: past it the kernel's OOM killer, not
         * a message, would end the run */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        lim = pages > 0 && psz > 0 ? (int64_t)pages * psz / 2 : (int64_t)1 << 32;
        why = ", half this machine's memory";
    }
    if (bytes <= lim - used)
        return 0;
    char a[32], b[32], c[32];
    if (used)
        rt_err("%s: %s needs %s once read, which with the %s read before it is over the data limit of %s%s "
               "(--data-limit SIZE raises it)", path, what, human(bytes, a, sizeof a), human(used, b, sizeof b),
               human(lim, c, sizeof c), why);
    else
        rt_err("%s: %s needs %s once read, over the data limit of %s%s (--data-limit SIZE raises it)", path, what,
               human(bytes, a, sizeof a), human(lim, c, sizeof c), why);
    return -1;
}

const char *rt_data_show(const char *s, size_t n, char *buf, size_t cap)
{
    size_t i = 0;
    for (; i < n && i + 1 < cap; i++)
        buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[i] = 0;
    if (i < n && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
    return buf;
}
