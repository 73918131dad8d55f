/* loss_fns.c: PyTorch's loss functions as values (F.cross_entropy,
 * F.mse_loss, ...), for the train block's loss block: each is written out
 * in the tensor ops (the binary cross-entropies as ops.def's T_BCE rows,
 * torch's formulas), so a loss expression's gradient is autodiff's of the
 * whole composition, and every reduction, shape and weighting of terms
 * PyTorch takes works as it does there. The one-line `loss` setting keeps
 * its fused row kernels (front.c's build_loss). */
#include <math.h>
#include <string.h>

#include "sema.h"

enum { F_CE, F_NLL, F_MSE, F_L1, F_SMOOTH_L1, F_HUBER, F_BCE, F_BCE_LOGITS };

static const struct {
    const char *name;
    int fn;
} fns[] = {
    {"binary_cross_entropy", F_BCE}, {"binary_cross_entropy_with_logits", F_BCE_LOGITS},
    {"cross_entropy", F_CE},         {"huber_loss", F_HUBER},
    {"l1_loss", F_L1},               {"mse_loss", F_MSE},
    {"nll_loss", F_NLL},             {"smooth_l1_loss", F_SMOOTH_L1},
};
enum { NFNS = sizeof fns / sizeof fns[0] };

static int find(const char *name)
{
    for (int i = 0; i < NFNS; i++)
        if (strcmp(fns[i].name, name) == 0)
            return i;
    return -1;
}

int lfn_handles(const char *name) { return find(name) >= 0; }

const char *lfn_list(void)
{
    const char *s = fns[0].name;
    for (int i = 1; i < NFNS; i++)
        s = util_fmt("%s, %s", s, fns[i].name);
    return s;
}

/* whether at(e, ctx) holds at e or anywhere inside it */
static int any_expr(const Expr *e, int (*at)(const Expr *e, void *ctx), void *ctx)
{
    if (!e)
        return 0;
    if (at(e, ctx) || any_expr(e->a, at, ctx) || any_expr(e->b, at, ctx) || any_expr(e->c, at, ctx))
        return 1;
    for (int k = 0; k < e->nargs; k++)
        if (any_expr(e->args[k]->val, at, ctx))
            return 1;
    return 0;
}

/* the target argument of a class loss's call (cross_entropy, nll_loss), or NULL */
static const Expr *class_loss_target(const Expr *e)
{
    if (e->kind != E_CALL || (strcmp(e->s, "cross_entropy") != 0 && strcmp(e->s, "nll_loss") != 0))
        return NULL;
    int pos = 0;
    for (int k = 0; k < e->nargs; k++) {
        const Arg *a = e->args[k];
        if (a->key ? strcmp(a->key, "target") == 0 : pos++ == 1)
            return a->val;
    }
    return NULL;
}

/* The names made of y so far (y, then t in t = y.view(-1), ...) */
typedef struct Made {
    const char **names;
    int n;
} Made;

static int names_one(const Expr *e, void *ctx)
{
    const Made *y = ctx;
    for (int k = 0; e->kind == E_NAME && k < y->n; k++)
        if (strcmp(e->s, y->names[k]) == 0)
            return 1;
    return 0;
}

static int mentions(const Expr *e, const Made *y) { return any_expr(e, names_one, (void *)y); }

/* e is y's values rearranged (y, y.view(-1), y[:, 0].long(), t if ... else
 * y): indices stay indices. Arithmetic or another function makes floats
 * of them (F.cross_entropy(out, y / y.sum(1, keepdim = True)) takes
 * probabilities). */
static int rearranged(const Expr *e, const Made *y)
{
    static const char *const keep[] = {"view", "reshape", "flatten", "long", "int", "to", "squeeze", "unsqueeze",
                                       "contiguous", "clone", "detach", "type"};
    if (!e)
        return 0;
    if (e->kind == E_NAME)
        return names_one(e, (void *)y);
    if (e->kind == E_INDEX)
        return rearranged(e->a, y);
    if (e->kind == E_COND)
        return rearranged(e->a, y) || rearranged(e->c, y);
    if (e->kind == E_CALL && e->nargs >= 1 && !e->args[0]->key)
        for (size_t k = 0; k < sizeof keep / sizeof *keep; k++)
            if (strcmp(e->s, keep[k]) == 0)
                return rearranged(e->args[0]->val, y);
    return 0;
}

