/* plan.c: a plan is the part of the graph one program entry point runs
 * (the training step or the evaluation step), with its fusion groups and
 * its buffers. Both plans share the graph and the parameter slab. */
#include <string.h>

#include "cddpc.h"

int plan_nin(const Plan *p, const Node *n)
{
    /* the eval plan's batch norm reads the running statistics too; its
     * views (dropout, `a if self.training else b`) read their first input */
    return op_eval[n->op] == EV_RUNNING && !p->training ? 3 : op_eval[n->op] == EV_VIEW && !p->training ? 1 : n->nin;
}

Plan *plan_new(Graph *g, const char *name, const int *roots, int nroots)
{
    Plan *p = util_alloc(sizeof *p);
    p->name = name;
    p->training = strcmp(name, "train") == 0;
    p->g = g;
    p->in_plan = util_alloc((size_t)g->nn);
    p->is_root = util_alloc((size_t)g->nn);
    for (int i = 0; i < nroots; i++)
        if (roots[i] >= 0)
            p->in_plan[roots[i]] = p->is_root[roots[i]] = 1;
    /* Node ids are topological, so one backwards sweep marks everything a
     * root depends on. */
    for (int i = g->nn - 1; i >= 0; i--)
        if (p->in_plan[i])
            for (int k = 0; k < plan_nin(p, g->n[i]); k++)
                p->in_plan[g->n[i]->in[k]] = 1;
    p->order = util_alloc(sizeof(int) * (size_t)g->nn);
    p->nuse = util_alloc(sizeof(int) * (size_t)g->nn);
    for (int i = 0; i < g->nn; i++) {
        if (!p->in_plan[i])
            continue;
        p->order[p->norder++] = i;
        for (int k = 0; k < plan_nin(p, g->n[i]); k++)
            p->nuse[g->n[i]->in[k]]++;
    }
    /* consumer lists, so "who reads this value" is never a graph scan */
    p->cons = util_alloc(sizeof(int *) * (size_t)g->nn);
    int *fill = util_alloc(sizeof(int) * (size_t)g->nn);
    for (int i = 0; i < g->nn; i++)
        p->cons[i] = util_alloc(sizeof(int) * (size_t)(p->nuse[i] + 1));
    for (int k = 0; k < p->norder; k++) {
        const Node *n = g->n[p->order[k]];
        for (int j = 0; j < plan_nin(p, n); j++)
            p->cons[n->in[j]][fill[n->in[j]]++] = n->id;
    }
    p->group_of = util_alloc(sizeof(int) * (size_t)g->nn);
    for (int i = 0; i < g->nn; i++)
        p->group_of[i] = -1;
    return p;
}

Plan *plan_train(Graph *g)
{
    int nroots = 0, *roots = util_alloc(sizeof(int) * (size_t)(g->nparam + g->neffects + 3));
    roots[nroots++] = g->loss_sum;
    if (g->count_sum >= 0)
        roots[nroots++] = g->count_sum;
    for (int i = 0; i < g->neffects; i++)
        roots[nroots++] = g->effects[i];
    for (int i = g->nparam - 1; i >= 0; i--)
        if (g->updates[i] >= 0)
            roots[nroots++] = g->updates[i];
    return plan_new(g, "train", roots, nroots);
}

Plan *plan_predict(Graph *g)
{
    int root = g->logits;
    while (g->n[root]->op == OP_RESHAPE)    /* the logits' producer: what a kernel stores */
        root = g->n[root]->in[0];
    return plan_new(g, "predict", &root, 1);
}

Plan *plan_eval(Graph *g)
{
    int roots[4] = {g->loss_sum}, nroots = 1;
    if (g->correct_sum >= 0)
        roots[nroots++] = g->correct_sum;
    if (g->metric2 >= 0)
        roots[nroots++] = g->metric2;
    if (g->count_sum >= 0)
        roots[nroots++] = g->count_sum;
    return plan_new(g, "eval", roots, nroots);
}

/* Dropout is the identity when evaluating (as nn.Dropout in eval mode):
 * the eval plan aliases it to its input instead of running a copy. An
 * all-reduce in its operand's kernel (rule sum-in-place) sums that operand
 * in place after the kernel: its value lives in the operand's buffer. */
int plan_is_view(const Plan *p, int node)
{
    const Node *n = p->g->n[node];
    return op_kind[n->op] == K_VIEW || (op_eval[n->op] == EV_VIEW && !p->training) || plan_sum_in_place(p, node);
}

int plan_sum_in_place(const Plan *p, int node)
{
    const Node *n = p->g->n[node];
    return n->op == OP_ALLREDUCE && p->group_of[node] >= 0 && p->group_of[node] == p->group_of[n->in[0]];
}

/* The group a value is really produced in: views belong to their source. */
int plan_source(const Plan *p, int node)
{
    while (plan_is_view(p, node))
        node = p->g->n[node]->in[0];
    return node;
}

/* Must the value of `node` live in memory? Yes when a root, a parameter,
 * a gradient, or when anything outside its own group reads it. */
int plan_uses_outside(const Plan *p, int node)
{
    const Graph *g = p->g;
    const Node *n = g->n[node];
    /* the batch is always stored, gathered in a GEMM's kernel too (rule
     * data-prologue): the CPU's GEMM reads it from memory */
    if (p->is_root[node] || n->op == OP_PARAM || n->grad_of >= 0 || n->op == OP_SUM_ALL || op_kind[n->op] == K_DATA)
        return 1;
    int grp = p->group_of[node];
    /* rule row-tail: the row ops read the GEMM's rows back from memory */
    const int tail = plan_in_row_tail(p, node);
    for (int k = 0; k < p->nuse[node]; k++) {
        const int c = p->cons[node][k];
        if (grp < 0 || p->group_of[c] != grp || (!tail && plan_in_row_tail(p, c)))
            return 1;
        /* rule sum-in-place: summed over the ranks in this buffer, for
         * its readers */
        if (plan_sum_in_place(p, c) && plan_uses_outside(p, c))
            return 1;
    }
    return 0;
}

int plan_in_row_tail(const Plan *p, int node)
{
    const int grp = p->group_of[node];
    if (grp < 0 || p->groups[grp].kind != G_MATMUL || p->groups[grp].row_anchor < 0)
        return 0;
    const Node *n = p->g->n[node];
    return op_kind[n->op] == K_ROW || (op_kind[n->op] == K_RED && op_kind[p->g->n[n->in[0]]->op] == K_ROW);
}

void plan_dump_groups(FILE *f, const Plan *p)
{
    fprintf(f, "plan %s: %d kernels\n", p->name, p->ngroups);
    for (int i = 0; i < p->ngroups; i++) {
        const Group *gr = &p->groups[i];
        fprintf(f, "  %s:", gr->name);
        for (int k = 0; k < gr->nnodes; k++)
            fprintf(f, " %s%%%d", op_text[p->g->n[gr->nodes[k]]->op], gr->nodes[k]);
        fprintf(f, "\n");
    }
}
