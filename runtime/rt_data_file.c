/* rt_data_file.c: a data file read whole into memory, for the readers
 * that parse from memory (rt_npz.c, rt_csv.c: their fuzz harnesses feed
 * the same parsers bytes). */
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

