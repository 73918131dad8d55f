/* report.c: `cddpc --report`: the kernels of one step, what each fused,
 * and its FLOPs and memory traffic at the train block's batch (cost.c's
 * model), for fusion studies (compare --fusion=none|elementwise|all, or
 * run `cddpc study`). */
#include <string.h>

#include "cddpc.h"

/* decay = "dim>=2": the optimizer's two groups, as nanoGPT's
 * configure_optimizers counts them (named_parameters(): a tied weight
 * once, no buffers) */
static void plan_report_decay(FILE *f, const Graph *g)
{
    int nt[2] = {0, 0};
    long long np[2] = {0, 0};
    for (int i = 0; i < g->nparam; i++) {
        if (g->n[g->params[i]]->buffer)     /* batch norms' statistics: not parameters */
            continue;
        const int d = ir_param_decays(g, g->params[i]);
        nt[d]++;
        np[d] += (long long)ir_numel(&g->n[g->params[i]]->shape, 1);
    }
    fprintf(f, "  weight decay %g (decay = \"dim>=%d\"): %d tensors, %lld parameters; none on %d tensors, %lld "
               "parameters\n", g->opt.weight_decay, g->decay_dim, nt[1], np[1], nt[0], np[0]);
}

void plan_report(FILE *f, const Plan *p, int64_t batch, CostTarget t)
{
    fprintf(f, "plan %s (batch %lld, %s cost model): %d kernels\n", p->name, (long long)batch,
            t == COST_CPU ? "cpu" : "gpu", p->ngroups);
    int w = 34;     /* the kernel column: as wide as the longest name */
    for (int i = 0; i < p->ngroups; i++)
        w = (int)strlen(p->groups[i].name) > w ? (int)strlen(p->groups[i].name) : w;
    fprintf(f, "  %-*s %4s %12s %12s  %s\n", w, "kernel", "ops", "MFLOP", "KiB", "fused");
    KernelCost tot = {0, 0};
    for (int i = 0; i < p->ngroups; i++) {
        const Group *gr = &p->groups[i];
        KernelCost c = cost_group(p, gr, batch, t);
        tot.flops += c.flops;
        tot.bytes += c.bytes;
        fprintf(f, "  %-*s %4d %12.3f %12.3f ", w, gr->name, gr->nnodes, c.flops / 1e6, c.bytes / 1024);
        for (int k = 0; k < gr->nnodes; k++)
            fprintf(f, " %s%%%d", op_text[p->g->n[gr->nodes[k]]->op], gr->nodes[k]);
        for (int r = 0, first = 1; r < FUSE_NRULES; r++)    /* the rules that built it */
            if (gr->rules & fuse_rule[r].bit) {
                fprintf(f, "%s%s", first ? "  <- " : ", ", fuse_rule[r].name);
                first = 0;
            }
        fprintf(f, "\n");
    }
    fprintf(f, "  %-*s %4s %12.3f %12.3f  (%s)\n", w, "total", "", tot.flops / 1e6, tot.bytes / 1024,
            cost_bytes_text(tot.bytes));
    fprintf(f, "  memory: act %lld floats/sample, fix %lld floats", (long long)p->act_units, (long long)p->fix_floats);
    if (p->fix_zero != p->fix_floats)   /* the rest: split weight gradients' partials */
        fprintf(f, " (%lld zeroed a GPU step)", (long long)p->fix_zero);
    fprintf(f, ", params %lld floats\n", (long long)p->param_floats);
    if (t == COST_GPU && p->g->prec != RT_PREC_FP32) {
        int nact = 0, n16 = 0;
        for (int k = 0; k < p->norder; k++) {
            const int id = p->order[k];
            if (p->buf[id].cls == B_ACT && !plan_is_view(p, id)) {
                nact++;
                n16 += p->buf[id].h16;
            }
        }
        fprintf(f, "  16-bit on the GPU (%s): %d of %d activation buffers (the others hold unrounded values)\n",
                p->g->prec == RT_PREC_BF16 ? "bf16" : "fp16", n16, nact);
    }
    if (!strcmp(p->name, "train") && p->g->decay_dim && p->g->opt.weight_decay != 0.0)
        plan_report_decay(f, p->g);
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
    fprintf(f, "  %-6s %12s %-34s %-20s %s\n", "bucket", "KiB", "ready after", "update", "parameters");
    for (int b = 0; b < g->nbuckets; b++) {
        fprintf(f, "  %-6d %12.1f %-34s %-20s", b, 4.0 * (double)(pb[b].end - pb[b].off) / 1024,
                pb[b].ready >= 0 ? p->groups[pb[b].ready].name : "-", pb[b].opt >= 0 ? p->groups[pb[b].opt].name : "-");
        for (int i = g->nparam - 1; i >= 0; i--)
            if (g->n[g->params[i]]->bucket == b)
                fprintf(f, " %s", g->n[g->params[i]]->name);
        fprintf(f, "\n");
    }
}
