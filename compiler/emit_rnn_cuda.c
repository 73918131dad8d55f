/* emit_rnn_cuda.c: the recurrences' CUDA kernels (T_RNN, T_RNN_BWD,
 * T_RNN_CN), with emit_rnn.c's semantics (the C kernels, which the
 * emulator holds these against).
 *
 * The time loop is inside the kernel: one launch runs every step of a
 * layer and direction. A block owns R samples (a grid-stride loop over
 * the batch), so a step's dependency on the previous one stays inside
 * the block, behind __syncthreads, and no grid-wide barrier is needed.
 * Each hidden unit's dot products are split over K consecutive lanes of a
 * warp (p_ the lane's part: terms p_, p_ + K, ...), then summed across
 * them with a shuffle butterfly, so every lane holds the sums and lane
 * s mod K computes sample s's cell; the threads' slots sit side by side
 * over the units (unit j = slot + S u, S = min(128, H to a warp)). The
 * design (R, K) is the scheduler's (sched_gpu.c, Group.rnn_rows and
 * rnn_split) from the GPU model (gpu_rates.c, gpu_rnn_secs): more samples
 * a block read W_hh fewer times (a 128-wide LSTM's W_hh is 256 KB, more
 * than shared memory: each block reads it from L2 each step) and give
 * each load more multiply-adds; more lanes a unit shorten each step's
 * chain of L2 round trips. A small batch takes few rows and many lanes,
 * a large one 8 rows a block.
 * Forward: h_{t-1} of the R samples in shared memory; lanes read W_hh's
 * rows k = p_ + K i, so the K lanes of a unit read consecutive floats.
 * Gradient: the step's gate gradients of W_hh h in shared memory (a row
 * a sample), each unit's dh the column j of W_hh against them. The
 * threads past H read a row that exists and drop their sums, so that
 * every lane of a warp reaches the shuffles. Register arrays are indexed
 * only by unrolled loops (indexed in a loop left rolled, ptxas put them
 * on the stack and spilled at sm_80), the dot products 4 terms deep.
 * Each sum in a fixed order for a design: the same bits every run. Reads
 * go through (float) (16-bit operands under autocast); the results are
 * float. */
#include <stdio.h>

#include "cddpc.h"

#define NT 128              /* threads a block of the cell-state and state-gradient copies */

static void grid(rt_cuda_launch *L, int threads, int rows)
{
    L->block[0] = threads;
    L->gmul[0] = 1;         /* a block per `rows` samples of the largest batch */
    L->gdiv[0] = rows;
}

/* emit_rnn.c's step loop, its step variables marked used (NVRTC warns
 * of the ones a kernel does not read) */
static void steps(FILE *f, const RnnGeo *g, int backward, const char *ind)
{
    rnn_steps(f, g, backward, ind);
    fprintf(f, "%s    (void)tp_, (void)first_;\n", ind);
}

/* the thread's part p_ of its units' sums, its slot sl_ (units sl_ + S u_) */
static void lanes(FILE *f, const RnnDesign *d)
{
    fprintf(f, "    const int p_ = threadIdx.x %% %d, sl_ = threadIdx.x / %d;\n    (void)p_;\n", d->split, d->split);
}

/* the test that this thread computes sample s's cell at unit j_ (the
 * sample lies in the batch; its part p_ owns sample s among the split) */
static const char *owns(const RnnDesign *d, int s, long long H)
{
    return util_fmt("%sj_ < %lld && n0_ + %d < n", d->split > 1 ? util_fmt("p_ == %d && ", s % d->split) : "", H, s);
}

/* the unit loop's head: j_ the unit, jr_ a row of W_hh that exists (the
 * threads past H read row H - 1 and drop it, so that every lane of a warp
 * reaches the shuffles) */
static void unit_head(FILE *f, const RnnDesign *d, long long H, const char *ind)
{
    fprintf(f, "%s#pragma unroll\n", ind);
    fprintf(f, "%sfor (int u_ = 0; u_ < %d; u_++) {\n", ind, d->units);
    fprintf(f, "%s    const int j_ = sl_ + %d * u_, jr_ = j_ < %lld ? j_ : %lld;\n", ind, d->slots, H, H - 1);
    fprintf(f, "%s    (void)jr_;\n", ind);
}

