/* tensor_ints.c: integer and boolean tensors in forward, as PyTorch
 * spells them: constant tensors (torch.ones, zeros, full, arange, tril,
 * triu, the _like forms, torch.tensor of a list; a model's buffers), comparisons and logic
 * (x > 0, ==, &, |, ~, torch.eq ..., logical_and / or / not), selections
 * by a mask (torch.where, masked_fill), indices (argmax, argmin, max / min
 * with a dim, gather, index_select, x[:, idx]) and conversions (.float(),
 * .long(), .bool(), .to(dtype)).
 *
 * Their values are exact integers in float slots (cddpc.h: DT_I64,
 * DT_BOOL), so they run in the same kernels as the rest and fuse with
 * them: x.masked_fill(mask == 0, float('-inf')) is one pass. The dtype of
 * each result is PyTorch's promotion (tensor.c: ten_dtype); a mask or an
 * index carries no gradient, the values it selects do. */
#include <math.h>
#include <string.h>

#include "sema.h"

static const char *fname(const Expr *e) { return e->written ? e->written : e->s; }

static DType dtype(const Sema *S, Val v) { return v.id >= 0 ? S->g->n[v.id]->dt : DT_F32; }

/* op over in[0..nin) with result shape s: its dtype from the operands
 * (given: for the ops with constants of their own) */
static Val make(Sema *S, Op op, int nin, const int *in, Shape s, DType given, Loc loc)
{
    for (int k = 0; k < nin; k++)
        if (in[k] < 0)
            return POISON;
    return (Val){ir_add(S->g, op, nin, in, s, ten_dtype(S->g, op, nin, in, given), loc), s};
}

static Val make1(Sema *S, Op op, Val x, double lo, DType given, Loc loc)
{
    Val y = make(S, op, 1, &x.id, x.s, given, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.lo = lo;
    return y;
}

static int broadcast(Val a, Val b, Shape *s, const char *what, Loc loc)
{
    if (a.id < 0 || b.id < 0)
        return 0;
    if (ten_broadcast(&a.s, &b.s, s))
        return 1;
    diag_error(loc, "%s of shapes that do not broadcast: %s and %s", what, ir_shape_str(&a.s), ir_shape_str(&b.s));
    return 0;
}

/* A constant argument that may be infinite (a mask's fill); 0 after reporting. */
static int fill_value(const Expr *e, const char *fn, double *v)
{
    const int r = arg_const(e, v);
    if (r == 0)
        diag_error(e->loc, "%s's value must be a number here (a tensor value is not supported)", fn);
    return r == 1 && (isinf(*v) || arg_float32(e->loc, "the value", *v));
}

/* Whether a constant is an integer as Python has it (arange(5) is an i64
 * tensor, arange(5.0) a float one); a tensor's size is */
static int int_written(const Expr *e)
{
    double v;
    int is_int;
    return arg_number(e, &v, &is_int) == 1 && is_int;
}

/* ---- dtypes ------------------------------------------------------------ */

/* dtype = torch.long, torch.bool, torch.float32, ...: 1 and *t, or 0 after reporting */
static int dtype_arg(const Expr *e, DType *t)
{
    static const struct {
        const char *name;
        DType t;
    } names[] = {{"float", DT_F32}, {"float32", DT_F32}, {"long", DT_I64}, {"int64", DT_I64}, {"bool", DT_BOOL}};
    const char *s = e->kind == E_NAME ? e->s : "";
    s += strncmp(s, "torch.", 6) == 0 ? 6 : 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(names[i].name, s) == 0) {
            *t = names[i].t;
            return 1;
        }
    diag_error(e->loc, "dtype %s is not supported (torch.float32, torch.long and torch.bool are; values are f32, "
               "indices i64)", arg_show(e));
    return 0;
}

static Val convert(Sema *S, Val x, DType t, Loc loc)
{
    if (x.id < 0 || dtype(S, x) == t)
        return x;
    return make1(S, t == DT_F32 ? OP_T_TO_F32 : t == DT_I64 ? OP_T_TO_I64 : OP_T_TO_BOOL, x, 0, t, loc);
}

/* x.float(), x.long(), x.int() (an i64 here), x.bool(), x.to(dtype); x.to(device) is x */
static Val call_convert(Sema *S, const Expr *e)
{
    if (e->nargs < 1 || e->args[0]->key) {
        diag_error(e->loc, "%s is a tensor method here (x.%s())", fname(e), e->s);
        return POISON;
    }
    Val x = S->eval(S, e->args[0]->val);
    DType t = e->s[0] == 'f' ? DT_F32 : e->s[0] == 'b' ? DT_BOOL : DT_I64;
    if (strcmp(e->s, "to") == 0) {
        const Expr *d = NULL;
        for (int k = 1; k < e->nargs; k++)
            if (!e->args[k]->key || strcmp(e->args[k]->key, "dtype") == 0)
                d = e->args[k]->val;
        if (d && d->kind == E_NAME && (strstr(d->s, "device") || strcmp(d->s, "torch.device") == 0))
            return x;       /* one device: the program's */
        if (!d) {
            diag_error(e->loc, "%s needs a dtype here (torch.float32, torch.long, torch.bool)", fname(e));
            return POISON;
        }
        if (!dtype_arg(d, &t))
            return POISON;
    } else if (e->nargs != 1) {
        diag_error(e->loc, "%s takes no arguments", fname(e));
        return POISON;
    }
    return convert(S, x, t, e->loc);
}

