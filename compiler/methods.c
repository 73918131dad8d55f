/* methods.c: forward's tensor functions and methods over any rank, as
 * PyTorch spells them: reductions over dimensions (sum, mean, amax, amin),
 * movement (permute, transpose, unsqueeze, squeeze, expand, contiguous),
 * joining and splitting (torch.cat along any dimension, stack, chunk,
 * split, unbind with tuple unpacking), subscripts (x[:, -1], x[..., :k],
 * x[:, ::2], None) and broadcasting arithmetic. Each checks its shapes
 * and builds tensor.c's ops (K_TENSOR), which index any layout, the
 * batch's dimension anywhere.
 *
 * One rule PyTorch does not have: nothing in forward reduces over the
 * batch. Such a reduction would mix the samples, and make a step on two
 * ranks differ from one on one; only the loss, the metrics and batch norm
 * reduce across samples, and they know the ranks. */
#include <string.h>

#include "sema.h"

static const char *fname(const Expr *e) { return e->written ? e->written : e->s; }

static Val node(Sema *S, Op op, Val a, Val b, Shape s, Loc loc)
{
    return layer_node(S, op, a.id, b.id, s, loc);
}

/* A dimension argument of a rank-r tensor, negative from the end (r + 1
 * places for unsqueeze: extra = 1); reported. */
static int dim_arg(const Expr *e, int rank, int extra, int *d)
{
    int64_t v;
    if (!arg_int(e, "the dimension", -(rank + extra), rank + extra - 1, &v))
        return 0;
    *d = (int)(v < 0 ? v + rank + extra : v);
    return 1;
}

static int refuse_batch(const Val *x, int d, const char *fn, Loc loc)
{
    if (!IR_IS_BATCH(x->s.d[d]))
        return 1;
    diag_error(loc, "%s over dimension %d, the batch, is not supported: it would mix the samples (and make 2 "
               "ranks differ from 1); only the loss, the metrics and batch norm reduce across samples", fn, d);
    return 0;
}

/* ---- reductions -------------------------------------------------------- */

/* x.sum(dim, keepdim = False), torch.mean(x, dim = (2, 3)), torch.amax(x, -1) */
/* The reduced dimensions (bits) of x named by dim (an int or a tuple);
 * no dim: all of them. The batch's only in a loss block (each rank's loss
 * is over its own samples, as under DDP) or where x has none. */
static unsigned reduce_axes(const Sema *S, const Expr *e, const Val *x, const Expr *dim)
{
    if (!dim && !S->in_loss && ten_batch_dim(&x->s) >= 0) {
        diag_error(e->loc, "%s without dim reduces every dimension, the batch's too: name the dimensions (dim = 1, "
                   "or dim = (1, 2)); the batch is reduced only by the loss", fname(e));
        return 0;
    }
    if (!dim)
        return (1u << x->s.rank) - 1;
    unsigned axes = 0;
    const int nd = dim->kind == E_TUPLE ? dim->nargs : 1;
    for (int k = 0; k < nd; k++) {
        const Expr *de = dim->kind == E_TUPLE ? dim->args[k]->val : dim;
        int d;
        if (!dim_arg(de, x->s.rank, 0, &d) || (!S->in_loss && !refuse_batch(x, d, fname(e), de->loc)))
            return 0;
        if (axes & (1u << d)) {
            diag_error(de->loc, "dimension %d appears twice", d);
            return 0;
        }
        axes |= 1u << d;
    }
    return axes;
}

