/* params.c: a model's own parameters and how they start (prm_):
 *
 *   self.pos = nn.Parameter(torch.zeros(1, T, C))   # also ones, randn, randn(...) * s, empty
 *   nn.init.normal_(self.fc.weight, mean = 0.0, std = 0.02)
 *   nn.init.zeros_(self.fc.bias)     ones_, constant_(w, val), uniform_(w, a, b),
 *                                    xavier_uniform_(w, gain), kaiming_uniform_(w, a, mode, nonlinearity)
 *   self.lm_head.weight = self.wte.weight            # weight tying
 *
 * A Parameter is a PARAM node saved under its attribute's name, a tensor
 * in forward under that name. An init statement sets the initialization
 * of a parameter named as PyTorch's state_dict names it (the last
 * statement naming one wins, as in PyTorch's constructor order); each
 * runs where PyTorch's would: after the layers are made, in file order.
 * Tying makes the left parameter the right one: the layers that read the
 * left read the right, so both uses' gradients add into one tensor; the
 * left's name stays an alias of it (Graph.aliases: saved under both names,
 * as PyTorch's state_dict lists both, and loaded from either). */
#include <math.h>
#include <string.h>

#include "sema.h"
#include "cddprt.h"         /* RT_INIT_* */

/* a member's state_dict name: without self., under the block's prefix */
static const char *self_less_in(const Sema *S, const char *s)
{
    s = strncmp(s, "self.", 5) == 0 ? s + 5 : s;
    return S->prefix && *S->prefix ? util_fmt("%s.%s", S->prefix, s) : s;
}

int prm_is_parameter(const Expr *e) { return e && e->kind == E_CALL && strcmp(e->s, "Parameter") == 0; }

/* nn.init.X_ (or torch.nn.init.X_): the written name's namespace */
int prm_is_init(const Expr *e)
{
    if (!e || e->kind != E_CALL || !e->written)
        return 0;
    const char *w = e->written;
    return strncmp(w, "nn.init.", 8) == 0 || strncmp(w, "torch.nn.init.", 14) == 0 || strncmp(w, "init.", 5) == 0;
}

int prm_is_tie(const LayerDecl *d) { return d->name && strchr(d->name, '.') && d->init->kind == E_NAME; }

/* the PARAM node of state_dict name `name` (a tied weight's other name
 * too), or -1 */
static int find_param(const Graph *g, const char *name)
{
    for (int i = 0; i < g->nparam; i++)
        if (strcmp(g->n[g->params[i]]->name, name) == 0)
            return g->params[i];
    for (int i = 0; i < g->naliases; i++)
        if (strcmp(g->aliases[i], name) == 0)
            return g->alias_of[i];
    return -1;
}

static void set_init(Node *p, int init, double a, double b)
{
    p->init = init;
    p->init_a = a;
    p->init_b = b;
}

/* self.NAME = nn.Parameter(torch.zeros|ones|randn|empty(sizes) [* s],
 * requires_grad = True) */
Val prm_parameter(Sema *S, const LayerDecl *d)
{
    const Expr *e = d->init;
    static const char *const names[] = {"data", "requires_grad"};
    const Sig sig = {"Parameter", names, 2, 1, 1};
    Expr *a[2];
    if (!arg_bind(e, &sig, a))
        return POISON;
    int trained = 1;
    if (a[1] && (!arg_bool(a[1], "requires_grad", &trained) || !trained)) {
        if (!trained)
            diag_error(a[1]->loc, "a Parameter with requires_grad = False is not supported: register a buffer "
                       "(self.register_buffer(\"%s\", tensor))", d->name);
        return POISON;
    }
    const Expr *t = a[0];
    double scale = 1;
    if (t->kind == E_MUL && t->a->kind == E_CALL && arg_num(t->b, "the scale", &scale))
        t = t->a;
    static const char *const fns[] = {"zeros", "ones", "randn", "empty"};
    int fn = -1;
    for (int k = 0; t->kind == E_CALL && k < 4; k++)
        if (strcmp(t->s, fns[k]) == 0)
            fn = k;
    if (fn < 0 || t->nargs < 1) {
        diag_error(t->loc, "a Parameter's value must be torch.zeros, ones, randn or empty of its sizes (times a "
                   "number), such as torch.zeros(1, T, C) or torch.randn(C) * 0.02, got %s", arg_show(t));
        return POISON;
    }
    Shape s = {0};
    const Expr *const *dims = NULL;
    int n = t->nargs;
    const Expr *one[MAX_RANK];
    if (n == 1 && t->args[0]->val->kind == E_TUPLE) {
        n = t->args[0]->val->nargs;
        for (int k = 0; k < n && k < MAX_RANK; k++)
            one[k] = t->args[0]->val->args[k]->val;
    } else {
        for (int k = 0; k < n && k < MAX_RANK; k++)
            one[k] = t->args[k]->val;
    }
    dims = one;
    if (n < 1 || n > RT_PARAM_RANK) {
        diag_error(t->loc, "a Parameter has 1 to %d dimensions, got %d", RT_PARAM_RANK, n);
        return POISON;
    }
    s.rank = n;
    for (int k = 0; k < n; k++) {
        if (!layer_size(S, dims[k], &s.d[k]))
            return POISON;
        if (s.d[k] < 1) {
            diag_error(dims[k]->loc, "a Parameter's sizes are known numbers (not the batch's)");
            return POISON;
        }
    }
    if (ir_row_elems(&s) > MAX_PARAM_ELEMS) {
        diag_error(t->loc, "Parameter %s is too large (the limit is %lld elements)", ir_shape_str(&s),
                   (long long)MAX_PARAM_ELEMS);
        return POISON;
    }
    const int p = ir_param(S->g, self_less_in(S, d->name), s, RT_INIT_ZERO, 0, d->loc);
    if (fn == 1)
        set_init(S->g->n[p], RT_INIT_CONST, scale, 0);
    else if (fn == 2)
        set_init(S->g->n[p], RT_INIT_NORMAL, 0, scale);
    return (Val){p, s};
}

