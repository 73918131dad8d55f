/* rt_cuda.c: the CUDA device -- the driver API and NVRTC, found at run
 * time with dlopen, and the few operations the device loop is built from.
 *
 * Nothing here needs a CUDA header or library to build: the types are
 * declared in rt_internal.h and every entry point is looked up by name
 * (the versioned names that cuda.h's macros map to: cuMemAlloc_v2, ...,
 * and cuGraphInstantiateWithFlags, because the unversioned
 * cuGraphInstantiate symbol is the old five-argument one). A binary built
 * here therefore runs on a machine without CUDA (and says so clearly when
 * asked for it) and on one with a GPU.
 *
 * Rules every function follows:
 *   - every driver and NVRTC call is checked (CU_CHECK / NV_CHECK: one
 *     line with the call, the CUresult's name and text, file:line);
 *   - nothing waits without a bound: completion is polled with
 *     cuStreamQuery against a deadline (rt_cuda_wait), and host<->device
 *     copies go through a pinned staging buffer so they too are waited for
 *     that way, never inside a blocking driver call;
 *   - one device (rt_cuda_open says which), its primary context, one
 *     non-blocking stream for the model (the device loop adds a comm
 *     stream when it all-reduces with NCCL).
 *
 * Test hooks (environment): CDDP_LIBCUDA and CDDP_LIBNVRTC name the
 * libraries to load instead of the system's (the toolkit's stub driver, a
 * fake driver for tests); CDDP_CUDA_TIMEOUT bounds every wait (seconds,
 * default 600); CDDP_CUDA_DUMP=FILE writes the full NVRTC source there. */
#include "rt_cuda.h"
#include "rt_cuda_kernels.h"
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

rt_cuda_api rt_cu;
rt_nvrtc_api rt_nv;

/* Set once an error has been printed: cleanup after a failure then stays
 * quiet instead of repeating a sticky error for every buffer it frees. */
static int cu_failed;

#define STAGING_BYTES ((size_t)8 << 20)
#define DEFAULT_TIMEOUT 600.0
#define MIN_DRIVER 12000        /* CUDA 12.0 */

/* CU_DEVICE_ATTRIBUTE_* and CU_FUNC_ATTRIBUTE_* values from cuda.h */
enum { ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76, FUNC_MAX_THREADS = 0 };
enum { STREAM_NON_BLOCKING = 1, CAPTURE_THREAD_LOCAL = 1, NVRTC_ERROR_COMPILATION = 6 };

/* ---- error text ------------------------------------------------------------ */

