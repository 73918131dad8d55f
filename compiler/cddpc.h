/* cddpc.h: the compiler's one internal header, a section per file. */
#ifndef CDDPC_H
#define CDDPC_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cddprt.h"         /* rt_cuda_launch: a CUDA kernel's launch geometry, as the runtime reads it */

/* ---- util.c: arena, strings ------------------------------------------ */
/* One arena per compilation; nothing is freed piecemeal. All allocation goes
 * through util_alloc so an out-of-memory is reported once, cleanly. */
void *util_alloc(size_t n);                  /* zeroed; exits 1 on OOM */
void util_free_all(void);                    /* ends the arena: every util_ pointer dies */
void *util_grow(void *p, size_t old, size_t n);
char *util_strdup(const char *s);
char *util_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *util_cfloat(double v);                /* C float literal: 0.01f, 0.0f */
/* A small set of node ids, for "each once" over one kernel's operands: a
 * flag per graph node for every kernel made memory quadratic in the model. */
typedef struct IdSet { int *v; int n; } IdSet;
int util_set_add(IdSet *s, int id);         /* 1 when id was not in s yet */

/* ---- diag.c: diagnostics --------------------------------------------- */
typedef struct Loc {
    const char *file;
    int line, col;          /* 1-based; line 0: no location */
} Loc;

