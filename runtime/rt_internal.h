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
    double peak_gflops, peak_gbs; /* --peak-gflops, --peak-gbs: the roofline's (0: measured) */
    const char *trace_path; /* --trace FILE.json: Chrome trace of kernels and all-reduces */
    double comm_timeout;    /* --comm-timeout S: longest a collective may take */
    const char *ckpt_path;  /* --checkpoint FILE: written every epoch (rank 0) */
    int64_t ckpt_every;     /* --checkpoint-every N: also every N optimizer steps */
    const char *resume_path; /* --resume FILE */
    const char *plot_path;  /* --plot FILE.svg: the loss curve, redrawn every epoch (rank 0) */
    const char *bench_kernel; /* --bench-kernel NAME|all: time kernels alone, no training */
    const char *eval_path;  /* --evaluate FILE: the test set through FILE's parameters, no training */
    /* --generate N --load FILE [--prompt S --temperature X --top-k K]:
     * a language model writes N tokens after the prompt (rt_gen.c) */
    int64_t generate;
    const char *gen_weights, *prompt;   /* gen_weights: --load FILE (--generate, --export-onnx) */
    const char *onnx_path;  /* --export-onnx FILE: the forward as ONNX (after training, or of --load's weights) */
    double temperature;
    int top_k;
    /* not an option: what the data load keeps for --save and --checkpoint
     * (rt_data.meta: normalize = auto's numbers, a csv's classes) */
    const struct rt_st_kv *data_meta;
    int ndata_meta;
} rt_opts;


/* rt_gen.c: --generate, through rt_model.predict on the CPU with param */
int rt_generate(const rt_model *m, const rt_opts *o, const float *param);

/* ---- rt_mem.c: every allocation of the runtime, through one hook --------- */
/* malloc, calloc, realloc, aligned_alloc and strdup, each NULL when the
 * hook rt_alloc_fail_hook (a weak symbol: defined only by the
 * allocation-failure test) says this one fails. Freed with free(). */
void *rt_malloc(size_t n);
void *rt_calloc(size_t n, size_t each);
void *rt_realloc(void *p, size_t n);
void *rt_aligned_alloc(size_t align, size_t n);
char *rt_strdup(const char *s);

/* ---- rt_util.c: memory, messages, the clock (uses rt_mem.c only) -- */
/* 64-byte aligned, zeroed; NULL (after an rt_err) if it cannot. Never
 * returns NULL for a zero size, so kernels may always take the pointer. */
void *rt_alloc(size_t bytes, const char *what);
void *rt_alloc_n(int64_t n, size_t each, const char *what);  /* n * each bytes, checked */
void rt_free(void *p);
extern const char *rt_prog;     /* basename of argv[0], for messages */
/* "PROG: error: ..." / "PROG: warning: ..." as one line on stderr (with
 * "rank R: " when there are several ranks: rt_world, defined here). */
void rt_err(const char *fmt, ...) RT_PRINTF(1, 2);
void rt_warn(const char *fmt, ...) RT_PRINTF(1, 2);
double rt_now(void);            /* CLOCK_MONOTONIC seconds */

/* ---- rt_ws.c: memory for a run -------------------------------------------- */

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

/* ---- rt_data.c: the data set, whatever file it came from ----------------
 * Every reader fills an rt_dataset; the devices keep x in its stored type
 * (uint8 stays uint8 on the GPU) and the model's first kernel gathers,
 * scales and normalizes it (rt_exec's x, y, norm). */
typedef struct rt_dataset {
    int64_t n;              /* samples */
    int x_u8;               /* 1: x is uint8, scaled by 1/255 as ToTensor; 0: float */
    int xrank;              /* a sample's dims: xdim[0..xrank) */
    int64_t xdim[4];
    int64_t xsize;          /* elements per sample */
    void *x;                /* n * xsize */
    int y_float;            /* 1: y is float [n * ysize]; 0: int32 class indices [n] */
    int64_t ysize;          /* targets per sample (1 for class indices) */
    void *y;
} rt_dataset;