/* op over the axes, the reduced dimensions kept as 1s */
static Val reduced(Sema *S, Op op, Val x, unsigned axes, Loc loc)
{
    Val y = node(S, op, x, POISON, ten_reduced(&x.s, axes), loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.axes = axes;
    return y;
}

Val meth_reduce_all(Sema *S, Op op, Val x, Loc loc)
{
    if (x.id < 0)
        return x;
    const unsigned axes = (1u << x.s.rank) - 1;
    return layer_view(S, reduced(S, op, x, axes, loc), ten_dropped(&x.s, axes), loc);
}

static Val reduce(Sema *S, const Expr *e, Op op)
{
    static const char *const names[] = {"input", "dim", "keepdim"};
    const Sig sig = {fname(e), names, 3, 3, 1};
    Expr *a[3];
    int keep = 0;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if (a[2] && !arg_bool(a[2], "keepdim", &keep))
        return POISON;
    if (x.id < 0)
        return POISON;
    const unsigned axes = reduce_axes(S, e, &x, a[1]);
    if (!axes)
        return POISON;
    Val y = reduced(S, op, x, axes, e->loc);
    return keep ? y : layer_view(S, y, ten_dropped(&x.s, axes), e->loc);
}

/* x.var(dim, unbiased = True, keepdim = False, correction = ...), x.std(...):
 * the two-pass formula, sum((x - mean)^2) / (count - correction), built
 * from the reductions (their gradients compose to torch's) */
static Val moments(Sema *S, const Expr *e, int sd)
{
    static const char *const names[] = {"input", "dim", "unbiased", "keepdim", "correction"};
    const Sig sig = {fname(e), names, 5, 4, 1};
    Expr *a[5];
    int keep = 0, unbiased = 1;
    double corr = 1;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if ((a[2] && !arg_bool(a[2], "unbiased", &unbiased)) || (a[3] && !arg_bool(a[3], "keepdim", &keep)))
        return POISON;
    if (a[4] && a[2]) {
        diag_error(a[4]->loc, "%s takes unbiased or correction, not both", fname(e));
        return POISON;
    }
    if (a[4] && arg_const(a[4], &corr) != 1) {
        diag_error(a[4]->loc, "correction must be a number");
        return POISON;
    }
    if (!a[4])
        corr = unbiased ? 1 : 0;
    if (x.id < 0)
        return POISON;
    const unsigned axes = reduce_axes(S, e, &x, a[1]);
    if (!axes)
        return POISON;
    double count = 1;
    for (int i = 0; i < x.s.rank; i++)
        if ((axes & (1u << i)) && !refuse_batch(&x, i, fname(e), e->loc))  /* a count known when compiling */
            return POISON;
        else if (axes & (1u << i))
            count *= (double)x.s.d[i];
    if (count - corr <= 0) {
        diag_error(e->loc, "%s over %g elements with correction %g divides by %g", fname(e), count, corr,
                   count - corr);
        return POISON;
    }
    Val d = meth_broadcast(S, OP_BC_SUB, x, reduced(S, OP_T_MEAN, x, axes, e->loc), "-", e->loc);
    Val v = reduced(S, OP_T_SUM, tfn_unary(S, OP_T_POW, d, 2, 0, e->loc), axes, e->loc);
    v = node(S, OP_BC_SCALE, v, POISON, v.s, e->loc);
    if (v.id >= 0)
        S->g->n[v.id]->ten.scale = count - corr;
    if (sd)
        v = tfn_unary(S, OP_T_SQRT, v, 0, 0, e->loc);
    return keep ? v : layer_view(S, v, ten_dropped(&x.s, axes), e->loc);
}

/* x.norm(p = 2, dim, keepdim), torch.norm, torch.linalg.vector_norm's
 * 2-norm: sqrt(sum(x * x)), its gradient x / norm and 0 where the norm is
 * 0, as torch's (the sqrt's ten.lo asks for that) */
static Val norm(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "p", "dim", "keepdim"};
    const Sig sig = {fname(e), names, 4, 3, 1};
    Expr *a[4];
    int keep = 0;
    double p = 2;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if (a[1] && (arg_const(a[1], &p) != 1 || p != 2)) {
        diag_error(a[1]->loc, "%s: only p = 2 is supported (a 1-norm is x.abs().sum(dim))", fname(e));
        return POISON;
    }
    if ((a[3] && !arg_bool(a[3], "keepdim", &keep)) || x.id < 0)
        return POISON;
    const unsigned axes = reduce_axes(S, e, &x, a[2]);
    if (!axes)
        return POISON;
    Val sq = reduced(S, OP_T_SUM, tfn_unary(S, OP_T_POW, x, 2, 0, e->loc), axes, e->loc);
    Val v = tfn_unary(S, OP_T_SQRT, sq, 1, 0, e->loc);     /* lo 1: gradient 0 where the norm is */
    return keep ? v : layer_view(S, v, ten_dropped(&x.s, axes), e->loc);
}