/* Registers a source buffer so diagnostics can print the offending line. */
void diag_source(const char *file, const char *text);
/* `file:line:col: error: msg`, the source line and a caret; counts errors. */
void diag_error(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_note(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int diag_count(void);
void diag_reset(void);      /* forget the sources and the count: the next compilation */
/* Internal invariant broken: prints and exits 3 (a compiler bug, not the
 * user's). */
_Noreturn void diag_ice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- ir.c: the graph IR ---------------------------------------------- */
typedef enum {
#define X(name, ...) OP_##name,
#include "ops.def"
#undef X
    OP_COUNT
} Op;

typedef enum { K_DATA, K_PARAM, K_VIEW, K_EW, K_MATMUL, K_RED, K_ROW, K_OPT, K_CONV, K_CHAN, K_POOL, K_STATE, K_COMM,
               K_NORM, K_TENSOR } OpKind;
/* ops.def's FUSE and EVAL columns */
enum { F_EPI = 1, F_CONV_EPI = 2 };
typedef enum { EV_SAME, EV_VIEW, EV_RUNNING, EV_TRAIN } OpEval;
/* DT_I64 and DT_BOOL are PyTorch's integer and boolean tensors inside
 * forward (indices, masks): exact integers held in float slots (every
 * index the shapes allow is below MAX_DIM = 2^24, where a float is exact),
 * so every kernel reads one element type; no gradient flows through them. */
typedef enum { DT_F32, DT_I32, DT_I64, DT_BOOL } DType;
typedef enum { PH_FWD, PH_LOSS, PH_BWD, PH_OPT } Phase;
typedef enum { RED_MEAN, RED_SUM, RED_NONE } Reduction;

#define DIM_N (-1)          /* the symbolic batch dimension */
/* A dimension holding the batch: DIM_N (the samples), or -k, the batch
 * merged with the k elements after it (x.view(-1, C) of [N, T, C] gives
 * [N*T, C], n-major), which the per-row ops take as n*k rows. */
#define IR_IS_BATCH(d) ((d) < 0)
static inline int64_t ir_batch_mul(int64_t d) { return d < 0 ? -d : 1; }
#define MAX_RANK 6
#define TABLE_MAX 65536    /* torch.tensor's values at most: each kernel reading one spells them */
#define MAX_IN 6

typedef struct Shape {
    int rank;
    int64_t d[MAX_RANK];    /* DIM_N in the batch's dimension (at most one; the first
                               but for K_TENSOR ops, which index any layout) */
} Shape;

/* A sliding window over H and W: convolution and pooling geometry. */
typedef struct Window {
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int groups;             /* convolution only; 1 otherwise */
} Window;

/* Output extent of a window sliding over `in`: may be <= 0 (sema rejects). */
int64_t ir_window_out(int64_t in, int k, int s, int p, int d);
/* Pooling windows that tile the plane (x the pooled input, y the output):
 * no padding, stride = window, no rest, so every input element lies in
 * exactly one window. */
int ir_pool_tiles(const Shape *x, const Shape *y, const Window *w);

typedef struct Node {
    int id;
    Op op;
    int nin;
    int in[MAX_IN];
    Shape shape;
    DType dt;
    Phase phase;
    Loc loc;
    const char *name;       /* PARAM: PyTorch state_dict name */
    int param;              /* PARAM: index into Graph.params */
    int init;               /* PARAM: RT_INIT_* */
    int64_t fan_in;         /* PARAM: for default init */
    int64_t zero_row;       /* PARAM, init RT_INIT_NORMAL: 1 + a row kept 0 (an embedding's padding_idx), 0 none */
    double init_a, init_b;  /* PARAM: RT_INIT_NORMAL's mean and std (0, 0: N(0, 1)), RT_INIT_UNIFORM's
                               bounds, RT_INIT_CONST's value (a) */
    int grad_of;            /* node whose final gradient this is, or -1 */
    int bucket;             /* PARAM: gradient bucket (bucket.c), -1 for buffers */
    int buffer;             /* PARAM: a buffer (batch norm statistics): never trained */
    int i64;                /* PARAM: an integer counter, int64 in checkpoints */
    int keep_f32;           /* elementwise: computed and stored in fp32 under bf16/fp16, operands
                               unrounded (LayerNorm's affine: autocast runs layer_norm in float) */
    /* The op's own attributes: one member per family of ops. A backward
     * node starts with a copy of its forward node's (autodiff.c). */
    union {
        Window win;         /* CONV2D*, *POOL*: geometry */
        struct {
            double eps, momentum;   /* BN_*: batch norm settings */
            int sync;       /* BN_*: statistics over all ranks (SyncBatchNorm) */
        } bn;
        struct {
            double p;       /* DROPOUT*: probability of zeroing an element, in (0, 1) */
            int key;        /* which random stream (dropout_rng.h): the forward dropout's
                               ordinal in the graph, 0, 1, ... */
        } drop;
        struct {
            int red;        /* the loss ops (CE_LOSS ... BCE_GRAD): Reduction */
            double smooth;  /* CE_LOSS / CE_GRAD: label_smoothing, in [0, 1] */
            double delta;   /* SMOOTH_L1_*: beta; HUBER_*: delta ($d in the formula) */
            const double *w;    /* BCE_*: pos_weight per output ($w at class j); CE_*: the class
                                   weights (cw in the row kernel); or NULL */
            int nw;
            int counts;     /* CE_*, CORRECT, COUNTED: the mean divides by the counted targets
                               (COUNTED's sum), not by the rows */
            int ignore_on;  /* ... and targets equal to ignore count for nothing */
            int64_t ignore;
        };
        struct {
            int64_t off;    /* SLICE: the first column of each row taken */
        } slice;
        struct {
            unsigned axes;  /* T_SUM ... T_COUNT_EQ: the reduced dimensions (bits) */
            int axis;       /* T_SLICE, T_PAD, T_CAT: the dimension */
            int64_t start, step;    /* T_SLICE, T_PAD: the first index and the step */
            int perm[MAX_RANK];     /* T_PERMUTE: output dimension d is input dimension perm[d] */
            double scale;   /* BC_SCALE: the divisor (a mean's count; -1 negates) */
            double lo, hi;  /* T_POW: the exponent (lo); T_CLAMP: the bounds; T_AFFINE: x * lo + hi */
            int ta, tb;     /* T_BMM: the operand is transposed (its last two dimensions) */
            int key;        /* T_RAND, T_RANDN: the stream's key, an ordinal shared with the dropouts' */
            const double *table;    /* T_TABLE: the values, row-major (the kernels' text) */
            int64_t ntable;
        } ten;          /* T_FULL: the value (lo); T_ARANGE: lo + hi * i; T_TRIL/TRIU: the diagonal (lo);
                           T_*C comparisons, T_FILL_IF, T_KEEP_IF: the constant (lo); T_GATHER*: the
                           dimension (axis); T_ARGMAX/ARGMIN: it as axes */
        struct {
            double scale;   /* T_ATTN*: the scores' factor (1 / sqrt(E) unless given) */
            int causal;     /* ... key j > query i takes no part (is_causal) */
            int mask;       /* ... the last input is a mask: ATTN_MASK_BOOL or ATTN_MASK_ADD; 0 none
                               (the op then has one input fewer) */
        } attn;
        struct {
            int cell;       /* T_RNN*: RNN_TANH, RNN_RELU, RNN_GRU, RNN_LSTM */
            int reverse;    /* ... from the last step to the first */
            int bias, h0, c0;   /* ... which optional inputs T_RNN has after W_hh, in this order
                                   (T_RNN_BWD: h0, c0 after W_hh) */
            int dcn;        /* T_RNN_BWD: the LSTM's last cell state's gradient is its last input */
            int dstate;     /* T_RNN_BWD: h0's gradient (and the LSTM's c0's) after its values;
                               T_RNN_DSTATE: which it reads (0 h0, 1 c0) */
        } rnn;
        struct {
            double a, b;    /* LEAKY_RELU: negative_slope; ELU: alpha; SOFTPLUS: beta, threshold;
                               HARDTANH: min_val, max_val (and their gradients); AFFINE: x * a + b;
                               DIV_SCALAR: x / a */
        } act;
    };
} Node;

/* The optimizer's hyperparameters (the train block's), read by the update
 * ops' bodies; the learning rate is the runtime's (rt_exec.lr, per epoch). */
typedef struct OptHyper {
    double momentum, dampening, weight_decay;   /* SGD, SGD_MOMENTUM (weight_decay: all) */
    int nesterov;
    double beta1, beta2, eps;                   /* ADAM, ADAMW (eps: RMSPROP too) */
    int amsgrad;                                /* ADAM, ADAMW: max_exp_avg_sq, a third slot */
    double alpha;                               /* RMSPROP (momentum: its buffer when > 0) */
    int centered;                               /* RMSPROP: grad_avg */
    double lr_decay, init_acc;                  /* ADAGRAD: lr_decay, initial_accumulator_value (eps too) */
} OptHyper;

typedef struct Graph {
    Node **n;
    int nn, cap;
    int over_limit;         /* the front end reported FWD_MAX_NODES (once for all blocks) */
    int *params;            /* PARAM node ids, in declaration order */
    int nparam;
    /* tied parameters (params.c): aliases[k] is another state_dict name of
     * PARAM node alias_of[k] (self.lm_head.weight = self.wte.weight) */
    const char **aliases;
    int *alias_of;
    int naliases;
    int images, labels;     /* data nodes */
    int logits;             /* model output */
    int log_probs;          /* forward returns log_softmax(logits); logits is its operand (the
                               loss's softmax of log-probabilities is that of the logits) */
    int loss;               /* CE_LOSS (per-sample) node */
    int loss_sum;           /* SUM_ALL node (stat slot) */
    int count_sum;          /* SUM_ALL of COUNTED: the targets the loss counts (a class loss over
                               positions, or with ignore_index; its mean's denominator), or -1 */
    int correct_sum;        /* the evaluation's metric sums (stat slots): SUM_ALL of CORRECT, or
                               REG_STATS / ML_STATS for float targets */
    int metric2;            /* a multi-task model's second metric sum (the squared errors), the stat
                               slot after correct_sum's; -1 none */
    /* a loss block whose targets are a tuple (ntargets columns of float
     * targets; target_classes[k] > 0: column k holds class indices below
     * it): the class head with its targets and the regression head with
     * its targets, whose accuracy and MSE the evaluation reports; -1 none */
    int ntargets;
    int *target_classes;
    int mt_class_out, mt_class_t, mt_reg_out, mt_reg_t;
    /* the train block's `metric`: METRIC_ACCURACY, METRIC_MSE or
     * METRIC_MACRO_F1 of metric_pred against metric_t; 0 none */
    int metric_kind, metric_pred, metric_t;
    int *grad;              /* grad[param index] = node id of its gradient */
    int *updates;           /* updates[param index] = its SGD node, or -1 */
    Op opt_op;              /* the update nodes' op: OP_SGD, OP_SGD_MOMENTUM, OP_ADAM, OP_ADAMW, OP_RMSPROP,
                               OP_ADAGRAD */
    OptHyper opt;
    int decay_dim;          /* 0: opt.weight_decay on every parameter; 2: only on those of rank >= 2
                               (decay = "dim>=2": nanoGPT's two groups; ir_param_decays) */
    int prec;               /* RT_PREC_*: the kernels round to bf16 / fp16 where autocast stores it */
    int nbuckets;
    int *effects;           /* in-place buffer updates the train plan must run */
    int neffects;
    int ndropout;           /* DROPOUT nodes so far: the next one's drop_key */
    unsigned fusion;        /* the fusion rules on: the front end reads R_ATTENTION's */
} Graph;

/* ops.def's columns, indexed by Op */
extern const char *const op_text[OP_COUNT];
extern const int op_arity[OP_COUNT];
extern const OpKind op_kind[OP_COUNT];
extern const char *const op_formula[OP_COUNT];
extern const int op_fuse[OP_COUNT];
extern const double op_flops[OP_COUNT], op_rd[OP_COUNT], op_wr[OP_COUNT];
extern const OpEval op_eval[OP_COUNT];

Graph *ir_new(void);
const char *ir_dtype_text(DType t);     /* "f32", "i64", ... */
int ir_add(Graph *g, Op op, int nin, const int *in, Shape s, DType dt, Loc loc);
int ir_param(Graph *g, const char *name, Shape s, int init, int64_t fan_in, Loc loc);
/* PARAM node `from` becomes a name of PARAM node `to` (a tie): out of
 * Graph.params, into Graph.aliases */
void ir_alias(Graph *g, int from, int to);
/* A PyTorch buffer: saved and loaded under its name, never trained. */
int ir_buffer(Graph *g, const char *name, Shape s, int init, int i64, Loc loc);
void ir_effect(Graph *g, int id);
/* y = dropout(x, p) for 0 < p < 1, keyed by its ordinal among the graph's dropouts. */
int ir_dropout(Graph *g, int x, double p, Loc loc);
/* ir_shape(2, DIM_N, 784): each dim converted to int64_t by the array. */
#define ir_shape(rank, ...) ir_shape_a((rank), (const int64_t[]){__VA_ARGS__})
Shape ir_shape_a(int rank, const int64_t *d);
int64_t ir_row_elems(const Shape *s);       /* a sample's elements: the dims' product but the batch's */
int64_t ir_numel(const Shape *s, int64_t n);/* elements with batch n */
/* Floats an op's buffer holds after its values, per sample (of the batch
 * its shape has, or in all when it has none): T_ATTN's log-sum-exp of each
 * query row, T_RNN's saved gates and states (ten_rnn_saved), T_RNN_BWD's
 * initial states' gradients. 0 for the rest. */
int64_t ir_extra_elems(const Node *n);
int ir_is_attention(Op op);     /* T_ATTN and its gradients */
int ir_is_recurrent(Op op);     /* T_RNN and its gradient, T_RNN_CN, T_RNN_DSTATE */
/* ops with kernels of their own, written by hand (attention, recurrences):
 * never fused with others, stored in float under autocast */
int ir_own_kernel(Op op);
/* Node.rnn.cell */
enum { RNN_TANH = 1, RNN_RELU, RNN_GRU, RNN_LSTM };
/* One element space for elementwise kernels: the same shape, or the batch
 * first in both and the same elements a sample in the same order with the
 * same last dimension ([N*T, C], a Linear's rows, and [N, T, C]) */
int ir_same_elements(const Shape *a, const Shape *b);
/* Node.attn.mask: what the attention's mask input is */
enum { ATTN_MASK_BOOL = 1, ATTN_MASK_ADD = 2 };
/* A pool op's or its gradient's pooled input x and output y; 1 for a gradient */
int ir_pool_io(const Graph *g, const Node *n, const Shape **x, const Shape **y);
int ir_batched(const Shape *s);             /* has a batch dimension, wherever it is */
int ir_tensor_pointwise(Op op);             /* a K_TENSOR formula at each element (BC_*, exp, ...): rule tensor-chain */
int ir_same_shape(const Shape *a, const Shape *b);
char *ir_shape_str(const Shape *s);         /* "[N, 1, 28, 28]" */
void ir_dump(FILE *f, const Graph *g);
/* Checks every node against its op's typing rule; returns the number of
 * problems and prints each (compiler bug if non-zero after a pass). */
int ir_verify(const Graph *g, const char *after);
int ir_opt_slots(const Graph *g);       /* optimizer state: floats per parameter float */
/* Whether the update of PARAM node id applies the weight decay (Graph.decay_dim) */
int ir_param_decays(const Graph *g, int id);

/* ---- tensor.c: shape rules of the ops over tensors of any rank -------- */
int ten_batch_dim(const Shape *s);          /* the batch's dimension, or -1 */
int ten_same(const Shape *a, const Shape *b);   /* one rank, one extent each (ir_same_shape) */
int ten_broadcast(const Shape *a, const Shape *b, Shape *out);  /* PyTorch's broadcast; 0: incompatible */
Shape ten_reduced(const Shape *x, unsigned axes);   /* the axes (bits) kept as 1s */
Shape ten_dropped(const Shape *x, unsigned axes);   /* the axes removed (keepdim = False) */
int64_t ten_slice_len(int64_t start, int64_t stop, int64_t step);  /* elements of start:stop:step */
unsigned ten_stretched(const Shape *from, const Shape *to);       /* the axes a broadcast's gradient sums */
int ten_view_ok(const Shape *from, const Shape *to); /* a reshape keeping the layout (the batch's place) */
const char *ten_verify(const Graph *g, const Node *n);  /* NULL, or what is wrong */
const char *ten_dtype_check(const Graph *g, const Node *n); /* NULL, or what is wrong with its dtype */
DType ten_dtype(const Graph *g, Op op, int nin, const int *in, DType given);   /* PyTorch's promotion */
/* scaled dot-product attention: q [.., L, E], k [.., S, E], v [.., S, Ev]
 * (one set of leading dimensions), mask NULL or broadcast to [.., L, S]:
 * NULL and *out [.., L, Ev], or why not */
const char *ten_attn_shape(const Shape *q, const Shape *k, const Shape *v, const Shape *mask, Shape *out);
const char *ten_bmm_shape(const Shape *a, const Shape *b, int ta, int tb, Shape *out); /* NULL, or why not */
int ten_is_reduction(Op op);            /* T_SUM ... T_COUNT_EQ: a result element loops over the reduced ones */
/* a recurrence's cell (Node.rnn.cell): its gates (G), and the floats a
 * step and sample T_RNN keeps for its gradient, in units of H */
int ten_rnn_gates(int cell);
int ten_rnn_saved(int cell);

/* ---- front.c: the front end (lex.l, parse.y, then sema.h's files) --- */
enum { OPT_SGD = 0, OPT_ADAM = 1, OPT_ADAMW = 2, OPT_RMSPROP = 3, OPT_ADAGRAD = 4 };
enum { METRIC_ACCURACY = 1, METRIC_MSE = 2, METRIC_MACRO_F1 = 3 };
/* The train block's loss: cross_entropy and nll_loss take class indices,
 * the others float targets of the model's output width. */
enum { LOSS_CE = 0, LOSS_MSE, LOSS_L1, LOSS_SMOOTH_L1, LOSS_HUBER, LOSS_BCE_LOGITS };
/* The train block's data source (data_cfg.c; the runtime's rt_data_src). */
typedef struct DataCfg {
    int kind;               /* RT_SRC_IDX, RT_SRC_NPZ, RT_SRC_CSV, RT_SRC_TEXT */
    const char *path;       /* idx: the directory; npz: the file; csv: the training file */
    const char *test;       /* csv: the test file, or NULL */
    const char *arrays[4];  /* npz: x_train, y_train, x_test, y_test (narrays 4), or none (0) */
    int narrays;
    const char **targets, **features;   /* csv columns; no features: every other column; npz: several
                                           y arrays, the training set's then the test set's */
    int ntargets, nfeatures;
    double split;           /* held-out fraction of the training set; 0: none */
    int target_input;       /* target = input (an autoencoder): the loss compares the output with the sample */
    int norm_auto;          /* normalize = auto */
    int norm_given;         /* the file says normalize (the defaults aside) */
    int nnorm;              /* 0: none; 1: every element; else per channel or feature */
    double *norm_mean, *norm_std;
    int64_t block;          /* text: tokens a window */
    int vocab_bytes;        /* text: vocab = bytes */
    Loc loc;
} DataCfg;

struct TrainItem;
typedef struct TrainCfg {
    const char *model;      /* model name */
    const struct TrainItem *loss_block;    /* loss(out, y) { ... } (ast.h), or NULL: the one-line loss */
    const struct Expr *metric;  /* metric accuracy(out[1], y) | mse(...): read in the loss block's scope */
    DataCfg data;
    int reduction;          /* Reduction */
    double label_smoothing; /* cross_entropy's, in [0, 1] */
    int loss;               /* LOSS_*: the loss op (its gradient and target kind follow) */
    double loss_delta;      /* smooth_l1_loss's beta, huber_loss's delta */
    double *loss_w;         /* BCE's pos_weight, cross_entropy's / nll_loss's weight, or NULL */
    int loss_nw;
    int nll;                /* loss nll_loss: the model must return log_softmax (Graph.log_probs) */
    int has_ignore;         /* cross_entropy / nll_loss(ignore_index = k): targets equal to k count
                               for nothing (loss, gradient, the mean's count, accuracy) */
    int64_t ignore_index;
    int optimizer;          /* OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_RMSPROP, OPT_ADAGRAD */
    double lr, momentum, dampening, weight_decay;
    int nesterov;
    double beta1, beta2, eps;   /* adam, adamw (eps: rmsprop too) */
    int amsgrad;                /* adam, adamw */
    double alpha;               /* rmsprop */
    int centered;               /* rmsprop */
    double lr_decay, init_acc;  /* adagrad */
    int decay_dim;              /* decay = "all" (0) or "dim>=2" (2): which parameters weight_decay shrinks */
    int sched;              /* RT_SCHED_*: the lr per epoch or per optimizer step */
    double step_size, gamma, t_max, eta_min;
    double sched_v[RT_SCHED_MAX_V];  /* the newer schedules' arguments, as rt_model.sched_v */
    int sched_n;
    double clip_norm;       /* clip_grad_norm max_norm; 0: no clipping */
    double clip_value;      /* clip_grad_value clip_value; 0: no clipping */
    int accumulate;         /* micro-batches per optimizer step (1: none) */
    int batch, epochs, shuffle, drop_last;
    uint64_t seed;
    int64_t max_steps;      /* max_steps N: the run stops after N optimizer steps; 0 none */
    int sync_bn;            /* SyncBatchNorm: batch statistics over all ranks */
    double bucket_mb;       /* gradient bucket size after the first (1 MB) */
    int precision;          /* RT_PREC_*: fp32, or autocast-like bf16 / fp16 */
    double init_scale, growth_factor, backoff_factor;   /* fp16: GradScaler's */
    int64_t growth_interval;
    Loc loc;
} TrainCfg;

typedef struct Program {
    Graph *g;
    TrainCfg train;
    const char *model_name;
    int in_rank;            /* the model's input per sample: in_dim[0..in_rank) */
    int64_t in_dim[3];
    int target;             /* RT_TGT_*: class indices or float targets (the loss's) */
    int nclass;
    int64_t positions;      /* class targets per sample: 1, or the positions of [N, T..., C] logits */
    int64_t in_vocab;       /* tokens (forward(idx: i64[...])): each must be < this (the embeddings'
                               rows); 0: float samples */
} Program;

/* Parses and checks a model file; on any error prints diagnostics and
 * returns NULL. The graph holds the forward pass, IMAGES/LABELS and the
 * per-sample CE_LOSS (g->loss), with g->logits set. */
Program *front_compile(const char *path, const char *text, unsigned fusion);   /* fusion: the rules on (attention's is decided here) */

/* ---- autodiff.c ------------------------------------------------------- */
/* Appends d(y)/d(wrt[i]) given the seed gradient node dy (NULL: y is a
 * loss node that seeds itself). out[i] receives gradient node ids. */
void ad_grad(Graph *g, int y, int dy, const int *wrt, int nwrt, int *out);
/* Training step: loss/accuracy sums, backward for all params, SGD updates. */
void ad_train_step(Program *p);

/* ---- bucket.c --------------------------------------------------------- */
/* Gradient buckets as PyTorch DDP forms them: parameters in reverse order
 * (the order backward produces their gradients), a bucket closes once it
 * holds at least its cap: first_mb for the first, bucket_mb after. */
void bucket_plan(Graph *g, double first_mb, double bucket_mb);

/* ---- plan: the kernels (fuse.c) and their memory (memplan.c) ---------- */
typedef enum { G_DATA, G_MATMUL, G_EW, G_ROW, G_RED, G_OPT, G_CONV, G_CHAN, G_POOL, G_STATE, G_COMM, G_NORM,
               G_TENSOR } GroupKind;
/* Fusion rules, each switchable (--fusion=all,-epilogue, --no-fuse RULE):
 * fuse.c's fuse_rule table names and documents them. A level is a set. */
enum {
    R_DATA = 1 << 0, R_EPILOGUE = 1 << 1, R_EW_CHAIN = 1 << 2, R_REDUCTION = 1 << 3, R_ROW_OPS = 1 << 4,
    R_OPTIMIZER = 1 << 5, R_CHAN_PASS = 1 << 6, R_CONV_BIAS = 1 << 7, R_DROPOUT = 1 << 8, R_ACT_INPUT = 1 << 9,
    R_SIBLINGS = 1 << 10, R_POOL_CHAIN = 1 << 11, R_ROW_TAIL = 1 << 12, R_DATA_PROLOGUE = 1 << 13,
    R_SUM_IN_PLACE = 1 << 14, R_TENSOR_CHAIN = 1 << 15, R_ATTENTION = 1 << 16,
};
#define FUSE_NRULES 17
/* Rule row-tail: the widest rows a GEMM kernel runs its row ops on. The
 * GPU's GEMM tile is 64 columns wide (emit_cuda.c TILE_N), and the tail
 * runs in the block that holds a tile's whole rows. */
#define ROW_TAIL_MAX_COLS 64
typedef unsigned FuseLevel;     /* a set of rules */
#define FUSE_NONE 0u
#define FUSE_ELEMENTWISE ((FuseLevel)(R_EW_CHAIN | R_DROPOUT | R_ACT_INPUT | R_TENSOR_CHAIN))
#define FUSE_ALL ((FuseLevel)((1u << FUSE_NRULES) - 1))
typedef struct FuseRule { unsigned bit; const char *name, *what; } FuseRule;
extern const FuseRule fuse_rule[FUSE_NRULES];
/* fuse_rules.c: the rules' table; a level from "none", "elementwise",
 * "all", optionally followed by ,-RULE or ,+RULE items; -1 with the
 * offending item in *bad (unknown names) */
int fuse_parse(const char *spec, FuseLevel *out, const char **bad);
const char *fuse_rule_names(void);            /* "data, epilogue, ..." for messages */
int fuse_rule_bit(const char *name);          /* its bit, or 0 */
typedef enum { B_NONE, B_ACT, B_FIX, B_PARAM, B_GRAD, B_STAT } BufClass;

typedef struct Group {
    GroupKind kind;
    int *nodes;             /* in topological order */
    int nnodes;
    int anchor;             /* matmul / row op the group is built around, -1 */
    char *name;             /* kernel name, e.g. "t3_mm_nt_bias_add_relu" */
    int gemm_out;           /* G_MATMUL: node whose buffer the GEMM writes */
    unsigned rules;         /* the fusion rules that added nodes to it */
    /* G_MATMUL on the GPU (sched_gpu.c): tiles of tile_m rows x
     * 64 columns, and split-K: split slices of
     * K; the partial tiles in act at ws_off, ws_units of it (units, the
     * plan's one workspace), ctr_n = ctr_rows x column-tiles arrival
     * counters in fix at ctr_off. split 1: none of it. A weight gradient
     * (K is the batch, M x N fixed) keeps its partials in fix instead, at
     * wsf_off, wsf_n floats (split x M x N), after the part of fix a step
     * zeroes (Plan.fix_zero); ws_units is 0 then. */
    int tile_m, split;
    int64_t ws_off, ws_units, ctr_off, ctr_rows, ctr_n, wsf_off, wsf_n;
    /* G_MATMUL on the GPU (sched_pair.c, rule siblings): this group and the
     * next run as one CUDA launch; 0 otherwise */
    int pair_next;
    /* G_MATMUL, rule row-tail: the row op whose logits this GEMM computes,
     * its row ops and their sums run after the epilogue in the same
     * kernel (plan_in_row_tail); -1 when there is none */
    int row_anchor;
    /* G_TENSOR recurrence (T_RNN, T_RNN_BWD) on the GPU (sched_gpu.c,
     * emit_rnn_cuda.c): rnn_rows samples a block, each unit's dot products
     * split over rnn_split threads; 0 before the scheduler runs (1, 1) */
    int rnn_rows, rnn_split;
} Group;

typedef struct Buf {
    BufClass cls;
    int64_t off;            /* ACT: units (floats per sample); others: floats/slots */
    int64_t size;
    int h16;                /* ACT: 16-bit storage in the CUDA kernels (mem_h16) */
} Buf;

typedef struct Plan {
    const char *name;       /* "train" or "eval" */
    int training;           /* batch norm: batch statistics (train) or running ones */
    Graph *g;
    char *in_plan;          /* in_plan[node] */
    char *is_root;          /* is_root[node]: an output of the plan */
    int *nuse;              /* consumers of each node inside the plan */
    int **cons;             /* cons[node][0..nuse-1]: those consumers, in order */
    int *order;             /* nodes in schedule order */
    int norder;
    int *group_of;          /* group_of[node], -1 */
    Group *groups;
    int ngroups;
    Buf *buf;               /* buf[node] */
    char *lowp;             /* lowp[node]: under bf16|fp16, an op over tensors of any rank whose value
                               autocast holds in the low precision (memplan.c: mem_rounded) */
    int64_t act_units, fix_floats;      /* with the GPU's workspaces (mem_plan_gpu) */
    int64_t cpu_act_units, cpu_fix_floats;  /* the C kernels' alone: what a CPU run allocates */
    int64_t fix_zero;       /* fix[0, fix_zero): what a CUDA step zeroes (the rest: weight-gradient partials) */
    int nstat;
    int64_t param_floats;
    int64_t *param_off;     /* [nparam] */
    int64_t batch;          /* the train block's batch: the GPU's split-K choice; 0 unknown */
    int gpu_tile;           /* the CUDA GEMMs' tile rows, 64, 32 or 16; 0: each its own (sched_gpu.c) */
    int gpu_rnn_rows, gpu_rnn_split;    /* --gpu-rnn RxK: every recurrence's design; 0: each its own */
    const struct GpuTarget *gpu;    /* what sched_gpu decided the launches for; NULL: not yet */
} Plan;

/* plan.c: a plan is the nodes reachable backwards from the roots, in
 * topological order. plan_nin: the inputs of n the plan reads (all but
 * the sync inputs of bn_stats in the eval plan, which normalizes with the
 * running statistics there). */
int plan_nin(const Plan *p, const Node *n);
Plan *plan_new(Graph *g, const char *name, const int *roots, int nroots);
/* The two plans of a training program: the train step's (the loss and
 * count sums, the effects, every update) and the evaluation's (the loss,
 * metric and count sums) */
Plan *plan_train(Graph *g);
Plan *plan_eval(Graph *g);
/* forward alone to the logits, for generating text (a language model's) */
Plan *plan_predict(Graph *g);
int plan_uses_outside(const Plan *p, int node);   /* used by another group, a root, or read back by a row tail */
int plan_source(const Plan *p, int node);         /* through views to the producer */
int plan_in_row_tail(const Plan *p, int node);    /* rule row-tail: a row op (or its sum) after a GEMM's epilogue */
/* No kernel, aliases its input: K_VIEW ops, and dropout in the eval plan. */
int plan_is_view(const Plan *p, int node);
int plan_sum_in_place(const Plan *p, int node);
void plan_dump_groups(FILE *f, const Plan *p);
/* fuse.c: the nodes into groups, one kernel each, under the rules on */
void fuse_plan(Plan *p, FuseLevel level);
/* fuse_explain.c: --explain-fusion, every producer and consumer left in
 * different kernels with the predicate that kept them apart */
void fuse_explain(FILE *f, Plan *p, FuseLevel level);
/* memplan.c: every buffer an offset in its arena, live ranges apart;
 * then (mem_plan_gpu, after sched_gpu) what the GPU's launch decisions
 * need: split-K workspaces, arrival counters, partial sums */
void mem_plan(Plan *p);
void mem_plan_gpu(Plan *p);
void mem_dump(FILE *f, const Plan *p);
int64_t mem_align(int64_t floats);               /* buffer alignment in floats */
/* Under precision bf16|fp16, whether every value node id holds is one its
 * kernel rounded to that precision (so its 16 bits hold it exactly): the
 * CUDA kernels then store its buffer as 16-bit values (Buf.h16). */
int mem_rounded(const Plan *p, int id);
/* plan_verify.c: what fuse produced (each node in one group, an order
 * that respects dependencies, only fusions the emitters implement) and
 * what memplan produced (no two live buffers overlap); return the number
 * of problems, each printed (compiler bugs). */
int plan_verify_groups(const Plan *p, const char *after);
int plan_verify_memory(const Plan *p, const char *after);
/* cost.c: FLOPs and bytes to memory of a kernel at a batch size. The
 * CPU target counts the second pass of a GEMM's epilogue; a GPU's runs in
 * registers. */
typedef enum { COST_CPU, COST_GPU } CostTarget;
typedef struct KernelCost { double flops, bytes; } KernelCost;
KernelCost cost_group(const Plan *p, const Group *gr, int64_t batch, CostTarget t);
KernelCost cost_plan(const Plan *p, int64_t batch, CostTarget t);
/* The GPU's reads of a recurrence's W_hh after its first, which
 * cost_group's GPU bytes include (each block, each step: from L2); 0
 * for any other group */
double cost_rnn_rereads(const Plan *p, const Group *gr, int64_t batch);
const char *cost_bytes_text(double bytes);     /* B, KiB, MiB, GiB */
/* What `cddpc study` keeps of each variant it compiles (pipeline.c): the
 * train plan's kernel count and cost at each batch size. */
typedef struct StudyCost { int64_t batch; int kernels; KernelCost cost; } StudyCost;
/* study.c: `cddpc study ...` (argv[0] is "study") */
int cddpc_study_main(int argc, char **argv);
/* plot_cmd.c: `cddpc plot ...` (argv[0] is "plot") */
int cddpc_plot_main(int argc, char **argv);
/* graph.c: --graph FILE.dot (and FILE.svg when Graphviz's dot is installed) */
int plan_graph(const char *path, const Plan *train, const Plan *eval, int64_t batch);
/* gpu_rates.c: the GPU model's rates: datasheet peaks (one table, with
 * sources), a GEMM tile's rate and time, a grid's busy share, where a
 * step's operands live (L2 or HBM), the split-K tail, a kernel's floor and
 * the graph's per-node overhead, each assumption beside its source */
typedef struct GpuTarget {
    const char *name, *full;
    double flops, bw;       /* FP32 FLOP/s (non-tensor), memory bytes/s */
    double tensor;          /* dense BF16/FP16 tensor-core FLOP/s the mma path can use (0: none, sm < 80) */
    int sms;
    double clock;           /* boost clock, Hz */
    double l2, l2_bw;       /* L2 bytes, and its read bytes/s (all SMs) */
    const char *source;
} GpuTarget;
const GpuTarget *gpu_target(const char *name);     /* h100, h200, a100, t4; NULL */
#define GPU_BLOCKS_PER_SM 2     /* resident blocks: the emitter's __launch_bounds__(256, 2) */
#define GPU_NODE_US 1.0         /* a kernel node of a replayed CUDA graph (gpu_rates.c: source) */
#define GPU_GRAPH_LAUNCH_US 5.0 /* one cuGraphLaunch (gpu_rates.c: source) */
#define GPU_MIN_KERNEL_US 2.0   /* no kernel node ends sooner (gpu_rates.c: source) */
double gpu_busy_share(const GpuTarget *t, double blocks);
/* The bytes a training step of p at batch n touches: activations, the
 * C kernels' fixed arena, parameters, their gradients and the optimizer's
 * state */
double gpu_working_set(const Plan *p, int64_t n);
/* The bandwidth a kernel's operands come at: L2's when that working set
 * stays in one half of L2 from step to step, else the memory's */
double gpu_step_bw(const GpuTarget *t, double working_set);
/* A kernel node's seconds from its work's: at least GPU_MIN_KERNEL_US */
double gpu_kernel_floor(double secs);
/* The FLOP/s a GEMM kernel of that tiling can reach on t: the FMA or the
 * tensor-core rate its shared-memory loads allow (gpu_model.c) */
typedef struct GemmTiling GemmTiling;
double gpu_gemm_rate(const GpuTarget *t, const GemmTiling *gt);
/* The split-K tail of a GEMM in tiles of tile_floats outputs, split
 * slices deep, over that many tiles: the fence and counter, then each
 * tile's last block reading back its slices' partials */
double gpu_splitk_tail(const GpuTarget *t, double tile_floats, int split, double tiles);
/* A GEMM kernel's seconds on t (without the floor): its flops at that
 * rate or its bytes at bw, over the share of the SMs its blocks keep busy */
double gpu_gemm_secs(const GpuTarget *t, const GemmTiling *gt, double flops, double bytes, double bw, double blocks);
/* A recurrence kernel's design (emit_rnn_cuda.c): rows samples a block,
 * each hidden unit's dot products split over `split` consecutive threads
 * of a warp; slots units side by side (H to a whole warp, at most 128),
 * units a thread's unit loop, threads = split x slots a block. */
typedef struct RnnDesign { int rows, split, slots, units, threads; } RnnDesign;
RnnDesign gpu_rnn_design(int64_t H, int rows, int split);
/* The work of one recurrence kernel at batch n: steps, hidden units,
 * gates, the gradient's or the forward's */
typedef struct RnnWork { int64_t n, T, H; int G, backward; } RnnWork;
/* Whether design d's registers (estimated) and shared memory fit */
int gpu_rnn_fits(const RnnWork *w, const RnnDesign *d);
/* Its seconds on t (without the floor): the steps' L2 round trips or
 * instruction issue, whichever is longer, or its traffic: `bytes` at bw,
 * of which `rereads` (W_hh's, cost_rnn_rereads) at the L2's rate */
double gpu_rnn_secs(const GpuTarget *t, const RnnWork *w, const RnnDesign *d, double bytes, double rereads, double bw);
/* sched_gpu.c: every CUDA launch decision, once, for target t, between
 * fuse and memplan: each GEMM's tile and split-K (Group.tile_m, split),
 * each channel pass's slices (split, ctr_n, wsf_n). The default target is
 * the GPU a program most likely meets: the H100. */
#define SCHED_GPU_DEFAULT "h100"
#define GPU_TILE_N 64           /* a GEMM tile's columns (and a row tail's widest rows) */
#define GPU_TILE_K 16           /* its k slice */
#define GPU_THREADS 256         /* a block */
#define GPU_GEMM_R 4            /* a thread's outputs: up to GPU_GEMM_R rows x GPU_GEMM_R columns */
void sched_gpu(Plan *p, const GpuTarget *t);
/* A G_MATMUL group's tiling (outputs per thread, rows x cols; the tile;
 * whether its k loop is the tensor cores': precision bf16|fp16, sm_80 on);
 * 0 for any other group. */
struct GemmTiling { int rows, cols, tile_m, tile_n, tile_k, threads, mma; };
int sched_gemm_tiling(const Plan *p, int grp, GemmTiling *t);
/* The tiling of a 16r x 64 tile (r rows of outputs a thread) under p's
 * precision: the tensor cores' for bf16|fp16 */
GemmTiling sched_gemm_tile(const Plan *p, int r);
/* The tiles GEMM group grp may take (64, 32, 16 rows; only --gpu-tile's
 * when set), each with the split-K its grid allows and with none, and
 * the predicted seconds on t (the scheduler picks the fastest); their
 * count, 0 for any other group. */
typedef struct GemmOption { int tile_m, split; double secs; } GemmOption;
#define SCHED_GEMM_OPTIONS 6    /* three tiles, each split or not */
int sched_gemm_options(const Plan *p, int grp, const GpuTarget *t, GemmOption *o);
/* The designs recurrence group grp may take on t (rows 8, 4, 2, 1 x
 * split 1, 2, 4, 8 that fit; only --gpu-rnn's when set) and each one's
 * predicted seconds (the scheduler picks the fastest); 0 for any other
 * group */
typedef struct RnnOption { int rows, split; double secs, steps; } RnnOption;   /* steps: the chain alone */
#define SCHED_RNN_OPTIONS 16
int sched_rnn_options(const Plan *p, int grp, const GpuTarget *t, RnnOption *o);
/* Group grp's recurrence design (1 x 1 before the scheduler runs) */
RnnDesign sched_rnn_design(const Plan *p, int grp);
/* sched_pair.c: the GPU schedule's one decision after memplan, which it
 * needs the placed buffers for: adjacent independent GEMMs that read the
 * same operand (a layer's input and weight gradients) as one launch
 * (Group.pair_next), when rule siblings is on */
void sched_pair_siblings(Plan *p, FuseLevel level);
/* gpu_model.c: --report --target GPU, the step predicted per kernel from
 * the rates above and each kernel's launch geometry */
void gpu_report(FILE *f, const Plan *p, int64_t batch, const GpuTarget *t);
/* pipeline.c: a model's text through every pass: front end, autodiff,
 * fusion, memory plan, then the report or dumps asked for and the program
 * (written when out or an --emit directory is given; with neither, emitted
 * in memory only). With costs non-NULL, the train plan's kernel count and
 * cost at each of batches[0..nbatch) are stored there (`cddpc study`).
 * Returns 0, or 1 after diagnostics. */
#define CC_TIMEOUT_DEFAULT 600      /* seconds: the C compiler's limit unless --cc-timeout */
typedef struct PipelineOptions {
    const char *input, *output, *emit_c_dir, *emit_cuda_dir;
    const char *graph;      /* --graph FILE.dot */
    int report;
    CostTarget target;      /* --target: the cost model --report uses */
    const GpuTarget *gpu;   /* --target h200 ...: also the predicted step */
    FuseLevel fusion;       /* the rules on */
    unsigned fusion_off;    /* --no-fuse RULE ... */
    int explain;            /* --explain-fusion */
    double bucket_mb;       /* --bucket-mb: overrides the train block; 0: keep */
    int gpu_tile;           /* --gpu-tile: the CUDA GEMMs' tile rows (64, 32, 16); 0: the model's choice */
    int gpu_rnn_rows, gpu_rnn_split;    /* --gpu-rnn RxK: the recurrences' design; 0: the model's choice */
    double cc_timeout;      /* --cc-timeout S: the C compiler's time limit; 0: the default (600 s); < 0: none */
    char dump[8][16];
    int ndump;
} PipelineOptions;
int pipeline_compile(const PipelineOptions *o, const char *text, const char *out, const int64_t *batches, int nbatch,
                     StudyCost *costs);
/* The same on the model file o->input: a failed compile leaves no stale
 * program at out; an unreadable file is reported and exits. */
int pipeline_compile_file(const PipelineOptions *o, const char *out, const int64_t *batches, int nbatch,
                          StudyCost *costs);
/* report.c */
void plan_report(FILE *f, const Plan *p, int64_t batch, CostTarget t);
void plan_dump_buckets(FILE *f, const Plan *p);
/* emit_program.c: the gradient buckets' slab ranges and the kernels that
 * complete and consume them */
typedef struct PlanBucket {
    int64_t off, end;       /* slab range [off, end) */
    int ready, opt;         /* kernel indices in the train plan */
    int nparam;
} PlanBucket;
void plan_buckets(const Plan *p, PlanBucket *out);   /* out[g->nbuckets] */

/* ---- emit_expr.c: shared by the emitters ------------------------------ */
typedef struct Emit {
    FILE *f;
    const Plan *p;
    const Group *gr;
    int grp;                /* index of gr in p->groups */
    int cuda;               /* the CUDA target: 16-bit buffers (Buf.h16) are typed as such */
} Emit;
const Node *ex_node(const Emit *m, int id);
int ex_in_group(const Emit *m, int id);
char *ex_dim(int64_t d);                    /* "n" for the batch, else the number */
char *ex_addr(const Emit *m, int id);       /* base address of a node's buffer via e-> */
const char *ex_elem_type(const Emit *m, int id);    /* the C type of b<id>'s elements */
void ex_declare_buffers(const Emit *m);     /* `T *const b<id> = ...;` for the group */
/* The act buffers the group reads or writes as rt_cuda_launch.acts lists
 * them (RT_ACT_FIELDS each, into out, which has room for every node's
 * inputs and output); returns how many. */
int ex_act_io(const Emit *m, int64_t *out);
/* A GEMM or convolution operand b<id>[...] (expr) rounded to the plan's
 * precision, unless its buffer already holds it so (16-bit) */
char *ex_round_operand(const Emit *m, int id, const char *expr);
char *ex_operand(const Emit *m, int x, const Shape *space);   /* v<x> or b<x>[...] at (i, j) */
char *ex_ew_expr(const Emit *m, const Node *n, const Shape *space);
/* The C target's vectorizable cddp_erff and cddp_expf (GELU's formulas and
 * attention's probabilities use them): ex_uses_fast_math(op) for each op
 * that does; the prelude defining them, for programs with such an op */
int ex_uses_fast_math(Op op);
const char *ex_fast_math_prelude(void);
char *ex_chan_index(const Shape *space, const char *ind);   /* `const int64_t jc = j / (H*W);` over images */
/* The per-element body of elementwise kernels and GEMM epilogues, both
 * targets: at (i, j) of space, the anchor loaded as v<load> (load_expr;
 * load -1: none), every elementwise node of the group as v<id> with stores
 * of the values other kernels read, and each row reduction (sum_rows) as
 * the target's statement row_sum(node, x): `+=` into the output or a
 * partial on the CPU, an atomic on the GPU. */
void ex_element(const Emit *m, const Shape *space, int load, const char *load_expr, const char *ind,
                char *(*row_sum)(int red, const char *x));
int ex_has_row_reduction(const Emit *m);
/* The pooling an elementwise group ends with (rule pool-chain), or -1 */
int ex_pool_of_chain(const Emit *m);
int ex_sum_in_place(const Emit *m);
/* Whether the group's cross-entropy smooths its labels (needs sx, the row's
 * sum of logits, beside lse) */
int ex_smoothing(const Emit *m);
int ex_label_sums(const Emit *m);           /* the batch's label sums a class loss's mean reads */
char *ex_label_sums_add(const Emit *m, const char *y);
int ex_label_sums_rows(const Emit *m);      /* the sums are the rows themselves: no loop */
int ex_reads_label(const Emit *m);          /* a row op of the group reads the label */
/* The group's cross-entropy node with class weights, or NULL; then the
 * row kernels declare them (cw, by ex_class_weights_decl), and sum the
 * batch's target weights (sw) and, when it smooths, each row's sum of
 * weighted logits (swx) */
const Node *ex_class_weights(const Emit *m);
void ex_class_weights_decl(const Emit *m, const char *ind);
/* The data gather's formulas: a pixel (uint8 expression) normalized as
 * the train block's data says, and the label of batch row i. */
char *ex_sample(const char *i, const char *k);  /* sample element k of batch row i, normalized */
char *ex_label(const Node *labels, const char *i);                  /* class label of batch row i */
char *ex_target(const char *i, const char *k);  /* float target k of batch row i */
char *ex_labels_count(const Node *n);           /* the class labels a batch has: n, or n times the positions */
/* The row ops of a G_ROW group (cross-entropy, its gradient, argmax, their
 * sums), their formulas from ops.def, inside the target's per-sample code
 * where x, y, mx, am, lse and i are in scope. The target gives the
 * indentation, the loop over the classes this thread handles, and how it
 * stores a per-sample value, sums a column and adds to a stat slot. */
typedef struct RowTarget {
    const char *ind;
    const char *classes;                             /* opens the loop over j */
    char *(*store)(const char *ind, int id);         /* b<id>[i] = v<id> */
    char *(*col_sum)(int red, const char *x);        /* b<red>[j] += x */
    char *(*stat)(const char *ind, int id, int x);   /* stat b<id>[0] += v<x> */
    char *(*total)(const char *ind, const char *v);  /* v: this thread's part -> the row's sum */
    /* stat b<id>[k] += x (a double): from every thread (lanes) or from the row's first */
    char *(*stat_add)(const char *ind, int id, const char *k, const char *x, int lanes);
} RowTarget;
/* Whether the group's row ops read float targets (t, the sample's row of
 * LABELS f32[N, K]) rather than a class index y. */
int ex_float_targets(const Emit *m);
void ex_row_ops(const Emit *m, const RowTarget *t);
typedef struct GemmParts { Group data, gemm, tail; } GemmParts;
void ex_gemm_parts(const Emit *m, GemmParts *v);
/* Slab ranges an optimizer group updates, merged where only alignment
 * padding (zero in param, grad and opt: updating it is a no-op) separates
 * them and both decay alike; returns how many, ranges in lo[], hi[] and
 * whether each applies the weight decay in decay[] (capacity gr->nnodes). */
int ex_opt_ranges(const Emit *m, int64_t *lo, int64_t *hi, int *decay);
/* The update (g->opt_op) of slab element k (w, g, lr and the prelude's
 * names in scope), with the weight decay when decay; closes the loop. */
void ex_opt_body(FILE *f, const Graph *g, int cuda, int decay);   /* cuda: NVRTC's text (it contracts a*b+c) */
/* Declarations the update loops read (w, g, lr, and the optimizer's). */
void ex_opt_prelude(FILE *f, const Graph *g, int64_t param_floats);
const char *ex_opt_names(const Graph *g); /* the slots' names in PyTorch's optimizer state, or NULL */
/* Mixed precision (README "Mixed precision"): the GEMM call of the
 * plan's precision ("rt_sgemm(" or "rt_sgemm_prec(RT_PREC_BF16, "), and
 * an expression rounded to it (x itself in fp32). The same helper name
 * on both targets: cddprt.h's for C, the CUDA prelude's copy. */
const char *ex_gemm_call(const Emit *m);
char *ex_round(const Emit *m, const char *x);

/* ---- emit_c.c, emit_cuda.c, emit_program.c ---------------------------- */
void emit_c_kernels(FILE *f, const Plan *p);
/* emit_nchw.c: the body of a G_CONV, G_CHAN, G_POOL or G_STATE kernel. */
void emit_nchw_c(const Emit *m);
void emit_nchw_cuda(const Emit *m, rt_cuda_launch *L);
/* rule pool-chain: an elementwise chain and the pooling of its result, or
 * a pool gradient and the chain after it, window by window (emit_nchw.c) */
void emit_pool_chain_c(const Emit *m);
void emit_pool_chain_cuda(const Emit *m, rt_cuda_launch *L);
/* emit_tensor.c: the body of a G_TENSOR kernel (an op over tensors of any rank, tensor.c). */
void emit_tensor_c(const Emit *m);
void emit_tensor_cuda(const Emit *m, rt_cuda_launch *L);
char *emit_tensor_prelude(const char *qual);   /* their helpers (cddp_index), for both preludes */
/* ... shared with emit_attn.c: shape s's element count (the batch's n in
 * it), operand x broadcast to s read at coordinates i0, i1, ..., and the
 * decode of element e of s into those coordinates */
char *emit_tensor_extent(const Shape *s);
char *emit_tensor_broadcast_at(const Shape *x, const Shape *s);
void emit_tensor_decode(FILE *f, const Shape *s, const char *e, const char *ind);
/* emit_attn.c: scaled dot-product attention's C kernels (T_ATTN*: a
 * G_TENSOR group of one node), and the geometry both targets' share: q
 * [.., L, E], k [.., S, E], v [.., S, Ev], the leading dimensions `lead`
 * (H matrices, the batch's n among them), o [.., L, Ev] with lse [.., L]
 * after it in the attention's buffer */
typedef struct AttnGeo {
    const Node *at;         /* the attention node (the group's, or a gradient's in[4]) */
    Shape lead, sc;         /* the leading dimensions; the scores' shape [.., L, S] */
    Shape ms;               /* the mask's shape as the attention reads it */
    int64_t L, S, E, Ev;
    int64_t qb;             /* the CPU kernels' query rows a block */
    int q, k, v, o, dy, mask;   /* buffers (plan_source); dy, mask -1 when none */
    int rank;               /* the scores' rank: coordinates i<rank-2> (query), i<rank-1> (key) */
} AttnGeo;
AttnGeo attn_geometry(const Emit *m, const Node *n);
void emit_attn_c(const Emit *m);
/* emit_rnn.c: a recurrence's C kernels (T_RNN, T_RNN_BWD, T_RNN_CN) and
 * the geometry they share with the CUDA ones. Rows of [N, T, *] operands
 * are n T + t. */
typedef struct RnnGeo {
    const Node *r;          /* the recurrence (the group's, or the gradient's or cell state's input) */
    int cell, G, X, reverse;    /* Node.rnn.cell, ten_rnn_gates, ten_rnn_saved, Node.rnn.reverse */
    int64_t T, H, GH, W;    /* steps, hidden units, G H, and the gradient's row (2 G H for the GRU) */
    int xw, whh, bhh, h0, c0, out, dy, dg, dcn;     /* buffers (plan_source); -1 none */
    int dstate;             /* the gradient keeps dh0 (and the LSTM's dc0) after its values */
} RnnGeo;
RnnGeo rnn_geometry(const Emit *m, const Node *n);
/* the step loop's head at indent ind: t_ the step in the forward's order
 * of k_ (or its reverse when `backward`), tp_ the step before it in that
 * order, first_ whether t_ is the forward's first; the caller closes it */
void rnn_steps(FILE *f, const RnnGeo *g, int backward, const char *ind);
void emit_rnn_c(const Emit *m);
/* emit_rnn_cuda.c: its CUDA kernels */
void emit_rnn_cuda(const Emit *m, const Node *n, rt_cuda_launch *L);
/* emit_attn_cuda.c: its CUDA kernels */
void emit_attn_cuda(const Emit *m, const Node *n, rt_cuda_launch *L);   /* n: the group's node */
/* emit_norm.c: the body of a G_NORM kernel (softmax, log_softmax, layer_norm and their gradients). */
void emit_norm_c(const Emit *m);
void emit_norm_cuda(const Emit *m, rt_cuda_launch *L);
/* emit_nchw.c: the sums channel pass grp combines across slices (0 none,
 * -1: it cannot be split), its channels and a channel's elements in one
 * sample, for the scheduler (sched_gpu.c) */
int emit_nchw_chan_sums(const Plan *p, int grp, int64_t *channels, int64_t *per_sample);
/* emit_cuda.c: the CUDA kernels and their launches */
const char *emit_cuda_prelude(int prec);   /* RT_PREC_*: bf16|fp16 add the 16-bit types */
/* The CUDA kernel of group grp (text after the prelude), and its launch. */
char *emit_cuda_kernel(const Plan *p, int grp, rt_cuda_launch *launch); /* static void NAME(rt_exec *e) */
/* groups grp and grp + 1 (Group.pair_next) as one kernel; sets a->pair */
char *emit_cuda_pair(const Plan *p, int grp, rt_cuda_launch *a, const rt_cuda_launch *b);
char *emit_cuda_pair_name(const Plan *p, int grp);     /* that kernel's name */
/* The gradient ranges the train plan's CUDA kernels accumulate into (a
 * fused row reduction's atomics) or never write (a parameter without a
 * gradient), which the runtime zeroes before each step: (offset, floats)
 * pairs into r[2 * nparam], sorted and merged; their count. Every other
 * gradient is stored whole by its kernel each step. */
int emit_cuda_zero_ranges(const Plan *p, int64_t *r);
/* emit_program.c: the program's source, compiled and linked to out_path
 * by the C compiler, stopped after cc_timeout seconds (<= 0: no limit) */
int emit_program(const Program *prog, const Plan *train, const Plan *eval, const Plan *predict,
                 const char *src_path, const char *out_path, const char *emit_c_dir, const char *emit_cuda_dir,
                 double cc_timeout);
/* onnx.c: the forward in eval mode as ONNX operators, the program's
 * static rt_onnx_graph onnx_graph (its refusal where an op has no export) */
void onnx_emit(FILE *f, const Graph *g);

#endif
