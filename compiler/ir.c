/* ir.c: the graph IR: nodes, shapes, dump and verifier.
 *
 * A Graph is a list of nodes in creation order, which is always a
 * topological order (a node's inputs exist before it). Shapes carry the
 * batch as the symbolic DIM_N so one compiled program serves any batch
 * size, including the short last batch of an epoch. */
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"

/* ops.def's columns, one table each */
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) text,
const char *const op_text[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) arity,
const int op_arity[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) kind,
const OpKind op_kind[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) formula,
const char *const op_formula[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) fuse,
const int op_fuse[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) flops,
const double op_flops[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) rd,
const double op_rd[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) wr,
const double op_wr[OP_COUNT] = {
#include "ops.def"
};
#undef X
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) eval,
const OpEval op_eval[OP_COUNT] = {
#include "ops.def"
};
#undef X

/* Each row within what a Node can hold: a new op with more inputs than
 * MAX_IN, or a negative arity, stops the build here. */
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval)                                 \
    _Static_assert((arity) >= 0 && (arity) <= MAX_IN, "ops.def: " #name "'s arity is outside 0..MAX_IN"); \
    _Static_assert(!((fuse) & F_EPI) || (kind) == K_EW, "ops.def: " #name ": only elementwise ops are epilogues"); \
    _Static_assert((eval) != EV_VIEW || (arity) >= 1, "ops.def: " #name ": an eval-plan view has an input");
#include "ops.def"
#undef X

Graph *ir_new(void)
{
    Graph *g = util_alloc(sizeof *g);
    g->images = g->labels = g->logits = g->loss = -1;
    g->loss_sum = g->correct_sum = g->count_sum = g->metric2 = -1;
    g->mt_class_out = g->mt_class_t = g->mt_reg_out = g->mt_reg_t = -1;
    return g;
}

int ir_add(Graph *g, Op op, int nin, const int *in, Shape s, DType dt, Loc loc)
{
    /* the attention ops' mask is optional (their last input); a
     * recurrence's inputs after W_hh are (Node.rnn) */
    const int least = ir_is_attention(op) ? op_arity[op] - 1 : op == OP_T_RNN ? 2 : op == OP_T_RNN_BWD ? 3
                      : op_arity[op];
    if (nin > op_arity[op] || nin < least)
        diag_ice("ir_add: %s takes %d inputs, got %d", op_text[op], op_arity[op], nin);
    if (g->nn == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        g->n = util_grow(g->n, sizeof *g->n * (size_t)g->cap, sizeof *g->n * (size_t)cap);
        g->cap = cap;
    }
    Node *n = util_alloc(sizeof *n);
    n->id = g->nn;
    n->op = op;
    n->nin = nin;
    for (int i = 0; i < nin; i++) {
        if (in[i] < 0 || in[i] >= g->nn)
            diag_ice("ir_add: %s input %d is %d (graph has %d nodes)", op_text[op], i, in[i], g->nn);
        n->in[i] = in[i];
    }
    n->shape = s;
    n->dt = dt;
    n->loc = loc;
    n->param = -1;
    n->grad_of = -1;
    g->n[g->nn] = n;
    return g->nn++;
}

int ir_param(Graph *g, const char *name, Shape s, int init, int64_t fan_in, Loc loc)
{
    int id = ir_add(g, OP_PARAM, 0, NULL, s, DT_F32, loc);
    Node *n = g->n[id];
    n->name = util_strdup(name);
    n->init = init;
    n->fan_in = fan_in;
    n->param = g->nparam;
    g->params = util_grow(g->params, sizeof(int) * (size_t)g->nparam, sizeof(int) * (size_t)(g->nparam + 1));
    g->params[g->nparam++] = id;
    return id;
}

void ir_alias(Graph *g, int from, int to)
{
    int k = 0;
    for (int i = 0; i < g->nparam; i++)
        if (g->params[i] != from) {
            g->params[k] = g->params[i];
            g->n[g->params[k]]->param = k;
            k++;
        }
    g->nparam = k;
    /* the old node reads as its target's (a PARAM no kernel reads) */
    g->n[from]->param = g->n[to]->param;
    for (int i = 0; i < g->naliases; i++)     /* a name tied before now follows the new target */
        if (g->alias_of[i] == from)
            g->alias_of[i] = to;
    g->aliases = util_grow(g->aliases, sizeof *g->aliases * (size_t)g->naliases,
                           sizeof *g->aliases * (size_t)(g->naliases + 1));
    g->alias_of = util_grow(g->alias_of, sizeof *g->alias_of * (size_t)g->naliases,
                            sizeof *g->alias_of * (size_t)(g->naliases + 1));
    g->aliases[g->naliases] = g->n[from]->name;
    g->alias_of[g->naliases++] = to;
}

int ir_buffer(Graph *g, const char *name, Shape s, int init, int i64, Loc loc)
{
    int id = ir_param(g, name, s, init, 0, loc);
    g->n[id]->buffer = 1;
    g->n[id]->i64 = i64;
    return id;
}

void ir_effect(Graph *g, int id)
{
    g->effects = util_grow(g->effects, sizeof(int) * (size_t)g->neffects, sizeof(int) * (size_t)(g->neffects + 1));
    g->effects[g->neffects++] = id;
}

int ir_dropout(Graph *g, int x, double p, Loc loc)
{
    int id = ir_add(g, OP_DROPOUT, 1, &x, g->n[x]->shape, DT_F32, loc);
    g->n[id]->drop.p = p;
    /* the ordinal, not the node id: adding a layer elsewhere does not
     * change the masks of the dropouts, and tests can predict the key */
    g->n[id]->drop.key = g->ndropout++;
    return id;
}

int64_t ir_window_out(int64_t in, int k, int s, int p, int d)
{
    int64_t span = in + 2 * (int64_t)p - (int64_t)d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
}

Shape ir_shape_a(int rank, const int64_t *d)
{
    Shape s = {0};
    if (rank < 0 || rank > MAX_RANK)
        diag_ice("ir_shape: rank %d", rank);
    s.rank = rank;
    for (int i = 0; i < rank; i++)
        s.d[i] = d[i];
    return s;
}

int ir_pool_io(const Graph *g, const Node *n, const Shape **x, const Shape **y)
{
    const int grad = n->op == OP_MAXPOOL_DX || n->op == OP_AVGPOOL_DX;
    *x = grad ? &n->shape : &g->n[n->in[0]]->shape;
    *y = grad ? &g->n[n->in[0]]->shape : &n->shape;
    return grad;
}

int ir_pool_tiles(const Shape *x, const Shape *y, const Window *w)
{
    return w->ph == 0 && w->pw == 0 && w->kh == w->sh && w->kw == w->sw && x->rank == 4 && y->rank == 4
        && x->d[2] == y->d[2] * w->sh && x->d[3] == y->d[3] * w->sw;
}

int ir_batched(const Shape *s) { return ten_batch_dim(s) >= 0; }

const char *ir_dtype_text(DType t)
{
    static const char *const text[] = {"f32", "i32", "i64", "bool"};
    return text[t];
}

int ir_tensor_pointwise(Op op) { return op_kind[op] == K_TENSOR && op_formula[op] != NULL; }

/* Saturates at INT64_MAX: a bad model's shape (Conv2d(1, 2^24, 1,
 * padding = 2^24) gives [N, 2^24, 2^25, 2^25]) passes 2^63 before the
 * front end refuses it as over MAX_DIM, which it then still is. */
int64_t ir_row_elems(const Shape *s)
{
    int64_t e = 1;
    for (int i = 0; i < s->rank; i++)
        if (__builtin_mul_overflow(e, IR_IS_BATCH(s->d[i]) ? ir_batch_mul(s->d[i]) : s->d[i], &e))
            return INT64_MAX;
    return e;
}

int64_t ir_numel(const Shape *s, int64_t n)
{
    return ir_row_elems(s) * (ir_batched(s) ? n : 1);
}

int ir_same_elements(const Shape *a, const Shape *b)
{
    return ir_same_shape(a, b) || (a->rank >= 2 && b->rank >= 2 && IR_IS_BATCH(a->d[0]) && IR_IS_BATCH(b->d[0])
                                   && a->d[a->rank - 1] == b->d[b->rank - 1] && ir_row_elems(a) == ir_row_elems(b));
}

int ir_is_attention(Op op)
{
    return op == OP_T_ATTN || op == OP_T_ATTN_DQ || op == OP_T_ATTN_DK || op == OP_T_ATTN_DV;
}

int ir_is_recurrent(Op op)
{
    return op == OP_T_RNN || op == OP_T_RNN_BWD || op == OP_T_RNN_CN || op == OP_T_RNN_DSTATE;
}

int ir_own_kernel(Op op) { return ir_is_attention(op) || ir_is_recurrent(op); }

int64_t ir_extra_elems(const Node *n)
{
    if (n->op == OP_T_RNN)      /* [N, T, H]: the saved floats of every step */
        return ir_row_elems(&n->shape) * ten_rnn_saved(n->rnn.cell);
    if (n->op == OP_T_RNN_BWD && n->rnn.dstate)     /* dh0 [N, H] (and the LSTM's dc0) */
        return (n->rnn.cell == RNN_LSTM ? 2 : 1) * (ir_row_elems(&n->shape) / n->shape.d[1]
                                                     / (n->rnn.cell == RNN_GRU ? 6 : ten_rnn_gates(n->rnn.cell)));
    if (n->op != OP_T_ATTN)
        return 0;
    return ir_row_elems(&n->shape) / n->shape.d[n->shape.rank - 1];
}

int ir_same_shape(const Shape *a, const Shape *b) { return ten_same(a, b); }

char *ir_shape_str(const Shape *s)
{
    char buf[128];
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < s->rank; i++) {
        if (s->d[i] == DIM_N)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%sN", i ? ", " : "");
        else if (s->d[i] < 0)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%sN*%lld", i ? ", " : "", (long long)-s->d[i]);
        else
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%lld", i ? ", " : "", (long long)s->d[i]);
    }
    snprintf(buf + k, sizeof buf - k, "]");
    return util_strdup(buf);
}

static const char *const phase_text[] = {"fwd", "loss", "bwd", "opt"};
static const char *const red_text[] = {"mean", "sum", "none"};

void ir_dump(FILE *f, const Graph *g)
{
    for (int i = 0; i < g->nn; i++) {
        const Node *n = g->n[i];
        fprintf(f, "%%%d = %s", n->id, op_text[n->op]);
        if (n->op == OP_PARAM)
            fprintf(f, " \"%s\"", n->name);
        if (n->nin) {
            fprintf(f, "(");
            for (int k = 0; k < n->nin; k++)
                fprintf(f, "%s%%%d", k ? ", " : "", n->in[k]);
            fprintf(f, ")");
        }
        if (n->ignore_on && (n->op == OP_CE_LOSS || n->op == OP_CE_GRAD || n->op == OP_CORRECT || n->op == OP_COUNTED))
            fprintf(f, " ignore_index=%lld", (long long)n->ignore);
        if (op_kind[n->op] == K_ROW && n->op != OP_CORRECT && n->op != OP_COUNTED && n->op != OP_REG_STATS
            && n->op != OP_ML_STATS) {
            fprintf(f, " reduction=%s%s", red_text[n->red],
                    n->smooth ? util_fmt(" label_smoothing=%g", n->smooth) : "");
            if (n->op == OP_SMOOTH_L1_LOSS || n->op == OP_SMOOTH_L1_GRAD || n->op == OP_HUBER_LOSS
                || n->op == OP_HUBER_GRAD)
                fprintf(f, " %s=%g", n->op == OP_HUBER_LOSS || n->op == OP_HUBER_GRAD ? "delta" : "beta", n->delta);
            for (int k = 0; k < n->nw; k++)
                fprintf(f, "%s%g%s", k ? ", " : n->op == OP_CE_LOSS || n->op == OP_CE_GRAD ? " weight=[" : " pos_weight=[",
                        n->w[k], k == n->nw - 1 ? "]" : "");
        }
        if (op_kind[n->op] == K_CONV || op_kind[n->op] == K_POOL) {
            const Window *w = &n->win;
            fprintf(f, " k=%dx%d s=%dx%d p=%dx%d", w->kh, w->kw, w->sh, w->sw, w->ph, w->pw);
            if (op_kind[n->op] == K_CONV)
                fprintf(f, " d=%dx%d g=%d", w->dh, w->dw, w->groups);
        }
        if (n->op == OP_BN_STATS || n->op == OP_BN_APPLY || n->op == OP_BN_DX || n->op == OP_BN_DPART
            || n->op == OP_LAYER_NORM || n->op == OP_LAYER_NORM_DX)
            fprintf(f, " eps=%g", n->bn.eps);
        if (n->op == OP_BN_RUNNING)
            fprintf(f, " momentum=%g", n->bn.momentum);
        /* the ops whose M counts all ranks' elements under SyncBatchNorm */
        if ((n->op == OP_BN_SQDEV || n->op == OP_BN_STATS || n->op == OP_BN_DX || n->op == OP_BN_RUNNING) && n->bn.sync)
            fprintf(f, " sync");
        if (n->op == OP_DROPOUT || n->op == OP_DROPOUT_GRAD)
            fprintf(f, " p=%g key=%d", n->drop.p, n->drop.key);
        if (n->op == OP_SLICE)
            fprintf(f, " off=%lld", (long long)n->slice.off);
        if (n->keep_f32)
            fprintf(f, " keep_f32");
        if (n->op == OP_PARAM && n->buffer)
            fprintf(f, " buffer%s", n->i64 ? " i64" : "");
        fprintf(f, " : %s%s %s", ir_dtype_text(n->dt), ir_shape_str(&n->shape), phase_text[n->phase]);
        if (n->grad_of >= 0)
            fprintf(f, " grad(%%%d)", n->grad_of);
        fprintf(f, "\n");
    }
}

/* ---- verifier ---------------------------------------------------------
 * One typing rule per op. A failure here is always a compiler bug: sema
 * reports user errors before any node is built. */

static int check(const Graph *g, const Node *n, const char *after, int ok, const char *what)
{
    if (ok)
        return 0;
    fprintf(stderr, "cddpc: internal error: IR invalid after %s: %%%d = %s: %s\n", after, n->id,
            (unsigned)n->op < OP_COUNT ? op_text[n->op] : "?", what);
    (void)g;
    return 1;
}

static const Shape *in_shape(const Graph *g, const Node *n, int k) { return &g->n[n->in[k]]->shape; }

static int verify_matmul(const Graph *g, const Node *n, const char *after)
{
    const Shape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1), *y = &n->shape;
    if (check(g, n, after, a->rank == 2 && b->rank == 2 && y->rank == 2, "matmul operands must be 2-D"))
        return 1;
    int64_t m, k1, k2, nn;
    switch (n->op) {
    case OP_MM_NT: m = a->d[0]; k1 = a->d[1]; nn = b->d[0]; k2 = b->d[1]; break;
    case OP_MM_NN: m = a->d[0]; k1 = a->d[1]; k2 = b->d[0]; nn = b->d[1]; break;
    default:       k1 = a->d[0]; m = a->d[1]; k2 = b->d[0]; nn = b->d[1]; break;
    }
    return check(g, n, after, k1 == k2 && y->d[0] == m && y->d[1] == nn, "matmul shapes disagree");
}

static int is_nchw(const Shape *s) { return s->rank == 4 && ir_batched(s); }

/* x[N,C,H,W] -> y[N,O,OH,OW] through window w with weight [O, C/g, kh, kw]. */
static int conv_shapes_agree(const Shape *x, const Shape *wt, const Shape *y, const Window *w)
{
    return is_nchw(x) && is_nchw(y) && wt->rank == 4 && w->groups >= 1 && x->d[1] % w->groups == 0
        && wt->d[0] == y->d[1] && wt->d[0] % w->groups == 0 && wt->d[1] * w->groups == x->d[1]
        && wt->d[2] == w->kh && wt->d[3] == w->kw
        && y->d[2] == ir_window_out(x->d[2], w->kh, w->sh, w->ph, w->dh)
        && y->d[3] == ir_window_out(x->d[3], w->kw, w->sw, w->pw, w->dw);
}

static int pool_shapes_agree(const Shape *x, const Shape *y, const Window *w)
{
    return is_nchw(x) && is_nchw(y) && x->d[1] == y->d[1]
        && y->d[2] == ir_window_out(x->d[2], w->kh, w->sh, w->ph, 1)
        && y->d[3] == ir_window_out(x->d[3], w->kw, w->sw, w->pw, 1);
}

/* A vector over the columns of x[M, N]: [N], or an unbatched shape of N
 * elements (LayerNorm's [C, H, W] weight over a sample's row) */
static int col_vec(const Shape *v, const Shape *x)
{
    return v->rank >= 1 && !ir_batched(v) && ir_numel(v, 1) == x->d[1];
}

/* [C] per-channel vector of an NCHW value */
static int chan_vec(const Shape *v, const Shape *x) { return v->rank == 1 && is_nchw(x) && v->d[0] == x->d[1]; }
static int bn_stats_of(const Shape *st, const Shape *x)
{
    return st->rank == 2 && st->d[0] == 2 && is_nchw(x) && st->d[1] == x->d[1];
}

static int verify_nchw(const Graph *g, const Node *n, const char *after)
{
    const Shape *s = &n->shape, *a = in_shape(g, n, 0), *b = n->nin > 1 ? in_shape(g, n, 1) : NULL;
    switch (n->op) {
    case OP_CONV2D:
        return check(g, n, after, conv_shapes_agree(a, b, s, &n->win), "conv2d: x[N,C,H,W], w[O,C/g,kh,kw]");
    case OP_CONV2D_DX:
        return check(g, n, after, conv_shapes_agree(s, b, a, &n->win), "conv2d_dx: dy and w give dx's shape");
    case OP_CONV2D_DW:
        return check(g, n, after, conv_shapes_agree(b, s, a, &n->win), "conv2d_dw: dy and x give dw's shape");
    case OP_SUM_CHAN: case OP_MEAN_CHAN:
        return check(g, n, after, chan_vec(s, a), n->op == OP_SUM_CHAN ? "sum_chan: [N,C,H,W] -> [C]"
                                                                        : "mean_chan: [N,C,H,W] -> [C]");
    case OP_BN_APPLY:
        return check(g, n, after, ir_same_shape(a, s) && bn_stats_of(b, a) && chan_vec(in_shape(g, n, 2), a)
                     && chan_vec(in_shape(g, n, 3), a), "bn_apply: x, stats[2,C], w[C], b[C]");
    case OP_BN_DW:
        return check(g, n, after, ir_same_shape(a, b) && bn_stats_of(in_shape(g, n, 2), a) && chan_vec(s, a),
                     "bn_dw: dy, x, stats -> [C]");
    case OP_BN_SQDEV:
        return check(g, n, after, chan_vec(b, a) && chan_vec(s, a), "bn_sqdev: x, mean[C] -> [C]");
    case OP_BN_STATS:
        return check(g, n, after, bn_stats_of(s, a) && chan_vec(b, a) && chan_vec(in_shape(g, n, 2), a)
                     && chan_vec(in_shape(g, n, 3), a) && chan_vec(in_shape(g, n, 4), a),
                     "bn_stats: x, running [C], means [C] -> [2,C]");
    case OP_BN_DPART:
        return check(g, n, after, ir_same_shape(a, b) && bn_stats_of(in_shape(g, n, 2), a) && bn_stats_of(s, a),
                     "bn_dpart: dy, x, stats -> [2,C]");
    case OP_BN_DX:
        return check(g, n, after, ir_same_shape(a, s) && ir_same_shape(b, s) && bn_stats_of(in_shape(g, n, 2), s)
                     && chan_vec(in_shape(g, n, 3), s) && bn_stats_of(in_shape(g, n, 4), s),
                     "bn_dx: dy, x, stats, w, means[2,C]");
    case OP_BN_RUNNING: {
        const Shape *st = in_shape(g, n, 3);
        int ok = st->rank == 2 && st->d[0] == 2 && a->rank == 1 && a->d[0] == st->d[1] && ir_same_shape(a, b)
              && in_shape(g, n, 2)->rank == 0 && ir_same_shape(a, s);
        for (int k = 0; k < 3; k++)
            ok = ok && g->n[n->in[k]]->op == OP_PARAM && g->n[n->in[k]]->buffer;
        return check(g, n, after, ok, "bn_running updates three buffers from stats[2,C]");
    }
    case OP_MAXPOOL: case OP_AVGPOOL:
        return check(g, n, after, pool_shapes_agree(a, s, &n->win), "pool: window and shapes disagree");
    case OP_MAXPOOL_DX:
        return check(g, n, after, ir_same_shape(b, s) && pool_shapes_agree(s, a, &n->win), "maxpool_dx: dy, x");
    case OP_AVGPOOL_DX:
        return check(g, n, after, pool_shapes_agree(s, a, &n->win), "avgpool_dx: dy -> dx");
    default:
        return check(g, n, after, 0, "not an NCHW op");
    }
}

static int verify_node(const Graph *g, const Node *n, const char *after)
{
    int bad = 0;
    for (int k = 0; k < n->nin; k++)
        bad += check(g, n, after, n->in[k] >= 0 && n->in[k] < n->id, "input not defined before use");
    if (bad)
        return bad;
    const Shape *s = &n->shape;
    /* the kinds that index rows of samples (every kind but the tensor
     * ops') need the batch first; K_TENSOR indexes any layout */
    if (op_kind[n->op] != K_TENSOR && n->op != OP_RESHAPE && ten_batch_dim(s) > 0)
        return check(g, n, after, 0, "the batch is not the first dimension (only the tensor ops index that)");
    if (op_kind[n->op] == K_TENSOR) {
        const char *why = ten_verify(g, n);
        if (!why)
            why = ten_dtype_check(g, n);
        return check(g, n, after, why == NULL, why ? why : "");
    }
    switch (n->op) {
    case OP_IMAGES:
        return check(g, n, after, ir_batched(s) && (n->dt == DT_F32 || n->dt == DT_I64),
                     "images must be f32[N, ...] (samples) or i64[N, ...] (tokens)");
    case OP_LABELS:
        /* a loss block's class targets at positions are [N, T] */
        return check(g, n, after, ir_batched(s) && ((s->rank <= 2 && n->dt == DT_I32) || (s->rank == 2 && n->dt == DT_F32)),
                     "labels must be i32[N] or i32[N, T] (classes) or f32[N, K] (float targets)");
    case OP_PARAM:
        return check(g, n, after, !ir_batched(s) && n->name && n->param >= 0, "param must be named and unbatched");
    case OP_RESHAPE: {
        const Shape *x = in_shape(g, n, 0);
        return check(g, n, after, ten_view_ok(x, s), "reshape changes the element count or the batch's place");
    }
    case OP_MM_NT: case OP_MM_NN: case OP_MM_TN:
        return verify_matmul(g, n, after);
    case OP_BIAS_ADD: {
        const Shape *x = in_shape(g, n, 0), *b = in_shape(g, n, 1);
        return check(g, n, after, ((x->rank == 2 && col_vec(b, x)) || (is_nchw(x) && b->rank == 1 && b->d[0] == x->d[1]))
                     && ir_same_shape(x, s), "bias_add needs x[M, N] and b[N], or x[N, C, H, W] and b[C]");
    }
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_RELU_GRAD: case OP_TANH_GRAD: case OP_SIGMOID_GRAD: case OP_SILU_GRAD: case OP_GELU_GRAD:
    case OP_GELU_TANH_GRAD: case OP_LEAKY_RELU_GRAD: case OP_ELU_GRAD: case OP_SOFTPLUS_GRAD: case OP_HARDTANH_GRAD:
        return check(g, n, after, ir_same_shape(in_shape(g, n, 0), s) && ir_same_shape(in_shape(g, n, 1), s),
                     "operands and result must have one shape");
    case OP_AFFINE: case OP_DIV_SCALAR:
    case OP_RELU: case OP_TANH: case OP_SIGMOID: case OP_SILU: case OP_GELU: case OP_GELU_TANH: case OP_LEAKY_RELU:
    case OP_ELU: case OP_SOFTPLUS: case OP_HARDTANH:
        return check(g, n, after, ir_same_shape(in_shape(g, n, 0), s), "an activation keeps its shape");
    case OP_DROPOUT: case OP_DROPOUT_GRAD:
        /* batched: the mask is indexed by the element's place in the batch tensor */
        return check(g, n, after, ir_same_shape(in_shape(g, n, 0), s) && ir_batched(s) && n->dt == DT_F32
                     && n->drop.p > 0 && n->drop.p < 1 && n->drop.key >= 0,
                     "dropout keeps its batched f32 shape, 0 < p < 1");
    case OP_SUM_ROWS: {
        const Shape *x = in_shape(g, n, 0);
        return check(g, n, after, x->rank == 2 && col_vec(s, x), "sum_rows: [M, N] -> [N]");
    }
    case OP_CE_LOSS: case OP_CE_GRAD: case OP_CORRECT: case OP_COUNTED: {
        /* rows of logits (a sample's, or each position's: [N*T, C]), a label a row */
        const Shape *x = in_shape(g, n, 0), *l = in_shape(g, n, 1);
        bad = check(g, n, after, x->rank == 2 && ten_batch_dim(x) == 0 && l->rank == 1 && l->d[0] == x->d[0]
                    && g->n[n->in[1]]->dt == DT_I32, "needs logits f32[N, C] and labels i32[N] (rows alike)");
        if (!bad && n->op == OP_CE_GRAD)
            bad = check(g, n, after, ir_same_shape(x, s), "ce_grad has the logits' shape");
        else if (!bad)
            bad = check(g, n, after, s->rank == 1 && s->d[0] == x->d[0], "a row's result must be [N]");
        if (!bad)
            bad = check(g, n, after, (!n->ignore_on || n->counts) && (n->counts || x->d[0] == DIM_N),
                        "rows per position or an ignored target count the targets");
        return bad;
    }
    case OP_MSE_LOSS: case OP_L1_LOSS: case OP_SMOOTH_L1_LOSS: case OP_HUBER_LOSS: case OP_BCE_LOSS:
    case OP_MSE_GRAD: case OP_L1_GRAD: case OP_SMOOTH_L1_GRAD: case OP_HUBER_GRAD: case OP_BCE_GRAD: {
        const Shape *x = in_shape(g, n, 0), *t = in_shape(g, n, 1);
        int grad = n->op == OP_MSE_GRAD || n->op == OP_L1_GRAD || n->op == OP_SMOOTH_L1_GRAD || n->op == OP_HUBER_GRAD
                   || n->op == OP_BCE_GRAD;
        bad = check(g, n, after, x->rank == 2 && ir_batched(x) && ir_same_shape(x, t) && g->n[n->in[1]]->dt == DT_F32,
                    "needs outputs f32[N, K] and targets f32[N, K]");
        if (!bad)
            bad = check(g, n, after, grad ? ir_same_shape(x, s) : s->rank == 1 && ir_batched(s),
                        grad ? "a loss gradient has the outputs' shape" : "per-sample result must be [N]");
        if (!bad)
            bad = check(g, n, after, n->nw == 0 || n->nw == x->d[1], "pos_weight needs one value per output");
        return bad;
    }
    case OP_REG_STATS: case OP_ML_STATS: {
        const Shape *x = in_shape(g, n, 0), *t = in_shape(g, n, 1);
        bad = check(g, n, after, x->rank == 2 && ir_batched(x) && ir_same_shape(x, t) && g->n[n->in[1]]->dt == DT_F32,
                    "needs outputs f32[N, K] and targets f32[N, K]");
        if (!bad)
            bad = check(g, n, after, n->op == OP_REG_STATS ? s->rank == 1 && s->d[0] == 2
                                                           : s->rank == 2 && s->d[0] == 3 && s->d[1] == x->d[1],
                        "reg_stats gives [2], multilabel_stats [3, K]");
        return bad;
    }
    case OP_SUM_ALL:
        return check(g, n, after, s->rank == 0, "sum_all gives a scalar");
    case OP_SGD: case OP_SGD_MOMENTUM: case OP_ADAM: case OP_ADAMW: case OP_RMSPROP: case OP_ADAGRAD:
        return check(g, n, after, g->n[n->in[0]]->op == OP_PARAM && ir_same_shape(in_shape(g, n, 0), in_shape(g, n, 1))
                     && ir_same_shape(in_shape(g, n, 0), s), "sgd updates a param with a gradient of its shape");
    case OP_CONV2D: case OP_CONV2D_DX: case OP_CONV2D_DW: case OP_SUM_CHAN: case OP_BN_STATS: case OP_BN_APPLY:
    case OP_BN_DX: case OP_BN_DW: case OP_BN_RUNNING: case OP_MAXPOOL: case OP_MAXPOOL_DX: case OP_AVGPOOL:
    case OP_AVGPOOL_DX: case OP_MEAN_CHAN: case OP_BN_SQDEV: case OP_BN_DPART:
        return verify_nchw(g, n, after);
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_LAYER_NORM:
        return check(g, n, after, s->rank == 2 && ir_batched(s) && ir_same_shape(in_shape(g, n, 0), s),
                     "a row normalization keeps its [N, F] shape");
    case OP_SOFTMAX_GRAD: case OP_LOG_SOFTMAX_GRAD: case OP_LAYER_NORM_DX:
        return check(g, n, after, s->rank == 2 && ir_batched(s) && ir_same_shape(in_shape(g, n, 0), s)
                     && ir_same_shape(in_shape(g, n, 1), s), "a row normalization's gradient: dy and y (or x) [N, F]");
    case OP_CAT: {
        const Shape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1);
        int ok = ir_batched(s) && ir_batched(a) && ir_batched(b) && a->rank == s->rank && b->rank == s->rank
                 && s->rank >= 2 && s->d[1] == a->d[1] + b->d[1];
        for (int k = 2; ok && k < s->rank; k++)
            ok = a->d[k] == s->d[k] && b->d[k] == s->d[k];
        return check(g, n, after, ok, "cat: a[N, A, ...], b[N, B, ...] -> [N, A + B, ...]");
    }
    case OP_SLICE: {
        const Shape *a = in_shape(g, n, 0);
        return check(g, n, after, ir_batched(s) && ir_batched(a) && n->slice.off >= 0
                     && n->slice.off + ir_row_elems(s) <= ir_row_elems(a), "slice: columns within the row");
    }
    case OP_MUL_COLS: {
        const Shape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1);
        return check(g, n, after, x->rank == 2 && col_vec(w, x) && ir_same_shape(x, s),
                     "mul_cols needs x[M, N] and w[N]");
    }
    case OP_ALLREDUCE:
        return check(g, n, after, !ir_batched(s) && ir_same_shape(in_shape(g, n, 0), s),
                     "allreduce keeps the shape of an unbatched value");
    case OP_COUNT:
        break;
    default:    /* the tensor ops: checked above */
        break;
    }
    return check(g, n, after, 0, "unknown op");
}

int ir_verify(const Graph *g, const char *after)
{
    int bad = 0;
    for (int i = 0; i < g->nn; i++)
        bad += verify_node(g, g->n[i], after);
    return bad;
}

/* Floats of optimizer state per parameter float. */
int ir_opt_slots(const Graph *g)
{
    switch (g->opt_op) {
    case OP_ADAM: case OP_ADAMW: return 2 + !!g->opt.amsgrad;
    case OP_SGD_MOMENTUM: return 1;
    case OP_RMSPROP: return 1 + (g->opt.momentum > 0) + !!g->opt.centered;
    case OP_ADAGRAD: return 1;
    default: return 0;
    }
}

/* decay = "dim>=2" (Graph.decay_dim 2): nanoGPT's two parameter groups
 * (weight decay on the weights of Linear, Embedding, Conv; none on biases,
 * norms' weights and other vectors); decay = "all" (0): every parameter. */
int ir_param_decays(const Graph *g, int id)
{
    return g->opt.weight_decay != 0.0 && g->n[id]->shape.rank >= g->decay_dim;
}
