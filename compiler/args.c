/* args.c: names, constants and argument lists of the model file: the
 * closest known name for a misspelt one, numbers folded from the syntax,
 * and a call's arguments bound to a signature (PyTorch's positional and
 * keyword rules), each mistake reported where it was written. */
#include <ctype.h>
#include <string.h>

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
    case E_ADD: return "an addition";
    }
    return "?";
}

/* Folds -(-3) and the like; returns 0 if e is not a number. */
static int number(const Expr *e, double *f, int64_t *i, int *is_int)
{
    if (e->kind == E_INT || e->kind == E_FLOAT) {
        *f = e->f;
        *i = e->i;
        *is_int = e->kind == E_INT;
        return 1;
    }
    if (e->kind == E_NEG && number(e->a, f, i, is_int)) {
        *f = -*f;
        *i = -*i;
        return 1;
    }
    return 0;
}

int arg_int(const Expr *e, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    double f;
    int64_t i;
    int is_int;
    if (!number(e, &f, &i, &is_int) || !is_int) {
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

int arg_num(const Expr *e, const char *what, double *out)
{
    int64_t i;
    int is_int;
    if (!number(e, out, &i, &is_int)) {
        diag_error(e->loc, "%s must be a number, got %s", what, arg_show(e));
        return 0;
    }
    return 1;
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
                diag_error(arg->key_loc, "%s has no argument '%s'%s", sig->fn, arg->key, arg_near_hint(&s));
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

