/* sched_pair.c: rule siblings, two GEMM kernels as one GPU launch.
 *
 * A layer's backward has two matrix products that read the same output
 * gradient dy: dx = dy W and dW = dy^T x. Neither needs the other, and at
 * a small batch each fills a fraction of the GPU (SimpleNet's fc2 at batch
 * 64: 32 blocks each on 264 block slots of an H200), so launching them
 * one after the other pays a graph node and leaves most SMs idle twice.
 * As one launch (emit_cuda.c's pair kernel: the first's blocks, then the
 * second's, along x) they run side by side and dy is read from L2 by the
 * second.
 *
 * The groups stay two kernels everywhere else (the C backend, the plan,
 * --report's rows, kernel_check's per-kernel comparison): pairing is a
 * launch decision of the GPU schedule (sched_gpu.c makes the others
 * before memplan), made after memplan because it needs the buffers. Two
 * adjacent G_MATMUL groups pair when they share an operand, are not both
 * split-K (the plan's one workspace), and neither touches what the other
 * writes: every buffer range each reads or writes, including split-K
 * scratch, compared within its arena. A pair is never chained further. */
#include "cddpc.h"

typedef struct Range {
    BufClass cls;
    int64_t lo, hi;
} Range;

typedef struct Access {
    Range *r;
    int n, cap;
} Access;

static void add_range(Access *a, BufClass cls, int64_t off, int64_t size)
{
    if (cls == B_NONE || size <= 0)
        return;
    if (a->n == a->cap) {
        a->r = util_grow(a->r, sizeof(Range) * (size_t)a->cap, sizeof(Range) * (size_t)(a->cap ? 2 * a->cap : 8));
        a->cap = a->cap ? 2 * a->cap : 8;
    }
    a->r[a->n++] = (Range){cls, off, off + size};
}

static void add_buf(Access *a, const Plan *p, int id)
{
    add_range(a, p->buf[id].cls, p->buf[id].off, p->buf[id].size);
}

/* What group gr reads and writes, conservatively: every input's buffer is
 * read, every member's buffer written; split-K's partials and counters
 * are written. */
static void accesses(const Plan *p, const Group *gr, Access *rd, Access *wr)
{
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = p->g->n[gr->nodes[k]];
        add_buf(wr, p, n->id);
        for (int j = 0; j < plan_nin(p, n); j++)
            add_buf(rd, p, plan_source(p, n->in[j]));
    }
    if (gr->split > 1) {    /* memplan's layout */
        add_range(wr, B_ACT, gr->ws_off, gr->ws_units);
        add_range(wr, B_FIX, gr->ctr_off, gr->ctr_n);
        add_range(wr, B_FIX, gr->wsf_off, gr->wsf_n);
    }
}

static int overlap(const Access *a, const Access *b)
{
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++)
            if (a->r[i].cls == b->r[j].cls && a->r[i].lo < b->r[j].hi && b->r[j].lo < a->r[i].hi)
                return 1;
    return 0;
}

static int share_operand(const Plan *p, const Group *a, const Group *b)
{
    const Node *x = p->g->n[a->anchor], *y = p->g->n[b->anchor];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (plan_source(p, x->in[i]) == plan_source(p, y->in[j]))
                return 1;
    return 0;
}

/* the buffers a GEMM group's epilogue reads besides its product's */
static int epilogue_loads(const Plan *p, const Group *gr)
{
    int seen[8], n = 0;
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *m = p->g->n[gr->nodes[k]];
        if (m->id == gr->anchor)
            continue;
        for (int j = 0; j < plan_nin(p, m); j++) {
            const int src = plan_source(p, m->in[j]);
            int inside = 0;
            for (int q = 0; q < gr->nnodes && !inside; q++)
                inside = gr->nodes[q] == src;
            for (int q = 0; q < n && !inside; q++)
                inside = seen[q] == src;
            if (!inside && p->buf[src].cls != B_NONE && n < 8)
                seen[n++] = src;
        }
    }
    return n;
}

/* Groups i and i + 1 may run as one launch. */
static int siblings(const Plan *p, int i)
{
    const Group *a = &p->groups[i], *b = &p->groups[i + 1];
    /* two split-K parts would share the plan's one act workspace; a weight
     * gradient's partials have a fix range of their own (accesses) */
    if (a->kind != G_MATMUL || b->kind != G_MATMUL || (a->ws_units > 0 && b->ws_units > 0) || !share_operand(p, a, b))
        return 0;
    /* The pair kernel holds both bodies' registers: an epilogue loading
     * two buffers of its own (a residual's add and tanh_grad's output,
     * models/char_lm.net) spilled 8 bytes at the launch bounds' 128
     * registers under ptxas, where one (relu_grad's, dropout_grad and
     * relu_grad's: SimpleNet, dropout.net) does not: such a GEMM launches
     * alone. */
    if (epilogue_loads(p, a) > 1 || epilogue_loads(p, b) > 1)
        return 0;
    Access ra = {0}, wa = {0}, rb = {0}, wb = {0};
    accesses(p, a, &ra, &wa);
    accesses(p, b, &rb, &wb);
    return !overlap(&wa, &rb) && !overlap(&wa, &wb) && !overlap(&wb, &ra);
}

void sched_pair_siblings(Plan *p, FuseLevel level)
{
    for (int i = 0; i < p->ngroups; i++)
        p->groups[i].pair_next = 0;
    if (!(level & R_SIBLINGS))
        return;
    for (int i = 0; i + 1 < p->ngroups; i++)
        if (siblings(p, i)) {
            p->groups[i].pair_next = 1;
            i++;    /* a pair is not chained further */
        }
}
