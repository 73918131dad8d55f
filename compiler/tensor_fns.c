/* tensor_fns.c: forward's math over tensors of any rank, as PyTorch
 * spells it: exp, log, sqrt, rsqrt, abs, neg, square, pow and x ** c with
 * a constant exponent, clamp / clip, maximum / minimum with broadcasting,
 * and matrix products between activations (a @ b, torch.matmul,
 * torch.bmm, torch.einsum in its batched-matmul forms). Each builds
 * tensor.c's ops (K_TENSOR), whose kernels index any layout.
 *
 * A product's operands keep their layout: b.transpose(-2, -1) feeding it
 * is read transposed (ten.tb) rather than copied, as a BLAS reads it. */
#include <math.h>
#include <string.h>

#include "sema.h"

static const char *fname(const Expr *e) { return e->written ? e->written : e->s; }

Val tfn_unary(Sema *S, Op op, Val x, double lo, double hi, Loc loc)
{
    if (x.id < 0)
        return x;
    Val y = layer_node(S, op, x.id, -1, x.s, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.lo = lo, S->g->n[y.id]->ten.hi = hi;
    return y;
}

/* a constant argument, reported when it is a tensor */
static int constant(const Expr *e, const char *what, const char *fn, double *v)
{
    const int r = arg_const(e, v);
    if (r == 0)
        diag_error(e->loc, "%s's %s must be a number here (a tensor %s is not supported)", fn, what, what);
    return r == 1 && arg_float32(e->loc, what, *v);
}

static const struct {
    const char *name;
    Op op;
} unaries[] = {
    {"exp", OP_T_EXP}, {"log", OP_T_LOG}, {"sqrt", OP_T_SQRT}, {"rsqrt", OP_T_RSQRT}, {"abs", OP_T_ABS},
    {"neg", OP_T_AFFINE}, {"negative", OP_T_AFFINE}, {"square", OP_T_POW},
};
enum { NUNARY = sizeof unaries / sizeof unaries[0] };

static Val call_unary(Sema *S, const Expr *e, Op op)
{
    static const char *const names[] = {"input"};
    const Sig sig = {fname(e), names, 1, 1, 1};
    Expr *a[1];
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if (op == OP_T_AFFINE)
        return tfn_unary(S, op, x, -1, 0, e->loc);
    return tfn_unary(S, op, x, op == OP_T_POW ? 2 : 0, 0, e->loc);
}

Val tfn_pow(Sema *S, Val x, const Expr *exponent, const char *fn, Loc loc)
{
    double c;
    if (!constant(exponent, "exponent", fn, &c) || x.id < 0)
        return POISON;
    return tfn_unary(S, OP_T_POW, x, c, 0, loc);
}

/* x.pow(2), torch.pow(x, 0.5) */
static Val call_pow(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "exponent"};
    const Sig sig = {fname(e), names, 2, 2, 2};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    return tfn_pow(S, S->eval(S, a[0]), a[1], fname(e), e->loc);
}

/* torch.clamp(x, min = 0.1), x.clamp(-1, 1), x.clip(max = 3) */
static Val call_clamp(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "min", "max"};
    const Sig sig = {fname(e), names, 3, 3, 1};
    Expr *a[3];
    double lo = -INFINITY, hi = INFINITY;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]);
    if ((a[1] && !constant(a[1], "min", fname(e), &lo)) || (a[2] && !constant(a[2], "max", fname(e), &hi)))
        return POISON;
    if (!a[1] && !a[2]) {
        diag_error(e->loc, "%s needs min or max (or both)", fname(e));
        return POISON;
    }
    return tfn_unary(S, OP_T_CLAMP, x, lo, hi, e->loc);
}

/* torch.maximum(a, b), torch.minimum(a, b): tensors, broadcast */
static Val call_extreme(Sema *S, const Expr *e, Op op)
{
    static const char *const names[] = {"input", "other"};
    const Sig sig = {fname(e), names, 2, 2, 2};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]), y = S->eval(S, a[1]);
    if (x.id < 0 || y.id < 0)
        return POISON;
    Shape s;
    if (!ten_broadcast(&x.s, &y.s, &s)) {
        diag_error(e->loc, "%s of shapes that do not broadcast: %s and %s", fname(e), ir_shape_str(&x.s),
                   ir_shape_str(&y.s));
        return POISON;
    }
    return layer_node(S, op, x.id, y.id, s, e->loc);
}

/* ---- matrix products --------------------------------------------------- */

/* x read transposed: a permutation swapping its last two dimensions is
 * undone into the flag, so no copy runs for it */
static Val untransposed(Sema *S, Val x, int *t)
{
    const Node *n = x.id >= 0 ? S->g->n[x.id] : NULL;
    *t = 0;
    if (!n || n->op != OP_T_PERMUTE)
        return x;
    const int r = n->shape.rank;
    for (int d = 0; d < r - 2; d++)
        if (n->ten.perm[d] != d)
            return x;
    if (n->ten.perm[r - 2] != r - 1 || n->ten.perm[r - 1] != r - 2)
        return x;
    *t = 1;
    const Node *src = S->g->n[n->in[0]];
    return (Val){src->id, src->shape};
}

