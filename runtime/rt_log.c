/* rt_log.c: what a run reports while it trains.
 *
 *   stdout: one line per epoch (stable text, safe to grep), rank 0 only
 *   stderr: a progress bar, only when stderr is a terminal, so logs and
 *           pipes never fill with carriage-return noise
 *   --metrics FILE.csv : one row per epoch (fp16: and loss_scale,skipped),
 *                        then lr: the learning rate the epoch used
 *   --step-log FILE.csv: one row per step (fp16: and its scale,found_inf),
 *                        then lr
 * CSV floats use %.9g, enough digits to round-trip a float exactly.
 * Durability: rows are built in memory and reach the file only whole, by
 * one write() of whole rows (never a stdio buffer, which may split a row
 * between two writes), so a run killed at any moment, even by SIGKILL,
 * leaves files whose every line is a whole row. The metrics row is written
 * at every epoch's end; step rows whenever the loop flushes (every stop
 * agreement, about 4 times a second, and every epoch's end). */
#include "rt_internal.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROWS_MAX 65536          /* bytes of step rows held before a write */

#define BAR_WIDTH 30
#define BAR_PERIOD 0.1          /* seconds between redraws */

static FILE *open_csv(const char *path, const char *header)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        rt_err("%s: cannot open for writing: %s", path, strerror(errno));
        return NULL;
    }
    fprintf(f, "%s\n", header);
    fflush(f);
    return f;
}

/* the metrics' CSV columns and epoch-line names per task (RT_METRICS_*) */
static const char *const metric_cols[][2] = {{"test_acc", NULL}, {"test_mse", "test_mae"},
                                               {"test_label_acc", "test_macro_f1"}, {"test_ppl", "test_acc"},
                                               {"test_acc", "test_mse"}};
static const char *const plot_names[] = {"test accuracy", "test MAE", "test macro-F1", "test accuracy",
                                         "test accuracy"};

int rt_log_open(rt_log *l, const rt_opts *o, int scaler, int task, int64_t per_sample)
{
    memset(l, 0, sizeof *l);
    l->task = task;
    l->per_sample = per_sample > 0 ? per_sample : 1;
    /* Only rank 0 reports: the others log nothing, draw no bar, print no
     * epoch line (the numbers are global, the same on every rank). */
    if (rt_world.rank != 0)
        return 0;
    l->tty = isatty(STDERR_FILENO);
    l->scaler = scaler;
    l->metrics_path = o->metrics_path;
    l->steplog_path = o->steplog_path;
    const char *const *mc = metric_cols[task];
    char head[256];
    if (task == RT_METRICS_TOKENS)  /* a language model's: perplexities beside the losses, tokens a second */
        snprintf(head, sizeof head, "epoch,train_loss,train_ppl,test_loss,test_ppl,test_acc,seconds,tokens_per_s,%slr",
                 scaler ? "loss_scale,skipped," : "");
    else
        snprintf(head, sizeof head, "epoch,train_loss,test_loss,%s%s%s,seconds,images_per_s,%slr", mc[0],
                 mc[1] ? "," : "", mc[1] ? mc[1] : "", scaler ? "loss_scale,skipped," : "");
    const int tok = task == RT_METRICS_TOKENS;
    /* Opened before training so a bad path fails in a second, not after
     * an hour of training. */
    if (o->metrics_path && !(l->metrics = open_csv(o->metrics_path, head)))
        return -1;
    if (o->plot_path && !(l->plot = rt_live_plot_open(o->plot_path, plot_names[task])))
        return -1;
    l->title = rt_prog;         /* the model name once the program sets it */
    if (o->steplog_path &&
        !((l->rows = rt_malloc(ROWS_MAX)) &&
          (l->steplog = open_csv(o->steplog_path, scaler ? (tok ? "step,epoch,loss,ppl,scale,found_inf,lr"
                                                                : "step,epoch,loss,scale,found_inf,lr")
                                                         : tok ? "step,epoch,loss,ppl,lr" : "step,epoch,loss,lr")))) {
        if (!l->rows)
            rt_err("out of memory");
        free(l->rows);
        l->rows = NULL;
        if (l->metrics)
            fclose(l->metrics);
        l->metrics = NULL;
        return -1;
    }
    return 0;
}

/* printf writes a NaN with its sign bit as "-nan"; one spelling is
 * easier on whoever parses the logs. */
