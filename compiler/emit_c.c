/* emit_c.c: C kernels for the CPU backend, one function per fused group.
 *
 * Every kernel is `static void NAME(rt_exec *e)`: buffer addresses come
 * from the memory plan as constant offsets, the batch from e->n. Matrix
 * products go to the runtime's tuned GEMM (rt_sgemm); their epilogues,
 * elementwise chains and row reductions become one loop nest each, with
 * OpenMP over rows (or over column blocks when the group reduces rows, so
 * every thread owns its own accumulators and results are deterministic). */
#include <stdint.h>
#include <string.h>

#include "cddpc.h"
#include "cddprt.h"         /* RT_PREC_* */

/* A row reduction: each thread owns its columns' sums (see below). */
static char *row_sum(int red, const char *x) { return util_fmt("b%d[j] += %s;", red, x); }

/* The loop nest over `space` evaluating every elementwise node and
 * reduction of the group; `load` is the anchor read from memory (the GEMM
 * result), or -1. */
static void emit_ew_loops(const Emit *m, const Shape *space, int load)
{
    FILE *f = m->f;
    const Group *gr = m->gr;
    char *rows = ex_dim(space->d[0]);
    int64_t cols = 1;
    for (int i = 1; i < space->rank; i++)
        cols *= space->d[i];
    fprintf(f, "    const int64_t R = %s, C = %lld;\n", rows, (long long)cols);
    int red = ex_has_row_reduction(m);
    if (red) {
        fprintf(f, "    #pragma omp parallel for schedule(static) if (R * C >= 65536)\n");
        fprintf(f, "    for (int64_t jb = 0; jb < C; jb += 64) {\n");
        fprintf(f, "        const int64_t je = jb + 64 < C ? jb + 64 : C;\n");
        for (int k = 0; k < gr->nnodes; k++)
            if (ex_node(m, gr->nodes[k])->op == OP_SUM_ROWS)
                fprintf(f, "        for (int64_t j = jb; j < je; j++) b%d[j] = 0.0f;\n", gr->nodes[k]);
        fprintf(f, "        for (int64_t i = 0; i < R; i++)\n");
        fprintf(f, "        for (int64_t j = jb; j < je; j++) {\n%s", ex_chan_index(space, "            "));
    } else if (space->rank == 4) {
        /* image space: a loop per channel plane, so the channel's operands
         * (batch norm's statistics and affine) are invariant in the inner
         * loop, which vectorizes (with -fno-math-errno, sqrtf too) */
        fprintf(f, "    #pragma omp parallel for schedule(static) if (R * C >= 65536)\n");
        fprintf(f, "    for (int64_t i = 0; i < R; i++)\n");
        fprintf(f, "    for (int64_t jc = 0; jc < %lld; jc++)\n", (long long)space->d[1]);
        fprintf(f, "    for (int64_t j = jc * %lld; j < (jc + 1) * %lld; j++) {\n", (long long)(space->d[2] * space->d[3]),
                (long long)(space->d[2] * space->d[3]));
    } else {
        fprintf(f, "    #pragma omp parallel for schedule(static) if (R * C >= 65536)\n");
        fprintf(f, "    for (int64_t i = 0; i < R; i++)\n");
        fprintf(f, "    for (int64_t j = 0; j < C; j++) {\n");
    }
    const char *ind = red ? "            " : "        ";
    ex_element(m, space, load, load >= 0 ? util_fmt("b%d[i * C + j]", gr->gemm_out) : NULL, ind, row_sum);
    fprintf(f, red ? "        }\n    }\n" : "    }\n");
}

/* ---- group kinds ------------------------------------------------------- */

static void emit_row(const Emit *m);
static void emit_data(const Emit *m);