/* Names for when the driver cannot give one (a stub, a broken install). */
static const struct { int code; const char *name; } cu_names[] = {
    {0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"}, {4, "CUDA_ERROR_DEINITIALIZED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"}, {35, "CUDA_ERROR_INSUFFICIENT_DRIVER"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"}, {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"}, {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"}, {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {218, "CUDA_ERROR_INVALID_PTX"}, {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM"}, {400, "CUDA_ERROR_INVALID_HANDLE"},
    {500, "CUDA_ERROR_NOT_FOUND"}, {600, "CUDA_ERROR_NOT_READY"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}, {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT"}, {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS"}, {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {800, "CUDA_ERROR_NOT_PERMITTED"}, {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"}, {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"}, {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

void rt_cu_describe(CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    if (rt_cu.cuGetErrorName && rt_cu.cuGetErrorName(r, &name) != 0)
        name = NULL;
    if (rt_cu.cuGetErrorString && rt_cu.cuGetErrorString(r, &text) != 0)
        text = NULL;
    for (size_t i = 0; !name && i < sizeof cu_names / sizeof cu_names[0]; i++)
        if (cu_names[i].code == r)
            name = cu_names[i].name;
    if (name && text)
        snprintf(buf, len, "%s (%s)", name, text);
    else if (name)
        snprintf(buf, len, "%s", name);
    else
        snprintf(buf, len, "CUresult %d", r);
}

/* "rt_cu.cuMemAlloc_v2(&p, n)" -> "cuMemAlloc_v2" */
static void call_name(const char *call, char *buf, size_t len)
{
    const char *s = strstr(call, "rt_cu.");
    if (!s)
        s = strstr(call, "rt_nv.");
    s = s ? s + 6 : call;
    size_t n = strcspn(s, "(");
    if (n >= len)
        n = len - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
}

static const char *base_name(const char *path)
{
    const char *s = strstr(path, "runtime/");
    return s ? s : path;
}

int rt_cuda_failed(void) { return cu_failed; }

int rt_cu_check(CUresult r, const char *call, const char *file, int line)
{
    if (r == RT_CUDA_SUCCESS)
        return 0;
    char d[256], fn[64];
    rt_cu_describe(r, d, sizeof d);
    call_name(call, fn, sizeof fn);
    rt_err("CUDA error %s in %s at %s:%d", d, fn, base_name(file), line);
    cu_failed = 1;
    return -1;
}

int rt_nv_check(nvrtcResult r, const char *call, const char *file, int line)
{
    if (r == 0)
        return 0;
    char fn[64];
    call_name(call, fn, sizeof fn);
    const char *s = rt_nv.nvrtcGetErrorString ? rt_nv.nvrtcGetErrorString(r) : NULL;
    rt_err("NVRTC error %s (%d) in %s at %s:%d", s ? s : "?", r, fn, base_name(file), line);
    cu_failed = 1;
    return -1;
}

/* ---- symbol tables ------------------------------------------------------------ */

typedef struct sym { const char *name; size_t off; const char *alt; } sym;
#define CU_SYM(f) {#f, offsetof(rt_cuda_api, f), NULL}
#define NV_SYM(f) {#f, offsetof(rt_nvrtc_api, f), NULL}

static const sym cu_syms[] = {
    CU_SYM(cuInit), CU_SYM(cuDriverGetVersion), CU_SYM(cuGetErrorName), CU_SYM(cuGetErrorString),
    CU_SYM(cuDeviceGetCount), CU_SYM(cuDeviceGet), CU_SYM(cuDeviceGetName), CU_SYM(cuDeviceGetPCIBusId),
    CU_SYM(cuDeviceGetAttribute), CU_SYM(cuDeviceTotalMem_v2), CU_SYM(cuDevicePrimaryCtxRetain),
    CU_SYM(cuDevicePrimaryCtxRelease_v2), CU_SYM(cuCtxSetCurrent), CU_SYM(cuModuleLoadData),
    CU_SYM(cuModuleUnload), CU_SYM(cuModuleGetFunction), CU_SYM(cuFuncGetAttribute),
    CU_SYM(cuMemGetInfo_v2), CU_SYM(cuMemAlloc_v2), CU_SYM(cuMemFree_v2), CU_SYM(cuMemAllocHost_v2),
    CU_SYM(cuMemFreeHost), CU_SYM(cuMemcpyHtoDAsync_v2), CU_SYM(cuMemcpyDtoHAsync_v2),
    CU_SYM(cuMemsetD32Async), CU_SYM(cuStreamCreate), CU_SYM(cuStreamDestroy_v2),
    CU_SYM(cuStreamQuery), CU_SYM(cuEventCreate), CU_SYM(cuEventDestroy_v2), CU_SYM(cuEventRecord),
    CU_SYM(cuEventQuery), CU_SYM(cuStreamWaitEvent),
    /* CUDA 12.8 added _v2 with the same signature; older drivers have only v1 */
    {"cuEventElapsedTime_v2", offsetof(rt_cuda_api, cuEventElapsedTime), "cuEventElapsedTime"},
    CU_SYM(cuStreamBeginCapture_v2), CU_SYM(cuStreamEndCapture), CU_SYM(cuGraphInstantiateWithFlags),
    CU_SYM(cuGraphUpload), CU_SYM(cuGraphLaunch), CU_SYM(cuGraphExecDestroy), CU_SYM(cuGraphDestroy),
    CU_SYM(cuLaunchKernel),
};

static const sym nv_syms[] = {
    NV_SYM(nvrtcGetErrorString), NV_SYM(nvrtcVersion), NV_SYM(nvrtcGetNumSupportedArchs),
    NV_SYM(nvrtcGetSupportedArchs), NV_SYM(nvrtcCreateProgram), NV_SYM(nvrtcDestroyProgram),
    NV_SYM(nvrtcCompileProgram), NV_SYM(nvrtcGetProgramLogSize), NV_SYM(nvrtcGetProgramLog),
    NV_SYM(nvrtcGetCUBINSize), NV_SYM(nvrtcGetCUBIN), NV_SYM(nvrtcGetPTXSize), NV_SYM(nvrtcGetPTX),
};

/* Fills the table at base from lib; the name of the first missing symbol,
 * or NULL when all are there. (POSIX guarantees that a dlsym result
 * converts to a function pointer; memcpy keeps the compiler quiet.) */
static const char *load_syms(void *lib, void *base, const sym *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        void *p = dlsym(lib, s[i].name);
        if (!p && s[i].alt)
            p = dlsym(lib, s[i].alt);
        if (!p)
            return s[i].name;
        memcpy((char *)base + s[i].off, &p, sizeof p);
    }
    return NULL;
}

/* ---- NVRTC ----------------------------------------------------------------- */

static void *nv_builtins;       /* libnvrtc-builtins preloaded beside a path-loaded NVRTC */

void rt_nvrtc_unload(void)
{
    if (rt_nv.lib)
        dlclose(rt_nv.lib);
    if (nv_builtins)
        dlclose(nv_builtins);
    nv_builtins = NULL;
    memset(&rt_nv, 0, sizeof rt_nv);
}

/* Opens one file into *nv. 1: usable; 0: not there; -1: there but
 * unusable (the reason in why). */
static int open_nvrtc(const char *dir, const char *name, int driver, rt_nvrtc_api *nv, char *why,
                      size_t whylen)
{
    char path[sizeof rt_nv.path];
    if (dir)
        snprintf(path, sizeof path, "%s/%s", dir, name);
    else
        snprintf(path, sizeof path, "%s", name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
    memset(nv, 0, sizeof *nv);
    const char *missing = load_syms(h, nv, nv_syms, sizeof nv_syms / sizeof nv_syms[0]);
    if (missing) {
        snprintf(why, whylen, "NVRTC %s lacks %s (too old; cddp needs NVRTC 12 or newer)", path, missing);
        dlclose(h);
        return -1;
    }
    if (nv->nvrtcVersion(&nv->major, &nv->minor) != 0) {
        snprintf(why, whylen, "NVRTC %s: nvrtcVersion failed", path);
        dlclose(h);
        return -1;
    }
    if (nv->major < 12) {
        snprintf(why, whylen, "NVRTC %s is version %d.%d; cddp needs 12 or newer", path, nv->major,
                 nv->minor);
        dlclose(h);
        return -1;
    }
    /* A CUBIN from NVRTC X.y loads on any driver for CUDA X.0 or newer,
     * not on an older major version. */
    if (driver && nv->major * 1000 > driver) {
        snprintf(why, whylen,
                 "driver older than needed: it supports CUDA %d.%d, and the NVRTC found (%s) is %d.%d, "
                 "which needs a driver for CUDA %d.0 or newer (set CDDP_LIBNVRTC to an older NVRTC)",
                 driver / 1000, driver % 1000 / 10, path, nv->major, nv->minor, nv->major);
        dlclose(h);
        return -1;
    }
    nv->lib = h;
    snprintf(nv->path, sizeof nv->path, "%s", path);
    return 1;
}

/* What nv can compile for a device of compute capability cc (major * 10
 * + minor, as NVRTC numbers them): cc itself, else the highest of the
 * same major with a lower minor -- a CUBIN runs on every later minor of
 * its major (sm_120 code on an sm_121 GPU) -- else 0. lo/hi: the range it
 * knows, for messages. */
static int best_arch(const rt_nvrtc_api *nv, int cc, int *lo, int *hi)
{
    int narch = 0, best = 0;
    *lo = *hi = 0;
    if (nv->nvrtcGetNumSupportedArchs(&narch) != 0 || narch <= 0 || narch >= 4096)
        return 0;
    int *a = rt_malloc(sizeof(int) * (size_t)narch);
    if (a && nv->nvrtcGetSupportedArchs(a) == 0)
        for (int i = 0; i < narch; i++) {
            if (!*lo || a[i] < *lo)
                *lo = a[i];
            if (a[i] > *hi)
                *hi = a[i];
            if (a[i] / 10 == cc / 10 && a[i] <= cc && a[i] > best)
                best = a[i];
        }
    free(a);
    return best;
}

/* The NVRTC to compile with: every candidate the driver can run is asked
 * which architectures it knows, and the one that compiles the device's own
 * architecture wins, else the one with the closest lower minor of its major
 * (so NVRTC 12 serves an sm_70 GPU that NVRTC 13 dropped, and NVRTC 13 an
 * sm_121 GPU through sm_120 code when it does not know sm_121 yet). Ties go
 * to the first in the search order (newest name first). Candidates:
 * CDDP_LIBNVRTC (several separated by ':'), else libnvrtc.so.13, .so.12,
 * .so from the loader's path, then lib64/ and lib/ of $CUDA_HOME,
 * $CUDA_PATH, /usr/local/cuda. */
int rt_nvrtc_load(int driver, int cc, int *arch, char *why, size_t whylen)
{
    if (rt_nv.lib)
        return 0;
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    const char *homes[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    const char *env = getenv("CDDP_LIBNVRTC");
    char envcopy[1024] = "", *save = NULL, *tok = NULL;
    if (env && *env) {
        snprintf(envcopy, sizeof envcopy, "%s", env);
        tok = strtok_r(envcopy, ":", &save);
    }
    char reason[640] = "", archwhy[640] = "", best_dir[200] = "";
    rt_nvrtc_api best;
    memset(&best, 0, sizeof best);
    int best_a = 0, found = 0;
    for (size_t i = 0, d = 0; env && *env ? tok != NULL : i < sizeof names / sizeof names[0];) {
        char dir[200] = "";
        const char *name;
        int skip = 0;
        if (env && *env) {
            name = tok;
        } else {
            name = names[i];
            if (d > 0) {
                const char *home = homes[(d - 1) / 2];
                if (!home || !*home)
                    skip = 1;
                else
                    snprintf(dir, sizeof dir, "%s/%s", home, d % 2 ? "lib64" : "lib");
            }
        }
        rt_nvrtc_api nv;
        char r1[640] = "";
        int r = skip ? 0 : open_nvrtc(*dir ? dir : NULL, name, driver, &nv, r1, sizeof r1);
        if (r < 0 && !*reason)          /* the first reason is the telling one */
            snprintf(reason, sizeof reason, "%s", r1);
        if (r == 1) {
            found = 1;
            int lo, hi, a = cc ? best_arch(&nv, cc, &lo, &hi) : 1;
            if (!a && !*archwhy)
                snprintf(archwhy, sizeof archwhy, "NVRTC %d.%d (%s) cannot compile for sm_%d, the "
                         "architecture of this GPU (it knows sm_%d to sm_%d); install an NVRTC that does "
                         "and name it in CDDP_LIBNVRTC", nv.major, nv.minor, nv.path, cc, lo, hi);
            /* better: the first usable one for any device (cc 0); the
             * device's own architecture over a lower minor; a higher
             * minor over a lower one */
            const int better = !cc ? !best.lib : a == cc ? best_a != cc : a > best_a && best_a != cc;
            if (a && better) {
                if (best.lib)
                    dlclose(best.lib);
                best = nv;
                best_a = a;
                snprintf(best_dir, sizeof best_dir, "%s", dir);
            } else
                dlclose(nv.lib);
        }
        /* next candidate: found but unusable means the next name, not the next dir */
        if (env && *env)
            tok = strtok_r(NULL, ":", &save);
        else if (r != 0 || ++d == 7)
            i++, d = 0;
    }
    if (!best.lib) {
        if (*archwhy)
            snprintf(why, whylen, "%s", archwhy);
        else if (*reason)
            snprintf(why, whylen, "%s", reason);
        else if (env && *env)
            snprintf(why, whylen, "NVRTC missing: cannot load CDDP_LIBNVRTC=%s (%s)", env, dlerror());
        else
            snprintf(why, whylen,
                     "NVRTC missing: cannot load libnvrtc.so.13, libnvrtc.so.12 or libnvrtc.so (install "
                     "the CUDA toolkit's NVRTC, add its lib64 to LD_LIBRARY_PATH, or set CDDP_LIBNVRTC)");
        (void)found;
        return -1;
    }
    rt_nv = best;
    if (arch)
        *arch = best_a;
    /* NVRTC opens its builtins library by name; when NVRTC itself was
     * found by path the loader may not find that one, so load it first
     * from the same directory (a loaded soname satisfies later opens). */
    if (*best_dir) {
        char b[sizeof rt_nv.path + 64];
        snprintf(b, sizeof b, "%s/libnvrtc-builtins.so.%d.%d", best_dir, rt_nv.major, rt_nv.minor);
        nv_builtins = dlopen(b, RTLD_NOW | RTLD_GLOBAL);
    }
    return 0;
}

int rt_nvrtc_compile(const char *src, const char *arch, void **image, size_t *len)
{
    *image = NULL;
    *len = 0;
    nvrtcProgram p = NULL;
    if (NV_CHECK(rt_nv.nvrtcCreateProgram(&p, src, "cddp_kernels.cu", 0, NULL, NULL)))
        return -1;
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt};
    int rc = -1;
    nvrtcResult r = rt_nv.nvrtcCompileProgram(p, 1, opts);
    if (r != 0) {
        size_t n = 0;
        char *log = NULL;
        if (rt_nv.nvrtcGetProgramLogSize(p, &n) == 0 && n > 0 && (log = rt_malloc(n + 1)) &&
            rt_nv.nvrtcGetProgramLog(p, log) == 0)
            log[n] = 0;
        else if (log)
            log[0] = 0;
        if (r == NVRTC_ERROR_COMPILATION) {
            rt_err("kernel compile failed (NVRTC %d.%d, %s); its log:", rt_nv.major, rt_nv.minor, arch);
            fputs(log ? log : "(no log)\n", stderr);
            fflush(stderr);
            cu_failed = 1;
        } else
            NV_CHECK(r);
        free(log);
        goto out;
    }
    int cubin = !strncmp(arch, "sm_", 3);
    size_t n = 0;
    if (cubin ? NV_CHECK(rt_nv.nvrtcGetCUBINSize(p, &n)) : NV_CHECK(rt_nv.nvrtcGetPTXSize(p, &n)))
        goto out;
    char *img = rt_malloc(n ? n : 1);
    if (!img) {
        rt_err("cannot allocate %zu bytes for the compiled kernels: out of memory", n);
        goto out;
    }
    if (cubin ? NV_CHECK(rt_nv.nvrtcGetCUBIN(p, img)) : NV_CHECK(rt_nv.nvrtcGetPTX(p, img))) {
        free(img);
        goto out;
    }
    *image = img;
    *len = n;
    rc = 0;
out:
    NV_CHECK(rt_nv.nvrtcDestroyProgram(&p));
    return rc;
}

int rt_kcache_get(const char *src, const char *arch, int use_cache, void **image, size_t *len, int *hit)
{
    *hit = 0;
    char dir[4096], key[65];
    int have_dir = use_cache != 0 && rt_kcache_dir(dir, sizeof dir) == 0;
    if (have_dir)
        rt_kcache_key(key, src, arch, rt_nv.major, rt_nv.minor);
    if (have_dir && use_cache > 0 && rt_kcache_load(dir, key, image, len) == 0) {
        *hit = 1;
        return 0;
    }
    if (rt_nvrtc_compile(src, arch, image, len) != 0)
        return -1;
    if (have_dir)
        (void)rt_kcache_store(dir, key, *image, *len);
    return 0;
}

/* ---- the device -------------------------------------------------------------- */

static double timeout_from_env(void)
{
    const char *s = getenv("CDDP_CUDA_TIMEOUT");
    if (s && *s) {
        char *end;
        double t = strtod(s, &end);
        if (!*end && t > 0 && t < 1e9)
            return t;
    }
    return DEFAULT_TIMEOUT;
}

/* A failure while opening: the reason into why, and what was acquired
 * released. */
static int open_fail(rt_cuda *cu, char *why, size_t whylen, const char *fmt, CUresult r)
{
    char d[256];
    rt_cu_describe(r, d, sizeof d);
    snprintf(why, whylen, fmt, d);
    rt_cuda_close(cu);
    return -1;
}

/* Which of the visible devices this rank takes (see rt_cuda_open). */
static int pick_device(int count, int local_rank, int local_size, int *ordinal, char *why, size_t whylen)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES"), *force = getenv("CDDP_CUDA_DEVICE");
    char shown[160] = "";
    if (vis)
        snprintf(shown, sizeof shown, " (CUDA_VISIBLE_DEVICES=%s)", vis);
    if (force && *force) {
        char *end;
        long x = strtol(force, &end, 10);
        if (*end || end == force || x < 0 || x >= count) {
            snprintf(why, whylen, "CDDP_CUDA_DEVICE=%s: expected a device number below %d, the devices "
                     "this process sees%s", force, count, shown);
            return -1;
        }
        *ordinal = (int)x;
        return 0;
    }
    if (count == 1) {
        *ordinal = 0;
        return 0;
    }
    if (local_size <= count) {
        *ordinal = local_rank;
        return 0;
    }
    snprintf(why, whylen, "%d ranks on this node but %d CUDA devices visible%s: run at most one rank per "
             "GPU, give each rank its own (Slurm --gpus-per-task=1, or CUDA_VISIBLE_DEVICES per rank), "
             "or choose one with CDDP_CUDA_DEVICE", local_size, count, shown);
    return -1;
}

int rt_cuda_open(rt_cuda *cu, int local_rank, int local_size, char *why, size_t whylen)
{
    memset(cu, 0, sizeof *cu);
    cu->dev = -1;
    cu->timeout = timeout_from_env();
    const char *libname = getenv("CDDP_LIBCUDA");
    if (!libname || !*libname)
        libname = "libcuda.so.1";
    if (!rt_cu.lib) {
        void *h = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(why, whylen, "no CUDA driver library (%s)", dlerror());
            return -1;
        }
        const char *missing = load_syms(h, &rt_cu, cu_syms, sizeof cu_syms / sizeof cu_syms[0]);
        if (missing) {
            snprintf(why, whylen, "driver older than needed: %s lacks %s (cddp needs a driver for "
                     "CUDA 12.0 or newer)", libname, missing);
            memset(&rt_cu, 0, sizeof rt_cu);
            dlclose(h);
            return -1;
        }
        rt_cu.lib = h;
    }
    CUresult r = rt_cu.cuInit(0);
    if (r == RT_CUDA_ERROR_NO_DEVICE)
        return open_fail(cu, why, whylen, "no CUDA device (cuInit: %s)", r);
    if (r == RT_CUDA_ERROR_STUB_LIBRARY)
        return open_fail(cu, why, whylen,
                         "cuInit failed: %s: the library loaded is the CUDA toolkit's stub, not a driver", r);
    if (r)
        return open_fail(cu, why, whylen, "cuInit failed: %s", r);
    if ((r = rt_cu.cuDriverGetVersion(&cu->driver)))
        return open_fail(cu, why, whylen, "cuDriverGetVersion failed: %s", r);
    if (cu->driver < MIN_DRIVER) {
        snprintf(why, whylen, "driver older than needed: it supports CUDA %d.%d, cddp needs 12.0 or newer",
                 cu->driver / 1000, cu->driver % 1000 / 10);
        rt_cuda_close(cu);
        return -1;
    }
    int count = 0;
    if ((r = rt_cu.cuDeviceGetCount(&count)))
        return open_fail(cu, why, whylen, "cuDeviceGetCount failed: %s", r);
    if (count < 1) {
        snprintf(why, whylen, "no CUDA device (the driver sees none)");
        rt_cuda_close(cu);
        return -1;
    }
    /* One rank per GPU: two ranks on one GPU would make NCCL refuse the
     * communicator ("duplicate GPU") and halve each other's throughput. */
    if (pick_device(count, local_rank, local_size, &cu->ordinal, why, whylen) != 0) {
        rt_cuda_close(cu);
        return -1;
    }
    if ((r = rt_cu.cuDeviceGet(&cu->dev, cu->ordinal)))
        return open_fail(cu, why, whylen, "cuDeviceGet failed: %s", r);
    if ((r = rt_cu.cuDeviceGetName(cu->name, (int)sizeof cu->name, cu->dev)))
        return open_fail(cu, why, whylen, "cuDeviceGetName failed: %s", r);
    cu->name[sizeof cu->name - 1] = 0;
    if ((r = rt_cu.cuDeviceGetPCIBusId(cu->bus_id, (int)sizeof cu->bus_id, cu->dev)))
        return open_fail(cu, why, whylen, "cuDeviceGetPCIBusId failed: %s", r);
    cu->bus_id[sizeof cu->bus_id - 1] = 0;
    if ((r = rt_cu.cuDeviceGetAttribute(&cu->cc_major, ATTR_CC_MAJOR, cu->dev)) ||
        (r = rt_cu.cuDeviceGetAttribute(&cu->cc_minor, ATTR_CC_MINOR, cu->dev)))
        return open_fail(cu, why, whylen, "cuDeviceGetAttribute(compute capability) failed: %s", r);
    if ((r = rt_cu.cuDeviceTotalMem_v2(&cu->total_mem, cu->dev)))
        return open_fail(cu, why, whylen, "cuDeviceTotalMem failed: %s", r);
    snprintf(cu->dev_arch, sizeof cu->dev_arch, "sm_%d%d", cu->cc_major, cu->cc_minor);

    int a = 0;
    if (rt_nvrtc_load(cu->driver, cu->cc_major * 10 + cu->cc_minor, &a, why, whylen) != 0) {
        rt_cuda_close(cu);
        return -1;
    }
    snprintf(cu->arch, sizeof cu->arch, "sm_%d", a);

    if ((r = rt_cu.cuDevicePrimaryCtxRetain(&cu->ctx, cu->dev)))
        return open_fail(cu, why, whylen, "cannot create a context on the device: %s", r);
    if ((r = rt_cu.cuCtxSetCurrent(cu->ctx)))
        return open_fail(cu, why, whylen, "cuCtxSetCurrent failed: %s", r);
    if ((r = rt_cu.cuStreamCreate(&cu->stream, STREAM_NON_BLOCKING)))
        return open_fail(cu, why, whylen, "cuStreamCreate failed: %s", r);
    if ((r = rt_cu.cuMemAllocHost_v2(&cu->staging, STAGING_BYTES)))
        return open_fail(cu, why, whylen, "cannot allocate 8 MiB of pinned host memory: %s", r);
    cu->staging_bytes = STAGING_BYTES;
    cu->open = 1;
    return 0;
}

void rt_cuda_close(rt_cuda *cu)
{
    if (rt_cu.lib) {
        /* After a failure these may all report the same sticky error:
         * only the first one was worth a line. */
        if (cu->mod && !cu_failed)
            CU_CHECK(rt_cu.cuModuleUnload(cu->mod));
        if (cu->staging && !cu_failed)
            CU_CHECK(rt_cu.cuMemFreeHost(cu->staging));
        if (cu->stream && !cu_failed)
            CU_CHECK(rt_cu.cuStreamDestroy_v2(cu->stream));
        if (cu->ctx && !cu_failed)
            CU_CHECK(rt_cu.cuDevicePrimaryCtxRelease_v2(cu->dev));
    }
    /* libcuda stays loaded: drivers start threads that do not survive
     * being unmapped, and the process is about to end anyway. */
    rt_nvrtc_unload();
    memset(cu, 0, sizeof *cu);
}

/* ---- source and module ------------------------------------------------------- */

/* The layout check: a kernel, generated from the same field lists as the
 * host's expectations, that writes the size and every field offset of the
 * device structs as the device compiler laid them out. The host compares
 * (rt_cuda_check_layout) before anything runs, so a mismatch between the
 * model's rt_exec and cddprt.h is a clear error, not wrong numbers. (A
 * run-time check rather than static_assert: NVRTC has no offsetof.) */
#define EXEC_FIELDS(X) X(n) X(nmax) X(act) X(fix) X(param) X(grad) X(opt) X(stat) X(x) X(y) X(norm) \
    X(idx) X(x_size) X(y_size) X(norm_div) X(x_u8) X(norm_n) X(lr) X(step) X(nthreads) X(rank) X(world) X(seed) X(scale) X(found_inf)
#define CTL_FIELDS(X) X(e) X(order) X(steploss) X(loss_sum) X(correct_sum) X(b) X(nsample) X(batch) \
    X(loss_stat) X(correct_stat) X(train) X(lr) X(amp) X(scale) X(growth) X(backoff) X(tracker) X(skipped) \
    X(interval) X(ngrad) X(found) X(amp_log) X(lrs) X(clip) X(gsq) X(clip_value) X(accumulate) X(acc) X(nmetric) X(metric) \
    X(zero_grad) X(zero_fix) X(zero_stat) X(zranges) X(turned) X(stepcount) X(count_sum) X(count_stat)
#define COUNT(f) +1
enum { N_EXEC = 1 EXEC_FIELDS(COUNT), N_CTL = 1 CTL_FIELDS(COUNT), N_LAYOUT = 2 * N_EXEC + N_CTL };
#undef COUNT

static const char *const exec_names[] = {
#define X(f) #f,
    EXEC_FIELDS(X)
#undef X
};
static const char *const ctl_names[] = {
#define X(f) #f,
    CTL_FIELDS(X)
#undef X
};

static void layout_kernel(FILE *f, int model_exec)
{
    fputs("\n/* ---- layout check (written by rt_cuda_source) ---- */\n"
          "extern \"C\" __global__ void cddprt_layout(unsigned long long *out)\n{\n"
          "    cddprt::exec x;\n    cddprt::ctl c;\n    int i = 0;\n", f);
    if (model_exec)
        fputs("    ::rt_exec r;\n", f);
#define X(fld) fputs("    out[i++] = (unsigned long long)((const char *)&x." #fld " - (const char *)&x);\n", f);
    fputs("    out[i++] = sizeof x;\n", f);
    EXEC_FIELDS(X)
#undef X
#define X(fld) fputs("    out[i++] = (unsigned long long)((const char *)&c." #fld " - (const char *)&c);\n", f);
    fputs("    out[i++] = sizeof c;\n", f);
    CTL_FIELDS(X)
#undef X
    if (model_exec) {
#define X(fld) fputs("    out[i++] = (unsigned long long)((const char *)&r." #fld " - (const char *)&r);\n", f);
        fputs("    out[i++] = sizeof r;\n", f);
        EXEC_FIELDS(X)
#undef X
    }
    fputs("}\n", f);
}

/* What the host expects: the same order as layout_kernel writes. */
static void layout_host(unsigned long long *want)
{
    int i = 0;
    want[i++] = sizeof(rt_exec);
#define X(fld) want[i++] = offsetof(rt_exec, fld);
    EXEC_FIELDS(X)
#undef X
    want[i++] = sizeof(rt_cuda_ctl);
#define X(fld) want[i++] = offsetof(rt_cuda_ctl, fld);
    CTL_FIELDS(X)
#undef X
    for (int k = 0; k < N_EXEC; k++)
        want[i + k] = want[k];
}

static int model_declares_exec(const char *cuda_src) { return strstr(cuda_src, "rt_exec") != NULL; }

/* cddprt_opt_turn: optimizer kernel NAME's body (the compiler emits it as
 * NAME_body, emit_cuda.c), then step_turn's work in the grid's last block
 * (rt_cuda_kernels.h). The same launch bounds as NAME, whose grid it is
 * launched with. */
static void opt_turn_kernel(FILE *f, const char *name)
{
    fprintf(f,
            "\n/* ---- %s, then the step's turn (written by rt_cuda_source) ---- */\n"
            "extern \"C\" __global__ void __launch_bounds__(256, 2) cddprt_opt_turn(cddprt::ctl *c)\n{\n"
            "    __shared__ int last;\n"
            "    %s_body((const ::rt_exec *)c->e);\n"
            "    cddprt::turn_in_last_block(c, &last);\n}\n",
            name, name);
}

char *rt_cuda_source(const char *cuda_src, const char *turn_body)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        rt_err("cannot build the CUDA source: %s", strerror(errno));
        return NULL;
    }
    fputs(cuda_src, f);
    fputs(rt_cuda_kernels_src, f);
    if (turn_body)
        opt_turn_kernel(f, turn_body);
    layout_kernel(f, model_declares_exec(cuda_src));
    if (fclose(f) != 0 || !text) {
        rt_err("cannot build the CUDA source: out of memory");
        free(text);
        return NULL;
    }
    return text;
}

int rt_cuda_check_layout(rt_cuda *cu, const char *cuda_src)
{
    static const unsigned one[3] = {1, 1, 1};
    const int model = model_declares_exec(cuda_src);
    const int n = model ? N_LAYOUT : N_EXEC + N_CTL;
    unsigned long long got[N_LAYOUT], want[N_LAYOUT];
    CUfunction fn;
    CUdeviceptr out = 0;
    memset(got, 0xff, sizeof got);
    layout_host(want);
    int rc = rt_cuda_function(cu, "cddprt_layout", &fn) != 0 ||
             rt_cuda_alloc(cu, &out, sizeof got, "the layout check") != 0 ||
             rt_cuda_launch1(cu, fn, "cddprt_layout", one, one, out) != 0 ||
             rt_cuda_dtoh(cu, got, out, sizeof got) != 0;
    rt_cuda_free(out);
    if (rc)
        return -1;
    for (int i = 0; i < n; i++) {
        if (got[i] == want[i])
            continue;
        int k = i < N_EXEC ? i : i < N_EXEC + N_CTL ? i - N_EXEC : i - N_EXEC - N_CTL;
        const char *type = i < N_EXEC ? "cddprt::exec (runtime kernels)"
                           : i < N_EXEC + N_CTL ? "cddprt::ctl (runtime kernels)"
                                                : "rt_exec (the model's CUDA source)";
        const char *field = k == 0 ? "sizeof" : i >= N_EXEC && i < N_EXEC + N_CTL ? ctl_names[k - 1]
                                                                                    : exec_names[k - 1];
        rt_err("CUDA struct layout differs from the host's (cddprt.h): %s: %s is %llu on the device, "
               "%llu on the host", type, field, got[i], want[i]);
        cu_failed = 1;
        return -1;
    }
    return 0;
}

static void dump_source(const char *src)
{
    const char *path = getenv("CDDP_CUDA_DUMP");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "w");
    if (!f || fputs(src, f) == EOF || fclose(f) != 0)
        rt_warn("CDDP_CUDA_DUMP=%s: cannot write the CUDA source: %s", path, strerror(errno));
}

