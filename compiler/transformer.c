/* transformer.c: PyTorch's attention modules, with its state_dict names,
 * defaults and initialization (xf_):
 *
 *   nn.MultiheadAttention(embed_dim, num_heads, dropout = 0, bias = True,
 *       batch_first = False): in_proj_weight [3E, E] (xavier_uniform_),
 *       in_proj_bias (zeros), out_proj (a Linear, its bias zeroed); called
 *       attn(query, key, value, key_padding_mask = None, need_weights =
 *       True, attn_mask = None, is_causal = False) -> (output, weights
 *       averaged over the heads)
 *   nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward = 2048,
 *       dropout = 0.1, activation = "relu", layer_norm_eps = 1e-5,
 *       batch_first = False, norm_first = False, bias = True)
 *   nn.TransformerEncoder(encoder_layer, num_layers, norm = None): the
 *       layer deep-copied num_layers times, so every layer starts equal
 *       (RT_INIT_COPY), named layers.0, layers.1, ...
 *
 * Each lowers to the ops any model uses: the projections are products
 * over the rows, the attention is attention.c's (one fused kernel under
 * the rule attention), the weights, when the model reads them, the
 * softmax written out and averaged. A mask follows nn.MultiheadAttention:
 * a bool attn_mask is true where a position may NOT attend (the opposite
 * of F.scaled_dot_product_attention's), a float one is added. */
#include <math.h>
#include <string.h>

#include "sema.h"

static const char *fname(const Expr *e) { return e->written ? e->written : e->s; }

static int is_none(const Expr *e) { return !e || (e->kind == E_NAME && strcmp(e->s, "None") == 0); }

static const char *child(const char *prefix, const char *leaf)
{
    return *prefix ? util_fmt("%s.%s", prefix, leaf) : leaf;
}

static Layer *new_xf(LayerKind kind, const char *prefix, const char *what, Loc loc, int nkids)
{
    Layer *l = layer_new(kind, prefix, what, loc);
    l->kids = util_alloc(sizeof *l->kids * (size_t)(nkids > 0 ? nkids : 1));
    l->nkids = nkids;
    return l;
}

static int flag(const Expr *e, const char *what, int *out) { return !e || arg_bool(e, what, out); }

static int dropout_p(const Expr *e, double *p)
{
    if (!e)
        return 1;
    if (!arg_num(e, "dropout", p))
        return 0;
    if (*p < 0 || *p >= 1) {
        diag_error(e->loc, "dropout must be in [0, 1), got %s", arg_show(e));
        return 0;
    }
    return 1;
}

static Layer *mha(Sema *S, const char *prefix, const char *what, int64_t E, int64_t H, double p, int bias, int bf,
                  Loc loc)
{
    Layer *l = new_xf(LK_MHA, prefix, what, loc, 1);
    l->in = E;
    l->p = p;
    l->xf.heads = (int)H;
    l->xf.batch_first = bf;
    /* xavier_uniform_ of [3E, E]: fan_in E, fan_out 3E */
    const double bound = sqrt(6.0 / (double)(4 * E));
    l->w = ir_param(S->g, child(prefix, "in_proj_weight"), (Shape){2, {3 * E, E}}, RT_INIT_UNIFORM, E, loc);
    S->g->n[l->w]->init_a = -bound, S->g->n[l->w]->init_b = bound;
    if (bias)
        l->b = ir_param(S->g, child(prefix, "in_proj_bias"), (Shape){1, {3 * E}}, RT_INIT_ZERO, 0, loc);
    l->kids[0] = layer_new_linear(S, child(prefix, "out_proj"), util_fmt("%s.out_proj", what), E, E, bias, loc);
    if (bias)
        S->g->n[l->kids[0]->b]->init = RT_INIT_ZERO;
    return l;
}

/* MultiheadAttention(embed_dim, num_heads, dropout, bias, add_bias_kv,
 * add_zero_attn, kdim, vdim, batch_first) */