/* torch.logsumexp(x, dim, keepdim): m + log(sum(exp(x - m))), m the
 * maximum (whose gradient path cancels: softmax(x) reaches x) */
static Val logsumexp(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "dim", "keepdim"};
    const Sig sig = {fname(e), names, 3, 3, 2};
    Expr *a[3];
    int keep = 0;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if ((a[2] && !arg_bool(a[2], "keepdim", &keep)) || x.id < 0)
        return POISON;
    const unsigned axes = reduce_axes(S, e, &x, a[1]);
    if (!axes)
        return POISON;
    Val m = reduced(S, OP_T_AMAX, x, axes, e->loc);
    Val t = tfn_unary(S, OP_T_EXP, meth_broadcast(S, OP_BC_SUB, x, m, "-", e->loc), 0, 0, e->loc);
    Val l = tfn_unary(S, OP_T_LOG, reduced(S, OP_T_SUM, t, axes, e->loc), 0, 0, e->loc);
    Val v = meth_broadcast(S, OP_BC_ADD, m, l, "+", e->loc);
    return keep ? v : layer_view(S, v, ten_dropped(&x.s, axes), e->loc);
}

/* ---- movement ---------------------------------------------------------- */

/* x.permute(0, 2, 1), x.permute((0, 2, 1)), torch.permute(x, (0, 2, 1)) */
static Val permute(Sema *S, const Expr *e)
{
    if (e->nargs < 2 || e->args[0]->key) {
        diag_error(e->loc, "%s expects a tensor and its dimensions in their new order", fname(e));
        return POISON;
    }
    Val x = S->eval(S, e->args[0]->val);
    if (x.id < 0)
        return POISON;
    const Arg *const *dims = (const Arg *const *)e->args + 1;
    int n = e->nargs - 1;
    if (n == 1 && dims[0]->val->kind == E_TUPLE) {
        n = dims[0]->val->nargs;
        dims = (const Arg *const *)dims[0]->val->args;
    }
    if (n != x.s.rank) {
        diag_error(e->loc, "%s of %s needs %d dimensions, got %d", fname(e), ir_shape_str(&x.s), x.s.rank, n);
        return POISON;
    }
    Shape s = {n, {0}};
    int perm[MAX_RANK];
    unsigned seen = 0;
    for (int k = 0; k < n; k++) {
        if (!dim_arg(dims[k]->val, n, 0, &perm[k]))
            return POISON;
        if (seen & (1u << perm[k])) {
            diag_error(dims[k]->val->loc, "dimension %d appears twice", perm[k]);
            return POISON;
        }
        seen |= 1u << perm[k];
        s.d[k] = x.s.d[perm[k]];
    }
    int identity = 1;
    for (int k = 0; k < n; k++)
        identity &= perm[k] == k;
    if (identity)
        return x;
    Val y = node(S, OP_T_PERMUTE, x, POISON, s, e->loc);
    if (y.id >= 0)
        memcpy(S->g->n[y.id]->ten.perm, perm, sizeof perm);
    return y;
}

/* x.transpose(0, 1), torch.transpose(x, -2, -1) */
static Val transpose(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "dim0", "dim1"};
    const Sig sig = {fname(e), names, 3, 3, 3};
    Expr *a[3];
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    int d0, d1;
    if (x.id < 0 || !dim_arg(a[1], x.s.rank, 0, &d0) || !dim_arg(a[2], x.s.rank, 0, &d1))
        return POISON;
    if (d0 == d1)
        return x;
    Shape s = x.s;
    int perm[MAX_RANK];
    for (int k = 0; k < s.rank; k++)
        perm[k] = k == d0 ? d1 : k == d1 ? d0 : k;
    s.d[d0] = x.s.d[d1];
    s.d[d1] = x.s.d[d0];
    Val y = node(S, OP_T_PERMUTE, x, POISON, s, e->loc);
    if (y.id >= 0)
        memcpy(S->g->n[y.id]->ten.perm, perm, sizeof perm);
    return y;
}