static Val product(Sema *S, Val a, Val b, int ta, int tb, const char *fn, Loc loc)
{
    if (a.id < 0 || b.id < 0)
        return POISON;
    int fa, fb;
    Val sa = untransposed(S, a, &fa), sb = untransposed(S, b, &fb);
    Shape s;
    const char *why = ten_bmm_shape(&a.s, &b.s, ta, tb, &s);
    if (why) {
        diag_error(loc, "%s of %s%s and %s%s: %s", fn, ir_shape_str(&a.s), ta ? " (transposed)" : "",
                   ir_shape_str(&b.s), tb ? " (transposed)" : "", why);
        return POISON;
    }
    Val y = layer_node(S, OP_T_BMM, sa.id, sb.id, s, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.ta = ta ^ fa, S->g->n[y.id]->ten.tb = tb ^ fb;
    return y;
}

Val tfn_matmul(Sema *S, Val a, Val b, const char *fn, Loc loc) { return product(S, a, b, 0, 0, fn, loc); }

/* torch.matmul(a, b), torch.bmm(a, b) (3 dimensions each, as torch asks) */
static Val call_matmul(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "other"};
    const Sig sig = {fname(e), names, 2, 2, 2};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = S->eval(S, a[0]), y = S->eval(S, a[1]);
    if (strcmp(e->s, "bmm") == 0 && x.id >= 0 && y.id >= 0 && (x.s.rank != 3 || y.s.rank != 3)) {
        diag_error(e->loc, "%s takes two 3-dimensional tensors, got %s and %s (torch.matmul broadcasts other "
                   "ranks)", fname(e), ir_shape_str(&x.s), ir_shape_str(&y.s));
        return POISON;
    }
    return product(S, x, y, 0, 0, fname(e), e->loc);
}

/* torch.einsum("bhqd,bhkd->bhqk", q, k): the forms that are a batched
 * matrix product: the same leading letters in the same order on all
 * three, then two letters each, one contracted. */
static Val call_einsum(Sema *S, const Expr *e)
{
    if (e->nargs != 3 || e->args[0]->val->kind != E_STR) {
        diag_error(e->loc, "%s takes an equation and two tensors here (the forms that are a batched matrix "
                   "product, as \"bij,bjk->bik\")", fname(e));
        return POISON;
    }
    const char *eq = e->args[0]->val->s, *arrow = strstr(eq, "->"), *comma = strchr(eq, ',');
    Val x = S->eval(S, e->args[1]->val), y = S->eval(S, e->args[2]->val);
    if (x.id < 0 || y.id < 0)
        return POISON;
    char A[16] = "", B[16] = "", O[16] = "";
    int ok = arrow && comma && comma < arrow && comma - eq < 16 && arrow - comma - 1 < 16 && strlen(arrow + 2) < 16;
    if (ok) {
        memcpy(A, eq, (size_t)(comma - eq));
        memcpy(B, comma + 1, (size_t)(arrow - comma - 1));
        strcpy(O, arrow + 2);
    }
    const size_t r = strlen(O);
    ok = ok && r >= 2 && strlen(A) == r && strlen(B) == r && strncmp(A, O, r - 2) == 0 && strncmp(B, O, r - 2) == 0
         && (int)r == x.s.rank && (int)r == y.s.rank;
    int ta = 0, tb = 0;
    if (ok) {
        const char a0 = A[r - 2], a1 = A[r - 1], b0 = B[r - 2], b1 = B[r - 1], i = O[r - 2], j = O[r - 1];
        /* A holds i and the contracted letter, B the contracted letter and j */
        ta = a1 == i, tb = b0 == j;
        const char ka = ta ? a0 : a1, ia = ta ? a1 : a0, kb = tb ? b1 : b0, jb = tb ? b0 : b1;
        ok = ia == i && jb == j && ka == kb && ka != i && ka != j && i != j && !strchr(O, ka);
    }
    if (!ok) {
        diag_error(e->args[0]->val->loc, "einsum \"%s\" on %s and %s is not supported: only batched matrix "
                   "products are (\"bij,bjk->bik\", \"bhqd,bhkd->bhqk\": the same leading letters on all three, "
                   "one letter contracted); write other forms with permute, sum and '*'", eq, ir_shape_str(&x.s),
                   ir_shape_str(&y.s));
        return POISON;
    }
    return product(S, x, y, ta, tb, fname(e), e->loc);
}

/* ---- dispatch ---------------------------------------------------------- */

static const char *const others[] = {"pow", "clamp", "clip", "maximum", "minimum", "matmul", "bmm", "einsum"};

int tfn_handles(const char *name)
{
    for (int i = 0; i < NUNARY; i++)
        if (strcmp(unaries[i].name, name) == 0)
            return 1;
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        if (strcmp(others[i], name) == 0)
            return 1;
    return 0;
}

const char *tfn_list(void)
{
    return "abs, bmm, clamp, clip, einsum, exp, log, matmul, maximum, minimum, neg, negative, pow, rsqrt, sqrt, "
           "square";
}

Val tfn_call(Sema *S, const Expr *e)
{
    for (int i = 0; i < NUNARY; i++)
        if (strcmp(unaries[i].name, e->s) == 0)
            return call_unary(S, e, unaries[i].op);
    if (strcmp(e->s, "pow") == 0)
        return call_pow(S, e);
    if (strcmp(e->s, "clamp") == 0 || strcmp(e->s, "clip") == 0)
        return call_clamp(S, e);
    if (strcmp(e->s, "maximum") == 0 || strcmp(e->s, "minimum") == 0)
        return call_extreme(S, e, e->s[1] == 'a' ? OP_T_MAXIMUM : OP_T_MINIMUM);
    if (strcmp(e->s, "einsum") == 0)
        return call_einsum(S, e);
    return call_matmul(S, e);
}
