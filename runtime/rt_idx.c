/* rt_idx.c: the IDX reader (MNIST / Fashion-MNIST format).
 *
 * An IDX file is a 4-byte magic (0, 0, type 0x08 = ubyte, number of
 * dimensions), one big-endian uint32 per dimension, then the raw bytes.
 * Files may be plain or gzip; zlib's gzread reads both (it passes
 * non-gzip input through unchanged), so one code path serves both.
 *
 * Every failure is reported as ONE line naming the file and the reason;
 * a bad dataset must never crash the program or train on garbage. */
#include "rt_internal.h"
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_UBYTE 0x08
#define CHUNK_MAX (1u << 30)    /* gzread takes an unsigned int length */


/* zlib's own description of the last error, or the C library's when zlib
 * says the error was in a system call. zlib prefixes its message with the
 * path, which our message already starts with, so that part is dropped. */
static const char *gz_reason(gzFile f, const char *path)
{
    int code = Z_OK;
    const char *msg = gzerror(f, &code);
    size_t pl = strlen(path);
    if (code == Z_ERRNO)
        return strerror(errno);
    if (code == Z_BUF_ERROR)
        return "truncated (unexpected end of compressed data)";
    if (!msg || !*msg)
        return "read error";
    if (!strncmp(msg, path, pl) && !strncmp(msg + pl, ": ", 2))
        msg += pl + 2;
    return msg;
}

/* Reads up to len bytes; returns the count, or -1 on a zlib/IO error. */
static int64_t gz_read_full(gzFile f, uint8_t *dst, int64_t len)
{
    int64_t got = 0;
    while (got < len) {
        int64_t want = len - got;
        unsigned chunk = want > CHUNK_MAX ? CHUNK_MAX : (unsigned)want;
        int r = gzread(f, dst + got, chunk);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += r;
    }
    return got;
}

