/* emit_rnn_cuda.c: the recurrences' CUDA kernels (T_RNN, T_RNN_BWD,
 * T_RNN_CN), with emit_rnn.c's semantics (the C kernels, which the
 * emulator holds these against).
 *
 * The time loop is inside the kernel: a block per sample (a grid-stride
 * loop over the batch), so one launch runs every step of a layer and
 * direction and no grid-wide barrier is needed; a step's dependency on the
 * previous one stays inside the block, behind __syncthreads. Thread x owns
 * the hidden units j = x + NT u (registers: the LSTM's c, the gradient's
 * carried dh and dc). Forward: h_{t-1} in shared memory, each unit's G
 * gate dot products over it read W_hh's rows from global memory (L2: a
 * 128-wide LSTM's W_hh is 256 KB, more than shared memory holds).
 * Gradient: the step's gate gradients of W_hh h in shared memory, each
 * unit's dh the column j of W_hh against them (the threads read
 * consecutive j: coalesced). The unit loops are unrolled (their register
 * arrays stay registers: indexed in a loop left rolled, ptxas put them on
 * the stack and spilled at sm_80), the dot products 4 at a time. Each sum
 * in one thread, in order: the same bits every run. Reads go through
 * (float) (16-bit operands under autocast); the results are float. */
#include <stdio.h>

#include "cddpc.h"

#define NT 128              /* threads a block */

static void grid(rt_cuda_launch *L)
{
    L->block[0] = NT;
    L->gmul[0] = 1;         /* a block per sample of the largest batch */
    L->gdiv[0] = 1;
}

/* the units thread x owns: j_ = x + NT u_ for u_ < U */
static int units(const RnnGeo *g) { return (int)((g->H + NT - 1) / NT); }

/* emit_rnn.c's step loop, its step variables marked used (NVRTC warns
 * of the ones a kernel does not read) */
static void steps(FILE *f, const RnnGeo *g, int backward, const char *ind)
{
    rnn_steps(f, g, backward, ind);
    fprintf(f, "%s    (void)tp_, (void)first_;\n", ind);
}

