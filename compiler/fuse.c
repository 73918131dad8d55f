/* fuse.c: grouping the nodes of a plan into kernels.
 *
 * Legality is a set of named predicates; grouping walks the plan in
 * topological order and grows a group from each unassigned node:
 *   - matmul: absorbs its elementwise epilogue chain (bias, ReLU, and in
 *     backward the ReLU mask) and row reductions of the chain (the bias
 *     gradient), so the product is read back once while still in cache;
 *   - row ops (softmax + cross-entropy forward, its gradient, argmax) on
 *     the same logits: one pass per sample, plus the loss/accuracy sums and
 *     the bias gradient of the last layer; when the logits are a narrow
 *     GEMM's result, that pass is the tail of the GEMM's kernel;
 *   - elementwise chains, with their reductions;
 *   - all optimizer updates: one kernel over the parameter slab;
 *   - per-channel passes (batch norm): one kernel per pass over
 *     [N, C, H, W], holding every channel result that pass can give: the
 *     backward pass's sum(dy) and sum(dy * xhat) are also the weight and
 *     bias gradients, the input gradient it writes is summed into the
 *     previous layer's bias gradient, and the statistics pass updates the
 *     running statistics;
 *   - convolutions with their bias, pooling: one kernel each.
 * Groups run in creation order; the predicates guarantee that is a valid
 * schedule (every input from outside a group is produced before it). */
#include <string.h>

#include "fuse.h"

static const Node *node(const Fuser *f, int id) { return f->p->g->n[id]; }

/* Arrays grow to the next power of two (the arena never frees: growing
 * by one, or giving every group room for the whole plan, made a model of
 * 4000 statements take 0.9 GB, quadratic in its size). */
static void *grow_pow2(void *v, int n, size_t size)
{
    return (n & (n - 1)) == 0 ? util_grow(v, size * (size_t)n, size * (size_t)(n ? 2 * n : 1)) : v;
}

static int new_group(Fuser *f, GroupKind kind, int anchor)
{
    Plan *p = f->p;
    p->groups = grow_pow2(p->groups, p->ngroups, sizeof(Group));
    Group *gr = &p->groups[p->ngroups];
    gr->kind = kind;
    gr->anchor = anchor;
    gr->row_anchor = -1;
    gr->nodes = util_alloc(sizeof(int));
    return p->ngroups++;
}

/* rule: the fusion rule that puts id into grp (0 for the node that
 * starts the group) */
static void add(Fuser *f, int grp, int id, unsigned rule)
{
    Group *gr = &f->p->groups[grp];
    gr->rules |= rule;
    if (gr->nnodes > 0)
        gr->nodes = grow_pow2(gr->nodes, gr->nnodes, sizeof(int));
    /* keep the node list topological: insertion sort by id */
    int k = gr->nnodes++;
    while (k > 0 && gr->nodes[k - 1] > id) {
        gr->nodes[k] = gr->nodes[k - 1];
        k--;
    }
    gr->nodes[k] = id;
    f->p->group_of[id] = grp;
}

/* ---- legality predicates ---------------------------------------------- */

/* x's value is needed by exactly one node and by nothing after the plan. */
int fuse_single_consumer(const Fuser *f, int x)
{
    const Node *n = node(f, x);
    return f->p->nuse[x] == 1 && !f->p->is_root[x] && n->grad_of < 0 && n->op != OP_PARAM;
}

/* c is the consumer of x in the plan (x has one consumer). */
int fuse_consumer_of(const Fuser *f, int x)
{
    return f->p->nuse[x] > 0 ? f->p->cons[x][0] : -1;
}

/* Every input of c from outside group grp is produced before the group
 * starts, so running the whole group at its first node's slot is valid. */
int fuse_inputs_ready(const Fuser *f, int c, int grp)
{
    const Group *gr = &f->p->groups[grp];
    const Node *n = node(f, c);
    for (int j = 0; j < plan_nin(f->p, n); j++) {
        int x = n->in[j];
        if (f->p->group_of[x] == grp || f->p->group_of[plan_source(f->p, x)] == grp)  /* or a view of a member */
            continue;
        if (plan_source(f->p, x) >= gr->nodes[0] && node(f, x)->op != OP_PARAM)
            return 0;
    }
    return 1;
}

