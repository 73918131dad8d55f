/* layers.c: the layer table. Each layer type's constructor checks its
 * arguments and creates its parameters (PyTorch's state_dict names, in
 * the order nn.Module registers them, so a checkpoint loads into the
 * equivalent PyTorch module); layer_apply lowers a layer applied to a
 * value to graph nodes (BatchNorm2d's statistics over all ranks under
 * SyncBatchNorm included). */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "sema.h"
#include "cddprt.h"         /* RT_INIT_*: how the runtime initializes a parameter */

/* ---- layers ------------------------------------------------------------ */

/* act: an activation layer's elementwise op (LK_ACT), applied as is; 0 (images,
 * never an activation) for the others, and for Identity, which adds no node.
 * one_d: the 1-d family (Conv1d, the 1-d pools), the 2-d layers over
 * [N, C, 1, L] with [N, C, L] viewed so. */
static const struct {
    const char *name;
    LayerKind kind;
    Op act;
    int one_d;
} layer_types[] = {
    {"Linear", LK_LINEAR, 0, 0},           {"ReLU", LK_ACT, OP_RELU, 0},
    {"Tanh", LK_ACT, OP_TANH, 0},          {"Sigmoid", LK_ACT, OP_SIGMOID, 0},
    {"GELU", LK_ACT, OP_GELU, 0},          {"SiLU", LK_ACT, OP_SILU, 0},
    {"LeakyReLU", LK_ACT, OP_LEAKY_RELU, 0}, {"ELU", LK_ACT, OP_ELU, 0},
    {"Softplus", LK_ACT, OP_SOFTPLUS, 0},  {"Hardtanh", LK_ACT, OP_HARDTANH, 0},
    {"Identity", LK_ACT, 0, 0},            {"Flatten", LK_FLATTEN, 0, 0},
    {"Sequential", LK_SEQUENTIAL, 0, 0},   {"Conv2d", LK_CONV2D, 0, 0},
    {"BatchNorm2d", LK_BATCHNORM2D, 0, 0}, {"MaxPool2d", LK_MAXPOOL2D, 0, 0},
    {"AvgPool2d", LK_AVGPOOL2D, 0, 0},     {"Dropout", LK_DROPOUT, 0, 0},
    {"BatchNorm1d", LK_BATCHNORM1D, 0, 0}, {"LayerNorm", LK_LAYERNORM, 0, 0},
    {"AdaptiveAvgPool2d", LK_ADAPTIVEAVGPOOL2D, 0, 0},
    {"Softmax", LK_SOFTMAX, OP_SOFTMAX, 0}, {"LogSoftmax", LK_SOFTMAX, OP_LOG_SOFTMAX, 0},
    {"Conv1d", LK_CONV2D, 0, 1},        {"MaxPool1d", LK_MAXPOOL2D, 0, 1},
    {"AvgPool1d", LK_AVGPOOL2D, 0, 1},  {"AdaptiveAvgPool1d", LK_ADAPTIVEAVGPOOL2D, 0, 1},
    {"ConvTranspose2d", LK_CONVT2D, 0, 0}, {"Upsample", LK_UPSAMPLE, 0, 0},
    {"Embedding", LK_EMBEDDING, 0, 0},     {"ModuleList", LK_LIST, 0, 0},
    {"ModuleDict", LK_DICT, 0, 0},         {"MultiheadAttention", LK_MHA, 0, 0},
    {"TransformerEncoderLayer", LK_ENC_LAYER, 0, 0}, {"TransformerEncoder", LK_ENCODER, 0, 0},
    {"LSTM", LK_RNN, 0, 0},                {"GRU", LK_RNN, 0, 0},
    {"RNN", LK_RNN, 0, 0},
};
enum { NLAYER_TYPES = sizeof layer_types / sizeof layer_types[0] };

int layer_type(const char *name)
{
    for (int i = 0; i < NLAYER_TYPES; i++)
        if (strcmp(layer_types[i].name, name) == 0)
            return i;
    return -1;
}

/* PyTorch modules this compiler does not have: named as such rather than
 * answered with a near name of another layer (SELU is not ELU). */
static const char *const torch_modules[] = {
    "AdaptiveMaxPool2d", "BatchNorm3d", "Bilinear", "CELU", "Conv3d",
    "Dropout2d", "GLU", "GroupNorm", "Hardshrink", "Hardsigmoid", "Hardswish", "InstanceNorm2d",
    "LogSigmoid", "Mish", "PReLU", "RReLU", "ReLU6", "SELU",
    "Softmin", "Softshrink", "Softsign", "Tanhshrink", "Threshold", "Transformer", "Unflatten",
    "ZeroPad2d",
};

int layer_torch_module(const char *name)
{
    for (size_t i = 0; i < sizeof torch_modules / sizeof *torch_modules; i++)
        if (strcmp(torch_modules[i], name) == 0)
            return 1;
    return 0;
}

/* The supported layer types, sorted, for "supported layers: ..." */
const char *layer_list(void)
{
    const char *names[NLAYER_TYPES];
    int n = 0;
    for (int i = 0; i < NLAYER_TYPES; i++)
        names[n++] = layer_types[i].name;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcasecmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    const char *list = "";
    for (int i = 0; i < n; i++)
        list = util_fmt("%s%s%s", list, i ? ", " : "", names[i]);
    return list;
}

static const char *param_name(const char *prefix, const char *leaf)
{
    return *prefix ? util_fmt("%s.%s", prefix, leaf) : leaf;
}

Layer *layer_new(LayerKind kind, const char *prefix, const char *what, Loc loc)
{
    Layer *l = util_alloc(sizeof *l);
    l->kind = kind;
    l->name = prefix;
    l->what = what;
    l->loc = loc;
    l->w = l->b = -1;
    return l;
}

Layer *layer_make(Sema *S, const Expr *e, const char *prefix, const char *what);

Layer *layer_new_linear(Sema *S, const char *prefix, const char *what, int64_t in, int64_t out, int bias, Loc loc)
{
    Layer *l = layer_new(LK_LINEAR, prefix, what, loc);
    l->in = in;
    l->out = out;
    l->w = ir_param(S->g, param_name(prefix, "weight"), shape2(out, in), RT_INIT_KAIMING_UNIFORM, in, loc);
    if (bias)
        l->b = ir_param(S->g, param_name(prefix, "bias"), shape1(out), RT_INIT_BIAS_UNIFORM, in, loc);
    return l;
}

Layer *layer_new_norm(Sema *S, const char *prefix, const char *what, int64_t f, double eps, int bias, Loc loc)
{
    Layer *l = layer_new(LK_LAYERNORM, prefix, what, loc);
    l->in = f;
    l->ns = shape1(f);
    l->eps = eps;
    l->w = ir_param(S->g, param_name(prefix, "weight"), l->ns, RT_INIT_ONE, 0, loc);
    if (bias)
        l->b = ir_param(S->g, param_name(prefix, "bias"), l->ns, RT_INIT_ZERO, 0, loc);
    return l;
}

/* Linear(in_features, out_features, bias = true) */
static Layer *make_linear(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"in_features", "out_features", "bias"};
    const Sig sig = {"Linear", names, 3, 3, 2};
    Expr *a[3];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t in = 0, out = 0;
    int bias = 1, ok = 1;
    ok &= arg_int(a[0], "in_features", 1, MAX_DIM, &in);
    ok &= arg_int(a[1], "out_features", 1, MAX_DIM, &out);
    if (a[2])
        ok &= arg_bool(a[2], "bias", &bias);
    if (!ok)
        return NULL;
    if (in * out > MAX_PARAM_ELEMS) {
        diag_error(e->loc, "Linear(%lld, %lld) has too many weights (the limit is %lld)", (long long)in,
                   (long long)out, (long long)MAX_PARAM_ELEMS);
        return NULL;
    }
    return layer_new_linear(S, prefix, what, in, out, bias, e->loc);
}

/* The activations' parameters as PyTorch names them, with its defaults;
 * fn is the functional form (F.leaky_relu), NULL for Identity. */
static const struct {
    const char *layer, *fn;
    const char *names[3];
    int n;
    double def[2];
} act_specs[] = {
    {"ReLU", "relu", {"inplace"}, 1, {0, 0}},
    {"Tanh", "tanh", {NULL}, 0, {0, 0}},
    {"Sigmoid", "sigmoid", {NULL}, 0, {0, 0}},
    {"GELU", "gelu", {"approximate"}, 1, {0, 0}},
    {"SiLU", "silu", {"inplace"}, 1, {0, 0}},
    {"LeakyReLU", "leaky_relu", {"negative_slope", "inplace"}, 2, {0.01, 0}},
    {"ELU", "elu", {"alpha", "inplace"}, 2, {1.0, 0}},
    {"Softplus", "softplus", {"beta", "threshold"}, 2, {1.0, 20.0}},
    {"Hardtanh", "hardtanh", {"min_val", "max_val", "inplace"}, 3, {-1.0, 1.0}},
    {"Identity", NULL, {NULL}, 0, {0, 0}},
};
enum { NACT = sizeof act_specs / sizeof act_specs[0] };

