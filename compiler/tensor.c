/* tensor.c: the shape rules of the ops over tensors of any rank (K_TENSOR,
 * ops.def), shared by the front end (which checks a model's shapes with
 * them before it builds a node), autodiff (which builds the gradients
 * with them) and the verifier (which checks every node against them).
 *
 * The batch is the dimension DIM_N, wherever it is: a permutation may move
 * it, and these ops index every layout through strides. Broadcasting is
 * PyTorch's: shapes aligned at their last dimension, a 1 (or a missing
 * leading dimension) stretches to the other's extent; the batch only
 * meets the batch or a 1. */
#include <string.h>

#include "cddpc.h"

int ten_batch_dim(const Shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (IR_IS_BATCH(s->d[i]))
            return i;
    return -1;
}

int ten_same(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i])
            return 0;
    return 1;
}

/* the product of dims [from, to) a sample holds: the batch's left out,
 * the elements merged with it counted */
static int64_t elems(const Shape *s, int from, int to)
{
    int64_t e = 1;
    for (int i = from; i < to; i++)
        e *= IR_IS_BATCH(s->d[i]) ? ir_batch_mul(s->d[i]) : s->d[i];
    return e;
}

int ten_broadcast(const Shape *a, const Shape *b, Shape *out)
{
    const int r = a->rank > b->rank ? a->rank : b->rank;
    Shape s = {r, {0}};
    for (int i = 0; i < r; i++) {
        const int ia = i - (r - a->rank), ib = i - (r - b->rank);
        const int64_t x = ia >= 0 ? a->d[ia] : 1, y = ib >= 0 ? b->d[ib] : 1;
        if (x == y || y == 1)
            s.d[i] = x;
        else if (x == 1)
            s.d[i] = y;
        else
            return 0;
    }
    if (out)
        *out = s;
    return 1;
}

Shape ten_reduced(const Shape *x, unsigned axes)
{
    Shape s = *x;
    for (int i = 0; i < s.rank; i++)
        if (axes & (1u << i))
            s.d[i] = 1;
    return s;
}

Shape ten_dropped(const Shape *x, unsigned axes)
{
    Shape s = {0, {0}};
    for (int i = 0; i < x->rank; i++)
        if (!(axes & (1u << i)))
            s.d[s.rank++] = x->d[i];
    return s;
}

int64_t ten_slice_len(int64_t start, int64_t stop, int64_t step)
{
    return stop <= start ? 0 : (stop - start + step - 1) / step;
}

/* The axes of `to` a gradient sums over to give `from`'s, which
 * broadcasts (aligned at the last dimension) to `to`: those `from` lacks,
 * and those it holds as a 1 where `to` does not. */
unsigned ten_stretched(const Shape *from, const Shape *to)
{
    unsigned axes = 0;
    for (int i = 0; i < to->rank; i++) {
        const int j = i - (to->rank - from->rank);
        if (j < 0 || (from->d[j] == 1 && to->d[i] != 1))
            axes |= 1u << i;
    }
    return axes;
}

/* A reshape is a view of the same layout when it keeps the batch's place
 * among the elements: as many elements before it and after it. */
int ten_view_ok(const Shape *from, const Shape *to)
{
    const int bf = ten_batch_dim(from), bt = ten_batch_dim(to);
    if ((bf < 0) != (bt < 0))
        return 0;
    return elems(from, 0, bf < 0 ? 0 : bf) == elems(to, 0, bt < 0 ? 0 : bt)
        && elems(from, 0, from->rank) == elems(to, 0, to->rank);
}

int ten_is_reduction(Op op)
{
    return op == OP_T_SUM || op == OP_T_MEAN || op == OP_T_AMAX || op == OP_T_AMIN || op == OP_T_COUNT_EQ
        || op == OP_T_ARGMAX || op == OP_T_ARGMIN;
}

/* op(a) . op(b) over the leading dimensions broadcast: NULL and the
 * result's shape, or why not. Neither matrix holds the batch: it is a
 * leading dimension (a sample's product), or the product is a Linear. */
