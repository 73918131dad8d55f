/* rt_idx.c: the IDX reader (MNIST / Fashion-MNIST format).
 *
 * An IDX file is a 4-byte magic (0, 0, the element type, the number of
 * dimensions), one big-endian uint32 per dimension, then the elements,
 * big-endian: 0x08 ubyte, 0x09 signed byte, 0x0B short, 0x0C int, 0x0D
 * float, 0x0E double.
 * Files may be plain or gzip; zlib's gzread reads both (it passes
 * non-gzip input through unchanged), so one code path serves both.
 *
 * Every failure is reported as ONE line naming the file and the reason;
 * a bad dataset must never crash the program or train on garbage. */
#include "rt_internal.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

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

/* The element types of the IDX format: the magic number's third byte. */
static int elem_size(int type)
{
    switch (type) {
    case 0x08: case 0x09: return 1;     /* ubyte, signed byte */
    case 0x0B: return 2;                /* short */
    case 0x0C: case 0x0D: return 4;     /* int, float */
    case 0x0E: return 8;                /* double */
    default: return 0;
    }
}

static const char *elem_name(int type)
{
    switch (type) {
    case 0x08: return "ubyte";
    case 0x09: return "byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    default: return "double";
    }
}

/* Element k of a big-endian array of the given type, as a double. */
static double elem_at(const uint8_t *raw, int type, int64_t k)
{
    const uint8_t *p = raw + k * elem_size(type);
    switch (type) {
    case 0x08: return p[0];
    case 0x09: return (int8_t)p[0];
    case 0x0B: return (int16_t)(uint16_t)(p[0] << 8 | p[1]);
    case 0x0C: return (int32_t)be32(p);
    case 0x0D: {
        uint32_t u = be32(p);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    default: {
        uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    }
}

/* An IDX file read whole: its element type, dims and raw (big-endian)
 * elements. */
typedef struct idx_file {
    int type, ndims;
    int64_t dims[4];
    int64_t count;          /* elements */
    uint8_t *raw;
} idx_file;

/* Reads a whole IDX file of 1..maxdims dimensions into *x (x->raw
 * malloc'd). */
static int read_idx(const char *path, int maxdims, const char *kind, idx_file *x)
{
    memset(x, 0, sizeof *x);
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
    uint8_t hdr[4 + 4 * 4];
    int64_t got = gz_read_full(f, hdr, 4);
    if (got < 0) {
        rt_err("%s: corrupt or unreadable: %s", path, gz_reason(f, path));
        goto out;
    }
    if (got < 4) {
        rt_err("%s: truncated: only %lld bytes, not even an IDX magic number", path, (long long)got);
        goto out;
    }
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[3] < 1 || hdr[3] > maxdims) {
        rt_err("%s: wrong magic number 0x%08x (expected 0x000008%02x%s for an IDX %s file: 0, 0, the element type, "
               "1 to %d dimensions)", path, (unsigned)be32(hdr), (unsigned)(maxdims == 2 ? 1 : 3),
               maxdims == 2 ? " or 0x00000802" : "", kind, maxdims);
        goto out;
    }
    if (!elem_size(hdr[2])) {
        rt_err("%s: unknown element type 0x%02x in magic number 0x%08x (supported: 0x08 ubyte, 0x09 byte, 0x0b "
               "short, 0x0c int, 0x0d float, 0x0e double)", path, hdr[2], (unsigned)be32(hdr));
        goto out;
    }
    x->type = hdr[2];
    x->ndims = hdr[3];
    int ndims = x->ndims;
    int64_t hlen = 4 + 4 * (int64_t)ndims;
    got = gz_read_full(f, hdr + 4, hlen - 4);
    if (got < 0) {
        rt_err("%s: corrupt or unreadable: %s", path, gz_reason(f, path));
        goto out;
    }
    got += 4;
    if (got < hlen) {
        rt_err("%s: truncated: header needs %lld bytes, file has %lld",
               path, (long long)hlen, (long long)got);
        goto out;
    }
    int64_t *dims = x->dims;
    /* Dimensions are 32-bit: cap the product well below INT64_MAX as it
     * grows, and keep the sample count within int32 because batches index
     * samples with int32_t. */
    int64_t total = elem_size(x->type);
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
    if (rt_data_limit_check(path, "its data", 0, total) != 0)
        goto out;
    /* Grow the buffer as data arrives instead of trusting the header: a
     * corrupt count must give "truncated", not a multi-gigabyte malloc. */
    int64_t cap = total < (64 << 20) ? total : (64 << 20), have = 0;
    for (;;) {
        uint8_t *nb = rt_realloc(buf, (size_t)cap);
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
    if (rc == 0) {
        x->raw = buf;
        x->count = total / elem_size(x->type);
    } else {
        free(buf);
    }
    return rc;
}

/* x's elements as floats (NULL after the message): every value finite,
 * since a NaN or an infinity would train on garbage. */
static float *to_float(const char *path, const idx_file *x)
{
    float *v = rt_malloc((size_t)x->count * sizeof *v);
    if (!v) {
        rt_err("%s: out of memory", path);
        return NULL;
    }
    for (int64_t k = 0; k < x->count; k++) {
        double d = elem_at(x->raw, x->type, k);
        v[k] = (float)d;
        if (!isfinite(v[k])) {
            rt_err("%s: element %lld is %g, not a finite float", path, (long long)k, d);
            free(v);
            return NULL;
        }
    }
    return v;
}

/* The targets: class indices for a classifier (an integer type, [N] or
 * [N, 1], each in [0, nclass)), or K floats per sample for a loss of
 * float targets ([N] or [N, K], K the model's output width). */
static int read_targets(const rt_model *m, const char *lpath, const idx_file *l, rt_dataset *out)
{
    int64_t k = l->ndims == 2 ? l->dims[1] : 1;
    if (m->target == RT_TGT_FLOAT) {
        if (k != m->nclass) {
            rt_err("%s: has %lld targets per sample, but model '%s' has %d outputs (they must match)", lpath,
                   (long long)k, m->name, m->nclass);
            return -1;
        }
        if (!(out->y = to_float(lpath, l)))
            return -1;
        out->y_float = 1;
        out->ysize = k;
        return 0;
    }
    const int64_t P = rt_model_positions(m);
    if (l->type == 0x0D || l->type == 0x0E || k != P) {
        if (P == 1)
            rt_err("%s: holds %s targets of %lld per sample, but model '%s' is a classifier (its loss takes one "
                   "class index per sample, an integer IDX type)", lpath, elem_name(l->type), (long long)k, m->name);
        else
            rt_err("%s: holds %s targets of %lld per sample, but model '%s' classifies each of %lld positions (its "
                   "loss takes %lld class indices per sample, an integer IDX type)", lpath, elem_name(l->type),
                   (long long)k, m->name, (long long)P, (long long)P);
        return -1;
    }
    int32_t *y = rt_malloc((size_t)(l->dims[0] * P) * sizeof *y);
    if (!y) {
        rt_err("%s: out of memory", lpath);
        return -1;
    }
    out->y = y;
    out->ysize = P;
    for (int64_t i = 0; i < l->dims[0] * P; i++) {
        double v = elem_at(l->raw, l->type, i);
        if (!rt_label_ok(m, v)) {
            rt_err("%s: label %.0f at index %lld is out of range for %d classes%s", lpath, v, (long long)i,
                   m->nclass, rt_label_hint(m, v));
            return -1;
        }
        y[i] = (int32_t)v;
    }
    return 0;
}

/* DIR/<prefix>-images-idx3-ubyte[.gz] and the matching labels, whatever
 * their element type: ubyte samples stay uint8 (scaled by 1/255 in the
 * kernels, as ToTensor), other types become float as stored. */
int rt_idx_load(const rt_model *m, const char *dir, const char *prefix, rt_dataset *out)
{
    char ipath[4096], lpath[4096], name[256], a[64], b[64];
    idx_file img = {0}, lab = {0};
    memset(out, 0, sizeof *out);

    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    if (find_file(dir, name, ipath, sizeof ipath) != 0)
        return -1;
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    const int labels = m->target != RT_TGT_INPUT;  /* an autoencoder's targets are its samples */
    if (labels && find_file(dir, name, lpath, sizeof lpath) != 0)
        return -1;

    if (read_idx(ipath, 4, "image", &img) != 0)
        goto fail;
    out->xrank = img.ndims - 1;
    out->xsize = 1;
    for (int d = 1; d < img.ndims; d++) {
        out->xdim[d - 1] = img.dims[d];
        out->xsize *= img.dims[d];
    }
    int64_t want = rt_model_in_elems(m);
    if (out->xsize != want) {
        rt_err("%s: images are %s values, but model '%s' expects %s per sample", ipath,
               rt_data_dims(out, a, sizeof a), m->name, rt_model_dims(m, b, sizeof b));
        goto fail;
    }
    if (img.type == 0x08 && !m->in_vocab) {     /* tokens are taken as they are */
        out->x = img.raw;
        out->x_u8 = 1;
        img.raw = NULL;
    } else if (!(out->x = to_float(ipath, &img)) || rt_tokens_check(m, ipath, "images", out->x, img.dims[0],
                                                                     out->xsize) != 0) {
        goto fail;
    }
    free(img.raw);
    img.raw = NULL;
    if (!labels) {
        if (rt_dataset_no_targets(out, img.dims[0], ipath) != 0)
            goto fail;
        out->n = img.dims[0];
        return 0;
    }
    if (read_idx(lpath, 2, "label", &lab) != 0)
        goto fail;
    if (img.dims[0] != lab.dims[0]) {
        rt_err("%s: has %lld labels but %s has %lld images (counts must match)",
               lpath, (long long)lab.dims[0], ipath, (long long)img.dims[0]);
        goto fail;
    }
    if (read_targets(m, lpath, &lab, out) != 0)
        goto fail;
    free(lab.raw);
    out->n = img.dims[0];
    return 0;
fail:
    free(img.raw);
    free(lab.raw);
    rt_dataset_free(out);
    return -1;
}
