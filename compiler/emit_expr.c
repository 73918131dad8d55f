/* emit_expr.c: what the C and CUDA emitters share. Both index buffers
 * through the same rt_exec fields with the same memory plan, and both
 * evaluate a group's elementwise nodes one element at a time as v<id>
 * locals at (i, j) of a [R, C] iteration space; only the loops around
 * that code differ per target. */
#include <stdint.h>
#include <string.h>

#include "cddpc.h"
#include "cddprt.h"         /* RT_PREC_* */

const Node *ex_node(const Emit *m, int id) { return m->p->g->n[id]; }
int ex_in_group(const Emit *m, int id) { return m->p->group_of[id] == m->grp; }

char *ex_dim(int64_t d)
{
    return d == DIM_N ? util_strdup("n") : d < 0 ? util_fmt("(n * %lld)", (long long)-d) : util_fmt("%lld", (long long)d);
}

/* 16-bit values (Buf.h16) are the CUDA prelude's rt_bf16s / rt_fp16s,
 * which read as float and store a float, so a kernel's text is the same
 * whatever its buffers hold; stat slots are double. */
const char *ex_elem_type(const Emit *m, int id)
{
    const Buf *b = &m->p->buf[id];
    if (ex_node(m, id)->dt == DT_I32)
        return "int32_t";
    if (m->cuda && b->h16)
        return m->p->g->prec == RT_PREC_BF16 ? "rt_bf16s" : "rt_fp16s";
    return b->cls == B_STAT ? "double" : "float";
}

/* C expression for the base address of a node's buffer. */
char *ex_addr(const Emit *m, int id)
{
    const Buf *b = &m->p->buf[id];
    const char *ty = ex_elem_type(m, id);
    switch (b->cls) {
    case B_ACT: return util_fmt("((%s *)(e->act + (int64_t)%lld * e->nmax))", ty, (long long)b->off);
    case B_FIX: return util_fmt("(e->fix + %lld)", (long long)b->off);
    case B_PARAM: return util_fmt("(e->param + %lld)", (long long)b->off);
    case B_GRAD: return util_fmt("(e->grad + %lld)", (long long)b->off);
    case B_STAT: return util_fmt("(e->stat + %lld)", (long long)b->off);
    case B_NONE: break;
    }
    diag_ice("emit: %%%d (%s) has no buffer", id, op_text[ex_node(m, id)->op]);
}

/* A GEMM group as up to three views, each emitted as its kind is: the
 * batch's gather before the product (rule data-prologue: data, a G_DATA
 * group), the GEMM with its epilogue (gemm), and the row ops with their
 * sums after it (rule row-tail: tail, a G_ROW group anchored at the row
 * op, reading the rows the GEMM stored). A view with no node is empty. */
void ex_gemm_parts(const Emit *m, GemmParts *v)
{
    const Group *gr = m->gr;
    Group *part[3] = {&v->data, &v->gemm, &v->tail};
    for (int k = 0; k < 3; k++) {
        *part[k] = *gr;
        part[k]->nodes = util_alloc(sizeof(int) * (size_t)gr->nnodes);
        part[k]->nnodes = 0;
    }
    for (int k = 0; k < gr->nnodes; k++) {
        const int id = gr->nodes[k];
        Group *in = op_kind[ex_node(m, id)->op] == K_DATA ? &v->data : plan_in_row_tail(m->p, id) ? &v->tail : &v->gemm;
        in->nodes[in->nnodes++] = id;
    }
    v->data.kind = G_DATA;
    v->data.anchor = -1;
    v->tail.kind = G_ROW;
    v->tail.anchor = gr->row_anchor;
    v->tail.row_anchor = -1;
}

/* Declares b<id> for every buffer the group touches. */
void ex_declare_buffers(const Emit *m)
{
    const Group *gr = m->gr;
    IdSet seen = {0};
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = ex_node(m, gr->nodes[k]);
        for (int j = -1; j < plan_nin(m->p, n); j++) {
            int id = j < 0 ? n->id : plan_source(m->p, n->in[j]);
            if (m->p->buf[id].cls == B_NONE || (j >= 0 && ex_in_group(m, id) && !plan_uses_outside(m->p, id)))
                continue;
            if (j < 0 && !plan_uses_outside(m->p, id) && gr->gemm_out != id)
                continue;
            if (!util_set_add(&seen, id))
                continue;
            fprintf(m->f, "    %s *const b%d = %s;\n", ex_elem_type(m, id), id, ex_addr(m, id));
        }
    }
    /* each dropout's stream key, once per kernel (dropout_rng.h); each
     * torch.tensor's values; the loss scale (the element loops name their
     * index e) */
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = ex_node(m, gr->nodes[k]);
        if (n->op == OP_T_LOSS_SCALE)
            fprintf(m->f, "    const float ls%d = e->scale;\n", n->id);
        if (n->op == OP_T_TABLE) {
            fprintf(m->f, "    const float tb%d[%lld] = {", n->id, (long long)n->ten.ntable);
            for (int64_t j = 0; j < n->ten.ntable; j++)
                fprintf(m->f, "%s%s", j ? (j % 8 ? ", " : ",\n        ") : "", util_cfloat(n->ten.table[j]));
            fputs("};\n", m->f);
        }
        if (n->op == OP_DROPOUT || n->op == OP_DROPOUT_GRAD || n->op == OP_T_RAND || n->op == OP_T_RANDN)
            fprintf(m->f, "    const unsigned long long dk%d = cddp_drop_key(e->seed, e->rank, (long long)e->step, %d);\n",
                    n->id, n->op == OP_T_RAND || n->op == OP_T_RANDN ? n->ten.key : n->drop.key);
    }
}

