/* sema.h: the front end's modules, shared by its files.
 *
 *   args.c         suggestions for misspelt names, constants in arguments
 *                  and binding a call's arguments to a signature (arg_)
 *   layers.c       the layer table: constructors with their parameters,
 *                  and each layer's lowering to graph nodes (layer_)
 *   forward.c      a model's forward: variables, calls, additions (fwd_)
 *   loss_block.c   the train block's loss block, run in the model's scope (lblk_)
 *   loss_fns.c     F.cross_entropy, F.mse_loss, ... as values there (lfn_)
 *   train_block.c  the train block, its keys dispatched by name (train_)
 *   data_cfg.c     the train block's data source (data_cfg_)
 *   front.c        front_compile: the front end's one entry point
 *
 * Errors poison the value they would have produced instead of stopping,
 * so one compile reports every independent mistake but no knock-on ones. */
#ifndef SEMA_H
#define SEMA_H

#include "ast.h"

enum { MAX_DIM = 1 << 24 };
#define MAX_PARAM_ELEMS ((int64_t)1 << 31)

static inline Shape shape2(int64_t a, int64_t b) { return (Shape){2, {a, b}}; }
static inline Shape shape1(int64_t a) { return (Shape){1, {a}}; }

/* ---- args.c ------------------------------------------------------------ */
/* The closest candidate seen so far for a misspelt name. */
typedef struct Near {
    const char *name, *best;
    int dist;
} Near;

Near arg_near(const char *name);
void arg_near_try(Near *s, const char *cand);
const char *arg_near_hint(const Near *s);  /* "; did you mean 'x'?" or "" */

/* An expression as the user wrote it, roughly, for "got ..." messages. */
const char *arg_show(const Expr *e);
/* Constants: each reports a bad value and returns 0. */
int arg_int(const Expr *e, const char *what, int64_t lo, int64_t hi, int64_t *out);
int arg_num(const Expr *e, const char *what, double *out);
int arg_float32(Loc loc, const char *what, double v);     /* within float32's normal range or 0, else reported */
int arg_bool(const Expr *e, const char *what, int *out);
/* Whether e folds to a number: 1 (in *v), 0 (not a constant), -1 (an
 * error in it, reported: division by zero). A size is a number. */
int arg_const(const Expr *e, double *v);
int arg_number(const Expr *e, double *v, int *is_int);     /* arg_const, and whether Python's is an int */
/* Names of numbers: fn(ctx, e, f, is_int) gives 1 and the number e names
 * (a name bound by N, T, C = x.size() or d = C // 4; x.shape[d] and
 * x.size(d) of a variable), 2 for the batch's size (f DIM_N, or -k when
 * merged), 0 if e names none, -1 after reporting. arg_size: 1 and an
 * integer (the batch's as in a Shape). */
void arg_names(int (*fn)(void *ctx, const Expr *e, double *f, int *is_int), void *ctx);
int arg_size(const Expr *e, int64_t *v);

/* A callee's parameters: the first npos may be given positionally, the
 * first nreq must be given one way or the other. */
typedef struct Sig {
    const char *fn;
    const char *const *names;
    int n, npos, nreq;
} Sig;

/* Binds call arguments to sig's parameters (out[i] NULL when absent).
 * Reports unknown, repeated, surplus and missing arguments. */
int arg_bind(const Expr *call, const Sig *sig, Expr **out);

/* ---- layers.c ---------------------------------------------------------- */
typedef enum {
    LK_LINEAR, LK_ACT, LK_FLATTEN, LK_SEQUENTIAL, LK_CONV2D, LK_BATCHNORM2D, LK_MAXPOOL2D, LK_AVGPOOL2D,
    LK_DROPOUT, LK_BATCHNORM1D, LK_LAYERNORM, LK_ADAPTIVEAVGPOOL2D, LK_SOFTMAX, LK_CONVT2D, LK_UPSAMPLE,
    LK_EMBEDDING, LK_BLOCK, LK_LIST, LK_DICT, LK_MHA, LK_ENC_LAYER, LK_ENCODER, LK_RNN
} LayerKind;

/* An activation: its op (0: Identity) and parameters (Node.act). */
typedef struct ActArgs {
    Op op;
    double a, b;
} ActArgs;

