/* fuse_explain.c: `cddpc MODEL.net --explain-fusion`: every producer and
 * consumer that fuse.c left in different kernels, the named predicate
 * that refused the pair, and what would have allowed it.
 *
 * The reasons are computed by the predicates that decided (fuse.h), in
 * the order fuse.c applies them: first whether any rule grows a kernel of
 * the producer's kind with an op of the consumer's kind (no_rule), then
 * whether that rule is switched on (rule_off), then the rule's own
 * predicates. One line per pair:
 *   PRODUCER%id (KERNEL) -> CONSUMER%id (KERNEL): PREDICATE: why; allow: what */
#include <string.h>

#include "fuse.h"

static const char *kind_text[] = {"data", "matmul", "elementwise", "row", "reduction", "optimizer",
                                  "convolution", "channel", "pooling", "state", "comm", "normalization", "tensor"};
_Static_assert(sizeof kind_text / sizeof *kind_text == G_TENSOR + 1, "a name for every GroupKind");

static const char *op_kind_text[] = {"data", "param", "view", "elementwise", "matmul", "reduction", "row",
                                     "optimizer", "convolution", "channel", "pooling", "state", "comm",
                                     "normalization", "tensor"};
_Static_assert(sizeof op_kind_text / sizeof *op_kind_text == K_TENSOR + 1, "a name for every OpKind");

static const Node *node(const Plan *p, int id) { return p->g->n[id]; }

static const char *rule_name(unsigned bit)
{
    for (int i = 0; i < FUSE_NRULES; i++)
        if (fuse_rule[i].bit == bit)
            return fuse_rule[i].name;
    return "?";
}

static char *shape_str(const Shape *s)
{
    char *t = util_strdup("[");
    for (int i = 0; i < s->rank; i++)
        t = util_fmt("%s%s%s", t, i ? "," : "", s->d[i] == DIM_N ? "N" : s->d[i] < 0 ? util_fmt("N*%lld", (long long)-s->d[i]) : util_fmt("%lld", (long long)s->d[i]));
    return util_fmt("%s]", t);
}

/* Why x's only-or-not readers keep x from being a chain's inner value. */
static char *readers(const Fuser *f, int x)
{
    const Plan *p = f->p;
    const Node *n = node(p, x);
    if (p->is_root[x])
        return util_strdup("it is an output of the plan");
    if (n->grad_of >= 0)
        return util_strdup("it is a parameter's gradient (stored in the gradient slab)");
    char *s = util_fmt("%d readers:", p->nuse[x]);
    for (int k = 0; k < p->nuse[x]; k++) {
        const Node *c = node(p, p->cons[x][k]);
        s = util_fmt("%s %s%%%d", s, op_text[c->op], c->id);
    }
    return s;
}

/* The first input of c from outside grp computed at or after the group's
 * first node (what fuse_inputs_ready refuses), or -1. */
static int late_input(const Fuser *f, int c, int grp)
{
    const Plan *p = f->p;
    const Group *gr = &p->groups[grp];
    const Node *n = node(p, c);
    for (int j = 0; j < plan_nin(p, n); j++) {
        int x = n->in[j];
        if (p->group_of[x] != grp && plan_source(p, x) >= gr->nodes[0] && node(p, x)->op != OP_PARAM)
            return plan_source(p, x);
    }
    return -1;
}

