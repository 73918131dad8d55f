/* emit_program.c: the program a model compiles to.
 *
 * One C file: the kernels of both plans, tables of kernels, parameters
 * (with PyTorch state_dict names) and train-block settings, and a main()
 * that hands them to the runtime. It is compiled by the system C compiler
 * and linked with libcddprt.a into one self-contained executable. The
 * output appears only when everything succeeded (temp file + rename). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cddpc.h"
#include "dropout_rng.h"
#include "cddprt.h"         /* RT_SCHED_*: the schedule the runtime follows */

/* Model-file text reaches emitted source only through this: a C string
 * literal with everything outside printable ASCII escaped. */
static char *c_string(const char *s)
{
    size_t n = strlen(s);
    char *out = util_alloc(4 * n + 3), *o = out;
    *o++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\' || c == '?')
            o += sprintf(o, "\\%03o", c);
        else if (c >= 32 && c < 127)
            *o++ = (char)c;
        else
            o += sprintf(o, "\\%03o", c);
    }
    *o++ = '"';
    *o = 0;
    return out;
}

/* The CUDA side of a program: every kernel of both plans, compiled once.
 * text: the whole CUDA source; launch[plan][k]: geometry per kernel. */
typedef struct CudaProgram {
    char *text;
    rt_cuda_launch *launch[2];
    char **kernel[2];       /* each kernel's own text, for --emit cuda */
    char **pair[2];         /* [plan][k]: the pair kernel of k and k + 1, or NULL */
} CudaProgram;

static CudaProgram cuda_program(const Plan *const plans[2])
{
    CudaProgram cp = {0};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        diag_ice("open_memstream failed");
    fputs(emit_cuda_prelude(plans[0]->g->prec), f);
    for (int pl = 0; pl < 2; pl++) {
        const Plan *p = plans[pl];
        cp.launch[pl] = util_alloc(sizeof(rt_cuda_launch) * (size_t)(p->ngroups + 1));
        cp.kernel[pl] = util_alloc(sizeof(char *) * (size_t)(p->ngroups + 1));
        for (int i = 0; i < p->ngroups; i++) {
            cp.kernel[pl][i] = emit_cuda_kernel(p, i, &cp.launch[pl][i]);
            fputs(cp.kernel[pl][i], f);
        }
        /* sibling pairs after their parts, whose tile functions they call */
        cp.pair[pl] = util_alloc(sizeof(char *) * (size_t)(p->ngroups + 1));
        for (int i = 0; i + 1 < p->ngroups; i++)
            if (p->groups[i].pair_next) {
                cp.pair[pl][i] = emit_cuda_pair(p, i, &cp.launch[pl][i], &cp.launch[pl][i + 1]);
                fputs(cp.pair[pl][i], f);
            }
    }
    fclose(f);
    cp.text = util_strdup(text);
    free(text);
    return cp;
}

/* RT_PH_* of a kernel: its data or optimizer kind, else backward as soon
 * as it computes any gradient (the fused softmax-CE kernel does). */
static int group_phase(const Plan *p, const Group *gr)
{
    if (gr->kind == G_DATA)
        return 0;
    if (gr->kind == G_OPT)
        return 3;
    for (int k = 0; k < gr->nnodes; k++)
        if (p->g->n[gr->nodes[k]]->phase == PH_BWD)
            return 2;
    return 1;
}

/* The data source's lists, as static arrays the rt_model points to. */
static void emit_strs(FILE *f, const char *name, const char *const *v, int n)
{
    if (n <= 0)
        return;
    fprintf(f, "static const char *const %s[] = {", name);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%s", i ? ", " : "", c_string(v[i]));
    fprintf(f, "};\n");
}

static void emit_floats(FILE *f, const char *name, const double *v, int n)
{
    if (n <= 0)
        return;
    fprintf(f, "static const float %s[] = {", name);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%s", i ? ", " : "", util_cfloat(v[i]));
    fprintf(f, "};\n");
}

static void emit_data_tables(FILE *f, const DataCfg *d)
{
    emit_strs(f, "data_arrays", d->arrays, d->narrays);
    emit_strs(f, "data_targets", d->targets, d->ntargets);
    emit_strs(f, "data_features", d->features, d->nfeatures);
    emit_floats(f, "data_norm_mean", d->norm_mean, d->nnorm);
    emit_floats(f, "data_norm_std", d->norm_std, d->nnorm);
}