typedef struct Layer {
    LayerKind kind;
    const char *name;       /* state_dict prefix: "fc1", "layers.0", "0", "" */
    const char *what;       /* in messages: "fc1", "layers.0", "layer 0" */
    Loc loc;                /* its constructor */
    int64_t in, out;        /* Linear: features; Conv2d: channels; BatchNorm1d/2d: in; LayerNorm: in;
                               Embedding: num_embeddings, embedding_dim */
    int64_t pad;            /* Embedding: padding_idx, -1 none */
    int w, b;               /* Linear, Conv2d, BatchNorm2d: PARAM nodes; b -1 without bias */
    int rm, rv, nbt;        /* BatchNorm2d: running_mean, running_var, num_batches_tracked */
    Window win;             /* Conv2d, pooling */
    double eps, momentum;   /* BatchNorm1d/2d; LayerNorm: eps */
    int osize[2];           /* AdaptiveAvgPool2d: output size (h, w) */
    int one_d;              /* Conv1d, the 1-d pools: over [N, C, L] as [N, C, 1, L] */
    int opad[2];            /* ConvTranspose2d: output_padding (h, w) */
    double scale[2];        /* Upsample: scale_factor (h, w), or 0 (osize is the size) */
    int bilinear, align;    /* Upsample: mode bilinear (else nearest), align_corners */
    Shape ns;               /* LayerNorm: normalized_shape (in: its elements) */
    Op op;                  /* Softmax / LogSoftmax: OP_SOFTMAX / OP_LOG_SOFTMAX */
    int dim;                /* Softmax / LogSoftmax: 1 (the features of [N, F]); 0: not given */
    double p;               /* Dropout */
    ActArgs act;            /* an activation (ReLU, GELU, ...): its op and parameters */
    struct Layer **kids;    /* Sequential, ModuleList */
    int nkids;
    struct Sema *inst;      /* a block: its members and numbers, its forward run there */
    /* transformer.c: MultiheadAttention (in: embed_dim; w, b: in_proj_weight, in_proj_bias; kids[0]
     * out_proj; p: the attention's dropout), TransformerEncoderLayer (kids: self_attn, linear1,
     * linear2, norm1, norm2; p, act), TransformerEncoder (kids: the layers, then its norm) */
    struct {
        int heads, batch_first, norm_first, norm;
    } xf;
    /* recurrent.c: LSTM, GRU, RNN (hidden in out; p the dropout between layers); a layer's
     * and direction's parameters at [layer * dirs + dir], b_ih and b_hh -1 without bias */
    struct {
        int cell, layers, dirs, batch_first;
        int *w_ih, *w_hh, *b_ih, *b_hh;
    } rnn;
} Layer;

/* kid `key` of a ModuleDict (its kids' names are the dict's plus ".key"), or NULL */
const Layer *layer_dict_kid(const Layer *dict, const char *key);

/* A value in forward: a node and its shape; id -1 once an error poisoned it. */
typedef struct Val {
    int id;
    Shape s;
} Val;

static const Val POISON = {-1, {0}};

typedef struct Var {
    const char *name;
    Val v;
    int is_num;             /* a number (T in N, T, C = x.size(); d = C // 4): num, is_int;
                               the batch's size: is_batch */
    int is_int, is_batch;
    double num;
    Val *tup;               /* the tuple forward returns (out in a loss block), ntup tensors; else NULL */
    int ntup;
} Var;

/* One model being checked. */
typedef struct Sema {
    Graph *g;
    const Model *m;
    LayerDecl **decls;      /* decls[i] named layers[i] */
    Layer **layers;
    int nlayers;
    Var *vars;
    int nvars;
    Var *tensors;           /* the model's own tensors (buffers, constants) as its members made them */
    int ntensors;
    int sync_bn;            /* the train block's sync_batchnorm */
    int autoenc;            /* the data's target = input: forward returns a sample's shape */
    int elementwise;        /* the loss compares each output (not a class loss): any [N, ...] */
    int in_loss;            /* running the train block's loss block: reductions may take the batch */
    const TrainItem *lossb; /* the train block's loss block, when this is the model it trains */
    Val *outs;              /* ... then forward may return a tuple: its tensors */
    int nouts;
    int *ycols;             /* the loss block's targets as a tuple: each column's node */
    const Expr *metric;     /* the train block's metric, read in the loss block's scope */
    /* blocks: a model made inside another (model Block(n) { ... }) is a
     * Sema of its own over the same graph, its parameters named under
     * prefix ("h.0.attn"); module: this is one (its forward returns what
     * its caller takes); file: where blocks are found; depth: nesting */
    const File *file;
    const char *prefix;
    int module, depth;
    /* forward.c's, for layers.c: a block named name, and one made / applied */
    const Model *(*find_block)(const struct Sema *S, const char *name);
    struct Layer *(*make_block)(struct Sema *S, const Expr *e, const char *prefix, const char *what);
    struct Val (*apply_block)(struct Sema *S, const struct Layer *l, struct Val x, Loc loc);
    struct Val (*eval)(struct Sema *S, const Expr *e);  /* forward's expressions: methods.c's operands */
    /* forward's statements and names, for the loss block (loss_block.c) */
    void (*run)(struct Sema *S, Stmt *const *body, int n, struct Val *ret, int *returned);
    void (*bind)(struct Sema *S, const char *name, struct Val v, struct Val *tup, int ntup);
    /* nn.Upsample / F.interpolate applied (upsample.c, above the layers) */
    struct Val (*upsample)(struct Sema *S, const struct Layer *l, struct Val x, Loc loc);
    /* PyTorch's attention modules made and applied (transformer.c, above the layers) */
    struct Layer *(*make_xf)(struct Sema *S, const Expr *e, LayerKind kind, const char *prefix, const char *what);
    struct Val (*apply_xf)(struct Sema *S, const struct Layer *l, struct Val x, Loc loc);
    /* nn.LSTM, nn.GRU, nn.RNN made (recurrent.c, above the layers) */
    struct Layer *(*make_rnn)(struct Sema *S, const Expr *e, const char *prefix, const char *what);
} Sema;

