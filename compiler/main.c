/* main.c: the cddpc driver. The pipeline reads top to bottom as a flat
 * list of passes with the IR verifier between them; -d PASS dumps the
 * IR after that pass. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cddpc.h"

#define CDDPC_VERSION "0.1.0"

typedef struct Options {
    const char *input, *output, *emit_c_dir, *emit_cuda_dir;
    const char *graph;      /* --graph FILE.dot */
    int report;
    CostTarget target;      /* --target: the cost model --report uses */
    const GpuTarget *gpu;   /* --target h200 ...: also the predicted step */
    FuseLevel fusion;       /* the rules on */
    unsigned fusion_off;    /* --no-fuse RULE ... */
    int explain;            /* --explain-fusion */
    double bucket_mb;       /* --bucket-mb: overrides the train block; 0: keep */
    char dump[8][16];
    int ndump;
} Options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cddpc MODEL.net [-o PROGRAM] [options]\n"
            "       cddpc plot [NAME=]METRICS.csv[:STEPS.csv] ... -o FILE.svg   (runs overlaid)\n"
            "       cddpc study MODEL.net ... [--fusion L,L] [--batch B,B] [--steps N] [--repeat R]\n"
            "                     (fusion levels measured side by side: cddpc study --help)\n"
            "  -o PROGRAM         write the training executable (default: MODEL without .net)\n"
            "  --emit c DIR       write the generated C kernels to DIR/program.c\n"
            "  --emit cuda DIR    write the CUDA kernels: DIR/NAME.cu each, all.cu, launch.txt\n"
            "  --report           list the kernels of one training and eval step\n"
            "  --graph FILE.dot   draw the train and eval steps: kernels as clusters, buffer sizes\n"
            "                     on edges, gradient buckets; also FILE.svg when Graphviz is installed\n"
            "  --target cpu|gpu|h100|h200|a100|t4\n"
            "                     --report's byte model: the CPU's GEMM epilogue is a second pass\n"
            "                     over the product, a GPU's runs in registers (default cpu); a GPU\n"
            "                     by name: also each kernel's predicted time, the step and an epoch\n"
            "  --fusion LEVEL[,-RULE|,+RULE ...]\n"
            "                     none | elementwise | all (default all), then rules switched off or on:\n"
            "                     data, epilogue, ew-chain, reduction, row-ops, optimizer, channel-pass,\n"
            "                     conv-bias, dropout (elementwise = ew-chain + dropout; README: Fusion rules)\n"
            "  --no-fuse RULE     switch one rule off (repeatable)\n"
            "  --explain-fusion   for each producer and consumer in different kernels, the predicate\n"
            "                     that kept them apart and what would have joined them\n"
            "  --bucket-mb MB     gradient bucket size after the first 1 MB (default: train block's, 25)\n"
            "  -d PASS            dump the IR after PASS: sema, autodiff, fuse, memplan, buckets\n"
            "  --version, --help\n"
            "Options with a value take '--opt VALUE' or '--opt=VALUE' (as the training program).\n");
}

