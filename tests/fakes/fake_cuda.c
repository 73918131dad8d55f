/* fake_cuda.c: a stand-in for libcuda.so.1, for testing the runtime's
 * CUDA device without a GPU (tests/cuda/test_cuda_device.sh).
 *
 * It implements the driver API subset runtime/rt_cuda.c loads, with
 * "device memory" in host memory, and runs kernels through the CUDA
 * emulator tests/cuda/emu.h: the program's own NVRTC source (dumped with
 * CDDP_CUDA_DUMP) is compiled by g++ into a shared object with emu.h in
 * front, named by FAKE_CUDA_KERNELS, and cuLaunchKernel calls the kernel
 * of that name over the requested grid. So the whole device loop -- graph
 * capture and replay, the runtime's step_begin/step_end kernels, the
 * model's kernels, the copies -- runs for real, on the CPU.
 *
 * It is stricter than a real driver where a real driver would be
 * unforgiving later or elsewhere:
 *   - every call but the version/error queries needs cuInit first, and
 *     memory, stream and module calls a current context;
 *   - during stream capture only kernel launches, memsets and async copies
 *     from pinned memory are allowed (anything else invalidates the
 *     capture, as CUDA's rules do for the calls it cannot capture);
 *   - copies and memsets must lie inside one allocation, kernel arguments
 *     must point into device memory, launch geometry must be valid;
 *   - cuModuleLoadData wants an ELF image (a CUBIN) that names each kernel
 *     asked for by cuModuleGetFunction.
 *   - capture follows CUDA's fork/join rules: an event recorded in a
 *     capturing stream and waited for by another stream pulls that stream
 *     into the capture; every such stream must be joined back into the
 *     origin stream before cuStreamEndCapture (else
 *     CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
 * Violations print "fake cuda: ..." on stderr and return an error code.
 * Execution is synchronous: an operation has finished when its call
 * returns (unless FAKE_CUDA_HANG is set: then a stream never completes).
 * A graph is a set of nodes with dependencies, replayed in a random
 * topological order (FAKE_CUDA_SCHEDULE: random, the default; late: host
 * operations such as the fake NCCL's all-reduces as late as their
 * dependencies allow; early: as early), so a missing event wait between
 * streams changes the results instead of passing by luck.
 * FAKE_CUDA_DROP_WAITS ignores every cuStreamWaitEvent edge: a planted bug
 * for the tests to catch. fake_nccl.c adds host operations (all-reduces)
 * through fake_cuda_host_op.
 *
 * Environment: FAKE_CUDA_KERNELS (path of the emulated kernels .so),
 * FAKE_CUDA_INIT_ERROR (cuInit returns this code), FAKE_CUDA_DEVICES
 * (the node's GPUs, default 1; CUDA_VISIBLE_DEVICES selects among them as
 * the real driver does: a comma-separated list of their numbers, cut at
 * the first invalid entry, the process's device i being the list's i-th;
 * each GPU has its own PCI bus id), FAKE_CUDA_DRIVER (cuDriverGetVersion, default 13000),
 * FAKE_CUDA_CC (compute capability, default 90), FAKE_CUDA_MEM (device
 * bytes, default 4 GiB), FAKE_CUDA_HANG, FAKE_CUDA_LOG (print every call),
 * FAKE_CUDA_SCHEDULE, FAKE_CUDA_SEED (of the random schedule),
 * FAKE_CUDA_DROP_WAITS. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0, E_VALUE = 1, E_OOM = 2, E_NOT_INIT = 3, E_NO_DEVICE = 100, E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200, E_CONTEXT = 201, E_HANDLE = 400, E_NOT_FOUND = 500, E_NOT_READY = 600,
    E_LAUNCH_FAILED = 719, E_CAPTURE_UNSUPPORTED = 900, E_CAPTURE_INVALIDATED = 901,
    E_CAPTURE_UNJOINED = 904, E_CAPTURE_ISOLATION = 905,
};

static const struct { int code; const char *name, *text; } errs[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {E_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {E_OOM, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {E_NOT_INIT, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {E_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {E_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {E_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {E_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {E_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {E_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {E_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {E_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {E_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {E_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {E_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capture sequence contains a fork that was not joined to the primary stream"},
    {E_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
};

/* ---- state ------------------------------------------------------------------ */
typedef struct alloc { char *p; size_t n; int pinned; struct alloc *next; } alloc;

