/* fake_nccl.c: a stand-in for libnccl.so.2, for testing the runtime's GPU
 * data-parallel path without GPUs (tests/ddp/test_cuda_ddp.sh).
 *
 * Each rank is a process started by mpirun with its own fake driver
 * (fake_cuda.c, CDDP_LIBCUDA); this library moves the data between them
 * with MPI, which the program has already initialized. ncclAllReduce
 * becomes a host operation on the fake driver's stream -- a node of the
 * graph being captured -- that runs MPI_Allreduce when the graph replays,
 * in whatever order the fake driver's scheduler picks, so the runtime's
 * event edges are what keeps it after backward and before the optimizer.
 *
 * It checks what real NCCL would refuse or get wrong silently:
 *   - ncclCommInitRank: every rank passes the same unique id (the one
 *     rank 0 got from ncclGetUniqueId), nranks is the MPI world, the
 *     ranks are all different, each rank has a current device and no two
 *     ranks on a host share one (NCCL: "duplicate GPU");
 *   - ncclAllReduce: float32, sum or avg, in place, inside one device
 *     allocation, on a stream, with a communicator made by this library;
 *   - every rank issues the same sequence of all-reduces (counts are
 *     compared at each one);
 *   - a communicator's first collective is not enqueued inside a stream
 *     capture: real NCCL connects the ranks then, which a capture may not
 *     contain (NCCL's advice for CUDA graphs: one eager collective first).
 * Like a real libnccl it carries the version string NCCL prints, with the
 * CUDA version it was built for ("NCCL version 2.28.3+cuda13.0"; build
 * with -DFAKE_NCCL_CUDA='"14.0"' for another), which the runtime reads to
 * skip a library the driver is too old for.
 * Environment: FAKE_NCCL_ASYNC_ERROR=CODE makes ncclCommGetAsyncError
 * report that error (a failed peer), on FAKE_NCCL_ERROR_RANK only if set.
 * With one rank (CDDP_NCCL_FORCE) no MPI call is made. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SUCCESS = 0, SYSTEM_ERROR = 2, INTERNAL_ERROR = 3, INVALID_ARGUMENT = 4, INVALID_USAGE = 5 };
enum { FLOAT32 = 7, SUM = 0, AVG = 4 };

typedef struct { char internal[128]; } ncclUniqueId;
struct ncclComm { int magic, rank, nranks, dev; uint64_t calls, enqueued; };

#ifndef FAKE_NCCL_CUDA
#define FAKE_NCCL_CUDA "13.0"
#endif
/* used, so the linker keeps it: the runtime finds it in the file */
const char fake_nccl_version_string[] = "NCCL version 2.28.3+cuda" FAKE_NCCL_CUDA;
typedef struct ncclComm *ncclComm_t;
#define MAGIC 0x6e63636c

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fake nccl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The fake driver's hooks, from the library the runtime loaded. */
static int (*cur_device)(void);
static int (*host_op)(void *s, int (*fn)(void *), void *arg, const void *dev, size_t bytes,
                      const char *name);
static int (*capturing)(void *s);

static int hooks(void)
{
    if (host_op)
        return 0;
    const char *lib = getenv("CDDP_LIBCUDA");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *a = h ? dlsym(h, "fake_cuda_current_device") : NULL, *b = h ? dlsym(h, "fake_cuda_host_op") : NULL,
         *c = h ? dlsym(h, "fake_cuda_stream_capturing") : NULL;
    if (!a || !b || !c) {
        say("the fake driver (CDDP_LIBCUDA) is not loaded: the fake NCCL works only with it");
        return -1;
    }
    memcpy(&cur_device, &a, sizeof a);
    memcpy(&host_op, &b, sizeof b);
    memcpy(&capturing, &c, sizeof c);
    return 0;
}

int ncclGetVersion(int *v)
{
    *v = 22803 + 0 * (int)fake_nccl_version_string[0];
    return SUCCESS;
}

const char *ncclGetErrorString(int r)
{
    static const char *s[] = {"no error", "unhandled cuda error", "unhandled system error",
                              "internal error", "invalid argument", "invalid usage",
                              "remote process exited or there was a network error", "in progress"};
    return r >= 0 && r < 8 ? s[r] : "unknown result code";
}

int ncclGetUniqueId(ncclUniqueId *id)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec;
    for (size_t i = 0; i < sizeof id->internal; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        id->internal[i] = (char)(x >> 56);
    }
    return SUCCESS;
}

static int mpi_world(int *size)
{
    int init = 0;
    MPI_Initialized(&init);
    if (!init)
        return -1;
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (hooks() != 0)
        return INTERNAL_ERROR;
    int dev = cur_device();
    if (dev < 0) {
        say("ncclCommInitRank without a current CUDA context");
        return INVALID_USAGE;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        say("ncclCommInitRank: rank %d of %d", rank, nranks);
        return INVALID_ARGUMENT;
    }
    if (nranks > 1) {
        int size = 0;
        if (mpi_world(&size) != 0 || size != nranks) {
            say("ncclCommInitRank: %d ranks, but the MPI world has %d", nranks, size);
            return INVALID_USAGE;
        }
        /* everyone's id, rank, device and host */
        struct { ncclUniqueId id; int rank, dev; char host[64]; } me, *all = calloc((size_t)size, sizeof me);
        if (!all)
            return SYSTEM_ERROR;
        memset(&me, 0, sizeof me);
        me.id = id;
        me.rank = rank;
        me.dev = dev;
        gethostname(me.host, sizeof me.host - 1);
        MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD);
        int bad = 0;
        for (int i = 0; i < size && !bad; i++) {
            if (memcmp(&all[i].id, &me.id, sizeof me.id)) {
                say("ncclCommInitRank: rank %d passed another unique id than rank %d", all[i].rank, rank);
                bad = INVALID_ARGUMENT;
            }
            for (int j = 0; j < i && !bad; j++) {
                if (all[i].rank == all[j].rank) {
                    say("ncclCommInitRank: two processes claim rank %d", all[i].rank);
                    bad = INVALID_ARGUMENT;
                } else if (all[i].dev == all[j].dev && !strcmp(all[i].host, all[j].host)) {
                    say("ncclCommInitRank: duplicate GPU: ranks %d and %d both use device %d on %s",
                        all[j].rank, all[i].rank, all[i].dev, all[i].host);
                    bad = INVALID_USAGE;
                }
            }
        }
        free(all);
        if (bad)
            return bad;
    }
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return SYSTEM_ERROR;
    *c = (struct ncclComm){MAGIC, rank, nranks, dev, 0, 0};
    *comm = c;
    return SUCCESS;
}

