/* autodiff.c: reverse-mode differentiation, one rule per primitive op.
 *
 * Gradients are built as new graph nodes (phase PH_BWD) appended after the
 * forward pass, so the node order stays topological and the backward
 * nodes come out in reverse order of the forward -- the order in which
 * parameter gradients become ready, which the scheduler and (later) the
 * gradient buckets rely on. A missing rule is a compiler bug and stops
 * compilation loudly instead of producing a wrong gradient. */
#include <stddef.h>
#include <string.h>

#include "cddpc.h"
#include "cddprt.h"         /* RT_TGT_* */

typedef struct Ad {
    Graph *g;
    int *grad;              /* grad[node] = id of d loss / d node, -1 */
    char *needs;            /* needs[node]: depends on some wrt node */
    int *cell;              /* cell[rnn]: the gradient of an LSTM's last cell state (T_RNN_CN), -1 */
} Ad;

static int bwd(Ad *a, Op op, int nin, const int *in, const Shape *s, const Node *like)
{
    int id = ir_add(a->g, op, nin, in, *s, DT_F32, like->loc);
    Node *n = a->g->n[id];
    n->phase = PH_BWD;
    /* the forward's attributes (Node's last member, a union): conv / pool
     * gradients slide its window, batch norm's use its eps */
    memcpy(&n->win, &like->win, sizeof *n - offsetof(Node, win));
    return id;
}

/* Adds contribution c to the gradient of node x (sum over uses). */
static void accumulate(Ad *a, int x, int c)
{
    if (!a->needs[x])
        return;
    if (a->grad[x] < 0) {
        a->grad[x] = c;
        return;
    }
    const Node *xn = a->g->n[x];
    /* the elementwise add's rows are the batch's: elsewhere, the tensor op */
    a->grad[x] = bwd(a, ten_batch_dim(&xn->shape) > 0 ? OP_BC_ADD : OP_ADD, 2, (int[]){a->grad[x], c}, &xn->shape, xn);
}

static const Shape *shape_of(Ad *a, int id) { return &a->g->n[id]->shape; }

/* The rules, one per differentiable op (ops.def's AD column names them):
 * given dy = the gradient of n, each adds the gradients of n's inputs. */
#define RULE_ARGS Ad *a, const Node *n, int dy

static void rule_reshape(RULE_ARGS)
{
    const int *x = n->in;
    accumulate(a, x[0], bwd(a, OP_RESHAPE, 1, &dy, shape_of(a, x[0]), n));
}

/* y = a b^T: da = dy b, db = dy^T a */
static void rule_mm_nt(RULE_ARGS)
{
    const int *x = n->in;
    if (a->needs[x[0]])
        accumulate(a, x[0], bwd(a, OP_MM_NN, 2, (int[]){dy, x[1]}, shape_of(a, x[0]), n));
    if (a->needs[x[1]])
        accumulate(a, x[1], bwd(a, OP_MM_TN, 2, (int[]){dy, x[0]}, shape_of(a, x[1]), n));
}

/* y = a b: da = dy b^T, db = a^T dy */
static void rule_mm_nn(RULE_ARGS)
{
    const int *x = n->in;
    if (a->needs[x[0]])
        accumulate(a, x[0], bwd(a, OP_MM_NT, 2, (int[]){dy, x[1]}, shape_of(a, x[0]), n));
    if (a->needs[x[1]])
        accumulate(a, x[1], bwd(a, OP_MM_TN, 2, (int[]){x[0], dy}, shape_of(a, x[1]), n));
}

/* y = a^T b: da = b dy^T, db = a dy */
static void rule_mm_tn(RULE_ARGS)
{
    const int *x = n->in;
    if (a->needs[x[0]])
        accumulate(a, x[0], bwd(a, OP_MM_NT, 2, (int[]){x[1], dy}, shape_of(a, x[0]), n));
    if (a->needs[x[1]])
        accumulate(a, x[1], bwd(a, OP_MM_NN, 2, (int[]){x[0], dy}, shape_of(a, x[1]), n));
}

static void rule_bias_add(RULE_ARGS)
{
    const int *x = n->in;
    accumulate(a, x[0], dy);
    if (a->needs[x[1]])
        accumulate(a, x[1], bwd(a, n->shape.rank == 4 ? OP_SUM_CHAN : OP_SUM_ROWS, 1, &dy, shape_of(a, x[1]), n));
}

/* dx: the transposed convolution of dy; dw: dy against the input's windows */
static void rule_conv2d(RULE_ARGS)
{
    const int *x = n->in;
    if (a->needs[x[0]])
        accumulate(a, x[0], bwd(a, OP_CONV2D_DX, 2, (int[]){dy, x[1]}, shape_of(a, x[0]), n));
    if (a->needs[x[1]])
        accumulate(a, x[1], bwd(a, OP_CONV2D_DW, 2, (int[]){dy, x[0]}, shape_of(a, x[1]), n));
}

/* ConvTranspose2d: y = conv2d_dx(u, w), the input gradient of a conv whose
 * output gradient is u: du = conv2d(dy, w), dw = conv2d_dw(u, dy) */
static void rule_conv2d_dx(RULE_ARGS)
{
    const int *x = n->in;
    if (a->needs[x[0]])
        accumulate(a, x[0], bwd(a, OP_CONV2D, 2, (int[]){dy, x[1]}, shape_of(a, x[0]), n));
    if (a->needs[x[1]])
        accumulate(a, x[1], bwd(a, OP_CONV2D_DW, 2, (int[]){x[0], dy}, shape_of(a, x[1]), n));
}

