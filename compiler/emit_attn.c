/* emit_attn.c: the kernels of scaled dot-product attention (T_ATTN and
 * its gradients T_ATTN_DQ, _DK, _DV; attention.c builds them).
 *
 * Shapes: q [.., L, E], k [.., S, E], v [.., S, Ev] with one set of
 * leading dimensions (H matrices in all, the batch's n among them), the
 * result o [.., L, Ev], and after o in its buffer lse [.., L], each query
 * row's log-sum-exp of its scaled, masked scores. No kernel stores the
 * L x S probabilities: the forward keeps lse, and each gradient recomputes
 * p = exp(s - lse) for the pairs it needs (FlashAttention's scheme), with
 *   D_i = sum_c dO[i, c] o[i, c],  ds = p (dO v^T - D_i) * scale,
 *   dq = ds k,  dk = ds^T q,  dv = p^T dO.
 * A causal attention leaves key j > query i out; its blocks stop at the
 * block's last query (the keys after it are all masked).
 *
 * CPU: a task per matrix and block of QB query rows (the forward and dq)
 * or per matrix (dk and dv, which sum over the blocks), the threads over
 * the tasks; the products of a block are BLAS calls on a QB x S scratch
 * of the thread's. QB is chosen so that a block's product stays under
 * OpenBLAS's threshold for threading it (m n k < 2^18), so BLAS runs each
 * single-threaded inside the parallel loop. */
#include <string.h>

#include "cddpc.h"

/* rows a block: a block's products under 2^18 multiply-adds each */
static int64_t block_rows(int64_t L, int64_t S, int64_t E, int64_t Ev)
{
    const int64_t wide = E > Ev ? E : Ev;
    int64_t qb = ((int64_t)1 << 18) / (S * wide > 0 ? S * wide : 1);
    qb = qb < 1 ? 1 : qb > 64 ? 64 : qb;
    return qb > L ? L : qb;
}

AttnGeo attn_geometry(const Emit *m, const Node *n)
{
    AttnGeo g;
    const int grad = n->op != OP_T_ATTN;
    g.at = grad ? ex_node(m, n->in[4]) : n;
    const int base = grad ? 1 : 0;
    const Shape *qs = &ex_node(m, n->in[base])->shape, *ks = &ex_node(m, n->in[base + 1])->shape;
    const int r = qs->rank;
    g.rank = r;
    g.L = qs->d[r - 2], g.E = qs->d[r - 1], g.S = ks->d[r - 2];
    g.Ev = g.at->shape.d[r - 1];
    g.lead = *qs;
    g.lead.rank = r - 2;
    g.sc = *qs;
    g.sc.d[r - 1] = g.S;
    g.q = plan_source(m->p, n->in[base]);
    g.k = plan_source(m->p, n->in[base + 1]);
    g.v = plan_source(m->p, n->in[base + 2]);
    g.o = grad ? plan_source(m->p, n->in[4]) : n->id;
    g.dy = grad ? plan_source(m->p, n->in[0]) : -1;
    g.mask = g.at->attn.mask ? plan_source(m->p, n->in[grad ? 5 : 3]) : -1;
    if (g.at->attn.mask)    /* the shape the attention reads it as (a view's, not its source's) */
        g.ms = ex_node(m, n->in[grad ? 5 : 3])->shape;
    g.qb = block_rows(g.L, g.S, g.E, g.Ev);
    return g;
}

/* The scores' masking of z_ at query i<r-2>, key i<r-1> */
static void mask_score(FILE *f, const AttnGeo *g, const char *ind)
{
    const int qi = g->rank - 2, kj = g->rank - 1;
    if (g->at->attn.causal)
        fprintf(f, "%sif (i%d > i%d)\n%s    z_ = -INFINITY;\n", ind, kj, qi, ind);
    if (g->mask >= 0) {
        const char *at = emit_tensor_broadcast_at(&g->ms, &g->sc);
        if (g->at->attn.mask == ATTN_MASK_BOOL)
            fprintf(f, "%sif (b%d[%s] == 0.0f)\n%s    z_ = -INFINITY;\n", ind, g->mask, at, ind);
        else
            fprintf(f, "%sz_ += b%d[%s];\n", ind, g->mask, at);
    }
}

/* The keys a block of rows r0_ .. r0_ + nr_ - 1 sees: all, or under a
 * causal mask those up to its last row */
static void keys(FILE *f, const AttnGeo *g, const char *ind)
{
    if (g->at->attn.causal)
        fprintf(f, "%sconst int64_t sk_ = r0_ + nr_ < %lld ? r0_ + nr_ : %lld;\n", ind, (long long)g->S,
                (long long)g->S);
    else
        fprintf(f, "%sconst int64_t sk_ = %lld;\n", ind, (long long)g->S);
}

/* s_ (nr_ x sk_, row stride S) := the probabilities of the block's rows
 * recomputed from lse_; with dy, then ds = p (dO v^T - D) * scale, dO v^T
 * computed into d_ first */
