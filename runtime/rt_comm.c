/* rt_comm.c: ranks, collectives, and the watchdog that keeps them finite.
 *
 * A program is one rank unless a launcher started it: mpirun/mpiexec
 * (Open MPI sets OMPI_COMM_WORLD_SIZE), or a PMIx/PMI launcher such as
 * srun (PMIX_RANK, PMI_SIZE). Only then is MPI initialized, with
 * MPI_THREAD_MULTIPLE: the gradient all-reduces run on the reducer's comm
 * thread while the main thread trains, and the watchdog may call
 * MPI_Abort from a third. Without a launcher, or in a build without MPI
 * (CDDP_NO_MPI: the GPU machines have none), there is one rank and no MPI
 * call is ever made.
 *
 * Every collective goes through here and is registered with the watchdog
 * for its duration: a peer that died or hangs turns into an error line
 * and MPI_Abort after --comm-timeout seconds instead of a job that never
 * ends. (A peer killed outright is noticed by mpirun itself, sooner.)
 * MPI errors are returned, not fatal, so each failing call is reported
 * with its name and file:line before the job is aborted. */
#include "rt_internal.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A build without MPI's headers (no -I from mpicc) is a single-rank one;
 * under a launcher it refuses to start rather than train W times alone. */
#if !defined(CDDP_NO_MPI) && defined(__has_include)
#if !__has_include(<mpi.h>)
#define CDDP_NO_MPI 1
#endif
#endif
#ifndef CDDP_NO_MPI
#include <mpi.h>
#endif

int rt_comm_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

double rt_comm_time(void) { return rt_now() - rt_world.t0; }

#ifdef CDDP_NO_MPI
/* ---- single rank: the build has no MPI ------------------------------------ */
int rt_comm_init(double timeout)
{
    rt_world.timeout = timeout;
    rt_world.t0 = rt_now();
    /* Started as one of several ranks, this build would train alone and
     * every rank would write the same files: refuse. */
    const char *sz = getenv("OMPI_COMM_WORLD_SIZE");
    if (!sz)
        sz = getenv("PMI_SIZE");
    const char *rk = getenv("PMIX_RANK");
    if ((sz && atoi(sz) > 1) || (rk && atoi(rk) > 0)) {
        rt_err("started by an MPI launcher as one of several ranks, but this runtime was "
               "built without MPI (CDDP_NO_MPI); rebuild it with mpicc present, or run one "
               "process");
        return -1;
    }
    return 0;
}
void rt_comm_finalize(void) {}
void rt_comm_abort(int code) { exit(code); }
int rt_comm_check_same(const rt_model *m, const rt_opts *o) { (void)m, (void)o; return 0; }
int rt_comm_check_data(int64_t ntrain, int64_t ntest) { (void)ntrain, (void)ntest; return 0; }
void rt_comm_bcast_f32(float *x, int64_t n, const char *what) { (void)x, (void)n, (void)what; }
void rt_comm_bcast_bytes(void *x, int64_t n, const char *what) { (void)x, (void)n, (void)what; }
void rt_comm_sum_f64(double *x, int64_t n, const char *what) { (void)x, (void)n, (void)what; }
void rt_comm_allreduce_bucket(float *x, int64_t n, int bucket) { (void)x, (void)n, (void)bucket; }
void rt_comm_sync_sum(float *x, int64_t n) { (void)x, (void)n; }
void rt_comm_send(const void *buf, int64_t bytes, const char *what)
{
    (void)buf, (void)bytes, (void)what;
}
void rt_comm_recv(int from, void *buf, int64_t bytes, const char *what)
{
    (void)from, (void)buf, (void)bytes, (void)what;
}
void rt_comm_allgather_bytes(const void *mine, void *all, int64_t each, const char *what)
{
    (void)what;
    memcpy(all, mine, (size_t)each);
}
#else

/* ---- the watchdog ----------------------------------------------------------
 * Two slots: the main thread's collective and the comm thread's bucket
 * all-reduce, each with its start time while one runs. The watchdog
 * sleeps on a condition variable (CLOCK_MONOTONIC) until the earliest
 * deadline or until a slot changes; it never polls. */
