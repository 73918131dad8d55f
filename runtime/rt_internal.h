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
#include <stdio.h>

#define RT_VERSION "0.1.0"

#if defined(__GNUC__)
#define RT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RT_PRINTF(a, b)
#endif

/* ---- rt_main.c: options -------------------------------------------------- */
typedef struct rt_opts {
    const char *data_dir;
    int device_cuda;        /* --device cuda: refused, this build is CPU only */
    int threads;
    int epochs;
    int batch;
    float lr;
    uint64_t seed;
    int shuffle, drop_last;
    int64_t max_steps;      /* 0: no limit */
    const char *init_path, *save_path, *metrics_path, *steplog_path;
    int profile;            /* --profile: per-kernel wall time */
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
} rt_log;

int rt_log_open(rt_log *l, const rt_opts *o);
void rt_log_step(rt_log *l, int64_t step, int epoch, double loss);
void rt_log_progress(rt_log *l, int epoch, int epochs, int64_t done, int64_t total,
                     double loss, int force);
void rt_log_epoch(rt_log *l, int epoch, int epochs, double train_loss,
                  double test_loss, double test_acc, double seconds, int64_t images);
int rt_log_close(rt_log *l);    /* reports write errors on the CSV files */
double rt_now(void);            /* CLOCK_MONOTONIC seconds */

/* ---- rt_train.c: the epoch loop ------------------------------------------ */
int rt_train(const rt_model *m, const rt_opts *o, rt_ws *w,
             const rt_dataset *train, const rt_dataset *test, rt_log *log);

#endif
