/* forward.c: a model's forward, statement by statement: variables,
 * calls of its layers and of the functions (relu, flatten, dropout), and
 * additions, each checked for shape before its node is built (a node is
 * only ever built from checked operands, so the graph is valid whenever no
 * error was reported). */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "sema.h"

/* Functions callable in forward besides the activations (layers.c's
 * table: relu, tanh, sigmoid, gelu, ...) and the layers applied at once
 * (layers.c's: max_pool2d, softmax, layer_norm, ...). */
static const char *const functions[] = {"flatten", "dropout", "view", "reshape", "cat",
                                        "scaled_dot_product_attention"};
enum { NFUNCTIONS = sizeof functions / sizeof functions[0] };

/* PyTorch functions this compiler does not have (as layers.c's modules) */
static const char *const torch_functions[] = {
    "adaptive_max_pool2d", "batch_norm", "celu", "conv2d", "embedding",
    "glu", "hardsigmoid", "hardswish", "interpolate", "linear", "logsigmoid", "mish",
    "normalize", "one_hot", "pad", "prelu", "relu6", "selu", "softmin", "softsign",
    "threshold",
};

static int is_torch_function(const char *name)
{
    for (size_t i = 0; i < sizeof torch_functions / sizeof *torch_functions; i++)
        if (strcmp(torch_functions[i], name) == 0)
            return 1;
    return 0;
}

static int is_function(const char *name)
{
    for (int i = 0; i < NFUNCTIONS; i++)
        if (strcmp(functions[i], name) == 0)
            return 1;
    return layer_act_fn(name) >= 0 || layer_fn(name);
}

/* Every function's name, sorted, for "supported functions: ..." */
static const char *function_list(void)
{
    enum { MAXN = 192 };
    const char *names[MAXN];
    int n = 0;
    for (int i = 0; i < NFUNCTIONS; i++)
        names[n++] = functions[i];
    for (int i = 0; n < MAXN && layer_act_fn_name(i); i++)
        if (*layer_act_fn_name(i))
            names[n++] = layer_act_fn_name(i);
    for (int i = 0; n < MAXN && layer_fn_name(i); i++)
        names[n++] = layer_fn_name(i);
    /* the functions over any shape: their lists split at the commas */
    const char *more[3] = {meth_list(), tfn_list(), tint_list()};
    for (int k = 0; k < 3; k++)
        for (char *w = strtok(util_strdup(more[k]), ", "); w && n < MAXN; w = strtok(NULL, ", "))
            names[n++] = w;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcasecmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    const char *list = "";
    for (int i = 0; i < n; i++)
        list = util_fmt("%s%s%s", list, i ? ", " : "", names[i]);
    return list;
}

static int find_layer(const Sema *S, const char *name)
{
    for (int i = 0; i < S->nlayers; i++)
        if (strcmp(S->decls[i]->name, name) == 0)
            return i;
    return -1;
}

/* a layer by its name, or by a path through ModuleDicts
 * (transformer.h), or NULL */
static const Layer *layer_at(const Sema *S, const char *path)
{
    const int li = find_layer(S, path);
    if (li >= 0)
        return S->layers[li];
    const char *dot = strrchr(path, '.');
    if (!dot)
        return NULL;
    const Layer *d = layer_at(S, util_fmt("%.*s", (int)(dot - path), path));
    return d ? layer_dict_kid(d, dot + 1) : NULL;
}

/* e calls one of the attention modules (transformer.c), or NULL */
static const Layer *xf_callee(const Sema *S, const Expr *e)
{
    if (!e || e->kind != E_CALL)
        return NULL;
    const int li = find_layer(S, e->s);
    const Layer *l = li >= 0 ? S->layers[li] : NULL;
    return l && (l->kind == LK_MHA || l->kind == LK_ENC_LAYER || l->kind == LK_ENCODER) ? l : NULL;
}

/* e calls a recurrent layer (recurrent.c), or NULL */
static const Layer *rnn_callee(const Sema *S, const Expr *e)
{
    if (!e || e->kind != E_CALL)
        return NULL;
    const int li = find_layer(S, e->s);
    const Layer *l = li >= 0 ? S->layers[li] : NULL;   /* NULL too where its declaration was refused */
    return l && l->kind == LK_RNN ? l : NULL;
}

static Var *find_var(Sema *S, const char *name)
{
    for (int i = 0; i < S->nvars; i++)
        if (strcmp(S->vars[i].name, name) == 0)
            return &S->vars[i];
    return NULL;
}

static Val eval(Sema *S, const Expr *e);

static Var *new_var(Sema *S, const char *name)
{
    Var *p = find_var(S, name);
    if (p)
        return p;
    if ((S->nvars & (S->nvars - 1)) == 0)
        S->vars = util_grow(S->vars, sizeof *S->vars * (size_t)S->nvars,
                            sizeof *S->vars * (size_t)(S->nvars ? 2 * S->nvars : 1));
    S->vars[S->nvars] = (Var){.name = name, .v = POISON};
    return &S->vars[S->nvars++];
}

static void set_var(Sema *S, const char *name, Val v)
{
    Var *p = new_var(S, name);
    *p = (Var){.name = name, .v = v};
}

/* a name of a number, or of the batch's size (size DIM_N) */
static void set_num(Sema *S, const char *name, double num, int is_int)
{
    Var *p = new_var(S, name);
    *p = (Var){.name = name, .v = POISON, .is_num = 1, .is_int = is_int, .is_batch = is_int && num == DIM_N,
               .num = num};
}

/* the variable whose shape a name is (x of x.shape), or NULL */
static const char *shape_of(const char *s)
{
    const size_t n = strlen(s);
    return n > 6 && strcmp(s + n - 6, ".shape") == 0 ? util_fmt("%.*s", (int)n - 6, s) : NULL;
}

/* arg_names' lookup: a name bound to a number; x.shape[d], x.size(d) of a
 * variable x (any other tensor's size is layer_size's, which evaluates it) */
static int names_lookup(void *ctx, const Expr *e, double *f, int *is_int)
{
    Sema *S = ctx;
    if (e->kind == E_NAME) {
        const Var *p = find_var(S, e->s);
        if (!p || !p->is_num)
            return 0;
        *f = p->num, *is_int = p->is_int;
        return p->is_batch ? 2 : 1;
    }
    const Expr *d = NULL;
    const char *name = NULL;
    if (e->kind == E_INDEX && e->a->kind == E_NAME && e->nargs == 1 && shape_of(e->a->s))
        name = shape_of(e->a->s), d = e->args[0]->val;     /* x.shape[1] */
    else if (e->kind == E_CALL && strcmp(e->s, "size") == 0 && e->nargs == 2 && !e->args[1]->key
             && e->args[0]->val->kind == E_NAME)
        name = e->args[0]->val->s, d = e->args[1]->val;
    const Var *p = name ? find_var(S, name) : NULL;
    if (!p || p->is_num || p->v.id < 0)
        return 0;
    int64_t k;
    if (!arg_int(d, "the dimension", -p->v.s.rank, p->v.s.rank - 1, &k))
        return -1;
    const int64_t v = p->v.s.d[k < 0 ? k + p->v.s.rank : k];
    *f = (double)v, *is_int = 1;
    return IR_IS_BATCH(v) ? 2 : 1;     /* the batch's, or the batch merged (which layer_size refuses) */
}