static void emit_matmul(const Emit *whole)
{
    GemmParts v;
    ex_gemm_parts(whole, &v);
    Emit dm = *whole, hm = *whole, tm = *whole;
    dm.gr = &v.data, hm.gr = &v.gemm, tm.gr = &v.tail;
    if (v.data.nnodes)  /* rule data-prologue: the batch, gathered for the product */
        emit_data(&dm);
    const Emit *m = &hm;
    const Node *mm = ex_node(m, m->gr->anchor);
    const Shape *a = &ex_node(m, mm->in[0])->shape, *b = &ex_node(m, mm->in[1])->shape;
    int ta = mm->op == OP_MM_TN, tb = mm->op == OP_MM_NT;
    char *M = ex_dim(mm->shape.d[0]), *N = ex_dim(mm->shape.d[1]);
    char *K = ex_dim(ta ? a->d[0] : a->d[1]);
    char *lda = ex_dim(a->d[1]), *ldb = ex_dim(b->d[1]);
    fprintf(m->f, "    %s%d, %d, %s, %s, %s, b%d, %s, b%d, %s, b%d, %s);\n", ex_gemm_call(m), ta, tb, M, N, K,
            plan_source(m->p, mm->in[0]), lda, plan_source(m->p, mm->in[1]), ldb, m->gr->gemm_out, N);
    if (m->gr->nnodes > 1)
        emit_ew_loops(m, &mm->shape, mm->id);
    if (v.tail.nnodes) {    /* rule row-tail: the row ops on the rows just stored */
        fprintf(m->f, "    {\n");
        emit_row(&tm);
        fprintf(m->f, "    }\n");
    }
}

/* Row ops, one thread for the whole batch: sums in a local double (s<id>),
 * written once after the loop. */
static char *row_store(const char *ind, int id) { return util_fmt("%sb%d[i] = v%d;\n", ind, id, id); }
static char *row_stat(const char *ind, int id, int x) { return util_fmt("%ss%d += (double)v%d;\n", ind, id, x); }

static char *row_stat_add(const char *ind, int id, const char *k, const char *x, int lanes)
{
    (void)lanes;
    return util_fmt("%sb%d[%s] += %s;\n", ind, id, k, x);
}

/* one thread sums a row whole: its part is the row's sum */
static char *row_total(const char *ind, const char *v) { (void)ind, (void)v; return util_strdup(""); }

static void row_stats_out(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++)
        if (ex_node(m, m->gr->nodes[k])->op == OP_SUM_ALL)
            fprintf(m->f, "    b%d[0] = s%d;\n", m->gr->nodes[k], m->gr->nodes[k]);
}