enum { OP_KERNEL, OP_MEMSET, OP_COPY, OP_HOST };
typedef struct op {
    int kind;
    int (*host)(void *);    /* OP_HOST: a host function (the fake NCCL's) */
    void *harg;
    void *fn;               /* kernel */
    const char *name;
    unsigned grid[3], block[3];
    void *arg;
    char *dst;              /* memset / copy */
    const char *src;
    size_t n;
    unsigned value;
} op;

/* A graph node: an operation and the nodes it must follow. */
typedef struct node { op o; int *dep; int ndep; } node;
typedef struct nodelist { node *v; size_t n, cap; } nodelist;

/* A capture in progress: its nodes, the stream it began on, and every
 * stream that joined it (by waiting for an event recorded in it). */
enum { MAX_MEMBERS = 16 };
typedef struct capture {
    nodelist nodes;
    struct CUstream_st *origin;
    struct CUstream_st *member[MAX_MEMBERS];
    int nmember, invalid;
} capture;

/* While capturing, a stream's next node depends on deps (its last node,
 * or the nodes of the events it waited for). */
struct CUstream_st { capture *cap; int *deps; int ndeps; };
struct CUgraph_st { nodelist nodes; };
struct CUgraphExec_st { nodelist nodes; };
struct CUevent_st { double t; int recorded; capture *cap; int *nodes; int nn; };
struct CUfunc_st { void *fn; char name[128]; };
struct CUmod_st { int loaded; char *image; size_t len; };
struct CUctx_st { int dummy; };

static int inited, ctx_current, failed_sticky, logging = -1;
enum { MAX_DEV = 8 };
static struct CUctx_st the_ctx[MAX_DEV];
static int cur_dev = -1;            /* device of the current context */
static int ndev(void);
static alloc *allocs;
static size_t used, mem_limit;
static void *kernels_so;
static int (*emu_run)(void *fn, const unsigned *grid, const unsigned *block, void *arg, const char *name);

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fake cuda: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void trace(const char *fn)
{
    if (logging < 0)
        logging = getenv("FAKE_CUDA_LOG") != NULL;
    if (logging)
        fprintf(stderr, "fake cuda: %s\n", fn);
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 0) : dflt;
}

#define NEED_INIT()                                                                      \
    do {                                                                                 \
        trace(__func__);                                                                 \
        if (!inited)                                                                     \
            return E_NOT_INIT;                                                           \
    } while (0)
#define NEED_CTX()                                                                       \
    do {                                                                                 \
        NEED_INIT();                                                                     \
        if (!ctx_current) {                                                              \
            say("%s without a current context", __func__);                              \
            return E_CONTEXT;                                                            \
        }                                                                                \
    } while (0)

static alloc *find(const void *p, size_t n, int pinned)
{
    for (alloc *a = allocs; a; a = a->next)
        if (a->pinned == pinned && (const char *)p >= a->p && (const char *)p + n <= a->p + a->n)
            return a;
    return NULL;
}

/* The capture in progress, if any (the runtime captures from one thread;
 * CUDA's thread-local rule is then about that one capture). */
static capture *active_cap;

static CUresult not_while_capturing(const char *fn)
{
    if (active_cap) {
        say("%s called during stream capture", fn);
        active_cap->invalid = 1;
        return E_CAPTURE_UNSUPPORTED;
    }
    return OK;
}

static int *dup_ints(const int *a, int n)
{
    int *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    if (b && n)
        memcpy(b, a, (size_t)n * sizeof *b);
    return b;
}

/* Appends a node after the stream's deps; it becomes the stream's tail. */
static int push(struct CUstream_st *s, const op *o)
{
    nodelist *l = &s->cap->nodes;
    if (l->n == l->cap) {
        size_t c = l->cap ? 2 * l->cap : 16;
        node *v = realloc(l->v, c * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = c;
    }
    node *nd = &l->v[l->n];
    nd->o = *o;
    nd->ndep = s->ndeps;
    if (!(nd->dep = dup_ints(s->deps, s->ndeps)))
        return -1;
    int id = (int)l->n++;
    free(s->deps);
    if (!(s->deps = dup_ints(&id, 1)))
        return -1;
    s->ndeps = 1;
    return 0;
}

static void join(capture *c, struct CUstream_st *s)
{
    for (int i = 0; i < c->nmember; i++)
        if (c->member[i] == s)
            return;
    if (c->nmember < MAX_MEMBERS)
        c->member[c->nmember++] = s;
    else
        c->invalid = 1;
    s->cap = c;
}

static void leave(struct CUstream_st *s)
{
    s->cap = NULL;
    free(s->deps);
    s->deps = NULL;
    s->ndeps = 0;
}

static void free_nodes(nodelist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].dep);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static CUresult run_op(const op *o)
{
    switch (o->kind) {
    case OP_MEMSET:
        for (size_t i = 0; i < o->n; i++)
            memcpy(o->dst + 4 * i, &o->value, 4);
        return OK;
    case OP_COPY:
        memmove(o->dst, o->src, o->n);
        return OK;
    case OP_HOST:
        if (o->host(o->harg) != 0) {
            say("host operation %s failed", o->name);
            failed_sticky = E_LAUNCH_FAILED;
            return E_LAUNCH_FAILED;
        }
        return OK;
    default:
        if (!emu_run) {
            say("no emulated kernels: set FAKE_CUDA_KERNELS");
            failed_sticky = E_LAUNCH_FAILED;
            return E_LAUNCH_FAILED;
        }
        if (emu_run(o->fn, o->grid, o->block, o->arg, o->name) != 0) {
            say("kernel %s failed in the emulator", o->name);
            failed_sticky = E_LAUNCH_FAILED;
            return E_LAUNCH_FAILED;
        }
        return OK;
    }
}

