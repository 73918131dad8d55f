/* rt_main.c: command-line options and the top-level flow of a program.
 *
 * Every compiled model is the same program around different kernels, so
 * its options, messages and exit statuses live here, once:
 *   0  success (also --help / --version)
 *   1  the run failed: bad data or checkpoint, I/O error, no such backend
 *   2  the command line is wrong
 *   130, 143, 138  stopped by SIGINT, SIGTERM, SIGUSR1 (128 + the signal;
 *      rt_stop.c): the checkpoint, if any, is at the step where it stopped
 * The model's train block supplies the defaults; flags override them. */
#include "rt_internal.h"
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CDDP_NO_BLAS
/* From OpenBLAS; declared here rather than via cblas.h, whose location
 * differs between distributions. */
void openblas_set_num_threads(int num_threads);
#endif

enum { OPT_DATA, OPT_DEVICE, OPT_THREADS, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_SEED,
       OPT_SHUFFLE, OPT_DROP_LAST, OPT_MAX_STEPS, OPT_INIT, OPT_SAVE, OPT_METRICS,
       OPT_STEP_LOG, OPT_PROFILE, OPT_NO_CACHE, OPT_TRACE, OPT_COMM_TIMEOUT, OPT_HELP,
       OPT_VERSION, OPT_CHECKPOINT, OPT_CHECKPOINT_EVERY, OPT_RESUME, OPT_PLOT, OPT_BENCH_KERNEL,
       OPT_PEAK_GFLOPS, OPT_PEAK_GBS, OPT_EVALUATE, OPT_GENERATE, OPT_LOAD, OPT_PROMPT, OPT_TEMPERATURE, OPT_EXPORT_ONNX,
       OPT_TOP_K, OPT_DATA_LIMIT };

static const struct { const char *name; int id; int takes_value; } options[] = {
    {"data", OPT_DATA, 1},       {"device", OPT_DEVICE, 1},     {"threads", OPT_THREADS, 1},
    {"epochs", OPT_EPOCHS, 1},   {"batch", OPT_BATCH, 1},       {"lr", OPT_LR, 1},
    {"seed", OPT_SEED, 1},       {"shuffle", OPT_SHUFFLE, 1},   {"drop-last", OPT_DROP_LAST, 0},
    {"max-steps", OPT_MAX_STEPS, 1}, {"init", OPT_INIT, 1},     {"save", OPT_SAVE, 1},
    {"metrics", OPT_METRICS, 1}, {"step-log", OPT_STEP_LOG, 1}, {"help", OPT_HELP, 0},
    {"version", OPT_VERSION, 0}, {"profile", OPT_PROFILE, 0},  {"no-cache", OPT_NO_CACHE, 0},
    {"trace", OPT_TRACE, 1},     {"comm-timeout", OPT_COMM_TIMEOUT, 1},
    {"checkpoint", OPT_CHECKPOINT, 1}, {"checkpoint-every", OPT_CHECKPOINT_EVERY, 1},
    {"resume", OPT_RESUME, 1},   {"plot", OPT_PLOT, 1},   {"bench-kernel", OPT_BENCH_KERNEL, 1},
    {"peak-gflops", OPT_PEAK_GFLOPS, 1}, {"peak-gbs", OPT_PEAK_GBS, 1}, {"evaluate", OPT_EVALUATE, 1},
    {"generate", OPT_GENERATE, 1}, {"load", OPT_LOAD, 1}, {"prompt", OPT_PROMPT, 1},
    {"temperature", OPT_TEMPERATURE, 1}, {"top-k", OPT_TOP_K, 1}, {"data-limit", OPT_DATA_LIMIT, 1},
    {"export-onnx", OPT_EXPORT_ONNX, 1},
};

