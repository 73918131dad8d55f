/* cddprt.h: the contract between a program emitted by cddpc and libcddprt.
 *
 * cddpc writes one C file per model: the fused kernels (static functions
 * taking an rt_exec), tables describing parameters and the two plans
 * (train step, eval step), and a main() that calls rt_main(). Everything
 * else -- options, data, initialization, the epoch loop, metrics,
 * checkpoints -- lives in the runtime so every program behaves the same.
 *
 * Memory layout the kernels index into (all offsets are fixed by the
 * compiler's memory plan):
 *   param : all parameters, one slab, in rt_param order (float)
 *   grad  : gradients, one slab, same offsets as param
 *   opt   : optimizer state (momentum buffers), same offsets as param
 *   act   : batch-proportional buffers; a buffer at unit offset o with u
 *           floats per sample lives at act + o * nmax and holds u * n
 *           floats. One packing therefore fits every batch size.
 *   fix   : batch-independent scratch (float)
 *   stat  : per-step scalar results in double (loss sum, correct count)
 * The int32 label buffer also lives in act (4 bytes per unit, like float).
 */
#ifndef CDDPRT_H
#define CDDPRT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RT_ABI_VERSION 15

/* Source text of both targets: RT_STR(x) is x after macro expansion, as a
 * string literal (one line), for the text the compiler emits and NVRTC
 * compiles. */
#define RT_STR_(...) #__VA_ARGS__
#define RT_STR(...) RT_STR_(__VA_ARGS__)

/* rt_exec's fields, the one definition of its layout: the host struct
 * below, the CUDA prelude's rt_exec (compiler/emit_cuda.c) and the
 * runtime's own kernels' copy (rt_cuda_kernels.h) all expand this, each
 * naming the fixed-width types as its compiler spells them (NVRTC has no
 * <stdint.h>). rt_cuda.c still checks the device's offsets at start-up. */
#define RT_EXEC_FIELDS(I32, I64, U64, U8)                                               \
    int n;                  /* rows in this batch (last batch may be short) */          \
    int nmax;               /* rows the act arena was sized for */                      \
    float *act, *fix, *param, *grad, *opt;                                              \
    double *stat;                                                                       \
    const void *x;          /* dataset samples, x_size elements each: uint8 when     \
                               x_u8 (scaled by 1/255, as ToTensor), else float */       \
    const void *y;          /* dataset targets: int32 class indices (y_size 1) or      \
                               y_size floats per sample (the loss says which) */        \
    const float *norm;      /* [2 * norm_n]: Normalize's mean, then std, per channel */ \
    const I32 *idx;         /* n sample indices of this batch */                        \
    I64 x_size, y_size;     /* elements of a sample, targets of a sample */             \
    I64 norm_div;           /* element k of a sample is in channel k / norm_div % norm_n */ \
    int x_u8, norm_n;                                                                   \
    float lr;               /* current learning rate */                                 \
    I64 step;               /* optimizer steps taken before this one */                 \
    int nthreads;                                                                       \
    int rank, world;        /* this process's rank and the number of ranks */           \
    U64 seed;               /* the run's seed (random streams: dropout) */              \
    float scale;            /* fp16 loss scale S: the backward's seed is S x dloss;     \
                               the optimizer unscales by 1/S (1 when off; only          \
                               fp16 kernels read it) */                                 \
    int found_inf;          /* fp16: this step's gradients overflowed on some           \
                               rank: the optimizer kernels return at once */

typedef struct rt_exec {
    RT_EXEC_FIELDS(int32_t, int64_t, uint64_t, uint8_t)
} rt_exec;

/* Element k of dataset sample s as the model's first kernel reads it:
 * scaled by 1/255 when stored as uint8 (torchvision's ToTensor), then
 * Normalize's (v - mean[c]) / std[c] for the element's channel c. One
 * text for both targets (the CUDA prelude expands it too); Q qualifies. */