int layer_act_fn(const char *name)
{
    for (int i = 0; i < NACT; i++)
        if (act_specs[i].fn && strcmp(act_specs[i].fn, name) == 0)
            return i;
    return -1;
}

const char *layer_act_fn_name(int i) { return i >= NACT ? NULL : act_specs[i].fn ? act_specs[i].fn : ""; }

const char *layer_act_fn_of(const char *layer)
{
    for (int i = 0; i < NACT; i++)
        if (strcmp(act_specs[i].layer, layer) == 0)
            return act_specs[i].fn;
    return NULL;
}

/* Binds an activation's arguments: the layer's (ReLU(inplace = False),
 * LeakyReLU(0.2)) or, with input, the function's (leaky_relu(x, 0.2)).
 * in-place-ness means nothing in a graph. Returns 0 after reporting. */
static int act_args(const Expr *e, int k, const Expr **input, ActArgs *out)
{
    const char *names[4] = {"input"};
    int off = input != NULL, n = act_specs[k].n;
    for (int i = 0; i < n; i++)
        names[off + i] = act_specs[k].names[i];
    const Sig sig = {e->written ? e->written : e->s, names, n + off, n + off, off};
    Expr *a[4] = {NULL};
    if (!arg_bind(e, &sig, a))
        return 0;
    if (input)
        *input = a[0];
    out->op = layer_types[layer_type(act_specs[k].layer)].act;
    out->a = act_specs[k].def[0];
    out->b = act_specs[k].def[1];
    int ok = 1, flag;
    for (int i = 0; i < n; i++) {
        const Expr *v = a[off + i];
        const char *nm = act_specs[k].names[i];
        if (!v)
            continue;
        if (strcmp(nm, "inplace") == 0) {
            ok &= arg_bool(v, nm, &flag);
        } else if (strcmp(nm, "approximate") == 0) {
            /* GELU(approximate = 'tanh'): another op, not a parameter */
            if (v->kind == E_STR && strcmp(v->s, "tanh") == 0) {
                out->op = OP_GELU_TANH;
            } else if (!(v->kind == E_STR && strcmp(v->s, "none") == 0)) {
                diag_error(v->loc, "approximate must be 'none' or 'tanh', got %s", arg_show(v));
                ok = 0;
            }
        } else {
            ok &= arg_num(v, nm, i == 0 ? &out->a : &out->b);
        }
    }
    if (ok && out->op == OP_HARDTANH && !(out->b > out->a)) {
        diag_error(e->loc, "max_val must be greater than min_val, got min_val %g, max_val %g", out->a, out->b);
        ok = 0;
    }
    if (ok && out->op == OP_SOFTPLUS && out->a == 0) {
        diag_error(e->loc, "beta must not be 0");
        ok = 0;
    }
    return ok;
}

int layer_act_call(const Expr *e, int k, const Expr **input, ActArgs *out) { return act_args(e, k, input, out); }

static Layer *make_act(const Expr *e, const char *prefix, const char *what)
{
    int k = 0;
    while (strcmp(act_specs[k].layer, e->s) != 0)
        k++;
    ActArgs p;
    if (!act_args(e, k, NULL, &p))
        return NULL;
    Layer *l = layer_new(LK_ACT, prefix, what, e->loc);
    l->act = p;
    return l;
}

/* An activation applied to x: no node for Identity; the parameters on
 * the node (its gradient node copies them). */
int layer_batch_first(Val x, const char *what, Loc loc)
{
    const int b = ten_batch_dim(&x.s);
    if (x.id < 0 || b <= 0)
        return 1;
    diag_error(loc, "%s of %s, whose batch is dimension %d, is not supported yet: the layers and activations "
               "need the batch first (permute it back)", what, ir_shape_str(&x.s), b);
    return 0;
}

Val layer_act(Sema *S, ActArgs p, Val x, Loc loc)
{
    if (x.id < 0 || !p.op)
        return x;
    if (!layer_batch_first(x, op_text[p.op], loc) || !layer_float(S, x, op_text[p.op], loc))
        return POISON;
    const Node *v = S->g->n[x.id];
    if (v->op == OP_RESHAPE && ten_batch_dim(&S->g->n[v->in[0]]->shape) == 0) {
        /* elementwise on a view of rows ([N, T, F] of a Linear's [N*T, F]):
         * on the rows, so it joins their kernel (rule epilogue), then viewed */
        Val y = layer_act(S, p, (Val){v->in[0], S->g->n[v->in[0]]->shape}, loc);
        return y.id < 0 ? y : layer_node(S, OP_RESHAPE, y.id, -1, x.s, loc);
    }
    Val y = layer_node(S, p.op, x.id, -1, x.s, loc);
    if (y.id >= 0) {
        S->g->n[y.id]->act.a = p.a;
        S->g->n[y.id]->act.b = p.b;
    }
    return y;
}

/* Flatten(start_dim = 1, end_dim = -1): only the default, as flatten(x). */
static Layer *make_flatten(const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"start_dim", "end_dim"};
    const Sig sig = {"Flatten", names, 2, 2, 0};
    Expr *a[2];
    int64_t start = 1, end = -1;
    if (!arg_bind(e, &sig, a))
        return NULL;
    if ((a[0] && !arg_int(a[0], "start_dim", -MAX_RANK, MAX_RANK, &start))
        || (a[1] && !arg_int(a[1], "end_dim", -MAX_RANK, MAX_RANK, &end)))
        return NULL;
    if (start != 1 || end != -1) {
        diag_error(e->loc, "Flatten supports only start_dim = 1, end_dim = -1 (flattening all but the batch)");
        return NULL;
    }
    return layer_new(LK_FLATTEN, prefix, what, e->loc);
}

/* Dropout's p: a number in [0, 1) (1 would scale by 1/0). */
int layer_drop_p(const Expr *e, double *p)
{
    if (!arg_num(e, "p", p))
        return 0;
    if (!(*p >= 0 && *p < 1)) {
        diag_error(e->loc, "dropout probability p must be in [0, 1), got %s", arg_show(e));
        return 0;
    }
    return 1;
}

/* Dropout(p = 0.5, inplace = false): no parameters, so the state_dict
 * names of the layers around it are unchanged (a Sequential still counts
 * it, as PyTorch does). */
static Layer *make_dropout(const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"p", "inplace"};
    const Sig sig = {"Dropout", names, 2, 2, 0};
    Expr *a[2];
    double p = 0.5;
    int inplace;
    if (!arg_bind(e, &sig, a) || (a[0] && !layer_drop_p(a[0], &p)) || (a[1] && !arg_bool(a[1], "inplace", &inplace)))
        return NULL;
    Layer *l = layer_new(LK_DROPOUT, prefix, what, e->loc);
    l->p = p;
    return l;
}

/* An int or a pair (h, w), as PyTorch's _pair: kernel_size = 5 or (5, 3). */
static int get_pair(const Expr *e, const char *what, int64_t lo, int out[2])
{
    int64_t v[2];
    if (e->kind == E_TUPLE) {
        if (e->nargs != 2) {
            diag_error(e->loc, "%s must be an integer or a pair (h, w), got a tuple of %d", what, e->nargs);
            return 0;
        }
        if (!arg_int(e->args[0]->val, what, lo, MAX_DIM, &v[0]) || !arg_int(e->args[1]->val, what, lo, MAX_DIM, &v[1]))
            return 0;
    } else {
        if (!arg_int(e, what, lo, MAX_DIM, &v[0]))
            return 0;
        v[1] = v[0];
    }
    out[0] = (int)v[0];
    out[1] = (int)v[1];
    return 1;
}

/* A window's size as get_pair, or for the 1-d family an integer or (l,)
 * along the length, h its extent over the height of [N, C, 1, L] (1 for
 * a kernel, stride or dilation, 0 for padding) */
static int get_dims(const Expr *e, const char *what, int64_t lo, int one_d, int h, int out[2])
{
    if (!one_d)
        return get_pair(e, what, lo, out);
    const Expr *x = e->kind == E_TUPLE && e->nargs == 1 ? e->args[0]->val : e;
    int64_t v;
    if (x->kind == E_TUPLE) {
        diag_error(e->loc, "%s must be an integer or (l,), got a tuple of %d", what, x->nargs);
        return 0;
    }
    if (!arg_int(x, what, lo, MAX_DIM, &v))
        return 0;
    out[0] = h, out[1] = (int)v;
    return 1;
}

/* groups divides both channel counts (a convolution's, a transposed one's) */
static int groups_divide(const Expr *at, int64_t in, int64_t out, int64_t groups)
{
    if (in % groups == 0 && out % groups == 0)
        return 1;
    diag_error(at->loc, "groups (%lld) must divide in_channels (%lld) and out_channels (%lld)", (long long)groups,
               (long long)in, (long long)out);
    return 0;
}