/* A stream operation: recorded while capturing, else run now. */
static CUresult enqueue(struct CUstream_st *s, const op *o)
{
    if (!s) {
        say("operation on the legacy default stream (the runtime uses its own)");
        return E_HANDLE;
    }
    if (s->cap)
        return push(s, o) ? E_OOM : OK;
    if (failed_sticky)
        return failed_sticky;
    return run_op(o);
}

/* ---- initialization, device ----------------------------------------------------- */
CUresult cuInit(unsigned flags)
{
    trace(__func__);
    if (flags)
        return E_VALUE;
    long e = env_long("FAKE_CUDA_INIT_ERROR", 0);
    if (e)
        return (CUresult)e;
    if (ndev() < 1)
        return E_NO_DEVICE;
    mem_limit = (size_t)env_long("FAKE_CUDA_MEM", 4L << 30);
    inited = 1;
    return OK;
}

CUresult cuDriverGetVersion(int *v)
{
    trace(__func__);
    *v = (int)env_long("FAKE_CUDA_DRIVER", 13000);
    return OK;
}

CUresult cuGetErrorName(CUresult r, const char **s)
{
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].code == r) {
            *s = errs[i].name;
            return OK;
        }
    *s = NULL;
    return E_VALUE;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].code == r) {
            *s = errs[i].text;
            return OK;
        }
    *s = NULL;
    return E_VALUE;
}

/* The node's GPUs this process sees: phys[i] is the GPU behind device i. */
static int visible(int phys[MAX_DEV])
{
    long n = env_long("FAKE_CUDA_DEVICES", 1);
    int all = n < 0 ? 0 : n > MAX_DEV ? MAX_DEV : (int)n;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v) {
        for (int i = 0; i < all; i++)
            phys[i] = i;
        return all;
    }
    int k = 0;
    while (*v && k < MAX_DEV) {
        char *end;
        long x = strtol(v, &end, 10);
        if (end == v || x < 0 || x >= all)
            break;                  /* the driver ignores the rest of the list */
        int dup = 0;
        for (int i = 0; i < k; i++)
            dup |= phys[i] == x;
        if (dup)
            break;
        phys[k++] = (int)x;
        if (*end != ',')
            break;
        v = end + 1;
    }
    return k;
}

static int ndev(void)
{
    int phys[MAX_DEV];
    return visible(phys);
}

CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    *n = ndev();
    return OK;
}

CUresult cuDeviceGet(int *d, int ordinal)
{
    NEED_INIT();
    if (ordinal < 0 || ordinal >= ndev())
        return E_INVALID_DEVICE;
    *d = ordinal;
    return OK;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, int d)
{
    NEED_INIT();
    int phys[MAX_DEV];
    if (d < 0 || d >= visible(phys) || len < 13)
        return E_VALUE;
    snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + phys[d]);
    return OK;
}