enum { SLOT_MAIN = 0, SLOT_COMM = 1, NSLOT = 2 };
static MPI_Comm sync_comm = MPI_COMM_NULL;     /* rt_comm_sync_sum's (see there) */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int running, quit;
    struct { int busy; double start; const char *what; int bucket; } slot[NSLOT];
} wd = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void wd_fire(int s)
{
    if (wd.slot[s].bucket >= 0)
        rt_err("all-reduce of bucket %d did not complete within %g s (another rank failed or "
               "hung)", wd.slot[s].bucket, rt_world.timeout);
    else
        rt_err("%s did not complete within %g s (another rank failed or hung)", wd.slot[s].what,
               rt_world.timeout);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);       /* MPI_Abort does not return; if it did, still end the rank */
}

static void *wd_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wd.mu);
    while (!wd.quit) {
        double now = rt_now(), next = INFINITY;
        for (int s = 0; s < NSLOT; s++) {
            if (!wd.slot[s].busy)
                continue;
            double dl = wd.slot[s].start + rt_world.timeout;
            if (now >= dl)
                wd_fire(s);     /* with the lock held: nothing else is to happen */
            if (dl < next)
                next = dl;
        }
        if (isinf(next)) {
            pthread_cond_wait(&wd.cv, &wd.mu);
        } else {
            struct timespec ts;
            ts.tv_sec = (time_t)next;
            ts.tv_nsec = (long)((next - (double)ts.tv_sec) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
        }
    }
    pthread_mutex_unlock(&wd.mu);
    return NULL;
}

static int wd_start(void)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&wd.cv, &ca) != 0) {
        rt_err("cannot set up the collective watchdog");
        return -1;
    }
    pthread_condattr_destroy(&ca);
    wd.quit = 0;
    int e = pthread_create(&wd.th, NULL, wd_main, NULL);
    if (e != 0) {
        rt_err("cannot start the collective watchdog thread: %s", strerror(e));
        pthread_cond_destroy(&wd.cv);
        return -1;
    }
    wd.running = 1;
    return 0;
}

static void wd_stop(void)
{
    if (!wd.running)
        return;
    pthread_mutex_lock(&wd.mu);
    wd.quit = 1;
    pthread_cond_signal(&wd.cv);
    pthread_mutex_unlock(&wd.mu);
    pthread_join(wd.th, NULL);
    pthread_cond_destroy(&wd.cv);
    wd.running = 0;
}

static void wd_begin(int s, const char *what, int bucket)
{
    if (!wd.running)
        return;
    pthread_mutex_lock(&wd.mu);
    wd.slot[s].busy = 1;
    wd.slot[s].start = rt_now();
    wd.slot[s].what = what;
    wd.slot[s].bucket = bucket;
    pthread_cond_signal(&wd.cv);
    pthread_mutex_unlock(&wd.mu);
}

static void wd_end(int s)
{
    if (!wd.running)
        return;
    /* No signal: the watchdog waking at a stale deadline just finds the
     * slot idle and sleeps again, which is cheaper than a wake-up for
     * every collective. */
    pthread_mutex_lock(&wd.mu);
    wd.slot[s].busy = 0;
    pthread_mutex_unlock(&wd.mu);
}

/* ---- MPI calls --------------------------------------------------------------- */
static void mpi_fail(int rc, const char *call, const char *file, int line)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error %d", rc);
    rt_err("%s failed: %s (%s:%d)", call, msg, file, line);
    rt_comm_abort(1);
}
#define MPI_CHECK(call)                                                                            \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS)                                                                \
            mpi_fail(mpi_rc_, #call, __FILE__, __LINE__);                                          \
    } while (0)

/* MPI counts are int: long messages go in pieces. */
#define CHUNK ((int64_t)1 << 30)

