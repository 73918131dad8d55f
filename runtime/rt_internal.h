/* rt_internal.h: what the runtime's files share with each other.
 * Nothing here is visible to emitted programs; they only see cddprt.h.
 *
 * Error convention: functions that can fail print ONE line on stderr
 * (through rt_err, which prefixes the program name) and return -1; the
 * caller turns that into exit status 1 (data/file problems) or 2 (usage).
 * Nothing calls exit() below rt_main, so all memory is released on the
 * way out and the sanitizers see a clean shutdown. */
#ifndef RT_INTERNAL_H
#define RT_INTERNAL_H

#include "cddprt.h"
#include <pthread.h>
#include <stdio.h>

#define RT_VERSION "0.1.0"

#if defined(__GNUC__)
#define RT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RT_PRINTF(a, b)
#endif

/* ---- rt_main.c: options -------------------------------------------------- */
enum { RT_DEV_CPU = 0, RT_DEV_CUDA = 1, RT_DEV_AUTO = 2 };
typedef struct rt_opts {
    const char *data_dir;
    int device;             /* RT_DEV_*: --device cpu|cuda|auto */
    int no_cache;           /* --no-cache: compile CUDA kernels afresh, cache nothing */
    int threads;
    int threads_given;      /* --threads was on the command line */
    int epochs;
    int batch;
    float lr;
    uint64_t seed;
    int shuffle, drop_last;
    int64_t max_steps;      /* 0: no limit */
    const char *init_path, *save_path, *metrics_path, *steplog_path;
    int profile;            /* --profile: per-kernel wall time */
    const char *trace_path; /* --trace FILE.json: Chrome trace of kernels and all-reduces */
    double comm_timeout;    /* --comm-timeout S: longest a collective may take */
    const char *ckpt_path;  /* --checkpoint FILE: written every epoch (rank 0) */
    int64_t ckpt_every;     /* --checkpoint-every N: also every N optimizer steps */
    const char *resume_path; /* --resume FILE */
    const char *bench_kernel; /* --bench-kernel NAME|all: time kernels alone, no training */
} rt_opts;


/* ---- rt_train.c: memory -------------------------------------------------- */
/* 64-byte aligned, zeroed; NULL (after an rt_err) if it cannot. Never
 * returns NULL for a zero size, so kernels may always take the pointer. */
void *rt_alloc(size_t bytes, const char *what);
void rt_free(void *p);

/* Everything a run touches, allocated once before the first step. */
typedef struct rt_ws {
    float *param, *grad, *opt, *act, *fix;
    double *stat;
    int32_t *idx;
    int nmax;
    int nstat;
} rt_ws;
int rt_ws_alloc_params(const rt_model *m, rt_ws *w);
int rt_ws_alloc_batch(const rt_model *m, rt_ws *w, int nmax);
void rt_ws_free(rt_ws *w);

/* ---- rt_data.c ----------------------------------------------------------- */
typedef struct rt_dataset {
    int64_t n;              /* samples */
    int64_t rows, cols;
    uint8_t *img;           /* n * rows * cols */
    uint8_t *lab;           /* n */
} rt_dataset;

/* Loads DIR/<prefix>-images-idx3-ubyte[.gz] and the matching labels,
 * checked against the model's input size and class count. */
int rt_load_split(const rt_model *m, const char *dir, const char *prefix,
                  rt_dataset *out);
void rt_dataset_free(rt_dataset *d);

/* ---- rt_json.c: just enough JSON for a safetensors header ---------------- */
enum { RT_J_NULL, RT_J_BOOL, RT_J_NUM, RT_J_STR, RT_J_ARR, RT_J_OBJ };
typedef struct rt_jnode {
    int type;
    int is_uint;            /* number is a non-negative integer < 2^63 */
    uint64_t u;             /* its value when is_uint */
    double num;
    const char *s;          /* string value (decoded, not NUL-terminated) */
    size_t slen;
    const char *key;        /* member name when the parent is an object */
    size_t klen;
    int child, next;        /* first child / next sibling, -1 for none */
    int nchild;
} rt_jnode;

typedef struct rt_json {
    rt_jnode *nodes;        /* nodes[0] is the root */
    int n, cap;
    char *buf;              /* private copy strings are decoded into */
} rt_json;