const char *ten_bmm_shape(const Shape *a, const Shape *b, int ta, int tb, Shape *out)
{
    if (a->rank < 2 || b->rank < 2)
        return "both operands need 2 dimensions or more (unsqueeze a vector)";
    const int64_t m = a->d[a->rank - (ta ? 1 : 2)], ka = a->d[a->rank - (ta ? 2 : 1)];
    const int64_t kb = b->d[b->rank - (tb ? 1 : 2)], nn = b->d[b->rank - (tb ? 2 : 1)];
    if (IR_IS_BATCH(m) || IR_IS_BATCH(ka) || IR_IS_BATCH(kb) || IR_IS_BATCH(nn))
        return "the batch is one of the matrices' dimensions (a product with a weight is nn.Linear's)";
    if (ka != kb)
        return "the inner dimensions differ";
    Shape la = {a->rank - 2, {0}}, lb = {b->rank - 2, {0}}, l;
    memcpy(la.d, a->d, sizeof(int64_t) * (size_t)la.rank);
    memcpy(lb.d, b->d, sizeof(int64_t) * (size_t)lb.rank);
    if (!ten_broadcast(&la, &lb, &l))
        return "the leading (batch) dimensions do not broadcast";
    if (l.rank + 2 > MAX_RANK)
        return "more dimensions than supported";
    l.d[l.rank++] = m;
    l.d[l.rank++] = nn;
    if (out)
        *out = l;
    return NULL;
}

static const Shape *in_shape(const Graph *g, const Node *n, int k) { return &g->n[n->in[k]]->shape; }

/* gather's source (big) and result (small): one rank, the result no
 * longer than the source beside the gathered dimension, which is not the
 * batch's; the index broadcasts to the result */
static const char *gather_shapes(const Shape *big, const Shape *small, const Shape *idx, int a)
{
    Shape b;
    if (big->rank != small->rank || a < 0 || a >= big->rank || IR_IS_BATCH(big->d[a]) || IR_IS_BATCH(small->d[a]))
        return "gather along a dimension of one rank, not the batch's";
    for (int d = 0; d < big->rank; d++)
        if (d != a && (IR_IS_BATCH(small->d[d]) ? big->d[d] != small->d[d]
                                                : IR_IS_BATCH(big->d[d]) || small->d[d] > big->d[d]))
            return "gather's result is longer than its source beside the gathered dimension";
    return ten_broadcast(idx, small, &b) && ten_same(&b, small) ? NULL : "the index does not broadcast to the result";
}

/* an embedding's weight [V, D], its index and its result [index..., D] */
static const char *embed_shapes(const Shape *w, const Shape *idx, const Shape *y)
{
    if (w->rank != 2 || IR_IS_BATCH(w->d[0]) || IR_IS_BATCH(w->d[1]))
        return "an embedding's weight is a matrix [V, D]";
    if (idx->rank + 1 != y->rank || y->d[y->rank - 1] != w->d[1])
        return "an embedding's result is its index's shape and the weight's rows' D";
    for (int d = 0; d < idx->rank; d++)
        if (idx->d[d] != y->d[d])
            return "an embedding's result is its index's shape and the weight's rows' D";
    return NULL;
}

const char *ten_attn_shape(const Shape *q, const Shape *k, const Shape *v, const Shape *mask, Shape *out)
{
    const int r = q->rank;
    if (r < 2 || k->rank != r || v->rank != r)
        return "query, key and value have one rank, at least 2";
    for (int d = 0; d < r - 2; d++)
        if (q->d[d] != k->d[d] || q->d[d] != v->d[d])
            return "query, key and value differ in a leading dimension";
    for (int d = r - 2; d < r; d++)
        if (IR_IS_BATCH(q->d[d]) || IR_IS_BATCH(k->d[d]) || IR_IS_BATCH(v->d[d]))
            return "the positions and features cannot be the batch's dimension";
    if (k->d[r - 1] != q->d[r - 1])
        return "the key's features differ from the query's";
    if (v->d[r - 2] != k->d[r - 2])
        return "the value's positions differ from the key's";
    *out = *q;
    out->d[r - 1] = v->d[r - 1];
    if (mask) {
        Shape sc = *q, b;
        sc.d[r - 1] = k->d[r - 2];
        if (!ten_broadcast(mask, &sc, &b) || !ten_same(&b, &sc))
            return "the mask does not broadcast to the scores [.., L, S]";
    }
    return NULL;
}