/* c iterates over the same elements as x (no broadcast of the result). */
int fuse_same_space(const Fuser *f, int c, int x)
{
    /* after a product, its rows read through a view: the residual add of [N, T, C] after a Linear's [N*T, C] */
    const Shape *cs = &node(f, c)->shape, *xs = &node(f, x)->shape;
    return (op_fuse[node(f, c)->op] & F_EPI) && !plan_is_view(f->p, c)
        && (ir_same_shape(cs, xs) || (op_kind[node(f, x)->op] == K_MATMUL && ir_same_elements(cs, xs)));
}

/* A reduction may join the group computing its input when it reduces that
 * input's full iteration space; its result must not feed back into the
 * group (no reduce-then-broadcast inside one kernel), which holds because
 * consumers of the reduction come later and are never absorbed. */
int fuse_reduction_of_group(const Fuser *f, int r, int grp)
{
    const Node *rn = node(f, r);
    if (op_kind[rn->op] != K_RED || f->p->group_of[r] >= 0)
        return 0;
    int x = rn->in[0];
    if (f->p->group_of[x] != grp)
        return 0;
    const Group *gr = &f->p->groups[grp];
    const Shape *space = &node(f, gr->anchor >= 0 ? gr->anchor : gr->nodes[0])->shape;
    if (gr->kind == G_ROW || (gr->row_anchor >= 0 && op_kind[node(f, x)->op] == K_ROW))
        /* loss/accuracy sums, and the bias gradient from a loss's gradient */
        return rn->op == OP_SUM_ALL ? node(f, x)->shape.rank == 1
                                    : op_kind[node(f, x)->op] == K_ROW && node(f, x)->shape.rank == 2;
    return rn->op == OP_SUM_ROWS && ir_same_shape(&node(f, x)->shape, space) && space->rank == 2;
}

/* The train plan's statistics of the means s and q: bn_stats(.., s, q). */
static int stats_of(const Fuser *f, int st, int s, int q)
{
    const Node *n = node(f, st);
    return n->op == OP_BN_STATS && f->p->training && n->in[3] == s && n->in[4] == q;
}

/* The channel passes c can join: anchor a is a batch-norm pass whose
 * kernel owns whole channels of [N, C, H, W] (a thread or a block per
 * channel), and c is a per-channel result of data a already runs over:
 *   - bn_dpart sums dy and dy * xhat: bn_dw of the same dy, x and
 *     statistics, and sum_chan of the same dy, are those sums;
 *   - bn_dx writes dx: sum_chan of dx sums what the kernel writes (the
 *     previous layer's bias gradient); nothing in the group reads it;
 *   - bn_sqdev's q about the mean s, over this rank's batch only (no
 *     all-reduce between): the train plan's bn_stats of s and q is the
 *     channel's mean and variance, once q is whole;
 *   - bn_stats in the train plan (the anchor, or with bn_sqdev): bn_running
 *     of those statistics updates the channel's running statistics. */
int fuse_chan_pass_result(const Fuser *f, int c, int a)
{
    const Node *cn = node(f, c), *an = node(f, a);
    int sums = an->op == OP_BN_DPART, writes_dx = an->op == OP_BN_DX;
    if (cn->op == OP_BN_DW && sums)
        return cn->in[0] == an->in[0] && cn->in[1] == an->in[1] && cn->in[2] == an->in[2];
    if (cn->op == OP_SUM_CHAN)
        return (sums && cn->in[0] == an->in[0]) || (writes_dx && cn->in[0] == a);
    if (cn->op == OP_BN_STATS)
        return an->op == OP_BN_SQDEV && stats_of(f, c, an->in[1], a);
    if (cn->op == OP_BN_RUNNING)
        return (an->op == OP_BN_STATS && f->p->training && cn->in[3] == a)
            || (an->op == OP_BN_SQDEV && stats_of(f, cn->in[3], an->in[1], a));
    return 0;
}

/* Rule sum-in-place: the all-reduce of channel pass a's result, its one
 * reader, joins a's kernel and sums that result in place after the kernel
 * (the launch's collective, rt_cuda_launch.coll_*; the C kernel's
 * rt_sync_sum): plan_is_view then aliases it to a's result, so no kernel
 * copies it, and one rank runs nothing for it. */