/* N, T, C = x.size() or x.shape: each name bound to its size; 0 after reporting */
static int unpack_sizes(Sema *S, const Stmt *st)
{
    const Expr *e = st->val, *x;
    Expr name = {.kind = E_NAME, .loc = e->loc};    /* x of x.shape: alive to the end */
    if (e->kind == E_CALL && strcmp(e->s, "size") == 0 && e->nargs == 1 && !e->args[0]->key)
        x = e->args[0]->val;
    else if (e->kind == E_NAME && (name.s = shape_of(e->s)))
        x = &name;
    else
        return -1;
    Val v = eval(S, x);
    if (v.id < 0)
        return 0;
    if (v.s.rank != st->nnames) {
        diag_error(e->loc, "%s has %d dimensions, unpacked into %d names", ir_shape_str(&v.s), v.s.rank, st->nnames);
        return 0;
    }
    for (int k = 0; k < st->nnames; k++)
        set_num(S, st->names[k], (double)v.s.d[k], 1);
    return 1;
}


/* dropout(x, p = 0.5): F.dropout(x, p, self.training), i.e. like the
 * Dropout layer, identity in the eval plan. */
static Val eval_dropout(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "p"};
    const Sig sig = {"dropout", names, 2, 2, 1};
    Expr *a[2];
    double p = 0.5;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = eval(S, a[0]);
    if (a[1] && !layer_drop_p(a[1], &p))
        return POISON;
    return layer_dropout(S, x, p, e->loc);
}

/* flatten(x, start_dim = 1, end_dim = -1), torch.flatten and x.flatten:
 * only flattening all but the batch, as the Flatten layer (the batch stays
 * the first dimension of every value). The start_dim is PyTorch's default
 * for nn.Flatten; torch.flatten's own default (0) would flatten the batch,
 * so start_dim = 0 is refused rather than taken silently. */
static Val eval_flatten(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "start_dim", "end_dim"};
    const Sig sig = {e->written ? e->written : e->s, names, 3, 3, 1};
    Expr *a[3];
    int64_t start = 1, end = -1;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = eval(S, a[0]);
    if ((a[1] && !arg_int(a[1], "start_dim", -MAX_RANK, MAX_RANK, &start))
        || (a[2] && !arg_int(a[2], "end_dim", -MAX_RANK, MAX_RANK, &end)))
        return POISON;
    if (!a[1] && e->written && strcmp(e->written, "torch.flatten") == 0) {
        /* torch.flatten's start_dim defaults to 0, unlike nn.Flatten's */
        diag_error(e->loc, "torch.flatten(x) would flatten the batch too (start_dim = 0); write torch.flatten(x, 1)");
        return POISON;
    }
    if (start != 1 || end != -1) {
        diag_error(e->loc, "flatten supports only start_dim = 1, end_dim = -1 (flattening all but the batch)");
        return POISON;
    }
    return layer_flatten(S, x, e->loc);
}


/* x.view(shape), x.reshape(shape), view(x, ...): a new shape of the same
 * elements: x.view(-1, 784), x.view(x.size(0), -1), t.view(2, t.size(1),
 * 6). The batch size is not known when compiling, so the batch is named:
 * x.size(i) where it is, or -1 first (the rest a sample's elements). A view
 * keeps as many of a sample's elements before the batch (tensor.c's
 * ten_view_ok): it never moves data. */
static Val eval_view(Sema *S, const Expr *e)
{
    const char *fn = e->written ? e->written : e->s;
    if (e->nargs < 1 || e->args[0]->key) {
        diag_error(e->loc, "%s expects a tensor and a shape", fn);
        return POISON;
    }
    Val x = eval(S, e->args[0]->val);
    const Arg *const *dims = (const Arg *const *)e->args + 1;
    int n = e->nargs - 1;
    if (n == 1 && dims[0]->val->kind == E_TUPLE) {     /* x.view((-1, 784)) */
        dims = (const Arg *const *)dims[0]->val->args;
        n = dims[0] ? e->args[1]->val->nargs : 0;
    }
    const int batched = x.id < 0 || ten_batch_dim(&x.s) >= 0;  /* a constant has no batch */
    /* one dimension, the batch's: targets in a loss block (y.view(-1)) */
    const int least = batched && !S->in_loss ? 2 : 1;
    if (n < least || n > MAX_RANK) {
        diag_error(e->loc, "%s needs %d to %d dimensions%s, got %d", fn, least, MAX_RANK,
                   batched ? ", the batch first" : "", n);
        return POISON;
    }
    Shape s = {n, {0}};
    int ok = 1, infer = -1, over = 0, batch = -1;     /* over: three dimensions of 2^24 pass 2^63 */
    int64_t known = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i]->key) {
            diag_error(dims[i]->key_loc, "%s takes no keyword arguments", fn);
            ok = 0;
            continue;
        }
        if (!layer_size(S, dims[i]->val, &s.d[i])) {
            ok = 0;
            continue;
        }
        if (s.d[i] == -2 && infer >= 0) {
            diag_error(dims[i]->val->loc, "only one dimension can be inferred (-1)");
            ok = 0;
        } else if (s.d[i] == -2) {
            infer = i;
        } else if (s.d[i] == DIM_N && batch >= 0) {
            diag_error(dims[i]->val->loc, "the batch appears twice");
            ok = 0;
        } else if (s.d[i] == DIM_N) {
            batch = i;
        } else {
            over |= __builtin_mul_overflow(known, s.d[i], &known);
        }
    }
    if (!ok || x.id < 0)
        return POISON;
    if (!batched) {     /* a constant's view: -1 inferred from its elements */
        const int64_t all = ir_row_elems(&x.s);
        if (batch >= 0) {
            diag_error(dims[batch]->val->loc, "%s of %s, a tensor without the batch, cannot have the batch's size",
                       fn, ir_shape_str(&x.s));
            return POISON;
        }
        if (infer >= 0 && !over && known > 0 && all % known == 0)
            s.d[infer] = all / known, known = all;
        if (over || known != all) {
            diag_error(e->loc, "%s of %s (%lld elements) as %s", fn, ir_shape_str(&x.s), (long long)all,
                       ir_shape_str(&s));
            return POISON;
        }
        return ir_same_shape(&s, &x.s) ? x : layer_node(S, OP_RESHAPE, x.id, -1, s, e->loc);
    }
    if (batch < 0 && s.d[0] != -2) {
        diag_error(dims[0]->val->loc, "the batch's dimension is not in the shape (got %lld first): -1 or x.size(0) "
                   "first, or x.size(i) where it is (the batch size is not known when compiling)", (long long)s.d[0]);
        return POISON;
    }
    const int64_t per = ir_row_elems(&x.s);
    if (batch < 0) {    /* -1 first: the batch, merged with what the sample has beyond the rest (N*T rows) */
        batch = 0, infer = -1;
        s.d[0] = !over && known > 0 && per % known == 0 && per / known > 1 ? -(per / known) : DIM_N;
        known *= ir_batch_mul(s.d[0]);
    } else {
        s.d[batch] = DIM_N;
    }
    if (infer >= 0 && !over && known > 0 && per % known == 0)
        s.d[infer] = per / known, known = per;
    if (over || known != per) {
        diag_error(e->loc, "%s: a sample of %s has %lld elements, the shape asks for %s", fn, ir_shape_str(&x.s),
                   (long long)per, over ? "more than 2^63" : util_fmt("%lld", (long long)known));
        return POISON;
    }
    if (!ten_view_ok(&x.s, &s)) {
        diag_error(e->loc, "%s of %s as %s would move the batch among the elements (a sample's elements must stay "
                   "as many before it and after it); permute first", fn, ir_shape_str(&x.s), ir_shape_str(&s));
        return POISON;
    }
    if (ir_same_shape(&s, &x.s))
        return x;
    return layer_node(S, OP_RESHAPE, x.id, -1, s, e->loc);
}

/* torch.cat((a, b, ...), dim = 1), or a list: along the features of
 * [N, F] or the channels of [N, C, H, W] only, where a sample's elements
 * of each operand are one contiguous row (cat puts them side by side, a
 * copy; its gradient takes each operand's columns back). torch.cat's own
 * default dim 0 would concatenate batches: refused with the fix. */