static Layer *make_mha(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"embed_dim", "num_heads", "dropout", "bias", "add_bias_kv", "add_zero_attn",
                                        "kdim", "vdim", "batch_first", "device", "dtype"};
    const Sig sig = {fname(e), names, 11, 9, 2};
    Expr *a[11];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t E = 0, H = 0;
    int ok = arg_int(a[0], "embed_dim", 1, MAX_DIM, &E) & arg_int(a[1], "num_heads", 1, MAX_DIM, &H);
    double p = 0;
    int bias = 1, bf = 0, kv = 0, zero = 0;
    ok &= dropout_p(a[2], &p) & flag(a[3], "bias", &bias) & flag(a[4], "add_bias_kv", &kv)
          & flag(a[5], "add_zero_attn", &zero) & flag(a[8], "batch_first", &bf);
    if (ok && (kv || zero)) {
        diag_error(e->loc, "%s with %s is not supported", fname(e), kv ? "add_bias_kv" : "add_zero_attn");
        ok = 0;
    }
    for (int k = 6; k < 8 && ok; k++) {
        int64_t d;
        if (!is_none(a[k]) && (!arg_int(a[k], names[k], 1, MAX_DIM, &d) || d != E)) {
            diag_error(a[k]->loc, "%s with %s other than embed_dim is not supported", fname(e), names[k]);
            ok = 0;
        }
    }
    if (ok && E % H) {
        diag_error(e->loc, "embed_dim (%lld) must be divisible by num_heads (%lld), as PyTorch asks", (long long)E,
                   (long long)H);
        ok = 0;
    }
    return ok ? mha(S, prefix, what, E, H, p, bias, bf, e->loc) : NULL;
}

/* activation = "relu" | "gelu" | F.relu | F.gelu */
static int activation(const Expr *e, ActArgs *act)
{
    act->op = OP_RELU;
    if (!e)
        return 1;
    const char *s = e->kind == E_STR || e->kind == E_NAME ? e->s : "";
    if (!strcmp(s, "relu"))
        return 1;
    if (!strcmp(s, "gelu")) {
        act->op = OP_GELU;
        return 1;
    }
    diag_error(e->loc, "activation must be \"relu\" or \"gelu\" (or F.relu, F.gelu), got %s", arg_show(e));
    return 0;
}

/* TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
 * activation, layer_norm_eps, batch_first, norm_first, bias) */
static Layer *make_enc_layer(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"d_model", "nhead", "dim_feedforward", "dropout", "activation",
                                        "layer_norm_eps", "batch_first", "norm_first", "bias", "device", "dtype"};
    const Sig sig = {fname(e), names, 11, 11, 2};
    Expr *a[11];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t d = 0, h = 0, ff = 2048;
    double p = 0.1, eps = 1e-5;
    int bf = 0, nf = 0, bias = 1;
    ActArgs act = {0, 0, 0};
    int ok = arg_int(a[0], "d_model", 1, MAX_DIM, &d) & arg_int(a[1], "nhead", 1, MAX_DIM, &h);
    if (a[2])
        ok &= arg_int(a[2], "dim_feedforward", 1, MAX_DIM, &ff);
    ok &= dropout_p(a[3], &p) & activation(a[4], &act) & flag(a[6], "batch_first", &bf)
          & flag(a[7], "norm_first", &nf) & flag(a[8], "bias", &bias);
    if (a[5] && arg_num(a[5], "layer_norm_eps", &eps) && !(eps > 0)) {
        diag_error(a[5]->loc, "layer_norm_eps must be positive, got %s", arg_show(a[5]));
        ok = 0;
    }
    if (ok && d % h) {
        diag_error(e->loc, "d_model (%lld) must be divisible by nhead (%lld), as PyTorch asks", (long long)d,
                   (long long)h);
        ok = 0;
    }
    if (!ok)
        return NULL;
    Layer *l = new_xf(LK_ENC_LAYER, prefix, what, e->loc, 5);
    l->in = d;
    l->p = p;
    l->act = act;
    l->xf.batch_first = bf;
    l->xf.norm_first = nf;
    /* the state_dict's order: self_attn, linear1, linear2, norm1, norm2 */
    l->kids[0] = mha(S, child(prefix, "self_attn"), util_fmt("%s.self_attn", what), d, h, p, bias, bf, e->loc);
    l->kids[1] = layer_new_linear(S, child(prefix, "linear1"), util_fmt("%s.linear1", what), d, ff, bias, e->loc);
    l->kids[2] = layer_new_linear(S, child(prefix, "linear2"), util_fmt("%s.linear2", what), ff, d, bias, e->loc);
    l->kids[3] = layer_new_norm(S, child(prefix, "norm1"), util_fmt("%s.norm1", what), d, eps, bias, e->loc);
    l->kids[4] = layer_new_norm(S, child(prefix, "norm2"), util_fmt("%s.norm2", what), d, eps, bias, e->loc);
    return l;
}