/* a class loss whose target is y's values, rearranged */
static int class_target_at(const Expr *e, void *ctx)
{
    const Expr *t = class_loss_target(e);
    return t && rearranged(t, ctx);
}

static int class_target(Stmt *const *body, int n, Made *y)
{
    for (int i = 0; i < n; i++) {
        const Stmt *st = body[i];
        if (any_expr(st->val, class_target_at, y) || class_target(st->body, st->nbody, y))
            return 1;
        if (st->kind == S_ASSIGN && (st->nnames ? mentions(st->val, y) : rearranged(st->val, y))) {
            /* t = y.view(-1): t is y's values; a, b = y: each is */
            const int add = st->nnames ? st->nnames : 1;
            y->names = util_grow(y->names, sizeof *y->names * (size_t)y->n, sizeof *y->names * (size_t)(y->n + add));
            for (int k = 0; k < add; k++)
                y->names[y->n++] = st->nnames ? st->names[k] : st->name;
        }
    }
    return 0;
}

int lfn_class_target(Stmt *const *body, int n, const char *y)
{
    Made m = {util_alloc(sizeof *m.names), 1};
    m.names[0] = y;
    return class_target(body, n, &m);
}

/* y[k], k an integer: element k of the targets' tuple; -1 otherwise */
static int64_t tuple_index(const Expr *e, const char *y)
{
    return e && e->kind == E_INDEX && e->a->kind == E_NAME && strcmp(e->a->s, y) == 0 && e->nargs == 1
                   && e->args[0]->val->kind == E_INT ? e->args[0]->val->i : -1;
}

/* y, and the largest y[k] seen plus one (tuple_width) or the k looked for
 * (class_column_at) */
typedef struct Column {
    const char *y;
    int64_t k;
} Column;

static int tuple_width(const Expr *e, void *ctx)
{
    Column *c = ctx;
    const int64_t w = tuple_index(e, c->y) + 1;
    c->k = w > c->k ? w : c->k;
    return 0;   /* every sub-expression is seen */
}

int lfn_target_tuple(Stmt *const *body, int n, const char *y, const char *const **names)
{
    Column w = {y, 0};
    *names = NULL;
    for (int i = 0; i < n; i++) {
        const Stmt *st = body[i];
        if (st->nnames > 0 && st->val->kind == E_NAME && strcmp(st->val->s, y) == 0) {  /* cls, reg = y */
            *names = st->names;
            return st->nnames;
        }
        any_expr(st->val, tuple_width, &w);
    }
    return w.k > 64 ? 64 : (int)w.k;    /* more is refused where it is indexed */
}

/* a class loss whose target is y[k] (or what is made of it: y[k].view(-1), y[k].long()) */
static int class_column_at(const Expr *e, void *ctx)
{
    const Column *c = ctx;
    const Expr *t = class_loss_target(e);
    while (t && t->kind == E_CALL && t->nargs >= 1 && !t->args[0]->key)
        t = t->args[0]->val;
    return t && tuple_index(t, c->y) == c->k;
}

int lfn_class_column(Stmt *const *body, int n, const char *y, int k, const char *name)
{
    if (name)
        return lfn_class_target(body, n, name);
    Column c = {y, k};
    for (int i = 0; i < n; i++)
        if (any_expr(body[i]->val, class_column_at, &c))
            return 1;
    return 0;
}

/* ---- the compositions --------------------------------------------------- */

/* the column of the targets' tuple that v is (through views and
 * conversions), or -1 */
static int column_of(const Sema *S, int id)
{
    while (id >= 0 && (S->g->n[id]->op == OP_RESHAPE || S->g->n[id]->op == OP_T_TO_I64))
        id = S->g->n[id]->in[0];
    for (int k = 0; S->ycols && k < S->g->ntargets; k++)
        if (S->ycols[k] == id)
            return k;
    return -1;
}

static Val make(Sema *S, Op op, int nin, const int *in, Shape s, DType dt, Loc loc)
{
    for (int k = 0; k < nin; k++)
        if (in[k] < 0)
            return POISON;
    return (Val){ir_add(S->g, op, nin, in, s, dt, loc), s};
}