int rt_cuda_load_module(rt_cuda *cu, const char *src, int use_cache)
{
    dump_source(src);
    for (int attempt = 0; attempt < 2; attempt++) {
        void *img = NULL;
        size_t len = 0;
        int hit = 0;
        double t0 = rt_now();
        /* second attempt: a cached image the driver refused is rebuilt */
        if (rt_kcache_get(src, cu->arch, attempt ? -1 : use_cache, &img, &len, &hit) != 0)
            return -1;
        cu->from_cache = hit;
        cu->compile_s = hit ? 0.0 : rt_now() - t0;
        CUresult r = rt_cu.cuModuleLoadData(&cu->mod, img);
        free(img);
        if (r == RT_CUDA_SUCCESS)
            return 0;
        cu->mod = NULL;
        char d[256];
        rt_cu_describe(r, d, sizeof d);
        if (hit) {
            rt_warn("the cached kernels for %s do not load (%s); compiling them again", cu->arch, d);
            continue;
        }
        rt_err("cannot load the compiled kernels on %s (%s): %s", cu->name, cu->arch, d);
        cu_failed = 1;
        return -1;
    }
    return -1;
}

int rt_cuda_function(rt_cuda *cu, const char *name, CUfunction *f)
{
    CUresult r = rt_cu.cuModuleGetFunction(f, cu->mod, name);
    if (r == 500) {     /* CUDA_ERROR_NOT_FOUND */
        rt_err("kernel '%s' is not in this program's CUDA source", name);
        cu_failed = 1;
        return -1;
    }
    return CU_CHECK(r);
}