/* Conv2d(in_channels, out_channels, kernel_size, stride = 1, padding = 0,
 *        dilation = 1, groups = 1, bias = true) */
static Layer *make_conv2d(Sema *S, const Expr *e, const char *prefix, const char *what, int one_d)
{
    static const char *const names[] = {"in_channels", "out_channels", "kernel_size", "stride", "padding",
                                        "dilation", "groups", "bias"};
    const char *type = one_d ? "Conv1d" : "Conv2d";
    const Sig sig = {type, names, 8, 8, 3};
    Expr *a[8];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t in = 0, out = 0, groups = 1;
    int k[2] = {1, 1}, st[2] = {1, 1}, pad[2] = {0, 0}, dil[2] = {1, 1}, bias = 1, ok = 1;
    ok &= arg_int(a[0], "in_channels", 1, MAX_DIM, &in);
    ok &= arg_int(a[1], "out_channels", 1, MAX_DIM, &out);
    ok &= get_dims(a[2], "kernel_size", 1, one_d, 1, k);
    if (a[3])
        ok &= get_dims(a[3], "stride", 1, one_d, 1, st);
    if (a[4])
        ok &= get_dims(a[4], "padding", 0, one_d, 0, pad);
    if (a[5])
        ok &= get_dims(a[5], "dilation", 1, one_d, 1, dil);
    if (a[6])
        ok &= arg_int(a[6], "groups", 1, MAX_DIM, &groups);
    if (a[7])
        ok &= arg_bool(a[7], "bias", &bias);
    if (!ok)
        return NULL;
    if (!groups_divide(a[6], in, out, groups))
        return NULL;
    /* in double: in * k * k * out reaches 2^96 before the check */
    if ((double)(in / groups) * k[0] * k[1] * (double)out > MAX_PARAM_ELEMS) {
        diag_error(e->loc, "%s(%lld, %lld) has too many weights (the limit is %lld)", type, (long long)in,
                   (long long)out, (long long)MAX_PARAM_ELEMS);
        return NULL;
    }
    int64_t fan_in = in / groups * k[0] * k[1];
    Layer *l = layer_new(LK_CONV2D, prefix, what, e->loc);
    l->in = in;
    l->out = out;
    l->win = (Window){k[0], k[1], st[0], st[1], pad[0], pad[1], dil[0], dil[1], (int)groups};
    l->one_d = one_d;
    /* kaiming_uniform(a = sqrt(5)) and the bias both give U(+-1/sqrt(fan_in));
     * Conv1d's weight is [out, in / groups, k] in the state_dict */
    l->w = ir_param(S->g, param_name(prefix, "weight"), one_d ? (Shape){3, {out, in / groups, k[1]}}
                    : (Shape){4, {out, in / groups, k[0], k[1]}}, RT_INIT_KAIMING_UNIFORM, fan_in, e->loc);
    if (bias)
        l->b = ir_param(S->g, param_name(prefix, "bias"), shape1(out), RT_INIT_BIAS_UNIFORM, fan_in, e->loc);
    return l;
}

/* The layers over samples (batch norm, convolutions, pools) take the batch
 * unmerged: rows of N*T (a view merging the batch) would be their samples */
static int plain_batch(Val x, const char *what, Loc loc)
{
    if (x.s.d[0] == DIM_N)
        return 1;
    diag_error(loc, "%s of %s, the batch merged with its rows, is not supported: view it back to [N, ...] first",
               what, ir_shape_str(&x.s));
    return 0;
}

/* ConvTranspose2d(in_channels, out_channels, kernel_size, stride = 1,
 * padding = 0, output_padding = 0, groups = 1, bias = true, dilation = 1):
 * the gradient of a Conv2d(out, in) with respect to its input (conv2d_dx),
 * its weight [in, out / groups, kh, kw] as PyTorch's, whose default init
 * takes fan_in from dimension 1: (out / groups) kh kw. */
static Layer *make_convt2d(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    static const char *const names[] = {"in_channels", "out_channels", "kernel_size", "stride", "padding",
                                        "output_padding", "groups", "bias", "dilation"};
    const Sig sig = {"ConvTranspose2d", names, 9, 9, 3};
    Expr *a[9];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t in = 0, out = 0, groups = 1;
    int k[2], st[2] = {1, 1}, pad[2] = {0, 0}, op[2] = {0, 0}, dil[2] = {1, 1}, bias = 1, ok = 1;
    ok &= arg_int(a[0], "in_channels", 1, MAX_DIM, &in);
    ok &= arg_int(a[1], "out_channels", 1, MAX_DIM, &out);
    ok &= get_pair(a[2], "kernel_size", 1, k);
    if (a[3])
        ok &= get_pair(a[3], "stride", 1, st);
    if (a[4])
        ok &= get_pair(a[4], "padding", 0, pad);
    if (a[5])
        ok &= get_pair(a[5], "output_padding", 0, op);
    if (a[6])
        ok &= arg_int(a[6], "groups", 1, MAX_DIM, &groups);
    if (a[7])
        ok &= arg_bool(a[7], "bias", &bias);
    if (a[8])
        ok &= get_pair(a[8], "dilation", 1, dil);
    if (!ok)
        return NULL;
    if (!groups_divide(a[6], in, out, groups))
        return NULL;
    if (op[0] >= st[0] || op[1] >= st[1]) {
        diag_error(a[5]->loc, "output_padding (%d, %d) must be smaller than the stride (%d, %d)%s", op[0], op[1], st[0],
                   st[1], dil[0] > 1 || dil[1] > 1 ? " (larger up to the dilation, as PyTorch allows, is not "
                   "supported)" : "");
        return NULL;
    }
    if ((double)in * (double)(out / groups) * k[0] * k[1] > MAX_PARAM_ELEMS) {
        diag_error(e->loc, "ConvTranspose2d(%lld, %lld) has too many weights (the limit is %lld)", (long long)in,
                   (long long)out, (long long)MAX_PARAM_ELEMS);
        return NULL;
    }
    const int64_t fan_in = out / groups * k[0] * k[1];
    Layer *l = layer_new(LK_CONVT2D, prefix, what, e->loc);
    l->in = in;
    l->out = out;
    l->win = (Window){k[0], k[1], st[0], st[1], pad[0], pad[1], dil[0], dil[1], (int)groups};
    l->opad[0] = op[0], l->opad[1] = op[1];
    l->w = ir_param(S->g, param_name(prefix, "weight"), (Shape){4, {in, out / groups, k[0], k[1]}},
                    RT_INIT_KAIMING_UNIFORM, fan_in, e->loc);
    if (bias)
        l->b = ir_param(S->g, param_name(prefix, "bias"), shape1(out), RT_INIT_BIAS_UNIFORM, fan_in, e->loc);
    return l;
}

/* The transposed convolution of x [N, in, H, W]: conv2d_dx, its output
 * (H - 1) s - 2 p + d (k - 1) + output_padding + 1 high (and wide) */
static Val apply_convt2d(Sema *S, const Layer *l, Val x, Loc loc)
{
    if (!plain_batch(x, l->what, loc))
        return POISON;
    if (x.s.rank != 4 || x.s.d[1] != l->in) {
        diag_error(loc, "%s expects input [N, %lld, H, W], got %s", l->what, (long long)l->in, ir_shape_str(&x.s));
        return POISON;
    }
    const Window *w = &l->win;
    const int64_t oh = (x.s.d[2] - 1) * w->sh - 2 * w->ph + w->dh * (w->kh - 1) + l->opad[0] + 1;
    const int64_t ow = (x.s.d[3] - 1) * w->sw - 2 * w->pw + w->dw * (w->kw - 1) + l->opad[1] + 1;
    const Shape ys = {4, {x.s.d[0], l->out, oh, ow}};
    if (oh <= 0 || ow <= 0 || ir_row_elems(&ys) > MAX_DIM) {
        diag_error(loc, "%s of %s gives %s: %s", l->what, ir_shape_str(&x.s), ir_shape_str(&ys),
                   oh <= 0 || ow <= 0 ? "empty" : util_fmt("too large (the limit is %d elements per sample)", MAX_DIM));
        return POISON;
    }
    Val y = layer_node(S, OP_CONV2D_DX, x.id, l->w, ys, loc);
    S->g->n[y.id]->win = *w;
    return l->b >= 0 ? layer_node(S, OP_BIAS_ADD, y.id, l->b, ys, loc) : y;
}

/* A flag this compiler supports only at PyTorch's default true
 * (BatchNorm's affine and track_running_stats): 0 after reporting. */
static int only_true(const Expr *e, const char *layer, const char *what)
{
    int v = 1;
    if (e && !arg_bool(e, what, &v))
        return 0;
    if (!v) {
        diag_error(e->loc, "%s(%s = false) is not supported (only the default, true)", layer, what);
        return 0;
    }
    return 1;
}