static Val affine(Sema *S, Val x, double a, double b, Loc loc) { return tfn_unary(S, OP_T_AFFINE, x, a, b, loc); }
static Val add(Sema *S, Val a, Val b, Loc loc) { return meth_broadcast(S, OP_BC_ADD, a, b, "+", loc); }
static Val mul(Sema *S, Val a, Val b, Loc loc) { return meth_broadcast(S, OP_BC_MUL, a, b, "*", loc); }

/* torch's reductions: none keeps the elements, sum and mean give a 0-d
 * tensor; a mean over counted elements divides the sum by their count */
static Val reduce(Sema *S, Val l, int red, Val count, Loc loc)
{
    if (red == RED_NONE || l.id < 0)
        return l;
    if (red == RED_SUM || count.id < 0)
        return meth_reduce_all(S, red == RED_SUM ? OP_T_SUM : OP_T_MEAN, l, loc);
    Val s = meth_reduce_all(S, OP_T_SUM, l, loc), c = meth_reduce_all(S, OP_T_SUM, count, loc);
    return make(S, OP_BC_DIV, 2, (int[]){s.id, c.id}, s.s, DT_F32, loc);
}

static int float_tensor(const Sema *S, Val x, const char *fn, const char *what, Loc loc)
{
    if (x.id < 0)
        return 0;
    if (S->g->n[x.id]->dt == DT_F32)
        return 1;
    diag_error(loc, "%s's %s must be a float tensor, got %s%s", fn, what, ir_dtype_text(S->g->n[x.id]->dt),
               ir_shape_str(&x.s));
    return 0;
}

static int same_shape(Val x, Val t, const char *fn, Loc loc)
{
    if (x.id < 0 || t.id < 0)
        return 0;
    if (ten_same(&x.s, &t.s))
        return 1;
    diag_error(loc, "%s compares tensors of one shape: the input is %s, the target %s (view one as the other)", fn,
               ir_shape_str(&x.s), ir_shape_str(&t.s));
    return 0;
}

/* cross_entropy / nll_loss over [R, C] scores (R rows: the batch, or the
 * batch merged with positions by view(-1, C)): class-index targets [R]
 * (ignore_index masking them out), or class probabilities [R, C] */