static void emit_row(const Emit *m)
{
    FILE *f = m->f;
    const Group *gr = m->gr;
    const Node *a = ex_node(m, gr->anchor);
    int lg = plan_source(m->p, a->in[0]), lb = plan_source(m->p, a->in[1]);
    /* a row's columns: the logits' as the loss reads them (a view of a
     * producer of another shape, [N, 1, 28, 28] read as [N, 784], has them
     * all), not its producer's dimension 1 */
    const Shape *xs = &ex_node(m, a->in[0])->shape;
    int64_t C = ir_row_elems(xs) / ir_batch_mul(xs->d[0]);     /* [N*T, C]: rows of positions */
    fprintf(f, "    const int64_t R = %s, C = %lld;\n", ex_dim(xs->d[0]), (long long)C);
    for (int k = 0; k < gr->nnodes; k++) {
        const Node *n = ex_node(m, gr->nodes[k]);
        if (n->op == OP_SUM_ALL)
            fprintf(f, "    double s%d = 0.0;\n", n->id);
        if (n->op == OP_SUM_ROWS)
            fprintf(f, "    for (int64_t j = 0; j < C; j++) b%d[j] = 0.0f;\n", n->id);
    }
    if (ex_class_weights(m))
        ex_class_weights_decl(m, "    ");
    if (ex_label_sums(m) && ex_label_sums_rows(m)) {    /* every row counts 1 */
        fprintf(f, "    const float sw = (float)R%s;\n", ex_label_sums(m) & 2 ? ", sc = (float)R" : "");
    } else if (ex_label_sums(m)) {     /* the batch's sums of target weights and counts, in order */
        fprintf(f, "    float sw = 0.0f%s;\n    for (int64_t i = 0; i < R; i++) {\n", ex_label_sums(m) & 2 ? ", sc = 0.0f" : "");
        fprintf(f, "        const int32_t yk = b%d[i];\n        %s\n    }\n", lb, ex_label_sums_add(m, "yk"));
    }
    fprintf(f, "    for (int64_t i = 0; i < R; i++) {\n");
    fprintf(f, "        const float *x = b%d + i * C;\n", lg);
    static const RowTarget rows = {"        ", "for (int64_t j = 0; j < C; j++) {", row_store, row_sum, row_stat,
                                   row_total, row_stat_add};
    if (ex_float_targets(m)) {  /* losses of float targets: no softmax */
        fprintf(f, "        const float *t = b%d + i * C;\n", lb);
        ex_row_ops(m, &rows);
        fprintf(f, "    }\n");
        row_stats_out(m);
        return;
    }
    fprintf(f, "        const int32_t y = b%d[i];\n", lb);
    fprintf(f, "        float mx = x[0];\n        int64_t am = 0;\n");
    fprintf(f, "        for (int64_t j = 1; j < C; j++) if (x[j] > mx) { mx = x[j]; am = j; }\n");
    fprintf(f, "        float se = 0.0f;\n        for (int64_t j = 0; j < C; j++) se += expf(x[j] - mx);\n");
    fprintf(f, "        const float lse = mx + logf(se);\n");
    if (ex_smoothing(m) && ex_class_weights(m))
        fprintf(f, "        float swx = 0.0f;\n        for (int64_t j = 0; j < C; j++) swx += cw[j] * x[j];\n");
    else if (ex_smoothing(m))
        fprintf(f, "        float sx = 0.0f;\n        for (int64_t j = 0; j < C; j++) sx += x[j];\n");
    ex_row_ops(m, &rows);
    fprintf(f, "        (void)am;\n        (void)lse;\n%s    }\n", ex_reads_label(m) ? "" : "        (void)y;\n");
    row_stats_out(m);
}

static void emit_reduce(const Emit *m)
{
    const Node *n = ex_node(m, m->gr->nodes[0]);
    if (n->op == OP_SUM_ROWS) {
        emit_ew_loops(m, &ex_node(m, n->in[0])->shape, -1);
        return;
    }
    const Node *x = ex_node(m, n->in[0]);
    fprintf(m->f, "    double s = 0.0;\n    for (int64_t k = 0; k < %s * (int64_t)%lld; k++) s += (double)b%d[k];\n",
            ir_batched(&x->shape) ? "n" : "1", (long long)ir_row_elems(&x->shape), plan_source(m->p, x->id));
    fprintf(m->f, "    b%d[0] = s;\n", n->id);
}

static void emit_data(const Emit *m)
{
    FILE *f = m->f;
    for (int k = 0; k < m->gr->nnodes; k++) {
        const Node *n = ex_node(m, m->gr->nodes[k]);
        if (n->op == OP_LABELS && n->dt == DT_I32) {
            fprintf(f, "    for (int64_t i = 0; i < %s; i++) b%d[i] = %s;\n", ex_labels_count(n), n->id,
                    ex_label(n, "i"));
            continue;
        }
        int64_t row = ir_row_elems(&n->shape);
        fprintf(f, "    #pragma omp parallel for schedule(static) if (n >= 64)\n");
        fprintf(f, "    for (int64_t i = 0; i < n; i++) {\n");
        fprintf(f, "        float *dst = b%d + i * %lld;\n", n->id, (long long)row);
        fprintf(f, "        for (int64_t k = 0; k < %lld; k++) dst[k] = %s;\n", (long long)row,
                n->op == OP_LABELS ? ex_target("i", "k") : ex_sample("i", "k"));
        fprintf(f, "    }\n");
    }
}