int fuse_sum_in_place(const Fuser *f, int a, int grp)
{
    if (!fuse_single_consumer(f, a))
        return 0;
    int c = fuse_consumer_of(f, a);
    return c >= 0 && node(f, c)->op == OP_ALLREDUCE && f->p->group_of[c] < 0 && !ir_batched(&node(f, a)->shape)
        && fuse_inputs_ready(f, c, grp);
}

/* A convolution's bias as its epilogue: the one consumer of the product is
 * bias_add of a per-output-channel vector, added as each output is stored
 * (the product itself is never stored, memplan's gemm_out). */
int fuse_conv_bias_epilogue(const Fuser *f, int conv, int grp)
{
    if (node(f, conv)->op != OP_CONV2D || !fuse_single_consumer(f, conv))
        return 0;
    int c = fuse_consumer_of(f, conv);
    return c >= 0 && f->p->group_of[c] < 0 && (op_fuse[node(f, c)->op] & F_CONV_EPI) && node(f, c)->in[0] == conv
        && fuse_inputs_ready(f, c, grp);
}

static void absorb_chan_results(Fuser *f, int grp, int anchor)
{
    const Plan *p = f->p;
    for (int k = 0; k < p->norder; k++) {
        int c = p->order[k];
        if (c > anchor && p->group_of[c] < 0 && fuse_chan_pass_result(f, c, anchor) && fuse_inputs_ready(f, c, grp))
            add(f, grp, c, R_CHAN_PASS);
    }
}

/* Rule pool-chain, forward: pool p of the last value x of elementwise
 * group grp joins it when p's windows tile the plane. The kernel then
 * walks the windows: it computes each element of the chain (stored where
 * read outside, as before) and folds it into its window's result, so x
 * is not read back. Only a chain of elementwise ops over x's image space
 * (no reduction: its order would change). x may have other readers (the
 * gradients of ReLU and of the pool read it; it is stored for them). */
int fuse_pool_of_chain(const Fuser *f, int pl, int grp)
{
    const Node *pn = node(f, pl);
    const Group *gr = &f->p->groups[grp];
    if ((pn->op != OP_MAXPOOL && pn->op != OP_AVGPOOL) || f->p->group_of[pl] >= 0 || gr->kind != G_EW
        || plan_is_view(f->p, pl) || pn->in[0] != gr->nodes[gr->nnodes - 1])
        return 0;
    const Shape *x = &node(f, pn->in[0])->shape;
    if (!fuse_pool_tiles(f, pl))
        return 0;
    for (int k = 0; k < gr->nnodes; k++)
        if (op_kind[node(f, gr->nodes[k])->op] != K_EW || !ir_same_shape(&node(f, gr->nodes[k])->shape, x))
            return 0;
    return fuse_inputs_ready(f, pl, grp);
}

/* Rule pool-chain, backward: a pool gradient whose windows tile the plane
 * writes each input element once, so the elementwise chain consuming it
 * (ReLU's gradient) can run on the element as it is written. */
int fuse_pool_grad_chains(const Fuser *f, int pl)
{
    const Node *pn = node(f, pl);
    return (pn->op == OP_MAXPOOL_DX || pn->op == OP_AVGPOOL_DX) && fuse_pool_tiles(f, pl);
}

int fuse_pool_tiles(const Fuser *f, int pl)
{
    const Shape *x, *y;
    ir_pool_io(f->p->g, node(f, pl), &x, &y);
    return ir_pool_tiles(x, y, &node(f, pl)->win) && ir_batched(x);
}

static void absorb_pool(Fuser *f, int grp)
{
    const Plan *p = f->p;
    const int x = p->groups[grp].nodes[p->groups[grp].nnodes - 1];
    for (int k = 0; k < p->nuse[x]; k++)
        if (fuse_pool_of_chain(f, p->cons[x][k], grp)) {
            add(f, grp, p->cons[x][k], R_POOL_CHAIN);
            return;
        }
}

/* ---- grouping ----------------------------------------------------------- */

