/* rt_nccl.c: NCCL for GPU ranks -- found at run time with dlopen, like the
 * driver, so a binary built without NCCL runs with it where it is there.
 *
 * The communicator is bootstrapped the usual way: rank 0 asks NCCL for a
 * unique id and broadcasts it over MPI (the launcher's world), then every
 * rank joins with its MPI rank. The communicator is the CUDA device's
 * rt_coll (rt_coll_nccl): gradient buckets are averaged on the device's
 * comm stream (captured into the step's CUDA graph) with ncclAvg, so the
 * average over ranks costs no extra kernel; SyncBatchNorm's sums and the
 * loss scaler's flag are ncclSum, the buffers an ncclBroadcast. NCCL ops do not return errors for a peer that died: that shows
 * up as an asynchronous error or as no progress, which rt_cuda_event_wait
 * polls through rt_nccl_check while it waits.
 *
 * Test hooks: CDDP_LIBNCCL names the library to load (a fake one in
 * tests/fakes/fake_cuda.c); CDDP_NCCL_FORCE=1 runs the NCCL path with a
 * single rank (tests/gpu/run.sh: one lent GPU). */
#include "rt_cuda.h"
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* nccl.h's values */
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7, NCCL_FLOAT32 = 7, NCCL_SUM = 0, NCCL_AVG = 4 };
#define NCCL_MIN_VERSION 21000      /* 2.10: ncclAvg */

typedef struct { char internal[RT_NCCL_ID_BYTES]; } nccl_id;
typedef struct ncclComm *nccl_comm;

typedef struct nccl_api {
    void *lib;
    void *lib_self;         /* a symbol of it: dladdr finds its file */
    int (*ncclGetVersion)(int *v);
    const char *(*ncclGetErrorString)(int r);
    int (*ncclGetUniqueId)(nccl_id *id);
    int (*ncclCommInitRank)(nccl_comm *c, int nranks, nccl_id id, int rank);
    int (*ncclCommDestroy)(nccl_comm c);
    int (*ncclCommAbort)(nccl_comm c);
    int (*ncclCommGetAsyncError)(nccl_comm c, int *r);
    int (*ncclAllReduce)(const void *s, void *r, size_t n, int type, int op, nccl_comm c, CUstream st);
    int (*ncclBroadcast)(const void *s, void *r, size_t n, int type, int root, nccl_comm c, CUstream st);
} nccl_api;
static nccl_api nc;

typedef struct nsym { const char *name; size_t off; } nsym;
#define NC_SYM(f) {#f, offsetof(nccl_api, f)}
static const nsym nc_syms[] = {
    NC_SYM(ncclGetVersion), NC_SYM(ncclGetErrorString), NC_SYM(ncclGetUniqueId),
    NC_SYM(ncclCommInitRank), NC_SYM(ncclCommDestroy), NC_SYM(ncclCommAbort),
    NC_SYM(ncclCommGetAsyncError), NC_SYM(ncclAllReduce), NC_SYM(ncclBroadcast),
};

static const char *nc_text(int r)
{
    const char *s = nc.ncclGetErrorString ? nc.ncclGetErrorString(r) : NULL;
    return s ? s : "unknown NCCL error";
}

static int nc_check(int r, const char *call, const char *file, int line)
{
    if (r == NCCL_SUCCESS)
        return 0;
    const char *b = strrchr(file, '/');
    rt_err("NCCL error %d (%s) in %s at %s:%d", r, nc_text(r), call, b ? b + 1 : file, line);
    return -1;
}
#define NC_CHECK(call) nc_check((call), #call, __FILE__, __LINE__)

/* The CUDA version a libnccl was built for, from the version string it
 * prints at start-up ("NCCL version 2.28.9+cuda13.0"; NCCL has no call
 * that returns it), as 13000; 0 when the file has no such string. */
static int built_for_cuda(const char *path)
{
    char real[4096];
    Dl_info info;
    /* the file the loader picked, when path is a bare name */
    if (!strchr(path, '/') && nc.lib_self && dladdr(nc.lib_self, &info) && info.dli_fname)
        path = info.dli_fname;
    if (!realpath(path, real))
        return 0;
    FILE *f = fopen(real, "rb");
    if (!f)
        return 0;
    static const char pat[] = "NCCL version ";
    char buf[1 << 16];
    size_t keep = 0, n;
    int v = 0;
    while (!v && (n = fread(buf + keep, 1, sizeof buf - keep, f)) > 0) {
        size_t len = keep + n;
        for (size_t i = 0; i + sizeof pat + 32 <= len && !v; i++) {
            if (memcmp(buf + i, pat, sizeof pat - 1))
                continue;
            const char *c = memchr(buf + i, '+', 32);
            int maj, min;
            if (c && sscanf(c, "+cuda%d.%d", &maj, &min) == 2)
                v = maj * 1000 + min * 10;
        }
        keep = len < 64 ? len : 64;         /* a string across two reads */
        memmove(buf, buf + len - keep, keep);
    }
    fclose(f);
    return v;
}

