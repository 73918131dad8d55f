/* emit_attn_cuda.c: scaled dot-product attention's CUDA kernels (T_ATTN
 * and its gradients T_ATTN_DQ, _DK, _DV), FlashAttention's scheme: no
 * kernel stores the L x S scores. The semantics are emit_attn.c's (the C
 * kernels): s = q k^T * scale, key j > query i left out when causal, a
 * bool mask's 0 left out, a float mask added; the forward stores o and
 * each query row's log-sum-exp lse after o in its buffer; the gradients
 * recompute p = exp(s - lse), with D_i = sum_c dO[i, c] o[i, c],
 * ds = p (dO v_j - D_i) * scale, dq = ds k, dk = ds^T q, dv = p^T dO.
 *
 * Every kernel runs 128 threads a block, TPR (4 to 32) threads a "row",
 * ROWS = 128 / TPR rows a block; a row's threads own its dims c = sub +
 * TPR u (u < ceil(E / TPR): registers) and add their partial dot products
 * with __shfl_xor_sync (a butterfly, so each of them holds the same sum,
 * bit for bit). TPR is the smallest that keeps a thread's register arrays
 * at 32 floats or fewer: ptxas hoists the shared-memory loads of a row's
 * dims ahead of their FMAs, so with 64 (E = Ev = 128 at TPR 4) the
 * forward, dq and dv reached the 128 registers of the kernels'
 * __launch_bounds__(256, 2); at 32 the widest use 101 to 122 (sm_90,
 * NVRTC 13.0), none spills.
 *
 *   forward: a block per (matrix e, tile of ROWS query rows); key tiles of
 *     BK keys (k and v) staged in shared memory; a row's BK scores go to
 *     shared memory (each written by one of its threads, which also applies
 *     the mask), then an online softmax: the tile's maximum, the running
 *     sum and accumulator rescaled by exp(m_old - m_new), p v added. Causal:
 *     the key tiles stop at the block's last query.
 *   dq: a block per (e, query tile): q, dO and dq in registers, D_i from
 *     o; over the key tiles (k, v staged) ds k accumulated. One pass: lse
 *     is known, so no maximum.
 *   dk, dv: a block per (e, tile of ROWS keys): k (and v for dk) in
 *     registers; over the query tiles of BQ queries (q, dO, lse and D
 *     staged in shared memory; causal: from the block's first key on),
 *     dv += p dO_i, dk += ds q_i.
 * Deterministic: each output element is summed by one thread in one
 * order; no atomics. Reads go through (float), so 16-bit operands
 * (rt_bf16s / rt_fp16s) read as the C kernels see them; the results are
 * float (memplan.c keeps attention fp32).
 *
 * Every loop that holds a shuffle or a barrier has block-uniform bounds;
 * the rows past L (or S) compute with zeros and store nothing, and read no
 * mask element. A row whose keys are all masked gives NaN (its o and lse),
 * as the C kernel's. */
#include <stdio.h>

#include "cddpc.h"

#define NT 128              /* threads a block */
#define SMEM (40 * 1024)    /* static shared memory budget, bytes */

typedef struct {
    int tpr, rows;          /* threads a row, rows a block */
    int ne, nev;            /* dims a thread: ceil(E / TPR), ceil(Ev / TPR) */
    int ep, evp;            /* padded widths of the staged rows: ne * TPR, nev * TPR */
    int tile;               /* rows of the staged tile (keys; dk, dv: queries) */
} Lay;

