/* rt_npz.c: numpy's np.savez / np.savez_compressed files.
 *
 * An .npz is a zip archive whose members are .npy files: each member is
 * stored or deflated (read with zlib's raw inflate), found through the
 * central directory (whose sizes are the true ones: numpy writes every
 * local header with force_zip64, so the local sizes are placeholders).
 * An .npy is the magic "\x93NUMPY", a version (1.0: 16-bit header
 * length; 2.0 and 3.0: 32-bit), and a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (1797, 1, 8, 8), }
 * followed by the raw little-endian array in C order.
 *
 * The whole file is read into memory and parsed from there
 * (rt_npz_parse), so the fuzz harness drives exactly the code a run
 * uses. Every failure is one line naming the file, the member and the
 * reason. */
#include "rt_internal.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define NPY_MAXRANK 8
#define FILE_MAX ((int64_t)1 << 40)

typedef struct npy {
    char kind;              /* 'u', 'i', 'f', 'b' */
    int size;               /* bytes per element */
    int rank;
    int64_t shape[NPY_MAXRANK];
    int64_t count;          /* elements */
    const uint8_t *data;    /* count * size bytes, little-endian */
    uint8_t *own;           /* the inflated member, when it was deflated */
    char descr[16];         /* as the header writes it, for messages */
} npy;

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | (uint32_t)le16(p + 2) << 16; }

/* ---- the zip container --------------------------------------------------- */

/* A member as the central directory describes it. */
typedef struct zmember {
    uint32_t method, crc, csize, usize;
    const uint8_t *src;     /* its csize bytes as stored */
} zmember;

/* Finds member `name` through the central directory. 1: found, 0: no such
 * member, -1: error reported. With list (cap bytes), the arrays' names
 * ("'a', 'b'": members NAME.npy) are written there as it passes them. */
