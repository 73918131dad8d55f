/* rt_safetensors.c: parameters in and out of safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 *   {"name":{"dtype":"F32","shape":[..],"data_offsets":[a,b]},...,
 *    "__metadata__":{"k":"v"}}
 * then the data region; a tensor's bytes are data[a..b), little-endian,
 * row-major. Files written here load with safetensors.torch.load_file and
 * straight into a PyTorch model's load_state_dict, and files PyTorch wrote
 * load through --init.
 *
 * Loading trusts nothing: the header length is checked against the file
 * size, every tensor entry is validated before any data is read, and each
 * failure names the file and the reason. Saving is atomic (temp file in the
 * same directory, fsync, rename) so a crash or full disk never leaves a
 * half-written checkpoint under the final name.
 *
 * Integrity: what the checks above cannot see (a bit flipped in a
 * tensor's data or in a training-state number) the checksums do. Every
 * file written here carries, in __metadata__ (strings, so PyTorch and
 * safetensors load it as before), the CRC-32C of each tensor's bytes as
 * stored ("cddp.crc32c.NAME": 8 hex digits), and last the CRC-32C of the
 * metadata's strings ("cddp.metadata_crc32c", meta_crc: the training
 * state, the data's settings and those checksums), computed on the
 * decoded strings so that PyTorch re-saving the file with its metadata
 * keeps it valid. The rest of the header is held by the structural
 * checks (offsets that tile the data, sizes that match the shapes) and
 * the tensors' checksums. Loading verifies the metadata when it parses
 * the header and each tensor it uses while reading it. A file without
 * the metadata checksum (PyTorch's, or one from a cddp before checksums)
 * loads with one line saying it is unverified. */
#include "rt_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20)     /* the reference implementation's limit */
#define IO_FLOATS 65536

/* ---------------------------------------------------------------- load -- */

static int dtype_size(const rt_jnode *d)
{
    static const struct { const char *name; int size; } t[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
        {"I16", 2}, {"I8", 1}, {"U8", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8},
        {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (rt_json_streq(d, t[i].name))
            return t[i].size;
    return 0;
}

static void fmt_shape(char *buf, size_t cap, int rank, const int64_t *dims)
{
    size_t l = 0;
    l += (size_t)snprintf(buf + l, cap - l, "[");
    for (int i = 0; i < rank && l < cap; i++)
        l += (size_t)snprintf(buf + l, cap - l, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (l < cap)
        snprintf(buf + l, cap - l, "]");
}

/* A tensor entry after validation. */
typedef struct entry {
    const rt_jnode *dtype;
    int rank;
    int64_t dims[8];
    uint64_t a, b;
} entry;

/* Checks one header entry's structure against the data region size. */
static int check_entry(const char *path, const rt_json *j, int id, uint64_t datasize, entry *e)
{
    const rt_jnode *n = &j->nodes[id];
    char name[104];     /* for messages: one line, cut */
    rt_data_show(n->key, n->klen, name, sizeof name);
    if (n->type != RT_J_OBJ) {
        rt_err("%s: corrupt header: entry \"%s\" is not an object", path, name);
        return -1;
    }
    int d = rt_json_get(j, id, "dtype"), s = rt_json_get(j, id, "shape"),
        o = rt_json_get(j, id, "data_offsets");
    if (d < 0 || j->nodes[d].type != RT_J_STR || s < 0 || j->nodes[s].type != RT_J_ARR ||
        o < 0 || j->nodes[o].type != RT_J_ARR) {
        rt_err("%s: corrupt header: tensor \"%s\" needs string \"dtype\", array \"shape\" "
               "and array \"data_offsets\"", path, name);
        return -1;
    }
    e->dtype = &j->nodes[d];
    e->rank = j->nodes[s].nchild;
    if (e->rank > 8) {
        rt_err("%s: tensor \"%s\" has rank %d, more than supported", path, name, e->rank);
        return -1;
    }
    /* Element count in 128 bits' worth of care: each dim < 2^63, so stop
     * as soon as the product passes the data region. */
    uint64_t numel = 1;
    int k = 0, too_big = 0;
    for (int c = j->nodes[s].child; c >= 0; c = j->nodes[c].next, k++) {
        const rt_jnode *dn = &j->nodes[c];
        if (dn->type != RT_J_NUM || !dn->is_uint) {
            rt_err("%s: corrupt header: shape of \"%s\" must hold non-negative integers",
                   path, name);
            return -1;
        }
        e->dims[k] = (int64_t)dn->u;
        if (dn->u && numel > datasize / dn->u)
            too_big = 1;
        else
            numel *= dn->u;
    }
    if (j->nodes[o].nchild != 2 || j->nodes[j->nodes[o].child].type != RT_J_NUM ||
        !j->nodes[j->nodes[o].child].is_uint ||
        j->nodes[j->nodes[j->nodes[o].child].next].type != RT_J_NUM ||
        !j->nodes[j->nodes[j->nodes[o].child].next].is_uint) {
        rt_err("%s: corrupt header: data_offsets of \"%s\" must be [begin, end] integers",
               path, name);
        return -1;
    }
    e->a = j->nodes[j->nodes[o].child].u;
    e->b = j->nodes[j->nodes[j->nodes[o].child].next].u;
    if (e->a > e->b || e->b > datasize) {
        rt_err("%s: truncated or corrupt: tensor \"%s\" data_offsets [%llu, %llu] lie "
               "outside the %llu-byte data region", path, name, (unsigned long long)e->a,
               (unsigned long long)e->b, (unsigned long long)datasize);
        return -1;
    }
    int es = dtype_size(e->dtype);
    if (es && (too_big || numel * (uint64_t)es != e->b - e->a)) {
        rt_err("%s: corrupt header: tensor \"%s\" data_offsets span %llu bytes but its "
               "dtype and shape need %s", path, name, (unsigned long long)(e->b - e->a),
               too_big ? "more than the file holds" : "a different size");
        return -1;
    }
    return 0;
}

typedef struct span { uint64_t a, b; } span;

static int span_cmp(const void *x, const void *y)
{
    const span *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a ? 1 : p->b < q->b ? -1 : p->b > q->b;
}

/* The format requires the tensors to cover the data region exactly, with
 * no gaps or overlaps; anything else means a damaged or truncated file. */
static int tiles(span *s, int n, uint64_t datasize)
{
    qsort(s, (size_t)n, sizeof *s, span_cmp);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].a != at)
            return 0;
        at = s[i].b;
    }
    return at == datasize;
}