/* the optimizer's update over slab elements [lo, hi) */
static void emit_opt_loop(FILE *f, const Graph *g, int64_t lo, int64_t hi, int decay)
{
    fprintf(f, "    #pragma omp parallel for simd schedule(static) if (%lld >= 65536)\n", (long long)(hi - lo));
    fprintf(f, "    for (int64_t k = %lld; k < %lld; k++) {\n", (long long)lo, (long long)hi);
    ex_opt_body(f, g, 0, decay);
}

static void emit_opt(const Emit *m)
{
    FILE *f = m->f;
    const Graph *g = m->p->g;
    ex_opt_prelude(f, g, m->p->param_floats);
    int64_t *lo = util_alloc(sizeof(int64_t) * (size_t)m->gr->nnodes);
    int64_t *hi = util_alloc(sizeof(int64_t) * (size_t)m->gr->nnodes);
    int *decay = util_alloc(sizeof(int) * (size_t)m->gr->nnodes);
    int nr = ex_opt_ranges(m, lo, hi, decay);
    for (int r = 0; r < nr; r++)
        emit_opt_loop(f, g, lo[r], hi[r], decay[r]);
}

/* A sum over the ranks: the input copied to the node's own buffer, then
 * summed there in place by the runtime (rt_sync_sum, cddprt.h). */
static void emit_comm(const Emit *m)
{
    const Node *n = ex_node(m, m->gr->nodes[0]);
    int64_t count = ir_numel(&n->shape, 1);
    fprintf(m->f, "    for (int64_t k = 0; k < %lld; k++)\n        b%d[k] = b%d[k];\n", (long long)count, n->id,
            plan_source(m->p, n->in[0]));
    fprintf(m->f, "    rt_sync_sum(b%d, %lld);\n", n->id, (long long)count);
}

void emit_c_kernels(FILE *f, const Plan *p)
{
    for (int i = 0; i < p->ngroups; i++) {
        Emit m = {f, p, &p->groups[i], i, 0};
        fprintf(f, "\n/* %s:", m.gr->name);
        for (int k = 0; k < m.gr->nnodes; k++)
            fprintf(f, " %%%d", m.gr->nodes[k]);
        fprintf(f, " */\nstatic void %s(rt_exec *e)\n{\n", m.gr->name);
        fprintf(f, "    const int64_t n = e->n;\n    (void)n;\n");
        if (m.gr->kind != G_OPT)    /* the optimizer indexes the slabs directly */
            ex_declare_buffers(&m);
        switch (m.gr->kind) {
        case G_DATA: emit_data(&m); break;
        case G_MATMUL: emit_matmul(&m); break;
        case G_EW:
            if (ex_pool_of_chain(&m) >= 0)
                emit_pool_chain_c(&m);
            else
                emit_ew_loops(&m, &ex_node(&m, m.gr->nodes[0])->shape, -1);
            break;
        case G_ROW: emit_row(&m); break;
        case G_RED: emit_reduce(&m); break;
        case G_OPT: emit_opt(&m); break;
        case G_CONV: case G_CHAN: case G_POOL: case G_STATE: emit_nchw_c(&m); break;
        case G_COMM: emit_comm(&m); break;
        case G_NORM: emit_norm_c(&m); break;
        case G_TENSOR: {
            const Op op = m.p->g->n[m.gr->anchor]->op;
            ir_is_attention(op) ? emit_attn_c(&m) : ir_is_recurrent(op) ? emit_rnn_c(&m) : emit_tensor_c(&m);
            break;
        }
        }
        const int sum = ex_sum_in_place(&m);
        if (sum >= 0)   /* rule sum-in-place: over the ranks, once the kernel's result is whole */
            fprintf(f, "    rt_sync_sum(b%d, %lld);\n", sum, (long long)ir_numel(&ex_node(&m, sum)->shape, 1));
        fprintf(f, "}\n");
    }
}
