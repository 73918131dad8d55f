/* test_loop.c: the epoch loop (runtime/rt_loop.c) against a scripted
 * device, without kernels: what the loop asks a device to do, and what it
 * makes of the answers. The CPU and CUDA devices are driven by this one
 * loop, so these are the GPU's bookkeeping, checked on the CPU:
 *   1. an asynchronous device (as the CUDA one) gets one train() range and
 *      one collect() per epoch: no host sync inside an epoch;
 *   2. --max-steps cuts the range and stops after that epoch's evaluation;
 *   3. --checkpoint-every ends ranges at the global step multiples (across
 *      epochs), each followed by a collect of the epoch so far and a
 *      checkpoint file;
 *   4. a resumed run starts at the checkpoint's batch, and its epoch loss
 *      is (loss so far + the new steps) / (rows so far + new rows);
 *   5. the step log: step numbers, epochs, and each step's loss as the
 *      global batch's mean (sum / rows), the epoch line's exact mean, the
 *      learning rate of each epoch through a StepLR schedule (and in the
 *      lr column of both CSVs); ranges of
 *      single steps only for a device that runs them as asked, while a
 *      progress bar is drawn;
 *   6. the gradient buckets' schedule (rt_buckets.c), and an inconsistent
 *      bucket table refused with the reason;
 *   7. the graceful stop: a signal during a range stops the loop at the
 *      first agreement (16 steps in, or the epoch's end if sooner), on
 *      either device; the steps so far reach the step log, a checkpoint is
 *      written, nothing is evaluated, the signal is returned; the
 *      asynchronous device is waited for at span ends only.
 * Expected values are computed here from the script, not by the loop's
 * code. Exit status 0 when every check passes. */