/* DIR/NAME if it exists, else DIR/NAME.gz; writes the chosen path. */
static int find_file(const char *dir, const char *name, char *path, size_t cap)
{
    struct stat st;
    /* "--data d/" should still give messages about "d/file", not "d//file". */
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    int n = snprintf(path, cap, "%.*s/%s", (int)dl, dir, name);
    if (n < 0 || (size_t)n >= cap) {
        rt_err("%s/%s: path too long", dir, name);
        return -1;
    }
    if (stat(path, &st) == 0)
        return 0;
    n = snprintf(path, cap, "%.*s/%s.gz", (int)dl, dir, name);
    if (n < 0 || (size_t)n >= cap) {
        rt_err("%s/%s.gz: path too long", dir, name);
        return -1;
    }
    if (stat(path, &st) == 0)
        return 0;
    rt_err("%.*s/%s: cannot open (nor %s.gz): %s", (int)dl, dir, name, name, strerror(errno));
    return -1;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a whole IDX file with `ndims` dimensions into *data (malloc'd);
 * dims[] receives the dimensions. */
static int read_idx(const char *path, int ndims, const char *kind,
                    int64_t dims[3], uint8_t **data)
{
    *data = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        rt_err("%s: is a directory, expected an IDX file", path);
        return -1;
    }
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        rt_err("%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        return -1;
    }
    int rc = -1;
    uint8_t *buf = NULL;
    uint8_t hdr[16];
    int64_t hlen = 4 + 4 * (int64_t)ndims;
    int64_t got = gz_read_full(f, hdr, hlen);
    if (got < 0) {
        rt_err("%s: corrupt or unreadable: %s", path, gz_reason(f, path));
        goto out;
    }
    if (got < 4 || hdr[0] != 0 || hdr[1] != 0 || hdr[2] != IDX_UBYTE || hdr[3] != ndims) {
        if (got < 4)
            rt_err("%s: truncated: only %lld bytes, not even an IDX magic number",
                   path, (long long)got);
        else
            rt_err("%s: wrong magic number 0x%08x (expected 0x%08x for an IDX %s file)",
                   path, (unsigned)be32(hdr), 0x800u | (unsigned)ndims, kind);
        goto out;
    }
    if (got < hlen) {
        rt_err("%s: truncated: header needs %lld bytes, file has %lld",
               path, (long long)hlen, (long long)got);
        goto out;
    }
    /* Dimensions are 32-bit, so a product of up to three fits in 96 bits;
     * cap it well below INT64_MAX, and keep the sample count within int32
     * because batches index samples with int32_t. */
    int64_t total = 1;
    for (int d = 0; d < ndims; d++) {
        dims[d] = be32(hdr + 4 + 4 * d);
        if (dims[d] == 0) {
            rt_err("%s: dimension %d is 0 (empty %s file)", path, d, kind);
            goto out;
        }
        if (d == 0 && dims[0] > INT32_MAX) {
            rt_err("%s: %lld samples is more than this runtime supports", path,
                   (long long)dims[0]);
            goto out;
        }
        if (total > ((int64_t)1 << 40) / dims[d]) {
            rt_err("%s: header declares an implausibly large file", path);
            goto out;
        }
        total *= dims[d];
    }
    /* Grow the buffer as data arrives instead of trusting the header: a
     * corrupt count must give "truncated", not a multi-gigabyte malloc. */
    int64_t cap = total < (64 << 20) ? total : (64 << 20), have = 0;
    for (;;) {
        uint8_t *nb = realloc(buf, (size_t)cap);
        if (!nb) {
            rt_err("%s: out of memory reading %lld bytes", path, (long long)total);
            goto out;
        }
        buf = nb;
        int64_t r = gz_read_full(f, buf + have, cap - have);
        if (r < 0) {
            rt_err("%s: corrupt or unreadable: %s", path, gz_reason(f, path));
            goto out;
        }
        have += r;
        if (have < cap || cap == total)
            break;
        cap = cap * 2 < total ? cap * 2 : total;
    }
    if (have < total) {
        int code = Z_OK;
        gzerror(f, &code);
        rt_err("%s: truncated: header declares %lld data bytes, file has %lld%s", path,
               (long long)total, (long long)have,
               code == Z_BUF_ERROR ? " (compressed stream ends early)" : "");
        goto out;
    }
    /* Read past the end: zlib only checks the gzip CRC and length trailer
     * when it reaches it, and extra bytes mean the header is wrong. */
    uint8_t extra;
    int64_t r = gz_read_full(f, &extra, 1);
    if (r < 0) {
        rt_err("%s: corrupt or unreadable: %s", path, gz_reason(f, path));
        goto out;
    }
    if (r > 0) {
        rt_err("%s: unexpected data after the %lld bytes its header declares",
               path, (long long)total);
        goto out;
    }
    rc = 0;
out:;
    int cr = gzclose(f);
    if (rc == 0 && cr != Z_OK) {
        rt_err("%s: error closing: %s", path,
               cr == Z_ERRNO ? strerror(errno) : cr == Z_BUF_ERROR ? "truncated" : "zlib error");
        rc = -1;
    }
    if (rc == 0)
        *data = buf;
    else
        free(buf);
    return rc;
}

/* DIR/<prefix>-images-idx3-ubyte[.gz] and the matching labels. */
int rt_idx_load(const rt_model *m, const char *dir, const char *prefix, rt_dataset *out)
{
    char ipath[4096], lpath[4096], name[256], a[64], b[64];
    int64_t idim[3], ldim[3];
    uint8_t *lab = NULL;
    memset(out, 0, sizeof *out);

    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    if (find_file(dir, name, ipath, sizeof ipath) != 0)
        return -1;
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    if (find_file(dir, name, lpath, sizeof lpath) != 0)
        return -1;

    uint8_t *img = NULL;
    if (read_idx(ipath, 3, "idx3-ubyte image", idim, &img) != 0)
        goto fail;
    out->x = img;
    out->x_u8 = 1;
    out->xrank = 2;
    out->xdim[0] = idim[1];
    out->xdim[1] = idim[2];
    out->xsize = idim[1] * idim[2];
    int64_t want = rt_model_in_elems(m);
    if (out->xsize != want) {
        rt_err("%s: images are %s values, but model '%s' expects %s per sample", ipath,
               rt_data_dims(out, a, sizeof a), m->name, rt_model_dims(m, b, sizeof b));
        goto fail;
    }
    if (read_idx(lpath, 1, "idx1-ubyte label", ldim, &lab) != 0)
        goto fail;
    if (idim[0] != ldim[0]) {
        rt_err("%s: has %lld labels but %s has %lld images (counts must match)",
               lpath, (long long)ldim[0], ipath, (long long)idim[0]);
        goto fail;
    }
    if (m->target != RT_TGT_CLASS) {
        rt_err("%s: holds class labels, but model '%s' trains on %d float targets per sample", lpath, m->name,
               m->nclass);
        goto fail;
    }
    int32_t *y = malloc((size_t)ldim[0] * sizeof *y);
    if (!y) {
        rt_err("%s: out of memory", lpath);
        goto fail;
    }
    out->y = y;
    out->ysize = 1;
    for (int64_t i = 0; i < ldim[0]; i++) {
        if (lab[i] >= m->nclass) {
            rt_err("%s: label %d at index %lld is out of range for %d classes",
                   lpath, lab[i], (long long)i, m->nclass);
            goto fail;
        }
        y[i] = lab[i];
    }
    free(lab);
    out->n = idim[0];
    return 0;
fail:
    free(lab);
    rt_dataset_free(out);
    return -1;
}