/* A dropout of x, when x has other readers too. Dropout may still join
 * the kernel computing x: x is stored for those readers anyway (ReLU's
 * gradient reads the ReLU output), and the kernel saves a launch and a
 * read of x. Only dropout, so other chains keep their single-consumer
 * shape. */
int fuse_dropout_consumer(const Fuser *f, int x)
{
    for (int k = 0; k < f->p->nuse[x]; k++) {
        int c = f->p->cons[x][k];
        if (node(f, c)->op == OP_DROPOUT && !plan_is_view(f->p, c))
            return c;
    }
    return -1;
}

/* An activation of x whose gradient reads x (gelu, silu, elu, ...): x
 * has that activation and the gradient(s) as readers. The activation may
 * still join the kernel computing x, as ReLU does: x is stored for the
 * gradient, which runs in a later kernel. Only when every other reader is
 * a backward elementwise op taking x as its second operand (the
 * gradient's shape), so no other chain changes. */
int fuse_act_consumer(const Fuser *f, int x)
{
    const Node *n = node(f, x);
    if (f->p->is_root[x] || n->grad_of >= 0 || n->op == OP_PARAM)
        return -1;
    int act = -1;
    for (int k = 0; k < f->p->nuse[x]; k++) {
        const Node *c = node(f, f->p->cons[x][k]);
        if (c->phase == PH_FWD && op_kind[c->op] == K_EW && c->nin == 1 && c->op != OP_DROPOUT && act < 0)
            act = c->id;
        else if (!(c->phase == PH_BWD && op_kind[c->op] == K_EW && c->nin == 2 && c->in[1] == x))
            return -1;
    }
    return act;
}

/* rule: R_EPILOGUE (from a matrix product) or R_EW_CHAIN (from an
 * elementwise op); R_DROPOUT (R_ACT_INPUT) must be on too for a dropout (an
 * activation whose gradient reads its input) of a value with other readers. */
static void absorb_chain(Fuser *f, int grp, int cur, unsigned rule)
{
    for (;;) {
        int single = fuse_single_consumer(f, cur);
        int c = single ? fuse_consumer_of(f, cur) : (f->rules & R_DROPOUT) ? fuse_dropout_consumer(f, cur) : -1;
        /* through a view that is its value's only reader: a Linear's rows
         * [N*T, C] viewed back as [N, T, C], then the residual add */
        if (c >= 0 && single && plan_is_view(f->p, c) && fuse_single_consumer(f, c))
            c = fuse_consumer_of(f, c);
        unsigned extra = R_DROPOUT;
        if (c < 0 && !single && (f->rules & R_ACT_INPUT)) {
            c = fuse_act_consumer(f, cur);
            extra = R_ACT_INPUT;
        }
        if (c < 0 || f->p->group_of[c] >= 0 || !fuse_same_space(f, c, cur) || !fuse_inputs_ready(f, c, grp))
            return;
        add(f, grp, c, single ? rule : rule | extra);
        cur = c;
    }
}

/* A reduction that can take the chain before it as its prologue: one
 * input, the chain's last value, of the chain's shape (its elements are
 * then visited once each, inside the reduction's loop) */
static int takes_prologue(const Fuser *f, int red, int cur)
{
    const Node *r = node(f, red);
    return ten_is_reduction(r->op) && r->nin == 1 && r->in[0] == cur && ir_same_shape(&node(f, cur)->shape,
                                                                                       &node(f, r->in[0])->shape);
}

/* rule tensor-chain: an op over tensors of any rank (not a product, which
 * runs as BLAS calls on the CPU) absorbs its single pointwise consumer of
 * the same shape, and so on: the chain runs in the anchor's loop over its
 * elements, each value a local, stored only where read outside. A chain
 * not begun by a reduction, read by a reduction over its last value,
 * becomes that reduction's prologue: it runs inside the reduction's loop,
 * each element computed (and stored, where read outside) where it is
 * summed, and the chain goes on over the reduction's result. */