/* an attention gradient's operands: dy, q, k, v, the attention, a mask */
static const char *attn_grad_shapes(const Graph *g, const Node *n)
{
    const Node *at = g->n[n->in[4]];
    if (at->op != OP_T_ATTN || at->in[0] != n->in[1] || at->in[1] != n->in[2] || at->in[2] != n->in[3])
        return "an attention's gradient reads that attention and its q, k, v";
    if (!ten_same(in_shape(g, n, 0), &at->shape))
        return "dy is not the attention's shape";
    const int which = n->op == OP_T_ATTN_DQ ? 1 : n->op == OP_T_ATTN_DK ? 2 : 3;
    return ten_same(&n->shape, in_shape(g, n, which)) ? NULL : "a gradient has its operand's shape";
}

int ten_rnn_gates(int cell) { return cell == RNN_LSTM ? 4 : cell == RNN_GRU ? 3 : 1; }

int ten_rnn_saved(int cell) { return cell == RNN_LSTM ? 5 : cell == RNN_GRU ? 4 : 0; }

static int is_dims(const Shape *s, int rank, int64_t a, int64_t b, int64_t c)
{
    return s->rank == rank && s->d[0] == a && s->d[1] == b && (rank < 3 || s->d[2] == c);
}

/* a recurrence's operands (ops.def): xw [N, T, G H], W_hh [G H, H], then
 * b_hh [G H], h0 [N, H], c0 [N, H] as Node.rnn says; its gradient's dy,
 * the recurrence, W_hh, h0, c0; the LSTM's cell state */
static const char *rnn_shapes(const Graph *g, const Node *n)
{
    const Node *r = n->op == OP_T_RNN ? n : g->n[n->in[n->op == OP_T_RNN_BWD ? 1 : 0]];
    if (r->op != OP_T_RNN)
        return "a recurrence's gradient or cell state reads a recurrence";
    const int G = ten_rnn_gates(r->rnn.cell);
    const int64_t T = r->shape.d[1], H = r->shape.d[2];
    if (!is_dims(&r->shape, 3, DIM_N, T, H) || r->rnn.cell < RNN_TANH || r->rnn.cell > RNN_LSTM
        || (r->rnn.c0 && r->rnn.cell != RNN_LSTM))
        return "a recurrence is [N, T, H] of a known cell (c0 the LSTM's)";
    if (n->op == OP_T_RNN_CN)
        return r->rnn.cell == RNN_LSTM && is_dims(&n->shape, 2, DIM_N, H, 0) ? NULL
               : "a cell state is an LSTM's [N, H]";
    const int opt = 2 + (n->op == OP_T_RNN && r->rnn.bias);     /* where h0 is */
    const int dcn = n->op == OP_T_RNN_BWD && n->rnn.dcn;
    if (n->nin != opt + r->rnn.h0 + r->rnn.c0 + (n->op == OP_T_RNN_BWD) + dcn)
        return "a recurrence's inputs are those Node.rnn names";
    if (n->op == OP_T_RNN_BWD) {
        if (!ten_same(in_shape(g, n, 0), &r->shape) || n->in[2] != r->in[1])
            return "a recurrence's gradient reads its dy and W_hh";
        if (dcn && (r->rnn.cell != RNN_LSTM || !is_dims(in_shape(g, n, n->nin - 1), 2, DIM_N, H, 0)))
            return "a recurrence's gradient reads the LSTM's last cell state's, [N, H]";
        for (int k = 0; k < r->rnn.h0 + r->rnn.c0; k++)
            if (n->in[3 + k] != r->in[2 + r->rnn.bias + k])
                return "a recurrence's gradient reads its initial state";
        return is_dims(&n->shape, 3, DIM_N, T, (r->rnn.cell == RNN_GRU ? 2 : 1) * G * H) ? NULL
               : "a recurrence's gradient is [N, T, G H] (the GRU's 2 G H)";
    }
    if (!is_dims(in_shape(g, n, 0), 3, DIM_N, T, G * H) || !is_dims(in_shape(g, n, 1), 2, G * H, H, 0)
        || (r->rnn.bias && !is_dims(in_shape(g, n, 2), 1, G * H, 0, 0)))
        return "a recurrence takes xw [N, T, G H], W_hh [G H, H], b_hh [G H]";
    for (int k = 0; k < r->rnn.h0 + r->rnn.c0; k++)
        if (!is_dims(in_shape(g, n, opt + k), 2, DIM_N, H, 0))
            return "a recurrence's initial state is [N, H]";
    return NULL;
}

