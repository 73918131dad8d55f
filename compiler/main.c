/* main.c: the cddpc driver: its command line and the subcommands. Reading
 * the model file and the passes are pipeline.c's. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddpc.h"

#define CDDPC_VERSION "0.1.0"


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
            "                     none | elementwise | all (default all), then rules switched off or on\n"
            "                     (elementwise = ew-chain + dropout + act-input + tensor-chain; README: Fusion rules):\n");
    /* the rule table's names, so that the list cannot fall behind it */
    int col = 0;
    for (int i = 0; i < FUSE_NRULES; i++) {
        if (col > 0 && col + (int)strlen(fuse_rule[i].name) + 1 > 90) {
            fputs(",\n", f);
            col = 0;
        } else if (col > 0)
            col += fprintf(f, ", ");
        if (col == 0)
            col = fprintf(f, "                     ");
        col += fprintf(f, "%s", fuse_rule[i].name);
    }
    fputc('\n', f);
    fprintf(f,
            "  --no-fuse RULE     switch one rule off (repeatable)\n"
            "  --explain-fusion   for each producer and consumer in different kernels, the predicate\n"
            "                     that kept them apart and what would have joined them\n"
            "  --bucket-mb MB     gradient bucket size after the first 1 MB (default: train block's, 25)\n"
            "  --gpu-tile auto|64|32|16\n"
            "                     rows of the CUDA GEMMs' tiles (64 columns): each GEMM's own from the\n"
            "                     GPU model (default auto), or one size for all (tile studies, tests)\n"
            "  --gpu-rnn auto|RxK the CUDA recurrences' design: R samples a block (1, 2, 4, 8), each\n"
            "                     unit's sums over K threads (1, 2, 4, 8); default: each its own from the GPU model\n"
            "  --cc-timeout S     stop the C compiler after S seconds with an error (default %d; 0: no\n"
            "                     limit)\n"
            "  -d PASS            dump the IR after PASS: sema, autodiff, fuse, memplan, buckets\n"
            "  --version, --help\n"
            "Options with a value take '--opt VALUE' or '--opt=VALUE' (as the training program).\n",
            CC_TIMEOUT_DEFAULT);
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

static PipelineOptions parse_args(int argc, char **argv)
{
    PipelineOptions o = {.fusion = FUSE_ALL};
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
        } else if ((v = opt_value(argc, argv, &i, "gpu-tile"))) {
            if (!strcmp(v, "auto")) o.gpu_tile = 0;
            else if (!strcmp(v, "64") || !strcmp(v, "32") || !strcmp(v, "16")) o.gpu_tile = atoi(v);
            else bad_usage("--gpu-tile takes auto, 64, 32 or 16, not", v);
        } else if ((v = opt_value(argc, argv, &i, "cc-timeout"))) {
            char *end;
            double t = strtod(v, &end);
            if (*end || end == v || v[strspn(v, "0123456789.")] || !(t >= 0 && t <= 1e6))
                bad_usage("--cc-timeout needs seconds between 0 (no limit) and 1000000, not", v);
            o.cc_timeout = t > 0 ? t : -1;
        } else if ((v = opt_value(argc, argv, &i, "gpu-rnn"))) {
            int r = 0, k = 0, used = 0;
            if (!strcmp(v, "auto"))
                o.gpu_rnn_rows = o.gpu_rnn_split = 0;
            else if (sscanf(v, "%dx%d%n", &r, &k, &used) == 2 && !v[used] && (r == 1 || r == 2 || r == 4 || r == 8) &&
                     (k == 1 || k == 2 || k == 4 || k == 8))
                o.gpu_rnn_rows = r, o.gpu_rnn_split = k;
            else
                bad_usage("--gpu-rnn takes auto or RxK (R and K each 1, 2, 4 or 8: 4x2), not", v);
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

int main(int argc, char **argv)
{
    /* a subcommand before the model file */
    if (argc > 1 && !strcmp(argv[1], "plot"))
        return cddpc_plot_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "study"))
        return cddpc_study_main(argc - 1, argv + 1);
    PipelineOptions o = parse_args(argc, argv);
    const char *out = o.output;
    if (!out && !o.emit_c_dir && !o.emit_cuda_dir && !o.report && !o.ndump && !o.graph && !o.explain)
        out = default_output(o.input);
    return pipeline_compile_file(&o, out, NULL, 0, NULL);
}