static void absorb_tensor_chain(Fuser *f, int grp, int anchor)
{
    const Node *a = node(f, anchor);
    if (a->op == OP_T_BMM || a->op == OP_T_EMBED_GRAD || ir_own_kernel(a->op))     /* kernels of their own */
        return;
    const Shape *shape = &a->shape;     /* the members' shape: the reduction's once one joins */
    int prologue = !ten_is_reduction(a->op), first = anchor;   /* first: the members outside the loop begin */
    for (int cur = anchor;;) {
        /* a reduction over the chain takes it as its prologue even beside
         * other readers: each element is visited once, where it is stored */
        int c = -1;
        if (prologue && node(f, cur)->grad_of < 0)
            for (int k = 0; k < f->p->nuse[cur] && c < 0; k++)
                if (takes_prologue(f, f->p->cons[cur][k], cur))
                    c = f->p->cons[cur][k];
        if (c < 0 && !fuse_single_consumer(f, cur))
            return;
        if (c < 0)
            c = fuse_consumer_of(f, cur);
        const Node *cn = c >= 0 ? node(f, c) : NULL;
        if (cn && prologue && f->p->group_of[c] < 0 && takes_prologue(f, c, cur) && fuse_inputs_ready(f, c, grp)) {
            add(f, grp, c, R_TENSOR_CHAIN);
            shape = &cn->shape;
            prologue = 0;
            first = c;
            cur = c;
            continue;
        }
        if (!cn || f->p->group_of[c] >= 0 || !ir_tensor_pointwise(cn->op) || !ir_same_shape(&cn->shape, shape)
            || !fuse_inputs_ready(f, c, grp))
            return;
        for (int j = 0; j < cn->nin; j++)   /* a member's value is read at its own element only, a prologue's not */
            if (f->p->group_of[cn->in[j]] == grp
                && (!ir_same_shape(&node(f, cn->in[j])->shape, &cn->shape) || cn->in[j] < first))
                return;
        add(f, grp, c, R_TENSOR_CHAIN);
        cur = c;
    }
}

static void absorb_reductions(Fuser *f, int grp)
{
    const Plan *p = f->p;
    const Group *gr = &p->groups[grp];
    for (int k = 0; k < gr->nnodes; k++) {     /* the group grows as we go */
        int x = gr->nodes[k];
        for (int j = 0; j < p->nuse[x]; j++)
            if (fuse_reduction_of_group(f, p->cons[x][j], grp))
                add(f, grp, p->cons[x][j], R_REDUCTION);
    }
}

/* c is a row op of the same logits and labels as the anchor a. */
int fuse_same_logits(const Fuser *f, int c, int a)
{
    const Node *cn = node(f, c), *an = node(f, a);
    return op_kind[cn->op] == K_ROW && cn->in[0] == an->in[0] && cn->in[1] == an->in[1];
}

static void absorb_row_ops(Fuser *f, int grp, int anchor)
{
    const Plan *p = f->p;
    for (int k = 0; k < p->norder; k++) {
        const Node *c = node(f, p->order[k]);
        if (p->group_of[c->id] < 0 && fuse_same_logits(f, c->id, anchor) && fuse_inputs_ready(f, c->id, grp))
            add(f, grp, c->id, R_ROW_OPS);
    }
}

/* Rule data-prologue: matrix product mm may gather the batch that data
 * group dg gathers, as it loads its operand tiles: dg is the last group
 * so far (the schedule stays), holds the images mm reads as its
 * untransposed left operand (rows = the batch) and labels only, and mm's
 * other operand comes from elsewhere. The images are still stored (a
 * backward GEMM, and the CPU's, read them); on the GPU the first column
 * of tiles stores them and the labels. */
int fuse_data_prologue(const Fuser *f, int mm, int dg)
{
    const Plan *p = f->p;
    const Node *n = node(f, mm);
    if (dg != p->ngroups - 1 || p->groups[dg].kind != G_DATA || (n->op != OP_MM_NT && n->op != OP_MM_NN))
        return 0;
    const int a = plan_source(p, n->in[0]);
    if (p->group_of[a] != dg || node(f, a)->op != OP_IMAGES || node(f, a)->dt != DT_F32
        || p->group_of[plan_source(p, n->in[1])] == dg)
        return 0;
    const Group *gr = &p->groups[dg];
    for (int k = 0; k < gr->nnodes; k++)
        if (gr->nodes[k] != a && node(f, gr->nodes[k])->op != OP_LABELS)
            return 0;
    return 1;
}