/* BatchNorm2d and BatchNorm1d(num_features, eps = 1e-5, momentum = 0.1,
 * affine = true, track_running_stats = true): affine, with running
 * statistics, as PyTorch's default (the other settings are refused). */
static Layer *make_batchnorm(Sema *S, const Expr *e, LayerKind kind, const char *prefix, const char *what)
{
    static const char *const names[] = {"num_features", "eps", "momentum", "affine", "track_running_stats"};
    const char *type = kind == LK_BATCHNORM1D ? "BatchNorm1d" : "BatchNorm2d";
    const Sig sig = {type, names, 5, 5, 1};
    Expr *a[5];
    if (!arg_bind(e, &sig, a))
        return NULL;
    int64_t c = 0;
    double eps = 1e-5, momentum = 0.1;
    int ok = arg_int(a[0], "num_features", 1, MAX_DIM, &c);
    ok &= only_true(a[3], type, "affine");
    ok &= only_true(a[4], type, "track_running_stats");
    if (a[1] && !arg_num(a[1], "eps", &eps)) {
        ok = 0;
    } else if (!(eps > 0)) {
        diag_error(a[1]->loc, "eps must be positive, got %s", arg_show(a[1]));
        ok = 0;
    }
    if (a[2] && !arg_num(a[2], "momentum", &momentum)) {
        ok = 0;
    } else if (!(momentum >= 0 && momentum <= 1)) {
        diag_error(a[2]->loc, "momentum must be between 0 and 1, got %s", arg_show(a[2]));
        ok = 0;
    }
    if (!ok)
        return NULL;
    Layer *l = layer_new(kind, prefix, what, e->loc);
    l->in = c;
    l->eps = eps;
    l->momentum = momentum;
    /* state_dict order of nn.BatchNorm1d/2d: weight, bias, then the buffers */
    l->w = ir_param(S->g, param_name(prefix, "weight"), shape1(c), RT_INIT_ONE, 0, e->loc);
    l->b = ir_param(S->g, param_name(prefix, "bias"), shape1(c), RT_INIT_ZERO, 0, e->loc);
    l->rm = ir_buffer(S->g, param_name(prefix, "running_mean"), shape1(c), RT_INIT_ZERO, 0, e->loc);
    l->rv = ir_buffer(S->g, param_name(prefix, "running_var"), shape1(c), RT_INIT_ONE, 0, e->loc);
    l->nbt = ir_buffer(S->g, param_name(prefix, "num_batches_tracked"), (Shape){0}, RT_INIT_ZERO, 1, e->loc);
    return l;
}

/* Binds a layer's arguments (names[0..n)), or with input the function's
 * (F.max_pool2d(input, ...)): input first, then the same names. */
static int bind_fn(const Expr *e, const char *fn, const char *const *names, int n, int npos, int nreq,
                   const Expr **input, Expr **out)
{
    const char *all[8] = {"input"};
    int off = input != NULL;
    for (int i = 0; i < n; i++)
        all[off + i] = names[i];
    const Sig sig = {e->written ? e->written : fn, all, n + off, npos + off, nreq + off};
    Expr *a[8] = {NULL};
    if (!arg_bind(e, &sig, a))
        return 0;
    if (input)
        *input = a[0];
    for (int i = 0; i < n; i++)
        out[i] = a[off + i];
    return 1;
}

/* MaxPool2d(kernel_size, stride = kernel_size, padding = 0) and
 * AvgPool2d(kernel_size, stride = kernel_size, padding = 0); as functions,
 * F.max_pool2d(x, kernel_size, stride, padding) and F.avg_pool2d (whose
 * stride None is the kernel size too). */
static Layer *make_pool(const Expr *e, LayerKind kind, const char *prefix, const char *what, const Expr **input,
                        int one_d)
{
    static const char *const names[] = {"kernel_size", "stride", "padding"};
    Expr *a[3];
    if (!bind_fn(e, kind == LK_MAXPOOL2D ? (one_d ? "MaxPool1d" : "MaxPool2d") : (one_d ? "AvgPool1d" : "AvgPool2d"),
                 names, 3, 3, 1, input, a))
        return NULL;
    if (a[1] && a[1]->kind == E_NAME && strcmp(a[1]->s, "None") == 0)
        a[1] = NULL;
    int k[2], st[2], pad[2] = {0, 0}, ok = get_dims(a[0], "kernel_size", 1, one_d, 1, k);
    if (ok) {
        st[0] = k[0];
        st[1] = k[1];
    }
    if (a[1])
        ok &= get_dims(a[1], "stride", 1, one_d, 1, st);
    if (a[2])
        ok &= get_dims(a[2], "padding", 0, one_d, 0, pad);
    if (!ok)
        return NULL;
    if (2 * pad[0] > k[0] || 2 * pad[1] > k[1]) {
        diag_error(a[2]->loc, "padding (%d, %d) must be at most half of kernel_size (%d, %d)", pad[0], pad[1], k[0],
                   k[1]);
        return NULL;
    }
    Layer *l = layer_new(kind, prefix, what, e->loc);
    l->win = (Window){k[0], k[1], st[0], st[1], pad[0], pad[1], 1, 1, 1};
    l->one_d = one_d;
    return l;
}

/* AdaptiveAvgPool2d(output_size), F.adaptive_avg_pool2d(x, output_size):
 * an int or a pair; lowered to an average pool when it divides the input
 * (output 1: global average pooling), which is known only when applied. */
static Layer *make_adaptive_pool(const Expr *e, const char *prefix, const char *what, const Expr **input, int one_d)
{
    static const char *const names[] = {"output_size"};
    Expr *a[1];
    int o[2];
    if (!bind_fn(e, one_d ? "AdaptiveAvgPool1d" : "AdaptiveAvgPool2d", names, 1, 1, 1, input, a)
        || !get_dims(a[0], "output_size", 1, one_d, 1, o))
        return NULL;
    Layer *l = layer_new(LK_ADAPTIVEAVGPOOL2D, prefix, what, e->loc);
    l->one_d = one_d;
    l->osize[0] = o[0];
    l->osize[1] = o[1];
    return l;
}

/* Upsample(size = None, scale_factor = None, mode = 'nearest',
 * align_corners = None), F.interpolate(x, size, scale_factor, mode,
 * align_corners): nearest with an integer scale, bilinear (upsample.c) */
static Layer *make_upsample(const Expr *e, const char *prefix, const char *what, const Expr **input)
{
    static const char *const names[] = {"size", "scale_factor", "mode", "align_corners", "recompute_scale_factor"};
    Expr *a[5] = {NULL};
    const char *type = input ? "interpolate" : "Upsample";
    if (!bind_fn(e, type, names, input ? 5 : 4, 2, 0, input, a))
        return NULL;
    Layer *l = layer_new(LK_UPSAMPLE, prefix, what, e->loc);
    if (!a[0] == !a[1]) {
        diag_error(e->loc, "%s takes size or scale_factor, one of them", e->written ? e->written : type);
        return NULL;
    }
    for (int k = 0; k < 2; k++) {
        const Expr *v = a[k];
        if (!v)
            continue;
        const int pair = v->kind == E_TUPLE;
        if (pair && v->nargs != 2) {
            diag_error(v->loc, "%s must be a number or a pair (h, w) here", names[k]);
            return NULL;
        }
        for (int d = 0; d < 2; d++) {
            const Expr *x = pair ? v->args[d]->val : v;
            int64_t sz;
            if (k == 0 ? !arg_int(x, "size", 1, MAX_DIM, &sz) : !arg_num(x, "scale_factor", &l->scale[d]))
                return NULL;
            if (k == 0)
                l->osize[d] = (int)sz;
            else if (!(l->scale[d] > 0)) {
                diag_error(x->loc, "scale_factor must be positive, got %g", l->scale[d]);
                return NULL;
            }
        }
    }
    if (a[2]) {
        const char *m = a[2]->kind == E_STR ? a[2]->s : "";
        if (strcmp(m, "nearest") != 0 && strcmp(m, "bilinear") != 0) {
            diag_error(a[2]->loc, "mode %s is not supported (supported: 'nearest', 'bilinear')", arg_show(a[2]));
            return NULL;
        }
        l->bilinear = m[0] == 'b';
    }
    if (a[3] && !(a[3]->kind == E_NAME && strcmp(a[3]->s, "None") == 0) && !arg_bool(a[3], "align_corners", &l->align))
        return NULL;
    if (l->align && !l->bilinear) {
        diag_error(a[3]->loc, "align_corners is for bilinear, not nearest (PyTorch refuses it too)");
        return NULL;
    }
    return l;
}


/* Softmax(dim = None), LogSoftmax(dim = None), F.softmax(x, dim),
 * F.log_softmax(x, dim): over the features of [N, F] (dim 1 or -1; None is
 * 1 there, as PyTorch's implicit choice for 2-d input). */