/* A csv target's class labels, sorted: name[i] is class i. */
typedef struct rt_classes {
    int n;
    char **name;
} rt_classes;
void rt_classes_free(rt_classes *c);

/* The training and test sets and the normalization the kernels apply. */
typedef struct rt_data {
    rt_dataset train, test;
    int norm_n;             /* channels (or features) with their own mean/std */
    int64_t norm_div;       /* elements per channel of a sample */
    float *norm;            /* [2 * norm_n]: mean, then std */
    rt_classes classes;     /* csv: the labels of a non-numeric target; n = 0 otherwise */
    rt_classes vocab;       /* text: token i's characters (name NULL for vocab = bytes); n = 0 otherwise */
    struct rt_st_kv *meta;  /* what --save keeps about the data: normalize = auto's
                               numbers, a csv target's labels (rt_st_save_kv) */
    int nmeta;
} rt_data;

/* rt_onnx.c: --export-onnx. check: the model exports (0), else says which
 * op does not; write: the ONNX file of param, with d's scaling and
 * normalization before the graph, atomically */
int rt_onnx_check(const rt_model *m);
int rt_onnx_write(const rt_model *m, const rt_data *d, const float *param, const char *path);

/* What a training run saved about its data (set_meta in rt_data.c): an
 * evaluation, and a run resumed from a checkpoint, normalizes with these
 * numbers and maps a csv target's labels with these classes, whatever
 * data it is given. */
typedef struct rt_data_saved {
    const char *from;       /* the file they came from */
    int norm_n;             /* 0: none saved */
    float *norm;            /* [2 * norm_n]: mean, then std */
    rt_classes classes;     /* n = 0: none saved */
} rt_data_saved;
/* Reads them from a --save (or checkpoint) file's metadata; none is not an
 * error (a file from another writer). -1 after an error naming the file. */
int rt_data_saved_read(const char *path, rt_data_saved *sv);
void rt_data_saved_free(rt_data_saved *sv);

/* Loads m->data (path: --data, or NULL for the train block's), checks it
 * against the model (input size, target kind, classes or target width)
 * and sets the normalization. 0, or -1 after one line naming the file,
 * the place and the reason. */
int rt_data_load(const rt_model *m, const char *path, uint64_t seed, const rt_data_saved *sv, rt_data *d);
void rt_data_free(rt_data *d);
/* The cheap check before anything is loaded: path (--data, or the train
 * block's) exists and is a directory (idx) or a file (npz, csv). */
int rt_data_check_path(const rt_model *m, const char *path);
/* Points e's data fields (x, y, norm and their sizes) at host set s. */
void rt_data_exec(const rt_data *d, const rt_dataset *s, rt_exec *e);
/* A sample's dims as "28x28 = 784", or "13" for one dim (for messages);
 * the model's input per sample likewise, and its element count. */
const char *rt_data_dims(const rt_dataset *s, char *buf, size_t cap);
const char *rt_model_dims(const rt_model *m, char *buf, size_t cap);
int64_t rt_model_in_elems(const rt_model *m);
void rt_dataset_free(rt_dataset *s);
/* An autoencoder's set (target = input): the loss reads the samples
 * themselves; y is n zero labels nothing reads, so the sets look alike
 * to the split, the sampler and the devices. */
int rt_dataset_no_targets(rt_dataset *s, int64_t n, const char *path);

/* ---- the readers: each fills one set, checked against the model ---------
 * rt_idx.c: DIR/<prefix>-images-idx3-ubyte[.gz] and the matching labels */
int rt_idx_load(const rt_model *m, const char *dir, const char *prefix, rt_dataset *out);
/* rt_data_file.c: a whole file into memory (malloc'd; -1 after an error);
 * n bytes of a file's text for a one-line message: at most cap - 1 bytes
 * ("..." when cut), line breaks and other control characters as '?' */
