/* recurrent.c: PyTorch's recurrent layers, with its arguments, gate
 * order, state_dict names and initialization (rnn_):
 *
 *   nn.LSTM(input_size, hidden_size, num_layers = 1, bias = True,
 *       batch_first = False, dropout = 0, bidirectional = False)
 *   nn.GRU(...), the same
 *   nn.RNN(input_size, hidden_size, num_layers = 1, nonlinearity = "tanh",
 *       bias = True, batch_first = False, dropout = 0, bidirectional = False)
 *
 * Layer k's parameters weight_ih_l<k>, weight_hh_l<k>, bias_ih_l<k>,
 * bias_hh_l<k> ([G H, in], [G H, H], [G H]; the reverse direction's with
 * the suffix _reverse), each uniform in +-1/sqrt(hidden_size). Called
 * layer(input, hx = None): (output, h_n), for the LSTM (output, (h_n,
 * c_n)), with h_n [layers * directions, N, H] in both layouts; hx the
 * initial state (h_0, or the LSTM's (h_0, c_0)), zeros when absent.
 *
 * Each layer and direction lowers to the input projection of every step
 * as one product over the rows [N*T, in] (as PyTorch's CPU path and cuDNN
 * do) and one T_RNN node, the recurrence (kernels emit_rnn.c: the step's
 * hidden product and the gates, the steps in a loop). The recurrence
 * works on [N, T, *]: a sequence-first input is permuted to it and the
 * output back. Between layers, dropout (training only); a bidirectional
 * layer's directions joined along the features. */
#include <math.h>
#include <string.h>

#include "sema.h"

static const char *fname(const Expr *e) { return e->written ? e->written : e->s; }

static int is_none(const Expr *e) { return !e || (e->kind == E_NAME && strcmp(e->s, "None") == 0); }

/* LSTM / GRU (input_size, hidden_size, num_layers, bias, batch_first,
 * dropout, bidirectional, proj_size); RNN with nonlinearity after
 * num_layers */
