/* emit_norm.c: the per-sample normalizations over a row [N, F] (K_NORM):
 * softmax, log_softmax, layer_norm and their gradients, for both targets.
 *
 * Each op is a few reductions over its row (a maximum or a sum, each
 * naming a scalar the next ones and the result may use) and then one
 * result per column, written once here as text over `a[j]` and `b[j]`
 * (the row of the first and second operand). The targets supply the
 * loops: on the CPU a thread per row, sums in double (as batch norm's);
 * on the GPU a block per row, float block sums in a fixed-order tree
 * (deterministic). The results are stored unrounded under bf16 / fp16:
 * autocast runs these ops in float. */
#include <string.h>

#include "cddpc.h"

#define THREADS 256

/* One reduction over the row: acc = max or sum of term over j; then, a
 * declaration of what follows from it ($e: the node's eps). */
typedef struct NormPass {
    const char *acc;
    int is_max;
    const char *term, *then;
} NormPass;

typedef struct NormMath {
    Op op;
    NormPass pass[4];
    int npass;
    const char *out;        /* the result at column j */
} NormMath;

/* a: the first operand's row (x, or dy for the gradients); b: the second
 * (the forward's output y, or layer_norm's input x). As torch: softmax
 * subtracts the row's maximum first, log_softmax is x - max - log(sum),
 * layer_norm's variance is the biased one about the mean (two passes). */
static const NormMath norm_math[] = {
    {OP_SOFTMAX, {{"mx", 1, "a[j]", NULL}, {"se", 0, "expf(a[j] - mx)", NULL}}, 2, "expf(a[j] - mx) / se"},
    {OP_LOG_SOFTMAX, {{"mx", 1, "a[j]", NULL}, {"se", 0, "expf(a[j] - mx)", "const float lse = mx + logf(se);"}}, 2,
     "a[j] - lse"},
    /* dx = y (dy - sum(dy y)) */
    {OP_SOFTMAX_GRAD, {{"s", 0, "a[j] * b[j]", NULL}}, 1, "b[j] * (a[j] - s)"},
    /* dx = dy - exp(y) sum(dy) */
    {OP_LOG_SOFTMAX_GRAD, {{"s", 0, "a[j]", NULL}}, 1, "a[j] - expf(b[j]) * s"},
    {OP_LAYER_NORM,
     {{"s", 0, "a[j]", "const float mean = s / (float)C;"},
      {"q", 0, "(a[j] - mean) * (a[j] - mean)", "const float rstd = 1.0f / sqrtf(q / (float)C + $e);"}},
     2, "(a[j] - mean) * rstd"},
    /* dx = rstd (dy - mean(dy) - xhat mean(dy xhat)), xhat = (x - mean) rstd */
    /* copies: no reductions (CA: a's columns, OFF: the slice's first) */
    {OP_CAT, {{0}}, 0, "j < CA ? a[j] : b[j - CA]"},
    {OP_SLICE, {{0}}, 0, "a[j + OFF]"},
    {OP_LAYER_NORM_DX,
     {{"s", 0, "b[j]", "const float mean = s / (float)C;"},
      {"q", 0, "(b[j] - mean) * (b[j] - mean)", "const float rstd = 1.0f / sqrtf(q / (float)C + $e);"},
      {"sg", 0, "a[j]", NULL},
      {"sgx", 0, "a[j] * ((b[j] - mean) * rstd)", NULL}},
     4, "rstd * (a[j] - sg / (float)C - (b[j] - mean) * rstd * (sgx / (float)C))"},
};

static const NormMath *math_of(const Node *n)
{
    for (size_t i = 0; i < sizeof norm_math / sizeof *norm_math; i++)
        if (norm_math[i].op == n->op)
            return &norm_math[i];
    diag_ice("emit_norm: %s is not a normalization", op_text[n->op]);
}

/* `then` with $e replaced by the node's eps as a float literal */
static char *then_text(const Node *n, const char *then)
{
    const char *at = strstr(then, "$e");
    if (!at)
        return util_strdup(then);
    return util_fmt("%.*s%s%s", (int)(at - then), then, util_cfloat(n->bn.eps), at + 2);
}

/* The row's operands: a (in[0]) and b (in[1] when the op has one), and y;
 * C, CA, CB their columns (all one but for cat and slice). */
static void row_pointers(const Emit *m, const Node *n, const char *ind, const char *i)
{
    FILE *f = m->f;
    const int a = plan_source(m->p, n->in[0]), b = n->nin > 1 ? plan_source(m->p, n->in[1]) : -1;
    fprintf(f, "%sconst %s *const a = b%d + %s * CA;\n", ind, ex_elem_type(m, a), a, i);
    if (b >= 0)
        fprintf(f, "%sconst %s *const b = b%d + %s * CB;\n", ind, ex_elem_type(m, b), b, i);
    fprintf(f, "%s%s *const y = b%d + %s * C;\n", ind, ex_elem_type(m, n->id), n->id, i);
}

/* a row's elements: a sample's, or a part of it where the batch is
 * merged with the rows of [N, T, F] (x.view(-1, F), N*T rows) */
static int64_t cols_of(const Emit *m, int id)
{
    const Shape *s = &ex_node(m, id)->shape;
    return ir_row_elems(s) / ir_batch_mul(s->d[0]);
}

