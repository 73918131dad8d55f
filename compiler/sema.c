/* sema.c: names, arguments and shapes of a parsed model file -> graph IR.
 *
 * front_compile is the front end's one entry point: parse, then check
 * every model and the train block, building each model's forward graph as
 * its statements are checked (a node is only ever built from checked
 * operands, so the graph is valid whenever no error was reported). Errors
 * poison the value they would have produced instead of stopping, so one
 * compile reports every independent mistake but no knock-on ones.
 *
 * Parameter names are PyTorch's state_dict names (fc1.weight, 0.weight,
 * layers.0.bias), created in declaration order as nn.Module registers
 * them, so a checkpoint loads into the equivalent PyTorch module. */
#include <ctype.h>
#include <string.h>

#include "ast.h"
#include "cddprt.h"         /* RT_INIT_*: how the runtime initializes a parameter */

enum { MAX_DIM = 1 << 24, MNIST_H = 28, MNIST_W = 28 };
#define MAX_PARAM_ELEMS ((int64_t)1 << 31)

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

/* The closest candidate seen so far for a misspelt name. */
typedef struct Near {
    const char *name, *best;
    int dist;
} Near;

static Near near_start(const char *name) { return (Near){name, NULL, 1 << 30}; }

static int has_prefix(const char *s, const char *pre)
{
    for (; *pre; s++, pre++)
        if (tolower((unsigned char)*s) != tolower((unsigned char)*pre))
            return 0;
    return 1;
}

static void near_try(Near *s, const char *cand)
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

static const char *near_hint(const Near *s)
{
    return s->best ? util_fmt("; did you mean '%s'?", s->best) : "";
}

/* ---- constants in arguments -------------------------------------------- */

/* An expression as the user wrote it, roughly, for "got ..." messages. */
static const char *show(const Expr *e)
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
    case E_NEG: return util_fmt("-%s", show(e->a));
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

static int get_int(const Expr *e, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    double f;
    int64_t i;
    int is_int;
    if (!number(e, &f, &i, &is_int) || !is_int) {
        diag_error(e->loc, "%s must be an integer, got %s", what, show(e));
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

static int get_num(const Expr *e, const char *what, double *out)
{
    int64_t i;
    int is_int;
    if (!number(e, out, &i, &is_int)) {
        diag_error(e->loc, "%s must be a number, got %s", what, show(e));
        return 0;
    }
    return 1;
}

static int get_bool(const Expr *e, const char *what, int *out)
{
    if (e->kind != E_BOOL) {
        diag_error(e->loc, "%s must be true or false, got %s", what, show(e));
        return 0;
    }
    *out = (int)e->i;
    return 1;
}

/* ---- argument binding -------------------------------------------------- */

/* A callee's parameters: the first npos may be given positionally, the
 * first nreq must be given one way or the other. */
typedef struct Sig {
    const char *fn;
    const char *const *names;
    int n, npos, nreq;
} Sig;

static const char *name_list(const Sig *sig, int n)
{
    const char *s = "";
    for (int i = 0; i < n; i++)
        s = util_fmt("%s%s%s", s, i ? ", " : "", sig->names[i]);
    return s;
}

/* Binds call arguments to sig's parameters (out[i] NULL when absent).
 * Reports unknown, repeated, surplus and missing arguments. */
static int bind(const Expr *call, const Sig *sig, Expr **out)
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
            Near s = near_start(arg->key);
            for (int i = 0; i < sig->n; i++)
                near_try(&s, sig->names[i]);
            if (sig->n)
                diag_error(arg->key_loc, "%s has no argument '%s'%s", sig->fn, arg->key, near_hint(&s));
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

/* ---- layers ------------------------------------------------------------ */

typedef enum {
    LK_LINEAR, LK_RELU, LK_FLATTEN, LK_SEQUENTIAL, LK_CONV2D, LK_BATCHNORM2D, LK_MAXPOOL2D, LK_AVGPOOL2D,
    LK_DROPOUT, LK_UNSUPPORTED
} LayerKind;

static const struct {
    const char *name;
    LayerKind kind;
} layer_types[] = {
    {"Linear", LK_LINEAR},          {"ReLU", LK_RELU},
    {"Flatten", LK_FLATTEN},        {"Sequential", LK_SEQUENTIAL},
    {"Conv2d", LK_CONV2D},          {"BatchNorm2d", LK_BATCHNORM2D},
    {"MaxPool2d", LK_MAXPOOL2D},    {"AvgPool2d", LK_AVGPOOL2D},
    {"Dropout", LK_DROPOUT},        {"LayerNorm", LK_UNSUPPORTED},
};
enum { NLAYER_TYPES = sizeof layer_types / sizeof layer_types[0] };

static int layer_type(const char *name)
{
    for (int i = 0; i < NLAYER_TYPES; i++)
        if (strcmp(layer_types[i].name, name) == 0)
            return i;
    return -1;
}

/* Functions callable in forward. */
static const char *const functions[] = {"relu", "flatten", "dropout"};
enum { NFUNCTIONS = sizeof functions / sizeof functions[0] };

static int is_function(const char *name)
{
    for (int i = 0; i < NFUNCTIONS; i++)
        if (strcmp(functions[i], name) == 0)
            return 1;
    return 0;
}

typedef struct Layer {
    LayerKind kind;
    const char *name;       /* state_dict prefix: "fc1", "layers.0", "0", "" */
    const char *what;       /* in messages: "fc1", "layers.0", "layer 0" */
    Loc loc;                /* its constructor */
    int64_t in, out;        /* Linear: features; Conv2d: channels; BatchNorm2d: in */
    int w, b;               /* Linear, Conv2d, BatchNorm2d: PARAM nodes; b -1 without bias */
    int rm, rv, nbt;        /* BatchNorm2d: running_mean, running_var, num_batches_tracked */
    Window win;             /* Conv2d, pooling */
    double eps, momentum;   /* BatchNorm2d */
    double p;               /* Dropout */
    struct Layer **kids;    /* Sequential */
    int nkids;
} Layer;

/* A value in forward: a node and its shape; id -1 once an error poisoned it. */
typedef struct Val {
    int id;
    Shape s;
} Val;

static const Val POISON = {-1, {0}};

typedef struct Var {
    const char *name;
    Val v;
} Var;

/* One model being checked. */
typedef struct Sema {
    Graph *g;
    const Model *m;
    LayerDecl **decls;      /* decls[i] named layers[i] */
    Layer **layers;
    int nlayers;
    Var *vars;
    int nvars;
    int sync_bn;            /* the train block's sync_batchnorm */
} Sema;

static Shape shape2(int64_t a, int64_t b) { return (Shape){2, {a, b}}; }
static Shape shape1(int64_t a) { return (Shape){1, {a}}; }

static const char *param_name(const char *prefix, const char *leaf)
{
    return *prefix ? util_fmt("%s.%s", prefix, leaf) : leaf;
}

static Layer *new_layer(LayerKind kind, const char *prefix, const char *what, Loc loc)
{
    Layer *l = util_alloc(sizeof *l);
    l->kind = kind;
    l->name = prefix;
    l->what = what;
    l->loc = loc;
    l->w = l->b = -1;
    return l;
}

static Layer *make_layer(Sema *S, const Expr *e, const char *prefix, const char *what);

/* Linear(in_features, out_features, bias = true) */
static Layer *make_linear(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"in_features", "out_features", "bias"};
    const Sig sig = {"Linear", names, 3, 3, 2};
    Expr *a[3];
    if (!bind(e, &sig, a))
        return NULL;
    int64_t in = 0, out = 0;
    int bias = 1, ok = 1;
    ok &= get_int(a[0], "in_features", 1, MAX_DIM, &in);
    ok &= get_int(a[1], "out_features", 1, MAX_DIM, &out);
    if (a[2])
        ok &= get_bool(a[2], "bias", &bias);
    if (!ok)
        return NULL;
    if (in * out > MAX_PARAM_ELEMS) {
        diag_error(e->loc, "Linear(%lld, %lld) has too many weights (the limit is %lld)", (long long)in,
                   (long long)out, (long long)MAX_PARAM_ELEMS);
        return NULL;
    }
    Layer *l = new_layer(LK_LINEAR, prefix, what, e->loc);
    l->in = in;
    l->out = out;
    l->w = ir_param(S->g, param_name(prefix, "weight"), shape2(out, in), RT_INIT_KAIMING_UNIFORM, in, e->loc);
    if (bias)
        l->b = ir_param(S->g, param_name(prefix, "bias"), shape1(out), RT_INIT_BIAS_UNIFORM, in, e->loc);
    return l;
}

/* ReLU(inplace = false): in-place-ness means nothing in a graph. */
static Layer *make_relu(const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"inplace"};
    const Sig sig = {"ReLU", names, 1, 1, 0};
    Expr *a[1];
    int inplace;
    if (!bind(e, &sig, a) || (a[0] && !get_bool(a[0], "inplace", &inplace)))
        return NULL;
    return new_layer(LK_RELU, prefix, what, e->loc);
}