static Layer *make_softmax(const Expr *e, Op op, const char *prefix, const char *what, const Expr **input)
{
    static const char *const names[] = {"dim"};
    Expr *a[1];
    int64_t dim = 0;    /* 0: not given (the features of [N, F]) */
    const char *type = op == OP_SOFTMAX ? "Softmax" : "LogSoftmax";
    if (!bind_fn(e, type, names, 1, 1, 0, input, a))
        return NULL;
    if (a[0] && !(a[0]->kind == E_NAME && strcmp(a[0]->s, "None") == 0)) {
        if (!arg_int(a[0], "dim", -MAX_RANK, MAX_RANK - 1, &dim))
            return NULL;
        if (dim == 0) {
            diag_error(a[0]->loc, "%s over dim 0, the batch, is not supported: it would mix the samples",
                       e->written ? e->written : type);
            return NULL;
        }
    }
    Layer *l = layer_new(LK_SOFTMAX, prefix, what, e->loc);
    l->op = op;
    l->dim = (int)dim;
    return l;
}

/* LayerNorm(normalized_shape, eps = 1e-5, elementwise_affine = true) over
 * the last dimension of [N, F] (normalized_shape F or (F,)); weight ones
 * and bias zeros, as PyTorch. F.layer_norm(x, normalized_shape, eps = ...)
 * is the same without weight and bias. */
static Layer *make_layer_norm(Sema *S, const Expr *e, const char *prefix, const char *what, const Expr **input)
{
    static const char *const lnames[] = {"normalized_shape", "eps", "elementwise_affine", "bias"};
    static const char *const fnames[] = {"normalized_shape", "weight", "bias", "eps"};
    Expr *a[4] = {NULL};
    if (!(input ? bind_fn(e, "layer_norm", fnames, 4, 4, 1, input, a) : bind_fn(e, "LayerNorm", lnames, 4, 4, 1, NULL, a)))
        return NULL;
    const char *type = e->written ? e->written : input ? "layer_norm" : "LayerNorm";
    Expr *shape = a[0], *eps_e = input ? a[3] : a[1], *affine_e = input ? NULL : a[2];
    int64_t f = 0;
    double eps = 1e-5;
    int affine = !input, bias = !input, ok = 1;
    if (input && ((a[1] && !(a[1]->kind == E_NAME && strcmp(a[1]->s, "None") == 0))
                  || (a[2] && !(a[2]->kind == E_NAME && strcmp(a[2]->s, "None") == 0)))) {
        diag_error(e->loc, "%s with a weight or bias tensor is not supported; declare nn.LayerNorm(...) in the model",
                   type);
        ok = 0;
    }
    Shape ns = {shape->kind == E_TUPLE ? shape->nargs : 1, {0}};
    if (ns.rank > MAX_RANK - 1) {
        diag_error(shape->loc, "%s over %d dimensions: a value has at most %d after the batch", type, ns.rank,
                   MAX_RANK - 1);
        return NULL;
    }
    f = 1;
    for (int k = 0; k < ns.rank; k++) {
        ok &= arg_int(shape->kind == E_TUPLE ? shape->args[k]->val : shape, "normalized_shape", 1, MAX_DIM, &ns.d[k]);
        f *= ns.d[k];
    }
    if (ok && f > MAX_DIM) {
        diag_error(shape->loc, "%s over %s: too large (the limit is %d elements per sample)", type, ir_shape_str(&ns),
                   MAX_DIM);
        ok = 0;
    }
    if (eps_e && !arg_num(eps_e, "eps", &eps)) {
        ok = 0;
    } else if (!(eps > 0)) {
        diag_error(eps_e->loc, "eps must be positive, got %s", arg_show(eps_e));
        ok = 0;
    }
    if (affine_e)
        ok &= arg_bool(affine_e, "elementwise_affine", &affine);
    if (!input && a[3])     /* torch 2.1's LayerNorm(bias = False), as nanoGPT's */
        ok &= arg_bool(a[3], "bias", &bias);
    if (!ok)
        return NULL;
    Layer *l = layer_new(LK_LAYERNORM, prefix, what, e->loc);
    l->in = f;
    l->ns = ns;
    l->eps = eps;
    /* weight and bias have normalized_shape's shape, as in the state_dict */
    if (affine) {
        l->w = ir_param(S->g, param_name(prefix, "weight"), ns, RT_INIT_ONE, 0, e->loc);
        if (bias)
            l->b = ir_param(S->g, param_name(prefix, "bias"), ns, RT_INIT_ZERO, 0, e->loc);
    }
    return l;
}

/* The functions that are layers applied at once, and their layer kinds. */
static const struct {
    const char *fn;
    LayerKind kind;
    Op op;
} layer_fns[] = {
    {"adaptive_avg_pool2d", LK_ADAPTIVEAVGPOOL2D, 0}, {"avg_pool2d", LK_AVGPOOL2D, 0},
    {"layer_norm", LK_LAYERNORM, 0},                  {"log_softmax", LK_SOFTMAX, OP_LOG_SOFTMAX},
    {"max_pool2d", LK_MAXPOOL2D, 0},                  {"softmax", LK_SOFTMAX, OP_SOFTMAX},
    {"interpolate", LK_UPSAMPLE, 0},
};

int layer_fn(const char *name)
{
    for (size_t i = 0; i < sizeof layer_fns / sizeof *layer_fns; i++)
        if (strcmp(layer_fns[i].fn, name) == 0)
            return 1;
    return 0;
}

const char *layer_fn_name(int i)
{
    return i < (int)(sizeof layer_fns / sizeof *layer_fns) ? layer_fns[i].fn : NULL;
}

Layer *layer_make_fn(Sema *S, const Expr *e, const Expr **input)
{
    const char *what = e->written ? e->written : e->s;
    *input = NULL;
    for (size_t i = 0; i < sizeof layer_fns / sizeof *layer_fns; i++) {
        if (strcmp(layer_fns[i].fn, e->s) != 0)
            continue;
        switch (layer_fns[i].kind) {
        case LK_MAXPOOL2D: case LK_AVGPOOL2D: return make_pool(e, layer_fns[i].kind, "", what, input, 0);
        case LK_ADAPTIVEAVGPOOL2D: return make_adaptive_pool(e, "", what, input, 0);
        case LK_SOFTMAX: return make_softmax(e, layer_fns[i].op, "", what, input);
        case LK_UPSAMPLE: return make_upsample(e, "", what, input);
        default: return make_layer_norm(S, e, "", what, input);
        }
    }
    diag_ice("layer_make_fn: %s is not a layer function", e->s);
}

/* Sequential(layer, ...): children are named by index, as in PyTorch. */
static Layer *make_sequential(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    Layer *l = layer_new(LK_SEQUENTIAL, prefix, what, e->loc);
    l->kids = util_alloc(sizeof *l->kids * (size_t)(e->nargs + 1));
    int ok = 1;
    for (int i = 0; i < e->nargs; i++) {
        const Arg *a = e->args[i];
        if (a->key) {
            diag_error(a->key_loc, "Sequential takes no keyword arguments");
            ok = 0;
            continue;
        }
        const char *kp = *prefix ? util_fmt("%s.%d", prefix, i) : util_fmt("%d", i);
        const char *kw = *prefix ? kp : util_fmt("layer %d", i);
        Layer *k = layer_make(S, a->val, kp, kw);
        if (!k)
            ok = 0;
        l->kids[l->nkids++] = k;
    }
    return ok ? l : NULL;
}

/* A layer constructor: Linear(...), ReLU(), Sequential(...), ... */
/* nn.ModuleList([a, b, ...]) or ([Block() for _ in range(n)]): layers
 * named prefix.0, prefix.1, ..., iterated by forward's for loops */
static Layer *make_list(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    if (e->nargs != 1 || e->args[0]->key
        || (e->args[0]->val->kind != E_TUPLE && e->args[0]->val->kind != E_COMP)) {
        diag_error(e->loc, "ModuleList takes one list of layers: ModuleList([Block() for _ in range(n)]) or "
                   "ModuleList([a, b])");
        return NULL;
    }
    const Expr *v = e->args[0]->val;
    int64_t n = v->kind == E_TUPLE ? v->nargs : 0;
    if (v->kind == E_COMP) {
        const Expr *r = v->b;
        if (r->kind != E_CALL || strcmp(r->s, "range") != 0 || r->nargs != 1 || r->args[0]->key) {
            diag_error(r->loc, "a ModuleList's comprehension iterates range(n), got %s", arg_show(r));
            return NULL;
        }
        if (!arg_int(r->args[0]->val, "the number of layers", 0, 4096, &n))
            return NULL;
    }
    Layer *l = layer_new(LK_LIST, prefix, what, e->loc);
    l->kids = util_alloc(sizeof *l->kids * (size_t)(n + 1));
    for (int64_t k = 0; k < n; k++) {
        const Expr *item = v->kind == E_TUPLE ? v->args[k]->val : v->a;
        const char *kp = *prefix ? util_fmt("%s.%lld", prefix, (long long)k) : util_fmt("%lld", (long long)k);
        Layer *kid = layer_make(S, item, kp, util_fmt("%s[%lld]", what, (long long)k));
        if (!kid)
            return NULL;
        l->kids[l->nkids++] = kid;
    }
    return l;
}