#define RT_DATA_FNS(Q, I64, U8)                                                             \
    Q float rt_sample(const rt_exec *e, I64 s, I64 k)                                       \
    {                                                                                       \
        const I64 o = s * e->x_size + k;                                                    \
        const float v = e->x_u8 ? (float)((const U8 *)e->x)[o] / 255.0f : ((const float *)e->x)[o]; \
        const int c = e->norm_n == 1 ? 0 : (int)(k / e->norm_div % e->norm_n);              \
        return (v - e->norm[c]) / e->norm[e->norm_n + c];                                   \
    }
RT_DATA_FNS(static inline, int64_t, uint8_t)

typedef void (*rt_kernel_fn)(rt_exec *e);

/* ---- mixed precision -----------------------------------------------------
 * `precision bf16|fp16` in the train block: values are held in fp32 but
 * rounded to the low precision where torch.autocast would store them in
 * it (see README "Mixed precision"); both targets round with these
 * helpers (RT_ROUND_FNS, the CUDA prelude's too), round to nearest even, as
 * tensor.to(torch.bfloat16 / torch.float16).float(). */
enum { RT_PREC_FP32 = 0, RT_PREC_BF16 = 1, RT_PREC_FP16 = 2 };
/* rt_sgemm_prec: round the operands only, not the result */
#define RT_PREC_KEEP_C 0x100

/* The rounding helpers of both targets, one text: Q qualifies them
 * (static inline here, __device__ __forceinline__ in the CUDA prelude),
 * F2U / U2F are the target's bit casts between float and unsigned.
 * bf16: NaN stays NaN; overflow carries to inf, as torch.
 * fp16 (IEEE half): 10 mantissa bits, largest finite 65504 (from 65520 on,
 * round to nearest even gives inf); >= 2^-14 a normal half; below, a
 * subnormal half q * 2^-24 (value = m * 2^-24 / 2^sh), float subnormals
 * and values < 2^-25 round to 0. */
#define RT_ROUND_FNS(Q, F2U, U2F)                                                           \
    Q float rt_round_bf16(float x)                                                          \
    {                                                                                       \
        unsigned u = F2U(x);                                                                \
        if ((u & 0x7fffffffu) > 0x7f800000u)                                                \
            return x;                                                                       \
        u += 0x7fffu + ((u >> 16) & 1u);                                                    \
        return U2F(u & 0xffff0000u);                                                        \
    }                                                                                       \
    Q float rt_round_fp16(float x)                                                          \
    {                                                                                       \
        const unsigned u = F2U(x), s = u & 0x80000000u;                                     \
        unsigned a = u ^ s;                                                                 \
        if (a >= 0x7f800000u)                                                               \
            return x;                                                                       \
        if (a >= 0x477ff000u) {                                                             \
            a = 0x7f800000u;                                                                \
        } else if (a >= 0x38800000u) {                                                      \
            a += 0xfffu + ((a >> 13) & 1u);                                                 \
            a &= ~0x1fffu;                                                                  \
        } else {                                                                            \
            const int sh = 126 - (int)(a >> 23);                                            \
            const unsigned m = (a & 0x7fffffu) | 0x800000u;                                 \
            unsigned q = 0;                                                                 \
            if (a >= 0x00800000u && sh < 25) {                                              \
                const unsigned rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);          \
                q = (m >> sh) + (rem > half || (rem == half && ((m >> sh) & 1u)));          \
            }                                                                               \
            a = F2U((float)q * 5.9604644775390625e-8f);                                     \
        }                                                                                   \
        return U2F(a | s);                                                                  \
    }

