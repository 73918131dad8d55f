/* ir.c: the graph IR: nodes, shapes, dump and verifier.
 *
 * A Graph is a list of nodes in creation order, which is always a
 * topological order (a node's inputs exist before it). Shapes carry the
 * batch as the symbolic DIM_N so one compiled program serves any batch
 * size, including the short last batch of an epoch. */
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"

const char *const op_text[OP_COUNT] = {
#define X(name, arity, kind, text) text,
#include "ops.def"
#undef X
};
const int op_arity[OP_COUNT] = {
#define X(name, arity, kind, text) arity,
#include "ops.def"
#undef X
};
const OpKind op_kind[OP_COUNT] = {
#define X(name, arity, kind, text) kind,
#include "ops.def"
#undef X
};
_Static_assert(sizeof op_text / sizeof op_text[0] == OP_COUNT, "ops.def and op tables disagree");

Graph *ir_new(void)
{
    Graph *g = util_alloc(sizeof *g);
    g->images = g->labels = g->logits = g->loss = -1;
    g->loss_sum = g->correct_sum = -1;
    return g;
}

int ir_add(Graph *g, Op op, int nin, const int *in, Shape s, DType dt, Loc loc)
{
    if (nin != op_arity[op])
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

int ir_batched(const Shape *s) { return s->rank > 0 && s->d[0] == DIM_N; }

int64_t ir_row_elems(const Shape *s)
{
    int64_t e = 1;
    for (int i = ir_batched(s) ? 1 : 0; i < s->rank; i++)
        e *= s->d[i];
    return e;
}

int64_t ir_numel(const Shape *s, int64_t n)
{
    return ir_row_elems(s) * (ir_batched(s) ? n : 1);
}

int ir_same_shape(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i])
            return 0;
    return 1;
}

char *ir_shape_str(const Shape *s)
{
    char buf[128];
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < s->rank; i++) {
        if (s->d[i] == DIM_N)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%sN", i ? ", " : "");
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
        if (n->op == OP_CE_LOSS || n->op == OP_CE_GRAD)
            fprintf(f, " reduction=%s", red_text[n->red]);
        fprintf(f, " : %s%s %s", n->dt == DT_I32 ? "i32" : "f32", ir_shape_str(&n->shape), phase_text[n->phase]);
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

static int verify_node(const Graph *g, const Node *n, const char *after)
{
    int bad = 0;
    for (int k = 0; k < n->nin; k++)
        bad += check(g, n, after, n->in[k] >= 0 && n->in[k] < n->id, "input not defined before use");
    if (bad)
        return bad;
    const Shape *s = &n->shape;
    switch (n->op) {
    case OP_IMAGES:
        return check(g, n, after, ir_batched(s) && n->dt == DT_F32, "images must be f32[N, ...]");
    case OP_LABELS:
        return check(g, n, after, s->rank == 1 && ir_batched(s) && n->dt == DT_I32, "labels must be i32[N]");
    case OP_PARAM:
        return check(g, n, after, !ir_batched(s) && n->name && n->param >= 0, "param must be named and unbatched");
    case OP_RESHAPE: {
        const Shape *x = in_shape(g, n, 0);
        return check(g, n, after, ir_batched(x) == ir_batched(s) && ir_row_elems(x) == ir_row_elems(s),
                     "reshape changes the element count");
    }
    case OP_MM_NT: case OP_MM_NN: case OP_MM_TN:
        return verify_matmul(g, n, after);
    case OP_BIAS_ADD: {
        const Shape *x = in_shape(g, n, 0), *b = in_shape(g, n, 1);
        return check(g, n, after, x->rank == 2 && b->rank == 1 && b->d[0] == x->d[1] && ir_same_shape(x, s),
                     "bias_add needs x[M, N] and b[N]");
    }
    case OP_ADD: case OP_RELU_GRAD:
        return check(g, n, after, ir_same_shape(in_shape(g, n, 0), s) && ir_same_shape(in_shape(g, n, 1), s),
                     "operands and result must have one shape");
    case OP_RELU:
        return check(g, n, after, ir_same_shape(in_shape(g, n, 0), s), "relu keeps its shape");
    case OP_SUM_ROWS: {
        const Shape *x = in_shape(g, n, 0);
        return check(g, n, after, x->rank == 2 && s->rank == 1 && s->d[0] == x->d[1], "sum_rows: [M, N] -> [N]");
    }
    case OP_CE_LOSS: case OP_CE_GRAD: case OP_CORRECT: {
        const Shape *x = in_shape(g, n, 0), *l = in_shape(g, n, 1);
        bad = check(g, n, after, x->rank == 2 && ir_batched(x) && l->rank == 1 && ir_batched(l)
                    && g->n[n->in[1]]->dt == DT_I32, "needs logits f32[N, C] and labels i32[N]");
        if (!bad && n->op == OP_CE_GRAD)
            bad = check(g, n, after, ir_same_shape(x, s), "ce_grad has the logits' shape");
        else if (!bad)
            bad = check(g, n, after, s->rank == 1 && ir_batched(s), "per-sample result must be [N]");
        return bad;
    }
    case OP_SUM_ALL:
        return check(g, n, after, s->rank == 0, "sum_all gives a scalar");
    case OP_SGD:
        return check(g, n, after, g->n[n->in[0]]->op == OP_PARAM && ir_same_shape(in_shape(g, n, 0), in_shape(g, n, 1))
                     && ir_same_shape(in_shape(g, n, 0), s), "sgd updates a param with a gradient of its shape");
    case OP_COUNT:
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