/* nn.ModuleDict(dict(wte = ..., h = ...)): layers named prefix.wte, ...,
 * reached as self.NAME.wte(x) and iterated as self.NAME.h */
static Layer *make_dict(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    const Expr *d = e->nargs == 1 && !e->args[0]->key ? e->args[0]->val : NULL;
    if (!d || d->kind != E_CALL || strcmp(d->s, "dict") != 0) {
        diag_error(e->loc, "ModuleDict takes dict(name = layer, ...): ModuleDict(dict(wte = nn.Embedding(V, C)))");
        return NULL;
    }
    Layer *l = layer_new(LK_DICT, prefix, what, e->loc);
    l->kids = util_alloc(sizeof *l->kids * (size_t)(d->nargs + 1));
    for (int k = 0; k < d->nargs; k++) {
        const Arg *a = d->args[k];
        if (!a->key) {
            diag_error(a->val->loc, "dict's entries are named: dict(wte = nn.Embedding(V, C), ...)");
            return NULL;
        }
        for (int j = 0; j < k; j++)
            if (strcmp(d->args[j]->key, a->key) == 0) {
                diag_error(a->key_loc, "'%s' is in the dict twice", a->key);
                return NULL;
            }
        const char *kp = *prefix ? util_fmt("%s.%s", prefix, a->key) : a->key;
        Layer *kid = layer_make(S, a->val, kp, util_fmt("%s.%s", what, a->key));
        if (!kid)
            return NULL;
        l->kids[l->nkids++] = kid;
    }
    return l;
}

const Layer *layer_dict_kid(const Layer *dict, const char *key)
{
    const size_t n = strlen(dict->name);
    for (int k = 0; dict->kind == LK_DICT && k < dict->nkids; k++) {
        const char *kn = dict->kids[k]->name;
        if (strcmp(n ? kn + n + 1 : kn, key) == 0)
            return dict->kids[k];
    }
    return NULL;
}

Layer *layer_make(Sema *S, const Expr *e, const char *prefix, const char *what)
{
    if (e->kind == E_NAME && layer_type(e->s) >= 0) {
        diag_error(e->loc, "a layer is made by calling its type: %s()", e->s);
        return NULL;
    }
    if (e->kind != E_CALL) {
        diag_error(e->loc, "expected a layer such as Linear(in, out), got %s", arg_show(e));
        return NULL;
    }
    int t = layer_type(e->s);
    if (t < 0 && S->find_block && S->find_block(S, e->s))     /* a block of the file: Block(n_embd = 64) */
        return S->make_block(S, e, prefix, what);
    if (t < 0) {
        /* nn.LSTM: a PyTorch module we do not have, said plainly (no guess) */
        if ((e->written && e->written != e->s) || layer_torch_module(e->s)) {
            diag_error(e->loc, "%s is not supported (supported layers: %s)", e->written, layer_list());
            return NULL;
        }
        Near s = arg_near(e->s);
        for (int i = 0; i < NLAYER_TYPES; i++)
            arg_near_try(&s, layer_types[i].name);
        for (int i = 0; S->file && i < S->file->nmodels; i++)     /* a block of the file, misspelt */
            arg_near_try(&s, S->file->models[i]->name);
        diag_error(e->loc, "unknown layer '%s'%s (supported layers: %s)", e->s, arg_near_hint(&s), layer_list());
        return NULL;
    }
    switch (layer_types[t].kind) {
    case LK_LINEAR: return make_linear(S, e, prefix, what);
    case LK_ACT: return make_act(e, prefix, what);
    case LK_FLATTEN: return make_flatten(e, prefix, what);
    case LK_SEQUENTIAL: return make_sequential(S, e, prefix, what);
    case LK_CONV2D: return make_conv2d(S, e, prefix, what, layer_types[t].one_d);
    case LK_CONVT2D: return make_convt2d(S, e, prefix, what);
    case LK_UPSAMPLE: return make_upsample(e, prefix, what, NULL);
    case LK_BATCHNORM2D:
    case LK_BATCHNORM1D: return make_batchnorm(S, e, layer_types[t].kind, prefix, what);
    case LK_MAXPOOL2D:
    case LK_AVGPOOL2D: return make_pool(e, layer_types[t].kind, prefix, what, NULL, layer_types[t].one_d);
    case LK_DROPOUT: return make_dropout(e, prefix, what);
    case LK_LAYERNORM: return make_layer_norm(S, e, prefix, what, NULL);
    case LK_ADAPTIVEAVGPOOL2D: return make_adaptive_pool(e, prefix, what, NULL, layer_types[t].one_d);
    case LK_SOFTMAX: return make_softmax(e, layer_types[t].act, prefix, what, NULL);
    case LK_EMBEDDING: return emb_make(S, e, prefix, what);
    case LK_LIST: return make_list(S, e, prefix, what);
    case LK_DICT: return make_dict(S, e, prefix, what);
    case LK_MHA: case LK_ENC_LAYER: case LK_ENCODER: return S->make_xf(S, e, layer_types[t].kind, prefix, what);
    case LK_RNN: return S->make_rnn(S, e, prefix, what);
    case LK_BLOCK: break;
    }
    diag_ice("layer_make: layer kind %d", layer_types[t].kind);
}


/* ---- forward ----------------------------------------------------------- */

/* The layers and activations compute on floats: an index or a mask is
 * converted first, as PyTorch asks */
int layer_float(const Sema *S, Val x, const char *what, Loc loc)
{
    const DType t = x.id >= 0 ? S->g->n[x.id]->dt : DT_F32;
    if (t == DT_F32)
        return 1;
    diag_error(loc, "%s expects a float tensor, got %s (.float() converts it)", what, ir_dtype_text(t));
    return 0;
}

Val layer_node(Sema *S, Op op, int a, int b, Shape s, Loc loc)
{
    int in[2] = {a, b};
    const DType dt = (op_kind[op] == K_TENSOR || op == OP_RESHAPE) && a >= 0 && (b >= 0 || op_arity[op] < 2)
                     ? ten_dtype(S->g, op, op_arity[op], in, DT_F32) : DT_F32;
    return (Val){ir_add(S->g, op, op_arity[op], in, s, dt, loc), s};
}

/* x as shape s, a view (s keeps x's layout: tensor.c's ten_view_ok) */
Val layer_view(Sema *S, Val x, Shape s, Loc loc)
{
    if (x.id < 0 || ir_same_shape(&x.s, &s))
        return x;
    if (!ten_view_ok(&x.s, &s))
        diag_ice("layers: %s is not a view of %s", ir_shape_str(&s), ir_shape_str(&x.s));
    return layer_node(S, OP_RESHAPE, x.id, -1, s, loc);
}

/* One dimension of view's shape: an integer (-1: inferred), or
 * x.size(d) / size(x, d), a dimension of a value (x.size(0) is the batch,
 * DIM_N). Returns 0 after reporting. */
/* The batch merged with other elements has no size a shape can name
 * (x.view(x.size(0), ...) of [N*T, C] would be wrong): refused */
static int merged_size(const Expr *e, int64_t d)
{
    if (!IR_IS_BATCH(d) || d == DIM_N)
        return 1;
    diag_error(e->loc, "this size is the batch's merged with %lld more (N*%lld): a shape cannot name it; write -1 "
               "there, or view back to the batch first", (long long)-d, (long long)-d);
    return 0;
}

int layer_size(Sema *S, const Expr *e, int64_t *d)
{
    const int r = arg_size(e, d);     /* a name bound to a size, x.shape[1] */
    if (r != 0)
        return r > 0 && merged_size(e, *d);
    if (e->kind == E_CALL && strcmp(e->s, "size") == 0) {
        static const char *const names[] = {"input", "dim"};
        const Sig sig = {"size", names, 2, 2, 2};
        Expr *a[2];
        int64_t k;
        if (!arg_bind(e, &sig, a))
            return 0;
        Val x = S->eval(S, a[0]);
        if (x.id < 0 || !arg_int(a[1], "the dimension", -x.s.rank, x.s.rank - 1, &k))
            return 0;
        *d = x.s.d[k < 0 ? k + x.s.rank : k];
        return merged_size(e, *d);
    }
    if (!arg_int(e, "a dimension", -1, MAX_DIM, d))
        return 0;
    if (*d == 0) {
        diag_error(e->loc, "a dimension must be positive or -1, got 0");
        return 0;
    }
    *d = *d == -1 ? -2 : *d;   /* -2: inferred (DIM_N is -1) */
    return 1;
}

