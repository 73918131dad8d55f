/* plan_verify.c: checks what fuse and memplan produce, as ir_verify checks
 * the graph. A failure is a compiler bug; main.c runs these after each pass.
 *
 * After fuse (plan_verify_groups):
 *   - every node that needs a kernel is in exactly one group, and nothing
 *     else (parameters, views) is in any;
 *   - groups run in index order: each value a node reads is produced by an
 *     earlier group, or earlier inside its own group; a parameter updated
 *     in place (optimizer, running statistics) is read by no group after
 *     its update;
 *   - each group is a fusion the emitters implement: its kind's ops only,
 *     elementwise members over the anchor's iteration space, reductions of
 *     the group's own values whose results no other member reads (no
 *     reduce-then-broadcast inside a kernel).
 * After memplan (plan_verify_memory):
 *   - every value read outside its group has a buffer, views share their
 *     source's, in-place updates their parameter's;
 *   - no two values alive in the same kernel overlap: liveness recomputed
 *     here from the groups, independently of memplan's own bookkeeping;
 *   - slab ranges of distinct parameters (and of their gradients) are
 *     disjoint and inside the slab. */
#include <stdarg.h>
#include <string.h>

#include "cddpc.h"

typedef struct Checker {
    const Plan *p;
    const char *after;
    int bad;
} Checker;