static Val unsqueeze(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "dim"};
    const Sig sig = {fname(e), names, 2, 2, 2};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    int d;
    if (x.id < 0 || !dim_arg(a[1], x.s.rank, 1, &d))
        return POISON;
    if (x.s.rank == MAX_RANK) {
        diag_error(e->loc, "%s of %s: more than %d dimensions are not supported", fname(e), ir_shape_str(&x.s),
                   MAX_RANK);
        return POISON;
    }
    Shape s = {x.s.rank + 1, {0}};
    for (int k = 0, j = 0; k < s.rank; k++)
        s.d[k] = k == d ? 1 : x.s.d[j++];
    return layer_view(S, x, s, e->loc);
}

static Val squeeze(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "dim"};
    const Sig sig = {fname(e), names, 2, 2, 1};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    int d = -1;
    if (x.id < 0 || (a[1] && !dim_arg(a[1], x.s.rank, 0, &d)))
        return POISON;
    unsigned drop = 0;
    for (int k = 0; k < x.s.rank; k++)
        if (x.s.d[k] == 1 && (d < 0 || d == k))
            drop |= 1u << k;
    return layer_view(S, x, ten_dropped(&x.s, drop), e->loc);
}

/* x.expand(N, 4, 5) or x.expand(-1, 4, 5): -1 keeps a dimension, a 1
 * stretches; the batch stays (-1 or x.size(0)) */
static Val expand(Sema *S, const Expr *e)
{
    if (e->nargs < 2 || e->args[0]->key) {
        diag_error(e->loc, "%s expects a tensor and the sizes", fname(e));
        return POISON;
    }
    Val x = S->eval(S, e->args[0]->val);
    if (x.id < 0)
        return POISON;
    const Arg *const *dims = (const Arg *const *)e->args + 1;
    int n = e->nargs - 1;
    if (n == 1 && dims[0]->val->kind == E_TUPLE) {
        n = dims[0]->val->nargs;
        dims = (const Arg *const *)dims[0]->val->args;
    }
    if (n < x.s.rank || n > MAX_RANK) {
        diag_error(e->loc, "%s of %s needs %d to %d sizes, got %d", fname(e), ir_shape_str(&x.s), x.s.rank, MAX_RANK,
                   n);
        return POISON;
    }
    Shape s = {n, {0}};
    for (int k = 0; k < n; k++) {
        const int j = k - (n - x.s.rank);
        int64_t v;
        if (!layer_size(S, dims[k]->val, &v))
            return POISON;
        const int64_t have = j >= 0 ? x.s.d[j] : 1;
        if (v == -2 && j >= 0)
            v = have;
        if (v == -2 || (have != 1 && v != have) || (v == DIM_N && have != DIM_N)) {
            diag_error(dims[k]->val->loc, "%s: cannot expand dimension %d of %s to %s", fname(e), k,
                       ir_shape_str(&x.s), v == DIM_N ? "the batch" : v == -2 ? "-1" : util_fmt("%lld", (long long)v));
            return POISON;
        }
        s.d[k] = v;
    }
    if (ir_same_shape(&s, &x.s))
        return x;
    return node(S, OP_BC_COPY, x, POISON, s, e->loc);
}

/* ---- joining and splitting --------------------------------------------- */