/* Parses len bytes. On error returns -1 and writes a reason (with the byte
 * offset) into err. Trailing whitespace is allowed: safetensors writers pad
 * the header with spaces to an 8-byte boundary. */
int rt_json_parse(rt_json *j, const char *text, size_t len, char *err, size_t errlen);
void rt_json_free(rt_json *j);
/* Member of object node `obj` with this key (NUL-terminated), or -1. */
int rt_json_get(const rt_json *j, int obj, const char *key);
int rt_json_keyeq(const rt_jnode *n, const char *key);
int rt_json_streq(const rt_jnode *n, const char *s);

/* ---- rt_safetensors.c ---------------------------------------------------- */
/* Fills the param slab from the file's tensors, matched by rt_param name. */
int rt_st_load(const rt_model *m, const char *path, float *param);
/* Writes every rt_param as F32, atomically (temp + fsync + rename). */
int rt_st_save(const rt_model *m, const char *path, const float *param);
/* Cheap check before a long run that `path` can be created at the end. */
int rt_st_check_writable(const char *path);
/* A string in a file's __metadata__ (checkpoints keep their state there). */
typedef struct rt_st_kv { const char *key; char val[96]; } rt_st_kv;
/* rt_st_save with these metadata entries besides format/producer/model. */
int rt_st_save_kv(const rt_model *m, const char *path, const float *param, const rt_st_kv *kv,
                  int nkv);
/* Fills the value of every key in kv from path's metadata; -1 (after an
 * error naming the key) if one is missing or the file is damaged. */
int rt_st_load_meta(const char *path, rt_st_kv *kv, int nkv);

/* ---- rt_ckpt.c: --checkpoint / --resume ---------------------------------- */
/* Where a run stands: what a checkpoint saves and --resume continues. */
typedef struct rt_resume {
    int active;             /* loaded from --resume */
    int epoch;              /* the epoch to continue, 1-based */
    int64_t step;           /* optimizer steps taken in all */
    int64_t skip;           /* batches of `epoch` already trained (per rank) */
    double loss_sum, rows;  /* `epoch`'s loss and sample sums so far, all ranks */
    double secs;            /* `epoch`'s training time so far */
    /* fp16 (rt_amp): optimizer steps taken (step minus the skipped ones:
     * Adam's t), and GradScaler's state */
    int64_t opt_steps;
    float scale;
    int64_t tracker, skipped;
} rt_resume;

/* ---- rt_amp.c: fp16 dynamic loss scaling (torch.cuda.amp.GradScaler) ---- */
typedef struct rt_amp {
    int on;                 /* the model is fp16 */
    float scale;            /* S: the loss (so every gradient) is multiplied by it */
    int64_t tracker;        /* clean steps since S last changed (_growth_tracker) */
    int64_t skipped;        /* steps skipped in the run so far */
    float growth, backoff;
    int64_t interval;
    int inject_rank;        /* test hook CDDP_TEST_FOUND_INF=RANK:STEP, or -1 */
    int64_t inject_step;
} rt_amp;
/* From the model's settings, or a checkpoint's state (rs->active). */
void rt_amp_init(rt_amp *a, const rt_model *m, const rt_resume *rs);
/* found_inf of this rank: any inf/NaN among the n gradients (or the test
 * hook's step); then the logical or over all ranks, so all skip together. */
int rt_amp_found_inf(const rt_amp *a, const float *grad, int64_t n, int64_t step);
/* torch._amp_update_scale_: backoff and reset on found_inf, else grow
 * after `interval` clean steps (if the grown scale is finite). */
void rt_amp_update(rt_amp *a, int found_inf);
/* Parameters, optimizer state and st into path, atomically, by rank 0
 * (a no-op returning 0 elsewhere, so every rank may call it). */
int rt_ckpt_save(const rt_model *m, const rt_opts *o, const char *path, const float *param,
                 const float *opt, const rt_resume *st);
/* Everything checked first (tensors, model, optimizer, sampler settings
 * when inside an epoch), then param, opt and st filled; -1 after an error
 * naming the file and what does not fit. */
int rt_ckpt_load(const rt_model *m, const rt_opts *o, const char *path, float *param, float *opt,
                 rt_resume *st);
void rt_ckpt_bcast(rt_resume *st);  /* rank 0's state to all ranks */