/* Flatten(start_dim = 1, end_dim = -1): only the default, as flatten(x). */
static Layer *make_flatten(const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"start_dim", "end_dim"};
    const Sig sig = {"Flatten", names, 2, 2, 0};
    Expr *a[2];
    int64_t start = 1, end = -1;
    if (!bind(e, &sig, a))
        return NULL;
    if ((a[0] && !get_int(a[0], "start_dim", -MAX_RANK, MAX_RANK, &start))
        || (a[1] && !get_int(a[1], "end_dim", -MAX_RANK, MAX_RANK, &end)))
        return NULL;
    if (start != 1 || end != -1) {
        diag_error(e->loc, "Flatten supports only start_dim = 1, end_dim = -1 (flattening all but the batch)");
        return NULL;
    }
    return new_layer(LK_FLATTEN, prefix, what, e->loc);
}

/* Dropout's p: a number in [0, 1) (1 would scale by 1/0). */
static int get_drop_p(const Expr *e, double *p)
{
    if (!get_num(e, "p", p))
        return 0;
    if (!(*p >= 0 && *p < 1)) {
        diag_error(e->loc, "dropout probability p must be in [0, 1), got %s", show(e));
        return 0;
    }
    return 1;
}

/* Dropout(p = 0.5, inplace = false): no parameters, so the state_dict
 * names of the layers around it are unchanged (a Sequential still counts
 * it, as PyTorch does). */
static Layer *make_dropout(const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"p", "inplace"};
    const Sig sig = {"Dropout", names, 2, 2, 0};
    Expr *a[2];
    double p = 0.5;
    int inplace;
    if (!bind(e, &sig, a) || (a[0] && !get_drop_p(a[0], &p)) || (a[1] && !get_bool(a[1], "inplace", &inplace)))
        return NULL;
    Layer *l = new_layer(LK_DROPOUT, prefix, what, e->loc);
    l->p = p;
    return l;
}

/* An int or a pair (h, w), as PyTorch's _pair: kernel_size = 5 or (5, 3). */
static int get_pair(const Expr *e, const char *what, int64_t lo, int out[2])
{
    int64_t v[2];
    if (e->kind == E_TUPLE) {
        if (e->nargs != 2) {
            diag_error(e->loc, "%s must be an integer or a pair (h, w), got a tuple of %d", what, e->nargs);
            return 0;
        }
        if (!get_int(e->args[0]->val, what, lo, MAX_DIM, &v[0]) || !get_int(e->args[1]->val, what, lo, MAX_DIM, &v[1]))
            return 0;
    } else {
        if (!get_int(e, what, lo, MAX_DIM, &v[0]))
            return 0;
        v[1] = v[0];
    }
    out[0] = (int)v[0];
    out[1] = (int)v[1];
    return 1;
}

/* Conv2d(in_channels, out_channels, kernel_size, stride = 1, padding = 0,
 *        dilation = 1, groups = 1, bias = true) */
static Layer *make_conv2d(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"in_channels", "out_channels", "kernel_size", "stride", "padding",
                                        "dilation", "groups", "bias"};
    const Sig sig = {"Conv2d", names, 8, 8, 3};
    Expr *a[8];
    if (!bind(e, &sig, a))
        return NULL;
    int64_t in = 0, out = 0, groups = 1;
    int k[2] = {1, 1}, st[2] = {1, 1}, pad[2] = {0, 0}, dil[2] = {1, 1}, bias = 1, ok = 1;
    ok &= get_int(a[0], "in_channels", 1, MAX_DIM, &in);
    ok &= get_int(a[1], "out_channels", 1, MAX_DIM, &out);
    ok &= get_pair(a[2], "kernel_size", 1, k);
    if (a[3])
        ok &= get_pair(a[3], "stride", 1, st);
    if (a[4])
        ok &= get_pair(a[4], "padding", 0, pad);
    if (a[5])
        ok &= get_pair(a[5], "dilation", 1, dil);
    if (a[6])
        ok &= get_int(a[6], "groups", 1, MAX_DIM, &groups);
    if (a[7])
        ok &= get_bool(a[7], "bias", &bias);
    if (!ok)
        return NULL;
    if (in % groups || out % groups) {
        diag_error(a[6]->loc, "groups (%lld) must divide in_channels (%lld) and out_channels (%lld)", (long long)groups,
                   (long long)in, (long long)out);
        return NULL;
    }
    int64_t fan_in = in / groups * k[0] * k[1];
    if (fan_in * out > MAX_PARAM_ELEMS) {
        diag_error(e->loc, "Conv2d(%lld, %lld) has too many weights (the limit is %lld)", (long long)in, (long long)out,
                   (long long)MAX_PARAM_ELEMS);
        return NULL;
    }
    Layer *l = new_layer(LK_CONV2D, prefix, what, e->loc);
    l->in = in;
    l->out = out;
    l->win = (Window){k[0], k[1], st[0], st[1], pad[0], pad[1], dil[0], dil[1], (int)groups};
    /* kaiming_uniform(a = sqrt(5)) and the bias both give U(+-1/sqrt(fan_in)) */
    l->w = ir_param(S->g, param_name(prefix, "weight"), (Shape){4, {out, in / groups, k[0], k[1]}},
                    RT_INIT_KAIMING_UNIFORM, fan_in, e->loc);
    if (bias)
        l->b = ir_param(S->g, param_name(prefix, "bias"), shape1(out), RT_INIT_BIAS_UNIFORM, fan_in, e->loc);
    return l;
}

/* BatchNorm2d(num_features, eps = 1e-5, momentum = 0.1): affine, with
 * running statistics, as PyTorch's default. */