/* Tries one name; 1 loaded, 0 absent, -1 unusable (reason in why). */
static int try_lib(const char *path, int driver, char *why, size_t whylen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
    for (size_t i = 0; i < sizeof nc_syms / sizeof nc_syms[0]; i++) {
        void *p = dlsym(h, nc_syms[i].name);
        if (!p) {
            snprintf(why, whylen, "NCCL %s lacks %s", path, nc_syms[i].name);
            memset(&nc, 0, sizeof nc);
            dlclose(h);
            return -1;
        }
        memcpy((char *)&nc + nc_syms[i].off, &p, sizeof p);
    }
    int v = 0;
    if (nc.ncclGetVersion(&v) != NCCL_SUCCESS || v < NCCL_MIN_VERSION) {
        snprintf(why, whylen, "NCCL %s is version %d.%d; cddp needs 2.10 or newer (ncclAvg)", path,
                 v / 10000, v / 100 % 100);
        memset(&nc, 0, sizeof nc);
        dlclose(h);
        return -1;
    }
    /* A libnccl built for a newer CUDA major than the driver's fails at
     * its first call; the next library may fit. A newer minor of the same
     * major runs (CUDA's minor-version compatibility, which NCCL follows),
     * so that one is taken. */
    nc.lib_self = dlsym(h, "ncclGetVersion");
    int cuda = built_for_cuda(path);
    if (driver && cuda / 1000 > driver / 1000) {
        snprintf(why, whylen, "NCCL %s was built for CUDA %d.%d, and the driver supports CUDA %d.%d (a newer "
                 "major than the driver's; install an NCCL for CUDA %d, or name one in CDDP_LIBNCCL)", path,
                 cuda / 1000, cuda % 1000 / 10, driver / 1000, driver % 1000 / 10, driver / 1000);
        memset(&nc, 0, sizeof nc);
        dlclose(h);
        return -1;
    }
    nc.lib = h;
    return 1;
}

