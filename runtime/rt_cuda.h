/* rt_cuda.h: the CUDA files' own declarations -- the driver API, NVRTC
 * and NCCL loaded with dlopen, the kernel cache, the CUDA device. Only
 * rt_cuda.c, rt_cuda_cache.c, rt_cuda_dev.c, rt_nccl.c and rt_gpu.c (and
 * tests of them) include it; the rest of the runtime sees rt_gpu
 * (rt_internal.h). */
#ifndef RT_CUDA_H
#define RT_CUDA_H

#include "rt_internal.h"

/* ---- rt_cuda.c: the CUDA device, driver API and NVRTC by dlopen ----------
 * No CUDA header is needed to build the runtime: the few driver types are
 * declared here (same sizes as cuda.h's), and every entry point is looked
 * up at run time, so one binary runs with or without a GPU. Symbol names
 * are the versioned ones cuda.h maps to (cuMemAlloc -> cuMemAlloc_v2...). */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

enum {
    RT_CUDA_SUCCESS = 0, RT_CUDA_ERROR_OUT_OF_MEMORY = 2, RT_CUDA_ERROR_STUB_LIBRARY = 34,
    RT_CUDA_ERROR_NO_DEVICE = 100, RT_CUDA_ERROR_NOT_READY = 600,
};

typedef struct rt_cuda_api {
    void *lib;
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuDriverGetVersion)(int *v);
    CUresult (*cuGetErrorName)(CUresult r, const char **s);
    CUresult (*cuGetErrorString)(CUresult r, const char **s);
    CUresult (*cuDeviceGetCount)(int *n);
    CUresult (*cuDeviceGet)(CUdevice *d, int ordinal);
    CUresult (*cuDeviceGetName)(char *name, int len, CUdevice d);
    CUresult (*cuDeviceGetPCIBusId)(char *id, int len, CUdevice d);
    CUresult (*cuDeviceGetAttribute)(int *v, int attr, CUdevice d);
    CUresult (*cuDeviceTotalMem_v2)(size_t *bytes, CUdevice d);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *c, CUdevice d);
    CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice d);
    CUresult (*cuCtxSetCurrent)(CUcontext c);
    CUresult (*cuModuleLoadData)(CUmodule *m, const void *image);
    CUresult (*cuModuleUnload)(CUmodule m);
    CUresult (*cuModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
    CUresult (*cuFuncGetAttribute)(int *v, int attr, CUfunction f);
    CUresult (*cuMemGetInfo_v2)(size_t *free_b, size_t *total_b);
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *p, size_t bytes);
    CUresult (*cuMemFree_v2)(CUdeviceptr p);
    CUresult (*cuMemAllocHost_v2)(void **p, size_t bytes);
    CUresult (*cuMemFreeHost)(void *p);
    CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
    CUresult (*cuMemcpyDtoHAsync_v2)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned value, size_t n, CUstream s);
    CUresult (*cuStreamCreate)(CUstream *s, unsigned flags);
    CUresult (*cuStreamDestroy_v2)(CUstream s);
    CUresult (*cuStreamQuery)(CUstream s);
    CUresult (*cuEventCreate)(CUevent *e, unsigned flags);
    CUresult (*cuEventDestroy_v2)(CUevent e);
    CUresult (*cuEventRecord)(CUevent e, CUstream s);
    CUresult (*cuEventQuery)(CUevent e);
    CUresult (*cuStreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
    CUresult (*cuEventElapsedTime)(float *ms, CUevent a, CUevent b);
    CUresult (*cuStreamBeginCapture_v2)(CUstream s, int mode);
    CUresult (*cuStreamEndCapture)(CUstream s, CUgraph *g);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *x, CUgraph g, unsigned long long flags);
    CUresult (*cuGraphUpload)(CUgraphExec x, CUstream s);
    CUresult (*cuGraphLaunch)(CUgraphExec x, CUstream s);
    CUresult (*cuGraphExecDestroy)(CUgraphExec x);
    CUresult (*cuGraphDestroy)(CUgraph g);
    CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                               void **extra);
} rt_cuda_api;

typedef struct rt_nvrtc_api {
    void *lib;
    char path[256];         /* what was loaded, for messages */
    int major, minor;       /* nvrtcVersion */
    const char *(*nvrtcGetErrorString)(nvrtcResult r);
    nvrtcResult (*nvrtcVersion)(int *major, int *minor);
    nvrtcResult (*nvrtcGetNumSupportedArchs)(int *n);
    nvrtcResult (*nvrtcGetSupportedArchs)(int *archs);
    nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *p, const char *src, const char *name, int nhdr,
                                      const char *const *hdrs, const char *const *hdr_names);
    nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *p);
    nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram p, int nopt, const char *const *opts);
    nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram p, size_t *n);
    nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram p, char *log);
    nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram p, size_t *n);
    nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram p, char *cubin);
    nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram p, size_t *n);
    nvrtcResult (*nvrtcGetPTX)(nvrtcProgram p, char *ptx);
} rt_nvrtc_api;