static int cdiv(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

/* a_e register arrays of E dims and a_v of Ev: the smallest TPR keeping
 * them to 32 floats; the staged tile's rows (a power of two, 32 at most,
 * 4 at least) as many as SMEM holds, with `per` more bytes a staged row
 * (lse, D) and, when `scores`, the rows' scores (rows x (tile + 1)) */
static Lay layout(const AttnGeo *g, int a_e, int a_v, int per, int scores)
{
    Lay y;
    y.tpr = 4;
    while (y.tpr < 32 && a_e * cdiv(g->E, y.tpr) + a_v * cdiv(g->Ev, y.tpr) > 32)
        y.tpr *= 2;
    y.rows = NT / y.tpr;
    y.ne = cdiv(g->E, y.tpr), y.nev = cdiv(g->Ev, y.tpr);
    y.ep = y.ne * y.tpr, y.evp = y.nev * y.tpr;
    y.tile = 32;
    while (y.tile > 4 && (int64_t)y.tile * ((y.ep + y.evp) * 4 + per)
                             + (scores ? (int64_t)4 * y.rows * (y.tile + 1) : 0) > SMEM)
        y.tile /= 2;
    return y;
}

/* the score z_ of query i<rank-2>, key i<rank-1> from the dot product d_:
 * scaled, then masked (the mask read only for a live row) */
static void score(FILE *f, const AttnGeo *g, const char *live, const char *ind)
{
    const int qi = g->rank - 2, kj = g->rank - 1;
    fprintf(f, "%sfloat z_ = d_ * %s;\n", ind, util_cfloat(g->at->attn.scale));
    if (g->at->attn.causal)
        fprintf(f, "%sif (i%d > i%d)\n%s    z_ = -INFINITY;\n", ind, kj, qi, ind);
    if (g->mask >= 0) {
        /* indexed by the shape the attention reads (AttnGeo.ms: a view's,
         * [N, T] viewed as [N, 1, 1, T], not its source's) */
        const char *at = emit_tensor_broadcast_at(&g->ms, &g->sc);
        if (g->at->attn.mask == ATTN_MASK_BOOL)
            fprintf(f, "%sif (%s && (float)b%d[%s] == 0.0f)\n%s    z_ = -INFINITY;\n", ind, live, g->mask, at, ind);
        else
            fprintf(f, "%sif (%s)\n%s    z_ += (float)b%d[%s];\n", ind, live, ind, g->mask, at);
    }
}

/* d_ (and more) summed over a row's TPR threads */
static void row_sum(FILE *f, const Lay *y, const char *vars, const char *ind)
{
    if (y->tpr == 1)
        return;
    fprintf(f, "%sfor (int o_ = 1; o_ < %d; o_ <<= 1) {\n", ind, y->tpr);
    for (const char *v = vars; *v;) {
        char name[16];
        int k = 0;
        while (*v && *v != ',' && k < 15)
            name[k++] = *v++;
        name[k] = 0;
        if (*v == ',')
            v++;
        fprintf(f, "%s    %s += __shfl_xor_sync(0xffffffffu, %s, o_);\n", ind, name, name);
    }
    fprintf(f, "%s}\n", ind);
}

/* a row of W values of buffer b at element `base` into the register array
 * arr (dims sub_ + TPR u), zero past W or for a dead row */
static void load_row(FILE *f, const Lay *y, int b, const char *base, int64_t W, int nw,
                     const char *arr, const char *live, const char *ind)
{
    fprintf(f, "%sfor (int u_ = 0; u_ < %d; u_++) {\n", ind, nw);
    fprintf(f, "%s    const int c_ = sub_ + %d * u_;\n", ind, y->tpr);
    fprintf(f, "%s    %s[u_] = %s && c_ < %lld ? (float)b%d[(%s) * %lld + c_] : 0.0f;\n", ind, arr, live, (long long)W,
            b, base, (long long)W);
    fprintf(f, "%s}\n", ind);
}

/* shared tile sh[rows][wp] := rows r0 + j (j < cnt) of buffer b (W wide),
 * zero elsewhere */
static void stage(FILE *f, const char *sh, int rows, int wp, int b, const char *row0, const char *cnt, int64_t W,
                  const char *ind)
{
    fprintf(f, "%sfor (int t_ = threadIdx.x; t_ < %d; t_ += %d) {\n", ind, rows * wp, NT);
    fprintf(f, "%s    const int j_ = t_ / %d, c_ = t_ %% %d;\n", ind, wp, wp);
    fprintf(f, "%s    %s[j_][c_] = j_ < %s && c_ < %lld ? (float)b%d[(%s + j_) * %lld + c_] : 0.0f;\n", ind, sh, cnt,
            (long long)W, b, row0, (long long)W);
    fprintf(f, "%s}\n", ind);
}

/* the grid: `tiles` blocks a matrix, every matrix of the largest batch */
static void grid(rt_cuda_launch *L, const AttnGeo *g, int64_t tiles)
{
    const int64_t per = ir_row_elems(&g->lead) * tiles;
    L->block[0] = NT;
    if (ir_batched(&g->lead)) {
        L->gmul[0] = per;
        L->gdiv[0] = 1;
    } else {
        L->gfix[0] = (unsigned)(per > 0 ? per : 1);
    }
}

/* the prologue every kernel shares: the matrices, lse_, the thread's row
 * and lane, and the loop over (matrix, tile) with the matrix's leading
 * coordinates decoded */
static void open_blocks(FILE *f, const AttnGeo *g, const Lay *y, int64_t tiles, const char *t0)
{
    fprintf(f, "    const int64_t H_ = %s;   /* the matrices */\n", emit_tensor_extent(&g->lead));
    fprintf(f, "    float *const lse_ = (float *)b%d + H_ * %lld;   /* after the values */\n", g->o,
            (long long)(g->L * g->Ev));
    fprintf(f, "    const int row_ = (int)threadIdx.x / %d, sub_ = (int)threadIdx.x %% %d;\n", y->tpr, y->tpr);
    fprintf(f, "    (void)lse_;\n");
    fprintf(f, "    for (int64_t x_ = blockIdx.x; x_ < H_ * %lld; x_ += gridDim.x) {\n", (long long)tiles);
    fprintf(f, "        const int64_t e = x_ / %lld, %s = x_ %% %lld * %d;\n", (long long)tiles, t0, (long long)tiles,
            y->rows);
    int wide = 0;
    for (int d = 0; d < g->lead.rank; d++)
        wide |= g->lead.d[d] != 1;
    if (wide) {
        emit_tensor_decode(f, &g->lead, "e", "        ");
    } else {    /* no coordinate to decode (its r_ would be set and never used: an NVRTC warning) */
        for (int d = 0; d < g->lead.rank; d++)
            fprintf(f, "        const int64_t i%d = 0;\n        (void)i%d;\n", d, d);
    }
}

/* the keys a block of queries q0_ .. q0_ + ROWS - 1 sees */
static void key_end(FILE *f, const AttnGeo *g, const Lay *y, const char *ind)
{
    if (g->at->attn.causal)
        fprintf(f, "%sconst int64_t kend_ = q0_ + %d < %lld ? q0_ + %d : %lld;\n", ind, y->rows, (long long)g->S,
                y->rows, (long long)g->S);
    else
        fprintf(f, "%sconst int64_t kend_ = %lld;\n", ind, (long long)g->S);
}

static void forward_cuda(const Emit *m, const Node *n, const AttnGeo *g, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Lay y = layout(g, 1, 1, 0, 1);
    const int qi = g->rank - 2, kj = g->rank - 1, BK = y.tile, T = y.tpr;
    const long long Lq = g->L, S = g->S, E = g->E, Ev = g->Ev;
    const int64_t tiles = cdiv(Lq, y.rows);
    fprintf(f, "    /* %d threads a query row (dims sub + %d u), %d rows a block, key tiles of %d */\n", T, T, y.rows, BK);
    fprintf(f, "    __shared__ float ks_[%d][%d], vs_[%d][%d], ps_[%d][%d];\n", BK, y.ep, BK, y.evp, y.rows, BK + 1);
    open_blocks(f, g, &y, tiles, "q0_");
    fprintf(f, "        const int64_t i%d = q0_ + row_;\n", qi);
    fprintf(f, "        const int live_ = i%d < %lld;\n", qi, Lq);
    fprintf(f, "        float q_[%d], acc_[%d];\n", y.ne, y.nev);
    load_row(f, &y, g->q, util_fmt("e * %lld + i%d", Lq, qi), E, y.ne, "q_", "live_", "        ");
    fprintf(f, "        for (int u_ = 0; u_ < %d; u_++)\n            acc_[u_] = 0.0f;\n", y.nev);
    fprintf(f, "        float m_ = -INFINITY, l_ = 0.0f;   /* the running maximum and sum */\n");
    key_end(f, g, &y, "        ");
    fprintf(f, "        for (int64_t k0_ = 0; k0_ < kend_; k0_ += %d) {\n", BK);
    fprintf(f, "            const int nk_ = kend_ - k0_ < %d ? (int)(kend_ - k0_) : %d;\n", BK, BK);
    fprintf(f, "            __syncthreads();   /* the previous tile read */\n");
    stage(f, "ks_", BK, y.ep, g->k, util_fmt("e * %lld + k0_", S), "nk_", E, "            ");
    stage(f, "vs_", BK, y.evp, g->v, util_fmt("e * %lld + k0_", S), "nk_", Ev, "            ");
    fprintf(f, "            __syncthreads();\n");
    /* the scores: each by the row's thread j % TPR, masked, to ps_ */
    fprintf(f, "            for (int j_ = 0; j_ < nk_; j_++) {\n");
    fprintf(f, "                float d_ = 0.0f;\n");
    fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.ne);
    fprintf(f, "                    d_ += q_[u_] * ks_[j_][sub_ + %d * u_];\n", T);
    row_sum(f, &y, "d_", "                ");
    fprintf(f, "                if ((j_ & %d) == sub_) {\n", T - 1);
    fprintf(f, "                    const int64_t i%d = k0_ + j_;\n", kj);
    fprintf(f, "                    (void)i%d;\n", kj);
    score(f, g, "live_", "                    ");
    fprintf(f, "                    ps_[row_][j_] = z_;\n");
    fprintf(f, "                }\n            }\n");
    fprintf(f, "            __syncwarp();   /* the row's scores, from its threads */\n");
    /* online softmax: the tile's maximum (NaN kept), the rescale, p v */
    fprintf(f, "            float mt_ = m_;\n");
    fprintf(f, "            for (int j_ = 0; j_ < nk_; j_++) {\n");
    fprintf(f, "                const float z_ = ps_[row_][j_];\n");
    fprintf(f, "                mt_ = z_ > mt_ || z_ != z_ ? z_ : mt_;\n");
    fprintf(f, "            }\n");
    fprintf(f, "            const float mu_ = mt_ == -INFINITY ? 0.0f : mt_;   /* every key so far masked: p = 0 */\n");
    fprintf(f, "            const float al_ = expf(m_ - mu_);   /* the rescale of what was summed */\n");
    fprintf(f, "            m_ = mt_;\n");
    fprintf(f, "            l_ *= al_;\n");
    fprintf(f, "            for (int u_ = 0; u_ < %d; u_++)\n                acc_[u_] *= al_;\n", y.nev);
    fprintf(f, "            for (int j_ = 0; j_ < nk_; j_++) {\n");
    fprintf(f, "                const float p_ = expf(ps_[row_][j_] - mu_);\n");
    fprintf(f, "                l_ += p_;\n");
    fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.nev);
    fprintf(f, "                    acc_[u_] += p_ * vs_[j_][sub_ + %d * u_];\n", T);
    fprintf(f, "            }\n        }\n");
    /* every key masked: NaN, as the C kernel's exp(-inf - -inf) */
    fprintf(f, "        if (live_) {\n");
    fprintf(f, "            const float inv_ = 1.0f / l_;\n");
    fprintf(f, "            const int none_ = m_ == -INFINITY;\n");
    fprintf(f, "            for (int u_ = 0; u_ < %d; u_++) {\n", y.nev);
    fprintf(f, "                const int c_ = sub_ + %d * u_;\n", T);
    fprintf(f, "                if (c_ < %lld)\n", Ev);
    fprintf(f, "                    b%d[(e * %lld + i%d) * %lld + c_] = none_ ? __int_as_float(0x7fc00000) : acc_[u_] * inv_;\n",
            n->id, Lq, qi, Ev);
    fprintf(f, "            }\n");
    fprintf(f, "            if (sub_ == 0)\n");
    fprintf(f, "                lse_[e * %lld + i%d] = none_ ? __int_as_float(0x7fc00000) : m_ + logf(l_);\n", Lq, qi);
    fprintf(f, "        }\n    }\n");
    grid(L, g, tiles);
}