static char *why_chain(const Fuser *f, int x, int c, int gx, unsigned rule)
{
    const Plan *p = f->p;
    if (!(f->rules & rule))
        return util_fmt("rule_off(%s): the rule is switched off; allow: --fusion=...,+%s", rule_name(rule),
                        rule_name(rule));
    if (!fuse_single_consumer(f, x) && !(node(p, c)->op == OP_DROPOUT && (f->rules & R_DROPOUT))
        && !(fuse_act_consumer(f, x) == c && (f->rules & R_ACT_INPUT)))
        return util_fmt("single_consumer(%s%%%d): %s; allow: a kernel with several outputs "
                        "(the value stored for its other readers, as rule dropout does for a dropout)",
                        op_text[node(p, x)->op], x, readers(f, x));
    if (!fuse_same_space(f, c, x))
        return util_fmt("same_space: %s%%%d iterates over %s, %s%%%d over %s%s; allow: loop fusion across "
                        "iteration spaces (not implemented)", op_text[node(p, c)->op], c, shape_str(&node(p, c)->shape),
                        op_text[node(p, x)->op], x, shape_str(&node(p, x)->shape),
                        plan_is_view(p, c) ? " (it is a view)" : "");
    int late = late_input(f, c, gx);
    if (late >= 0)
        return util_fmt("inputs_ready: its input %s%%%d is computed after %s starts; allow: a schedule that "
                        "computes it first (not implemented)", op_text[node(p, late)->op], late, p->groups[gx].name);
    if (p->group_of[c] < gx)
        return util_fmt("claimed: %s%%%d was already in %s, grown earlier; allow: switching off the rule "
                        "that built that kernel", op_text[node(p, c)->op], c, p->groups[p->group_of[c]].name);
    return util_strdup("chain_end: the chain stopped before this pair");
}

static char *why_reduction(const Fuser *f, int x, int c, int gx)
{
    const Plan *p = f->p;
    const Group *gr = &p->groups[gx];
    if (gr->kind != G_MATMUL && gr->kind != G_EW && gr->kind != G_ROW)
        return util_fmt("no_rule(%s -> reduction): only matmul, elementwise and row kernels absorb reductions; "
                        "allow: a reduction epilogue for %s kernels (not implemented)", kind_text[gr->kind],
                        kind_text[gr->kind]);
    if (!(f->rules & R_REDUCTION))
        return util_strdup("rule_off(reduction): the rule is switched off; allow: --fusion=...,+reduction");
    if (gr->kind == G_ROW)
        return util_fmt("reduction_of_group: a row kernel takes only sum_all of a per-sample value and sum_rows "
                        "of ce_grad; %s%%%d reduces %s%%%d", op_text[node(p, c)->op], c, op_text[node(p, x)->op], x);
    return util_fmt("reduction_of_group: %s%%%d does not reduce the kernel's full [rows, columns] space "
                    "(its input %s, the kernel's %s); allow: a reduction over part of the space (not implemented)",
                    op_text[node(p, c)->op], c, shape_str(&node(p, x)->shape),
                    shape_str(&node(p, gr->anchor >= 0 ? gr->anchor : gr->nodes[0])->shape));
}

/* Rule pool-chain: a pool and the chain before it (forward), or a pool
 * gradient and the chain after it (pl the pool op). */
static char *why_pool(const Fuser *f, int x, int c, int gx, int pl)
{
    const Plan *p = f->p;
    if (!(f->rules & R_POOL_CHAIN))
        return util_strdup("rule_off(pool-chain): the rule is switched off; allow: --fusion=...,+pool-chain");
    if (!fuse_pool_tiles(f, pl)) {
        const Window *w = &node(p, pl)->win;
        return util_fmt("pool_tiles: %s%%%d's windows (%dx%d, stride %dx%d, padding %dx%d) do not tile the plane, "
                        "so an element is in several windows or in none; allow: overlapping windows in one pass "
                        "(not implemented)", op_text[node(p, pl)->op], pl, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw);
    }
    if (pl == c)    /* forward: the chain's last value, over its image space, no reduction */
        return util_fmt("pool_of_chain: %s%%%d is not the last value of an elementwise kernel over its image "
                        "space without reductions (%s); allow: pooling any kernel's output (not implemented)",
                        op_text[node(p, x)->op], x, p->groups[gx].name);
    return why_chain(f, x, c, gx, R_POOL_CHAIN);
}