int ex_act_io(const Emit *m, int64_t *out)
{
    const Group *gr = m->gr;
    int n = 0;
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *nd = ex_node(m, gr->nodes[k]);
        for (int j = -1; j < plan_nin(m->p, nd); j++) {
            const int id = j < 0 ? nd->id : plan_source(m->p, nd->in[j]);
            const Buf *b = &m->p->buf[id];
            if (b->cls != B_ACT || (j >= 0 && ex_in_group(m, id) && !plan_uses_outside(m->p, id)))
                continue;
            if (j < 0 && !plan_uses_outside(m->p, id) && gr->gemm_out != id)
                continue;
            const int64_t fl = (j < 0 ? RT_ACT_WRITE : RT_ACT_READ) | (b->h16 ? RT_ACT_16 : 0);
            int at = 0;
            while (at < n && out[RT_ACT_FIELDS * at] != b->off)
                at++;
            if (at == n) {
                int64_t *e = out + RT_ACT_FIELDS * n++;
                e[0] = b->off, e[1] = b->size, e[2] = ir_row_elems(&ex_node(m, id)->shape) + ir_extra_elems(ex_node(m, id)), e[3] = 0;
            }
            out[RT_ACT_FIELDS * at + 3] |= fl;
        }
    }
    return n;
}

/* Operand x of a node inside a loop over [R, C] at (i, j). */
char *ex_operand(const Emit *m, int x, const Shape *space)
{
    if (ex_in_group(m, x))
        return util_fmt("v%d", x);
    const Shape *s = &ex_node(m, x)->shape;
    int src = plan_source(m->p, x);
    if (ex_in_group(m, src))    /* a view of the group's value (fuse.c: through a view) is that value */
        return util_fmt("v%d", src);
    /* same elements in the same row-major order (a view counts) */
    if (ir_batched(s) == ir_batched(space) && ir_row_elems(s) == ir_row_elems(space))
        return util_fmt("b%d[i * C + j]", src);
    if (s->rank == 1 && space->rank == 2 && s->d[0] == space->d[1])
        return util_fmt("b%d[j]", src);
    /* a column vector shaped as a sample's row ([C, H, W] over [N, C*H*W]) */
    if (!ir_batched(s) && space->rank == 2 && ir_numel(s, 1) == space->d[1])
        return util_fmt("b%d[j]", src);
    /* a per-channel vector over [N, C, H, W]: j runs over C*H*W, and the
     * loops over an image space define jc = j / (H*W) (ex_chan_index) */
    if (s->rank == 1 && space->rank == 4 && s->d[0] == space->d[1])
        return util_fmt("b%d[jc]", src);
    diag_ice("emit: cannot broadcast %s into %s", ir_shape_str(s), ir_shape_str(space));
}

/* bn_apply: the statistics are indexed per channel, not broadcast; as
 * PyTorch, invstd = 1/sqrt(var + eps), (x - mean) * invstd * w + b */
static char *bn_apply_expr(const Emit *m, const Node *n, const Shape *space)
{
    const Shape *x = &ex_node(m, n->in[0])->shape;
    int st = plan_source(m->p, n->in[1]);
    const char *c = "jc";
    return util_fmt("(%s - b%d[%s]) * (1.0f / sqrtf(b%d[%lld + %s] + %s)) * %s + %s", ex_operand(m, n->in[0], space),
                    st, c, st, (long long)x->d[1], c, util_cfloat(n->bn.eps), ex_operand(m, n->in[2], space),
                    ex_operand(m, n->in[3], space));
}

/* An op's FORMULA (ops.def) at the element: $0..$4 the operands, @1
 * operand 1 rounded to the plan's precision, $p / $s dropout's p and
 * 1/(1-p) as float literals, $a / $b an activation's parameters as float
 * literals, $k the node's id. */
/* cross_entropy(label_smoothing = e): the target is (1 - e) one-hot + e / C,
 * so loss = lse - (1 - e) x[y] - e sx / C (sx: the row's sum of logits,
 * which the targets then compute) and the gradient subtracts e / C. The
 * table's formulas are the e = 0 case, whose text stays as it was. */
static const char *smoothed(const Node *n)
{
    if (n->op == OP_CE_LOSS)
        return util_fmt("lse - %s * x[y] - %s * sx / (float)C", util_cfloat((float)(1.0 - n->smooth)),
                        util_cfloat((float)n->smooth));
    return util_fmt("(expf(x[j] - lse) - (j == y ? %s : 0.0f) - %s / (float)C) * scale$k",
                    util_cfloat((float)(1.0 - n->smooth)), util_cfloat((float)n->smooth));
}

int ex_float_targets(const Emit *m)
{
    const Node *a = ex_node(m, m->gr->anchor);
    return ex_node(m, plan_source(m->p, a->in[1]))->dt == DT_F32;
}

/* cross_entropy(weight = w): sample i's loss is w[y] (lse - x[y]), with
 * smoothing e (1 - e) w[y] (lse - x[y]) + e / C sum_c w_c (lse - x_c) =
 * ... + e / C (W lse - swx), W the weights' sum, swx the row's sum of w_c
 * x_c (the row kernels compute it, and sw: the batch's sum of w[y]); its
 * gradient w[y] (1 - e) (p_j - [j = y]) + e / C (W p_j - w_j), p the
 * softmax. Under reduction mean both are divided by sw, torch's weighted
 * mean (its nll_loss and its label smoothing alike); the per-sample losses
 * are stored times n / sw, so that the batch's mean is torch's loss. */