/* Dropout with probability p; p == 0 is the identity: no node. */
Val layer_dropout(Sema *S, Val x, double p, Loc loc)
{
    if (x.id < 0 || p == 0)
        return x;
    if (!layer_batch_first(x, "dropout", loc))
        return POISON;
    return (Val){ir_dropout(S->g, x.id, p, loc), x.s};
}

/* flatten(x) = torch.flatten(x, 1): no node when already [N, K]. */
Val layer_flatten(Sema *S, Val x, Loc loc)
{
    if (x.id < 0 || x.s.rank == 2)
        return x;
    return layer_node(S, OP_RESHAPE, x.id, -1, shape2(DIM_N, ir_row_elems(&x.s)), loc);
}

static Val node4(Sema *S, Op op, const int *in, Shape s, Loc loc)
{
    return (Val){ir_add(S->g, op, op_arity[op], in, s, DT_F32, loc), s};
}

/* BatchNorm over [N, C, H, W]: the batch statistics (of all ranks under
 * SyncBatchNorm), normalization, and the running statistics' update. The
 * statistics take two passes over the channel (the mean, then the squares
 * about it: the variance about the mean, not E[x^2] - E[x]^2); under
 * SyncBatchNorm each pass's means are summed over all ranks before the
 * next pass: the statistics of one rank holding the whole global batch. */
static Val apply_batchnorm(Sema *S, const Layer *l, Val x, Loc loc)
{
    Graph *g = S->g;
    Shape c = shape1(l->in);
    Val s = node4(S, OP_MEAN_CHAN, &x.id, c, loc);
    if (S->sync_bn)
        s = node4(S, OP_ALLREDUCE, &s.id, c, loc);
    Val dev = node4(S, OP_BN_SQDEV, (int[]){x.id, s.id}, c, loc), q = dev;
    if (S->sync_bn)
        q = node4(S, OP_ALLREDUCE, &dev.id, c, loc);
    Val st = node4(S, OP_BN_STATS, (int[]){x.id, l->rm, l->rv, s.id, q.id}, shape2(2, l->in), loc);
    Val y = node4(S, OP_BN_APPLY, (int[]){x.id, st.id, l->w, l->b}, x.s, loc);
    /* the running statistics move once per training step, from the stats */
    Val r = node4(S, OP_BN_RUNNING, (int[]){l->rm, l->rv, l->nbt, st.id}, shape1(l->in), loc);
    ir_effect(g, r.id);
    /* the settings on every node that divides by M, normalizes or
     * updates (the gradient's nodes copy bn_apply's) */
    const int set[] = {dev.id, st.id, y.id, r.id};
    for (int k = 0; k < 4; k++) {
        Node *n = g->n[set[k]];
        n->bn.eps = l->eps;
        n->bn.momentum = l->momentum;
        n->bn.sync = S->sync_bn;
    }
    return y;
}

/* BatchNorm1d over [N, C] or [N, C, L]: BatchNorm2d's ops on the same
 * elements viewed as [N, C, 1, 1] or [N, C, L, 1] (a channel's elements
 * are the same, so are its statistics; SyncBatchNorm comes with them). */
static Val apply_batchnorm1d(Sema *S, const Layer *l, Val x, Loc loc)
{
    if (!plain_batch(x, l->what, loc))
        return POISON;
    if ((x.s.rank != 2 && x.s.rank != 3) || x.s.d[1] != l->in) {
        diag_error(loc, "%s expects input [N, %lld] or [N, %lld, L], got %s%s", l->what, (long long)l->in,
                   (long long)l->in, ir_shape_str(&x.s), x.s.rank == 4 ? " (BatchNorm2d normalizes [N, C, H, W])" : "");
        return POISON;
    }
    Shape s4 = {4, {DIM_N, l->in, x.s.rank == 3 ? x.s.d[2] : 1, 1}};
    Val v = layer_node(S, OP_RESHAPE, x.id, -1, s4, loc);
    v = apply_batchnorm(S, l, v, loc);
    return v.id < 0 ? v : layer_node(S, OP_RESHAPE, v.id, -1, x.s, loc);
}

/* x [N, ..., F] as rows [N*k, F] of its last f elements (a view: the
 * batch first), for the layers over the last dimensions, as PyTorch
 * applies Linear, LayerNorm and softmax to [N, T, F] */
static Val as_rows(Sema *S, Val x, int64_t f, Loc loc)
{
    const int64_t k = ir_row_elems(&x.s) / f;
    const Shape r = shape2(k > 1 ? -k : DIM_N, f);
    if (ir_same_shape(&r, &x.s))
        return x;
    const Node *n = S->g->n[x.id];
    if (n->op == OP_RESHAPE && ir_same_shape(&S->g->n[n->in[0]]->shape, &r))
        return (Val){n->in[0], r};      /* a layer's rows viewed back: the rows themselves */
    return layer_node(S, OP_RESHAPE, x.id, -1, r, loc);
}

/* rows y back to x's shape with the last dimension `last` */
static Val from_rows(Sema *S, Val y, const Shape *x, int64_t last, Loc loc)
{
    Shape s = *x;
    s.d[s.rank - 1] = last;
    return y.id < 0 || ir_same_shape(&s, &y.s) ? y : layer_node(S, OP_RESHAPE, y.id, -1, s, loc);
}

/* LayerNorm over the last dimensions of a sample: F of [N, F] or of
 * [N, T, F] (each row), (C, H, W) of [N, C, H, W] (one row): each row
 * normalized, then times the weight and plus the bias per element of the
 * row (elementwise ops, which fuse as any). */
static Val apply_layer_norm(Sema *S, const Layer *l, Val x, Loc loc)
{
    /* normalized_shape: the last dimensions of x (all of a sample's, or
     * the last ones of [N, T, F], each row normalized) */
    int tail = x.s.rank > l->ns.rank;
    for (int k = 0; tail && k < l->ns.rank; k++)
        tail = x.s.d[x.s.rank - l->ns.rank + k] == l->ns.d[k];
    if (!tail) {
        Shape want = {l->ns.rank + 1, {DIM_N}};
        for (int k = 0; k < l->ns.rank; k++)
            want.d[k + 1] = l->ns.d[k];
        diag_error(loc, "%s expects input %s (or [N, ..., %s), got %s", l->what, ir_shape_str(&want),
                   ir_shape_str(&l->ns) + 1, ir_shape_str(&x.s));
        return POISON;
    }
    Val r = as_rows(S, x, l->in, loc);
    Val y = layer_node(S, OP_LAYER_NORM, r.id, -1, r.s, loc);
    S->g->n[y.id]->bn.eps = l->eps;
    /* the affine is part of torch's layer_norm: float under autocast */
    if (l->w >= 0) {
        y = layer_node(S, OP_MUL_COLS, y.id, l->w, r.s, loc);
        S->g->n[y.id]->keep_f32 = 1;
    }
    if (l->b >= 0) {
        y = layer_node(S, OP_BIAS_ADD, y.id, l->b, r.s, loc);
        S->g->n[y.id]->keep_f32 = 1;
    }
    return ir_same_shape(&y.s, &x.s) ? y : layer_node(S, OP_RESHAPE, y.id, -1, x.s, loc);
}

/* softmax / log_softmax over the last dimension (dim = -1, or 1 of
 * [N, F]): each row of [N, ..., F] */
static Val apply_softmax(Sema *S, const Layer *l, Val x, Loc loc)
{
    const int last = x.s.rank - 1;
    if (l->dim == 0 && x.s.rank != 2) {
        diag_error(loc, "%s of %s needs its dim (PyTorch's implicit choice for this rank is dimension 1, with a "
                   "warning); over the last dimension: dim = -1", l->what, ir_shape_str(&x.s));
        return POISON;
    }
    const int d = l->dim < 0 ? l->dim + x.s.rank : l->dim == 0 ? 1 : l->dim;
    if (d < 0 || d > last) {
        diag_error(loc, "%s: dim %d is out of range for %s", l->what, l->dim, ir_shape_str(&x.s));
        return POISON;
    }
    if (d != last) {
        diag_error(loc, "%s over dimension %d of %s is not supported: over the last one only (dim = -1); "
                   "transpose the dimension last", l->what, d, ir_shape_str(&x.s));
        return POISON;
    }
    Val r = as_rows(S, x, x.s.d[last], loc);
    return from_rows(S, layer_node(S, l->op, r.id, -1, r.s, loc), &x.s, x.s.d[last], loc);
}

Val layer_softmax(Sema *S, Val x, Loc loc)
{
    if (x.id < 0 || !layer_batch_first(x, "softmax", loc))
        return POISON;
    Val r = as_rows(S, x, x.s.d[x.s.rank - 1], loc);
    return from_rows(S, layer_node(S, OP_SOFTMAX, r.id, -1, r.s, loc), &x.s, x.s.d[x.s.rank - 1], loc);
}

static Val apply_nchw(Sema *S, const Layer *l, Val x, Loc loc);