static Val class_loss(Sema *S, int fn, Val x, Val t, Val w, int red, double smooth, int has_ignore, int64_t ignore,
                      const char *name, Loc loc)
{
    if (!float_tensor(S, x, name, "input", loc) || t.id < 0)
        return POISON;
    if (x.s.rank != 2 || ten_batch_dim(&x.s) != 0) {
        diag_error(loc, "%s takes scores [N, C] with the batch first, got %s: view positions as rows, as nanoGPT "
                   "does (F.%s(logits.view(-1, C), y.view(-1)))", name, ir_shape_str(&x.s), name);
        return POISON;
    }
    const int64_t R = x.s.d[0], C = x.s.d[1];
    const DType tdt = S->g->n[t.id]->dt;
    const int probs = tdt == DT_F32;
    if (probs ? !ten_same(&t.s, &x.s) : !(t.s.rank == 1 && t.s.d[0] == R)) {
        diag_error(loc, "%s's target must be class indices %s (or class probabilities %s), got %s%s", name,
                   ir_shape_str(&(Shape){1, {R}}), ir_shape_str(&x.s), ir_dtype_text(tdt), ir_shape_str(&t.s));
        return POISON;
    }
    if (probs && has_ignore) {
        diag_error(loc, "%s: ignore_index goes with class indices, not probabilities", name);
        return POISON;
    }
    if (w.id >= 0 && !(float_tensor(S, w, name, "weight", loc) && w.s.rank == 1 && w.s.d[0] == C)) {
        if (S->g->n[w.id]->dt == DT_F32)
            diag_error(loc, "%s's weight is one per class, %s, got %s", name, ir_shape_str(&(Shape){1, {C}}),
                       ir_shape_str(&w.s));
        return POISON;
    }
    Val lp = x;
    if (fn == F_CE) {   /* log_softmax over the classes, as the nn.LogSoftmax layer */
        Layer *l = layer_new(LK_SOFTMAX, "", "log_softmax", loc);
        l->op = OP_LOG_SOFTMAX;
        l->dim = 1;
        lp = layer_apply(S, l, x, loc, 0);
    }
    /* torch 1.13: the weights multiply log p_c; a weighted mean over
     * class indices divides by the targets' weights, over probabilities
     * by the rows */
    const Val wlp = w.id >= 0 ? mul(S, lp, w, loc) : lp;
    if (probs) {        /* -sum_c w_c t_c log p_c, smoothed: t (1 - e) + e / C */
        Val tt = smooth > 0 ? affine(S, t, 1 - smooth, smooth / (double)C, loc) : t;
        lp = wlp;
        Val row = make(S, OP_T_SUM, 1, (int[]){mul(S, tt, lp, loc).id}, (Shape){2, {R, 1}}, DT_F32, loc);
        if (row.id >= 0)
            S->g->n[row.id]->ten.axes = 2;
        return reduce(S, affine(S, layer_view(S, row, (Shape){1, {R}}, loc), -1, 0, loc), red,
                      POISON, loc);
    }
    /* the targets as i64 once: the gather's index and a multi-task metric's */
    const Val ti = tdt == DT_I64 ? t : make(S, OP_T_TO_I64, 1, &t.id, t.s, DT_I64, loc);
    Val idx = ti, valid = POISON;
    if (has_ignore) {   /* an ignored target is read nowhere: its index becomes 0, its loss 0 */
        valid = make(S, OP_T_NEC, 1, &t.id, t.s, DT_BOOL, loc);
        if (valid.id >= 0)
            S->g->n[valid.id]->ten.lo = (double)ignore;
        idx = make(S, OP_T_KEEP_IF, 2, (int[]){idx.id, valid.id}, t.s, DT_I64, loc);
        if (idx.id >= 0)
            S->g->n[idx.id]->ten.lo = 0;
        valid = make(S, OP_T_TO_F32, 1, &valid.id, t.s, DT_F32, loc);
    }
    const int k = column_of(S, t.id);
    if (k >= 0 && S->g->mt_class_out < 0) {     /* a multi-task model's metric: the first class head */
        S->g->mt_class_out = x.id;
        S->g->mt_class_t = ti.id;
    }
    if (k >= 0 && !S->g->target_classes[k])
        S->g->target_classes[k] = (int)C;
    if (k >= 0 && S->g->target_classes[k] != C) {
        diag_error(loc, "%s: target %d's classes were counted %d by an earlier loss, here %lld", name, k,
                   S->g->target_classes[k], (long long)C);
        return POISON;
    }
    const Shape col = {2, {R, 1}};
    Val picked = make(S, OP_T_GATHER, 2, (int[]){wlp.id, layer_view(S, idx, col, loc).id}, col, DT_F32, loc);
    if (picked.id >= 0)
        S->g->n[picked.id]->ten.axis = 1;
    Val l = affine(S, layer_view(S, picked, t.s, loc), -1, 0, loc);
    Val count = valid;
    if (w.id >= 0) {    /* w[y], a lookup of the weights as an embedding's rows [C, 1] */
        Val wy = make(S, OP_T_EMBED, 2, (int[]){layer_view(S, w, (Shape){2, {C, 1}}, loc).id, idx.id}, col, DT_F32,
                      loc);
        if (wy.id >= 0)
            S->g->n[wy.id]->ten.lo = -1;
        wy = layer_view(S, wy, t.s, loc);
        count = has_ignore ? mul(S, wy, valid, loc) : wy;
    }
    if (smooth > 0) {   /* (1 - e) nll + e mean_c(-w_c log p_c) */
        Val all = make(S, OP_T_SUM, 1, &wlp.id, col, DT_F32, loc);
        if (all.id >= 0)
            S->g->n[all.id]->ten.axes = 2;
        l = add(S, affine(S, l, 1 - smooth, 0, loc), affine(S, layer_view(S, all, t.s, loc), -smooth / (double)C, 0,
                                                              loc), loc);
    }
    if (has_ignore)
        l = mul(S, l, valid, loc);
    return reduce(S, l, red, count, loc);
}