/* TransformerEncoder(encoder_layer, num_layers, norm = None, ...): the
 * layer made num_layers times, each later one's parameters starting as
 * copies of the first's (PyTorch deep-copies the layer it is given) */
static Layer *make_encoder(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"encoder_layer", "num_layers", "norm", "enable_nested_tensor",
                                        "mask_check"};
    const Sig sig = {fname(e), names, 5, 5, 2};
    Expr *a[5];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t n = 0;
    if (!arg_int(a[1], "num_layers", 1, 1024, &n))
        return NULL;
    if (a[0]->kind != E_CALL || strcmp(a[0]->s, "TransformerEncoderLayer") != 0) {
        diag_error(a[0]->loc, "%s's encoder_layer must be written here: nn.TransformerEncoderLayer(d_model, nhead, "
                   "...)", fname(e));
        return NULL;
    }
    Layer *l = new_xf(LK_ENCODER, prefix, what, e->loc, (int)n + 1);
    l->nkids = (int)n;
    int first = -1, count = 0;
    for (int i = 0; i < n; i++) {
        const int before = S->g->nparam;
        l->kids[i] = make_enc_layer(S, a[0], child(prefix, util_fmt("layers.%d", i)), util_fmt("%s.layers.%d", what, i));
        if (!l->kids[i])
            return NULL;
        if (i == 0)
            first = before, count = S->g->nparam - before;
        for (int k = 0; i > 0 && k < count; k++) {   /* a copy of the first layer's */
            Node *p = S->g->n[S->g->params[before + k]];
            p->init = RT_INIT_COPY;
            p->init_a = first + k;
        }
    }
    l->in = l->kids[0]->in;
    l->xf.batch_first = l->kids[0]->xf.batch_first;
    if (!is_none(a[2])) {
        const Expr *ne = a[2];
        if (ne->kind != E_CALL || strcmp(ne->s, "LayerNorm") != 0) {
            diag_error(ne->loc, "%s's norm must be nn.LayerNorm(d_model) or None", fname(e));
            return NULL;
        }
        Layer *nl = layer_make(S, ne, child(prefix, "norm"), util_fmt("%s.norm", what));
        if (!nl)
            return NULL;
        l->kids[n] = nl;
        l->xf.norm = 1;
    }
    return l;
}

Layer *xf_make(Sema *S, const Expr *e, LayerKind kind, const char *prefix, const char *what)
{
    return kind == LK_MHA ? make_mha(S, e, prefix, what) : kind == LK_ENC_LAYER ? make_enc_layer(S, e, prefix, what)
                                                                               : make_encoder(S, e, prefix, what);
}

/* ---- forward ----------------------------------------------------------- */