static void emit_data_src(FILE *f, const DataCfg *d)
{
    fprintf(f, "    .data = {.kind = %d, .path = %s, .test = %s,\n", d->kind, c_string(d->path),
            d->test ? c_string(d->test) : "NULL");
    fprintf(f, "             .arrays = %s, .targets = %s, .ntargets = %d, .features = %s, .nfeatures = %d,\n",
            d->narrays ? "data_arrays" : "NULL", d->ntargets ? "data_targets" : "NULL", d->ntargets,
            d->nfeatures ? "data_features" : "NULL", d->nfeatures);
    fprintf(f, "             .split = %.17g, .norm_auto = %d, .nnorm = %d, .norm_mean = %s, .norm_std = %s%s},\n",
            d->split, d->norm_auto, d->nnorm, d->nnorm ? "data_norm_mean" : "NULL",
            d->nnorm ? "data_norm_std" : "NULL",
            d->kind == RT_SRC_TEXT ? util_fmt(", .block = %lld, .vocab_bytes = %d", (long long)d->block,
                                              d->vocab_bytes) : "");
}

/* Gradient buckets of the train plan: slab range, the kernel after which
 * the last of its gradients is written, and its optimizer kernel. */
void plan_buckets(const Plan *p, PlanBucket *out)
{
    const Graph *g = p->g;
    for (int b = 0; b < g->nbuckets; b++)
        out[b] = (PlanBucket){INT64_MAX, 0, -1, -1, 0};
    for (int i = 0; i < g->nparam; i++) {
        if (g->n[g->params[i]]->bucket < 0)     /* a buffer */
            continue;
        PlanBucket *b = &out[g->n[g->params[i]]->bucket];
        int64_t off = p->param_off[i], end = off + ir_numel(&g->n[g->params[i]]->shape, 1);
        b->off = off < b->off ? off : b->off;
        b->end = end > b->end ? end : b->end;
        b->nparam++;
        if (g->grad[i] >= 0 && p->group_of[g->grad[i]] > b->ready)
            b->ready = p->group_of[g->grad[i]];
        if (g->updates[i] >= 0)
            b->opt = p->group_of[g->updates[i]];
    }
}

static void emit_buckets(FILE *f, const Plan *train)
{
    const Graph *g = train->g;
    PlanBucket *pb = util_alloc(sizeof(PlanBucket) * (size_t)(g->nbuckets + 1));
    plan_buckets(train, pb);
    fprintf(f, "\nstatic const rt_bucket buckets[] = {\n");
    for (int b = 0; b < g->nbuckets; b++)
        fprintf(f, "    {%lld, %lld, %d, %d, %d},\n", (long long)pb[b].off, (long long)(pb[b].end - pb[b].off), pb[b].ready,
                pb[b].opt, pb[b].nparam);
    if (!g->nbuckets)
        fprintf(f, "    {0, 0, -1, -1, 0},\n");
    fprintf(f, "};\n");
}

static void emit_plan_table(FILE *f, const Plan *p, const char *var, const rt_cuda_launch *cu)
{
    fprintf(f, "\nstatic const rt_kernel %s_kernels[] = {\n", var);
    for (int i = 0; i < p->ngroups; i++) {
        /* every cost is linear in the rows: its values at 0 and 1 row */
        KernelCost c0 = cost_group(p, &p->groups[i], 0, COST_CPU), c1 = cost_group(p, &p->groups[i], 1, COST_CPU);
        fprintf(f, "    {%s, \"%s\", %d, {%.17g, %.17g}, {%.17g, %.17g}},\n", p->groups[i].name, p->groups[i].name,
                group_phase(p, &p->groups[i]), c0.flops, c1.flops - c0.flops, c0.bytes, c1.bytes - c0.bytes);
    }
    fprintf(f, "};\n");
    for (int i = 0; i < p->ngroups; i++) {
        if (!cu[i].acts)
            continue;
        fprintf(f, "%sstatic const int64_t %s_acts%d[] = {", i ? "" : "\n", var, i);
        for (int k = 0; k < RT_ACT_FIELDS * cu[i].nacts; k++)
            fprintf(f, "%s%lld", k ? ", " : "", (long long)cu[i].acts[k]);
        fprintf(f, "%s};\n", cu[i].nacts ? "" : "0");
    }
    fprintf(f, "\nstatic const rt_cuda_launch %s_cuda[] = {\n", var);
    for (int i = 0; i < p->ngroups; i++) {
        const rt_cuda_launch *l = &cu[i];
        fprintf(f, "    {\"%s\", {%u, %u, %u}, {%u, %u, %u}, {%lld, %lld, %lld}, {%lld, %lld, %lld}, %lld, %lld",
                l->name, l->block[0], l->block[1], l->block[2], l->gfix[0], l->gfix[1], l->gfix[2],
                (long long)l->gmul[0], (long long)l->gmul[1], (long long)l->gmul[2], (long long)l->gdiv[0],
                (long long)l->gdiv[1], (long long)l->gdiv[2], (long long)l->coll_off, (long long)l->coll_n);
        /* the split-K scratch, zeros for the others: every field, so --emit c
         * compiles under -Wextra */
        fprintf(f, ", %lld, %lld, %lld, %lld, %lld, %lld", (long long)l->ws_off, (long long)l->ws_units,
                (long long)l->ctr_off, (long long)l->ctr_n, (long long)l->wsf_off, (long long)l->wsf_n);
        fprintf(f, l->pair ? ", \"%s\"" : ", 0", l->pair);
        if (l->acts)
            fprintf(f, ", %s_acts%d, %d},\n", var, i, l->nacts);
        else
            fprintf(f, ", 0, 0},\n");
    }
    fprintf(f, "};\n");
    /* the train plan's gradient ranges a CUDA step zeroes first */
    if (p->training) {
        int64_t *r = util_alloc(sizeof(int64_t) * 2 * (size_t)(p->g->nparam + 1));
        const int n = emit_cuda_zero_ranges(p, r);
        fprintf(f, "\nstatic const int64_t %s_zero[] = {", var);
        for (int k = 0; k < n; k++)
            fprintf(f, "%s%lld, %lld", k ? ", " : "", (long long)r[2 * k], (long long)r[2 * k + 1]);
        fprintf(f, "%s};\n", n ? "" : "0, 0");
    }
}