int rt_data_read_file(const char *path, uint8_t **buf, size_t *len);
const char *rt_data_show(const char *s, size_t n, char *buf, size_t cap);
/* The data limit (--data-limit; 0: half this machine's memory): the most
 * bytes a data file's arrays may take once read. rt_data_limit_check is
 * called before each array of the file at path is allocated, with the
 * bytes read so far (used) and this one's (bytes): -1 after an error
 * naming the limit and the flag. */
extern int64_t rt_data_limit;
int rt_data_limit_check(const char *path, const char *what, int64_t used, int64_t bytes);
/* rt_npz.c: the arrays x_train, y_train and, when present, x_test,
 * y_test (m->data.arrays' names); test->n = 0 when the file has none.
 * rt_npz_parse reads the file's bytes (the fuzz harness's entry). */
int rt_npz_load(const rt_model *m, const char *path, rt_dataset *train, rt_dataset *test);
/* text("FILE", block, split, vocab): d's train and test windows and its vocabulary (rt_text.c) */
int rt_text_load(const rt_model *m, const char *path, struct rt_data *d);
/* the same on a file's bytes (the fuzz harness's way in); d's sets and
 * vocabulary are its own on success, free with rt_data_free's parts */
int rt_text_parse(const rt_model *m, const char *path, const uint8_t *buf, size_t len, struct rt_data *d);
int rt_npz_parse(const rt_model *m, const char *path, const uint8_t *buf, size_t len, rt_dataset *train,
                 rt_dataset *test);
/* rt_csv.c: one csv file. fit: a training file, whose non-numeric labels
 * set cls (sorted); else a test file, whose labels must be among cls. */
int rt_csv_load(const rt_model *m, const char *path, rt_classes *cls, int fit, rt_dataset *out);
int rt_csv_parse(const rt_model *m, const char *path, const char *text, size_t len, rt_classes *cls, int fit,
                 rt_dataset *out);
/* rt_split.c: moves the fraction frac of *train into *test (empty on
 * entry), chosen by seed alone (so alike on every rank), per class for
 * class targets; both keep the file's order. -1 after an error naming path. */
int rt_split(const char *path, rt_dataset *train, rt_dataset *test, double frac, uint64_t seed);
int rt_split_stratified(const rt_dataset *s);
/* Whether v is a class label model m trains on: an index in [0, nclass),
 * or the loss's ignore_index; and what the message of one that is not
 * adds (the data readers say where it is). */
int rt_label_ok(const rt_model *m, double v);
const char *rt_label_hint(const rt_model *m, double v);
/* A token model's samples (rt_model.in_vocab): every value an integer in
 * [0, in_vocab), else -1 after a message naming path, what and where. */
int rt_tokens_check(const rt_model *m, const char *path, const char *what, const float *x, int64_t n,
                    int64_t xsize);

/* ---- rt_bench.c: --bench-kernel -------------------------------------------
 * The name check: 0, or -1 with the message (the train kernels listed). */
int rt_bench_check_name(const rt_model *m, const char *name);
int rt_bench_kernels(const rt_model *m, const rt_opts *o, rt_ws *w, const rt_data *data);

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

/* ---- rt_crc.c: CRC-32C ---------------------------------------------------- */
/* crc continued over n more bytes (start from 0) */
uint32_t rt_crc32c(uint32_t crc, const void *buf, size_t n);

/* ---- rt_safetensors.c ---------------------------------------------------- */
/* Fills the param slab from the file's tensors, matched by rt_param name;
 * a file that carries checksums (every file cddp writes) is verified: a
 * damaged header or tensor is refused ("checksum mismatch"), one without
 * them (PyTorch's) loads with a line saying it is unverified. */
int rt_st_load(const rt_model *m, const char *path, float *param);
/* Writes every rt_param as F32, atomically (temp + fsync + rename), with
 * the CRC-32C of each tensor's bytes ("cddp.crc32c.NAME") and of the
 * metadata's strings ("cddp.metadata_crc32c") in __metadata__. */