static Layer *make_batchnorm2d(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"num_features", "eps", "momentum"};
    const Sig sig = {"BatchNorm2d", names, 3, 3, 1};
    Expr *a[3];
    if (!bind(e, &sig, a))
        return NULL;
    int64_t c = 0;
    double eps = 1e-5, momentum = 0.1;
    int ok = get_int(a[0], "num_features", 1, MAX_DIM, &c);
    if (a[1] && !get_num(a[1], "eps", &eps)) {
        ok = 0;
    } else if (!(eps > 0)) {
        diag_error(a[1]->loc, "eps must be positive, got %s", show(a[1]));
        ok = 0;
    }
    if (a[2] && !get_num(a[2], "momentum", &momentum)) {
        ok = 0;
    } else if (!(momentum >= 0 && momentum <= 1)) {
        diag_error(a[2]->loc, "momentum must be between 0 and 1, got %s", show(a[2]));
        ok = 0;
    }
    if (!ok)
        return NULL;
    Layer *l = new_layer(LK_BATCHNORM2D, prefix, what, e->loc);
    l->in = c;
    l->eps = eps;
    l->momentum = momentum;
    /* state_dict order of nn.BatchNorm2d: weight, bias, then the buffers */
    l->w = ir_param(S->g, param_name(prefix, "weight"), shape1(c), RT_INIT_ONE, 0, e->loc);
    l->b = ir_param(S->g, param_name(prefix, "bias"), shape1(c), RT_INIT_ZERO, 0, e->loc);
    l->rm = ir_buffer(S->g, param_name(prefix, "running_mean"), shape1(c), RT_INIT_ZERO, 0, e->loc);
    l->rv = ir_buffer(S->g, param_name(prefix, "running_var"), shape1(c), RT_INIT_ONE, 0, e->loc);
    l->nbt = ir_buffer(S->g, param_name(prefix, "num_batches_tracked"), (Shape){0}, RT_INIT_ZERO, 1, e->loc);
    return l;
}

/* MaxPool2d(kernel_size, stride = kernel_size, padding = 0) and
 * AvgPool2d(kernel_size, stride = kernel_size, padding = 0) */
static Layer *make_pool(const Expr *e, LayerKind kind, const char *prefix, const char *what)
{
    static const char *const names[] = {"kernel_size", "stride", "padding"};
    const Sig sig = {kind == LK_MAXPOOL2D ? "MaxPool2d" : "AvgPool2d", names, 3, 3, 1};
    Expr *a[3];
    if (!bind(e, &sig, a))
        return NULL;
    int k[2], st[2], pad[2] = {0, 0}, ok = get_pair(a[0], "kernel_size", 1, k);
    if (ok) {
        st[0] = k[0];
        st[1] = k[1];
    }
    if (a[1])
        ok &= get_pair(a[1], "stride", 1, st);
    if (a[2])
        ok &= get_pair(a[2], "padding", 0, pad);
    if (!ok)
        return NULL;
    if (2 * pad[0] > k[0] || 2 * pad[1] > k[1]) {
        diag_error(a[2]->loc, "padding (%d, %d) must be at most half of kernel_size (%d, %d)", pad[0], pad[1], k[0],
                   k[1]);
        return NULL;
    }
    Layer *l = new_layer(kind, prefix, what, e->loc);
    l->win = (Window){k[0], k[1], st[0], st[1], pad[0], pad[1], 1, 1, 1};
    return l;
}

/* Sequential(layer, ...): children are named by index, as in PyTorch. */
static Layer *make_sequential(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    Layer *l = new_layer(LK_SEQUENTIAL, prefix, what, e->loc);
    l->kids = util_alloc(sizeof *l->kids * (size_t)(e->nargs + 1));
    int ok = 1;
    for (int i = 0; i < e->nargs; i++) {
        const Arg *a = e->args[i];
        if (a->key) {
            diag_error(a->key_loc, "Sequential takes no keyword arguments");
            ok = 0;
            continue;
        }
        const char *kp = *prefix ? util_fmt("%s.%d", prefix, i) : util_fmt("%d", i);
        const char *kw = *prefix ? kp : util_fmt("layer %d", i);
        Layer *k = make_layer(S, a->val, kp, kw);
        if (!k)
            ok = 0;
        l->kids[l->nkids++] = k;
    }
    return ok ? l : NULL;
}

/* A layer constructor: Linear(...), ReLU(), Sequential(...), ... */
static Layer *make_layer(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    if (e->kind == E_NAME && layer_type(e->s) >= 0) {
        diag_error(e->loc, "a layer is made by calling its type: %s()", e->s);
        return NULL;
    }
    if (e->kind != E_CALL) {
        diag_error(e->loc, "expected a layer such as Linear(in, out), got %s", show(e));
        return NULL;
    }
    int t = layer_type(e->s);
    if (t < 0) {
        Near s = near_start(e->s);
        for (int i = 0; i < NLAYER_TYPES; i++)
            near_try(&s, layer_types[i].name);
        diag_error(e->loc, "unknown layer '%s'%s", e->s, near_hint(&s));
        return NULL;
    }
    switch (layer_types[t].kind) {
    case LK_LINEAR: return make_linear(S, e, prefix, what);
    case LK_RELU: return make_relu(e, prefix, what);
    case LK_FLATTEN: return make_flatten(e, prefix, what);
    case LK_SEQUENTIAL: return make_sequential(S, e, prefix, what);
    case LK_CONV2D: return make_conv2d(S, e, prefix, what);
    case LK_BATCHNORM2D: return make_batchnorm2d(S, e, prefix, what);
    case LK_MAXPOOL2D:
    case LK_AVGPOOL2D: return make_pool(e, layer_types[t].kind, prefix, what);
    case LK_DROPOUT: return make_dropout(e, prefix, what);
    case LK_UNSUPPORTED: break;
    }
    diag_error(e->loc, "%s is not supported yet (supported layers: Linear, ReLU, Flatten, Sequential, Conv2d, "
               "BatchNorm2d, MaxPool2d, AvgPool2d, Dropout)", e->s);
    return NULL;
}

/* ---- forward ----------------------------------------------------------- */

static Val node(Sema *S, Op op, int a, int b, Shape s, Loc loc)
{
    int in[2] = {a, b};
    return (Val){ir_add(S->g, op, op_arity[op], in, s, DT_F32, loc), s};
}

/* Dropout with probability p; p == 0 is the identity: no node. */
static Val dropout(Sema *S, Val x, double p, Loc loc)
{
    if (x.id < 0 || p == 0)
        return x;
    return (Val){ir_dropout(S->g, x.id, p, loc), x.s};
}

/* flatten(x) = torch.flatten(x, 1): no node when already [N, K]. */
static Val flatten(Sema *S, Val x, Loc loc)
{
    if (x.id < 0 || x.s.rank == 2)
        return x;
    return node(S, OP_RESHAPE, x.id, -1, shape2(DIM_N, ir_row_elems(&x.s)), loc);
}

static Val node4(Sema *S, Op op, const int *in, Shape s, Loc loc)
{
    return (Val){ir_add(S->g, op, op_arity[op], in, s, DT_F32, loc), s};
}

