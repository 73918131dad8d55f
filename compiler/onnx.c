/* onnx.c: the model's forward in eval mode as ONNX operators (opset 17),
 * emitted into the program as tables (cddprt.h: rt_onnx_graph) that
 * --export-onnx writes out with the parameters' values (runtime
 * rt_onnx.c). Each forward node becomes one operator or a few standard
 * ones (GELU as Erf, attention as MatMul, Softmax, MatMul: opset 17 has
 * neither); the graph starts at the normalized input "x" and ends at "y",
 * what forward returns. Dropout and `a if self.training else b` are their
 * eval-mode inputs; batch norm reads the running statistics. A node with
 * no export leaves the graph out and names itself (onnx_refused). */
#include <math.h>
#include <string.h>

#include "cddpc.h"

typedef struct OxAttr {
    const char *name;
    int type;               /* RT_OXA_* */
    double f;
    int64_t i;
    int64_t ints[2 * MAX_RANK];
    int n;
    const char *s;
} OxAttr;

typedef struct OxNode {
    const char *op;
    const char *in[MAX_IN + 2];
    int nin;
    const char *out, *out2, *out3;     /* out2, out3: more outputs ("" left out), or NULL */
    OxAttr at[6];
    int nat;
} OxNode;

typedef struct OxConst {
    const char *name;
    int dtype;              /* RT_OX_* */
    int rank;
    int64_t dims[MAX_RANK];
    const double *v;
    int64_t n;
} OxConst;

typedef struct Ox {
    const Graph *g;
    OxNode *nodes;
    int nn, cap;
    OxConst *consts;
    int nc, ccap;
    const char **name;      /* per graph node: its tensor's name once converted */
    int tmp;
    const Node *refused;    /* the first node with no export */
} Ox;

static int ox_type(DType t) { return t == DT_I64 ? RT_OX_I64 : t == DT_BOOL ? RT_OX_BOOL : RT_OX_F32; }

static const char *fresh(Ox *x) { return util_fmt("u%d", x->tmp++); }