/* fan_in, fan_out as torch.nn.init._calculate_fan_in_and_fan_out: dim 1
 * and dim 0, times the receptive field (the dims after them) */
static void fans(const Shape *s, double *in, double *out)
{
    double rf = 1;
    for (int k = 2; k < s->rank; k++)
        rf *= (double)s->d[k];
    *in = s->rank > 1 ? (double)s->d[1] * rf : (double)s->d[0];
    *out = (double)s->d[0] * rf;
}

/* torch.nn.init.calculate_gain(nonlinearity, a) */
static int gain_of(const char *nl, double a, double *g)
{
    if (!strcmp(nl, "linear") || !strcmp(nl, "sigmoid") || !strncmp(nl, "conv", 4))
        *g = 1;
    else if (!strcmp(nl, "tanh"))
        *g = 5.0 / 3;
    else if (!strcmp(nl, "relu"))
        *g = sqrt(2.0);
    else if (!strcmp(nl, "leaky_relu"))
        *g = sqrt(2.0 / (1 + a * a));
    else if (!strcmp(nl, "selu"))
        *g = 3.0 / 4;
    else
        return 0;
    return 1;
}

/* nn.init.X_(self.NAME, ...): the initialization of a parameter */
void prm_init(Sema *S, const Expr *e0)
{
    /* nn.init.normal_(w, ...) reads as init's method: the receiver first */
    Expr copy = *e0;
    const Expr *e = &copy;
    if (copy.nargs > 0 && !copy.args[0]->key && copy.args[0]->val->kind == E_NAME
        && strcmp(copy.args[0]->val->s, "init") == 0)
        copy.args++, copy.nargs--;
    static const char *const kinds[] = {"normal_", "zeros_", "ones_", "constant_", "uniform_", "xavier_uniform_",
                                        "kaiming_uniform_", "xavier_normal_", "kaiming_normal_"};
    enum { NK = sizeof kinds / sizeof kinds[0] };
    int k = 0;
    while (k < NK && strcmp(e->s, kinds[k]) != 0)
        k++;
    if (k == NK) {
        char *all = util_strdup("");
        for (int i = 0; i < NK; i++)
            all = util_fmt("%s%s%s", all, i ? ", " : "", kinds[i]);
        diag_error(e->loc, "%s is not supported (supported: %s)", e->written, all);
        return;
    }
    static const char *const sigs[NK][4] = {
        {"tensor", "mean", "std"}, {"tensor"}, {"tensor"}, {"tensor", "val"}, {"tensor", "a", "b"},
        {"tensor", "gain"}, {"tensor", "a", "mode", "nonlinearity"}, {"tensor", "gain"},
        {"tensor", "a", "mode", "nonlinearity"}};
    static const int nsig[NK] = {3, 1, 1, 2, 3, 2, 4, 2, 4}, nreq[NK] = {1, 1, 1, 2, 1, 1, 1, 1, 1};
    const Sig sig = {e->written, sigs[k], nsig[k], nsig[k], nreq[k]};
    Expr *a[4] = {0};
    if (!arg_bind(e, &sig, a))
        return;
    if (a[0]->kind != E_NAME) {
        diag_error(a[0]->loc, "%s's tensor must be a parameter, such as self.fc.weight, got %s", e->written,
                   arg_show(a[0]));
        return;
    }
    const char *name = self_less_in(S, a[0]->s);
    const int p = find_param(S->g, name);
    if (p < 0 || S->g->n[p]->buffer) {
        diag_error(a[0]->loc, "%s: '%s' is not a parameter of this model (a layer's is named as its state_dict "
                   "names it: fc.weight, fc.bias)", e->written, name);
        return;
    }
    Node *n = S->g->n[p];
    double x = 0, y = 1, fi, fo;
    fans(&n->shape, &fi, &fo);
    if (k >= 5 && n->shape.rank < 2) {      /* as torch: no fans of a vector */
        diag_error(a[0]->loc, "%s needs a tensor of 2 or more dimensions (its fans), but '%s' is %s", e->written,
                   name, ir_shape_str(&n->shape));
        return;
    }
    switch (k) {
    case 0:     /* normal_(mean = 0, std = 1) */
        if ((a[1] && !arg_num(a[1], "mean", &x)) || (a[2] && !arg_num(a[2], "std", &y)))
            return;
        set_init(n, RT_INIT_NORMAL, x, y);
        return;
    case 1: set_init(n, RT_INIT_ZERO, 0, 0); return;
    case 2: set_init(n, RT_INIT_CONST, 1, 0); return;
    case 3:
        if (arg_num(a[1], "val", &x))
            set_init(n, RT_INIT_CONST, x, 0);
        return;
    case 4:     /* uniform_(a = 0, b = 1) */
        if ((a[1] && !arg_num(a[1], "a", &x)) || (a[2] && !arg_num(a[2], "b", &y)))
            return;
        set_init(n, RT_INIT_UNIFORM, x, y);
        return;
    case 5: case 7: {   /* xavier: gain sqrt(2 / (fan_in + fan_out)), uniform's bound sqrt(3) times that */
        double gain = 1;
        if (a[1] && !arg_num(a[1], "gain", &gain))
            return;
        const double sd = gain * sqrt(2.0 / (fi + fo));
        if (k == 5)
            set_init(n, RT_INIT_UNIFORM, -sqrt(3.0) * sd, sqrt(3.0) * sd);
        else
            set_init(n, RT_INIT_NORMAL, 0, sd);
        return;
    }
    default: {  /* kaiming: gain / sqrt(fan), fan_in or fan_out by mode; leaky_relu's gain by default */
        double neg = 0, gain;
        if (a[1] && !arg_num(a[1], "a", &neg))
            return;
        const char *mode = a[2] ? (a[2]->kind == E_STR || a[2]->kind == E_NAME ? a[2]->s : "") : "fan_in";
        const char *nl = a[3] ? (a[3]->kind == E_STR || a[3]->kind == E_NAME ? a[3]->s : "") : "leaky_relu";
        if (strcmp(mode, "fan_in") != 0 && strcmp(mode, "fan_out") != 0) {
            diag_error(a[2]->loc, "mode must be fan_in or fan_out, got %s", arg_show(a[2]));
            return;
        }
        if (!gain_of(nl, neg, &gain)) {
            diag_error(a[3]->loc, "nonlinearity %s is not one torch.nn.init.calculate_gain knows", arg_show(a[3]));
            return;
        }
        const double sd = gain / sqrt(strcmp(mode, "fan_in") == 0 ? fi : fo);
        if (k == 6)
            set_init(n, RT_INIT_UNIFORM, -sqrt(3.0) * sd, sqrt(3.0) * sd);
        else
            set_init(n, RT_INIT_NORMAL, 0, sd);
        return;
    }
    }
}

/* self.A.weight = self.B.weight: A's parameter becomes B's; the layers
 * that read A's read B's. layer_w: the layers' parameter ids to repoint. */
void prm_tie(Sema *S, const LayerDecl *d, int *const *layer_w, int nw)
{
    const char *lhs = self_less_in(S, d->name), *rhs = self_less_in(S, d->init->s);
    Graph *g = S->g;
    const int l = find_param(g, lhs), r = find_param(g, rhs);
    if (l < 0 || r < 0) {
        diag_error(l < 0 ? d->loc : d->init->loc, "'%s' is not a parameter of this model: a tie names two, as "
                   "their state_dict names (self.lm_head.weight = self.wte.weight)", l < 0 ? lhs : rhs);
        return;
    }
    if (l == r)
        return;
    if (!ir_same_shape(&g->n[l]->shape, &g->n[r]->shape)) {
        diag_error(d->loc, "%s is %s but %s is %s: a tied parameter has the other's shape", lhs,
                   ir_shape_str(&g->n[l]->shape), rhs, ir_shape_str(&g->n[r]->shape));
        return;
    }
    for (int k = 0; k < nw; k++)
        if (*layer_w[k] == l)
            *layer_w[k] = r;
    ir_alias(g, l, r);
}