/* Index of a layer type by name (Linear, ReLU, ...), or -1. */
int layer_type(const char *name);
/* A PyTorch module this compiler does not have (nn.LSTM, nn.SELU). */
int layer_torch_module(const char *name);
/* The supported layer types, sorted, one line. */
const char *layer_list(void);
/* A layer constructor: Linear(...), ReLU(), Sequential(...), ...; NULL after reporting. */
Layer *layer_make(Sema *S, const Expr *e, const char *prefix, const char *what);
/* Layer l applied to x; loc is the call, or the layer's place inside a
 * Sequential (in_seq), which also changes how a fix is suggested. */
Val layer_apply(Sema *S, const Layer *l, Val x, Loc loc, int in_seq);
/* The functions that are a layer applied at once (F.max_pool2d(x, 2),
 * F.softmax(x, dim = 1), F.layer_norm(x, (64,))): 1 if name is one; then
 * layer_make_fn binds the call's arguments (the tensor in *input) and
 * returns the layer, NULL after reporting. */
int layer_fn(const char *name);
Layer *layer_make_fn(Sema *S, const Expr *e, const Expr **input);
const char *layer_fn_name(int i);     /* the i-th such function, NULL past the end */
/* The lowerings forward's functions share with the layers. */
Val layer_node(Sema *S, Op op, int a, int b, Shape s, Loc loc);
Val layer_dropout(Sema *S, Val x, double p, Loc loc);
Val layer_flatten(Sema *S, Val x, Loc loc);
Val layer_softmax(Sema *S, Val x, Loc loc);         /* softmax over the last dimension */
Layer *layer_new(LayerKind kind, const char *prefix, const char *what, Loc loc);   /* no parameters yet */
/* a Linear(in, out, bias) and a LayerNorm(f, eps, bias) made for a module of PyTorch's (transformer.c) */
Layer *layer_new_linear(Sema *S, const char *prefix, const char *what, int64_t in, int64_t out, int bias, Loc loc);
Layer *layer_new_norm(Sema *S, const char *prefix, const char *what, int64_t f, double eps, int bias, Loc loc);
Val layer_view(Sema *S, Val x, Shape s, Loc loc);  /* x as shape s, a view keeping its layout */
/* A size in a shape: an integer (-1 gives -2, inferred), or x.size(d) (the
 * batch's: DIM_N); 0 after reporting */
int layer_size(Sema *S, const Expr *e, int64_t *d);
int layer_drop_p(const Expr *e, double *p);
/* The activation functions (F.relu, F.leaky_relu, ...): index of name or
 * -1; the name of index i (NULL past the end); a call's
 * arguments bound (input: the tensor argument); the activation applied. */
int layer_act_fn(const char *name);
const char *layer_act_fn_name(int i);     /* "" for Identity (no function) */
const char *layer_act_fn_of(const char *layer);   /* LeakyReLU -> leaky_relu, or NULL */
int layer_act_call(const Expr *e, int k, const Expr **input, ActArgs *out);
Val layer_act(Sema *S, ActArgs p, Val x, Loc loc);

/* The layers and activations index a value's rows as its batch: 1 when
 * x's batch is its first dimension (or x is poisoned), else reported. */
