/* tests/ir/plan_check.c MODEL...: the plan verifier (compiler/plan_verify.c)
 * accepts what fuse and memplan produce for each model, and catches each
 * kind of broken plan planted into a copy: a node in two groups or in none,
 * a kernel scheduled before one it reads from, a parameter read after its
 * update, an illegal fusion (also: a row tail's row ops left in a GEMM
 * kernel without the tail, labels gathered in a GEMM kernel that gathers
 * no images), a reduction read inside its own kernel, split-K scratch
 * misplaced in fix, and two live buffers that overlap. Exit status 1 if any verdict is wrong. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddpc.h"

static int failures;

/* Runs a verifier on q with its messages captured: the verdict must be
 * clean (want NULL), or a failure whose messages contain want. */
static void expect(int (*verify)(const Plan *, const char *), const Plan *q, const char *want, const char *model,
                   const char *what)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int bad = verify(q, "test");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char msg[8192] = "";
    rewind(tmp);
    msg[fread(msg, 1, sizeof msg - 1, tmp)] = 0;
    fclose(tmp);
    int ok = want ? bad > 0 && strstr(msg, want) : bad == 0;
    printf("%s %s: %s (%d problem%s)\n", ok ? "PASS" : "FAIL", model, what, bad, bad == 1 ? "" : "s");
    if (!ok || !want)
        fputs(msg, stdout);
    if (!ok)
        failures++;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1 << 20;   /* model files are small */
    char *buf = util_alloc(cap);
    size_t len = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[len] = 0;
    return buf;
}

static Plan *train_plan(Program *prog, FuseLevel level)
{
    Plan *p = plan_train(prog->g);
    fuse_plan(p, level);
    p->batch = prog->train.batch;   /* as pipeline.c: the GPU's split-K scratch is planned too */
    mem_plan(p);
    sched_gpu(p, gpu_target(SCHED_GPU_DEFAULT));
    mem_plan_gpu(p);
    return p;
}

/* A copy of p's groups and buffers that a test may break. */
static Plan *copy(const Plan *p)
{
    Plan *q = util_alloc(sizeof *q);
    *q = *p;
    q->groups = util_alloc(sizeof(Group) * (size_t)p->ngroups);
    for (int i = 0; i < p->ngroups; i++) {
        q->groups[i] = p->groups[i];
        q->groups[i].nodes = util_alloc(sizeof(int) * (size_t)(p->groups[i].nnodes + 1));
        memcpy(q->groups[i].nodes, p->groups[i].nodes, sizeof(int) * (size_t)p->groups[i].nnodes);
    }
    q->group_of = util_alloc(sizeof(int) * (size_t)p->g->nn);
    memcpy(q->group_of, p->group_of, sizeof(int) * (size_t)p->g->nn);
    q->buf = util_alloc(sizeof(Buf) * (size_t)p->g->nn);
    memcpy(q->buf, p->buf, sizeof(Buf) * (size_t)p->g->nn);
    return q;
}

/* Adds id to group grp at its topological place (as fuse.c keeps them). */
static void plant(Plan *q, int grp, int id)
{
    Group *gr = &q->groups[grp];
    int k = gr->nnodes++;
    while (k > 0 && gr->nodes[k - 1] > id) {
        gr->nodes[k] = gr->nodes[k - 1];
        k--;
    }
    gr->nodes[k] = id;
    q->group_of[id] = grp;
}

/* Removes id from its group, keeping the order of the rest. */
static void unplant(Plan *q, int id)
{
    Group *gr = &q->groups[q->group_of[id]];
    int j = 0;
    for (int k = 0; k < gr->nnodes; k++)
        if (gr->nodes[k] != id)
            gr->nodes[j++] = gr->nodes[k];
    gr->nnodes = j;
    q->group_of[id] = -1;
}

static int find_group(const Plan *p, GroupKind kind)
{
    for (int i = 0; i < p->ngroups; i++)
        if (p->groups[i].kind == kind)
            return i;
    return -1;
}

