/* rt_onnx.c: --export-onnx FILE: the model's forward in eval mode as an
 * ONNX model (opset 17, IR version 8) with the parameters' values, the
 * data's scaling and normalization as its first nodes and a symbolic
 * batch. The graph's operators are cddpc's (onnx.c: rt_model.onnx); the
 * protobuf is written here by a small encoder (varints and
 * length-delimited fields, nothing read back), into a temporary file
 * renamed into place. */
#include "rt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the encoder -------------------------------------------------------- */

typedef struct pb {
    unsigned char *p;
    size_t n, cap;
    int oom;
} pb;

static void put(pb *b, const void *s, size_t k)
{
    if (b->oom || k == 0)
        return;
    if (b->n + k > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + k)
            cap *= 2;
        unsigned char *q = rt_realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
}

static void varint(pb *b, uint64_t v)
{
    unsigned char t[10];
    int k = 0;
    do {
        t[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, t, (size_t)k);
}

static void key(pb *b, int field, int wire) { varint(b, (uint64_t)field << 3 | (uint64_t)wire); }
static void f_int(pb *b, int field, int64_t v) { key(b, field, 0), varint(b, (uint64_t)v); }

static void f_bytes(pb *b, int field, const void *s, size_t k)
{
    key(b, field, 2);
    varint(b, k);
    put(b, s, k);
}

static void f_str(pb *b, int field, const char *s) { f_bytes(b, field, s, strlen(s)); }

static void f_float(pb *b, int field, float v)
{
    unsigned char t[4];
    uint32_t u;
    memcpy(&u, &v, 4);
    for (int i = 0; i < 4; i++)
        t[i] = (unsigned char)(u >> (8 * i));
    key(b, field, 5);
    put(b, t, 4);
}

/* a sub-message built in its own buffer, then appended with its length */
static void f_msg(pb *b, int field, pb *m)
{
    if (m->oom)
        b->oom = 1;
    f_bytes(b, field, m->p, m->n);
    free(m->p);
    memset(m, 0, sizeof *m);
}

/* ---- ONNX messages (onnx.proto's field numbers) ------------------------ */

/* TensorProto: dims 1, data_type 2, name 8, raw_data 9 (little-endian) */
static void tensor(pb *b, const char *name, int dtype, int rank, const int64_t *dims, const double *v,
                   const float *f, int64_t n)
{
    pb t = {0}, raw = {0};
    for (int d = 0; d < rank; d++)
        f_int(&t, 1, dims[d]);
    f_int(&t, 2, dtype);
    f_str(&t, 8, name);
    for (int64_t i = 0; i < n; i++) {
        unsigned char e[8];
        if (dtype == RT_OX_I64) {
            const uint64_t u = (uint64_t)(int64_t)v[i];
            for (int k = 0; k < 8; k++)
                e[k] = (unsigned char)(u >> (8 * k));
            put(&raw, e, 8);
        } else if (dtype == RT_OX_BOOL) {
            e[0] = v[i] != 0;
            put(&raw, e, 1);
        } else {
            const float x = f ? f[i] : (float)v[i];
            uint32_t u;
            memcpy(&u, &x, 4);
            for (int k = 0; k < 4; k++)
                e[k] = (unsigned char)(u >> (8 * k));
            put(&raw, e, 4);
        }
    }
    if (raw.oom)
        t.oom = 1;
    f_bytes(&t, 9, raw.p ? raw.p : (unsigned char *)"", raw.n);
    free(raw.p);
    f_msg(b, 5, &t);    /* GraphProto.initializer */
}

/* ValueInfoProto: name 1, type 2 (TypeProto.tensor_type 1: elem_type 1,
 * shape 2 (TensorShapeProto.dim 1: dim_value 1, dim_param 2)); a
 * dimension -k is the batch (times k) */
static void value_info(pb *b, int field, const char *name, int dtype, int rank, const int64_t *dims)
{
    pb vi = {0}, tp = {0}, tt = {0}, sh = {0};
    for (int d = 0; d < rank; d++) {
        pb dim = {0};
        if (dims[d] == -1)
            f_str(&dim, 2, "batch");
        else if (dims[d] < 0) {
            char s[48];
            snprintf(s, sizeof s, "batch*%lld", (long long)-dims[d]);
            f_str(&dim, 2, s);
        } else
            f_int(&dim, 1, dims[d]);
        f_msg(&sh, 1, &dim);
    }
    f_int(&tt, 1, dtype);
    f_msg(&tt, 2, &sh);
    f_msg(&tp, 1, &tt);
    f_str(&vi, 1, name);
    f_msg(&vi, 2, &tp);
    f_msg(b, field, &vi);
}

/* NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
 * (AttributeProto: name 1, f 2, i 3, s 4, ints 8, type 20) */
static void node(pb *b, const char *op, const char *const *in, int nin, const char *const *out, int nout,
                 const rt_onnx_attr *a, int na, int id)
{
    pb nd = {0};
    char name[32];
    for (int k = 0; k < nin; k++)
        f_str(&nd, 1, in[k]);
    for (int k = 0; k < nout; k++)
        f_str(&nd, 2, out[k]);
    if (id)
        snprintf(name, sizeof name, "n%d_%s", id, op);
    else    /* the prologue's: one of each op */
        snprintf(name, sizeof name, "pre_%s", op);
    f_str(&nd, 3, name);
    f_str(&nd, 4, op);
    for (int k = 0; k < na; k++) {
        pb at = {0};
        f_str(&at, 1, a[k].name);
        if (a[k].type == RT_OXA_FLOAT)
            f_float(&at, 2, a[k].f);
        else if (a[k].type == RT_OXA_INT)
            f_int(&at, 3, a[k].i);
        else if (a[k].type == RT_OXA_STRING)
            f_str(&at, 4, a[k].s);
        else if (a[k].type == RT_OXA_STRINGS)
            f_str(&at, 9, a[k].s);
        else
            for (int j = 0; j < a[k].nints; j++)
                f_int(&at, 8, a[k].ints[j]);
        f_int(&at, 20, a[k].type);
        f_msg(&nd, 5, &at);
    }
    f_msg(b, 1, &nd);
}

static void node1(pb *b, const char *op, const char *x, const char *out, const rt_onnx_attr *a, int na)
{
    node(b, op, (const char *const[]){x}, 1, (const char *const[]){out}, 1, a, na, 0);
}

static void node2(pb *b, const char *op, const char *x, const char *y, const char *out)
{
    node(b, op, (const char *const[]){x, y}, 2, (const char *const[]){out}, 1, NULL, 0, 0);
}

/* ---- the model ------------------------------------------------------------ */

/* The input as the data holds it ("input": uint8 images, float features
 * or i64 tokens) to the normalized "x": ToTensor's 1/255, then
 * (v - mean) / std per channel. */
static int prologue(pb *g, const rt_model *m, const rt_data *d, int64_t *in_dims, int *in_type)
{
    const rt_dataset *s = &d->test;
    in_dims[0] = -1;
    for (int k = 0; k < m->in_rank; k++)
        in_dims[1 + k] = m->in_dim[k];
    if (m->in_vocab) {      /* tokens are read as they are */
        *in_type = RT_OX_I64;
        node1(g, "Identity", "input", "x", NULL, 0);
        return 0;
    }
    *in_type = s->x_u8 ? RT_OX_U8 : RT_OX_F32;
    const char *v = "input";
    if (s->x_u8) {
        const rt_onnx_attr to = {"to", RT_OXA_INT, 0, RT_OX_F32, NULL, 0, NULL};
        node1(g, "Cast", "input", "input_f", &to, 1);
        tensor(g, "input_scale", RT_OX_F32, 0, NULL, (const double[]){1.0 / 255.0}, NULL, 1);
        node2(g, "Mul", "input_f", "input_scale", "input_s");
        v = "input_s";
    }
    /* element k of a sample is in channel k / norm_div % norm_n: the
     * channel is the sample's first dimension (images) or its only one
     * (features) */
    int64_t dims[4] = {0}, rank = 0;
    if (d->norm_n > 1) {
        int64_t rest = 1;
        for (int k = 1; k < m->in_rank; k++)
            rest *= m->in_dim[k];
        if (!(m->in_dim[0] == d->norm_n && rest == d->norm_div)) {
            rt_err("--export-onnx: the normalization's %d channels of %lld values are not the sample's first "
                   "dimension", d->norm_n, (long long)d->norm_div);
            return -1;
        }
        dims[0] = d->norm_n;
        for (int k = 1; k < m->in_rank; k++)
            dims[k] = 1;
        rank = m->in_rank;
    }
    if (!d->norm || d->norm_n < 1) {
        node1(g, "Identity", v, "x", NULL, 0);
        return 0;
    }
    const int nn = d->norm_n > 1 ? d->norm_n : 1;
    tensor(g, "input_mean", RT_OX_F32, (int)rank, dims, NULL, d->norm, nn);
    tensor(g, "input_std", RT_OX_F32, (int)rank, dims, NULL, d->norm + nn, nn);
    node2(g, "Sub", v, "input_mean", "input_c");
    node2(g, "Div", "input_c", "input_std", "x");
    return 0;
}

static int write_file(const char *path, const unsigned char *p, size_t n)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        rt_err("%s: path too long", path);
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rt_err("%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    int ok = fwrite(p, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    const int e = errno;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        rt_err("%s: cannot write: %s", path, strerror(ok ? errno : e));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int rt_onnx_check(const rt_model *m)
{
    if (m->onnx && !m->onnx->refused)
        return 0;
    rt_err("--export-onnx: model '%s' has an op with no ONNX export yet: %s (docs/onnx.md lists what exports)",
           m->name, m->onnx ? m->onnx->refused : "(compiled without the ONNX graph)");
    return -1;
}

int rt_onnx_write(const rt_model *m, const rt_data *d, const float *param, const char *path)
{
    if (rt_onnx_check(m) != 0)
        return -1;
    const rt_onnx_graph *x = m->onnx;
    pb g = {0}, model = {0}, op = {0};
    int64_t in_dims[5];
    int in_type;
    if (prologue(&g, m, d, in_dims, &in_type) != 0) {
        free(g.p);
        return -1;
    }
    for (int i = 0; i < x->nnodes; i++) {
        const rt_onnx_node *n = &x->nodes[i];
        const char *out[3] = {n->out, n->out2, n->out3};
        node(&g, n->op, n->in, n->nin, out, n->out3 ? 3 : n->out2 ? 2 : 1, n->attr, n->nattr, i + 1);
    }
    f_str(&g, 2, m->name);
    for (int i = 0; i < m->nparam; i++) {   /* a tied weight's other name is no tensor of the graph */
        const rt_param *p = &m->params[i];
        if (!(rt_param_flags(m, i) & RT_PARAM_ALIAS))
            tensor(&g, p->name, RT_OX_F32, p->rank, p->shape, NULL, param + p->off, p->numel);
    }
    for (int i = 0; i < x->nconsts; i++) {
        const rt_onnx_const *c = &x->consts[i];
        tensor(&g, c->name, c->dtype, c->rank, c->dims, c->v, NULL, c->n);
    }
    value_info(&g, 11, "input", in_type, 1 + m->in_rank, in_dims);
    value_info(&g, 12, "y", x->out_dtype, x->out_rank, x->out_dims);
    /* ModelProto: ir_version 1, producer_name 2, producer_version 3,
     * graph 7, opset_import 8 (OperatorSetIdProto: domain 1, version 2) */
    f_int(&model, 1, 8);
    f_str(&model, 2, "cddpc");
    f_str(&model, 3, RT_VERSION);
    f_msg(&model, 7, &g);
    f_str(&op, 1, "");
    f_int(&op, 2, 17);
    f_msg(&model, 8, &op);
    if (d->classes.n > 0) {     /* a csv's class names, output j's: metadata_props 14 (key 1, value 2) */
        pb kv = {0}, v = {0};
        put(&v, "[", 1);
        for (int j = 0; j < d->classes.n; j++) {
            put(&v, j ? ", \"" : "\"", j ? 3 : 1);
            for (const char *c = d->classes.name[j]; *c; c++) {
                if (*c == '"' || *c == '\\')
                    put(&v, "\\", 1);
                put(&v, c, 1);
            }
            put(&v, "\"", 1);
        }
        put(&v, "]", 1);
        f_str(&kv, 1, "classes");
        f_bytes(&kv, 2, v.p, v.n);
        if (v.oom)
            kv.oom = 1;
        free(v.p);
        f_msg(&model, 14, &kv);
    }
    if (model.oom) {
        rt_err("%s: out of memory for the ONNX model", path);
        free(model.p);
        return -1;
    }
    const int rc = write_file(path, model.p, model.n);
    free(model.p);
    if (rc == 0)
        printf("exported %s: ONNX opset 17, input \"input\" (%s, the data as stored), output \"y\" (what forward "
               "returns), %lld bytes\n", path, in_type == RT_OX_U8 ? "uint8" : in_type == RT_OX_I64 ? "int64" : "float",
               (long long)model.n);
    return rc;
}