static double unsign_nan(double x) { return isnan(x) ? NAN : x; }

/* whole rows, one write() (a regular file takes it all or fails); a
 * failure is kept for rt_log_close to report */
static void write_rows(FILE *f, int *err, const char *buf, size_t len)
{
    while (len > 0 && !*err) {
        ssize_t k = write(fileno(f), buf, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            *err = k < 0 ? errno : EIO;
            return;
        }
        buf += k;
        len -= (size_t)k;
    }
}

static void flush_steps(rt_log *l)
{
    if (l->steplog && l->rows_len)
        write_rows(l->steplog, &l->steplog_err, l->rows, l->rows_len);
    l->rows_len = 0;
}

void rt_log_step(rt_log *l, int64_t step, int epoch, double loss, double scale, int found_inf, double lr)
{
    rt_live_plot_step(l->plot, step, epoch, loss);
    if (!l->steplog)
        return;
    char row[192], ppl[40] = "";
    if (l->task == RT_METRICS_TOKENS)   /* the step's perplexity, exp of its per-token loss */
        snprintf(ppl, sizeof ppl, ",%.9g", unsign_nan(exp(loss)));
    int n = found_inf < 0
                ? snprintf(row, sizeof row, "%lld,%d,%.9g%s,%.9g\n", (long long)step, epoch, unsign_nan(loss), ppl, lr)
                : snprintf(row, sizeof row, "%lld,%d,%.9g%s,%.9g,%d,%.9g\n", (long long)step, epoch,
                           unsign_nan(loss), ppl, scale, found_inf, lr);
    if (l->rows_len + (size_t)n > ROWS_MAX)
        flush_steps(l);
    memcpy(l->rows + l->rows_len, row, (size_t)n);
    l->rows_len += (size_t)n;
}

void rt_log_scaler(rt_log *l, double scale, int64_t skipped, int64_t skipped_all)
{
    l->scale = scale;
    l->skipped = skipped;
    l->skipped_all = skipped_all;
}

static void bar_clear(rt_log *l)
{
    if (l->bar_drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        l->bar_drawn = 0;
    }
}

void rt_log_progress(rt_log *l, int epoch, int epochs, int64_t done, int64_t total,
                     double loss, int force)
{
    if (!l->tty || total <= 0)
        return;
    double now = rt_now();
    if (!force && now - l->last_bar < BAR_PERIOD)
        return;
    l->last_bar = now;
    int fill = (int)(BAR_WIDTH * (double)done / (double)total);
    char bar[BAR_WIDTH + 1];
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[BAR_WIDTH] = 0;
    fprintf(stderr, "\r\033[Kepoch %d/%d [%s] %lld/%lld  loss %.4f", epoch, epochs, bar,
            (long long)done, (long long)total, loss);
    fflush(stderr);
    l->bar_drawn = 1;
}

void rt_log_metrics(int task, const double *sums, int has_metric, int64_t ntest, int nclass, double out[2])
{
    const double n = (double)ntest, elems = (double)ntest * nclass;
    out[0] = out[1] = NAN;
    if (!has_metric)
        return;
    if (task == RT_METRICS_REGRESSION) {
        out[0] = sums[1] / elems;
        out[1] = sums[2] / elems;
    } else if (task == RT_METRICS_MULTITASK) {     /* a column each: over the samples */
        out[0] = sums[1] / n;
        out[1] = sums[2] / n;
    } else if (task == RT_METRICS_TOKENS) {
        out[0] = exp(sums[0] / n);      /* n: the test tokens counted */
        out[1] = sums[1] / n;
    } else if (task == RT_METRICS_MULTILABEL) {
        const double *tp = sums + 1, *fp = tp + nclass, *fn = fp + nclass;
        double wrong = 0, f1 = 0;
        for (int j = 0; j < nclass; j++) {
            wrong += fp[j] + fn[j];
            f1 += 2 * tp[j] + fp[j] + fn[j] > 0 ? 2 * tp[j] / (2 * tp[j] + fp[j] + fn[j]) : 0.0;
        }
        out[0] = 1.0 - wrong / elems;
        out[1] = f1 / nclass;
    } else {
        out[0] = sums[1] / n;
    }
}