/* Rule row-tail: row op c of GEMM group gx's value x. */
static char *why_row_tail(const Fuser *f, int x, int c, int gx)
{
    const Plan *p = f->p;
    const Group *gr = &p->groups[gx];
    const Shape *s = &node(p, x)->shape;
    if (!(f->rules & R_ROW_TAIL))
        return util_strdup("rule_off(row-tail): the rule is switched off; allow: --fusion=...,+row-tail");
    if (gr->row_anchor >= 0 && !fuse_same_logits(f, c, gr->row_anchor))
        return util_fmt("row_tail: %s already runs the row ops of %s%%%d; allow: row ops of two values in one "
                        "tail (not implemented)", gr->name, op_text[node(p, node(p, gr->row_anchor)->in[0])->op],
                        node(p, gr->row_anchor)->in[0]);
    if (!ir_same_shape(s, &node(p, gr->anchor)->shape) || s->rank != 2)
        return util_fmt("row_tail: %s%%%d (%s) is not the product's own [rows, columns] value; allow: row ops of "
                        "a view of the product (not implemented)", op_text[node(p, x)->op], x, shape_str(s));
    if (s->d[1] > ROW_TAIL_MAX_COLS)
        return util_fmt("row_tail: rows of %lld values, more than a GPU GEMM tile's %d columns, so no block holds "
                        "a whole row; allow: a tail over several column tiles (not implemented)",
                        (long long)s->d[1], ROW_TAIL_MAX_COLS);
    int late = late_input(f, c, gx);
    if (late >= 0)
        return util_fmt("inputs_ready: its input %s%%%d is computed after %s starts; allow: a schedule that "
                        "computes it first (not implemented)", op_text[node(p, late)->op], late, gr->name);
    if (!(f->rules & R_ROW_OPS))
        return util_strdup("rule_off(row-ops): the tail takes one row op without rule row-ops; allow: "
                           "--fusion=...,+row-ops");
    return util_strdup("row_tail: the row op starts its own kernel");
}

/* Rule tensor-chain: pointwise consumers of the kernel's shape, and a
 * reduction taking the chain before it as its prologue. */
static char *why_tensor(const Fuser *f, int x, int c, int gx)
{
    const Plan *p = f->p;
    const Node *cn = node(p, c), *a = node(p, p->groups[gx].anchor);
    if (!(f->rules & R_TENSOR_CHAIN))
        return util_strdup("rule_off(tensor-chain): the rule is switched off; allow: --fusion=...,+tensor-chain");
    if (a->op == OP_T_BMM || cn->op == OP_T_BMM)
        return util_fmt("no_rule(bmm): a product between activations runs as BLAS calls (CPU) or in its own tiles "
                        "(CUDA), a kernel of its own; allow: %s (not implemented)", a->op == OP_T_BMM
                        ? "an epilogue in the product's tiles" : "a prologue in the product's operand loads");
    if (ten_is_reduction(cn->op)) {
        if (ten_is_reduction(a->op))
            return util_fmt("one_reduction: %s loops over a reduction's result already; allow: a loop nest of "
                            "reductions (not implemented)", p->groups[gx].name);
        if (cn->nin != 1 || cn->in[0] != x)
            return util_fmt("prologue_operand: %s%%%d reads %s%%%d %s; allow: a prologue through views and beside "
                            "a second operand (not implemented)", op_text[cn->op], c, op_text[node(p, x)->op], x,
                            cn->nin != 1 ? "beside a second operand" : "through a view");
        if (!fuse_single_consumer(f, x))
            return util_fmt("single_consumer(%s%%%d): %s; allow: the prologue's value stored for its other readers, "
                            "or recomputed in each (not implemented)", op_text[node(p, x)->op], x, readers(f, x));
        int late = late_input(f, c, gx);
        if (late >= 0)
            return util_fmt("inputs_ready: its input %s%%%d is computed after %s starts", op_text[node(p, late)->op],
                            late, p->groups[gx].name);
        return util_strdup("chain_end: the chain stopped before this pair");
    }
    if (!ir_tensor_pointwise(cn->op))
        return util_fmt("no_rule(tensor -> %s): a movement of values (permute, slice, cat, gather) starts its own "
                        "kernel; allow: reading through it in its consumers' indexing (not implemented)",
                        op_text[cn->op]);
    return why_chain(f, x, c, gx, R_TENSOR_CHAIN);
}