static void rule_bn_apply(RULE_ARGS)
{
    const int *x = n->in;
    /* x[1] must be BN_STATS(x[0], ...) (sema builds it so): bn_dx
     * differentiates through the batch mean and variance, so the stats
     * get no gradient */
    const Node *st = a->g->n[x[1]];
    if (st->op != OP_BN_STATS || st->in[0] != x[0])
        diag_ice("autodiff: bn_apply %%%d does not normalize by its input's statistics", n->id);
    if (a->needs[x[0]]) {
        /* dx needs mean(dy) and mean(dy xhat): a pass for them, then dx's;
         * under SyncBatchNorm the means over all ranks' samples (w's
         * and b's own gradients stay this rank's: DDP averages them, as
         * PyTorch's SyncBatchNorm leaves it) */
        int means = bwd(a, OP_BN_DPART, 3, (int[]){dy, x[0], x[1]}, shape_of(a, x[1]), n);
        if (n->bn.sync)
            means = bwd(a, OP_ALLREDUCE, 1, &means, shape_of(a, x[1]), n);
        accumulate(a, x[0], bwd(a, OP_BN_DX, 5, (int[]){dy, x[0], x[1], x[2], means}, shape_of(a, x[0]), n));
    }
    if (a->needs[n->in[2]])
        accumulate(a, n->in[2], bwd(a, OP_BN_DW, 3, (int[]){dy, n->in[0], n->in[1]}, shape_of(a, n->in[2]), n));
    if (a->needs[n->in[3]])
        accumulate(a, n->in[3], bwd(a, OP_SUM_CHAN, 1, &dy, shape_of(a, n->in[3]), n));
}

static void rule_maxpool(RULE_ARGS)
{
    const int *x = n->in;
    accumulate(a, x[0], bwd(a, OP_MAXPOOL_DX, 2, (int[]){dy, x[0]}, shape_of(a, x[0]), n));
}

static void rule_avgpool(RULE_ARGS)
{
    const int *x = n->in;
    accumulate(a, x[0], bwd(a, OP_AVGPOOL_DX, 1, &dy, shape_of(a, x[0]), n));
}

static void rule_add(RULE_ARGS)
{
    const int *x = n->in;
    accumulate(a, x[0], dy);
    accumulate(a, x[1], dy);
}

/* x * a + b with constants: dx = dy * a (the copy of the node's
 * attributes brings a; b is dropped) */
static int affine(Ad *a, int dy, const Node *like, double k)
{
    int d = bwd(a, OP_AFFINE, 1, &dy, &like->shape, like);
    a->g->n[d]->act.a = k;
    a->g->n[d]->act.b = 0;
    return d;
}

static void rule_sub(RULE_ARGS)
{
    accumulate(a, n->in[0], dy);
    if (a->needs[n->in[1]])
        accumulate(a, n->in[1], affine(a, dy, n, -1.0));
}

/* d(a b) = dy b, dy a: each operand's gradient reads the other (a * a
 * gets both terms, summed by accumulate) */
static void rule_mul(RULE_ARGS)
{
    for (int k = 0; k < 2; k++)
        if (a->needs[n->in[k]])
            accumulate(a, n->in[k], bwd(a, OP_MUL, 2, (int[]){dy, n->in[1 - k]}, &n->shape, n));
}

static void rule_affine(RULE_ARGS) { accumulate(a, n->in[0], affine(a, dy, n, n->act.a)); }

static void rule_div_scalar(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_DIV_SCALAR, 1, &dy, &n->shape, n));
}

static void rule_dropout(RULE_ARGS)
{
    const int *x = n->in;
    /* dx = dy * mask / (1 - p) with the mask regenerated from the same
     * (seed, rank, step, key) stream, not saved by forward: no mask
     * buffer to keep alive across the step, and one read less */
    int d = bwd(a, OP_DROPOUT_GRAD, 1, &dy, &n->shape, n);
    a->g->n[d]->drop.p = n->drop.p;
    a->g->n[d]->drop.key = n->drop.key;
    accumulate(a, x[0], d);
}

/* the mask is read from the output: y > 0 iff x > 0 */
static void rule_relu(RULE_ARGS)
{
    const int *x = n->in;
    accumulate(a, x[0], bwd(a, OP_RELU_GRAD, 2, (int[]){dy, n->id}, &n->shape, n));
}

/* d tanh(x) = 1 - tanh(x)^2: read from the output, as relu's mask */
static void rule_tanh(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_TANH_GRAD, 2, (int[]){dy, n->id}, &n->shape, n));
}

/* d sigmoid(x) = y (1 - y): from the output, as tanh */
static void rule_sigmoid(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_SIGMOID_GRAD, 2, (int[]){dy, n->id}, &n->shape, n));
}

/* The other activations' derivatives are functions of the input x (their
 * outputs do not determine it cheaply, or at all: hardtanh, leaky_relu's
 * sign with a negative slope); the gradient node starts with a copy of the
 * forward's act parameters (bwd). */
static void grad_from_input(RULE_ARGS, Op grad)
{
    accumulate(a, n->in[0], bwd(a, grad, 2, (int[]){dy, n->in[0]}, &n->shape, n));
}

static void rule_silu(RULE_ARGS) { grad_from_input(a, n, dy, OP_SILU_GRAD); }
static void rule_gelu(RULE_ARGS) { grad_from_input(a, n, dy, OP_GELU_GRAD); }
static void rule_gelu_tanh(RULE_ARGS) { grad_from_input(a, n, dy, OP_GELU_TANH_GRAD); }
static void rule_leaky_relu(RULE_ARGS) { grad_from_input(a, n, dy, OP_LEAKY_RELU_GRAD); }
static void rule_elu(RULE_ARGS) { grad_from_input(a, n, dy, OP_ELU_GRAD); }
static void rule_softplus(RULE_ARGS) { grad_from_input(a, n, dy, OP_SOFTPLUS_GRAD); }
static void rule_hardtanh(RULE_ARGS) { grad_from_input(a, n, dy, OP_HARDTANH_GRAD); }

/* softmax and log_softmax: their gradients read the output y (the whole
 * row's sum of dy y, or of dy, is taken inside the kernel) */
static void rule_softmax(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_SOFTMAX_GRAD, 2, (int[]){dy, n->id}, &n->shape, n));
}