static void forward_cuda(const Emit *m, const RnnGeo *g, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H, GH = g->GH, X = g->X;
    const int U = units(g);
    fprintf(f, "    __shared__ float hs_[%lld];   /* h_{t-1} */\n", H);
    fprintf(f, "    float *const sv_ = (float *)b%d + (int64_t)n * %lld;   /* the saved floats, after h */\n", g->out,
            T * H);
    fprintf(f, "    (void)sv_;\n");
    fprintf(f, "    for (int64_t i_ = blockIdx.x; i_ < n; i_ += gridDim.x) {\n");
    fprintf(f, "        for (int j_ = threadIdx.x; j_ < %lld; j_ += %d)\n", H, NT);
    fprintf(f, "            hs_[j_] = %s;\n", g->h0 >= 0 ? util_fmt("(float)b%d[i_ * %lld + j_]", g->h0, H) : "0.0f");
    if (g->cell == RNN_LSTM) {  /* the cell state of the thread's units */
        fprintf(f, "        float c_[%d];\n", U);
        fprintf(f, "        #pragma unroll\n");
        fprintf(f, "        for (int u_ = 0; u_ < %d; u_++) {\n", U);
        if (g->c0 >= 0)
            fprintf(f, "            const int j_ = threadIdx.x + %d * u_;\n            c_[u_] = j_ < %lld ? "
                       "(float)b%d[i_ * %lld + j_] : 0.0f;\n", NT, H, g->c0, H);
        else
            fprintf(f, "            c_[u_] = 0.0f;\n");
        fprintf(f, "        }\n");
    }
    fprintf(f, "        __syncthreads();\n");
    steps(f, g, 0, "        ");
    fprintf(f, "            float hn_[%d];\n", U);
    fprintf(f, "            #pragma unroll\n");
    fprintf(f, "            for (int u_ = 0; u_ < %d; u_++) {\n", U);
    fprintf(f, "                const int j_ = threadIdx.x + %d * u_;\n", NT);
    fprintf(f, "                hn_[u_] = 0.0f;\n");
    fprintf(f, "                if (j_ >= %lld)\n                    continue;\n", H);
    fprintf(f, "                const int64_t row_ = i_ * %lld + t_;\n", T);
    for (int q = 0; q < g->G; q++)
        fprintf(f, "                float hg%d_ = 0.0f;\n", q);
    fprintf(f, "                #pragma unroll 4\n");
    fprintf(f, "                for (int k2_ = 0; k2_ < %lld; k2_++) {\n", H);
    fprintf(f, "                    const float h_ = hs_[k2_];\n");
    for (int q = 0; q < g->G; q++)
        fprintf(f, "                    hg%d_ += (float)b%d[(%d * %lld + j_) * %lld + k2_] * h_;\n", q, g->whh, q, H, H);
    fprintf(f, "                }\n");
    for (int q = 0; q < g->G; q++)
        if (g->bhh >= 0)
            fprintf(f, "                hg%d_ += (float)b%d[%d * %lld + j_];\n", q, g->bhh, q, H);
    /* xw's gate q at unit j_ */
    const char *xg = util_fmt("(float)b%d[row_ * %lld + %%d * %lld + j_]", g->xw, GH, H);
    switch (g->cell) {
    case RNN_LSTM:
        fprintf(f, "                const float i0_ = 1.0f / (1.0f + expf(-(hg0_ + %s)));\n", util_fmt(xg, 0));
        fprintf(f, "                const float f0_ = 1.0f / (1.0f + expf(-(hg1_ + %s)));\n", util_fmt(xg, 1));
        fprintf(f, "                const float g0_ = tanhf(hg2_ + %s);\n", util_fmt(xg, 2));
        fprintf(f, "                const float o0_ = 1.0f / (1.0f + expf(-(hg3_ + %s)));\n", util_fmt(xg, 3));
        fprintf(f, "                c_[u_] = f0_ * c_[u_] + i0_ * g0_;\n");
        fprintf(f, "                hn_[u_] = o0_ * tanhf(c_[u_]);\n");
        fprintf(f, "                float *const s_ = sv_ + row_ * %lld;\n", X * H);
        fprintf(f, "                s_[j_] = i0_, s_[%lld + j_] = f0_, s_[%lld + j_] = g0_, s_[%lld + j_] = o0_, "
                   "s_[%lld + j_] = c_[u_];\n", H, 2 * H, 3 * H, 4 * H);
        break;
    case RNN_GRU:
        fprintf(f, "                const float r_ = 1.0f / (1.0f + expf(-(hg0_ + %s)));\n", util_fmt(xg, 0));
        fprintf(f, "                const float z_ = 1.0f / (1.0f + expf(-(hg1_ + %s)));\n", util_fmt(xg, 1));
        fprintf(f, "                const float nn_ = tanhf(%s + hg2_ * r_);\n", util_fmt(xg, 2));
        fprintf(f, "                hn_[u_] = (hs_[j_] - nn_) * z_ + nn_;\n");
        fprintf(f, "                float *const s_ = sv_ + row_ * %lld;\n", X * H);
        fprintf(f, "                s_[j_] = r_, s_[%lld + j_] = z_, s_[%lld + j_] = nn_, s_[%lld + j_] = hg2_;\n", H,
                2 * H, 3 * H);
        break;
    default:
        fprintf(f, "                const float a_ = hg0_ + %s;\n", util_fmt(xg, 0));
        fprintf(f, "                hn_[u_] = %s;\n", g->cell == RNN_TANH ? "tanhf(a_)" : "a_ > 0.0f ? a_ : 0.0f");
        break;
    }
    fprintf(f, "                b%d[row_ * %lld + j_] = hn_[u_];\n", g->out, H);
    fprintf(f, "            }\n");
    fprintf(f, "            __syncthreads();   /* every unit has read h_{t-1} */\n");
    fprintf(f, "            #pragma unroll\n");
    fprintf(f, "            for (int u_ = 0; u_ < %d; u_++) {\n", U);
    fprintf(f, "                const int j_ = threadIdx.x + %d * u_;\n", NT);
    fprintf(f, "                if (j_ < %lld)\n                    hs_[j_] = hn_[u_];\n", H);
    fprintf(f, "            }\n");
    fprintf(f, "            __syncthreads();\n");
    fprintf(f, "        }\n    }\n");
    grid(L);
}