typedef struct {
    Val mask;               /* attn_mask [L, S] as given (MultiheadAttention's meaning), or id -1 */
    Val pad;                /* key_padding_mask [N, S], a bool true where a key is padding, or id -1 */
    int causal;
} Masking;

static Val perm(Sema *S, Val x, const int *p, Loc loc)
{
    if (x.id < 0)
        return x;
    Shape s = x.s;
    for (int d = 0; d < x.s.rank; d++)
        s.d[d] = x.s.d[p[d]];
    Val y = layer_node(S, OP_T_PERMUTE, x.id, -1, s, loc);
    memcpy(S->g->n[y.id]->ten.perm, p, sizeof(int) * (size_t)x.s.rank);
    return y;
}

static Val swap01(Sema *S, Val x, Loc loc) { return perm(S, x, (int[]){1, 0, 2, 3, 4, 5}, loc); }

/* [N, L, E] -> [N, H, L, E / H] */
static Val heads(Sema *S, Val x, int64_t H, Loc loc)
{
    if (x.id < 0)
        return x;
    const int64_t L = x.s.d[1], E = x.s.d[2];
    Val v = layer_node(S, OP_RESHAPE, x.id, -1, (Shape){4, {x.s.d[0], L, H, E / H}}, loc);
    return perm(S, v, (int[]){0, 2, 1, 3}, loc);
}

/* rows [N, L, E] of the product with in_proj's rows [r0, r0 + E) */
static Val project(Sema *S, const Layer *l, Val x, int part, Loc loc)
{
    const int64_t E = l->in;
    Layer lin = {.kind = LK_LINEAR, .name = l->name, .what = l->what, .loc = l->loc, .in = E, .out = E};
    Shape ws = {2, {E, E}}, bs = {1, {E}};
    lin.w = ir_add(S->g, OP_T_SLICE, 1, &l->w, ws, DT_F32, loc);
    S->g->n[lin.w]->ten.axis = 0, S->g->n[lin.w]->ten.start = part * E, S->g->n[lin.w]->ten.step = 1;
    lin.b = -1;
    if (l->b >= 0) {
        lin.b = ir_add(S->g, OP_T_SLICE, 1, &l->b, bs, DT_F32, loc);
        S->g->n[lin.b]->ten.axis = 0, S->g->n[lin.b]->ten.start = part * E, S->g->n[lin.b]->ten.step = 1;
    }
    return layer_apply(S, &lin, x, loc, 0);
}

/* MultiheadAttention over batch-first q [N, L, E], k, v [N, S, E]: the
 * output [N, L, E], and when want_w the weights [N, L, S] averaged over
 * the heads */