static void emit_plan_init(FILE *f, const Plan *p, const char *var, const Graph *g)
{
    int cs = -1, nm = 0;
    if (g->correct_sum >= 0 && p->in_plan[g->correct_sum])
        cs = (int)p->buf[g->correct_sum].off, nm = (int)p->buf[g->correct_sum].size;
    if (g->metric2 >= 0 && p->in_plan[g->metric2]) {    /* a multi-task model's: the next slot */
        if (p->buf[g->metric2].off != cs + nm)
            diag_ice("emit: the second metric sum is not in the slot after the first");
        nm++;
    }
    /* nmetric only where it is not accuracy's one slot (0 there): a
     * classifier's program text stays as it was */
    char *zero = util_fmt(", .fix_zero = %lld", (long long)p->fix_zero);
    /* the CPU allocates the C kernels' arenas; the CUDA device adds the
     * launch decisions' workspaces after them */
    if (p->act_units != p->cpu_act_units || p->fix_floats != p->cpu_fix_floats)
        zero = util_fmt("%s, .cuda_act_units = %lld, .cuda_fix_floats = %lld", zero, (long long)p->act_units,
                        (long long)p->fix_floats);
    if (p->training) {
        int64_t *r = util_alloc(sizeof(int64_t) * 2 * (size_t)(p->g->nparam + 1));
        zero = util_fmt(", .zero = %s_zero, .nzero = %d%s", var, emit_cuda_zero_ranges(p, r), zero);
    }
    if (g->count_sum >= 0 && p->in_plan[g->count_sum])
        zero = util_fmt("%s, .has_count = 1, .count_stat = %lld", zero, (long long)p->buf[g->count_sum].off);
    fprintf(f, "    .%s = {%s_kernels, %d, %lld, %lld, %d, %lld, %d, %s_cuda%s%s},\n", var, var, p->ngroups,
            (long long)p->cpu_act_units, (long long)p->cpu_fix_floats, p->nstat, (long long)p->buf[g->loss_sum].off, cs, var,
            g->n[g->correct_sum]->op == OP_SUM_ALL && g->metric2 < 0 ? "" : util_fmt(", %d", nm), zero);
}

/* the parameter table: each PARAM node, then each tied weight's other
 * name (an alias: its target's slab range, RT_PARAM_ALIAS); the optional
 * tables beside it (an embedding's padding row, init arguments) */
