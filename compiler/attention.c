/* attention.c: scaled dot-product attention in forward (attn_).
 *
 * F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p,
 * is_causal, scale) with PyTorch 2's semantics: softmax(q k^T * scale +
 * mask) v over the last two dimensions, batched over the leading ones.
 * Under the fusion rule `attention` (on by default) it is one node,
 * T_ATTN, whose kernels (emit_attn.c) never store the L x S probabilities:
 * the forward keeps each query row's log-sum-exp, and the gradients
 * recompute the probabilities from it (FlashAttention's scheme). With the
 * rule off (--fusion all,-attention), or with dropout on the
 * probabilities, which the fused kernels do not draw, it is written out
 * as PyTorch's math path computes it: a product, the scale, the mask, a
 * softmax over the last dimension, dropout, a product. */
#include <math.h>
#include <string.h>

#include "sema.h"

static const char *fname(const Expr *e) { return e->written ? e->written : e->s; }

static int is_none(const Expr *e) { return !e || (e->kind == E_NAME && strcmp(e->s, "None") == 0); }

/* whether value id is computed from a trained parameter */
static int trained(const Graph *g, int id, char *seen)
{
    if (seen[id])
        return 0;
    seen[id] = 1;
    const Node *n = g->n[id];
    if (n->op == OP_PARAM)
        return !n->buffer;
    for (int k = 0; k < n->nin; k++)
        if (trained(g, n->in[k], seen))
            return 1;
    return 0;
}

static Val tnode(Sema *S, Op op, int nin, const int *in, Shape s, DType dt, double lo, Loc loc)
{
    for (int k = 0; k < nin; k++)
        if (in[k] < 0)
            return POISON;
    const int id = ir_add(S->g, op, nin, in, s, dt, loc);
    S->g->n[id]->ten.lo = lo;
    return (Val){id, s};
}

/* the written-out attention: PyTorch's math path */
static Val written_out(Sema *S, const AttnArgs *a, Loc loc)
{
    const int r = a->q.s.rank;
    Shape ss = a->q.s;
    ss.d[r - 1] = a->k.s.d[r - 2];
    Val s = tnode(S, OP_T_BMM, 2, (int[]){a->q.id, a->k.id}, ss, DT_F32, 0, loc);
    if (s.id < 0)
        return POISON;
    S->g->n[s.id]->ten.tb = 1;
    s = tnode(S, OP_T_AFFINE, 1, &s.id, ss, DT_F32, a->scale, loc);
    if (a->causal) {
        const Shape ls = {2, {ss.d[r - 2], ss.d[r - 1]}};
        Val ones = tnode(S, OP_T_FULL, 0, NULL, ls, DT_BOOL, 1, loc);
        Val above = tnode(S, OP_T_TRIU, 1, &ones.id, ls, DT_BOOL, 1, loc);
        s = tnode(S, OP_T_FILL_IF, 2, (int[]){s.id, above.id}, ss, DT_F32, -INFINITY, loc);
    }
    if (a->mask_kind == ATTN_MASK_BOOL) {
        Val out = tnode(S, OP_T_EQC, 1, &a->mask.id, a->mask.s, DT_BOOL, 0, loc);
        s = tnode(S, OP_T_FILL_IF, 2, (int[]){s.id, out.id}, ss, DT_F32, -INFINITY, loc);
    } else if (a->mask_kind == ATTN_MASK_ADD) {
        s = tnode(S, OP_BC_ADD, 2, (int[]){s.id, a->mask.id}, ss, DT_F32, 0, loc);
    }
    Val p = layer_softmax(S, s, loc);
    if (a->dropout > 0)
        p = layer_dropout(S, p, a->dropout, loc);
    Shape os = a->q.s;
    os.d[r - 1] = a->v.s.d[r - 1];
    return tnode(S, OP_T_BMM, 2, (int[]){p.id, a->v.id}, os, DT_F32, 0, loc);
}