static void rule_log_softmax(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_LOG_SOFTMAX_GRAD, 2, (int[]){dy, n->id}, &n->shape, n));
}

/* layer_norm's gradient recomputes the row's mean and rstd from x (its eps
 * comes with the copy of the forward's attributes) */
static void rule_layer_norm(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_LAYER_NORM_DX, 2, (int[]){dy, n->in[0]}, &n->shape, n));
}

/* cat: each operand's gradient is its columns of dy */
static void rule_cat(RULE_ARGS)
{
    int64_t off = 0;
    for (int k = 0; k < 2; k++) {
        const Shape *s = shape_of(a, n->in[k]);
        if (a->needs[n->in[k]]) {
            int d = bwd(a, OP_SLICE, 1, &dy, s, n);
            a->g->n[d]->slice.off = off;
            accumulate(a, n->in[k], d);
        }
        off += ir_row_elems(s);
    }
}

/* y = x * w[col]: dx = dy * w[col], dw = the column sums of dy * x */
static void rule_mul_cols(RULE_ARGS)
{
    const int *x = n->in;
    if (a->needs[x[0]]) {
        int d = bwd(a, OP_MUL_COLS, 2, (int[]){dy, x[1]}, &n->shape, n);
        a->g->n[d]->keep_f32 = n->keep_f32;     /* layer_norm's backward: float too */
        accumulate(a, x[0], d);
    }
    if (a->needs[x[1]]) {
        int p = bwd(a, OP_MUL, 2, (int[]){dy, x[0]}, &n->shape, n);
        a->g->n[p]->keep_f32 = n->keep_f32;
        accumulate(a, x[1], bwd(a, OP_SUM_ROWS, 1, &p, shape_of(a, x[1]), n));
    }
}

/* ---- tensors of any rank (tensor.c) ------------------------------------ */

/* dy of a value that broadcast from shape `to` back to it: summed over
 * the stretched dimensions, then viewed as `to` */
static int unbroadcast(Ad *a, int dy, const Shape *to, const Node *like)
{
    const Shape *s = shape_of(a, dy);
    const unsigned axes = ten_stretched(to, s);
    if (axes) {
        const Shape r = ten_reduced(s, axes);
        dy = bwd(a, OP_T_SUM, 1, &dy, &r, like);
        a->g->n[dy]->ten.axes = axes;
    }
    return ir_same_shape(shape_of(a, dy), to) ? dy : bwd(a, OP_RESHAPE, 1, &dy, to, like);
}

static int scaled(Ad *a, int dy, double c, const Shape *s, const Node *like)
{
    const int d = bwd(a, OP_BC_SCALE, 1, &dy, s, like);
    a->g->n[d]->ten.scale = c;
    return d;
}

static void rule_bc_add(RULE_ARGS)
{
    for (int k = 0; k < 2; k++)
        if (a->needs[n->in[k]])
            accumulate(a, n->in[k], unbroadcast(a, dy, shape_of(a, n->in[k]), n));
}

static void rule_bc_sub(RULE_ARGS)
{
    if (a->needs[n->in[0]])
        accumulate(a, n->in[0], unbroadcast(a, dy, shape_of(a, n->in[0]), n));
    if (a->needs[n->in[1]])
        accumulate(a, n->in[1], unbroadcast(a, scaled(a, dy, -1, &n->shape, n), shape_of(a, n->in[1]), n));
}

static void rule_bc_mul(RULE_ARGS)
{
    for (int k = 0; k < 2; k++)
        if (a->needs[n->in[k]]) {
            const int d = bwd(a, OP_BC_MUL, 2, (int[]){dy, n->in[1 - k]}, &n->shape, n);
            accumulate(a, n->in[k], unbroadcast(a, d, shape_of(a, n->in[k]), n));
        }
}

/* y = a / b: da = dy / b, db = -dy (a / b) / b */
static void rule_bc_div(RULE_ARGS)
{
    const int *x = n->in;
    if (a->needs[x[0]])
        accumulate(a, x[0], unbroadcast(a, bwd(a, OP_BC_DIV, 2, (int[]){dy, x[1]}, &n->shape, n),
                                        shape_of(a, x[0]), n));
    if (a->needs[x[1]])
        accumulate(a, x[1], unbroadcast(a, bwd(a, OP_BC_DIV_GRAD, 3, (int[]){dy, x[0], x[1]}, &n->shape, n),
                                        shape_of(a, x[1]), n));
}

static void rule_bc_scale(RULE_ARGS)
{
    accumulate(a, n->in[0], unbroadcast(a, scaled(a, dy, n->ten.scale, &n->shape, n), shape_of(a, n->in[0]), n));
}

static void rule_bc_copy(RULE_ARGS) { accumulate(a, n->in[0], unbroadcast(a, dy, shape_of(a, n->in[0]), n)); }

/* sum: dy to every element reduced; mean: divided by their count, as
 * torch divides the expanded gradient */
static void rule_t_sum(RULE_ARGS) { accumulate(a, n->in[0], bwd(a, OP_BC_COPY, 1, &dy, shape_of(a, n->in[0]), n)); }

static void rule_t_mean(RULE_ARGS)
{
    const Shape *x = shape_of(a, n->in[0]);
    double count = 1;
    int batch = 0;
    for (int i = 0; i < x->rank; i++)
        if (n->ten.axes & (1u << i)) {
            batch |= IR_IS_BATCH(x->d[i]);
            count *= (double)x->d[i];
        }
    if (!batch) {
        accumulate(a, n->in[0], scaled(a, dy, count, x, n));
        return;
    }
    /* a loss block's mean over the batch: the count is the step's, known
     * when it runs (a last batch is smaller), a sum of ones as the mean
     * itself divides by */
    const int ones = bwd(a, OP_T_FULL, 0, NULL, x, n);
    a->g->n[ones]->ten.lo = 1;
    const int cnt = bwd(a, OP_T_SUM, 1, &ones, &n->shape, n);
    const int e = bwd(a, OP_BC_COPY, 1, &dy, x, n);
    accumulate(a, n->in[0], bwd(a, OP_BC_DIV, 2, (int[]){e, cnt}, x, n));
}