#include "rt_internal.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static int fails, passes;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passes++;                                                                              \
        } else {                                                                                   \
            fails++;                                                                               \
            printf("FAIL loop: ");                                                                 \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

/* ---- the scripted device ---------------------------------------------------- */
enum { MAXCALLS = 256 };
typedef struct call { char op; int64_t a, b, c; } call;
typedef struct script {
    int async;
    call calls[MAXCALLS];
    int n;
    int epoch;
    int64_t per_rank, batch;
    float lr[16];
} script;

/* the step loss sum the device reports for batch b of epoch e */
static double sum_of(int e, int64_t b) { return 1000.0 * e + (double)b + 0.25; }

static void rec(script *s, char op, int64_t a, int64_t b, int64_t c)
{
    if (s->n < MAXCALLS)
        s->calls[s->n++] = (call){op, a, b, c};
}

static int d_begin(rt_device *d, int epoch, const int32_t *order, const float *lr, int64_t first)
{
    script *s = d->impl;
    (void)order;
    s->epoch = epoch;
    if (epoch < 16)
        s->lr[epoch] = lr[0];   /* an epoch schedule: every batch's */
    rec(s, 'B', epoch, first, 0);
    return 0;
}
/* the graceful stop's trigger: a signal while epoch stop_epoch trains */
static int stop_epoch;
static int d_train(rt_device *d, int64_t b0, int64_t b1, int64_t step0)
{
    rec(d->impl, 'T', b0, b1, step0);
    if (((script *)d->impl)->epoch == stop_epoch)
        rt_stop_request(SIGTERM);
    return 0;
}
static int d_eval(rt_device *d)
{
    rec(d->impl, 'E', 0, 0, 0);
    return 0;
}
static int d_collect(rt_device *d, int64_t b0, int64_t b1, rt_dev_out *out)
{
    script *s = d->impl;
    rec(s, 'C', b0, b1, 0);
    for (int64_t b = b0; b < b1; b++)
        out->loss[b - b0] = sum_of(s->epoch, b);
    out->eval[0] = 7.0;
    out->eval[1] = 3.0;
    out->secs = 0.5;
    return 0;
}
static int d_pull(rt_device *d, float *p, float *o)
{
    (void)p, (void)o;
    rec(d->impl, 'P', 0, 0, 0);
    return 0;
}
static void d_close(rt_device *d) { (void)d; }

/* ---- a model the loop and the checkpoint writer accept ------------------------ */
static const rt_param params[1] = {{"w", 1, {1, 0, 0, 0}, 0, 1, 1, RT_INIT_ZERO, 0, -1}};
static int accumulate;      /* the model's accumulate (section 8) */
static rt_model model(void)
{
    rt_model m;
    memset(&m, 0, sizeof m);
    m.abi = RT_ABI_VERSION;
    m.name = "Scripted";
    m.params = params;
    m.nparam = 1;
    m.param_floats = 1;
    m.eval.correct_stat = 1;
    m.eval.nstat = 2;
    m.train.nstat = 1;
    m.reduction = RT_RED_MEAN;
    m.sched = RT_SCHED_STEP;
    m.sched_a = 2;
    m.sched_b = 0.5;
    m.in_rank = 1;
    m.in_dim[0] = 1;
    m.nclass = 2;
    m.accumulate = accumulate;
    return m;
}

typedef struct run_out { script s; char steplog[64], metrics[64]; int rc; } run_out;

static void run(run_out *r, const rt_opts *o0, const rt_resume *rs, int async, int tty, const char *dir)
{
    rt_model m = model();
    rt_opts o = *o0;
    snprintf(r->steplog, sizeof r->steplog, "%s/steps.csv", dir);
    snprintf(r->metrics, sizeof r->metrics, "%s/metrics.csv", dir);
    o.steplog_path = r->steplog;
    o.metrics_path = r->metrics;
    memset(&r->s, 0, sizeof r->s);
    r->s.async = async;
    rt_device dev = {"scripted", async, &r->s, d_begin, d_train, d_eval, d_collect, d_pull, d_close};
    rt_coll coll;
    rt_coll_mpi(&coll);
    rt_log log;
    rt_trace trace;
    memset(&trace, 0, sizeof trace);
    float param[1] = {0}, opt[1] = {0};
    rt_ws w;
    memset(&w, 0, sizeof w);
    w.param = param;
    w.opt = opt;
    fflush(stdout);
    if (rt_log_open(&log, &o, 0, RT_METRICS_ACCURACY, 1) != 0) {
        r->rc = -1;
        return;
    }
    /* as if a progress bar were watched (drawn to /dev/null), or not */
    int saved = dup(2), null = tty ? open("/dev/null", O_WRONLY) : -1;
    if (null >= 0)
        dup2(null, 2);
    log.tty = tty;
    r->rc = rt_loop_run(&m, &o, rs, &dev, &coll, 100, 10, &w, &log, &trace);
    if (null >= 0) {
        fflush(stderr);
        dup2(saved, 2);
        close(null);
    }
    close(saved);
    rt_log_close(&log);
}

/* the calls of kind op, as "a:b" pairs, for messages and comparisons */
static void calls_of(const script *s, char op, char *buf, size_t len)
{
    buf[0] = 0;
    for (int i = 0; i < s->n; i++)
        if (s->calls[i].op == op) {
            size_t k = strlen(buf);
            snprintf(buf + k, len - k, "%s%lld:%lld", k ? " " : "", (long long)s->calls[i].a,
                     (long long)s->calls[i].b);
        }
}

static int count(const script *s, char op)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += s->calls[i].op == op;
    return n;
}

static double *read_col(const char *path, int col, int *n)
{
    FILE *f = fopen(path, "r");
    static double v[512];
    char line[256];
    *n = 0;
    if (!f)
        return v;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return v;
    }
    while (fgets(line, sizeof line, f) && *n < 512) {
        char *p = line;
        for (int c = 0; c < col && p; c++) {
            p = strchr(p, ',');
            if (p)
                p++;
        }
        v[(*n)++] = p ? strtod(p, NULL) : NAN;
    }
    fclose(f);
    return v;
}