/* sums v<q>_<s>_ (q < nq) added across the split's lanes: a butterfly,
 * so that each lane holds the whole */
static void split_sum(FILE *f, const RnnDesign *d, int nq, const char *v, const char *ind)
{
    if (d->split == 1)
        return;
    fprintf(f, "%s#pragma unroll\n", ind);
    fprintf(f, "%sfor (int o_ = 1; o_ < %d; o_ <<= 1) {\n", ind, d->split);
    for (int q = 0; q < nq; q++)
        for (int s = 0; s < d->rows; s++)
            fprintf(f, "%s    %s%d_%d_ += __shfl_xor_sync(0xffffffffu, %s%d_%d_, o_);\n", ind, v, q, s, v, q, s);
    fprintf(f, "%s}\n", ind);
}

static void forward_cuda(const Emit *m, const RnnGeo *g, const RnnDesign *d, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H, GH = g->GH, X = g->X;
    const int U = d->units, R = d->rows, K = d->split;
    fprintf(f, "    __shared__ float hs_[%d][%lld];   /* h_{t-1} of the block's samples */\n", R, H);
    fprintf(f, "    float *const sv_ = (float *)b%d + (int64_t)n * %lld;   /* the saved floats, after h */\n", g->out,
            T * H);
    fprintf(f, "    (void)sv_;\n");
    lanes(f, d);
    fprintf(f, "    for (int64_t n0_ = (int64_t)blockIdx.x * %d; n0_ < n; n0_ += (int64_t)gridDim.x * %d) {\n", R, R);
    fprintf(f, "        for (int x_ = threadIdx.x; x_ < %lld; x_ += %d) {\n", R * H, d->threads);
    fprintf(f, "            const int s_ = x_ / %lld, j_ = x_ %% %lld;\n", H, H);
    fprintf(f, "            hs_[s_][j_] = %s;\n",
            g->h0 >= 0 ? util_fmt("n0_ + s_ < n ? (float)b%d[(n0_ + s_) * %lld + j_] : 0.0f", g->h0, H) : "0.0f");
    fprintf(f, "        }\n");
    if (g->cell == RNN_LSTM) {  /* the cell states of the thread's units and samples */
        fprintf(f, "        float c_[%d][%d];\n", U, R);
        unit_head(f, d, H, "        ");
        for (int s = 0; s < R; s++)
            fprintf(f, "            c_[u_][%d] = %s;\n", s,
                    g->c0 >= 0 ? util_fmt("%s ? (float)b%d[(n0_ + %d) * %lld + j_] : 0.0f", owns(d, s, H), g->c0, s, H)
                               : "0.0f");
        fprintf(f, "        }\n");
    }
    fprintf(f, "        __syncthreads();\n");
    steps(f, g, 0, "        ");
    fprintf(f, "            float hn_[%d][%d];\n", U, R);
    unit_head(f, d, H, "            ");
    const char *in = "                ";
    for (int q = 0; q < g->G; q++)
        for (int s = 0; s < R; s++)
            fprintf(f, "%sfloat hg%d_%d_ = 0.0f;\n", in, q, s);
    fprintf(f, "%s#pragma unroll 4\n", in);
    fprintf(f, "%sfor (int k2_ = p_; k2_ < %lld; k2_ += %d) {\n", in, H, K);
    for (int q = 0; q < g->G; q++)
        fprintf(f, "%s    const float w%d_ = (float)b%d[(%d * %lld + jr_) * %lld + k2_];\n", in, q, g->whh, q, H, H);
    for (int s = 0; s < R; s++) {
        fprintf(f, "%s    const float h%d_ = hs_[%d][k2_];\n", in, s, s);
        for (int q = 0; q < g->G; q++)
            fprintf(f, "%s    hg%d_%d_ += w%d_ * h%d_;\n", in, q, s, q, s);
    }
    fprintf(f, "%s}\n", in);
    split_sum(f, d, g->G, "hg", in);
    for (int s = 0; s < R; s++) {
        fprintf(f, "%shn_[u_][%d] = 0.0f;\n", in, s);
        fprintf(f, "%sif (%s) {   /* sample n0_ + %d */\n", in, owns(d, s, H), s);
        fprintf(f, "%s    const int64_t row_ = (n0_ + %d) * %lld + t_;\n", in, s, T);
        for (int q = 0; q < g->G; q++)
            if (g->bhh >= 0)
                fprintf(f, "%s    hg%d_%d_ += (float)b%d[%d * %lld + j_];\n", in, q, s, g->bhh, q, H);
        /* xw's gate q at unit j_, and the step's sum of gate q */
        const char *xg = util_fmt("(float)b%d[row_ * %lld + %%d * %lld + j_]", g->xw, GH, H);
        const char *hg[4];
        for (int q = 0; q < g->G; q++)
            hg[q] = util_fmt("hg%d_%d_", q, s);
        switch (g->cell) {
        case RNN_LSTM:
            fprintf(f, "%s    const float i0_ = 1.0f / (1.0f + expf(-(%s + %s)));\n", in, hg[0], util_fmt(xg, 0));
            fprintf(f, "%s    const float f0_ = 1.0f / (1.0f + expf(-(%s + %s)));\n", in, hg[1], util_fmt(xg, 1));
            fprintf(f, "%s    const float g0_ = tanhf(%s + %s);\n", in, hg[2], util_fmt(xg, 2));
            fprintf(f, "%s    const float o0_ = 1.0f / (1.0f + expf(-(%s + %s)));\n", in, hg[3], util_fmt(xg, 3));
            fprintf(f, "%s    c_[u_][%d] = f0_ * c_[u_][%d] + i0_ * g0_;\n", in, s, s);
            fprintf(f, "%s    hn_[u_][%d] = o0_ * tanhf(c_[u_][%d]);\n", in, s, s);
            fprintf(f, "%s    float *const s_ = sv_ + row_ * %lld;\n", in, X * H);
            fprintf(f, "%s    s_[j_] = i0_, s_[%lld + j_] = f0_, s_[%lld + j_] = g0_, s_[%lld + j_] = o0_, "
                       "s_[%lld + j_] = c_[u_][%d];\n", in, H, 2 * H, 3 * H, 4 * H, s);
            break;
        case RNN_GRU:
            fprintf(f, "%s    const float r_ = 1.0f / (1.0f + expf(-(%s + %s)));\n", in, hg[0], util_fmt(xg, 0));
            fprintf(f, "%s    const float z_ = 1.0f / (1.0f + expf(-(%s + %s)));\n", in, hg[1], util_fmt(xg, 1));
            fprintf(f, "%s    const float nn_ = tanhf(%s + %s * r_);\n", in, util_fmt(xg, 2), hg[2]);
            fprintf(f, "%s    hn_[u_][%d] = (hs_[%d][j_] - nn_) * z_ + nn_;\n", in, s, s);
            fprintf(f, "%s    float *const s_ = sv_ + row_ * %lld;\n", in, X * H);
            fprintf(f, "%s    s_[j_] = r_, s_[%lld + j_] = z_, s_[%lld + j_] = nn_, s_[%lld + j_] = %s;\n", in, H,
                    2 * H, 3 * H, hg[2]);
            break;
        default:
            fprintf(f, "%s    const float a_ = %s + %s;\n", in, hg[0], util_fmt(xg, 0));
            fprintf(f, "%s    hn_[u_][%d] = %s;\n", in, s, g->cell == RNN_TANH ? "tanhf(a_)" : "a_ > 0.0f ? a_ : 0.0f");
            break;
        }
        fprintf(f, "%s    b%d[row_ * %lld + j_] = hn_[u_][%d];\n", in, g->out, H, s);
        fprintf(f, "%s}\n", in);
    }
    fprintf(f, "            }\n");
    fprintf(f, "            __syncthreads();   /* every unit has read h_{t-1} */\n");
    unit_head(f, d, H, "            ");
    for (int s = 0; s < R; s++)
        fprintf(f, "                if (%s)\n                    hs_[%d][j_] = hn_[u_][%d];\n", owns(d, s, H), s, s);
    fprintf(f, "            }\n");
    fprintf(f, "            __syncthreads();\n");
    fprintf(f, "        }\n    }\n");
    grid(L, d->threads, R);
}