const char *ten_verify(const Graph *g, const Node *n)
{
    const Shape *s = &n->shape;
    if (n->op == OP_T_FULL || n->op == OP_T_TABLE || n->op == OP_T_LOSS_SCALE || n->op == OP_T_RAND || n->op == OP_T_RANDN)
        return NULL;
    if (n->op == OP_T_ARANGE)
        return s->rank == 1 && !IR_IS_BATCH(s->d[0]) ? NULL : "arange is one dimension";
    const Shape *x = in_shape(g, n, 0);
    switch (n->op) {
    case OP_BC_ADD: case OP_BC_SUB: case OP_BC_MUL: case OP_BC_DIV: case OP_BC_DIV_GRAD: case OP_BC_MAX_GRAD:
    case OP_T_MAXIMUM: case OP_T_MINIMUM: case OP_T_MAXIMUM_GRAD: case OP_T_MINIMUM_GRAD:
    case OP_T_GT: case OP_T_GE: case OP_T_LT: case OP_T_LE: case OP_T_EQ: case OP_T_NE: case OP_T_AND: case OP_T_OR:
    case OP_T_WHERE: case OP_T_FILL_IF: case OP_T_KEEP_IF:
    case OP_T_SQRT_GRAD: case OP_T_RSQRT_GRAD: case OP_T_ABS_GRAD: case OP_T_POW_GRAD: case OP_T_CLAMP_GRAD:
    case OP_T_BCE: case OP_T_BCE_GRAD: case OP_T_BCE_LOGITS: case OP_T_BCE_LOGITS_GRAD: case OP_T_IF_TRAINING:
        for (int k = 0; k < n->nin; k++) {
            Shape b;
            if (!ten_broadcast(in_shape(g, n, k), s, &b) || !ten_same(&b, s))
                return "an operand does not broadcast to the result";
        }
        return NULL;
    case OP_T_EXP: case OP_T_LOG: case OP_T_SQRT: case OP_T_RSQRT: case OP_T_ABS: case OP_T_POW: case OP_T_CLAMP:
    case OP_T_AFFINE: case OP_T_GTC: case OP_T_GEC: case OP_T_LTC: case OP_T_LEC: case OP_T_EQC: case OP_T_NEC:
    case OP_T_TO_I64: case OP_T_TO_BOOL: case OP_T_TO_F32: case OP_T_FLOORDIV_C: case OP_T_MOD_C:
        return ten_same(x, s) ? NULL : "an elementwise function keeps its operand's shape";
    case OP_T_TRIL: case OP_T_TRIU:
        return ten_same(x, s) && s->rank >= 2 && !IR_IS_BATCH(s->d[s->rank - 1]) && !IR_IS_BATCH(s->d[s->rank - 2])
                   ? NULL : "tril and triu keep a shape whose last two dimensions are a matrix";
    case OP_T_GATHER:
        return gather_shapes(x, s, in_shape(g, n, 1), n->ten.axis);
    case OP_T_GATHER_GRAD:
        return gather_shapes(s, x, in_shape(g, n, 1), n->ten.axis);
    case OP_T_EMBED:        /* weight [V, D], index [...] -> [..., D] */
        return embed_shapes(x, in_shape(g, n, 1), s);
    case OP_T_EMBED_GRAD:   /* dy [..., D], index -> [V, D] */
        return embed_shapes(s, in_shape(g, n, 1), x);
    case OP_T_ATTN: {
        Shape r;
        if (n->nin != (n->attn.mask ? 4 : 3))
            return "an attention has a mask input exactly when attn.mask says";
        const char *why = ten_attn_shape(x, in_shape(g, n, 1), in_shape(g, n, 2),
                                         n->attn.mask ? in_shape(g, n, 3) : NULL, &r);
        return why ? why : ten_same(&r, s) ? NULL : "not the attention's shape";
    }
    case OP_T_ATTN_DQ: case OP_T_ATTN_DK: case OP_T_ATTN_DV:
        return n->nin != (n->attn.mask ? 6 : 5) ? "an attention gradient has a mask input exactly when attn.mask says"
                                                 : attn_grad_shapes(g, n);
    case OP_T_RNN: case OP_T_RNN_BWD: case OP_T_RNN_CN:
        return rnn_shapes(g, n);
    case OP_T_RNN_DSTATE: {
        const Node *b = g->n[n->in[0]];
        if (b->op != OP_T_RNN_BWD || !b->rnn.dstate || (n->rnn.dstate && b->rnn.cell != RNN_LSTM))
            return "an initial state's gradient reads a recurrence's gradient that keeps it (c0's: an LSTM's)";
        const Node *r = g->n[b->in[1]];
        return is_dims(&n->shape, 2, DIM_N, r->shape.d[2], 0) ? NULL : "an initial state's gradient is [N, H]";
    }
    case OP_T_BMM: {
        Shape r;
        const char *why = ten_bmm_shape(x, in_shape(g, n, 1), n->ten.ta, n->ten.tb, &r);
        return why ? why : ten_same(&r, s) ? NULL : "not the product's shape";
    }
    case OP_BC_COPY: case OP_BC_SCALE: {
        Shape b;
        return ten_broadcast(x, s, &b) && ten_same(&b, s) ? NULL : "the operand does not broadcast to the result";
    }
    case OP_T_SUM: case OP_T_MEAN: case OP_T_AMAX: case OP_T_AMIN: case OP_T_COUNT_EQ: case OP_T_ARGMAX:
    case OP_T_ARGMIN: {
        if (!n->ten.axes || n->ten.axes >> x->rank)
            return "no reduced dimension, or one past the rank";
        if ((n->op == OP_T_ARGMAX || n->op == OP_T_ARGMIN) && (n->ten.axes & (n->ten.axes - 1)))
            return "argmax and argmin reduce one dimension";
        const Shape r = ten_reduced(x, n->ten.axes);
        if (!ten_same(&r, s))
            return "a reduction keeps the reduced dimensions as 1s";
        if (n->op == OP_T_COUNT_EQ && !ten_same(in_shape(g, n, 1), s))
            return "count_eq compares with the reduction's result";
        return NULL;
    }
    case OP_T_PERMUTE: {
        unsigned seen = 0;
        if (s->rank != x->rank)
            return "a permutation keeps the rank";
        for (int d = 0; d < s->rank; d++) {
            const int p = n->ten.perm[d];
            if (p < 0 || p >= x->rank || (seen & (1u << p)) || s->d[d] != x->d[p])
                return "not a permutation of the input's dimensions";
            seen |= 1u << p;
        }
        return NULL;
    }
    case OP_T_SLICE: case OP_T_PAD: {
        const Shape *big = n->op == OP_T_SLICE ? x : s, *small = n->op == OP_T_SLICE ? s : x;
        const int a = n->ten.axis;
        if (big->rank != small->rank || a < 0 || a >= big->rank || IR_IS_BATCH(big->d[a]) || n->ten.step < 1
            || n->ten.start < 0)
            return "a slice along a dimension of the same rank, not the batch's";
        for (int d = 0; d < big->rank; d++)
            if (d != a && big->d[d] != small->d[d])
                return "a slice changes only its own dimension";
        if (small->d[a] < 1 || n->ten.start + (small->d[a] - 1) * n->ten.step >= big->d[a])
            return "the slice runs past its dimension";
        return NULL;
    }
    case OP_T_CAT: {
        const Shape *b = in_shape(g, n, 1);
        const int a = n->ten.axis;
        if (x->rank != s->rank || b->rank != s->rank || a < 0 || a >= s->rank || IR_IS_BATCH(s->d[a])
            || s->d[a] != x->d[a] + b->d[a])
            return "cat joins two tensors of one rank along a dimension not the batch's";
        for (int d = 0; d < s->rank; d++)
            if (d != a && (x->d[d] != s->d[d] || b->d[d] != s->d[d]))
                return "cat's operands differ beside its dimension";
        return NULL;
    }
    default:
        return "not a tensor op";
    }
}