static int zip_find(const char *path, const uint8_t *b, size_t n, const char *name, zmember *zm, char *list,
                    size_t cap)
{
    if (n < 4 || le32(b) != 0x04034b50u) {
        if (n >= 6 && !memcmp(b, "\x93NUMPY", 6))
            rt_err("%s: is a single .npy array (np.save), not an .npz archive (np.savez)", path);
        else
            rt_err("%s: not an .npz file (no zip signature at its start)", path);
        return -1;
    }
    /* the end of central directory record: 22 bytes and a comment of up
     * to 65535 bytes at the end of the file */
    size_t eocd = (size_t)-1;
    for (size_t i = n >= 22 ? n - 22 : 0; n >= 22; i--) {
        if (le32(b + i) == 0x06054b50u && i + 22 + le16(b + i + 20) == n) {
            eocd = i;
            break;
        }
        if (i == 0 || n - 22 - i >= 65535)
            break;
    }
    if (eocd == (size_t)-1) {
        rt_err("%s: truncated or not a zip archive (no end of central directory record)", path);
        return -1;
    }
    uint32_t entries = le16(b + eocd + 10), cdsize = le32(b + eocd + 12), cdoff = le32(b + eocd + 16);
    if (entries == 0xffffu || cdsize == 0xffffffffu || cdoff == 0xffffffffu) {
        rt_err("%s: a ZIP64 archive (over 4 GiB or 65535 arrays), which this reader does not support", path);
        return -1;
    }
    if ((uint64_t)cdoff + cdsize > eocd) {
        rt_err("%s: corrupt zip: the central directory (offset %u, %u bytes) lies outside the file", path,
               (unsigned)cdoff, (unsigned)cdsize);
        return -1;
    }
    size_t at = cdoff, end = (size_t)cdoff + cdsize, nl = strlen(name);
    for (uint32_t e = 0; e < entries; e++) {
        if (at + 46 > end || le32(b + at) != 0x02014b50u) {
            rt_err("%s: corrupt zip: central directory entry %u is damaged", path, (unsigned)e);
            return -1;
        }
        uint32_t flags = le16(b + at + 8);
        zm->method = le16(b + at + 10);
        zm->crc = le32(b + at + 16);
        zm->csize = le32(b + at + 20);
        zm->usize = le32(b + at + 24);
        uint32_t fl = le16(b + at + 28), xl = le16(b + at + 30), cl = le16(b + at + 32);
        uint32_t lho = le32(b + at + 42);
        const uint8_t *fname = b + at + 46;
        if (at + 46 + fl + xl + cl > end) {
            rt_err("%s: corrupt zip: central directory entry %u runs past the directory", path, (unsigned)e);
            return -1;
        }
        at += 46 + fl + xl + cl;
        if (list && fl > 4 && !memcmp(fname + fl - 4, ".npy", 4)) {
            size_t used = strlen(list);
            char show[64];
            snprintf(list + used, cap - used, "%s'%s'", used ? ", " : "",
                     rt_data_show((const char *)fname, fl - 4, show, sizeof show));
        }
        if (fl != nl || memcmp(fname, name, nl) != 0)
            continue;
        if (zm->csize == 0xffffffffu || zm->usize == 0xffffffffu || lho == 0xffffffffu) {
            rt_err("%s: member %s is in ZIP64 form (over 4 GiB), which this reader does not support", path, name);
            return -1;
        }
        if (flags & 1) {
            rt_err("%s: member %s is encrypted", path, name);
            return -1;
        }
        if ((uint64_t)lho + 30 > n || le32(b + lho) != 0x04034b50u) {
            rt_err("%s: corrupt zip: member %s has no local header at offset %u", path, name, (unsigned)lho);
            return -1;
        }
        uint64_t start = (uint64_t)lho + 30 + le16(b + lho + 26) + le16(b + lho + 28);
        if (start + zm->csize > n) {
            rt_err("%s: member %s is truncated: %u bytes declared, %lld in the file", path, name,
                   (unsigned)zm->csize, (long long)(start > n ? 0 : n - start));
            return -1;
        }
        zm->src = b + start;
        if (zm->method == 0 && zm->csize != zm->usize) {
            rt_err("%s: corrupt zip: stored member %s has sizes %u and %u", path, name, (unsigned)zm->csize,
                   (unsigned)zm->usize);
            return -1;
        }
        if (zm->method != 0 && zm->method != 8) {
            rt_err("%s: member %s uses zip compression method %u (only stored and deflated are supported)",
                   path, name, (unsigned)zm->method);
            return -1;
        }
        /* deflate expands at most about 1032:1: a larger claim is a
         * corrupt header, not a reason to allocate gigabytes */
        if (zm->method == 8 && (uint64_t)zm->usize > (uint64_t)zm->csize * 1100 + 1024) {
            rt_err("%s: corrupt zip: member %s claims %u bytes from %u compressed", path, name,
                   (unsigned)zm->usize, (unsigned)zm->csize);
            return -1;
        }
        return 1;
    }
    return 0;
}

/* Inflates into out[at, cap): more of z's stream. Z_STREAM_END, Z_OK when
 * out is full with more to come, or zlib's error. */
static int inflate_to(z_stream *z, uint8_t *out, size_t at, size_t cap)
{
    z->next_out = out + at;
    z->avail_out = (uInt)(cap - at);
    int r;
    do
        r = inflate(z, Z_NO_FLUSH);     /* inflate gives all the output it can either way */
    while (r == Z_OK && z->avail_out > 0);
    return r == Z_BUF_ERROR && z->avail_out == 0 ? Z_OK : r;
}

/* ---- the .npy header ----------------------------------------------------- */