/* ---- memory -------------------------------------------------------------------- */

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

int rt_cuda_alloc(rt_cuda *cu, CUdeviceptr *p, size_t bytes, const char *what)
{
    *p = 0;
    if (bytes == 0)
        bytes = 256;
    CUresult r = rt_cu.cuMemAlloc_v2(p, bytes);
    if (r == RT_CUDA_ERROR_OUT_OF_MEMORY) {
        size_t fr = 0, tot = 0;
        if (rt_cu.cuMemGetInfo_v2(&fr, &tot) != 0)
            fr = tot = 0;
        rt_err("out of device memory: cannot allocate %.1f MiB for %s (%.1f MiB free of %.1f MiB on %s)",
               mib(bytes), what, mib(fr), mib(tot), cu->name);
        cu_failed = 1;
        *p = 0;
        return -1;
    }
    if (r) {
        char d[256];
        rt_cu_describe(r, d, sizeof d);
        rt_err("cannot allocate %.1f MiB of device memory for %s: %s", mib(bytes), what, d);
        cu_failed = 1;
        *p = 0;
        return -1;
    }
    return 0;
}

void rt_cuda_free(CUdeviceptr p)
{
    if (p && rt_cu.lib && !cu_failed)
        CU_CHECK(rt_cu.cuMemFree_v2(p));
}