int layer_batch_first(Val x, const char *what, Loc loc);
/* 1 when x is a float tensor (or poisoned), else reported */
int layer_float(const Sema *S, Val x, const char *what, Loc loc);
/* ---- tensor_fns.c: math and matrix products over any rank (tfn_) -------- */
int tfn_handles(const char *name);          /* exp, log, pow, clamp, maximum, matmul, einsum, ... */
const char *tfn_list(void);                 /* the supported ones, sorted, one line */
Val tfn_call(Sema *S, const Expr *e);
Val tfn_matmul(Sema *S, Val a, Val b, const char *fn, Loc loc);     /* a @ b */
Val tfn_pow(Sema *S, Val x, const Expr *exponent, const char *fn, Loc loc);    /* x ** c */
Val tfn_unary(Sema *S, Op op, Val x, double lo, double hi, Loc loc);   /* a one-operand tensor op, ten.lo/hi set */

/* ---- loss_fns.c: PyTorch's loss functions as values, written out in the
 * tensor ops (lfn_) --------------------------------------------------------- */
int lfn_handles(const char *name);          /* cross_entropy, mse_loss, binary_cross_entropy, ... */
const char *lfn_list(void);                 /* the supported ones, sorted, one line */
Val lfn_call(Sema *S, const Expr *e);
/* whether a loss block's statements give y (or what is made of it) to a
 * class loss as its target: then y is class indices */
int lfn_class_target(Stmt *const *body, int n, const char *y);
/* the targets as a tuple: how many elements the block unpacks (cls, reg = y;
 * their names in *names) or indexes (y[1]), 0 where y is one tensor */
int lfn_target_tuple(Stmt *const *body, int n, const char *y, const char *const **names);
/* whether element k of that tuple (named name, or NULL: y[k]) is class indices */
int lfn_class_column(Stmt *const *body, int n, const char *y, int k, const char *name);

/* ---- loss_block.c: the train block's loss block (lblk_) ----------------- */
/* runs S->lossb after forward returned out: sets the graph's loss (and the
 * targets' tuple, the metric), or reports */
void lblk_run(Sema *S, Val out, int target_input);
Val lblk_model_tensor(Sema *S, const Expr *e);  /* model.fc1.weight: a parameter or buffer by its name */

/* ---- transformer.c: nn.MultiheadAttention, nn.TransformerEncoderLayer,
 * nn.TransformerEncoder (xf_) -------------------------------------------- */
Layer *xf_make(Sema *S, const Expr *e, LayerKind kind, const char *prefix, const char *what);
Val xf_apply(Sema *S, const Layer *l, Val x, Loc loc);     /* called with the input alone */
/* e calls layer l with its arguments: out[0..n) its results (n: what the
 * caller takes: 1, or 2 for MultiheadAttention's (output, weights); want[1]
 * 0: the weights are not used); 0 after reporting */
int xf_call(Sema *S, const Layer *l, const Expr *e, Val *out, int n, const int *want);

/* ---- recurrent.c: nn.LSTM, nn.GRU, nn.RNN (rnn_) ---------------------- */
Layer *rnn_make(Sema *S, const Expr *e, const char *prefix, const char *what);
/* e calls recurrent layer l: out[0] its output, out[1] h_n, out[2] the
 * LSTM's c_n, each built only where want[k]; 0 after reporting */
int rnn_call(Sema *S, const Layer *l, const Expr *e, Val out[3], const int want[3]);
/* which of those each name of st takes (-1: none, `_`); 0 after reporting
 * a shape of names that is not the layer's tuple's */
int rnn_unpack(const Layer *l, const Stmt *st, int *which);

/* ---- attention.c: scaled dot-product attention (attn_) ----------------- */
typedef struct AttnArgs {
    Val q, k, v, mask;      /* mask: when mask_kind */
    int mask_kind;          /* ATTN_MASK_BOOL, ATTN_MASK_ADD, 0 none */
    int causal;
    double scale, dropout;  /* dropout on the probabilities, in training */
} AttnArgs;
Val attn_apply(Sema *S, const AttnArgs *a, Loc loc);   /* fused (rule attention) or written out */
Val attn_sdpa(Sema *S, const Expr *e);                 /* F.scaled_dot_product_attention(...) */

/* ---- params.c: nn.Parameter, nn.init statements, weight tying (prm_) --- */
int prm_is_parameter(const Expr *e);
int prm_is_init(const Expr *e);
int prm_is_tie(const LayerDecl *d);
Val prm_parameter(Sema *S, const LayerDecl *d);     /* its PARAM node, the tensor forward reads */
void prm_init(Sema *S, const Expr *e);
/* layer_w: the layers' parameter ids (Layer.w, .b), repointed where they were the tied one */
void prm_tie(Sema *S, const LayerDecl *d, int *const *layer_w, int nw);

