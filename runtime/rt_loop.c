/* rt_loop.c: the epoch loop, once, for every device.
 *
 * Each rank trains on its DistributedSampler shard with --batch rows per
 * step; every rank takes the same number of steps (equal shards), and the
 * device averages the gradients over the ranks before each update. The
 * loop decides everything else and tells the device (rt_device) only what
 * to run:
 *
 *   begin_epoch   the epoch's sample order, learning rate, first batch
 *   train(b0,b1)  a range of batches: the CPU device runs them; the CUDA
 *                 device queues one graph launch per step and returns (no
 *                 host sync inside the range)
 *   evaluate      the eval plan over this rank's block of the test set
 *   collect       waits, then each step's loss sum, the loss scaler's log
 *                 and state, the evaluation's sums, the training time
 *   pull          parameters and optimizer state into the host slabs
 *
 * A range ends where the loop must look: the epoch's end, --max-steps, a
 * --checkpoint-every step, a stop agreement (below), and on a device that
 * runs steps as they are asked for (the CPU), every step while a progress
 * bar is drawn.
 *
 * The graceful stop (rt_stop.c): at the end of every "agreement span" the
 * ranks sum which stop signals they have seen and how long the span took;
 * on a signal, every rank stops at that same step, the checkpoint is
 * written there and the loop returns the signal. The spans are sized from
 * the measured (all-reduced, so identical) time per step to last about
 * STOP_SPAN seconds: the first is FIRST_SPAN steps, each next at most twice
 * the last. The CUDA device queues a span's steps without waiting inside
 * it and is waited for at its end (a gap of one graph launch per span).
 * Every epoch's end (after its evaluation and checkpoint) agrees too.
 *
 * The per-step loss sums stay on the ranks during the epoch and are
 * summed over them once at its end (no step waits for a loss); the epoch
 * loss is the exact per-sample mean: those sums added in step order to the
 * epoch's sums so far, the same additions whether the epoch ran in one
 * piece or was cut by a checkpoint and resumed, so a resumed run's numbers
 * are the uninterrupted one's to the last bit. Resuming (rs->active), it
 * starts at epoch rs->epoch, batch rs->skip. */
#include "rt_internal.h"
#include <math.h>
#include <signal.h>
#include <string.h>

#define STOP_SPAN 0.25          /* seconds between stop agreements, aimed at */
#define FIRST_SPAN 16           /* steps before the first agreement */
#define MAX_SPAN (1 << 16)

void rt_start_init(rt_start *s, const rt_model *m, const rt_resume *rs)
{
    memset(s, 0, sizeof *s);
    rt_amp_init(&s->amp, m, rs);
    s->step = rs->active ? rs->step : 0;
    /* optimizer steps taken (Adam's t; torch's state 'step'): fewer than
     * the training steps by those the fp16 loss scaler skipped */
    s->opt_steps = rs->active ? (s->amp.on ? rs->opt_steps : rs->step) : 0;
}

/* mean divides the global sum by the global rows; for 'none' the kernels
 * backpropagate ones per sample (loss.backward(torch.ones_like(loss))),
 * the gradient of 'sum', so the sum is reported too */
double rt_step_loss(const rt_model *m, double sum, double rows)
{
    return m->reduction == RT_RED_MEAN ? sum / rows : sum;
}

rt_shape rt_loop_shape(const rt_opts *o, int64_t ntrain, int64_t ntest, int rank, int world)
{
    rt_shape s;
    s.per_rank = o->drop_last ? ntrain / world : (ntrain + world - 1) / world;
    s.nbatch = o->drop_last ? s.per_rank / o->batch : (s.per_rank + o->batch - 1) / o->batch;
    s.test_lo = ntest * rank / world;
    s.test_hi = ntest * (rank + 1) / world;
    return s;
}

int rt_batch_rows(const rt_shape *s, int64_t batch, int64_t b)
{
    return (int)(s->per_rank - b * batch < batch ? s->per_rank - b * batch : batch);
}

/* rows of batch b of a shard of per_rank samples */
static int batch_rows(int64_t per_rank, int64_t batch, int64_t b)
{
    const rt_shape s = {per_rank, 0, 0, 0};
    return rt_batch_rows(&s, batch, b);
}