static _Noreturn void bad_usage(const char *msg, const char *arg)
{
    fprintf(stderr, "cddpc: error: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
    fprintf(stderr, "try 'cddpc --help'\n");
    exit(2);
}

/* The value of option `name` (without its dashes) when argv[*i] is it:
 * "--name=VALUE" or "--name VALUE" (then *i moves past VALUE); NULL when
 * argv[*i] is another option. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, "--", 2) || strncmp(a + 2, name, n))
        return NULL;
    if (a[2 + n] == '=')
        return a + 3 + n;
    if (a[2 + n])
        return NULL;
    if (++*i >= argc) {
        fprintf(stderr, "cddpc: error: --%s needs a value\ntry 'cddpc --help'\n", name);
        exit(2);
    }
    return argv[*i];
}

static Options parse_args(int argc, char **argv)
{
    Options o = {.fusion = FUSE_ALL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--version")) {
            printf("cddpc %s\n", CDDPC_VERSION);
            exit(0);
        } else if (!strcmp(a, "-o")) {
            if (++i >= argc)
                bad_usage("-o needs a file name", NULL);
            o.output = argv[i];
        } else if (!strcmp(a, "--emit")) {
            if (i + 2 >= argc || (strcmp(argv[i + 1], "c") && strcmp(argv[i + 1], "cuda")))
                bad_usage("--emit takes a target and a directory: --emit c DIR or --emit cuda DIR", NULL);
            if (!strcmp(argv[i + 1], "c"))
                o.emit_c_dir = argv[i + 2];
            else
                o.emit_cuda_dir = argv[i + 2];
            i += 2;
        } else if ((v = opt_value(argc, argv, &i, "bucket-mb"))) {
            char *end;
            if ((o.bucket_mb = strtod(v, &end)) <= 0 || *end || end == v || o.bucket_mb > 65536)
                bad_usage("--bucket-mb needs a size in MB between 0 and 65536", NULL);
        } else if (!strcmp(a, "--report")) {
            o.report = 1;
        } else if ((v = opt_value(argc, argv, &i, "graph"))) {
            o.graph = v;
        } else if (!strcmp(a, "--target") || !strncmp(a, "--target=", 9)) {
            const char *t = a[8] == '=' ? a + 9 : ++i < argc ? argv[i] : NULL;
            if (!t)
                bad_usage("--target needs cpu or gpu", NULL);
            else if (!strcmp(t, "cpu")) o.target = COST_CPU;
            else if (!strcmp(t, "gpu")) o.target = COST_GPU;
            else if ((o.gpu = gpu_target(t))) o.target = COST_GPU;
            else bad_usage("unknown target (cpu, gpu, h100, h200, a100, t4):", t);
        } else if ((v = opt_value(argc, argv, &i, "fusion"))) {
            const char *bad;
            unsigned off = o.fusion_off;    /* --no-fuse before --fusion still holds */
            if (fuse_parse(v, &o.fusion, &bad) != 0)
                bad_usage(util_fmt("unknown fusion level or rule '%s' (levels: none, elementwise, all; then "
                                   ",-RULE or ,+RULE with RULE one of: %s)", bad, fuse_rule_names()), NULL);
            o.fusion &= ~off;
        } else if ((v = opt_value(argc, argv, &i, "no-fuse"))) {
            int bit = fuse_rule_bit(v);
            if (!bit)
                bad_usage(util_fmt("--no-fuse needs a rule: %s; got '%s'", fuse_rule_names(), v), NULL);
            o.fusion_off |= (unsigned)bit;
            o.fusion &= ~(unsigned)bit;
        } else if (!strcmp(a, "--explain-fusion")) {
            o.explain = 1;
        } else if (!strcmp(a, "-d")) {
            if (++i >= argc)
                bad_usage("-d needs a pass name", NULL);
            const char *passes[] = {"sema", "autodiff", "fuse", "memplan", "buckets"};
            int ok = 0;
            for (size_t k = 0; k < 5; k++)
                ok |= !strcmp(argv[i], passes[k]);
            if (!ok)
                bad_usage(!strcmp(argv[i], "dot") || !strcmp(argv[i], "graph")
                              ? "no pass is called that; the fused graph as a picture is --graph FILE.dot:"
                              : "unknown pass (sema, autodiff, fuse, memplan, buckets):", argv[i]);
            if (o.ndump < 8)
                snprintf(o.dump[o.ndump++], sizeof o.dump[0], "%s", argv[i]);
        } else if (a[0] == '-' && a[1]) {
            bad_usage("unknown option", a);
        } else if (o.input) {
            bad_usage("more than one model file:", a);
        } else {
            o.input = a;
        }
    }
    if (!o.input)
        bad_usage("no model file given", NULL);
    return o;
}

static int dumping(const Options *o, const char *pass)
{
    for (int i = 0; i < o->ndump; i++)
        if (!strcmp(o->dump[i], pass))
            return 1;
    return 0;
}

static void verify(const Graph *g, const char *after)
{
    if (ir_verify(g, after))
        diag_ice("IR verification failed after %s", after);
}

static void verify_plans(const Plan *train, const Plan *eval, const char *after,
                         int (*check)(const Plan *, const char *))
{
    if (check(train, after) + check(eval, after))
        diag_ice("plan verification failed after %s", after);
}

static char *read_model(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "cddpc: error: cannot open '%s': %s\n", path, strerror(errno));
        exit(1);
    }
    if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "cddpc: error: '%s' is a directory, not a model file\n", path);
        exit(1);
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cddpc: error: cannot open '%s': %s\n", path, strerror(errno));
        exit(1);
    }
    size_t cap = 4096, len = 0;
    char *buf = util_alloc(cap + 1);
    for (size_t r; (r = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len == cap) {
            buf = util_grow(buf, cap + 1, 2 * cap + 1);
            cap *= 2;
        }
    }
    if (ferror(f)) {
        fprintf(stderr, "cddpc: error: cannot read '%s': %s\n", path, strerror(errno));
        exit(1);
    }
    fclose(f);
    if (memchr(buf, 0, len)) {
        fprintf(stderr, "cddpc: error: '%s' is not a text file (it contains NUL bytes)\n", path);
        exit(1);
    }
    buf[len] = 0;
    return buf;
}

static char *default_output(const char *in)
{
    const char *base = strrchr(in, '/');
    base = base ? base + 1 : in;
    char *out = util_strdup(base);
    size_t n = strlen(out);
    if (n > 4 && !strcmp(out + n - 4, ".net"))
        out[n - 4] = 0;
    else
        out = util_fmt("%s.out", out);
    return out;
}