static float le_f32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Appends "name" to a comma-separated list of at most 6 names, then "...". */
static void list_name(char *list, size_t cap, int *n, const char *name, size_t len)
{
    size_t used = strlen(list);
    char show[84];
    if (*n < 6)
        snprintf(list + used, cap - used, "%s\"%s\"", *n ? ", " : "", rt_data_show(name, len, show, sizeof show));
    else if (*n == 6)
        snprintf(list + used, cap - used, ", ...");
    ++*n;
}

#define META_CRC_KEY "cddp.metadata_crc32c"
#define TENSOR_CRC_KEY "cddp.crc32c."

static int hex8(const char *s, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 8; i++) {
        const char c = s[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* The metadata string `key` as 8 hex digits: 1, 0 when there is none,
 * -1 when it is something else */
static int meta_hex8(const rt_json *j, const char *key, uint32_t *v)
{
    const int md = rt_json_get(j, 0, "__metadata__");
    const int k = md >= 0 && j->nodes[md].type == RT_J_OBJ ? rt_json_get(j, md, key) : -1;
    if (k < 0)
        return 0;
    return j->nodes[k].type == RT_J_STR && j->nodes[k].slen == 8 && hex8(j->nodes[k].s, v) == 0 ? 1 : -1;
}

/* A metadata member for meta_crc's order */
typedef struct member { const char *k, *v; size_t kl, vl; } member;

static int member_cmp(const void *x, const void *y)
{
    const member *a = x, *b = y;
    const size_t n = a->kl < b->kl ? a->kl : b->kl;
    const int c = memcmp(a->k, b->k, n);
    if (c || a->kl != b->kl)
        return c ? c : a->kl < b->kl ? -1 : 1;
    const size_t m = a->vl < b->vl ? a->vl : b->vl;
    const int d = memcmp(a->v, b->v, m);
    return d ? d : a->vl < b->vl ? -1 : a->vl > b->vl;
}

/* The CRC-32C of the metadata as strings, not as bytes: every member but
 * the checksum's own, decoded, in key order, each "key\0value\0". So a
 * writer that re-serializes the header (PyTorch's, safetensors') keeps it
 * valid, and any change to a key or value breaks it. -1 (after the error)
 * when a value is not a string. */
static int meta_crc(const char *path, const rt_json *j, int md, uint32_t *crc)
{
    member *m = rt_calloc((size_t)j->nodes[md].nchild + 1, sizeof *m);
    int n = 0;
    if (!m) {
        rt_err("%s: out of memory", path);
        return -1;
    }
    for (int c = j->nodes[md].child; c >= 0; c = j->nodes[c].next) {
        const rt_jnode *x = &j->nodes[c];
        if (rt_json_keyeq(x, META_CRC_KEY))
            continue;
        if (x->type != RT_J_STR) {
            char show[84];
            rt_err("%s: corrupt header: metadata \"%s\" is not a string", path,
                   rt_data_show(x->key, x->klen, show, sizeof show));
            free(m);
            return -1;
        }
        m[n++] = (member){x->key, x->s, x->klen, x->slen};
    }
    qsort(m, (size_t)n, sizeof *m, member_cmp);
    *crc = 0;
    for (int i = 0; i < n; i++) {
        *crc = rt_crc32c(*crc, m[i].k, m[i].kl);
        *crc = rt_crc32c(*crc, "", 1);
        *crc = rt_crc32c(*crc, m[i].v, m[i].vl);
        *crc = rt_crc32c(*crc, "", 1);
    }
    free(m);
    return 0;
}

/* The metadata's checksum: 1 verified, 0 the file has none, -1 (after
 * the error) a mismatch */
static int meta_verify(const char *path, const rt_json *j)
{
    uint32_t want, got;
    const int has = meta_hex8(j, META_CRC_KEY, &want);
    if (has == 0)
        return 0;
    if (has < 0) {
        rt_err("%s: corrupt header: its metadata checksum is not 8 hex digits", path);
        return -1;
    }
    if (meta_crc(path, j, rt_json_get(j, 0, "__metadata__"), &got) != 0)
        return -1;
    if (got != want) {
        rt_err("%s: metadata checksum mismatch: the file is damaged (its training state or data settings "
               "changed after it was written: CRC-32C %08x, recorded %08x)", path, got, want);
        return -1;
    }
    return 1;
}

/* The checksum recorded for tensor `name` (the model's name: a DDP
 * state_dict's "module." prefix is not part of it) in a verified file;
 * -1 (after the error) when it has none */
static int tensor_crc(const char *path, const rt_json *j, const char *name, uint32_t *v)
{
    char key[4096];
    int has = -1;
    if (snprintf(key, sizeof key, TENSOR_CRC_KEY "%s", name) < (int)sizeof key)
        has = meta_hex8(j, key, v);
    if (has != 1) {
        rt_err("%s: tensor \"%s\" has no checksum in a file whose metadata has one", path, name);
        return -1;
    }
    return 0;
}

static int crc_check(const char *path, const char *name, int verified, uint32_t got, uint32_t want)
{
    if (!verified || got == want)
        return 0;
    rt_err("%s: tensor \"%s\": checksum mismatch: the file is damaged (its data changed after it was written: "
           "CRC-32C %08x, recorded %08x)", path, name, got, want);
    return -1;
}

static int load_params(const rt_model *m, const char *path, FILE *f, const rt_json *j,
                       uint64_t data_start, uint64_t datasize, int verified, float *param)
{
    /* +1: calloc(0) may return NULL, which is not an error here. */
    entry *ents = rt_calloc((size_t)m->nparam + 1, sizeof *ents);
    int *found = rt_calloc((size_t)m->nparam + 1, sizeof *found);
    span *spans = rt_calloc((size_t)j->nodes[0].nchild + 1, sizeof *spans);
    unsigned char *buf = rt_malloc(IO_FLOATS * 4);
    int rc = -1, nspan = 0, nmodule = 0, nunexpected = 0;
    char unexpected[512] = "";
    if (!ents || !found || !spans || !buf) {
        rt_err("%s: out of memory", path);
        goto out;
    }
    /* Validate every entry and match the ones we need before touching the
     * data, so a bad file never leaves the parameters half loaded. */
    for (int c = j->nodes[0].child; c >= 0; c = j->nodes[c].next) {
        if (rt_json_keyeq(&j->nodes[c], "__metadata__"))
            continue;       /* free-form; nothing we rely on */
        entry e;
        if (check_entry(path, j, c, datasize, &e) != 0)
            goto out;
        spans[nspan].a = e.a;
        spans[nspan++].b = e.b;
        /* A state_dict saved from a DistributedDataParallel wrapper names
         * every tensor "module.<name>": accepted, and said so below. */
        const rt_jnode *key = &j->nodes[c];
        int prefixed = key->klen > 7 && !memcmp(key->key, "module.", 7), matched = 0;
        for (int i = 0; i < m->nparam; i++) {
            size_t n = strlen(m->params[i].name);
            if (!rt_json_keyeq(key, m->params[i].name) &&
                !(prefixed && key->klen == n + 7 && !memcmp(key->key + 7, m->params[i].name, n)))
                continue;
            if (found[i]++) {
                rt_err("%s: corrupt header: tensor \"%s\" is listed twice%s", path,
                       m->params[i].name, prefixed ? " (with and without DDP's \"module.\" prefix)" : "");
                goto out;
            }
            ents[i] = e;
            matched = 1;
            nmodule += prefixed;
        }
        /* a checkpoint's optimizer state is expected beside the model's */
        if (!matched && !(key->klen > 10 && !memcmp(key->key, "optimizer.", 10)))
            list_name(unexpected, sizeof unexpected, &nunexpected, key->key, key->klen);
    }
    int nmissing = 0;
    char missing[512] = "";
    for (int i = 0; i < m->nparam; i++)
        if (!found[i])
            list_name(missing, sizeof missing, &nmissing, m->params[i].name, strlen(m->params[i].name));
    if (nmissing) {
        /* as load_state_dict(strict=True): both lists, so a renamed layer
         * or another model's file is recognized at once */
        rt_err("%s: missing tensor%s %s (%d of the model's %d)%s%s", path, nmissing > 1 ? "s" : "", missing,
               nmissing, m->nparam, nunexpected ? "; unexpected in the file: " : "", unexpected);
        goto out;
    }
    /* notes, from rank 0 only: every rank reads the same file */
    if (nmodule && rt_world.rank == 0)
        rt_warn("%s: tensor names carry DDP's \"module.\" prefix (a DistributedDataParallel state_dict): "
                "read without it", path);
    if (nunexpected && rt_world.rank == 0)
        rt_warn("%s: %d tensor%s not in the model, ignored: %s", path, nunexpected, nunexpected > 1 ? "s" : "",
                unexpected);
    if (!tiles(spans, nspan, datasize)) {
        rt_err("%s: corrupt: tensor data_offsets do not tile the %llu-byte data region "
               "(gap, overlap or trailing bytes)", path, (unsigned long long)datasize);
        goto out;
    }
    for (int i = 0; i < m->nparam; i++) {
        const rt_param *p = &m->params[i];
        const entry *e = &ents[i];
        char want[128], got[128];
        const char *want_dt = rt_param_flags(m, i) & RT_PARAM_I64 ? "I64" : "F32";
        if (!rt_json_streq(e->dtype, want_dt)) {
            char show[24];
            rt_err("%s: tensor \"%s\" has dtype %s, expected %s", path, p->name,
                   rt_data_show(e->dtype->s, e->dtype->slen, show, sizeof show), want_dt);
            goto out;
        }
        int same = e->rank == p->rank;
        for (int k = 0; same && k < p->rank; k++)
            same = e->dims[k] == p->shape[k];
        if (!same) {
            fmt_shape(want, sizeof want, p->rank, p->shape);
            fmt_shape(got, sizeof got, e->rank, e->dims);
            rt_err("%s: tensor \"%s\" has shape %s, expected %s", path, p->name, got, want);
            goto out;
        }
    }
    for (int i = 0; i < m->nparam; i++) {
        const rt_param *p = &m->params[i];
        uint32_t want = 0, crc = 0;
        if (verified && tensor_crc(path, j, p->name, &want) != 0)
            goto out;
        if (fseeko(f, (off_t)(data_start + ents[i].a), SEEK_SET) != 0) {
            rt_err("%s: cannot seek to tensor \"%s\": %s", path, p->name, strerror(errno));
            goto out;
        }
        float *dst = param + p->off;
        if (rt_param_flags(m, i) & RT_PARAM_I64) {  /* counters: int64 in the file, float here */
            for (int64_t k = 0; k < p->numel; k++) {
                unsigned char b8[8];
                if (fread(b8, 1, 8, f) != 8) {
                    rt_err("%s: truncated data in tensor \"%s\"", path, p->name);
                    goto out;
                }
                crc = rt_crc32c(crc, b8, 8);
                uint64_t u = 0;
                for (int q = 7; q >= 0; q--)
                    u = u << 8 | b8[q];
                int64_t v = (int64_t)u;
                if (v < 0 || v > (int64_t)1 << 24) {
                    rt_err("%s: tensor \"%s\" holds %lld, outside 0..2^24", path, p->name, (long long)v);
                    goto out;
                }
                dst[k] = (float)v;
            }
            if (crc_check(path, p->name, verified, crc, want) != 0)
                goto out;
            continue;
        }
        for (int64_t k = 0; k < p->numel;) {
            int64_t cnt = p->numel - k < IO_FLOATS ? p->numel - k : IO_FLOATS;
            size_t r = fread(buf, 4, (size_t)cnt, f);
            if (r != (size_t)cnt) {
                rt_err("%s: truncated data in tensor \"%s\"%s%s", path, p->name,
                       ferror(f) ? ": " : "", ferror(f) ? strerror(errno) : "");
                goto out;
            }
            crc = rt_crc32c(crc, buf, 4 * (size_t)cnt);
            for (int64_t q = 0; q < cnt; q++)
                dst[k + q] = le_f32(buf + 4 * q);
            k += cnt;
        }
        if (crc_check(path, p->name, verified, crc, want) != 0)
            goto out;
    }
    rc = 0;
out:
    free(ents);
    free(found);
    free(spans);
    free(buf);
    return rc;
}

/* An open safetensors file: its parsed header and where the data starts. */
typedef struct st_file {
    FILE *f;
    char *hdr;
    rt_json j;
    uint64_t data_start, datasize;
    int verified;           /* the metadata's checksum matched: the tensors' must too */
} st_file;

static void st_close(st_file *sf)
{
    rt_json_free(&sf->j);
    free(sf->hdr);
    if (sf->f)
        fclose(sf->f);
    memset(sf, 0, sizeof *sf);
}

/* Opens path and parses its header, checking it against the file's size. */
static int st_open(const char *path, st_file *sf)
{
    memset(sf, 0, sizeof *sf);
    FILE *f = fopen(path, "rb");
    if (!f) {
        rt_err("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    sf->f = f;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rt_err("%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char lenb[8];
    if (size < 8 || fread(lenb, 1, 8, f) != 8) {
        rt_err("%s: truncated: %llu bytes, too short for a safetensors file", path,
               (unsigned long long)size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenb[i];
    if (hlen > size - 8) {
        rt_err("%s: corrupt header: header length %llu is larger than the file "
               "(%llu bytes)", path, (unsigned long long)hlen, (unsigned long long)size);
        goto fail;
    }
    if (hlen < 2 || hlen > MAX_HEADER) {
        rt_err("%s: corrupt header: header length %llu is %s", path,
               (unsigned long long)hlen, hlen < 2 ? "too small" : "over the 100 MiB limit");
        goto fail;
    }
    sf->hdr = rt_malloc((size_t)hlen);
    if (!sf->hdr) {
        rt_err("%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
        goto fail;
    }
    if (fread(sf->hdr, 1, (size_t)hlen, f) != hlen) {
        rt_err("%s: truncated header", path);
        goto fail;
    }
    char why[256];
    if (rt_json_parse(&sf->j, sf->hdr, (size_t)hlen, why, sizeof why) != 0) {
        rt_err("%s: corrupt header: %s", path, why);
        goto fail;
    }
    if (sf->j.nodes[0].type != RT_J_OBJ) {
        rt_err("%s: corrupt header: top level is not a JSON object", path);
        goto fail;
    }
    if ((sf->verified = meta_verify(path, &sf->j)) < 0)
        goto fail;
    sf->data_start = 8 + hlen;
    sf->datasize = size - 8 - hlen;
    return 0;
fail:
    st_close(sf);
    return -1;
}

int rt_st_load(const rt_model *m, const char *path, float *param)
{
    st_file sf;
    if (st_open(path, &sf) != 0)
        return -1;
    int rc = load_params(m, path, sf.f, &sf.j, sf.data_start, sf.datasize, sf.verified, param);
    if (rc == 0 && !sf.verified && rt_world.rank == 0)
        rt_warn("%s: no checksums (written by PyTorch, or by a cddp before them): loaded unverified", path);
    st_close(&sf);
    return rc;
}

int rt_st_load_meta(const char *path, rt_st_kv *kv, int nkv)
{
    st_file sf;
    if (st_open(path, &sf) != 0)
        return -1;
    int rc = -1, md = rt_json_get(&sf.j, 0, "__metadata__");
    if (md < 0 || sf.j.nodes[md].type != RT_J_OBJ) {
        rt_err("%s: no metadata: not a checkpoint written by a cddp program", path);
        goto out;
    }
    for (int i = 0; i < nkv; i++) {
        int v = rt_json_get(&sf.j, md, kv[i].key);
        if (v < 0 || sf.j.nodes[v].type != RT_J_STR) {
            rt_err("%s: not a cddp checkpoint: its metadata has no \"%s\"", path, kv[i].key);
            goto out;
        }
        const rt_jnode *n = &sf.j.nodes[v];
        if (n->slen >= sizeof kv[i].val) {
            rt_err("%s: corrupt metadata: \"%s\" is too long", path, kv[i].key);
            goto out;
        }
        memcpy(kv[i].val, n->s, n->slen);
        kv[i].val[n->slen] = 0;
    }
    rc = 0;
out:
    st_close(&sf);
    return rc;
}

/* Every string entry of path's metadata whose key starts with prefix, in
 * the file's order (the keys in one block, freed by rt_st_kv_free). A file
 * with no metadata, or none under prefix, gives *n = 0: a --save file from
 * another writer (PyTorch's) has none and is still loadable. */
int rt_st_meta_prefix(const char *path, const char *prefix, rt_st_kv **kv, int *n)
{
    st_file sf;
    *kv = NULL;
    *n = 0;
    if (st_open(path, &sf) != 0)
        return -1;
    int rc = -1, md = rt_json_get(&sf.j, 0, "__metadata__"), k = 0;
    const size_t pl = strlen(prefix);
    size_t keybytes = 0;
    if (md >= 0 && sf.j.nodes[md].type == RT_J_OBJ)
        for (int c = sf.j.nodes[md].child; c >= 0; c = sf.j.nodes[c].next) {
            const rt_jnode *e = &sf.j.nodes[c];
            if (e->klen < pl || memcmp(e->key, prefix, pl) != 0)
                continue;
            if (e->type != RT_J_STR || e->slen >= sizeof(*kv)->val || memchr(e->key, 0, e->klen) ||
                memchr(e->s, 0, e->slen)) {
                char show[84];
                rt_err("%s: corrupt metadata: \"%s\" is not a string of at most %zu bytes", path,
                       rt_data_show(e->key, e->klen, show, sizeof show), sizeof(*kv)->val - 1);
                goto out;
            }
            k++;
            keybytes += e->klen + 1;
        }
    if (k == 0) {
        rc = 0;
        goto out;
    }
    char *keys = rt_malloc(keybytes);
    if (!keys || !(*kv = rt_calloc((size_t)k, sizeof **kv))) {
        free(keys);
        rt_err("%s: out of memory", path);
        goto out;
    }
    for (int c = sf.j.nodes[md].child; c >= 0; c = sf.j.nodes[c].next) {
        const rt_jnode *e = &sf.j.nodes[c];
        if (e->klen < pl || memcmp(e->key, prefix, pl) != 0)
            continue;
        memcpy(keys, e->key, e->klen);
        keys[e->klen] = 0;
        (*kv)[*n].key = keys;
        memcpy((*kv)[*n].val, e->s, e->slen);
        (*kv)[*n].val[e->slen] = 0;
        keys += e->klen + 1;
        (*n)++;
    }
    rc = 0;
out:
    st_close(&sf);
    return rc;
}

void rt_st_kv_free(rt_st_kv *kv, int n)
{
    if (kv && n > 0)
        free((char *)kv[0].key);    /* one block holds every key */
    free(kv);
}

/* ---------------------------------------------------------------- save -- */

/* A growing string for the header. */
typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;

static void sb_put(sbuf *b, const char *s, size_t l)
{
    if (b->oom)
        return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + l + 1)
            cap *= 2;
        char *np = rt_realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, l);
    b->n += l;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* s as a JSON string, after prefix (written as it is) */
static void sb_json_str2(sbuf *b, const char *prefix, const char *s)
{
    sb_put(b, "\"", 1);
    sb_str(b, prefix);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_json_str(sbuf *b, const char *s) { sb_json_str2(b, "", s); }

/* The header: metadata (ours, kv, each tensor's checksum crc[i], then
 * the metadata's own, its digits "00000000" at *crc_at), the tensors. */
static int build_header(const rt_model *m, const rt_st_kv *kv, int nkv, const uint32_t *crc, sbuf *b,
                        size_t *crc_at)
{
    char num[64];
    uint64_t off = 0;
    sb_str(b, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"cddp runtime " RT_VERSION
              "\",\"model\":");
    sb_json_str(b, m->name ? m->name : "");
    for (int i = 0; i < nkv; i++) {
        sb_str(b, ",");
        sb_json_str(b, kv[i].key);
        sb_str(b, ":");
        sb_json_str(b, kv[i].val);
    }
    for (int i = 0; i < m->nparam; i++) {
        sb_str(b, ",");
        sb_json_str2(b, TENSOR_CRC_KEY, m->params[i].name);
        snprintf(num, sizeof num, ":\"%08x\"", crc[i]);
        sb_str(b, num);
    }
    sb_str(b, ",\"" META_CRC_KEY "\":\"");
    *crc_at = b->n;
    sb_str(b, "00000000\"}");
    for (int i = 0; i < m->nparam; i++) {
        const rt_param *p = &m->params[i];
        sb_str(b, ",");
        sb_json_str(b, p->name);
        sb_str(b, rt_param_flags(m, i) & RT_PARAM_I64 ? ":{\"dtype\":\"I64\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
        for (int k = 0; k < p->rank; k++) {
            snprintf(num, sizeof num, "%s%lld", k ? "," : "", (long long)p->shape[k]);
            sb_str(b, num);
        }
        uint64_t end = off + (uint64_t)p->numel * (rt_param_flags(m, i) & RT_PARAM_I64 ? 8 : 4);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)end);
        sb_str(b, num);
        off = end;
    }
    sb_str(b, "}");
    /* Pad with spaces to a multiple of 8 so the data region is aligned, as
     * the reference writer does. */
    while (!b->oom && b->n % 8)
        sb_str(b, " ");
    return b->oom ? -1 : 0;
}

/* Elements [k, k + cnt) of tensor i as stored (little-endian F32, or
 * I64 for counters) into buf; the bytes */
static size_t tensor_bytes(const rt_model *m, int i, const float *param, int64_t k, int64_t cnt, unsigned char *buf)
{
    const float *src = param + m->params[i].off + k;
    if (rt_param_flags(m, i) & RT_PARAM_I64) {
        for (int64_t q = 0; q < cnt; q++) {
            const uint64_t u = (uint64_t)(int64_t)src[q];
            for (int b = 0; b < 8; b++)
                buf[8 * q + b] = (unsigned char)(u >> (8 * b));
        }
        return 8 * (size_t)cnt;
    }
    for (int64_t q = 0; q < cnt; q++) {
        uint32_t u;
        memcpy(&u, &src[q], 4);
        for (int b = 0; b < 4; b++)
            buf[4 * q + b] = (unsigned char)(u >> (8 * b));
    }
    return 4 * (size_t)cnt;
}

/* Every tensor's bytes in order: each one's CRC-32C into crc[i], and
 * written to f unless f is NULL. -1 on a write error. */
static int tensors_out(const rt_model *m, const float *param, FILE *f, uint32_t *crc, unsigned char *buf)
{
    int rc = 0;
    for (int i = 0; i < m->nparam && rc == 0; i++) {
        crc[i] = 0;
        for (int64_t k = 0, numel = m->params[i].numel; k < numel && rc == 0;) {
            const int64_t cnt = numel - k < IO_FLOATS ? numel - k : IO_FLOATS;
            const size_t n = tensor_bytes(m, i, param, k, cnt, buf);
            crc[i] = rt_crc32c(crc[i], buf, n);
            if (f && fwrite(buf, 1, n, f) != n)
                rc = -1;
            k += cnt;
        }
    }
    return rc;
}

/* Directory part of path ("." when there is none) into dir. */
static void dir_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == path)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

int rt_st_check_writable(const char *path)
{
    char dir[4096];
    struct stat st;
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0) {
        rt_err("%s: cannot save there: directory %s: %s", path, dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        rt_err("%s: cannot save there: %s is not a directory", path, dir);
        return -1;
    }
    if (access(dir, W_OK) != 0) {
        rt_err("%s: cannot save there: directory %s: %s", path, dir, strerror(errno));
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        rt_err("%s: cannot save there: it is a directory", path);
        return -1;
    }
    return 0;
}

void rt_st_clean_stale(const char *path)
{
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    const size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return;     /* rt_st_check_writable says why, if it matters */
    char gone[512] = "";
    int n = 0;
    const time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d));) {
        const char *x = e->d_name;
        /* rt_st_save_kv's "NAME.tmp.XXXXXX" (mkstemp's six characters) */
        if (strlen(x) != bl + 11 || memcmp(x, base, bl) != 0 || memcmp(x + bl, ".tmp.", 5) != 0 ||
            strspn(x + bl + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != 6)
            continue;
        char full[8192];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", dir, x);
        /* a minute old at least: not a write in progress beside us */
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode) || now - st.st_mtime < 60 || unlink(full) != 0)
            continue;
        if (n < 3)
            snprintf(gone + strlen(gone), sizeof gone - strlen(gone), "%s%s", n ? ", " : "", x);
        else if (n == 3)
            snprintf(gone + strlen(gone), sizeof gone - strlen(gone), ", ...");
        n++;
    }
    closedir(d);
    if (n)
        rt_warn("%s: removed %d temporary file%s of an interrupted write of it: %s", path, n, n > 1 ? "s" : "", gone);
}

int rt_st_save(const rt_model *m, const char *path, const float *param)
{
    return rt_st_save_kv(m, path, param, NULL, 0);
}

int rt_st_save_kv(const rt_model *m, const char *path, const float *param, const rt_st_kv *kv,
                  int nkv)
{
    sbuf h = {0};
    char tmp[4096], dir[4096];
    const char *why = NULL;
    int err = 0, fd = -1;
    FILE *f = NULL;
    uint32_t *crc = rt_malloc(sizeof *crc * ((size_t)m->nparam + 1)), *crc2 = rt_malloc(sizeof *crc * ((size_t)m->nparam + 1));
    unsigned char *io = rt_malloc(IO_FLOATS * 8);
    size_t crc_at = 0;
    if (!crc || !crc2 || !io || tensors_out(m, param, NULL, crc, io) != 0 ||
        build_header(m, kv, nkv, crc, &h, &crc_at) != 0) {
        rt_err("%s: cannot save: out of memory", path);
        free(h.p);
        free(crc);
        free(crc2);
        free(io);
        return -1;
    }
    {   /* the metadata's checksum: the header read back as a reader does */
        rt_json j;
        char why[256] = "no metadata", hex[9];
        uint32_t mc = 0;
        const int parsed = rt_json_parse(&j, h.p, h.n, why, sizeof why) == 0;
        const int md = parsed ? rt_json_get(&j, 0, "__metadata__") : -1;
        const int bad = md < 0 ? 1 : meta_crc(path, &j, md, &mc) != 0 ? 2 : 0;
        if (parsed)
            rt_json_free(&j);
        if (bad) {
            if (bad == 1)   /* (2: meta_crc has said why) */
                rt_err("%s: cannot save: the header it built does not read back: %s", path, why);
            free(h.p);
            free(crc);
            free(crc2);
            free(io);
            return -1;
        }
        snprintf(hex, sizeof hex, "%08x", mc);
        memcpy(h.p + crc_at, hex, 8);
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp) {
        rt_err("%s: cannot save: path too long", path);
        free(h.p);
        free(crc);
        free(crc2);
        return -1;
    }
    fd = mkstemp(tmp);
    if (fd < 0) {
        rt_err("%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        free(h.p);
        free(crc);
        free(crc2);
        return -1;
    }
    /* mkstemp makes the file 0600; give it the usual 0666 & ~umask. */
    mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0666 & ~um) != 0) {
        why = "chmod";
        goto fail;
    }
    f = fdopen(fd, "wb");
    if (!f) {
        why = "fdopen";
        goto fail;
    }
    fd = -1;    /* owned by f now */
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    if (fwrite(lenb, 1, 8, f) != 8 || fwrite(h.p, 1, h.n, f) != h.n || tensors_out(m, param, f, crc2, io) != 0) {
        why = "write";
        goto fail;
    }
    if (memcmp(crc, crc2, sizeof *crc * (size_t)m->nparam) != 0) {
        errno = EIO;    /* the values changed between the passes: the header's checksums would lie */
        why = "checksum";
        goto fail;
    }
    if (fflush(f) != 0) {
        why = "write";
        goto fail;
    }
    if (fsync(fileno(f)) != 0) {
        why = "fsync";
        goto fail;
    }
    if (fclose(f) != 0) {
        f = NULL;
        why = "close";
        goto fail;
    }
    f = NULL;
    if (rename(tmp, path) != 0) {
        why = "rename";
        goto fail;
    }
    /* Make the rename itself durable; not fatal where directories cannot
     * be opened or synced (some network file systems). */
    dir_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(h.p);
    free(crc);
    free(crc2);
    free(io);
    return 0;
fail:
    err = errno;
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(h.p);
    free(crc);
    free(crc2);
    free(io);
    rt_err("%s: cannot save (%s failed): %s", path, why, strerror(err));
    return -1;
}