typedef struct loop {
    const rt_model *m;
    const rt_opts *o;
    rt_device *dev;
    rt_coll *coll;
    int64_t per_rank, nbatch, batch, W;
    double *loss, *scale, *found;       /* [nbatch] from collect */
    double *sum;                        /* [nbatch] the step sums over the ranks */
    /* a loss over counted targets (rt_plan.has_count: positions, an
     * ignore_index): its mean divides by them, not by the rows */
    int counts;
    double *count, *csum;               /* [nbatch] from collect; summed over the ranks */
    int warned_nan;
    /* accumulation: an optimizer step is a group of acc batches (the
     * epoch's last group may be shorter); ranges, --max-steps,
     * --checkpoint-every, the step log and checkpoints count groups */
    int64_t acc, ngroup;
    float *lr;                          /* [nbatch] the lr of each batch's optimizer step */
} loop;

/* the first batch of group g of the epoch (nbatch for g = ngroup) */
static int64_t group_batch(const loop *L, int64_t g) { return g * L->acc < L->nbatch ? g * L->acc : L->nbatch; }

/* The first n step sums of collect (and their counts), summed over the
 * ranks into L->sum + at (L->csum + at). One all-reduce each. */
static void sum_steps(loop *L, int64_t at, int64_t n, const char *what)
{
    memcpy(L->sum + at, L->loss, (size_t)n * sizeof(double));
    L->coll->sum_f64(L->coll, L->sum + at, n, what);
    if (L->counts) {
        memcpy(L->csum + at, L->count, (size_t)n * sizeof(double));
        L->coll->sum_f64(L->coll, L->csum + at, n, what);
    }
}

/* what the loss of batch bb of the epoch is the mean over, all ranks
 * together (its sum over the ranks at L->csum[s]): the rows (batch sizes
 * times W, exact), or the targets counted */
static double step_rows(const loop *L, int64_t bb, int64_t s)
{
    return L->counts ? L->csum[s] : (double)batch_rows(L->per_rank, L->batch, bb) * (double)L->W;
}

/* The first n step sums of out, summed over the ranks (into L->sum),
 * then added in step order to *loss and *rows (step_rows). */
static void add_steps(loop *L, int64_t skip, int64_t n, double *loss, double *rows)
{
    sum_steps(L, 0, n, "the epoch's loss all-reduce");
    for (int64_t s = 0; s < n; s++) {
        *loss += L->sum[s];
        *rows += step_rows(L, skip + s, s);
    }
}

/* the samples of batches [0, b) over all ranks: the epoch's so far */
static int64_t samples_before(const loop *L, int64_t b)
{
    int64_t n = 0;
    for (int64_t bb = 0; bb < b; bb++)
        n += batch_rows(L->per_rank, L->batch, bb);
    return n * L->W;
}

/* What a checkpoint saves: epoch `epoch` to continue at batch `skip`,
 * after `step` steps, with its sums so far; the scaler's state from the
 * device (fp16). The one place a run's position is put together. */
static rt_resume position(int epoch, int64_t step, int64_t skip, double loss, double rows, double secs,
                          const rt_dev_out *d, const rt_amp *amp)
{
    rt_resume st = {.active = 1, .epoch = epoch, .step = step, .skip = skip, .loss_sum = loss, .rows = rows,
                    .secs = secs, .opt_steps = step, .scale = 1.0f};
    if (amp->on) {
        st.scale = d->amp_scale;
        st.tracker = d->amp_tracker;
        st.skipped = d->amp_skipped;
        st.opt_steps = step - d->amp_skipped;
    }
    return st;
}

/* Every rank calls this at the same step: whether any rank got a stop
 * signal (which one, alike everywhere: SIGINT before SIGTERM before
 * SIGUSR1), and the next span's length from this one's mean time per step. */
static int agree_stop(loop *L, double secs, int64_t steps, int64_t *span)
{
    const int sig = rt_stop_pending();
    double v[4] = {sig == SIGINT, sig == SIGTERM, sig == SIGUSR1, secs};
    L->coll->sum_f64(L->coll, v, 4, "the stop agreement");
    if (!span)
        return v[0] > 0 ? SIGINT : v[1] > 0 ? SIGTERM : v[2] > 0 ? SIGUSR1 : 0;
    const double per_step = v[3] / (double)L->W / (double)(steps > 0 ? steps : 1);
    int64_t next = per_step > 0 ? (int64_t)(STOP_SPAN / per_step) : 2 * *span;
    if (next > 2 * *span)
        next = 2 * *span;
    *span = next < 1 ? 1 : next > MAX_SPAN ? MAX_SPAN : next;
    return v[0] > 0 ? SIGINT : v[1] > 0 ? SIGTERM : v[2] > 0 ? SIGUSR1 : 0;
}