/* a and b along dimension d (not the batch's) */
static Val cat2(Sema *S, Val a, Val b, int d, Loc loc)
{
    Shape s = a.s;
    s.d[d] += b.s.d[d];
    Val y = node(S, OP_T_CAT, a, b, s, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.axis = d;
    return y;
}

Val meth_cat(Sema *S, const Expr *e, const Val *t, int n, int d, const Expr *const *where)
{
    Val acc = t[0];
    for (int k = 1; k < n; k++) {
        int same = t[k].s.rank == acc.s.rank;
        for (int i = 0; same && i < acc.s.rank; i++)
            same = i == d || t[k].s.d[i] == acc.s.d[i];
        if (!same) {
            diag_error(where[k]->loc, "%s: cannot join %s to %s along dim %d (the other dimensions differ)",
                       fname(e), ir_shape_str(&t[k].s), ir_shape_str(&t[0].s), d);
            return POISON;
        }
        acc = cat2(S, acc, t[k], d, e->loc);
    }
    return acc;
}

/* a slice of x along d: start, step, len elements */
static Val slice(Sema *S, Val x, int d, int64_t start, int64_t step, int64_t len, Loc loc)
{
    if (start == 0 && step == 1 && len == x.s.d[d])
        return x;
    Shape s = x.s;
    s.d[d] = len;
    Val y = node(S, OP_T_SLICE, x, POISON, s, loc);
    if (y.id >= 0) {
        Node *nd = S->g->n[y.id];
        nd->ten.axis = d;
        nd->ten.start = start;
        nd->ten.step = step;
    }
    return y;
}

/* a, b = torch.chunk(x, 2, dim = 1), x.split(16, dim = -1), x.unbind(1):
 * the pieces in out; their count, 0 after reporting. */
static int split_pieces(Sema *S, const Expr *e, Val *out, int max)
{
    const int chunk = strcmp(e->s, "chunk") == 0, unbind = strcmp(e->s, "unbind") == 0;
    static const char *const cn[] = {"input", "chunks", "dim"};
    static const char *const sn[] = {"tensor", "split_size_or_sections", "dim"};
    static const char *const un[] = {"input", "dim"};
    const Sig sig = {fname(e), chunk ? cn : unbind ? un : sn, unbind ? 2 : 3, unbind ? 2 : 3, unbind ? 1 : 2};
    Expr *a[3];
    if (!arg_bind(e, &sig, a))
        return 0;
    Val x = S->eval(S, a[0]);
    int d = 0;
    const Expr *dim = unbind ? a[1] : a[2];
    if (x.id < 0 || (dim && !dim_arg(dim, x.s.rank, 0, &d)))
        return 0;
    if (IR_IS_BATCH(x.s.d[d])) {
        diag_error(dim ? dim->loc : e->loc, "%s along dimension %d, the batch, is not supported%s", fname(e), d,
                   dim ? "" : " (PyTorch's default dim is 0: name the dimension)");
        return 0;
    }
    const int64_t L = x.s.d[d];
    int64_t sizes[64];
    int n = 0;
    if (unbind) {
        for (int64_t k = 0; k < L && n < 64; k++)
            sizes[n++] = 1;
    } else if (!chunk && a[1]->kind == E_TUPLE) {
        int64_t sum = 0;
        for (int k = 0; k < a[1]->nargs && n < 64; k++) {
            if (!arg_int(a[1]->args[k]->val, "a section", 0, L, &sizes[n]))
                return 0;
            sum += sizes[n++];
        }
        if (sum != L) {
            diag_error(a[1]->loc, "%s: the sections add to %lld, dimension %d has %lld", fname(e), (long long)sum, d,
                       (long long)L);
            return 0;
        }
    } else {
        int64_t c;
        if (!arg_int(a[1], chunk ? "chunks" : "the split size", 1, MAX_DIM, &c))
            return 0;
        const int64_t size = chunk ? (L + c - 1) / c : c;
        for (int64_t at = 0; at < L && n < 64; at += size)
            sizes[n++] = at + size <= L ? size : L - at;
    }
    if (n != max) {
        diag_error(e->loc, "%s of %s along dim %d gives %d tensors, unpacked into %d names", fname(e),
                   ir_shape_str(&x.s), d, n, max);
        return 0;
    }
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        out[k] = slice(S, x, d, at, 1, sizes[k], e->loc);
        if (unbind)
            out[k] = layer_view(S, out[k], ten_dropped(&out[k].s, 1u << d), e->loc);
        at += sizes[k];
    }
    return n;
}