/* The layers over images [N, C, H, W]: Conv2d, BatchNorm2d, pooling. */
static Val apply_nchw(Sema *S, const Layer *l, Val x, Loc loc)
{
    int64_t want = l->kind == LK_CONV2D || l->kind == LK_BATCHNORM2D ? l->in : 0;
    if (x.s.rank != 4 || (want && x.s.d[1] != want)) {
        if (want)
            diag_error(loc, "%s expects input [N, %lld, H, W], got %s", l->what, (long long)want, ir_shape_str(&x.s));
        else
            diag_error(loc, "%s expects input [N, C, H, W], got %s", l->what, ir_shape_str(&x.s));
        return POISON;
    }
    const Window *w = &l->win;
    if (l->kind == LK_BATCHNORM2D) {
        Graph *g = S->g;
        Val st;
        if (S->sync_bn) {
            /* SyncBatchNorm: each pass's channel sums over all ranks before
             * the next pass (the mean, then the squares about it): the
             * statistics of one rank holding the whole global batch */
            Shape c = shape1(l->in);
            Val s = node4(S, OP_SUM_CHAN, &x.id, c, loc);
            Val gs = node4(S, OP_ALLREDUCE, &s.id, c, loc);
            Val q = node4(S, OP_BN_SQDEV, (int[]){x.id, gs.id}, c, loc);
            Val gq = node4(S, OP_ALLREDUCE, &q.id, c, loc);
            st = node4(S, OP_BN_GSTATS, (int[]){x.id, l->rm, l->rv, gs.id, gq.id}, shape2(2, l->in), loc);
        } else {
            st = node4(S, OP_BN_STATS, (int[]){x.id, l->rm, l->rv}, shape2(2, l->in), loc);
        }
        g->n[st.id]->eps = l->eps;
        Val y = node4(S, OP_BN_APPLY, (int[]){x.id, st.id, l->w, l->b}, x.s, loc);
        g->n[y.id]->eps = l->eps;
        /* the running statistics move once per training step, from the stats */
        Val r = node4(S, OP_BN_RUNNING, (int[]){l->rm, l->rv, l->nbt, st.id}, shape1(l->in), loc);
        g->n[r.id]->momentum = l->momentum;
        g->n[r.id]->sync = S->sync_bn;
        ir_effect(g, r.id);
        return y;
    }
    int dil = l->kind == LK_CONV2D;
    int64_t oh = ir_window_out(x.s.d[2], w->kh, w->sh, w->ph, dil ? w->dh : 1);
    int64_t ow = ir_window_out(x.s.d[3], w->kw, w->sw, w->pw, dil ? w->dw : 1);
    if (oh <= 0 || ow <= 0) {
        diag_error(loc, "%s: a %dx%d window%s does not fit the input %s%s: the output would be empty", l->what, w->kh,
                   w->kw, dil && (w->dh > 1 || w->dw > 1) ? util_fmt(" dilated %dx%d", w->dh, w->dw) : "",
                   ir_shape_str(&x.s), w->ph || w->pw ? util_fmt(" padded by %dx%d", w->ph, w->pw) : "");
        return POISON;
    }
    int64_t c = l->kind == LK_CONV2D ? l->out : x.s.d[1];
    Shape ys = {4, {DIM_N, c, oh, ow}};
    if (ir_row_elems(&ys) > MAX_DIM) {
        diag_error(loc, "%s gives %s: too large (the limit is %d elements per sample)", l->what, ir_shape_str(&ys),
                   MAX_DIM);
        return POISON;
    }
    Op op = l->kind == LK_CONV2D ? OP_CONV2D : l->kind == LK_MAXPOOL2D ? OP_MAXPOOL : OP_AVGPOOL;
    Val y = node(S, op, x.id, op == OP_CONV2D ? l->w : -1, ys, loc);
    S->g->n[y.id]->win = *w;
    if (op == OP_CONV2D && l->b >= 0)
        y = node(S, OP_BIAS_ADD, y.id, l->b, ys, loc);
    return y;
}

/* Layer l applied to x; loc is the call, or the layer's place inside a
 * Sequential (in_seq), which also changes how a fix is suggested. */
static Val apply(Sema *S, const Layer *l, Val x, Loc loc, int in_seq)
{
    if (x.id < 0)
        return x;
    switch (l->kind) {
    case LK_LINEAR:
        if (x.s.rank != 2 || x.s.d[1] != l->in) {
            const char *hint = "";
            if (x.s.rank > 2 && ir_row_elems(&x.s) == l->in)
                hint = in_seq ? "; add Flatten() before it" : "; flatten it first: flatten(x)";
            diag_error(loc, "%s expects input [N, %lld], got %s%s", l->what, (long long)l->in, ir_shape_str(&x.s),
                       hint);
            return POISON;
        }
        x = node(S, OP_MM_NT, x.id, l->w, shape2(DIM_N, l->out), loc);
        if (l->b >= 0)
            x = node(S, OP_BIAS_ADD, x.id, l->b, x.s, loc);
        return x;
    case LK_RELU:
        return node(S, OP_RELU, x.id, -1, x.s, loc);
    case LK_FLATTEN:
        return flatten(S, x, loc);
    case LK_DROPOUT:
        return dropout(S, x, l->p, loc);
    case LK_SEQUENTIAL:
        for (int i = 0; i < l->nkids && x.id >= 0; i++)
            x = apply(S, l->kids[i], x, l->kids[i]->loc, 1);
        return x;
    case LK_CONV2D:
    case LK_BATCHNORM2D:
    case LK_MAXPOOL2D:
    case LK_AVGPOOL2D:
        return apply_nchw(S, l, x, loc);
    case LK_UNSUPPORTED:
        break;
    }
    diag_ice("apply: layer kind %d", l->kind);
}

static int find_layer(const Sema *S, const char *name)
{
    for (int i = 0; i < S->nlayers; i++)
        if (strcmp(S->decls[i]->name, name) == 0)
            return i;
    return -1;
}

static Var *find_var(Sema *S, const char *name)
{
    for (int i = 0; i < S->nvars; i++)
        if (strcmp(S->vars[i].name, name) == 0)
            return &S->vars[i];
    return NULL;
}

static void set_var(Sema *S, const char *name, Val v)
{
    Var *p = find_var(S, name);
    if (p) {
        p->v = v;
        return;
    }
    if ((S->nvars & (S->nvars - 1)) == 0)
        S->vars = util_grow(S->vars, sizeof *S->vars * (size_t)S->nvars,
                            sizeof *S->vars * (size_t)(S->nvars ? 2 * S->nvars : 1));
    S->vars[S->nvars++] = (Var){name, v};
}

static Val eval(Sema *S, const Expr *e);

/* dropout(x, p = 0.5): F.dropout(x, p, self.training), i.e. like the
 * Dropout layer, identity in the eval plan. */
static Val eval_dropout(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "p"};
    const Sig sig = {"dropout", names, 2, 2, 1};
    Expr *a[2];
    double p = 0.5;
    if (!bind(e, &sig, a))
        return POISON;
    Val x = eval(S, a[0]);
    if (a[1] && !get_drop_p(a[1], &p))
        return POISON;
    return dropout(S, x, p, e->loc);
}

/* callee(x): a layer of the model, or a function. */
static Val eval_call(Sema *S, const Expr *e)
{
    int li = find_layer(S, e->s);
    int ok = 1;
    if (li < 0 && strcmp(e->s, "dropout") == 0)
        return eval_dropout(S, e);
    if (li >= 0 || is_function(e->s)) {
        /* fine: checked below */
    } else if (layer_type(e->s) >= 0) {
        if (layer_types[layer_type(e->s)].kind == LK_UNSUPPORTED)
            diag_error(e->loc, "%s is not supported yet", e->s);
        else
            diag_error(e->loc, "'%s' is a layer type: declare the layer in the model (name = %s(...)) and call "
                       "it by name%s", e->s, e->s,
                       strcmp(e->s, "ReLU") == 0 ? ", or use relu(x)"
                       : strcmp(e->s, "Flatten") == 0 ? ", or use flatten(x)"
                       : strcmp(e->s, "Dropout") == 0 ? ", or use dropout(x, p)" : "");
        ok = 0;
    } else if (find_var(S, e->s)) {
        diag_error(e->loc, "'%s' is a tensor, not a layer or function", e->s);
        ok = 0;
    } else {
        Near s = near_start(e->s);
        for (int i = 0; i < S->nlayers; i++)
            near_try(&s, S->decls[i]->name);
        for (int i = 0; i < NFUNCTIONS; i++)
            near_try(&s, functions[i]);
        diag_error(e->loc, "unknown function or layer '%s'%s", e->s, near_hint(&s));
        ok = 0;
    }
    /* Arguments are checked even after a bad callee: their errors are real. */
    Val x = POISON;
    int npos = 0;
    for (int a = 0; a < e->nargs; a++) {
        const Arg *arg = e->args[a];
        if (arg->key) {
            if (ok)
                diag_error(arg->key_loc, "%s takes no keyword arguments", e->s);
            ok = 0;
        }
        Val v = eval(S, arg->val);
        if (npos++ == 0)
            x = v;
    }
    if (ok && npos != 1) {
        diag_error(e->loc, "%s takes 1 argument (a tensor), got %d", e->s, npos);
        ok = 0;
    }
    if (!ok || x.id < 0)
        return POISON;
    if (li >= 0) {
        if (!S->layers[li])         /* its declaration had an error */
            return POISON;
        return apply(S, S->layers[li], x, e->loc, 0);
    }
    if (strcmp(e->s, "relu") == 0)
        return node(S, OP_RELU, x.id, -1, x.s, e->loc);
    return flatten(S, x, e->loc);
}