/* rank 0: what stopped the run, where, and how to go on */
static void say_stopped(const loop *L, int sig, int64_t step, int epoch, int64_t b)
{
    if (L->coll->rank != 0)
        return;
    char where[96];
    if (b < L->nbatch)
        snprintf(where, sizeof where, "epoch %d, batch %lld of %lld", epoch, (long long)b, (long long)L->nbatch);
    else
        snprintf(where, sizeof where, "the end of epoch %d", epoch);
    fflush(stdout);
    if (L->o->ckpt_path)
        fprintf(stderr, "%s: stopped by %s after step %lld (%s); checkpoint %s written; to continue, run "
                "again with --resume %s\n", rt_prog, rt_stop_name(sig), (long long)step, where, L->o->ckpt_path,
                L->o->ckpt_path);
    else
        fprintf(stderr, "%s: stopped by %s after step %lld (%s); no checkpoint written (run with "
                "--checkpoint FILE to be able to continue with --resume FILE)\n", rt_prog, rt_stop_name(sig),
                (long long)step, where);
    fflush(stderr);
}

/* The step log's rows of batches [from, b) of the epoch (whole groups),
 * whose step sums over the ranks are L->sum[from - skip ...]; first_step:
 * the optimizer steps taken before batch skip. One row per optimizer
 * step: its loss over all the samples of its micro-batches (the mean of
 * them for 'mean', as one batch of that many rows would show). */
static void log_steps(loop *L, rt_log *log, const rt_amp *amp, int epoch, int64_t skip, int64_t from, int64_t b,
                      int64_t first_step)
{
    for (int64_t g0 = from; g0 < b; g0 += L->acc) {
        const int64_t g1 = g0 + L->acc < b ? g0 + L->acc : b;
        const int64_t step = first_step + (g0 - skip) / L->acc + 1;
        double sl = 0, rs_ = 0;
        for (int64_t bb = g0; bb < g1; bb++) {
            sl += L->sum[bb - skip];
            rs_ += step_rows(L, bb, bb - skip);
        }
        if (!isfinite(sl) && !L->warned_nan) {
            rt_warn("loss is %s at step %lld; training continues", isnan(sl) ? "NaN" : "inf", (long long)step);
            L->warned_nan = 1;
        }
        const int64_t last = g1 - 1 - skip;     /* the scaler logs the optimizer step, its last batch */
        rt_log_step(log, step, epoch, rt_step_loss(L->m, sl, rs_), amp->on ? L->scale[last] : NAN,
                    amp->on ? (int)L->found[last] : -1, L->lr[g0]);
    }
}

static int save(loop *L, rt_ws *w, const rt_resume *st)
{
    return L->dev->pull(L->dev, w->param, w->opt) != 0 ||
           rt_ckpt_save(L->m, L->o, L->o->ckpt_path, w->param, w->opt, st) != 0 ? -1 : 0;
}

/* The evaluation's sums (every test sample once over the ranks) summed
 * over the ranks: the mean test loss, and the task's metrics in metric.
 * Over counted targets both are means over them. */
static double eval_result(const rt_model *m, rt_coll *coll, const rt_dev_out *out, int64_t ntest, double metric[2])
{
    const int nm = rt_plan_metrics(&m->eval);
    double ev[2 + RT_METRIC_MAX];
    memcpy(ev, out->eval, (size_t)(1 + nm) * sizeof(double));
    ev[1 + nm] = out->eval_count;
    coll->sum_f64(coll, ev, 2 + nm, "the evaluation's all-reduce");
    const double den = m->eval.has_count ? ev[1 + nm] : (double)ntest;
    rt_log_metrics(m->metrics, ev, nm > 0, (int64_t)den, m->nclass, metric);
    return ev[0] / den;
}