int rt_st_save(const rt_model *m, const char *path, const float *param);
/* Cheap check before a long run that `path` can be created at the end. */
int rt_st_check_writable(const char *path);
/* Removes the temporary files an interrupted save of `path` left beside
 * it (killed between its mkstemp and its rename), a minute old or more,
 * with one line naming them */
void rt_st_clean_stale(const char *path);
/* A string in a file's __metadata__ (checkpoints keep their state there). */
typedef struct rt_st_kv { const char *key; char val[96]; } rt_st_kv;
/* rt_st_save with these metadata entries besides format/producer/model. */
int rt_st_save_kv(const rt_model *m, const char *path, const float *param, const rt_st_kv *kv,
                  int nkv);
/* Fills the value of every key in kv from path's metadata; -1 (after an
 * error naming the key) if one is missing or the file is damaged. */
int rt_st_load_meta(const char *path, rt_st_kv *kv, int nkv);
/* Every metadata string whose key starts with prefix (*n = 0 when none);
 * free with rt_st_kv_free. */
int rt_st_meta_prefix(const char *path, const char *prefix, rt_st_kv **kv, int *n);
void rt_st_kv_free(rt_st_kv *kv, int n);

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
typedef struct rt_coll rt_coll;
int rt_amp_found_inf(const rt_amp *a, rt_coll *c, const float *grad, int64_t n, int64_t step);
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
int rt_ckpt_bcast_data(rt_data_saved *sv);  /* and its saved data; -1 after an error */

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

/* ---- rt_log_plot.c: --plot, the loss curve kept up to date ---------------- */
typedef struct rt_live_plot rt_live_plot;
/* metric: the right axis' title ("test accuracy", ...); NULL after an error line */
rt_live_plot *rt_live_plot_open(const char *path, const char *metric);
void rt_live_plot_epoch_steps(rt_live_plot *p, int64_t n);
void rt_live_plot_step(rt_live_plot *p, int64_t step, int epoch, double loss);
/* the epoch's numbers, then the picture redrawn (a failure: one warning) */
void rt_live_plot_epoch(rt_live_plot *p, int epoch, double train, double test, double acc, const char *title);
void rt_live_plot_close(rt_live_plot *p);   /* NULL is fine */

/* ---- rt_log.c ------------------------------------------------------------ */

typedef struct rt_log {
    FILE *metrics, *steplog;
    const char *metrics_path, *steplog_path;
    int tty;                /* stderr is a terminal: draw a progress bar */
    double last_bar;        /* time of the last redraw */
    int bar_drawn;
    int scaler;             /* fp16: the epoch's line and row report the loss scaler */
    double scale;           /* ... as rt_log_scaler last set it */
    int64_t skipped, skipped_all;
    char *rows;             /* step rows not yet written (whole rows only) */
    size_t rows_len;
    int metrics_err, steplog_err;   /* errno of a failed write, for rt_log_close */
    rt_live_plot *plot;     /* --plot */
    const char *title;      /* the picture's title */
    int task;               /* RT_METRICS_*: the evaluation's two numbers and their names */
    int64_t per_sample;     /* RT_METRICS_TOKENS: tokens a sample (tokens per second) */
} rt_log;

/* task: RT_METRICS_*, the metrics the epoch's line and CSV row report;
 * per_sample: a language model's tokens a sample (RT_METRICS_TOKENS) */
int rt_log_open(rt_log *l, const rt_opts *o, int scaler, int task, int64_t per_sample);
/* The evaluation's numbers from its sums over the test set (loss, then the
 * metric sums; ntest samples of nclass outputs): accuracy (out[1] NaN);
 * regression MSE and MAE over every element; multi-label accuracy per
 * label and macro-F1 (per output 2 TP / (2 TP + FP + FN), 0 where an
 * output has none, as sklearn's f1_score(average='macro'); their mean). */
/* --evaluate's one line: the test loss and the task's metrics (rank 0). */
void rt_log_evaluation(int task, const char *path, int64_t ntest, double test_loss, const double metric[2],
                       double seconds);