static void usage(const rt_model *m, const rt_opts *d)
{
    printf("usage: %s [options]\n"
           "Train model '%s' (compiled from %s).\n\n"
           "  --data PATH           the data set (default %s): the train block's idx\n"
           "                        directory, npz file or training csv file\n"
           "  --device cpu|cuda|auto  compute backend (default cpu); auto: cuda when a GPU is\n"
           "                        usable, else cpu\n"
           "  --data-limit SIZE     the most memory the data set's arrays may take once read\n"
           "                        (bytes, or with K, M, G, T: 1024s; default half this\n"
           "                        machine's memory); larger files are refused before reading\n"
           "  --no-cache            compile the CUDA kernels afresh and do not cache them\n"
           "                        (cache: $XDG_CACHE_HOME/cddpc or ~/.cache/cddpc)\n"
           "  --threads N           BLAS/OpenMP threads (default: online CPUs, %d)\n"
           "  --epochs N            epochs (default %d)\n"
           "  --batch N             batch size (default %d)\n"
           "  --lr X                learning rate (default %g)\n"
           "  --seed N              seed for initialization and shuffling (default %llu)\n"
           "  --shuffle on|off      reshuffle the training set each epoch (default %s)\n"
           "  --drop-last[=on|off]  skip the last partial batch (default %s)\n"
           "  --max-steps N         stop after N steps (then evaluate and save; fp16: skipped\n"
           "                        steps count)\n"
           "  --init FILE           load initial parameters from a safetensors file\n"
           "  --save FILE           write final parameters as safetensors (F32)\n"
           "  --checkpoint FILE     write a checkpoint after every epoch (parameters, optimizer\n"
           "                        and training state; atomically; rank 0)\n"
           "  --checkpoint-every N  ... and every N optimizer steps\n"
           "  --resume FILE         continue a run from its checkpoint, bit for bit\n"
           "  --evaluate FILE       no training: the test set through the parameters of FILE\n"
           "                        (--save or --checkpoint), normalized and labelled as the\n"
           "                        training run saved it (normalize = auto, a csv's classes)\n"
           "  --export-onnx FILE    the forward in eval mode as ONNX (opset 17; the data's scaling\n"
           "                        and normalization its first nodes): after training, or of\n"
           "                        --load FILE's weights with no training (docs/onnx.md)\n"
           "  --generate N          a language model writes N tokens after --prompt S (the CPU);\n"
           "                        --load FILE: the weights (--save's or a --checkpoint, their\n"
           "                        vocabulary); --temperature X (default 1; 0: greedy), --top-k K\n"
           "                        (default 0: all), --seed N\n"
           "  --metrics FILE        per-epoch CSV: epoch,train_loss,test_loss,test_acc,"
           "seconds,images_per_s\n"
           "                        (fp16 models: ,loss_scale,skipped),lr; written after every epoch\n"
           "  --step-log FILE       per-step CSV: step,epoch,loss (fp16 models: ,scale,found_inf),lr;\n"
           "                        rows reach the file within about a second, always whole\n"
           "  --plot FILE.svg       train/test loss per epoch, test accuracy, the step loss\n"
           "                        smoothed; redrawn atomically after every epoch (rank 0)\n"
           "  --profile             time every kernel; print a table per plan at the end (cuda:\n"
           "                        train plan, event-timed eager steps):\n"
           "                        median, min and max call, GFLOP/s, GB/s, %% of the roofline\n"
           "  --peak-gflops X, --peak-gbs Y  --profile's roofline peaks (default: measured)\n"
           "  --bench-kernel NAME|all  time train kernels on their own (after one step, on its\n"
           "                        buffers): median, min, max per call; no training (cpu)\n"
           "  --trace FILE.json     timeline of every kernel and all-reduce, all ranks, as\n"
           "                        Chrome trace events (chrome://tracing, ui.perfetto.dev)\n"
           "  --comm-timeout S      abort the job when a collective (or, on GPU ranks, the\n"
           "                        device) makes no progress for S seconds (another rank\n"
           "                        failed or hung; default %g)\n"
           "  --help, --version\n"
           "SIGINT, SIGTERM or SIGUSR1 (Slurm: --signal=USR1@60) stops at the next step all\n"
           "ranks agree on, writes the --checkpoint there and exits 130, 143 or 138 with the\n"
           "line to continue (--resume FILE); a second signal stops at once.\n"
           "Options take '--opt VALUE' or '--opt=VALUE'. Several ranks: mpirun -np N %s ...\n"
           "(--batch is per rank; gradients are averaged over the ranks; GPU ranks use NCCL and\n"
           "one GPU each: CDDP_CUDA_DEVICE, else the only one visible, else the local rank's).\n",
           rt_prog, m->name, m->source ? m->source : "?", d->data_dir, d->threads, d->epochs,
           d->batch, (double)d->lr, (unsigned long long)d->seed, d->shuffle ? "on" : "off",
           d->drop_last ? "on" : "off", d->comm_timeout, rt_prog);
}

/* A usage error: the reason, then where to look; returns exit status 2. */
static int bad_arg(const char *fmt, ...) RT_PRINTF(1, 2);
static int bad_arg(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: error: %s\nTry '%s --help' for usage.\n", rt_prog, msg, rt_prog);
    return 2;
}

/* Decimal integer in [lo, hi]; no spaces, no '+', no trailing junk. */
/* A flag's real number as the model file writes one: decimal digits,
 * point and exponent only (no hexadecimal floats, inf or nan), whole,
 * finite and not out of double's range; -1 otherwise */
static int decimal(const char *v, double *d)
{
    char *end;
    errno = 0;
    *d = strtod(v, &end);
    return *end || end == v || v[strspn(v, "0123456789.eE+-")] || !isfinite(*d) || errno == ERANGE ? -1 : 0;
}