int rt_nccl_load(int driver, int *version, char *why, size_t whylen)
{
    if (!nc.lib) {
        const char *env = getenv("CDDP_LIBNCCL");
        char first[512] = "";
        int r = 0;
        if (env && *env) {
            /* several, separated by ':': the first one that fits */
            char list[1024], *save = NULL;
            snprintf(list, sizeof list, "%s", env);
            for (char *t = strtok_r(list, ":", &save); t && r != 1; t = strtok_r(NULL, ":", &save)) {
                char w[512] = "";
                r = try_lib(t, driver, w, sizeof w);
                if (r < 0 && !*first)
                    snprintf(first, sizeof first, "%s", w);
            }
            if (r != 1) {
                if (*first)
                    snprintf(why, whylen, "%s", first);
                else
                    snprintf(why, whylen, "NCCL missing: cannot load CDDP_LIBNCCL=%s (%s)", env, dlerror());
                return -1;
            }
        } else {
            /* the loader's path, then the toolkit's homes (NCCL often
             * sits beside the CUDA libraries) */
            const char *homes[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
            for (int d = -1; r != 1 && d < 6; d++) {
                char path[300] = "libnccl.so.2", w[512] = "";
                if (d >= 0) {
                    const char *home = homes[d / 2];
                    if (!home || !*home)
                        continue;
                    snprintf(path, sizeof path, "%s/%s/libnccl.so.2", home, d % 2 ? "lib" : "lib64");
                }
                r = try_lib(path, driver, w, sizeof w);
                if (r < 0 && !*first)
                    snprintf(first, sizeof first, "%s", w);
            }
            if (r != 1) {
                if (*first)
                    snprintf(why, whylen, "%s", first);
                else
                    snprintf(why, whylen, "NCCL missing: cannot load libnccl.so.2 (install NCCL, add "
                             "its directory to LD_LIBRARY_PATH, or set CDDP_LIBNCCL)");
                return -1;
            }
        }
    }
    int v = 0;
    nc.ncclGetVersion(&v);
    *version = v;
    return 0;
}

int rt_nccl_init(rt_nccl *n, rt_cuda *cu)
{
    memset(n, 0, sizeof n[0]);
    nccl_id id;
    memset(&id, 0, sizeof id);
    if (rt_world.rank == 0 && NC_CHECK(nc.ncclGetUniqueId(&id)))
        return -1;      /* the caller aborts the job: the others wait in the broadcast */
    rt_comm_bcast_bytes(&id, sizeof id, "the NCCL id broadcast");
    nccl_comm c = NULL;
    if (NC_CHECK(nc.ncclCommInitRank(&c, rt_world.size, id, rt_world.rank)))
        return -1;
    n->comm = c;
    n->rank = rt_world.rank;
    n->size = rt_world.size;
    nc.ncclGetVersion(&n->version);
    /* One eager all-reduce, waited for, before anything is captured: NCCL
     * sets up its connections at a communicator's first collective, which
     * must not happen inside a CUDA graph capture (NCCL's advice for
     * graphs). It also shows a broken fabric here, not in the first step. */
    CUdeviceptr one = 0;
    int rc = rt_cuda_alloc(cu, &one, sizeof(float), "NCCL's first all-reduce") ||
             CU_CHECK(rt_cu.cuMemsetD32Async(one, 0, 1, cu->stream)) ||
             NC_CHECK(nc.ncclAllReduce((void *)(uintptr_t)one, (void *)(uintptr_t)one, 1, NCCL_FLOAT32,
                                       NCCL_SUM, c, cu->stream)) ||
             rt_cuda_wait(cu, "NCCL's first all-reduce (connecting the ranks)");
    rt_cuda_free(one);
    return rc ? -1 : 0;
}

/* ---- rt_coll over NCCL: device memory, on the stream given ---------------- */
static int nccl_reduce(rt_coll *c, void *x, int64_t n, int op, void *q, const char *what, int bucket)
{
    rt_nccl *nn = c->impl;
    int r = nc.ncclAllReduce(x, x, (size_t)n, NCCL_FLOAT32, op, nn->comm, (CUstream)q);
    if (r == NCCL_SUCCESS)
        return 0;
    if (bucket >= 0)
        rt_err("NCCL error %d (%s) enqueuing the all-reduce of bucket %d (%lld floats)", r, nc_text(r), bucket,
               (long long)n);
    else
        rt_err("NCCL error %d (%s) enqueuing %s (%lld floats)", r, nc_text(r), what, (long long)n);
    return -1;
}

static int nccl_bucket_avg(rt_coll *c, void *x, int64_t n, int bucket, void *q)
{
    return nccl_reduce(c, x, n, NCCL_AVG, q, "a gradient bucket", bucket);
}

static int nccl_sum_f32(rt_coll *c, void *x, int64_t n, const char *what, void *q)
{
    char w[160];
    snprintf(w, sizeof w, "the all-reduce after kernel %s", what);
    return nccl_reduce(c, x, n, NCCL_SUM, q, w, -1);
}

static int nccl_any(rt_coll *c, void *flag, void *q)
{
    return nccl_reduce(c, flag, 1, NCCL_SUM, q, "the loss scaler's found_inf all-reduce", -1);
}

static int nccl_bcast_f32(rt_coll *c, void *x, int64_t n, const char *what, void *q)
{
    rt_nccl *nn = c->impl;
    int r = nc.ncclBroadcast(x, x, (size_t)n, NCCL_FLOAT32, 0, nn->comm, (CUstream)q);
    if (r == NCCL_SUCCESS)
        return 0;
    rt_err("NCCL error %d (%s) enqueuing %s (%lld floats)", r, nc_text(r), what, (long long)n);
    return -1;
}

/* host scalars: over MPI, the world the communicator was made from */
static void nccl_sum_f64(rt_coll *c, double *x, int64_t n, const char *what)
{
    (void)c;
    rt_comm_sum_f64(x, n, what);
}

void rt_coll_nccl(rt_coll *c, rt_nccl *n)
{
    *c = (rt_coll){"nccl", n->rank, n->size, 1, n, nccl_bucket_avg, nccl_sum_f32, nccl_any, nccl_bcast_f32,
                   nccl_sum_f64};
}

int rt_nccl_check(void *arg, const char *what)
{
    rt_nccl *n = arg;
    if (!n || !n->comm)
        return 0;
    int async = NCCL_SUCCESS;
    int r = nc.ncclCommGetAsyncError(n->comm, &async);
    if (r == NCCL_SUCCESS && (async == NCCL_SUCCESS || async == NCCL_IN_PROGRESS))
        return 0;
    int e = r != NCCL_SUCCESS ? r : async;
    rt_err("NCCL failed while %s: error %d (%s); another rank may have failed", what, e, nc_text(e));
    n->broken = 1;
    return -1;
}

void rt_nccl_close(rt_nccl *n, int failed)
{
    if (!n || !n->comm)
        return;
    /* After an error the communicator may never drain: abort it, which
     * does not wait for the peers, instead of destroying it. */
    if (n->broken || failed)
        nc.ncclCommAbort(n->comm);
    else
        NC_CHECK(nc.ncclCommDestroy(n->comm));
    n->comm = NULL;
}