static const char *weighted(const Node *n)
{
    double W = 0;
    for (int k = 0; k < n->nw; k++)
        W += n->w[k];
    const char *e = util_cfloat((float)n->smooth), *e1 = util_cfloat((float)(1.0 - n->smooth));
    const char *Wl = util_cfloat((float)W);
    if (n->op == OP_CE_LOSS)
        return n->smooth ? util_fmt("%s * cw[y] * (lse - x[y]) + %s / (float)C * (%s * lse - swx)", e1, e, Wl)
                         : "cw[y] * (lse - x[y])";
    return n->smooth ? util_fmt("(%s * cw[y] * (expf(x[j] - lse) - (j == y ? 1.0f : 0.0f)) + %s / (float)C * (%s * "
                                "expf(x[j] - lse) - cw[j])) * scale$k", e1, e, Wl)
                     : "cw[y] * (expf(x[j] - lse) - (j == y ? 1.0f : 0.0f)) * scale$k";
}

const Node *ex_class_weights(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *n = ex_node(m, m->gr->nodes[k]);
        if ((n->op == OP_CE_LOSS || n->op == OP_CE_GRAD) && n->nw)
            return n;
    }
    return NULL;
}

void ex_class_weights_decl(const Emit *m, const char *ind)
{
    const Node *n = ex_class_weights(m);
    fprintf(m->f, "%sconst float cw[%d] = {", ind, n->nw);
    for (int k = 0; k < n->nw; k++)
        fprintf(m->f, "%s%s", k ? ", " : "", util_cfloat((float)n->w[k]));
    fprintf(m->f, "};\n");
}

/* The batch's label sums a class loss's mean divides by: sw, the counted
 * targets' weights (1 each without cross_entropy(weight)), which the
 * gradient's mean divides by; sc, the targets counted, which a weighted
 * loss's stored values are scaled by when the rows are not the count.
 * Bit 1: the group reads sw, bit 2: sc. */
int ex_label_sums(const Emit *m)
{
    int need = 0;
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *n = ex_node(m, m->gr->nodes[k]);
        if (n->op == OP_CE_GRAD && n->red == RED_MEAN && (n->nw || n->counts))
            need |= 1;
        if (n->op == OP_CE_LOSS && n->red == RED_MEAN && n->nw)
            need |= n->counts ? 3 : 1;
    }
    return need;
}

/* whether label y counts (C text), for a node of the loss */
static char *counted(const Node *n, const char *y)
{
    return n->ignore_on ? util_fmt("%s != %lld", y, (long long)n->ignore) : util_strdup("1");
}

/* The statements adding label y to the sums (ex_label_sums). */
char *ex_label_sums_add(const Emit *m, const char *y)
{
    const Node *n = NULL;
    for (int k = 0; k < m->gr->nnodes && !n; k++) {
        const Node *c = ex_node(m, m->gr->nodes[k]);
        if (c->op == OP_CE_LOSS || c->op == OP_CE_GRAD)
            n = c;
    }
    const int need = ex_label_sums(m);
    char *add = util_fmt("sw += %s;%s", n->nw ? util_fmt("cw[%s]", y) : "1.0f", need & 2 ? " sc += 1.0f;" : "");
    return n->ignore_on ? util_fmt("if (%s) { %s }", counted(n, y), add) : add;
}

/* whether a row op of the group reads the row's label y (COUNTED alone,
 * without ignore_index, does not) */
int ex_reads_label(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *c = ex_node(m, m->gr->nodes[k]);
        if (c->op == OP_CE_LOSS || c->op == OP_CE_GRAD || c->op == OP_CORRECT || (c->op == OP_COUNTED && c->ignore_on))
            return 1;
    }
    return 0;
}

/* every row counts 1 (no weights, no ignore_index): the sums are the rows */
int ex_label_sums_rows(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *c = ex_node(m, m->gr->nodes[k]);
        if ((c->op == OP_CE_LOSS || c->op == OP_CE_GRAD) && (c->nw || c->ignore_on))
            return 0;
    }
    return 1;
}

int ex_smoothing(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *n = ex_node(m, m->gr->nodes[k]);
        if ((n->op == OP_CE_LOSS || n->op == OP_CE_GRAD) && n->smooth)
            return 1;
    }
    return 0;
}

/* The loads formula() names: operand k of node n read outside the group
 * is held in a{n}_{k}. GCC 12 at -O3 with AVX turns a load that only one
 * arm of a ?: reads (relu_grad's "$1 > 0 ? $0 : 0") into masked loads, and
 * for an unrolled [R, C] loop pairs two vectors' loads with one vector's
 * mask: half the gradient lost (tests/ir/vector_select.sh). A load made
 * before the select is a plain load and a blend. */
static int named_load(const Emit *m, const Node *n, int k)
{
    return n->op != OP_BN_APPLY && op_kind[n->op] == K_EW && !ex_in_group(m, n->in[k]);
}

static void load_operands(const Emit *m, const Node *n, const Shape *space, const char *ind)
{
    const char *fm = op_formula[n->op];
    for (int k = 0; k < n->nin; k++) {
        char ph[3] = {'$', (char)('0' + k), 0}, at[3] = {'@', (char)('0' + k), 0};
        if (named_load(m, n, k) && fm && (strstr(fm, ph) || strstr(fm, at)))
            fprintf(m->f, "%sconst float a%d_%d = %s;\n", ind, n->id, k, ex_operand(m, n->in[k], space));
    }
}

/* s with every `from` replaced by `to` */
static char *replace_all(const char *s, const char *from, const char *to)
{
    char *out = util_strdup("");
    for (const char *hit; (hit = strstr(s, from)); s = hit + strlen(from))
        out = util_fmt("%s%.*s%s", out, (int)(hit - s), s, to);
    return util_fmt("%s%s", out, s);
}

int ex_uses_fast_math(Op op)
{
    return op == OP_GELU || op == OP_GELU_GRAD || ir_is_attention(op) || ir_is_recurrent(op);
}

