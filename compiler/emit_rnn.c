/* emit_rnn.c: the C kernels of the recurrences (T_RNN, its gradient
 * T_RNN_BWD and the LSTM's last cell state T_RNN_CN; recurrent.c builds
 * them, ops.def says what they take).
 *
 * Rows: a sample n and step t is row n T + t of every [N, T, *] operand,
 * so the N rows of one step are T rows apart, which the BLAS takes as
 * the leading dimension. The step's hidden product h_{t-1} W_hh^T is one
 * rt_sgemm of [N, H] x [H, G H]; the cell's gates follow it row by row,
 * the threads over the samples (each row's arithmetic is the same on any
 * thread count). Cells as PyTorch's CPU cells compute them (aten's
 * RNN.cpp): the gates (h W_hh^T + b_hh) + (x W_ih^T + b_ih), then
 *   LSTM  i, f, o = sigmoid, g = tanh; c = f c' + i g; h = o tanh(c)
 *   GRU   r, z = sigmoid; n = tanh(xn + r (W_hn h' + b_hn)); h = (h' - n) z + n
 *   RNN   h = tanh(.) or relu(.)
 * (sigmoid and tanh as the prelude's vectorizable cddp_sigmoidf and
 * cddp_tanhf: libm's tanhf, a call, was a third of an LSTM's step.)
 * The gradient runs the steps backward: dh = dy_t + (the later step's
 * gate gradients) W_hh, and for the LSTM the cell's dc carried through
 * f; the GRU's direct path h' z adds to its dh'. */
#include "cddpc.h"

RnnGeo rnn_geometry(const Emit *m, const Node *n)
{
    RnnGeo g;
    const int grad = n->op == OP_T_RNN_BWD, cn = n->op == OP_T_RNN_CN;
    g.r = grad ? ex_node(m, n->in[1]) : cn ? ex_node(m, n->in[0]) : n;
    g.cell = g.r->rnn.cell;
    g.G = ten_rnn_gates(g.cell);
    g.X = ten_rnn_saved(g.cell);
    g.reverse = g.r->rnn.reverse;
    g.T = g.r->shape.d[1];
    g.H = g.r->shape.d[2];
    g.GH = g.G * g.H;
    g.W = g.cell == RNN_GRU ? 2 * g.GH : g.GH;
    g.out = g.r->id;
    g.xw = plan_source(m->p, g.r->in[0]);
    g.whh = plan_source(m->p, g.r->in[1]);
    int k = 2;
    g.bhh = g.r->rnn.bias ? plan_source(m->p, g.r->in[k++]) : -1;
    g.h0 = g.r->rnn.h0 ? plan_source(m->p, g.r->in[k++]) : -1;
    g.c0 = g.r->rnn.c0 ? plan_source(m->p, g.r->in[k++]) : -1;
    g.dy = grad ? plan_source(m->p, n->in[0]) : -1;
    g.dg = grad ? n->id : -1;
    g.dcn = grad && n->rnn.dcn ? plan_source(m->p, n->in[n->nin - 1]) : -1;
    g.dstate = grad && n->rnn.dstate;
    return g;
}

void rnn_steps(FILE *f, const RnnGeo *g, int backward, const char *ind)
{
    const long long T = g->T;
    const int up = g->reverse == backward;      /* t_ increases with k_ */
    fprintf(f, "%sfor (int64_t k_ = 0; k_ < %lld; k_++) {\n", ind, T);
    fprintf(f, "%s    const int64_t t_ = %s, tp_ = t_ %s 1;\n", ind, up ? "k_" : util_fmt("%lld - k_", T - 1),
            g->reverse ? "+" : "-");
    fprintf(f, "%s    const int first_ = t_ == %lld;\n", ind, g->reverse ? T - 1 : 0LL);
}

/* the saved floats of row i_ (sample) at step `t` */
static char *saved(const RnnGeo *g, const char *t)
{
    return util_fmt("(sv_ + (i_ * %lld + %s) * %lld)", (long long)g->T, t, (long long)(g->X * g->H));
}

/* hp_ and cp_: the previous step's hidden and (LSTM) cell state of
 * sample i_, h0 / c0 or zeros (z_) at the first step; chosen as pointers,
 * so that no select loads memory (cc -O3 mis-vectorizes such selects:
 * tests/ir/vector_select) */
static void prev_rows(FILE *f, const RnnGeo *g, int cell, const char *ind)
{
    const long long T = g->T, H = g->H;
    fprintf(f, "%sconst float *restrict const hp_ = first_ ? %s : b%d + (i_ * %lld + tp_) * %lld;\n", ind,
            g->h0 >= 0 ? util_fmt("b%d + i_ * %lld", g->h0, H) : "z_", g->out, T, H);
    if (cell)
        fprintf(f, "%sconst float *restrict const cp_ = first_ ? %s : %s + %lld;\n", ind,
                g->c0 >= 0 ? util_fmt("b%d + i_ * %lld", g->c0, H) : "z_", saved(g, "tp_"), 4 * H);
    fprintf(f, "%s(void)hp_;\n", ind);
}