void rt_log_epoch(rt_log *l, int epoch, int epochs, double train_loss, double test_loss,
                  const double metric[2], double seconds, int64_t images, double lr)
{
    train_loss = unsign_nan(train_loss);
    test_loss = unsign_nan(test_loss);
    const double m0 = unsign_nan(metric[0]), m1 = unsign_nan(metric[1]);
    double ips = seconds > 0 ? (double)images * (double)l->per_sample / seconds : 0.0;
    bar_clear(l);
    if (rt_world.rank != 0)
        return;
    const char *const *mc = metric_cols[l->task];
    const int tok = l->task == RT_METRICS_TOKENS;
    if (tok)
        printf("epoch %d/%d  train_loss %.4f  train_ppl %.3f  test_loss %.4f  test_ppl %.3f  test_acc %.4f  %.2f s  "
               "%.0f tok/s\n", epoch, epochs, train_loss, unsign_nan(exp(train_loss)), test_loss, m0, m1, seconds, ips);
    else if (l->task == RT_METRICS_ACCURACY)
        printf("epoch %d/%d  train_loss %.4f  test_loss %.4f  test_acc %.4f  %.2f s  %.0f img/s\n",
               epoch, epochs, train_loss, test_loss, m0, seconds, ips);
    else
        printf("epoch %d/%d  train_loss %.4f  test_loss %.4f  %s %.4f  %s %.4f  %.2f s  %.0f samples/s\n",
               epoch, epochs, train_loss, test_loss, mc[0], m0, mc[1], m1, seconds, ips);
    if (l->scaler)
        printf("loss scale %.9g  skipped %lld steps (%lld in all)\n", l->scale, (long long)l->skipped,
               (long long)l->skipped_all);
    fflush(stdout);
    flush_steps(l);
    /* the picture's right axis: accuracy, MAE, macro-F1 */
    rt_live_plot_epoch(l->plot, epoch, train_loss, test_loss,
                       l->task == RT_METRICS_ACCURACY || l->task == RT_METRICS_MULTITASK ? m0 : m1, l->title);
    if (l->metrics) {
        char row[320];
        int n = tok ? snprintf(row, sizeof row, "%d,%.9g,%.9g,%.9g,%.9g", epoch, train_loss,
                               unsign_nan(exp(train_loss)), test_loss, m0)
                    : snprintf(row, sizeof row, "%d,%.9g,%.9g,%.9g", epoch, train_loss, test_loss, m0);
        if (mc[1])
            n += snprintf(row + n, sizeof row - (size_t)n, ",%.9g", m1);
        n += snprintf(row + n, sizeof row - (size_t)n, ",%.9g,%.9g", seconds, ips);
        if (l->scaler)
            n += snprintf(row + n, sizeof row - (size_t)n, ",%.9g,%lld", l->scale, (long long)l->skipped);
        n += snprintf(row + n, sizeof row - (size_t)n, ",%.9g\n", lr);
        write_rows(l->metrics, &l->metrics_err, row, (size_t)n);
    }
}

void rt_log_evaluation(int task, const char *path, int64_t ntest, double test_loss, const double metric[2],
                       double seconds)
{
    if (rt_world.rank != 0)
        return;
    const char *const *mc = metric_cols[task];
    printf("evaluate %s: %lld test samples  test_loss %.6f  %s %.6f", path, (long long)ntest,
           unsign_nan(test_loss), mc[0], unsign_nan(metric[0]));
    if (mc[1])
        printf("  %s %.6f", mc[1], unsign_nan(metric[1]));
    printf("  %.2f s\n", seconds);
    fflush(stdout);
}

void rt_log_flush(rt_log *l) { flush_steps(l); }

void rt_log_epoch_steps(rt_log *l, int64_t n) { rt_live_plot_epoch_steps(l->plot, n); }

static int close_csv(FILE *f, const char *path, int err)
{
    if (!f)
        return 0;
    int bad = ferror(f) || err;
    int e = err ? err : errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        rt_err("%s: write error: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

int rt_log_close(rt_log *l)
{
    bar_clear(l);
    flush_steps(l);
    int rc = close_csv(l->metrics, l->metrics_path, l->metrics_err);
    if (close_csv(l->steplog, l->steplog_path, l->steplog_err) != 0)
        rc = -1;
    l->metrics = l->steplog = NULL;
    free(l->rows);
    l->rows = NULL;
    rt_live_plot_close(l->plot);
    l->plot = NULL;
    return rc;
}