/* ---- constants ----------------------------------------------------------- */

/* torch.ones(T, T), torch.zeros((2, 3)), torch.full((T, T), v): the sizes
 * from args [from, n) (one tuple, or each), x.size(0) giving the batch */
static int sizes(Sema *S, const Expr *e, int from, int n, Shape *s)
{
    const Expr *v[MAX_RANK];
    int cnt = n - from;
    if (cnt == 1 && e->args[from]->val->kind == E_TUPLE) {
        const Expr *t = e->args[from]->val;
        cnt = t->nargs;
        for (int k = 0; k < cnt && k < MAX_RANK; k++)
            v[k] = t->args[k]->val;
    } else {
        for (int k = 0; k < cnt && k < MAX_RANK; k++)
            v[k] = e->args[from + k]->val;
    }
    if (cnt < 1 || cnt > MAX_RANK) {
        diag_error(e->loc, "%s takes 1 to %d sizes, got %d", fname(e), MAX_RANK, cnt);
        return 0;
    }
    s->rank = cnt;
    int batch = 0;
    for (int k = 0; k < cnt; k++) {
        if (!layer_size(S, v[k], &s->d[k]))
            return 0;
        if (s->d[k] == -2) {
            diag_error(v[k]->loc, "%s's sizes must be known (-1 is view's)", fname(e));
            return 0;
        }
        if (s->d[k] == DIM_N && batch++) {
            diag_error(v[k]->loc, "%s: the batch's size twice", fname(e));
            return 0;
        }
    }
    if (ir_row_elems(s) > MAX_DIM) {
        diag_error(e->loc, "%s of %s is too large (the limit is %d elements per sample)", fname(e),
                   ir_shape_str(s), MAX_DIM);
        return 0;
    }
    return 1;
}