Val attn_apply(Sema *S, const AttnArgs *a, Loc loc)
{
    if (a->q.id < 0 || a->k.id < 0 || a->v.id < 0 || (a->mask_kind && a->mask.id < 0))
        return POISON;
    Shape os;
    const char *why = ten_attn_shape(&a->q.s, &a->k.s, &a->v.s, a->mask_kind ? &a->mask.s : NULL, &os);
    if (why) {
        diag_error(loc, "attention of query %s, key %s, value %s%s%s: %s", ir_shape_str(&a->q.s),
                   ir_shape_str(&a->k.s), ir_shape_str(&a->v.s), a->mask_kind ? ", mask " : "",
                   a->mask_kind ? ir_shape_str(&a->mask.s) : "", why);
        return POISON;
    }
    if (!(S->g->fusion & R_ATTENTION) || a->dropout > 0)
        return written_out(S, a, loc);
    int in[4] = {a->q.id, a->k.id, a->v.id, a->mask.id};
    const int id = ir_add(S->g, OP_T_ATTN, a->mask_kind ? 4 : 3, in, os, DT_F32, loc);
    Node *n = S->g->n[id];
    n->attn.scale = a->scale;
    n->attn.causal = a->causal;
    n->attn.mask = a->mask_kind;
    return (Val){id, os};
}

/* F.scaled_dot_product_attention(query, key, value, attn_mask = None,
 * dropout_p = 0.0, is_causal = False, scale = None) */
Val attn_sdpa(Sema *S, const Expr *e)
{
    static const char *const names[] = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"};
    const Sig sig = {fname(e), names, 7, 7, 3};
    Expr *x[7];
    if (!arg_bind(e, &sig, x))
        return POISON;
    AttnArgs a = {.q = S->eval(S, x[0]), .k = S->eval(S, x[1]), .v = S->eval(S, x[2]), .mask = POISON};
    int ok = a.q.id >= 0 && a.k.id >= 0 && a.v.id >= 0;
    for (int i = 0; i < 3 && ok; i++) {
        const Val t = i == 0 ? a.q : i == 1 ? a.k : a.v;
        ok = layer_float(S, t, util_fmt("%s's %s", fname(e), names[i]), x[i]->loc);
    }
    if (!is_none(x[3])) {
        a.mask = S->eval(S, x[3]);
        if (a.mask.id < 0)
            return POISON;
        const DType t = S->g->n[a.mask.id]->dt;
        a.mask_kind = t == DT_BOOL ? ATTN_MASK_BOOL : ATTN_MASK_ADD;
        if (t == DT_I64) {
            diag_error(x[3]->loc, "%s's attn_mask is an integer tensor: a bool mask (true takes part) or a float "
                       "one (added to the scores) is; .bool() converts", fname(e));
            ok = 0;
        }
        char *seen = util_alloc((size_t)S->g->nn);     /* util's: freed with the rest at exit */
        if (ok && trained(S->g, a.mask.id, seen)) {
            diag_error(x[3]->loc, "%s's attn_mask is computed from trained parameters: a mask with a gradient is "
                       "not supported", fname(e));
            ok = 0;
        }
    }
    if (x[4] && !arg_num(x[4], "dropout_p", &a.dropout)) {
        ok = 0;
    } else if (a.dropout < 0 || a.dropout >= 1) {
        diag_error(x[4]->loc, "dropout_p must be in [0, 1), got %s", arg_show(x[4]));
        ok = 0;
    }
    if (x[5] && !arg_bool(x[5], "is_causal", &a.causal))
        ok = 0;
    if (ok && a.causal && a.mask_kind) {
        diag_error(x[3]->loc, "%s takes attn_mask or is_causal = True, not both (as PyTorch)", fname(e));
        ok = 0;
    }
    if (!ok)
        return POISON;
    a.scale = 1.0 / sqrt((double)a.q.s.d[a.q.s.rank - 1]);
    if (!is_none(x[6]) && !arg_num(x[6], "scale", &a.scale))
        return POISON;
    return attn_apply(S, &a, e->loc);
}