static char *explain_pair(const Fuser *f, int x, int c)
{
    const Plan *p = f->p;
    int gx = p->group_of[x];
    const Group *grx = &p->groups[gx];
    const Node *cn = node(p, c);
    OpKind kc = op_kind[cn->op];
    if (kc == K_EW && (op_fuse[cn->op] & F_EPI)) {
        if (grx->kind == G_MATMUL)
            return why_chain(f, x, c, gx, R_EPILOGUE);
        if (grx->kind == G_EW)
            return why_chain(f, x, c, gx, R_EW_CHAIN);
        if (grx->kind == G_CONV && node(p, x)->op == OP_CONV2D && (op_fuse[cn->op] & F_CONV_EPI)) {
            if (!(f->rules & R_CONV_BIAS))
                return util_strdup("rule_off(conv-bias): the rule is switched off; allow: --fusion=...,+conv-bias");
            return why_chain(f, x, c, gx, R_CONV_BIAS);
        }
        if (grx->kind == G_POOL && (node(p, x)->op == OP_MAXPOOL_DX || node(p, x)->op == OP_AVGPOOL_DX))
            return why_pool(f, x, c, gx, x);
        if (grx->kind == G_CONV)
            return util_fmt("no_rule(convolution -> %s): a convolution's only epilogue is its bias (conv_bias_epilogue); "
                            "allow: activation epilogues on convolutions (not implemented)", op_text[cn->op]);
        return util_fmt("no_rule(%s -> elementwise): no rule gives a %s kernel an elementwise epilogue "
                        "(single_consumer %s, same_space %s); allow: a %s-epilogue rule (not implemented)",
                        kind_text[grx->kind], kind_text[grx->kind], fuse_single_consumer(f, x) ? "holds" : "fails",
                        fuse_same_space(f, c, x) ? "holds" : "fails", kind_text[grx->kind]);
    }
    if (kc == K_RED)
        return why_reduction(f, x, c, gx);
    if ((cn->op == OP_MAXPOOL || cn->op == OP_AVGPOOL) && grx->kind == G_EW)
        return why_pool(f, x, c, gx, c);
    if (kc == K_ROW && grx->kind == G_MATMUL && cn->in[0] == x)
        return why_row_tail(f, x, c, gx);
    if (kc == K_ROW)
        return util_fmt("no_rule(%s -> row): a row op needs whole rows of the logits per sample and starts its own "
                        "kernel; allow: rule row-tail runs it in the GEMM kernel computing its logits, for no other "
                        "kind of kernel (not implemented)", kind_text[grx->kind]);
    if (kc == K_MATMUL && grx->kind == G_DATA) {
        if (!(f->rules & R_DATA_PROLOGUE))
            return util_strdup("rule_off(data-prologue): the rule is switched off; allow: --fusion=...,+data-prologue");
        return util_fmt("data_prologue: %s%%%d does not read the batch's images as its untransposed left operand "
                        "right after %s, or %s gathers more than the images and labels; allow: a gather in any "
                        "operand's loads (not implemented)", op_text[cn->op], c, grx->name, grx->name);
    }
    if (kc == K_OPT)
        return util_strdup("no_rule(-> optimizer): updates wait for their bucket's all-reduce, a schedule point; "
                           "allow: on one rank, the update in the gradient's kernel (not implemented)");
    if (kc == K_CHAN || kc == K_STATE) {
        if (grx->kind == G_CHAN && grx->anchor >= 0) {
            if (!(f->rules & R_CHAN_PASS))
                return util_strdup("rule_off(channel-pass): the rule is switched off; allow: --fusion=...,+channel-pass");
            if (!fuse_chan_pass_result(f, c, grx->anchor))
                return util_fmt("chan_pass_result: %s%%%d is not a channel result that %s computes; allow: a "
                                "second pass over the channel in the same kernel (not implemented)", op_text[cn->op],
                                c, grx->name);
            return util_fmt("inputs_ready: an input of %s%%%d is computed after %s starts", op_text[cn->op], c, grx->name);
        }
        return util_fmt("no_rule(%s -> channel): a channel pass reads whole channels over the batch and starts its "
                        "own kernel; allow: channel sums in the producer's epilogue (not implemented)",
                        kind_text[grx->kind]);
    }
    if (kc == K_COMM && grx->kind == G_CHAN) {
        if (!(f->rules & R_SUM_IN_PLACE))
            return util_strdup("rule_off(sum-in-place): the rule is switched off; allow: --fusion=...,+sum-in-place");
        return util_fmt("sum_in_place: %s%%%d does not sum the result of %s alone, which nothing else reads; allow: "
                        "a copy before the sum in the kernel (not implemented)", op_text[cn->op], c, grx->name);
    }
    if (kc == K_TENSOR && grx->kind == G_TENSOR)
        return why_tensor(f, x, c, gx);
    return util_fmt("no_rule(%s -> %s): a %s op starts its own kernel; allow: a prologue rule for %s kernels "
                    "(not implemented)", kind_text[grx->kind], op_text[cn->op], op_kind_text[kc], op_kind_text[kc]);
}