const char *ex_fast_math_prelude(void)
{
    /* Vectorizable erf and exp for the C kernels (libm's are calls a loop
     * cannot vectorize: GELU's erff was a quarter of a transformer's CPU
     * step). cddp_expf: Cephes' expf, n = round(x / ln 2), a degree-5
     * polynomial of the rest, times 2^n in two factors (no overflow before
     * inf), 0 below the smallest normal's exponent, NaN kept; x clamped
     * first so that n converts (an infinity or NaN to int is undefined:
     * UBSan caught -inf's masked scores), by comparisons: fminf and fmaxf
     * keep NaN's rules, so GCC calls libm's and the loop does not
     * vectorize; within 1e-7 relative.
     * cddp_erff: Abramowitz and Stegun 7.1.26, the formula PyTorch's
     * vectorized CPU erf computes (GELU's), within 3e-7 absolute. The same
     * code runs scalar and vector, so an element's value does not depend on
     * where the loop's vector part ends. */
    return "static inline float cddp_expf(float x)\n{\n"
           "    const float xc = x > -88.0f ? (x < 88.5f ? x : 88.5f) : -88.0f;   /* n finite and in [-127, 128] */\n"
           "    const float n = rintf(xc * 1.44269504088896341f);\n"
           "    float r = fmaf(n, -0.693359375f, xc);\n"
           "    r = fmaf(n, 2.12194440e-4f, r);\n"
           "    float p = 1.9875691500e-4f;\n"
           "    p = fmaf(p, r, 1.3981999507e-3f);\n"
           "    p = fmaf(p, r, 8.3334519073e-3f);\n"
           "    p = fmaf(p, r, 4.1665795894e-2f);\n"
           "    p = fmaf(p, r, 1.6666665459e-1f);\n"
           "    p = fmaf(p, r, 5.0000001201e-1f);\n"
           "    const float y = fmaf(p * r, r, r) + 1.0f;\n"
           "    const int32_t h = (int32_t)n / 2;\n"
           "    const int32_t b1 = (h + 127) << 23, b2 = ((int32_t)n - h + 127) << 23;\n"
           "    float s1, s2;\n"
           "    memcpy(&s1, &b1, 4);\n"
           "    memcpy(&s2, &b2, 4);\n"
           "    return x != x ? x : x < -87.3365447f ? 0.0f : x > 88.7228391f ? INFINITY : y * s1 * s2;\n}\n"
           "static inline float cddp_erff(float x)\n{\n"
           "    const float a = fabsf(x);\n"
           "    const float t = 1.0f / fmaf(0.3275911f, a, 1.0f);\n"
           "    float r = fmaf(1.061405429f, t, -1.453152027f);\n"
           "    r = fmaf(r, t, 1.421413741f);\n"
           "    r = fmaf(r, t, -0.284496736f);\n"
           "    r = fmaf(r, t, 0.254829592f);\n"
           "    return copysignf(1.0f - r * t * cddp_expf(-a * a), x);\n}\n"
           /* the recurrences' gates: Cephes' tanhf (a degree-5 odd
            * polynomial below 0.625, 1 - 2 / (e^2|x| + 1) above, both
            * computed so the loop vectorizes), and the logistic function
            * as PyTorch writes it, 1 / (1 + e^-x) */
           "static inline float cddp_tanhf(float x)\n{\n"
           "    const float a = fabsf(x), z = x * x;\n"
           "    const float big = 1.0f - 2.0f / (cddp_expf(2.0f * a) + 1.0f);\n"
           "    float p = fmaf(-5.70498872745e-3f, z, 2.06390887954e-2f);\n"
           "    p = fmaf(p, z, -5.37397155531e-2f);\n"
           "    p = fmaf(p, z, 1.33314422036e-1f);\n"
           "    p = fmaf(p, z, -3.33332819422e-1f);\n"
           "    const float small = fmaf(p * z, x, x);\n"
           "    return a > 0.625f ? copysignf(big, x) : small;\n}\n"
           "static inline float cddp_sigmoidf(float x) { return 1.0f / (1.0f + cddp_expf(-x)); }\n";
}

static char *formula(const Emit *m, const Node *n, const Shape *space)
{
    int ce = n->op == OP_CE_LOSS || n->op == OP_CE_GRAD;
    const char *fm = ce && n->nw ? weighted(n) : ce && n->smooth ? smoothed(n) : op_formula[n->op];
    char *ops[MAX_IN] = {0};
    char *out = util_strdup("");
    for (const char *c = fm; *c; c++) {
        const char *piece;
        if ((*c == '$' || *c == '@') && c[1] >= '0' && c[1] < '0' + n->nin) {
            int k = c[1] - '0';
            if (!ops[k])
                ops[k] = named_load(m, n, k) ? util_fmt("a%d_%d", n->id, k) : ex_operand(m, n->in[k], space);
            piece = *c == '@' && !n->keep_f32 ? ex_round(m, ops[k]) : ops[k];
            c++;
        } else if (*c == '$' && c[1] == 'p') {
            piece = util_cfloat((float)n->drop.p);
            c++;
        } else if (*c == '$' && c[1] == 's') {
            piece = util_cfloat(1.0f / (float)(1.0 - n->drop.p));
            c++;
        } else if (*c == '$' && (c[1] == 'a' || c[1] == 'b')) {
            piece = util_cfloat((float)(c[1] == 'a' ? n->act.a : n->act.b));
            c++;
        } else if (*c == '$' && c[1] == 'd') {
            piece = util_cfloat((float)n->delta);
            c++;
        } else if (*c == '$' && c[1] == 'w') {
            piece = n->nw ? util_fmt("w%d[j]", n->id) : util_strdup("1.0f");
            c++;
        } else if (*c == '$' && c[1] == 'k') {
            piece = util_fmt("%d", n->id);
            c++;
        } else if (*c == '$' || *c == '@') {
            diag_ice("ops.def: %s's formula has a bad placeholder at '%s'", op_text[n->op], c);
        } else {
            piece = util_fmt("%c", *c);
        }
        out = util_fmt("%s%s", out, piece);
    }
    if (!m->cuda && ex_uses_fast_math(n->op))   /* the C target's vectorizable erf and exp */
        out = replace_all(replace_all(out, "erff(", "cddp_erff("), "expf(", "cddp_expf(");
    return out;
}

