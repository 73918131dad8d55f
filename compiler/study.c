/* study.c: `cddpc study`, what fusion buys, measured side by side.
 *
 *   cddpc study MODEL.net [MORE.net ...] [--fusion none,elementwise,all]
 *               [--batch 16,64,256] [--device cpu|cuda] [--steps N]
 *               [--repeat R] [--warmup W] [--data DIR] [--threads T] [--out DIR]
 *
 * Each model is compiled once per fusion level (the driver's pipeline, in
 * a child process since a diagnostic exits), which also gives the train
 * plan's kernel count, FLOPs and bytes at each batch size (cost.c). Each
 * program then runs W warm-up steps and N measured steps, R times, with
 * --trace: a step's time is the span from its first kernel's start to
 * its last kernel's end on the main thread, so program start-up, data
 * loading and the final evaluation are not in it. The table shows the
 * median over all N x R measured steps with the fastest and slowest step,
 * and the ratio to the baseline: the `all` level of the same model and
 * batch (the first level given when `all` is not among them). The rows go
 * to OUT/study.csv too, the chart to OUT/study.svg (study_svg.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cddpc.h"
#include "study.h"

#define MAX_ITEMS 16

/* The progress line: rewritten in place on a terminal, one line each
 * otherwise (a log file keeps them readable). */
static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
    static int tty = -1;
    if (tty < 0)
        tty = isatty(2);
    va_list ap;
    va_start(ap, fmt);
    fputs(tty ? "\r" : "", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(tty ? "\033[K" : "\n", stderr);
    va_end(ap);
}


static int study_usage(FILE *f, int rc)
{
    fprintf(f,
            "usage: cddpc study MODEL.net [MORE.net ...] [options]\n"
            "  compiles each model at each fusion level, runs each program at each batch size,\n"
            "  and prints one table (also OUT/study.csv and the chart OUT/study.svg)\n"
            "  --fusion L,L,...   levels to compare: none, elementwise, all (default all three)\n"
            "  --batch B,B,...    batch sizes (default: each model's train block)\n"
            "  --device cpu|cuda  where the programs run (default cpu; cuda: the gpu cost model)\n"
            "  --steps N          measured steps per run (default 20)\n"
            "  --warmup W         steps run first and not measured (default 3)\n"
            "  --repeat R         runs of each program (default 3)\n"
            "  --data DIR         dataset directory passed to the programs (default: the model's)\n"
            "  --threads T        passed to the programs (default: theirs, the online CPUs)\n"
            "  --out DIR          where programs, traces, logs, CSV and SVG go (default study)\n"
            "  --kernels          also each kernel on its own: median, min, max time per call, GFLOP/s,\n"
            "                     GB/s and the fraction of its roofline bound (OUT/kernels.csv)\n"
            "  --peak-gflops X, --peak-gbs Y   the roofline's peaks (default: measured at start by\n"
            "                     a triad and an FMA loop compiled as the programs are)\n");
    return rc;
}

static int study_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "cddpc study: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry 'cddpc study --help'\n");
    return 2;
}

static int parse_count(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* "none,elementwise,all,-epilogue" -> levels and their labels: a -RULE
 * or +RULE item changes the level before it (fuse_parse's syntax); -1
 * with the bad item in *bad */
static int parse_levels(const char *s, FuseLevel *lv, const char **label, int *n, const char **bad)
{
    char *copy = util_strdup(s), *save = NULL;
    *n = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int mod = t[0] == '-' || t[0] == '+';
        if (mod && !*n) {
            *bad = util_strdup(t);
            return -1;
        }
        const char *spec = mod ? util_fmt("%s,%s", label[*n - 1], t) : t;
        if (!mod && *n == MAX_ITEMS)
            return -1;
        int at = mod ? *n - 1 : (*n)++;
        if (fuse_parse(spec, &lv[at], bad) != 0)
            return -1;
        label[at] = util_strdup(spec);
    }
    return *n ? 0 : -1;
}

static int parse_batches(const char *s, int64_t *b, int *n)
{
    char *copy = util_strdup(s), *save = NULL;
    *n = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (parse_count(t, 1, 1 << 20, &v) || *n == MAX_ITEMS)
            return -1;
        b[(*n)++] = v;
    }
    return *n ? 0 : -1;
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    char *s = util_strdup(b ? b + 1 : path);
    size_t n = strlen(s);
    if (n > 4 && !strcmp(s + n - 4, ".net"))
        s[n - 4] = 0;
    return s;
}