static Val full(Sema *S, Shape s, double v, DType t, Loc loc)
{
    Val y = make(S, OP_T_FULL, 0, NULL, s, t, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.lo = v;
    return y;
}

/* the positional sizes and the keywords (dtype, device, requires_grad) of
 * ones / zeros / full; *nsize: the sizes' count */
static int split_keywords(const Expr *e, int npos_extra, int *nsize, DType *t)
{
    int n = 0;
    for (int k = 0; k < e->nargs; k++) {
        const Arg *a = e->args[k];
        if (!a->key) {
            if (n != k) {
                diag_error(a->val->loc, "%s: a positional argument after a keyword one", fname(e));
                return 0;
            }
            n++;
        } else if (strcmp(a->key, "dtype") == 0) {
            if (!dtype_arg(a->val, t))
                return 0;
        } else if (strcmp(a->key, "device") != 0 && strcmp(a->key, "requires_grad") != 0) {
            diag_error(a->key_loc, "%s has no argument '%s' here (dtype and device are taken)", fname(e), a->key);
            return 0;
        }
    }
    *nsize = n - npos_extra;
    if (*nsize < 1) {
        diag_error(e->loc, "%s needs its sizes", fname(e));
        return 0;
    }
    return 1;
}

/* torch.ones(2, 3), torch.zeros((T, T), dtype = torch.long), torch.full((T, T), v):
 * ones and zeros are floats; full takes its value's type (3 an i64, True
 * a bool), as PyTorch; dtype = ... overrides */
static Val call_full(Sema *S, const Expr *e)
{
    const int is_full = strcmp(e->s, "full") == 0;
    DType t = (DType)-1;
    int n;
    Shape s;
    if (!split_keywords(e, is_full, &n, &t) || !sizes(S, e, 0, n, &s))
        return POISON;
    double v = e->s[0] == 'o';
    if (is_full) {
        const Expr *fv = e->args[n]->val;
        if (!fill_value(fv, fname(e), &v))
            return POISON;
        if ((int)t < 0)
            t = fv->kind == E_BOOL ? DT_BOOL : int_written(fv) ? DT_I64 : DT_F32;
        if (t != DT_F32 && v != floor(v)) {
            diag_error(fv->loc, "%s of %g as %s", fname(e), v, ir_dtype_text(t));
            return POISON;
        }
    }
    return full(S, s, t == DT_BOOL ? v != 0 : v, (int)t < 0 ? DT_F32 : t, e->loc);
}

/* The numbers of a nested list appended to *v (row-major, *nv of them,
 * room for *cap), its shape into s at depth d; 0 after reporting a ragged
 * or non-numeric one. *ints: all are written as Python ints; *bools: all
 * are True / False. */
static int table_values(const Expr *e, int d, Shape *s, double **v, int64_t *nv, int64_t *cap, int *ints,
                        int *bools)
{
    if (e->kind != E_TUPLE) {
        if (d < s->rank) {
            diag_error(e->loc, "torch.tensor: a number where a list of %lld is expected (the rows must be alike)",
                       (long long)s->d[d]);
            return 0;
        }
        double x;
        if (e->kind == E_BOOL) {
            x = e->i != 0;
        } else {
            const int r = arg_const(e, &x);
            if (r == 1 && !isfinite(x))
                diag_error(e->loc, "torch.tensor's values must be finite, got %s", arg_show(e));
            if (r == 0)
                diag_error(e->loc, "torch.tensor's values must be numbers, got %s", arg_show(e));
            if (r != 1 || !isfinite(x) || !arg_float32(e->loc, "the value", x))
                return 0;
        }
        *ints = *ints && e->kind != E_BOOL && int_written(e);
        *bools = *bools && e->kind == E_BOOL;
        if (*nv >= TABLE_MAX) {
            diag_error(e->loc, "torch.tensor of more than %d values (they are the kernels' text)", TABLE_MAX);
            return 0;
        }
        if (*nv == *cap) {
            const int64_t c = *cap ? 2 * *cap : 16;
            *v = util_grow(*v, sizeof **v * (size_t)*cap, sizeof **v * (size_t)c);
            *cap = c;
        }
        (*v)[(*nv)++] = x;
        return 1;
    }
    if (d == s->rank) {     /* the first list at this depth sets its length */
        if (d == MAX_RANK || e->nargs == 0) {
            diag_error(e->loc, e->nargs ? "torch.tensor of more than %d dimensions" : "torch.tensor of an empty list",
                       MAX_RANK);
            return 0;
        }
        s->d[s->rank++] = e->nargs;
    } else if (d > s->rank || s->d[d] != e->nargs) {
        diag_error(e->loc, "torch.tensor: a list of %d where %s is expected (the rows must be alike)", e->nargs,
                   d < s->rank ? util_fmt("one of %lld", (long long)s->d[d]) : "a number");
        return 0;
    }
    for (int k = 0; k < e->nargs; k++)
        if (!table_values(e->args[k]->val, d + 1, s, v, nv, cap, ints, bools))
            return 0;
    return 1;
}

/* torch.tensor([0.2, 1.0, 3.0]), torch.tensor([[1, 0], [0, 1]], dtype = ...):
 * a constant of the file's numbers (class weights, a loss's pos_weight, a
 * buffer's values), its dtype PyTorch's: i64 when every value is an int,
 * bool when every one is True / False, else f32 */
static Val call_tensor(Sema *S, const Expr *e)
{
    DType t = (DType)-1;
    int n;
    if (!split_keywords(e, 0, &n, &t))
        return POISON;
    if (n != 1) {
        diag_error(e->loc, "torch.tensor takes one list of numbers (and dtype), got %d values", n);
        return POISON;
    }
    double *v = NULL;
    int64_t nv = 0, cap = 0;
    int ints = 1, bools = 1;
    Shape s = {0};
    if (!table_values(e->args[0]->val, 0, &s, &v, &nv, &cap, &ints, &bools))
        return POISON;
    if ((int)t < 0)
        t = bools ? DT_BOOL : ints ? DT_I64 : DT_F32;
    for (int64_t k = 0; k < nv; k++) {
        if (t != DT_F32 && v[k] != floor(v[k])) {
            diag_error(e->loc, "torch.tensor: %g is not a whole number, so not an %s", v[k], ir_dtype_text(t));
            return POISON;
        }
        if (t == DT_BOOL)
            v[k] = v[k] != 0;
    }
    Val y = make(S, OP_T_TABLE, 0, NULL, s, t, e->loc);
    if (y.id >= 0) {
        S->g->n[y.id]->ten.table = v;
        S->g->n[y.id]->ten.ntable = nv;
    }
    return y;
}

/* torch.ones_like(x), zeros_like, full_like(x, v): x's shape, x's dtype */
static Val call_full_like(Sema *S, const Expr *e)
{
    const int is_full = strcmp(e->s, "full_like") == 0;
    if (e->nargs < 1 + is_full) {
        diag_error(e->loc, "%s takes a tensor%s", fname(e), is_full ? " and a value" : "");
        return POISON;
    }
    Val x = S->eval(S, e->args[0]->val);
    DType t = dtype(S, x);
    double v = e->s[0] == 'o';
    for (int k = 1; k < e->nargs; k++)
        if (e->args[k]->key && strcmp(e->args[k]->key, "dtype") == 0 && !dtype_arg(e->args[k]->val, &t))
            return POISON;
    if (is_full && !fill_value(e->args[1]->val, fname(e), &v))
        return POISON;
    return x.id < 0 ? x : full(S, x.s, v, t, e->loc);
}

/* torch.randn_like(x), rand_like(x), randn(N, k), rand(...): float noise
 * from the dropouts' counter-based streams (dropout_rng.h), this call
 * site's own: the same on both targets, independent across ranks and
 * steps, the same after --resume */
static Val call_noise(Sema *S, const Expr *e)
{
    const int like = strstr(e->s, "_like") != NULL, normal = strncmp(e->s, "randn", 5) == 0;
    DType t = DT_F32;
    Shape s;
    if (like) {
        if (e->nargs < 1 || e->args[0]->key) {
            diag_error(e->loc, "%s takes a tensor", fname(e));
            return POISON;
        }
        for (int k = 1; k < e->nargs; k++)
            if (!e->args[k]->key || (strcmp(e->args[k]->key, "dtype") == 0 ? !dtype_arg(e->args[k]->val, &t)
                                     : strcmp(e->args[k]->key, "device") != 0)) {
                diag_error(e->args[k]->val->loc, "%s takes a tensor (and dtype, device)", fname(e));
                return POISON;
            }
        Val x = S->eval(S, e->args[0]->val);
        if (x.id < 0)
            return x;
        s = x.s;
    } else {
        int n;
        if (!split_keywords(e, 0, &n, &t) || !sizes(S, e, 0, n, &s))
            return POISON;
    }
    if (t != DT_F32) {
        diag_error(e->loc, "%s gives floats, not %s", fname(e), ir_dtype_text(t));
        return POISON;
    }
    Val y = make(S, normal ? OP_T_RANDN : OP_T_RAND, 0, NULL, s, DT_F32, e->loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.key = S->g->ndropout++;
    return y;
}

/* torch.arange(end), arange(start, end[, step]): an i64 when all are
 * integers, as PyTorch; every value exact in a float (below 2^24) */
static Val call_arange(Sema *S, const Expr *e)
{
    double v[3] = {0, 0, 1};
    int n = 0, ints = 1;
    DType t = DT_I64;
    for (int k = 0; k < e->nargs; k++) {
        const Arg *a = e->args[k];
        if (a->key && strcmp(a->key, "dtype") == 0) {
            if (!dtype_arg(a->val, &t))
                return POISON;
            ints = ints && t != DT_F32;
            continue;
        }
        if (a->key && strcmp(a->key, "device") == 0)
            continue;
        if (a->key || n == 3) {
            diag_error(a->val->loc, "%s takes start, end and step", fname(e));
            return POISON;
        }
        int64_t sz;
        if (a->val->kind == E_CALL && strcmp(a->val->s, "size") == 0) {
            if (!layer_size(S, a->val, &sz))
                return POISON;
            if (sz == DIM_N) {
                diag_error(a->val->loc, "%s of the batch's size is not supported (a sample's values cannot "
                           "depend on its batch)", fname(e));
                return POISON;
            }
            v[n++] = (double)sz;
            continue;
        }
        if (arg_const(a->val, &v[n]) != 1) {
            diag_error(a->val->loc, "%s's bounds must be numbers", fname(e));
            return POISON;
        }
        ints = ints && int_written(a->val);
        n++;
    }
    if (n == 0) {
        diag_error(e->loc, "%s needs an end", fname(e));
        return POISON;
    }
    if (n == 1)
        v[1] = v[0], v[0] = 0;
    if (v[2] == 0) {
        diag_error(e->loc, "%s with step 0", fname(e));
        return POISON;
    }
    const double len = ceil((v[1] - v[0]) / v[2]);
    if (!(len >= 1) || len > MAX_DIM) {
        diag_error(e->loc, "%s(%g, %g, %g) has %s values", fname(e), v[0], v[1], v[2], len < 1 ? "no" : "too many");
        return POISON;
    }
    if (fabs(v[0]) > MAX_DIM || fabs(v[1]) > MAX_DIM) {
        diag_error(e->loc, "%s's bounds must be within 2^24 here (integer values are exact in a float there)",
                   fname(e));
        return POISON;
    }
    Val y = make(S, OP_T_ARANGE, 0, NULL, shape1((int64_t)len), ints ? t : DT_F32, e->loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.lo = v[0], S->g->n[y.id]->ten.hi = v[2];
    return y;
}

/* torch.tril(x, diagonal = 0), triu: the last two dimensions a matrix */
static Val call_tri(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "diagonal"};
    const Sig sig = {fname(e), names, 2, 2, 1};
    Expr *a[2];
    int64_t k = 0;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if ((a[1] && !arg_int(a[1], "the diagonal", -MAX_DIM, MAX_DIM, &k)) || x.id < 0)
        return POISON;
    if (x.s.rank < 2 || IR_IS_BATCH(x.s.d[x.s.rank - 1]) || IR_IS_BATCH(x.s.d[x.s.rank - 2])) {
        diag_error(e->loc, "%s needs a matrix in the last two dimensions (not the batch's), got %s", fname(e),
                   ir_shape_str(&x.s));
        return POISON;
    }
    return make1(S, e->s[3] == 'l' ? OP_T_TRIL : OP_T_TRIU, x, (double)k, dtype(S, x), e->loc);
}

/* ---- comparisons and logic --------------------------------------------- */

static Op compare_op(int c, int with_const)
{
    static const Op two[] = {OP_T_GT, OP_T_GE, OP_T_LT, OP_T_LE, OP_T_EQ, OP_T_NE};
    static const Op one[] = {OP_T_GTC, OP_T_GEC, OP_T_LTC, OP_T_LEC, OP_T_EQC, OP_T_NEC};
    const int k = c == '>' ? 0 : c == 'G' ? 1 : c == '<' ? 2 : c == 'L' ? 3 : c == '=' ? 4 : 5;
    return with_const ? one[k] : two[k];
}

/* the comparison read from the other side: 0 < x is x > 0 */
static int mirrored(int c) { return c == '>' ? '<' : c == '<' ? '>' : c == 'G' ? 'L' : c == 'L' ? 'G' : c; }

static const char *cmp_text(int c)
{
    return c == '>' ? ">" : c == 'G' ? ">=" : c == '<' ? "<" : c == 'L' ? "<=" : c == '=' ? "==" : "!=";
}

/* a c b, c one of '>', 'G' (>=), '<', 'L' (<=), '=' (==), '!' (!=):
 * tensors broadcast, or a tensor and a number */
static Val compare(Sema *S, const Expr *ea, int c, const Expr *eb, Loc loc)
{
    double ka, kb;
    const int ra = arg_const(ea, &ka), rb = arg_const(eb, &kb);
    if (ra < 0 || rb < 0)
        return POISON;
    if (ra == 1 && rb == 1) {
        diag_error(loc, "a comparison of two numbers is not a tensor (%s)", arg_show(ea));
        return POISON;
    }
    if (ra == 1 || rb == 1) {
        Val x = S->eval(S, ra == 1 ? eb : ea);
        return x.id < 0 ? x : make1(S, compare_op(ra == 1 ? mirrored(c) : c, 1), x, ra == 1 ? ka : kb, DT_BOOL, loc);
    }
    Val a = S->eval(S, ea), b = S->eval(S, eb);
    Shape s;
    if (!broadcast(a, b, &s, util_fmt("'%s'", cmp_text(c)), loc))
        return POISON;
    return make(S, compare_op(c, 0), 2, (int[]){a.id, b.id}, s, DT_BOOL, loc);
}

Val tint_compare(Sema *S, const Expr *e) { return compare(S, e->a, (int)e->i, e->b, e->loc); }

/* a & b, a | b of booleans (torch's & of integers is bitwise: refused) */
static Val logic(Sema *S, Op op, Val a, Val b, const char *what, Loc loc)
{
    Shape s;
    if (!broadcast(a, b, &s, what, loc))
        return POISON;
    return make(S, op, 2, (int[]){a.id, b.id}, s, DT_BOOL, loc);
}

static int boolean(Sema *S, Val x, const char *what, Loc loc)
{
    if (x.id < 0 || dtype(S, x) == DT_BOOL)
        return x.id >= 0;
    diag_error(loc, "%s of a %s tensor is bitwise in PyTorch, not supported; compare first (x != 0) or use "
               "torch.logical_%s", what, ir_dtype_text(dtype(S, x)), what[1] == '&' ? "and" : what[1] == '|' ? "or"
               : "not");
    return 0;
}

Val tint_logic(Sema *S, const Expr *e)
{
    const char *what = e->kind == E_AND ? "'&'" : e->kind == E_OR ? "'|'" : "'~'";
    Val a = S->eval(S, e->a), b = e->kind == E_NOT ? a : S->eval(S, e->b);
    if (!boolean(S, a, what, e->loc) || !boolean(S, b, what, e->loc))
        return POISON;
    if (e->kind == E_NOT)
        return make1(S, OP_T_EQC, a, 0, DT_BOOL, e->loc);
    return logic(S, e->kind == E_AND ? OP_T_AND : OP_T_OR, a, b, what, e->loc);
}

/* torch.eq(a, b), x.gt(0), torch.logical_and(a, b), logical_not(x) */
static Val call_compare(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "other"};
    const int unary = strcmp(e->s, "logical_not") == 0;
    const Sig sig = {fname(e), names, 2 - unary, 2 - unary, 2 - unary};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    if (unary) {
        Val x = S->eval(S, a[0]);
        return x.id < 0 ? x : make1(S, OP_T_EQC, x, 0, DT_BOOL, e->loc);
    }
    if (strncmp(e->s, "logical_", 8) == 0) {
        Val x = S->eval(S, a[0]), y = S->eval(S, a[1]);
        return logic(S, e->s[8] == 'a' ? OP_T_AND : OP_T_OR, x, y, fname(e), e->loc);
    }
    static const char *const ops[] = {"gt", "ge", "lt", "le", "eq", "ne"};
    static const char codes[] = {'>', 'G', '<', 'L', '=', '!'};
    for (int k = 0; k < 6; k++)
        if (strcmp(ops[k], e->s) == 0)
            return compare(S, a[0], codes[k], a[1], e->loc);
    diag_ice("tensor_ints: %s", e->s);
}

/* ---- selections by a mask ---------------------------------------------- */

static int mask_arg(Sema *S, Val m, const Expr *e, const char *fn)
{
    if (m.id < 0 || dtype(S, m) == DT_BOOL)
        return m.id >= 0;
    diag_error(e->loc, "%s's mask must be a bool tensor (a comparison), got %s; compare it (mask != 0)", fn,
               ir_dtype_text(dtype(S, m)));
    return 0;
}

/* torch.where(c, x, y): x where c holds, else y; a number on either side */
static Val call_where(Sema *S, const Expr *e)
{
    static const char *const names[] = {"condition", "input", "other"};
    const Sig sig = {fname(e), names, 3, 3, 1};
    Expr *a[3];
    if (!arg_bind(e, &sig, a))
        return POISON;
    if (!a[1] || !a[2]) {
        diag_error(e->loc, "%s(condition) alone gives the indices where it holds, a shape that depends on the data: "
                   "not supported (give where(c, x, y))", fname(e));
        return POISON;
    }
    Val c = S->eval(S, a[0]);
    if (!mask_arg(S, c, a[0], fname(e)))
        return POISON;
    double kx, ky;
    const int rx = arg_const(a[1], &kx), ry = arg_const(a[2], &ky);
    if (rx < 0 || ry < 0)
        return POISON;
    Shape s;
    if (rx == 1 && ry == 1) {   /* c * (x - y) + y, exact for 0/1 */
        if (!arg_float32(a[1]->loc, "the value", kx) || !arg_float32(a[2]->loc, "the value", ky))
            return POISON;
        Val f = convert(S, c, DT_F32, e->loc);
        Val y = make1(S, OP_T_AFFINE, f, kx - ky, int_written(a[1]) && int_written(a[2]) ? DT_I64 : DT_F32, e->loc);
        if (y.id >= 0)
            S->g->n[y.id]->ten.hi = ky;
        return y;
    }
    if (rx == 1 || ry == 1) {   /* one number: a fill */
        Val x = S->eval(S, rx == 1 ? a[2] : a[1]);
        const double k = rx == 1 ? kx : ky;
        if (!fill_value(rx == 1 ? a[1] : a[2], fname(e), &(double){0}) || !broadcast(x, c, &s, fname(e), e->loc))
            return POISON;
        Val y = make(S, rx == 1 ? OP_T_FILL_IF : OP_T_KEEP_IF, 2, (int[]){x.id, c.id}, s, DT_F32, e->loc);
        if (y.id >= 0)
            S->g->n[y.id]->ten.lo = k;
        return y;
    }
    Val x = S->eval(S, a[1]), y = S->eval(S, a[2]);
    Shape t;
    if (!broadcast(x, y, &t, fname(e), e->loc) || !broadcast((Val){c.id, c.s}, (Val){x.id, t}, &s, fname(e), e->loc))
        return POISON;
    return make(S, OP_T_WHERE, 3, (int[]){c.id, x.id, y.id}, s, DT_F32, e->loc);
}

/* x.masked_fill(mask, value), masked_fill_ (taken as the out-of-place
 * form): x's shape, the mask broadcast to it */
static Val call_masked_fill(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "mask", "value"};
    const Sig sig = {fname(e), names, 3, 3, 3};
    Expr *a[3];
    double v;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]), m = S->eval(S, a[1]);
    if (!mask_arg(S, m, a[1], fname(e)) || !fill_value(a[2], fname(e), &v) || x.id < 0)
        return POISON;
    Shape s;
    if (!ten_broadcast(&m.s, &x.s, &s) || !ir_same_shape(&s, &x.s)) {
        diag_error(a[1]->loc, "%s: the mask %s does not broadcast to the tensor's shape %s", fname(e),
                   ir_shape_str(&m.s), ir_shape_str(&x.s));
        return POISON;
    }
    if (dtype(S, x) != DT_F32 && (isinf(v) || v != floor(v))) {
        diag_error(a[2]->loc, "%s of a %s tensor with %g", fname(e), ir_dtype_text(dtype(S, x)), v);
        return POISON;
    }
    Val y = make(S, OP_T_FILL_IF, 2, (int[]){x.id, m.id}, x.s, DT_F32, e->loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.lo = v;
    return y;
}