void rt_log_metrics(int task, const double *sums, int has_metric, int64_t ntest, int nclass, double out[2]);
/* scale: the fp16 loss scale the step ran with and found_inf (0/1), or
 * NAN and -1 without a scaler (the step log then has no such columns) */
void rt_log_step(rt_log *l, int64_t step, int epoch, double loss, double scale, int found_inf, double lr);
/* fp16, before rt_log_epoch: the loss scale after the epoch and the steps
 * skipped (in the epoch, in the run), for its line and CSV row. */
void rt_log_scaler(rt_log *l, double scale, int64_t skipped, int64_t skipped_all);
void rt_log_progress(rt_log *l, int epoch, int epochs, int64_t done, int64_t total,
                     double loss, int force);
/* lr: the learning rate the epoch's steps used */
void rt_log_epoch(rt_log *l, int epoch, int epochs, double train_loss,
                  double test_loss, const double metric[2], double seconds, int64_t images, double lr);
void rt_log_flush(rt_log *l);    /* the CSV rows so far to the files */
/* steps per epoch (each rank's; the same on all), for --plot's step axis */
void rt_log_epoch_steps(rt_log *l, int64_t n);
int rt_log_close(rt_log *l);    /* reports write errors on the CSV files */

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
extern rt_comm rt_world;        /* defined in rt_util.c (messages name the rank) */

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
/* SyncBatchNorm's sums, on a communicator of their own (see rt_comm.c) */
void rt_comm_sync_sum(float *x, int64_t n);
void rt_comm_allgather_bytes(const void *mine, void *all, int64_t each, const char *what);
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

/* ---- rt_coll.c: one interface to the collectives, over MPI or NCCL -------
 * Every collective a device needs during training goes through these, the
 * same way on both devices: x is where the device keeps the data (host
 * memory for "mpi", device memory for "nccl", then on CUDA stream q, which
 * may be capturing a graph). Each returns 0, or -1 after an error line (an
 * MPI failure ends the job inside the call: rt_comm.c). */
struct rt_coll {
    const char *name;       /* "mpi" (also a single rank without MPI), "nccl" */
    int rank, size;
    int on_device;          /* x and q are device memory and a CUDA stream */
    void *impl;             /* the NCCL communicator */
    /* x[0..n) := its average over the ranks (a gradient bucket) */
    int (*bucket_avg)(rt_coll *c, void *x, int64_t n, int bucket, void *q);
    /* x[0..n) := its sum over the ranks (SyncBatchNorm; after kernel `what`) */
    int (*sum_f32)(rt_coll *c, void *x, int64_t n, const char *what, void *q);
    /* *flag (one float) := > 0 when it is > 0 on some rank (the loss
     * scaler's found_inf, so every rank skips the step together) */
    int (*any)(rt_coll *c, void *flag, void *q);
    /* rank 0's x[0..n) onto every rank (the buffers before evaluating) */
    int (*bcast_f32)(rt_coll *c, void *x, int64_t n, const char *what, void *q);
    /* host doubles summed over the ranks: the loss and metric sums */
    void (*sum_f64)(rt_coll *c, double *x, int64_t n, const char *what);
};
/* The MPI world's collectives on host memory (no-ops for one rank). */
void rt_coll_mpi(rt_coll *c);
/* rt_sync_sum (the C kernels' SyncBatchNorm sums) goes to c's sum_f32. */
void rt_coll_for_kernels(rt_coll *c);
/* DDP's broadcast_buffers through c: rank 0's buffers (RT_PARAM_BUFFER)
 * at param (host or device memory, as c takes it) onto every rank. */
int rt_coll_bcast_buffers(rt_coll *c, const rt_model *m, void *param, void *q);

/* ---- rt_buckets.c: when each gradient bucket is reduced -------------------- */
typedef struct rt_bsched {
    const rt_bucket *b;         /* the model's table, or &one (do not copy the struct) */
    int nb, nk;
    rt_bucket one;              /* the table when the model has none */
    int *launch_upto;           /* [nk] buckets handed over once kernel k ran */
    int *wait_upto;             /* [nk] buckets reduced before kernel k runs */
} rt_bsched;
/* -1 after an error when the model's table is inconsistent. */
int rt_bsched_init(rt_bsched *s, const rt_model *m);
void rt_bsched_free(rt_bsched *s);