static void emit_params(FILE *f, const Graph *g, const Plan *train)
{
    const int np = g->nparam + g->naliases;
    fprintf(f, "\nstatic const rt_param params[] = {\n");
    for (int i = 0; i < np; i++) {
        const int alias = i >= g->nparam, t = alias ? g->n[g->alias_of[i - g->nparam]]->param : i;
        const Node *n = g->n[g->params[t]];
        fprintf(f, "    {%s, %d, {", c_string(alias ? g->aliases[i - g->nparam] : n->name), n->shape.rank);
        if (n->shape.rank > RT_PARAM_RANK)
            diag_ice("emit: parameter %s has %d dimensions", n->name, n->shape.rank);
        for (int k = 0; k < RT_PARAM_RANK; k++)
            fprintf(f, "%s%lld", k ? ", " : "", (long long)(k < n->shape.rank ? n->shape.d[k] : 0));
        int gk = !alias && g->grad[i] >= 0 ? train->group_of[g->grad[i]] : -1;
        fprintf(f, "}, %lld, %lld, %lld, %d, %d, %d},\n", (long long)train->param_off[t],
                (long long)ir_numel(&n->shape, 1), (long long)n->fan_in, n->init, alias ? -1 : n->bucket, gk);
    }
    fprintf(f, "};\n");
    int zero_rows = 0, init_args = 0;
    for (int i = 0; i < g->nparam; i++) {
        const Node *n = g->n[g->params[i]];
        zero_rows |= n->zero_row > 0;
        init_args |= n->init == RT_INIT_NORMAL || n->init == RT_INIT_UNIFORM || n->init == RT_INIT_CONST
                     || n->init == RT_INIT_COPY;
    }
    if (zero_rows) {    /* an embedding's padding_idx row: its init leaves it 0 */
        fprintf(f, "\nstatic const int64_t param_zero_row[] = {");
        for (int i = 0; i < np; i++)
            fprintf(f, "%s%lld", i ? ", " : "", i < g->nparam ? (long long)g->n[g->params[i]]->zero_row : 0LL);
        fprintf(f, "};\n");
    }
    if (init_args) {    /* NORMAL's mean and std, UNIFORM's bounds, CONST's value */
        fprintf(f, "\nstatic const double param_init[] = {");
        for (int i = 0; i < np; i++) {
            const Node *n = i < g->nparam ? g->n[g->params[i]] : NULL;
            fprintf(f, "%s%.17g, %.17g", i ? ", " : "", n ? n->init_a : 0.0, n ? n->init_b : 0.0);
        }
        fprintf(f, "};\n");
    }
    fprintf(f, "\nstatic const int param_flags[] = {");
    for (int i = 0; i < np; i++) {
        const Node *n = i < g->nparam ? g->n[g->params[i]] : NULL;
        fprintf(f, "%s%s", i ? ", " : "", !n ? "RT_PARAM_ALIAS" : !n->buffer ? "0"
                : n->i64 ? "RT_PARAM_BUFFER | RT_PARAM_I64" : "RT_PARAM_BUFFER");
    }
    fprintf(f, "%s};\n", np ? "" : "0");
}

/* A language model's forward alone (--generate, on the CPU): its C
 * kernels and an rt_plan of them; the logits' buffer (an ACT one) where
 * the runtime reads them */
static void emit_predict(FILE *f, const Plan *p)
{
    emit_c_kernels(f, p);
    fprintf(f, "\nstatic const rt_kernel predict_kernels[] = {\n");
    for (int i = 0; i < p->ngroups; i++)
        fprintf(f, "    {%s, \"%s\", %d, {0, 0}, {0, 0}},\n", p->groups[i].name, p->groups[i].name,
                group_phase(p, &p->groups[i]));
    fprintf(f, "};\n");
    fprintf(f, "\nstatic const rt_plan predict_plan = {.k = predict_kernels, .nk = %d, .act_units = %lld, "
               ".fix_floats = %lld, .nstat = %d, .correct_stat = -1};\n",
            p->ngroups, (long long)p->cpu_act_units, (long long)p->cpu_fix_floats, p->nstat);
}

/* where predict's logits are: their buffer's offset in act units */
static int64_t predict_out(const Plan *p)
{
    const int root = plan_source(p, p->g->logits);
    if (p->buf[root].cls != B_ACT)
        diag_ice("emit: the predict plan's logits are not an activation buffer");
    return p->buf[root].off;
}