/* amax, amin: dy shared evenly by the elements equal to the result, as
 * torch's amax/amin backward */
static void rule_t_amax(RULE_ARGS)
{
    const int x = n->in[0];
    const int cnt = bwd(a, OP_T_COUNT_EQ, 2, (int[]){x, n->id}, &n->shape, n);
    accumulate(a, x, bwd(a, OP_BC_MAX_GRAD, 4, (int[]){dy, x, n->id, cnt}, shape_of(a, x), n));
}

static void rule_t_permute(RULE_ARGS)
{
    const int d = bwd(a, OP_T_PERMUTE, 1, &dy, shape_of(a, n->in[0]), n);
    for (int k = 0; k < n->shape.rank; k++)
        a->g->n[d]->ten.perm[n->ten.perm[k]] = k;
    accumulate(a, n->in[0], d);
}

static void rule_t_slice(RULE_ARGS) { accumulate(a, n->in[0], bwd(a, OP_T_PAD, 1, &dy, shape_of(a, n->in[0]), n)); }

static void rule_t_cat(RULE_ARGS)
{
    int64_t start = 0;
    for (int k = 0; k < 2; k++) {
        const Shape *s = shape_of(a, n->in[k]);
        if (a->needs[n->in[k]]) {
            const int d = bwd(a, OP_T_SLICE, 1, &dy, s, n);
            a->g->n[d]->ten.start = start;
            a->g->n[d]->ten.step = 1;
            accumulate(a, n->in[k], d);
        }
        start += s->d[n->ten.axis];
    }
}

/* unary math: dy with the result (exp, sqrt, rsqrt) or the input */
static int with_ten(Ad *a, Op op, int dy, int x, const Node *n)
{
    const int d = bwd(a, op, 2, (int[]){dy, x}, &n->shape, n);
    return d;
}

static void rule_t_exp(RULE_ARGS) { accumulate(a, n->in[0], bwd(a, OP_BC_MUL, 2, (int[]){dy, n->id}, &n->shape, n)); }
static void rule_t_log(RULE_ARGS) { accumulate(a, n->in[0], bwd(a, OP_BC_DIV, 2, (int[]){dy, n->in[0]}, &n->shape, n)); }
static void rule_t_sqrt(RULE_ARGS) { accumulate(a, n->in[0], with_ten(a, OP_T_SQRT_GRAD, dy, n->id, n)); }
static void rule_t_rsqrt(RULE_ARGS) { accumulate(a, n->in[0], with_ten(a, OP_T_RSQRT_GRAD, dy, n->id, n)); }
static void rule_t_abs(RULE_ARGS) { accumulate(a, n->in[0], with_ten(a, OP_T_ABS_GRAD, dy, n->in[0], n)); }
static void rule_t_pow(RULE_ARGS) { accumulate(a, n->in[0], with_ten(a, OP_T_POW_GRAD, dy, n->in[0], n)); }
static void rule_t_clamp(RULE_ARGS) { accumulate(a, n->in[0], with_ten(a, OP_T_CLAMP_GRAD, dy, n->in[0], n)); }
static void rule_t_affine(RULE_ARGS)
{
    const int d = bwd(a, OP_T_AFFINE, 1, &dy, &n->shape, n);
    a->g->n[d]->ten.hi = 0;     /* dy * lo */
    accumulate(a, n->in[0], d);
}

/* maximum(x, y): dy where x wins, half of it on a tie (minimum alike) */
static void rule_t_maximum(RULE_ARGS)
{
    const Op g = n->op == OP_T_MAXIMUM ? OP_T_MAXIMUM_GRAD : OP_T_MINIMUM_GRAD;
    for (int k = 0; k < 2; k++)
        if (a->needs[n->in[k]]) {
            const int d = bwd(a, g, 3, (int[]){dy, n->in[k], n->in[1 - k]}, &n->shape, n);
            accumulate(a, n->in[k], unbroadcast(a, d, shape_of(a, n->in[k]), n));
        }
}

static void rule_t_if_training(RULE_ARGS) { accumulate(a, n->in[1], dy); }

/* binary cross-entropy: the input's gradient only (the target is data) */
static void rule_t_bce(RULE_ARGS)
{
    const Op g = n->op == OP_T_BCE ? OP_T_BCE_GRAD : OP_T_BCE_LOGITS_GRAD;
    accumulate(a, n->in[0], bwd(a, g, 3, (int[]){dy, n->in[0], n->in[1]}, &n->shape, n));
}

/* tril / triu: dy where the triangle kept x */
static void rule_t_tril(RULE_ARGS) { accumulate(a, n->in[0], bwd(a, n->op, 1, &dy, &n->shape, n)); }

/* dy where the mask sends (fill 0 elsewhere): op FILL_IF or KEEP_IF */
static int masked(Ad *a, Op op, int dy, int mask, const Node *like)
{
    const int d = bwd(a, op, 2, (int[]){dy, mask}, &like->shape, like);
    a->g->n[d]->ten.lo = 0;
    return d;
}

/* where(c, x, y): dy to x where c holds, to y elsewhere */
static void rule_t_where(RULE_ARGS)
{
    for (int k = 1; k < 3; k++)
        if (a->needs[n->in[k]])
            accumulate(a, n->in[k], unbroadcast(a, masked(a, k == 1 ? OP_T_KEEP_IF : OP_T_FILL_IF, dy, n->in[0], n),
                                                shape_of(a, n->in[k]), n));
}

/* masked_fill(x, m, v): dy where x was kept; where(m, x, v) alike */
static void rule_t_fill_if(RULE_ARGS)
{
    accumulate(a, n->in[0], unbroadcast(a, masked(a, n->op, dy, n->in[1], n), shape_of(a, n->in[0]), n));
}