/* ---- rt_reducer.c: bucket all-reduces on a comm thread (CPU device) -------- */
typedef struct rt_reducer {
    int active;                 /* several ranks: the comm thread runs */
    rt_bsched s;
    rt_coll *coll;
    float *grad;
    rt_trace *trace;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    int64_t base, launched, done;   /* absolute bucket counts, under mu */
    int64_t step;               /* the step being reduced (trace) */
    int quit;
    int my_launched, my_done;   /* main thread's view of this step */
    const float *fold;          /* accumulate: rt_reducer_fold's, for the comm thread */
    float fold_scale;
} rt_reducer;
int rt_reducer_init(rt_reducer *r, const rt_model *m, rt_coll *coll, float *grad, rt_trace *trace);
void rt_reducer_step_begin(rt_reducer *r, int64_t step);
void rt_reducer_before(rt_reducer *r, int k);   /* waits for the buckets kernel k updates */
void rt_reducer_after(rt_reducer *r, int k);    /* hands over buckets kernel k completed */
void rt_reducer_step_end(rt_reducer *r);        /* waits for all */
void rt_reducer_free(rt_reducer *r);
/* accumulate's last micro-batch: g := (acc + g) * scale (g * scale when
 * acc is NULL), as the comm thread does to each bucket before its
 * all-reduce from rt_reducer_fold(r, acc, scale) on, until it is called
 * again (scale 0: no fold). */
void rt_fold_grads(float *g, const float *acc, float scale, int64_t n);
void rt_reducer_fold(rt_reducer *r, const float *acc, float scale);

/* ---- rt_loop.c: the one epoch loop, and the devices it drives ------------
 * The loop owns the epoch: sampler, batches, the resume skip, checkpoint
 * cadence, loss and accuracy reduction, logging, the evaluation split, the
 * learning-rate schedule and the loss scaler's bookkeeping. A device only
 * runs steps and evaluations and keeps its state; it implements: */
typedef struct rt_dev_out {     /* what collect returns */
    double *loss;           /* [b1 - b0]: each step's loss sum, this rank's */
    double *count;          /* [b1 - b0]: each step's counted targets (rt_plan.has_count), this rank's */
    double *scale, *found;  /* [b1 - b0] fp16: the scale a step ran with, its found_inf */
    double eval[1 + RT_METRIC_MAX]; /* after evaluate: this rank's test loss sum, then its
                                       metric sums (rt_plan_metrics of the eval plan) */
    double eval_count;      /* after evaluate: this rank's counted test targets (has_count) */
    double secs;            /* training time of the epoch so far (this run) */
    float amp_scale;        /* fp16: GradScaler's state now */
    int64_t amp_tracker, amp_skipped;
} rt_dev_out;
/* The evaluation's metric sums of plan p: nmetric, 1 for accuracy, 0 without. */
static inline int rt_plan_metrics(const rt_plan *p) { return p->correct_stat < 0 ? 0 : p->nmetric ? p->nmetric : 1; }
typedef struct rt_device rt_device;
struct rt_device {
    const char *name;
    int async;              /* train() may return before its steps are done (cuda) */
    void *impl;
    /* the epoch's sample order (this rank's shard: nothing may change it
     * until the next begin_epoch), the learning rate of each of its
     * batches (lr[nbatch], the same while the epoch lasts), its first batch */
    int (*begin_epoch)(rt_device *d, int epoch, const int32_t *order, const float *lr, int64_t first_batch);
    /* batches [b0, b1) of the epoch, whole groups of rt_model.accumulate
     * (the last group may be short); step0: optimizer steps before b0 */
    int (*train)(rt_device *d, int64_t b0, int64_t b1, int64_t step0);
    /* the eval plan over this rank's block of the test set */
    int (*evaluate)(rt_device *d);
    /* waits for what was queued; the results of batches [b0, b1) of this
     * epoch (and of evaluate, when it ran since begin_epoch) */
    int (*collect)(rt_device *d, int64_t b0, int64_t b1, rt_dev_out *out);
    /* parameters and optimizer state into the host slabs */
    int (*pull)(rt_device *d, float *param, float *opt);
    void (*close)(rt_device *d);
};
/* Where a run starts: step (training steps), opt_steps (optimizer steps:
 * fewer with fp16's skipped steps), the scaler's state. */