/* ---- rt_rng.c ------------------------------------------------------------ */
typedef struct rt_rng { uint64_t s[4]; } rt_rng;
/* Independent stream `stream` of seed `seed`. */
void rt_rng_init(rt_rng *r, uint64_t seed, uint64_t stream);
uint64_t rt_rng_next(rt_rng *r);
double rt_rng_uniform(rt_rng *r);                   /* [0, 1), 53 bits */
uint64_t rt_rng_below(rt_rng *r, uint64_t bound);   /* [0, bound), unbiased */
uint64_t rt_hash_str(const char *s);
/* a[0..n) := a permutation of 0..n-1 that depends only on (seed, epoch). */
void rt_shuffle(int32_t *a, int64_t n, uint64_t seed, uint64_t epoch);

/* ---- rt_init.c ----------------------------------------------------------- */
void rt_init_params(const rt_model *m, float *param, uint64_t seed);

/* ---- rt_log.c ------------------------------------------------------------ */
extern const char *rt_prog;     /* basename of argv[0], for messages */
/* "PROG: error: ..." / "PROG: warning: ..." as one line on stderr. */
void rt_err(const char *fmt, ...) RT_PRINTF(1, 2);
void rt_warn(const char *fmt, ...) RT_PRINTF(1, 2);

typedef struct rt_log {
    FILE *metrics, *steplog;
    const char *metrics_path, *steplog_path;
    int tty;                /* stderr is a terminal: draw a progress bar */
    double last_bar;        /* time of the last redraw */
    int bar_drawn;
    int scaler;             /* fp16: the epoch's line and row report the loss scaler */
    double scale;           /* ... as rt_log_scaler last set it */
    int64_t skipped, skipped_all;
} rt_log;

int rt_log_open(rt_log *l, const rt_opts *o, int scaler);
/* scale: the fp16 loss scale the step ran with and found_inf (0/1), or
 * NAN and -1 without a scaler (the step log then has no such columns) */
void rt_log_step(rt_log *l, int64_t step, int epoch, double loss, double scale, int found_inf);
/* fp16, before rt_log_epoch: the loss scale after the epoch and the steps
 * skipped (in the epoch, in the run), for its line and CSV row. */
void rt_log_scaler(rt_log *l, double scale, int64_t skipped, int64_t skipped_all);
void rt_log_progress(rt_log *l, int epoch, int epochs, int64_t done, int64_t total,
                     double loss, int force);
void rt_log_epoch(rt_log *l, int epoch, int epochs, double train_loss,
                  double test_loss, double test_acc, double seconds, int64_t images);
int rt_log_close(rt_log *l);    /* reports write errors on the CSV files */
double rt_now(void);            /* CLOCK_MONOTONIC seconds */

/* ---- rt_comm.c: ranks (MPI when a launcher started the program) ----------
 * One rank and no MPI call at all unless mpirun/srun started the program
 * (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE in the environment), or
 * always in a build with CDDP_NO_MPI. Every collective is watched: one
 * that takes longer than --comm-timeout prints why and aborts the job.
 * Errors in MPI calls print the call and file:line, then abort the job:
 * the collectives return nothing to check. */
typedef struct rt_comm {
    int rank, size;             /* 0 and 1 for a single rank */
    int local_rank, local_size; /* ranks on this node (MPI_COMM_TYPE_SHARED) */
    int mpi;                    /* MPI is initialized */
    double t0;                  /* rt_now() after the start-up barrier */
    double timeout;             /* seconds a collective may take */
} rt_comm;
extern rt_comm rt_world;

int rt_comm_launched(void);
/* MPI_Init_thread(MULTIPLE) when launched, then a barrier that sets t0.
 * -1 (after an error) when the thread level is too low. */
int rt_comm_init(double timeout);
void rt_comm_finalize(void);
/* Ends the whole job (MPI_Abort): for failures on one rank, which would
 * otherwise leave the others waiting in a collective. */
void rt_comm_abort(int code) __attribute__((noreturn));
double rt_comm_time(void);      /* seconds since t0, any thread */
/* Allgather of the program's fingerprint (parameter table, kernel names,
 * CUDA source) and the effective batch/lr/epochs/seed/shuffle/drop_last/
 * max_steps/device/trace; -1 on every rank when any rank differs, rank 0
 * having said which and in what. */