static void forward_c(const Emit *m, const RnnGeo *g)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H, GH = g->GH, X = g->X;
    fprintf(f, "    float *const sv_ = b%d + n * %lld;   /* the saved floats, after h */\n", g->out, T * H);
    fprintf(f, "    float *const hw_ = malloc(sizeof(float) * (size_t)(n * %lld)), *const z_ = calloc((size_t)(n * %lld), "
               "sizeof(float));\n", GH, H);
    fprintf(f, "    if (!hw_ || !z_)\n        abort();\n");
    if (X == 0)
        fprintf(f, "    (void)sv_;\n");
    rnn_steps(f, g, 0, "    ");
    /* h_{t-1} W_hh^T: h0 (or zeros) at the first step, else the rows of step tp_ */
    fprintf(f, "        const float *const hs_ = first_ ? %s : b%d + tp_ * %lld;\n",
            g->h0 >= 0 ? util_fmt("b%d", g->h0) : "z_", g->out, H);
    fprintf(f, "        rt_sgemm(0, 1, n, %lld, %lld, hs_, first_ ? %lld : %lld, b%d, %lld, hw_, %lld);\n", GH, H, H,
            T * H, g->whh, H, GH);
    fprintf(f, "        #pragma omp parallel for schedule(static) if (n * %lld >= 16384)\n", GH);
    fprintf(f, "        for (int64_t i_ = 0; i_ < n; i_++) {\n");
    fprintf(f, "            const float *restrict const x_ = b%d + (i_ * %lld + t_) * %lld, *restrict const g_ = hw_ + i_ * %lld;\n",
            g->xw, T, GH, GH);
    fprintf(f, "            float *restrict const h_ = b%d + (i_ * %lld + t_) * %lld;\n", g->out, T, H);
    if (X)
        fprintf(f, "            float *restrict const s_ = %s;\n", saved(g, "t_"));
    prev_rows(f, g, g->cell == RNN_LSTM, "            ");
    if (g->bhh >= 0)
        fprintf(f, "            const float *restrict const bh_ = b%d;\n", g->bhh);
    /* the row's units are independent: said, as GCC cannot prove it for
     * this many pointers (its alias checks stop at 10) */
    fprintf(f, "            #pragma omp simd\n");
    fprintf(f, "            for (int64_t j_ = 0; j_ < %lld; j_++) {\n", H);
    /* a gate's input as PyTorch sums it: (h W_hh^T + b_hh) + x W_ih^T + b_ih */
    const char *bh = g->bhh >= 0 ? " + bh_[%s]" : "";
    for (int q = 0; q < g->G; q++) {
        const char *at = q ? util_fmt("%d * %lld + j_", q, H) : "j_";
        fprintf(f, "                const float hg%d_ = g_[%s]%s;\n", q, at, *bh ? util_fmt(bh, at) : "");
    }
    switch (g->cell) {
    case RNN_LSTM:
        fprintf(f, "                const float i0_ = cddp_sigmoidf(hg0_ + x_[j_]);\n");
        fprintf(f, "                const float f0_ = cddp_sigmoidf(hg1_ + x_[%lld + j_]);\n", H);
        fprintf(f, "                const float g0_ = cddp_tanhf(hg2_ + x_[%lld + j_]);\n", 2 * H);
        fprintf(f, "                const float o0_ = cddp_sigmoidf(hg3_ + x_[%lld + j_]);\n", 3 * H);
        fprintf(f, "                const float c_ = f0_ * cp_[j_] + i0_ * g0_;\n");
        fprintf(f, "                h_[j_] = o0_ * cddp_tanhf(c_);\n");
        fprintf(f, "                s_[j_] = i0_, s_[%lld + j_] = f0_, s_[%lld + j_] = g0_, s_[%lld + j_] = o0_, "
                   "s_[%lld + j_] = c_;\n", H, 2 * H, 3 * H, 4 * H);
        break;
    case RNN_GRU:
        fprintf(f, "                const float r_ = cddp_sigmoidf(hg0_ + x_[j_]);\n");
        fprintf(f, "                const float u_ = cddp_sigmoidf(hg1_ + x_[%lld + j_]);\n", H);
        fprintf(f, "                const float nn_ = cddp_tanhf(x_[%lld + j_] + hg2_ * r_);\n", 2 * H);
        fprintf(f, "                h_[j_] = (hp_[j_] - nn_) * u_ + nn_;\n");
        fprintf(f, "                s_[j_] = r_, s_[%lld + j_] = u_, s_[%lld + j_] = nn_, s_[%lld + j_] = hg2_;\n", H,
                2 * H, 3 * H);
        break;
    default:
        fprintf(f, "                const float a_ = hg0_ + x_[j_];\n");
        fprintf(f, "                h_[j_] = %s;\n", g->cell == RNN_TANH ? "cddp_tanhf(a_)" : "a_ > 0.0f ? a_ : 0.0f");
        break;
    }
    fprintf(f, "            }\n        }\n    }\n");
    fprintf(f, "    free(hw_);\n    free(z_);\n");
}