CUresult cuDeviceGetName(char *name, int len, int d)
{
    NEED_INIT();
    if (d < 0 || d >= ndev() || len < 1)
        return E_VALUE;
    const char *as = getenv("FAKE_CUDA_NAME");   /* a real GPU's name, for the header's checks */
    snprintf(name, (size_t)len, "%s", as && *as ? as : "Fake GPU (emulated)");
    return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
    NEED_INIT();
    if (d < 0 || d >= ndev())
        return E_INVALID_DEVICE;
    long cc = env_long("FAKE_CUDA_CC", 90);
    if (attr == 75)
        *v = (int)(cc / 10);
    else if (attr == 76)
        *v = (int)(cc % 10);
    else if (attr == 1)
        *v = 1024;
    else
        return E_VALUE;
    return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *b, int d)
{
    NEED_INIT();
    if (d < 0 || d >= ndev())
        return E_INVALID_DEVICE;
    *b = mem_limit;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(struct CUctx_st **c, int d)
{
    NEED_INIT();
    if (d < 0 || d >= ndev())
        return E_INVALID_DEVICE;
    *c = &the_ctx[d];
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
    NEED_INIT();
    ctx_current = 0;
    cur_dev = -1;
    return d >= 0 && d < ndev() ? OK : E_INVALID_DEVICE;
}

CUresult cuCtxSetCurrent(struct CUctx_st *c)
{
    NEED_INIT();
    if (c && (c < the_ctx || c >= the_ctx + ndev()))
        return E_CONTEXT;
    ctx_current = c != NULL;
    cur_dev = c ? (int)(c - the_ctx) : -1;
    return OK;
}

/* For fake_nccl.c: the physical GPU the calling rank works on, -1 for
 * none (NCCL tells GPUs apart by bus id, whatever each process sees). */
int fake_cuda_current_device(void)
{
    int phys[MAX_DEV];
    return ctx_current && cur_dev >= 0 && cur_dev < visible(phys) ? phys[cur_dev] : -1;
}

/* ---- modules ------------------------------------------------------------------------ */
CUresult cuModuleLoadData(struct CUmod_st **m, const void *image)
{
    NEED_CTX();
    if (not_while_capturing(__func__))
        return E_CAPTURE_UNSUPPORTED;
    if (!image || memcmp(image, "\177ELF", 4) != 0) {
        say("cuModuleLoadData: image is not an ELF CUBIN");
        return E_INVALID_IMAGE;
    }
    /* The image's size is not passed: take it from the ELF headers (the
     * end of the section header table or of the last section). */
    const unsigned char *e = image;
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, e + 0x28, 8);
    memcpy(&shentsize, e + 0x3a, 2);
    memcpy(&shnum, e + 0x3c, 2);
    if (e[4] != 2 || shentsize < 0x28 || shoff > ((uint64_t)1 << 31)) {
        say("cuModuleLoadData: not a 64-bit ELF image");
        return E_INVALID_IMAGE;
    }
    uint64_t size = shoff + (uint64_t)shentsize * shnum;
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *sh = e + shoff + (uint64_t)i * shentsize;
        uint32_t type;
        uint64_t off, sz;
        memcpy(&type, sh + 4, 4);
        memcpy(&off, sh + 0x18, 8);
        memcpy(&sz, sh + 0x20, 8);
        if (type != 8 && off + sz > size)     /* SHT_NOBITS occupies no file space */
            size = off + sz;
    }
    if (size > ((uint64_t)1 << 31)) {
        say("cuModuleLoadData: implausible ELF image size");
        return E_INVALID_IMAGE;
    }
    struct CUmod_st *mod = calloc(1, sizeof *mod);
    if (!mod || !(mod->image = malloc(size))) {
        free(mod);
        return E_OOM;
    }
    memcpy(mod->image, image, size);
    mod->len = size;
    mod->loaded = 1;
    if (!kernels_so) {
        const char *path = getenv("FAKE_CUDA_KERNELS");
        if (path && *path) {
            kernels_so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (!kernels_so)
                say("cannot load FAKE_CUDA_KERNELS=%s: %s", path, dlerror());
            else {
                void *f = dlsym(kernels_so, "fake_emu_launch");
                memcpy(&emu_run, &f, sizeof f);
            }
        }
    }
    *m = mod;
    return OK;
}

CUresult cuModuleUnload(struct CUmod_st *m)
{
    NEED_CTX();
    if (!m || !m->loaded)
        return E_HANDLE;
    free(m->image);
    free(m);
    return OK;
}

CUresult cuModuleGetFunction(struct CUfunc_st **f, struct CUmod_st *m, const char *name)
{
    NEED_CTX();
    if (!m || !m->loaded)
        return E_HANDLE;
    size_t nl = strlen(name);
    if (!memmem(m->image, m->len, name, nl))
        return E_NOT_FOUND;
    struct CUfunc_st *fn = calloc(1, sizeof *fn);
    if (!fn)
        return E_OOM;
    snprintf(fn->name, sizeof fn->name, "%s", name);
    fn->fn = kernels_so ? dlsym(kernels_so, name) : NULL;
    if (kernels_so && !fn->fn) {
        say("kernel %s is in the CUBIN but not in FAKE_CUDA_KERNELS", name);
        free(fn);
        return E_NOT_FOUND;
    }
    *f = fn;    /* leaked on purpose: function handles live as long as the module */
    return OK;
}

