/* cost.c: what one kernel of a plan costs, for --report and `cddpc study`.
 *
 * FLOPs come from ops.def's FLOPS column (per output element; for
 * matmul, convolution and row ops per element of the reduced dimension).
 * Bytes are the traffic to memory, one pass per kernel, with each buffer
 * counted as the kernel touches it:
 *   - every value the kernel reads from outside itself, once (4 bytes a
 *     float; the dataset's pixels 1 byte, its labels 1 byte as stored);
 *   - every value it writes that something outside reads, once;
 *   - in-place updates (optimizers, batch norm's running statistics):
 *     ops.def's RD and WR per element, which name the parameter, its
 *     gradient and the optimizer state read and the parameter and state
 *     written (SGD 8 + 4, momentum 12 + 8, Adam/AdamW 16 + 12 bytes), so
 *     those inputs are not counted again;
 *   - on the CPU a matrix product's epilogue is a second loop after the
 *     BLAS call (emit_c.c's emit_matmul): the GEMM stores the product, the
 *     epilogue reads it back, so the CPU target adds those bytes. On a GPU
 *     the epilogue runs on the accumulators in registers (emit_cuda.c).
 * A buffer read twice inside one kernel (batch norm's two passes over a
 * channel) is counted once: a channel's slice is re-read from cache.
 * On a GPU, an activation of precision bf16|fp16 held as 16 bits
 * (Buf.h16) costs 2 bytes a value. */
#include <math.h>
#include <string.h>

#include "cddpc.h"

static int64_t numel(const Node *n, int64_t batch) { return ir_numel(&n->shape, batch); }

/* bytes of one value of node id's buffer on target t */
static double width(const Plan *p, int id, CostTarget t) { return t == COST_GPU && p->buf[id].h16 ? 2.0 : 4.0; }

static double node_flops(const Graph *g, const Node *n, int64_t b)
{
    switch (op_kind[n->op]) {
    case K_MATMUL: {
        const Shape *a = &g->n[n->in[0]]->shape;
        int64_t k = n->op == OP_MM_TN ? a->d[0] : a->d[1];
        return op_flops[n->op] * (double)numel(n, b) * (double)(IR_IS_BATCH(k) ? b * ir_batch_mul(k) : k);
    }
    case K_ROW: {
        int64_t c = g->n[n->in[0]]->shape.d[1];
        return (double)b * (double)c * op_flops[n->op];
    }
    case K_RED: return op_flops[n->op] * (double)numel(g->n[n->in[0]], b);
    case K_CONV: {   /* per output element and weight of its group */
        const Node *y = n->op == OP_CONV2D ? n : g->n[n->in[0]];
        const Shape *w = n->op == OP_CONV2D_DW ? &n->shape : &g->n[n->in[1]]->shape;
        return op_flops[n->op] * (double)numel(y, b) * (double)(w->d[1] * w->d[2] * w->d[3]);
    }
    case K_CHAN:    /* bn_stats: a division per statistic, from the passes' means */
        return op_flops[n->op] * (double)numel(n->op == OP_BN_STATS ? n : g->n[n->in[0]], b);
    case K_POOL: case K_NORM: return op_flops[n->op] * (double)numel(g->n[n->in[0]], b);
    case K_TENSOR:  /* a reduction per element reduced, a product per term, the rest per element */
        if (n->op == OP_T_ATTN || n->op == OP_T_ATTN_DQ || n->op == OP_T_ATTN_DK || n->op == OP_T_ATTN_DV) {
            /* per (query, key) pair: the score's product (2 E), the
             * probability (5), then the value's product (2 Ev) forward;
             * the gradients recompute the score and add theirs */
            const Node *at = n->op == OP_T_ATTN ? n : g->n[n->in[4]];
            const Shape *q = &g->n[at->in[0]]->shape, *k = &g->n[at->in[1]]->shape;
            const double E = (double)q->d[q->rank - 1], Ev = (double)at->shape.d[at->shape.rank - 1];
            const double pairs = (double)numel(at, b) / Ev * (double)k->d[k->rank - 2];
            const double per = n->op == OP_T_ATTN || n->op == OP_T_ATTN_DV ? 2 * E + 2 * Ev + 5 : 4 * E + 2 * Ev + 5;
            return pairs * per;
        }
        if (ir_is_recurrent(n->op) && n->op != OP_T_RNN_CN) {
            /* per hidden unit and step: the step's product (2 G H) and
             * the cell's arithmetic; the gradient's product and more */
            const Node *r = n->op == OP_T_RNN ? n : g->n[n->in[1]];
            const double GH = (double)(ten_rnn_gates(r->rnn.cell) * r->shape.d[2]);
            return (double)numel(r, b) * (n->op == OP_T_RNN ? 2 * GH + 20 : 2 * GH + 30);
        }
        if (n->op == OP_T_BMM) {
            const Shape *a = &g->n[n->in[0]]->shape;
            return op_flops[n->op] * (double)numel(n, b) * (double)a->d[a->rank - (n->ten.ta ? 2 : 1)];
        }
        return op_flops[n->op] * (double)numel(ten_is_reduction(n->op) ? g->n[n->in[0]] : n, b);
    case K_DATA: case K_EW: case K_OPT: case K_STATE: case K_COMM:
        return op_flops[n->op] * (double)numel(n, b);
    default: return 0;
    }
}