char *ex_ew_expr(const Emit *m, const Node *n, const Shape *space)
{
    if (n->op == OP_BN_APPLY)
        return bn_apply_expr(m, n, space);
    if (op_kind[n->op] != K_EW || !op_formula[n->op])
        diag_ice("emit: %s is not elementwise", op_text[n->op]);
    return formula(m, n, space);
}

/* A loss gradient's value g at class j: stored where other kernels read
 * it, summed into the bias gradients the group absorbed; closes the loop
 * over the classes. */
static void row_grad_uses(const Emit *m, const RowTarget *t, const Node *n)
{
    const Group *gr = m->gr;
    if (plan_uses_outside(m->p, n->id))
        fprintf(m->f, "%s    b%d[i * C + j] = g;\n", t->ind, n->id);
    for (int r = 0; r < gr->nnodes; r++)
        if (ex_node(m, gr->nodes[r])->op == OP_SUM_ROWS && ex_node(m, gr->nodes[r])->in[0] == n->id)
            fprintf(m->f, "%s    %s\n", t->ind, t->col_sum(gr->nodes[r], "g"));
    fprintf(m->f, "%s}\n", t->ind);
}

/* A loss's per-output weights (pos_weight) as w<id>, read by $w. */
static void loss_weights(const Emit *m, const Node *n, const char *ind)
{
    if (!n->nw)
        return;
    fprintf(m->f, "%sconst float w%d[%d] = {", ind, n->id, n->nw);
    for (int k = 0; k < n->nw; k++)
        fprintf(m->f, "%s%s", k ? ", " : "", util_cfloat((float)n->w[k]));
    fprintf(m->f, "};\n");
}

void ex_row_ops(const Emit *m, const RowTarget *t)
{
    FILE *f = m->f;
    const Group *gr = m->gr;
    const char *ind = t->ind;
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = ex_node(m, gr->nodes[k]);
        switch (n->op) {
        case OP_CE_LOSS:
        case OP_CORRECT:
        case OP_COUNTED: {
            /* a weighted mean's values are scaled so that their sum over
             * the rows counted, divided by those, is torch's mean over the
             * weights (the runtime divides by the rows, or by COUNTED's sum) */
            char *v = n->op == OP_CE_LOSS && n->nw && n->red == RED_MEAN
                          ? util_fmt("(%s) * (%s / sw)", formula(m, n, NULL), n->counts ? "sc" : "(float)n")
                          : formula(m, n, NULL);
            if (n->ignore_on)   /* an ignored target is read nowhere (x[y] would be out of the row) */
                v = util_fmt("%s ? %s : 0.0f", counted(n, "y"), v);
            fprintf(f, "%sconst float v%d = %s;\n", ind, n->id, v);
            if (plan_uses_outside(m->p, n->id))
                fputs(t->store(ind, n->id), f);
            break;
        }
        case OP_CE_GRAD:
            /* mean: d(sum/n)/dx; sum and none (backward of ones): d(sum)/dx */
            /* fp16: times the loss scale S, the backward of scaler.scale(loss) */
            /* weighted mean, or one over the targets counted: over their weights' sum sw */
            fprintf(f, "%sconst float scale%d = %s%s;\n", ind, n->id,
                    n->red != RED_MEAN ? "1.0f" : n->nw || n->counts ? "1.0f / sw" : "1.0f / (float)n",
                    m->p->g->prec == RT_PREC_FP16 ? " * e->scale" : "");
            fprintf(f, "%s%s\n", ind, t->classes);
            /* softmax in fp32 (autocast's fp32 list); the logits' gradient
             * is stored in the logits' precision */
            fprintf(f, "%s    const float g = %s;\n", ind,
                    n->ignore_on ? util_fmt("%s ? %s : 0.0f", counted(n, "y"), ex_round(m, formula(m, n, NULL)))
                                 : ex_round(m, formula(m, n, NULL)));
            row_grad_uses(m, t, n);
            break;
        case OP_SUM_ALL:
            fputs(t->stat(ind, n->id, n->in[0]), f);
            break;
        case OP_MSE_LOSS: case OP_L1_LOSS: case OP_SMOOTH_L1_LOSS: case OP_HUBER_LOSS: case OP_BCE_LOSS:
            /* the sample's sum over its K outputs (its mean under reduction
             * mean), in fp32 as autocast computes these losses */
            loss_weights(m, n, ind);
            fprintf(f, "%sfloat v%d = 0.0f;\n%s%s\n", ind, n->id, ind, t->classes);
            fprintf(f, "%s    v%d += %s;\n%s}\n", ind, n->id, formula(m, n, NULL), ind);
            fputs(t->total(ind, util_fmt("v%d", n->id)), f);
            if (n->red == RED_MEAN)
                fprintf(f, "%sv%d /= (float)C;\n", ind, n->id);
            if (plan_uses_outside(m->p, n->id))
                fputs(t->store(ind, n->id), f);
            break;
        case OP_REG_STATS:
            /* squared and absolute errors, in double over the row */
            fprintf(f, "%sdouble se%d = 0.0, ae%d = 0.0;\n%s%s\n", ind, n->id, n->id, ind, t->classes);
            fprintf(f, "%s    const double d = (double)x[j] - (double)t[j];\n", ind);
            fprintf(f, "%s    se%d += d * d;\n%s    ae%d += fabs(d);\n%s}\n", ind, n->id, ind, n->id, ind);
            fputs(t->total(ind, util_fmt("se%d", n->id)), f);
            fputs(t->total(ind, util_fmt("ae%d", n->id)), f);
            fputs(t->stat_add(ind, n->id, "0", util_fmt("se%d", n->id), 0), f);
            fputs(t->stat_add(ind, n->id, "1", util_fmt("ae%d", n->id), 0), f);
            break;
        case OP_ML_STATS:
            /* each output's TP, FP, FN: [0, K), [K, 2K), [2K, 3K) */
            fprintf(f, "%s%s\n", ind, t->classes);
            fprintf(f, "%s    const int p = 1.0f / (1.0f + expf(-x[j])) > 0.5f, q = t[j] > 0.5f;\n", ind);
            fprintf(f, "%s    if (p && q)\n", ind);
            fputs(t->stat_add(util_fmt("%s        ", ind), n->id, "j", "1.0", 1), f);
            fprintf(f, "%s    else if (p)\n", ind);
            fputs(t->stat_add(util_fmt("%s        ", ind), n->id, "C + j", "1.0", 1), f);
            fprintf(f, "%s    else if (q)\n", ind);
            fputs(t->stat_add(util_fmt("%s        ", ind), n->id, "2 * C + j", "1.0", 1), f);
            fprintf(f, "%s}\n", ind);
            break;
        case OP_MSE_GRAD: case OP_L1_GRAD: case OP_SMOOTH_L1_GRAD: case OP_HUBER_GRAD: case OP_BCE_GRAD:
            /* mean: torch's over all N * K elements */
            loss_weights(m, n, ind);
            fprintf(f, "%sconst float scale%d = %s%s;\n", ind, n->id,
                    n->red == RED_MEAN ? "1.0f / ((float)n * (float)C)" : "1.0f",
                    m->p->g->prec == RT_PREC_FP16 ? " * e->scale" : "");
            fprintf(f, "%s%s\n", ind, t->classes);
            fprintf(f, "%s    const float g = %s;\n", ind, ex_round(m, formula(m, n, NULL)));
            row_grad_uses(m, t, n);
            break;
        default:
            break;
        }
    }
}