CUresult cuFuncGetAttribute(int *v, int attr, struct CUfunc_st *f)
{
    NEED_CTX();
    if (!f)
        return E_HANDLE;
    switch (attr) {
    case 0: *v = 1024; return OK;     /* MAX_THREADS_PER_BLOCK */
    case 1: case 3: *v = 0; return OK; /* SHARED_SIZE_BYTES, LOCAL_SIZE_BYTES */
    case 4: *v = 32; return OK;       /* NUM_REGS */
    default: return E_VALUE;
    }
}

/* ---- memory --------------------------------------------------------------------------- */
CUresult cuMemGetInfo_v2(size_t *fr, size_t *tot)
{
    NEED_CTX();
    *fr = mem_limit - used;
    *tot = mem_limit;
    return OK;
}

static CUresult do_alloc(void **p, size_t n, int pinned)
{
    if (not_while_capturing(pinned ? "cuMemAllocHost" : "cuMemAlloc"))
        return E_CAPTURE_UNSUPPORTED;
    if (n == 0)
        return E_VALUE;
    if (!pinned && used + n > mem_limit)
        return E_OOM;
    alloc *a = malloc(sizeof *a);
    /* fill fresh device memory with garbage, as a GPU may */
    char *mem = malloc(n);
    if (!a || !mem) {
        free(a);
        free(mem);
        return E_OOM;
    }
    memset(mem, pinned ? 0 : 0xa5, n);
    a->p = mem;
    a->n = n;
    a->pinned = pinned;
    a->next = allocs;
    allocs = a;
    if (!pinned)
        used += n;
    *p = mem;
    return OK;
}

static CUresult do_free(void *p, int pinned)
{
    if (not_while_capturing(pinned ? "cuMemFreeHost" : "cuMemFree"))
        return E_CAPTURE_UNSUPPORTED;
    for (alloc **pp = &allocs; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p && (*pp)->pinned == pinned) {
            alloc *a = *pp;
            *pp = a->next;
            if (!pinned)
                used -= a->n;
            free(a->p);
            free(a);
            return OK;
        }
    say("free of %p, which is not a %s allocation", p, pinned ? "pinned" : "device");
    return E_VALUE;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    NEED_CTX();
    void *q = NULL;
    CUresult r = do_alloc(&q, n, 0);
    *p = (CUdeviceptr)(uintptr_t)q;
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
    NEED_CTX();
    return do_free((void *)(uintptr_t)p, 0);
}

CUresult cuMemAllocHost_v2(void **p, size_t n)
{
    NEED_CTX();
    return do_alloc(p, n, 1);
}

CUresult cuMemFreeHost(void *p)
{
    NEED_CTX();
    return do_free(p, 1);
}

static CUresult copy(char *dst, int dst_dev, const char *src, int src_dev, size_t n,
                     struct CUstream_st *s, const char *fn)
{
    if (n == 0)
        return OK;
    const char *dev = dst_dev ? dst : src, *host = dst_dev ? src : dst;
    if (!find(dev, n, 0)) {
        say("%s: %zu bytes at device address %p are not inside one allocation", fn, n, (void *)dev);
        return E_VALUE;
    }
    if (s && s->cap && !find(host, n, 1)) {
        say("%s during capture from/to pageable host memory", fn);
        s->cap->invalid = 1;
        return E_CAPTURE_UNSUPPORTED;
    }
    (void)src_dev;
    op o = {.kind = OP_COPY, .dst = dst, .src = src, .n = n};
    return enqueue(s, &o);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, struct CUstream_st *s)
{
    NEED_CTX();
    return copy((char *)(uintptr_t)dst, 1, src, 0, n, s, __func__);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct CUstream_st *s)
{
    NEED_CTX();
    return copy(dst, 0, (const char *)(uintptr_t)src, 1, n, s, __func__);
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, struct CUstream_st *s)
{
    NEED_CTX();
    char *p = (char *)(uintptr_t)dst;
    if (n == 0)
        return OK;
    if ((uintptr_t)p % 4 || !find(p, 4 * n, 0)) {
        say("cuMemsetD32Async: %zu words at %p are not inside one allocation (or misaligned)", n, (void *)p);
        return E_VALUE;
    }
    op o = {.kind = OP_MEMSET, .dst = p, .n = n, .value = v};
    return enqueue(s, &o);
}