static int parse_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    const char *digits = *v == '-' ? v + 1 : v;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*digits < '0' || *digits > '9' || *end) {
        bad_arg("--%s: expected an integer, got '%s'", opt, v);
        return -1;
    }
    if (errno == ERANGE || x < lo || x > hi) {
        bad_arg("--%s: must be between %lld and %lld, got '%s'", opt, (long long)lo,
                (long long)hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_onoff(const char *opt, const char *v, int *out)
{
    if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1"))
        *out = 1;
    else if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0"))
        *out = 0;
    else {
        bad_arg("--%s: expected on or off, got '%s'", opt, v);
        return -1;
    }
    return 0;
}

/* Returns -1 to go on, or the exit status (0 for --help/--version, 2 for
 * a usage error). */
static int parse_args(const rt_model *m, rt_opts *o, int argc, char **argv)
{
    const rt_opts defaults = *o;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return bad_arg("unexpected argument '%s'%s", a,
                           a[0] == '-' ? " (options start with '--')" : "");
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        int id = -1, takes = 0;
        for (size_t k = 0; k < sizeof options / sizeof options[0]; k++)
            if (strlen(options[k].name) == nlen && !strncmp(options[k].name, name, nlen)) {
                id = options[k].id;
                takes = options[k].takes_value;
                name = options[k].name;
            }
        if (id < 0)
            return bad_arg("unknown option '%s'", a);
        const char *v = eq ? eq + 1 : NULL;
        if (takes && !v) {
            if (i + 1 >= argc)
                return bad_arg("option '--%s' needs a value", name);
            v = argv[++i];
        }
        if (!takes && v && id != OPT_DROP_LAST)
            return bad_arg("option '--%s' takes no value (got '%s')", name, v);
        if (takes && !*v)
            return bad_arg("option '--%s' needs a value, got an empty string", name);
        int64_t x;
        switch (id) {
        case OPT_HELP:
            usage(m, &defaults);
            return 0;
        case OPT_VERSION:
            printf("%s: model '%s' from %s; cddp runtime %s (ABI %d, %s)\n", rt_prog,
                   m->name, m->source ? m->source : "?", RT_VERSION, RT_ABI_VERSION,
                   m->cuda_src ? "cpu, cuda" : "cpu");
            return 0;
        case OPT_DATA:
            o->data_dir = v;
            break;
        case OPT_DEVICE:
            if (!strcmp(v, "cpu"))
                o->device = RT_DEV_CPU;
            else if (!strcmp(v, "cuda"))
                o->device = RT_DEV_CUDA;
            else if (!strcmp(v, "auto"))
                o->device = RT_DEV_AUTO;
            else
                return bad_arg("--device: expected cpu, cuda or auto, got '%s'", v);
            break;
        case OPT_THREADS:
            if (parse_int(name, v, 1, 4096, &x))
                return 2;
            o->threads = (int)x;
            o->threads_given = 1;
            break;
        case OPT_EPOCHS:
            if (parse_int(name, v, 1, INT_MAX, &x))
                return 2;
            o->epochs = (int)x;
            break;
        case OPT_BATCH:
            if (parse_int(name, v, 1, INT32_MAX, &x))
                return 2;
            o->batch = (int)x;
            break;
        case OPT_MAX_STEPS:
            if (parse_int(name, v, 1, INT64_MAX, &x))
                return 2;
            o->max_steps = x;
            break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (*v < '0' || *v > '9' || *end || errno == ERANGE)
                return bad_arg("--seed: expected a non-negative integer below 2^64, got '%s'", v);
            o->seed = s;
            break;
        }
        case OPT_LR: {
            /* the model file's rules (compiler/train_block.c): a decimal
             * number, 0 or at least float32's smallest normal */
            double d;
            if (decimal(v, &d) != 0 || d < 0 || !isfinite((float)d))
                return bad_arg("--lr: expected a non-negative finite decimal number, got '%s'", v);
            if (d != 0 && d < FLT_MIN)
                return bad_arg("--lr is too small for float32 (%s; the smallest is %.9g)", v, (double)FLT_MIN);
            o->lr = (float)d;
            break;
        }
        case OPT_SHUFFLE:
            if (parse_onoff(name, v, &o->shuffle))
                return 2;
            break;
        case OPT_DROP_LAST:
            if (!v)
                o->drop_last = 1;
            else if (parse_onoff(name, v, &o->drop_last))
                return 2;
            break;
        case OPT_INIT: o->init_path = v; break;
        case OPT_SAVE: o->save_path = v; break;
        case OPT_METRICS: o->metrics_path = v; break;
        case OPT_STEP_LOG: o->steplog_path = v; break;
        case OPT_PROFILE: o->profile = 1; break;
        case OPT_NO_CACHE: o->no_cache = 1; break;
        case OPT_TRACE: o->trace_path = v; break;
        case OPT_CHECKPOINT: o->ckpt_path = v; break;
        case OPT_RESUME: o->resume_path = v; break;
        case OPT_PLOT: o->plot_path = v; break;
        case OPT_EVALUATE: o->eval_path = v; break;
        case OPT_LOAD: o->gen_weights = v; break;
        case OPT_EXPORT_ONNX: o->onnx_path = v; break;
        case OPT_PROMPT: o->prompt = v; break;
        case OPT_GENERATE:
            if (parse_int(name, v, 1, 1000000, &x))
                return 2;
            o->generate = x;
            break;
        case OPT_TOP_K:
            if (parse_int(name, v, 0, INT_MAX, &x))
                return 2;
            o->top_k = (int)x;
            break;
        case OPT_TEMPERATURE: {
            double d;
            if (decimal(v, &d) != 0 || d < 0)
                return bad_arg("--temperature: expected a non-negative number (0: greedy), got '%s'", v);
            o->temperature = d;
            break;
        }
        case OPT_BENCH_KERNEL:
            if (rt_bench_check_name(m, v) != 0)
                return 2;
            o->bench_kernel = v;
            break;
        case OPT_CHECKPOINT_EVERY:
            if (parse_int(name, v, 1, INT64_MAX, &x))
                return 2;
            o->ckpt_every = x;
            break;
        case OPT_PEAK_GFLOPS:
        case OPT_PEAK_GBS: {
            double d;
            if (decimal(v, &d) != 0 || d <= 0)
                return bad_arg("--%s: expected a positive number, got '%s'",
                               id == OPT_PEAK_GFLOPS ? "peak-gflops" : "peak-gbs", v);
            *(id == OPT_PEAK_GFLOPS ? &o->peak_gflops : &o->peak_gbs) = d;
            break;
        }
        case OPT_DATA_LIMIT: {
            double d;
            char num[32];
            size_t l = strlen(v), u = l && strchr("KMGT", v[l - 1]) ? 1 : 0;
            if (l - u >= sizeof num || l == u)
                return bad_arg("--data-limit: expected a size such as 4G, 512M or 1000000, got '%s'", v);
            memcpy(num, v, l - u);
            num[l - u] = 0;
            if (decimal(num, &d) != 0 || d <= 0)
                return bad_arg("--data-limit: expected a size such as 4G, 512M or 1000000, got '%s'", v);
            for (const char *k = "KMGT"; u && *k; k++) {
                d *= 1024;
                if (*k == v[l - 1])
                    break;
            }
            if (d < 1 || d > 9e18)
                return bad_arg("--data-limit: %s is not a size in bytes this machine can hold", v);
            rt_data_limit = (int64_t)d;
            break;
        }
        case OPT_COMM_TIMEOUT: {
            double d;
            if (decimal(v, &d) != 0 || d <= 0 || d > 1e9)
                return bad_arg("--comm-timeout: expected a positive number of seconds, got '%s'",
                               v);
            o->comm_timeout = d;
            break;
        }
        }
    }
    if ((o->prompt || o->top_k || o->temperature != defaults.temperature) && !o->generate)
        return bad_arg("--prompt, --temperature and --top-k go with --generate N");
    if (o->gen_weights && !o->generate && !o->onnx_path)
        return bad_arg("--load FILE goes with --generate N or --export-onnx FILE");
    if (o->onnx_path && (o->generate || o->eval_path))
        return bad_arg("--export-onnx writes the model after training, or of --load's weights; not with %s",
                       o->generate ? "--generate" : "--evaluate");
    if (o->onnx_path && o->gen_weights) {
        /* exporting --load's weights trains nothing: what only training uses is refused, not ignored */
        const char *both = o->init_path ? "--init" : o->resume_path ? "--resume" : o->save_path ? "--save"
                         : o->ckpt_path ? "--checkpoint" : o->steplog_path ? "--step-log"
                         : o->metrics_path ? "--metrics" : o->plot_path ? "--plot" : NULL;
        if (both)
            return bad_arg("--load FILE --export-onnx FILE exports FILE's weights and trains nothing: %s has no use "
                           "with it", both);
    }
    if (o->generate && !o->gen_weights)
        return bad_arg("--generate N needs the trained weights: --load FILE (--save's or a --checkpoint)");
    if (o->ckpt_every && !o->ckpt_path)
        return bad_arg("--checkpoint-every needs --checkpoint FILE (where to write)");
    if (o->init_path && o->resume_path)
        return bad_arg("--init and --resume both give the starting parameters; use one");
    if (o->eval_path) {
        /* an evaluation trains nothing: what would only matter to training is refused, not ignored */
        const char *both = o->init_path ? "--init" : o->resume_path ? "--resume" : o->save_path ? "--save"
                         : o->ckpt_path ? "--checkpoint" : o->steplog_path ? "--step-log"
                         : o->metrics_path ? "--metrics" : o->plot_path ? "--plot" : o->bench_kernel ? "--bench-kernel"
                         : o->profile ? "--profile" : NULL;
        if (both)
            return bad_arg("--evaluate FILE runs the test set through FILE's parameters and trains nothing: %s "
                           "has no use with it", both);
    }
    return -1;
}