static void backward_cuda(const Emit *m, const RnnGeo *g, const RnnDesign *d, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H, GH = g->GH, W = g->W, X = g->X;
    const int U = d->units, R = d->rows, K = d->split, gru = g->cell == RNN_GRU;
    fprintf(f, "    __shared__ float gs_[%d][%lld];   /* the step's gradients of W_hh h + b_hh, a row a sample */\n", R,
            GH);
    fprintf(f, "    const float *const sv_ = (const float *)b%d + (int64_t)n * %lld;   /* the forward's saved floats */\n",
            g->out, T * H);
    fprintf(f, "    (void)sv_;\n");
    if (g->h0 >= 0 && !gru)
        fprintf(f, "    (void)b%d;\n", g->h0);
    if (g->c0 >= 0 && g->cell != RNN_LSTM)
        fprintf(f, "    (void)b%d;\n", g->c0);
    lanes(f, d);
    fprintf(f, "    for (int64_t n0_ = (int64_t)blockIdx.x * %d; n0_ < n; n0_ += (int64_t)gridDim.x * %d) {\n", R, R);
    const int carry = g->cell == RNN_LSTM || gru;   /* dc_: the LSTM's dc through f, the GRU's h' z */
    fprintf(f, "        float dh_[%d][%d]%s;   /* from the later step: through W_hh%s */\n", U, R,
            carry ? util_fmt(", dc_[%d][%d]", U, R) : "", carry ? "; dc_ the LSTM's dc through f, the GRU's h' z" : "");
    unit_head(f, d, H, "        ");
    for (int s = 0; s < R; s++)
        if (g->dcn >= 0)    /* the last step's dc: c_n's gradient, when the loss reads c_n */
            fprintf(f, "            dh_[u_][%d] = 0.0f, dc_[u_][%d] = %s ? (float)b%d[(n0_ + %d) * %lld + j_] : 0.0f;\n",
                    s, s, owns(d, s, H), g->dcn, s, H);
        else
            fprintf(f, "            dh_[u_][%d] = 0.0f%s;\n", s, carry ? util_fmt(", dc_[u_][%d] = 0.0f", s) : "");
    fprintf(f, "        }\n");
    steps(f, g, 1, "        ");
    unit_head(f, d, H, "            ");
    const char *in = "                ";
    for (int s = 0; s < R; s++) {
        fprintf(f, "%sif (%s) {   /* sample n0_ + %d */\n", in, owns(d, s, H), s);
        fprintf(f, "%s    const int64_t i_ = n0_ + %d, row_ = i_ * %lld + t_;\n", in, s, T);
        fprintf(f, "%s    float *const dg_ = b%d + row_ * %lld;\n", in, g->dg, W);
        if (X)
            fprintf(f, "%s    const float *const s_ = sv_ + row_ * %lld;\n", in, X * H);
        fprintf(f, "%s    const float d_ = (float)b%d[row_ * %lld + j_] + dh_[u_][%d];\n", in, g->dy, H, s);
        switch (g->cell) {
        case RNN_LSTM: {
            const char *cp = util_fmt("(first_ ? %s : sv_[(i_ * %lld + tp_) * %lld + %lld + j_])",
                                      g->c0 >= 0 ? util_fmt("(float)b%d[i_ * %lld + j_]", g->c0, H) : "0.0f", T, X * H,
                                      4 * H);
            fprintf(f, "%s    const float i0_ = s_[j_], f0_ = s_[%lld + j_], g0_ = s_[%lld + j_], o0_ = s_[%lld + j_];\n",
                    in, H, 2 * H, 3 * H);
            fprintf(f, "%s    const float tc_ = tanhf(s_[%lld + j_]);\n", in, 4 * H);
            fprintf(f, "%s    const float dc_j_ = d_ * o0_ * (1.0f - tc_ * tc_) + dc_[u_][%d];\n", in, s);
            fprintf(f, "%s    const float a0_ = dc_j_ * g0_ * i0_ * (1.0f - i0_);\n", in);
            fprintf(f, "%s    const float a1_ = dc_j_ * %s * f0_ * (1.0f - f0_);\n", in, cp);
            fprintf(f, "%s    const float a2_ = dc_j_ * i0_ * (1.0f - g0_ * g0_);\n", in);
            fprintf(f, "%s    const float a3_ = d_ * tc_ * o0_ * (1.0f - o0_);\n", in);
            fprintf(f, "%s    dc_[u_][%d] = dc_j_ * f0_;\n", in, s);
            for (int q = 0; q < 4; q++)
                fprintf(f, "%s    dg_[%s] = a%d_, gs_[%d][%s] = a%d_;\n", in, q ? util_fmt("%lld + j_", q * H) : "j_", q,
                        s, q ? util_fmt("%lld + j_", q * H) : "j_", q);
            break;
        }
        case RNN_GRU: {
            const char *hp = util_fmt("(first_ ? %s : b%d[(i_ * %lld + tp_) * %lld + j_])",
                                      g->h0 >= 0 ? util_fmt("(float)b%d[i_ * %lld + j_]", g->h0, H) : "0.0f", g->out, T,
                                      H);
            fprintf(f, "%s    const float r_ = s_[j_], z_ = s_[%lld + j_], nn_ = s_[%lld + j_], hn_ = s_[%lld + j_];\n",
                    in, H, 2 * H, 3 * H);
            fprintf(f, "%s    const float dn_ = d_ * (1.0f - z_) * (1.0f - nn_ * nn_);\n", in);
            fprintf(f, "%s    const float dr_ = dn_ * hn_ * r_ * (1.0f - r_);\n", in);
            fprintf(f, "%s    const float dz_ = d_ * (%s - nn_) * z_ * (1.0f - z_);\n", in, hp);
            fprintf(f, "%s    dg_[j_] = dr_, dg_[%lld + j_] = dz_, dg_[%lld + j_] = dn_;\n", in, H, 2 * H);
            fprintf(f, "%s    dg_[%lld + j_] = dr_, dg_[%lld + j_] = dz_, dg_[%lld + j_] = dn_ * r_;\n", in, GH, GH + H,
                    GH + 2 * H);
            fprintf(f, "%s    gs_[%d][j_] = dr_, gs_[%d][%lld + j_] = dz_, gs_[%d][%lld + j_] = dn_ * r_;\n", in, s, s, H,
                    s, 2 * H);
            fprintf(f, "%s    dc_[u_][%d] = d_ * z_;\n", in, s);
            break;
        }
        default:
            fprintf(f, "%s    const float h_ = b%d[row_ * %lld + j_];\n", in, g->out, H);
            fprintf(f, "%s    const float a_ = %s;\n", in,
                    g->cell == RNN_TANH ? "d_ * (1.0f - h_ * h_)" : "h_ > 0.0f ? d_ : 0.0f");
            fprintf(f, "%s    dg_[j_] = a_, gs_[%d][j_] = a_;\n", in, s);
            break;
        }
        fprintf(f, "%s}\n", in);
    }
    fprintf(f, "            }\n");
    fprintf(f, "            __syncthreads();   /* the step's gs_ whole */\n");
    /* the earlier step's dh: column j of W_hh against gs_; at the first
     * step h0's, kept when it takes a gradient */
    fprintf(f, "            if (%s) {\n", g->dstate ? "1" : "!first_");
    unit_head(f, d, H, "                ");
    in = "                    ";
    for (int s = 0; s < R; s++)
        fprintf(f, "%sfloat a0_%d_ = 0.0f;\n", in, s);
    fprintf(f, "%s#pragma unroll 4\n", in);
    fprintf(f, "%sfor (int q_ = p_; q_ < %lld; q_ += %d) {\n", in, GH, K);
    fprintf(f, "%s    const float w_ = (float)b%d[(int64_t)q_ * %lld + jr_];\n", in, g->whh, H);
    for (int s = 0; s < R; s++)
        fprintf(f, "%s    a0_%d_ += gs_[%d][q_] * w_;\n", in, s, s);
    fprintf(f, "%s}\n", in);
    split_sum(f, d, 1, "a", in);
    for (int s = 0; s < R; s++)
        fprintf(f, "%sif (%s)\n%s    dh_[u_][%d] = a0_%d_%s;\n", in, owns(d, s, H), in, s, s,
                gru ? util_fmt(" + dc_[u_][%d]", s) : "");
    fprintf(f, "                }\n");
    fprintf(f, "            }\n");
    fprintf(f, "            __syncthreads();   /* gs_ read before the next step writes it */\n");
    fprintf(f, "        }\n");
    if (g->dstate) {    /* dh0, then the LSTM's dc0, after the values */
        unit_head(f, d, H, "        ");
        for (int s = 0; s < R; s++) {
            fprintf(f, "            if (%s) {\n", owns(d, s, H));
            fprintf(f, "                b%d[(int64_t)n * %lld + (n0_ + %d) * %lld + j_] = dh_[u_][%d];\n", g->dg, T * W, s,
                    H, s);
            if (g->cell == RNN_LSTM)
                fprintf(f, "                b%d[(int64_t)n * %lld + (n0_ + %d) * %lld + j_] = dc_[u_][%d];\n", g->dg,
                        T * W + H, s, H, s);
            fprintf(f, "            }\n");
        }
        fprintf(f, "        }\n");
    }
    fprintf(f, "    }\n");
    grid(L, d->threads, R);
}