static int is_split(const char *s)
{
    return strcmp(s, "chunk") == 0 || strcmp(s, "split") == 0 || strcmp(s, "unbind") == 0;
}

int meth_unpack(Sema *S, const Expr *e, Val *out, int n)
{
    if (e->kind == E_CALL && is_split(e->s))
        return split_pieces(S, e, out, n) == n;
    if (tint_is_pair(e)) {
        if (n != 2) {
            diag_error(e->loc, "%s(x, dim) gives 2 tensors (values, indices), unpacked into %d names", fname(e), n);
            return 0;
        }
        return tint_pair(S, e, out);
    }
    if (e->kind == E_CALL && (strcmp(e->s, "size") == 0))
        diag_error(e->loc, "unpacking x.size() into names is not supported yet; write x.size(1) where the size "
                   "goes");
    else if (e->kind == E_NAME && strstr(e->s, ".shape"))
        diag_error(e->loc, "unpacking x.shape into names is not supported yet; write x.size(1) where the size goes");
    else if (e->kind == E_CALL && (strcmp(e->s, "LSTM") == 0 || strcmp(e->s, "GRU") == 0 || strcmp(e->s, "lstm") == 0))
        diag_error(e->loc, "tuple unpacking of nn.%s's result is not supported", e->s);
    else
        diag_error(e->loc, "only torch.chunk, split and unbind give tuples to unpack here, got %s", arg_show(e));
    return 0;
}

/* torch.stack((a, b), dim = 1): each with a new dimension, joined there */
static Val stack(Sema *S, const Expr *e)
{
    static const char *const names[] = {"tensors", "dim"};
    const Sig sig = {fname(e), names, 2, 2, 1};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    if (a[0]->kind != E_TUPLE || a[0]->nargs < 1) {
        diag_error(a[0]->loc, "%s expects a tuple or list of tensors", fname(e));
        return POISON;
    }
    const int n = a[0]->nargs;
    Val *t = util_alloc(sizeof *t * (size_t)n);
    const Expr **where = util_alloc(sizeof *where * (size_t)n);
    int ok = 1, d = 0;
    for (int k = 0; k < n; k++) {
        where[k] = a[0]->args[k]->val;
        t[k] = S->eval(S, where[k]);
        ok &= t[k].id >= 0;
    }
    if (!ok || (a[1] && !dim_arg(a[1], t[0].s.rank, 1, &d)))
        return POISON;
    if (t[0].s.rank == MAX_RANK) {
        diag_error(e->loc, "%s: more than %d dimensions are not supported", fname(e), MAX_RANK);
        return POISON;
    }
    for (int k = 1; k < n; k++)
        if (!ir_same_shape(&t[k].s, &t[0].s)) {
            diag_error(where[k]->loc, "%s: %s and %s differ (stack needs one shape)", fname(e), ir_shape_str(&t[k].s),
                       ir_shape_str(&t[0].s));
            return POISON;
        }
    for (int k = 0; k < n; k++) {      /* dim 0 too: a new dimension before the batch's */
        Shape s = {t[k].s.rank + 1, {0}};
        for (int i = 0, j = 0; i < s.rank; i++)
            s.d[i] = i == d ? 1 : t[k].s.d[j++];
        t[k] = layer_view(S, t[k], s, e->loc);
    }
    return n == 1 ? t[0] : meth_cat(S, e, t, n, d, (const Expr *const *)where);
}

/* ---- subscripts -------------------------------------------------------- */

/* x[i], x[a:b:c], x[..., k], x[:, None]: slices along each dimension,
 * integer indices dropping theirs, None adding a 1; the batch's
 * dimension only as a whole (:). */