static Val mha_forward(Sema *S, const Layer *l, Val q, Val k, Val v, const Masking *mk, int want_w, Val *w, Loc loc)
{
    const int64_t E = l->in, H = l->xf.heads;
    Val pq, pk, pv;
    if (q.id == k.id && k.id == v.id) {   /* self-attention: one product, split three ways */
        Layer lin = {.kind = LK_LINEAR, .name = l->name, .what = l->what, .loc = l->loc, .in = E, .out = 3 * E,
                     .w = l->w, .b = l->b};
        Val qkv = layer_apply(S, &lin, q, loc, 0);
        if (qkv.id < 0)
            return POISON;
        Val part[3];
        for (int i = 0; i < 3; i++) {
            Shape s = qkv.s;
            s.d[2] = E;
            part[i] = layer_node(S, OP_T_SLICE, qkv.id, -1, s, loc);
            S->g->n[part[i].id]->ten.axis = 2, S->g->n[part[i].id]->ten.start = i * E;
            S->g->n[part[i].id]->ten.step = 1;
        }
        pq = part[0], pk = part[1], pv = part[2];
    } else {
        pq = project(S, l, q, 0, loc), pk = project(S, l, k, 1, loc), pv = project(S, l, v, 2, loc);
    }
    AttnArgs a = {.q = heads(S, pq, H, loc), .k = heads(S, pk, H, loc), .v = heads(S, pv, H, loc), .mask = POISON,
                  .causal = mk->causal, .scale = 1.0 / sqrt((double)(E / H)), .dropout = l->p};
    if (a.q.id < 0 || a.k.id < 0 || a.v.id < 0)
        return POISON;
    const int64_t L = a.q.s.d[2], Sk = a.k.s.d[2];
    Val masked = POISON;    /* a bool, true where a query may not attend */
    if (mk->mask.id >= 0 && !mk->causal && S->g->n[mk->mask.id]->dt == DT_BOOL)
        masked = mk->mask;
    else if (mk->mask.id >= 0 && !mk->causal) {
        a.mask = mk->mask;
        a.mask_kind = ATTN_MASK_ADD;
    }
    if (mk->pad.id >= 0) {  /* [N, S] as [N, 1, 1, S]: a padded key is no query's */
        Val p = layer_node(S, OP_RESHAPE, mk->pad.id, -1, (Shape){4, {mk->pad.s.d[0], 1, 1, Sk}}, loc);
        if (a.mask_kind == ATTN_MASK_ADD) {     /* a float mask: -inf added at the padded keys */
            Shape full = {4, {p.s.d[0], 1, L, Sk}};
            Val e = layer_node(S, OP_BC_COPY, a.mask.id, -1, full, loc);
            a.mask = layer_node(S, OP_T_FILL_IF, e.id, p.id, full, loc);
            S->g->n[a.mask.id]->ten.lo = -INFINITY;
        } else {
            masked = masked.id < 0 ? p : meth_broadcast(S, OP_T_OR, masked, p, "|", loc);
        }
    }
    if (masked.id >= 0) {   /* SDPA's bool mask takes part where true */
        a.mask = layer_node(S, OP_T_EQC, masked.id, -1, masked.s, loc);
        a.mask_kind = ATTN_MASK_BOOL;
    }
    if (want_w) {   /* the averaged weights, written out (the fused kernel keeps no probabilities) */
        AttnArgs b = a;
        Shape ss = {4, {a.q.s.d[0], H, L, Sk}};
        /* softmax(q k^T scale + mask) as attention.c's written-out path, then the mean over the heads */
        Val s = layer_node(S, OP_T_BMM, a.q.id, a.k.id, ss, loc);
        S->g->n[s.id]->ten.tb = 1;
        s = tfn_unary(S, OP_T_AFFINE, s, b.scale, 0, loc);
        if (b.mask_kind == ATTN_MASK_BOOL) {
            Val out = layer_node(S, OP_T_EQC, b.mask.id, -1, b.mask.s, loc);
            s = layer_node(S, OP_T_FILL_IF, s.id, out.id, ss, loc);
            S->g->n[s.id]->ten.lo = -INFINITY;
        } else if (b.mask_kind == ATTN_MASK_ADD) {
            s = layer_node(S, OP_BC_ADD, s.id, b.mask.id, ss, loc);
        }
        if (b.causal) {
            const Shape ls = {2, {L, Sk}};
            int ones = ir_add(S->g, OP_T_FULL, 0, NULL, ls, DT_BOOL, loc);
            S->g->n[ones]->ten.lo = 1;
            int above = ir_add(S->g, OP_T_TRIU, 1, &ones, ls, DT_BOOL, loc);
            S->g->n[above]->ten.lo = 1;
            s = layer_node(S, OP_T_FILL_IF, s.id, above, ss, loc);
            S->g->n[s.id]->ten.lo = -INFINITY;
        }
        Val p = layer_softmax(S, s, loc);
        Shape ms = ss;
        ms.d[1] = 1;
        Val m = layer_node(S, OP_T_MEAN, p.id, -1, ms, loc);
        S->g->n[m.id]->ten.axes = 1u << 1;
        *w = layer_node(S, OP_RESHAPE, m.id, -1, (Shape){3, {ss.d[0], L, Sk}}, loc);
    }
    Val o = attn_apply(S, &a, loc);
    if (o.id < 0)
        return POISON;
    o = perm(S, o, (int[]){0, 2, 1, 3}, loc);
    o = layer_node(S, OP_RESHAPE, o.id, -1, (Shape){3, {o.s.d[0], o.s.d[1], E}}, loc);
    return layer_apply(S, l->kids[0], o, loc, 0);
}