/* ---- streams, events ------------------------------------------------------------------------- */
CUresult cuStreamCreate(struct CUstream_st **s, unsigned flags)
{
    NEED_CTX();
    if (flags != 1)
        say("cuStreamCreate: flags %u (the runtime asks for CU_STREAM_NON_BLOCKING)", flags);
    *s = calloc(1, sizeof **s);
    return *s ? OK : E_OOM;
}

CUresult cuStreamDestroy_v2(struct CUstream_st *s)
{
    NEED_CTX();
    if (!s)
        return E_HANDLE;
    if (s->cap)
        say("stream destroyed while capturing");
    free(s->deps);
    free(s);
    return OK;
}

/* What a query of finished work says: work is synchronous here, so done,
 * unless an earlier failure is sticky or FAKE_CUDA_HANG holds it back. */
static CUresult completion(void)
{
    if (failed_sticky)
        return failed_sticky;
    return getenv("FAKE_CUDA_HANG") ? E_NOT_READY : OK;
}

CUresult cuStreamQuery(struct CUstream_st *s)
{
    NEED_CTX();
    if (!s)
        return E_HANDLE;
    if (s->cap) {
        say("cuStreamQuery on a capturing stream");
        s->cap->invalid = 1;
        return E_CAPTURE_UNSUPPORTED;
    }
    return completion();
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

CUresult cuEventCreate(struct CUevent_st **e, unsigned flags)
{
    NEED_CTX();
    if (not_while_capturing(__func__))
        return E_CAPTURE_UNSUPPORTED;
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e ? OK : E_OOM;
}

CUresult cuEventDestroy_v2(struct CUevent_st *e)
{
    NEED_CTX();
    if (e)
        free(e->nodes);
    free(e);
    return OK;
}

/* In a capture an event stands for the recording stream's tail nodes;
 * outside one, work is synchronous, so it is complete at once. */
CUresult cuEventRecord(struct CUevent_st *e, struct CUstream_st *s)
{
    NEED_CTX();
    if (!e || !s)
        return E_HANDLE;
    free(e->nodes);
    e->nodes = NULL;
    e->nn = 0;
    e->cap = s->cap;
    if (s->cap) {
        if (!(e->nodes = dup_ints(s->deps, s->ndeps)))
            return E_OOM;
        e->nn = s->ndeps;
        e->recorded = 0;        /* a capture node, not a timing point */
        return OK;
    }
    e->t = now();
    e->recorded = 1;
    return OK;
}

CUresult cuEventQuery(struct CUevent_st *e)
{
    NEED_CTX();
    if (!e)
        return E_HANDLE;
    if (e->cap && e->cap == active_cap) {
        say("cuEventQuery on an event of the capture in progress");
        active_cap->invalid = 1;
        return E_CAPTURE_UNSUPPORTED;
    }
    return completion();
}

/* Waiting for an event of a capture pulls the stream into that capture
 * (a fork) or adds the event's nodes to its dependencies (a join). */
CUresult cuStreamWaitEvent(struct CUstream_st *s, struct CUevent_st *e, unsigned flags)
{
    NEED_CTX();
    if (!s || !e)
        return E_HANDLE;
    if (flags)
        return E_VALUE;
    if (!e->cap || e->cap != active_cap) {
        if (s->cap) {
            say("cuStreamWaitEvent: a capturing stream waits for an event recorded outside the capture");
            s->cap->invalid = 1;
            return E_CAPTURE_ISOLATION;
        }
        return OK;              /* synchronous: that work is done */
    }
    if (s->cap && s->cap != e->cap)
        return E_CAPTURE_ISOLATION;
    if (!s->cap)
        join(e->cap, s);
    if (getenv("FAKE_CUDA_DROP_WAITS"))
        return OK;              /* the planted bug: the edge is lost */
    int *d = realloc(s->deps, (size_t)(s->ndeps + e->nn + 1) * sizeof *d);
    if (!d)
        return E_OOM;
    memcpy(d + s->ndeps, e->nodes, (size_t)e->nn * sizeof *d);
    s->deps = d;
    s->ndeps += e->nn;
    return OK;
}

CUresult cuEventElapsedTime(float *ms, struct CUevent_st *a, struct CUevent_st *b)
{
    NEED_CTX();
    if (!a || !b || !a->recorded || !b->recorded)
        return E_HANDLE;
    *ms = (float)((b->t - a->t) * 1e3);
    return OK;
}

/* ---- graphs ------------------------------------------------------------------------------------ */
CUresult cuStreamBeginCapture_v2(struct CUstream_st *s, int mode)
{
    NEED_CTX();
    if (!s)
        return E_HANDLE;
    if (s->cap || active_cap)
        return E_CAPTURE_UNSUPPORTED;
    if (mode < 0 || mode > 2)
        return E_VALUE;
    capture *c = calloc(1, sizeof *c);
    if (!c)
        return E_OOM;
    c->origin = s;
    join(c, s);
    active_cap = c;
    return OK;
}

/* marks every ancestor of the nodes in `from` (themselves included) */
static void mark_ancestors(const nodelist *l, const int *from, int n, char *seen)
{
    for (int i = 0; i < n; i++) {
        int v = from[i];
        if (seen[v])
            continue;
        seen[v] = 1;
        mark_ancestors(l, l->v[v].dep, l->v[v].ndep, seen);
    }
}

CUresult cuStreamEndCapture(struct CUstream_st *s, struct CUgraph_st **g)
{
    NEED_CTX();
    if (!s || !s->cap)
        return E_VALUE;
    capture *c = s->cap;
    *g = NULL;
    if (c->origin != s) {
        say("cuStreamEndCapture on a stream that joined the capture, not the one that began it");
        c->invalid = 1;
    }
    /* every forked stream's tail must be an ancestor of the origin's
     * (not checkable when the planted bug has dropped the edges) */
    char *seen = calloc(c->nodes.n + 1, 1);
    CUresult r = seen ? OK : E_OOM;
    if (seen && getenv("FAKE_CUDA_DROP_WAITS"))
        memset(seen, 1, c->nodes.n + 1);
    else if (seen)
        mark_ancestors(&c->nodes, c->origin->deps, c->origin->ndeps, seen);
    for (int i = 0; r == OK && i < c->nmember; i++) {
        struct CUstream_st *m = c->member[i];
        for (int k = 0; k < m->ndeps; k++)
            if (!seen[m->deps[k]]) {
                say("cuStreamEndCapture: a forked stream's work is not joined back into the origin stream");
                r = E_CAPTURE_UNJOINED;
                break;
            }
    }
    free(seen);
    for (int i = 0; i < c->nmember; i++)
        leave(c->member[i]);
    active_cap = NULL;
    if (r == OK && c->invalid)
        r = E_CAPTURE_INVALIDATED;
    struct CUgraph_st *gr = r == OK ? calloc(1, sizeof *gr) : NULL;
    if (r == OK && !gr)
        r = E_OOM;
    if (r != OK) {
        free_nodes(&c->nodes);
        free(c);
        return r;
    }
    gr->nodes = c->nodes;
    free(c);
    *g = gr;
    return OK;
}

static int copy_nodes(nodelist *dst, const nodelist *src)
{
    dst->n = dst->cap = src->n;
    dst->v = calloc(src->n ? src->n : 1, sizeof(node));
    if (!dst->v)
        return -1;
    for (size_t i = 0; i < src->n; i++) {
        dst->v[i] = src->v[i];
        if (!(dst->v[i].dep = dup_ints(src->v[i].dep, src->v[i].ndep)))
            return -1;
    }
    return 0;
}

CUresult cuGraphInstantiateWithFlags(struct CUgraphExec_st **x, struct CUgraph_st *g, unsigned long long fl)
{
    NEED_CTX();
    if (!g || fl)
        return E_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e)
        return E_OOM;
    if (copy_nodes(&e->nodes, &g->nodes) != 0) {
        free_nodes(&e->nodes);
        free(e);
        return E_OOM;
    }
    *x = e;
    return OK;
}

