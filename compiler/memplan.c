/* memplan.c: where every value of a plan lives.
 *
 * Parameters, gradients and optimizer state sit in slabs with one offset
 * per parameter, so the optimizer is one loop over a range and (later)
 * gradient buckets are just slab ranges. Everything else that must be
 * materialized gets a buffer in the batch-proportional arena (act) or in
 * fixed scratch, packed first-fit by size over liveness intervals measured
 * in kernels: two values share memory when no kernel sees both alive.
 * act offsets are in floats per sample, so one packing fits any batch. */
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"

#define ALIGN 16            /* floats: 64-byte alignment of every buffer */

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

int64_t mem_align(int64_t floats) { return align_up(floats); }

typedef struct Live {
    int node;
    int64_t size;
    int def, last;          /* group indices, inclusive */
} Live;

static int by_size_desc(const void *a, const void *b)
{
    const Live *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->node - y->node;
}

/* First-fit placement of intervals; returns the arena size. */
static int64_t place(Plan *p, Live *lv, int nlv)
{
    qsort(lv, (size_t)nlv, sizeof *lv, by_size_desc);
    int64_t top = 0;
    for (int i = 0; i < nlv; i++) {
        int64_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < i; j++) {
                const Buf *b = &p->buf[lv[j].node];
                int time = lv[j].def <= lv[i].last && lv[i].def <= lv[j].last;
                int space = b->off < off + lv[i].size && off < b->off + b->size;
                if (time && space) {
                    off = align_up(b->off + b->size);
                    moved = 1;
                }
            }
        }
        p->buf[lv[i].node].off = off;
        if (off + lv[i].size > top)
            top = off + lv[i].size;
    }
    return top;
}

/* Which ops over tensors of any rank give a low-precision value, as
 * torch's type promotion under autocast: a product between activations is
 * an autocast op (bf16|fp16 operands and result); any other float result
 * is low precision when every float operand is (bf16 * bf16), and float32
 * when one is float32 (the images, a parameter, a mask's .float(), a
 * constant tensor), as PyTorch promotes. Integer and boolean values are
 * never rounded, nor a count of ties (amax's gradient). In node order, so
 * each operand is known before its consumer. */
static void tensor_lowp(Plan *p)
{
    const Graph *g = p->g;
    p->lowp = util_alloc((size_t)g->nn + 1);
    if (g->prec == RT_PREC_FP32)
        return;
    for (int id = 0; id < g->nn; id++) {
        const Node *n = g->n[id];
        /* attention, recurrences and their gradients: computed and stored
         * in float (what their gradients read beside their values) */
        if (!p->in_plan[id] || op_kind[n->op] != K_TENSOR || n->dt != DT_F32 || n->op == OP_T_COUNT_EQ
            || n->op == OP_T_TO_F32 || ir_own_kernel(n->op))
            continue;
        int nf = 0, low = 1;
        for (int k = 0; k < n->nin; k++) {
            const int src = plan_source(p, n->in[k]);
            if (g->n[src]->dt != DT_F32)
                continue;
            nf++;
            low &= mem_rounded(p, src);
        }
        p->lowp[id] = n->op == OP_T_BMM || (nf > 0 && low);
    }
}