extern rt_cuda_api rt_cu;       /* filled by rt_cuda_open */
extern rt_nvrtc_api rt_nv;      /* filled by rt_nvrtc_load */

/* 0 when r is CUDA_SUCCESS; otherwise one error line naming the call, the
 * CUresult's name and description, and file:line; returns -1. */
int rt_cu_check(CUresult r, const char *call, const char *file, int line);
int rt_nv_check(nvrtcResult r, const char *call, const char *file, int line);
#define CU_CHECK(call) rt_cu_check((call), #call, __FILE__, __LINE__)
#define NV_CHECK(call) rt_nv_check((call), #call, __FILE__, __LINE__)
/* "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" */
void rt_cu_describe(CUresult r, char *buf, size_t len);
/* An error has been reported: cleanup code stays quiet from then on. */
int rt_cuda_failed(void);

typedef struct rt_nccl rt_nccl;

/* A device once opened: context, the stream all work goes through, and a
 * pinned buffer that bounded host<->device copies pass through. */
typedef struct rt_cuda {
    int open;
    int ordinal;            /* device number among the visible ones (rt_cuda_open) */
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUmodule mod;
    int driver;             /* cuDriverGetVersion: 12080 is CUDA 12.8 */
    int cc_major, cc_minor;
    char arch[16];          /* what the kernels are compiled for: "sm_90" */
    char dev_arch[16];      /* the device's own; arch may be a lower minor of its major */
    char bus_id[32];        /* PCI bus id: which physical GPU, whatever is visible */
    char name[128];
    size_t total_mem;
    void *staging;
    size_t staging_bytes;
    double timeout;         /* seconds any single wait may take */
    int from_cache;         /* the module came from the kernel cache */
    double compile_s;       /* NVRTC time when it did not */
    rt_nccl *nccl;          /* several GPU ranks: the device loop all-reduces with it */
    /* polled while waiting (NCCL's asynchronous errors): -1 ends the wait */
    int (*poll)(void *arg, const char *what);
    void *poll_arg;
} rt_cuda;

/* Loads the NVRTC to compile with (rt_cuda.c says how it is chosen):
 * one the driver can run (driver_version 0: any) that compiles for compute
 * capability cc (major * 10 + minor; 0: any) or for a lower minor of its
 * major; *arch: that architecture (may be NULL). -1 with the reason in why. */
int rt_nvrtc_load(int driver_version, int cc, int *arch, char *why, size_t whylen);
void rt_nvrtc_unload(void);
/* Compiles src for arch ("sm_90": a CUBIN; "compute_90": PTX). On a
 * compile error prints the NVRTC log to stderr. Image is malloc'ed. */
int rt_nvrtc_compile(const char *src, const char *arch, void **image, size_t *len);

/* Opens the driver (CDDP_LIBCUDA, else libcuda.so.1), a device and NVRTC.
 * The device: CDDP_CUDA_DEVICE when set; else the only one when one is
 * visible (a launcher that gives each rank its own GPU through
 * CUDA_VISIBLE_DEVICES or Slurm's --gpus-per-task); else the local rank's
 * when the node's ranks fit the visible devices; else an error. -1 with
 * one line in why: no driver library, cuInit failed, no device (or too
 * few), driver too old, NVRTC missing or without the architecture.
 * Nothing is printed. */
int rt_cuda_open(rt_cuda *cu, int local_rank, int local_size, char *why, size_t whylen);
void rt_cuda_close(rt_cuda *cu);
/* The full NVRTC source of a program: the model's cuda_src, then the
 * runtime's own kernels and the layout-check kernel; with turn_body (an
 * optimizer kernel's name: rt_cuda_turn_body), also cddprt_opt_turn, that
 * kernel with step_turn's work in its last block. malloc'ed. */
char *rt_cuda_source(const char *cuda_src, const char *turn_body);
/* Runs the source's layout kernel: -1 (after an error naming the field)
 * when a device struct is laid out differently from the host's. */
int rt_cuda_check_layout(rt_cuda *cu, const char *cuda_src);
/* Builds (or takes from the kernel cache) the module of src and loads it. */
int rt_cuda_load_module(rt_cuda *cu, const char *src, int use_cache);
int rt_cuda_function(rt_cuda *cu, const char *name, CUfunction *f);
/* Device memory; an out-of-memory error says how much, for what, and how
 * much the device has free. Size 0 gets a small real block. */
int rt_cuda_alloc(rt_cuda *cu, CUdeviceptr *p, size_t bytes, const char *what);
void rt_cuda_free(CUdeviceptr p);
int rt_cuda_host_alloc(rt_cuda *cu, void **p, size_t bytes, const char *what);
void rt_cuda_host_free(void *p);
/* Copies through the pinned staging buffer, each chunk waited for with
 * rt_cuda_wait: they return only when the data has arrived. */