/* The channel of element j of an image space [N, C, H, W], which the
 * per-channel operands index by: both targets' loops define it (the C
 * loops as a loop of its own, so a channel's values are loop-invariant
 * and its plane's loop vectorizes); nothing for other spaces. */
char *ex_chan_index(const Shape *space, const char *ind)
{
    if (space->rank != 4)
        return util_strdup("");
    return util_fmt("%sconst int64_t jc = j / %lld;\n%s(void)jc;\n", ind, (long long)(space->d[2] * space->d[3]), ind);
}

void ex_element(const Emit *m, const Shape *space, int load, const char *load_expr, const char *ind,
                char *(*row_sum)(int red, const char *x))
{
    FILE *f = m->f;
    const Group *gr = m->gr;
    if (load >= 0)
        fprintf(f, "%sconst float v%d = %s;\n", ind, load, load_expr);
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = ex_node(m, gr->nodes[k]);
        if (n->id == load || op_kind[n->op] == K_POOL)   /* a pool is the kernel's loop (rule pool-chain) */
            continue;
        if (n->op == OP_SUM_ROWS) {
            fprintf(f, "%s%s\n", ind, row_sum(n->id, ex_operand(m, n->in[0], space)));
            continue;
        }
        /* low precision: every elementwise result is a bf16/fp16 tensor in
         * torch, except inside the ops autocast runs in float */
        load_operands(m, n, space, ind);
        char *v = ex_ew_expr(m, n, space);
        fprintf(f, "%sconst float v%d = %s;\n", ind, n->id, n->keep_f32 ? v : ex_round(m, v));
        if (plan_uses_outside(m->p, n->id) || gr->gemm_out == n->id)
            fprintf(f, "%sb%d[i * C + j] = v%d;\n", ind, n->id, n->id);
    }
}

/* element k of batch row i's sample, scaled and normalized (RT_DATA_FNS) */
char *ex_sample(const char *i, const char *k) { return util_fmt("rt_sample(e, (int64_t)e->idx[%s], %s)", i, k); }

/* the class label of row i of the labels node n (a row is a sample, or
 * one of a sample's P positions: [N*P]) */
char *ex_labels_count(const Node *n)
{
    const int64_t P = ir_row_elems(&n->shape);
    return P == 1 ? util_strdup("n") : util_fmt("(n * %lld)", (long long)P);
}

char *ex_label(const Node *n, const char *i)
{
    const int64_t P = ir_row_elems(&n->shape);
    if (P == 1)
        return util_fmt("((const int32_t *)e->y)[e->idx[%s]]", i);
    return util_fmt("((const int32_t *)e->y)[(int64_t)e->idx[(%s) / %lld] * %lld + (%s) %% %lld]", i, (long long)P,
                    (long long)P, i, (long long)P);
}

/* float target k of batch row i (regression, 0/1 labels) */
char *ex_target(const char *i, const char *k)
{
    return util_fmt("((const float *)e->y)[(int64_t)e->idx[%s] * e->y_size + %s]", i, k);
}

static const char *const prec_names[] = {"RT_PREC_FP32", "RT_PREC_BF16", "RT_PREC_FP16"};

const char *ex_gemm_call(const Emit *m)
{
    return m->p->g->prec ? util_fmt("rt_sgemm_prec(%s, ", prec_names[m->p->g->prec]) : "rt_sgemm(";
}

char *ex_round_operand(const Emit *m, int id, const char *expr)
{
    return m->cuda && m->p->buf[id].h16 ? util_strdup(expr) : ex_round(m, expr);
}

char *ex_round(const Emit *m, const char *x)
{
    switch (m->p->g->prec) {
    case RT_PREC_BF16: return util_fmt("rt_round_bf16(%s)", x);
    case RT_PREC_FP16: return util_fmt("rt_round_fp16(%s)", x);
    default: return util_strdup(x);
    }
}