/* op(in...) -> out (a fresh name when out is NULL) */
static OxNode *add(Ox *x, const char *op, const char *out, int nin, const char *const *in)
{
    if (x->nn == x->cap) {
        const int cap = x->cap ? 2 * x->cap : 64;
        x->nodes = util_grow(x->nodes, sizeof *x->nodes * (size_t)x->cap, sizeof *x->nodes * (size_t)cap);
        x->cap = cap;
    }
    OxNode *n = &x->nodes[x->nn++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->out = out ? out : fresh(x);
    n->nin = nin;
    for (int k = 0; k < nin; k++)
        n->in[k] = in[k];
    return n;
}

static const char *op1(Ox *x, const char *op, const char *a) { return add(x, op, NULL, 1, &a)->out; }

static const char *op2(Ox *x, const char *op, const char *a, const char *b)
{
    return add(x, op, NULL, 2, (const char *[]){a, b})->out;
}

static OxAttr *attr(OxNode *n, const char *name, int type)
{
    OxAttr *a = &n->at[n->nat++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->type = type;
    return a;
}

static void attr_i(OxNode *n, const char *name, int64_t v) { attr(n, name, RT_OXA_INT)->i = v; }
static void attr_f(OxNode *n, const char *name, double v) { attr(n, name, RT_OXA_FLOAT)->f = v; }

static void attr_ints(OxNode *n, const char *name, const int64_t *v, int k)
{
    OxAttr *a = attr(n, name, RT_OXA_INTS);
    memcpy(a->ints, v, sizeof *v * (size_t)k);
    a->n = k;
}

/* a constant initializer of the graph */
static const char *cst(Ox *x, int dtype, int rank, const int64_t *dims, const double *v, int64_t n)
{
    if (x->nc == x->ccap) {
        const int cap = x->ccap ? 2 * x->ccap : 32;
        x->consts = util_grow(x->consts, sizeof *x->consts * (size_t)x->ccap, sizeof *x->consts * (size_t)cap);
        x->ccap = cap;
    }
    OxConst *c = &x->consts[x->nc++];
    c->name = util_fmt("c%d", x->nc - 1);
    c->dtype = dtype;
    c->rank = rank;
    for (int d = 0; d < rank; d++)
        c->dims[d] = dims[d];
    double *w = util_alloc(sizeof *w * (size_t)(n + 1));
    memcpy(w, v, sizeof *w * (size_t)n);
    c->v = w;
    c->n = n;
    return c->name;
}

static const char *scalar(Ox *x, int dtype, double v) { return cst(x, dtype, 0, NULL, &v, 1); }

static const char *ints(Ox *x, const int64_t *v, int k)
{
    double w[2 * MAX_RANK];
    for (int i = 0; i < k; i++)
        w[i] = (double)v[i];
    return cst(x, RT_OX_I64, 1, (int64_t[]){k}, w, k);
}

/* shape s as a tensor of the graph, the batch's size read from the input
 * "x" (Expand and constants of the batch's size need it) */
static const char *batch_shape(Ox *x, const Shape *s)
{
    const char *n = add(x, "Slice", NULL, 3,
                        (const char *[]){op1(x, "Shape", "x"), ints(x, (int64_t[]){0}, 1), ints(x, (int64_t[]){1}, 1)})
                        ->out;
    const char *part[MAX_RANK];
    for (int d = 0; d < s->rank; d++) {
        const int64_t k = IR_IS_BATCH(s->d[d]) ? ir_batch_mul(s->d[d]) : s->d[d];
        part[d] = !IR_IS_BATCH(s->d[d]) ? ints(x, &k, 1) : k == 1 ? n : op2(x, "Mul", n, ints(x, &k, 1));
    }
    OxNode *o = add(x, "Concat", NULL, s->rank, part);
    attr_i(o, "axis", 0);
    return o->out;
}

/* a shape for Reshape: the batch's dimension (with what it merged) -1 */
static const char *shape_of(Ox *x, const Shape *s)
{
    int64_t v[MAX_RANK];
    for (int d = 0; d < s->rank; d++)
        v[d] = IR_IS_BATCH(s->d[d]) ? -1 : s->d[d];
    return ints(x, v, s->rank);
}

static const Node *in_node(const Ox *x, const Node *n, int k) { return x->g->n[n->in[k]]; }

/* input k's tensor as dtype t (a Cast where it is another) */
static const char *as(Ox *x, const Node *n, int k, DType t)
{
    const char *a = x->name[n->in[k]];
    if (in_node(x, n, k)->dt == t)
        return a;
    OxNode *c = add(x, "Cast", NULL, 1, &a);
    attr_i(c, "to", ox_type(t));
    return c->out;
}

/* the bits of ten.axes as a list */
static int axes_list(unsigned axes, int rank, int64_t *v)
{
    int k = 0;
    for (int d = 0; d < rank; d++)
        if (axes & (1u << d))
            v[k++] = d;
    return k;
}

static const char *transpose_last2(Ox *x, const char *a, int rank)
{
    int64_t perm[MAX_RANK];
    for (int d = 0; d < rank; d++)
        perm[d] = d;
    perm[rank - 2] = rank - 1;
    perm[rank - 1] = rank - 2;
    OxNode *t = add(x, "Transpose", NULL, 1, &a);
    attr_ints(t, "perm", perm, rank);
    return t->out;
}

/* 0.5 x (1 + erf(x / sqrt 2)), or the tanh form */
static const char *gelu(Ox *x, const char *a, int tanh_form)
{
    const char *inner;
    if (tanh_form) {
        const char *cube = op2(x, "Mul", op2(x, "Mul", a, a), a);
        inner = op2(x, "Mul", op2(x, "Add", a, op2(x, "Mul", cube, scalar(x, RT_OX_F32, 0.044715))),
                    scalar(x, RT_OX_F32, 0.79788456080286536));
        inner = op1(x, "Tanh", inner);
    } else {
        inner = op1(x, "Erf", op2(x, "Mul", a, scalar(x, RT_OX_F32, 0.70710678118654752)));
    }
    return op2(x, "Mul", op2(x, "Mul", a, op2(x, "Add", inner, scalar(x, RT_OX_F32, 1))),
               scalar(x, RT_OX_F32, 0.5));
}

static void window(OxNode *o, const Window *w, int dilations)
{
    attr_ints(o, "kernel_shape", (int64_t[]){w->kh, w->kw}, 2);
    attr_ints(o, "strides", (int64_t[]){w->sh, w->sw}, 2);
    attr_ints(o, "pads", (int64_t[]){w->ph, w->pw, w->ph, w->pw}, 4);
    if (dilations)
        attr_ints(o, "dilations", (int64_t[]){w->dh, w->dw}, 2);
}

/* softmax (q k^T scale + mask) v, as PyTorch 2's scaled_dot_product_attention */
static const char *attention(Ox *x, const Node *n)
{
    const Shape *q = &in_node(x, n, 0)->shape, *k = &in_node(x, n, 1)->shape;
    const int64_t L = q->d[q->rank - 2], S = k->d[k->rank - 2];
    if (IR_IS_BATCH(L) || IR_IS_BATCH(S))
        return NULL;
    const char *s = op2(x, "MatMul", x->name[n->in[0]], transpose_last2(x, x->name[n->in[1]], k->rank));
    s = op2(x, "Mul", s, scalar(x, RT_OX_F32, n->attn.scale));
    if (n->attn.causal) {   /* key j > query i left out */
        double *m = util_alloc(sizeof *m * (size_t)(L * S));
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++)
                m[i * S + j] = j > i ? -INFINITY : 0;
        s = op2(x, "Add", s, cst(x, RT_OX_F32, 2, (int64_t[]){L, S}, m, L * S));
    }
    if (n->attn.mask == ATTN_MASK_BOOL)
        s = add(x, "Where", NULL, 3, (const char *[]){as(x, n, 3, DT_BOOL), s, scalar(x, RT_OX_F32, -INFINITY)})->out;
    else if (n->attn.mask)
        s = op2(x, "Add", s, x->name[n->in[3]]);
    OxNode *sm = add(x, "Softmax", NULL, 1, &s);
    attr_i(sm, "axis", -1);
    return op2(x, "MatMul", sm->out, x->name[n->in[2]]);
}

/* expand a to n's shape (a dimension of the batch kept as a's, or the
 * batch's size read from the input) */
static const char *expand(Ox *x, const Node *n, const char *a, const Shape *as_)
{
    int64_t v[MAX_RANK];
    const int off = n->shape.rank - as_->rank;
    for (int d = 0; d < n->shape.rank; d++) {
        if (!IR_IS_BATCH(n->shape.d[d])) {
            v[d] = n->shape.d[d];
            continue;
        }
        if (d < off || !IR_IS_BATCH(as_->d[d - off]))
            return op2(x, "Expand", a, batch_shape(x, &n->shape));
        v[d] = 1;
    }
    return op2(x, "Expand", a, ints(x, v, n->shape.rank));
}

/* PyTorch's gate blocks in ONNX's order: ONNX's block b is PyTorch's
 * order[b] (LSTM i, o, f, c from i, f, g, o; GRU z, r, h from r, z, n) */
static const int *gate_order(int cell)
{
    static const int lstm[] = {0, 3, 1, 2}, gru[] = {1, 0, 2}, one[] = {0};
    return cell == RNN_LSTM ? lstm : cell == RNN_GRU ? gru : one;
}

/* a recurrence as ONNX's LSTM, GRU (linear_before_reset, PyTorch's) or
 * RNN over its input projection xw [N, T, G H]: X is xw time-major and W
 * the permutation that puts its gates in ONNX's order (the projection, a
 * Linear, is the graph's node before this one); R and the bias are W_hh
 * and b_hh with their rows so reordered. The LSTM's last cell state is
 * its third output, "cn<id>" (T_RNN_CN reads it). */
static const char *recurrence(Ox *x, const Node *n)
{
    const int cell = n->rnn.cell, G = ten_rnn_gates(cell);
    const int64_t GH = in_node(x, n, 0)->shape.d[2], H = GH / G;
    const int *ord = gate_order(cell);
    int64_t *rows = util_alloc(sizeof *rows * (size_t)GH);
    double *perm = util_alloc(sizeof *perm * (size_t)(GH * GH));
    for (int b = 0; b < G; b++)
        for (int64_t j = 0; j < H; j++)
            rows[b * H + j] = ord[b] * H + j;
    for (int64_t r = 0; r < GH; r++)
        perm[r * GH + rows[r]] = 1;
    double *rv = util_alloc(sizeof *rv * (size_t)GH);
    for (int64_t r = 0; r < GH; r++)
        rv[r] = (double)rows[r];
    const char *idx = cst(x, RT_OX_I64, 1, &GH, rv, GH);
    OxNode *t = add(x, "Transpose", NULL, 1, &x->name[n->in[0]]);
    attr_ints(t, "perm", (int64_t[]){1, 0, 2}, 3);
    const char *X = t->out, *W = cst(x, RT_OX_F32, 3, (int64_t[]){1, GH, GH}, perm, GH * GH);
    const char *R = op2(x, "Unsqueeze", op2(x, "Gather", x->name[n->in[1]], idx), ints(x, (int64_t[]){0}, 1));
    int k = 2;
    const char *B = "";
    if (n->rnn.bias) {  /* [Wb, Rb]: xw holds b_ih already */
        double *z = util_alloc(sizeof *z * (size_t)GH);
        OxNode *c = add(x, "Concat", NULL, 2,
                        (const char *[]){cst(x, RT_OX_F32, 1, &GH, z, GH), op2(x, "Gather", x->name[n->in[k++]], idx)});
        attr_i(c, "axis", 0);
        B = op2(x, "Unsqueeze", c->out, ints(x, (int64_t[]){0}, 1));
    }
    const char *h0 = n->rnn.h0 ? op2(x, "Unsqueeze", x->name[n->in[k++]], ints(x, (int64_t[]){0}, 1)) : "";
    const char *c0 = n->rnn.c0 ? op2(x, "Unsqueeze", x->name[n->in[k++]], ints(x, (int64_t[]){0}, 1)) : "";
    OxNode *o = add(x, cell == RNN_LSTM ? "LSTM" : cell == RNN_GRU ? "GRU" : "RNN", NULL,
                    cell == RNN_LSTM ? 7 : 6, (const char *[]){X, W, R, B, "", h0, c0});
    attr_i(o, "hidden_size", H);
    OxAttr *dir = attr(o, "direction", RT_OXA_STRING);
    dir->s = n->rnn.reverse ? "reverse" : "forward";
    if (cell == RNN_GRU)
        attr_i(o, "linear_before_reset", 1);
    if (cell == RNN_RELU)
        attr(o, "activations", RT_OXA_STRINGS)->s = "Relu";
    if (cell == RNN_LSTM) {
        o->out2 = "";
        o->out3 = util_fmt("cn%d", n->id);
    }
    const char *y = o->out;     /* [T, 1, N, H] -> [N, T, H] */
    t = add(x, "Transpose", NULL, 1, (const char *[]){op2(x, "Squeeze", y, ints(x, (int64_t[]){1}, 1))});
    attr_ints(t, "perm", (int64_t[]){1, 0, 2}, 3);
    return t->out;
}

static const char *cmp_name(Op op)
{
    switch (op) {
    case OP_T_GT: case OP_T_GTC: return "Greater";
    case OP_T_GE: case OP_T_GEC: return "GreaterOrEqual";
    case OP_T_LT: case OP_T_LTC: return "Less";
    case OP_T_LE: case OP_T_LEC: return "LessOrEqual";
    default: return "Equal";
    }
}

/* node n as operators; its tensor's name, or NULL: no export */
static const char *convert(Ox *x, const Node *n)
{
    const char *a = n->nin > 0 ? x->name[n->in[0]] : NULL, *b = n->nin > 1 ? x->name[n->in[1]] : NULL;
    const Shape *s = &n->shape, *xs = n->nin > 0 ? &in_node(x, n, 0)->shape : NULL;
    OxNode *o;
    switch (n->op) {
    case OP_RESHAPE:
        return op2(x, "Reshape", a, shape_of(x, s));
    case OP_DROPOUT: case OP_T_IF_TRAINING:     /* eval mode: the input (the second's b) */
        return a;
    case OP_MM_NT: case OP_MM_NN: case OP_MM_TN:
        o = add(x, "Gemm", NULL, 2, (const char *[]){a, b});
        if (n->op == OP_MM_NT)
            attr_i(o, "transB", 1);
        if (n->op == OP_MM_TN)
            attr_i(o, "transA", 1);
        return o->out;
    case OP_BIAS_ADD:
        if (s->rank == 4)   /* a convolution's: over the channels */
            b = op2(x, "Reshape", b, ints(x, (int64_t[]){s->d[1], 1, 1}, 3));
        return op2(x, "Add", a, b);
    case OP_ADD: case OP_BC_ADD: case OP_SUB: case OP_BC_SUB: case OP_MUL: case OP_BC_MUL: case OP_MUL_COLS:
    case OP_BC_DIV: case OP_T_MAXIMUM: case OP_T_MINIMUM: {
        const char *name = n->op == OP_ADD || n->op == OP_BC_ADD ? "Add" : n->op == OP_SUB || n->op == OP_BC_SUB ? "Sub"
                         : n->op == OP_BC_DIV ? "Div" : n->op == OP_T_MAXIMUM ? "Max" : n->op == OP_T_MINIMUM ? "Min"
                         : "Mul";
        return op2(x, name, as(x, n, 0, n->dt), as(x, n, 1, n->dt));
    }
    case OP_AFFINE: case OP_T_AFFINE: {
        const double m = n->op == OP_AFFINE ? n->act.a : n->ten.lo, c = n->op == OP_AFFINE ? n->act.b : n->ten.hi;
        const int t = ox_type(n->dt);
        const char *y = m == 1 ? as(x, n, 0, n->dt) : op2(x, "Mul", as(x, n, 0, n->dt), scalar(x, t, m));
        return c == 0 ? (m == 1 ? op1(x, "Identity", y) : y) : op2(x, "Add", y, scalar(x, t, c));
    }
    case OP_DIV_SCALAR:
        return op2(x, "Div", a, scalar(x, RT_OX_F32, n->act.a));
    case OP_RELU: return op1(x, "Relu", a);
    case OP_TANH: return op1(x, "Tanh", a);
    case OP_SIGMOID: return op1(x, "Sigmoid", a);
    case OP_SILU: return op2(x, "Mul", a, op1(x, "Sigmoid", a));
    case OP_GELU: return gelu(x, a, 0);
    case OP_GELU_TANH: return gelu(x, a, 1);
    case OP_LEAKY_RELU:
        o = add(x, "LeakyRelu", NULL, 1, &a);
        attr_f(o, "alpha", n->act.a);
        return o->out;
    case OP_ELU:
        o = add(x, "Elu", NULL, 1, &a);
        attr_f(o, "alpha", n->act.a);
        return o->out;
    case OP_HARDTANH:
        return add(x, "Clip", NULL, 3,
                   (const char *[]){a, scalar(x, RT_OX_F32, n->act.a), scalar(x, RT_OX_F32, n->act.b)})->out;
    case OP_SOFTPLUS: {     /* linear above the threshold, as torch */
        const char *z = op2(x, "Mul", a, scalar(x, RT_OX_F32, n->act.a));
        const char *sp = op2(x, "Div", op1(x, "Softplus", z), scalar(x, RT_OX_F32, n->act.a));
        return add(x, "Where", NULL, 3, (const char *[]){op2(x, "Greater", z, scalar(x, RT_OX_F32, n->act.b)), a, sp})
            ->out;
    }
    case OP_CONV2D:
        o = add(x, "Conv", NULL, 2, (const char *[]){a, b});
        window(o, &n->win, 1);
        attr_i(o, "group", n->win.groups);
        return o->out;
    case OP_CONV2D_DX: {    /* ConvTranspose2d: the weight [in, out / groups, kh, kw] as PyTorch's */
        const Window *w = &n->win;
        const int64_t oh = s->d[2] - ((xs->d[2] - 1) * w->sh - 2 * w->ph + w->dh * (w->kh - 1) + 1),
                      ow = s->d[3] - ((xs->d[3] - 1) * w->sw - 2 * w->pw + w->dw * (w->kw - 1) + 1);
        o = add(x, "ConvTranspose", NULL, 2, (const char *[]){a, b});
        window(o, w, 1);
        attr_i(o, "group", w->groups);
        if (oh || ow)
            attr_ints(o, "output_padding", (int64_t[]){oh, ow}, 2);
        return o->out;
    }
    case OP_BN_STATS:       /* eval mode: BN_APPLY reads the running statistics */
        return "";
    case OP_BN_APPLY: {
        const Node *st = in_node(x, n, 1);
        if (n->nin != 4 || st->op != OP_BN_STATS)
            return NULL;
        o = add(x, "BatchNormalization", NULL, 5,
                (const char *[]){a, x->name[n->in[2]], x->name[n->in[3]], x->name[st->in[1]], x->name[st->in[2]]});
        attr_f(o, "epsilon", st->bn.eps);
        return o->out;
    }
    case OP_MAXPOOL: case OP_AVGPOOL:
        o = add(x, n->op == OP_MAXPOOL ? "MaxPool" : "AveragePool", NULL, 1, &a);
        window(o, &n->win, n->op == OP_MAXPOOL);
        if (n->op == OP_AVGPOOL)    /* zero padding counted in the divisor, as torch */
            attr_i(o, "count_include_pad", 1);
        return o->out;
    case OP_SOFTMAX: case OP_LOG_SOFTMAX:
        o = add(x, n->op == OP_SOFTMAX ? "Softmax" : "LogSoftmax", NULL, 1, &a);
        attr_i(o, "axis", -1);
        return o->out;
    case OP_LAYER_NORM: {   /* its affine is the MUL_COLS and BIAS_ADD after it */
        const int64_t C = s->d[s->rank - 1];
        double *one = util_alloc(sizeof *one * (size_t)C);
        for (int64_t j = 0; j < C; j++)
            one[j] = 1;
        o = add(x, "LayerNormalization", NULL, 2, (const char *[]){a, cst(x, RT_OX_F32, 1, &C, one, C)});
        attr_i(o, "axis", -1);
        attr_f(o, "epsilon", n->bn.eps);
        return o->out;
    }
    case OP_CAT: case OP_T_CAT: {
        const char *in[MAX_IN];
        for (int k = 0; k < n->nin; k++)
            in[k] = as(x, n, k, n->dt);
        o = add(x, "Concat", NULL, n->nin, in);
        attr_i(o, "axis", n->op == OP_CAT ? 1 : n->ten.axis);
        return o->out;
    }
    case OP_BC_COPY:
        return expand(x, n, a, xs);
    case OP_BC_SCALE: {
        const char *e = expand(x, n, a, xs);
        return e ? op2(x, "Div", e, scalar(x, RT_OX_F32, n->ten.scale)) : NULL;
    }
    case OP_T_SUM: case OP_T_MEAN: case OP_T_AMAX: case OP_T_AMIN: {
        int64_t v[MAX_RANK];
        const int k = axes_list(n->ten.axes, xs->rank, v);
        for (int i = 0; i < k; i++)
            if (IR_IS_BATCH(xs->d[v[i]]))
                return NULL;
        if (n->op == OP_T_SUM) {
            o = add(x, "ReduceSum", NULL, 2, (const char *[]){as(x, n, 0, n->dt), ints(x, v, k)});
        } else {
            o = add(x, n->op == OP_T_MEAN ? "ReduceMean" : n->op == OP_T_AMAX ? "ReduceMax" : "ReduceMin", NULL, 1,
                    (const char *[]){as(x, n, 0, n->dt)});
            attr_ints(o, "axes", v, k);
        }
        attr_i(o, "keepdims", 1);
        return o->out;
    }
    case OP_T_ARGMAX: case OP_T_ARGMIN: {
        int64_t v[MAX_RANK];
        if (axes_list(n->ten.axes, xs->rank, v) != 1)
            return NULL;
        o = add(x, n->op == OP_T_ARGMAX ? "ArgMax" : "ArgMin", NULL, 1, &a);
        attr_i(o, "axis", v[0]);
        attr_i(o, "keepdims", 1);
        attr_i(o, "select_last_index", 0);
        return o->out;
    }
    case OP_T_PERMUTE: {
        int64_t perm[MAX_RANK];
        for (int d = 0; d < s->rank; d++)
            perm[d] = n->ten.perm[d];
        o = add(x, "Transpose", NULL, 1, &a);
        attr_ints(o, "perm", perm, s->rank);
        return o->out;
    }
    case OP_T_SLICE: {
        const int ax = n->ten.axis;
        if (IR_IS_BATCH(xs->d[ax]) || n->ten.step < 1)
            return NULL;
        const int64_t st = n->ten.start, end = st + n->ten.step * (s->d[ax] - 1) + 1;
        return add(x, "Slice", NULL, 5,
                   (const char *[]){a, ints(x, &st, 1), ints(x, &end, 1), ints(x, (int64_t[]){ax}, 1),
                                    ints(x, &n->ten.step, 1)})->out;
    }
    case OP_T_EXP: return op1(x, "Exp", a);
    case OP_T_LOG: return op1(x, "Log", a);
    case OP_T_SQRT: return op1(x, "Sqrt", a);
    case OP_T_RSQRT: return op1(x, "Reciprocal", op1(x, "Sqrt", a));
    case OP_T_ABS: return op1(x, "Abs", as(x, n, 0, n->dt));
    case OP_T_POW: return op2(x, "Pow", a, scalar(x, RT_OX_F32, n->ten.lo));
    case OP_T_CLAMP: {
        const int t = ox_type(n->dt);
        return add(x, "Clip", NULL, 3,
                   (const char *[]){as(x, n, 0, n->dt), isinf(n->ten.lo) ? "" : scalar(x, t, n->ten.lo),
                                    isinf(n->ten.hi) ? "" : scalar(x, t, n->ten.hi)})->out;
    }
    case OP_T_BMM: {
        const char *p = n->ten.ta ? transpose_last2(x, a, xs->rank) : a;
        const char *q = n->ten.tb ? transpose_last2(x, b, in_node(x, n, 1)->shape.rank) : b;
        return op2(x, "MatMul", p, q);
    }
    case OP_T_ATTN:
        return attention(x, n);
    case OP_T_FULL: case OP_T_TABLE: case OP_T_ARANGE: {
        if (n->op == OP_T_FULL && ten_batch_dim(s) >= 0)    /* zeros_like(x): the value expanded to the batch */
            return op2(x, "Expand", scalar(x, ox_type(n->dt), n->ten.lo), batch_shape(x, s));
        if (ten_batch_dim(s) >= 0)
            return NULL;
        const int64_t cnt = ir_row_elems(s);
        double *v = util_alloc(sizeof *v * (size_t)(cnt + 1));
        for (int64_t i = 0; i < cnt; i++)
            v[i] = n->op == OP_T_TABLE ? n->ten.table[i] : n->op == OP_T_FULL ? n->ten.lo : n->ten.lo + n->ten.hi * (double)i;
        return cst(x, ox_type(n->dt), s->rank, s->d, v, cnt);
    }
    case OP_T_TRIL: case OP_T_TRIU: {
        const int64_t k = (int64_t)n->ten.lo;
        o = add(x, "Trilu", NULL, 2, (const char *[]){a, ints(x, &k, 1)});
        attr_i(o, "upper", n->op == OP_T_TRIU);
        return o->out;
    }
    case OP_T_GT: case OP_T_GE: case OP_T_LT: case OP_T_LE: case OP_T_EQ: case OP_T_NE: {
        const DType t = in_node(x, n, 0)->dt == DT_F32 || in_node(x, n, 1)->dt == DT_F32 ? DT_F32 : DT_I64;
        const char *c = op2(x, cmp_name(n->op), as(x, n, 0, t), as(x, n, 1, t));
        return n->op == OP_T_NE ? op1(x, "Not", c) : c;
    }
    case OP_T_GTC: case OP_T_GEC: case OP_T_LTC: case OP_T_LEC: case OP_T_EQC: case OP_T_NEC: {
        const DType t = in_node(x, n, 0)->dt == DT_F32 ? DT_F32 : DT_I64;
        const char *c = op2(x, cmp_name(n->op), as(x, n, 0, t), scalar(x, ox_type(t), n->ten.lo));
        return n->op == OP_T_NEC ? op1(x, "Not", c) : c;
    }
    case OP_T_AND: case OP_T_OR:
        return op2(x, n->op == OP_T_AND ? "And" : "Or", as(x, n, 0, DT_BOOL), as(x, n, 1, DT_BOOL));
    case OP_T_TO_I64: case OP_T_TO_BOOL: case OP_T_TO_F32:
        o = add(x, "Cast", NULL, 1, &a);
        attr_i(o, "to", ox_type(n->dt));
        return o->out;
    case OP_T_FLOORDIV_C: case OP_T_MOD_C: {    /* in floats, exact below 2^24, as the kernels */
        const char *f = as(x, n, 0, DT_F32), *c = scalar(x, RT_OX_F32, n->ten.lo);
        const char *q = op1(x, "Floor", op2(x, "Div", f, c));
        const char *r = n->op == OP_T_FLOORDIV_C ? q : op2(x, "Sub", f, op2(x, "Mul", q, c));
        if (n->dt == DT_F32)
            return r;
        o = add(x, "Cast", NULL, 1, &r);
        attr_i(o, "to", ox_type(n->dt));
        return o->out;
    }
    case OP_T_WHERE:
        return add(x, "Where", NULL, 3, (const char *[]){as(x, n, 0, DT_BOOL), as(x, n, 1, n->dt), as(x, n, 2, n->dt)})
            ->out;
    case OP_T_FILL_IF: case OP_T_KEEP_IF: {
        const char *c = scalar(x, ox_type(n->dt), n->ten.lo), *v = as(x, n, 0, n->dt);
        return add(x, "Where", NULL, 3,
                   (const char *[]){as(x, n, 1, DT_BOOL), n->op == OP_T_FILL_IF ? c : v, n->op == OP_T_FILL_IF ? v : c})
            ->out;
    }
    case OP_T_GATHER: {     /* the index broadcast to the result, as GatherElements takes it */
        const Shape *is = &in_node(x, n, 1)->shape;
        const char *idx = ten_same(is, s) ? b : expand(x, n, b, is);
        if (!idx)
            return NULL;
        o = add(x, "GatherElements", NULL, 2, (const char *[]){a, idx});
        attr_i(o, "axis", n->ten.axis);
        return o->out;
    }
    case OP_T_EMBED:
        return op2(x, "Gather", a, b);
    case OP_T_RNN:
        return recurrence(x, n);
    case OP_T_RNN_CN:
        return op2(x, "Squeeze", util_fmt("cn%d", n->in[0]), ints(x, (int64_t[]){0}, 1));
    default:
        return NULL;
    }
}

/* n's inputs in eval mode (plan.c's plan_nin for the eval plan) */
static int eval_nin(const Node *n)
{
    return op_eval[n->op] == EV_RUNNING ? 3 : op_eval[n->op] == EV_VIEW ? 1 : n->nin;
}

/* The graph from the forward's input to its output (g->logits). */
static void build(Ox *x)
{
    const Graph *g = x->g;
    char *need = util_alloc((size_t)g->nn + 1);
    need[g->logits] = 1;
    for (int i = g->nn - 1; i >= 0; i--)
        if (need[i])
            for (int k = 0; k < eval_nin(g->n[i]); k++)
                need[g->n[i]->in[k]] = 1;
    x->name = util_alloc(sizeof *x->name * (size_t)(g->nn + 1));
    for (int i = 0; i < g->nn && !x->refused; i++) {
        const Node *n = g->n[i];
        if (!need[i])
            continue;
        if (n->op == OP_IMAGES)
            x->name[i] = "x";
        else if (n->op == OP_PARAM)
            x->name[i] = n->name;
        else if (!(x->name[i] = convert(x, n)))
            x->refused = n;
    }
    if (!x->refused)
        add(x, "Identity", "y", 1, &x->name[g->logits]);
}

static void emit_str_list(FILE *f, const char *var, const char *const *s, int n)
{
    fprintf(f, "static const char *const %s[] = {", var);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s\"%s\"", k ? ", " : "", s[k]);
    fprintf(f, "};\n");
}