CUresult cuGraphDestroy(struct CUgraph_st *g)
{
    NEED_CTX();
    if (!g)
        return E_HANDLE;
    free_nodes(&g->nodes);
    free(g);
    return OK;
}

CUresult cuGraphExecDestroy(struct CUgraphExec_st *x)
{
    NEED_CTX();
    if (!x)
        return E_HANDLE;
    free_nodes(&x->nodes);
    free(x);
    return OK;
}

CUresult cuGraphUpload(struct CUgraphExec_st *x, struct CUstream_st *s)
{
    NEED_CTX();
    if (!x || !s)
        return E_HANDLE;
    if (s->cap)
        return E_CAPTURE_UNSUPPORTED;
    return OK;
}

/* xorshift64*, seeded by FAKE_CUDA_SEED: the schedule is repeatable */
static uint64_t sched_state;
static uint64_t sched_next(void)
{
    if (!sched_state)
        sched_state = (uint64_t)env_long("FAKE_CUDA_SEED", 12345) * 2654435761u + 1;
    sched_state ^= sched_state >> 12;
    sched_state ^= sched_state << 25;
    sched_state ^= sched_state >> 27;
    return sched_state * 2685821657736338717ull;
}

/* Which ready node runs next: random, or host operations last/first. */
static size_t pick(const nodelist *l, const size_t *ready, size_t nready)
{
    const char *mode = getenv("FAKE_CUDA_SCHEDULE");
    int want_host = -1;
    if (mode && !strcmp(mode, "late"))
        want_host = 0;
    else if (mode && !strcmp(mode, "early"))
        want_host = 1;
    if (want_host >= 0)
        for (size_t i = 0; i < nready; i++)
            if ((l->v[ready[i]].o.kind == OP_HOST) == want_host)
                return i;
    return (size_t)(sched_next() % nready);
}