static void probabilities(FILE *f, const AttnGeo *g, int ds, const char *ind)
{
    const long long L = g->L, S = g->S, E = g->E, Ev = g->Ev;
    const int qi = g->rank - 2, kj = g->rank - 1;
    fprintf(f, "%srt_sgemm(0, 1, nr_, sk_, %lld, b%d + (e * %lld + r0_) * %lld, %lld, b%d + e * %lld, %lld, s_, %lld);\n",
            ind, E, g->q, L, E, E, g->k, S * E, E, S);
    if (ds)
        fprintf(f, "%srt_sgemm(0, 1, nr_, sk_, %lld, b%d + (e * %lld + r0_) * %lld, %lld, b%d + e * %lld, %lld, d_, "
                   "%lld);\n", ind, Ev, g->dy, L, Ev, Ev, g->v, S * Ev, Ev, S);
    fprintf(f, "%sfor (int64_t r_ = 0; r_ < nr_; r_++) {\n", ind);
    fprintf(f, "%s    const int64_t i%d = r0_ + r_;\n", ind, qi);
    fprintf(f, "%s    const float l_ = lse_[e * %lld + i%d];\n", ind, L, qi);
    if (ds) {
        fprintf(f, "%s    const float *const dyr_ = b%d + (e * %lld + i%d) * %lld, *const or_ = b%d + (e * %lld + i%d) "
                   "* %lld;\n", ind, g->dy, L, qi, Ev, g->o, L, qi, Ev);
        fprintf(f, "%s    float D_ = 0.0f;\n%s    for (int64_t c_ = 0; c_ < %lld; c_++)\n%s        D_ += dyr_[c_] * "
                   "or_[c_];\n", ind, ind, Ev, ind);
    }
    fprintf(f, "%s    for (int64_t i%d = 0; i%d < sk_; i%d++) {\n", ind, kj, kj, kj);
    fprintf(f, "%s        float z_ = s_[r_ * %lld + i%d] * %s;\n", ind, S, kj, util_cfloat(g->at->attn.scale));
    mask_score(f, g, util_fmt("%s        ", ind));
    fprintf(f, "%s        const float p_ = cddp_expf(z_ - l_);\n", ind);
    if (ds)
        fprintf(f, "%s        s_[r_ * %lld + i%d] = p_ * (d_[r_ * %lld + i%d] - D_) * %s;\n", ind, S, kj, S, kj,
                util_cfloat(g->at->attn.scale));
    else
        fprintf(f, "%s        s_[r_ * %lld + i%d] = p_;\n", ind, S, kj);
    fprintf(f, "%s    }\n%s}\n", ind, ind);
}

/* the tasks' loop: over (matrix, block) when `blocks`, else over the
 * matrices with the blocks inside; scratch s_ (and d_) per thread; the
 * forward writes lse_, the gradients read it */
static void open_tasks(FILE *f, const AttnGeo *g, int blocks, int scratch2, int writes_lse)
{
    const long long L = g->L, S = g->S, QB = g->qb;
    fprintf(f, "    const int64_t H_ = %s;   /* the matrices */\n", emit_tensor_extent(&g->lead));
    fprintf(f, "    const int64_t nb_ = %lld;   /* query blocks of %lld rows */\n", (L + QB - 1) / QB, QB);
    fprintf(f, "    %sfloat *const lse_ = b%d + H_ * %lld;   /* after the values */\n", writes_lse ? "" : "const ",
            g->o, L * g->Ev);
    fprintf(f, "    #pragma omp parallel if (H_ * nb_ > 1)\n    {\n");
    fprintf(f, "        float *const s_ = malloc(sizeof(float) * %lld);\n", QB * S * (scratch2 ? 2 : 1));
    fprintf(f, "        if (!s_)\n            abort();\n");
    if (scratch2)
        fprintf(f, "        float *const d_ = s_ + %lld;\n", QB * S);
    if (blocks) {
        fprintf(f, "        #pragma omp for schedule(static)\n");
        fprintf(f, "        for (int64_t t_ = 0; t_ < H_ * nb_; t_++) {\n");
        fprintf(f, "            const int64_t e = t_ / nb_, r0_ = t_ %% nb_ * %lld;\n", QB);
    } else {
        fprintf(f, "        #pragma omp for schedule(static)\n");
        fprintf(f, "        for (int64_t e = 0; e < H_; e++) {\n");
    }
    emit_tensor_decode(f, &g->lead, "e", "            ");
}

static void close_tasks(FILE *f)
{
    fprintf(f, "        }\n        free(s_);\n    }\n");
}