Val meth_index(Sema *S, const Expr *e)
{
    if (tint_is_pair(e->a)) {   /* x.max(dim = 1)[0]: the values */
        Val two[2];
        int64_t k;
        if (e->nargs != 1 || e->args[0]->val->kind == E_SLICE) {
            diag_error(e->loc, "%s(dim) gives (values, indices): take one with [0] or [1]", fname(e->a));
            return POISON;
        }
        if (!arg_int(e->args[0]->val, "the element", -2, 1, &k) || !tint_pair(S, e->a, two))
            return POISON;
        return two[k < 0 ? k + 2 : k];
    }
    Val x = S->eval(S, e->a);
    if (x.id < 0)
        return POISON;
    int nreal = 0, ell = -1;
    for (int k = 0; k < e->nargs; k++) {
        const Expr *s = e->args[k]->val;
        if (s->kind == E_ELLIPSIS) {
            if (ell >= 0) {
                diag_error(s->loc, "an index can have only one ellipsis (...)");
                return POISON;
            }
            ell = k;
        } else if (!(s->kind == E_NAME && strcmp(s->s, "None") == 0)) {
            nreal++;
        }
    }
    if (nreal > x.s.rank) {
        diag_error(e->loc, "too many indices for %s: %d", ir_shape_str(&x.s), nreal);
        return POISON;
    }
    Shape out = {0, {0}};   /* the result: kept dimensions and None's 1s */
    unsigned drop = 0;      /* x's dimensions an integer index removes */
    int tensor_index = 0;
    int d = 0;
    for (int k = 0; k < e->nargs; k++) {
        const Expr *s = e->args[k]->val;
        if (s->kind == E_ELLIPSIS) {
            for (int skip = x.s.rank - nreal; skip > 0; skip--, d++)
                out.d[out.rank++] = x.s.d[d];
            continue;
        }
        if (s->kind == E_NAME && strcmp(s->s, "None") == 0) {
            if (out.rank == MAX_RANK) {
                diag_error(s->loc, "more than %d dimensions are not supported", MAX_RANK);
                return POISON;
            }
            out.d[out.rank++] = 1;
            continue;
        }
        const int64_t L = x.s.d[d];
        if (IR_IS_BATCH(L)) {
            if (s->kind != E_SLICE || s->a || s->b || s->c) {
                diag_error(s->loc, "indexing dimension %d, the batch, is not supported (only ':' there)", d);
                return POISON;
            }
            out.d[out.rank++] = DIM_N;
            d++;
            continue;
        }
        double c;
        if (s->kind != E_SLICE && arg_const(s, &c) == 0) {     /* x[:, idx]: an i64 tensor */
            if (tensor_index++) {
                diag_error(s->loc, "more than one tensor subscript is not supported (they would be read together, "
                           "as PyTorch's advanced indexing); index one dimension at a time");
                return POISON;
            }
            x = tint_index(S, x, d, s, e->loc);
            if (x.id < 0)
                return POISON;
            out.d[out.rank++] = x.s.d[d];
            d++;
            continue;
        }
        if (s->kind != E_SLICE) {
            int64_t i;
            if (!arg_int(s, "an index", -L, L - 1, &i))
                return POISON;
            x = slice(S, x, d, i < 0 ? i + L : i, 1, 1, e->loc);
            drop |= 1u << d;
            d++;
            continue;
        }
        int64_t start = 0, stop = L, step = 1;
        if (s->c && !arg_int(s->c, "the step", 1, MAX_DIM, &step))
            return POISON;
        /* Python's bounds: negative from the end, clamped to the extent */
        if (s->a && !arg_int(s->a, "the start", INT32_MIN, INT32_MAX, &start))
            return POISON;
        if (s->b && !arg_int(s->b, "the stop", INT32_MIN, INT32_MAX, &stop))
            return POISON;
        start = start < 0 ? (start + L < 0 ? 0 : start + L) : start > L ? L : start;
        stop = stop < 0 ? (stop + L < 0 ? 0 : stop + L) : stop > L ? L : stop;
        const int64_t len = ten_slice_len(start, stop, step);
        if (len == 0) {
            diag_error(s->loc, "the slice of dimension %d (%lld elements) is empty", d, (long long)L);
            return POISON;
        }
        x = slice(S, x, d, start, step, len, e->loc);
        out.d[out.rank++] = len;
        d++;
    }
    for (; d < x.s.rank; d++)
        out.d[out.rank++] = x.s.d[d];
    (void)drop;
    return layer_view(S, x, out, e->loc);
}