/* The compiler and runtime are built separately; catch a mismatched or
 * inconsistent table here instead of as memory corruption in a kernel. */
static int check_model(const rt_model *m)
{
    const char *name = m->name ? m->name : "?";
    if (m->abi != RT_ABI_VERSION) {
        rt_err("model '%s' was compiled for runtime ABI %d, this runtime is ABI %d "
               "(recompile it)", name, m->abi, RT_ABI_VERSION);
        return -1;
    }
    if (m->nparam < 0 || (m->nparam && !m->params) || m->param_floats < 0 ||
        m->opt_floats < 0) {
        rt_err("model '%s' is malformed: bad parameter table", name);
        return -1;
    }
    for (int i = 0; i < m->nparam; i++) {
        const rt_param *p = &m->params[i];
        int64_t n = 1;
        for (int k = 0; k < p->rank && k < 4; k++)
            n *= p->shape[k];
        if (!p->name || p->rank < 0 || p->rank > 4 || n != p->numel || p->off < 0 ||
            p->numel < 0 || p->off > m->param_floats - p->numel || p->init < 0 ||
            p->init > RT_INIT_COPY || (m->param_zero_row && (m->param_zero_row[i] < 0 ||
                                                           m->param_zero_row[i] > p->shape[0])) ||
            ((p->init == RT_INIT_CONST || p->init == RT_INIT_UNIFORM || p->init == RT_INIT_COPY) && !m->param_init) ||
            (p->init == RT_INIT_COPY && !(m->param_init[2 * i] >= 0 && m->param_init[2 * i] < i &&
                                          m->params[(int)m->param_init[2 * i]].numel == p->numel))) {
            rt_err("model '%s' is malformed: parameter %d (%s) is inconsistent", name, i,
                   p->name ? p->name : "?");
            return -1;
        }
    }
    const rt_plan *plans[2] = { &m->train, &m->eval };
    for (int q = 0; q < 2; q++) {
        const rt_plan *p = plans[q];
        int ok = p->nk >= 0 && (p->nk == 0 || p->k) && p->act_units >= 0 &&
                 p->fix_floats >= 0 && p->loss_stat >= 0 && p->loss_stat < p->nstat &&
                 p->correct_stat >= -1 && p->correct_stat < p->nstat && p->nmetric >= 0 &&
                 rt_plan_metrics(p) <= RT_METRIC_MAX && p->correct_stat + rt_plan_metrics(p) <= p->nstat &&
                 (!p->has_count || (p->count_stat >= 0 && p->count_stat < p->nstat)) && m->positions >= 0 &&
                 (m->positions <= 1 || m->target == RT_TGT_CLASS) &&
                 m->metrics >= RT_METRICS_ACCURACY && m->metrics <= RT_METRICS_MULTITASK;
        for (int k = 0; ok && k < p->nk; k++)
            ok = p->k[k].fn != NULL;
        if (!ok) {
            rt_err("model '%s' is malformed: %s plan is inconsistent", name,
                   q ? "eval" : "train");
            return -1;
        }
    }
    const int epoch_sched = m->sched == RT_SCHED_STEP || m->sched == RT_SCHED_COSINE;
    const int want_v = m->sched == RT_SCHED_WARMUP_COSINE ? 4 : m->sched == RT_SCHED_ONECYCLE ? 7 : 0;
    if (m->sched < RT_SCHED_NONE || m->sched > RT_SCHED_ONECYCLE ||
        (epoch_sched && !(m->sched_a >= 1 && m->sched_b >= 0)) ||
        (want_v && (m->sched_n != want_v || !m->sched_v)) ||
        (m->sched == RT_SCHED_MULTISTEP && (m->sched_n < 1 || m->sched_n > RT_SCHED_MAX_V || !m->sched_v))) {
        rt_err("model '%s' is malformed: bad learning-rate schedule", name);
        return -1;
    }
    if (m->accumulate < 0 || !(m->clip_norm >= 0) || !(m->clip_value >= 0) ||   /* 0: 1, for hand-written tables */
        (m->precision == RT_PREC_FP16 && (m->accumulate > 1 || m->clip_norm > 0 || m->clip_value > 0))) {
        rt_err("model '%s' is malformed: bad accumulate, clip_grad_norm or clip_grad_value setting", name);
        return -1;
    }
    int in_ok = m->in_rank >= 1 && m->in_rank <= 3;
    for (int d = 0; in_ok && d < m->in_rank; d++)
        in_ok = m->in_dim[d] > 0;
    if (!in_ok || m->nclass <= 0 || (m->target != RT_TGT_CLASS && m->target != RT_TGT_FLOAT
                                     && m->target != RT_TGT_INPUT)) {
        rt_err("model '%s' is malformed: bad input shape or class count", name);
        return -1;
    }
    return 0;
}