/* Rule row-tail: the GEMM kernel row op r may run in after its epilogue,
 * or -1. Its logits are the value the GEMM's epilogue computes over the
 * whole product ([M, N], not a view), at most ROW_TAIL_MAX_COLS wide, so
 * one GPU block holds whole rows of a tile: once it has stored them, it
 * runs the row ops on them (a small classifier head: the logits' GEMM,
 * softmax + cross-entropy, its gradient and the last bias gradient in one
 * kernel). */
int fuse_row_tail(const Fuser *f, int r)
{
    const Node *rn = node(f, r);
    if (op_kind[rn->op] != K_ROW || f->p->group_of[r] >= 0)
        return -1;
    const int x = rn->in[0], gx = f->p->group_of[x];
    if (gx < 0 || plan_is_view(f->p, x))
        return -1;
    const Group *gr = &f->p->groups[gx];
    const Shape *s = &node(f, x)->shape;
    if (gr->kind != G_MATMUL || gr->row_anchor >= 0 || !ir_same_shape(s, &node(f, gr->anchor)->shape)
        || s->rank != 2 || s->d[1] > ROW_TAIL_MAX_COLS)
        return -1;
    /* not after a data prologue: its labels are stored by other blocks */
    for (int k = 0; k < gr->nnodes; k++)
        if (op_kind[node(f, gr->nodes[k])->op] == K_DATA)
            return -1;
    return fuse_inputs_ready(f, r, gx) ? gx : -1;
}

static void group_node(Fuser *f, int id, int *data_grp, int *opt_grp /* [nbuckets] */)
{
    const Node *n = node(f, id);
    unsigned on = f->rules;
    int grp;
    if (plan_is_view(f->p, id))     /* eval's dropout too: no kernel */
        return;
    switch (op_kind[n->op]) {
    case K_PARAM:
    case K_VIEW:
        return;
    case K_DATA:
        if (*data_grp < 0 || !(on & R_DATA))
            *data_grp = new_group(f, G_DATA, -1);
        add(f, *data_grp, id, f->p->groups[*data_grp].nnodes ? R_DATA : 0);
        return;
    case K_OPT: {
        /* one update kernel per gradient bucket: a bucket boundary is a
         * schedule point (its all-reduce must finish first), never fused over */
        int b = node(f, n->in[0])->bucket;
        if (opt_grp[b] < 0 || !(on & R_OPTIMIZER))
            opt_grp[b] = new_group(f, G_OPT, -1);
        add(f, opt_grp[b], id, f->p->groups[opt_grp[b]].nnodes ? R_OPTIMIZER : 0);
        return;
    }
    case K_MATMUL:
        if ((on & R_DATA_PROLOGUE) && *data_grp >= 0 && fuse_data_prologue(f, id, *data_grp)) {
            grp = *data_grp;
            f->p->groups[grp].kind = G_MATMUL;
            f->p->groups[grp].anchor = id;
            add(f, grp, id, R_DATA_PROLOGUE);
            *data_grp = -1;     /* a later data node starts a data kernel of its own */
        } else {
            grp = new_group(f, G_MATMUL, id);
            add(f, grp, id, 0);
        }
        if (on & R_EPILOGUE)
            absorb_chain(f, grp, id, R_EPILOGUE);
        if (on & R_REDUCTION)
            absorb_reductions(f, grp);
        return;
    case K_ROW:
        if ((on & R_ROW_TAIL) && (grp = fuse_row_tail(f, id)) >= 0) {
            f->p->groups[grp].row_anchor = id;
            add(f, grp, id, R_ROW_TAIL);
        } else {
            grp = new_group(f, G_ROW, id);
            add(f, grp, id, 0);
        }
        if (on & R_ROW_OPS)
            absorb_row_ops(f, grp, id);
        if (on & R_REDUCTION)
            absorb_reductions(f, grp);
        return;
    case K_EW:
        grp = new_group(f, G_EW, -1);
        add(f, grp, id, 0);
        if (on & R_EW_CHAIN)
            absorb_chain(f, grp, id, R_EW_CHAIN);
        if (on & R_REDUCTION)
            absorb_reductions(f, grp);
        if (on & R_POOL_CHAIN)
            absorb_pool(f, grp);
        return;
    case K_RED:
        grp = new_group(f, G_RED, -1);
        add(f, grp, id, 0);
        return;
    case K_CONV:    /* window ops are kernels of their own (no epilogue fusion yet) */
    case K_CHAN:
    case K_POOL:
    case K_STATE:
    case K_COMM:    /* a collective between kernels: its own table entry */
    case K_NORM:    /* whole rows, reduced then rewritten: a kernel of its own */
    case K_TENSOR:  /* any rank, through strides: its pointwise consumers join it (rule tensor-chain) */
        grp = new_group(f, op_kind[n->op] == K_CONV ? G_CONV : op_kind[n->op] == K_CHAN ? G_CHAN
                        : op_kind[n->op] == K_POOL ? G_POOL : op_kind[n->op] == K_STATE ? G_STATE
                        : op_kind[n->op] == K_NORM ? G_NORM : op_kind[n->op] == K_TENSOR ? G_TENSOR : G_COMM, id);
        add(f, grp, id, 0);
        if ((on & R_CHAN_PASS) && op_kind[n->op] == K_CHAN)
            absorb_chan_results(f, grp, id);
        if ((on & R_SUM_IN_PLACE) && op_kind[n->op] == K_CHAN && fuse_sum_in_place(f, id, grp))
            add(f, grp, fuse_consumer_of(f, id), R_SUM_IN_PLACE);
        if ((on & R_CONV_BIAS) && fuse_conv_bias_epilogue(f, id, grp))
            add(f, grp, fuse_consumer_of(f, id), R_CONV_BIAS);
        if ((on & R_POOL_CHAIN) && fuse_pool_grad_chains(f, id))
            absorb_chain(f, grp, id, R_POOL_CHAIN);
        if ((on & R_TENSOR_CHAIN) && op_kind[n->op] == K_TENSOR)
            absorb_tensor_chain(f, grp, id);
        return;
    }
}