/* batch first: [L, N, E] -> [N, L, E] unless the module is batch_first */
static Val bfirst(Sema *S, const Layer *l, Val x, Loc loc)
{
    if (x.id < 0)
        return x;
    if (x.s.rank != 3 || x.s.d[2] != l->in) {
        diag_error(loc, "%s expects %s of d_model %lld, got %s", l->what,
                   l->xf.batch_first ? "[N, L, E] (batch_first)" : "[L, N, E] (batch_first = False)",
                   (long long)l->in, ir_shape_str(&x.s));
        return POISON;
    }
    if (l->xf.batch_first)
        return x;
    return swap01(S, x, loc);
}

/* a + b: the elementwise add (it joins a product's epilogue) */
static Val add(Sema *S, Val a, Val b, Loc loc)
{
    if (a.id < 0 || b.id < 0)
        return POISON;
    if (ir_same_shape(&a.s, &b.s) && ten_batch_dim(&a.s) <= 0)
        return layer_node(S, OP_ADD, a.id, b.id, a.s, loc);
    return meth_broadcast(S, OP_BC_ADD, a, b, "+", loc);
}

/* an encoder layer over batch-first x */
static Val enc_layer(Sema *S, const Layer *l, Val x, const Masking *mk, Loc loc)
{
    Layer *const *k = l->kids;
    Val w;
#define SA(v) layer_dropout(S, mha_forward(S, k[0], v, v, v, mk, 0, &w, loc), l->p, loc)
#define FF(v) layer_dropout(S, layer_apply(S, k[2], layer_dropout(S, layer_act(S, l->act, layer_apply(S, k[1], v, loc, 0), \
                                                                        loc), l->p, loc), loc, 0), l->p, loc)
    if (l->xf.norm_first) {
        Val n1 = layer_apply(S, k[3], x, loc, 0);
        x = add(S, x, SA(n1), loc);
        Val n2 = layer_apply(S, k[4], x, loc, 0);
        return add(S, x, FF(n2), loc);
    }
    x = layer_apply(S, k[3], add(S, x, SA(x), loc), loc, 0);
    return layer_apply(S, k[4], add(S, x, FF(x), loc), loc, 0);
#undef SA
#undef FF
}

static Val encode(Sema *S, const Layer *l, Val x, const Masking *mk, Loc loc)
{
    x = bfirst(S, l, x, loc);
    if (l->kind == LK_ENC_LAYER) {
        x = enc_layer(S, l, x, mk, loc);
    } else {
        for (int i = 0; i < l->nkids && x.id >= 0; i++)
            x = enc_layer(S, l->kids[i], x, mk, loc);
        if (l->xf.norm)
            x = layer_apply(S, l->kids[l->nkids], x, loc, 0);
    }
    return x.id < 0 || l->xf.batch_first ? x : swap01(S, x, loc);
}

Val xf_apply(Sema *S, const Layer *l, Val x, Loc loc)
{
    if (l->kind == LK_MHA) {
        diag_error(loc, "%s takes (query, key, value) and returns (output, weights): out, w = self.%s(x, x, x), "
                   "or self.%s(x, x, x)[0]", l->what, l->what, l->what);
        return POISON;
    }
    const Masking mk = {POISON, POISON, 0};
    return encode(S, l, x, &mk, loc);
}

