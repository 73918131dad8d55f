/* embedding.c: nn.Embedding (emb_): a table of D-vectors, one row per
 * token, looked up by an integer tensor.
 *
 *   self.wte = nn.Embedding(V, D, padding_idx = None)
 *   h = self.wte(idx)               # idx i64 [N, T] -> [N, T, D]
 *   p = self.wpe(torch.arange(T))   # a constant index: [T, D], no batch
 *
 * The weight is [V, D] under "NAME.weight", drawn from N(0, 1) as PyTorch's
 * reset_parameters() does, padding_idx's row zero. The lookup is one
 * T_EMBED node; its gradient T_EMBED_GRAD sums each row's dy over the
 * positions in their order (no float atomics: the same bits on every run,
 * on both targets), padding_idx's row none. An index out of [0, V) is
 * clamped by the kernels (PyTorch raises; the data readers check the
 * model's input against V before a step runs). */
#include <string.h>

#include "sema.h"
#include "cddprt.h"         /* RT_INIT_NORMAL */

static int is_none(const Expr *e) { return e && e->kind == E_NAME && strcmp(e->s, "None") == 0; }

Layer *emb_make(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"num_embeddings", "embedding_dim", "padding_idx", "max_norm",
                                        "norm_type", "scale_grad_by_freq", "sparse"};
    const Sig sig = {"Embedding", names, 7, 2, 2};
    Expr *a[7];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t V, D, pad = -1;
    if (!arg_int(a[0], "num_embeddings", 1, MAX_DIM, &V) || !arg_int(a[1], "embedding_dim", 1, MAX_DIM, &D))
        return NULL;
    if (V * D > MAX_PARAM_ELEMS) {
        diag_error(e->loc, "Embedding(%lld, %lld) has too many weights (the limit is %lld)", (long long)V,
                   (long long)D, (long long)MAX_PARAM_ELEMS);
        return NULL;
    }
    if (a[2] && !is_none(a[2])) {   /* a negative padding_idx counts from the end, as PyTorch's */
        if (!arg_int(a[2], "padding_idx", -V, V - 1, &pad))
            return NULL;
        pad = pad < 0 ? pad + V : pad;
    }
    if (a[3] && !is_none(a[3])) {
        diag_error(a[3]->loc, "Embedding's max_norm is not supported (it renormalizes the looked-up rows in "
                   "place during forward); leave it None");
        return NULL;
    }
    int flag;
    for (int k = 5; k < 7; k++)
        if (a[k] && (!arg_bool(a[k], names[k], &flag) || flag)) {
            if (flag)
                diag_error(a[k]->loc, "Embedding's %s is not supported; leave it False", names[k]);
            return NULL;
        }
    Layer *l = util_alloc(sizeof *l);
    l->kind = LK_EMBEDDING;
    l->name = prefix;
    l->what = what;
    l->loc = e->loc;
    l->in = V;
    l->out = D;
    l->pad = pad;
    l->b = -1;
    l->w = ir_param(S->g, *prefix ? util_fmt("%s.weight", prefix) : "weight", shape2(V, D), RT_INIT_NORMAL, 0, e->loc);
    S->g->n[l->w]->zero_row = pad + 1;
    S->g->n[l->w]->init_b = 1;      /* N(0, 1) */
    return l;
}

Val emb_apply(Sema *S, const Layer *l, Val idx, Loc loc)
{
    if (idx.id < 0)
        return idx;
    const DType dt = S->g->n[idx.id]->dt;
    if (dt != DT_I64) {
        diag_error(loc, "%s looks up rows by an integer tensor (i64, such as forward(idx: i64[N, T]) or "
                   "torch.arange(T)), got %s", l->what, dt == DT_BOOL ? "a bool tensor" : "a float tensor");
        return POISON;
    }
    if (idx.s.rank + 1 > MAX_RANK) {
        diag_error(loc, "%s of %s would have more than %d dimensions", l->what, ir_shape_str(&idx.s), MAX_RANK);
        return POISON;
    }
    Shape s = idx.s;
    s.d[s.rank++] = l->out;
    const int y = ir_add(S->g, OP_T_EMBED, 2, (int[]){l->w, idx.id}, s, DT_F32, loc);
    S->g->n[y]->ten.lo = (double)l->pad;
    return (Val){y, s};
}