static const char *skip_ws(const char *s, const char *e)
{
    while (s < e && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'))
        s++;
    return s;
}

/* a quoted Python string at s: [*v, *v + *vl), returns past the quote */
static const char *py_str(const char *s, const char *e, const char **v, size_t *vl)
{
    if (s >= e || (*s != '\'' && *s != '"'))
        return NULL;
    char q = *s++;
    const char *b = s;
    while (s < e && *s != q)
        s++;
    if (s >= e)
        return NULL;
    *v = b;
    *vl = (size_t)(s - b);
    return s + 1;
}

static int descr_type(const char *d, size_t dl, npy *a)
{
    if (dl < 3 || dl > 4 || (d[0] != '<' && d[0] != '|' && d[0] != '='))
        return -1;
    a->kind = d[1];
    a->size = 0;
    for (size_t i = 2; i < dl; i++) {
        if (d[i] < '0' || d[i] > '9')
            return -1;
        a->size = a->size * 10 + (d[i] - '0');
    }
    switch (a->kind) {
    case 'u': case 'i': return a->size == 1 || a->size == 2 || a->size == 4 || a->size == 8 ? 0 : -1;
    case 'f': return a->size == 4 || a->size == 8 ? 0 : -1;
    case 'b': return a->size == 1 ? 0 : -1;
    default: return -1;
    }
}

/* Parses the header of member `name` (an .npy whose first n bytes are b)
 * into *a; *off: where its data starts. -2 (nothing reported) when the
 * header runs past b[n). */
static int npy_header(const char *path, const char *name, const uint8_t *b, size_t n, npy *a, size_t *off)
{
    memset(a, 0, sizeof *a);
    if (n < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        if (n < 10 && !memcmp(b, "\x93NUMPY", n < 6 ? n : 6))
            return -2;
        rt_err("%s: member %s is not an .npy array (wrong magic)", path, name);
        return -1;
    }
    int major = b[6];
    size_t hl, h0;
    if (major == 1) {
        hl = le16(b + 8);
        h0 = 10;
    } else if (major == 2 || major == 3) {
        if (n < 12)
            return -2;
        hl = le32(b + 8);
        h0 = 12;
    } else {
        rt_err("%s: member %s is .npy version %d.%d (this reader knows 1.0, 2.0 and 3.0)", path, name, major, b[7]);
        return -1;
    }
    if (hl > n - h0)
        return -2;
    const char *s = (const char *)b + h0, *e = s + hl;
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0;
    s = skip_ws(s, e);
    if (s >= e || *s++ != '{')
        goto bad;
    for (;;) {
        s = skip_ws(s, e);
        if (s < e && *s == '}')
            break;
        const char *k;
        size_t kl;
        if (!(s = py_str(s, e, &k, &kl)))
            goto bad;
        s = skip_ws(s, e);
        if (s >= e || *s++ != ':')
            goto bad;
        s = skip_ws(s, e);
        if (kl == 5 && !memcmp(k, "descr", 5)) {
            const char *v;
            size_t vl;
            if (!(s = py_str(s, e, &v, &vl)))   /* a structured dtype is a list: refused below */
                goto bad_descr_list;
            rt_data_show(v, vl, a->descr, sizeof a->descr);
            if (descr_type(v, vl, a) != 0) {
                char show[44];
                rt_err("%s: member %s has dtype '%s', which this reader cannot read (it reads uint8/16/32/64, "
                       "int8/16/32/64, float32, float64 and bool, little-endian)", path, name,
                       rt_data_show(v, vl, show, sizeof show));
                return -1;
            }
            have_descr = 1;
        } else if (kl == 13 && !memcmp(k, "fortran_order", 13)) {
            if (e - s >= 4 && !memcmp(s, "True", 4)) {
                fortran = 1;
                s += 4;
            } else if (e - s >= 5 && !memcmp(s, "False", 5)) {
                s += 5;
            } else
                goto bad;
            have_order = 1;
        } else if (kl == 5 && !memcmp(k, "shape", 5)) {
            if (s >= e || *s++ != '(')
                goto bad;
            a->rank = 0;
            for (;;) {
                s = skip_ws(s, e);
                if (s < e && *s == ')') {
                    s++;
                    break;
                }
                if (s >= e || *s < '0' || *s > '9')
                    goto bad;
                int64_t v = 0;
                while (s < e && *s >= '0' && *s <= '9') {
                    if (v > FILE_MAX)
                        goto bad_size;
                    v = v * 10 + (*s++ - '0');
                }
                if (a->rank == NPY_MAXRANK) {
                    rt_err("%s: member %s has more than %d dimensions", path, name, NPY_MAXRANK);
                    return -1;
                }
                a->shape[a->rank++] = v;
                s = skip_ws(s, e);
                if (s < e && *s == ',')
                    s++;
                else if (s < e && *s == ')') {
                    s++;
                    break;
                } else
                    goto bad;
            }
            have_shape = 1;
        } else
            goto bad;
        s = skip_ws(s, e);
        if (s < e && *s == ',')
            s++;
        else if (s < e && *s == '}')
            break;
        else
            goto bad;
    }
    if (!have_descr || !have_order || !have_shape)
        goto bad;
    if (fortran) {
        rt_err("%s: member %s is in Fortran order; save it in C order (np.ascontiguousarray)", path, name);
        return -1;
    }
    a->count = 1;
    for (int d = 0; d < a->rank; d++) {
        if (a->shape[d] && a->count > FILE_MAX / a->shape[d])
            goto bad_size;
        a->count *= a->shape[d];
    }
    if (a->count > FILE_MAX / 8)
        goto bad_size;
    *off = h0 + hl;
    return 0;
bad_size:
    rt_err("%s: member %s declares an implausibly large shape", path, name);
    return -1;
bad_descr_list:
    rt_err("%s: member %s has a structured dtype, which this reader cannot read", path, name);
    return -1;
bad:
    rt_err("%s: member %s has a malformed .npy header (expected {'descr': ..., 'fortran_order': ..., 'shape': (...)})",
           path, name);
    return -1;
}

/* element i as a double */
static double npy_get(const npy *a, int64_t i)
{
    const uint8_t *p = a->data + i * a->size;
    uint64_t u = 0;
    for (int k = a->size - 1; k >= 0; k--)
        u = u << 8 | p[k];
    switch (a->kind) {
    case 'f':
        if (a->size == 4) {
            uint32_t w = (uint32_t)u;
            float f;
            memcpy(&f, &w, 4);
            return f;
        } else {
            double d;
            memcpy(&d, &u, 8);
            return d;
        }
    case 'i': {
        int sh = 64 - 8 * a->size;
        return (double)((int64_t)(u << sh) >> sh);
    }
    default:
        return (double)u;
    }
}

/* ---- arrays into a data set ---------------------------------------------- */

static const char *dtype_name(const npy *a)
{
    static const char *const ints[] = {"int8", "int16", "", "int32", "", "", "", "int64"};
    static const char *const uints[] = {"uint8", "uint16", "", "uint32", "", "", "", "uint64"};
    if (a->kind == 'f')
        return a->size == 4 ? "float32" : "float64";
    if (a->kind == 'b')
        return "bool";
    return (a->kind == 'i' ? ints : uints)[a->size - 1];
}

static const char *shape_str(const npy *a, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < a->rank && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)a->shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
    return buf;
}