int rt_comm_init(double timeout)
{
    rt_world.timeout = timeout;
    rt_world.t0 = rt_now();
    if (!rt_comm_launched())
        return 0;
    /* A rank waiting in a collective polls: Open MPI spins unless told to
     * yield. The comm thread shares the cores with the kernels (on a
     * small machine, with the other ranks' kernels too), so it yields;
     * the user's own setting wins. Other MPIs ignore the variable. */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        rt_err("MPI_Init_thread failed");
        return -1;
    }
    rt_world.mpi = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rt_world.rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &rt_world.size));
    if (provided < MPI_THREAD_MULTIPLE) {
        /* Every rank sees the same library, so all refuse alike. */
        static const char *level[] = {"SINGLE", "FUNNELED", "SERIALIZED", "MULTIPLE"};
        if (rt_world.rank == 0)
            rt_err("the MPI library provides thread level MPI_THREAD_%s; this program needs "
                   "MPI_THREAD_MULTIPLE (gradients are all-reduced on their own thread)",
                   provided >= 0 && provided <= 3 ? level[provided] : "?");
        MPI_Finalize();
        rt_world.mpi = 0;
        return -1;
    }
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt_world.rank,
                                  MPI_INFO_NULL, &local));
    MPI_CHECK(MPI_Comm_rank(local, &rt_world.local_rank));
    MPI_CHECK(MPI_Comm_size(local, &rt_world.local_size));
    MPI_Comm_free(&local);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &sync_comm));
    MPI_Comm_set_errhandler(sync_comm, MPI_ERRORS_RETURN);
    if (rt_world.size > 1 && wd_start() != 0)
        rt_comm_abort(1);
    /* Time 0 of the trace: right after everyone has arrived. */
    wd_begin(SLOT_MAIN, "the start-up barrier", -1);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    wd_end(SLOT_MAIN);
    rt_world.t0 = rt_now();
    return 0;
}

void rt_comm_finalize(void)
{
    wd_stop();
    if (rt_world.mpi) {
        if (sync_comm != MPI_COMM_NULL)
            MPI_Comm_free(&sync_comm);
        MPI_Finalize();
        rt_world.mpi = 0;
    }
}

void rt_comm_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (rt_world.mpi)
        MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1);
}

/* ---- start-up agreement ------------------------------------------------------ */
/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}
static uint64_t fnv_str(uint64_t h, const char *s) { return s ? fnv(h, s, strlen(s) + 1) : fnv(h, "", 1); }
static uint64_t fnv_i64(uint64_t h, int64_t v) { return fnv(h, &v, sizeof v); }
#define FNV0 0xCBF29CE484222325ull

/* What all ranks must agree on, and how a difference is shown. */
enum { FP_PARAMS, FP_KERNELS, FP_CUDA, FP_BATCH, FP_LR, FP_EPOCHS, FP_SEED, FP_SHUFFLE,
       FP_DROP_LAST, FP_MAX_STEPS, FP_DEVICE, FP_TRACE, FP_CKPT_EVERY, FP_RESUME, FP_N };
static const struct { const char *what; char kind; } fp_info[FP_N] = {
    [FP_PARAMS] = {"parameter table", 'h'},  [FP_KERNELS] = {"kernel names", 'h'},
    [FP_CUDA] = {"CUDA source", 'h'},        [FP_BATCH] = {"--batch", 'i'},
    [FP_LR] = {"--lr", 'f'},                 [FP_EPOCHS] = {"--epochs", 'i'},
    [FP_SEED] = {"--seed", 'u'},             [FP_SHUFFLE] = {"--shuffle", 'b'},
    [FP_DROP_LAST] = {"--drop-last", 'b'},   [FP_MAX_STEPS] = {"--max-steps", 'i'},
    [FP_DEVICE] = {"--device", 'd'},         [FP_TRACE] = {"--trace", 'b'},
    [FP_CKPT_EVERY] = {"--checkpoint-every", 'i'}, [FP_RESUME] = {"--resume", 'b'},
};

static void fp_value(char *buf, size_t len, int f, uint64_t v)
{
    switch (fp_info[f].kind) {
    case 'i': snprintf(buf, len, "%lld", (long long)v); break;
    case 'u': snprintf(buf, len, "%llu", (unsigned long long)v); break;
    case 'b': snprintf(buf, len, "%s", v ? "on" : "off"); break;
    case 'd': snprintf(buf, len, "%s", v == RT_DEV_CPU ? "cpu" : v == RT_DEV_CUDA ? "cuda" : "auto"); break;
    case 'f': {
        uint32_t bits = (uint32_t)v;
        float x;
        memcpy(&x, &bits, sizeof x);
        snprintf(buf, len, "%g", (double)x);
        break;
    }
    default: snprintf(buf, len, "hash %016llx", (unsigned long long)v); break;
    }
}