/* ---- embedding.c: nn.Embedding (emb_) ---------------------------------- */
Layer *emb_make(Sema *S, const Expr *e, const char *prefix, const char *what);
Val emb_apply(Sema *S, const Layer *l, Val idx, Loc loc);

/* ---- upsample.c: nn.Upsample, F.interpolate (ups_) -------------------- */
/* Upsample layer l applied to x [N, C, H, W]: nearest (integer scales) or
 * bilinear; Sema.upsample, which the layers call */
Val ups_apply(Sema *S, const Layer *l, Val x, Loc loc);

/* ---- tensor_ints.c: integer and boolean tensors (tint_) ---------------- */
int tint_handles(const char *name);         /* where, masked_fill, arange, argmax, gather, ones, eq, float, max, ... */
const char *tint_list(void);                /* the supported ones, sorted, one line */
Val tint_call(Sema *S, const Expr *e);
Val tint_compare(Sema *S, const Expr *e);   /* a > b, x == 0, ... (E_CMP) */
Val tint_logic(Sema *S, const Expr *e);     /* a & b, a | b, ~a of booleans */
int tint_is_pair(const Expr *e);            /* max / min with a dim: (values, indices) */
int tint_pair(Sema *S, const Expr *e, Val out[2]);     /* its two tensors; 0 after reporting */
Val tint_index(Sema *S, Val x, int d, const Expr *ie, Loc loc);    /* x[:, idx]: idx a 1-d i64 tensor */
int tint_is_constant(const Expr *e);        /* a model member that is a tensor (a buffer), not a layer */

/* ---- methods.c: tensor functions and methods of any rank (meth_) -------- */
int meth_handles(const char *name);         /* sum, mean, permute, chunk, ... (and those refused with a reason) */
const char *meth_list(void);                /* the supported ones, sorted, one line */
Val meth_call(Sema *S, const Expr *e);
/* a, b = torch.chunk(x, 2, 1): the n tensors of e into out; 0 after reporting */
int meth_unpack(Sema *S, const Expr *e, Val *out, int n);
Val meth_index(Sema *S, const Expr *e);     /* x[:, -1], x[..., :k], x[:, None] */
/* op (T_SUM, T_MEAN) over every dimension of x, the batch's too: a 0-d tensor */
Val meth_reduce_all(Sema *S, Op op, Val x, Loc loc);
/* a op b broadcast (op: a BC_ op), sym the operator for messages */
Val meth_broadcast(Sema *S, Op op, Val a, Val b, const char *sym, Loc loc);
/* t[0..n) joined along dimension d (not the batch's); where[k]: t[k]'s expression */
Val meth_cat(Sema *S, const Expr *e, const Val *t, int n, int d, const Expr *const *where);
/* ---- forward.c --------------------------------------------------------- */
/* What the train block says about building a model, read before it is
 * checked (front.c) */
typedef struct FwdCfg {
    const File *file;       /* the blocks a model may make */
    int sync_bn;            /* sync_batchnorm: each BatchNorm2d syncs */
    int autoenc;            /* the data's target = input */
    int elementwise;        /* a loss of each output (mse_loss, ...), not of classes */
    const TrainItem *loss_block;    /* loss(out, y) { ... }, or NULL */
    const Expr *metric;     /* metric accuracy(...) | mse(...), or NULL */
    const char *model;      /* the model the train block names: the loss block's */
} FwdCfg;

/* Checks one model, building its graph in g: IMAGES, LABELS, its
 * parameters in declaration order, then forward. Returns the logits
 * [N, C] or [N, T, C]; outputs [N, ...] for a loss of each output; for
 * an autoencoder (the data's target = input), the output of any shape
 * with the sample's elements, as [N, elements]. */
Val fwd_model(Graph *g, const Model *m, Shape *in, const FwdCfg *c);
int fwd_output_ok(const Shape *s, int elementwise);     /* a shape forward may return */
/* a block, made only inside another model: a constructor list, or an
 * untyped forward input */
int fwd_is_block(const Model *m);

/* ---- train_block.c ----------------------------------------------------- */
/* The train block: returns the index of its model, or -1. */
int train_check(const File *f, const Train *tr, TrainCfg *t);

/* ---- data_cfg.c: the train block's `data` ------------------------------- */
void data_cfg_default(DataCfg *d);           /* idx("data/mnist"), MNIST's normalization */
void data_cfg_check(DataCfg *d, const Expr *e);

#endif