static void defaults_from_model(const rt_model *m, rt_opts *o)
{
    memset(o, 0, sizeof *o);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->data_dir = m->data.path && *m->data.path ? m->data.path : ".";
    o->threads = cpus > 0 ? (int)(cpus < 4096 ? cpus : 4096) : 1;
    o->epochs = m->epochs > 0 ? m->epochs : 1;
    o->batch = m->batch > 0 ? m->batch : 64;
    o->lr = m->lr >= 0 && isfinite(m->lr) ? m->lr : 0.01f;
    o->seed = m->seed;
    o->max_steps = m->max_steps > 0 ? m->max_steps : 0;
    o->shuffle = m->shuffle != 0;
    o->drop_last = m->drop_last != 0;
    o->comm_timeout = 300;
    o->temperature = 1.0;   /* --generate: draws from the softmax itself; 0 is greedy */
}

/* OpenMP wait policy. The kernels mix OpenMP loops with OpenBLAS calls,
 * and libgomp's default lets idle workers spin after each parallel loop.
 * When the cores are shared at all (the BLAS pool, any other process),
 * the spinning and the wake-ups cost a scheduler time slice per loop:
 * measured on 2 cores with one busy, the compiled SimpleNet took 4.4-6.5 s
 * for 200 steps with 2 threads under the default policy and 0.36-0.41 s
 * with OMP_WAIT_POLICY=PASSIVE (1 thread: 0.35 s). Passive waiting costs a
 * futex wake-up (microseconds) per parallel loop on an idle machine.
 * libgomp reads the variable once, in its constructor, before main; and a
 * .preinit_array hook cannot help, because libc's own initializer resets
 * environ after it. So the program re-executes itself once with the
 * variable set. Only with more than one thread (one thread never waits)
 * and only when the user has not chosen a policy; if the exec fails, the
 * run simply continues with libgomp's default. */
/* What the CPU path wants in the environment before its libraries read it
 * (once, when they load): OpenBLAS's kernels for this CPU (rt_blas.c) and,
 * on several threads, OpenMP's waiting. Runs the program again, once, when
 * it set anything; a variable the user set is left alone. */
static void cpu_env(int threads, char **argv)
{
    if (!argv || !argv[0])
        return;
    int again = rt_blas_core_env();
    if (threads > 1 && !getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0) {
        /* oneDNN's convolutions and bf16 matmuls and our own loops are
         * short OpenMP regions back to back, each a futex wake-up when the
         * workers sleep at once: a brief spin first (libgomp's
         * GOMP_SPINCOUNT beats the passive policy's 0) took a bf16
         * SimpleNet epoch on 2 threads from 1.34-1.91 s to 0.70-0.84 s,
         * and 300 fp32 ConvNet steps from 3.56-4.00 s to 2.72-3.20 s (5
         * runs each in turn, idle machine); fp32 SimpleNet (OpenBLAS's own
         * threads) 0.36-0.39 against 0.33-0.37 s, no loss */
        if (!getenv("GOMP_SPINCOUNT"))
            setenv("GOMP_SPINCOUNT", "1000", 1);
        again = 1;
    }
    if (!again)
        return;
    fflush(stdout);
    fflush(stderr);
    execv("/proc/self/exe", argv);
}