/* ---- broadcasting arithmetic ------------------------------------------- */

Val meth_broadcast(Sema *S, Op op, Val a, Val b, const char *sym, Loc loc)
{
    Shape s;
    if (!ten_broadcast(&a.s, &b.s, &s)) {
        diag_error(loc, "cannot %s tensors of shapes that do not broadcast: %s %s %s (PyTorch's rules: aligned at "
                   "the last dimension, each pair equal or one of them 1)", op == OP_BC_ADD ? "add" : op == OP_BC_SUB
                   ? "subtract" : op == OP_BC_MUL ? "multiply" : "divide", ir_shape_str(&a.s), sym, ir_shape_str(&b.s));
        return POISON;
    }
    if (s.rank > MAX_RANK) {
        diag_error(loc, "more than %d dimensions are not supported", MAX_RANK);
        return POISON;
    }
    return node(S, op, a, b, s, loc);
}

/* ---- dispatch ---------------------------------------------------------- */

static const char *const handled[] = {
    "sum", "mean", "amax", "amin", "permute", "transpose", "unsqueeze", "squeeze", "expand", "contiguous", "stack",
    "chunk", "split", "unbind", "var", "std", "logsumexp", "norm",
};

int meth_handles(const char *name)
{
    for (size_t i = 0; i < sizeof handled / sizeof *handled; i++)
        if (strcmp(handled[i], name) == 0)
            return 1;
    return 0;
}

const char *meth_list(void)
{
    return "amax, amin, chunk, contiguous, expand, logsumexp, mean, norm, permute, split, squeeze, stack, std, sum, "
           "transpose, unbind, unsqueeze, var";
}

Val meth_call(Sema *S, const Expr *e)
{
    const char *s = e->s;
    if (strcmp(s, "sum") == 0)
        return reduce(S, e, OP_T_SUM);
    if (strcmp(s, "mean") == 0)
        return reduce(S, e, OP_T_MEAN);
    if (strcmp(s, "amax") == 0)
        return reduce(S, e, OP_T_AMAX);
    if (strcmp(s, "amin") == 0)
        return reduce(S, e, OP_T_AMIN);
    if (strcmp(s, "var") == 0 || strcmp(s, "std") == 0)
        return moments(S, e, s[0] == 's');
    if (strcmp(s, "logsumexp") == 0)
        return logsumexp(S, e);
    if (strcmp(s, "norm") == 0)
        return norm(S, e);
    if (strcmp(s, "permute") == 0)
        return permute(S, e);
    if (strcmp(s, "transpose") == 0)
        return transpose(S, e);
    if (strcmp(s, "unsqueeze") == 0)
        return unsqueeze(S, e);
    if (strcmp(s, "squeeze") == 0)
        return squeeze(S, e);
    if (strcmp(s, "expand") == 0)
        return expand(S, e);
    if (strcmp(s, "stack") == 0)
        return stack(S, e);
    if (strcmp(s, "contiguous") == 0) {     /* every value here is laid out whole */
        static const char *const names[] = {"input"};
        const Sig sig = {fname(e), names, 1, 1, 1};
        Expr *a[1];
        return arg_bind(e, &sig, a) ? S->eval(S, a[0]) : POISON;
    }
    if (is_split(s)) {
        diag_error(e->loc, "%s gives a tuple: unpack it (a, b = %s(...))", fname(e), fname(e));
        return POISON;
    }
    diag_error(e->loc, "%s is not supported yet (the reductions here: sum, mean, amax, amin, var, std, logsumexp, "
               "norm)", fname(e));
    return POISON;
}
