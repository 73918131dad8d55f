/* emit_nchw.c: the kernels over images [N, C, H, W], for both targets:
 * convolution and its two gradients, the per-channel reductions of batch
 * norm, pooling, and the running-statistics update.
 *
 * CPU: an fp32 convolution and its gradients go to oneDNN (rt_dnnl_conv)
 * when the runtime has it; otherwise, and in low precision, a convolution
 * is im2col + one rt_sgemm per group over the whole batch (the columns of
 * all samples side by side), so the tuned GEMM does the work; its
 * gradients are the same GEMM transposed (dx through col2im).
 * CUDA: direct kernels, one thread per output element (the weight gradient:
 * one block per weight, a block reduction over the batch), correct first.
 * Per-channel reductions are one block per channel on the GPU (a fixed-order
 * tree: deterministic) and one loop per channel in double on the CPU.
 * Pooling gradients on the GPU gather from the windows that contain an
 * input element (no atomics, no zeroing); the CPU scatters each window's
 * gradient, one thread per plane. */
#include <string.h>

#include "cddpc.h"

#define THREADS 256

/* Geometry of a convolution node (forward or either gradient). */
typedef struct ConvGeo {
    int x, w, y;            /* buffers: input, weight, output (any may be the node itself) */
    int64_t C, H, W, O, OH, OW, CG, OG, K, P;
    Window win;
} ConvGeo;

static ConvGeo conv_geo(const Emit *m, const Node *n)
{
    const Plan *p = m->p;
    ConvGeo c = {0};
    const Node *xs, *ws, *ys;
    /* the geometry from the operands as the node sees them: a buffer's
     * source may be a view's producer of another shape (dy of a [N, F]
     * LayerNorm gradient viewed as [N, C, H, W]) */
    switch (n->op) {
    case OP_CONV2D:     /* into its bias's output when that is fused (memplan's gemm_out) */
        c.x = plan_source(p, n->in[0]), c.w = plan_source(p, n->in[1]), c.y = m->gr->gemm_out;
        xs = ex_node(m, n->in[0]), ws = ex_node(m, n->in[1]), ys = n;
        break;
    case OP_CONV2D_DX:
        c.y = plan_source(p, n->in[0]), c.w = plan_source(p, n->in[1]), c.x = n->id;
        ys = ex_node(m, n->in[0]), ws = ex_node(m, n->in[1]), xs = n;
        break;
    default:
        c.y = plan_source(p, n->in[0]), c.x = plan_source(p, n->in[1]), c.w = n->id;
        ys = ex_node(m, n->in[0]), xs = ex_node(m, n->in[1]), ws = n;
        break;
    }
    c.C = xs->shape.d[1], c.H = xs->shape.d[2], c.W = xs->shape.d[3];
    c.O = ys->shape.d[1], c.OH = ys->shape.d[2], c.OW = ys->shape.d[3];
    c.win = n->win;
    c.CG = c.C / c.win.groups, c.OG = c.O / c.win.groups;
    c.K = c.CG * c.win.kh * c.win.kw;
    c.P = c.OH * c.OW;
    (void)ws;
    return c;
}

/* What a forward convolution stores for product v of output channel o:
 * v, or with its fused bias (fuse.c's conv_bias_epilogue) v + bias[o],
 * rounded as bias_add's own kernel would (cast bias, rounded sum), so
 * fusing changes no bit at any precision. */
static int conv_has_bias(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++)
        if (ex_node(m, m->gr->nodes[k])->op == OP_BIAS_ADD)
            return m->gr->nodes[k];
    return 0;
}

static char *conv_store(const Emit *m, const char *v, const char *o)
{
    int b = conv_has_bias(m);
    if (!b)
        return util_strdup(v);
    char *bias = ex_round(m, util_fmt("b%d[%s]", plan_source(m->p, ex_node(m, b)->in[1]), o));
    return ex_round(m, util_fmt("%s + %s", v, bias));
}

static void conv_consts(FILE *f, const ConvGeo *c)
{
    const Window *w = &c->win;
    fprintf(f, "    const int64_t C = %lld, H = %lld, W = %lld, O = %lld, OH = %lld, OW = %lld;\n", (long long)c->C,
            (long long)c->H, (long long)c->W, (long long)c->O, (long long)c->OH, (long long)c->OW);
    fprintf(f, "    const int64_t KH = %d, KW = %d, SH = %d, SW = %d, PH = %d, PW = %d, DH = %d, DW = %d;\n", w->kh,
            w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw);
    fprintf(f, "    const int64_t G = %d, CG = %lld, OG = %lld, K = %lld, P = %lld;\n", w->groups, (long long)c->CG,
            (long long)c->OG, (long long)c->K, (long long)c->P);
    fprintf(f, "    (void)C, (void)H, (void)W, (void)O, (void)OH, (void)OW, (void)KH, (void)KW, (void)SH, (void)SW;\n");
    fprintf(f, "    (void)PH, (void)PW, (void)DH, (void)DW, (void)G, (void)CG, (void)OG, (void)K, (void)P;\n");
}

/* Pool geometry: x is the pooled input, y the pooled output. */
static void pool_consts(FILE *f, const Shape *x, const Shape *y, const Window *w)
{
    fprintf(f, "    const int64_t C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n", (long long)x->d[1],
            (long long)x->d[2], (long long)x->d[3], (long long)y->d[2], (long long)y->d[3]);
    fprintf(f, "    const int64_t KH = %d, KW = %d, SH = %d, SW = %d, PH = %d, PW = %d;\n", w->kh, w->kw, w->sh, w->sw,
            w->ph, w->pw);
    fprintf(f, "    (void)C;\n");
}

/* ---- C ------------------------------------------------------------------ */

/* col[r * NP + i * P + p] = the input under weight r of output pixel p of
 * sample i, for the channels of group g (0 where the window hangs over the
 * padding). */
static void c_im2col(FILE *f, int x)
{
    fprintf(f, "        #pragma omp parallel for schedule(static) if (K * NP >= 65536)\n");
    fprintf(f, "        for (int64_t r = 0; r < K; r++) {\n");
    fprintf(f, "            const int64_t c = g * CG + r / (KH * KW), ki = r / KW %% KH, kj = r %% KW;\n");
    fprintf(f, "            float *dst = col + r * NP;\n");
    fprintf(f, "            for (int64_t i = 0; i < n; i++)\n");
    fprintf(f, "                for (int64_t oh = 0; oh < OH; oh++) {\n");
    fprintf(f, "                    const int64_t ih = oh * SH - PH + ki * DH;\n");
    fprintf(f, "                    const float *src = b%d + (i * C + c) * H * W + ih * W;\n", x);
    fprintf(f, "                    for (int64_t ow = 0; ow < OW; ow++) {\n");
    fprintf(f, "                        const int64_t iw = ow * SW - PW + kj * DW;\n");
    fprintf(f, "                        *dst++ = ih >= 0 && ih < H && iw >= 0 && iw < W ? src[iw] : 0.0f;\n");
    fprintf(f, "                    }\n                }\n        }\n");
}

/* dyg[o * NP + i * P + p] = dy of output channel g*OG + o: the GEMM's layout */
static void c_gather_dy(FILE *f, int y)
{
    fprintf(f, "        #pragma omp parallel for schedule(static) if (OG * NP >= 65536)\n");
    fprintf(f, "        for (int64_t o = 0; o < OG; o++)\n");
    fprintf(f, "            for (int64_t i = 0; i < n; i++)\n");
    fprintf(f, "                memcpy(dyg + o * NP + i * P, b%d + (i * O + g * OG + o) * P, sizeof(float) * (size_t)P);\n", y);
}

/* Scratch that outlives the call: a kernel runs once per step on the one
 * thread that runs the plan, and a fresh multi-megabyte malloc each step
 * would be fresh pages (faults, zeroing) each step. Grown, never freed:
 * it stays reachable until exit. */
static void c_alloc(FILE *f, const char *var, const char *rows)
{
    fprintf(f, "    static float *%s_buf;\n    static size_t %s_cap;\n", var, var);
    fprintf(f, "    const size_t %s_need = (size_t)(%s * NP > 0 ? %s * NP : 1);\n", var, rows, rows);
    fprintf(f, "    if (%s_need > %s_cap) {\n        free(%s_buf);\n", var, var, var);
    fprintf(f, "        %s_buf = malloc(sizeof(float) * %s_need);\n        %s_cap = %s_need;\n", var, var, var, var);
    fprintf(f, "        if (!%s_buf) {\n            fprintf(stderr, \"error: out of memory for convolution scratch\\n\");\n",
            var);
    fprintf(f, "            exit(1);\n        }\n    }\n    float *const %s = %s_buf;\n", var, var);
}