/* -1 (the reason in why, on every rank) when two ranks of a host opened
 * the same physical GPU: a launcher that shows every rank one device, but
 * the same one. A collective: every rank calls it. */
static int shared_gpu(const rt_gpu *gpu, char *why, size_t whylen)
{
    struct { char host[64]; char bus[32]; } me, *all = rt_calloc((size_t)rt_world.size, sizeof me);
    memset(&me, 0, sizeof me);
    if (!all) {
        rt_err("out of memory");
        rt_comm_abort(1);
    }
    gethostname(me.host, sizeof me.host - 1);
    if (gpu)
        snprintf(me.bus, sizeof me.bus, "%s", rt_gpu_bus_id(gpu));
    rt_comm_allgather_bytes(&me, all, (int64_t)sizeof me, "the GPU check");
    int rc = 0;
    for (int i = 0; i < rt_world.size && !rc; i++)
        for (int j = 0; j < i && !rc; j++)
            if (all[i].bus[0] && !strcmp(all[i].bus, all[j].bus) && !strcmp(all[i].host, all[j].host)) {
                snprintf(why, whylen, "ranks %d and %d both use the GPU at PCI %s on %s: one rank per GPU "
                         "(give each rank its own with CUDA_VISIBLE_DEVICES or Slurm --gpus-per-task=1, "
                         "or choose with CDDP_CUDA_DEVICE)", j, i, all[i].bus, all[i].host);
                rc = -1;
            }
    free(all);
    return rc;
}

/* Everything after the options and the ranks' set-up. *agreed is set when
 * a failure was found by all ranks together (they all return alike). */