int rt_loop_run(const rt_model *m, const rt_opts *o, const rt_resume *rs, rt_device *dev, rt_coll *coll,
                int64_t ntrain, int64_t ntest, rt_ws *w, rt_log *log, rt_trace *trace)
{
    rt_sampler smp;
    if (rt_sampler_init(&smp, ntrain, coll->rank, coll->size, o->shuffle, o->drop_last, o->seed) != 0)
        return -1;
    const rt_shape shape = rt_loop_shape(o, ntrain, ntest, coll->rank, coll->size);
    loop L = {.m = m, .o = o, .dev = dev, .coll = coll, .per_rank = shape.per_rank, .nbatch = shape.nbatch,
              .batch = o->batch, .W = coll->size, .acc = m->accumulate > 1 ? m->accumulate : 1,
              .counts = m->train.has_count};
    L.ngroup = (L.nbatch + L.acc - 1) / L.acc;
    if (shape.per_rank != smp.per_rank) {     /* one formula, two places: say so if they ever part */
        rt_err("the loop's shard (%lld samples) is not the sampler's (%lld)", (long long)shape.per_rank,
               (long long)smp.per_rank);
        rt_sampler_free(&smp);
        return -1;
    }
    const int64_t epoch_samples = o->drop_last ? L.nbatch * L.batch : L.per_rank;   /* this rank's */
    int rc = -1;
    double *buf = rt_alloc_n(6 * L.nbatch + 1, sizeof(double), "step losses");
    L.lr = rt_alloc_n(L.nbatch + 1, sizeof(float), "learning rates");
    if (!buf || !L.lr)
        goto out;
    /* a checkpoint inside an epoch lies within it, its rows those of the
     * batches done (exactly, unless the loss counts its own rows), at a
     * group's first batch */
    if (rs->active && rs->skip > L.nbatch) {
        rt_err("%s: the checkpoint is at batch %lld of epoch %d, which has %lld batches of %lld here: it is "
               "damaged, or was written for other data", o->resume_path, (long long)rs->skip, rs->epoch,
               (long long)L.nbatch, (long long)L.batch);
        goto out;
    }
    if (rs->active && rs->skip > 0) {
        double rows = 0;
        for (int64_t bb = 0; bb < rs->skip; bb++)
            rows += (double)batch_rows(L.per_rank, L.batch, bb) * (double)L.W;
        /* (a loss that counts its own rows, ignore_index or positions,
         * may count any number up to its targets, none too) */
        if (!L.counts && rs->rows != rows) {
            rt_err("%s: the checkpoint holds %.17g rows for the %lld batches of epoch %d it did, which hold %.17g "
                   "here: it is damaged, or was written for other data", o->resume_path, rs->rows,
                   (long long)rs->skip, rs->epoch, rows);
            goto out;
        }
    }
    if (rs->active && rs->skip < L.nbatch && rs->skip % L.acc != 0) {
        rt_err("the checkpoint stopped at batch %lld of epoch %d, inside a group of accumulate %lld: it was "
               "written by a program with another accumulate", (long long)rs->skip, rs->epoch, (long long)L.acc);
        goto out;
    }
    /* the schedule spans a full run: epochs x optimizer steps per epoch */
    const int64_t run_steps = (int64_t)o->epochs * L.ngroup;
    if (rt_lr_check(m, o->max_steps && o->max_steps < run_steps ? o->max_steps : run_steps, run_steps) != 0)
        goto out;
    L.loss = buf;
    L.scale = buf + L.nbatch;
    L.found = buf + 2 * L.nbatch;
    L.sum = buf + 3 * L.nbatch;
    L.count = buf + 4 * L.nbatch;
    L.csum = buf + 5 * L.nbatch;
    rt_start start;
    rt_start_init(&start, m, rs);
    const rt_amp *amp = &start.amp;         /* the settings; the device keeps the state */
    int64_t it = start.step;                /* optimizer steps taken */
    int64_t skipped_all = amp->skipped;
    /* one step at a time where each one can be looked at for free and
     * someone watches (the progress bar) */
    const int each_step = !dev->async && log->tty;
    rt_log_epoch_steps(log, L.nbatch);
    int64_t span = FIRST_SPAN;              /* steps between stop agreements */
    int stopped = 0;                        /* the signal all ranks agreed on */

    int first = rs->active ? rs->epoch : 1;
    if (first <= o->epochs)
        rt_sampler_set_epoch(&smp, (uint64_t)first);
    for (int epoch = first; epoch <= o->epochs; epoch++) {
        /* the part of this epoch a resumed run has done already */
        const int resumed = rs->active && epoch == rs->epoch;
        const int64_t skip = resumed ? (rs->skip < L.nbatch ? rs->skip : L.nbatch) : 0;
        const double loss0 = resumed ? rs->loss_sum : 0, rows0 = resumed ? rs->rows : 0;
        const double secs0 = resumed ? rs->secs : 0;
        const int64_t skipped0 = skipped_all, first_step = it;
        rt_dev_out out = {.loss = L.loss, .count = L.count, .scale = L.scale, .found = L.found};
        /* each batch's lr: its optimizer step's (the group's) */
        for (int64_t bb = 0; bb < L.nbatch; bb++)
            L.lr[bb] = (float)rt_lr(m, o->lr, epoch, (int64_t)(epoch - 1) * L.ngroup + bb / L.acc, run_steps);
        if (dev->begin_epoch(dev, epoch, smp.shard, L.lr, skip) != 0)
            goto out;
        int64_t logged = skip;              /* the step log has batches up to here */
        int64_t b = skip;
        int64_t gi = (skip + L.acc - 1) / L.acc;   /* the group at b (checkpoints are at group starts) */
        /* the next agreement: at the same step on every rank (each_step
         * is rank 0's alone, so it does not move it); in groups */
        int64_t agree_at = gi + span, span_b = gi;
        double span_t0 = rt_now();
        while (gi < L.ngroup && !(o->max_steps && it >= o->max_steps)) {
            int64_t end = agree_at < L.ngroup ? agree_at : L.ngroup;
            if (o->max_steps && end - gi > o->max_steps - it)
                end = gi + (o->max_steps - it);
            if (o->ckpt_every && end - gi > o->ckpt_every - it % o->ckpt_every)
                end = gi + (o->ckpt_every - it % o->ckpt_every);
            if (each_step)
                end = gi + 1;
            if (dev->train(dev, b, group_batch(&L, end), it) != 0)
                goto out;
            it += end - gi;
            gi = end;
            b = group_batch(&L, end);
            if (each_step) {
                /* the bar shows this rank's own loss: the global one is
                 * only known at the epoch's end */
                if (dev->collect(dev, b - 1, b, &out) != 0)
                    goto out;
                const double n = L.counts ? L.count[0] : batch_rows(L.per_rank, L.batch, b - 1);
                int64_t seen = b * L.batch < epoch_samples ? b * L.batch : epoch_samples;
                rt_log_progress(log, epoch, o->epochs, seen * L.W, epoch_samples * L.W,
                                rt_step_loss(m, L.loss[0], n), b == L.nbatch);
            }
            /* --checkpoint-every inside the epoch (its end writes its own) */
            if (o->ckpt_every && it % o->ckpt_every == 0 && b < L.nbatch) {
                if (dev->collect(dev, skip, b, &out) != 0)
                    goto out;
                double loss = loss0, rows = rows0;
                add_steps(&L, skip, b - skip, &loss, &rows);
                rt_resume st = position(epoch, it, b, loss, rows, secs0 + out.secs, &out, amp);
                if (save(&L, w, &st) != 0)
                    goto out;
            }
            if (gi == agree_at) {
                /* An asynchronous device (the GPU) is waited for here, at
                 * the span's end (never inside it): the span's time is then
                 * the device's, which sizes the next span, and a stop is
                 * not left behind a queue of many spans. The step log's
                 * rows so far reach the file (all ranks take part in the
                 * sum). */
                if ((dev->async || o->steplog_path) && b < L.nbatch && dev->collect(dev, logged, b, &out) != 0)
                    goto out;
                if (o->steplog_path && b < L.nbatch) {
                    sum_steps(&L, logged - skip, b - logged, "the step log's all-reduce");
                    memmove(L.scale + (logged - skip), L.scale, (size_t)(b - logged) * sizeof(double));
                    memmove(L.found + (logged - skip), L.found, (size_t)(b - logged) * sizeof(double));
                    log_steps(&L, log, amp, epoch, skip, logged, b, first_step);
                    rt_log_flush(log);
                    logged = b;
                }
                stopped = agree_stop(&L, rt_now() - span_t0, gi - span_b, &span);
                if (stopped)
                    break;
                span_b = gi;
                agree_at = gi + span;
                span_t0 = rt_now();
            }
        }
        /* stopped inside the epoch (not at its end, nor where --max-steps
         * would have ended it anyway): the steps so far into the step log,
         * the checkpoint at this step, no evaluation */
        if (stopped && b < L.nbatch && !(o->max_steps && it >= o->max_steps)) {
            if (dev->collect(dev, skip, b, &out) != 0)
                goto out;
            double loss = loss0, rows = rows0;
            add_steps(&L, skip, b - skip, &loss, &rows);
            log_steps(&L, log, amp, epoch, skip, logged, b, first_step);
            rt_log_flush(log);
            if (o->ckpt_path) {
                rt_resume st = position(epoch, it, b, loss, rows, secs0 + out.secs, &out, amp);
                if (save(&L, w, &st) != 0)
                    goto out;
            }
            say_stopped(&L, stopped, it, epoch, b);
            rc = stopped;
            goto out;
        }
        const int stop = o->max_steps && it >= o->max_steps;
        const int64_t done = b - skip;
        if (dev->evaluate(dev) != 0)
            goto out;
        /* while the device works: the next epoch's order (the device took
         * this one's at begin_epoch and has trained it) */
        if (epoch < o->epochs && !stop)
            rt_sampler_set_epoch(&smp, (uint64_t)epoch + 1);
        if (dev->collect(dev, skip, b, &out) != 0)
            goto out;

        double loss_sum = loss0, rows = rows0;
        add_steps(&L, skip, done, &loss_sum, &rows);
        log_steps(&L, log, amp, epoch, skip, logged, b, first_step);
        if (!each_step && done > 0) {
            const double rs_ = step_rows(&L, b - 1, done - 1);
            int64_t seen = b * L.batch < epoch_samples ? b * L.batch : epoch_samples;
            rt_log_progress(log, epoch, o->epochs, seen * L.W, epoch_samples * L.W,
                            rt_step_loss(m, L.sum[done - 1], rs_), 1);
        }
        double metric[2];
        const double test_loss = eval_result(m, coll, &out, ntest, metric);
        const double secs = secs0 + out.secs;
        if (amp->on)
            skipped_all = out.amp_skipped;
        rt_log_scaler(log, amp->on ? out.amp_scale : 1.0, skipped_all - skipped0, skipped_all);
        /* the lr of the epoch's last step (a step schedule changes it every step) */
        rt_log_epoch(log, epoch, o->epochs, rows > 0 ? loss_sum / rows : NAN, test_loss, metric, secs,
                     samples_before(&L, b), L.lr[b > 0 ? b - 1 : 0]);
        if (o->ckpt_path) {
            /* the next epoch, or where --max-steps stopped this one */
            rt_resume st = position(epoch + 1, it, 0, 0, 0, 0, &out, amp);
            if (b < L.nbatch)
                st = position(epoch, it, b, loss_sum, rows, secs, &out, amp);
            /* a checkpoint that cannot be written stops the run */
            if (save(&L, w, &st) != 0)
                goto out;
        }
        /* a signal during the evaluation or the checkpoint: stop before
         * the next epoch (an agreement at every epoch's end) */
        if (!stopped && !stop && epoch < o->epochs)
            stopped = agree_stop(&L, 0, 0, NULL);
        if (stopped) {
            rt_log_flush(log);
            say_stopped(&L, stopped, it, epoch, b);
            rc = stopped;
            goto out;
        }
        if (stop)
            break;
    }
    /* --save (and anything after) reads the host slabs */
    if (dev->pull(dev, w->param, w->opt) != 0)
        goto out;
    rc = rt_trace_write(trace, m);
out:
    rt_free(buf);
    rt_free(L.lr);
    rt_sampler_free(&smp);
    return rc;
}