void fuse_explain(FILE *out, Plan *p, FuseLevel rules)
{
    Fuser f = {p, rules};
    char on[256] = "";
    size_t k = 0;
    for (int i = 0; i < FUSE_NRULES && k < sizeof on; i++)
        if (rules & fuse_rule[i].bit)
            k += (size_t)snprintf(on + k, sizeof on - k, "%s%s", k ? ", " : "", fuse_rule[i].name);
    fprintf(out, "explain-fusion: %s plan, %d kernels; rules on: %s\n", p->name, p->ngroups, k ? on : "(none)");
    const Graph *g = p->g;
    int npairs = 0;
    for (int i = 0; i < p->norder; i++) {
        int c = p->order[i];
        if (p->group_of[c] < 0)
            continue;
        const Node *cn = g->n[c];
        for (int j = 0; j < plan_nin(p, cn); j++) {
            int x = plan_source(p, cn->in[j]);
            if (p->group_of[x] < 0 || p->group_of[x] == p->group_of[c])
                continue;
            int dup = 0;    /* x twice among c's inputs: one line */
            for (int jj = 0; jj < j; jj++)
                dup |= plan_source(p, cn->in[jj]) == x;
            if (dup)
                continue;
            fprintf(out, "  %s%%%d (%s) -> %s%%%d (%s): %s\n", op_text[g->n[x]->op], x, p->groups[p->group_of[x]].name,
                    op_text[cn->op], c, p->groups[p->group_of[c]].name, explain_pair(&f, x, c));
            npairs++;
        }
    }
    fprintf(out, "  %d producer-consumer pairs in different kernels\n", npairs);
    for (int i = 0; i < p->norder; i++) {
        const Node *n = g->n[p->order[i]];
        if (n->op != OP_T_ATTN)
            continue;
        const Shape *k = &g->n[n->in[1]]->shape;
        Shape sc = n->shape;
        sc.d[sc.rank - 1] = k->d[k->rank - 2];
        fprintf(out, "  attention%%%d (%s): rule attention: softmax(q k^T * %.4g%s%s) v in one kernel per (matrix, "
                "block of query rows), its scores %s never stored (each row's log-sum-exp is: the gradients "
                "recompute the probabilities); CPU: BLAS products on a block's scratch, GPU: an online softmax over "
                "key tiles in shared memory\n", n->id, p->groups[p->group_of[n->id]].name, n->attn.scale,
                n->attn.causal ? ", causal" : "", n->attn.mask == ATTN_MASK_BOOL ? " + bool mask"
                : n->attn.mask == ATTN_MASK_ADD ? " + float mask" : "", shape_str(&sc));
    }
}