void mem_plan(Plan *p)
{
    Graph *g = p->g;
    tensor_lowp(p);
    p->buf = util_alloc(sizeof(Buf) * (size_t)g->nn);
    p->param_off = util_alloc(sizeof(int64_t) * (size_t)(g->nparam + 1));
    /* reverse order: each gradient bucket is one contiguous slab range;
     * buffers (never trained) after all of them, outside every bucket */
    for (int pass = 0; pass < 2; pass++)
        for (int i = g->nparam - 1; i >= 0; i--) {
            if (g->n[g->params[i]]->buffer != pass)
                continue;
            p->param_off[i] = p->param_floats;
            p->param_floats = align_up(p->param_floats + ir_numel(&g->n[g->params[i]]->shape, 1));
        }

    /* A GEMM whose raw result nobody else reads writes straight into the
     * buffer of its epilogue's materialized output, updated in place. */
    for (int i = 0; i < p->ngroups; i++) {
        Group *gr = &p->groups[i];
        const int gemm = gr->kind == G_MATMUL || (gr->kind == G_CONV && g->n[gr->anchor]->op == OP_CONV2D);
        gr->gemm_out = gemm ? gr->anchor : -1;
        if (!gemm || plan_uses_outside(p, gr->anchor))
            continue;
        for (int k = gr->nnodes - 1; k > 0; k--) {
            const Node *n = g->n[gr->nodes[k]];
            if (op_kind[n->op] == K_EW && plan_uses_outside(p, n->id)
                && ir_same_shape(&n->shape, &g->n[gr->anchor]->shape)) {
                gr->gemm_out = n->id;
                break;
            }
        }
    }

    int *last = util_alloc(sizeof(int) * (size_t)g->nn);
    for (int k = 0; k < p->norder; k++) {
        int id = p->order[k];
        const Node *n = g->n[id];
        last[id] = p->is_root[id] ? p->ngroups : p->group_of[id];
        for (int j = 0; j < plan_nin(p, n); j++) {
            int src = plan_source(p, n->in[j]);
            int use = p->group_of[id] >= 0 ? p->group_of[id] : last[id];
            if (use > last[src])
                last[src] = use;
        }
    }

    Live *act = util_alloc(sizeof(Live) * (size_t)g->nn), *fix = util_alloc(sizeof(Live) * (size_t)g->nn);
    int nact = 0, nfix = 0;
    for (int k = 0; k < p->norder; k++) {
        int id = p->order[k];
        const Node *n = g->n[id];
        Buf *b = &p->buf[id];
        if (n->op == OP_PARAM) {
            *b = (Buf){B_PARAM, p->param_off[n->param], ir_numel(&n->shape, 1), 0};
        } else if (op_kind[n->op] == K_OPT || op_kind[n->op] == K_STATE) {   /* in place */
            p->buf[id] = p->buf[n->in[0]];
        } else if (n->grad_of >= 0) {
            *b = (Buf){B_GRAD, p->param_off[g->n[n->grad_of]->param], ir_numel(&n->shape, 1), 0};
        } else if (n->op == OP_SUM_ALL) {
            *b = (Buf){B_STAT, p->nstat++, 1, 0};
        } else if (op_kind[n->op] == K_ROW && !ir_batched(&n->shape)) {    /* metric sums: REG_STATS, ML_STATS */
            int64_t k = ir_numel(&n->shape, 1);
            *b = (Buf){B_STAT, p->nstat, k, 0};
            p->nstat += (int)k;
        } else if (plan_is_view(p, id)) {
            continue;       /* aliased below, once its source is placed */
        } else {
            int grp = p->group_of[id];
            int needed = plan_uses_outside(p, id) || (grp >= 0 && p->groups[grp].gemm_out == id);
            if (!needed)
                continue;
            Live l = {id, align_up(ir_row_elems(&n->shape) + ir_extra_elems(n)), grp, last[id]};
            if (ir_batched(&n->shape)) {
                b->cls = B_ACT;
                act[nact++] = l;
            } else {
                b->cls = B_FIX;
                fix[nfix++] = l;
            }
            b->size = l.size;
        }
    }
    p->act_units = place(p, act, nact);
    /* before the GEMMs' tiles are chosen: the model weighs their bytes */
    for (int k = 0; k < p->norder; k++) {
        Buf *b = &p->buf[p->order[k]];
        b->h16 = b->cls == B_ACT && mem_rounded(p, p->order[k]);
    }
    /* fix values are few and small; distinct slots keep them zero-initialized
     * per step, which the GPU's atomic row reductions accumulate into */
    for (int i = 0; i < nfix; i++) {
        p->buf[fix[i].node].off = p->fix_floats;
        p->fix_floats = align_up(p->fix_floats + fix[i].size);
    }
    for (int k = 0; k < p->norder; k++) {
        int id = p->order[k];
        if (plan_is_view(p, id))
            p->buf[id] = p->buf[plan_source(p, id)];
    }
    p->fix_zero = p->fix_floats;
    p->cpu_act_units = p->act_units;
    p->cpu_fix_floats = p->fix_floats;
}

/* What the GPU's launch decisions (sched_gpu.c) need, after every buffer:
 * split-K GEMMs share one workspace in act (kernels of a plan run one
 * after another), split x N floats per sample for the partial [split][M][N];
 * arrival counters, one per tile of the train batch's grid, in fix, which
 * the step zeroes. A weight gradient's M x N is the weight's, not per
 * sample: its partials go to fix after everything the step zeroes (each
 * its own range, so that sibling kernels never share one); so do a
 * channel pass's slices' partial sums. */