/* a + b, of one shape. */
static Val add(Sema *S, Val a, Val b, Loc loc)
{
    if (a.id < 0 || b.id < 0)
        return POISON;
    if (!ir_same_shape(&a.s, &b.s)) {
        diag_error(loc, "cannot add tensors of different shapes: %s + %s", ir_shape_str(&a.s), ir_shape_str(&b.s));
        return POISON;
    }
    return node(S, OP_ADD, a.id, b.id, a.s, loc);
}

/* A tensor expression of forward. */
static Val eval(Sema *S, const Expr *e)
{
    switch (e->kind) {
    case E_NAME: {
        Var *v = find_var(S, e->s);
        if (v)
            return v->v;
        if (find_layer(S, e->s) >= 0) {
            diag_error(e->loc, "'%s' is a layer; call it: %s(x)", e->s, e->s);
            return POISON;
        }
        if (is_function(e->s)) {
            diag_error(e->loc, "'%s' is a function; call it: %s(x)", e->s, e->s);
            return POISON;
        }
        Near s = near_start(e->s);
        for (int i = 0; i < S->nvars; i++)
            near_try(&s, S->vars[i].name);
        diag_error(e->loc, "unknown variable '%s'%s", e->s, near_hint(&s));
        return POISON;
    }
    case E_CALL:
        return eval_call(S, e);
    case E_ADD: {
        /* a + b + c is ((a + b) + c): the left spine is walked in a loop,
         * so no sum is long enough to overflow the stack. */
        int n = 0;
        const Expr *p = e;
        for (; p->kind == E_ADD; p = p->a)
            n++;
        const Expr **spine = util_alloc(sizeof *spine * (size_t)n);
        for (const Expr *q = e; q->kind == E_ADD; q = q->a)
            spine[--n] = q;
        Val acc = eval(S, p);
        for (const Expr *const *q = spine; *q != e; q++)
            acc = add(S, acc, eval(S, (*q)->b), (*q)->loc);
        return add(S, acc, eval(S, e->b), e->loc);
    }
    case E_NEG:
        if (e->a->kind != E_INT && e->a->kind != E_FLOAT) {
            diag_error(e->loc, "unary '-' is not supported on tensors");
            eval(S, e->a);
            return POISON;
        }
        break;
    default:
        break;
    }
    diag_error(e->loc, "expected a tensor, got %s", show(e));
    return POISON;
}

/* The input type f32[N, d1, ...]: returns 0 after reporting. */
static int check_input(const TypeExpr *t, Shape *s)
{
    int ok = 1;
    if (strcmp(t->dtype, "f32") != 0) {
        diag_error(t->loc, "the input must be f32, got '%s'", t->dtype);
        ok = 0;
    }
    if (t->ndims < 2 || t->ndims > MAX_RANK) {
        diag_error(t->loc, "the input must have 2 to %d dimensions, [N, ...], got %d", MAX_RANK, t->ndims);
        return 0;
    }
    s->rank = t->ndims;
    int64_t elems = 1;
    for (int i = 0; i < t->ndims; i++) {
        const Dim *d = t->dims[i];
        if (i == 0) {
            if (!d->name || strcmp(d->name, "N") != 0) {
                diag_error(d->loc, "the first dimension of the input must be N, the batch");
                ok = 0;
            }
            s->d[0] = DIM_N;
        } else if (d->name) {
            diag_error(d->loc, "dimension '%s' must be a number (only the first is N, the batch)", d->name);
            ok = 0;
        } else if (d->val < 1) {
            diag_error(d->loc, "dimensions must be positive, got %lld", (long long)d->val);
            ok = 0;
        } else if (d->val > MAX_DIM || (elems *= d->val) > MAX_DIM) {
            diag_error(d->loc, "the input is too large (the limit is %d elements per sample)", MAX_DIM);
            ok = 0;
            elems = 1;
        } else {
            s->d[i] = d->val;
        }
    }
    return ok;
}

/* forward's statements, in order; returns the logits or POISON. */
static Val run_body(Sema *S, const Forward *f)
{
    Val ret = POISON;
    int returned = 0;
    for (int i = 0; i < f->nbody; i++) {
        const Stmt *st = f->body[i];
        if (returned) {
            diag_error(st->loc, "statement after return is never run");
            return POISON;
        }
        Val v = eval(S, st->val);
        if (st->kind == S_RETURN) {
            ret = v;
            returned = 1;
            if (v.id >= 0 && !(v.s.rank == 2 && v.s.d[0] == DIM_N)) {
                diag_error(st->val->loc, "forward must return logits [N, C], got %s", ir_shape_str(&v.s));
                ret = POISON;
            }
        } else if (find_layer(S, st->name) >= 0) {
            diag_error(st->loc, "'%s' is a layer; a variable cannot have its name", st->name);
        } else {
            set_var(S, st->name, v);
        }
    }
    if (!returned)
        diag_error(f->end, "forward of '%s' does not return a value (add 'return ...')", S->m->name);
    return ret;
}

/* Checks one model, building its graph in g: IMAGES, LABELS, its
 * parameters in declaration order, then forward. Returns the logits. */
static Val check_model(Graph *g, const Model *m, Shape *in, int sync_bn)
{
    Sema S = {.g = g, .m = m, .decls = m->layers, .sync_bn = sync_bn};
    const Forward *f = m->nfwd ? m->fwd[0] : NULL;
    if (!f)
        diag_error(m->loc, "model '%s' has no forward(x: f32[N, ...]) { ... }", m->name);
    for (int i = 1; i < m->nfwd; i++)
        diag_error(m->fwd[i]->loc, "model '%s' has more than one forward", m->name);
    int ok = f && check_input(f->type, in);
    if (ok) {
        g->images = ir_add(g, OP_IMAGES, 0, NULL, *in, DT_F32, f->type->loc);
        g->labels = ir_add(g, OP_LABELS, 0, NULL, shape1(DIM_N), DT_I32, f->type->loc);
    }
    S.layers = util_alloc(sizeof *S.layers * (size_t)(m->nlayers + 1));
    for (int i = 0; i < m->nlayers; i++) {
        const LayerDecl *d = m->layers[i];
        int prev = find_layer(&S, d->name);
        if (prev >= 0) {
            diag_error(d->loc, "layer '%s' is already defined", d->name);
            diag_note(m->layers[prev]->loc, "'%s' was first defined here", d->name);
        }
        if (f && strcmp(d->name, f->param) == 0)
            diag_error(d->loc, "layer '%s' has the name of forward's input", d->name);
        S.layers[i] = make_layer(&S, d->init, d->name, d->name);
        S.nlayers = i + 1;
    }
    if (!ok)
        return POISON;
    Val x = {g->images, *in};
    if (m->seq) {
        Layer *l = make_layer(&S, m->seq, "", "");
        if (!l)
            return POISON;
        if (l->kind != LK_SEQUENTIAL)
            l->what = m->seq->s;
        x = apply(&S, l, x, m->seq->loc, 1);
        if (x.id >= 0 && !(x.s.rank == 2 && x.s.d[0] == DIM_N)) {
            diag_error(m->seq->loc, "the model must give logits [N, C], got %s", ir_shape_str(&x.s));
            return POISON;
        }
        return x;
    }
    set_var(&S, f->param, x);
    return run_body(&S, f);
}