static Val eval_cat(Sema *S, const Expr *e)
{
    static const char *const names[] = {"tensors", "dim"};
    const char *fn = e->written ? e->written : e->s;
    const Sig sig = {fn, names, 2, 2, 1};
    Expr *a[2];
    int64_t dim = 0;
    if (!arg_bind(e, &sig, a))
        return POISON;
    if (a[0]->kind != E_TUPLE) {
        diag_error(a[0]->loc, "%s expects a tuple or list of tensors: %s((a, b), dim = 1)", fn, fn);
        return POISON;
    }
    int n = a[0]->nargs, ok = 1;
    Val *t = util_alloc(sizeof *t * (size_t)n);
    for (int k = 0; k < n; k++) {
        t[k] = eval(S, a[0]->args[k]->val);
        ok &= t[k].id >= 0;
    }
    if (a[1] && !arg_int(a[1], "dim", -MAX_RANK, MAX_RANK - 1, &dim))
        return POISON;
    if (!ok)
        return POISON;
    int r = t[0].s.rank;
    int64_t d = dim < 0 ? dim + r : dim;
    if (d < 0 || d >= r) {
        diag_error(a[1]->loc, "%s: dim %lld is out of range for %s", fn, (long long)dim, ir_shape_str(&t[0].s));
        return POISON;
    }
    if (IR_IS_BATCH(t[0].s.d[d])) {
        diag_error(a[1] ? a[1]->loc : e->loc, "%s along dim %lld, the batch, is not supported%s", fn, (long long)dim,
                   a[1] ? "" : ": write dim = 1 (torch.cat's default, 0, is the batch)");
        return POISON;
    }
    int rows = 1;   /* along dim 1 of batch-first operands: a sample's rows side by side (OP_CAT) */
    for (int k = 0; k < n; k++)
        rows &= IR_IS_BATCH(t[k].s.d[0]);
    if (d != 1 || !rows) {
        const Expr **where = util_alloc(sizeof *where * (size_t)n);
        for (int k = 0; k < n; k++)
            where[k] = a[0]->args[k]->val;
        return meth_cat(S, e, t, n, (int)d, (const Expr *const *)where);
    }
    Val acc = t[0];
    for (int k = 1; k < n; k++) {
        int same = t[k].s.rank == r;
        for (int i = 2; same && i < r; i++)
            same = t[k].s.d[i] == acc.s.d[i];
        if (!same) {
            diag_error(a[0]->args[k]->val->loc, "%s: cannot put %s beside %s along dim 1 (the other dimensions "
                       "differ)", fn, ir_shape_str(&t[k].s), ir_shape_str(&t[0].s));
            return POISON;
        }
        Shape s = acc.s;
        s.d[1] += t[k].s.d[1];
        if (ir_row_elems(&s) > MAX_DIM) {
            diag_error(e->loc, "%s gives %s: too large (the limit is %d elements per sample)", fn, ir_shape_str(&s),
                       MAX_DIM);
            return POISON;
        }
        acc = layer_node(S, OP_CAT, acc.id, t[k].id, s, e->loc);
    }
    return acc;
}

/* callee(x): a layer of the model, or a function. */
static Val eval_call(Sema *S, const Expr *e)
{
    /* self.transformer.wte(idx): reads as wte(transformer, idx), a method
     * of its receiver; a ModuleDict's layer is the call */
    if (e->nargs == 2 && !e->args[0]->key && !e->args[1]->key && e->args[0]->val->kind == E_NAME) {
        const Layer *d = layer_at(S, e->args[0]->val->s);
        const Layer *kid = d && d->kind == LK_DICT ? layer_dict_kid(d, e->s) : NULL;
        if (kid)
            return layer_apply(S, kid, eval(S, e->args[1]->val), e->loc, 0);
        if (d && d->kind == LK_DICT) {
            diag_error(e->loc, "%s has no layer '%s'", d->what, e->s);
            return POISON;
        }
    }
    int li = find_layer(S, e->s);
    int ok = 1;
    const Layer *xl = xf_callee(S, e);
    if (xl) {   /* an encoder called with its masks; attention's tuple without unpacking is refused there */
        Val out[2];
        return xf_call(S, xl, e, out, 1, (int[]){1, 0}) ? out[0] : POISON;
    }
    if (li < 0 && strcmp(e->s, "size") == 0) {
        diag_error(e->loc, "%s is a number, not a tensor; a size is read from a variable (T = h.size(1), "
                   "h.shape[1]) and goes into shapes and constant arithmetic", arg_show(e));
        return POISON;
    }
    if (li < 0 && strcmp(e->s, "dropout") == 0)
        return eval_dropout(S, e);
    if (li < 0 && strcmp(e->s, "scaled_dot_product_attention") == 0)
        return attn_sdpa(S, e);
    if (li < 0 && lfn_handles(e->s) && S->in_loss)
        return lfn_call(S, e);
    if (li < 0 && lfn_handles(e->s)) {
        diag_error(e->loc, "%s is a loss: it goes in the train block, as loss %s(...) or in a loss block (loss(out, "
                   "y) { return F.%s(out, y) })", e->written ? e->written : e->s, e->s, e->s);
        return POISON;
    }
    if (li < 0 && tint_handles(e->s))
        return tint_call(S, e);
    if (li < 0 && meth_handles(e->s))
        return meth_call(S, e);
    if (li < 0 && tfn_handles(e->s))
        return tfn_call(S, e);
    if (li < 0 && strcmp(e->s, "flatten") == 0)
        return eval_flatten(S, e);
    if (li < 0 && (strcmp(e->s, "cat") == 0 || strcmp(e->s, "concat") == 0))
        return eval_cat(S, e);
    if (li < 0 && layer_fn(e->s)) {     /* F.max_pool2d(x, 2), F.softmax(x, dim = 1), ... */
        const Expr *in = NULL;
        Layer *l = layer_make_fn(S, e, &in);
        Val x = in ? eval(S, in) : POISON;
        return l && x.id >= 0 ? layer_apply(S, l, x, e->loc, 0) : POISON;
    }
    if (li < 0 && layer_act_fn(e->s) >= 0) {
        const Expr *in = NULL;
        ActArgs p;
        int ok = layer_act_call(e, layer_act_fn(e->s), &in, &p);
        Val x = in ? eval(S, in) : POISON;
        return ok ? layer_act(S, p, x, e->loc) : POISON;
    }
    if (li < 0 && (strcmp(e->s, "view") == 0 || strcmp(e->s, "reshape") == 0))
        return eval_view(S, e);
    if (li >= 0 || is_function(e->s)) {
        /* fine: checked below */
    } else if (layer_type(e->s) >= 0) {
        diag_error(e->loc, "'%s' is a layer type: declare the layer in the model (name = %s(...)) and call "
                   "it by name%s", e->s, e->s,
                   layer_act_fn_of(e->s) ? util_fmt(", or use %s(x)", layer_act_fn_of(e->s))
                   : strcmp(e->s, "Flatten") == 0 ? ", or use flatten(x)"
                   : strcmp(e->s, "Dropout") == 0 ? ", or use dropout(x, p)" : "");
        ok = 0;
    } else if (find_var(S, e->s)) {
        diag_error(e->loc, "'%s' is a tensor, not a layer or function", e->s);
        ok = 0;
    } else {
        Near s = arg_near(e->s);
        for (int i = 0; i < S->nlayers; i++)
            arg_near_try(&s, S->decls[i]->name);
        for (int i = 0; i < NFUNCTIONS; i++)
            arg_near_try(&s, functions[i]);
        for (int i = 0; layer_act_fn_name(i); i++)
            arg_near_try(&s, layer_act_fn_name(i));
        for (int i = 0; layer_fn_name(i); i++)
            arg_near_try(&s, layer_fn_name(i));
        if ((e->written && e->written != e->s) || is_torch_function(e->s))  /* F.mish, torch.cat: PyTorch's */
            diag_error(e->loc, "%s is not supported (supported functions: %s)", e->written, function_list());
        else if (layer_torch_module(e->s))
            diag_error(e->loc, "nn.%s is not supported (supported layers: %s)", e->s, layer_list());
        else
            diag_error(e->loc, "unknown function or layer '%s'%s (supported functions: %s)", e->s,
                       arg_near_hint(&s), function_list());
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
        return layer_apply(S, S->layers[li], x, e->loc, 0);
    }
    diag_ice("forward: function '%s' has no lowering", e->s);
}