/* gather: each dy back to the place its index took it from */
static void rule_t_gather(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_T_GATHER_GRAD, 2, (int[]){dy, n->in[1]}, shape_of(a, n->in[0]), n));
}

static void rule_t_embed(RULE_ARGS)
{
    accumulate(a, n->in[0], bwd(a, OP_T_EMBED_GRAD, 2, (int[]){dy, n->in[1]}, shape_of(a, n->in[0]), n));
}

/* C = op(A) op(B): each operand's gradient is a product of dC with the
 * other, oriented as the operand is stored, then summed over the leading
 * dimensions it was broadcast along */
static int product(Ad *a, int x, int y, int tx, int ty, const Node *like)
{
    Shape s;
    if (ten_bmm_shape(shape_of(a, x), shape_of(a, y), tx, ty, &s))
        diag_ice("autodiff: the gradient of bmm %%%d has no shape", like->id);
    const int d = bwd(a, OP_T_BMM, 2, (int[]){x, y}, &s, like);
    a->g->n[d]->ten.ta = tx, a->g->n[d]->ten.tb = ty;
    return d;
}

static void rule_t_bmm(RULE_ARGS)
{
    const int A = n->in[0], B = n->in[1], ta = n->ten.ta, tb = n->ten.tb;
    if (a->needs[A]) {
        const int d = !ta ? product(a, dy, B, 0, !tb, n) : tb ? product(a, B, dy, 1, 1, n) : product(a, B, dy, 0, 1, n);
        accumulate(a, A, unbroadcast(a, d, shape_of(a, A), n));
    }
    if (a->needs[B]) {
        const int d = !tb ? (ta ? product(a, A, dy, 0, 0, n) : product(a, A, dy, 1, 0, n))
                          : (ta ? product(a, dy, A, 1, 1, n) : product(a, dy, A, 1, 0, n));
        accumulate(a, B, unbroadcast(a, d, shape_of(a, B), n));
    }
}

/* attention: each operand's gradient a kernel of its own that recomputes
 * the probabilities from the forward's log-sum-exps (emit_attn.c); the
 * mask has none (attention.c refuses one computed from parameters) */
static void rule_t_attn(RULE_ARGS)
{
    const int in[6] = {dy, n->in[0], n->in[1], n->in[2], n->id, n->attn.mask ? n->in[3] : -1};
    static const Op grads[3] = {OP_T_ATTN_DQ, OP_T_ATTN_DK, OP_T_ATTN_DV};
    if (n->attn.mask && a->needs[n->in[3]])
        diag_ice("autodiff: attention %%%d's mask depends on a parameter", n->id);
    for (int k = 0; k < 3; k++)
        if (a->needs[n->in[k]])
            accumulate(a, n->in[k], bwd(a, grads[k], n->attn.mask ? 6 : 5, in, shape_of(a, n->in[k]), n));
}

/* bwd without the forward's attributes: for the ops a recurrence's
 * gradient is built of, which have none of its own (Node.rnn would read
 * as theirs) */
static int plain(Ad *a, Op op, int nin, const int *in, const Shape *s, const Node *like)
{
    const int d = bwd(a, op, nin, in, s, like);
    Node *dn = a->g->n[d];
    memset(&dn->win, 0, sizeof *dn - offsetof(Node, win));
    return d;
}

/* a T_SLICE or T_PAD along `axis` from `start` (step 1) of x into shape s */
static int along(Ad *a, Op op, int x, const Shape *s, int axis, int64_t start, const Node *like)
{
    const int d = plain(a, op, 1, &x, s, like);
    Node *dn = a->g->n[d];
    dn->ten.axis = axis, dn->ten.start = start, dn->ten.step = 1;
    return d;
}

/* [N, T, F] as the rows [N*T, F] of a product */
static int rows(Ad *a, int x, const Node *like)
{
    const Shape *s = shape_of(a, x);
    return plain(a, OP_RESHAPE, 1, &x, &(Shape){2, {-s->d[1], s->d[2]}}, like);
}

/* h_{t-1} of every step of recurrence n, [N, T, H]: its own rows one step
 * earlier (a step later when it runs in reverse), h0 or zeros at its first
 * step; -1 when that is all zeros */
static int hidden_before(Ad *a, const Node *n, int h0)
{
    const Shape *s = &n->shape;
    const int64_t T = s->d[1], H = s->d[2];
    const int rev = n->rnn.reverse;
    int h0v = -1;
    if (h0 >= 0)
        h0v = plain(a, OP_RESHAPE, 1, &h0, &(Shape){3, {DIM_N, 1, H}}, n);
    if (T == 1)
        return h0v;
    const int part = along(a, OP_T_SLICE, n->id, &(Shape){3, {DIM_N, T - 1, H}}, 1, rev ? 1 : 0, n);
    if (h0v < 0)
        return along(a, OP_T_PAD, part, s, 1, rev ? 0 : 1, n);
    const int c = plain(a, OP_T_CAT, 2, rev ? (int[]){part, h0v} : (int[]){h0v, part}, s, n);
    a->g->n[c]->ten.axis = 1;
    return c;
}

/* a recurrence: its gradient op runs the steps backward and gives the
 * gate inputs' gradient; x W_ih^T + b_ih takes it as any product does,
 * W_hh its sum over the steps, one product of every row's gate gradient
 * with the hidden state before it, and b_hh the sum of those rows */