static int to_set(const rt_model *m, const char *path, const char *xn, const npy *x, const char *yn, const npy *y,
                  rt_dataset *out)
{
    char a[96], b[96], c[96];
    memset(out, 0, sizeof *out);
    if (x->rank < 1 || x->rank > 5) {
        rt_err("%s: %s has shape %s; expected [samples, ...] with at most 4 dims per sample", path, xn,
               shape_str(x, a, sizeof a));
        return -1;
    }
    int64_t n = x->shape[0];
    if (n < 1 || n > INT32_MAX) {
        rt_err("%s: %s has %lld samples (expected 1 to %d)", path, xn, (long long)n, INT32_MAX);
        return -1;
    }
    if (y && (y->rank < 1 || y->shape[0] != n)) {
        rt_err("%s: %s has shape %s but %s has %lld samples (counts must match)", path, yn,
               shape_str(y, a, sizeof a), xn, (long long)n);
        return -1;
    }
    out->xrank = x->rank > 1 ? x->rank - 1 : 1;
    out->xsize = 1;
    for (int d = 0; d < out->xrank; d++) {
        out->xdim[d] = x->rank > 1 ? x->shape[d + 1] : 1;
        out->xsize *= out->xdim[d];
    }
    if (out->xsize != rt_model_in_elems(m)) {
        rt_err("%s: %s has shape %s, %s values per sample, but model '%s' expects %s", path, xn,
               shape_str(x, a, sizeof a), rt_data_dims(out, b, sizeof b), m->name,
               rt_model_dims(m, c, sizeof c));
        return -1;
    }
    const int64_t ny = y ? y->count / n : 0, P = rt_model_positions(m);
    if (!y) {       /* target = input: the samples are the targets */
    } else if (m->target == RT_TGT_CLASS) {
        if (ny != P) {
            if (P == 1)
                rt_err("%s: %s has shape %s, but model '%s' trains on one class index per sample", path, yn,
                       shape_str(y, a, sizeof a), m->name);
            else
                rt_err("%s: %s has shape %s, but model '%s' trains on a class index at each of %lld positions a "
                       "sample", path, yn, shape_str(y, a, sizeof a), m->name, (long long)P);
            return -1;
        }
        if (y->kind == 'f') {
            rt_err("%s: %s holds %s values, but model '%s' trains on class indices: save integer labels", path,
                   yn, dtype_name(y), m->name);
            return -1;
        }
    } else if (ny != m->nclass) {
        rt_err("%s: %s has shape %s, but model '%s' outputs %d value%s per sample", path, yn,
               shape_str(y, a, sizeof a), m->name, m->nclass, m->nclass == 1 ? "" : "s");
        return -1;
    }
    out->n = n;
    out->x_u8 = x->kind == 'u' && x->size == 1 && !m->in_vocab;   /* tokens are taken as they are */
    size_t xe = (size_t)(n * out->xsize);
    out->x = rt_malloc(xe * (out->x_u8 ? 1 : sizeof(float)));
    if (!y) {
        if (rt_dataset_no_targets(out, n, path) != 0)
            goto fail;
    } else {
        out->ysize = m->target == RT_TGT_CLASS ? P : ny;
        out->y_float = m->target != RT_TGT_CLASS;
        out->y = rt_malloc((size_t)(n * out->ysize) * (out->y_float ? sizeof(float) : sizeof(int32_t)));
    }
    if (!out->x || !out->y) {
        rt_err("%s: out of memory for %lld samples", path, (long long)n);
        goto fail;
    }
    if (out->x_u8)
        memcpy(out->x, x->data, xe);
    else
        for (size_t i = 0; i < xe; i++) {
            double v = npy_get(x, (int64_t)i);
            float f = (float)v;
            if (!isfinite(f)) {
                rt_err("%s: %s sample %lld, element %lld is %s", path, xn, (long long)(i / out->xsize),
                       (long long)(i % out->xsize), isnan(v) ? "NaN" : isinf(v) ? "infinite" : "beyond float32's range");
                goto fail;
            }
            ((float *)out->x)[i] = f;
        }
    if (!out->x_u8 && rt_tokens_check(m, path, xn, out->x, n, out->xsize) != 0)
        goto fail;
    for (int64_t i = 0; y && i < n * out->ysize; i++) {
        double v = npy_get(y, i);
        if (out->y_float) {
            float f = (float)v;
            if (!isfinite(f)) {
                rt_err("%s: %s sample %lld, target %lld is %s", path, yn, (long long)(i / out->ysize),
                       (long long)(i % out->ysize), isnan(v) ? "NaN" : "infinite or beyond float32's range");
                goto fail;
            }
            ((float *)out->y)[i] = f;
        } else {
            if (!rt_label_ok(m, v)) {
                char pos[48] = "";
                if (P > 1)
                    snprintf(pos, sizeof pos, ", position %lld", (long long)(i % P));
                rt_err("%s: %s sample %lld%s: label %.0f is out of range for %d classes%s", path, yn,
                       (long long)(i / P), pos, v, m->nclass, rt_label_hint(m, v));
                goto fail;
            }
            ((int32_t *)out->y)[i] = (int32_t)v;
        }
    }
    return 0;
fail:
    rt_dataset_free(out);
    return -1;
}

