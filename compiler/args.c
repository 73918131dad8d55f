/* args.c: names, constants and argument lists of the model file: the
 * closest known name for a misspelt one, numbers folded from the syntax,
 * and a call's arguments bound to a signature (PyTorch's positional and
 * keyword rules), each mistake reported where it was written. */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "sema.h"

/* ---- suggestions ------------------------------------------------------- */

/* Edit distance (with swaps of neighbours, so rleu is next to relu) where
 * a change of case costs nothing: `relu` is close to `ReLU`. Long names
 * are not worth comparing. */
static int distance(const char *a, const char *b)
{
    enum { MAXN = 64 };
    int n = (int)strlen(a), m = (int)strlen(b);
    if (n > MAXN || m > MAXN)
        return MAXN;
    static int d[MAXN + 1][MAXN + 1];
    for (int i = 0; i <= n; i++)
        d[i][0] = i;
    for (int j = 0; j <= m; j++)
        d[0][j] = j;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb
                && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

Near arg_near(const char *name) { return (Near){name, NULL, 1 << 30}; }

static int has_prefix(const char *s, const char *pre)
{
    for (; *pre; s++, pre++)
        if (tolower((unsigned char)*s) != tolower((unsigned char)*pre))
            return 0;
    return 1;
}

void arg_near_try(Near *s, const char *cand)
{
    if (!cand || strcmp(cand, s->name) == 0)
        return;
    int d = distance(s->name, cand);
    size_t len = strlen(s->name);
    /* A prefix (Lin for Linear) is as good as a small typo. */
    if (len >= 3 && d > 1 && has_prefix(cand, s->name))
        d = 1;
    if (d <= (int)len / 3 && d < s->dist) {
        s->best = cand;
        s->dist = d;
    }
}

const char *arg_near_hint(const Near *s)
{
    return s->best ? util_fmt("; did you mean '%s'?", s->best) : "";
}

/* ---- constants in arguments -------------------------------------------- */

static const char *arith_text(ExprKind k);

const char *arg_show(const Expr *e)
{
    switch (e->kind) {
    case E_INT: return util_fmt("%lld", (long long)e->i);
    case E_FLOAT: {
        char *s = util_fmt("%g", e->f);
        return strpbrk(s, ".eni") ? s : util_fmt("%s.0", s);
    }
    case E_STR: return util_fmt("\"%s\"", e->s);
    case E_BOOL: return e->i ? "true" : "false";
    case E_NAME: return util_fmt("'%s'", e->s);
    case E_CALL: return util_fmt("%s(...)", e->s);
    case E_TUPLE: return "a tuple";
    case E_NEG: return util_fmt("-%s", arg_show(e->a));
    case E_ADD: case E_SUB: case E_MUL: case E_DIV: case E_FDIV: case E_MOD: case E_POW:
        return util_fmt("%s %s %s", arg_show(e->a), arith_text(e->kind), arg_show(e->b));
    case E_MATMUL: return util_fmt("%s @ %s", arg_show(e->a), arg_show(e->b));
    case E_CMP: return util_fmt("%s %s %s", arg_show(e->a), e->i == 'G' ? ">=" : e->i == 'L' ? "<=" : e->i == '=' ? "=="
                                : e->i == '!' ? "!=" : e->i == '>' ? ">" : "<", arg_show(e->b));
    case E_AND: return util_fmt("%s & %s", arg_show(e->a), arg_show(e->b));
    case E_OR: return util_fmt("%s | %s", arg_show(e->a), arg_show(e->b));
    case E_NOT: return util_fmt("~%s", arg_show(e->a));
    case E_INDEX: return util_fmt("%s[...]", arg_show(e->a));
    case E_SLICE: return "a slice";
    case E_ELLIPSIS: return "...";
    case E_COMP: return "a list comprehension";
    case E_COND: return util_fmt("%s if %s else %s", arg_show(e->a), arg_show(e->b), arg_show(e->c));
    }
    return "?";
}

static const char *arith_text(ExprKind k)
{
    return k == E_ADD ? "+" : k == E_SUB ? "-" : k == E_MUL ? "*" : k == E_DIV ? "/" : k == E_POW ? "**" : k == E_MOD ? "%" : "//";
}

/* The numbers a model's names hold (N, T, C = x.size(); d = C // 4;
 * x.shape[1]): the model being checked sets the lookup (fwd_model), one
 * model at a time */
static int (*names_fn)(void *ctx, const Expr *e, double *f, int *is_int);
static void *names_ctx;

void arg_names(int (*fn)(void *ctx, const Expr *e, double *f, int *is_int), void *ctx)
{
    names_fn = fn;
    names_ctx = ctx;
}

static int named(const Expr *e, double *f, int *is_int)
{
    if (!names_fn || (e->kind != E_NAME && e->kind != E_INDEX && e->kind != E_CALL))
        return 0;
    return names_fn(names_ctx, e, f, is_int);
}

int arg_size(const Expr *e, int64_t *v)
{
    double f;
    int is_int;
    const int r = named(e, &f, &is_int);
    if (r == 2)
        *v = (int64_t)f;    /* DIM_N, or the batch merged (-k) */
    else if (r == 1 && is_int)
        *v = (int64_t)f;
    return r == 1 && !is_int ? 0 : r > 0 ? 1 : r;
}

/* Folds constant arithmetic as Python does: 16 * 5 * 5 and 28 // 2 are
 * integers, 2 * 1e-3 and 1 / 2 numbers (true division), -(-3) folds.
 * Returns 1 with the value, 0 if e is not a constant (nothing reported),
 * -1 after reporting an error at its operator (division by zero,
 * overflow). */
static int number(const Expr *e, double *f, int64_t *i, int *is_int)
{
    const int rn = named(e, f, is_int);
    if (rn != 0) {      /* a name's number (the batch's size is not known: not a constant) */
        if (rn == 1)
            *i = *is_int ? (int64_t)*f : fabs(*f) < 0x1p63 ? (int64_t)*f : 0;
        return rn == 2 ? 0 : rn;
    }
    if (e->kind == E_INT || e->kind == E_FLOAT) {
        *f = e->f;
        *i = e->i;
        *is_int = e->kind == E_INT;
        return 1;
    }
    if (e->kind == E_NEG) {
        int r = number(e->a, f, i, is_int);
        if (r == 1 && *is_int && *i == INT64_MIN) {   /* -(-9223372036854775807 - 1) */
            diag_error(e->loc, "integer overflow in '-'");
            return -1;
        }
        if (r == 1) {
            *f = -*f;
            *i = -*i;
        }
        return r;
    }
    /* float('-inf'), math.inf: a mask's fill */
    if ((e->kind == E_CALL && strcmp(e->s, "float") == 0 && e->nargs == 1 && !e->args[0]->key
         && e->args[0]->val->kind == E_STR) || (e->kind == E_NAME && strcmp(e->s, "math.inf") == 0)) {
        const char *t = e->kind == E_NAME ? "inf" : e->args[0]->val->s;
        const int neg = *t == '-';
        t += *t == '-' || *t == '+';
        if (strcmp(t, "inf") != 0 && strcmp(t, "infinity") != 0) {
            diag_error(e->loc, "float(\"%s\") is not a number here (float('inf') and float('-inf') are)", t);
            return -1;
        }
        *f = neg ? -INFINITY : INFINITY, *is_int = 0, *i = 0;
        return 1;
    }
    /* math.sqrt(d), as attention scales: a method of the name math */
    if (e->kind == E_CALL && strcmp(e->s, "sqrt") == 0 && e->nargs == 2 && !e->args[1]->key
        && e->args[0]->val->kind == E_NAME && strcmp(e->args[0]->val->s, "math") == 0) {
        int r = number(e->args[1]->val, f, i, is_int);
        if (r == 1 && *f < 0) {
            diag_error(e->loc, "math.sqrt of a negative number (%g)", *f);
            return -1;
        }
        if (r == 1)
            *f = sqrt(*f), *is_int = 0, *i = (int64_t)*f;
        return r;
    }
    if (e->kind != E_ADD && e->kind != E_SUB && e->kind != E_MUL && e->kind != E_DIV && e->kind != E_FDIV && e->kind != E_MOD
        && e->kind != E_POW)
        return 0;
    double fa, fb;
    int64_t ia, ib;
    int ka, kb;
    int ra = number(e->a, &fa, &ia, &ka), rb = number(e->b, &fb, &ib, &kb);
    if (ra < 0 || rb < 0)
        return -1;
    if (ra == 0 || rb == 0)
        return 0;
    if ((e->kind == E_DIV || e->kind == E_FDIV || e->kind == E_MOD) && fb == 0) {
        diag_error(e->loc, "division by zero");
        return -1;
    }
    if (e->kind == E_POW) {     /* int ** non-negative int is an int, as Python's */
        if (fa < 0 && fb != floor(fb)) {
            diag_error(e->loc, "a negative number to a fractional power is not a real number");
            return -1;
        }
        if (fa == 0 && fb < 0) {
            diag_error(e->loc, "division by zero (0 to a negative power)");
            return -1;
        }
        *is_int = ka && kb && ib >= 0;
        *f = pow(fa, fb);
        if (!isfinite(*f) || (*is_int && fabs(*f) >= 0x1p63)) {
            diag_error(e->loc, "number out of range in '**'");
            return -1;
        }
        if (*is_int) {
            int64_t r = 1;      /* |ia| >= 2 past the range check means ib < 63 */
            if (ia == 0 || ia == 1 || ia == -1)
                r = ib == 0 ? 1 : ia == -1 && ib % 2 ? -1 : ia;
            else
                for (int64_t k = 0; k < ib; k++)
                    r *= ia;
            *i = r, *f = (double)r;
        } else {
            *i = fabs(*f) < 0x1p63 ? (int64_t)*f : 0;
        }
        return 1;
    }
    *is_int = ka && kb && e->kind != E_DIV;
    if (*is_int) {
        int64_t r = 0;
        int over = 0;
        switch (e->kind) {
        case E_ADD: over = __builtin_add_overflow(ia, ib, &r); break;
        case E_SUB: over = __builtin_sub_overflow(ia, ib, &r); break;
        case E_MUL: over = __builtin_mul_overflow(ia, ib, &r); break;
        case E_MOD:     /* the divisor's sign, as Python's % (C's takes the dividend's) */
            r = ib == -1 ? 0 : ia % ib;
            r += r != 0 && (r < 0) != (ib < 0) ? ib : 0;
            break;
        default:    /* E_FDIV: floor, as Python's // (C's / truncates) */
            over = ia == INT64_MIN && ib == -1;
            r = over ? 0 : ia / ib - ((ia % ib != 0) && ((ia < 0) != (ib < 0)));
            break;
        }
        if (over) {
            diag_error(e->loc, "integer overflow in '%s'", arith_text(e->kind));
            return -1;
        }
        *i = r;
        *f = (double)r;
        return 1;
    }
    switch (e->kind) {
    case E_ADD: *f = fa + fb; break;
    case E_SUB: *f = fa - fb; break;
    case E_MUL: *f = fa * fb; break;
    case E_DIV: *f = fa / fb; break;
    case E_MOD: *f = fa - fb * floor(fa / fb); break;
    default: *f = floor(fa / fb); break;
    }
    if (!isfinite(*f)) {
        diag_error(e->loc, "number out of range in '%s'", arith_text(e->kind));
        return -1;
    }
    /* a float's integer part, where int64 holds it (C leaves the rest undefined) */
    *i = fabs(*f) < 0x1p63 ? (int64_t)*f : 0;
    return 1;
}

int arg_number(const Expr *e, double *v, int *is_int)
{
    int64_t i;
    return number(e, v, &i, is_int);
}

int arg_const(const Expr *e, double *v)
{
    int64_t i;
    int is_int;
    return number(e, v, &i, &is_int);
}

int arg_int(const Expr *e, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    double f;
    int64_t i;
    int is_int, r = number(e, &f, &i, &is_int);
    if (r < 0)
        return 0;
    if (r == 1 && !is_int && e->kind == E_DIV) {
        diag_error(e->loc, "%s must be an integer, got %s = %g ('/' divides as Python's, to a float; '//' floors "
                   "to an integer)", what, arg_show(e), f);
        return 0;
    }
    if (r == 0 || !is_int) {
        diag_error(e->loc, "%s must be an integer, got %s", what, arg_show(e));
        return 0;
    }
    if (i < lo || i > hi) {
        if (lo == 1 && i < 1)
            diag_error(e->loc, "%s must be positive, got %lld", what, (long long)i);
        else if (i < lo)
            diag_error(e->loc, "%s must be at least %lld, got %lld", what, (long long)lo, (long long)i);
        else
            diag_error(e->loc, "%s is too large (%lld; the limit is %lld)", what, (long long)i, (long long)hi);
        return 0;
    }
    *out = i;
    return 1;
}

/* Numbers reach the kernels as float32 (util_cfloat): one beyond its range
 * would be inf there, one below its smallest normal value 0 or a subnormal
 * (which GPUs flush to 0), so that std = 1e-300 divides by zero. */
int arg_float32(Loc loc, const char *what, double v)
{
    if (fabs(v) > FLT_MAX) {
        diag_error(loc, "%s is out of float32's range (%g; the largest is %.9g)", what, v, FLT_MAX);
        return 0;
    }
    if (v != 0 && fabs(v) < FLT_MIN) {
        diag_error(loc, "%s is too small for float32 (%g; the smallest is %.9g)", what, v, FLT_MIN);
        return 0;
    }
    return 1;
}

int arg_num(const Expr *e, const char *what, double *out)
{
    int64_t i;
    int is_int, r = number(e, out, &i, &is_int);
    if (r == 0)
        diag_error(e->loc, "%s must be a number, got %s", what, arg_show(e));
    return r == 1 && arg_float32(e->loc, what, *out);
}

int arg_bool(const Expr *e, const char *what, int *out)
{
    if (e->kind != E_BOOL) {
        diag_error(e->loc, "%s must be true or false, got %s", what, arg_show(e));
        return 0;
    }
    *out = (int)e->i;
    return 1;
}

/* ---- argument binding -------------------------------------------------- */

static const char *name_list(const Sig *sig, int n)
{
    const char *s = "";
    for (int i = 0; i < n; i++)
        s = util_fmt("%s%s%s", s, i ? ", " : "", sig->names[i]);
    return s;
}

/* A signature's keyword names, sorted, for "its arguments: ..." */
static const char *sorted_names(const Sig *sig)
{
    const char **v = util_alloc(sizeof *v * (size_t)sig->n);
    for (int i = 0; i < sig->n; i++)
        v[i] = sig->names[i];
    for (int i = 1; i < sig->n; i++)
        for (int j = i; j > 0 && strcasecmp(v[j - 1], v[j]) > 0; j--) {
            const char *t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    const char *s = "";
    for (int i = 0; i < sig->n; i++)
        s = util_fmt("%s%s%s", s, i ? ", " : "", v[i]);
    return s;
}

int arg_bind(const Expr *call, const Sig *sig, Expr **out)
{
    int ok = 1, npos = 0, nkey = 0;
    for (int i = 0; i < sig->n; i++)
        out[i] = NULL;
    for (int a = 0; a < call->nargs; a++) {
        const Arg *arg = call->args[a];
        if (!arg->key) {
            if (nkey) {
                diag_error(arg->val->loc, "positional argument after keyword argument");
                ok = 0;
            } else if (npos < sig->npos) {
                out[npos] = arg->val;
            }
            npos++;
            continue;
        }
        nkey++;
        int k = 0;
        while (k < sig->n && strcmp(sig->names[k], arg->key) != 0)
            k++;
        if (k == sig->n) {
            Near s = arg_near(arg->key);
            for (int i = 0; i < sig->n; i++)
                arg_near_try(&s, sig->names[i]);
            if (sig->n)
                diag_error(arg->key_loc, "%s has no argument '%s'%s (its arguments: %s)", sig->fn, arg->key,
                           arg_near_hint(&s), sorted_names(sig));
            else
                diag_error(arg->key_loc, "%s takes no arguments", sig->fn);
            ok = 0;
        } else if (out[k]) {
            diag_error(arg->key_loc, "argument '%s' of %s given twice", arg->key, sig->fn);
            ok = 0;
        } else {
            out[k] = arg->val;
        }
    }
    if (npos > sig->npos) {
        if (sig->npos == 0)
            diag_error(call->loc, "%s takes no positional arguments, got %d", sig->fn, npos);
        else
            diag_error(call->loc, "%s takes at most %d positional argument%s (%s), got %d", sig->fn, sig->npos,
                       sig->npos == 1 ? "" : "s", name_list(sig, sig->npos), npos);
        return 0;
    }
    for (int i = 0; i < sig->nreq; i++) {
        if (out[i])
            continue;
        if (nkey == 0)
            diag_error(call->loc, "%s expects %d positional argument%s (%s), got %d", sig->fn, sig->nreq,
                       sig->nreq == 1 ? "" : "s", name_list(sig, sig->nreq), npos);
        else
            diag_error(call->loc, "%s is missing argument '%s'", sig->fn, sig->names[i]);
        return 0;
    }
    return ok;
}