static int run(const rt_model *m, rt_opts o, int *agreed)
{
    /* auto: the GPU when a driver, a device and NVRTC are there (and NCCL
     * with several ranks); any of them missing means the CPU, said only
     * in the header line. Which GPU a rank takes: rt_cuda_open. */
    rt_gpu *gpu = NULL;
    char why[640] = "";
    const char *force = getenv("CDDP_NCCL_FORCE");
    const int want_nccl = rt_world.size > 1 || (force && *force == '1');
    if (o.device == RT_DEV_CUDA || (o.device == RT_DEV_AUTO && m->cuda_src)) {
        gpu = rt_gpu_open(rt_world.local_rank, rt_world.local_size, want_nccl, why, sizeof why);
        if (!gpu && o.device == RT_DEV_CUDA) {
            rt_err("--device cuda: %s", why);
            return 1;           /* with several ranks: the job is aborted */
        }
    }
    /* Several GPU ranks: no two on one physical GPU (each may see its
     * own device 0). Said before NCCL would refuse it less clearly. */
    if (rt_world.size > 1 && (o.device == RT_DEV_CUDA || (o.device == RT_DEV_AUTO && m->cuda_src)) &&
        shared_gpu(gpu, why, sizeof why) != 0) {
        rt_gpu_close(gpu);
        gpu = NULL;
        if (o.device == RT_DEV_CUDA) {
            if (rt_world.rank == 0)
                rt_err("--device cuda: %s", why);
            *agreed = 1;
            return 1;
        }
    }
    /* auto on several ranks: all on their GPUs, or all on the CPU (the
     * gradient all-reduces of the two devices do not mix). */
    if (rt_world.size > 1 && o.device == RT_DEV_AUTO) {
        double have = gpu != NULL;
        rt_comm_sum_f64(&have, 1, "the device agreement");
        if ((int)have != rt_world.size) {
            if (gpu)
                snprintf(why, sizeof why, "%d of %d ranks have no usable GPU", rt_world.size - (int)have,
                         rt_world.size);
            rt_gpu_close(gpu);
            gpu = NULL;
        }
    }
    const int use_cuda = gpu != NULL;

    int rc = 1;
    rt_log log;
    rt_ws w;
    rt_device dev;
    rt_trace trace;
    memset(&dev, 0, sizeof dev);
    memset(&trace, 0, sizeof trace);
    rt_data data;
    memset(&data, 0, sizeof data);
    rt_data_saved saved;    /* --evaluate, --resume: what the training run saved about its data */
    memset(&saved, 0, sizeof saved);
    const rt_dataset *train = &data.train, *test = &data.test;
    memset(&w, 0, sizeof w);
    memset(&log, 0, sizeof log);
    /* Cheap checks first: a typo in a path should cost a second, not a
     * data load and a training run. */
    int r0 = rt_world.rank == 0;    /* only rank 0 writes files */
    if (o.generate) {       /* writing text: the weights, no data (the CPU, one sequence) */
        rt_gpu_close(gpu);
        if (rt_ws_alloc_params(m, &w) != 0 || rt_st_load(m, o.gen_weights, w.param) != 0)
            return 1;
        rc = rt_generate(m, &o, w.param) != 0;
        rt_ws_free(&w);
        return rc;
    }
    if (rt_data_check_path(m, o.data_dir) != 0 ||
        (r0 && o.save_path && rt_st_check_writable(o.save_path)) ||
        (r0 && o.trace_path && rt_st_check_writable(o.trace_path)) ||
        (r0 && o.ckpt_path && rt_st_check_writable(o.ckpt_path)) ||
        (r0 && o.plot_path && rt_st_check_writable(o.plot_path)) ||
        (o.onnx_path && (rt_onnx_check(m) != 0 || (r0 && rt_st_check_writable(o.onnx_path)))) || rt_log_open(&log, &o, m->precision == RT_PREC_FP16, m->metrics,
                                                         rt_model_positions(m)) != 0) {
        rt_gpu_close(gpu);
        return 1;
    }
    if (r0 && o.ckpt_path)      /* what a kill during a checkpoint's write left */
        rt_st_clean_stale(o.ckpt_path);
    if (r0 && o.save_path)
        rt_st_clean_stale(o.save_path);
    log.title = m->name;        /* --plot's title */
    if (use_cuda && rt_gpu_start(gpu, m, !o.no_cache, o.comm_timeout) != 0)
        goto out;
    if (rt_ws_alloc_params(m, &w) != 0)
        goto out;
    rt_init_params(m, w.param, o.seed);
    if (o.init_path && rt_st_load(m, o.init_path, w.param) != 0)
        goto out;
    if (o.eval_path && (rt_st_load(m, o.eval_path, w.param) != 0 || rt_data_saved_read(o.eval_path, &saved) != 0))
        goto out;
    const char *loaded = o.eval_path ? o.eval_path : o.onnx_path ? o.gen_weights : NULL;
    if (o.onnx_path && loaded && (rt_st_load(m, loaded, w.param) != 0 || rt_data_saved_read(loaded, &saved) != 0))
        goto out;
    rt_resume rs;
    memset(&rs, 0, sizeof rs);
    /* resuming, the data's normalization and class map are the run's own,
     * not measured again: the checkpoint keeps them as --save does */
    if (o.resume_path && r0 &&
        (rt_ckpt_load(m, &o, o.resume_path, w.param, w.opt, &rs) != 0 || rt_data_saved_read(o.resume_path, &saved) != 0))
        goto out;       /* with several ranks: aborted, the others wait below */
    /* As DDP's constructor: every rank starts from rank 0's parameters
     * (and, resuming, its optimizer state and position). */
    rt_comm_bcast_f32(w.param, m->param_floats, "the parameter broadcast");
    if (o.resume_path) {
        rt_comm_bcast_f32(w.opt, m->opt_floats, "the optimizer state broadcast");
        rt_ckpt_bcast(&rs);
        saved.from = o.resume_path;
        if (rt_ckpt_bcast_data(&saved) != 0)
            goto out;
    }
    if (rt_data_load(m, o.data_dir, o.seed, loaded || o.resume_path ? &saved : NULL, &data) != 0)
        goto out;
    if (o.onnx_path && loaded) {    /* the weights as they are: no training */
        rc = r0 && rt_onnx_write(m, &data, w.param, o.onnx_path) != 0;
        goto out;
    }
    o.data_meta = data.meta;
    o.ndata_meta = data.nmeta;
    if (rt_comm_check_data(train->n, test->n) != 0) {
        *agreed = 1;
        goto out;
    }

    /* Arena rows: the batch, but never more than a whole split needs. */
    int64_t most = train->n > test->n ? train->n : test->n;
    int nmax = o.batch < most ? o.batch : (int)most;
    if (rt_ws_alloc_batch(m, &w, nmax) != 0)
        goto out;
    if (r0 && o.drop_last && train->n < (int64_t)o.batch * rt_world.size)
        rt_warn("--drop-last with batch %d x %d ranks > %lld training samples: no step will "
                "be taken", o.batch, rt_world.size, (long long)train->n);

    char devname[1024];   /* holds the 640-byte reason too */
    if (use_cuda)
        rt_gpu_describe(gpu, m->gpu_target, devname, sizeof devname);
    else if (o.device == RT_DEV_AUTO)
        snprintf(devname, sizeof devname, "cpu (auto: %s)", *why ? why : "no CUDA kernels in this program");
    else
        snprintf(devname, sizeof devname, "cpu");
    char ranks[64] = "";
    if (rt_world.size > 1)
        snprintf(ranks, sizeof ranks, "  ranks %d (global batch %lld)", rt_world.size,
                 (long long)o.batch * rt_world.size);
    static const char *const precs[] = {"", "  precision bf16", "  precision fp16"};
    /* From here on a signal stops the loop at a step all ranks agree on;
     * installed before the start-up line, so whoever sees the line may
     * signal (the tests do). */
    rt_stop_install();
    /* PyTorch's sum(p.numel() for p in model.parameters()): the
     * trainable tensors only; buffers (running statistics,
     * num_batches_tracked) apart; param_floats also counts the slab's
     * alignment padding, which is no one's parameter */
    int64_t nparam = 0, nbuffer = 0;
    for (int i = 0; i < m->nparam; i++)     /* a tied weight counted once, as PyTorch's parameters() */
        if (!(rt_param_flags(m, i) & RT_PARAM_ALIAS))
            *(rt_param_flags(m, i) & RT_PARAM_BUFFER ? &nbuffer : &nparam) += m->params[i].numel;
    char buffers[64] = "";
    if (nbuffer)
        snprintf(buffers, sizeof buffers, " (+ %lld buffer values)", (long long)nbuffer);
    if (r0 && o.eval_path)      /* nothing of training's: no lr, epochs or seed */
        printf("model %s: %lld parameters%s  test %lld  batch %d  threads %d  device %s%s%s  evaluating %s\n",
               m->name, (long long)nparam, buffers, (long long)test->n, o.batch, o.threads, devname, ranks,
               precs[m->precision >= 0 && m->precision <= 2 ? m->precision : 0], o.eval_path);
    else if (r0) {
        char steps[40] = "";
        if (o.max_steps)
            snprintf(steps, sizeof steps, "  max_steps %lld", (long long)o.max_steps);
        printf("model %s: %lld parameters%s  train %lld  test %lld  batch %d  lr %g  epochs %d%s"
               "  seed %llu  threads %d  device %s%s%s\n", m->name, (long long)nparam, buffers,
               (long long)train->n, (long long)test->n, o.batch, (double)o.lr, o.epochs,
               steps, (unsigned long long)o.seed, o.threads, devname, ranks,
               precs[m->precision >= 0 && m->precision <= 2 ? m->precision : 0]);
    }
    fflush(stdout);
    if (rs.active && r0)
        printf("resuming from %s: epoch %d, %lld batches of it done, %lld steps in all\n",
               o.resume_path, rs.epoch, (long long)rs.skip, (long long)rs.step);
    if (rs.active && r0 && rs.epoch > o.epochs)
        rt_warn("%s is at the end of epoch %d and --epochs is %d: nothing left to train (raise "
                "--epochs to go on)", o.resume_path, rs.epoch - 1, o.epochs);
    if (o.bench_kernel) {
        if (use_cuda)
            rt_err("--bench-kernel times the CPU kernels; on a GPU use --trace (cddpc study --kernels)");
        else if (rt_bench_kernels(m, &o, &w, &data) == 0)
            rc = 0;
        goto out;
    }
    /* the collectives: NCCL's on GPU ranks, else the MPI world's */
    rt_coll coll;
    if (use_cuda)
        rt_gpu_coll(gpu, &coll);
    else
        rt_coll_mpi(&coll);
    rt_start start;
    rt_start_init(&start, m, &rs);
    if (rt_trace_open(&trace, o.trace_path) != 0 ||
        (use_cuda ? rt_gpu_dev_open(&dev, gpu, m, &o, &w, &start, &data, &coll, &trace)
                  : rt_cpu_dev_open(&dev, m, &o, &w, &start, &data, &coll, &trace)) != 0)
        goto out;
    if (o.eval_path) {
        rc = rt_loop_evaluate(m, &o, &dev, &coll, train->n, test->n) != 0;
        goto out;
    }
    const int lr_ = rt_loop_run(m, &o, &rs, &dev, &coll, train->n, test->n, &w, &log, &trace);
    rt_stop_uninstall();
    if (lr_ > 0) {          /* stopped by a signal, on every rank alike */
        rc = rt_stop_status(lr_);
        *agreed = 1;
        goto out;
    }
    if (lr_ != 0)
        goto out;
    dev.close(&dev);
    if (r0 && o.save_path && rt_st_save_kv(m, o.save_path, w.param, data.meta, data.nmeta) != 0)
        goto out;
    if (r0 && o.onnx_path && rt_onnx_write(m, &data, w.param, o.onnx_path) != 0)
        goto out;
    rc = 0;
out:
    rt_stop_uninstall();
    if (rt_log_close(&log) != 0)
        rc = 1;
    /* The epoch lines are results too: a full disk or closed pipe on
     * stdout must not pass for success. */
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
        rt_err("write error on standard output: %s", strerror(errno));
        rc = 1;
    }
    if (dev.close)
        dev.close(&dev);
    rt_trace_free(&trace);
    rt_data_free(&data);
    rt_data_saved_free(&saved);
    rt_ws_free(&w);
    rt_gpu_close(gpu);
    return rc;
}

