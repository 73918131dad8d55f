/* rt_trace.c: --trace FILE.json, a timeline of every kernel and all-reduce.
 *
 * Chrome's trace-event format (chrome://tracing, ui.perfetto.dev): one
 * complete event ("ph":"X") per train/eval kernel and per bucket
 * all-reduce, ts/dur in microseconds from the common start (the barrier
 * in rt_comm_init), pid = rank, tid 0 = main thread, 1 = comm thread,
 * "cat" the kernel's phase (data/forward/backward/optimizer, "eval" for
 * the eval plan, "comm" for all-reduces), "args":{"step":S} with S the
 * 1-based optimizer step (eval events: the steps taken so far).
 *
 * Recording must not disturb what it measures: each thread appends to its
 * own preallocated buffer (no lock, no allocation); beyond the bound,
 * events are dropped and counted. At the end the ranks send their buffers
 * to rank 0, which writes one file (temp + rename) with names resolved
 * from its own model tables (the start-up check made them identical). */
#include "rt_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Per-thread bounds: ~ 17 MB and 2 MB of events; about 45,000 steps of
 * SimpleNet with their evaluations. */
#define MAIN_EVENTS (1 << 19)
#define COMM_EVENTS (1 << 16)

int rt_trace_open(rt_trace *t, const char *path)
{
    memset(t, 0, sizeof *t);
    if (!path)
        return 0;
    t->path = path;
    const int64_t cap[2] = { MAIN_EVENTS, COMM_EVENTS };
    for (int i = 0; i < 2; i++) {
        if (!(t->buf[i].ev = rt_alloc((size_t)cap[i] * sizeof(rt_tev), "trace events"))) {
            rt_trace_free(t);
            return -1;
        }
        t->buf[i].cap = cap[i];
    }
    t->on = 1;
    return 0;
}

void rt_trace_add(rt_trace *t, int tid, int kind, int id, int64_t step, double t0, double t1)
{
    if (!t || !t->on)
        return;
    rt_tbuf *b = &t->buf[tid];
    if (b->n >= b->cap) {
        b->dropped++;
        return;
    }
    rt_tev *e = &b->ev[b->n++];
    e->t0 = t0;
    e->t1 = t1;
    e->step = step;
    e->id = id;
    e->kind = (uint8_t)kind;
    e->tid = (uint8_t)tid;
}

static const char *cat_of(const rt_model *m, const rt_tev *e)
{
    static const char *phase[] = {"data", "forward", "backward", "optimizer"};
    if (e->kind == RT_TEV_EVAL)
        return "eval";
    if (e->kind == RT_TEV_BUCKET)
        return "comm";
    int ph = e->id >= 0 && e->id < m->train.nk ? m->train.k[e->id].phase : -1;
    return ph >= 0 && ph <= RT_PH_OPTIMIZER ? phase[ph] : "backward";
}

/* Kernel names are C identifiers, but the file must be valid JSON
 * whatever a table holds. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void put_events(FILE *f, const rt_model *m, int rank, const rt_tev *ev, int64_t n,
                       int *first)
{
    for (int64_t i = 0; i < n; i++) {
        const rt_tev *e = &ev[i];
        fputs(*first ? "\n" : ",\n", f);
        *first = 0;
        fprintf(f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"cat\":\"%s\",\"name\":", rank, e->tid,
                cat_of(m, e));
        if (e->kind == RT_TEV_BUCKET) {
            fprintf(f, "\"allreduce bucket %d\"", e->id);
        } else {
            const rt_plan *p = e->kind == RT_TEV_EVAL ? &m->eval : &m->train;
            put_str(f, e->id >= 0 && e->id < p->nk ? p->k[e->id].name : "?");
        }
        double ts = 1e6 * e->t0, dur = 1e6 * (e->t1 - e->t0);
        fprintf(f, ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%lld}}", ts, dur < 0 ? 0 : dur,
                (long long)e->step);
    }
}

static void put_meta(FILE *f, int rank, int gpu, int *first)
{
    fprintf(f, "%s{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\","
               "\"args\":{\"name\":\"rank %d\"}},\n"
               "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}},\n"
               "{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}",
            *first ? "\n" : ",\n", rank, rank, rank, gpu ? "compute stream" : "main", rank,
            gpu ? "comm stream (NCCL)" : "comm");
    *first = 0;
}

/* Counts first (so rank 0 can size its buffer), then the events of each
 * thread. Rank 0 receives rank by rank: its memory stays one rank's worth. */
int rt_trace_write(rt_trace *t, const rt_model *m)
{
    if (!t->on)
        return 0;
    const int W = rt_world.size, me = rt_world.rank;
    if (me != 0) {
        int64_t hdr[4] = { t->buf[0].n, t->buf[1].n, t->buf[0].dropped, t->buf[1].dropped };
        rt_comm_send(hdr, sizeof hdr, "sending the trace to rank 0");
        for (int i = 0; i < 2; i++)
            rt_comm_send(t->buf[i].ev, t->buf[i].n * (int64_t)sizeof(rt_tev),
                         "sending the trace to rank 0");
        return 0;
    }
    size_t plen = strlen(t->path);
    char *tmp = rt_malloc(plen + 32);
    if (!tmp) {
        rt_err("%s: out of memory", t->path);
        return -1;
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", t->path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rt_err("%s: cannot open for writing: %s", tmp, strerror(errno));
        free(tmp);
        /* the other ranks still wait to send */
        if (W > 1)
            rt_comm_abort(1);
        return -1;
    }
    int first = 1;
    int64_t dropped_total = 0;
    fputs("{\"traceEvents\":[", f);
    for (int r = 0; r < W; r++) {
        int64_t hdr[4] = { t->buf[0].n, t->buf[1].n, t->buf[0].dropped, t->buf[1].dropped };
        if (r > 0) {
            rt_comm_recv(r, hdr, sizeof hdr, "receiving the traces");
            /* rank 0's buffers are not needed any more: reuse them */
            for (int i = 0; i < 2; i++) {
                if (hdr[i] < 0 || hdr[i] > t->buf[i].cap) {
                    rt_err("trace from rank %d is malformed", r);
                    rt_comm_abort(1);
                }
                rt_comm_recv(r, t->buf[i].ev, hdr[i] * (int64_t)sizeof(rt_tev),
                             "receiving the traces");
            }
        }
        put_meta(f, r, t->gpu, &first);
        for (int i = 0; i < 2; i++)
            put_events(f, m, r, t->buf[i].ev, hdr[i], &first);
        if (hdr[2] + hdr[3] > 0)
            rt_warn("trace: %lld events of rank %d dropped (buffer full)",
                    (long long)(hdr[2] + hdr[3]), r);
        dropped_total += hdr[2] + hdr[3];
    }
    fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"model\":");
    put_str(f, m->name);
    fprintf(f, ",\"ranks\":%d,\"dropped_events\":%lld}}\n", W, (long long)dropped_total);
    int bad = ferror(f) != 0;
    int e = errno;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        bad = 1;
        e = errno;
    }
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && rename(tmp, t->path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        rt_err("%s: cannot write the trace: %s", t->path, strerror(e));
        unlink(tmp);
    }
    free(tmp);
    return bad ? -1 : 0;
}

void rt_trace_free(rt_trace *t)
{
    for (int i = 0; i < 2; i++)
        rt_free(t->buf[i].ev);
    memset(t, 0, sizeof *t);
}