static void backward_c(const Emit *m, const RnnGeo *g)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H, GH = g->GH, W = g->W, X = g->X;
    const int gru = g->cell == RNN_GRU, lstm = g->cell == RNN_LSTM;
    fprintf(f, "    const float *const sv_ = b%d + n * %lld;   /* the forward's saved floats */\n", g->out, T * H);
    /* dh_: the later step's gate gradients times W_hh; dc_ the LSTM's
     * cell gradient through f; dd_ the GRU's direct h' z path */
    fprintf(f, "    float *const dh_ = calloc((size_t)(n * %lld), sizeof(float)), *const dc_ = calloc((size_t)(n * %lld), "
               "sizeof(float));\n", H, lstm || gru ? H : 1LL);
    fprintf(f, "    const float *const z_ = calloc(%lld, sizeof(float));   /* zeros: the state before the first step */\n",
            H);
    fprintf(f, "    if (!dh_ || !dc_ || !z_)\n        abort();\n");
    if (g->dcn >= 0)    /* the last step's dc: c_n's gradient */
        fprintf(f, "    memcpy(dc_, b%d, sizeof(float) * (size_t)(n * %lld));\n", g->dcn, H);
    if (X == 0)
        fprintf(f, "    (void)sv_;\n");
    if (!lstm && !gru)
        fprintf(f, "    (void)dc_;\n");
    rnn_steps(f, g, 1, "    ");
    fprintf(f, "        #pragma omp parallel for schedule(static) if (n * %lld >= 16384)\n", GH);
    fprintf(f, "        for (int64_t i_ = 0; i_ < n; i_++) {\n");
    fprintf(f, "            const float *restrict const dy_ = b%d + (i_ * %lld + t_) * %lld;\n", g->dy, T, H);
    fprintf(f, "            float *restrict const dg_ = b%d + (i_ * %lld + t_) * %lld;\n", g->dg, T, W);
    if (X)
        fprintf(f, "            const float *restrict const s_ = %s;\n", saved(g, "t_"));
    else
        fprintf(f, "            const float *restrict const h_ = b%d + (i_ * %lld + t_) * %lld;\n", g->out, T, H);
    prev_rows(f, g, lstm, "            ");
    fprintf(f, "            float *restrict const dhr_ = dh_ + i_ * %lld, *restrict const dcr_ = dc_ + i_ * %lld;\n", H,
            lstm || gru ? H : 0LL);
    fprintf(f, "            (void)dcr_;\n");
    fprintf(f, "            #pragma omp simd\n");
    fprintf(f, "            for (int64_t j_ = 0; j_ < %lld; j_++) {\n", H);
    fprintf(f, "                const float d_ = dy_[j_] + dhr_[j_];\n");
    switch (g->cell) {
    case RNN_LSTM:
        fprintf(f, "                const float i0_ = s_[j_], f0_ = s_[%lld + j_], g0_ = s_[%lld + j_], o0_ = s_[%lld + j_];\n",
                H, 2 * H, 3 * H);
        fprintf(f, "                const float tc_ = cddp_tanhf(s_[%lld + j_]);\n", 4 * H);
        fprintf(f, "                const float dc_j_ = d_ * o0_ * (1.0f - tc_ * tc_) + dcr_[j_];\n");
        fprintf(f, "                dg_[j_] = dc_j_ * g0_ * i0_ * (1.0f - i0_);\n");
        fprintf(f, "                dg_[%lld + j_] = dc_j_ * cp_[j_] * f0_ * (1.0f - f0_);\n", H);
        fprintf(f, "                dg_[%lld + j_] = dc_j_ * i0_ * (1.0f - g0_ * g0_);\n", 2 * H);
        fprintf(f, "                dg_[%lld + j_] = d_ * tc_ * o0_ * (1.0f - o0_);\n", 3 * H);
        fprintf(f, "                dcr_[j_] = dc_j_ * f0_;\n");
        break;
    case RNN_GRU:
        fprintf(f, "                const float r_ = s_[j_], u_ = s_[%lld + j_], nn_ = s_[%lld + j_], hn_ = s_[%lld + j_];\n",
                H, 2 * H, 3 * H);
        fprintf(f, "                const float dn_ = d_ * (1.0f - u_) * (1.0f - nn_ * nn_);\n");
        fprintf(f, "                const float dr_ = dn_ * hn_ * r_ * (1.0f - r_);\n");
        fprintf(f, "                const float du_ = d_ * (hp_[j_] - nn_) * u_ * (1.0f - u_);\n");
        fprintf(f, "                dg_[j_] = dr_, dg_[%lld + j_] = du_, dg_[%lld + j_] = dn_;\n", H, 2 * H);
        fprintf(f, "                dg_[%lld + j_] = dr_, dg_[%lld + j_] = du_, dg_[%lld + j_] = dn_ * r_;\n", GH,
                GH + H, GH + 2 * H);
        fprintf(f, "                dcr_[j_] = d_ * u_;   /* h' z */\n");
        break;
    case RNN_TANH:
        fprintf(f, "                dg_[j_] = d_ * (1.0f - h_[j_] * h_[j_]);\n");
        break;
    default:
        fprintf(f, "                dg_[j_] = h_[j_] > 0.0f ? d_ : 0.0f;\n");
        break;
    }
    fprintf(f, "            }\n        }\n");
    /* the earlier step's dh: these gate gradients (W_hh h's) times W_hh;
     * at the first step h0's, kept when it takes a gradient */
    fprintf(f, "        if (%s) {\n", g->dstate ? "1" : "!first_");
    fprintf(f, "            rt_sgemm(0, 0, n, %lld, %lld, b%d + t_ * %lld%s, %lld, b%d, %lld, dh_, %lld);\n", H, GH, g->dg,
            W, gru ? util_fmt(" + %lld", GH) : "", T * W, g->whh, H, H);
    if (gru)
        fprintf(f, "            for (int64_t e_ = 0; e_ < n * %lld; e_++)\n                dh_[e_] += dc_[e_];\n", H);
    fprintf(f, "        }\n    }\n");
    if (g->dstate) {    /* dh0, then the LSTM's dc0, after the values */
        fprintf(f, "    memcpy(b%d + n * %lld, dh_, sizeof(float) * (size_t)(n * %lld));\n", g->dg, T * W, H);
        if (lstm)
            fprintf(f, "    memcpy(b%d + n * %lld, dc_, sizeof(float) * (size_t)(n * %lld));\n", g->dg, T * W + H, H);
    }
    fprintf(f, "    free(dh_);\n    free(dc_);\n    free((void *)z_);\n");
}