/* the elementwise losses of an input and a target of one shape */
static Val pointwise_loss(Sema *S, int fn, Val x, Val t, int red, double delta, Val weight, Val pos_weight,
                          const char *name, Loc loc)
{
    if (!float_tensor(S, x, name, "input", loc) || !float_tensor(S, t, name, "target", loc)
        || !same_shape(x, t, name, loc))
        return POISON;
    if (column_of(S, t.id) >= 0 && S->g->mt_reg_out < 0) {    /* a multi-task model's metric: the first float head */
        S->g->mt_reg_out = x.id;
        S->g->mt_reg_t = t.id;
    }
    Val l;
    if (pos_weight.id >= 0) {
        /* torch 1.13: (1 - t) x + (1 + (p - 1) t) softplus(-x), p broadcast
         * over the outputs; log(1 + exp(-x)) as max(-x, 0) + log(1 + exp(-|x|))
         * (log_sigmoid's form: no overflow) */
        Val pm1 = affine(S, pos_weight, 1, -1, loc);
        Val lw = affine(S, mul(S, pm1, t, loc), 1, 1, loc);
        Val nx = affine(S, x, -1, 0, loc);
        Val ax = tfn_unary(S, OP_T_ABS, x, 0, 0, loc);
        Val sp = add(S, tfn_unary(S, OP_T_CLAMP, nx, 0, INFINITY, loc),
                     tfn_unary(S, OP_T_LOG, affine(S, tfn_unary(S, OP_T_EXP, affine(S, ax, -1, 0, loc), 0, 0, loc),
                                                     1, 1, loc), 0, 0, loc), loc);
        l = add(S, mul(S, affine(S, t, -1, 1, loc), x, loc), mul(S, lw, sp, loc), loc);
        if (weight.id >= 0)
            l = mul(S, l, weight, loc);
    } else if (fn == F_BCE || fn == F_BCE_LOGITS) {
        l = make(S, fn == F_BCE ? OP_T_BCE : OP_T_BCE_LOGITS, 2, (int[]){x.id, t.id}, x.s, DT_F32, loc);
        if (weight.id >= 0)
            l = mul(S, l, weight, loc);
    } else {
        Val d = meth_broadcast(S, OP_BC_SUB, x, t, "-", loc);
        if (fn == F_MSE) {
            l = mul(S, d, d, loc);
        } else if (fn == F_L1 || (fn == F_SMOOTH_L1 && delta == 0)) {   /* beta 0 is l1_loss, as torch's */
            l = tfn_unary(S, OP_T_ABS, d, 0, 0, loc);
        } else {
            /* huber: 0.5 m^2 + delta (|d| - m), m = min(|d|, delta), which is
             * 0.5 d^2 inside delta and delta (|d| - delta / 2) outside;
             * smooth_l1 with beta is huber with delta = beta, over beta */
            Val a = tfn_unary(S, OP_T_ABS, d, 0, 0, loc), m = tfn_unary(S, OP_T_CLAMP, a, 0, delta, loc);
            l = add(S, affine(S, mul(S, m, m, loc), 0.5, 0, loc),
                    affine(S, meth_broadcast(S, OP_BC_SUB, a, m, "-", loc), delta, 0, loc), loc);
            if (fn == F_SMOOTH_L1)
                l = affine(S, l, 1 / delta, 0, loc);
        }
    }
    return reduce(S, l, red, POISON, loc);
}

/* reduction = 'mean' | 'sum' | 'none' (a string, as torch's, or a name) */
static int reduction(const Expr *e, int *red)
{
    static const char *const reds[] = {"mean", "sum", "none"};  /* Reduction order */
    if (e->kind == E_STR || e->kind == E_NAME)
        for (int k = 0; k < 3; k++)
            if (strcmp(e->s, reds[k]) == 0) {
                *red = k;
                return 1;
            }
    diag_error(e->loc, "reduction must be 'mean', 'sum' or 'none', got %s", arg_show(e));
    return 0;
}