/* The 1-d family over [N, C, L]: the 2-d layer over [N, C, 1, L] (views),
 * a Conv1d's weight [out, in / groups, k] read as [out, in / groups, 1, k] */
static Val apply_1d(Sema *S, const Layer *l, Val x, Loc loc)
{
    if (!plain_batch(x, l->what, loc))
        return POISON;
    if (x.s.rank != 3 || (l->kind == LK_CONV2D && x.s.d[1] != l->in)) {
        if (l->kind == LK_CONV2D)
            diag_error(loc, "%s expects input [N, %lld, L], got %s", l->what, (long long)l->in, ir_shape_str(&x.s));
        else
            diag_error(loc, "%s expects input [N, C, L], got %s", l->what, ir_shape_str(&x.s));
        return POISON;
    }
    Layer l2 = *l;
    l2.one_d = 0;
    if (l->kind == LK_CONV2D) {
        const Shape *w = &S->g->n[l->w]->shape;
        l2.w = layer_node(S, OP_RESHAPE, l->w, -1, (Shape){4, {w->d[0], w->d[1], 1, w->d[2]}}, loc).id;
    }
    Val y = apply_nchw(S, &l2, layer_view(S, x, (Shape){4, {x.s.d[0], x.s.d[1], 1, x.s.d[2]}}, loc), loc);
    return y.id < 0 ? y : layer_view(S, y, (Shape){3, {y.s.d[0], y.s.d[1], y.s.d[3]}}, loc);
}

/* The layers over images [N, C, H, W]: Conv2d, BatchNorm2d, pooling. */
static Val apply_nchw(Sema *S, const Layer *l, Val x, Loc loc)
{
    if (!plain_batch(x, l->what, loc))
        return POISON;
    int64_t want = l->kind == LK_CONV2D || l->kind == LK_BATCHNORM2D ? l->in : 0;
    if (x.s.rank != 4 || (want && x.s.d[1] != want)) {
        if (want)
            diag_error(loc, "%s expects input [N, %lld, H, W], got %s", l->what, (long long)want, ir_shape_str(&x.s));
        else
            diag_error(loc, "%s expects input [N, C, H, W], got %s", l->what, ir_shape_str(&x.s));
        return POISON;
    }
    if (l->kind == LK_BATCHNORM2D)
        return apply_batchnorm(S, l, x, loc);
    Window wa = l->win;
    if (l->kind == LK_ADAPTIVEAVGPOOL2D) {
        /* an average pool whose windows tile the input exactly */
        int64_t h = x.s.d[2], w = x.s.d[3];
        if (h % l->osize[0] || w % l->osize[1]) {
            diag_error(loc, "%s: output size %dx%d does not divide the input %s (only even windows are supported)",
                       l->what, l->osize[0], l->osize[1], ir_shape_str(&x.s));
            return POISON;
        }
        int kh = (int)(h / l->osize[0]), kw = (int)(w / l->osize[1]);
        wa = (Window){kh, kw, kh, kw, 0, 0, 1, 1, 1};
    }
    const Window *w = &wa;
    int dil = l->kind == LK_CONV2D;
    int64_t oh = ir_window_out(x.s.d[2], w->kh, w->sh, w->ph, dil ? w->dh : 1);
    int64_t ow = ir_window_out(x.s.d[3], w->kw, w->sw, w->pw, dil ? w->dw : 1);
    if (oh <= 0 || ow <= 0) {
        diag_error(loc, "%s: a %dx%d window%s does not fit the input %s%s: the output would be empty", l->what, w->kh,
                   w->kw, dil && (w->dh > 1 || w->dw > 1) ? util_fmt(" dilated %dx%d", w->dh, w->dw) : "",
                   ir_shape_str(&x.s), w->ph || w->pw ? util_fmt(" padded by %dx%d", w->ph, w->pw) : "");
        return POISON;
    }
    int64_t c = l->kind == LK_CONV2D ? l->out : x.s.d[1];
    Shape ys = {4, {DIM_N, c, oh, ow}};
    if (ir_row_elems(&ys) > MAX_DIM) {
        diag_error(loc, "%s gives %s: too large (the limit is %d elements per sample)", l->what, ir_shape_str(&ys),
                   MAX_DIM);
        return POISON;
    }
    Op op = l->kind == LK_CONV2D ? OP_CONV2D : l->kind == LK_MAXPOOL2D ? OP_MAXPOOL : OP_AVGPOOL;
    Val y = layer_node(S, op, x.id, op == OP_CONV2D ? l->w : -1, ys, loc);
    S->g->n[y.id]->win = *w;
    if (op == OP_CONV2D && l->b >= 0)
        y = layer_node(S, OP_BIAS_ADD, y.id, l->b, ys, loc);
    return y;
}

/* Layer l applied to x; loc is the call, or the layer's place inside a
 * Sequential (in_seq), which also changes how a fix is suggested. */
Val layer_apply(Sema *S, const Layer *l, Val x, Loc loc, int in_seq)
{
    if (x.id < 0)
        return x;
    if (l->kind == LK_EMBEDDING)    /* an integer index, with the batch or without */
        return emb_apply(S, l, x, loc);
    if (l->kind == LK_BLOCK)        /* its forward takes what it is given */
        return S->apply_block(S, l, x, loc);
    if (l->kind == LK_MHA || l->kind == LK_ENC_LAYER || l->kind == LK_ENCODER)
        return S->apply_xf(S, l, x, loc);
    if (l->kind == LK_RNN) {     /* a call of its own (forward.c: rnn_call) takes the tuple apart */
        const char *st = l->rnn.cell == RNN_LSTM ? "(h_n, c_n)" : "h_n";
        if (in_seq)
            diag_error(loc, "%s returns (output, %s) as PyTorch's does, which a Sequential cannot pass on: call it "
                       "in forward and unpack it (out, %s = ...)", l->what, st, st);
        else
            diag_error(loc, "%s returns (output, %s) as PyTorch's does: unpack it (out, %s = self.%s(x)) or take "
                       "[0]", l->what, st, st, l->name);
        return POISON;
    }
    if (l->kind == LK_LIST || l->kind == LK_DICT) {
        if (l->kind == LK_LIST)
            diag_error(loc, "%s is a ModuleList: iterate it (for block in self.%s: x = block(x)), or make it a "
                       "Sequential to call it", l->what, l->what);
        else
            diag_error(loc, "%s is a ModuleDict: call one of its layers (self.%s.NAME(x))", l->what, l->what);
        return POISON;
    }
    if (!layer_batch_first(x, l->what, loc) || !layer_float(S, x, l->what, loc))
        return POISON;
    switch (l->kind) {
    case LK_LINEAR: {   /* over the last dimension: [N, ..., in] as rows of one product */
        if (x.s.d[x.s.rank - 1] != l->in) {
            const char *hint = "";
            if (x.s.rank > 2 && ir_row_elems(&x.s) == l->in)
                hint = in_seq ? "; add Flatten() before it" : "; flatten it first: flatten(x)";
            diag_error(loc, "%s expects input [N, ..., %lld], got %s%s", l->what, (long long)l->in,
                       ir_shape_str(&x.s), hint);
            return POISON;
        }
        Val r = as_rows(S, x, l->in, loc);
        Val y = layer_node(S, OP_MM_NT, r.id, l->w, shape2(r.s.d[0], l->out), loc);
        if (l->b >= 0)
            y = layer_node(S, OP_BIAS_ADD, y.id, l->b, y.s, loc);
        return from_rows(S, y, &x.s, l->out, loc);
    }
    case LK_ACT:
        return layer_act(S, l->act, x, loc);
    case LK_FLATTEN:
        return layer_flatten(S, x, loc);
    case LK_DROPOUT:
        return layer_dropout(S, x, l->p, loc);
    case LK_SEQUENTIAL:
        for (int i = 0; i < l->nkids && x.id >= 0; i++)
            x = layer_apply(S, l->kids[i], x, l->kids[i]->loc, 1);
        return x;
    case LK_CONV2D:
    case LK_BATCHNORM2D:
    case LK_MAXPOOL2D:
    case LK_AVGPOOL2D:
    case LK_ADAPTIVEAVGPOOL2D:
        return l->one_d ? apply_1d(S, l, x, loc) : apply_nchw(S, l, x, loc);
    case LK_BATCHNORM1D:
        return apply_batchnorm1d(S, l, x, loc);
    case LK_LAYERNORM:
        return apply_layer_norm(S, l, x, loc);
    case LK_SOFTMAX:
        return apply_softmax(S, l, x, loc);
    case LK_CONVT2D:
        return apply_convt2d(S, l, x, loc);
    case LK_UPSAMPLE:
        return S->upsample(S, l, x, loc);
    case LK_EMBEDDING: case LK_BLOCK: case LK_LIST: case LK_DICT: case LK_MHA: case LK_ENC_LAYER: case LK_ENCODER:
    case LK_RNN:
        break;
    }
    diag_ice("apply: layer kind %d", l->kind);
}