/* An operand of arithmetic: a tensor, or a constant (x * 0.5, 1 - x). */
typedef struct Operand {
    int is_const;
    double c;
    Val v;
} Operand;

/* a if self.training else b: a in the train plan, b in the eval plan (a
 * view there, as dropout is); the only condition known when compiling */
static Val eval_cond(Sema *S, const Expr *e)
{
    if (!(e->b->kind == E_NAME && strcmp(e->b->s, "training") == 0)) {
        diag_error(e->b->loc, "a conditional expression chooses on self.training only (a if self.training else b), "
                   "got %s: a condition on the data would change the graph from one batch to the next",
                   arg_show(e->b));
        return POISON;
    }
    Val a = eval(S, e->a), b = eval(S, e->c);
    if (a.id < 0 || b.id < 0)
        return POISON;
    if (!ten_same(&a.s, &b.s) || S->g->n[a.id]->dt != DT_F32 || S->g->n[b.id]->dt != DT_F32) {
        diag_error(e->loc, "both values of a conditional expression must be float tensors of one shape, got %s%s "
                   "and %s%s", ir_dtype_text(S->g->n[a.id]->dt), ir_shape_str(&a.s),
                   ir_dtype_text(S->g->n[b.id]->dt), ir_shape_str(&b.s));
        return POISON;
    }
    return layer_node(S, OP_T_IF_TRAINING, b.id, a.id, a.s, e->loc);
}

static const char *arith_sym(ExprKind k)
{
    return k == E_ADD ? "+" : k == E_SUB ? "-" : k == E_MUL ? "*" : k == E_DIV ? "/" : "//";
}

static Val scalar_node(Sema *S, Op op, Val x, double a, double b, Loc loc)
{
    /* the batch elsewhere, or the value of an op over tensors of any rank
     * (a permute, a product's result), or a 0-d value (a loss): the ops
     * over any layout, which join that op's kernel (rule tensor-chain)
     * instead of a copy kernel before */
    if (x.id >= 0 && (ten_batch_dim(&x.s) > 0 || op_kind[S->g->n[x.id]->op] == K_TENSOR || x.s.rank == 0)) {
        if (op == OP_AFFINE)
            return tfn_unary(S, OP_T_AFFINE, x, a, b, loc);
        Val y = layer_node(S, OP_BC_SCALE, x.id, -1, x.s, loc);     /* OP_DIV_SCALAR: x / a */
        if (y.id >= 0)
            S->g->n[y.id]->ten.scale = a;
        return y;
    }
    Val y = layer_node(S, op, x.id, -1, x.s, loc);
    if (y.id >= 0) {
        S->g->n[y.id]->act.a = a;
        S->g->n[y.id]->act.b = b;
    }
    return y;
}

/* a op b, elementwise: tensors of one shape, or a tensor and a constant
 * (x + 1, 1 - x, 2 * x, x / 4); two constants fold. */
static Operand arith(Sema *S, Operand a, ExprKind k, Operand b, Loc loc)
{
    Operand r = {0, 0, POISON};
    if (a.is_const && b.is_const) {     /* 2 * 3 * x: (2 * 3) first */
        r.is_const = 1;
        r.c = k == E_ADD ? a.c + b.c : k == E_SUB ? a.c - b.c : k == E_MUL ? a.c * b.c : k == E_DIV ? a.c / b.c
              : k == E_FDIV ? floor(a.c / b.c) : a.c - b.c * floor(a.c / b.c);
        if ((k == E_DIV || k == E_FDIV || k == E_MOD) && b.c == 0) {
            diag_error(loc, "division by zero");
            r = (Operand){0, 0, POISON};
        }
        return r;
    }
    if ((!a.is_const && a.v.id < 0) || (!b.is_const && b.v.id < 0))
        return r;
    if (k == E_FDIV || k == E_MOD) {
        /* an index by a whole number: i // 2, i % 2 */
        const Val x = a.is_const ? b.v : a.v;
        if (!a.is_const && b.is_const && S->g->n[x.id]->dt == DT_I64 && b.c == floor(b.c) && b.c != 0) {
            r.v = tfn_unary(S, k == E_FDIV ? OP_T_FLOORDIV_C : OP_T_MOD_C, x, b.c, 0, loc);
            return r;
        }
        diag_error(loc, "'%s' is supported between an i64 tensor and a whole number only (floor division and "
                   "remainder have no gradient); use '/' for floats", k == E_FDIV ? "//" : "%");
        return r;
    }
    if (!a.is_const && !b.is_const) {
        /* one shape, the batch first: the elementwise ops (fused); else
         * broadcast (tensor.c) */
        const DType ta = S->g->n[a.v.id]->dt, tb = S->g->n[b.v.id]->dt;
        if (ta == DT_BOOL && tb == DT_BOOL && k != E_MUL) {
            diag_error(loc, "'%s' of two bool tensors is not supported (PyTorch's is a logical or, or an error); "
                       "use '|', or .long() to count", arith_sym(k));
            return r;
        }
        if (k != E_DIV && ir_same_shape(&a.v.s, &b.v.s) && ten_batch_dim(&a.v.s) <= 0 && a.v.s.rank > 0
            && ta == DT_F32 && tb == DT_F32) {
            r.v = layer_node(S, k == E_ADD ? OP_ADD : k == E_SUB ? OP_SUB : OP_MUL, a.v.id, b.v.id, a.v.s, loc);
            return r;
        }
        r.v = meth_broadcast(S, k == E_ADD ? OP_BC_ADD : k == E_SUB ? OP_BC_SUB : k == E_MUL ? OP_BC_MUL : OP_BC_DIV,
                             a.v, b.v, arith_sym(k), loc);
        return r;
    }
    double c = a.is_const ? a.c : b.c;
    Val x = a.is_const ? b.v : a.v;
    if (!arg_float32(loc, "the constant", c))
        return r;
    const DType tx = S->g->n[x.id]->dt;
    if (tx != DT_F32 && k != E_DIV) {
        /* an index or a mask with a number: an i64 while the number is whole
         * (arange(T) * 2 + 1), a float otherwise, as PyTorch promotes */
        const double m = k == E_MUL ? c : k == E_SUB && a.is_const ? -1 : 1;
        const double add = k == E_MUL ? 0 : k == E_SUB && !a.is_const ? -c : c;
        r.v = tfn_unary(S, OP_T_AFFINE, x, m, add, loc);
        if (r.v.id >= 0)
            S->g->n[r.v.id]->dt = c == floor(c) ? DT_I64 : DT_F32;
        return r;
    }
    switch (k) {
    case E_ADD: r.v = scalar_node(S, OP_AFFINE, x, 1, c, loc); break;
    case E_SUB: r.v = a.is_const ? scalar_node(S, OP_AFFINE, x, -1, c, loc) : scalar_node(S, OP_AFFINE, x, 1, -c, loc);
        break;
    case E_MUL: r.v = scalar_node(S, OP_AFFINE, x, c, 0, loc); break;
    default:
        if (a.is_const) {
            diag_error(loc, "dividing by a tensor is not supported");
        } else if (c == 0) {
            diag_error(loc, "division by zero");
        } else {
            r.v = scalar_node(S, OP_DIV_SCALAR, x, c, 0, loc);
        }
        break;
    }
    return r;
}

