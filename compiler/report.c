/* report.c: `cddpc --report`: the kernels of one step, what each fused,
 * and estimated FLOPs and memory traffic at the train block's batch, for
 * fusion studies (compare --fusion=none|elementwise|all). */
#include <string.h>

#include "cddpc.h"

static int64_t numel(const Node *n, int64_t batch) { return ir_numel(&n->shape, batch); }

static double node_flops(const Graph *g, const Node *n, int64_t b)
{
    switch (op_kind[n->op]) {
    case K_MATMUL: {
        const Shape *a = &g->n[n->in[0]]->shape;
        int64_t k = n->op == OP_MM_TN ? a->d[0] : a->d[1];
        return 2.0 * (double)numel(n, b) * (double)(k == DIM_N ? b : k);
    }
    case K_ROW: {
        int64_t c = g->n[n->in[0]]->shape.d[1];
        return (double)b * (double)c * (n->op == OP_CORRECT ? 1 : 4);
    }
    case K_RED: return (double)numel(g->n[n->in[0]], b);
    case K_OPT: return op_flops[n->op] * (double)numel(n, b);
    case K_DATA: return n->op == OP_IMAGES ? 2.0 * (double)numel(n, b) : 0;
    case K_EW: return op_flops[n->op] * (double)numel(n, b);
    case K_CONV: {   /* 2 flops per output element and weight of its group */
        const Node *y = n->op == OP_CONV2D ? n : g->n[n->in[0]];
        const Shape *w = n->op == OP_CONV2D_DW ? &n->shape : &g->n[n->in[1]]->shape;
        return 2.0 * (double)numel(y, b) * (double)(w->d[1] * w->d[2] * w->d[3]);
    }
    case K_CHAN: case K_POOL: return (double)numel(g->n[n->in[0]], b) * 2;
    default: return 0;
    }
}

/* Bytes a kernel moves: every buffer it reads from outside the group once,
 * every buffer it writes once (in-place updates count twice). */
static double group_bytes(const Plan *p, const Group *gr, int64_t b)
{
    const Graph *g = p->g;
    char *seen = util_alloc((size_t)g->nn);
    double bytes = 0;
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = g->n[gr->nodes[k]];
        if (n->op == OP_IMAGES)
            bytes += (double)numel(n, b);       /* uint8 pixels */
        if (n->op == OP_LABELS)
            bytes += (double)b;
        if (plan_uses_outside(p, n->id) || gr->gemm_out == n->id)
            bytes += op_kind[n->op] == K_OPT ? (op_rd[n->op] + op_wr[n->op]) * (double)numel(n, b)
                                             : 4.0 * (double)numel(n, b);
        for (int j = 0; j < plan_nin(p, n); j++) {
            int x = plan_source(p, n->in[j]);
            if (p->group_of[x] == p->group_of[n->id] || seen[x])
                continue;
            seen[x] = 1;
            bytes += 4.0 * (double)numel(g->n[x], b);
        }
    }
    return bytes;
}

void plan_report(FILE *f, const Plan *p, int64_t batch)
{
    fprintf(f, "plan %s (batch %lld): %d kernels\n", p->name, (long long)batch, p->ngroups);
    fprintf(f, "  %-34s %4s %12s %12s  %s\n", "kernel", "ops", "MFLOP", "KB", "fused");
    double tf = 0, tb = 0;
    for (int i = 0; i < p->ngroups; i++) {
        const Group *gr = &p->groups[i];
        double fl = 0;
        for (int k = 0; k < gr->nnodes; k++)
            fl += node_flops(p->g, p->g->n[gr->nodes[k]], batch);
        double by = group_bytes(p, gr, batch);
        tf += fl;
        tb += by;
        fprintf(f, "  %-34s %4d %12.3f %12.1f ", gr->name, gr->nnodes, fl / 1e6, by / 1024);
        for (int k = 0; k < gr->nnodes; k++)
            fprintf(f, " %s%%%d", op_text[p->g->n[gr->nodes[k]]->op], gr->nodes[k]);
        fprintf(f, "\n");
    }
    fprintf(f, "  %-34s %4s %12.3f %12.1f\n", "total", "", tf / 1e6, tb / 1024);
    fprintf(f, "  memory: act %lld floats/sample, fix %lld floats, params %lld floats\n", (long long)p->act_units,
            (long long)p->fix_floats, (long long)p->param_floats);
    if (!strcmp(p->name, "train"))
        plan_dump_buckets(f, p);
}

void plan_dump_buckets(FILE *f, const Plan *p)
{
    const Graph *g = p->g;
    if (!g->nbuckets)
        return;
    PlanBucket *pb = util_alloc(sizeof(PlanBucket) * (size_t)g->nbuckets);
    plan_buckets(p, pb);
    fprintf(f, "  gradient buckets (all-reduced in this order, each when its ready kernel has run):\n");
    fprintf(f, "  %-6s %12s %-34s %-20s %s\n", "bucket", "KB", "ready after", "update", "parameters");
    for (int b = 0; b < g->nbuckets; b++) {
        fprintf(f, "  %-6d %12.1f %-34s %-20s", b, 4.0 * (double)(pb[b].end - pb[b].off) / 1024,
                pb[b].ready >= 0 ? p->groups[pb[b].ready].name : "-", pb[b].opt >= 0 ? p->groups[pb[b].opt].name : "-");
        for (int i = g->nparam - 1; i >= 0; i--)
            if (g->n[g->params[i]]->bucket == b)
                fprintf(f, " %s", g->n[g->params[i]]->name);
        fprintf(f, "\n");
    }
}