static void emit_source(FILE *f, const Program *prog, const Plan *train, const Plan *eval, const Plan *predict,
                        const char *src_path, const CudaProgram *cp)
{
    const Graph *g = prog->g;
    const TrainCfg *t = &prog->train;
    fprintf(f, "/* Generated by cddpc from %s. Do not edit. */\n", "the model file named in cddp_model.source");
    fprintf(f, "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n");
    fprintf(f, "#include \"cddprt.h\"\n");
    fprintf(f, "%s\n", CDDP_DROP_RNG_TEXT(static inline));     /* dropout's random stream */
    fputs(emit_tensor_prelude("static inline"), f);
    for (int i = 0; i < g->nn; i++)
        if (ex_uses_fast_math(g->n[i]->op)) {
            fputs(ex_fast_math_prelude(), f);
            break;
        }
    emit_c_kernels(f, train);
    emit_c_kernels(f, eval);
    emit_plan_table(f, train, "train", cp->launch[0]);
    emit_plan_table(f, eval, "eval", cp->launch[1]);
    if (predict)
        emit_predict(f, predict);
    onnx_emit(f, g);
    fprintf(f, "\nstatic const char cuda_src[] =\n");
    for (const char *s = cp->text; *s;) {   /* one literal per line keeps it readable */
        const char *nl = strchr(s, '\n');
        size_t k = nl ? (size_t)(nl - s + 1) : strlen(s);
        char *line = util_alloc(k + 1);
        memcpy(line, s, k);
        fprintf(f, "    %s\n", c_string(line));
        s += k;
    }
    fprintf(f, "    ;\n");
    emit_params(f, g, train);
    emit_buckets(f, train);
    emit_data_tables(f, &t->data);
    if (g->ntargets > 0) {     /* the tuple's class columns, which loading checks */
        fprintf(f, "static const int target_classes[] = {");
        for (int k = 0; k < g->ntargets; k++)
            fprintf(f, "%s%d", k ? ", " : "", g->target_classes[k]);
        fprintf(f, "};\n");
    }
    if (t->sched_n > 0) {
        fprintf(f, "static const double sched_v[] = {");
        for (int i = 0; i < t->sched_n; i++)
            fprintf(f, "%s%.17g", i ? ", " : "", t->sched_v[i]);
        fprintf(f, "};\n");
    }
    fprintf(f, "\nstatic const rt_model cddp_model = {\n");
    fprintf(f, "    .abi = RT_ABI_VERSION,\n    .name = %s,\n    .source = %s,\n", c_string(prog->model_name),
            c_string(src_path));
    fprintf(f, "    .params = params,\n    .nparam = %d,\n    .param_floats = %lld,\n", g->nparam + g->naliases,
            (long long)train->param_floats);
    fprintf(f, "    .opt_floats = %lld,\n", (long long)(ir_opt_slots(prog->g) * train->param_floats));
    emit_plan_init(f, train, "train", g);
    emit_plan_init(f, eval, "eval", g);
    fprintf(f, "    .in_rank = %d, .in_dim = {%lld, %lld, %lld}, .nclass = %d, .target = %d,\n", prog->in_rank,
            (long long)prog->in_dim[0], (long long)prog->in_dim[1], (long long)prog->in_dim[2], prog->nclass,
            prog->target);
    if (prog->in_vocab)
        fprintf(f, "    .in_vocab = %lld,\n", (long long)prog->in_vocab);
    if (predict)
        fprintf(f, "    .predict = &predict_plan, .predict_out = %lld,\n", (long long)predict_out(predict));
    fprintf(f, "    .onnx = &onnx_graph,\n");
    for (int i = 0; i < g->nparam; i++)
        if (g->n[g->params[i]]->zero_row > 0) {
            fprintf(f, "    .param_zero_row = param_zero_row,\n");
            break;
        }
    for (int i = 0; i < g->nparam; i++) {
        const int k = g->n[g->params[i]]->init;
        if (k == RT_INIT_NORMAL || k == RT_INIT_UNIFORM || k == RT_INIT_CONST || k == RT_INIT_COPY) {
            fprintf(f, "    .param_init = param_init,\n");
            break;
        }
    }
    if (prog->positions > 1 || t->has_ignore)
        fprintf(f, "    .positions = %lld, .has_ignore = %d, .ignore_index = %lld,\n", (long long)prog->positions,
                t->has_ignore, (long long)t->ignore_index);
    if (g->metric_kind)     /* the train block's metric */
        fprintf(f, "    .metrics = %s,%s\n", g->metric_kind == METRIC_ACCURACY ? "RT_METRICS_ACCURACY"
                                        : g->metric_kind == METRIC_MACRO_F1 ? "RT_METRICS_MULTILABEL" : "RT_METRICS_REGRESSION",
                g->ntargets > 0 ? " .target_classes = target_classes," : "");
    else if (g->mt_class_out >= 0)
        fprintf(f, "    .metrics = RT_METRICS_MULTITASK, .target_classes = target_classes,\n");
    else if (g->ntargets > 0)
        fprintf(f, "    .target_classes = target_classes,\n");
    else if (prog->target != RT_TGT_CLASS)   /* classifiers keep the text they had: accuracy is 0 */
        fprintf(f, "    .metrics = %s,\n",
                t->loss == LOSS_BCE_LOGITS ? "RT_METRICS_MULTILABEL" : "RT_METRICS_REGRESSION");
    else if (prog->in_vocab && prog->positions > 1)     /* a language model: perplexity, tokens a second */
        fprintf(f, "    .metrics = RT_METRICS_TOKENS,\n");
    emit_data_src(f, &t->data);
    fprintf(f, "    .reduction = %d,\n    .lr = %s, .momentum = %s, .dampening = %s, .weight_decay = %s,\n",
            t->reduction, util_cfloat(t->lr), util_cfloat(t->momentum), util_cfloat(t->dampening),
            util_cfloat(t->weight_decay));
    fprintf(f, "    .nesterov = %d,\n    .batch = %d, .epochs = %d, .shuffle = %d, .drop_last = %d,\n", t->nesterov,
            t->batch, t->epochs, t->shuffle, t->drop_last);
    fprintf(f, "    .seed = %lluull,\n", (unsigned long long)t->seed);
    if (t->max_steps > 0)
        fprintf(f, "    .max_steps = %lld,\n", (long long)t->max_steps);
    fprintf(f, "    .cuda_src = cuda_src,\n    .buckets = buckets,\n    .nbuckets = %d,\n", g->nbuckets);
    fprintf(f, "    .bucket_mb = %.17g,\n    .param_flags = param_flags,\n", t->bucket_mb);
    /* the state's names in checkpoints, PyTorch's */
    const char *slots = ex_opt_names(prog->g);
    fprintf(f, "    .opt_state = %s,\n", slots ? c_string(slots) : "NULL");
    fprintf(f, "    .sched = %d, .sched_a = %.17g, .sched_b = %.17g,\n", t->sched,
            t->sched == RT_SCHED_STEP ? t->step_size : t->t_max,
            t->sched == RT_SCHED_STEP || t->sched == RT_SCHED_MULTISTEP || t->sched == RT_SCHED_EXPONENTIAL ? t->gamma
                                                                                                        : t->eta_min);
    fprintf(f, "    .precision = %d, .init_scale = %.9g, .growth_factor = %.9g, .backoff_factor = %.9g,\n"
            "    .growth_interval = %lld,\n", t->precision, t->init_scale, t->growth_factor, t->backoff_factor,
            (long long)t->growth_interval);
    /* the newer schedules' arguments (cddprt.h), clipping, accumulation;
     * left out when off (0: none, for the runtime) */
    if (t->sched_n > 0)
        fprintf(f, "    .sched_v = sched_v, .sched_n = %d,\n", t->sched_n);
    if (t->clip_norm > 0)
        fprintf(f, "    .clip_norm = %s,\n", util_cfloat(t->clip_norm));
    if (t->clip_value > 0)
        fprintf(f, "    .clip_value = %s,\n", util_cfloat(t->clip_value));
    if (t->accumulate > 1)
        fprintf(f, "    .accumulate = %d,\n", t->accumulate);
    if (train->gpu)     /* sched_gpu's target, which the runtime holds the device to */
        fprintf(f, "    .gpu_target = %s,\n", c_string(train->gpu->name));
    fprintf(f, "};\n\n");
    fprintf(f, "int main(int argc, char **argv)\n{\n    return rt_main(&cddp_model, argc, argv);\n}\n");
}