int rt_main(const rt_model *m, int argc, char **argv)
{
    if (argc > 0 && argv[0] && *argv[0]) {
        const char *s = strrchr(argv[0], '/');
        rt_prog = s ? s + 1 : argv[0];
    }
    rt_opts o;
    defaults_from_model(m, &o);
    int st = parse_args(m, &o, argc, argv);
    if (st >= 0)
        return st;
    if (check_model(m) != 0)
        return 1;
    if (o.device == RT_DEV_CUDA && !m->cuda_src) {
        rt_err("--device cuda: this program was compiled without CUDA kernels");
        return 1;
    }
    /* The CPU's environment (it may re-execute the program) comes first;
     * with --device cuda it is not needed. It must precede MPI_Init. */
    if (o.device != RT_DEV_CUDA)
        cpu_env(o.threads, argv);
    if (rt_comm_init(o.comm_timeout) != 0)
        return 1;
    /* Ranks sharing a node share its cores: by default each takes its part. */
    if (rt_world.local_size > 1 && !o.threads_given) {
        o.threads /= rt_world.local_size;
        if (o.threads < 1)
            o.threads = 1;
    }
#ifndef CDDP_NO_BLAS
    openblas_set_num_threads(o.threads);
#endif
    omp_set_num_threads(o.threads);

    /* Several ranks: every one must run the same program with the same
     * settings, or the collectives would not match. A failure on one rank
     * ends them all (MPI_Abort): the others would wait for it forever. */
    int agreed = 0, rc;
    if (rt_comm_check_same(m, &o) != 0)
        rc = 1, agreed = 1;
    else
        rc = run(m, o, &agreed);
    if (rc != 0 && rt_world.size > 1 && !agreed)
        rt_comm_abort(rc);
    rt_comm_finalize();
    return rc;
}