static int is_arith(const Expr *e)
{
    return e->kind == E_ADD || e->kind == E_SUB || e->kind == E_MUL || e->kind == E_DIV || e->kind == E_FDIV
        || e->kind == E_MOD;
}

/* An operand: a constant when it folds to one, else a tensor. */
static Operand operand(Sema *S, const Expr *e)
{
    double c;
    int r = arg_const(e, &c);
    if (r == 1)
        return (Operand){1, c, POISON};
    if (r < 0)
        return (Operand){0, 0, POISON};
    return (Operand){0, 0, eval(S, e)};
}

/* a + b * c - ...: the left spine is walked in a loop, so no sum is long
 * enough to overflow the stack. A whole expression that folds to a
 * constant is not a tensor (the caller reports it). */
static Val eval_arith(Sema *S, const Expr *e)
{
    int n = 0;
    const Expr *p = e;
    for (; is_arith(p); p = p->a)
        n++;
    const Expr **spine = util_alloc(sizeof *spine * (size_t)n);
    for (const Expr *q = e; is_arith(q); q = q->a)
        spine[--n] = q;
    Operand acc = operand(S, p);
    for (const Expr *const *q = spine; *q != e; q++)
        acc = arith(S, acc, (*q)->kind, operand(S, (*q)->b), (*q)->loc);
    acc = arith(S, acc, e->kind, operand(S, e->b), e->loc);
    if (acc.is_const) {
        diag_error(e->loc, "expected a tensor, got the constant %g", acc.c);
        return POISON;
    }
    return acc.v;
}

/* A tensor expression of forward. */
static Val eval(Sema *S, const Expr *e)
{
    switch (e->kind) {
    case E_NAME: {
        Var *v = find_var(S, e->s);
        if (v && v->is_num) {
            diag_error(e->loc, "'%s' is %s, not a tensor", e->s, v->is_batch ? "the batch's size" : "a number");
            return POISON;
        }
        if (v && v->tup) {
            diag_error(e->loc, "'%s' is the tuple forward returns (%d tensors): unpack it (a, b = %s) or index it "
                       "(%s[0])", e->s, v->ntup, e->s, e->s);
            return POISON;
        }
        if (!v && S->in_loss && strncmp(e->s, "model.", 6) == 0)
            return lblk_model_tensor(S, e);
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
        const char *dot = strchr(e->s, '.');
        if (dot && find_layer(S, util_fmt("%.*s", (int)(dot - e->s), e->s)) >= 0) {
            diag_error(e->loc, "'%s': a layer's parameters are not values in forward yet (a matrix product with a "
                       "weight is the layer's call)", e->s);
            return POISON;
        }
        Near s = arg_near(e->s);
        for (int i = 0; i < S->nvars; i++)
            arg_near_try(&s, S->vars[i].name);
        diag_error(e->loc, "unknown variable '%s'%s", e->s, arg_near_hint(&s));
        return POISON;
    }
    case E_CALL:
        return eval_call(S, e);
    case E_ADD: case E_SUB: case E_MUL: case E_DIV: case E_FDIV: case E_MOD:
        return eval_arith(S, e);
    case E_INDEX: {
        const Layer *xl = xf_callee(S, e->a), *rl = rnn_callee(S, e->a);
        const Var *tv = e->a->kind == E_NAME ? find_var(S, e->a->s) : NULL;
        int64_t k;
        if (tv && tv->tup) {    /* out[1]: one of the tensors forward returned */
            if (e->nargs != 1 || e->args[0]->val->kind == E_SLICE) {
                diag_error(e->loc, "%s is a tuple of %d tensors: index it with one number", e->a->s, tv->ntup);
                return POISON;
            }
            if (!arg_int(e->args[0]->val, "the element", -tv->ntup, tv->ntup - 1, &k))
                return POISON;
            return tv->tup[k < 0 ? k + tv->ntup : k];
        }
        if (rl && e->nargs == 1 && e->args[0]->val->kind != E_SLICE) {     /* lstm(x)[0], gru(x)[1] */
            Val out[3];
            if (!arg_int(e->args[0]->val, "the element", -2, 1, &k))
                return POISON;
            k = k < 0 ? k + 2 : k;
            if (k == 1 && rl->rnn.cell == RNN_LSTM) {
                diag_error(e->loc, "%s(...)[1] is the tuple (h_n, c_n): unpack it (out, (h_n, c_n) = ...)",
                           rl->what);
                return POISON;
            }
            return rnn_call(S, rl, e->a, out, (int[]){k == 0, k == 1, 0}) ? out[k] : POISON;
        }
        if (xl && xl->kind == LK_MHA && e->nargs == 1 && e->args[0]->val->kind != E_SLICE) {  /* attn(...)[0] */
            Val out[2];
            if (!arg_int(e->args[0]->val, "the element", -2, 1, &k))
                return POISON;
            k = k < 0 ? k + 2 : k;
            return xf_call(S, xl, e->a, out, 2, (int[]){1, k == 1}) ? out[k] : POISON;
        }
        return meth_index(S, e);
    }
    case E_MATMUL: {
        Val a = eval(S, e->a), b = eval(S, e->b);
        return tfn_matmul(S, a, b, "'@'", e->loc);
    }
    case E_CMP:
        return tint_compare(S, e);
    case E_COND:
        return eval_cond(S, e);
    case E_AND: case E_OR: case E_NOT:
        return tint_logic(S, e);
    case E_POW: {
        double c;
        if (arg_const(e->a, &c) == 1) {
            diag_error(e->loc, "a number to a tensor's power is not supported (torch.pow(c, x)); exp(x * log(c)) "
                       "is the same");
            return POISON;
        }
        return tfn_pow(S, eval(S, e->a), e->b, "'**'", e->loc);
    }
    case E_NEG: {
        /* -x is x * -1 (a constant -3 is not a tensor: reported below) */
        double c;
        if (arg_const(e, &c) != 0)
            break;
        Val x = eval(S, e->a);
        return x.id < 0 ? x : scalar_node(S, OP_AFFINE, x, -1, 0, e->loc);
    }
    default:
        break;
    }
    diag_error(e->loc, "expected a tensor, got %s", arg_show(e));
    return POISON;
}