int cddpc_plot_main(int argc, char **argv); /* plot_cmd.c */
int cddpc_study_main(int argc, char **argv); /* study.c */

/* The pipeline: front end, autodiff, fusion, memory plan, then the
 * report or dumps asked for and the program (when out or an --emit
 * directory is given). With costs non-NULL, the train plan's kernel count
 * and cost at each of batches[0..nbatch) are stored there (`cddpc study`). */
static int compile(const Options *o, const char *out, const int64_t *batches, int nbatch, StudyCost *costs)
{
    if (out)
        unlink(out);        /* a failed compile leaves no stale program behind */

    Program *prog = front_compile(o->input, read_model(o->input));
    if (!prog)
        return 1;
    Graph *g = prog->g;
    verify(g, "sema");
    if (dumping(o, "sema"))
        ir_dump(stdout, g);

    ad_train_step(prog);
    if (o->bucket_mb > 0)
        prog->train.bucket_mb = o->bucket_mb;
    bucket_plan(g, 1.0, prog->train.bucket_mb);
    verify(g, "autodiff");
    if (dumping(o, "autodiff"))
        ir_dump(stdout, g);

    int nroots = 0, *roots = util_alloc(sizeof(int) * (size_t)(g->nparam + g->neffects + 2));
    roots[nroots++] = g->loss_sum;
    for (int i = 0; i < g->neffects; i++)
        roots[nroots++] = g->effects[i];
    for (int i = g->nparam - 1; i >= 0; i--)
        if (g->updates[i] >= 0)
            roots[nroots++] = g->updates[i];
    Plan *train = plan_new(g, "train", roots, nroots);
    Plan *eval = plan_new(g, "eval", (int[]){g->loss_sum, g->correct_sum}, g->correct_sum >= 0 ? 2 : 1);

    fuse_plan(train, o->fusion);
    fuse_plan(eval, o->fusion);
    verify(g, "fuse");
    verify_plans(train, eval, "fuse", plan_verify_groups);
    if (dumping(o, "fuse")) {
        plan_dump_groups(stdout, train);
        plan_dump_groups(stdout, eval);
    }

    mem_plan(train);
    mem_plan(eval);
    verify(g, "memplan");
    verify_plans(train, eval, "memplan", plan_verify_memory);
    if (dumping(o, "memplan")) {
        mem_dump(stdout, train);
        mem_dump(stdout, eval);
    }
    if (dumping(o, "buckets"))
        plan_dump_buckets(stdout, train);
    if (o->report) {
        plan_report(stdout, train, prog->train.batch, o->target);
        plan_report(stdout, eval, prog->train.batch, o->target);
        if (o->gpu)
            gpu_report(stdout, train, prog->train.batch, o->gpu);
    }
    if (o->explain) {
        fuse_explain(stdout, train, o->fusion);
        fuse_explain(stdout, eval, o->fusion);
    }
    if (o->graph && plan_graph(o->graph, train, eval, prog->train.batch) != 0)
        return 1;
    for (int i = 0; costs && i < nbatch; i++) {
        int64_t b = batches[i] > 0 ? batches[i] : prog->train.batch;
        costs[i] = (StudyCost){b, train->ngroups, cost_plan(train, b, o->target)};
        /* each kernel's cost too, for the study's per-kernel table */
        const char *tsv = util_fmt("%s.b%lld.kernels.tsv", out, (long long)b);
        FILE *f = fopen(tsv, "w");
        for (int k = 0; f && k < train->ngroups; k++) {
            KernelCost c = cost_group(train, &train->groups[k], b, o->target);
            fprintf(f, "%s\t%.0f\t%.0f\n", train->groups[k].name, c.flops, c.bytes);
        }
        if (!f || fclose(f) != 0) {
            fprintf(stderr, "cddpc: error: cannot write '%s'\n", tsv);
            return 1;
        }
    }

    if (emit_program(prog, train, eval, o->input, out, o->emit_c_dir, o->emit_cuda_dir) != 0)
        return 1;
    return 0;
}

int cddpc_study_compile(const char *model, FuseLevel level, CostTarget target, const char *out,
                        const int64_t *batches, int nbatch, StudyCost *costs)
{
    Options o = {.input = model, .fusion = level, .target = target};
    return compile(&o, out, batches, nbatch, costs);
}

int main(int argc, char **argv)
{
    /* a subcommand before the model file */
    if (argc > 1 && !strcmp(argv[1], "plot"))
        return cddpc_plot_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "study"))
        return cddpc_study_main(argc - 1, argv + 1);
    Options o = parse_args(argc, argv);
    const char *out = o.output;
    if (!out && !o.emit_c_dir && !o.emit_cuda_dir && !o.report && !o.ndump && !o.graph && !o.explain)
        out = default_output(o.input);
    return compile(&o, out, NULL, 0, NULL);
}