int rt_comm_check_same(const rt_model *m, const rt_opts *o);
int rt_comm_check_data(int64_t ntrain, int64_t ntest);
/* Collectives, in place; `what` names them in a timeout message. */
void rt_comm_bcast_f32(float *x, int64_t n, const char *what);      /* from rank 0 */
void rt_comm_bcast_bytes(void *x, int64_t n, const char *what);     /* from rank 0 */
void rt_comm_sum_f64(double *x, int64_t n, const char *what);
void rt_comm_allreduce_bucket(float *x, int64_t n, int bucket);     /* MPI_SUM; comm thread */
void rt_comm_send(const void *buf, int64_t bytes, const char *what); /* to rank 0 */
void rt_comm_recv(int from, void *buf, int64_t bytes, const char *what);

/* ---- rt_sampler.c: DistributedSampler ------------------------------------- */
typedef struct rt_sampler {
    int64_t n;                  /* dataset samples */
    int rank, world, shuffle, drop_last;
    uint64_t seed;
    int64_t per_rank;           /* samples of each rank per epoch */
    int64_t total;              /* per_rank * world */
    int64_t pad;                /* repeated samples: total - n when padding */
    int32_t *order;             /* [n] the epoch's order */
    int32_t *shard;             /* [per_rank] this rank's samples, in order */
} rt_sampler;
int rt_sampler_init(rt_sampler *s, int64_t n, int rank, int world, int shuffle, int drop_last,
                    uint64_t seed);
void rt_sampler_set_epoch(rt_sampler *s, uint64_t epoch);
void rt_sampler_free(rt_sampler *s);

/* ---- rt_trace.c: --trace FILE.json (Chrome trace events) ------------------ */
enum { RT_TEV_TRAIN = 0, RT_TEV_EVAL = 1, RT_TEV_BUCKET = 2 };
typedef struct rt_tev {
    double t0, t1;              /* rt_comm_time() */
    int64_t step;
    int32_t id;                 /* kernel index in its plan, or bucket */
    uint8_t kind, tid;
    uint8_t pad_[2];
} rt_tev;
typedef struct rt_tbuf { rt_tev *ev; int64_t n, cap, dropped; } rt_tbuf;
typedef struct rt_trace {
    int on;
    int gpu;                    /* tids are streams (compute, comm), not threads */
    const char *path;
    rt_tbuf buf[2];             /* [tid]: each written by one thread only */
} rt_trace;
int rt_trace_open(rt_trace *t, const char *path);   /* path NULL: off */
/* t may be NULL or off: nothing is recorded. */
void rt_trace_add(rt_trace *t, int tid, int kind, int id, int64_t step, double t0, double t1);
/* Collective: every rank sends its events, rank 0 writes the file. */
int rt_trace_write(rt_trace *t, const rt_model *m);
void rt_trace_free(rt_trace *t);

/* ---- rt_reducer.c: bucket all-reduces on a comm thread --------------------- */
typedef struct rt_reducer {
    int active;                 /* several ranks: the comm thread runs */
    const rt_bucket *b;
    int nb, nk;
    rt_bucket one;              /* the table when the model has none */
    int *launch_upto;           /* [nk] buckets handed over once kernel k ran */
    int *wait_upto;             /* [nk] buckets reduced before kernel k runs */
    float *grad;
    float scale;                /* 1 / world size */
    rt_trace *trace;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    int64_t base, launched, done;   /* absolute bucket counts, under mu */
    int64_t step;               /* the step being reduced (trace) */
    int quit;
    int my_launched, my_done;   /* main thread's view of this step */
} rt_reducer;
/* The model's buckets (one over the whole slab, in *one, when the model
 * has no table); -1 after an error when the table is inconsistent. */
int rt_bucket_table(const rt_model *m, rt_bucket *one, const rt_bucket **tb, int *nb);
int rt_reducer_init(rt_reducer *r, const rt_model *m, float *grad, rt_trace *trace);
void rt_reducer_step_begin(rt_reducer *r, int64_t step);
void rt_reducer_before(rt_reducer *r, int k);   /* waits for the buckets kernel k updates */
void rt_reducer_after(rt_reducer *r, int k);    /* hands over buckets kernel k completed */
void rt_reducer_step_end(rt_reducer *r);        /* waits for all */
void rt_reducer_free(rt_reducer *r);

/* ---- rt_train.c: the epoch loop ------------------------------------------ */
/* The learning rate of epoch `epoch` (1-based): --lr (or the train
 * block's) through the model's schedule (cddprt.h, rt_model.sched). */