/* D_i = dO_i . o_i of the row whose dO is in dy_ (live_), summed over
 * the row's threads */
static void row_D(FILE *f, const AttnGeo *g, const Lay *y, const char *row, const char *ind)
{
    fprintf(f, "%sfloat D_ = 0.0f;\n", ind);
    fprintf(f, "%sfor (int u_ = 0; u_ < %d; u_++) {\n", ind, y->nev);
    fprintf(f, "%s    const int c_ = sub_ + %d * u_;\n", ind, y->tpr);
    fprintf(f, "%s    if (live_ && c_ < %lld)\n", ind, (long long)g->Ev);
    fprintf(f, "%s        D_ += dy_[u_] * (float)b%d[(%s) * %lld + c_];\n", ind, g->o, row, (long long)g->Ev);
    fprintf(f, "%s}\n", ind);
}

static void dq_cuda(const Emit *m, const Node *n, const AttnGeo *g, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Lay y = layout(g, 2, 1, 0, 0);
    const int qi = g->rank - 2, kj = g->rank - 1, BK = y.tile, T = y.tpr;
    const long long Lq = g->L, S = g->S, E = g->E, Ev = g->Ev;
    const int64_t tiles = cdiv(Lq, y.rows);
    fprintf(f, "    /* %d threads a query row (dims sub + %d u), %d rows a block, key tiles of %d */\n", T, T, y.rows, BK);
    fprintf(f, "    __shared__ float ks_[%d][%d], vs_[%d][%d];\n", BK, y.ep, BK, y.evp);
    open_blocks(f, g, &y, tiles, "q0_");
    fprintf(f, "        const int64_t i%d = q0_ + row_;\n", qi);
    fprintf(f, "        const int live_ = i%d < %lld;\n", qi, Lq);
    fprintf(f, "        float q_[%d], dy_[%d], acc_[%d];\n", y.ne, y.nev, y.ne);
    const char *rowi = util_fmt("e * %lld + i%d", Lq, qi);
    load_row(f, &y, g->q, rowi, E, y.ne, "q_", "live_", "        ");
    load_row(f, &y, g->dy, rowi, Ev, y.nev, "dy_", "live_", "        ");
    fprintf(f, "        for (int u_ = 0; u_ < %d; u_++)\n            acc_[u_] = 0.0f;\n", y.ne);
    row_D(f, g, &y, rowi, "        ");
    row_sum(f, &y, "D_", "        ");
    fprintf(f, "        const float l_ = live_ ? lse_[%s] : 0.0f;\n", rowi);
    key_end(f, g, &y, "        ");
    fprintf(f, "        for (int64_t k0_ = 0; k0_ < kend_; k0_ += %d) {\n", BK);
    fprintf(f, "            const int nk_ = kend_ - k0_ < %d ? (int)(kend_ - k0_) : %d;\n", BK, BK);
    fprintf(f, "            __syncthreads();   /* the previous tile read */\n");
    stage(f, "ks_", BK, y.ep, g->k, util_fmt("e * %lld + k0_", S), "nk_", E, "            ");
    stage(f, "vs_", BK, y.evp, g->v, util_fmt("e * %lld + k0_", S), "nk_", Ev, "            ");
    fprintf(f, "            __syncthreads();\n");
    fprintf(f, "            for (int j_ = 0; j_ < nk_; j_++) {\n");
    fprintf(f, "                float d_ = 0.0f, g_ = 0.0f;\n");
    fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.ne);
    fprintf(f, "                    d_ += q_[u_] * ks_[j_][sub_ + %d * u_];\n", T);
    fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.nev);
    fprintf(f, "                    g_ += dy_[u_] * vs_[j_][sub_ + %d * u_];\n", T);
    row_sum(f, &y, "d_,g_", "                ");
    fprintf(f, "                const int64_t i%d = k0_ + j_;\n", kj);
    fprintf(f, "                (void)i%d;\n", kj);
    score(f, g, "live_", "                ");
    fprintf(f, "                const float p_ = expf(z_ - l_);\n");
    fprintf(f, "                const float s_ = p_ * (g_ - D_) * %s;\n", util_cfloat(g->at->attn.scale));
    fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.ne);
    fprintf(f, "                    acc_[u_] += s_ * ks_[j_][sub_ + %d * u_];\n", T);
    fprintf(f, "            }\n        }\n");
    fprintf(f, "        if (live_)\n");
    fprintf(f, "            for (int u_ = 0; u_ < %d; u_++) {\n", y.ne);
    fprintf(f, "                const int c_ = sub_ + %d * u_;\n", T);
    fprintf(f, "                if (c_ < %lld)\n", E);
    fprintf(f, "                    b%d[(%s) * %lld + c_] = acc_[u_];\n", n->id, rowi, E);
    fprintf(f, "            }\n    }\n");
    grid(L, g, tiles);
}

