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

char *ex_dim(int64_t d) { return d == DIM_N ? util_strdup("n") : util_fmt("%lld", (long long)d); }

/* C expression for the base address of a node's buffer. */
char *ex_addr(const Emit *m, int id)
{
    const Buf *b = &m->p->buf[id];
    const char *ty = ex_node(m, id)->dt == DT_I32 ? "int32_t" : "float";
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

/* Declares b<id> for every buffer the group touches. */
void ex_declare_buffers(const Emit *m)
{
    const Group *gr = m->gr;
    char *seen = util_alloc((size_t)m->p->g->nn);
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = ex_node(m, gr->nodes[k]);
        for (int j = -1; j < plan_nin(m->p, n); j++) {
            int id = j < 0 ? n->id : plan_source(m->p, n->in[j]);
            if (seen[id] || m->p->buf[id].cls == B_NONE || (j >= 0 && ex_in_group(m, id) && !plan_uses_outside(m->p, id)))
                continue;
            if (j < 0 && !plan_uses_outside(m->p, id) && gr->gemm_out != id)
                continue;
            seen[id] = 1;
            const char *ty = ex_node(m, id)->dt == DT_I32 ? "int32_t" : (m->p->buf[id].cls == B_STAT ? "double" : "float");
            fprintf(m->f, "    %s *const b%d = %s;\n", ty, id, ex_addr(m, id));
        }
    }
    /* each dropout's stream key, once per kernel (dropout_rng.h) */
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = ex_node(m, gr->nodes[k]);
        if (n->op == OP_DROPOUT || n->op == OP_DROPOUT_GRAD)
            fprintf(m->f, "    const unsigned long long dk%d = cddp_drop_key(e->seed, e->rank, (long long)e->step, %d);\n",
                    n->id, n->drop.key);
    }
}

/* Operand x of a node inside a loop over [R, C] at (i, j). */
char *ex_operand(const Emit *m, int x, const Shape *space)
{
    if (ex_in_group(m, x))
        return util_fmt("v%d", x);
    const Shape *s = &ex_node(m, x)->shape;
    int src = plan_source(m->p, x);
    /* same elements in the same row-major order (a view counts) */
    if (ir_batched(s) == ir_batched(space) && ir_row_elems(s) == ir_row_elems(space))
        return util_fmt("b%d[i * C + j]", src);
    if (s->rank == 1 && space->rank == 2 && s->d[0] == space->d[1])
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

int ex_smoothing(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *n = ex_node(m, m->gr->nodes[k]);
        if ((n->op == OP_CE_LOSS || n->op == OP_CE_GRAD) && n->smooth)
            return 1;
    }
    return 0;
}

static char *formula(const Emit *m, const Node *n, const Shape *space)
{
    const char *fm = (n->op == OP_CE_LOSS || n->op == OP_CE_GRAD) && n->smooth ? smoothed(n) : op_formula[n->op];
    char *ops[MAX_IN] = {0};
    char *out = util_strdup("");
    for (const char *c = fm; *c; c++) {
        const char *piece;
        if ((*c == '$' || *c == '@') && c[1] >= '0' && c[1] < '0' + n->nin) {
            int k = c[1] - '0';
            if (!ops[k])
                ops[k] = ex_operand(m, n->in[k], space);
            piece = *c == '@' ? ex_round(m, ops[k]) : ops[k];
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
            fprintf(f, "%sconst float v%d = %s;\n", ind, n->id, formula(m, n, NULL));
            if (plan_uses_outside(m->p, n->id))
                fputs(t->store(ind, n->id), f);
            break;
        case OP_CE_GRAD:
            /* mean: d(sum/n)/dx; sum and none (backward of ones): d(sum)/dx */
            /* fp16: times the loss scale S, the backward of scaler.scale(loss) */
            fprintf(f, "%sconst float scale%d = %s%s;\n", ind, n->id, n->red == RED_MEAN ? "1.0f / (float)n" : "1.0f",
                    m->p->g->prec == RT_PREC_FP16 ? " * e->scale" : "");
            fprintf(f, "%s%s\n", ind, t->classes);
            /* softmax in fp32 (autocast's fp32 list); the logits' gradient
             * is stored in the logits' precision */
            fprintf(f, "%s    const float g = %s;\n", ind, ex_round(m, formula(m, n, NULL)));
            if (plan_uses_outside(m->p, n->id))
                fprintf(f, "%s    b%d[i * C + j] = g;\n", ind, n->id);
            for (int r = 0; r < gr->nnodes; r++)
                if (ex_node(m, gr->nodes[r])->op == OP_SUM_ROWS && ex_node(m, gr->nodes[r])->in[0] == n->id)
                    fprintf(f, "%s    %s\n", ind, t->col_sum(gr->nodes[r], "g"));
            fprintf(f, "%s}\n", ind);
            break;
        case OP_SUM_ALL:
            fputs(t->stat(ind, n->id, n->in[0]), f);
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
        if (n->id == load)
            continue;
        if (n->op == OP_SUM_ROWS) {
            fprintf(f, "%s%s\n", ind, row_sum(n->id, ex_operand(m, n->in[0], space)));
            continue;
        }
        /* low precision: every elementwise result is a bf16/fp16 tensor in torch */
        fprintf(f, "%sconst float v%d = %s;\n", ind, n->id, ex_round(m, ex_ew_expr(m, n, space)));
        if (plan_uses_outside(m->p, n->id) || gr->gemm_out == n->id)
            fprintf(f, "%sb%d[i * C + j] = v%d;\n", ind, n->id, n->id);
    }
}

/* torchvision: ToTensor divides by 255, Normalize subtracts and divides */
char *ex_normalize(const Program *prog, const char *pixel)
{
    return util_fmt("((float)%s / 255.0f - %s) / %s", pixel, util_cfloat(prog->train.norm_mean),
                    util_cfloat(prog->train.norm_std));
}

/* the label of batch row i */
char *ex_label(const char *i) { return util_fmt("e->lab[e->idx[%s]]", i); }

static const char *const prec_names[] = {"RT_PREC_FP32", "RT_PREC_BF16", "RT_PREC_FP16"};

const char *ex_gemm_call(const Emit *m)
{
    return m->p->g->prec ? util_fmt("rt_sgemm_prec(%s, ", prec_names[m->p->g->prec]) : "rt_sgemm(";
}

char *ex_round(const Emit *m, const char *x)
{
    switch (m->p->g->prec) {
    case RT_PREC_BF16: return util_fmt("rt_round_bf16(%s)", x);
    case RT_PREC_FP16: return util_fmt("rt_round_fp16(%s)", x);
    default: return util_strdup(x);
    }
}

int ex_has_row_reduction(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++)
        if (ex_node(m, m->gr->nodes[k])->op == OP_SUM_ROWS)
            return 1;
    return 0;
}