/* Which operand of op is a mask (where's, the fills') or an index (a
 * gather's): no value of the result's, so no part of its promotion; -1 none */
static int mask_operand(Op op)
{
    return op == OP_T_WHERE ? 0 : op == OP_T_FILL_IF || op == OP_T_KEEP_IF || op == OP_T_GATHER
           || op == OP_T_GATHER_GRAD || op == OP_T_EMBED || op == OP_T_EMBED_GRAD ? 1 : -1;
}

/* The dtype of op's result from its operands', PyTorch's promotion:
 * comparisons and logic give a bool, argmax and .long() an i64, division,
 * means and the float functions a float; the rest the widest of their
 * value operands (where's and the fills' mask, a gather's index aside):
 * bool < i64 < f32. The ops with constants of their own (full, arange,
 * affine, clamp) take `given`, the front end's reading of the constants
 * (arange(5) is an i64, x * 0.5 a float). For the tensor ops and reshape. */
DType ten_dtype(const Graph *g, Op op, int nin, const int *in, DType given)
{
    switch (op) {
    case OP_RESHAPE:    /* a view keeps its values (the class targets' i32 too) */
        return g->n[in[0]]->dt;
    case OP_T_GT: case OP_T_GE: case OP_T_LT: case OP_T_LE: case OP_T_EQ: case OP_T_NE: case OP_T_GTC: case OP_T_GEC:
    case OP_T_LTC: case OP_T_LEC: case OP_T_EQC: case OP_T_NEC: case OP_T_AND: case OP_T_OR: case OP_T_TO_BOOL:
        return DT_BOOL;
    case OP_T_ARGMAX: case OP_T_ARGMIN: case OP_T_TO_I64: case OP_T_FLOORDIV_C: case OP_T_MOD_C:
        return DT_I64;
    case OP_T_FULL: case OP_T_TABLE: case OP_T_ARANGE: case OP_T_AFFINE: case OP_T_CLAMP:
        return given;
    case OP_T_RAND: case OP_T_RANDN: case OP_T_IF_TRAINING: case OP_T_LOSS_SCALE:
    case OP_T_TO_F32: case OP_BC_DIV: case OP_BC_SCALE: case OP_T_MEAN: case OP_T_EXP: case OP_T_LOG: case OP_T_SQRT:
    case OP_T_RSQRT: case OP_T_POW: case OP_T_BMM: case OP_T_BCE: case OP_T_BCE_GRAD: case OP_T_BCE_LOGITS:
    case OP_T_BCE_LOGITS_GRAD: case OP_T_ATTN: case OP_T_ATTN_DQ: case OP_T_ATTN_DK:
    case OP_T_ATTN_DV: case OP_T_RNN: case OP_T_RNN_BWD: case OP_T_RNN_CN: case OP_T_RNN_DSTATE:
        return DT_F32;
    default:
        break;
    }
    const int skip = mask_operand(op);
    DType t = DT_BOOL;
    for (int k = 0; k < nin; k++) {
        const DType d = k == skip ? DT_BOOL : g->n[in[k]]->dt;
        if (d == DT_F32)
            return DT_F32;
        if (d == DT_I64 || d == DT_I32)     /* i32: the class targets, integers as PyTorch's int64 */
            t = DT_I64;
    }
    return t == DT_BOOL && op == OP_T_SUM ? DT_I64 : t;     /* a sum of booleans counts */
}

/* NULL, or what is wrong with n's dtype: ten_dtype's, and a mask a bool,
 * an index an i64 */
const char *ten_dtype_check(const Graph *g, const Node *n)
{
    if (n->dt != ten_dtype(g, n->op, n->nin, n->in, n->dt))
        return "its dtype is not its operands' promotion (ten_dtype)";
    const int mask = mask_operand(n->op);
    const int index = n->op == OP_T_GATHER || n->op == OP_T_GATHER_GRAD || n->op == OP_T_EMBED
                      || n->op == OP_T_EMBED_GRAD;
    if (mask >= 0 && g->n[n->in[mask]]->dt != (index ? DT_I64 : DT_BOOL))
        return "a mask is a bool, an index an i64";
    return NULL;
}