/* ---- train block ------------------------------------------------------- */

static const char *const train_keys[] = {"model", "data", "loss", "optimizer", "batch",
                                         "epochs", "shuffle", "seed", "drop_last", "bucket_mb",
                                         "schedule", "sync_batchnorm", "precision", "scaler"};
enum { NTRAIN_KEYS = sizeof train_keys / sizeof train_keys[0] };

/* `name` or `name(args)`: the callee, with e itself as a call node. */
static const char *callee(const Expr *e, const char *what)
{
    if (e->kind == E_NAME || e->kind == E_CALL)
        return e->s;
    diag_error(e->loc, "%s must be a name such as %s, got %s", what,
               strcmp(what, "data") == 0 ? "mnist(\"data/mnist\")"
               : strcmp(what, "loss") == 0 ? "cross_entropy()"
               : strcmp(what, "scaler") == 0 ? "dynamic(init_scale = 65536)" : "sgd(lr = 0.01)", show(e));
    return NULL;
}

/* mnist(path, normalize = (mean, std)) */
static void train_data(TrainCfg *t, const Expr *e)
{
    const char *name = callee(e, "data");
    if (!name)
        return;
    if (strcmp(name, "mnist") != 0) {
        Near s = near_start(name);
        near_try(&s, "mnist");
        diag_error(e->loc, "unknown dataset '%s'%s (supported: mnist, which reads any MNIST-format "
                   "directory such as data/fashion-mnist)", name, near_hint(&s));
        return;
    }
    static const char *const names[] = {"path", "normalize"};
    const Sig sig = {"mnist", names, 2, 1, 0};
    Expr *a[2];
    if (e->kind == E_CALL && !bind(e, &sig, a))
        return;
    if (e->kind == E_NAME)
        a[0] = a[1] = NULL;
    if (a[0]) {
        if (a[0]->kind != E_STR)
            diag_error(a[0]->loc, "the data path must be a string, got %s", show(a[0]));
        else
            t->data_dir = a[0]->s;
    }
    if (a[1]) {
        const Expr *n = a[1];
        double m, s;
        if (n->kind != E_TUPLE || n->nargs != 2) {
            diag_error(n->loc, "normalize must be a pair (mean, std), got %s", show(n));
        } else if (get_num(n->args[0]->val, "the mean", &m) && get_num(n->args[1]->val, "the std", &s)) {
            if (s <= 0)
                diag_error(n->args[1]->val->loc, "the std must be positive, got %s", show(n->args[1]->val));
            t->norm_mean = m;
            t->norm_std = s;
        }
    }
}

/* cross_entropy(reduction = mean | sum | none) */
static void train_loss(TrainCfg *t, const Expr *e)
{
    const char *name = callee(e, "loss");
    if (!name)
        return;
    if (strcmp(name, "cross_entropy") != 0) {
        Near s = near_start(name);
        near_try(&s, "cross_entropy");
        diag_error(e->loc, "unknown loss '%s'%s (supported: cross_entropy)", name, near_hint(&s));
        return;
    }
    static const char *const names[] = {"reduction"};
    const Sig sig = {"cross_entropy", names, 1, 0, 0};
    Expr *a[1] = {NULL};
    if (e->kind == E_CALL && !bind(e, &sig, a))
        return;
    if (!a[0])
        return;
    static const char *const reds[] = {"mean", "sum", "none"};   /* Reduction order */
    const char *r = a[0]->kind == E_NAME || a[0]->kind == E_STR ? a[0]->s : "";
    for (int i = 0; i < 3; i++)
        if (strcmp(r, reds[i]) == 0) {
            t->reduction = i;
            return;
        }
    diag_error(a[0]->loc, "reduction must be mean, sum or none, got %s", show(a[0]));
}

/* A number >= lo (or > lo when open) into *out; 0 after reporting. */
static int num_at_least(const Expr *e, const char *what, double lo, int open, double *out)
{
    double v;
    if (!get_num(e, what, &v))
        return 0;
    if (v < lo || (open && v == lo)) {
        if (!open && lo == 0)
            diag_error(e->loc, "%s must not be negative, got %s", what, show(e));
        else
            diag_error(e->loc, "%s must be %s %g, got %s", what, open ? "greater than" : "at least", lo, show(e));
        return 0;
    }
    *out = v;
    return 1;
}

/* adam / adamw(lr, betas, eps, weight_decay, amsgrad), torch.optim.Adam's
 * and AdamW's, with their defaults (AdamW decays by 0.01 unless told). */
static void train_adam(TrainCfg *t, const Expr *e, int which)
{
    static const char *const names[] = {"lr", "betas", "eps", "weight_decay", "amsgrad"};
    const Sig sig = {which == OPT_ADAM ? "adam" : "adamw", names, 5, 1, 0};
    Expr *a[5] = {NULL};
    if (e->kind == E_CALL && !bind(e, &sig, a))
        return;
    t->optimizer = which;
    t->lr = 1e-3;
    t->beta1 = 0.9;
    t->beta2 = 0.999;
    t->eps = 1e-8;
    t->weight_decay = which == OPT_ADAMW ? 1e-2 : 0;
    if (a[0])
        num_at_least(a[0], "lr", 0, 1, &t->lr);
    if (a[1]) {
        const Expr *b = a[1];
        double b1, b2;
        if (b->kind != E_TUPLE || b->nargs != 2)
            diag_error(b->loc, "betas must be a pair (beta1, beta2), got %s", show(b));
        else if (get_num(b->args[0]->val, "beta1", &b1) && get_num(b->args[1]->val, "beta2", &b2)) {
            for (int i = 0; i < 2; i++) {
                double v = i ? b2 : b1;
                if (v < 0 || v >= 1)
                    diag_error(b->args[i]->val->loc, "beta%d must be in [0, 1), got %s", i + 1,
                               show(b->args[i]->val));
            }
            t->beta1 = b1;
            t->beta2 = b2;
        }
    }
    if (a[2])
        num_at_least(a[2], "eps", 0, 1, &t->eps);
    if (a[3])
        num_at_least(a[3], "weight_decay", 0, 0, &t->weight_decay);
    int ams = 0;
    if (a[4] && get_bool(a[4], "amsgrad", &ams) && ams)
        diag_error(a[4]->loc, "amsgrad is not supported yet");
}

/* sgd(lr, momentum, dampening, weight_decay, nesterov), torch.optim.SGD's;
 * adam(...), adamw(...). */