void onnx_emit(FILE *f, const Graph *g)
{
    Ox x = {.g = g};
    build(&x);
    if (x.refused) {    /* --export-onnx names it */
        const Node *n = x.refused;
        fprintf(f, "\nstatic const rt_onnx_graph onnx_graph = {.refused = \"%s (%s:%d:%d)\"};\n", op_text[n->op],
                n->loc.file ? n->loc.file : "?", n->loc.line, n->loc.col);
        return;
    }
    fprintf(f, "\n/* the forward in eval mode as ONNX operators (onnx.c) */\n");
    for (int i = 0; i < x.nn; i++) {
        const OxNode *o = &x.nodes[i];
        emit_str_list(f, util_fmt("oxi%d", i), o->in, o->nin);
        for (int k = 0; k < o->nat; k++)
            if (o->at[k].type == RT_OXA_INTS) {
                fprintf(f, "static const int64_t oxv%d_%d[] = {", i, k);
                for (int j = 0; j < o->at[k].n; j++)
                    fprintf(f, "%s%lld", j ? ", " : "", (long long)o->at[k].ints[j]);
                fprintf(f, "};\n");
            }
        if (o->nat) {
            fprintf(f, "static const rt_onnx_attr oxa%d[] = {", i);
            for (int k = 0; k < o->nat; k++) {
                const OxAttr *a = &o->at[k];
                fprintf(f, "%s{\"%s\", %d, %s, %lldLL, %s, %d, %s}", k ? ", " : "", a->name, a->type,
                        util_cfloat(a->f), (long long)a->i, a->type == RT_OXA_INTS ? util_fmt("oxv%d_%d", i, k) : "NULL",
                        a->n, a->s ? util_fmt("\"%s\"", a->s) : "NULL");
            }
            fprintf(f, "};\n");
        }
    }
    fprintf(f, "static const rt_onnx_node onnx_nodes[] = {\n");
    for (int i = 0; i < x.nn; i++) {
        const OxNode *o = &x.nodes[i];
        fprintf(f, "    {\"%s\", oxi%d, %d, \"%s\", %s, %d, %s, %s},\n", o->op, i, o->nin, o->out,
                o->nat ? util_fmt("oxa%d", i) : "NULL", o->nat, o->out2 ? util_fmt("\"%s\"", o->out2) : "NULL",
                o->out3 ? util_fmt("\"%s\"", o->out3) : "NULL");
    }
    fprintf(f, "};\n");
    for (int i = 0; i < x.nc; i++) {
        const OxConst *c = &x.consts[i];
        fprintf(f, "static const int64_t oxd%d[] = {", i);
        for (int d = 0; d < c->rank; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)c->dims[d]);
        fprintf(f, "%s};\nstatic const double oxc%d[] = {", c->rank ? "" : "0", i);
        for (int64_t j = 0; j < c->n; j++)
            fprintf(f, "%s%s", j ? (j % 8 ? ", " : ",\n    ") : "",
                    isinf(c->v[j]) ? (c->v[j] > 0 ? "INFINITY" : "-INFINITY") : util_fmt("%.17g", c->v[j]));
        fprintf(f, "};\n");
    }
    fprintf(f, "static const rt_onnx_const onnx_consts[] = {\n");
    for (int i = 0; i < x.nc; i++) {
        const OxConst *c = &x.consts[i];
        fprintf(f, "    {\"%s\", %d, %d, oxd%d, oxc%d, %lld},\n", c->name, c->dtype, c->rank, i, i, (long long)c->n);
    }
    fprintf(f, "%s};\n", x.nc ? "" : "    {0}");
    const Node *y = g->n[g->logits];
    fprintf(f, "static const rt_onnx_graph onnx_graph = {onnx_nodes, %d, onnx_consts, %d, %d, {", x.nn, x.nc,
            y->shape.rank);
    for (int d = 0; d < y->shape.rank; d++)
        fprintf(f, "%s%lld", d ? ", " : "", (long long)y->shape.d[d]);
    fprintf(f, "}, %d, NULL};\n", ox_type(y->dt));
}