static void fingerprint(const rt_model *m, const rt_opts *o, uint64_t fp[FP_N])
{
    uint64_t h = fnv_str(FNV0, m->name);
    h = fnv_i64(h, m->param_floats);
    h = fnv_i64(h, m->opt_floats);
    for (int i = 0; i < m->nparam; i++) {
        const rt_param *p = &m->params[i];
        h = fnv_str(h, p->name);
        h = fnv_i64(h, p->rank);
        for (int k = 0; k < 4; k++)
            h = fnv_i64(h, p->shape[k]);
        h = fnv_i64(fnv_i64(fnv_i64(h, p->off), p->numel), p->init);
        h = fnv_i64(fnv_i64(h, p->bucket), p->grad_kernel);
    }
    for (int b = 0; b < m->nbuckets; b++) {
        const rt_bucket *bk = &m->buckets[b];
        h = fnv_i64(fnv_i64(fnv_i64(fnv_i64(h, bk->off), bk->size), bk->ready), bk->opt);
    }
    fp[FP_PARAMS] = h;
    h = FNV0;
    const rt_plan *plans[2] = { &m->train, &m->eval };
    for (int q = 0; q < 2; q++) {
        h = fnv_i64(h, plans[q]->nk);
        for (int k = 0; k < plans[q]->nk; k++)
            h = fnv_i64(fnv_str(h, plans[q]->k[k].name), plans[q]->k[k].phase);
    }
    fp[FP_KERNELS] = h;
    fp[FP_CUDA] = fnv_str(FNV0, m->cuda_src);
    uint32_t lr;
    memcpy(&lr, &o->lr, sizeof lr);
    fp[FP_BATCH] = (uint64_t)o->batch;
    fp[FP_LR] = lr;
    fp[FP_EPOCHS] = (uint64_t)o->epochs;
    fp[FP_SEED] = o->seed;
    fp[FP_SHUFFLE] = (uint64_t)o->shuffle;
    fp[FP_DROP_LAST] = (uint64_t)o->drop_last;
    fp[FP_MAX_STEPS] = (uint64_t)o->max_steps;
    /* these decide which collectives a rank makes, too */
    fp[FP_DEVICE] = (uint64_t)o->device;
    fp[FP_TRACE] = o->trace_path != NULL;
    fp[FP_CKPT_EVERY] = (uint64_t)o->ckpt_every;    /* a checkpoint sums the losses */
    fp[FP_RESUME] = o->resume_path != NULL;         /* resuming broadcasts the state */
}

/* Gathers everyone's values; rank 0 names each rank that differs from it
 * and in what. All ranks see the same table, so all return alike. */
static int agree(const uint64_t *mine, int n, const char *const *what,
                 void (*show)(char *, size_t, int, uint64_t), const char *ctx)
{
    int W = rt_world.size;
    uint64_t *all = rt_malloc((size_t)W * (size_t)n * sizeof(uint64_t));
    if (!all) {
        rt_err("out of memory checking the ranks agree");
        rt_comm_abort(1);
    }
    wd_begin(SLOT_MAIN, "the ranks' start-up check", -1);
    MPI_CHECK(MPI_Allgather(mine, n, MPI_UINT64_T, all, n, MPI_UINT64_T, MPI_COMM_WORLD));
    wd_end(SLOT_MAIN);
    int bad = 0;
    for (int r = 1; r < W; r++) {
        char line[1024];
        size_t len = 0;
        line[0] = 0;
        for (int f = 0; f < n; f++) {
            uint64_t a = all[f], b = all[(size_t)r * (size_t)n + (size_t)f];
            if (a == b)
                continue;
            char va[64], vb[64];
            show(va, sizeof va, f, b);
            show(vb, sizeof vb, f, a);
            if (len < sizeof line)
                len += (size_t)snprintf(line + len, sizeof line - len, "%s%s (%s there, %s on rank 0)",
                                        len ? ", " : "", what[f], va, vb);
        }
        if (len) {
            bad = 1;
            if (rt_world.rank == 0)
                rt_err("rank %d differs from rank 0 in its %s: %s", r, ctx, line);
        }
    }
    free(all);
    return bad ? -1 : 0;
}

int rt_comm_check_same(const rt_model *m, const rt_opts *o)
{
    if (rt_world.size <= 1)
        return 0;
    uint64_t fp[FP_N];
    fingerprint(m, o, fp);
    const char *what[FP_N];
    for (int f = 0; f < FP_N; f++)
        what[f] = fp_info[f].what;
    return agree(fp, FP_N, what, fp_value, "program and settings");
}

static void show_count(char *buf, size_t len, int f, uint64_t v)
{
    (void)f;
    snprintf(buf, len, "%lld", (long long)v);
}