float rt_lr_at(const rt_model *m, float lr, int epoch);
/* Rank 0's buffers (RT_PARAM_BUFFER) onto every rank: before evaluating. */
void rt_bcast_buffers(const rt_model *m, float *param);
/* rs: where to continue (--resume), or a fresh run (rs->active 0). */
/* rt_bench.c: --bench-kernel. The name check: 0, or -1 with the message
 * (the train kernels listed). */
int rt_bench_check_name(const rt_model *m, const char *name);
int rt_bench_kernels(const rt_model *m, const rt_opts *o, rt_ws *w, const rt_dataset *train);

int rt_train(const rt_model *m, const rt_opts *o, rt_ws *w, const rt_resume *rs,
             const rt_dataset *train, const rt_dataset *test, rt_log *log);

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
    int ordinal;            /* device number: the rank's local rank */
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUmodule mod;
    int driver;             /* cuDriverGetVersion: 12080 is CUDA 12.8 */
    int cc_major, cc_minor;
    char arch[16];          /* "sm_90" */
    char name[128];
    size_t total_mem;
    void *staging;
    size_t staging_bytes;
    double timeout;         /* seconds any single wait may take */
    int from_cache;         /* the module came from the kernel cache */
    double compile_s;       /* NVRTC time when it did not */
    rt_nccl *nccl;          /* several GPU ranks: polled while waiting */
} rt_cuda;

/* Loads NVRTC (CDDP_LIBNVRTC, else libnvrtc.so.13, .so.12, .so, from the
 * loader's path or lib64/ or lib/ of $CUDA_HOME, $CUDA_PATH, /usr/local/cuda)
 * whose major version the driver supports (driver_version 0: any). -1 with
 * the reason in why. */
int rt_nvrtc_load(int driver_version, char *why, size_t whylen);
void rt_nvrtc_unload(void);
/* Compiles src for arch ("sm_90": a CUBIN; "compute_90": PTX). On a
 * compile error prints the NVRTC log to stderr. Image is malloc'ed. */
int rt_nvrtc_compile(const char *src, const char *arch, void **image, size_t *len);

/* Opens the driver (CDDP_LIBCUDA, else libcuda.so.1), device `ordinal`
 * and NVRTC. -1 with one line in why: no driver library, cuInit failed,
 * no device (or fewer than ordinal + 1), driver too old, NVRTC missing.
 * Nothing is printed. */
int rt_cuda_open(rt_cuda *cu, int ordinal, char *why, size_t whylen);
void rt_cuda_close(rt_cuda *cu);
/* The full NVRTC source of a program: the model's cuda_src, then the
 * runtime's own kernels and the layout-check kernel. malloc'ed. */
char *rt_cuda_source(const char *cuda_src);
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
/* The image of src for arch. use_cache 1: from the cache when there, else
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
/* Loads NCCL (CDDP_LIBNCCL, else libnccl.so.2 from the loader's path or
 * the CUDA toolkit's lib64/ and lib/); -1 with the reason in why. */
int rt_nccl_load(int *version, char *why, size_t whylen);
/* Collective over the MPI world: rank 0's unique id is broadcast, every
 * rank joins with its MPI rank on the current device. -1 after an error
 * line (the caller ends the job: the others cannot go on alone). */
int rt_nccl_init(rt_nccl *n);
/* In-place average of count floats at buf over the ranks, on stream s
 * (capturable into a CUDA graph). */
int rt_nccl_allreduce_avg(rt_nccl *n, CUdeviceptr buf, size_t count, CUstream s, int bucket);
/* In-place sum, the same way: SyncBatchNorm's sums after `kernel`. */
int rt_nccl_allreduce_sum(rt_nccl *n, CUdeviceptr buf, size_t count, CUstream s, const char *kernel);
/* -1 (after an error line) if the communicator has failed. */
int rt_nccl_check(rt_nccl *n, const char *what);
void rt_nccl_close(rt_nccl *n);

/* ---- rt_cuda_train.c: the epoch loop on the device ------------------------ */
/* With cu->nccl, this rank trains its DistributedSampler shard and the
 * gradient buckets are averaged over the ranks inside the step's graph. */
int rt_cuda_train(rt_cuda *cu, const rt_model *m, const rt_opts *o, rt_ws *w, const rt_resume *rs,
                  const rt_dataset *train, const rt_dataset *test, rt_log *log);

#endif