int ex_opt_ranges(const Emit *m, int64_t *lo, int64_t *hi)
{
    int nr = 0;
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Buf *b = &m->p->buf[ex_node(m, m->gr->nodes[k])->in[0]];
        int at = nr;        /* insertion sort by offset */
        while (at > 0 && lo[at - 1] > b->off) {
            lo[at] = lo[at - 1];
            hi[at] = hi[at - 1];
            at--;
        }
        lo[at] = b->off;
        hi[at] = b->off + b->size;
        nr++;
    }
    int out = 0;
    for (int r = 0; r < nr; r++) {
        if (out > 0 && mem_align(hi[out - 1]) == lo[r]) {
            hi[out - 1] = hi[r];
            continue;
        }
        lo[out] = lo[r];
        hi[out] = hi[r];
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
        fprintf(f, "    const double tstep = (double)e->step + 1.0;\n");
        fprintf(f, "    const float sc = (float)((double)lr / (1.0 - pow(%.17g, tstep)));\n", o->beta1);
        fprintf(f, "    const float bc2s = (float)sqrt(1.0 - pow(%.17g, tstep));\n", o->beta2);
        return;
    default:
        diag_ice("emit: %s is not an optimizer", op_text[g->opt_op]);
    }
}

/* Floats of optimizer state per parameter float. */
int ex_opt_slots(Op op)
{
    return op == OP_ADAM || op == OP_ADAMW ? 2 : op == OP_SGD_MOMENTUM ? 1 : 0;
}

/* The bodies below are torch.optim's updates at slab index k, each closing
 * the loop. d is the gradient (unscaled under fp16). */
static void opt_grad(FILE *f, const Graph *g)
{
    fprintf(f, "        float d = %s;\n", g->prec == RT_PREC_FP16 ? "g[k] * inv_scale" : "g[k]");
}

/* torch.optim.SGD: weight decay, then momentum (the buffer is the gradient
 * itself on the first step), then the nesterov look-ahead; p -= lr * d. */
static void sgd_body(FILE *f, const Graph *g)
{
    const OptHyper *o = &g->opt;
    opt_grad(f, g);
    if (o->weight_decay != 0.0)
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
static void adam_body(FILE *f, const Graph *g)
{
    const OptHyper *o = &g->opt;
    opt_grad(f, g);
    if (o->weight_decay != 0.0 && g->opt_op == OP_ADAMW)
        fprintf(f, "        w[k] *= 1.0f - lr * %s;\n", util_cfloat(o->weight_decay));
    else if (o->weight_decay != 0.0)
        fprintf(f, "        d += %s * w[k];\n", util_cfloat(o->weight_decay));
    fprintf(f, "        m1[k] = m1[k] * %s + d * %s;\n", util_cfloat(o->beta1), util_cfloat(1.0 - o->beta1));
    fprintf(f, "        m2[k] = m2[k] * %s + d * d * %s;\n", util_cfloat(o->beta2), util_cfloat(1.0 - o->beta2));
    fprintf(f, "        w[k] -= sc * (m1[k] / (sqrtf(m2[k]) / bc2s + %s));\n    }\n", util_cfloat(o->eps));
}

void ex_opt_body(FILE *f, const Graph *g)
{
    if (g->opt_op == OP_ADAM || g->opt_op == OP_ADAMW)
        adam_body(f, g);
    else
        sgd_body(f, g);
}
