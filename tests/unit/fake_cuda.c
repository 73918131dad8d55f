/* fake_cuda.c: a stand-in for libcuda.so.1, for testing the runtime's
 * CUDA device without a GPU (tests/unit/test_cuda_device.sh).
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
 * Violations print "fake cuda: ..." on stderr and return an error code.
 * Execution is synchronous: an operation has finished when its call
 * returns (unless FAKE_CUDA_HANG is set: then a stream never completes).
 *
 * Environment: FAKE_CUDA_KERNELS (path of the emulated kernels .so),
 * FAKE_CUDA_INIT_ERROR (cuInit returns this code), FAKE_CUDA_DEVICES
 * (default 1), FAKE_CUDA_DRIVER (cuDriverGetVersion, default 13000),
 * FAKE_CUDA_CC (compute capability, default 90), FAKE_CUDA_MEM (device
 * bytes, default 4 GiB), FAKE_CUDA_HANG, FAKE_CUDA_LOG (print every call). */
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
};

/* ---- state ------------------------------------------------------------------ */
typedef struct alloc { char *p; size_t n; int pinned; struct alloc *next; } alloc;

enum { OP_KERNEL, OP_MEMSET, OP_COPY };
typedef struct op {
    int kind;
    void *fn;               /* kernel */
    const char *name;
    unsigned grid[3], block[3];
    void *arg;
    char *dst;              /* memset / copy */
    const char *src;
    size_t n;
    unsigned value;
} op;

typedef struct oplist { op *v; size_t n, cap; } oplist;

struct CUstream_st { int capturing, invalid; oplist ops; };
struct CUgraph_st { oplist ops; };
struct CUgraphExec_st { oplist ops; };
struct CUevent_st { double t; int recorded; };
struct CUfunc_st { void *fn; char name[128]; };
struct CUmod_st { int loaded; char *image; size_t len; };
struct CUctx_st { int dummy; };

static int inited, ctx_current, failed_sticky, logging = -1;
static struct CUctx_st the_ctx;
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

/* Any stream capturing? (the runtime has one stream; CUDA's rule in
 * thread-local mode is about this thread's captures, which is the same) */
static struct CUstream_st *capturing_stream;

static CUresult not_while_capturing(const char *fn)
{
    if (capturing_stream) {
        say("%s called during stream capture", fn);
        capturing_stream->invalid = 1;
        return E_CAPTURE_UNSUPPORTED;
    }
    return OK;
}