static int valid(ncclComm_t c)
{
    if (!c || c->magic != MAGIC) {
        say("not a communicator made by ncclCommInitRank");
        return 0;
    }
    return 1;
}

int ncclCommDestroy(ncclComm_t c)
{
    if (!valid(c))
        return INVALID_ARGUMENT;
    c->magic = 0;
    free(c);
    return SUCCESS;
}

int ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }

int ncclCommGetAsyncError(ncclComm_t c, int *r)
{
    if (!valid(c))
        return INVALID_ARGUMENT;
    const char *e = getenv("FAKE_NCCL_ASYNC_ERROR"), *on = getenv("FAKE_NCCL_ERROR_RANK");
    *r = e && (!on || atoi(on) == c->rank) ? atoi(e) : SUCCESS;
    return SUCCESS;
}

/* One captured all-reduce (or broadcast): what it reduces, for when the
 * graph runs. */
enum { BCAST = -1 };
typedef struct ar { ncclComm_t c; float *buf; size_t count; int op; } ar;

static int run_allreduce(void *arg)
{
    ar *a = arg;
    uint64_t seq = a->c->calls++;
    if (a->c->nranks > 1) {
        /* the same all-reduce on every rank, or the sums mix buckets */
        unsigned long long mine[2] = {seq, a->count}, lo[2], hi[2];
        MPI_Allreduce(mine, lo, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(mine, hi, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        if (lo[0] != hi[0] || lo[1] != hi[1]) {
            say("rank %d: all-reduce #%llu of %zu floats meets another rank's #%llu..%llu of %llu..%llu",
                a->c->rank, (unsigned long long)seq, a->count, lo[0], hi[0], lo[1], hi[1]);
            return -1;
        }
        for (size_t i = 0; i < a->count; i += (size_t)1 << 30) {
            size_t k = a->count - i < ((size_t)1 << 30) ? a->count - i : (size_t)1 << 30;
            if (a->op == BCAST)
                MPI_Bcast(a->buf + i, (int)k, MPI_FLOAT, 0, MPI_COMM_WORLD);
            else
                MPI_Allreduce(MPI_IN_PLACE, a->buf + i, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    if (a->op == AVG) {
        const float s = 1.0f / (float)a->c->nranks;
        for (size_t i = 0; i < a->count; i++)
            a->buf[i] *= s;
    }
    return 0;
}

static int enqueue_coll(const char *fn, const void *send, void *recv, size_t count, int type, int op,
                        ncclComm_t c, void *stream);

int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, ncclComm_t c, void *stream)
{
    if (op == BCAST) {
        say("ncclAllReduce: op %d", op);
        return INVALID_ARGUMENT;
    }
    return enqueue_coll("ncclAllReduce", send, recv, count, type, op, c, stream);
}

/* rank 0's buffer to every rank (the runtime broadcasts from rank 0 only) */
int ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, ncclComm_t c, void *stream)
{
    if (root != 0) {
        say("ncclBroadcast: root %d (the runtime broadcasts rank 0's)", root);
        return INVALID_ARGUMENT;
    }
    return enqueue_coll("ncclBroadcast", send, recv, count, type, BCAST, c, stream);
}

static int enqueue_coll(const char *fn, const void *send, void *recv, size_t count, int type, int op,
                        ncclComm_t c, void *stream)
{
    if (!valid(c) || hooks() != 0)
        return INVALID_ARGUMENT;
    if (type != FLOAT32 || (op != SUM && op != AVG && op != BCAST)) {
        say("%s: type %d op %d (the runtime reduces float32 with sum or avg)", fn, type, op);
        return INVALID_ARGUMENT;
    }
    if (send != recv) {
        say("%s: not in place", fn);
        return INVALID_ARGUMENT;
    }
    if (!stream) {
        say("%s on the legacy default stream", fn);
        return INVALID_USAGE;
    }
    if (c->enqueued == 0 && capturing(stream)) {
        say("%s: the communicator's first collective is inside a stream capture (it connects "
            "the ranks: run one collective eagerly first)", fn);
        return INVALID_USAGE;
    }
    c->enqueued++;
    (void)fake_nccl_version_string[0];
    ar *a = malloc(sizeof *a);      /* lives as long as the graph: leaked with it */
    if (!a)
        return SYSTEM_ERROR;
    *a = (ar){c, recv, count, op};
    int r = host_op(stream, run_allreduce, a, recv, count * sizeof(float), fn);
    if (r) {
        free(a);
        return r == 2 ? SYSTEM_ERROR : INVALID_ARGUMENT;
    }
    return SUCCESS;
}