int main(void)
{
    char dir[] = "/tmp/test_loop.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    rt_prog = "test_loop";
    rt_opts o;
    memset(&o, 0, sizeof o);
    o.epochs = 3;
    o.batch = 8;        /* 100 samples: 13 batches, the last of 4 */
    o.lr = 0.1f;
    o.seed = 1;
    o.shuffle = 1;
    rt_resume fresh;
    memset(&fresh, 0, sizeof fresh);
    char buf[1024];
    run_out r;

    /* 1. asynchronous device: one range and one collect per epoch */
    run(&r, &o, &fresh, 1, 0, dir);
    calls_of(&r.s, 'T', buf, sizeof buf);
    CHECK(r.rc == 0 && !strcmp(buf, "0:13 0:13 0:13"), "async device: train ranges %s, want 0:13 x 3", buf);
    calls_of(&r.s, 'C', buf, sizeof buf);
    CHECK(!strcmp(buf, "0:13 0:13 0:13"), "async device: collects %s, want one per epoch", buf);
    CHECK(count(&r.s, 'E') == 3, "async device: %d evaluations, want 3", count(&r.s, 'E'));
    /* no collect between a train range and the evaluation that follows it */
    int order_ok = 1;
    for (int i = 0; i + 1 < r.s.n; i++)
        if (r.s.calls[i].op == 'T')
            order_ok &= r.s.calls[i + 1].op == 'E';
    CHECK(order_ok, "async device: an evaluation follows each range directly (no wait in between)");
    /* StepLR(step_size 2, gamma 0.5): 0.1, 0.1, 0.05 */
    CHECK(r.s.lr[1] == 0.1f && r.s.lr[2] == 0.1f && r.s.lr[3] == 0.05f, "lr by epoch %g %g %g", r.s.lr[1],
          r.s.lr[2], r.s.lr[3]);
    int n;
    double *loss = read_col(r.steplog, 2, &n);
    int ok = n == 39;
    for (int e = 1; e <= 3 && ok; e++)
        for (int b = 0; b < 13; b++) {
            const double rows = b < 12 ? 8 : 4;
            ok &= loss[(e - 1) * 13 + b] == sum_of(e, b) / rows;
        }
    CHECK(ok, "step log: %d rows, each the step's sum / its rows", n);
    /* the lr column: the rate each step and epoch used (StepLR: 0.1, 0.1, 0.05) */
    double *slr = read_col(r.steplog, 3, &n);
    ok = n == 39;
    for (int i = 0; i < n && ok; i++)
        ok = (float)slr[i] == (i < 26 ? 0.1f : 0.05f);
    CHECK(ok, "step log lr column: %d rows, 0.1 in epochs 1-2, 0.05 in epoch 3", n);
    double *mlr = read_col(r.metrics, 6, &n);
    CHECK(n == 3 && (float)mlr[0] == 0.1f && (float)mlr[1] == 0.1f && (float)mlr[2] == 0.05f,
          "metrics lr column: %g %g %g", n > 0 ? mlr[0] : -1, n > 1 ? mlr[1] : -1, n > 2 ? mlr[2] : -1);
    double *tl = read_col(r.metrics, 1, &n);
    double want = 0;
    for (int b = 0; b < 13; b++)
        want += sum_of(1, b);
    CHECK(n == 3 && fabs(tl[0] - want / 100) <= 1e-12 * want, "epoch 1 train_loss %.17g, want %.17g", tl[0],
          want / 100);
    double *acc = read_col(r.metrics, 3, &n);
    CHECK(n == 3 && acc[0] == 0.3, "test_acc = correct / test samples: %g", acc[0]);

    /* 2. --max-steps 20: epoch 1 whole, epoch 2's first 7 batches, then stop */
    rt_opts o2 = o;
    o2.max_steps = 20;
    run(&r, &o2, &fresh, 1, 0, dir);
    calls_of(&r.s, 'T', buf, sizeof buf);
    CHECK(r.rc == 0 && !strcmp(buf, "0:13 0:7"), "--max-steps 20: ranges %s, want 0:13 0:7", buf);
    read_col(r.metrics, 1, &n);
    CHECK(n == 2 && count(&r.s, 'E') == 2, "--max-steps 20: %d epoch lines, %d evaluations (want 2, 2)", n,
          count(&r.s, 'E'));

    /* 3. --checkpoint-every 5 (global steps 5, 10, 15, ...) */
    rt_opts o3 = o;
    o3.epochs = 2;
    char ck[96];
    snprintf(ck, sizeof ck, "%s/ck.st", dir);
    o3.ckpt_path = ck;
    o3.ckpt_every = 5;
    run(&r, &o3, &fresh, 1, 0, dir);
    calls_of(&r.s, 'T', buf, sizeof buf);
    CHECK(r.rc == 0 && !strcmp(buf, "0:5 5:10 10:13 0:2 2:7 7:12 12:13"),
          "--checkpoint-every 5: ranges %s, want 0:5 5:10 10:13 0:2 2:7 7:12 12:13", buf);
    calls_of(&r.s, 'C', buf, sizeof buf);
    CHECK(!strcmp(buf, "0:5 0:10 0:13 0:2 0:7 0:12 0:13"),
          "--checkpoint-every 5: collects %s (the epoch so far at each checkpoint, then its end)", buf);
    CHECK(access(ck, F_OK) == 0 && count(&r.s, 'P') == 8,
          "--checkpoint-every 5: a checkpoint file; %d pulls (want 8: 5 inside the epochs, 2 at their ends, "
          "1 for --save)", count(&r.s, 'P'));

    /* 4. resumed inside epoch 2 at batch 4, step 17, with its sums so far */
    rt_resume rs;
    memset(&rs, 0, sizeof rs);
    rs.active = 1;
    rs.epoch = 2;
    rs.step = 17;
    rs.skip = 4;
    rs.loss_sum = 123.5;
    rs.rows = 32;
    rs.opt_steps = 17;
    rs.scale = 1;
    rt_opts o4 = o;
    o4.epochs = 2;
    run(&r, &o4, &rs, 1, 0, dir);
    calls_of(&r.s, 'T', buf, sizeof buf);
    CHECK(r.rc == 0 && !strcmp(buf, "4:13"), "resumed at batch 4 of epoch 2: ranges %s, want 4:13", buf);
    tl = read_col(r.metrics, 1, &n);
    want = 123.5;
    for (int b = 4; b < 13; b++)
        want += sum_of(2, b);
    CHECK(n == 1 && fabs(tl[0] - want / 100) <= 1e-12 * want,
          "resumed epoch's train_loss %.17g, want (loss so far + new) / 100 = %.17g", tl[0], want / 100);
    read_col(r.steplog, 0, &n);
    double *steps = read_col(r.steplog, 0, &n);
    CHECK(n == 9 && steps[0] == 18 && steps[8] == 26, "resumed step log: %d rows from step %g to %g (want 9, 18..26)",
          n, n ? steps[0] : 0, n ? steps[n - 1] : 0);

    /* 5. a device that runs steps as asked (the CPU) gets the same ranges
     * when nobody watches a progress bar, one step at a time when one is
     * drawn; the asynchronous device keeps its ranges either way */
    run(&r, &o3, &fresh, 0, 0, dir);
    calls_of(&r.s, 'T', buf, sizeof buf);
    CHECK(r.rc == 0 && !strcmp(buf, "0:5 5:10 10:13 0:2 2:7 7:12 12:13"), "sync device, no bar: ranges %s", buf);
    run(&r, &o3, &fresh, 0, 1, dir);
    CHECK(r.rc == 0 && count(&r.s, 'T') == 26, "sync device, progress bar: %d ranges, want 26 single steps",
          count(&r.s, 'T'));
    run(&r, &o3, &fresh, 1, 1, dir);
    calls_of(&r.s, 'T', buf, sizeof buf);
    CHECK(r.rc == 0 && !strcmp(buf, "0:5 5:10 10:13 0:2 2:7 7:12 12:13"), "async device, progress bar: ranges %s",
          buf);

    /* 6. the bucket schedule both devices follow (rt_buckets.c): the
     * tables, and a table that does not fit the plan refused with why */
    {
        rt_model bm = model();
        static const rt_kernel ks[6] = {{.fn = NULL, .name = "f", .phase = RT_PH_FORWARD}, {.fn = NULL, .name = "b1", .phase = RT_PH_BACKWARD},
                                        {.fn = NULL, .name = "b2", .phase = RT_PH_BACKWARD}, {.fn = NULL, .name = "b3", .phase = RT_PH_BACKWARD},
                                        {.fn = NULL, .name = "o1", .phase = RT_PH_OPTIMIZER}, {.fn = NULL, .name = "o2", .phase = RT_PH_OPTIMIZER}};
        bm.train.k = ks;
        bm.train.nk = 6;
        bm.param_floats = 10;
        /* bucket 0 complete after kernel 1, updated by 4; bucket 1 after 3, by 5 */
        static const rt_bucket good[2] = {{6, 4, 1, 4, 1}, {0, 6, 3, 5, 1}};
        bm.buckets = good;
        bm.nbuckets = 2;
        rt_bsched bs;
        int ok2 = rt_bsched_init(&bs, &bm) == 0;
        const int lu[6] = {0, 1, 1, 2, 2, 2}, wu[6] = {0, 0, 0, 0, 1, 2};
        for (int k = 0; ok2 && k < 6; k++)
            ok2 = bs.launch_upto[k] == lu[k] && bs.wait_upto[k] == wu[k];
        CHECK(ok2, "bucket schedule: launch_upto / wait_upto as the table says");
        rt_bsched_free(&bs);
        /* bucket 1 updated (kernel 2) before it is complete (kernel 3) */
        static const rt_bucket bad[2] = {{6, 4, 1, 4, 1}, {0, 6, 3, 2, 1}};
        bm.buckets = bad;
        fflush(stdout);
        CHECK(rt_bsched_init(&bs, &bm) != 0, "a bucket updated before it is complete is refused (stderr says which)");
    }

    /* 7. the graceful stop */
    {
        rt_opts o7 = o;
        char ck7[96];
        snprintf(ck7, sizeof ck7, "%s/stop.ckpt", dir);
        o7.ckpt_path = ck7;
        o7.batch = 2;               /* 50 batches: the first agreement at 16 */
        for (int async = 0; async < 2; async++) {
            stop_epoch = 1;
            remove(ck7);
            run(&r, &o7, &fresh, async, 0, dir);
            stop_epoch = 0;
            rt_stop_request(0);
            calls_of(&r.s, 'T', buf, sizeof buf);
            const char *want = "0:16";
            int n7;
            read_col(r.steplog, 0, &n7);
            CHECK(r.rc == SIGTERM && !strcmp(buf, want) && count(&r.s, 'E') == 0 && n7 == 16 &&
                      access(ck7, F_OK) == 0 && r.s.calls[r.s.n - 1].op == 'P',
                  "%s device, stop in epoch 1: rc %d, ranges %s (want %s), %d evaluations (want 0), %d step rows "
                  "(want 16), checkpoint %s",
                  async ? "async" : "sync", r.rc, buf, want, count(&r.s, 'E'), n7,
                  access(ck7, F_OK) == 0 ? "written" : "missing");
        }
        /* no stop, 50 batches on the asynchronous device: it is waited for
         * (collect) only where a span ends, first after batch 16 */
        run(&r, &o7, &fresh, 1, 0, dir);
        calls_of(&r.s, 'C', buf, sizeof buf);
        int at_ends = r.rc == 0 && !strncmp(buf, "0:16 ", 5);
        for (int i = 1; i < r.s.n; i++)
            if (r.s.calls[i].op == 'C' && r.s.calls[i - 1].op == 'T')
                at_ends &= r.s.calls[i].b == r.s.calls[i - 1].b;
        CHECK(at_ends, "async device, 50 batches: collects %s (want 0:16 first, each at a range's end)", buf);
        /* 13 batches: the epoch ends before the first agreement; evaluated, then stopped */
        stop_epoch = 1;
        run(&r, &o, &fresh, 0, 0, dir);
        stop_epoch = 0;
        rt_stop_request(0);
        int n7;
        read_col(r.metrics, 0, &n7);
        CHECK(r.rc == SIGTERM && count(&r.s, 'E') == 1 && count(&r.s, 'B') == 1 && n7 == 1,
              "stop in a 13-step epoch: rc %d, %d evaluations, %d epochs begun, %d metrics rows (want 1 each)", r.rc,
              count(&r.s, 'E'), count(&r.s, 'B'), n7);
    }

    /* 8. accumulate 4: 13 batches an epoch are 4 optimizer steps (groups of
     * 4, 4, 4, 1); ranges end at groups, --max-steps and
     * --checkpoint-every count optimizer steps, the step log has a row per
     * optimizer step: the group's sum over its rows */
    accumulate = 4;
    {
        rt_opts o8 = o;
        o8.max_steps = 6;
        run(&r, &o8, &fresh, 0, 1, dir);
        calls_of(&r.s, 'T', buf, sizeof buf);
        CHECK(r.rc == 0 && !strcmp(buf, "0:4 4:8 8:12 12:13 0:4 4:8"),
              "accumulate 4, --max-steps 6, one group at a time: ranges %s, want 0:4 4:8 8:12 12:13 0:4 4:8", buf);
        int n8;
        double *l8 = read_col(r.steplog, 2, &n8);
        int ok8 = n8 == 6;
        for (int g = 0; g < 6 && ok8; g++) {
            const int e = g < 4 ? 1 : 2, b0 = 4 * (g % 4), b1 = b0 + 4 < 13 ? b0 + 4 : 13;
            double sum = 0, rows = 0;
            for (int b = b0; b < b1; b++)
                sum += sum_of(e, b), rows += b < 12 ? 8 : 4;
            ok8 = fabs(l8[g] - sum / rows) <= 1e-8 * (sum / rows);
        }
        double *s8 = read_col(r.steplog, 0, &n8);
        CHECK(ok8 && n8 == 6 && s8[0] == 1 && s8[5] == 6,
              "accumulate 4: the step log has %d rows (want 6), each its group's loss sum / its rows", n8);
        o8.max_steps = 0;
        o8.epochs = 2;
        o8.ckpt_path = ck;
        o8.ckpt_every = 3;
        run(&r, &o8, &fresh, 1, 0, dir);
        calls_of(&r.s, 'T', buf, sizeof buf);
        CHECK(r.rc == 0 && !strcmp(buf, "0:12 12:13 0:8 8:13"),
              "accumulate 4, --checkpoint-every 3 (optimizer steps 3 and 6): ranges %s, want 0:12 12:13 0:8 8:13",
              buf);
        /* a checkpoint inside a group (another accumulate wrote it) is refused */
        rs.skip = 6;
        rs.step = 14;
        o8.ckpt_every = 0;
        o8.ckpt_path = NULL;
        run(&r, &o8, &rs, 1, 0, dir);
        CHECK(r.rc == -1 && count(&r.s, 'T') == 0, "accumulate 4: resuming at batch 6 (inside a group) is refused");
    }
    accumulate = 0;

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("note: could not remove %s\n", dir);
    printf("loop: %d checks, %d failed\n", passes + fails, fails);
    return fails ? 1 : 0;
}