/* the LSTM's cell state at its last step */
static void cell_c(const Emit *m, const Node *n, const RnnGeo *g)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H;
    fprintf(f, "    const float *const sv_ = b%d + n * %lld;\n", g->out, T * H);
    fprintf(f, "    for (int64_t i_ = 0; i_ < n; i_++)\n");
    fprintf(f, "        for (int64_t j_ = 0; j_ < %lld; j_++)\n", H);
    fprintf(f, "            b%d[i_ * %lld + j_] = %s[%lld + j_];\n", n->id, H, saved(g, g->reverse ? "0" : util_fmt("%lld", T - 1)),
            4 * H);
}

/* an initial state's gradient: the copy the recurrence's gradient keeps */
static void dstate_c(const Emit *m, const Node *n)
{
    const Node *b = ex_node(m, n->in[0]);
    const long long H = n->shape.d[1], TW = b->shape.d[1] * b->shape.d[2];
    fprintf(m->f, "    /* %s: the gradient of %s */\n", op_text[n->op], n->rnn.dstate ? "c0" : "h0");
    fprintf(m->f, "    memcpy(b%d, b%d + n * %lld, sizeof(float) * (size_t)(n * %lld));\n", n->id,
            plan_source(m->p, n->in[0]), n->rnn.dstate ? TW + H : TW, H);
}

void emit_rnn_c(const Emit *m)
{
    const Node *n = ex_node(m, m->gr->anchor);
    if (n->op == OP_T_RNN_DSTATE) {
        dstate_c(m, n);
        return;
    }
    const RnnGeo g = rnn_geometry(m, n);
    fprintf(m->f, "    /* %s: %s, %lld steps%s, %lld hidden */\n", op_text[n->op],
            g.cell == RNN_LSTM ? "LSTM" : g.cell == RNN_GRU ? "GRU" : g.cell == RNN_TANH ? "RNN tanh" : "RNN relu",
            (long long)g.T, g.reverse ? " from the last" : "", (long long)g.H);
    switch (n->op) {
    case OP_T_RNN: forward_c(m, &g); break;
    case OP_T_RNN_BWD: backward_c(m, &g); break;
    default: cell_c(m, n, &g); break;
    }
}