__attribute__((format(printf, 3, 4))) static void fail(Checker *c, int grp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cddpc: internal error: plan %s invalid after %s", c->p->name, c->after);
    if (grp >= 0 && grp < c->p->ngroups && c->p->groups[grp].name)
        fprintf(stderr, ": kernel %s", c->p->groups[grp].name);
    else if (grp >= 0)
        fprintf(stderr, ": group %d", grp);
    fprintf(stderr, ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    c->bad++;
}

static const Node *nd(const Checker *c, int id) { return c->p->g->n[id]; }
static const char *txt(const Checker *c, int id) { return op_text[nd(c, id)->op]; }

/* A node that runs in some kernel (an all-reduce in place: as its
 * operand's kernel's collective). */
static int needs_kernel(const Plan *p, int id)
{
    return p->in_plan[id] && (!plan_is_view(p, id) || plan_sum_in_place(p, id)) && op_kind[p->g->n[id]->op] != K_PARAM;
}

/* The parameter an in-place op updates: its first input. */
static int updates_in_place(const Node *n) { return op_kind[n->op] == K_OPT || op_kind[n->op] == K_STATE; }

static int member(const Group *gr, int id)
{
    for (int k = 0; k < gr->nnodes; k++)
        if (gr->nodes[k] == id)
            return 1;
    return 0;
}

static void check_cover(Checker *c)
{
    const Plan *p = c->p;
    const Graph *g = p->g;
    int *seen = util_alloc(sizeof(int) * (size_t)g->nn);
    for (int i = 0; i < p->ngroups; i++) {
        const Group *gr = &p->groups[i];
        if (gr->nnodes < 1)
            fail(c, i, "no nodes");
        for (int k = 0; k < gr->nnodes; k++) {
            int id = gr->nodes[k];
            if (id < 0 || id >= g->nn) {
                fail(c, i, "node %d does not exist", id);
                continue;
            }
            if (k > 0 && id <= gr->nodes[k - 1])
                fail(c, i, "nodes not in topological order (%%%d after %%%d)", id, gr->nodes[k - 1]);
            if (!needs_kernel(p, id))
                fail(c, i, "%s%%%d runs no kernel in this plan", txt(c, id), id);
            if (seen[id]++)
                fail(c, i, "%s%%%d is in more than one group", txt(c, id), id);
            if (p->group_of[id] != i)
                fail(c, i, "group_of[%%%d] is %d", id, p->group_of[id]);
            /* it changes its operand's buffer: nothing else may read it */
            if (plan_sum_in_place(p, id) && p->nuse[nd(c, id)->in[0]] != 1)
                fail(c, i, "%s%%%d sums %s%%%d in place, which %d ops read", txt(c, id), id,
                     txt(c, nd(c, id)->in[0]), nd(c, id)->in[0], p->nuse[nd(c, id)->in[0]]);
        }
    }
    for (int k = 0; k < p->norder; k++) {
        int id = p->order[k];
        if (needs_kernel(p, id) && !seen[id])
            fail(c, -1, "%s%%%d is in no group", txt(c, id), id);
        if (!needs_kernel(p, id) && p->group_of[id] >= 0)
            fail(c, -1, "%s%%%d has group %d but runs no kernel", txt(c, id), id, p->group_of[id]);
    }
}

static void check_order(Checker *c)
{
    const Plan *p = c->p;
    const Graph *g = p->g;
    /* the node updating each parameter in place, -1 */
    int *upd = util_alloc(sizeof(int) * (size_t)g->nn);
    for (int i = 0; i < g->nn; i++)
        upd[i] = -1;
    for (int i = 0; i < p->ngroups; i++)
        for (int k = 0; k < p->groups[i].nnodes; k++) {
            const Node *n = nd(c, p->groups[i].nodes[k]);
            /* an optimizer updates its first input; running statistics the buffers among theirs */
            for (int j = 0; updates_in_place(n) && j < plan_nin(p, n); j++)
                if (nd(c, n->in[j])->op == OP_PARAM && (j == 0 || op_kind[n->op] == K_STATE))
                    upd[n->in[j]] = n->id;
        }
    for (int i = 0; i < p->ngroups; i++) {
        const Group *gr = &p->groups[i];
        for (int k = 0; k < gr->nnodes; k++) {
            const Node *n = nd(c, gr->nodes[k]);
            for (int j = 0; j < plan_nin(p, n); j++) {
                int src = plan_source(p, n->in[j]);
                if (nd(c, src)->op == OP_PARAM) {
                    int u = upd[src], ug = u >= 0 ? p->group_of[u] : -1;
                    if (u >= 0 && u != n->id && (ug < i || (ug == i && n->id > u)))
                        fail(c, i, "%s%%%d reads %s after %s%%%d updated it", op_text[n->op], n->id,
                             nd(c, src)->name, txt(c, u), u);
                    continue;
                }
                int sg = p->group_of[src];
                if (sg < 0)
                    fail(c, i, "%s%%%d reads %s%%%d, which no kernel produces", op_text[n->op], n->id, txt(c, src),
                         src);
                else if (sg > i || (sg == i && src >= n->id))
                    fail(c, i, "%s%%%d reads %s%%%d before kernel %s produces it", op_text[n->op], n->id,
                         txt(c, src), src, p->groups[sg].name);
            }
        }
    }
}

/* The op kinds a group of each kind may hold besides its anchor. */
static int legal_member(const Checker *c, const Group *gr, int id)
{
    const Node *n = nd(c, id);
    OpKind k = op_kind[n->op];
    const Shape *space = &nd(c, gr->anchor >= 0 ? gr->anchor : gr->nodes[0])->shape;
    switch (gr->kind) {
    case G_DATA: return k == K_DATA;
    case G_OPT: return k == K_OPT;
    case G_MATMUL:
    case G_EW:  /* rule pool-chain: a pooling of the chain's result, last */
        /* rule row-tail: row ops of a value over the whole product, whole rows in a tile */
        if (gr->kind == G_MATMUL && k == K_DATA) {   /* rule data-prologue: its left operand, the labels */
            const int a = plan_source(c->p, nd(c, gr->anchor)->in[0]);
            return member(gr, a) && nd(c, a)->op == OP_IMAGES && (n->op == OP_LABELS || a == id);
        }
        if (gr->kind == G_MATMUL && k == K_ROW)
            return gr->row_anchor >= 0 && member(gr, n->in[0]) && ir_same_shape(&nd(c, n->in[0])->shape, space)
                && space->rank == 2 && space->d[1] <= ROW_TAIL_MAX_COLS;
        /* a product's epilogue may read its rows through a view ([N*T, C] as [N, T, C]) */
        return (k == K_EW && (gr->kind == G_MATMUL ? ir_same_elements(&n->shape, space) : ir_same_shape(&n->shape, space)))
            || k == K_RED
            || (gr->kind == G_EW && (n->op == OP_MAXPOOL || n->op == OP_AVGPOOL) && member(gr, n->in[0])
                && gr->nodes[gr->nnodes - 1] == id);
    case G_ROW:
        return k == K_ROW || k == K_RED;
    case G_RED: return k == K_RED && gr->nnodes == 1;
    case G_CONV:    /* the bias epilogue of a forward convolution */
        return n->op == OP_BIAS_ADD && n->in[0] == gr->anchor && nd(c, gr->anchor)->op == OP_CONV2D;
    case G_CHAN:    /* channel results of the pass (fuse.c, chan_pass_result), the sum over ranks of its own */
        return n->op == OP_BN_DW || n->op == OP_SUM_CHAN || n->op == OP_BN_STATS || n->op == OP_BN_RUNNING
            || (n->op == OP_ALLREDUCE && n->in[0] == gr->anchor);
    case G_POOL:    /* rule pool-chain: a pool gradient's elementwise chain */
        return k == K_EW && ir_same_shape(&n->shape, space);
    case G_TENSOR: {
        /* rule tensor-chain: pointwise ops of the anchor's shape, or one
         * reduction over the chain's last value (not begun by a reduction:
         * the members before it its prologue), the members after it of
         * the reduction's shape */
        const Node *a = nd(c, gr->anchor);
        if (a->op == OP_T_BMM)
            return 0;
        int red = -1;
        for (int k = 0; k < gr->nnodes; k++)
            if (gr->nodes[k] != gr->anchor && ten_is_reduction(nd(c, gr->nodes[k])->op)) {
                if (red >= 0)
                    return 0;   /* two reductions in one loop */
                red = gr->nodes[k];
            }
        if (ten_is_reduction(n->op))
            return n->nin == 1 && member(gr, n->in[0]) && !ten_is_reduction(a->op)
                && ir_same_shape(&nd(c, n->in[0])->shape, &a->shape);
        return ir_tensor_pointwise(n->op)
            && ir_same_shape(&n->shape, red >= 0 && n->id > red ? &nd(c, red)->shape : &a->shape);
    }
    case G_STATE: case G_COMM: case G_NORM:
        return 0;
    }
    return 0;
}

static const OpKind anchor_kind[] = {
    [G_MATMUL] = K_MATMUL, [G_ROW] = K_ROW, [G_CONV] = K_CONV, [G_CHAN] = K_CHAN,
    [G_POOL] = K_POOL, [G_STATE] = K_STATE, [G_COMM] = K_COMM, [G_NORM] = K_NORM, [G_TENSOR] = K_TENSOR,
};

static void check_fusions(Checker *c)
{
    const Plan *p = c->p;
    for (int i = 0; i < p->ngroups; i++) {
        const Group *gr = &p->groups[i];
        if (gr->nnodes < 1)
            continue;
        int anchored = gr->kind == G_MATMUL || gr->kind == G_ROW || gr->kind == G_CONV || gr->kind == G_CHAN
                    || gr->kind == G_POOL || gr->kind == G_STATE || gr->kind == G_COMM || gr->kind == G_NORM
                    || gr->kind == G_TENSOR;
        if (anchored && (!member(gr, gr->anchor) || op_kind[nd(c, gr->anchor)->op] != anchor_kind[gr->kind])) {
            fail(c, i, "its anchor %%%d is not one of its nodes of the group's kind", gr->anchor);
            continue;
        }
        if (gr->kind == G_EW && op_kind[nd(c, gr->nodes[0])->op] != K_EW) {
            fail(c, i, "an elementwise group starting with %s", txt(c, gr->nodes[0]));
            continue;
        }
        for (int k = 0; k < gr->nnodes; k++)
            if (!(anchored && gr->nodes[k] == gr->anchor) && !legal_member(c, gr, gr->nodes[k]))
                fail(c, i, "%s%%%d cannot be fused into this kind of kernel", txt(c, gr->nodes[k]), gr->nodes[k]);
        if (gr->kind == G_OPT)
            for (int k = 1; k < gr->nnodes; k++)
                if (nd(c, nd(c, gr->nodes[k])->in[0])->bucket != nd(c, nd(c, gr->nodes[0])->in[0])->bucket)
                    fail(c, i, "updates of two gradient buckets in one kernel");
        /* a reduction's result is complete only when the kernel ends */
        for (int k = 0; k < gr->nnodes; k++) {
            const Node *n = nd(c, gr->nodes[k]);
            if (op_kind[n->op] == K_RED && gr->kind != G_RED && !member(gr, n->in[0]))
                fail(c, i, "%s%%%d reduces %%%d, which the kernel does not compute", op_text[n->op], n->id, n->in[0]);
            for (int j = 0; j < plan_nin(p, n); j++) {
                int x = n->in[j];
                if (member(gr, x) && op_kind[nd(c, x)->op] == K_RED)
                    fail(c, i, "%s%%%d reads the reduction %s%%%d inside the kernel that computes it",
                         op_text[n->op], n->id, txt(c, x), x);
            }
        }
    }
}

int plan_verify_groups(const Plan *p, const char *after)
{
    Checker c = {p, after, 0};
    check_cover(&c);
    if (!c.bad)
        check_order(&c);
    if (!c.bad)
        check_fusions(&c);
    return c.bad;
}

/* ---- buffers ------------------------------------------------------------ */

/* The value whose buffer a node uses: views their source's, in-place
 * updates their parameter's. */
static int owner(const Plan *p, int id)
{
    id = plan_source(p, id);
    while (updates_in_place(p->g->n[id]))
        id = plan_source(p, p->g->n[id]->in[0]);
    return id;
}

int plan_verify_memory(const Plan *p, const char *after)
{
    Checker c = {p, after, 0};
    const Graph *g = p->g;
    /* liveness in kernels: from the producing group to the last reading
     * one (the end of the plan for roots); views pass their readers on */
    int *last = util_alloc(sizeof(int) * (size_t)g->nn);
    for (int i = 0; i < g->nn; i++)
        last[i] = p->is_root[i] ? p->ngroups : -1;
    for (int k = p->norder - 1; k >= 0; k--) {
        int id = p->order[k];
        const Node *n = g->n[id];
        int use = p->group_of[id] >= 0 ? p->group_of[id] : last[id];
        for (int j = 0; j < plan_nin(p, n); j++)
            if (use > last[n->in[j]])
                last[n->in[j]] = use;
    }
    int *live = util_alloc(sizeof(int) * (size_t)g->nn), nlive = 0;
    for (int k = 0; k < p->norder; k++) {
        int id = p->order[k];
        const Node *n = g->n[id];
        const Buf *b = &p->buf[id];
        int o = owner(p, id);
        if (o != id) {
            if (memcmp(b, &p->buf[o], sizeof *b) != 0)
                fail(&c, p->group_of[id], "%s%%%d does not share the buffer of %s%%%d", op_text[n->op], id,
                     txt(&c, o), o);
            continue;
        }
        if (n->op == OP_PARAM || n->grad_of >= 0) {
            int64_t need = ir_numel(&n->shape, 1);
            if (b->cls != (n->op == OP_PARAM ? B_PARAM : B_GRAD) || b->size != need || b->off < 0
                || b->off + b->size > p->param_floats)
                fail(&c, p->group_of[id], "%s%%%d is not in the slab (off %lld size %lld of %lld)", txt(&c, id), id,
                     (long long)b->off, (long long)b->size, (long long)p->param_floats);
            continue;
        }
        if (!needs_kernel(p, id))
            continue;
        if (plan_uses_outside(p, id) && b->cls == B_NONE) {
            fail(&c, p->group_of[id], "%s%%%d is read outside its kernel but has no buffer", txt(&c, id), id);
            continue;
        }
        if (b->cls == B_ACT || b->cls == B_FIX) {
            int64_t room = b->cls == B_ACT ? p->act_units : p->fix_floats;
            if (b->off < 0 || b->size < ir_row_elems(&n->shape) || b->off + b->size > room)
                fail(&c, p->group_of[id], "%s%%%d: buffer off %lld size %lld outside the arena (%lld)", txt(&c, id),
                     id, (long long)b->off, (long long)b->size, (long long)room);
            live[nlive++] = id;
        }
    }
    for (int a = 0; a < nlive; a++)
        for (int b = a + 1; b < nlive; b++) {
            int x = live[a], y = live[b];
            const Buf *bx = &p->buf[x], *by = &p->buf[y];
            if (bx->cls != by->cls)
                continue;
            int dx = p->group_of[x], dy = p->group_of[y];
            int lx = last[x] > dx ? last[x] : dx, ly = last[y] > dy ? last[y] : dy;
            int time = dx <= ly && dy <= lx;
            int space = bx->off < by->off + by->size && by->off < bx->off + bx->size;
            if (time && space)
                fail(&c, dy, "%s%%%d and %s%%%d are alive together in overlapping buffers ([%lld, %lld) and "
                     "[%lld, %lld))", txt(&c, x), x, txt(&c, y), y, (long long)bx->off, (long long)(bx->off + bx->size),
                     (long long)by->off, (long long)(by->off + by->size));
        }
    /* parameters' slab ranges, and (the same offsets) their gradients' */
    for (int i = 0; i < g->nparam; i++)
        for (int j = i + 1; j < g->nparam; j++) {
            int64_t ai = p->param_off[i], ae = ai + ir_numel(&g->n[g->params[i]]->shape, 1);
            int64_t bi = p->param_off[j], be = bi + ir_numel(&g->n[g->params[j]]->shape, 1);
            if (ai < be && bi < ae)
                fail(&c, -1, "parameters %s and %s overlap in the slab", g->n[g->params[i]]->name,
                     g->n[g->params[j]]->name);
        }
    /* fix: its buffers and the split GEMMs' counters rely on the step's
     * zeroing, so they lie in [0, fix_zero); a weight gradient's partials
     * need none and lie after it, each in a range of its own */
    if (p->fix_zero < 0 || p->fix_zero > p->fix_floats)
        fail(&c, -1, "fix_zero %lld outside fix (%lld floats)", (long long)p->fix_zero, (long long)p->fix_floats);
    for (int k = 0; k < p->norder; k++) {
        const Buf *b = &p->buf[p->order[k]];
        if (b->cls == B_FIX && !plan_is_view(p, p->order[k]) && b->off + b->size > p->fix_zero)
            fail(&c, p->group_of[p->order[k]], "%s%%%d: fix buffer [%lld, %lld) past the zeroed part (%lld)",
                 txt(&c, p->order[k]), p->order[k], (long long)b->off, (long long)(b->off + b->size),
                 (long long)p->fix_zero);
    }
    for (int i = 0; i < p->ngroups; i++) {
        const Group *a = &p->groups[i];
        if (a->split < 2)
            continue;
        if (a->ctr_off < 0 || a->ctr_off + a->ctr_n > p->fix_zero)
            fail(&c, i, "split-K counters [%lld, %lld) past the zeroed part of fix (%lld)", (long long)a->ctr_off,
                 (long long)(a->ctr_off + a->ctr_n), (long long)p->fix_zero);
        if (a->wsf_n && (a->wsf_off < p->fix_zero || a->wsf_off + a->wsf_n > p->fix_floats))
            fail(&c, i, "weight-gradient partials [%lld, %lld) outside [fix_zero %lld, %lld)", (long long)a->wsf_off,
                 (long long)(a->wsf_off + a->wsf_n), (long long)p->fix_zero, (long long)p->fix_floats);
        for (int j = i + 1; j < p->ngroups; j++) {
            const Group *b = &p->groups[j];
            if (b->split < 2)
                continue;
            if ((a->ctr_off < b->ctr_off + b->ctr_n && b->ctr_off < a->ctr_off + a->ctr_n) ||
                (a->wsf_n && b->wsf_n && a->wsf_off < b->wsf_off + b->wsf_n && b->wsf_off < a->wsf_off + a->wsf_n))
                fail(&c, j, "split-K scratch of kernels %d and %d overlaps in fix", i, j);
        }
    }
    return c.bad;
}