int ex_pool_of_chain(const Emit *m)
{
    const Group *gr = m->gr;
    const Node *last = ex_node(m, gr->nodes[gr->nnodes - 1]);
    return gr->kind == G_EW && op_kind[last->op] == K_POOL ? last->id : -1;
}

/* The all-reduce summing this kernel's result in place after it (rule
 * sum-in-place), or -1. */
int ex_sum_in_place(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++)
        if (plan_sum_in_place(m->p, m->gr->nodes[k]))
            return m->gr->nodes[k];
    return -1;
}

int ex_has_row_reduction(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++)
        if (ex_node(m, m->gr->nodes[k])->op == OP_SUM_ROWS)
            return 1;
    return 0;
}

int ex_opt_ranges(const Emit *m, int64_t *lo, int64_t *hi, int *decay)
{
    int nr = 0;
    for (int k = 0; k < m->gr->nnodes; k++) {
        const int w = ex_node(m, m->gr->nodes[k])->in[0];
        const Buf *b = &m->p->buf[w];
        int at = nr;        /* insertion sort by offset */
        while (at > 0 && lo[at - 1] > b->off) {
            lo[at] = lo[at - 1];
            hi[at] = hi[at - 1];
            decay[at] = decay[at - 1];
            at--;
        }
        lo[at] = b->off;
        hi[at] = b->off + b->size;
        decay[at] = ir_param_decays(m->p->g, w);
        nr++;
    }
    int out = 0;
    for (int r = 0; r < nr; r++) {
        if (out > 0 && mem_align(hi[out - 1]) == lo[r] && decay[out - 1] == decay[r]) {
            hi[out - 1] = hi[r];
            continue;
        }
        lo[out] = lo[r];
        hi[out] = hi[r];
        decay[out] = decay[r];
        out++;
    }
    return out;
}

/* What every update loop of the optimizer kernel reads, declared once
 * before the loops: the slabs, the step's lr, and for Adam the step's
 * bias corrections (in double, as torch.optim.Adam computes them in
 * Python). The opt slab holds the state slot by slot, each with the
 * parameters' offsets: momentum for SGD; exp_avg, then exp_avg_sq for
 * Adam. */
void ex_opt_prelude(FILE *f, const Graph *g, int64_t param_floats)
{
    const OptHyper *o = &g->opt;
    fprintf(f, "    float *const w = e->param, *const g = e->grad;\n");
    fprintf(f, "    const float lr = e->lr;\n");
    if (g->prec == RT_PREC_FP16) {
        /* a skipped step (GradScaler found inf/NaN): no update at all */
        fprintf(f, "    if (e->found_inf)\n        return;\n");
        /* GradScaler.unscale_: the gradients were scaled by S */
        fprintf(f, "    const float inv_scale = 1.0f / e->scale;\n");
    }
    switch (g->opt_op) {
    case OP_SGD:
        return;
    case OP_SGD_MOMENTUM:
        fprintf(f, "    float *const mb = e->opt;\n    const int first = e->step == 0;\n");
        return;
    case OP_ADAM:
    case OP_ADAMW:
        fprintf(f, "    float *const m1 = e->opt, *const m2 = e->opt + %lld;\n", (long long)param_floats);
        if (o->amsgrad)
            fprintf(f, "    float *const m3 = e->opt + %lld;\n", 2 * (long long)param_floats);
        fprintf(f, "    const double tstep = (double)e->step + 1.0;\n");
        fprintf(f, "    const float sc = (float)((double)lr / (1.0 - pow(%.17g, tstep)));\n", o->beta1);
        fprintf(f, "    const float bc2s = (float)sqrt(1.0 - pow(%.17g, tstep));\n", o->beta2);
        return;
    case OP_RMSPROP: {
        /* slots in torch's order: square_avg, momentum_buffer, grad_avg */
        long long slot = 1;
        fprintf(f, "    float *const sa = e->opt;\n");
        if (o->momentum > 0)
            fprintf(f, "    float *const mb = e->opt + %lld;\n", slot++ * (long long)param_floats);
        if (o->centered)
            fprintf(f, "    float *const ga = e->opt + %lld;\n", slot * (long long)param_floats);
        return;
    }
    case OP_ADAGRAD:
        /* the step's lr, decayed as torch's clr = lr / (1 + (step - 1) lr_decay) (a
         * Python float, then the tensor's float); the first step's sum
         * starts at initial_accumulator_value (the slab starts at zero) */
        fprintf(f, "    float *const sm = e->opt;\n    const int first = e->step == 0;\n");
        fprintf(f, "    const float clr = (float)((double)lr / (1.0 + (double)e->step * %.17g));\n", o->lr_decay);
        return;
    default:
        diag_ice("emit: %s is not an optimizer", op_text[g->opt_op]);
    }
}

/* The slots' names, as torch.optim's state calls them (checkpoints). */
const char *ex_opt_names(const Graph *g)
{
    switch (g->opt_op) {
    case OP_ADAM: case OP_ADAMW: return g->opt.amsgrad ? "exp_avg,exp_avg_sq,max_exp_avg_sq" : "exp_avg,exp_avg_sq";
    case OP_SGD_MOMENTUM: return "momentum_buffer";
    case OP_ADAGRAD: return "sum";
    case OP_RMSPROP:
        return g->opt.momentum > 0 ? (g->opt.centered ? "square_avg,momentum_buffer,grad_avg"
                                                      : "square_avg,momentum_buffer")
                                   : (g->opt.centered ? "square_avg,grad_avg" : "square_avg");
    default: return NULL;
    }
}

/* The bodies below are torch.optim's updates at slab index k, each closing
 * the loop. d is the gradient (unscaled under fp16). */