typedef struct rt_start {
    int64_t step, opt_steps;
    rt_amp amp;
} rt_start;
void rt_start_init(rt_start *s, const rt_model *m, const rt_resume *rs);
/* The shape of an epoch, the same for the loop and its devices: this
 * rank's DistributedSampler shard (per_rank samples, as rt_sampler
 * computes it), its batches (nbatch), and its contiguous block [lo, hi) of
 * the test set (every sample once over the ranks, no padding). */
typedef struct rt_shape { int64_t per_rank, nbatch, test_lo, test_hi; } rt_shape;
rt_shape rt_loop_shape(const rt_opts *o, int64_t ntrain, int64_t ntest, int rank, int world);
/* rows of batch b (the last one may be short) */
int rt_batch_rows(const rt_shape *s, int64_t batch, int64_t b);
/* ---- rt_lr.c: the learning-rate schedules ---------------------------------
 * The lr of optimizer step t (0-based over the run) of epoch `epoch`
 * (1-based): lr (--lr, or the train block's) through the model's schedule
 * (cddprt.h, rt_model.sched); total: the run's optimizer steps, what a
 * step schedule without total_steps spans. */
double rt_lr(const rt_model *m, double lr, int epoch, int64_t t, int64_t total);
int rt_lr_per_step(const rt_model *m);  /* stepped per optimizer step, not per epoch */
/* Before the run: -1 after an error when the schedule cannot span it
 * (steps: those the run will take; total: a full run's). */
int rt_lr_check(const rt_model *m, int64_t steps, int64_t total);
/* The step loss as PyTorch's loss.item() shows it for the whole global
 * batch: the sum over the ranks / the global rows for 'mean', else the sum. */
double rt_step_loss(const rt_model *m, double sum, double rows);
/* rs: where to continue (--resume), or a fresh run (rs->active 0).
 * Parameters and optimizer state end in w's slabs (--save reads them).
 * 0, -1 after an error, or the signal that stopped the run (rt_stop.c):
 * then the checkpoint (with --checkpoint) is at the step where it stopped. */
int rt_loop_run(const rt_model *m, const rt_opts *o, const rt_resume *rs, rt_device *dev, rt_coll *coll,
                int64_t ntrain, int64_t ntest, rt_ws *w, rt_log *log, rt_trace *trace);
/* --evaluate: the eval plan once over the test set (every sample once over
 * the ranks), its loss and metrics printed; 0, or -1 after an error. */
int rt_loop_evaluate(const rt_model *m, const rt_opts *o, rt_device *dev, rt_coll *coll, int64_t ntrain,
                     int64_t ntest);

/* ---- rt_stop.c: the graceful stop (SIGINT, SIGTERM, SIGUSR1) -------------
 * Installed around the epoch loop: the first signal is recorded
 * (rt_stop_pending returns it) and the loop stops at the end of a range on
 * every rank alike; a second one kills at once. rt_loop_run returns the
 * signal; the program exits with rt_stop_status (128 + the signal). */
void rt_stop_install(void);
void rt_stop_uninstall(void);
int rt_stop_pending(void);          /* 0, or the signal received */
void rt_stop_request(int sig);      /* as if sig had arrived (tests) */
const char *rt_stop_name(int sig);
int rt_stop_status(int sig);

/* ---- rt_prof.c: --profile's per-kernel table ------------------------------ */
enum { RT_PROF_WARMUP = 3,      /* plan calls left out of the times */
       RT_PROF_KEEP = 4096 };   /* calls kept per kernel */