static void cell_cuda(const Emit *m, const Node *n, const RnnGeo *g, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H;
    fprintf(f, "    const float *const sv_ = (const float *)b%d + (int64_t)n * %lld;\n", g->out, T * H);
    fprintf(f, "    for (int64_t i_ = blockIdx.x; i_ < n; i_ += gridDim.x)\n");
    fprintf(f, "        for (int j_ = threadIdx.x; j_ < %lld; j_ += %d)\n", H, NT);
    fprintf(f, "            b%d[i_ * %lld + j_] = sv_[(i_ * %lld + %lld) * %lld + %lld + j_];\n", n->id, H, T,
            g->reverse ? 0LL : T - 1, (long long)g->X * H, 4 * H);
    grid(L, NT, 1);
}

/* an initial state's gradient: the copy the recurrence's gradient keeps */
static void dstate_cuda(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    const Node *b = ex_node(m, n->in[0]);
    const long long H = n->shape.d[1], TW = b->shape.d[1] * b->shape.d[2];
    fprintf(m->f, "    for (int64_t i_ = blockIdx.x; i_ < n; i_ += gridDim.x)\n");
    fprintf(m->f, "        for (int j_ = threadIdx.x; j_ < %lld; j_ += %d)\n", H, NT);
    fprintf(m->f, "            b%d[i_ * %lld + j_] = b%d[(int64_t)n * %lld + i_ * %lld + j_];\n", n->id, H,
            plan_source(m->p, n->in[0]), n->rnn.dstate ? TW + H : TW, H);
    grid(L, NT, 1);
}

void emit_rnn_cuda(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    if (n->op == OP_T_RNN_DSTATE) {
        dstate_cuda(m, n, L);
        return;
    }
    const RnnGeo g = rnn_geometry(m, n);
    switch (n->op) {
    case OP_T_RNN: {
        const RnnDesign d = sched_rnn_design(m->p, m->grp);
        forward_cuda(m, &g, &d, L);
        break;
    }
    case OP_T_RNN_BWD: {
        const RnnDesign d = sched_rnn_design(m->p, m->grp);
        backward_cuda(m, &g, &d, L);
        break;
    }
    default: cell_cuda(m, n, &g, L); break;
    }
}