static void forward_c(const Emit *m, const Node *n, const AttnGeo *g)
{
    FILE *f = m->f;
    const long long L = g->L, S = g->S, E = g->E, Ev = g->Ev, QB = g->qb;
    const int qi = g->rank - 2, kj = g->rank - 1;
    open_tasks(f, g, 1, 0, 1);
    fprintf(f, "            const int64_t nr_ = %lld - r0_ < %lld ? %lld - r0_ : %lld;\n", L, QB, L, QB);
    keys(f, g, "            ");
    fprintf(f, "            rt_sgemm(0, 1, nr_, sk_, %lld, b%d + (e * %lld + r0_) * %lld, %lld, b%d + e * %lld, %lld, "
               "s_, %lld);\n", E, g->q, L, E, E, g->k, S * E, E, S);
    fprintf(f, "            for (int64_t r_ = 0; r_ < nr_; r_++) {\n");
    fprintf(f, "                const int64_t i%d = r0_ + r_;\n", qi);
    fprintf(f, "                float *const x_ = s_ + r_ * %lld;\n", S);
    fprintf(f, "                float mx_ = -INFINITY;\n");
    fprintf(f, "                for (int64_t i%d = 0; i%d < sk_; i%d++) {\n", kj, kj, kj);
    fprintf(f, "                    float z_ = x_[i%d] * %s;\n", kj, util_cfloat(g->at->attn.scale));
    mask_score(f, g, "                    ");
    fprintf(f, "                    x_[i%d] = z_;\n", kj);
    fprintf(f, "                    mx_ = z_ > mx_ || z_ != z_ ? z_ : mx_;\n");
    fprintf(f, "                }\n");
    /* every key masked: the maximum is -inf and the row NaN, as PyTorch's */
    /* the exponentials in a loop of their own, which vectorizes; the
     * sum after it in order */
    fprintf(f, "                for (int64_t j_ = 0; j_ < sk_; j_++)\n");
    fprintf(f, "                    x_[j_] = cddp_expf(x_[j_] - mx_);\n");
    fprintf(f, "                float sum_ = 0.0f;\n");
    fprintf(f, "                for (int64_t j_ = 0; j_ < sk_; j_++)\n                    sum_ += x_[j_];\n");
    fprintf(f, "                const float inv_ = 1.0f / sum_;\n");
    fprintf(f, "                for (int64_t j_ = 0; j_ < sk_; j_++)\n                    x_[j_] *= inv_;\n");
    fprintf(f, "                lse_[e * %lld + i%d] = mx_ + logf(sum_);\n", L, qi);
    fprintf(f, "            }\n");
    fprintf(f, "            rt_sgemm(0, 0, nr_, %lld, sk_, s_, %lld, b%d + e * %lld, %lld, b%d + (e * %lld + r0_) * %lld, "
               "%lld);\n", Ev, S, g->v, S * Ev, Ev, n->id, L, Ev, Ev);
    close_tasks(f);
}

/* dq of a block: ds k */
static void dq_c(const Emit *m, const Node *n, const AttnGeo *g)
{
    FILE *f = m->f;
    const long long L = g->L, S = g->S, E = g->E, QB = g->qb;
    open_tasks(f, g, 1, 1, 0);
    fprintf(f, "            const int64_t nr_ = %lld - r0_ < %lld ? %lld - r0_ : %lld;\n", L, QB, L, QB);
    keys(f, g, "            ");
    probabilities(f, g, 1, "            ");
    fprintf(f, "            rt_sgemm(0, 0, nr_, %lld, sk_, s_, %lld, b%d + e * %lld, %lld, b%d + (e * %lld + r0_) * %lld, "
               "%lld);\n", E, S, g->k, S * E, E, n->id, L, E, E);
    close_tasks(f);
}

/* dk (ds^T q) or dv (p^T dO) of a matrix: its blocks' sums */
static void dkv_c(const Emit *m, const Node *n, const AttnGeo *g)
{
    FILE *f = m->f;
    const int dk = n->op == OP_T_ATTN_DK;
    const long long L = g->L, S = g->S, QB = g->qb, W = dk ? g->E : g->Ev;
    if (!dk)        /* dv = p^T dO: the probabilities need no v */
        fprintf(f, "    (void)b%d;\n", g->v);
    open_tasks(f, g, 0, dk, 0);
    fprintf(f, "            float *const out_ = b%d + e * %lld;\n", n->id, S * W);
    fprintf(f, "            memset(out_, 0, sizeof(float) * %lld);\n", S * W);
    fprintf(f, "            for (int64_t r0_ = 0; r0_ < %lld; r0_ += %lld) {\n", L, QB);
    fprintf(f, "                const int64_t nr_ = %lld - r0_ < %lld ? %lld - r0_ : %lld;\n", L, QB, L, QB);
    keys(f, g, "                ");
    probabilities(f, g, dk, "                ");
    if (dk)
        fprintf(f, "                rt_sgemm_acc(1, 0, sk_, %lld, nr_, s_, %lld, b%d + (e * %lld + r0_) * %lld, %lld, "
                   "out_, %lld);\n", W, S, g->q, L, W, W, W);
    else
        fprintf(f, "                rt_sgemm_acc(1, 0, sk_, %lld, nr_, s_, %lld, b%d + (e * %lld + r0_) * %lld, %lld, "
                   "out_, %lld);\n", W, S, g->dy, L, W, W, W);
    fprintf(f, "            }\n");
    close_tasks(f);
}

void emit_attn_c(const Emit *m)
{
    const Node *n = ex_node(m, m->gr->anchor);
    const AttnGeo g = attn_geometry(m, n);
    switch (n->op) {
    case OP_T_ATTN: forward_c(m, n, &g); break;
    case OP_T_ATTN_DQ: dq_c(m, n, &g); break;
    default: dkv_c(m, n, &g); break;
    }
}