int rt_cuda_host_alloc(rt_cuda *cu, void **p, size_t bytes, const char *what)
{
    (void)cu;
    *p = NULL;
    if (bytes == 0)
        bytes = 64;
    CUresult r = rt_cu.cuMemAllocHost_v2(p, bytes);
    if (r) {
        char d[256];
        rt_cu_describe(r, d, sizeof d);
        rt_err("cannot allocate %.1f MiB of pinned host memory for %s: %s", mib(bytes), what, d);
        cu_failed = 1;
        *p = NULL;
        return -1;
    }
    memset(*p, 0, bytes);
    return 0;
}

void rt_cuda_host_free(void *p)
{
    if (p && rt_cu.lib && !cu_failed)
        CU_CHECK(rt_cu.cuMemFreeHost(p));
}

/* Polls query(arg) until it is done, an error, or timeout seconds pass;
 * NCCL's asynchronous errors are polled too. */
static int poll_until(rt_cuda *cu, CUresult (*query)(void *), void *arg, double timeout,
                      const char *what)
{
    const double t0 = rt_now();
    for (unsigned long i = 0;; i++) {
        /* a failed communicator first: work behind it may never finish,
         * or may finish with garbage */
        if (i % 64 == 0 && cu->poll && cu->poll(cu->poll_arg, what) != 0) {
            cu_failed = 1;
            return -1;
        }
        CUresult r = query(arg);
        if (r == RT_CUDA_SUCCESS)
            return 0;
        if (r != RT_CUDA_ERROR_NOT_READY) {
            char d[256];
            rt_cu_describe(r, d, sizeof d);
            rt_err("CUDA error while %s: %s", what, d);
            cu_failed = 1;
            return -1;
        }
        if (i % 64 == 0) {
            if (rt_now() - t0 > timeout) {
                if (cu->poll)
                    rt_err("the GPU did not finish %s within %g s: another rank failed or hung, "
                           "or the work takes longer (--comm-timeout sets the limit)", what, timeout);
                else
                    rt_err("the GPU did not finish %s within %g s; giving up (CDDP_CUDA_TIMEOUT "
                           "sets the limit)", what, timeout);
                cu_failed = 1;
                return -1;
            }
        }
        /* Spin for the first millisecond or so (a short wait ends soon),
         * then poll every 20 us so a long wait costs no core. */
        if (i >= 1000) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

static CUresult query_stream(void *s) { return rt_cu.cuStreamQuery((CUstream)s); }
static CUresult query_event(void *e) { return rt_cu.cuEventQuery((CUevent)e); }

int rt_cuda_wait(rt_cuda *cu, const char *what)
{
    return poll_until(cu, query_stream, cu->stream, cu->timeout, what);
}

int rt_cuda_event_wait(rt_cuda *cu, CUevent ev, double timeout, const char *what)
{
    return poll_until(cu, query_event, ev, timeout, what);
}

int rt_cuda_htod(rt_cuda *cu, CUdeviceptr dst, const void *src, size_t bytes)
{
    const char *s = src;
    while (bytes > 0) {
        size_t k = bytes < cu->staging_bytes ? bytes : cu->staging_bytes;
        memcpy(cu->staging, s, k);
        if (CU_CHECK(rt_cu.cuMemcpyHtoDAsync_v2(dst, cu->staging, k, cu->stream)) ||
            rt_cuda_wait(cu, "copying to the device") != 0)
            return -1;
        dst += k;
        s += k;
        bytes -= k;
    }
    return 0;
}

int rt_cuda_dtoh(rt_cuda *cu, void *dst, CUdeviceptr src, size_t bytes)
{
    char *d = dst;
    while (bytes > 0) {
        size_t k = bytes < cu->staging_bytes ? bytes : cu->staging_bytes;
        if (CU_CHECK(rt_cu.cuMemcpyDtoHAsync_v2(cu->staging, src, k, cu->stream)) ||
            rt_cuda_wait(cu, "copying from the device") != 0)
            return -1;
        memcpy(d, cu->staging, k);
        src += k;
        d += k;
        bytes -= k;
    }
    return 0;
}

/* ---- launching ------------------------------------------------------------------ */

int rt_cuda_grid(const rt_cuda_launch *l, int nmax, unsigned grid[3])
{
    static const uint64_t gmax[3] = {2147483647u, 65535u, 65535u};
    const char *name = l->name ? l->name : "?";
    uint64_t threads = 1;
    for (int d = 0; d < 3; d++) {
        threads *= l->block[d];
        if (l->block[d] == 0 || threads > 1024 || (d == 2 && l->block[2] > 64)) {
            rt_err("kernel %s: invalid block (%u, %u, %u)", name, l->block[0], l->block[1], l->block[2]);
            return -1;
        }
        uint64_t g;
        if (l->gdiv[d] == 0)
            g = l->gfix[d];
        else {
            if (l->gdiv[d] < 0 || l->gmul[d] < 0 || nmax < 0 ||
                (nmax > 0 && l->gmul[d] > INT64_MAX / nmax)) {
                rt_err("kernel %s: invalid grid rule for dimension %d (%lld * nmax / %lld)", name, d,
                       (long long)l->gmul[d], (long long)l->gdiv[d]);
                return -1;
            }
            int64_t rows = l->gmul[d] * (int64_t)nmax;
            g = (uint64_t)((rows + l->gdiv[d] - 1) / l->gdiv[d]);
            if (g < 1)
                g = 1;
        }
        if (g == 0 || g > gmax[d]) {
            rt_err("kernel %s: grid dimension %d is %llu for batch %d (limit %llu)", name, d,
                   (unsigned long long)g, nmax, (unsigned long long)gmax[d]);
            return -1;
        }
        grid[d] = (unsigned)g;
    }
    return 0;
}

int rt_cuda_pair_grid(const rt_cuda_launch *a, const rt_cuda_launch *b, int nmax, unsigned grid[3])
{
    unsigned ga[3], gb[3];
    if (rt_cuda_grid(a, nmax, ga) || rt_cuda_grid(b, nmax, gb))
        return -1;
    if (memcmp(a->block, b->block, sizeof a->block)) {
        rt_err("kernel %s: its parts %s and %s have different blocks", a->pair, a->name, b->name);
        return -1;
    }
    if ((uint64_t)ga[0] + gb[0] > 2147483647u) {
        rt_err("kernel %s: grid dimension 0 is %llu for batch %d (limit 2147483647)", a->pair,
               (unsigned long long)ga[0] + gb[0], nmax);
        return -1;
    }
    grid[0] = ga[0] + gb[0];
    grid[1] = ga[1] > gb[1] ? ga[1] : gb[1];
    grid[2] = ga[2] > gb[2] ? ga[2] : gb[2];
    return 0;
}

int rt_cuda_launch1(rt_cuda *cu, CUfunction f, const char *name, const unsigned grid[3],
                    const unsigned block[3], CUdeviceptr arg)
{
    void *params[1] = {&arg};
    CUresult r = rt_cu.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
                                      cu->stream, params, NULL);
    if (r) {
        char d[256];
        rt_cu_describe(r, d, sizeof d);
        rt_err("cannot launch kernel %s <<<(%u,%u,%u), (%u,%u,%u)>>>: %s", name, grid[0], grid[1],
               grid[2], block[0], block[1], block[2], d);
        cu_failed = 1;
        return -1;
    }
    return 0;
}