/* Compiles in a child (the front end exits on a diagnostic, which the
 * child then prints); the costs come back through a pipe. */
static int compile_variant(const char *model, FuseLevel lv, CostTarget t, const char *out, const int64_t *batches,
                           int nb, StudyCost *costs)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(fd[0]);
        PipelineOptions o = {.input = model, .fusion = lv, .target = t};
        int rc = pipeline_compile_file(&o, out, batches, nb, costs);
        if (rc == 0 && write(fd[1], costs, sizeof(StudyCost) * (size_t)nb) != (ssize_t)(sizeof(StudyCost) * (size_t)nb))
            rc = 1;
        fflush(NULL);
        _exit(rc);
    }
    close(fd[1]);
    size_t want = sizeof(StudyCost) * (size_t)nb, got = 0;
    for (ssize_t r; got < want && (r = read(fd[0], (char *)costs + got, want - got)) > 0;)
        got += (size_t)r;
    close(fd[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || got != want)
        return -1;
    return 0;
}

/* Runs argv with stdout and stderr into log; its exit status, or -1. */
static int run_program(char *const *argv, const char *log)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The span of each training step in a --trace file (rt_trace.c's format:
 * one complete event a line, "cat" the kernel's phase, "args":{"step":S}),
 * main thread only; steps first..last go to secs[], the count returned,
 * -1 when the file cannot be read. */
static int trace_steps(const char *path, int first, int last, double *secs)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = last - first + 1;
    double *t0 = util_alloc(sizeof(double) * (size_t)n), *t1 = util_alloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
        t0[i] = INFINITY, t1[i] = -INFINITY;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *cat = strstr(line, "\"cat\":\""), *ts = strstr(line, "\"ts\":"), *dur = strstr(line, "\"dur\":"),
                   *step = strstr(line, "\"step\":");
        if (!cat || !ts || !dur || !step || !strstr(line, "\"tid\":0,"))
            continue;
        cat += 7;
        if (!strncmp(cat, "eval\"", 5) || !strncmp(cat, "comm\"", 5))
            continue;
        double a = strtod(ts + 5, NULL), d = strtod(dur + 6, NULL);
        long s = strtol(step + 7, NULL, 10);
        if (s < first || s > last)
            continue;
        if (a < t0[s - first])
            t0[s - first] = a;
        if (a + d > t1[s - first])
            t1[s - first] = a + d;
    }
    fclose(f);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (t1[i] > t0[i])
            secs[k++] = (t1[i] - t0[i]) * 1e-6;
    return k;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int cddpc_study_main(int argc, char **argv)
{
    const char *models[MAX_ITEMS], *device = "cpu", *out = "study", *data = NULL, *threads = NULL;
    int nmodels = 0, nlevels = 3, nbatch = 0;
    FuseLevel levels[MAX_ITEMS] = {FUSE_NONE, FUSE_ELEMENTWISE, FUSE_ALL};
    const char *level_name[MAX_ITEMS] = {"none", "elementwise", "all"}, *bad = "";
    int64_t batches[MAX_ITEMS];
    long steps = 20, repeat = 3, warmup = 3;
    int per_kernel = 0;
    double peak_gflops = 0, peak_gbs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return study_usage(stdout, 0);
        if (!strcmp(a, "--kernels")) {
            per_kernel = 1;
            continue;
        }
        if (a[0] != '-') {
            if (nmodels == MAX_ITEMS)
                return study_error("at most %s model files", "16");
            models[nmodels++] = a;
            continue;
        }
        /* every option takes a value: --opt VALUE or --opt=VALUE */
        const char *eq = strchr(a, '=');
        char *name = util_strdup(a);
        if (eq)
            name[eq - a] = 0;
        const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        static const char *known[] = {"--fusion", "--batch", "--device", "--steps", "--repeat",
                                      "--warmup", "--data", "--threads", "--out", "--peak-gflops", "--peak-gbs"};
        int k = 0;
        while (k < 11 && strcmp(name, known[k]))
            k++;
        if (k == 11)
            return study_error("unknown option '%s'", a);
        if (!v)
            return study_error("%s needs a value", name);
        if (k >= 9) {
            char *end;
            double x = strtod(v, &end);
            if (*end || !(x > 0) || x > 1e9)
                return study_error("%s", util_fmt("%s takes a positive number, got '%s'", name, v));
            *(k == 9 ? &peak_gflops : &peak_gbs) = x;
        }
        if (k == 0 && parse_levels(v, levels, level_name, &nlevels, &bad))
            return study_error("%s", util_fmt("unknown fusion level or rule '%s' in '%s' (levels: none, elementwise, "
                                              "all; each may be followed by -RULE or +RULE items, RULE one of: %s)",
                                              bad, v, fuse_rule_names()));
        if (k == 1 && parse_batches(v, batches, &nbatch))
            return study_error("--batch takes sizes between 1 and 1048576, comma separated: '%s'", v);
        if (k == 2 && strcmp(v, "cpu") && strcmp(v, "cuda"))
            return study_error("--device: expected cpu or cuda, got '%s'", v);
        if ((k == 3 && parse_count(v, 1, 100000, &steps)) || (k == 4 && parse_count(v, 1, 1000, &repeat))
            || (k == 5 && parse_count(v, 0, 100000, &warmup)))
            return study_error("%s takes a count", name);
        if (k == 2) device = v;
        if (k == 6) data = v;
        if (k == 7) threads = v;
        if (k == 8) out = v;
    }
    if (!nmodels)
        return study_error("%s", "no model file given");
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cddpc study: error: cannot create '%s': %s\n", out, strerror(errno));
        return 1;
    }
    CostTarget target = strcmp(device, "cuda") ? COST_CPU : COST_GPU;
    int nb = nbatch ? nbatch : 1;       /* 0: the train block's batch (compile fills it in) */
    int64_t want[MAX_ITEMS];
    for (int i = 0; i < nb; i++)
        want[i] = nbatch ? batches[i] : 0;

    int nrows = nmodels * nlevels * nb;
    StudyRow *rows = util_alloc(sizeof(StudyRow) * (size_t)nrows);
    char **programs = util_alloc(sizeof(char *) * (size_t)(nmodels * nlevels));
    for (int m = 0; m < nmodels; m++)
        for (int l = 0; l < nlevels; l++) {
            StudyCost costs[MAX_ITEMS];
            char *prog = util_fmt("%s/%s_%s", out, base_name(models[m]), level_name[l]);
            for (char *q = prog + strlen(out) + 1; *q; q++)     /* "all,-epilogue": a file name */
                if (*q == ',' || *q == '+')
                    *q = '_';
            progress("cddpc study: compiling %s at --fusion=%s", models[m], level_name[l]);
            if (compile_variant(models[m], levels[l], target, prog, want, nb, costs) != 0) {
                fprintf(stderr, "\ncddpc study: error: compiling %s at --fusion=%s failed\n", models[m],
                        level_name[l]);
                return 1;
            }
            programs[m * nlevels + l] = (char *)prog;
            for (int b = 0; b < nb; b++)
                rows[(m * nb + b) * nlevels + l] = (StudyRow){.model = base_name(models[m]),
                    .fusion = level_name[l], .batch = costs[b].batch, .kernels = costs[b].kernels,
                    .cost = costs[b].cost};
        }

    FILE *kcsv = NULL;
    if (per_kernel) {
        if (!(peak_gflops > 0 && peak_gbs > 0)) {
            progress("cddpc study: measuring this machine's peak FLOP rate and bandwidth");
            if (study_calibrate(out, threads, &peak_gflops, &peak_gbs) != 0) {
                fprintf(stderr, "\ncddpc study: error: the calibration program (%s/calibrate.c) could not be built "
                                "or run; give --peak-gflops and --peak-gbs\n", out);
                return 1;
            }
        }
        const char *kpath = util_fmt("%s/kernels.csv", out);
        if (!(kcsv = fopen(kpath, "w"))) {
            fprintf(stderr, "cddpc study: error: cannot write %s: %s\n", kpath, strerror(errno));
            return 1;
        }
        fprintf(kcsv, "model,fusion,batch,kernel,calls,median_s,min_s,max_s,flops,bytes,gflops_per_s,gb_per_s,"
                      "bound,roofline_fraction\n");
    }
    char *ktables = NULL;       /* printed after the main table */
    size_t ktables_len = 0;
    FILE *kout = per_kernel ? open_memstream(&ktables, &ktables_len) : NULL;

    /* measure: the model-batch groups in order, each level in turn */
    int total = nrows * (int)repeat, done = 0;
    double *secs = util_alloc(sizeof(double) * (size_t)(steps * repeat));
    for (int m = 0; m < nmodels; m++)
        for (int b = 0; b < nb; b++)
            for (int l = 0; l < nlevels; l++) {
                StudyRow *r = &rows[(m * nb + b) * nlevels + l];
                const char *trace = util_fmt("%s.b%lld.trace.json", programs[m * nlevels + l], (long long)r->batch);
                const char *log = util_fmt("%s.b%lld.log", programs[m * nlevels + l], (long long)r->batch);
                int nsec = 0, nk = 0;
                KernelStat *ks = NULL;
                if (per_kernel) {
                    const char *tsv = util_fmt("%s.b%lld.kernels.tsv", programs[m * nlevels + l], (long long)r->batch);
                    if ((nk = study_kernel_costs(tsv, &ks, (int)(steps * repeat))) < 0) {
                        fprintf(stderr, "\ncddpc study: error: cannot read %s\n", tsv);
                        return 1;
                    }
                }
                for (int k = 0; k < repeat; k++) {
                    progress("cddpc study: [%d/%d] %s --fusion=%s --batch %lld, run %d of %ld", ++done, total,
                             r->model, r->fusion, (long long)r->batch, k + 1, repeat);
                    char *av[16];
                    int ac = 0;
                    av[ac++] = programs[m * nlevels + l];
                    av[ac++] = util_fmt("--batch=%lld", (long long)r->batch);
                    av[ac++] = util_fmt("--max-steps=%ld", warmup + steps);
                    av[ac++] = "--epochs=1";
                    av[ac++] = util_fmt("--device=%s", device);
                    av[ac++] = util_fmt("--trace=%s", trace);
                    if (data)
                        av[ac++] = util_fmt("--data=%s", data);
                    if (threads)
                        av[ac++] = util_fmt("--threads=%s", threads);
                    av[ac] = NULL;
                    int rc = run_program(av, log);
                    int got = rc == 0 ? trace_steps(trace, (int)warmup + 1, (int)(warmup + steps), secs + nsec) : -1;
                    if (got < steps) {
                        fprintf(stderr, "\ncddpc study: error: %s %s %s: %s (see %s)\n", av[0], av[1], av[2],
                                rc ? "the run failed" : "fewer measured steps than asked (is the training set "
                                "smaller than (warmup + steps) x batch?)", log);
                        return 1;
                    }
                    nsec += got;
                    if (per_kernel)
                        study_kernel_times(trace, (int)warmup + 1, (int)(warmup + steps), ks, nk);
                }
                r->step_min = r->step_max = secs[0];
                for (int i = 0; i < nsec; i++) {
                    r->step_min = fmin(r->step_min, secs[i]);
                    r->step_max = fmax(r->step_max, secs[i]);
                }
                r->step_median = median(secs, nsec);
                r->nsteps = nsec;
                if (per_kernel)
                    study_kernel_table(kout, kcsv, r, ks, nk, peak_gflops, peak_gbs);
            }
    if (isatty(2))
        fprintf(stderr, "\r\033[K");

    /* the baseline of each model and batch: `all`, else the first level */
    int base = 0;
    for (int l = 0; l < nlevels; l++)
        if (!strcmp(level_name[l], "all")) {
            base = l;
            break;
        }
    for (int g = 0; g < nmodels * nb; g++)
        for (int l = 0; l < nlevels; l++) {
            StudyRow *r = &rows[g * nlevels + l];
            r->base_median = rows[g * nlevels + base].step_median;
            r->base_bytes = rows[g * nlevels + base].cost.bytes;
            r->ratio = r->step_median / r->base_median;
        }

    StudySetup setup = {device, level_name[base], steps, repeat, warmup};
    study_table(stdout, rows, nrows, &setup);
    if (per_kernel) {
        fclose(kout);
        fputs(ktables, stdout);
        if (fclose(kcsv) != 0) {
            fprintf(stderr, "cddpc study: error: cannot write %s/kernels.csv\n", out);
            return 1;
        }
        printf("roofline: the longer of FLOPs / %.1f GFLOP/s and bytes / %.1f GB/s (main memory: over 100%% means "
               "the kernel's buffers were in cache), over the median time\nkernel rows: %s/kernels.csv\n",
               peak_gflops, peak_gbs, out);
    }
    const char *csv = util_fmt("%s/study.csv", out), *svg = util_fmt("%s/study.svg", out);
    if (study_csv(csv, rows, nrows) != 0 || study_svg(svg, rows, nrows, nlevels, &setup) != 0) {
        fprintf(stderr, "cddpc study: error: cannot write %s or %s: %s\n", csv, svg, strerror(errno));
        return 1;
    }
    printf("rows: %s\nchart: %s\n", csv, svg);
    return 0;
}