/* fp32: oneDNN first (rt_dnnl_conv); the loops below run when the runtime
 * has none or it refuses the geometry. bf16 too (RT_CONV_BF16: bf16
 * operands, the result rounded), where the CPU has AVX512-BF16. The fused
 * bias is added after, as conv_store adds (and rounds) it: oneDNN's
 * avx2 kernels add a bias elsewhere in the sum than its avx512 ones, and a
 * fused bias must give the bits of bias_add's own kernel (fusion-bits).
 * fp16 keeps the loops: their rounding is autocast's, operand by operand.
 * Opens a block the caller closes. */
static void c_conv_dnnl(const Emit *m, const Node *n, const ConvGeo *c)
{
    FILE *f = m->f;
    fprintf(f, "    static rt_dnnl_conv_cache *dnnl;\n");
    fprintf(f, "    const rt_conv_geo geo = {n, C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, G};\n");
    fprintf(f, "    if (!rt_dnnl_conv(&dnnl, %s%s, &geo, b%d, b%d, NULL, b%d)) {\n",
            n->op == OP_CONV2D ? "RT_CONV_FWD" : n->op == OP_CONV2D_DX ? "RT_CONV_DX" : "RT_CONV_DW",
            m->p->g->prec ? " | RT_CONV_BF16" : "", c->x, c->w, c->y);
}

/* through oneDNN: the fused bias, added to the (rounded) products */
static void c_conv_dnnl_bias(const Emit *m, const Node *n, const ConvGeo *c)
{
    FILE *f = m->f;
    if (n->op != OP_CONV2D || !conv_has_bias(m)) {
        fprintf(f, "    }\n");
        return;
    }
    fprintf(f, "    } else {\n");
    fprintf(f, "        #pragma omp parallel for schedule(static) if (n * O * P >= 65536)\n");
    fprintf(f, "        for (int64_t io = 0; io < n * O; io++)\n");
    fprintf(f, "            for (int64_t q = 0; q < P; q++)\n");
    fprintf(f, "                b%d[io * P + q] = %s;\n", c->y, conv_store(m, util_fmt("b%d[io * P + q]", c->y), "io % O"));
    fprintf(f, "    }\n");
}

static void c_conv(const Emit *m, const Node *n)
{
    FILE *f = m->f;
    ConvGeo c = conv_geo(m, n);
    conv_consts(f, &c);
    const int dnnl = !m->p->g->prec || m->p->g->prec == RT_PREC_BF16;
    if (dnnl)
        c_conv_dnnl(m, n, &c);
    fprintf(f, "    const int64_t NP = n * P;\n");
    c_alloc(f, "col", "K");
    if (n->op != OP_CONV2D)
        c_alloc(f, "dyg", "OG");
    else
        c_alloc(f, "out", "OG");
    if (n->op == OP_CONV2D_DX)
        fprintf(f, "    memset(b%d, 0, sizeof(float) * (size_t)(n * C * H * W));\n", c.x);
    fprintf(f, "    for (int64_t g = 0; g < G; g++) {\n");
    switch (n->op) {
    case OP_CONV2D:
        c_im2col(f, c.x);
        fprintf(f, "        %s0, 0, OG, NP, K, b%d + g * OG * K, K, col, NP, out, NP);\n", ex_gemm_call(m), c.w);
        fprintf(f, "        #pragma omp parallel for schedule(static) if (OG * NP >= 65536)\n");
        fprintf(f, "        for (int64_t o = 0; o < OG; o++)\n");
        fprintf(f, "            for (int64_t i = 0; i < n; i++)\n");
        if (conv_has_bias(m)) {
            fprintf(f, "                for (int64_t q = 0; q < P; q++)\n");
            fprintf(f, "                    b%d[(i * O + g * OG + o) * P + q] = %s;\n", c.y,
                    conv_store(m, "out[o * NP + i * P + q]", "g * OG + o"));
        } else {
            fprintf(f, "                memcpy(b%d + (i * O + g * OG + o) * P, out + o * NP + i * P, sizeof(float) * (size_t)P);\n",
                    c.y);
        }
        break;
    case OP_CONV2D_DW:
        c_im2col(f, c.x);
        c_gather_dy(f, c.y);
        fprintf(f, "        %s0, 1, OG, K, NP, dyg, NP, col, NP, b%d + g * OG * K, K);\n", ex_gemm_call(m), c.w);
        break;
    default:    /* dx: col = W_g^T dy_g, then col2im, each thread owning whole channels */
        c_gather_dy(f, c.y);
        /* low precision: the products' sum is rounded once, after col2im
         * (as the CUDA kernel's gather), not per column */
        fprintf(f, "        %s1, 0, K, NP, OG, b%d + g * OG * K, K, dyg, NP, col, NP);\n",
                m->p->g->prec ? util_fmt("rt_sgemm_prec(RT_PREC_KEEP_C | %d, ", m->p->g->prec) : "rt_sgemm(", c.w);
        fprintf(f, "        #pragma omp parallel for schedule(static) if (K * NP >= 65536)\n");
        fprintf(f, "        for (int64_t cl = 0; cl < CG; cl++)\n");
        fprintf(f, "            for (int64_t r = cl * KH * KW; r < (cl + 1) * KH * KW; r++) {\n");
        fprintf(f, "                const int64_t ki = r / KW %% KH, kj = r %% KW;\n");
        fprintf(f, "                const float *src = col + r * NP;\n");
        fprintf(f, "                for (int64_t i = 0; i < n; i++)\n");
        fprintf(f, "                    for (int64_t oh = 0; oh < OH; oh++) {\n");
        fprintf(f, "                        const int64_t ih = oh * SH - PH + ki * DH;\n");
        fprintf(f, "                        float *dst = b%d + (i * C + g * CG + cl) * H * W + ih * W;\n", c.x);
        fprintf(f, "                        for (int64_t ow = 0; ow < OW; ow++, src++) {\n");
        fprintf(f, "                            const int64_t iw = ow * SW - PW + kj * DW;\n");
        fprintf(f, "                            if (ih >= 0 && ih < H && iw >= 0 && iw < W)\n");
        fprintf(f, "                                dst[iw] += *src;\n");
        fprintf(f, "                        }\n                    }\n            }\n");
        break;
    }
    fprintf(f, "    }\n");
    if (n->op == OP_CONV2D_DX && m->p->g->prec)
        fprintf(f, "    for (int64_t k = 0; k < n * C * H * W; k++)\n        b%d[k] = %s;\n", c.x,
                ex_round(m, util_fmt("b%d[k]", c.x)));
    if (dnnl)
        c_conv_dnnl_bias(m, n, &c);
}

/* Opens the loop over channels c (a thread owns whole channels); M is the
 * channel's element count in this batch, FOR_CHAN walks them as e. */
static void c_chan_loop_open(FILE *f, int64_t C, int64_t HW)
{
    fprintf(f, "    const int64_t C = %lld, HW = %lld, M = n * HW;\n    (void)M;\n", (long long)C, (long long)HW);
    fprintf(f, "    #pragma omp parallel for schedule(static) if (M * C >= 65536)\n");
    fprintf(f, "    for (int64_t c = 0; c < C; c++) {\n");
}

#define FOR_CHAN "for (int64_t i = 0; i < n; i++) for (int64_t e = (i * C + c) * HW; e < (i * C + c + 1) * HW; e++)"

/* Sums over channel c's elements e, in double: sum k is named names[k]
 * and adds terms[k] (an expression of e; `stmt`, if any, runs first for
 * each e and may declare what the terms use). A single running sum is a
 * chain of dependent adds (one per 4 cycles); here CHAN_LANES partial
 * sums, element k of a plane into lane k % CHAN_LANES, combined pairwise
 * at the end. The order depends only on the plane's size, so every kernel
 * summing the same values (a channel result fused into a pass or in a
 * kernel of its own) gets the same bits. Whole groups of 8 go through
 * cddprt.h's vectors: vterms[k] and vstmt are the same expressions over 8
 * elements from e (rt_ld8, rt_wide8, rt_st8), lane by lane the same
 * operations as the scalar tail's. */
#define CHAN_LANES 8

/* each line of `text` (lines split by \n), indented by ind */
static void c_lines(FILE *f, const char *ind, const char *text)
{
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(f, "%s%.*s\n", ind, (int)len, p);
        p += len + (nl != NULL);
    }
}

static void c_chan_sums(FILE *f, int nsum, const char *const *names, const char *const *terms,
                        const char *const *vterms, const char *stmt, const char *vstmt)
{
    for (int k = 0; k < nsum; k++)
        fprintf(f, "        rt_v8d %s_l = {0};\n", names[k]);
    fprintf(f, "        for (int64_t i = 0; i < n; i++) {\n            const int64_t e0 = (i * C + c) * HW;\n");
    fprintf(f, "            int64_t k = 0;\n            for (; k + %d <= HW; k += %d) {\n", CHAN_LANES, CHAN_LANES);
    fprintf(f, "                const int64_t e = e0 + k;\n");
    if (vstmt)
        c_lines(f, "                ", vstmt);
    for (int k = 0; k < nsum; k++)
        fprintf(f, "                %s_l += %s;\n", names[k], vterms[k]);
    fprintf(f, "            }\n            for (int64_t l = 0; k < HW; k++, l++) {\n");
    fprintf(f, "                const int64_t e = e0 + k;\n");
    if (stmt)
        c_lines(f, "                ", stmt);
    for (int k = 0; k < nsum; k++)
        fprintf(f, "                %s_l[l] += %s;\n", names[k], terms[k]);
    fprintf(f, "            }\n        }\n");
    for (int k = 0; k < nsum; k++) {
        const char *x = names[k];
        fprintf(f, "        const double %s = ((%s_l[0] + %s_l[1]) + (%s_l[2] + %s_l[3])) + ((%s_l[4] + %s_l[5]) + (%s_l[6] + %s_l[7]));\n",
                x, x, x, x, x, x, x, x, x);
    }
}

