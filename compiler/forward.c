/* forward.c: a model's forward, statement by statement: variables,
 * calls of its layers and of the functions (relu, flatten, dropout), and
 * additions, each checked for shape before its node is built (a node is
 * only ever built from checked operands, so the graph is valid whenever no
 * error was reported). */
#include <string.h>

#include "sema.h"

/* Functions callable in forward; act: an activation's elementwise op, or 0
 * (images, never an activation) */
static const struct {
    const char *name;
    Op act;
} functions[] = {{"relu", OP_RELU}, {"tanh", OP_TANH}, {"flatten", 0}, {"dropout", 0}};
enum { NFUNCTIONS = sizeof functions / sizeof functions[0] };

static int function(const char *name)
{
    for (int i = 0; i < NFUNCTIONS; i++)
        if (strcmp(functions[i].name, name) == 0)
            return i;
    return -1;
}

static int is_function(const char *name) { return function(name) >= 0; }

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
    if (!arg_bind(e, &sig, a))
        return POISON;
    Val x = eval(S, a[0]);
    if (a[1] && !layer_drop_p(a[1], &p))
        return POISON;
    return layer_dropout(S, x, p, e->loc);
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
        if (layer_unsupported(e->s))
            diag_error(e->loc, "%s is not supported yet", e->s);
        else
            diag_error(e->loc, "'%s' is a layer type: declare the layer in the model (name = %s(...)) and call "
                       "it by name%s", e->s, e->s,
                       strcmp(e->s, "ReLU") == 0 ? ", or use relu(x)"
                       : strcmp(e->s, "Tanh") == 0 ? ", or use tanh(x)"
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
            arg_near_try(&s, functions[i].name);
        diag_error(e->loc, "unknown function or layer '%s'%s", e->s, arg_near_hint(&s));
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
    if (functions[function(e->s)].act)
        return layer_node(S, functions[function(e->s)].act, x.id, -1, x.s, e->loc);
    return layer_flatten(S, x, e->loc);
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
    return layer_node(S, OP_ADD, a.id, b.id, a.s, loc);
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
        Near s = arg_near(e->s);
        for (int i = 0; i < S->nvars; i++)
            arg_near_try(&s, S->vars[i].name);
        diag_error(e->loc, "unknown variable '%s'%s", e->s, arg_near_hint(&s));
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
    diag_error(e->loc, "expected a tensor, got %s", arg_show(e));
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

Val fwd_model(Graph *g, const Model *m, Shape *in, int sync_bn)
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
        S.layers[i] = layer_make(&S, d->init, d->name, d->name);
        S.nlayers = i + 1;
    }
    if (!ok)
        return POISON;
    Val x = {g->images, *in};
    if (m->seq) {
        Layer *l = layer_make(&S, m->seq, "", "");
        if (!l)
            return POISON;
        if (l->kind != LK_SEQUENTIAL)
            l->what = m->seq->s;
        x = layer_apply(&S, l, x, m->seq->loc, 1);
        if (x.id >= 0 && !(x.s.rank == 2 && x.s.d[0] == DIM_N)) {
            diag_error(m->seq->loc, "the model must give logits [N, C], got %s", ir_shape_str(&x.s));
            return POISON;
        }
        return x;
    }
    set_var(&S, f->param, x);
    return run_body(&S, f);
}
