/* rt_data_file.c: what the readers that parse from memory share (rt_npz.c,
 * rt_csv.c: their fuzz harnesses feed the same parsers bytes): a data file
 * read whole, and a file's text made fit for a one-line message. */
#include "rt_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    uint8_t *b = malloc(cap);
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
        uint8_t *nb = realloc(b, cap * 2);
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