static void row_consts(const Emit *m, const Node *n, const char *extra)
{
    fprintf(m->f, "    const int64_t R = %s, C = %lld, CA = %lld", ex_dim(n->shape.d[0]), (long long)cols_of(m, n->id),
            (long long)cols_of(m, n->in[0]));
    if (n->nin > 1)
        fprintf(m->f, ", CB = %lld", (long long)cols_of(m, n->in[1]));
    if (n->op == OP_SLICE)
        fprintf(m->f, ", OFF = %lld", (long long)n->slice.off);
    fprintf(m->f, "%s;\n", extra);
}

void emit_norm_c(const Emit *m)
{
    FILE *f = m->f;
    const Node *n = ex_node(m, m->gr->anchor);
    const NormMath *nm = math_of(n);
    row_consts(m, n, "");
    fprintf(f, "    #pragma omp parallel for schedule(static) if (R * C >= 65536)\n");
    fprintf(f, "    for (int64_t i = 0; i < R; i++) {\n");
    row_pointers(m, n, "        ", "i");
    if (n->op == OP_SOFTMAX) {
        /* the exps stored as summed, then scaled: one expf an element (the
         * same values as recomputing them) */
        fprintf(f, "        float mx = -INFINITY;\n        for (int64_t j = 0; j < C; j++)\n"
                   "            mx = a[j] > mx ? a[j] : mx;\n");
        fprintf(f, "        double se_d = 0.0;\n        for (int64_t j = 0; j < C; j++) {\n"
                   "            const float t_ = expf(a[j] - mx);\n            y[j] = t_;\n"
                   "            se_d += (double)t_;\n        }\n");
        fprintf(f, "        const float se = (float)se_d;\n        for (int64_t j = 0; j < C; j++)\n"
                   "            y[j] = y[j] / se;\n    }\n");
        return;
    }
    for (int k = 0; k < nm->npass; k++) {
        const NormPass *ps = &nm->pass[k];
        if (ps->is_max) {
            fprintf(f, "        float %s = -INFINITY;\n", ps->acc);
            fprintf(f, "        for (int64_t j = 0; j < C; j++)\n            %s = a[j] > %s ? a[j] : %s;\n", ps->acc,
                    ps->acc, ps->acc);
        } else {
            /* eight running sums (j mod 8), added in a fixed tree: eight
             * chains of dependent adds instead of one (a row's sum was
             * the latency of C double adds), the same order every run */
            fprintf(f, "        double %s_d[8] = {0};\n", ps->acc);
            fprintf(f, "        for (int64_t j = 0; j < C; j++)\n            %s_d[j & 7] += (double)(%s);\n", ps->acc,
                    ps->term);
            fprintf(f, "        const float %s = (float)(((%s_d[0] + %s_d[1]) + (%s_d[2] + %s_d[3])) + ((%s_d[4] + %s_d[5]) + "
                       "(%s_d[6] + %s_d[7])));\n", ps->acc, ps->acc, ps->acc, ps->acc, ps->acc, ps->acc, ps->acc,
                    ps->acc, ps->acc);
        }
        if (ps->then)
            fprintf(f, "        %s\n", then_text(n, ps->then));
    }
    fprintf(f, "        for (int64_t j = 0; j < C; j++)\n            y[j] = %s;\n    }\n", nm->out);
}

/* Block reduction of each thread's `part` into `out` (every thread reads
 * it): a fixed-order tree over the block's shared array red_<acc>. */
static void cu_block_reduce(FILE *f, const NormPass *ps)
{
    const char *a = ps->acc;
    fprintf(f, "    red_%s[threadIdx.x] = p_%s;\n    __syncthreads();\n", a, a);
    fprintf(f, "    for (int half = %d; half > 0; half >>= 1) {\n", THREADS / 2);
    fprintf(f, "        if ((int)threadIdx.x < half)\n");
    if (ps->is_max)
        fprintf(f, "            red_%s[threadIdx.x] = fmaxf(red_%s[threadIdx.x], red_%s[threadIdx.x + half]);\n", a, a,
                a);
    else
        fprintf(f, "            red_%s[threadIdx.x] += red_%s[threadIdx.x + half];\n", a, a);
    fprintf(f, "        __syncthreads();\n    }\n");
    fprintf(f, "    const float %s = red_%s[0];\n", a, a);
}

void emit_norm_cuda(const Emit *m, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Node *n = ex_node(m, m->gr->anchor);
    const NormMath *nm = math_of(n);
    row_consts(m, n, ", i = blockIdx.x");
    fprintf(f, "    if (i >= R)\n        return;    /* uniform per block, before any barrier */\n");
    row_pointers(m, n, "    ", "i");
    for (int k = 0; k < nm->npass; k++) {
        const NormPass *ps = &nm->pass[k];
        fprintf(f, "    __shared__ float red_%s[%d];\n", ps->acc, THREADS);
        if (ps->is_max)
            fprintf(f, "    float p_%s = -INFINITY;\n    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)\n"
                    "        p_%s = fmaxf(p_%s, %s);\n", ps->acc, ps->acc, ps->acc, ps->term);
        else
            fprintf(f, "    float p_%s = 0.0f;\n    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)\n"
                    "        p_%s += %s;\n", ps->acc, ps->acc, ps->term);
        cu_block_reduce(f, ps);
        if (ps->then)
            fprintf(f, "    %s\n", then_text(n, ps->then));
    }
    fprintf(f, "    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)\n        y[j] = %s;\n", nm->out);
    /* a block per row, for the largest batch (blocks past R return) */
    L->gmul[0] = ir_batch_mul(n->shape.d[0]);
    L->gdiv[0] = 1;
}