static inline unsigned rt_f2u(float x)
{
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float rt_u2f(unsigned u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

RT_ROUND_FNS(static inline, rt_f2u, rt_u2f)

/* Eight floats at a time, summed in double: the C kernels' per-channel
 * sums (compiler/emit_nchw.c) keep 8 double lanes, element k of a plane in
 * lane k % 8, and load, convert and add 8 elements per step with these
 * (GCC/Clang vector extensions; lane by lane the same operations, so the
 * same bits, as the scalar tail). */
/* unaligned and aliasing floats (element loads and stores through it);
 * macros, not functions: a vector argument's ABI depends on -m flags */
typedef float rt_v8f __attribute__((vector_size(32), aligned(4), may_alias));
typedef double rt_v8d __attribute__((vector_size(64)));
#define rt_ld8(p) (*(const rt_v8f *)(p))
#define rt_st8(p, v) (*(rt_v8f *)(p) = (v))
#define rt_wide8(v) __builtin_convertvector((v), rt_v8d)

static inline float rt_round_prec(int prec, float x)
{
    return prec == RT_PREC_BF16 ? rt_round_bf16(x) : prec == RT_PREC_FP16 ? rt_round_fp16(x) : x;
}

/* What a kernel belongs to, for timelines (--trace categories). */
enum { RT_PH_DATA = 0, RT_PH_FORWARD = 1, RT_PH_BACKWARD = 2, RT_PH_OPTIMIZER = 3 };

typedef struct rt_kernel {
    rt_kernel_fn fn;
    const char *name;       /* e.g. "t1_mm_nt_bias_add_relu" */
    int phase;              /* RT_PH_*: backward if it computes any gradient */
    /* the compiler's cost model (CPU) of one call with n rows: FLOPs
     * flops[0] + flops[1] n, bytes moved bytes[0] + bytes[1] n (--profile) */
    double flops[2], bytes[2];
} rt_kernel;

/* NORMAL: N(mean, std), nn.Embedding's N(0, 1) unless rt_model.param_init
 * says; CONST and UNIFORM take their value and bounds from param_init (the
 * model body's nn.init statements and nn.Parameter values) */
enum { RT_INIT_KAIMING_UNIFORM = 0, RT_INIT_BIAS_UNIFORM = 1, RT_INIT_ZERO = 2, RT_INIT_ONE = 3,
       RT_INIT_NORMAL = 4, RT_INIT_CONST = 5, RT_INIT_UNIFORM = 6, RT_INIT_COPY = 7 };
/* RT_INIT_COPY: the value parameter param_init[2 i] (an earlier one) starts with: the layers
   nn.TransformerEncoder deep-copies from one */

#define RT_PARAM_RANK 4     /* a parameter's dimensions at most (a convolution's weight) */
typedef struct rt_param {
    const char *name;       /* PyTorch state_dict name, e.g. "fc1.weight" */
    int rank;
    int64_t shape[RT_PARAM_RANK];
    int64_t off, numel;     /* in floats, into param/grad/opt */
    int64_t fan_in;         /* for PyTorch's default init bounds */
    int init;               /* RT_INIT_* */
    int bucket;             /* gradient bucket (rt_model.buckets) */
    int grad_kernel;        /* train kernel after which its gradient is complete, -1 */
} rt_param;

/* rt_model.param_flags: a buffer (PyTorch's register_buffer: batch norm's
 * running statistics) is saved and loaded under its name but never
 * trained: no gradient bucket (bucket -1), no optimizer update; kernels
 * update it in place. An I64 buffer (num_batches_tracked) is held as a
 * float in the slab (exact to 2^24) and is int64 in safetensors files, as
 * PyTorch stores it. */
/* RT_PARAM_ALIAS: another name of an earlier parameter (a tied weight:
 * the same off and numel), saved and loaded under it, not initialized,
 * counted or given optimizer state of its own */
enum { RT_PARAM_BUFFER = 1, RT_PARAM_I64 = 2, RT_PARAM_ALIAS = 4 };

/* A gradient bucket: one contiguous range of the grad slab, all-reduced as
 * one message once train kernel `ready` has run; optimizer kernel `opt`
 * (the only one reading it) must wait for that all-reduce. Bucket 0 is
 * ready first. */
typedef struct rt_bucket {
    int64_t off, size;      /* floats into grad */
    int ready;              /* train kernel index */
    int opt;                /* train kernel index of its update, -1 */
    int nparam;
} rt_bucket;

/* CUDA launch geometry of one kernel, parallel to rt_plan.k. Grid dim d is
 * gfix[d] when gdiv[d] == 0, else ceil(nmax * gmul[d] / gdiv[d]) (at least
 * 1): batch-shaped kernels are sized for the largest batch and return
 * early for rows >= e->n. Shared memory is static (declared in kernels). */
/* The CUDA device launches the training (and evaluation) steps as
 * graphs of this many steps while that many are left in the epoch, one
 * graph launch and one runtime node per step (rt_cuda_dev.c; gpu_model.c
 * predicts it) */
#define RT_CUDA_RUN_STEPS 16

typedef struct rt_cuda_launch {
    const char *name;       /* extern "C" symbol in rt_model.cuda_src */
    unsigned block[3];
    unsigned gfix[3];
    int64_t gmul[3], gdiv[3];
    /* coll_n > 0: after the kernel, fix[coll_off, coll_off + coll_n) is
     * summed over the ranks in place (SyncBatchNorm; the C kernel calls
     * rt_sync_sum itself) */
    int64_t coll_off, coll_n;
    /* split-K scratch the kernel alone uses (kernel_check leaves it out of
     * the comparison with the C kernel, which has none): the partials in
     * act units [ws_off, ws_off + ws_units), the arrival counters in
     * fix[ctr_off, ctr_off + ctr_n); a weight gradient's partials (its K
     * is the batch) in fix[wsf_off, wsf_off + wsf_n) */
    int64_t ws_off, ws_units, ctr_off, ctr_n, wsf_off, wsf_n;
    /* non-NULL: this kernel and the next one of the plan also exist as one
     * kernel of this name (rule siblings), which the runtime launches in
     * their place on rt_cuda_pair_grid's grid */
    const char *pair;
    /* The act buffers the kernel reads or writes, RT_ACT_FIELDS ints each:
     * for a kernel checker, which holds the CUDA kernels' act arena against
     * the C kernels' and must know where it is laid out otherwise (the
     * runtime never reads act). Under precision bf16|fp16 a buffer flagged
     * RT_ACT_16 holds each value's 16 bits, rows first, from the start of
     * its slot: element e at byte 2e, instead of float e. NULL when the
     * plan has no 16-bit buffer. */
    const int64_t *acts;
    int nacts;
} rt_cuda_launch;
/* rt_cuda_launch.acts: [off, units, row, flags] per buffer: its slot in act
 * units (floats per sample), a sample's elements (a batch of n has n rows
 * of them, from the slot's start), and what the kernel does with it */
enum { RT_ACT_FIELDS = 4, RT_ACT_READ = 1, RT_ACT_WRITE = 2, RT_ACT_16 = 4 };

typedef struct rt_plan {
    const rt_kernel *k;
    int nk;
    int64_t act_units;      /* floats per sample of the act arena */
    int64_t fix_floats;
    int nstat;
    int loss_stat;          /* stat slot: sum of per-sample losses of the batch */
    int correct_stat;       /* stat slot: correct predictions, -1 if none */
    const rt_cuda_launch *cu; /* [nk]: the same kernels for the CUDA device */
    int nmetric;            /* the evaluation's metric sums: stat slots [correct_stat,
                               correct_stat + nmetric); 0 means accuracy's one */
    /* train: the gradient ranges, (offset, floats) pairs, that the CUDA
     * kernels accumulate into or never write, zeroed before each step;
     * the kernels store every other gradient whole */
    const int64_t *zero;
    int nzero;
    /* fix[0, fix_zero) is what the CUDA step zeroes (counters, atomic
     * sums); the split weight gradients' partials after it need none */
    int64_t fix_zero;
    /* The CUDA kernels' arenas. act_units and fix_floats above are the C
     * kernels' (what the CPU allocates); these add what the GPU's launch
     * decisions need after them (cddpc's sched_gpu.c: split-K workspaces,
     * arrival counters, partial sums). 0: the C kernels' sizes. */
    int64_t cuda_act_units, cuda_fix_floats;
    /* has_count: the loss's mean divides by the targets it counts (a
     * class loss over positions, or one with ignore_index), whose number
     * the plan sums into stat slot count_stat; otherwise by the rows */
    int has_count, count_stat;
} rt_plan;

static inline int64_t rt_plan_cuda_act(const rt_plan *p)
{
    return p->cuda_act_units > p->act_units ? p->cuda_act_units : p->act_units;
}
static inline int64_t rt_plan_cuda_fix(const rt_plan *p)
{
    return p->cuda_fix_floats > p->fix_floats ? p->cuda_fix_floats : p->fix_floats;
}

/* The evaluation's metrics follow the task (rt_model.metrics): accuracy
 * (one sum, the correct predictions); regression: sums of squared and
 * absolute errors (MSE, MAE); multi-label: each output's TP, FP, FN
 * (accuracy per label, macro-F1); a multi-task model (a loss block's
 * targets as a tuple): the correct predictions of its class head and the
 * squared errors of its regression head (accuracy, MSE; each a column, so
 * both over the samples). At most RT_METRIC_MAX sums. */
enum { RT_METRICS_ACCURACY = 0, RT_METRICS_REGRESSION = 1, RT_METRICS_MULTILABEL = 2, RT_METRICS_TOKENS = 3,
       RT_METRICS_MULTITASK = 4 };
#define RT_METRIC_MAX 384

enum { RT_RED_MEAN = 0, RT_RED_SUM = 1, RT_RED_NONE = 2 };

/* The train block's `data` (README "Data"): where the samples and targets
 * come from, and how the samples are normalized. --data replaces path. */
enum { RT_SRC_IDX = 0, RT_SRC_NPZ = 1, RT_SRC_CSV = 2, RT_SRC_TEXT = 3 };
/* What the loss takes: class indices in [0, nclass) (cross_entropy,
 * nll_loss), or nclass floats per sample (regression, 0/1 labels). */
/* RT_TGT_INPUT: an autoencoder's (target = input): the loss compares the
 * output with the normalized sample itself; the data's labels are read as
 * classes and unused */
enum { RT_TGT_CLASS = 0, RT_TGT_FLOAT = 1, RT_TGT_INPUT = 2 };
typedef struct rt_data_src {
    int kind;               /* RT_SRC_* */
    const char *path;       /* idx: the directory; npz: the file; csv: the training file */
    const char *test;       /* csv: the test file; NULL: none (split, or no evaluation) */
    const char *const *arrays; /* npz: names of x_train, y_train, x_test, y_test; NULL: those */
    const char *const *targets; /* csv: the target columns; npz: y arrays as target columns, the
                                   training set's then the test set's (ntargets: twice their count) */
    int ntargets;
    const char *const *features; /* csv: the feature columns; NULL: every other column */
    int nfeatures;
    double split;           /* > 0: hold out this fraction of the training set as the test set */
    int norm_auto;          /* normalize = auto: mean and std per channel from the training set */
    int nnorm;              /* 0: no normalization; 1: every element; else per channel/feature */
    const float *norm_mean, *norm_std; /* [nnorm] */
    int64_t block;          /* text: tokens a window (the model's T) */
    int vocab_bytes;        /* text: vocab = bytes (256), else the file's characters */
} rt_data_src;
enum { RT_SCHED_NONE = 0, RT_SCHED_STEP = 1, RT_SCHED_COSINE = 2, RT_SCHED_MULTISTEP = 3, RT_SCHED_EXPONENTIAL = 4,
       RT_SCHED_WARMUP_COSINE = 5, RT_SCHED_ONECYCLE = 6 };
/* The most arguments a schedule keeps in rt_model.sched_v (multistep's
 * milestones are the longest list). */
#define RT_SCHED_MAX_V 32

typedef struct rt_model {
    int abi;                /* RT_ABI_VERSION */
    const char *name;       /* model name from the .net file */
    const char *source;     /* path of the .net file it was compiled from */
    const rt_param *params;
    int nparam;
    int64_t param_floats;
    int64_t opt_floats;     /* 0 when the optimizer keeps no state */
    rt_plan train, eval;
    int in_rank;            /* the model's input per sample: in_dim[0..in_rank) */
    int64_t in_dim[3];
    int nclass;             /* outputs per sample: classes (labels must be < nclass),
                               or the width of float targets */
    int target;             /* RT_TGT_*: what the loss takes */
    int metrics;            /* RT_METRICS_*: what the evaluation reports */
    /* a loss block's targets as a tuple (float targets, one column each):
     * column k holds class indices below target_classes[k] where that is
     * above 0, which loading checks; NULL: no such columns */
    const int *target_classes;
    /* train-block settings; command-line flags override them */
    rt_data_src data;
    int reduction;          /* RT_RED_* */
    float lr, momentum, dampening, weight_decay;
    int nesterov;
    int batch, epochs, shuffle, drop_last;
    uint64_t seed;
    int64_t max_steps;      /* optimizer steps the run stops after (nanoGPT's max_iters); 0: the epochs' */
    /* CUDA C of every kernel of both plans, for NVRTC (see "CUDA device"
     * below); it declares rt_exec itself with this header's layout. */
    const char *cuda_src;
    const rt_bucket *buckets;
    int nbuckets;
    double bucket_mb;       /* train block's bucket_mb (after the 1 MB first) */
    const int *param_flags; /* [nparam] RT_PARAM_*; NULL: all trained, F32 */
    /* The optimizer's state in opt, slot by slot (each slot laid out as
     * the parameters): comma-separated names for checkpoints, as PyTorch's
     * optimizer state calls them ("momentum_buffer", "exp_avg,exp_avg_sq");
     * NULL when there is none. */
    const char *opt_state;
    /* The learning rate of epoch e (1-based), from lr: RT_SCHED_NONE: lr;
     * RT_SCHED_STEP: lr * b^floor((e-1)/a) (StepLR, step_size a, gamma b);
     * RT_SCHED_COSINE: b + (lr-b)(1+cos(pi (e-1)/a))/2 (CosineAnnealingLR,
     * T_max a, eta_min b); schedulers stepped once an epoch. */
    int sched;
    double sched_a, sched_b;
    /* RT_PREC_*: what the kernels were compiled for (they round); with
     * fp16 the runtime runs torch.cuda.amp.GradScaler's dynamic loss
     * scaling with these settings (its defaults: 65536, 2, 0.5, 2000) */
    int precision;
    float init_scale, growth_factor, backoff_factor;
    int growth_interval;
    /* ---- the train block's newer settings (README "The train block") ----
     * sched_v[0..sched_n): the arguments of the schedules after cosine
     * (rt_lr.c computes each lr, torch.optim.lr_scheduler's formulas):
     *   RT_SCHED_MULTISTEP     the milestones (epochs); gamma is sched_b
     *   RT_SCHED_EXPONENTIAL   none; gamma is sched_b
     *   RT_SCHED_WARMUP_COSINE warmup_steps, total_steps (0: the run's),
     *                          start_factor, eta_min  (per optimizer step)
     *   RT_SCHED_ONECYCLE      max_lr, total_steps (0: the run's), pct_start,
     *                          anneal (0 cos, 1 linear), div_factor,
     *                          final_div_factor, three_phase (per optimizer step) */
    const double *sched_v;
    int sched_n;
    float clip_norm;        /* clip_grad_norm_'s max_norm (norm_type 2); 0: no clipping */
    float clip_value;       /* clip_grad_value_'s clip_value (before the norm's); 0: none */
    int accumulate;         /* micro-batches per optimizer step (0 or 1: none) */
    /* The GPU the CUDA kernels' launches (tiles, split-K, channel slices)
     * were scheduled for (cddpc --target; "h100" by default): the header
     * says so when the device's name does not hold it. */
    const char *gpu_target;
    /* class targets per sample (0 or 1: one; T: a label at each of the
     * positions of [N, T, C] logits, y [N, T]); has_ignore: a label equal
     * to ignore_index counts for nothing (cross_entropy(ignore_index)) */
    int64_t positions;
    int has_ignore, ignore_index;
    /* forward(idx: i64[...]): the input is tokens, each an integer in
     * [0, in_vocab) (the embeddings' rows), read as they are: no scaling,
     * no normalization. 0: float samples. */
    int64_t in_vocab;
    /* [nparam], or NULL: for an RT_INIT_NORMAL parameter, 1 + a row (of
     * shape[0]) its init leaves 0, an embedding's padding_idx; 0 none */
    const int64_t *param_zero_row;
    /* [2 nparam], or NULL: parameter i's init arguments (a, b): NORMAL's
     * mean and std, UNIFORM's bounds, CONST's value a */
    const double *param_init;
    /* a language model's forward alone (--generate, CPU kernels), or
     * NULL; its logits at act + predict_out * nmax, [nmax * T, nclass] */
    const rt_plan *predict;
    int64_t predict_out;
    /* the evaluation graph for --export-onnx (cddpc's onnx.c), or NULL */
    const struct rt_onnx_graph *onnx;
} rt_model;

/* ---- ONNX export (cddpc's onnx.c writes the graph, rt_onnx.c the file) ----
 * The model's forward in eval mode as ONNX operators (opset 17) from the
 * normalized input "x" (the runtime puts the data's scaling and
 * normalization before it) to the output "y". A node's inputs name the
 * graph's tensors, the parameters by their state_dict names (the runtime
 * writes their values as initializers) or consts. */
enum { RT_OX_F32 = 1, RT_OX_U8 = 2, RT_OX_I64 = 7, RT_OX_BOOL = 9 };    /* TensorProto.DataType */
enum { RT_OXA_FLOAT = 1, RT_OXA_INT = 2, RT_OXA_STRING = 3, RT_OXA_INTS = 7, RT_OXA_STRINGS = 8 };
/* AttributeProto.AttributeType (STRINGS: the one string s) */
typedef struct rt_onnx_attr {
    const char *name;
    int type;               /* RT_OXA_* */
    float f;
    int64_t i;
    const int64_t *ints;
    int nints;
    const char *s;
} rt_onnx_attr;
typedef struct rt_onnx_node {
    const char *op;
    const char *const *in;  /* "" for an input left out */
    int nin;
    const char *out;
    const rt_onnx_attr *attr;
    int nattr;
    const char *out2, *out3;    /* a second and third output ("" left out), or NULL */
} rt_onnx_node;
typedef struct rt_onnx_const {
    const char *name;
    int dtype;              /* RT_OX_F32, RT_OX_I64 or RT_OX_BOOL */
    int rank;
    const int64_t *dims;
    const double *v;        /* [n], converted to dtype */
    int64_t n;
} rt_onnx_const;
typedef struct rt_onnx_graph {
    const rt_onnx_node *nodes;
    int nnodes;
    const rt_onnx_const *consts;
    int nconsts;
    int out_rank;           /* y's shape; a dimension -k is the batch times k */
    int64_t out_dims[6];
    int out_dtype;          /* RT_OX_* */
    const char *refused;    /* NULL, or the first op with no export and where it is (then no nodes) */
} rt_onnx_graph;

/* The class labels of one sample. */
static inline int64_t rt_model_positions(const rt_model *m) { return m->positions > 1 ? m->positions : 1; }

/* RT_PARAM_* flags of parameter i of m. */
static inline int rt_param_flags(const rt_model *m, int i) { return m->param_flags ? m->param_flags[i] : 0; }

/* ---- CUDA device ---------------------------------------------------------
 * Every CUDA kernel is `extern "C" __global__ void NAME(const rt_exec *e)`
 * where e points to an rt_exec in DEVICE memory holding device pointers,
 * laid out exactly as above (the CUDA source declares the same struct).
 * Kernels index buffers exactly as the C kernels do, so both backends share
 * one memory plan. Per step, the runtime (on the device, inside the
 * captured graph) sets e->n, e->idx (the batch's slice of the sample
 * order), e->lr and e->step, and zeroes grad, fix and stat before the plan
 * runs: CUDA kernels ACCUMULATE into stat slots and into row reductions
 * (bias gradients, atomicAdd; their targets are grad or fix, and fix slots
 * are never shared), and assign the rest.
 * The C kernels assign everything, so the zeroing is harmless there. */

/* Blocks of 256 threads for cddprt_step_begin's zeroing of `words`
 * 4-byte words (rt_cuda_kernels.h): one per 4096 words, at most 132 (one
 * wave on the largest GPU gpu_model.c knows); gpu_model.c predicts the
 * same grid. */
static inline unsigned rt_cuda_begin_blocks(int64_t words)
{
    int64_t b = (words + 4095) / 4096;
    return (unsigned)(b < 1 ? 1 : b > 132 ? 132 : b);
}

/* The runtime's work between two steps (end one, zero what the next
 * accumulates into, point at its batch) runs at the end of the train
 * step's last kernel, an optimizer kernel, in its grid's last block
 * (cddprt_opt_turn, rt_cuda_source) instead of as a graph node of its own
 * (cddprt_step_turn), when what it zeroes -- in 4-byte words the
 * accumulated gradient ranges, fix's zeroed part, and stat's doubles twice -- is little
 * enough for one block of 256 threads to do after the rest of the grid
 * (64 words a thread). gpu_model.c predicts the same choice. */
#define RT_CUDA_TURN_WORDS 16384
static inline int rt_cuda_turn_fits(int64_t zero_grad_floats, int64_t fix_zero, int nstat)
{
    return zero_grad_floats + fix_zero + 2 * (int64_t)nstat <= RT_CUDA_TURN_WORDS;
}

/* The optimizer kernel whose body cddprt_opt_turn runs for train plan p
 * (its last kernel), or NULL when step_turn keeps its own node. */
static inline const char *rt_cuda_turn_body(const rt_plan *p)
{
    if (p->nk < 1 || p->k[p->nk - 1].phase != RT_PH_OPTIMIZER || !p->cu)
        return NULL;
    int64_t zg = 0;
    for (int r = 0; r < p->nzero; r++)
        zg += p->zero[2 * r + 1];
    return rt_cuda_turn_fits(zg, p->fix_zero, p->nstat) ? p->cu[p->nk - 1].name : NULL;
}

/* C[m, n] = op(A) . op(B) (row-major; op transposes when ta/tb), with
 * beta = 0. A tuned BLAS when the runtime was built with one, else a
 * blocked loop. Kernels call this for every matrix product. */
void rt_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float *c, int64_t ldc);
/* C[m, n] += op(A) . op(B): rt_sgemm with beta = 1 (the attention
 * gradients sum a head's query blocks into it) */
void rt_sgemm_acc(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                  int64_t ldb, float *c, int64_t ldc);
/* rt_sgemm as autocast runs a matrix product in low precision (prec
 * RT_PREC_BF16 / FP16): both operands rounded as read, fp32 accumulation,
 * the result rounded as stored (unless prec has RT_PREC_KEEP_C). */
void rt_sgemm_prec(int prec, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float *c, int64_t ldc);

/* An fp32 convolution of NCHW tensors through oneDNN (rt_dnnl.c): y =
 * conv(x, w) (+ bias[o] when bias is not NULL) for RT_CONV_FWD; x = its
 * data gradient from y (dy) and w for RT_CONV_DX; w = its weight gradient
 * from y (dy) and x for RT_CONV_DW. Weights [O, C/groups, kh, kw];
 * dilations as PyTorch's (1: none). *cache (NULL at first) keeps the
 * primitives of each geometry seen, across calls. Returns 1 when done, 0
 * when the runtime has no oneDNN or oneDNN refuses the geometry: the
 * caller computes it itself. */
typedef struct rt_conv_geo {
    int64_t n, C, H, W, O, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw, groups;
} rt_conv_geo;
enum { RT_CONV_FWD, RT_CONV_DX, RT_CONV_DW };
/* kind | RT_CONV_BF16: `precision bf16`: the operands read rounded to bf16,
 * fp32 accumulation, the result rounded to bf16 (the bias must be NULL:
 * the caller adds it as autocast rounds it); 0 where the CPU lacks
 * AVX512-BF16. */
#define RT_CONV_BF16 0x10
typedef struct rt_dnnl_conv_cache rt_dnnl_conv_cache;
int rt_dnnl_conv(rt_dnnl_conv_cache **cache, int kind, const rt_conv_geo *g, const float *x, const float *w,
                 const float *bias, float *y);

/* x[0..n) := its sum over the data-parallel ranks, in place; nothing with
 * one rank. The C kernels of SyncBatchNorm's collectives call it between
 * the passes that need the whole batch's sums; it runs on its own
 * communicator, so it never interleaves with the gradient all-reduces of
 * the reducer's thread. */
void rt_sync_sum(float *x, int64_t n);

/* The program's whole life: parse argv, load data, train, evaluate, save.
 * Returns the process exit status. */
int rt_main(const rt_model *m, int argc, char **argv);

#endif