/* the most of a deflated member inflated before its .npy header is read
 * (numpy writes headers of at most 10000 bytes by default) */
#define HEAD_MAX 65536

/* zlib's zr on member `name` as one message */
static void inflate_err(const char *path, const char *name, int zr, const z_stream *z)
{
    if (zr == Z_BUF_ERROR)
        rt_err("%s: member %s is truncated (its deflate stream ends early)", path, name);
    else
        rt_err("%s: member %s is corrupt: %s", path, name, z->msg ? z->msg : "inflate failed");
}

/* member zm (`name`), its .npy parsed into *a: its header is read first (a
 * deflated member's from its first HEAD_MAX inflated bytes) and the shape
 * checked against the zip's size and the data limit (*used: the bytes read
 * before it) before the rest is inflated. */
static int member_read(const char *path, const char *name, const zmember *zm, int64_t *used, npy *a)
{
    const int deflated = zm->method != 0;
    z_stream z;
    uint8_t head[HEAD_MAX];
    const uint8_t *hb = zm->src;        /* the header's bytes: hn of them */
    size_t hn = zm->usize, off = 0;
    int zr = Z_STREAM_END, r;
    memset(&z, 0, sizeof z);
    if (deflated) {
        if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
            rt_err("%s: zlib cannot start inflating %s", path, name);
            return -1;
        }
        z.next_in = (Bytef *)zm->src;
        z.avail_in = zm->csize;
        const size_t want = zm->usize < HEAD_MAX ? zm->usize : HEAD_MAX;
        zr = inflate_to(&z, head, 0, want);
        hb = head;
        hn = want - z.avail_out;
    }
    if (zr != Z_OK && zr != Z_STREAM_END) {
        inflate_err(path, name, zr, &z);
        r = -1;
    } else if ((r = npy_header(path, name, hb, hn, a, &off)) == -2) {
        if (deflated && hn == HEAD_MAX)
            rt_err("%s: member %s has an .npy header over %d bytes", path, name, HEAD_MAX);
        else
            rt_err("%s: member %s is truncated in its .npy header", path, name);
    } else if (r == 0 && (uint64_t)(a->count * a->size) != (uint64_t)zm->usize - off) {
        if (deflated)   /* refused before inflating more than its header */
            rt_err("%s: member %s: its .npy header declares %lld data bytes, the zip's directory %llu: the file "
                   "is damaged or forged", path, name, (long long)(a->count * a->size),
                   (unsigned long long)(zm->usize - off));
        else
            rt_err("%s: member %s: shape and dtype %s need %lld data bytes, the member has %zu%s", path, name,
                   a->descr, (long long)a->count * a->size, zm->usize - off,
                   (size_t)(a->count * a->size) > zm->usize - off ? " (truncated)" : "");
        r = -1;
    } else if (r == 0 && rt_data_limit_check(path, name, *used, zm->usize) != 0) {
        r = -1;
    } else if (r == 0 && !deflated) {
        a->data = zm->src + off;
    } else if (r == 0 && !(a->own = rt_malloc(zm->usize ? zm->usize : 1))) {
        rt_err("%s: out of memory inflating %s (%u bytes)", path, name, (unsigned)zm->usize);
        r = -1;
    } else if (r == 0) {
        memcpy(a->own, head, hn);
        size_t have = hn;
        if (zr == Z_OK && hn < zm->usize) {
            zr = inflate_to(&z, a->own, hn, zm->usize);
            have = zm->usize - z.avail_out;
        }
        if (zr == Z_OK) {       /* full: the stream must end here */
            uint8_t more;
            zr = inflate_to(&z, &more, 0, 1);
            if (zr == Z_OK) {
                rt_err("%s: member %s inflates to more than the %u bytes its header says", path, name,
                       (unsigned)zm->usize);
                r = -1;
            }
        }
        if (r == 0 && zr != Z_STREAM_END) {
            inflate_err(path, name, zr, &z);
            r = -1;
        } else if (r == 0 && have != zm->usize) {
            rt_err("%s: member %s inflates to %zu bytes, its header says %u", path, name, have,
                   (unsigned)zm->usize);
            r = -1;
        }
        a->data = a->own + off;
    }
    if (deflated)
        inflateEnd(&z);
    if (r) {
        free(a->own);
        a->own = NULL;
        return -1;
    }
    *used += zm->usize;
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION    /* the fuzzer cannot forge CRCs: let it past */
    if (crc32(0L, a->data - off, (uInt)zm->usize) != zm->crc) {
        rt_err("%s: member %s fails its CRC check (the file is damaged)", path, name);
        free(a->own);
        a->own = NULL;
        return -1;
    }