/* In-place updates whose ops.def RD/WR cover their parameter inputs. */
static int updates_in_place(Op op) { return op_kind[op] == K_OPT || op_kind[op] == K_STATE; }

KernelCost cost_group(const Plan *p, const Group *gr, int64_t b, CostTarget t)
{
    const Graph *g = p->g;
    IdSet seen = {0};
    KernelCost c = {0, 0};
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = g->n[gr->nodes[k]];
        c.flops += node_flops(g, n, b);
        if (n->op == OP_IMAGES || n->op == OP_LABELS)
            c.bytes += (double)(n->op == OP_IMAGES ? numel(n, b) : b);    /* uint8 from the dataset */
        if (updates_in_place(n->op)) {
            c.bytes += (op_rd[n->op] + op_wr[n->op]) * (double)numel(n, b);
            if (n->op == OP_BN_RUNNING)     /* num_batches_tracked, one float read and written */
                c.bytes += 8;
        } else if (plan_uses_outside(p, n->id) || gr->gemm_out == n->id) {
            c.bytes += width(p, n->id, t) * (double)numel(n, b);
        }
        for (int j = 0; j < plan_nin(p, n); j++) {
            int x = plan_source(p, n->in[j]);
            if (p->group_of[x] == p->group_of[n->id])
                continue;
            if (updates_in_place(n->op) && g->n[x]->op == OP_PARAM)
                continue;
            if (op_kind[n->op] == K_OPT)      /* the gradient: in RD too */
                continue;
            /* the train plan's statistics kernel reads only the passes'
             * means (in[3], in[4]): x and the running statistics are inputs
             * that order it (bn_running reads the latter); the eval plan's
             * reads only the running statistics */
            if (n->op == OP_BN_STATS && (p->training ? j < 3 : j != 1 && j != 2))
                continue;
            if (!util_set_add(&seen, x))
                continue;
            c.bytes += width(p, x, t) * (double)numel(g->n[x], b);
        }
    }
    if (t != COST_CPU)
        c.bytes += cost_rnn_rereads(p, gr, b);
    if (t == COST_CPU && gr->kind == G_MATMUL && gr->nnodes > 1) {
        /* the epilogue pass reads the product back; when the product is
         * not a result of its own, the GEMM's store of it is extra too */
        double prod = 4.0 * (double)numel(g->n[gr->anchor], b);
        c.bytes += prod + (gr->gemm_out != gr->anchor ? prod : 0);
    }
    return c;
}

double cost_rnn_rereads(const Plan *p, const Group *gr, int64_t b)
{
    const Graph *g = p->g;
    const Node *a = gr->anchor >= 0 ? g->n[gr->anchor] : NULL;
    if (!a || (a->op != OP_T_RNN && a->op != OP_T_RNN_BWD))
        return 0;
    /* each block of the GPU kernel (rnn_rows samples) reads W_hh a step
     * (emit_rnn_cuda.c): from L2, T times over; the first read is the
     * input cost_group counts */
    const Node *r = a->op == OP_T_RNN ? a : g->n[a->in[1]];
    const double blocks = ceil((double)b / (gr->rnn_rows > 0 ? gr->rnn_rows : 1));
    return 4.0 * (blocks * (double)r->shape.d[1] - 1) * (double)ir_numel(&g->n[r->in[1]]->shape, 1);
}

KernelCost cost_plan(const Plan *p, int64_t batch, CostTarget t)
{
    KernelCost s = {0, 0};
    for (int i = 0; i < p->ngroups; i++) {
        KernelCost c = cost_group(p, &p->groups[i], batch, t);
        s.flops += c.flops;
        s.bytes += c.bytes;
    }
    return s;
}

const char *cost_bytes_text(double bytes)
{
    if (bytes < 1024)
        return util_fmt("%.0f B", bytes);
    if (bytes < 1024.0 * 1024)
        return util_fmt("%.1f KiB", bytes / 1024);
    if (bytes < 1024.0 * 1024 * 1024)
        return util_fmt("%.2f MiB", bytes / (1024.0 * 1024));
    return util_fmt("%.2f GiB", bytes / (1024.0 * 1024 * 1024));
}