/* Swaps groups a and b (their order), keeping group_of consistent. */
static void swap_groups(Plan *q, int a, int b)
{
    Group t = q->groups[a];
    q->groups[a] = q->groups[b];
    q->groups[b] = t;
    for (int k = 0; k < q->groups[a].nnodes; k++)
        q->group_of[q->groups[a].nodes[k]] = a;
    for (int k = 0; k < q->groups[b].nnodes; k++)
        q->group_of[q->groups[b].nodes[k]] = b;
}

static void check_model(const char *path)
{
    Program *prog = front_compile(path, slurp(path), FUSE_ALL);
    if (!prog) {
        printf("FAIL %s: does not compile\n", path);
        failures++;
        return;
    }
    ad_train_step(prog);
    bucket_plan(prog->g, 1.0, prog->train.bucket_mb);
    Plan *p = train_plan(prog, FUSE_ALL);
    const Graph *g = p->g;
    expect(plan_verify_groups, p, NULL, path, "the fused plan's groups");
    expect(plan_verify_memory, p, NULL, path, "the planned buffers");

    /* split-K scratch in fix: a weight gradient's partials moved over the
     * part a step zeroes; that part cut short of the counters */
    int wsf = -1;
    for (int i = 0; i < p->ngroups; i++)
        if (p->groups[i].wsf_n)
            wsf = i;
    if (wsf >= 0) {
        Plan *q = copy(p);
        q->groups[wsf].wsf_off = 0;
        expect(plan_verify_memory, q, "weight-gradient partials", path, "a weight gradient's partials in zeroed fix");
        q = copy(p);
        q->fix_zero = 0;
        expect(plan_verify_memory, q, "past the zeroed part", path, "split-K counters left out of the zeroing");
    }

    /* rule row-tail's row ops left in their GEMM's kernel with the tail
     * taken away: row ops in a matmul kernel */
    int tail = -1;
    for (int i = 0; i < p->ngroups; i++)
        if (p->groups[i].kind == G_MATMUL && p->groups[i].row_anchor >= 0)
            tail = i;
    if (tail >= 0) {
        Plan *q = copy(p);
        q->groups[tail].row_anchor = -1;
        expect(plan_verify_groups, q, "cannot be fused", path, "row ops in a GEMM kernel without its row tail");
    }

    /* rule data-prologue's labels moved into the next GEMM's kernel, which
     * does not gather the images (order still fine: the loss reads them
     * later) */
    int pro = -1;
    for (int i = 0; i + 1 < p->ngroups && pro < 0; i++)
        for (int k = 0; k < p->groups[i].nnodes; k++)
            if (p->groups[i].kind == G_MATMUL && g->n[p->groups[i].nodes[k]]->op == OP_LABELS
                && p->groups[i + 1].kind == G_MATMUL)
                pro = p->groups[i].nodes[k];
    if (pro >= 0) {
        Plan *q = copy(p);
        int next = q->group_of[pro] + 1;
        unplant(q, pro);
        plant(q, next, pro);
        expect(plan_verify_groups, q, "cannot be fused", path, "labels gathered in a GEMM kernel without the batch");
    }

    /* the other mutants on the plan without rules row-tail and
     * data-prologue: the loss's row ops and the batch's gather have
     * kernels of their own */
    p = train_plan(prog, FUSE_ALL & ~(FuseLevel)(R_ROW_TAIL | R_DATA_PROLOGUE));
    expect(plan_verify_groups, p, NULL, path, "the groups without rules row-tail and data-prologue");

    /* a node also in the group before its own */
    Plan *q = copy(p);
    int last = q->ngroups - 1;
    q->groups[last - 1].nodes[q->groups[last - 1].nnodes++] = q->groups[last].nodes[0];
    expect(plan_verify_groups, q, "is in more than one group", path, "a node in two groups");

    /* a kernel dropped: its nodes in no group */
    q = copy(p);
    for (int k = 0; k < q->groups[1].nnodes; k++)
        q->group_of[q->groups[1].nodes[k]] = -1;
    q->groups[1].nnodes = 0;
    expect(plan_verify_groups, q, "is in no group", path, "a node in no group");

    /* the first matmul kernel before the data kernel it reads */
    q = copy(p);
    swap_groups(q, find_group(q, G_DATA), find_group(q, G_MATMUL));
    expect(plan_verify_groups, q, "before kernel", path, "a kernel before its input's");

    /* the last kernel reading a weight that an optimizer kernel updates
     * moved after that update (swapped with it) */
    q = copy(p);
    int opt = find_group(q, G_OPT), reader = -1;
    char *updated = util_alloc((size_t)g->nn);
    for (int k = 0; k < q->groups[opt].nnodes; k++)
        updated[g->n[q->groups[opt].nodes[k]]->in[0]] = 1;
    for (int i = opt - 1; i >= 0 && reader < 0; i--)
        for (int k = 0; k < q->groups[i].nnodes; k++) {
            const Node *n = g->n[q->groups[i].nodes[k]];
            for (int j = 0; j < n->nin; j++)
                if (updated[plan_source(q, n->in[j])])
                    reader = i;
        }
    swap_groups(q, reader, opt);
    expect(plan_verify_groups, q, "after sgd", path, "a weight read after its optimizer update");

    /* an illegal fusion: the logits' bias_add (elementwise) moved into the
     * loss kernel (row ops), which reads it: order still fine */
    q = copy(p);
    /* (the logits' producer: [N, T, C] logits reach the loss through a
     * view; a head without bias has no elementwise op there to move) */
    int row = find_group(q, G_ROW), logits = plan_source(q, g->n[q->groups[row].anchor]->in[0]);
    if (op_kind[g->n[logits]->op] == K_EW) {
        unplant(q, logits);
        plant(q, row, logits);
        expect(plan_verify_groups, q, "cannot be fused", path, "an elementwise op in a row kernel");
    }

    /* a reduction read inside the kernel that computes it: the bias gradient
     * (sum_rows) of the loss kernel, with its reader pulled in */
    q = copy(p);
    int planted = 0;
    for (int k = 0; k < q->groups[row].nnodes && !planted; k++) {
        int r = q->groups[row].nodes[k];
        if (op_kind[g->n[r]->op] != K_RED || p->nuse[r] == 0)
            continue;
        int c = p->cons[r][0];
        if (q->groups[q->group_of[c]].nnodes < 2)
            continue;   /* its kernel would be left empty: another problem */
        unplant(q, c);
        plant(q, row, c);
        planted = 1;
    }
    if (planted)
        expect(plan_verify_groups, q, "inside the kernel that computes it", path, "a reduction read inside its own kernel");

    /* two activations alive together placed at one offset */
    q = copy(p);
    int a = -1, b = -1;
    for (int k = 0; k < q->norder && b < 0; k++) {
        int id = q->order[k];
        if (q->buf[id].cls != B_ACT || plan_is_view(q, id))
            continue;
        if (a < 0)
            a = id;
        else if (q->buf[id].off != q->buf[a].off && q->group_of[id] == q->group_of[a] + 1)
            b = id;
    }
    if (a >= 0 && b >= 0) {
        q->buf[b].off = q->buf[a].off;
        expect(plan_verify_memory, q, "overlapping buffers", path, "two live activations overlapping");
    }
    /* a value read by another kernel left without a buffer */
    q = copy(p);
    for (int k = 0; k < q->norder; k++) {
        int id = q->order[k];
        if (q->buf[id].cls == B_ACT && !plan_is_view(q, id)) {
            q->buf[id].cls = B_NONE;
            break;
        }
    }
    expect(plan_verify_memory, q, "has no buffer", path, "a value read outside its kernel without a buffer");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.net...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        check_model(argv[i]);
    printf("plan-check: %s\n", failures ? "FAILED" : "all verdicts right");
    return failures ? 1 : 0;
}