static void opt_grad(FILE *f, const Graph *g)
{
    fprintf(f, "        float d = %s;\n", g->prec == RT_PREC_FP16 ? "g[k] * inv_scale" : "g[k]");
}

/* torch.optim.SGD: weight decay, then momentum (the buffer is the gradient
 * itself on the first step), then the nesterov look-ahead; p -= lr * d. */
static void sgd_body(FILE *f, const Graph *g, int decay)
{
    const OptHyper *o = &g->opt;
    opt_grad(f, g);
    if (decay)
        fprintf(f, "        d += %s * w[k];\n", util_cfloat(o->weight_decay));
    if (g->opt_op == OP_SGD_MOMENTUM) {
        fprintf(f, "        mb[k] = first ? d : %s * mb[k] + %s * d;\n", util_cfloat(o->momentum),
                util_cfloat(1.0 - o->dampening));
        if (o->nesterov)
            fprintf(f, "        d += %s * mb[k];\n", util_cfloat(o->momentum));
        else
            fprintf(f, "        d = mb[k];\n");
    }
    fprintf(f, "        w[k] -= lr * d;\n    }\n");
}

/* torch.optim.Adam (weight decay added to the gradient) or AdamW
 * (decoupled: the weight shrinks by lr * wd first): exp_avg and
 * exp_avg_sq, then p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps). */
static void adam_body(FILE *f, const Graph *g, int decay)
{
    const OptHyper *o = &g->opt;
    opt_grad(f, g);
    if (decay && g->opt_op == OP_ADAMW)
        fprintf(f, "        w[k] *= 1.0f - lr * %s;\n", util_cfloat(o->weight_decay));
    else if (decay)
        fprintf(f, "        d += %s * w[k];\n", util_cfloat(o->weight_decay));
    fprintf(f, "        m1[k] = m1[k] * %s + d * %s;\n", util_cfloat(o->beta1), util_cfloat(1.0 - o->beta1));
    fprintf(f, "        m2[k] = m2[k] * %s + d * d * %s;\n", util_cfloat(o->beta2), util_cfloat(1.0 - o->beta2));
    if (o->amsgrad) {
        /* torch.maximum, which keeps a NaN */
        fprintf(f, "        m3[k] = m2[k] > m3[k] || m2[k] != m2[k] ? m2[k] : m3[k];\n");
        fprintf(f, "        w[k] -= sc * (m1[k] / (sqrtf(m3[k]) / bc2s + %s));\n    }\n", util_cfloat(o->eps));
        return;
    }
    fprintf(f, "        w[k] -= sc * (m1[k] / (sqrtf(m2[k]) / bc2s + %s));\n    }\n", util_cfloat(o->eps));
}

/* torch.optim.RMSprop: square_avg (and grad_avg when centered) as running
 * averages with alpha; avg = sqrt(square_avg - grad_avg^2) + eps; with
 * momentum, buf = momentum * buf + d / avg and p -= lr * buf (the buffers
 * start at zero), else p -= lr * d / avg. */
static void rmsprop_body(FILE *f, const Graph *g, int cuda, int decay)
{
    const OptHyper *o = &g->opt;
    opt_grad(f, g);
    if (decay)
        fprintf(f, "        d += %s * w[k];\n", util_cfloat(o->weight_decay));
    fprintf(f, "        sa[k] = sa[k] * %s + d * d * %s;\n", util_cfloat(o->alpha), util_cfloat(1.0 - o->alpha));
    if (o->centered) {
        fprintf(f, "        ga[k] = ga[k] * %s + d * %s;\n", util_cfloat(o->alpha), util_cfloat(1.0 - o->alpha));
        /* the variance cancels when the gradient hardly varies: the square
         * rounded before the subtraction on both targets (NVRTC would fuse
         * it into an fma; the C kernels, ISO C, never contract) */
        fprintf(f, "        const float avg = sqrtf(sa[k] - %s) + %s;\n",
                cuda ? "__fmul_rn(ga[k], ga[k])" : "ga[k] * ga[k]", util_cfloat(o->eps));
    } else {
        fprintf(f, "        const float avg = sqrtf(sa[k]) + %s;\n", util_cfloat(o->eps));
    }
    if (o->momentum > 0) {
        fprintf(f, "        mb[k] = mb[k] * %s + d / avg;\n", util_cfloat(o->momentum));
        fprintf(f, "        w[k] -= lr * mb[k];\n    }\n");
    } else {
        fprintf(f, "        w[k] -= lr * d / avg;\n    }\n");
    }
}

/* torch.optim.Adagrad: sum += d^2; p -= clr * d / (sqrt(sum) + eps) */
static void adagrad_body(FILE *f, const Graph *g, int decay)
{
    const OptHyper *o = &g->opt;
    opt_grad(f, g);
    if (decay)
        fprintf(f, "        d += %s * w[k];\n", util_cfloat(o->weight_decay));
    fprintf(f, "        sm[k] = (first ? %s : sm[k]) + d * d;\n", util_cfloat(o->init_acc));
    fprintf(f, "        w[k] -= clr * (d / (sqrtf(sm[k]) + %s));\n    }\n", util_cfloat(o->eps));
}

/* decay: ex_opt_ranges' flag of the range (weight_decay != 0 and the
 * parameters in decay = "..."'s group) */
void ex_opt_body(FILE *f, const Graph *g, int cuda, int decay)
{
    if (g->opt_op == OP_ADAM || g->opt_op == OP_ADAMW)
        adam_body(f, g, decay);
    else if (g->opt_op == OP_RMSPROP)
        rmsprop_body(f, g, cuda, decay);
    else if (g->opt_op == OP_ADAGRAD)
        adagrad_body(f, g, decay);
    else
        sgd_body(f, g, decay);
}