static void train_optimizer(TrainCfg *t, const Expr *e)
{
    const char *name = callee(e, "optimizer");
    if (!name)
        return;
    if (strcmp(name, "adam") == 0 || strcmp(name, "adamw") == 0) {
        train_adam(t, e, strcmp(name, "adam") == 0 ? OPT_ADAM : OPT_ADAMW);
        return;
    }
    if (strcmp(name, "sgd") != 0) {
        Near s = near_start(name);
        near_try(&s, "sgd");
        near_try(&s, "adam");
        near_try(&s, "adamw");
        diag_error(e->loc, "unknown optimizer '%s'%s (supported: sgd, adam, adamw)", name, near_hint(&s));
        return;
    }
    static const char *const names[] = {"lr", "momentum", "dampening", "weight_decay", "nesterov"};
    const Sig sig = {"sgd", names, 5, 1, 0};
    Expr *a[5] = {NULL};
    if (e->kind == E_CALL && !bind(e, &sig, a))
        return;
    t->optimizer = 0;
    double *dst[4] = {&t->lr, &t->momentum, &t->dampening, &t->weight_decay};
    for (int i = 0; i < 4; i++) {
        if (!a[i] || !get_num(a[i], names[i], dst[i]))
            continue;
        if (i == 0 && t->lr <= 0)
            diag_error(a[i]->loc, "lr must be positive, got %s", show(a[i]));
        else if (i != 0 && *dst[i] < 0)
            diag_error(a[i]->loc, "%s must not be negative, got %s", names[i], show(a[i]));
    }
    if (a[4] && get_bool(a[4], "nesterov", &t->nesterov) && t->nesterov
        && (t->momentum <= 0 || t->dampening != 0))
        diag_error(a[4]->loc, "nesterov needs momentum > 0 and dampening = 0");
}

/* step(step_size, gamma = 0.1) | cosine(T_max, eta_min = 0): the learning
 * rate per epoch as torch.optim.lr_scheduler's StepLR and
 * CosineAnnealingLR stepped once an epoch. */
static void train_schedule(TrainCfg *t, const Expr *e)
{
    const char *name = callee(e, "schedule");
    if (!name)
        return;
    int step = strcmp(name, "step") == 0, cosine = strcmp(name, "cosine") == 0;
    if (!step && !cosine) {
        Near s = near_start(name);
        near_try(&s, "step");
        near_try(&s, "cosine");
        diag_error(e->loc, "unknown schedule '%s'%s (supported: step, cosine)", name, near_hint(&s));
        return;
    }
    static const char *const sn[] = {"step_size", "gamma"}, *const cn[] = {"T_max", "eta_min"};
    const Sig sig = {name, step ? sn : cn, 2, 2, 1};
    Expr *a[2] = {NULL};
    if (e->kind != E_CALL) {
        diag_error(e->loc, "%s needs %s: schedule %s", name, step ? "step_size" : "T_max",
                   step ? "step(step_size = 30, gamma = 0.1)" : "cosine(T_max = 10)");
        return;
    }
    if (!bind(e, &sig, a))
        return;
    int64_t n;
    if (!a[0] || !get_int(a[0], step ? "step_size" : "T_max", 1, 1000000, &n))
        return;
    t->sched = step ? RT_SCHED_STEP : RT_SCHED_COSINE;
    if (step) {
        t->step_size = (double)n;
        t->gamma = 0.1;
        if (a[1])
            num_at_least(a[1], "gamma", 0, 1, &t->gamma);
    } else {
        t->t_max = (double)n;
        t->eta_min = 0;
        if (a[1])
            num_at_least(a[1], "eta_min", 0, 0, &t->eta_min);
    }
}

/* precision fp32 | bf16 | fp16: torch.autocast's dtype (fp32: no autocast). */
static void train_precision(TrainCfg *t, const Expr *e)
{
    static const char *const names[] = {"fp32", "bf16", "fp16"};   /* RT_PREC_* order */
    static const char *const alias[][2] = {{"float32", "fp32"}, {"bfloat16", "bf16"}, {"float16", "fp16"},
                                           {"half", "fp16"}, {"f32", "fp32"}, {"f16", "fp16"}};
    const char *v = e->kind == E_NAME || e->kind == E_STR ? e->s : NULL;
    if (v)
        for (int i = 0; i < 3; i++)
            if (strcmp(v, names[i]) == 0) {
                t->precision = i;
                return;
            }
    const char *hint = "";
    for (size_t i = 0; v && i < sizeof alias / sizeof alias[0]; i++)
        if (strcmp(v, alias[i][0]) == 0)
            hint = util_fmt("; did you mean '%s'?", alias[i][1]);
    diag_error(e->loc, "precision must be fp32, bf16 or fp16, got %s%s", show(e), hint);
}

/* scaler dynamic(init_scale, growth_factor, backoff_factor,
 * growth_interval): torch.cuda.amp.GradScaler's arguments and defaults;
 * fp16 only. */
static void train_scaler(TrainCfg *t, const Expr *e)
{
    static const char *const names[] = {"init_scale", "growth_factor", "backoff_factor", "growth_interval"};
    const Sig sig = {"dynamic", names, 4, 0, 0};
    Expr *a[4] = {NULL};
    const char *name = callee(e, "scaler");
    if (!name)
        return;
    if (strcmp(name, "dynamic") != 0) {
        Near s = near_start(name);
        near_try(&s, "dynamic");
        diag_error(e->loc, "unknown loss scaler '%s'%s (supported: dynamic, GradScaler's)", name, near_hint(&s));
        return;
    }
    if (e->kind == E_CALL && !bind(e, &sig, a))
        return;
    double v;
    if (a[0] && num_at_least(a[0], "init_scale", 0, 1, &v)) {
        if (v > 3.4e38)
            diag_error(a[0]->loc, "init_scale must be a finite float, got %s", show(a[0]));
        else
            t->init_scale = v;
    }
    if (a[1] && num_at_least(a[1], "growth_factor", 1, 1, &v))
        t->growth_factor = v;
    if (a[2] && get_num(a[2], "backoff_factor", &v)) {
        if (v <= 0 || v >= 1)
            diag_error(a[2]->loc, "backoff_factor must be in (0, 1), got %s", show(a[2]));
        else
            t->backoff_factor = v;
    }
    int64_t n;
    if (a[3] && get_int(a[3], "growth_interval", 1, INT32_MAX, &n))
        t->growth_interval = n;
}

/* PyTorch habits: settings that live elsewhere, or under another name. */
static const char *moved_hint(const char *key, const Near *s)
{
    static const char *const moved[][2] = {
        {"lr", "; the learning rate is set in the optimizer: optimizer sgd(lr = 0.01)"},
        {"learning_rate", "; the learning rate is set in the optimizer: optimizer sgd(lr = 0.01)"},
        {"momentum", "; momentum is set in the optimizer: optimizer sgd(lr = 0.01, momentum = 0.9)"},
        {"weight_decay", "; weight decay is set in the optimizer: optimizer sgd(lr = 0.01, weight_decay = 1e-4)"},
        {"batch_size", "; did you mean 'batch'?"},
        {"num_epochs", "; did you mean 'epochs'?"},
        {"dataset", "; did you mean 'data'?"},
    };
    for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++)
        if (strcmp(key, moved[i][0]) == 0)
            return moved[i][1];
    return near_hint(s);
}

/* Finds the model named in the train block; -1 after reporting. */
static int train_model(const File *f, const Expr *e)
{
    if (e->kind != E_NAME) {
        diag_error(e->loc, "model must be the name of a model, got %s", show(e));
        return -1;
    }
    if (f->nmodels == 0)           /* already reported: no model at all */
        return -1;
    Near s = near_start(e->s);
    for (int i = 0; i < f->nmodels; i++) {
        if (strcmp(f->models[i]->name, e->s) == 0)
            return i;
        near_try(&s, f->models[i]->name);
    }
    diag_error(e->loc, "unknown model '%s'%s", e->s, near_hint(&s));
    return -1;
}