/* dk (ds^T q) or dv (p^T dO): a block per tile of keys */
static void dkv_cuda(const Emit *m, const Node *n, const AttnGeo *g, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const int dk = n->op == OP_T_ATTN_DK;
    const Lay y = dk ? layout(g, 2, 1, 8, 0) : layout(g, 1, 1, 4, 0);
    const int qi = g->rank - 2, kj = g->rank - 1, BQ = y.tile, T = y.tpr;
    const long long Lq = g->L, S = g->S, E = g->E, Ev = g->Ev, W = dk ? E : Ev;
    const int nw = dk ? y.ne : y.nev;
    const int64_t tiles = cdiv(S, y.rows);
    fprintf(f, "    /* %d threads a key row (dims sub + %d u), %d keys a block, query tiles of %d */\n", T, T, y.rows, BQ);
    fprintf(f, "    __shared__ float qs_[%d][%d], ys_[%d][%d], ls_[%d]%s;\n", BQ, y.ep, BQ, y.evp, BQ,
            dk ? util_fmt(", dd_[%d]", BQ) : "");
    if (!dk)
        fprintf(f, "    (void)b%d;   /* the values: dv needs none */\n", g->v);
    open_blocks(f, g, &y, tiles, "k0_");
    fprintf(f, "        const int64_t i%d = k0_ + row_;\n", kj);
    fprintf(f, "        const int live_ = i%d < %lld;\n", kj, S);
    const char *rowj = util_fmt("e * %lld + i%d", S, kj);
    fprintf(f, "        float k_[%d], acc_[%d]%s;\n", y.ne, nw, dk ? util_fmt(", v_[%d]", y.nev) : "");
    load_row(f, &y, g->k, rowj, E, y.ne, "k_", "live_", "        ");
    if (dk)
        load_row(f, &y, g->v, rowj, Ev, y.nev, "v_", "live_", "        ");
    fprintf(f, "        for (int u_ = 0; u_ < %d; u_++)\n            acc_[u_] = 0.0f;\n", nw);
    /* causal: queries before the block's first key see none of its keys */
    fprintf(f, "        for (int64_t r0_ = %s; r0_ < %lld; r0_ += %d) {\n", g->at->attn.causal ? "k0_" : "0", Lq, BQ);
    fprintf(f, "            const int nq_ = %lld - r0_ < %d ? (int)(%lld - r0_) : %d;\n", Lq, BQ, Lq, BQ);
    fprintf(f, "            __syncthreads();   /* the previous tile read */\n");
    stage(f, "qs_", BQ, y.ep, g->q, util_fmt("e * %lld + r0_", Lq), "nq_", E, "            ");
    stage(f, "ys_", BQ, y.evp, g->dy, util_fmt("e * %lld + r0_", Lq), "nq_", Ev, "            ");
    fprintf(f, "            for (int t_ = threadIdx.x; t_ < %d; t_ += %d)\n", BQ, NT);
    fprintf(f, "                ls_[t_] = t_ < nq_ ? lse_[e * %lld + r0_ + t_] : 0.0f;\n", Lq);
    if (dk) {   /* D of the tile's queries, a row's threads each */
        fprintf(f, "            for (int a0_ = 0; a0_ < %d; a0_ += %d) {\n", BQ, y.rows);
        fprintf(f, "                const int a_ = a0_ + row_;\n");
        fprintf(f, "                float D_ = 0.0f;\n");
        fprintf(f, "                for (int u_ = 0; u_ < %d; u_++) {\n", y.nev);
        fprintf(f, "                    const int c_ = sub_ + %d * u_;\n", T);
        fprintf(f, "                    if (a_ < nq_ && c_ < %lld) {\n", Ev);
        fprintf(f, "                        const int64_t at_ = (e * %lld + r0_ + a_) * %lld + c_;\n", Lq, Ev);
        fprintf(f, "                        D_ += (float)b%d[at_] * (float)b%d[at_];\n", g->dy, g->o);
        fprintf(f, "                    }\n                }\n");
        row_sum(f, &y, "D_", "                ");
        fprintf(f, "                if (a_ < nq_ && sub_ == 0)\n                    dd_[a_] = D_;\n");
        fprintf(f, "            }\n");
    }
    fprintf(f, "            __syncthreads();\n");
    fprintf(f, "            for (int a_ = 0; a_ < nq_; a_++) {\n");
    fprintf(f, "                const int64_t i%d = r0_ + a_;\n", qi);
    fprintf(f, "                (void)i%d;\n", qi);
    fprintf(f, "                float d_ = 0.0f%s;\n", dk ? ", g_ = 0.0f" : "");
    fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.ne);
    fprintf(f, "                    d_ += k_[u_] * qs_[a_][sub_ + %d * u_];\n", T);
    if (dk) {
        fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.nev);
        fprintf(f, "                    g_ += v_[u_] * ys_[a_][sub_ + %d * u_];\n", T);
    }
    row_sum(f, &y, dk ? "d_,g_" : "d_", "                ");
    score(f, g, "live_", "                ");
    fprintf(f, "                const float p_ = expf(z_ - ls_[a_]);\n");
    if (dk) {
        fprintf(f, "                const float s_ = p_ * (g_ - dd_[a_]) * %s;\n", util_cfloat(g->at->attn.scale));
        fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.ne);
        fprintf(f, "                    acc_[u_] += s_ * qs_[a_][sub_ + %d * u_];\n", T);
    } else {
        fprintf(f, "                for (int u_ = 0; u_ < %d; u_++)\n", y.nev);
        fprintf(f, "                    acc_[u_] += p_ * ys_[a_][sub_ + %d * u_];\n", T);
    }
    fprintf(f, "            }\n        }\n");
    fprintf(f, "        if (live_)\n");
    fprintf(f, "            for (int u_ = 0; u_ < %d; u_++) {\n", nw);
    fprintf(f, "                const int c_ = sub_ + %d * u_;\n", T);
    fprintf(f, "                if (c_ < %lld)\n", W);
    fprintf(f, "                    b%d[(%s) * %lld + c_] = acc_[u_];\n", n->id, rowj, W);
    fprintf(f, "            }\n    }\n");
    grid(L, g, tiles);
}

void emit_attn_cuda(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    const AttnGeo g = attn_geometry(m, n);
    switch (n->op) {
    case OP_T_ATTN: forward_cuda(m, n, &g, L); break;
    case OP_T_ATTN_DQ: dq_cuda(m, n, &g, L); break;
    default: dkv_cuda(m, n, &g, L); break;
    }
}