/* The input type f32[N, d1, ...]: returns 0 after reporting. */
/* forward's input type: f32 samples, or i64 tokens (an embedding's index) */
static int check_input(const TypeExpr *t, Shape *s, DType *dt)
{
    int ok = 1;
    *dt = strcmp(t->dtype, "i64") == 0 ? DT_I64 : DT_F32;
    if (strcmp(t->dtype, "f32") != 0 && strcmp(t->dtype, "i64") != 0) {
        diag_error(t->loc, "the input must be f32 (samples) or i64 (tokens), got '%s'", t->dtype);
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

static int is_log_softmax(const Sema *S, const Expr *e)
{
    return e->kind == E_CALL && strcmp(e->s, "log_softmax") == 0 && find_layer(S, e->s) < 0;
}

/* return F.log_softmax(x, dim = 1): the model gives log-probabilities, for
 * nll_loss. The graph keeps x as the logits: log_softmax(log_softmax(x))
 * is log_softmax(x), so the loss (cross-entropy, itself a log_softmax) and
 * the accuracy (an argmax) of x are those of the log-probabilities. */
static Val eval_log_softmax(Sema *S, const Expr *e)
{
    static const char *const names[] = {"input", "dim"};
    const Sig sig = {e->written ? e->written : e->s, names, 2, 2, 1};
    Expr *a[2];
    int64_t dim = 1;
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = eval(S, a[0]);
    if (a[1] && !arg_int(a[1], "dim", -MAX_RANK, MAX_RANK - 1, &dim))
        return POISON;
    if (x.id >= 0 && x.s.rank >= 2 && dim != x.s.rank - 1 && dim != -1) {
        diag_error(a[1]->loc, "the returned log_softmax must be over the classes, the last dimension (dim = %d), "
                   "got dim = %lld", x.s.rank - 1, (long long)dim);
        return POISON;
    }
    S->g->log_probs = 1;
    return x;
}

/* What forward may return: the logits of classes [N, C], or [N, T, C]
 * with a class at each position, or their rows with the batch merged in
 * (logits.view(-1, C): [N*T, C]); for a loss of each output, outputs of
 * any shape with the batch first. */
int fwd_output_ok(const Shape *s, int elementwise)
{
    return s->rank >= 2 && ten_batch_dim(s) == 0 && (s->d[0] == DIM_N || s->rank == 2)
           && (elementwise || s->rank <= 3);
}

static const char *output_form(const Sema *S)
{
    return S->elementwise ? "outputs [N, ...] (the batch first)"
                          : "logits [N, C] (or [N, T, C]: classes at each of T positions)";
}

static void run_for(Sema *S, const Stmt *st, Val *ret, int *returned);

/* return logits, aux (a loss block takes the tuple): each a float tensor
 * with the batch first; the first is the one the metric reads */
static Val forward_tuple(Sema *S, const Expr *e)
{
    S->nouts = e->nargs;
    S->outs = util_alloc(sizeof *S->outs * (size_t)e->nargs);
    int ok = 1;
    for (int k = 0; k < e->nargs; k++) {
        const Expr *a = e->args[k]->val;
        Val v = eval(S, a);
        if (v.id >= 0 && k > 0 && ten_batch_dim(&v.s) != 0) {
            diag_error(a->loc, "each tensor forward returns has the batch first, got %s", ir_shape_str(&v.s));
            v = POISON;
        }
        ok &= v.id >= 0 && layer_float(S, v, "the loss", a->loc);
        S->outs[k] = v;
    }
    return ok ? S->outs[0] : POISON;
}

/* The most graph nodes a model's forward may make: a hundred times a
 * character GPT's (about 250 with its backward), and where the C
 * compiler's time on the generated program stays within a minute (cc -O3,
 * measured on 2 cores: 3 s for 5,000 chained `x = relu(x)` and their
 * gradients, 40 s for 19,900, growing faster than the count). A 10 MB
 * file of them is refused here in a second instead of cc running on
 * 150 MB of C for hours. */
#define FWD_MAX_NODES 20000

/* statements in order (forward's, a for loop's); *ret and *returned: the
 * return's value once one ran */
static void run_stmts(Sema *S, Stmt *const *body, int n, Val *ret, int *returned)
{
    for (int i = 0; i < n; i++) {
        const Stmt *st = body[i];
        if (S->g->nn > FWD_MAX_NODES) {
            if (!S->g->over_limit)
                diag_error(st->loc, "the model's graph reaches %d operations at this statement, over the limit "
                           "of %d (past it the C compiler's time on the generated program grows to hours)",
                           S->g->nn, FWD_MAX_NODES);
            S->g->over_limit = 1;
            *ret = POISON;
            *returned = 1;
            return;
        }
        if (*returned) {
            diag_error(st->loc, "statement after return is never run");
            *ret = POISON;
            return;
        }
        if (st->kind == S_FOR) {
            run_for(S, st, ret, returned);
            continue;
        }
        if (st->nnames > 0 && unpack_sizes(S, st) >= 0)     /* N, T, C = x.size() */
            continue;
        if (st->nnames > 0) {   /* a, b = torch.chunk(x, 2, 1) */
            Val *vs = util_alloc(sizeof *vs * (size_t)st->nnames);
            const Layer *xl = xf_callee(S, st->val), *rl = rnn_callee(S, st->val);
            const Var *tv = st->val->kind == E_NAME ? find_var(S, st->val->s) : NULL;
            int ok;
            if (tv && tv->tup) {    /* logits, aux = out */
                ok = st->nnames == tv->ntup && !st->nested;
                if (!ok)
                    diag_error(st->loc, "%s is a tuple of %d tensors; %d names cannot unpack it", st->val->s, tv->ntup,
                               st->nnames);
                for (int k = 0; ok && k < st->nnames; k++)
                    vs[k] = tv->tup[k];
            } else if (rl) {           /* out, (h_n, c_n) = self.lstm(x): each built only where named */
                int *which = util_alloc(sizeof *which * (size_t)st->nnames), want[3] = {0, 0, 0};
                Val res[3];
                ok = rnn_unpack(rl, st, which);
                for (int k = 0; ok && k < st->nnames; k++)
                    if (which[k] >= 0)
                        want[which[k]] = 1;
                ok = ok && rnn_call(S, rl, st->val, res, want);
                for (int k = 0; ok && k < st->nnames; k++)
                    vs[k] = which[k] >= 0 ? res[which[k]] : POISON;
            } else if (st->nested) {
                const int li = st->val->kind == E_CALL ? find_layer(S, st->val->s) : -1;
                if (li < 0 || S->layers[li])    /* a layer whose declaration was refused has said why */
                    diag_error(st->loc, "names in parentheses unpack an LSTM's (h_n, c_n); this value is not one");
                ok = 0;
            } else if (xl) {    /* out, w = self.attn(x, x, x): the weights only where named */
                const int want[2] = {1, st->nnames > 1 && strcmp(st->names[1], "_") != 0};
                ok = xf_call(S, xl, st->val, vs, st->nnames, want);
            } else {
                ok = meth_unpack(S, st->val, vs, st->nnames);
            }
            for (int k = 0; k < st->nnames; k++) {
                if (find_layer(S, st->names[k]) >= 0)
                    diag_error(st->name_locs[k], "'%s' is a layer; a variable cannot have its name", st->names[k]);
                else
                    set_var(S, st->names[k], ok ? vs[k] : POISON);
            }
            continue;
        }
        double num;
        int64_t size;
        if (st->kind == S_ASSIGN && arg_size(st->val, &size) == 1 && size == DIM_N) {     /* B = x.size(0) */
            set_num(S, st->name, DIM_N, 1);
            continue;
        }
        int is_int;
        const int nr = st->kind == S_ASSIGN ? arg_number(st->val, &num, &is_int) : 0;
        if (nr != 0) {      /* hs = C // 4, scale = 1 / math.sqrt(hs): a number */
            if (nr > 0)
                set_num(S, st->name, num, is_int);
            continue;
        }
        const int tuple = st->kind == S_RETURN && !S->module && !S->in_loss && st->val->kind == E_TUPLE;
        if (tuple && !S->lossb) {
            diag_error(st->val->loc, "forward returns a tuple of %d tensors: a loss block in the train block takes it "
                       "(loss(out, y) { logits, aux = out ... return ... })", st->val->nargs);
            *ret = POISON;
            *returned = 1;
            continue;
        }
        Val v = tuple ? forward_tuple(S, st->val)
                : st->kind == S_RETURN && !S->lossb && is_log_softmax(S, st->val) ? eval_log_softmax(S, st->val)
                : eval(S, st->val);
        if (st->kind == S_RETURN && (S->module || S->in_loss)) {    /* a block's: what its caller takes */
            *ret = v;
            *returned = 1;
        } else if (st->kind == S_RETURN) {
            Val ret_ = v;
            *returned = 1;
            const Node *images = v.id >= 0 ? S->g->n[S->g->images] : NULL;
            if (S->autoenc && v.id >= 0 && (v.s.d[0] != DIM_N || ir_row_elems(&v.s) != ir_row_elems(&images->shape))) {
                diag_error(st->val->loc, "an autoencoder's forward (target = input) must return [N, ...] with the "
                           "input's %lld elements a sample, got %s", (long long)ir_row_elems(&images->shape),
                           ir_shape_str(&v.s));
                ret_ = POISON;
            } else if (!S->autoenc && v.id >= 0 && !fwd_output_ok(&v.s, S->elementwise)) {
                diag_error(st->val->loc, "forward must return %s, got %s", output_form(S), ir_shape_str(&v.s));
                ret_ = POISON;
            } else if (!layer_float(S, v, "the loss", st->val->loc)) {
                ret_ = POISON;
            } else if (S->autoenc) {
                ret_ = layer_flatten(S, v, st->val->loc);
            }
            *ret = ret_;
        } else if (find_layer(S, st->name) >= 0) {
            diag_error(st->loc, "'%s' is a layer; a variable cannot have its name", st->name);
        } else {
            set_var(S, st->name, v);
        }
    }
}

/* for block in self.h { ... }: the body once per layer of a ModuleList
 * (or Sequential), the name bound to the layer while it runs: unrolled
 * at compile time, so each block is its own kernels */
static void run_for(Sema *S, const Stmt *st, Val *ret, int *returned)
{
    const Layer *list = st->val->kind == E_NAME ? layer_at(S, st->val->s) : NULL;
    if (!list || (list->kind != LK_LIST && list->kind != LK_SEQUENTIAL)) {
        diag_error(st->val->loc, "a for loop iterates a ModuleList (or a Sequential) of the model, such as "
                   "for block in self.h, got %s", arg_show(st->val));
        return;
    }
    if (find_layer(S, st->name) >= 0 || find_var(S, st->name)) {
        diag_error(st->loc, "the loop's name '%s' is already a layer or a variable", st->name);
        return;
    }
    LayerDecl *d = util_alloc(sizeof *d);
    d->name = st->name;
    d->loc = st->loc;
    S->layers = util_grow(S->layers, sizeof *S->layers * (size_t)S->nlayers,
                          sizeof *S->layers * (size_t)(S->nlayers + 1));
    S->decls = util_grow(S->decls, sizeof *S->decls * (size_t)S->nlayers, sizeof *S->decls * (size_t)(S->nlayers + 1));
    const int at = S->nlayers++;
    S->decls[at] = d;
    for (int k = 0; k < list->nkids && !*returned; k++) {
        S->layers[at] = list->kids[k];
        run_stmts(S, st->body, st->nbody, ret, returned);
    }
    S->nlayers--;       /* the name ends with the loop */
}

int fwd_is_block(const Model *m)
{
    return m->nparams >= 0 || (m->nfwd > 0 && !m->fwd[0]->type);
}

static const Model *find_block(const Sema *S, const char *name)
{
    for (int i = 0; S->file && i < S->file->nmodels; i++)
        if (strcmp(S->file->models[i]->name, name) == 0)
            return S->file->models[i];
    return NULL;
}

static Layer *make_block(Sema *S, const Expr *e, const char *prefix, const char *what);
static Val apply_block(Sema *S, const Layer *l, Val x, Loc loc);
static void members(Sema *S, const Model *m, const Forward *f);
static Val run_body(Sema *S, const Forward *f);

/* a Sema for a model of the file: the top model's, or a block's */
/* Sema.bind: a name for a tensor, or for a tuple of them (tup) */
static void bind_var(Sema *S, const char *name, Val v, Val *tup, int ntup)
{
    Var *p = new_var(S, name);
    *p = (Var){.name = name, .v = v, .tup = tup, .ntup = ntup};
}

static Sema sema_for(const Sema *from, const Model *m)
{
    return (Sema){.g = from->g, .m = m, .sync_bn = from->sync_bn, .autoenc = from->autoenc,
                  .elementwise = from->elementwise, .file = from->file, .eval = eval, .upsample = ups_apply,
                  .run = run_stmts, .bind = bind_var,
                  .find_block = find_block, .make_block = make_block, .apply_block = apply_block,
                  .make_xf = xf_make, .apply_xf = xf_apply, .make_rnn = rnn_make};
}

/* Block(n_embd = 64): the block's members made under prefix, its
 * constructor's numbers bound from the call (the caller's names) or its
 * defaults (the block's own, an earlier argument's name among them) */
static Layer *make_block(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    const Model *m = find_block(S, e->s);
    if (!fwd_is_block(m) || m->seq || m->nfwd != 1) {
        diag_error(e->loc, "model '%s' is not a block another model can make: give it a forward(x) whose input "
                   "has no type, or a constructor list (model %s(n) { ... })", m->name, m->name);
        return NULL;
    }
    if (S->depth >= 16) {
        diag_error(e->loc, "blocks nested more than 16 deep (does '%s' make itself?)", m->name);
        return NULL;
    }
    const int np = m->nparams > 0 ? m->nparams : 0;
    int nreq = 0;
    while (nreq < np && !m->defaults[nreq])
        nreq++;
    const Sig sig = {m->name, m->params, np, np, nreq};
    Expr **a = util_alloc(sizeof *a * (size_t)(np + 1));
    if (!arg_bind(e, &sig, a))
        return NULL;
    Sema *C = util_alloc(sizeof *C);
    *C = sema_for(S, m);
    C->prefix = prefix;
    C->module = 1;
    C->depth = S->depth + 1;
    int ok = 1;
    for (int k = 0; k < np && ok; k++) {
        double v;
        int is_int;
        if (!a[k])      /* a default: in the block's own names */
            arg_names(names_lookup, C);
        const Expr *val = a[k] ? a[k] : m->defaults[k];
        if (arg_number(val, &v, &is_int) != 1) {
            diag_error(val->loc, "%s's argument %s must be a number, got %s", m->name, m->params[k], arg_show(val));
            ok = 0;
        } else {
            set_num(C, m->params[k], v, is_int);
        }
        arg_names(names_lookup, S);
    }
    if (!ok)
        return NULL;
    arg_names(names_lookup, C);
    members(C, m, m->fwd[0]);
    arg_names(names_lookup, S);
    Layer *l = util_alloc(sizeof *l);
    l->kind = LK_BLOCK;
    l->name = prefix;
    l->what = what;
    l->loc = e->loc;
    l->w = l->b = -1;
    l->inst = C;
    return l;
}

/* block(x): its forward over x in its own names; the values it makes are
 * dropped after (a block called twice shares its parameters, as PyTorch's) */
static Val apply_block(Sema *S, const Layer *l, Val x, Loc loc)
{
    (void)loc;
    Sema *C = l->inst;
    const Forward *f = C->m->fwd[0];
    const int nvars = C->nvars;
    arg_names(names_lookup, C);
    set_var(C, f->param, x);
    Val y = run_body(C, f);
    C->nvars = nvars;
    arg_names(names_lookup, S);
    return y;
}

/* forward's statements, in order; returns the logits (a block: its
 * value) or POISON */
static Val run_body(Sema *S, const Forward *f)
{
    Val ret = POISON;
    int returned = 0;
    run_stmts(S, f->body, f->nbody, &ret, &returned);
    if (!returned)
        diag_error(f->end, "forward of '%s' does not return a value (add 'return ...')", S->m->name);
    return ret;
}

/* A member that is a tensor: self.mask = torch.tril(torch.ones(T, T)) or
 * self.register_buffer("mask", ...). Its value is a constant of the
 * program (no batch); a registered buffer is not written to checkpoints,
 * as PyTorch's persistent = False (its value is the expression's). */
static void member_tensor(Sema *S, const LayerDecl *d, const Forward *f)
{
    const Expr *e = d->init, *val = e;
    const char *name = d->name;
    Loc loc = d->loc;
    if (!name) {    /* register_buffer(name, tensor, persistent = ...) */
        static const char *const names[] = {"name", "tensor", "persistent"};
        const Sig sig = {"register_buffer", names, 3, 2, 2};
        Expr *a[3];
        int persistent;
        if (!arg_bind(e, &sig, a))
            return;
        if (a[0]->kind != E_STR) {
            diag_error(a[0]->loc, "register_buffer's name must be a string");
            return;
        }
        if (a[2] && !arg_bool(a[2], "persistent", &persistent))
            return;
        name = a[0]->s, val = a[1], loc = a[0]->loc;
    }
    if (find_layer(S, name) >= 0 || find_var(S, name) || (f && strcmp(name, f->param) == 0)) {
        diag_error(loc, "'%s' is already defined (a layer, a tensor or forward's input)", name);
        return;
    }
    Val v = prm_is_parameter(val) ? prm_parameter(S, d) : eval(S, val);
    if (v.id >= 0 && ten_batch_dim(&v.s) >= 0) {
        diag_error(val->loc, "a model's tensor cannot have the batch's size (it is fixed before any batch)");
        v = POISON;
    }
    set_var(S, name, v);
}

static Val model_body(Sema *S, Graph *g, const Model *m, Shape *in, int target_input);

static void tie(Sema *S, const LayerDecl *d);

/* name under the block's prefix (a top model's: as it is) */
static const char *prefixed(const Sema *S, const char *name)
{
    return S->prefix && *S->prefix ? util_fmt("%s.%s", S->prefix, name) : name;
}

/* A model's members: layers (under S's prefix), numbers, then the
 * tensors (buffers, constants, Parameters), which are values in forward
 * under their names (self.mask is mask), then its nn.init statements and
 * ties in file order. f: its forward, or NULL. */
static void members(Sema *S, const Model *m, const Forward *f)
{
    S->layers = util_alloc(sizeof *S->layers * (size_t)(m->nlayers + 1));
    S->decls = util_alloc(sizeof *S->decls * (size_t)(m->nlayers + 1));
    const LayerDecl **consts = util_alloc(sizeof *consts * (size_t)(m->nlayers + 1));
    const LayerDecl **later = util_alloc(sizeof *later * (size_t)(m->nlayers + 1));
    int nconst = 0, nlater = 0;
    for (int i = 0; i < m->nlayers; i++) {
        LayerDecl *d = m->layers[i];
        double num;
        int is_int;
        if (d->name && d->init->kind != E_CALL && arg_number(d->init, &num, &is_int) == 1) {
            set_num(S, d->name, num, is_int);    /* self.n_head = 4: a number of the model */
            continue;
        }
        /* nn.init statements and ties: once the parameters exist, in file order */
        if ((!d->name && prm_is_init(d->init)) || prm_is_tie(d)) {
            later[nlater++] = d;
            continue;
        }
        if (tint_is_constant(d->init) || (d->name && prm_is_parameter(d->init))) {
            consts[nconst++] = d;
            continue;
        }
        if (!d->name) {
            diag_error(d->loc, "%s(...) as a statement of a model is not supported (self.register_buffer(name, "
                       "tensor) is)", d->init->written ? d->init->written : d->init->s);
            continue;
        }
        int prev = find_layer(S, d->name);
        if (prev >= 0) {
            diag_error(d->loc, "layer '%s' is already defined", d->name);
            diag_note(S->decls[prev]->loc, "'%s' was first defined here", d->name);
        }
        if (f && strcmp(d->name, f->param) == 0)
            diag_error(d->loc, "layer '%s' has the name of forward's input", d->name);
        S->decls[S->nlayers] = d;
        S->layers[S->nlayers] = layer_make(S, d->init, prefixed(S, d->name), prefixed(S, d->name));
        S->nlayers++;
    }
    for (int i = 0; i < nconst; i++)
        member_tensor(S, consts[i], f);
    /* kept as made (forward may rebind the names): a loss block's model.NAME */
    S->tensors = util_alloc(sizeof *S->tensors * (size_t)(S->nvars + 1));
    for (int i = 0; i < S->nvars; i++)
        if (S->vars[i].v.id >= 0)
            S->tensors[S->ntensors++] = S->vars[i];
    for (int i = 0; i < nlater; i++)
        if (later[i]->name)
            tie(S, later[i]);
        else
            prm_init(S, later[i]->init);
}


/* the parameter ids of layer l and of the layers inside it, for a tie */
static void layer_params(Layer *l, int ***w, int *n)
{
    *w = util_grow(*w, sizeof **w * (size_t)*n, sizeof **w * (size_t)(*n + 2));
    (*w)[(*n)++] = &l->w;
    (*w)[(*n)++] = &l->b;
    for (int k = 0; k < l->nkids; k++)
        layer_params(l->kids[k], w, n);
    for (int k = 0; l->inst && k < l->inst->nlayers; k++)     /* a block's own layers */
        if (l->inst->layers[k])
            layer_params(l->inst->layers[k], w, n);
}

/* self.lm_head.weight = self.wte.weight */
static void tie(Sema *S, const LayerDecl *d)
{
    int **w = NULL, n = 0;
    for (int i = 0; i < S->nlayers; i++)
        if (S->layers[i])
            layer_params(S->layers[i], &w, &n);
    prm_tie(S, d, w, n);
}

Val fwd_model(Graph *g, const Model *m, Shape *in, const FwdCfg *c)
{
    const Sema top = {.g = g, .sync_bn = c->sync_bn, .autoenc = c->autoenc, .elementwise = c->elementwise,
                      .file = c->file};
    Sema S = sema_for(&top, m);
    /* the model a loss block trains: forward may return a tuple, of any
     * shapes, and the block reads the targets itself */
    if (c->loss_block && c->model && strcmp(c->model, m->name) == 0) {
        S.lossb = c->loss_block;
        S.metric = c->metric;
        S.autoenc = 0;
        S.elementwise = 1;
    }
    arg_names(names_lookup, &S);
    Val out = model_body(&S, g, m, in, c->autoenc);
    arg_names(NULL, NULL);      /* S ends here */
    return out;
}

static Val model_body(Sema *S, Graph *g, const Model *m, Shape *in, int target_input)
{
    const Forward *f = m->nfwd ? m->fwd[0] : NULL;
    if (!f)
        diag_error(m->loc, "model '%s' has no forward(x: f32[N, ...]) { ... }", m->name);
    for (int i = 1; i < m->nfwd; i++)
        diag_error(m->fwd[i]->loc, "model '%s' has more than one forward", m->name);
    DType in_dt = DT_F32;
    int ok = f && check_input(f->type, in, &in_dt);
    if (ok) {
        g->images = ir_add(g, OP_IMAGES, 0, NULL, *in, in_dt, f->type->loc);
        g->labels = ir_add(g, OP_LABELS, 0, NULL, shape1(DIM_N), DT_I32, f->type->loc);
    }
    members(S, m, f);
    if (!ok)
        return POISON;
    Val x = {g->images, *in};
    if (m->seq) {
        Layer *l = layer_make(S, m->seq, "", "");
        if (!l)
            return POISON;
        if (l->kind != LK_SEQUENTIAL)
            l->what = m->seq->s;
        x = layer_apply(S, l, x, m->seq->loc, 1);
        if (x.id >= 0 && !fwd_output_ok(&x.s, S->elementwise)) {
            diag_error(m->seq->loc, "the model must give %s, got %s", output_form(S), ir_shape_str(&x.s));
            return POISON;
        }
        return x;
    }
    set_var(S, f->param, x);
    Val out = run_body(S, f);
    if (S->lossb && out.id >= 0)
        lblk_run(S, out, target_input);
    return out;
}