void mem_plan_gpu(Plan *p)
{
    const Graph *g = p->g;
    if (!p->gpu)
        diag_ice("memplan: plan %s has no GPU decisions (sched_gpu runs first)", p->name);
    int64_t ws = 0;
    for (int i = 0; i < p->ngroups; i++) {
        Group *gr = &p->groups[i];
        if (gr->split < 2)
            continue;
        if (gr->kind == G_CHAN) {   /* a channel pass over several blocks: a counter a channel */
            gr->ctr_off = p->fix_floats;
            p->fix_floats = align_up(p->fix_floats + gr->ctr_n);
            continue;
        }
        const Shape *s = &g->n[gr->anchor]->shape;
        int64_t cols = s->d[1];
        const int fixed = !IR_IS_BATCH(s->d[0]);
        if (!fixed) {   /* per sample: its rows' partials ([N*T, cols] has T rows a sample) */
            gr->ws_units = gr->split * cols * ir_batch_mul(s->d[0]);
            if (align_up(gr->ws_units) > ws)
                ws = align_up(gr->ws_units);
            gr->ws_off = align_up(p->act_units);
        }
        gr->ctr_rows = ((fixed ? s->d[0] : p->batch * ir_batch_mul(s->d[0])) + gr->tile_m - 1) / gr->tile_m;
        gr->ctr_n = gr->ctr_rows * ((cols + GPU_TILE_N - 1) / GPU_TILE_N);
        gr->ctr_off = p->fix_floats;
        p->fix_floats = align_up(p->fix_floats + gr->ctr_n);
    }
    p->fix_zero = p->fix_floats;
    for (int i = 0; i < p->ngroups; i++) {
        Group *gr = &p->groups[i];
        if (gr->kind == G_CHAN && gr->split > 1) {  /* its slices' partial sums, [channel][slice][sum] */
            gr->wsf_off = p->fix_floats;
            p->fix_floats = align_up(p->fix_floats + gr->wsf_n);
            continue;
        }
        const Shape *s = gr->split > 1 ? &g->n[gr->anchor]->shape : NULL;
        if (!s || IR_IS_BATCH(s->d[0]))
            continue;
        gr->wsf_off = p->fix_floats;
        gr->wsf_n = gr->split * s->d[0] * s->d[1];
        p->fix_floats = align_up(p->fix_floats + gr->wsf_n);
    }
    if (ws)
        p->act_units = align_up(p->act_units) + ws;
}

/* What the kernels of both targets round (emit_expr.c's ex_element, the
 * GEMM and convolution stores, the loss gradients) and the ops that only
 * move rounded values: a window's maximum, its gradient where windows do
 * not overlap (each element gets one window's dy or zero), cat and slice.
 * Anything else, an unrounded value (the data, losses, normalizations,
 * batch norm's gradient, an average, keep_f32), stays fp32. kernel_check
 * holds the C kernels to it (a 16-bit buffer's values must be exact in 16
 * bits) and the emulator the CUDA stores. */
int mem_rounded(const Plan *p, int id)
{
    const Graph *g = p->g;
    const Node *n = g->n[id];
    if (g->prec == RT_PREC_FP32 || n->dt != DT_F32 || n->keep_f32)
        return 0;
    if (op_kind[n->op] == K_TENSOR)
        return p->lowp && p->lowp[id];
    switch (n->op) {
    case OP_CONV2D: case OP_CONV2D_DX:
    case OP_CE_GRAD: case OP_MSE_GRAD: case OP_L1_GRAD: case OP_SMOOTH_L1_GRAD: case OP_HUBER_GRAD: case OP_BCE_GRAD:
        return 1;
    case OP_MAXPOOL:
    case OP_SLICE:
        return mem_rounded(p, plan_source(p, n->in[0]));
    case OP_MAXPOOL_DX: {
        const Shape *x, *y;
        ir_pool_io(g, n, &x, &y);
        return ir_pool_tiles(x, y, &n->win) && mem_rounded(p, plan_source(p, n->in[0]));
    }
    case OP_CAT:
        return mem_rounded(p, plan_source(p, n->in[0])) && mem_rounded(p, plan_source(p, n->in[1]));
    default:
        return op_kind[n->op] == K_EW || op_kind[n->op] == K_MATMUL;
    }
}

static const char *const cls_text[] = {"-", "act", "fix", "param", "grad", "stat"};

void mem_dump(FILE *f, const Plan *p)
{
    fprintf(f, "plan %s: act %lld floats/sample, fix %lld floats, %d stats, params %lld floats\n", p->name,
            (long long)p->act_units, (long long)p->fix_floats, p->nstat, (long long)p->param_floats);
    for (int k = 0; k < p->norder; k++) {
        int id = p->order[k];
        const Buf *b = &p->buf[id];
        if (b->cls == B_NONE)
            continue;
        fprintf(f, "  %%%d %-10s %-5s off %lld size %lld%s%s\n", id, op_text[p->g->n[id]->op], cls_text[b->cls],
                (long long)b->off, (long long)b->size, b->cls == B_ACT ? " x N" : "", b->h16 ? " 16-bit" : "");
    }
}