static void backward_cuda(const Emit *m, const RnnGeo *g, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const long long T = g->T, H = g->H, GH = g->GH, W = g->W, X = g->X;
    const int U = units(g), gru = g->cell == RNN_GRU;
    fprintf(f, "    __shared__ float gs_[%lld];   /* the step's gradients of W_hh h + b_hh */\n", GH);
    fprintf(f, "    const float *const sv_ = (const float *)b%d + (int64_t)n * %lld;   /* the forward's saved floats */\n",
            g->out, T * H);
    fprintf(f, "    (void)sv_;\n");
    if (g->h0 >= 0 && !gru)
        fprintf(f, "    (void)b%d;\n", g->h0);
    if (g->c0 >= 0 && g->cell != RNN_LSTM)
        fprintf(f, "    (void)b%d;\n", g->c0);
    fprintf(f, "    for (int64_t i_ = blockIdx.x; i_ < n; i_ += gridDim.x) {\n");
    const int carry = g->cell == RNN_LSTM || gru;   /* dc_: the LSTM's dc through f, the GRU's h' z */
    fprintf(f, "        float dh_[%d]%s;   /* from the later step: through W_hh%s */\n", U,
            carry ? util_fmt(", dc_[%d]", U) : "", carry ? "; dc_ the LSTM's dc through f, the GRU's h' z" : "");
    fprintf(f, "        #pragma unroll\n");
    fprintf(f, "        for (int u_ = 0; u_ < %d; u_++) {\n", U);
    /* the last step's dc: c_n's gradient, when the loss reads c_n */
    if (g->dcn >= 0)
        fprintf(f, "            const int j_ = threadIdx.x + %d * u_;\n            dh_[u_] = 0.0f, dc_[u_] = j_ < %lld ? "
                   "(float)b%d[i_ * %lld + j_] : 0.0f;\n", NT, H, g->dcn, H);
    else
        fprintf(f, "            dh_[u_] = 0.0f%s;\n", carry ? ", dc_[u_] = 0.0f" : "");
    fprintf(f, "        }\n");
    steps(f, g, 1, "        ");
    fprintf(f, "            const int64_t row_ = i_ * %lld + t_;\n", T);
    fprintf(f, "            float *const dg_ = b%d + row_ * %lld;\n", g->dg, W);
    if (X)
        fprintf(f, "            const float *const s_ = sv_ + row_ * %lld;\n", X * H);
    fprintf(f, "            #pragma unroll\n");
    fprintf(f, "            for (int u_ = 0; u_ < %d; u_++) {\n", U);
    fprintf(f, "                const int j_ = threadIdx.x + %d * u_;\n", NT);
    fprintf(f, "                if (j_ >= %lld)\n                    continue;\n", H);
    fprintf(f, "                const float d_ = (float)b%d[row_ * %lld + j_] + dh_[u_];\n", g->dy, H);
    switch (g->cell) {
    case RNN_LSTM: {
        const char *cp = util_fmt("(first_ ? %s : sv_[(i_ * %lld + tp_) * %lld + %lld + j_])",
                                  g->c0 >= 0 ? util_fmt("(float)b%d[i_ * %lld + j_]", g->c0, H) : "0.0f", T, X * H,
                                  4 * H);
        fprintf(f, "                const float i0_ = s_[j_], f0_ = s_[%lld + j_], g0_ = s_[%lld + j_], o0_ = s_[%lld + j_];\n",
                H, 2 * H, 3 * H);
        fprintf(f, "                const float tc_ = tanhf(s_[%lld + j_]);\n", 4 * H);
        fprintf(f, "                const float dc_j_ = d_ * o0_ * (1.0f - tc_ * tc_) + dc_[u_];\n");
        fprintf(f, "                const float a0_ = dc_j_ * g0_ * i0_ * (1.0f - i0_);\n");
        fprintf(f, "                const float a1_ = dc_j_ * %s * f0_ * (1.0f - f0_);\n", cp);
        fprintf(f, "                const float a2_ = dc_j_ * i0_ * (1.0f - g0_ * g0_);\n");
        fprintf(f, "                const float a3_ = d_ * tc_ * o0_ * (1.0f - o0_);\n");
        fprintf(f, "                dc_[u_] = dc_j_ * f0_;\n");
        for (int q = 0; q < 4; q++)
            fprintf(f, "                dg_[%s] = a%d_, gs_[%s] = a%d_;\n", q ? util_fmt("%lld + j_", q * H) : "j_", q,
                    q ? util_fmt("%lld + j_", q * H) : "j_", q);
        break;
    }
    case RNN_GRU: {
        const char *hp = util_fmt("(first_ ? %s : b%d[(i_ * %lld + tp_) * %lld + j_])",
                                  g->h0 >= 0 ? util_fmt("(float)b%d[i_ * %lld + j_]", g->h0, H) : "0.0f", g->out, T, H);
        fprintf(f, "                const float r_ = s_[j_], z_ = s_[%lld + j_], nn_ = s_[%lld + j_], hn_ = s_[%lld + j_];\n",
                H, 2 * H, 3 * H);
        fprintf(f, "                const float dn_ = d_ * (1.0f - z_) * (1.0f - nn_ * nn_);\n");
        fprintf(f, "                const float dr_ = dn_ * hn_ * r_ * (1.0f - r_);\n");
        fprintf(f, "                const float dz_ = d_ * (%s - nn_) * z_ * (1.0f - z_);\n", hp);
        fprintf(f, "                dg_[j_] = dr_, dg_[%lld + j_] = dz_, dg_[%lld + j_] = dn_;\n", H, 2 * H);
        fprintf(f, "                dg_[%lld + j_] = dr_, dg_[%lld + j_] = dz_, dg_[%lld + j_] = dn_ * r_;\n", GH, GH + H,
                GH + 2 * H);
        fprintf(f, "                gs_[j_] = dr_, gs_[%lld + j_] = dz_, gs_[%lld + j_] = dn_ * r_;\n", H, 2 * H);
        fprintf(f, "                dc_[u_] = d_ * z_;\n");
        break;
    }
    default:
        fprintf(f, "                const float h_ = b%d[row_ * %lld + j_];\n", g->out, H);
        fprintf(f, "                const float a_ = %s;\n",
                g->cell == RNN_TANH ? "d_ * (1.0f - h_ * h_)" : "h_ > 0.0f ? d_ : 0.0f");
        fprintf(f, "                dg_[j_] = a_, gs_[j_] = a_;\n");
        break;
    }
    fprintf(f, "            }\n");
    fprintf(f, "            __syncthreads();   /* the step's gs_ whole */\n");
    /* the earlier step's dh: column j of W_hh against gs_; at the first
     * step h0's, kept when it takes a gradient */
    fprintf(f, "            if (%s)\n", g->dstate ? "1" : "!first_");
    fprintf(f, "                #pragma unroll\n");
    fprintf(f, "                for (int u_ = 0; u_ < %d; u_++) {\n", U);
    fprintf(f, "                    const int j_ = threadIdx.x + %d * u_;\n", NT);
    fprintf(f, "                    if (j_ >= %lld)\n                        continue;\n", H);
    fprintf(f, "                    float a_ = 0.0f;\n");
    fprintf(f, "                    #pragma unroll 4\n");
    fprintf(f, "                    for (int q_ = 0; q_ < %lld; q_++)\n", GH);
    fprintf(f, "                        a_ += gs_[q_] * (float)b%d[(int64_t)q_ * %lld + j_];\n", g->whh, H);
    fprintf(f, "                    dh_[u_] = a_%s;\n", gru ? " + dc_[u_]" : "");
    fprintf(f, "                }\n");
    fprintf(f, "            __syncthreads();   /* gs_ read before the next step writes it */\n");
    fprintf(f, "        }\n");
    if (g->dstate) {    /* dh0, then the LSTM's dc0, after the values */
        fprintf(f, "        #pragma unroll\n");
        fprintf(f, "        for (int u_ = 0; u_ < %d; u_++) {\n", U);
        fprintf(f, "            const int j_ = threadIdx.x + %d * u_;\n", NT);
        fprintf(f, "            if (j_ < %lld) {\n", H);
        fprintf(f, "                b%d[(int64_t)n * %lld + i_ * %lld + j_] = dh_[u_];\n", g->dg, T * W, H);
        if (g->cell == RNN_LSTM)
            fprintf(f, "                b%d[(int64_t)n * %lld + i_ * %lld + j_] = dc_[u_];\n", g->dg, T * W + H, H);
        fprintf(f, "            }\n        }\n");
    }
    fprintf(f, "    }\n");
    grid(L);
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
    grid(L);
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
    grid(L);
}

void emit_rnn_cuda(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    if (n->op == OP_T_RNN_DSTATE) {
        dstate_cuda(m, n, L);
        return;
    }
    const RnnGeo g = rnn_geometry(m, n);
    switch (n->op) {
    case OP_T_RNN: forward_cuda(m, &g, L); break;
    case OP_T_RNN_BWD: backward_cuda(m, &g, L); break;
    default: cell_cuda(m, n, &g, L); break;
    }
}