int rt_loop_evaluate(const rt_model *m, const rt_opts *o, rt_device *dev, rt_coll *coll, int64_t ntrain,
                     int64_t ntest)
{
    /* The device is opened for training: begin_epoch hands it an order
     * and a learning rate per batch, which no step here reads. */
    rt_sampler smp;
    if (rt_sampler_init(&smp, ntrain, coll->rank, coll->size, 0, o->drop_last, o->seed) != 0)
        return -1;
    const rt_shape shape = rt_loop_shape(o, ntrain, ntest, coll->rank, coll->size);
    int rc = -1;
    float *lr = rt_alloc_n(shape.nbatch + 1, sizeof(float), "learning rates");
    if (!lr)
        goto out;
    double t0 = rt_now();
    double loss[1], count[1], scale[1], found[1];
    rt_dev_out out = {.loss = loss, .count = count, .scale = scale, .found = found};
    if (dev->begin_epoch(dev, 1, smp.shard, lr, 0) != 0 || dev->evaluate(dev) != 0 ||
        dev->collect(dev, 0, 0, &out) != 0)
        goto out;
    double metric[2];
    const double test_loss = eval_result(m, coll, &out, ntest, metric);
    rt_log_evaluation(m->metrics, o->eval_path, ntest, test_loss, metric, rt_now() - t0);
    rc = 0;
out:
    rt_free(lr);
    rt_sampler_free(&smp);
    return rc;
}