static void rule_t_rnn(RULE_ARGS)
{
    int k = 2;
    const int bhh = n->rnn.bias ? n->in[k++] : -1, h0 = n->rnn.h0 ? n->in[k++] : -1, c0 = n->rnn.c0 ? n->in[k++] : -1;
    const int dcn = a->cell[n->id];
    if (dy < 0)     /* only c_n reaches the loss: h's gradient is zero */
        dy = plain(a, OP_T_FULL, 0, NULL, &n->shape, n);
    int in[6] = {dy, n->id, n->in[1]}, nin = 3;
    if (h0 >= 0)
        in[nin++] = h0;
    if (c0 >= 0)
        in[nin++] = c0;
    if (dcn >= 0)
        in[nin++] = dcn;
    const int64_t T = n->shape.d[1], H = n->shape.d[2], GH = ten_rnn_gates(n->rnn.cell) * H;
    const int gru = n->rnn.cell == RNN_GRU;
    const Shape gs = {3, {DIM_N, T, GH}};
    const int dg = bwd(a, OP_T_RNN_BWD, nin, in, &(Shape){3, {DIM_N, T, gru ? 2 * GH : GH}}, n);
    a->g->n[dg]->rnn.dcn = dcn >= 0;
    /* an initial state with a gradient (an encoder's final state): the
     * gradient op keeps dh0 (and dc0) after its values */
    const int dh0 = h0 >= 0 && a->needs[h0], dc0 = c0 >= 0 && a->needs[c0];
    a->g->n[dg]->rnn.dstate = dh0 || dc0;
    for (int k = 0; k < 2; k++)
        if (k ? dc0 : dh0) {
            const int d = bwd(a, OP_T_RNN_DSTATE, 1, &dg, &(Shape){2, {DIM_N, H}}, n);
            a->g->n[d]->rnn.dstate = k;
            accumulate(a, k ? c0 : h0, d);
        }
    const int dgx = gru ? along(a, OP_T_SLICE, dg, &gs, 2, 0, n) : dg;
    const int dgh = gru ? along(a, OP_T_SLICE, dg, &gs, 2, GH, n) : dg;
    accumulate(a, n->in[0], dgx);
    if (a->needs[n->in[1]]) {
        const int hb = hidden_before(a, n, h0);
        if (hb >= 0)    /* else W_hh meets only zeros: no gradient */
            accumulate(a, n->in[1], plain(a, OP_MM_TN, 2, (int[]){rows(a, dgh, n), rows(a, hb, n)},
                                          &(Shape){2, {GH, H}}, n));
    }
    if (bhh >= 0 && a->needs[bhh])
        accumulate(a, bhh, plain(a, OP_SUM_ROWS, 1, (int[]){rows(a, dgh, n)}, shape_of(a, bhh), n));
}

/* the LSTM's last cell state: its gradient enters the recurrence's last
 * step as dc, an input of the recurrence's gradient (rule_t_rnn, which
 * runs after this one: its node is earlier) */
static void rule_t_rnn_cn(RULE_ARGS)
{
    const int r = n->in[0];
    if (!a->needs[r])
        return;
    a->cell[r] = a->cell[r] < 0 ? dy : bwd(a, OP_ADD, 2, (int[]){a->cell[r], dy}, &n->shape, n);
}

#define NO_RULE NULL
#define STOP rule_stop
#define RULE(x) rule_##x
/* bn_stats, bn_gstats: differentiated by bn_apply's rule */
static void rule_stop(RULE_ARGS) { (void)a, (void)n, (void)dy; }

static void (*const rules[OP_COUNT])(RULE_ARGS) = {
#define X(name, arity, kind, text, formula, fuse, flops, rd, wr, ad, eval) ad,
#include "ops.def"
#undef X
};

static void rule(Ad *a, const Node *n, int dy)
{
    if (!rules[n->op])
        diag_ice("autodiff: no rule for %s (%%%d)", op_text[n->op], n->id);
    rules[n->op](a, n, dy);
}

/* The gradient op of a loss (ops.def's loss rows): the loss and its
 * gradient share the node's attributes (reduction, smoothing, delta,
 * weights), which bwd copies. */
static Op loss_grad_op(const Node *l)
{
    switch (l->op) {
    case OP_CE_LOSS: return OP_CE_GRAD;
    case OP_MSE_LOSS: return OP_MSE_GRAD;
    case OP_L1_LOSS: return OP_L1_GRAD;
    case OP_SMOOTH_L1_LOSS: return OP_SMOOTH_L1_GRAD;
    case OP_HUBER_LOSS: return OP_HUBER_GRAD;
    case OP_BCE_LOSS: return OP_BCE_GRAD;
    default: diag_ice("ad_grad: %s cannot seed its own gradient", op_text[l->op]);
    }
}

void ad_grad(Graph *g, int y, int dy, const int *wrt, int nwrt, int *out)
{
    Ad a = {g, util_alloc(sizeof(int) * (size_t)(g->nn + 1)), util_alloc((size_t)g->nn + 1),
            util_alloc(sizeof(int) * (size_t)(g->nn + 1))};
    int n0 = g->nn;         /* nodes added from here on are backward nodes */
    for (int i = 0; i < nwrt; i++)
        a.needs[wrt[i]] = 1;
    for (int i = 0; i < n0; i++) {
        a.grad[i] = a.cell[i] = -1;
        for (int k = 0; k < g->n[i]->nin; k++)
            a.needs[i] |= a.needs[g->n[i]->in[k]];
        if (g->n[i]->dt == DT_I64 || g->n[i]->dt == DT_BOOL)
            a.needs[i] = 0;     /* an index or a mask: no gradient flows through it */
    }
    /* grad[] only ever holds ids of nodes that existed at entry or were
     * created here; it is indexed by pre-existing ids only. */
    if (dy >= 0) {
        a.grad[y] = dy;
    } else {
        /* A loss seeds itself: its gradient op already is d(reduced loss)/d logits. */
        Node *l = g->n[y];
        Node *lg = g->n[l->in[0]];
        int d = bwd(&a, loss_grad_op(l), 2, l->in, &lg->shape, l);
        accumulate(&a, l->in[0], d);
    }
    for (int i = (dy >= 0 ? y : y - 1); i >= 0; i--) {
        if ((a.grad[i] < 0 && a.cell[i] < 0) || !a.needs[i] || g->n[i]->nin == 0)
            continue;
        rule(&a, g->n[i], a.grad[i]);
    }
    for (int i = 0; i < nwrt; i++)
        out[i] = a.grad[wrt[i]];
}