/* ---- indices ------------------------------------------------------------- */

/* dim of x for an index op: not the batch's; 0 after reporting */
static int index_dim(const Expr *de, Val x, const char *fn, int *d)
{
    int64_t v;
    if (!arg_int(de, "the dimension", -x.s.rank, x.s.rank - 1, &v))
        return 0;
    *d = (int)(v < 0 ? v + x.s.rank : v);
    if (!IR_IS_BATCH(x.s.d[*d]))
        return 1;
    diag_error(de->loc, "%s over dimension %d, the batch, is not supported: it would mix the samples (and make 2 "
               "ranks differ from 1)", fn, *d);
    return 0;
}

/* argmax over dimension d of x, keeping it as a 1 */
static Val arg_extreme(Sema *S, Op op, Val x, int d, Loc loc)
{
    Val y = make(S, op, 1, &x.id, ten_reduced(&x.s, 1u << d), DT_I64, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.axes = 1u << d;
    return y;
}

static Val gather(Sema *S, Val x, int d, Val idx, Shape s, Loc loc)
{
    Val y = make(S, OP_T_GATHER, 2, (int[]){x.id, idx.id}, s, DT_F32, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.axis = d;
    return y;
}

static int index_arg(Sema *S, Val i, const Expr *e, const char *fn)
{
    if (i.id < 0 || dtype(S, i) == DT_I64)
        return i.id >= 0;
    diag_error(e->loc, "%s's index must be an i64 tensor, got %s%s", fn, ir_dtype_text(dtype(S, i)),
               dtype(S, i) == DT_BOOL ? " (indexing by a mask gives a shape that depends on the data: not supported; "
                                        "masked_fill or torch.where keep the shape)" : " (.long() converts)");
    return 0;
}

/* torch.argmax(x, dim, keepdim = False), x.argmin(dim = 1) */
static Val call_argmax(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "dim", "keepdim"};
    const Sig sig = {fname(e), names, 3, 3, 1};
    Expr *a[3];
    int keep = 0, d;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if ((a[2] && !arg_bool(a[2], "keepdim", &keep)) || x.id < 0)
        return POISON;
    if (!a[1]) {
        diag_error(e->loc, "%s without dim looks at every dimension, the batch's too: name the dimension (dim = 1)",
                   fname(e));
        return POISON;
    }
    if (!index_dim(a[1], x, fname(e), &d))
        return POISON;
    Val y = arg_extreme(S, e->s[3] == 'm' && e->s[4] == 'a' ? OP_T_ARGMAX : OP_T_ARGMIN, x, d, e->loc);
    return keep ? y : layer_view(S, y, ten_dropped(&x.s, 1u << d), e->loc);
}

/* torch.max(x, dim, keepdim): (values, indices), the values gathered at the
 * indices so that the gradient goes to the one element chosen, as torch's */
static int max_pair(Sema *S, const Expr *e, Val out[2])
{
    static const char *const names[] = {"input", "dim", "keepdim"};
    const Sig sig = {fname(e), names, 3, 3, 2};
    Expr *a[3];
    int keep = 0, d;
    if (!arg_bind(e, &sig, a))
        return 0;
    Val x = S->eval(S, a[0]);
    if ((a[2] && !arg_bool(a[2], "keepdim", &keep)) || x.id < 0 || !index_dim(a[1], x, fname(e), &d))
        return 0;
    Val i = arg_extreme(S, strcmp(e->s, "max") == 0 ? OP_T_ARGMAX : OP_T_ARGMIN, x, d, e->loc);
    Val v = gather(S, x, d, i, i.s, e->loc);
    const Shape dropped = ten_dropped(&x.s, 1u << d);
    out[0] = keep ? v : layer_view(S, v, dropped, e->loc);
    out[1] = keep ? i : layer_view(S, i, dropped, e->loc);
    return out[0].id >= 0 && out[1].id >= 0;
}

/* the call is max / min with a dim (a pair of values and indices) */
int tint_is_pair(const Expr *e)
{
    if (e->kind != E_CALL || (strcmp(e->s, "max") != 0 && strcmp(e->s, "min") != 0))
        return 0;
    for (int k = 1; k < e->nargs; k++)
        if (!e->args[k]->key || strcmp(e->args[k]->key, "dim") == 0)
            return 1;
    return 0;
}

int tint_pair(Sema *S, const Expr *e, Val out[2]) { return max_pair(S, e, out); }

/* torch.max(x, dim) without unpacking; torch.max(a, b) of two tensors is
 * torch.maximum; torch.max(x) reduces every dimension (refused) */
static Val call_max(Sema *S, const Expr *e)
{
    const int mx = strcmp(e->s, "max") == 0;
    if (e->nargs == 2 && !e->args[1]->key) {
        double c;
        if (arg_const(e->args[1]->val, &c) == 0) {      /* a tensor: maximum(a, b) */
            Val a = S->eval(S, e->args[0]->val), b = S->eval(S, e->args[1]->val);
            Shape s;
            if (!broadcast(a, b, &s, fname(e), e->loc))
                return POISON;
            return layer_node(S, mx ? OP_T_MAXIMUM : OP_T_MINIMUM, a.id, b.id, s, e->loc);
        }
    }
    if (!tint_is_pair(e) && e->nargs == 1 && !e->args[0]->key) {
        /* x.max(): every dimension, to a 0-d tensor; the batch's only in
         * a loss block or where x has none (methods.c's reductions) */
        Val x = S->eval(S, e->args[0]->val);
        if (x.id >= 0 && (S->in_loss || ten_batch_dim(&x.s) < 0)) {
            const unsigned axes = (1u << x.s.rank) - 1;
            Val y = make(S, mx ? OP_T_AMAX : OP_T_AMIN, 1, &x.id, ten_reduced(&x.s, axes), DT_F32, e->loc);
            if (y.id >= 0)
                S->g->n[y.id]->ten.axes = axes;
            return layer_view(S, y, ten_dropped(&x.s, axes), e->loc);
        }
    }
    if (!tint_is_pair(e)) {
        diag_error(e->loc, "%s without dim reduces every dimension, the batch's too: name the dimension "
                   "(values, indices = %s(x, dim = 1)), or use torch.a%s(x, dim)", fname(e), fname(e), e->s);
        return POISON;
    }
    diag_error(e->loc, "%s(x, dim) gives (values, indices): unpack it (v, i = %s(x, dim = 1)) or take one "
               "(%s(x, dim = 1)[0]); torch.a%s(x, dim) gives the values", fname(e), fname(e), fname(e), e->s);
    return POISON;
}

/* gather's and index_select's (input, dim, index): x, the index i and the
 * dimension d; 0 after reporting. at: the index's expression. */
static int index_call(Sema *S, const Expr *e, Val *x, Val *i, int *d, const Expr **at)
{
    static const char *const names[] = {"input", "dim", "index"};
    const Sig sig = {fname(e), names, 3, 3, 3};
    Expr *a[3];
    if (!arg_bind(e, &sig, a))
        return 0;
    *x = S->eval(S, a[0]), *i = S->eval(S, a[2]), *at = a[2];
    return x->id >= 0 && index_arg(S, *i, a[2], fname(e)) && index_dim(a[1], *x, fname(e), d);
}

/* torch.gather(x, dim, index): index i64 of x's rank, the result its shape */
static Val call_gather(Sema *S, const Expr *e)
{
    Val x, i;
    int d;
    const Expr *at;
    if (!index_call(S, e, &x, &i, &d, &at))
        return POISON;
    if (i.s.rank != x.s.rank) {
        diag_error(at->loc, "%s: the index %s and the tensor %s differ in rank", fname(e), ir_shape_str(&i.s),
                   ir_shape_str(&x.s));
        return POISON;
    }
    for (int k = 0; k < x.s.rank; k++)
        if (k != d && (IR_IS_BATCH(x.s.d[k]) || IR_IS_BATCH(i.s.d[k]) ? x.s.d[k] != i.s.d[k] : i.s.d[k] > x.s.d[k])) {
            diag_error(at->loc, "%s: the index %s is larger than the tensor %s in dimension %d", fname(e),
                       ir_shape_str(&i.s), ir_shape_str(&x.s), k);
            return POISON;
        }
    return gather(S, x, d, i, i.s, e->loc);
}

/* x along d at the 1-d i64 index i: x's shape with i's length there */
static Val select_rows(Sema *S, Val x, int d, Val i, Loc loc)
{
    if (x.id < 0 || i.id < 0)
        return POISON;
    Shape s = x.s, is = {x.s.rank, {0}};
    s.d[d] = i.s.d[0];
    for (int k = 0; k < is.rank; k++)
        is.d[k] = k == d ? i.s.d[0] : 1;
    return gather(S, x, d, layer_view(S, i, is, loc), s, loc);
}

/* torch.index_select(x, dim, index): index a 1-d i64 tensor */
static Val call_index_select(Sema *S, const Expr *e)
{
    Val x, i;
    int d;
    const Expr *at;
    if (!index_call(S, e, &x, &i, &d, &at))
        return POISON;
    if (i.s.rank != 1 || IR_IS_BATCH(i.s.d[0])) {
        diag_error(at->loc, "%s's index is one dimension, not the batch's (got %s); torch.gather takes one per "
                   "element", fname(e), ir_shape_str(&i.s));
        return POISON;
    }
    return select_rows(S, x, d, i, e->loc);
}

Val tint_index(Sema *S, Val x, int d, const Expr *ie, Loc loc)
{
    Val i = S->eval(S, ie);
    if (!index_arg(S, i, ie, "a subscript"))
        return POISON;
    if (i.s.rank != 1 || IR_IS_BATCH(i.s.d[0])) {
        diag_error(ie->loc, "indexing by a tensor of shape %s is not supported: one 1-d i64 index per subscript "
                   "(torch.gather takes one per element)", ir_shape_str(&i.s));
        return POISON;
    }
    return select_rows(S, x, d, i, loc);
}

/* ---- dispatch ---------------------------------------------------------- */

static const struct {
    const char *name;
    Val (*fn)(Sema *S, const Expr *e);
} calls[] = {
    {"where", call_where}, {"masked_fill", call_masked_fill}, {"masked_fill_", call_masked_fill},
    {"arange", call_arange}, {"argmax", call_argmax}, {"argmin", call_argmax}, {"gather", call_gather},
    {"index_select", call_index_select}, {"tril", call_tri}, {"triu", call_tri}, {"ones", call_full},
    {"zeros", call_full}, {"full", call_full}, {"ones_like", call_full_like}, {"zeros_like", call_full_like},
    {"full_like", call_full_like}, {"eq", call_compare}, {"ne", call_compare}, {"gt", call_compare},
    {"ge", call_compare}, {"lt", call_compare}, {"le", call_compare}, {"logical_and", call_compare},
    {"logical_or", call_compare}, {"logical_not", call_compare}, {"float", call_convert}, {"long", call_convert},
    {"int", call_convert}, {"bool", call_convert}, {"to", call_convert}, {"max", call_max}, {"min", call_max},
    {"rand", call_noise}, {"randn", call_noise}, {"rand_like", call_noise}, {"randn_like", call_noise},
    {"tensor", call_tensor},
};
enum { NCALLS = sizeof calls / sizeof calls[0] };

int tint_handles(const char *name)
{
    for (int i = 0; i < NCALLS; i++)
        if (strcmp(calls[i].name, name) == 0)
            return 1;
    return 0;
}

const char *tint_list(void)
{
    return "arange, argmax, argmin, bool, eq, float, full, full_like, gather, ge, gt, index_select, int, le, "
           "logical_and, logical_not, logical_or, long, lt, masked_fill, max, min, ne, ones, ones_like, rand, rand_like, "
           "randn, randn_like, tensor, to, tril, triu, where, zeros, zeros_like";
}

Val tint_call(Sema *S, const Expr *e)
{
    for (int i = 0; i < NCALLS; i++)
        if (strcmp(calls[i].name, e->s) == 0)
            return calls[i].fn(S, e);
    diag_ice("tensor_ints: %s", e->s);
}

/* The constants a model may hold (torch.ones(...), torch.tril(...), a
 * method chain on them, self.register_buffer(name, ...)): 1 when a
 * member's value is a tensor expression rather than a layer */
int tint_is_constant(const Expr *e)
{
    if (!e)
        return 0;
    if (e->kind != E_CALL)      /* torch.arange(T) * 2, torch.ones(T)[None] */
        return e->kind != E_NAME && e->kind != E_TUPLE && (tint_is_constant(e->a) || tint_is_constant(e->b));
    if (strcmp(e->s, "register_buffer") == 0 || tint_handles(e->s))
        return 1;
    return e->nargs > 0 && !e->args[0]->key && tint_is_constant(e->args[0]->val);
}