int rt_comm_check_data(int64_t ntrain, int64_t ntest)
{
    if (rt_world.size <= 1)
        return 0;
    uint64_t v[2] = { (uint64_t)ntrain, (uint64_t)ntest };
    const char *what[2] = { "training samples", "test samples" };
    return agree(v, 2, what, show_count, "data");
}

/* ---- collectives ---------------------------------------------------------------- */
void rt_comm_bcast_f32(float *x, int64_t n, const char *what)
{
    if (rt_world.size <= 1)
        return;
    wd_begin(SLOT_MAIN, what, -1);
    for (int64_t i = 0; i < n; i += CHUNK)
        MPI_CHECK(MPI_Bcast(x + i, (int)(n - i < CHUNK ? n - i : CHUNK), MPI_FLOAT, 0,
                            MPI_COMM_WORLD));
    wd_end(SLOT_MAIN);
}

void rt_comm_bcast_bytes(void *x, int64_t n, const char *what)
{
    if (rt_world.size <= 1)
        return;
    wd_begin(SLOT_MAIN, what, -1);
    for (int64_t i = 0; i < n; i += CHUNK)
        MPI_CHECK(MPI_Bcast((char *)x + i, (int)(n - i < CHUNK ? n - i : CHUNK), MPI_BYTE, 0,
                            MPI_COMM_WORLD));
    wd_end(SLOT_MAIN);
}

void rt_comm_sum_f64(double *x, int64_t n, const char *what)
{
    if (rt_world.size <= 1)
        return;
    wd_begin(SLOT_MAIN, what, -1);
    for (int64_t i = 0; i < n; i += CHUNK)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + i, (int)(n - i < CHUNK ? n - i : CHUNK),
                                MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    wd_end(SLOT_MAIN);
}

void rt_comm_allreduce_bucket(float *x, int64_t n, int bucket)
{
    if (rt_world.size <= 1)
        return;
    wd_begin(SLOT_COMM, "all-reduce", bucket);
    for (int64_t i = 0; i < n; i += CHUNK)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + i, (int)(n - i < CHUNK ? n - i : CHUNK),
                                MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    wd_end(SLOT_COMM);
}

/* The main thread's collectives inside a step (SyncBatchNorm) on a
 * communicator of their own: the comm thread may be all-reducing a
 * gradient bucket on MPI_COMM_WORLD at the same time, and two threads'
 * collectives on one communicator could pair up wrongly across ranks. */
void rt_comm_sync_sum(float *x, int64_t n)
{
    if (rt_world.size <= 1)
        return;
    wd_begin(SLOT_MAIN, "SyncBatchNorm's all-reduce", -1);
    for (int64_t i = 0; i < n; i += CHUNK)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + i, (int)(n - i < CHUNK ? n - i : CHUNK),
                                MPI_FLOAT, MPI_SUM, sync_comm));
    wd_end(SLOT_MAIN);
}

/* Every rank's `each` bytes, in rank order (each is small: one call). */
void rt_comm_allgather_bytes(const void *mine, void *all, int64_t each, const char *what)
{
    if (rt_world.size <= 1) {
        memcpy(all, mine, (size_t)each);
        return;
    }
    wd_begin(SLOT_MAIN, what, -1);
    MPI_CHECK(MPI_Allgather(mine, (int)each, MPI_BYTE, all, (int)each, MPI_BYTE, MPI_COMM_WORLD));
    wd_end(SLOT_MAIN);
}

#define TAG_BYTES 7

void rt_comm_send(const void *buf, int64_t bytes, const char *what)
{
    wd_begin(SLOT_MAIN, what, -1);
    for (int64_t i = 0; i < bytes; i += CHUNK)
        MPI_CHECK(MPI_Send((const char *)buf + i, (int)(bytes - i < CHUNK ? bytes - i : CHUNK),
                           MPI_BYTE, 0, TAG_BYTES, MPI_COMM_WORLD));
    wd_end(SLOT_MAIN);
}

void rt_comm_recv(int from, void *buf, int64_t bytes, const char *what)
{
    wd_begin(SLOT_MAIN, what, -1);
    for (int64_t i = 0; i < bytes; i += CHUNK)
        MPI_CHECK(MPI_Recv((char *)buf + i, (int)(bytes - i < CHUNK ? bytes - i : CHUNK),
                           MPI_BYTE, from, TAG_BYTES, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    wd_end(SLOT_MAIN);
}
#endif