/* a metric's row op reads the labels as the loss does */
static void loss_attrs(Node *n, const Node *loss)
{
    n->counts = loss->counts;
    n->ignore_on = loss->ignore_on;
    n->ignore = loss->ignore;
}

static void update_params(Program *p);

static int stat_node(Graph *g, Op op, int nin, const int *in, Shape s, Loc loc)
{
    const int id = ir_add(g, op, nin, in, s, DT_F32, loc);
    g->n[id]->phase = PH_LOSS;
    return id;
}

/* 1 where the scores pred [R, C] have their maximum (the first of ties,
 * as torch's argmax) at class index t [R], else 0 */
static int hits(Graph *g, int pred, int t, Loc loc)
{
    const int64_t R = g->n[pred]->shape.d[0];
    const int am = ir_add(g, OP_T_ARGMAX, 1, &pred, (Shape){2, {R, 1}}, DT_I64, loc);
    g->n[am]->ten.axes = 2;
    const int amv = ir_add(g, OP_RESHAPE, 1, &am, (Shape){1, {R}}, DT_I64, loc);
    const int eq = ir_add(g, OP_T_EQ, 2, (int[]){amv, t}, (Shape){1, {R}}, DT_BOOL, loc);
    return stat_node(g, OP_T_TO_F32, 1, &eq, (Shape){1, {R}}, loc);
}

/* A multi-task model's metrics (its targets a tuple): the class head's
 * correct predictions (argmax, the first of ties as torch's, equal to the
 * target) and the regression head's squared errors, two stat slots in a
 * row (the SUM_ALLs made one after the other) */
static void multitask_stats(Graph *g, Loc loc)
{
    const Node *r = g->n[g->mt_reg_out];
    const int hit = hits(g, g->mt_class_out, g->mt_class_t, loc);
    const int d = stat_node(g, OP_BC_SUB, 2, (int[]){g->mt_reg_out, g->mt_reg_t}, r->shape, loc);
    const int sq = stat_node(g, OP_BC_MUL, 2, (int[]){d, d}, r->shape, loc);
    g->correct_sum = stat_node(g, OP_SUM_ALL, 1, &hit, (Shape){0}, loc);
    g->metric2 = stat_node(g, OP_SUM_ALL, 1, &sq, (Shape){0}, loc);
}

/* the train block's metric: accuracy's correct predictions (one stat
 * slot), macro_f1's counts per output (3 K slots), or mse's squared and
 * absolute errors (two in a row), scaled by
 * the model's outputs per element compared: the runtime divides a
 * regression's sums by the samples times nclass */
static void chosen_metric(Program *p, Loc loc)
{
    Graph *g = p->g;
    const Node *x = g->n[g->metric_pred];
    if (g->metric_kind == METRIC_ACCURACY) {
        const int hit = hits(g, g->metric_pred, g->metric_t, loc);
        g->correct_sum = stat_node(g, OP_SUM_ALL, 1, &hit, (Shape){0}, loc);
        return;
    }
    if (g->metric_kind == METRIC_MACRO_F1) {   /* each output's TP, FP, FN, as the one-line BCE's */
        g->correct_sum = stat_node(g, OP_ML_STATS, 2, (int[]){g->metric_pred, g->metric_t},
                                   ir_shape(2, 3, x->shape.d[1]), loc);
        return;
    }
    const double scale = (double)p->nclass / (double)ir_row_elems(&x->shape);
    const int d = stat_node(g, OP_BC_SUB, 2, (int[]){g->metric_pred, g->metric_t}, x->shape, loc);
    int sq = stat_node(g, OP_BC_MUL, 2, (int[]){d, d}, x->shape, loc), ab = stat_node(g, OP_T_ABS, 1, &d, x->shape, loc);
    sq = stat_node(g, OP_T_AFFINE, 1, &sq, x->shape, loc);
    g->n[sq]->ten.lo = scale;
    ab = stat_node(g, OP_T_AFFINE, 1, &ab, x->shape, loc);
    g->n[ab]->ten.lo = scale;
    g->correct_sum = stat_node(g, OP_SUM_ALL, 1, &sq, (Shape){0}, loc);
    g->metric2 = stat_node(g, OP_SUM_ALL, 1, &ab, (Shape){0}, loc);
}

/* A loss block's loss is a 0-d tensor, the step's value. Its stat is that
 * value times the targets the step has (its rows, or its positions), so
 * the epoch's loss is each step's value weighted by its batch, summed over
 * the ranks and divided by the samples (or positions); the metric reads
 * the first output as a one-line loss's would. Returns the gradient's
 * seed, d loss / d loss = 1 (S under fp16). */