/* The train block: returns the index of its model, or -1. */
static int check_train(const File *f, const Train *tr, TrainCfg *t)
{
    *t = (TrainCfg){.data_dir = "data/mnist", .norm_mean = 0.1307, .norm_std = 0.3081, .reduction = RED_MEAN,
                    .lr = 0.01, .batch = 64, .epochs = 10, .shuffle = 1, .seed = 0, .bucket_mb = 25,
                    .init_scale = 65536, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2000,
                    .loc = tr->loc};
    const TrainItem *seen[NTRAIN_KEYS] = {0};
    int model = -1;
    for (int i = 0; i < tr->nitems; i++) {
        const TrainItem *it = tr->items[i];
        int k = 0;
        while (k < NTRAIN_KEYS && strcmp(train_keys[k], it->key) != 0)
            k++;
        if (k == NTRAIN_KEYS) {
            Near s = near_start(it->key);
            for (int j = 0; j < NTRAIN_KEYS; j++)
                near_try(&s, train_keys[j]);
            diag_error(it->loc, "unknown train setting '%s'%s", it->key, moved_hint(it->key, &s));
            continue;
        }
        if (seen[k]) {
            diag_error(it->loc, "'%s' is set twice", it->key);
            diag_note(seen[k]->loc, "first set here");
            continue;
        }
        seen[k] = it;
        const Expr *v = it->val;
        int64_t n;
        switch (k) {
        case 0: model = train_model(f, v); break;
        case 1: train_data(t, v); break;
        case 2: train_loss(t, v); break;
        case 3: train_optimizer(t, v); break;
        case 4: if (get_int(v, "batch", 1, MAX_DIM, &n)) t->batch = (int)n; break;
        case 5: if (get_int(v, "epochs", 1, 1000000, &n)) t->epochs = (int)n; break;
        case 6: get_bool(v, "shuffle", &t->shuffle); break;
        case 7: if (get_int(v, "seed", 0, INT64_MAX, &n)) t->seed = (uint64_t)n; break;
        case 8: get_bool(v, "drop_last", &t->drop_last); break;
        case 9: {
            double mb;
            if (get_num(v, "bucket_mb", &mb)) {
                if (mb > 0 && mb <= 65536)
                    t->bucket_mb = mb;
                else
                    diag_error(v->loc, "bucket_mb must be a size in MB between 0 and 65536, got %g", mb);
            }
            break;
        }
        case 10: train_schedule(t, v); break;
        case 11: get_bool(v, "sync_batchnorm", &t->sync_bn); break;
        case 12: train_precision(t, v); break;
        case 13: train_scaler(t, v); break;
        }
    }
    /* GradScaler scales fp16's gradients; bf16 has fp32's range */
    const TrainItem *prec = seen[12], *scaler = seen[13];
    if (scaler && !(prec && t->precision == RT_PREC_FP16))
        diag_error(scaler->loc, "a loss scaler needs 'precision fp16'%s",
                   prec && t->precision == RT_PREC_BF16 ? " (bf16 has fp32's range: no scaling needed)" : "");
    if (!seen[0]) {
        if (f->nmodels == 1)
            diag_error(tr->loc, "the train block does not name a model (add 'model %s')", f->models[0]->name);
        else
            diag_error(tr->loc, "the train block does not name a model (add 'model NAME')");
    }
    if (model >= 0) {
        t->model = f->models[model]->name;
    }
    return model;
}

/* Whether node y is computed from some parameter (nodes precede users). */
static int reads_param(const Graph *g, int y)
{
    char *seen = util_alloc((size_t)g->nn);
    seen[y] = 1;
    for (int i = y; i >= 0; i--) {
        if (!seen[i])
            continue;
        if (g->n[i]->op == OP_PARAM)
            return 1;
        for (int k = 0; k < g->n[i]->nin; k++)
            seen[g->n[i]->in[k]] = 1;
    }
    return 0;
}

/* ---- the front end ----------------------------------------------------- */

Program *front_compile(const char *path, const char *text)
{
    diag_source(path, text);
    File *f = parse_file(path, text);
    if (!f || diag_count() > 0)
        return NULL;
    Loc file_loc = {path, 0, 0};

    /* SyncBatchNorm changes how each BatchNorm2d is built: read it first
     * (check_train reports a bad value later) */
    int sync_bn = 0;
    for (int i = 0; f->ntrains > 0 && i < f->trains[0]->nitems; i++)
        if (strcmp(f->trains[0]->items[i]->key, "sync_batchnorm") == 0 && f->trains[0]->items[i]->val->kind == E_BOOL)
            sync_bn = (int)f->trains[0]->items[i]->val->i;
    Graph **graphs = util_alloc(sizeof *graphs * (size_t)(f->nmodels + 1));
    Val *logits = util_alloc(sizeof *logits * (size_t)(f->nmodels + 1));
    Shape *inputs = util_alloc(sizeof *inputs * (size_t)(f->nmodels + 1));
    for (int i = 0; i < f->nmodels; i++) {
        const Model *m = f->models[i];
        for (int j = 0; j < i; j++)
            if (strcmp(f->models[j]->name, m->name) == 0) {
                diag_error(m->loc, "model '%s' is already defined", m->name);
                diag_note(f->models[j]->loc, "'%s' was first defined here", m->name);
                break;
            }
        graphs[i] = ir_new();
        logits[i] = check_model(graphs[i], m, &inputs[i], sync_bn);
    }
    if (f->nmodels == 0)
        diag_error(file_loc, "no model in this file (add 'model NAME { ... }')");

    Program *p = util_alloc(sizeof *p);
    int mi = -1;
    if (f->ntrains == 0) {
        diag_error(file_loc, "no train block (add 'train { model NAME ... }')");
    } else {
        for (int i = 1; i < f->ntrains; i++) {
            diag_error(f->trains[i]->loc, "only one train block is allowed");
            diag_note(f->trains[0]->loc, "the first is here");
        }
        mi = check_train(f, f->trains[0], &p->train);
    }
    if (diag_count() > 0 || mi < 0)
        return NULL;

    /* MNIST samples are 28x28; the input type says how to view them. */
    const Model *m = f->models[mi];
    const Shape *in = &inputs[mi];
    if (ir_row_elems(in) != MNIST_H * MNIST_W) {
        diag_error(m->fwd[0]->type->loc, "the input %s has %lld elements per sample, but mnist images have %d "
                   "(28x28)", ir_shape_str(in), (long long)ir_row_elems(in), MNIST_H * MNIST_W);
        return NULL;
    }
    Graph *g = graphs[mi];
    if (!reads_param(g, logits[mi].id)) {
        diag_error(m->loc, "the output of model '%s' does not depend on any parameter: there is nothing to train",
                   m->name);
        return NULL;
    }
    p->g = g;
    p->model_name = m->name;
    p->in_c = in->rank == 4 ? (int)in->d[1] : 1;
    p->in_h = in->rank == 4 ? (int)in->d[2] : in->rank == 3 ? (int)in->d[1] : 1;
    p->in_w = (int)in->d[in->rank - 1];
    p->nclass = (int)logits[mi].s.d[1];
    g->logits = logits[mi].id;

    const TrainItem *loss_item = NULL;
    for (int i = 0; i < f->trains[0]->nitems; i++)
        if (strcmp(f->trains[0]->items[i]->key, "loss") == 0)
            loss_item = f->trains[0]->items[i];
    Loc loss_loc = loss_item ? loss_item->val->loc : f->trains[0]->loc;
    g->loss = ir_add(g, OP_CE_LOSS, 2, (int[]){g->logits, g->labels}, shape1(DIM_N), DT_F32, loss_loc);
    g->n[g->loss]->red = p->train.reduction;
    for (int i = 0; i < g->nn; i++)
        g->n[i]->phase = i == g->loss ? PH_LOSS : PH_FWD;
    return p;
}