int xf_call(Sema *S, const Layer *l, const Expr *e, Val *out, int n, const int *want)
{
    const int is_mha = l->kind == LK_MHA;
    static const char *const mnames[] = {"query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                                         "average_attn_weights", "is_causal"};
    static const char *const enames[] = {"src", "mask", "src_key_padding_mask", "is_causal"};
    static const char *const lnames[] = {"src", "src_mask", "src_key_padding_mask", "is_causal"};
    const Sig sig = is_mha ? (Sig){l->what, mnames, 8, 8, 3}
                           : (Sig){l->what, l->kind == LK_ENCODER ? enames : lnames, 4, 4, 1};
    Expr *a[8] = {NULL};
    if (!arg_bind(e, &sig, a))
        return 0;
    if (is_mha != (n == 2)) {
        if (is_mha)
            diag_error(e->loc, "%s returns (output, weights): unpack two names (out, w = ...) or take [0]", l->what);
        else
            diag_error(e->loc, "%s returns one tensor, unpacked into %d names", l->what, n);
        return 0;
    }
    const int pad = is_mha ? 3 : 2, maski = is_mha ? 5 : 1, causali = is_mha ? 7 : 3;
    Masking mk = {POISON, POISON, 0};
    if (!is_none(a[pad])) {
        mk.pad = S->eval(S, a[pad]);
        if (mk.pad.id < 0)
            return 0;
        if (mk.pad.s.rank != 2 || mk.pad.s.d[0] != DIM_N || S->g->n[mk.pad.id]->dt != DT_BOOL) {
            diag_error(a[pad]->loc, "%s: the key padding mask must be a bool [N, S] (true: a padded key), got %s %s",
                       l->what, ir_dtype_text(S->g->n[mk.pad.id]->dt), ir_shape_str(&mk.pad.s));
            return 0;
        }
    }
    /* PyTorch's MultiheadAttention asks for the mask beside the is_causal
     * hint; taking the hint alone is kinder */
    if (a[causali] && !arg_bool(a[causali], "is_causal", &mk.causal))
        return 0;
    if (!is_none(a[maski])) {
        mk.mask = S->eval(S, a[maski]);
        if (mk.mask.id < 0)
            return 0;
        if (mk.mask.s.rank != 2) {
            diag_error(a[maski]->loc, "%s: the attention mask must be [L, S] here, got %s", l->what,
                       ir_shape_str(&mk.mask.s));
            return 0;
        }
    }
    if (!is_mha) {
        out[0] = encode(S, l, S->eval(S, a[0]), &mk, e->loc);
        return out[0].id >= 0;
    }
    int nw = 1, avg = 1;
    if ((a[4] && !arg_bool(a[4], "need_weights", &nw)) || (a[6] && !arg_bool(a[6], "average_attn_weights", &avg)))
        return 0;
    if (want[1] && !nw) {
        diag_error(e->loc, "%s's weights are used but need_weights = False", l->what);
        return 0;
    }
    if (want[1] && !avg) {
        diag_error(a[6]->loc, "%s's weights per head (average_attn_weights = False) are not supported", l->what);
        return 0;
    }
    /* the same tensor given three times stays one node: self-attention's single product */
    Val raw[3], in[3];
    for (int i = 0; i < 3; i++) {
        raw[i] = S->eval(S, a[i]);
        int same = -1;
        for (int j = 0; j < i && same < 0; j++)
            if (raw[i].id >= 0 && raw[i].id == raw[j].id)
                same = j;
        in[i] = same >= 0 ? in[same] : bfirst(S, l, raw[i], e->loc);
    }
    Val q = in[0], k = in[1], v = in[2];
    if (q.id < 0 || k.id < 0 || v.id < 0)
        return 0;
    Val w = POISON;
    Val o = mha_forward(S, l, q, k, v, &mk, want[1], &w, e->loc);
    if (o.id < 0)
        return 0;
    out[0] = l->xf.batch_first ? o : swap01(S, o, e->loc);
    out[1] = w;
    return 1;
}