int rt_cuda_htod(rt_cuda *cu, CUdeviceptr dst, const void *src, size_t bytes);
int rt_cuda_dtoh(rt_cuda *cu, void *dst, CUdeviceptr src, size_t bytes);
/* Waits for everything queued on cu->stream, at most cu->timeout seconds
 * (CDDP_CUDA_TIMEOUT; default 600): the program never hangs on a GPU. */
int rt_cuda_wait(rt_cuda *cu, const char *what);
/* Waits until event ev has completed, at most `timeout` seconds, polling
 * NCCL's asynchronous errors too (cu->nccl): a dead peer ends the wait
 * with an error instead of a hang. */
int rt_cuda_event_wait(rt_cuda *cu, CUevent ev, double timeout, const char *what);
/* Grid of launch l for an arena of nmax rows; -1 (after an error) if the
 * geometry is invalid or exceeds the device's limits. */
int rt_cuda_grid(const rt_cuda_launch *l, int nmax, unsigned grid[3]);
/* The grid of a sibling pair (a->pair, b the next kernel): a's blocks then
 * b's along x, y and z the larger of the two. 0, or -1 after rt_err. */
int rt_cuda_pair_grid(const rt_cuda_launch *a, const rt_cuda_launch *b, int nmax, unsigned grid[3]);
/* f<<<grid, block, 0, cu->stream>>>(arg): every kernel takes one pointer. */
int rt_cuda_launch1(rt_cuda *cu, CUfunction f, const char *name, const unsigned grid[3],
                    const unsigned block[3], CUdeviceptr arg);

/* ---- rt_cuda_cache.c: compiled kernels on disk ---------------------------- */
void rt_sha256(const void *data, size_t len, uint8_t out[32]);
/* $XDG_CACHE_HOME/cddpc or $HOME/.cache/cddpc, created if needed; -1 if
 * there is none (no error printed: the cache is an optimisation). */
int rt_kcache_dir(char *buf, size_t len);
/* Hex SHA-256 naming the image of (src, arch, NVRTC version, options). */
void rt_kcache_key(char hex[65], const char *src, const char *arch, int nvrtc_major,
                   int nvrtc_minor);
/* 0 and a malloc'ed image when DIR/KEY.cubin exists and is intact; 1 when
 * it is absent or damaged (a damaged one is ignored and later replaced). */
int rt_kcache_load(const char *dir, const char *key, void **image, size_t *len);
/* Writes DIR/KEY.cubin atomically: a temp file in DIR, fsync, rename. Safe
 * when several processes store the same key at once. -1 on failure. */
int rt_kcache_store(const char *dir, const char *key, const void *image, size_t len);
/* (rt_cuda.c) The image of src for arch. use_cache 1: from the cache when there, else
 * compiled with NVRTC and stored; 0 (--no-cache): compiled, nothing read
 * or written; -1: compiled and stored (replaces a bad entry). *hit: 1 when
 * it came from the cache. */
int rt_kcache_get(const char *src, const char *arch, int use_cache, void **image, size_t *len,
                  int *hit);

/* ---- rt_nccl.c: NCCL for GPU ranks, by dlopen ----------------------------- */
#define RT_NCCL_ID_BYTES 128
struct rt_nccl {
    void *comm;             /* ncclComm_t */
    int rank, size;
    int version;            /* ncclGetVersion: 22803 is 2.28.3 */
    int broken;             /* an error was seen: abort, do not drain */
};
/* Loads NCCL (CDDP_LIBNCCL, several separated by ':', else libnccl.so.2
 * from the loader's path or the CUDA toolkit's lib64/ and lib/): the first
 * one whose CUDA version the driver (driver_version, 0: any) supports; -1
 * with the reason in why. */
int rt_nccl_load(int driver_version, int *version, char *why, size_t whylen);
/* Collective over the MPI world: rank 0's unique id is broadcast, every
 * rank joins with its MPI rank on cu's device, then one all-reduce runs
 * eagerly on cu->stream and is waited for (before any graph capture). -1
 * after an error line (the caller ends the job: the others cannot go on
 * alone). */
int rt_nccl_init(rt_nccl *n, rt_cuda *cu);
/* The communicator as the device's rt_coll (device memory, streams). */
void rt_coll_nccl(rt_coll *c, rt_nccl *n);
/* -1 (after an error line) if the communicator has failed. void *: as
 * rt_cuda.poll, which rt_main points here. */
int rt_nccl_check(void *n, const char *what);
/* failed: an error was seen (abort the communicator, do not drain it). */
void rt_nccl_close(rt_nccl *n, int failed);

/* ---- rt_cuda_dev.c: the CUDA device (NVRTC kernels, one graph per step) --
 * With an "nccl" coll this rank trains its DistributedSampler shard and
 * the gradient buckets are averaged over the ranks inside the step graph. */
int rt_cuda_dev_open(rt_device *dev, rt_cuda *cu, const rt_model *m, const rt_opts *o, rt_ws *w,
                     const rt_start *st, const rt_data *data, rt_coll *coll,
                     rt_trace *trace);

#endif
