/* pipeline.c: the passes from model text to program, read top to bottom
 * as a flat list with the IR verifier between them; -d PASS dumps the IR
 * after that pass. Separate from main.c's command line so that the whole
 * pipeline can run on a buffer (tests/fuzz), and so that `cddpc study`
 * (study.c) compiles its variants without calling back into the driver. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cddpc.h"

static int dumping(const PipelineOptions *o, const char *pass)
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

int pipeline_compile(const PipelineOptions *o, const char *text, const char *out, const int64_t *batches, int nbatch,
                     StudyCost *costs)
{
    Program *prog = front_compile(o->input, text, o->fusion);
    if (!prog)
        return 1;
    Graph *g = prog->g;
    verify(g, "sema");
    if (dumping(o, "sema"))
        ir_dump(stdout, g);

    ad_train_step(prog);
    g->decay_dim = prog->train.decay_dim;   /* decay = "dim>=2" (train_block.c) */
    if (o->bucket_mb > 0)
        prog->train.bucket_mb = o->bucket_mb;
    bucket_plan(g, 1.0, prog->train.bucket_mb);
    verify(g, "autodiff");
    if (dumping(o, "autodiff"))
        ir_dump(stdout, g);

    Plan *train = plan_train(g), *eval = plan_eval(g);
    /* a language model's forward alone, for --generate (CPU) */
    Plan *predict = prog->in_vocab && prog->positions > 1 ? plan_predict(g) : NULL;
    if (predict) {
        fuse_plan(predict, o->fusion);
        predict->batch = 1;
        mem_plan(predict);
    }

    fuse_plan(train, o->fusion);
    fuse_plan(eval, o->fusion);
    verify(g, "fuse");
    verify_plans(train, eval, "fuse", plan_verify_groups);
    if (dumping(o, "fuse")) {
        plan_dump_groups(stdout, train);
        plan_dump_groups(stdout, eval);
    }

    train->batch = eval->batch = prog->train.batch;
    train->gpu_tile = eval->gpu_tile = o->gpu_tile;
    train->gpu_rnn_rows = eval->gpu_rnn_rows = o->gpu_rnn_rows;
    train->gpu_rnn_split = eval->gpu_rnn_split = o->gpu_rnn_split;
    mem_plan(train);
    mem_plan(eval);
    /* the CUDA kernels' launches for the named GPU (or the likeliest one),
     * then the memory those decisions need */
    const GpuTarget *gpu = o->gpu ? o->gpu : gpu_target(SCHED_GPU_DEFAULT);
    sched_gpu(train, gpu);
    sched_gpu(eval, gpu);
    mem_plan_gpu(train);
    mem_plan_gpu(eval);
    sched_pair_siblings(train, o->fusion);
    sched_pair_siblings(eval, o->fusion);
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

    if (emit_program(prog, train, eval, predict, o->input, out, o->emit_c_dir, o->emit_cuda_dir,
                     o->cc_timeout == 0 ? CC_TIMEOUT_DEFAULT : o->cc_timeout) != 0)
        return 1;
    return 0;
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

int pipeline_compile_file(const PipelineOptions *o, const char *out, const int64_t *batches, int nbatch,
                          StudyCost *costs)
{
    if (out)
        unlink(out);        /* a failed compile leaves no stale program behind */
    return pipeline_compile(o, read_model(o->input), out, batches, nbatch, costs);
}