static int push(oplist *l, const op *o)
{
    if (l->n == l->cap) {
        size_t c = l->cap ? 2 * l->cap : 16;
        op *v = realloc(l->v, c * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = *o;
    return 0;
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
    if (s->capturing)
        return push(&s->ops, o) ? E_OOM : OK;
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
    if (env_long("FAKE_CUDA_DEVICES", 1) < 1)
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

CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    *n = (int)env_long("FAKE_CUDA_DEVICES", 1);
    return OK;
}

CUresult cuDeviceGet(int *d, int ordinal)
{
    NEED_INIT();
    if (ordinal < 0 || ordinal >= env_long("FAKE_CUDA_DEVICES", 1))
        return E_INVALID_DEVICE;
    *d = ordinal;
    return OK;
}

CUresult cuDeviceGetName(char *name, int len, int d)
{
    NEED_INIT();
    if (d != 0 || len < 1)
        return E_VALUE;
    snprintf(name, (size_t)len, "Fake GPU (emulated)");
    return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
    NEED_INIT();
    if (d != 0)
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
    if (d != 0)
        return E_INVALID_DEVICE;
    *b = mem_limit;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(struct CUctx_st **c, int d)
{
    NEED_INIT();
    if (d != 0)
        return E_INVALID_DEVICE;
    *c = &the_ctx;
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
    NEED_INIT();
    ctx_current = 0;
    return d == 0 ? OK : E_INVALID_DEVICE;
}

CUresult cuCtxSetCurrent(struct CUctx_st *c)
{
    NEED_INIT();
    if (c && c != &the_ctx)
        return E_CONTEXT;
    ctx_current = c != NULL;
    return OK;
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
    if (s && s->capturing && !find(host, n, 1)) {
        say("%s during capture from/to pageable host memory", fn);
        s->invalid = 1;
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
    if (s->capturing)
        say("stream destroyed while capturing");
    free(s->ops.v);
    free(s);
    return OK;
}

CUresult cuStreamQuery(struct CUstream_st *s)
{
    NEED_CTX();
    if (!s)
        return E_HANDLE;
    if (s->capturing) {
        say("cuStreamQuery on a capturing stream");
        s->invalid = 1;
        return E_CAPTURE_UNSUPPORTED;
    }
    if (failed_sticky)
        return failed_sticky;
    if (getenv("FAKE_CUDA_HANG"))
        return E_NOT_READY;
    return OK;
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
    free(e);
    return OK;
}

CUresult cuEventRecord(struct CUevent_st *e, struct CUstream_st *s)
{
    NEED_CTX();
    if (!e || !s)
        return E_HANDLE;
    if (s->capturing) {
        say("cuEventRecord during capture (the runtime times outside the graphs)");
        s->invalid = 1;
        return E_CAPTURE_UNSUPPORTED;
    }
    e->t = now();
    e->recorded = 1;
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
    if (s->capturing || capturing_stream)
        return E_CAPTURE_UNSUPPORTED;
    if (mode < 0 || mode > 2)
        return E_VALUE;
    s->capturing = 1;
    s->invalid = 0;
    s->ops.n = 0;
    capturing_stream = s;
    return OK;
}

CUresult cuStreamEndCapture(struct CUstream_st *s, struct CUgraph_st **g)
{
    NEED_CTX();
    if (!s || !s->capturing)
        return E_VALUE;
    s->capturing = 0;
    capturing_stream = NULL;
    *g = NULL;
    if (s->invalid) {
        s->ops.n = 0;
        return E_CAPTURE_INVALIDATED;
    }
    struct CUgraph_st *gr = calloc(1, sizeof *gr);
    if (!gr)
        return E_OOM;
    gr->ops = s->ops;
    memset(&s->ops, 0, sizeof s->ops);
    *g = gr;
    return OK;
}

CUresult cuGraphInstantiateWithFlags(struct CUgraphExec_st **x, struct CUgraph_st *g, unsigned long long fl)
{
    NEED_CTX();
    if (!g || fl)
        return E_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e)
        return E_OOM;
    e->ops.n = e->ops.cap = g->ops.n;
    e->ops.v = malloc((g->ops.n ? g->ops.n : 1) * sizeof(op));
    if (!e->ops.v) {
        free(e);
        return E_OOM;
    }
    memcpy(e->ops.v, g->ops.v, g->ops.n * sizeof(op));
    *x = e;
    return OK;
}

CUresult cuGraphDestroy(struct CUgraph_st *g)
{
    NEED_CTX();
    if (!g)
        return E_HANDLE;
    free(g->ops.v);
    free(g);
    return OK;
}

CUresult cuGraphExecDestroy(struct CUgraphExec_st *x)
{
    NEED_CTX();
    if (!x)
        return E_HANDLE;
    free(x->ops.v);
    free(x);
    return OK;
}

CUresult cuGraphUpload(struct CUgraphExec_st *x, struct CUstream_st *s)
{
    NEED_CTX();
    if (!x || !s)
        return E_HANDLE;
    if (s->capturing)
        return E_CAPTURE_UNSUPPORTED;
    return OK;
}

CUresult cuGraphLaunch(struct CUgraphExec_st *x, struct CUstream_st *s)
{
    NEED_CTX();
    if (!x || !s)
        return E_HANDLE;
    if (s->capturing) {
        say("cuGraphLaunch into a capturing stream");
        return E_CAPTURE_UNSUPPORTED;
    }
    for (size_t i = 0; i < x->ops.n; i++) {
        CUresult r = enqueue(s, &x->ops.v[i]);
        if (r)
            return r;
    }
    return OK;
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