static int block_stats(Program *p)
{
    Graph *g = p->g;
    const Loc loc = g->n[g->loss]->loc;
    const Shape rows = {1, {g->n[g->logits]->shape.d[0]}};     /* [N], or [N*T] positions */
    const int ones = stat_node(g, OP_T_FULL, 0, NULL, rows, loc);
    g->n[ones]->ten.lo = 1;
    const int count = stat_node(g, OP_T_SUM, 1, &ones, ir_shape(1, 1), loc);
    g->n[count]->ten.axes = 1;
    const int weighted = stat_node(g, OP_BC_MUL, 2, (int[]){g->loss, count}, ir_shape(1, 1), loc);
    g->loss_sum = stat_node(g, OP_SUM_ALL, 1, &weighted, (Shape){0}, loc);
    if (g->metric_kind) {
        chosen_metric(p, loc);
    } else if (g->mt_class_out >= 0) {
        multitask_stats(g, loc);
    } else if (p->target == RT_TGT_CLASS) {
        int labels = g->labels;
        if (g->n[labels]->shape.rank != 1)     /* [N, T]: a class at each position, as the logits' rows */
            labels = ir_add(g, OP_RESHAPE, 1, &labels, rows, DT_I32, loc);
        const int c = stat_node(g, OP_CORRECT, 2, (int[]){g->logits, labels}, rows, loc);
        g->n[c]->counts = p->positions > 1;
        g->correct_sum = stat_node(g, OP_SUM_ALL, 1, &c, (Shape){0}, loc);
        if (p->positions > 1) {     /* accuracy over the positions, the loss's weights */
            const int k = stat_node(g, OP_COUNTED, 2, (int[]){g->logits, labels}, rows, loc);
            g->n[k]->counts = 1;
            g->count_sum = stat_node(g, OP_SUM_ALL, 1, &k, (Shape){0}, loc);
        }
    } else {    /* the regression's errors against y, or the sample */
        const int t = p->target == RT_TGT_INPUT
                      ? ir_add(g, OP_RESHAPE, 1, &g->images, ir_shape(2, DIM_N, p->nclass), DT_F32, loc) : g->labels;
        g->correct_sum = stat_node(g, OP_REG_STATS, 2, (int[]){g->logits, t}, ir_shape(1, 2), loc);
    }
    /* fp16: d (S loss) / d loss = S, so every gradient carries the scale
     * that the runtime unscales and checks, as the one-line losses' do */
    const int seed = ir_add(g, p->train.precision == RT_PREC_FP16 ? OP_T_LOSS_SCALE : OP_T_FULL, 0, NULL, (Shape){0}, DT_F32, loc);
    g->n[seed]->ten.lo = 1;
    g->n[seed]->phase = PH_BWD;
    return seed;
}

void ad_train_step(Program *p)
{
    Graph *g = p->g;
    Loc loc = g->n[g->loss]->loc;
    g->grad = util_alloc(sizeof(int) * (size_t)(g->nparam + 1));
    if (p->train.loss_block) {
        ad_grad(g, g->loss, block_stats(p), g->params, g->nparam, g->grad);
        update_params(p);
        return;
    }
    g->loss_sum = stat_node(g, OP_SUM_ALL, 1, &g->loss, (Shape){0}, loc);
    /* the evaluation's metric sums follow the task: accuracy of classes,
     * per-output counts of a multi-label classifier, errors of regression */
    const Node *l = g->n[g->loss];
    if (p->target == RT_TGT_CLASS) {
        int c = stat_node(g, OP_CORRECT, 2, (int[]){g->logits, g->labels}, l->shape, loc);
        g->correct_sum = stat_node(g, OP_SUM_ALL, 1, &c, (Shape){0}, loc);
        loss_attrs(g->n[c], l);
    } else if (p->train.loss == LOSS_BCE_LOGITS) {
        g->correct_sum = stat_node(g, OP_ML_STATS, 2, (int[]){g->logits, g->labels}, ir_shape(2, 3, p->nclass), loc);
    } else {    /* the loss's targets: the labels, or an autoencoder's samples */
        g->correct_sum = stat_node(g, OP_REG_STATS, 2, (int[]){g->logits, g->n[g->loss]->in[1]}, ir_shape(1, 2), loc);
    }
    /* a loss over positions, or one that ignores a target: its mean (the
     * step's, the epoch's, the accuracy's) divides by the targets counted */
    if (l->counts) {
        int c = stat_node(g, OP_COUNTED, 2, (int[]){g->logits, g->labels}, l->shape, loc);
        loss_attrs(g->n[c], l);
        g->count_sum = stat_node(g, OP_SUM_ALL, 1, &c, (Shape){0}, loc);
    }

    ad_grad(g, g->loss, -1, g->params, g->nparam, g->grad);
    update_params(p);
}

/* Optimizer: one in-place update per parameter that got a gradient (a
 * parameter forward never reads keeps its value, as in PyTorch), in
 * reverse order: the order their gradients (and buckets) are ready. */
static void update_params(Program *p)
{
    Graph *g = p->g;
    const TrainCfg *t = &p->train;
    g->opt_op = t->optimizer == OPT_ADAM ? OP_ADAM : t->optimizer == OPT_ADAMW ? OP_ADAMW
              : t->optimizer == OPT_RMSPROP ? OP_RMSPROP : t->optimizer == OPT_ADAGRAD ? OP_ADAGRAD
              : t->momentum != 0.0 ? OP_SGD_MOMENTUM : OP_SGD;
    g->opt = (OptHyper){t->momentum, t->dampening, t->weight_decay, t->nesterov, t->beta1, t->beta2, t->eps,
                        t->amsgrad, t->alpha, t->centered, t->lr_decay, t->init_acc};
    g->prec = t->precision;
    g->updates = util_alloc(sizeof(int) * (size_t)(g->nparam + 1));
    /* a parameter read through a view (Conv1d's weight as 4-d): its
     * gradient a node of its own, which the slab holds; all before the
     * first update, which the others may join */
    for (int i = g->nparam - 1; i >= 0; i--)
        if (g->grad[i] >= 0 && op_kind[g->n[g->grad[i]]->op] == K_VIEW) {
            const Node *w = g->n[g->params[i]];
            g->grad[i] = ir_add(g, OP_BC_COPY, 1, &g->grad[i], w->shape, DT_F32, w->loc);
            g->n[g->grad[i]]->phase = PH_BWD;
        }
    for (int i = g->nparam - 1; i >= 0; i--) {
        g->updates[i] = -1;
        int d = g->grad[i], w = g->params[i];
        if (d < 0)
            continue;
        if (g->n[d]->grad_of >= 0 || op_kind[g->n[d]->op] == K_PARAM)
            diag_ice("autodiff: gradient of %s is not a fresh node", g->n[w]->name);
        g->n[d]->grad_of = w;
        int u = ir_add(g, g->opt_op, 2, (int[]){w, d}, g->n[w]->shape, DT_F32, g->n[w]->loc);
        g->n[u]->phase = PH_OPT;
        g->updates[i] = u;
    }
}