/* `text` over 8 elements from e: every b<id>[e] read as rt_ld8(b<id> + e) */
static char *c_vec8(const char *text)
{
    char *out = util_alloc(strlen(text) * 4 + 1), *o = out;
    for (const char *p = text; *p;) {
        const char *q = p + 1;
        while (*p == 'b' && *q >= '0' && *q <= '9')
            q++;
        if (*p == 'b' && q > p + 1 && strncmp(q, "[e]", 3) == 0) {
            o += sprintf(o, "rt_ld8(%.*s + e)", (int)(q - p), p);
            p = q + 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

/* the sum of x[e] over the channel */
static void c_chan_sum(FILE *f, const char *name, int x)
{
    const char *t = util_fmt("b%d[e]", x), *v = util_fmt("rt_wide8(rt_ld8(b%d + e))", x);
    c_chan_sums(f, 1, &name, &t, &v, NULL, NULL);
}

/* the sum of (x[e] - mean)^2 in double over the channel, mean a double */
static void c_chan_sqdev(FILE *f, const char *name, int x)
{
    const char *t = util_fmt("((double)b%d[e] - mean) * ((double)b%d[e] - mean)", x, x);
    const char *v = util_fmt("(rt_wide8(rt_ld8(b%d + e)) - mean) * (rt_wide8(rt_ld8(b%d + e)) - mean)", x, x);
    c_chan_sums(f, 1, &name, &t, &v, NULL, NULL);
}

/* The input x of a channel op: in[1] for the gradient ops (in[0] is dy). */
static int chan_x_input(const Node *n)
{
    return n->op == OP_BN_DX || n->op == OP_BN_DW || n->op == OP_BN_DPART;
}

/* A channel result fused into this pass (fuse.c's chan_pass_result): the
 * group's node of op `op` reading `from` (bn_running: as its statistics;
 * bn_stats: as its squared deviations), or -1. Each is computed exactly as
 * its own kernel would: the same sums in the same order, so fusing changes
 * no bit. */
static int chan_extra(const Emit *m, Op op, int from)
{
    const int in = op == OP_BN_RUNNING ? 3 : op == OP_BN_STATS ? 4 : 0;
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *c = ex_node(m, m->gr->nodes[k]);
        if (c->id != m->gr->anchor && c->op == op && c->in[in] == from)
            return c->id;
    }
    return -1;
}

static void running_update(FILE *f, const Plan *p, const Node *n, const char *ind);

/* The running statistics of channel c from the statistics just written
 * (the train plan's statistics pass), as c_state/cu_state do for all. */
static void running_in_pass(const Emit *m, const Node *st, const char *ind)
{
    int r = chan_extra(m, OP_BN_RUNNING, st->id);
    if (r < 0)
        return;
    const Node *rn = ex_node(m, r);
    fprintf(m->f, "%s{\n%s    const int64_t MR = M%s;\n", ind, ind, rn->bn.sync ? " * e->world" : "");
    fprintf(m->f, "%s    const float unbias = MR > 1 ? (float)MR / (float)(MR - 1) : 1.0f;\n", ind);
    running_update(m->f, m->p, rn, util_fmt("%s    ", ind));
    fprintf(m->f, "%s    if (c == 0)\n%s        b%d[0] += 1.0f;\n%s    (void)b%d;\n%s}\n", ind, ind,
            plan_source(m->p, rn->in[2]), ind, r, ind);
}

/* ---- batch norm's formulas, one text for both targets --------------------
 * The passes around them are the target's: a thread per channel summing in
 * double (C), or a block per channel with float block sums (CUDA). */

/* the statistics of channel c: mean, and invstd = 1/sqrt(var + eps), as PyTorch */
static char *bn_stats_decl(int st, double eps)
{
    return util_fmt("const float mean = b%d[c], invstd = 1.0f / sqrtf(b%d[C + c] + %s);", st, st, util_cfloat(eps));
}

/* xhat of element e of x */
static char *bn_xhat(int x) { return util_fmt("(b%d[e] - mean) * invstd", x); }

/* A pass's mean v (a float expression) as n takes it: this rank's, or
 * under SyncBatchNorm the ranks' means summed (allreduce) over their count
 * (the ranks hold equal batches). */
static char *bn_over_ranks(const Node *n, const char *v)
{
    return n->bn.sync ? util_fmt("(float)((double)%s / (double)e->world)", v) : util_strdup(v);
}

/* c's row `row` of the means s */
static char *bn_mean(const Node *n, int s, const char *row) { return bn_over_ranks(n, util_fmt("b%d[%sc]", s, row)); }

/* the means of dy and dy * xhat (bn_dx) */
static char *bn_dmeans(const Node *n, int means)
{
    return util_fmt("const float mdy = %s, mdyx = %s;", bn_mean(n, means, ""), bn_mean(n, means, "C + "));
}

/* sum s (a double, or a float in CUDA) over the channel's M elements here */
static char *chan_mean(const char *s) { return util_fmt("(float)((double)%s / (double)M)", s); }

/* The train plan's statistics st of channel c from the passes' means (the
 * mean, and the variance about it), and the running statistics' update
 * when fused: in st's own kernel, q NULL (the variance read from its
 * buffer), or in bn_sqdev's (fuse.c chan_pass_result) once it is whole,
 * q its float value there. */
static void stats_in_pass(const Emit *m, const Node *st, const char *q, const char *ind)
{
    const Plan *p = m->p;
    const char *var = q ? bn_over_ranks(st, q) : bn_mean(st, plan_source(p, st->in[4]), "");
    /* x and the running statistics order the statistics; the eval plan's read the latter */
    fprintf(m->f, "%s(void)b%d, (void)b%d, (void)b%d;\n", ind, plan_source(p, st->in[0]), plan_source(p, st->in[1]),
            plan_source(p, st->in[2]));
    fprintf(m->f, "%sb%d[c] = %s;\n", ind, st->id, bn_mean(st, plan_source(p, st->in[3]), ""));
    fprintf(m->f, "%sb%d[C + c] = %s;\n", ind, st->id, var);
    running_in_pass(m, st, ind);
}

/* What bn_sqdev's pass writes once its mean square qm is whole: qm where
 * read outside, and the statistics fused into the pass (rule channel-pass). */
static void sqdev_results(const Emit *m, const Node *n, const char *ind)
{
    if (plan_uses_outside(m->p, n->id))
        fprintf(m->f, "%sb%d[c] = qm;\n", ind, n->id);
    const int st = chan_extra(m, OP_BN_STATS, n->id);
    if (st >= 0)
        stats_in_pass(m, ex_node(m, st), "qm", ind);
}

/* dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)), mdy and mdyx in scope */
static char *bn_scale_decl(int w) { return util_fmt("const float scale = b%d[c] * invstd;", w); }
static char *bn_dx(int dy, int x) { return util_fmt("scale * (b%d[e] - mdy - %s * mdyx)", dy, bn_xhat(x)); }

static void c_chan(const Emit *m, const Node *n)
{
    FILE *f = m->f;
    const Plan *p = m->p;
    const Shape *x = &ex_node(m, n->in[chan_x_input(n)])->shape;
    int a = plan_source(p, n->in[0]);
    int xb = n->nin > 1 ? plan_source(p, n->in[1]) : -1;
    c_chan_loop_open(f, x->d[1], x->d[2] * x->d[3]);
    switch (n->op) {
    case OP_SUM_CHAN: case OP_MEAN_CHAN:
        c_chan_sum(f, "s", a);
        fprintf(f, "        b%d[c] = %s;\n", n->id, n->op == OP_SUM_CHAN ? "(float)s" : chan_mean("s"));
        break;
    case OP_BN_STATS:
        if (!p->training) {     /* eval: normalize with the running statistics */
            fprintf(f, "        b%d[c] = b%d[c];\n        b%d[C + c] = b%d[c];\n        (void)b%d;\n", n->id,
                    plan_source(p, n->in[1]), n->id, plan_source(p, n->in[2]), a);
            break;
        }
        stats_in_pass(m, n, NULL, "        ");
        break;
    case OP_BN_SQDEV:   /* this rank's second pass, about the mean (of all ranks') */
        fprintf(f, "        const double mean = %s;\n",
                n->bn.sync ? util_fmt("(double)b%d[c] / (double)e->world", xb) : util_fmt("(double)b%d[c]", xb));
        c_chan_sqdev(f, "q", a);
        fprintf(f, "        const float qm = %s;\n", chan_mean("q"));
        sqdev_results(m, n, "        ");
        break;
    case OP_BN_DX: case OP_BN_DW: case OP_BN_DPART: {
        int st = plan_source(p, n->in[2]);
        fprintf(f, "        %s\n", bn_stats_decl(st, n->bn.eps));
        if (n->op != OP_BN_DX) {
            const char *names[] = {"sdy", "sdyx"};
            const char *terms[] = {util_fmt("b%d[e]", a), util_fmt("(double)b%d[e] * (double)(%s)", a, bn_xhat(xb))};
            const char *vterms[] = {util_fmt("rt_wide8(rt_ld8(b%d + e))", a),
                                    util_fmt("rt_wide8(rt_ld8(b%d + e)) * rt_wide8(%s)", a, c_vec8(bn_xhat(xb)))};
            c_chan_sums(f, 2, names, terms, vterms, NULL, NULL);
            /* the weight and bias gradients are these sums (fused) */
            int dw = chan_extra(m, OP_BN_DW, n->in[0]), db = chan_extra(m, OP_SUM_CHAN, n->in[0]);
            if (dw >= 0)
                fprintf(f, "        b%d[c] = (float)sdyx;\n", dw);
            if (db >= 0)
                fprintf(f, "        b%d[c] = (float)sdy;\n", db);
        }
        if (n->op == OP_BN_DW) {
            fprintf(f, "        b%d[c] = (float)sdyx;\n        (void)sdy;\n", n->id);
            break;
        }
        if (n->op == OP_BN_DPART) {
            fprintf(f, "        b%d[c] = %s;\n        b%d[C + c] = %s;\n", n->id, chan_mean("sdy"), n->id,
                    chan_mean("sdyx"));
            break;
        }
        /* dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)), the means over
         * this batch, or over all ranks' batches */
        fprintf(f, "        %s\n", bn_dmeans(n, plan_source(p, n->in[4])));
        fprintf(f, "        %s\n", bn_scale_decl(plan_source(p, n->in[3])));
        int so = chan_extra(m, OP_SUM_CHAN, n->id);     /* the sum of dx (fused) */
        if (so < 0) {
            fprintf(f, "        " FOR_CHAN " b%d[e] = %s;\n", n->id, bn_dx(a, xb));
            break;
        }
        c_chan_sums(f, 1, (const char *[]){"so"}, (const char *[]){"v"}, (const char *[]){"rt_wide8(v)"},
                    util_fmt("const float v = %s;\nb%d[e] = v;", bn_dx(a, xb), n->id),
                    util_fmt("const rt_v8f v = %s;\nrt_st8(b%d + e, v);", c_vec8(bn_dx(a, xb)), n->id));
        fprintf(f, "        b%d[c] = (float)so;\n", so);
        break;
    }
    default:
        diag_ice("emit_nchw: %s is not a channel op", op_text[n->op]);
    }
    fprintf(f, "    }\n");
}

/* running = momentum * batch + (1 - momentum) * running, PyTorch's order of
 * operations; the batch variance made unbiased by M / (M - 1). */
static void running_update(FILE *f, const Plan *p, const Node *n, const char *ind)
{
    int rm = plan_source(p, n->in[0]), rv = plan_source(p, n->in[1]), st = plan_source(p, n->in[3]);
    const char *mom = util_cfloat(n->bn.momentum), *keep = util_cfloat(1.0 - n->bn.momentum);
    fprintf(f, "%sb%d[c] = %s * b%d[c] + %s * b%d[c];\n", ind, rm, mom, st, keep, rm);
    fprintf(f, "%sb%d[c] = %s * (b%d[C + c] * unbias) + %s * b%d[c];\n", ind, rv, mom, st, keep, rv);
}

static int64_t running_channels(const Emit *m, const Node *n) { return ex_node(m, n->in[0])->shape.d[0]; }

/* The batch's elements per channel, M, from the stats' producer. */
static int64_t running_hw(const Emit *m, const Node *n)
{
    const Node *st = ex_node(m, n->in[3]);
    const Shape *x = &ex_node(m, st->in[0])->shape;
    return x->d[2] * x->d[3];
}

/* The statistics' element count per channel: of all ranks' batches when
 * they were taken over all ranks (SyncBatchNorm). */
static void running_count(const Emit *m, const Node *n)
{
    fprintf(m->f, "    const int64_t C = %lld, M = n * (int64_t)%lld%s;\n", (long long)running_channels(m, n),
            (long long)running_hw(m, n), n->bn.sync ? " * e->world" : "");
}

static void c_state(const Emit *m, const Node *n)
{
    FILE *f = m->f;
    running_count(m, n);
    fprintf(f, "    const float unbias = M > 1 ? (float)M / (float)(M - 1) : 1.0f;\n");
    fprintf(f, "    for (int64_t c = 0; c < C; c++) {\n");
    running_update(f, m->p, n, "        ");
    fprintf(f, "    }\n    b%d[0] += 1.0f;\n    (void)b%d;\n", plan_source(m->p, n->in[2]), n->id);
}

/* The windows containing input row h: oh from (h + PH) / SH down while the
 * window still reaches h (same order on both targets). */
static void pool_gather_open(FILE *f, const char *ind)
{
    fprintf(f, "%sfor (int64_t oh = (h + PH) / SH; oh >= 0 && h + PH - oh * SH < KH; oh--)\n", ind);
    fprintf(f, "%s    for (int64_t ow = (w + PW) / SW; ow >= 0 && w + PW - ow * SW < KW; ow--) {\n", ind);
    fprintf(f, "%s        if (oh >= OH || ow >= OW)\n%s            continue;\n", ind, ind);
}

/* Window (oh, ow) of plane xp: its maximum into mx and its index into am,
 * as PyTorch's CPU kernel: the first in-bounds element to start, then any
 * greater one or any NaN (so ties keep the first, a NaN propagates). */
static void pool_max_window(FILE *f, const char *ind, const char *xp)
{
    fprintf(f, "%sfloat mx = -INFINITY;\n%sint64_t am = -1;\n", ind, ind);
    fprintf(f, "%sfor (int64_t ki = 0; ki < KH; ki++) {\n", ind);
    fprintf(f, "%s    const int64_t ih = oh * SH - PH + ki;\n", ind);
    fprintf(f, "%s    if (ih < 0 || ih >= H)\n%s        continue;\n", ind, ind);
    fprintf(f, "%s    for (int64_t kj = 0; kj < KW; kj++) {\n", ind);
    fprintf(f, "%s        const int64_t iw = ow * SW - PW + kj;\n", ind);
    fprintf(f, "%s        if (iw < 0 || iw >= W)\n%s            continue;\n", ind, ind);
    fprintf(f, "%s        const float v = %s[ih * W + iw];\n", ind, xp);
    fprintf(f, "%s        if (v > mx || v != v || am < 0) {\n%s            mx = v;\n%s            am = ih * W + iw;\n",
            ind, ind, ind);
    fprintf(f, "%s        }\n%s    }\n%s}\n", ind, ind, ind);
}

/* The body of one pool element at (plane, oh, ow) or, for a gradient, at
 * input (plane, h, w); writes `dst`. Shared by both targets. */
static void pool_body(const Emit *m, const Node *n, const char *ind, const char *plane)
{
    FILE *f = m->f;
    const Plan *p = m->p;
    int x = plan_source(p, n->in[n->op == OP_MAXPOOL_DX ? 1 : 0]);
    const char *xt = ex_elem_type(m, x);
    switch (n->op) {
    case OP_MAXPOOL:
        fprintf(f, "%sconst %s *xp = b%d + %s * H * W;\n", ind, xt, x, plane);
        pool_max_window(f, ind, "xp");
        fprintf(f, "%sb%d[(%s * OH + oh) * OW + ow] = mx;\n", ind, n->id, plane);
        break;
    case OP_AVGPOOL:
        /* zero padding counts in the divisor (count_include_pad) */
        fprintf(f, "%sconst %s *xp = b%d + %s * H * W;\n%sfloat s = 0.0f;\n", ind, xt, x, plane, ind);
        fprintf(f, "%sfor (int64_t ih = oh * SH - PH; ih < oh * SH - PH + KH; ih++)\n", ind);
        fprintf(f, "%s    for (int64_t iw = ow * SW - PW; iw < ow * SW - PW + KW; iw++)\n", ind);
        fprintf(f, "%s        if (ih >= 0 && ih < H && iw >= 0 && iw < W)\n%s            s += xp[ih * W + iw];\n", ind,
                ind);
        fprintf(f, "%sb%d[(%s * OH + oh) * OW + ow] = s / (float)(KH * KW);\n", ind, n->id, plane);
        break;
    case OP_MAXPOOL_DX: {
        int dy = plan_source(p, n->in[0]);
        char *in2 = util_fmt("%s        ", ind);
        fprintf(f, "%sconst %s *xp = b%d + %s * H * W;\n%sfloat s = 0.0f;\n", ind, xt, x, plane, ind);
        pool_gather_open(f, ind);
        pool_max_window(f, in2, "xp");
        fprintf(f, "%sif (am == h * W + w)\n%s    s += b%d[(%s * OH + oh) * OW + ow];\n", in2, in2, dy, plane);
        fprintf(f, "%s    }\n%sb%d[(%s * H + h) * W + w] = s;\n", ind, ind, n->id, plane);
        break;
    }
    case OP_AVGPOOL_DX: {
        int dy = plan_source(p, n->in[0]);
        fprintf(f, "%sfloat s = 0.0f;\n", ind);
        pool_gather_open(f, ind);
        fprintf(f, "%s        s += b%d[(%s * OH + oh) * OW + ow];\n", ind, dy, plane);
        fprintf(f, "%s    }\n%sb%d[(%s * H + h) * W + w] = s / (float)(KH * KW);\n", ind, ind, n->id, plane);
        break;
    }
    default:
        diag_ice("emit_nchw: %s is not a pool op", op_text[n->op]);
    }
}

static int is_pool_grad(const Node *n) { return n->op == OP_MAXPOOL_DX || n->op == OP_AVGPOOL_DX; }

/* x: the pooled input's shape; y: the pooled output's (ir_pool_io). */
static void pool_shapes(const Emit *m, const Node *n, const Shape **x, const Shape **y) { ir_pool_io(m->p->g, n, x, y); }

/* ---- rule pool-chain: a chain and a pooling, window by window -----------
 *
 * Forward: an elementwise group whose last value x is pooled (batch norm
 * apply + ReLU, then max pool); backward: a pool gradient and the chain
 * consuming it (ReLU's gradient). The windows tile the plane, so walking
 * them visits every element once: each element's chain is evaluated where
 * the pooling reads or writes it (ex_element at (i, j), as every
 * elementwise kernel) and the pooled value or the gradient never makes a
 * round trip through memory. The loops differ per target: a GPU thread
 * runs one window's body (pool_chain_body), element by element; the CPU
 * runs a band of windows and the band's chain as two loops, so that the
 * chain's loop vectorizes (c_pool_chain_fwd, c_pool_chain_bwd). Both pick
 * a window's maximum by the same rule in the same order. */

static int pool_chain_tiles(const Emit *m, const Node *n)
{
    const Shape *x, *y;
    pool_shapes(m, n, &x, &y);
    return ir_pool_tiles(x, y, &n->win);
}

/* The pool node and the shapes it pools from and to. */
static const Node *chain_pool(const Emit *m, const Shape **x, const Shape **y)
{
    const int fwd = ex_pool_of_chain(m);
    const Node *pn = ex_node(m, fwd >= 0 ? fwd : m->gr->anchor);
    pool_shapes(m, pn, x, y);
    return pn;
}

/* CH channels; C is a sample's elements, the row ex_element indexes */
static void chain_consts(FILE *f, const Shape *x, const Shape *y, const Window *w)
{
    fprintf(f, "    const int64_t CH = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld, C = CH * H * W;\n",
            (long long)x->d[1], (long long)x->d[2], (long long)x->d[3], (long long)y->d[2], (long long)y->d[3]);
    fprintf(f, "    const int64_t KH = %d, KW = %d, SH = %d, SW = %d;\n", w->kh, w->kw, w->sh, w->sw);
    fprintf(f, "    (void)KH;\n    (void)KW;\n");   /* the CPU's max-pool gradient unrolls the window */
}

static char *no_row_sum(int red, const char *x)
{
    (void)x;
    diag_ice("emit: sum_rows %%%d in a pool-chain kernel", red);
}

/* Window (oh, ow) of plane pl, sample i, channel jc: a CUDA thread. */
static void pool_chain_body(const Emit *m, const char *ind)
{
    FILE *f = m->f;
    const Shape *x, *y;
    const Node *pn = chain_pool(m, &x, &y);
    const int fwd = ex_pool_of_chain(m) >= 0;
    char *in2 = util_fmt("%s        ", ind);
    fprintf(f, "%sconst int64_t w0 = oh * SH * W + ow * SW;\n", ind);
    if (fwd && pn->op == OP_MAXPOOL)   /* from -inf: the first element, then a greater one or a NaN */
        fprintf(f, "%sfloat mx = -INFINITY;\n", ind);
    else if (fwd)
        fprintf(f, "%sfloat s = 0.0f;\n", ind);
    else if (pn->op == OP_MAXPOOL_DX) {
        /* the window's maximum as pool_max_window picks it: the first
         * element, then any greater one or a NaN */
        fprintf(f, "%sconst %s *xp = b%d + pl * H * W;\n", ind, ex_elem_type(m, plan_source(m->p, pn->in[1])),
                plan_source(m->p, pn->in[1]));
        fprintf(f, "%sfloat mx = xp[w0];\n%sint64_t am = w0;\n", ind, ind);
        fprintf(f, "%sfor (int64_t ki = 0; ki < KH; ki++)\n%s    for (int64_t kj = 0; kj < KW; kj++) {\n", ind, ind);
        fprintf(f, "%sconst float v = xp[w0 + ki * W + kj];\n%sconst int take = (v > mx) | (v != v);\n", in2, in2);
        fprintf(f, "%smx = take ? v : mx;\n%sam = take ? w0 + ki * W + kj : am;\n%s    }\n", in2, in2, ind);
        fprintf(f, "%sconst float g = b%d[(pl * OH + oh) * OW + ow];\n", ind, plan_source(m->p, pn->in[0]));
    } else
        fprintf(f, "%sconst float g = b%d[(pl * OH + oh) * OW + ow] / (float)(KH * KW);\n", ind,
                plan_source(m->p, pn->in[0]));
    fprintf(f, "%sfor (int64_t ki = 0; ki < KH; ki++)\n%s    for (int64_t kj = 0; kj < KW; kj++) {\n", ind, ind);
    fprintf(f, "%sconst int64_t hw = w0 + ki * W + kj, j = jc * H * W + hw;\n", in2);
    if (fwd) {
        ex_element(m, x, -1, NULL, in2, no_row_sum);
        fprintf(f, "%sconst float v = v%d;\n", in2, plan_source(m->p, pn->in[0]));
        if (pn->op == OP_MAXPOOL)
            fprintf(f, "%smx = (v > mx) | (v != v) ? v : mx;\n", in2);
        else
            fprintf(f, "%ss += v;\n", in2);
    } else {
        ex_element(m, x, pn->id, pn->op == OP_MAXPOOL_DX ? "hw == am ? g : 0.0f" : "g", in2, no_row_sum);
        if (plan_uses_outside(m->p, pn->id))
            fprintf(f, "%sb%d[i * C + j] = v%d;\n", in2, pn->id, pn->id);
    }
    fprintf(f, "%s    }\n", ind);
    if (fwd)
        fprintf(f, "%sb%d[(pl * OH + oh) * OW + ow] = %s;\n", ind, pn->id,
                pn->op == OP_MAXPOOL ? "mx" : "s / (float)(KH * KW)");
}

/* The CPU's loops, a band of window rows at a time (the whole plane when
 * it fits in 64 KB): the chain over the band runs in the elementwise
 * kernels' loop, which vectorizes, and the windows in a loop of their
 * own over a local copy of the band; the same values in the same order
 * as the window body. Opens the band loop (o0, o1) and its copy `name`. */
#define CHAIN_BAND_FLOATS 16384
static void c_band_open(FILE *f, const Node *pn, const Shape *x, const Shape *y, const char *name)
{
    int64_t row = pn->win.sh * x->d[3], br = CHAIN_BAND_FLOATS / row;  /* input floats per window row */
    if (br < 1)
        br = 1;
    if (br > y->d[2])
        br = y->d[2];
    fprintf(f, "        for (int64_t o0 = 0; o0 < OH; o0 += %lld) {\n", (long long)br);
    fprintf(f, "            const int64_t o1 = o0 + %lld < OH ? o0 + %lld : OH;\n", (long long)br, (long long)br);
    fprintf(f, "            float %s[%lld];\n", name, (long long)(br * row));
}

/* The band's elements hw, j as ex_element indexes them. */
static void c_band_elements(FILE *f)
{
    fprintf(f, "            for (int64_t hw = o0 * SH * W; hw < o1 * SH * W; hw++) {\n");
    fprintf(f, "                const int64_t j = jc * H * W + hw;\n");
}

/* The band's windows; `at` points at window (oh, ow) in the band's copy. */
static void c_band_windows(FILE *f, const char *at, const char *copy)
{
    fprintf(f, "            for (int64_t oh = o0; oh < o1; oh++)\n");
    fprintf(f, "                for (int64_t ow = 0; ow < OW; ow++) {\n");
    fprintf(f, "                    %s = %s + (oh - o0) * SH * W + ow * SW;\n", at, copy);
}

/* Forward: the chain into the copy xr, then each window pools it. */
static void c_pool_chain_fwd(const Emit *m, const Node *pn, const Shape *x, const Shape *y)
{
    FILE *f = m->f;
    const int mxp = pn->op == OP_MAXPOOL;
    c_band_open(f, pn, x, y, "xr");
    c_band_elements(f);
    ex_element(m, x, -1, NULL, "                ", no_row_sum);
    fprintf(f, "                xr[hw - o0 * SH * W] = v%d;\n            }\n", plan_source(m->p, pn->in[0]));
    c_band_windows(f, "const float *xw", "xr");
    fprintf(f, "                    float a = %s;\n", mxp ? "-INFINITY" : "0.0f");
    fprintf(f, "                    for (int64_t ki = 0; ki < KH; ki++)\n");
    fprintf(f, "                        for (int64_t kj = 0; kj < KW; kj++) {\n");
    fprintf(f, "                            const float v = xw[ki * W + kj];\n");
    fprintf(f, "                            a = %s;\n                        }\n", mxp ? "(v > a) | (v != v) ? v : a" : "a + v");
    fprintf(f, "                    b%d[(pl * OH + oh) * OW + ow] = a%s;\n                }\n        }\n", pn->id,
            mxp ? "" : " / (float)(KH * KW)");
}

/* Backward: each window writes the pool's gradient into the copy gr (max:
 * g at the element pool_max_window picks, the first maximum or a NaN, 0
 * elsewhere; average: g / (KH KW) everywhere), then the chain reads it. */
static void c_pool_chain_bwd(const Emit *m, const Node *pn, const Shape *x, const Shape *y)
{
    FILE *f = m->f;
    const int mxp = pn->op == OP_MAXPOOL_DX;
    const char *g = mxp ? "" : " / (float)(KH * KW)";
    c_band_open(f, pn, x, y, "gr");
    if (mxp)
        fprintf(f, "            const float *xp = b%d + pl * H * W + o0 * SH * W;\n", plan_source(m->p, pn->in[1]));
    c_band_windows(f, "float *gw", "gr");
    fprintf(f, "                    const float g = b%d[(pl * OH + oh) * OW + ow]%s;\n", plan_source(m->p, pn->in[0]), g);
    /* the window's elements unrolled (the windows are small: they tile
     * the plane), selects instead of branches, so that the loop over ow
     * vectorizes: a branch per element mispredicts on every other window */
    const int K = pn->win.kh * pn->win.kw, unroll = K <= 16;
    if (mxp) {
        fprintf(f, "                    const float *xw = xp + (gw - gr);\n");
        fprintf(f, "                    float mx = xw[0];\n                    int am = 0;\n");
        if (unroll)     /* from element 0: comparing it with itself changes nothing */
            for (int k = 1; k < K; k++)
                fprintf(f, "                    { const float v = xw[%d * W + %d]; const int t = (v > mx) | (v != v); "
                        "mx = t ? v : mx; am = t ? %d : am; }\n", k / pn->win.kw, k % pn->win.kw, k);
        else
            fprintf(f, "                    for (int k = 0; k < KH * KW; k++) {\n"
                       "                        const float v = xw[k / KW * W + k %% KW];\n"
                       "                        const int t = (v > mx) | (v != v);\n"
                       "                        mx = t ? v : mx;\n                        am = t ? k : am;\n"
                       "                    }\n");
    }
    const char *val = mxp ? "%s == am ? g : 0.0f" : "g";
    if (unroll)
        for (int k = 0; k < K; k++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", k);
            fprintf(f, "                    gw[%d * W + %d] = ", k / pn->win.kw, k % pn->win.kw);
            fprintf(f, val, idx);
            fprintf(f, ";\n");
        }
    else {
        fprintf(f, "                    for (int k = 0; k < KH * KW; k++)\n                        gw[k / KW * W + k %% KW] = ");
        fprintf(f, val, "k");
        fprintf(f, ";\n");
    }
    fprintf(f, "                }\n");
    c_band_elements(f);
    ex_element(m, x, pn->id, "gr[hw - o0 * SH * W]", "                ", no_row_sum);
    if (plan_uses_outside(m->p, pn->id))
        fprintf(f, "                b%d[i * C + j] = v%d;\n", pn->id, pn->id);
    fprintf(f, "            }\n        }\n");
}

void emit_pool_chain_c(const Emit *m)
{
    FILE *f = m->f;
    const Shape *x, *y;
    const Node *pn = chain_pool(m, &x, &y);
    chain_consts(f, x, y, &pn->win);
    fprintf(f, "    #pragma omp parallel for schedule(static) if (n * CH >= 64)\n");
    fprintf(f, "    for (int64_t pl = 0; pl < n * CH; pl++) {\n");
    fprintf(f, "        const int64_t i = pl / CH, jc = pl %% CH;\n");
    if (ex_pool_of_chain(m) >= 0)
        c_pool_chain_fwd(m, pn, x, y);
    else
        c_pool_chain_bwd(m, pn, x, y);
    fprintf(f, "    }\n");
}

static void c_pool(const Emit *m, const Node *n)
{
    FILE *f = m->f;
    const Shape *x, *y;
    pool_shapes(m, n, &x, &y);
    pool_consts(f, x, y, &n->win);
    int grad = is_pool_grad(n);
    fprintf(f, "    #pragma omp parallel for schedule(static) if (n * C >= 64)\n");
    if (n->op == OP_MAXPOOL_DX) {
        /* each window once: its maximum gets its gradient (a thread owns
         * whole planes, so the scatter has no races) */
        fprintf(f, "    for (int64_t pl = 0; pl < n * C; pl++) {\n");
        fprintf(f, "        const float *xp = b%d + pl * H * W;\n", plan_source(m->p, n->in[1]));
        fprintf(f, "        float *dx = b%d + pl * H * W;\n", n->id);
        fprintf(f, "        memset(dx, 0, sizeof(float) * (size_t)(H * W));\n");
        fprintf(f, "        for (int64_t oh = 0; oh < OH; oh++)\n            for (int64_t ow = 0; ow < OW; ow++) {\n");
        pool_max_window(f, "                ", "xp");
        fprintf(f, "                (void)mx;\n                dx[am] += b%d[(pl * OH + oh) * OW + ow];\n",
                plan_source(m->p, n->in[0]));
        fprintf(f, "            }\n    }\n");
        return;
    }
    fprintf(f, "    for (int64_t pl = 0; pl < n * C; pl++)\n");
    fprintf(f, "        for (int64_t %s = 0; %s < %s; %s++)\n", grad ? "h" : "oh", grad ? "h" : "oh",
            grad ? "H" : "OH", grad ? "h" : "oh");
    fprintf(f, "            for (int64_t %s = 0; %s < %s; %s++) {\n", grad ? "w" : "ow", grad ? "w" : "ow",
            grad ? "W" : "OW", grad ? "w" : "ow");
    pool_body(m, n, "                ", "pl");
    fprintf(f, "            }\n");
}

void emit_nchw_c(const Emit *m)
{
    const Node *n = ex_node(m, m->gr->anchor);
    switch (m->gr->kind) {
    case G_CONV: c_conv(m, n); break;
    case G_CHAN: c_chan(m, n); break;
    case G_POOL:
        /* with the chain after a gradient (rule pool-chain), or a max
         * pool's gradient alone whose windows tile the plane: each window
         * assigns its elements (the gradient at its maximum, 0 elsewhere),
         * no zeroing pass, no bounds checks; the same body, no chain */
        if (m->gr->nnodes > 1 || (n->op == OP_MAXPOOL_DX && pool_chain_tiles(m, n)))
            emit_pool_chain_c(m);
        else
            c_pool(m, n);
        break;
    case G_STATE: c_state(m, n); break;
    default: diag_ice("emit_nchw_c: group %s", m->gr->name);
    }
}

/* ---- CUDA ---------------------------------------------------------------- */

static void cu_grid_stride(FILE *f, const char *total)
{
    fprintf(f, "    const int64_t stride = (int64_t)gridDim.x * blockDim.x;\n");
    fprintf(f, "    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < %s; t += stride) {\n", total);
}

/* Batch-shaped grid over `per_sample` elements of each sample. */
static void cu_batch_grid(rt_cuda_launch *L, int64_t per_sample)
{
    L->gmul[0] = per_sample;
    L->gdiv[0] = THREADS;
}

/* Sums `var` over the block into red_<name>[0] (a fixed-order tree); every
 * thread reads the total into `out`. */
static void cu_block_sum(FILE *f, const char *name, const char *var, const char *out)
{
    fprintf(f, "    red_%s[threadIdx.x] = %s;\n    __syncthreads();\n", name, var);
    fprintf(f, "    for (int half = %d; half > 0; half >>= 1) {\n", THREADS / 2);
    fprintf(f, "        if ((int)threadIdx.x < half)\n            red_%s[threadIdx.x] += red_%s[threadIdx.x + half];\n",
            name, name);
    fprintf(f, "        __syncthreads();\n    }\n");
    fprintf(f, "    const float %s = red_%s[0];\n    __syncthreads();\n", out, name);
}

static void cu_conv(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    FILE *f = m->f;
    ConvGeo c = conv_geo(m, n);
    conv_consts(f, &c);
    switch (n->op) {
    case OP_CONV2D:
        cu_grid_stride(f, "n * O * P");
        fprintf(f, "        const int64_t i = t / (O * P), o = t / P %% O, oh = t %% P / OW, ow = t %% OW, g = o / OG;\n");
        fprintf(f, "        float acc = 0.0f;\n");
        fprintf(f, "        for (int64_t cl = 0; cl < CG; cl++)\n");
        fprintf(f, "            for (int64_t ki = 0; ki < KH; ki++) {\n");
        fprintf(f, "                const int64_t ih = oh * SH - PH + ki * DH;\n");
        fprintf(f, "                if (ih < 0 || ih >= H)\n                    continue;\n");
        fprintf(f, "                for (int64_t kj = 0; kj < KW; kj++) {\n");
        fprintf(f, "                    const int64_t iw = ow * SW - PW + kj * DW;\n");
        fprintf(f, "                    if (iw >= 0 && iw < W)\n");
        fprintf(f, "                        acc += %s * %s;\n",
                ex_round_operand(m, c.x, util_fmt("b%d[((i * C + g * CG + cl) * H + ih) * W + iw]", c.x)),
                ex_round(m, util_fmt("b%d[((o * CG + cl) * KH + ki) * KW + kj]", c.w)));
        fprintf(f, "                }\n            }\n        b%d[t] = %s;\n    }\n", c.y, conv_store(m, ex_round(m, "acc"), "o"));
        cu_batch_grid(L, c.O * c.P);
        break;
    case OP_CONV2D_DX:
        /* each input element gathers from the outputs whose windows hold it */
        cu_grid_stride(f, "n * C * H * W");
        fprintf(f, "        const int64_t i = t / (C * H * W), ch = t / (H * W) %% C, h = t %% (H * W) / W, w = t %% W;\n");
        fprintf(f, "        const int64_t g = ch / CG, cl = ch %% CG;\n        float acc = 0.0f;\n");
        fprintf(f, "        for (int64_t o = g * OG; o < (g + 1) * OG; o++)\n");
        fprintf(f, "            for (int64_t ki = 0; ki < KH; ki++) {\n");
        fprintf(f, "                const int64_t hh = h + PH - ki * DH;\n");
        fprintf(f, "                if (hh < 0 || hh %% SH != 0 || hh / SH >= OH)\n                    continue;\n");
        fprintf(f, "                for (int64_t kj = 0; kj < KW; kj++) {\n");
        fprintf(f, "                    const int64_t ww = w + PW - kj * DW;\n");
        fprintf(f, "                    if (ww < 0 || ww %% SW != 0 || ww / SW >= OW)\n                        continue;\n");
        fprintf(f, "                    acc += %s * %s;\n",
                ex_round_operand(m, c.y, util_fmt("b%d[((i * O + o) * OH + hh / SH) * OW + ww / SW]", c.y)),
                ex_round(m, util_fmt("b%d[((o * CG + cl) * KH + ki) * KW + kj]", c.w)));
        fprintf(f, "                }\n            }\n        b%d[t] = %s;\n    }\n", c.x, ex_round(m, "acc"));
        cu_batch_grid(L, c.C * c.H * c.W);
        break;
    default:
        /* one block per weight, its threads over the batch's output pixels */
        fprintf(f, "    __shared__ float red_dw[%d];\n", THREADS);
        fprintf(f, "    const int64_t wi = blockIdx.x, o = wi / K, cl = wi / (KH * KW) %% CG, ki = wi / KW %% KH, kj = wi %% KW;\n");
        fprintf(f, "    const int64_t ch = o / OG * CG + cl;\n    float acc = 0.0f;\n");
        fprintf(f, "    for (int64_t t = threadIdx.x; t < n * P; t += blockDim.x) {\n");
        fprintf(f, "        const int64_t i = t / P, oh = t %% P / OW, ow = t %% OW;\n");
        fprintf(f, "        const int64_t ih = oh * SH - PH + ki * DH, iw = ow * SW - PW + kj * DW;\n");
        fprintf(f, "        if (ih >= 0 && ih < H && iw >= 0 && iw < W)\n");
        fprintf(f, "            acc += %s * %s;\n", ex_round_operand(m, c.y, util_fmt("b%d[(i * O + o) * P + oh * OW + ow]", c.y)),
                ex_round_operand(m, c.x, util_fmt("b%d[((i * C + ch) * H + ih) * W + iw]", c.x)));
        fprintf(f, "    }\n");
        cu_block_sum(f, "dw", "acc", "total");
        fprintf(f, "    if (threadIdx.x == 0)\n        b%d[wi] = %s;\n", c.w, ex_round(m, "total"));
        L->gfix[0] = (unsigned)(c.O * c.K);
        break;
    }
}

#define CU_FOR_CHAN "for (int64_t t = T0 + threadIdx.x; t < T1; t += blockDim.x) { const int64_t e = (t / HW * C + c) * HW + t %% HW;"

/* ---- channel passes over several blocks a channel (CUDA) -----------------
 * A channel's pass over the batch's N x H x W elements in one block
 * leaves most of a GPU idle (the ConvNet's first block: 16 channels, 16
 * blocks on an H200's 132 SMs). The passes that sum (mean_chan, bn_sqdev,
 * bn_dpart, bn_dw, sum_chan, and bn_dx when the sum of dx is fused: batch
 * norm's and the weight gradient's; none needs a total from its own pass)
 * run S blocks a channel instead (grid C x S),
 * block y on slice y of the channel's elements; each stores its partial
 * sums in fix, and the channel's last block to arrive (a counter in the
 * part of fix the step zeroes) adds them in slice order and writes the
 * results, so they do not depend on the order the blocks ran in (as a
 * split-K GEMM's). S is the scheduler's (sched_gpu.c), from what this
 * file says of the pass. */

/* The sums channel pass grp combines across its slices (0: none, its
 * slices are independent; -1: it cannot be split: the statistics' and the
 * eval plan's copies of a vector), its channels, and the elements of a
 * channel in one sample (H x W). */
int emit_nchw_chan_sums(const Plan *p, int grp, int64_t *channels, int64_t *per_sample)
{
    const Group *gr = &p->groups[grp];
    const Emit m = {NULL, p, gr, grp, 1};
    const Node *n = ex_node(&m, gr->anchor);
    const Shape *x = &ex_node(&m, n->in[chan_x_input(n)])->shape;
    *channels = x->d[1];
    *per_sample = x->d[2] * x->d[3];
    switch (n->op) {
    case OP_SUM_CHAN: case OP_MEAN_CHAN: case OP_BN_SQDEV: return 1;
    case OP_BN_DW: case OP_BN_DPART: return 2;
    case OP_BN_DX: return chan_extra(&m, OP_SUM_CHAN, n->id) >= 0;
    default: return -1;
    }
}

/* A channel pass's block sum of var into the channel's total `out`: the
 * block's sum itself, or with S slices (sched_gpu) out_b,
 * which chan_totals then adds across them. */
static void chan_sum(const Emit *m, const char *name, const char *var, const char *out)
{
    cu_block_sum(m->f, name, var, m->gr->split > 1 ? util_fmt("%s_b", out) : out);
}

static void chan_totals(const Emit *m, int ns, const char *const *out)
{
    FILE *f = m->f;
    const Group *gr = m->gr;
    const int S = gr->split;
    if (S < 2 || ns == 0)
        return;
    fprintf(f, "    /* this slice's sums; the channel's last block adds the %d slices' in order */\n", S);
    fprintf(f, "    float *const ws = e->fix + %lld;\n    __shared__ int last;\n", (long long)gr->wsf_off);
    fprintf(f, "    if (threadIdx.x == 0) {\n");
    for (int q = 0; q < ns; q++)
        fprintf(f, "        ws[(c * %d + blockIdx.y) * %d + %d] = %s_b;\n", S, ns, q, out[q]);
    fprintf(f, "        __threadfence();    /* the partials before the count that publishes them */\n");
    fprintf(f, "        last = atomicAdd(&((unsigned *)(e->fix + %lld))[c], 1u) == %du;   /* zeroed each step */\n",
            (long long)gr->ctr_off, S - 1);
    fprintf(f, "    }\n    __syncthreads();\n    if (!last)\n        return;\n    __threadfence();\n");
    fprintf(f, "    const volatile float *const wv = ws;   /* other blocks' stores: not through L1 */\n");
    for (int q = 0; q < ns; q++) {
        fprintf(f, "    float %s = 0.0f;\n", out[q]);
        fprintf(f, "    for (int z = 0; z < %d; z++)\n        %s += wv[(c * %d + z) * %d + %d];\n", S, out[q], S, ns, q);
    }
}

static void cu_chan(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Plan *p = m->p;
    const Shape *x = &ex_node(m, n->in[chan_x_input(n)])->shape;
    int a = plan_source(p, n->in[0]);
    int xb = n->nin > 1 ? plan_source(p, n->in[1]) : -1;
    L->gfix[0] = (unsigned)x->d[1];
    fprintf(f, "    const int64_t C = %lld, HW = %lld, M = n * HW, c = blockIdx.x;\n    (void)M, (void)HW;\n", (long long)x->d[1],
            (long long)(x->d[2] * x->d[3]));
    const int S = m->gr->split;
    if (S > 1) {    /* block y: slice y of S of the channel's elements */
        fprintf(f, "    const int64_t per = (M + %d) / %d, T0 = per * blockIdx.y, T1 = T0 + per < M ? T0 + per : M;\n",
                S - 1, S);
        L->gfix[1] = (unsigned)S;
        L->ctr_off = m->gr->ctr_off, L->ctr_n = m->gr->ctr_n;
        L->wsf_off = m->gr->wsf_off, L->wsf_n = m->gr->wsf_n;
    } else {
        fprintf(f, "    const int64_t T0 = 0, T1 = M;\n    (void)T0, (void)T1;\n");
    }
    if (n->op == OP_BN_STATS && !p->training) {
        fprintf(f, "    (void)b%d;    /* eval: the input is not looked at */\n", a);
        fprintf(f, "    if (threadIdx.x == 0) {\n        b%d[c] = b%d[c];\n        b%d[C + c] = b%d[c];\n    }\n", n->id,
                plan_source(p, n->in[1]), n->id, plan_source(p, n->in[2]));
        return;
    }
    if (n->op == OP_BN_STATS) {     /* the passes ran before: the statistics from their sums */
        fprintf(f, "    if (threadIdx.x == 0) {\n");
        stats_in_pass(m, n, NULL, "        ");
        fprintf(f, "    }\n");
        return;
    }
    if (n->op != OP_BN_DX)
        fprintf(f, "    __shared__ float red_a[%d];\n    float pa = 0.0f;\n", THREADS);
    if (n->op != OP_SUM_CHAN && n->op != OP_MEAN_CHAN && n->op != OP_BN_SQDEV && n->op != OP_BN_DX)
        fprintf(f, "    __shared__ float red_b[%d];\n    float pb = 0.0f;\n", THREADS);
    switch (n->op) {
    case OP_SUM_CHAN: case OP_MEAN_CHAN:
        fprintf(f, "    " CU_FOR_CHAN " pa += b%d[e]; }\n", a);
        chan_sum(m, "a", "pa", "s");
        chan_totals(m, 1, (const char *[]){"s"});
        fprintf(f, "    if (threadIdx.x == 0)\n        b%d[c] = %s;\n", n->id, n->op == OP_SUM_CHAN ? "s" : chan_mean("s"));
        break;
    case OP_BN_SQDEV:   /* this rank's second pass, about the mean (of all ranks') */
        fprintf(f, "    const float mean = %s;\n", bn_mean(n, xb, ""));
        fprintf(f, "    " CU_FOR_CHAN " const float d = b%d[e] - mean; pa += d * d; }\n", a);
        chan_sum(m, "a", "pa", "q");
        chan_totals(m, 1, (const char *[]){"q"});
        fprintf(f, "    if (threadIdx.x == 0) {\n        const float qm = %s;\n", chan_mean("q"));
        sqdev_results(m, n, "        ");
        fprintf(f, "    }\n");
        break;
    case OP_BN_DX: case OP_BN_DW: case OP_BN_DPART: {
        int st = plan_source(p, n->in[2]);
        fprintf(f, "    %s\n", bn_stats_decl(st, n->bn.eps));
        if (n->op == OP_BN_DX) {
            fprintf(f, "    %s\n", bn_dmeans(n, plan_source(p, n->in[4])));
        } else {
            fprintf(f, "    " CU_FOR_CHAN " pa += b%d[e]; pb += b%d[e] * (%s); }\n", a, a, bn_xhat(xb));
            chan_sum(m, "a", "pa", "sdy");
            chan_sum(m, "b", "pb", "sdyx");
            chan_totals(m, 2, (const char *[]){"sdy", "sdyx"});
            /* the weight and bias gradients are these sums (fused) */
            int dw = chan_extra(m, OP_BN_DW, n->in[0]), db = chan_extra(m, OP_SUM_CHAN, n->in[0]);
            if (dw >= 0)
                fprintf(f, "    if (threadIdx.x == 0)\n        b%d[c] = sdyx;\n", dw);
            if (db >= 0)
                fprintf(f, "    if (threadIdx.x == 0)\n        b%d[c] = sdy;\n", db);
        }
        if (n->op == OP_BN_DW) {
            fprintf(f, "    (void)sdy;\n    if (threadIdx.x == 0)\n        b%d[c] = sdyx;\n", n->id);
            break;
        }
        if (n->op == OP_BN_DPART) {
            fprintf(f, "    if (threadIdx.x == 0) {\n        b%d[c] = %s;\n        b%d[C + c] = %s;\n    }\n", n->id,
                    chan_mean("sdy"), n->id, chan_mean("sdyx"));
            break;
        }
        fprintf(f, "    %s\n", bn_scale_decl(plan_source(p, n->in[3])));
        int so = chan_extra(m, OP_SUM_CHAN, n->id);     /* the sum of dx (fused) */
        if (so < 0) {
            fprintf(f, "    " CU_FOR_CHAN " b%d[e] = %s; }\n", n->id, bn_dx(a, xb));
            break;
        }
        if (n->op == OP_BN_DX)      /* no sums of its own before: the block-sum scratch */
            fprintf(f, "    __shared__ float red_a[%d];\n", THREADS);
        fprintf(f, "    float po = 0.0f;\n    " CU_FOR_CHAN "\n");
        fprintf(f, "        const float v = %s;\n", bn_dx(a, xb));
        fprintf(f, "        b%d[e] = v;\n        po += v;\n    }\n", n->id);
        chan_sum(m, "a", "po", "so");
        chan_totals(m, 1, (const char *[]){"so"});
        fprintf(f, "    if (threadIdx.x == 0)\n        b%d[c] = so;\n", so);
        break;
    }
    default:
        diag_ice("emit_nchw: %s is not a channel op", op_text[n->op]);
    }
}

static void cu_state(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    FILE *f = m->f;
    running_count(m, n);
    fprintf(f, "    const float unbias = M > 1 ? (float)M / (float)(M - 1) : 1.0f;\n");
    fprintf(f, "    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {\n");
    running_update(f, m->p, n, "        ");
    fprintf(f, "    }\n    if (threadIdx.x == 0)\n        b%d[0] += 1.0f;\n", plan_source(m->p, n->in[2]));
    fprintf(f, "    (void)b%d;    /* the node itself: running_mean, updated above */\n", n->id);
    L->gfix[0] = 1;
}

static void cu_pool(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Shape *x, *y;
    pool_shapes(m, n, &x, &y);
    pool_consts(f, x, y, &n->win);
    int grad = is_pool_grad(n);
    if (grad) {
        cu_grid_stride(f, "n * C * H * W");
        fprintf(f, "        const int64_t pl = t / (H * W), h = t %% (H * W) / W, w = t %% W;\n");
    } else {
        cu_grid_stride(f, "n * C * OH * OW");
        fprintf(f, "        const int64_t pl = t / (OH * OW), oh = t %% (OH * OW) / OW, ow = t %% OW;\n");
    }
    pool_body(m, n, "        ", "pl");
    fprintf(f, "    }\n");
    cu_batch_grid(L, ir_row_elems(grad ? x : y));
}

/* rule pool-chain: a thread per window */
void emit_pool_chain_cuda(const Emit *m, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Shape *x, *y;
    const Node *pn = chain_pool(m, &x, &y);
    chain_consts(f, x, y, &pn->win);
    cu_grid_stride(f, "n * CH * OH * OW");
    fprintf(f, "        const int64_t pl = t / (OH * OW), oh = t %% (OH * OW) / OW, ow = t %% OW;\n");
    fprintf(f, "        const int64_t i = pl / CH, jc = pl %% CH;\n");
    pool_chain_body(m, "        ");
    fprintf(f, "    }\n");
    cu_batch_grid(L, ir_row_elems(y));
}

void emit_nchw_cuda(const Emit *m, rt_cuda_launch *L)
{
    const Node *n = ex_node(m, m->gr->anchor);
    switch (m->gr->kind) {
    case G_CONV: cu_conv(m, n, L); break;
    case G_CHAN: cu_chan(m, n, L); break;
    case G_POOL:
        if (m->gr->nnodes > 1)
            emit_pool_chain_cuda(m, L);
        else
            cu_pool(m, n, L);
        break;
    case G_STATE: cu_state(m, n, L); break;
    default: diag_ice("emit_nchw_cuda: group %s", m->gr->name);
    }
}