/* A kernel's name: plan letter and index, its ops in order (a run of one
 * op as _xN), then the rules that built it: t5_mm_nn_relu_grad_sum_rows
 * __epilogue__reduction. Unfused kernels have no rule part. */
static void name_groups(Plan *p)
{
    for (int i = 0; i < p->ngroups; i++) {
        Group *gr = &p->groups[i];
        char buf[160];
        size_t k = (size_t)snprintf(buf, sizeof buf, "%c%d", p->name[0], i);
        Op last = OP_COUNT;
        int reps = 0;
        for (int j = 0; j <= gr->nnodes; j++) {
            Op op = j < gr->nnodes ? p->g->n[gr->nodes[j]]->op : OP_COUNT;
            if (op == last && j < gr->nnodes) {
                reps++;
                continue;
            }
            if (last != OP_COUNT && k < sizeof buf) {
                k += (size_t)snprintf(buf + k, sizeof buf - k, "_%s", op_text[last]);
                if (reps > 1 && k < sizeof buf)
                    k += (size_t)snprintf(buf + k, sizeof buf - k, "_x%d", reps);
            }
            last = op;
            reps = 1;
        }
        /* then each rule that built it, '__' before each ('-' is not C) */
        for (int r = 0; r < FUSE_NRULES && k < sizeof buf; r++)
            if (gr->rules & fuse_rule[r].bit) {
                char tag[32];
                snprintf(tag, sizeof tag, "__%s", fuse_rule[r].name);
                for (char *c = tag; *c; c++)
                    *c = *c == '-' ? '_' : *c;
                k += (size_t)snprintf(buf + k, sizeof buf - k, "%s", tag);
            }
        gr->name = util_strdup(buf);
    }
}

void fuse_plan(Plan *p, FuseLevel rules)
{
    Fuser f = {p, rules};
    int data_grp = -1, *opt_grp = util_alloc(sizeof(int) * (size_t)(p->g->nbuckets + 1));
    for (int b = 0; b <= p->g->nbuckets; b++)
        opt_grp[b] = -1;
    for (int k = 0; k < p->norder; k++)
        if (p->group_of[p->order[k]] < 0)
            group_node(&f, p->order[k], &data_grp, opt_grp);
    name_groups(p);
}