/* Directory holding libcddprt.a and include/cddprt.h: $CDDPC_RUNTIME, or
 * where the cddpc executable itself lives (build/ or the install prefix). */
static char *runtime_dir(void)
{
    const char *env = getenv("CDDPC_RUNTIME");
    if (env && *env)
        return util_strdup(env);
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return util_strdup(".");
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = 0;
    return util_strdup(buf);
}

/* While the C compiler runs: its process group and our temporary files,
 * for a signal's handler (SIGINT, SIGTERM, SIGHUP) to stop it and remove
 * them before dying of that signal, so that an interrupted cddpc leaves
 * neither an orphaned cc1 nor OUT.cddpc-XXXXXX.c and OUT.cddpc-tmp. The
 * handler uses async-signal-safe calls only (kill, unlink, signal, raise). */
static volatile sig_atomic_t cc_group;
static char cc_src[4096], cc_out[4096];
static const int cc_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void cc_interrupted(int sig)
{
    if (cc_group > 0)
        kill(-(pid_t)cc_group, SIGTERM);
    if (cc_src[0])
        unlink(cc_src);
    if (cc_out[0])
        unlink(cc_out);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void cc_guard(int on)
{
    for (size_t i = 0; i < sizeof cc_signals / sizeof *cc_signals; i++)
        signal(cc_signals[i], on ? cc_interrupted : SIG_DFL);
}

/* argv run in its own process group; its exit status, -1 when it could not
 * run or died of a signal, -2 when it ran past timeout seconds (> 0), then
 * its group killed */
static int run(char **argv, double timeout)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);     /* its own group: the handler stops cc and what it runs (cc1, as, ld) */
        cc_guard(0);
        execvp(argv[0], argv);
        fprintf(stderr, "cddpc: error: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);      /* as the child does: whichever runs first */
    cc_group = pid;
    int st, late = 0;
    struct timespec t0, now, nap = {0, 20 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        pid_t r = waitpid(pid, &st, timeout > 0 ? WNOHANG : 0);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            cc_group = 0;
            return -1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!late && timeout > 0 && (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > timeout) {
            kill(-pid, SIGKILL);    /* cc and its cc1, as, ld */
            late = 1;
            timeout = 0;            /* now wait for it to go */
        }
        if (timeout > 0)
            nanosleep(&nap, NULL);
    }
    cc_group = 0;
    return late ? -2 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Splits a space-separated environment variable into argv words. */
static int add_words(char **argv, int argc, const char *env)
{
    const char *v = getenv(env);
    if (!v)
        return argc;
    char *s = util_strdup(v);
    for (char *w = strtok(s, " \t"); w; w = strtok(NULL, " \t"))
        argv[argc++] = w;
    return argc;
}

/* The libraries libcddprt.a was built against (BLAS or not, MPI or not)
 * are listed by its build in libcddprt.ldflags beside it; without that
 * file, the default build's. */
static int add_link_flags(char **argv, int argc, const char *rt)
{
    FILE *f = fopen(util_fmt("%s/libcddprt.ldflags", rt), "r");
    if (!f) {
        char *def[] = {"-lopenblas", "-lz", "-lm", "-lpthread"};
        for (size_t i = 0; i < sizeof def / sizeof *def; i++)
            argv[argc++] = def[i];
        return argc;
    }
    char line[2048];
    if (fgets(line, sizeof line, f))
        for (char *w = strtok(util_strdup(line), " \t\n"); w && argc < 80; w = strtok(NULL, " \t\n"))
            argv[argc++] = w;
    fclose(f);
    return argc;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
        fprintf(stderr, "cddpc: error: cannot write '%s': %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int compile_and_link(const char *src, const char *out_path, double timeout)
{
    char *rt = runtime_dir();
    char *lib = util_fmt("%s/libcddprt.a", rt), *inc = util_fmt("-I%s/include", rt);
    if (access(lib, R_OK) != 0) {
        fprintf(stderr, "cddpc: error: runtime library '%s' not found (set CDDPC_RUNTIME)\n", lib);
        return -1;
    }
    char *csrc = util_fmt("%s.cddpc-XXXXXX.c", out_path);
    char *tmp_out = util_fmt("%s.cddpc-tmp", out_path);
    if (strlen(csrc) >= sizeof cc_src || strlen(tmp_out) >= sizeof cc_out) {
        fprintf(stderr, "cddpc: error: output path too long: '%s'\n", out_path);
        return -1;
    }
    /* the handler's copies are the names themselves: mkstemps fills in
     * cc_src before it creates the file */
    strcpy(cc_src, csrc);
    strcpy(cc_out, tmp_out);
    cc_guard(1);
    int fd = mkstemps(cc_src, 2);
    if (fd < 0) {
        cc_guard(0);
        fprintf(stderr, "cddpc: error: cannot create '%s': %s\n", cc_src, strerror(errno));
        cc_src[0] = cc_out[0] = 0;
        return -1;
    }
    close(fd);
    csrc = util_strdup(cc_src);
    int rc = write_file(csrc, src);
    if (rc == 0) {
        char *argv[96];
        int argc = 0;
        const char *cc = getenv("CDDPC_CC");
        argv[argc++] = (char *)(cc && *cc ? cc : "cc");
        /* -fno-math-errno: nothing reads errno, and with it sqrtf
         * vectorizes; -fno-trapping-math: nothing reads the floating-point
         * exception flags, and with it a select on a comparison (a max
         * pool's window) if-converts instead of branching: the same
         * values, no mispredicted branch per element */
        char *fixed[] = {"-std=c11",       "-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math",
                         "-fopenmp",       "-w",  inc,             csrc,              lib};
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
            argv[argc++] = fixed[i];
        argc = add_words(argv, argc, "CDDPC_CFLAGS");
        argc = add_link_flags(argv, argc, rt);
        argv[argc++] = "-o";
        argv[argc++] = tmp_out;
        argv[argc] = NULL;
        int st = run(argv, timeout);
        if (st == -2) {
            size_t lines = 0;
            for (const char *c = src; *c; c++)
                lines += *c == '\n';
            fprintf(stderr, "cddpc: error: the C compiler did not finish within %g s on the generated program "
                    "(%zu lines) and was stopped; --cc-timeout S sets the limit (0: none)\n", timeout, lines);
            rc = -1;
        } else if (st != 0) {
            fprintf(stderr, "cddpc: error: the C compiler failed (status %d) on the generated program\n", st);
            rc = -1;
        }
    }
    unlink(csrc);
    if (rc == 0 && rename(tmp_out, out_path) != 0) {
        fprintf(stderr, "cddpc: error: cannot create '%s': %s\n", out_path, strerror(errno));
        rc = -1;
    }
    unlink(tmp_out);
    cc_guard(0);
    cc_src[0] = cc_out[0] = 0;
    return rc;
}

static int make_dir(const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cddpc: error: cannot create directory '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* --emit cuda DIR: NAME.cu per kernel (each compiles on its own), all.cu
 * (what the program hands NVRTC) and launch.txt (geometry per kernel:
 * plan name block[3] gfix[3] gmul[3] gdiv[3]; a sibling pair's line,
 * after its first part's, has plan "pair" and grid fields 0). */
static int write_cuda_dir(const char *dir, const Plan *const plans[2], const CudaProgram *cp)
{
    if (make_dir(dir) != 0 || write_file(util_fmt("%s/all.cu", dir), cp->text) != 0)
        return -1;
    char *lt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&lt, &len);
    if (!f)
        diag_ice("open_memstream failed");
    for (int pl = 0; pl < 2; pl++)
        for (int i = 0; i < plans[pl]->ngroups; i++) {
            const rt_cuda_launch *l = &cp->launch[pl][i];
            if (write_file(util_fmt("%s/%s.cu", dir, l->name), util_fmt("%s%s", emit_cuda_prelude(plans[pl]->g->prec), cp->kernel[pl][i])))
                return -1;
            /* a pair's file holds its parts too */
            if (l->pair && write_file(util_fmt("%s/%s.cu", dir, l->pair),
                                      util_fmt("%s%s%s%s", emit_cuda_prelude(plans[pl]->g->prec), cp->kernel[pl][i],
                                               cp->kernel[pl][i + 1], cp->pair[pl][i])))
                return -1;
            fprintf(f, "%s %s %u %u %u %u %u %u %lld %lld %lld %lld %lld %lld\n", plans[pl]->name, l->name, l->block[0],
                    l->block[1], l->block[2], l->gfix[0], l->gfix[1], l->gfix[2], (long long)l->gmul[0],
                    (long long)l->gmul[1], (long long)l->gmul[2], (long long)l->gdiv[0], (long long)l->gdiv[1],
                    (long long)l->gdiv[2]);
            /* a pair: plan "pair", its grid from its parts' (rt_cuda_pair_grid) */
            if (l->pair)
                fprintf(f, "pair %s %u %u %u 0 0 0 0 0 0 0 0 0\n", l->pair, l->block[0], l->block[1], l->block[2]);
        }
    fclose(f);
    int rc = write_file(util_fmt("%s/launch.txt", dir), lt);
    free(lt);
    return rc;
}

int emit_program(const Program *prog, const Plan *train, const Plan *eval, const Plan *predict,
                 const char *src_path, const char *out_path, const char *emit_c_dir, const char *emit_cuda_dir,
                 double cc_timeout)
{
    const Plan *const plans[2] = {train, eval};
    CudaProgram cp = cuda_program(plans);
    if (emit_cuda_dir && write_cuda_dir(emit_cuda_dir, plans, &cp) != 0)
        return -1;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        diag_ice("open_memstream failed");
    emit_source(f, prog, train, eval, predict, src_path, &cp);
    fclose(f);
    if (emit_c_dir) {
        if (make_dir(emit_c_dir) != 0 || write_file(util_fmt("%s/program.c", emit_c_dir), text) != 0)
            return -1;
    }
    int rc = out_path ? compile_and_link(text, out_path, cc_timeout) : 0;
    free(text);
    return rc;
}