Layer *rnn_make(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const gated[] = {"input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
                                        "bidirectional", "proj_size", "device", "dtype"};
    static const char *const plain[] = {"input_size", "hidden_size", "num_layers", "nonlinearity", "bias",
                                        "batch_first", "dropout", "bidirectional", "device", "dtype"};
    const int is_rnn = strcmp(e->s, "RNN") == 0;
    const Sig sig = {fname(e), is_rnn ? plain : gated, 10, 8, 2};
    Expr *a[10];
    if (!arg_bind(e, &sig, a))
        return NULL;
    Expr *const *x = a;
    Expr *nonlin = NULL, *proj = NULL;
    Expr *r[8];     /* the gated order: size, hidden, layers, bias, batch_first, dropout, bidirectional, proj */
    if (is_rnn) {
        nonlin = a[3];
        Expr *t[8] = {a[0], a[1], a[2], a[4], a[5], a[6], a[7], NULL};
        memcpy(r, t, sizeof r);
        x = r;
    } else {
        proj = a[7];
    }
    int64_t in = 0, H = 0, layers = 1;
    int ok = arg_int(x[0], "input_size", 1, MAX_DIM, &in) & arg_int(x[1], "hidden_size", 1, MAX_DIM, &H);
    if (x[2])
        ok &= arg_int(x[2], "num_layers", 1, 64, &layers);
    int bias = 1, bf = 0, bi = 0;
    double p = 0;
    if (x[3])
        ok &= arg_bool(x[3], "bias", &bias);
    if (x[4])
        ok &= arg_bool(x[4], "batch_first", &bf);
    if (x[6])
        ok &= arg_bool(x[6], "bidirectional", &bi);
    if (x[5] && !arg_num(x[5], "dropout", &p)) {
        ok = 0;
    } else if (p < 0 || p >= 1) {
        diag_error(x[5]->loc, "dropout must be in [0, 1), got %s", arg_show(x[5]));
        ok = 0;
    }
    int cell = strcmp(e->s, "LSTM") == 0 ? RNN_LSTM : strcmp(e->s, "GRU") == 0 ? RNN_GRU : RNN_TANH;
    if (nonlin) {
        const char *s = nonlin->kind == E_STR ? nonlin->s : "";
        if (strcmp(s, "relu") == 0) {
            cell = RNN_RELU;
        } else if (strcmp(s, "tanh") != 0) {
            diag_error(nonlin->loc, "nonlinearity must be \"tanh\" or \"relu\", got %s", arg_show(nonlin));
            ok = 0;
        }
    }
    int64_t ps = 0;
    if (!is_none(proj) && (!arg_int(proj, "proj_size", 0, MAX_DIM, &ps) || ps != 0)) {
        if (ps)
            diag_error(proj->loc, "%s with proj_size is not supported", fname(e));
        ok = 0;
    }
    const int64_t G = ten_rnn_gates(cell);
    if (ok && G * H > MAX_DIM) {
        diag_error(e->loc, "%s: %lld gates of %lld units are too many (the limit is %d)", fname(e), (long long)G,
                   (long long)H, MAX_DIM);
        ok = 0;
    }
    if (!ok)
        return NULL;
    Layer *l = layer_new(LK_RNN, prefix, what, e->loc);
    l->in = in;
    l->out = H;
    l->p = p;
    l->rnn.cell = cell;
    l->rnn.layers = (int)layers;
    l->rnn.dirs = bi ? 2 : 1;
    l->rnn.batch_first = bf;
    const int np = l->rnn.layers * l->rnn.dirs;
    int **ids[4] = {&l->rnn.w_ih, &l->rnn.w_hh, &l->rnn.b_ih, &l->rnn.b_hh};
    for (int k = 0; k < 4; k++)
        *ids[k] = util_alloc(sizeof(int) * (size_t)np);
    const double bound = 1.0 / sqrt((double)H);
    for (int k = 0; k < l->rnn.layers; k++)
        for (int d = 0; d < l->rnn.dirs; d++) {
            const int at = k * l->rnn.dirs + d;
            const char *sfx = util_fmt("_l%d%s", k, d ? "_reverse" : "");
            const int64_t fin = k == 0 ? in : H * l->rnn.dirs;
            const Shape shapes[4] = {{2, {G * H, fin}}, {2, {G * H, H}}, {1, {G * H}}, {1, {G * H}}};
            static const char *const leaf[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
            for (int q = 0; q < 4; q++) {
                if (q >= 2 && !bias) {
                    (*ids[q])[at] = -1;
                    continue;
                }
                const char *name = util_fmt("%s%s", leaf[q], sfx);
                const int id = ir_param(S->g, *prefix ? util_fmt("%s.%s", prefix, name) : name, shapes[q],
                                        RT_INIT_UNIFORM, H, e->loc);
                S->g->n[id]->init_a = -bound, S->g->n[id]->init_b = bound;
                (*ids[q])[at] = id;
            }
        }
    return l;
}

static Val tnode(Sema *S, Op op, int nin, const int *in, Shape s, Loc loc)
{
    for (int k = 0; k < nin; k++)
        if (in[k] < 0)
            return POISON;
    return (Val){ir_add(S->g, op, nin, in, s, DT_F32, loc), s};
}

/* x along `axis` from `start`, `len` long */
static Val slice(Sema *S, Val x, int axis, int64_t start, int64_t len, Loc loc)
{
    Shape s = x.s;
    s.d[axis] = len;
    Val y = tnode(S, OP_T_SLICE, 1, &x.id, s, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.axis = axis, S->g->n[y.id]->ten.start = start, S->g->n[y.id]->ten.step = 1;
    return y;
}

static Val cat(Sema *S, Val a, Val b, int axis, Loc loc)
{
    if (a.id < 0)
        return b;
    Shape s = a.s;
    s.d[axis] += b.s.d[axis];
    Val y = tnode(S, OP_T_CAT, 2, (int[]){a.id, b.id}, s, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.axis = axis;
    return y;
}

/* [T, N, F] <-> [N, T, F] */
static Val swap01(Sema *S, Val x, Loc loc)
{
    const Shape s = {3, {x.s.d[1], x.s.d[0], x.s.d[2]}};
    Val y = tnode(S, OP_T_PERMUTE, 1, &x.id, s, loc);
    if (y.id >= 0) {
        int *p = S->g->n[y.id]->ten.perm;
        p[0] = 1, p[1] = 0, p[2] = 2;
    }
    return y;
}

/* state [L*D, N, H] at k: [N, H] */
static Val state_at(Sema *S, Val st, int k, Loc loc)
{
    return layer_view(S, slice(S, st, 0, k, 1, loc), (Shape){2, {DIM_N, st.s.d[2]}}, loc);
}

/* an initial state: [layers * directions, N, H] of floats */
static int check_state(Sema *S, const Layer *l, Val v, const char *what, Loc loc)
{
    if (v.id < 0)
        return 0;
    const int64_t want = (int64_t)l->rnn.layers * l->rnn.dirs;
    if (v.s.rank != 3 || v.s.d[0] != want || v.s.d[1] != DIM_N || v.s.d[2] != l->out) {
        diag_error(loc, "%s: %s must be [%lld, N, %lld] (layers * directions, the batch, hidden_size), got %s",
                   l->what, what, (long long)want, (long long)l->out, ir_shape_str(&v.s));
        return 0;
    }
    return layer_float(S, v, util_fmt("%s's %s", l->what, what), loc);
}

/* the hx argument: h_0, or the LSTM's (h_0, c_0) */
static int initial_state(Sema *S, const Layer *l, const Expr *hx, Val *h0, Val *c0)
{
    *h0 = *c0 = POISON;
    if (is_none(hx))
        return 1;
    if (l->rnn.cell == RNN_LSTM) {
        if (hx->kind != E_TUPLE || hx->nargs != 2) {
            diag_error(hx->loc, "%s's initial state is a tuple (h_0, c_0), got %s", l->what, arg_show(hx));
            return 0;
        }
        *h0 = S->eval(S, hx->args[0]->val);
        *c0 = S->eval(S, hx->args[1]->val);
        return check_state(S, l, *h0, "h_0", hx->args[0]->val->loc) & check_state(S, l, *c0, "c_0",
                                                                                  hx->args[1]->val->loc);
    }
    if (hx->kind == E_TUPLE) {
        diag_error(hx->loc, "%s's initial state is one tensor h_0 (a tuple is the LSTM's), got %s", l->what,
                   arg_show(hx));
        return 0;
    }
    *h0 = S->eval(S, hx);
    return check_state(S, l, *h0, "h_0", hx->loc);
}

/* one layer and direction over x [N, T, in]: [N, T, H] */
static Val direction(Sema *S, const Layer *l, Val x, int at, int reverse, Val h0, Val c0, Loc loc)
{
    const int64_t H = l->out, T = x.s.d[1], GH = ten_rnn_gates(l->rnn.cell) * H;
    /* the input projection of every step: a Linear over the rows */
    Layer lin = {.kind = LK_LINEAR, .name = l->name, .what = l->what, .loc = l->loc, .in = x.s.d[2], .out = GH,
                 .w = l->rnn.w_ih[at], .b = l->rnn.b_ih[at]};
    Val xw = layer_apply(S, &lin, x, loc, 0);
    if (xw.id < 0)
        return POISON;
    int in[5] = {xw.id, l->rnn.w_hh[at]}, nin = 2;
    const int bias = l->rnn.b_hh[at] >= 0;
    if (bias)
        in[nin++] = l->rnn.b_hh[at];
    if (h0.id >= 0)
        in[nin++] = state_at(S, h0, at, loc).id;
    if (c0.id >= 0)
        in[nin++] = state_at(S, c0, at, loc).id;
    Val y = tnode(S, OP_T_RNN, nin, in, (Shape){3, {DIM_N, T, H}}, loc);
    if (y.id < 0)
        return POISON;
    Node *n = S->g->n[y.id];
    n->rnn.cell = l->rnn.cell;
    n->rnn.reverse = reverse;
    n->rnn.bias = bias;
    n->rnn.h0 = h0.id >= 0;
    n->rnn.c0 = c0.id >= 0;
    return y;
}

/* the states' stack [L*D, N, H] of [N, H] pieces */
static Val stack(Sema *S, Val acc, Val piece, Loc loc)
{
    const Shape one = {3, {1, DIM_N, piece.s.d[1]}};
    return cat(S, acc, layer_view(S, piece, one, loc), 0, loc);
}

int rnn_call(Sema *S, const Layer *l, const Expr *e, Val out[3], const int want[3])
{
    static const char *const names[] = {"input", "hx"};
    const Sig sig = {l->what, names, 2, 2, 1};
    Expr *a[2];
    out[0] = out[1] = out[2] = POISON;
    if (!arg_bind(e, &sig, a))
        return 0;
    Val x = S->eval(S, a[0]);
    if (x.id < 0)
        return 0;
    const int bf = l->rnn.batch_first;
    if (x.s.rank != 3 || x.s.d[bf ? 0 : 1] != DIM_N || x.s.d[2] != l->in || IR_IS_BATCH(x.s.d[bf ? 1 : 0])) {
        diag_error(a[0]->loc, "%s expects input %s, got %s%s", l->what,
                   bf ? util_fmt("[N, T, %lld] (batch_first = True)", (long long)l->in)
                      : util_fmt("[T, N, %lld] (the sequence first: batch_first = False, PyTorch's default)",
                                 (long long)l->in),
                   ir_shape_str(&x.s),
                   x.s.rank == 3 && x.s.d[bf ? 1 : 0] == DIM_N ? util_fmt("; batch_first = %s reads it",
                                                                          bf ? "False" : "True") : "");
        return 0;
    }
    if (!layer_float(S, x, l->what, a[0]->loc))
        return 0;
    Val h0, c0;
    if (!initial_state(S, l, a[1], &h0, &c0))
        return 0;
    if (!bf)
        x = swap01(S, x, e->loc);
    const int64_t T = x.s.d[1], H = l->out;
    Val hn = POISON, cn = POISON;
    for (int k = 0; k < l->rnn.layers && x.id >= 0; k++) {
        Val y = POISON;
        for (int d = 0; d < l->rnn.dirs; d++) {
            const int at = k * l->rnn.dirs + d;
            Val o = direction(S, l, x, at, d, h0, c0, e->loc);
            if (o.id < 0)
                return 0;
            if (want[1]) {      /* h_n: the last step the direction ran */
                Val last = slice(S, o, 1, d ? 0 : T - 1, 1, e->loc);
                hn = stack(S, hn, layer_view(S, last, (Shape){2, {DIM_N, H}}, e->loc), e->loc);
            }
            if (want[2] && l->rnn.cell == RNN_LSTM)
                cn = stack(S, cn, tnode(S, OP_T_RNN_CN, 1, &o.id, (Shape){2, {DIM_N, H}}, e->loc), e->loc);
            y = cat(S, y, o, 2, e->loc);
        }
        if (l->p > 0 && k + 1 < l->rnn.layers)
            y = layer_dropout(S, y, l->p, e->loc);
        x = y;
    }
    if (x.id < 0)
        return 0;
    out[0] = bf ? x : swap01(S, x, e->loc);
    out[1] = hn;
    out[2] = cn;
    return out[0].id >= 0;
}

/* the tuple a recurrent layer returns, as names unpack it: 0 for out, 1
 * for h_n, 2 for c_n, -1 for none (_) */
int rnn_unpack(const Layer *l, const Stmt *st, int *which)
{
    const int lstm = l->rnn.cell == RNN_LSTM;
    int outers = 0;
    for (int k = 0; k < st->nnames; k++)
        outers = st->outer[k] + 1;
    int ok = outers == 2;
    for (int k = 0; k < st->nnames && ok; k++) {
        const int inner = k > 0 && st->outer[k - 1] == st->outer[k];
        const int pair = (k + 1 < st->nnames && st->outer[k + 1] == st->outer[k]) || inner;
        if (st->outer[k] == 0)
            which[k] = pair ? (ok = 0, -1) : 0;
        else if (!lstm)
            which[k] = pair ? (ok = 0, -1) : 1;
        else if (!pair)     /* the tuple (h_n, c_n) as one name: only `_` (a tuple is no value here) */
            ok = strcmp(st->names[k], "_") == 0;
        else
            which[k] = inner ? 2 : 1;
        if (ok && strcmp(st->names[k], "_") == 0)
            which[k] = -1;
    }
    if (!ok)
        diag_error(st->loc, "%s returns (output, %s): unpack it as out, %s = ...", l->what,
                   lstm ? "(h_n, c_n)" : "h_n", lstm ? "(h_n, c_n)" : "h_n");
    return ok;
}
