/* graph.c: `cddpc MODEL.net --graph FILE.dot`, the training step and the
 * eval step as Graphviz DOT: ops as nodes (op, node id, shape), each
 * fused kernel a cluster labelled with its kernel name (as --report and
 * --profile name it), parameters and views outside the kernels. An edge
 * that crosses a kernel boundary is a buffer in memory and carries its
 * size at the train block's batch; an edge inside a kernel carries none
 * (the value stays in registers or cache). Gradient buckets are hexagons:
 * an edge from the kernel after which the bucket is complete (its
 * all-reduce starts there) and one to the optimizer kernel that waits for
 * it. With Graphviz's `dot` on PATH, FILE.svg is drawn too. */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cddpc.h"

static void shape_text(FILE *f, const Shape *s)
{
    fputc('[', f);
    for (int i = 0; i < s->rank; i++) {
        if (i)
            fputc(',', f);
        if (s->d[i] == DIM_N)
            fputc('N', f);
        else if (s->d[i] < 0)
            fprintf(f, "N*%lld", (long long)-s->d[i]);
        else
            fprintf(f, "%lld", (long long)s->d[i]);
    }
    fputc(']', f);
}

/* A DOT string body: parameter names come from the model file. */
static void quoted(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s >= ' ')
            fputc(*s, f);
}

static void node_decl(FILE *f, const Plan *p, char pre, const Node *n, const char *ind)
{
    const char *style = n->op == OP_PARAM ? "shape=ellipse, style=filled, fillcolor=\"#eeeeee\""
                      : plan_is_view(p, n->id) ? "shape=box, style=dashed" : "shape=box";
    fprintf(f, "%s%c%d [%s, label=\"", ind, pre, n->id, style);
    if (n->op == OP_PARAM && n->name)
        quoted(f, n->name);
    else
        fprintf(f, "%s %%%d", op_text[n->op], n->id);
    fprintf(f, "\\n");
    shape_text(f, &n->shape);
    fprintf(f, "\"];\n");
}

static void plan_dot(FILE *f, const Plan *p, int64_t batch)
{
    const Graph *g = p->g;
    char pre = p->name[0];
    fprintf(f, "  subgraph cluster_%s {\n    label=\"%s plan (batch %lld): %d kernels\";\n    fontsize=16;\n", p->name,
            p->name, (long long)batch, p->ngroups);
    for (int i = 0; i < p->ngroups; i++) {
        const Group *gr = &p->groups[i];
        fprintf(f, "    subgraph cluster_%c_k%d {\n      label=\"%s\";\n      style=filled; fillcolor=\"#e8f0fb\";\n",
                pre, i, gr->name);
        for (int k = 0; k < gr->nnodes; k++)
            node_decl(f, p, pre, g->n[gr->nodes[k]], "      ");
        fprintf(f, "    }\n");
    }
    /* what no kernel computes: parameters, views */
    for (int k = 0; k < p->norder; k++) {
        int id = p->order[k];
        if (p->group_of[id] < 0)
            node_decl(f, p, pre, g->n[id], "    ");
    }
    for (int k = 0; k < p->norder; k++) {
        const Node *n = g->n[p->order[k]];
        for (int j = 0; j < plan_nin(p, n); j++) {
            int x = n->in[j];
            if (!p->in_plan[x])
                continue;
            int src = plan_source(p, x);
            int crosses = p->group_of[n->id] < 0 || p->group_of[src] != p->group_of[n->id];
            fprintf(f, "    %c%d -> %c%d", pre, x, pre, n->id);
            if (crosses && g->n[x]->op != OP_PARAM && !plan_is_view(p, x))
                fprintf(f, " [label=\"%s\"]", cost_bytes_text(4.0 * (double)ir_numel(&g->n[x]->shape, batch)));
            else if (!crosses)
                fprintf(f, " [color=\"#4e79a7\"]");     /* inside one kernel: never stored */
            fprintf(f, ";\n");
        }
    }
    if (!strcmp(p->name, "train") && g->nbuckets) {
        PlanBucket *pb = util_alloc(sizeof(PlanBucket) * (size_t)g->nbuckets);
        plan_buckets(p, pb);
        for (int b = 0; b < g->nbuckets; b++) {
            fprintf(f, "    %c_bucket%d [shape=hexagon, style=filled, fillcolor=\"#fde8c8\", label=\"all-reduce "
                       "bucket %d\\n%s\\n", pre, b, b, cost_bytes_text(4.0 * (double)(pb[b].end - pb[b].off)));
            for (int i = g->nparam - 1; i >= 0; i--)
                if (g->n[g->params[i]]->bucket == b) {
                    quoted(f, g->n[g->params[i]]->name);
                    fprintf(f, " ");
                }
            fprintf(f, "\"];\n");
            if (pb[b].ready >= 0) {
                const Group *r = &p->groups[pb[b].ready];
                fprintf(f, "    %c%d -> %c_bucket%d [ltail=cluster_%c_k%d, style=bold, color=\"#e15759\", "
                           "label=\"ready\"];\n", pre, r->nodes[r->nnodes - 1], pre, b, pre, pb[b].ready);
            }
            if (pb[b].opt >= 0) {
                const Group *o = &p->groups[pb[b].opt];
                fprintf(f, "    %c_bucket%d -> %c%d [lhead=cluster_%c_k%d, style=bold, color=\"#e15759\"];\n", pre, b,
                        pre, o->nodes[0], pre, pb[b].opt);
            }
        }
    }
    fprintf(f, "  }\n");
}

/* Runs `dot -Tsvg` on the file when dot is installed; 0 when drawn, 1 when
 * dot is not there, -1 when it failed. */
static int draw_svg(const char *dot_path, const char *svg_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execlp("dot", "dot", "-Tsvg", dot_path, "-o", svg_path, (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 127 ? 1 : -1;
}

int plan_graph(const char *path, const Plan *train, const Plan *eval, int64_t batch)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cddpc: error: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "digraph cddpc {\n  compound=true; newrank=true;\n  node [fontsize=10, fontname=\"sans-serif\"];\n"
               "  edge [fontsize=9, fontname=\"sans-serif\"];\n  graph [fontname=\"sans-serif\"];\n");
    plan_dot(f, train, batch);
    plan_dot(f, eval, batch);
    fprintf(f, "}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "cddpc: error: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    size_t n = strlen(path);
    const char *svg = n > 4 && !strcmp(path + n - 4, ".dot") ? util_fmt("%.*s.svg", (int)(n - 4), path)
                                                             : util_fmt("%s.svg", path);
    int rc = draw_svg(path, svg);
    if (rc < 0) {
        fprintf(stderr, "cddpc: error: dot -Tsvg %s failed\n", path);
        return 1;
    }
    if (rc > 0)
        fprintf(stderr, "cddpc: note: %s written; Graphviz's dot is not installed, so no %s "
                        "(scripts/deps.sh installs it)\n", path, svg);
    return 0;
}