/* Runs the nodes in a topological order chosen by pick. */
static CUresult run_graph(const nodelist *l, struct CUstream_st *s)
{
    size_t n = l->n, nready = 0;
    int *left = calloc(n + 1, sizeof *left);
    size_t *ready = calloc(n + 1, sizeof *ready);
    char *done = calloc(n + 1, 1);
    CUresult r = left && ready && done ? OK : E_OOM;
    for (size_t i = 0; r == OK && i < n; i++)
        if ((left[i] = l->v[i].ndep) == 0)
            ready[nready++] = i;
    for (size_t ran = 0; r == OK && ran < n; ran++) {
        if (!nready) {
            say("graph has a dependency cycle");
            r = E_VALUE;
            break;
        }
        size_t k = pick(l, ready, nready), v = ready[k];
        ready[k] = ready[--nready];
        r = enqueue(s, &l->v[v].o);
        done[v] = 1;
        /* wake the nodes whose last dependency this was */
        for (size_t j = 0; r == OK && j < n; j++) {
            if (done[j] || left[j] == 0)
                continue;
            for (int q = 0; q < l->v[j].ndep; q++)
                if ((size_t)l->v[j].dep[q] == v && --left[j] == 0)
                    ready[nready++] = j;
        }
    }
    free(left);
    free(ready);
    free(done);
    return r;
}

CUresult cuGraphLaunch(struct CUgraphExec_st *x, struct CUstream_st *s)
{
    NEED_CTX();
    if (!x || !s)
        return E_HANDLE;
    if (s->cap) {
        say("cuGraphLaunch into a capturing stream");
        return E_CAPTURE_UNSUPPORTED;
    }
    return run_graph(&x->nodes, s);
}

/* For fake_nccl.c: a host function as a stream operation (a graph node
 * while capturing); bytes at dev must lie inside one device allocation. */
CUresult fake_cuda_host_op(struct CUstream_st *s, int (*fn)(void *), void *arg, const void *dev,
                           size_t bytes, const char *name)
{
    if (!inited || !ctx_current)
        return E_CONTEXT;
    if (bytes && !find(dev, bytes, 0)) {
        say("%s: %zu bytes at %p are not inside one device allocation", name, bytes, dev);
        return E_VALUE;
    }
    op o = {.kind = OP_HOST, .host = fn, .harg = arg, .name = name};
    return enqueue(s, &o);
}

CUresult cuLaunchKernel(struct CUfunc_st *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, struct CUstream_st *s, void **params, void **extra)
{
    NEED_CTX();
    if (!f)
        return E_HANDLE;
    unsigned long long t = (unsigned long long)bx * by * bz;
    if (!gx || !gy || !gz || !t || t > 1024 || bz > 64 || gy > 65535 || gz > 65535 || shared) {
        say("kernel %s: bad launch <<<(%u,%u,%u), (%u,%u,%u), %u>>>", f->name, gx, gy, gz, bx, by, bz, shared);
        return E_VALUE;
    }
    if (!params || extra) {
        say("kernel %s: launched without kernelParams", f->name);
        return E_VALUE;
    }
    CUdeviceptr arg;
    memcpy(&arg, params[0], sizeof arg);
    if (!find((void *)(uintptr_t)arg, 8, 0)) {
        say("kernel %s: argument %#llx is not a device pointer", f->name, arg);
        return E_VALUE;
    }
    op o = {.kind = OP_KERNEL, .fn = f->fn, .name = f->name, .grid = {gx, gy, gz}, .block = {bx, by, bz},
            .arg = (void *)(uintptr_t)arg};
    return enqueue(s, &o);
}

/* For fake_nccl.c: whether s is being captured (NCCL's first collective
 * on a communicator must not be: it connects the ranks then). */
int fake_cuda_stream_capturing(struct CUstream_st *s) { return s && s->cap; }