#endif
    return 0;
}

/* member name "NAME.npy" of array NAME, parsed; 0 when absent */
static int get_array(const char *path, const uint8_t *b, size_t n, const char *name, int64_t *used, npy *a)
{
    char mem[256];
    memset(a, 0, sizeof *a);
    if (snprintf(mem, sizeof mem, "%s.npy", name) >= (int)sizeof mem) {
        rt_err("%s: array name '%s' is too long", path, name);
        return -1;
    }
    zmember zm;
    int r = zip_find(path, b, n, mem, &zm, NULL, 0);
    if (r <= 0)
        return r;
    return member_read(path, mem, &zm, used, a) != 0 ? -1 : 1;
}

/* npz(..., y_train = ["a", "b"], y_test = [...]): the K arrays (each [N]
 * or [N, 1]) of one set as the columns of one float64 [N, K] array in
 * *y, whose memory it owns; 0 none named, 1 made, -1 error reported */
static int y_columns(const char *path, const uint8_t *buf, size_t len, const rt_data_src *s, int test,
                     int64_t *used, npy *y, char *names, size_t cap)
{
    const int K = s->ntargets / 2;
    const char *const *nm = s->targets + (test ? K : 0);
    npy col;
    int64_t n = -1;
    memset(y, 0, sizeof *y);
    snprintf(names, cap, "%s", nm[0]);
    for (int k = 0; k < K; k++) {
        memset(&col, 0, sizeof col);
        const int r = get_array(path, buf, len, nm[k], used, &col);
        if (r <= 0) {
            if (r == 0 && (k > 0 || !test))
                rt_err("%s: has no array '%s' (np.savez(..., %s=...)), a target %s names", path, nm[k], nm[k],
                       test ? "y_test" : "y_train");
            free(col.own);     /* y's memory is the caller's to free (a[i].own) */
            return r == 0 && k == 0 && test ? 0 : -1;
        }
        if (k > 0)
            snprintf(names + strlen(names), cap - strlen(names), " + %s", nm[k]);
        const int64_t m = col.rank >= 1 ? col.shape[0] : -1;
        if (!(col.rank == 1 || (col.rank == 2 && col.shape[1] == 1)) || (n >= 0 && m != n) || m < 1) {
            char a[96];
            rt_err("%s: %s has shape %s: a target array is [samples] or [samples, 1]%s", path, nm[k],
                   shape_str(&col, a, sizeof a), n >= 0 && m != n ? ", as many samples as the first" : "");
            free(col.own);
            return -1;
        }
        if (k == 0) {   /* [N, K] float64, little-endian as an .npy's */
            n = m;
            *y = (npy){.kind = 'f', .size = 8, .rank = 2, .shape = {n, K}, .count = n * K};
            snprintf(y->descr, sizeof y->descr, "<f8");
            y->own = rt_malloc((size_t)(n * K) * 8);
            y->data = y->own;
            if (!y->own) {
                rt_err("%s: out of memory for %lld targets", path, (long long)(n * K));
                free(col.own);
                return -1;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            const double v = npy_get(&col, i);
            uint64_t bits;
            memcpy(&bits, &v, 8);
            for (int b = 0; b < 8; b++)
                y->own[(i * K + k) * 8 + b] = (uint8_t)(bits >> (8 * b));
        }
        free(col.own);
    }
    return 1;
}

int rt_npz_parse(const rt_model *m, const char *path, const uint8_t *buf, size_t len, rt_dataset *train,
                 rt_dataset *test)
{
    static const char *const def[4] = {"x_train", "y_train", "x_test", "y_test"};
    const char *const *nm = m->data.arrays ? m->data.arrays : def;
    npy a[4];
    int have[4] = {0}, rc = -1;
    int64_t used = 0;
    memset(a, 0, sizeof a);
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    /* an autoencoder's targets are its samples: no y arrays are read */
    const int ys = m->target != RT_TGT_INPUT, cols = m->data.ntargets >= 4;
    char yname[2][160];
    snprintf(yname[0], sizeof yname[0], "%s", nm[1]);
    snprintf(yname[1], sizeof yname[1], "%s", nm[3]);
    for (int i = 0; i < 4; i++)
        if ((i % 2 == 0 || ys) && (have[i] = i % 2 && cols
                                   ? y_columns(path, buf, len, &m->data, i == 3, &used, &a[i], yname[i / 2], 160)
                                   : get_array(path, buf, len, nm[i], &used, &a[i])) < 0)
            goto out;
    for (int i = 0; i < 2; i++)
        if (!have[i] && (i == 0 || ys) && !(i == 1 && cols)) {    /* y_columns has said which */
            char list[512] = "";
            zmember zm;
            zip_find(path, buf, len, "", &zm, list, sizeof list);
            rt_err("%s: has no array '%s' (np.savez(..., %s=...)); its arrays: %s", path, nm[i], nm[i],
                   *list ? list : "none");
            goto out;
        }
    if (ys && have[2] != have[3]) {
        rt_err("%s: has array '%s' but not '%s': give both test arrays, or neither (and split)", path,
               have[2] ? nm[2] : yname[1], have[2] ? yname[1] : nm[2]);
        goto out;
    }
    if (to_set(m, path, nm[0], &a[0], yname[0], ys ? &a[1] : NULL, train) != 0 ||
        (have[2] && to_set(m, path, nm[2], &a[2], yname[1], ys ? &a[3] : NULL, test) != 0))
        goto out;
    if (have[2] && test->xsize == train->xsize && test->x_u8 != train->x_u8) {
        rt_err("%s: %s is %s but %s is %s: save both with one dtype", path, nm[0], dtype_name(&a[0]), nm[2],
               dtype_name(&a[2]));
        goto out;
    }
    rc = 0;
out:
    for (int i = 0; i < 4; i++)
        free(a[i].own);
    if (rc) {
        rt_dataset_free(train);
        rt_dataset_free(test);
    }
    return rc;
}

int rt_npz_load(const rt_model *m, const char *path, rt_dataset *train, rt_dataset *test)
{
    uint8_t *buf;
    size_t len;
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (rt_data_read_file(path, &buf, &len) != 0)
        return -1;
    int rc = rt_npz_parse(m, path, buf, len, train, test);
    free(buf);
    return rc;
}