Val lfn_call(Sema *S, const Expr *e)
{
    /* torch 1.13's parameters, in its order */
    static const char *const class_names[] = {"input", "target", "weight", "size_average", "ignore_index", "reduce",
                                              "reduction", "label_smoothing"};
    static const char *const plain_names[] = {"input", "target", "size_average", "reduce", "reduction", "beta"};
    static const char *const huber_names[] = {"input", "target", "reduction", "delta"};
    static const char *const bce_names[] = {"input", "target", "weight", "size_average", "reduce", "reduction",
                                            "pos_weight"};
    const int fn = fns[find(e->s)].fn;
    const char *name = e->s;
    Sig sig;
    if (fn == F_CE || fn == F_NLL)
        sig = (Sig){name, class_names, fn == F_CE ? 8 : 7, 2, 2};
    else if (fn == F_HUBER)
        sig = (Sig){name, huber_names, 4, 2, 2};
    else if (fn == F_BCE || fn == F_BCE_LOGITS)
        sig = (Sig){name, bce_names, fn == F_BCE ? 6 : 7, 2, 2};
    else
        sig = (Sig){name, plain_names, fn == F_SMOOTH_L1 ? 6 : 5, 2, 2};
    Expr *a[8] = {0};
    if (!arg_bind(e, &sig, a))
        return POISON;
    Expr *size_average = NULL, *reduce_ = NULL, *red_e = NULL, *weight = NULL, *pos_weight = NULL;
    for (int k = 0; k < sig.n; k++) {
        const char *p = sig.names[k];
        if (!a[k])
            continue;
        if (strcmp(p, "size_average") == 0)
            size_average = a[k];
        else if (strcmp(p, "reduce") == 0)
            reduce_ = a[k];
        else if (strcmp(p, "reduction") == 0)
            red_e = a[k];
        else if (strcmp(p, "weight") == 0)
            weight = a[k];
        else if (strcmp(p, "pos_weight") == 0)
            pos_weight = a[k];
    }
    if (size_average || reduce_) {
        const Expr *d = size_average ? size_average : reduce_;
        diag_error(d->loc, "%s: size_average and reduce are deprecated in PyTorch; say reduction = 'mean', 'sum' or "
                   "'none'", name);
        return POISON;
    }
    int red = RED_MEAN;
    if (red_e && !reduction(red_e, &red))
        return POISON;
    Val x = S->eval(S, a[0]), t = S->eval(S, a[1]);
    if (fn == F_CE || fn == F_NLL) {
        double smooth = 0;
        int64_t ignore = -100;
        Val w = weight ? S->eval(S, weight) : POISON;
        if (weight && w.id < 0)
            return POISON;
        if (a[7] && !(arg_num(a[7], "label_smoothing", &smooth) && smooth >= 0 && smooth <= 1)) {
            if (arg_const(a[7], &smooth) == 1)
                diag_error(a[7]->loc, "label_smoothing must be in [0, 1], got %s", arg_show(a[7]));
            return POISON;
        }
        if (a[4] && !arg_int(a[4], "ignore_index", INT32_MIN, INT32_MAX, &ignore))
            return POISON;
        /* torch's default ignore_index (-100) matches no class index, so
         * only one the file gives masks anything */
        return class_loss(S, fn, x, t, w, red, smooth, a[4] != NULL, ignore, name, e->loc);
    }
    double delta = 1;
    const Expr *de = fn == F_HUBER ? a[3] : fn == F_SMOOTH_L1 ? a[5] : NULL;
    if (de && !(arg_num(de, fn == F_HUBER ? "delta" : "beta", &delta) && delta >= 0 && (fn != F_HUBER || delta > 0))) {
        if (arg_const(de, &delta) == 1)
            diag_error(de->loc, "%s must be %s, got %s", fn == F_HUBER ? "delta" : "beta",
                       fn == F_HUBER ? "positive" : "at least 0", arg_show(de));
        return POISON;
    }
    Val w = weight ? S->eval(S, weight) : POISON, pw = pos_weight ? S->eval(S, pos_weight) : POISON;
    if ((weight && (w.id < 0 || !float_tensor(S, w, name, "weight", weight->loc)))
        || (pos_weight && (pw.id < 0 || !float_tensor(S, pw, name, "pos_weight", pos_weight->loc))))
        return POISON;
    return pointwise_loss(S, fn, x, t, red, delta, w, pw, name, e->loc);
}