typedef struct rt_prof {
    int nk;
    double *secs;           /* [nk] wall time summed over every call */
    double *t;              /* [nk][RT_PROF_KEEP] each kept call's time */
    int64_t *nt;            /* [nk] calls kept */
    int64_t calls;          /* plan invocations */
} rt_prof;
int rt_prof_init(rt_prof *p, int nk);
void rt_prof_free(rt_prof *p);
void rt_prof_add(rt_prof *p, int k, double secs);   /* kernel k's call of the current plan call */
/* Fills whichever of *gflops, *gbs is <= 0 with this machine's (rt_prof.c) */
void rt_prof_calibrate(double *gflops, double *gbs);
void rt_prof_print(const char *name, const rt_plan *p, const rt_prof *prof, int64_t batch, double gflops,
                   double gbs);

/* ---- rt_cpu_dev.c: the CPU device (generated C kernels) ------------------- */
int rt_cpu_dev_open(rt_device *dev, const rt_model *m, const rt_opts *o, rt_ws *w, const rt_start *st,
                    const rt_data *data, rt_coll *coll, rt_trace *trace);

/* ---- rt_gpu.c: the CUDA device as the rest of the runtime sees it --------
 * The driver's, NVRTC's and NCCL's types stay in rt_cuda.h, private to the
 * CUDA files (rt_cuda*.c, rt_nccl.c, rt_gpu.c). */
typedef struct rt_gpu rt_gpu;
/* The driver, a device (rt_cuda_open says which), NVRTC, and NCCL when
 * want_nccl. NULL with the reason in why; nothing is printed. */
rt_gpu *rt_gpu_open(int local_rank, int local_size, int want_nccl, char *why, size_t whylen);
/* The physical GPU (PCI bus id): ranks of a host must not share one. */
const char *rt_gpu_bus_id(const rt_gpu *g);
/* The model's kernels (compiled, or from the cache when use_cache), then,
 * with NCCL, the communicator (its waits bounded by comm_timeout). -1
 * after an error line. */
int rt_gpu_start(rt_gpu *g, const rt_model *m, int use_cache, double comm_timeout);
/* "cuda:0 (NAME, sm_90, driver 13.0, NVRTC 13.0, NCCL 2.28.3, kernels cached)" */
void rt_gpu_describe(const rt_gpu *g, const char *sched, char *buf, size_t len);
/* The collectives of its ranks: NCCL's when started with it, else MPI's. */
void rt_gpu_coll(rt_gpu *g, rt_coll *c);
int rt_gpu_dev_open(rt_device *dev, rt_gpu *g, const rt_model *m, const rt_opts *o, rt_ws *w,
                    const rt_start *st, const rt_data *data, rt_coll *coll,
                    rt_trace *trace);
void rt_gpu_close(rt_gpu *g);     /* NULL is fine */

/* ---- rt_dnnl_mm.c: bf16 GEMM ----------------------------------------------
 * C = op(A) . op(B) (rt_sgemm's arguments) on the operands rounded to bf16
 * (rt_round_bf16), fp32 accumulation, then C rounded to bf16 when round_c:
 * oneDNN's matmul where the CPU has AVX512-BF16. Returns 0, having done nothing, where it cannot
 * (no oneDNN, no AVX512-BF16, CDDP_DNNL=0, no JIT kernel for the shape). */
int rt_dnnl_sgemm_bf16(int round_c, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc);
/* 1 where the bf16 paths run (oneDNN with AVX512-BF16, CDDP_DNNL not 0) */
int rt_dnnl_has_bf16(void);
/* x[0..n) := rt_round_bf16(x), vectorized; only where rt_dnnl_has_bf16() */
void rt_bf16_round(float *x, int64_t n);


/* Sets OPENBLAS_CORETYPE where OpenBLAS took kernels older than the CPU
 * (rt_blas.c says when); 1 when it did, and the program must run again for
 * OpenBLAS to read it. */
int rt_blas_core_env(void);

#endif
