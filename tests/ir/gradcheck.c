/* gradcheck.c: every autodiff rule against float64 central differences.
 *
 * A small reference interpreter evaluates the graph IR in double; for
 * each op, a graph y = op(inputs) gets L = sum(w * y) with fixed random w
 * (passed to ad_grad as the seed dy = w), and the gradient nodes autodiff
 * appends are evaluated and compared with (L(x+h) - L(x-h)) / 2h per
 * element. The loss op is checked the same way with its own seed, for
 * each reduction, inside a two-layer network. The image ops (conv2d,
 * batch norm in train mode, pooling) are checked on small [N, C, H, W]
 * inputs with strides, padding, dilation and groups; the interpreter
 * computes their gradients the plain way (scatter loops) in double. The
 * recurrences (LSTM, GRU, RNN tanh / relu, T_RNN) run PyTorch's cells and
 * their back-through-time gradient in double, the buffer holding after h
 * the saved gates and states as the kernels lay them out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"
#include "dropout_rng.h"

#define BATCH 3

CDDP_DROP_RNG(static inline)    /* the kernels' own mask stream */
/* the (seed, rank, step) the dropout checks run at: any fixed step gives a
 * fixed mask, so the function is differentiable there */
#define DROP_SEED 3407ull
#define DROP_RANK 1
#define DROP_STEP 12

typedef struct Val {
    double *v;
    int64_t n;
} Val;

static Graph *g;
static Val *val;
static int *lab;

static int64_t size_of(int id) { return ir_numel(&g->n[id]->shape, BATCH); }
/* a dimension's extent: the batch (DIM_N) or k samples a row (-k: the
 * rows [N*T, F] a recurrence's gradient takes its products over) */
static int64_t dim(int64_t d) { return IR_IS_BATCH(d) ? BATCH * ir_batch_mul(d) : d; }

/* [N, C, H, W] element (i, c, h, w) of a shape */
static int64_t at4(const Shape *s, int64_t i, int64_t c, int64_t h, int64_t w)
{
    return ((i * s->d[1] + c) * s->d[2] + h) * s->d[3] + w;
}

/* The row normalizations from their definitions, per sample row in
 * double: softmax exp(x) / sum exp(x), log_softmax x - log sum exp(x),
 * layer_norm (x - mean) / sqrt(var + eps); the gradients as the
 * Jacobian-vector products of those (y the forward's output; layer_norm's
 * from its input x, b). */
static void eval_norm(const Node *n, double *y, const double *a, const double *b)
{
    int64_t C = dim(n->shape.d[1]);
    for (int64_t i = 0; i < BATCH; i++) {
        const double *x = a + i * C, *v = b ? b + i * C : NULL;
        double *o = y + i * C, s = 0, q = 0;
        switch (n->op) {
        case OP_SOFTMAX: case OP_LOG_SOFTMAX:
            for (int64_t j = 0; j < C; j++) s += exp(x[j]);
            for (int64_t j = 0; j < C; j++) o[j] = n->op == OP_SOFTMAX ? exp(x[j]) / s : x[j] - log(s);
            break;
        case OP_SOFTMAX_GRAD:       /* J = diag(y) - y y^T */
            for (int64_t j = 0; j < C; j++) s += x[j] * v[j];
            for (int64_t j = 0; j < C; j++) o[j] = v[j] * x[j] - v[j] * s;
            break;
        case OP_LOG_SOFTMAX_GRAD:   /* J = I - 1 softmax^T, softmax = exp(y) */
            for (int64_t j = 0; j < C; j++) s += x[j];
            for (int64_t j = 0; j < C; j++) o[j] = x[j] - exp(v[j]) * s;
            break;
        case OP_LAYER_NORM: {
            for (int64_t j = 0; j < C; j++) s += x[j];
            double mean = s / (double)C;
            for (int64_t j = 0; j < C; j++) q += (x[j] - mean) * (x[j] - mean);
            double r = 1 / sqrt(q / (double)C + n->bn.eps);
            for (int64_t j = 0; j < C; j++) o[j] = (x[j] - mean) * r;
            break;
        }
        default: {  /* layer_norm_dx: the full Jacobian of xhat, applied to dy */
            for (int64_t j = 0; j < C; j++) s += v[j];
            double mean = s / (double)C;
            for (int64_t j = 0; j < C; j++) q += (v[j] - mean) * (v[j] - mean);
            double var = q / (double)C, r = 1 / sqrt(var + n->bn.eps);
            for (int64_t k = 0; k < C; k++) {
                double acc = 0;
                for (int64_t j = 0; j < C; j++) {
                    /* d xhat_j / d x_k = r (delta_jk - 1/C) - (x_j - mean) r^3 (x_k - mean) / C */
                    double d = r * ((j == k) - 1.0 / (double)C) - (v[j] - mean) * r * r * r * (v[k] - mean) / (double)C;
                    acc += x[j] * d;
                }
                o[k] = acc;
            }
            break;
        }
        }
    }
}

/* Convolution by its definition, and its gradients by scattering each
 * output's contribution back: the plain loops, no im2col. */
static void eval_conv(const Node *n, double *y, const double *a, const double *b)
{
    const Shape *xs, *ws, *ys;
    const double *x = NULL, *w = NULL, *dy = NULL;
    if (n->op == OP_CONV2D) {
        xs = &g->n[n->in[0]]->shape, ws = &g->n[n->in[1]]->shape, ys = &n->shape, x = a, w = b;
    } else if (n->op == OP_CONV2D_DX) {
        ys = &g->n[n->in[0]]->shape, ws = &g->n[n->in[1]]->shape, xs = &n->shape, dy = a, w = b;
    } else {
        ys = &g->n[n->in[0]]->shape, xs = &g->n[n->in[1]]->shape, ws = &n->shape, dy = a, x = b;
    }
    const Window *v = &n->win;
    int64_t O = ys->d[1], CG = ws->d[1], OG = O / v->groups;
    memset(y, 0, sizeof(double) * (size_t)size_of(n->id));
    for (int64_t i = 0; i < BATCH; i++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oh = 0; oh < ys->d[2]; oh++)
                for (int64_t ow = 0; ow < ys->d[3]; ow++)
                    for (int64_t cl = 0; cl < CG; cl++)
                        for (int64_t ki = 0; ki < v->kh; ki++)
                            for (int64_t kj = 0; kj < v->kw; kj++) {
                                int64_t ih = oh * v->sh - v->ph + ki * v->dh, iw = ow * v->sw - v->pw + kj * v->dw;
                                if (ih < 0 || ih >= xs->d[2] || iw < 0 || iw >= xs->d[3])
                                    continue;
                                int64_t xi = at4(xs, i, o / OG * CG + cl, ih, iw), wi = at4(ws, o, cl, ki, kj);
                                int64_t yi = at4(ys, i, o, oh, ow);
                                if (n->op == OP_CONV2D)
                                    y[yi] += x[xi] * w[wi];
                                else if (n->op == OP_CONV2D_DX)
                                    y[xi] += dy[yi] * w[wi];
                                else
                                    y[wi] += dy[yi] * x[xi];
                            }
}

/* Batch norm's ops outside its passes: the channel sum, the normalization
 * and the weight's gradient, by definition. */
static void eval_bn(const Node *n, double *y)
{
    int xin = n->op == OP_BN_DW ? 1 : 0;
    const Shape *xs = &g->n[n->in[xin]]->shape;
    int64_t C = xs->d[1], HW = xs->d[2] * xs->d[3];
    const double *in0 = val[n->in[0]].v, *x = val[n->in[xin]].v;
    const double *st = n->op == OP_SUM_CHAN ? NULL : val[n->in[n->op == OP_BN_APPLY ? 1 : 2]].v;
    for (int64_t c = 0; c < C; c++) {
        double s = 0, sdyx = 0, mean = st ? st[c] : 0, invstd = st ? 1 / sqrt(st[C + c] + n->bn.eps) : 0;
        for (int64_t i = 0; i < BATCH; i++)
            for (int64_t k = (i * C + c) * HW; k < (i * C + c + 1) * HW; k++) {
                s += in0[k];
                if (n->op == OP_BN_DW)
                    sdyx += in0[k] * (x[k] - mean) * invstd;
            }
        if (n->op == OP_SUM_CHAN) {
            y[c] = s;
        } else if (n->op == OP_BN_DW) {
            y[c] = sdyx;
        } else {
            const double *w = val[n->in[2]].v, *bb = val[n->in[3]].v;
            for (int64_t i = 0; i < BATCH; i++)
                for (int64_t k = (i * C + c) * HW; k < (i * C + c + 1) * HW; k++)
                    y[k] = (x[k] - mean) * invstd * w[c] + bb[c];
        }
    }
}

/* Batch norm's passes: the channel's means over this batch, the
 * statistics from them, and the input gradient through them. Under
 * SyncBatchNorm (bn.sync), for WORLD ranks that all hold this same batch:
 * a sum over the ranks is WORLD times the value, and a mean over the ranks
 * divides that by WORLD. With identical ranks the result must be plain
 * batch norm's, so a lost or doubled factor of the world size shows. */
#define WORLD 2
static void eval_bn_pass(const Node *n, double *y)
{
    if (n->op == OP_ALLREDUCE) {
        for (int64_t k = 0; k < size_of(n->id); k++)
            y[k] = WORLD * val[n->in[0]].v[k];
        return;
    }
    int xin = n->op == OP_BN_DPART || n->op == OP_BN_DX ? 1 : 0;
    const Shape *xs = &g->n[n->in[xin]]->shape;
    int64_t C = xs->d[1], HW = xs->d[2] * xs->d[3];
    double M = (double)(BATCH * HW), W = n->bn.sync ? WORLD : 1;
    const double *in0 = val[n->in[0]].v, *x = val[n->in[xin]].v;
    for (int64_t c = 0; c < C; c++) {
        if (n->op == OP_BN_STATS) {
            y[c] = val[n->in[3]].v[c] / W;
            y[C + c] = val[n->in[4]].v[c] / W;
            continue;
        }
        const double *st = n->op == OP_BN_SQDEV || n->op == OP_MEAN_CHAN ? NULL : val[n->in[2]].v;
        double mean = st ? st[c] : n->op == OP_MEAN_CHAN ? 0 : val[n->in[1]].v[c] / W;
        double invstd = st ? 1 / sqrt(st[C + c] + n->bn.eps) : 0;
        double q = 0, sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < BATCH; i++)
            for (int64_t k = (i * C + c) * HW; k < (i * C + c + 1) * HW; k++) {
                q += (x[k] - mean) * (x[k] - mean);
                sdy += in0[k];
                sdyx += in0[k] * (x[k] - mean) * invstd;
            }
        if (n->op == OP_MEAN_CHAN) {
            y[c] = sdy / M;
        } else if (n->op == OP_BN_SQDEV) {
            y[c] = q / M;
        } else if (n->op == OP_BN_DPART) {
            y[c] = sdy / M;
            y[C + c] = sdyx / M;
        } else {    /* BN_DX */
            const double *w = val[n->in[3]].v, *means = val[n->in[4]].v;
            for (int64_t i = 0; i < BATCH; i++)
                for (int64_t k = (i * C + c) * HW; k < (i * C + c + 1) * HW; k++)
                    y[k] = w[c] * invstd * (in0[k] - means[c] / W - (x[k] - mean) * invstd * means[C + c] / W);
        }
    }
}

/* Pooling by definition; gradients scattered to the first maximum (or
 * evenly over the window, zero padding counted) of each output. */
static void eval_pool(const Node *n, double *y, const double *a, const double *b)
{
    int grad = n->op == OP_MAXPOOL_DX || n->op == OP_AVGPOOL_DX;
    const Shape *xs = grad ? &n->shape : &g->n[n->in[0]]->shape, *ys = grad ? &g->n[n->in[0]]->shape : &n->shape;
    const double *x = n->op == OP_MAXPOOL_DX ? b : a;
    const Window *v = &n->win;
    memset(y, 0, sizeof(double) * (size_t)size_of(n->id));
    for (int64_t i = 0; i < BATCH; i++)
        for (int64_t c = 0; c < xs->d[1]; c++)
            for (int64_t oh = 0; oh < ys->d[2]; oh++)
                for (int64_t ow = 0; ow < ys->d[3]; ow++) {
                    int64_t best = -1, yi = at4(ys, i, c, oh, ow);
                    double s = 0;
                    for (int64_t ih = oh * v->sh - v->ph; ih < oh * v->sh - v->ph + v->kh; ih++)
                        for (int64_t iw = ow * v->sw - v->pw; iw < ow * v->sw - v->pw + v->kw; iw++) {
                            if (ih < 0 || ih >= xs->d[2] || iw < 0 || iw >= xs->d[3])
                                continue;
                            int64_t xi = at4(xs, i, c, ih, iw);
                            if (n->op == OP_AVGPOOL_DX)
                                y[xi] += a[yi] / (v->kh * v->kw);
                            else if (n->op == OP_AVGPOOL)
                                s += x[xi];
                            else if (best < 0 || x[xi] > x[best])
                                best = xi;
                        }
                    if (n->op == OP_AVGPOOL)
                        y[yi] = s / (v->kh * v->kw);
                    else if (n->op == OP_MAXPOOL)
                        y[yi] = x[best];
                    else if (n->op == OP_MAXPOOL_DX)
                        y[best] += a[yi];
                }
}

/* The losses of float targets from their definitions (not from ops.def's
 * stable formulas): BCE as -(pw t log s + (1 - t) log(1 - s)), s the
 * sigmoid; each sample's loss the sum of its K terms (their mean under
 * reduction mean); the gradients d(reduced loss)/dx. */
static void eval_float_loss(const Node *n, double *y, const double *x, const double *t)
{
    int64_t K = g->n[n->in[0]]->shape.d[1];
    double bd = n->delta, scale = n->red == RED_MEAN ? 1.0 / (double)(BATCH * K) : 1.0;
    for (int64_t i = 0; i < BATCH; i++) {
        double row = 0;
        for (int64_t j = 0; j < K; j++) {
            int64_t k = i * K + j;
            double d = x[k] - t[k], ad = fabs(d), pw = n->nw ? n->w[j] : 1, sg = 1 / (1 + exp(-x[k])), v, dv;
            switch (n->op) {
            case OP_MSE_LOSS: case OP_MSE_GRAD: v = d * d, dv = 2 * d; break;
            case OP_L1_LOSS: case OP_L1_GRAD: v = ad, dv = d > 0 ? 1 : -1; break;
            case OP_SMOOTH_L1_LOSS: case OP_SMOOTH_L1_GRAD:
                v = ad < bd ? 0.5 * d * d / bd : ad - 0.5 * bd, dv = ad < bd ? d / bd : d > 0 ? 1 : -1;
                break;
            case OP_HUBER_LOSS: case OP_HUBER_GRAD:
                v = ad < bd ? 0.5 * d * d : bd * (ad - 0.5 * bd), dv = ad < bd ? d : d > 0 ? bd : -bd;
                break;
            default:
                v = -(pw * t[k] * log(sg) + (1 - t[k]) * log(1 - sg)), dv = sg * (pw * t[k] + 1 - t[k]) - pw * t[k];
                break;
            }
            row += v;
            if (n->shape.rank == 2)
                y[k] = dv * scale;
        }
        if (n->shape.rank == 1)
            y[i] = n->red == RED_MEAN ? row / (double)K : row;
    }
}

/* cross_entropy(weight = w, label_smoothing = e) as torch defines it:
 * sample i's loss (1 - e) w[y] (-log p[y]) + e / C sum_c w_c (-log p_c),
 * reduction mean dividing the batch's sum by sum_i w[y_i]. The loss node
 * holds each sample's loss times BATCH / sw under mean (the batch's mean
 * is then torch's loss); the gradient node d(reduced loss)/dx, here by
 * differentiating the definition: (1 - e) w[y] (p_j - [j = y]) + e / C
 * (sum_c w_c p_j - w_j), over sw under mean. */
static void eval_weighted_ce(const Node *n, double *y, const double *a, int64_t C)
{
    double sw = 0, e = n->smooth, W = 0;
    for (int64_t i = 0; i < BATCH; i++)
        sw += n->w[lab[i]];
    for (int64_t c = 0; c < C; c++)
        W += n->w[c];
    for (int64_t i = 0; i < BATCH; i++) {
        const double *x = a + i * C;
        double mx = x[0], se = 0;
        for (int64_t j = 1; j < C; j++) mx = x[j] > mx ? x[j] : mx;
        for (int64_t j = 0; j < C; j++) se += exp(x[j] - mx);
        double lse = mx + log(se), L = (1 - e) * n->w[lab[i]] * (lse - x[lab[i]]);
        for (int64_t c = 0; c < C; c++)
            L += e / (double)C * n->w[c] * (lse - x[c]);
        if (n->op == OP_CE_LOSS)
            y[i] = n->red == RED_MEAN ? L * BATCH / sw : L;
        else
            for (int64_t j = 0; j < C; j++)
                y[i * C + j] = ((1 - e) * n->w[lab[i]] * (exp(x[j] - lse) - (j == lab[i]))
                                + e / (double)C * (W * exp(x[j] - lse) - n->w[j])) * (n->red == RED_MEAN ? 1 / sw : 1);
    }
}

/* cross_entropy over R rows (a sample's positions) with ignore_index, as
 * torch defines it: row i's loss -log p[y_i] where y_i counts, 0 where it
 * is ignored; the mean divides by the rows counted. The loss node holds
 * each row's loss; the gradient node d(mean)/dx: (p_j - [j = y]) / count
 * on the counted rows, 0 on the others. */
static int counted_rows(const Node *n, int64_t R)
{
    int c = 0;
    for (int64_t i = 0; i < R; i++)
        c += !n->ignore_on || lab[i] != n->ignore;
    return c;
}

static void eval_counted_ce(const Node *n, double *y, const double *a, int64_t C, int64_t R)
{
    const int cnt = counted_rows(n, R);
    for (int64_t i = 0; i < R; i++) {
        const double *x = a + i * C;
        const int in = !n->ignore_on || lab[i] != n->ignore;
        double mx = x[0], se = 0;
        for (int64_t j = 1; j < C; j++) mx = x[j] > mx ? x[j] : mx;
        for (int64_t j = 0; j < C; j++) se += exp(x[j] - mx);
        double lse = mx + log(se);
        if (n->op == OP_CE_LOSS)
            y[i] = in ? lse - x[lab[i]] : 0;
        else
            for (int64_t j = 0; j < C; j++)
                y[i * C + j] = in ? (exp(x[j] - lse) - (j == lab[i])) * (n->red == RED_MEAN ? 1.0 / cnt : 1.0) : 0;
    }
}

/* ---- tensors of any rank: plain index loops over the coordinates ---- */

typedef struct {
    int rank;
    int64_t d[MAX_RANK], st[MAX_RANK];
} Dims;

static Dims dims_of(const Shape *s)
{
    Dims v = {s->rank, {0}, {0}};
    int64_t m = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        v.d[i] = dim(s->d[i]);
        v.st[i] = m;
        m *= v.d[i];
    }
    return v;
}

static void coords(const Dims *v, int64_t e, int64_t *c)
{
    for (int i = v->rank - 1; i >= 0; i--) {
        c[i] = e % v->d[i];
        e /= v->d[i];
    }
}

/* the element of x (dims xv) that broadcasts to result coordinates c */
static int64_t bcast_at(const Dims *xv, const int64_t *c, int rank)
{
    int64_t o = 0;
    for (int j = 0; j < xv->rank; j++)
        o += (xv->d[j] == 1 ? 0 : c[j + rank - xv->rank]) * xv->st[j];
    return o;
}

static double tensor_formula(const Node *n, const double *v)
{
    const double lo = n->ten.lo, hi = n->ten.hi;
    switch (n->op) {
    case OP_BC_ADD: return v[0] + v[1];
    case OP_BC_SUB: return v[0] - v[1];
    case OP_BC_MUL: return v[0] * v[1];
    case OP_BC_DIV: return v[0] / v[1];
    case OP_BC_DIV_GRAD: return -v[0] * v[1] / (v[2] * v[2]);
    case OP_BC_COPY: return v[0];
    case OP_BC_SCALE: return v[0] / n->ten.scale;
    case OP_BC_MAX_GRAD: return v[1] == v[2] ? v[0] / v[3] : 0;
    case OP_T_EXP: return exp(v[0]);
    case OP_T_LOG: return log(v[0]);
    case OP_T_SQRT: return sqrt(v[0]);
    case OP_T_SQRT_GRAD: return lo != 0 && v[1] == 0 ? 0 : v[0] / (2 * v[1]);
    case OP_T_RSQRT: return 1 / sqrt(v[0]);
    case OP_T_RSQRT_GRAD: return -0.5 * v[0] * v[1] * v[1] * v[1];
    case OP_T_ABS: return fabs(v[0]);
    case OP_T_ABS_GRAD: return v[1] > 0 ? v[0] : v[1] < 0 ? -v[0] : 0;
    case OP_T_POW: return pow(v[0], lo);
    case OP_T_POW_GRAD: return v[0] * lo * pow(v[1], lo - 1);
    case OP_T_CLAMP: return v[0] < lo ? lo : v[0] > hi ? hi : v[0];
    case OP_T_CLAMP_GRAD: return v[1] >= lo && v[1] <= hi ? v[0] : 0;
    case OP_T_AFFINE: return v[0] * lo + hi;
    case OP_T_FULL: return lo;
    case OP_T_MAXIMUM: return v[0] > v[1] ? v[0] : v[1];
    case OP_T_MINIMUM: return v[0] < v[1] ? v[0] : v[1];
    case OP_T_MAXIMUM_GRAD: return v[1] > v[2] ? v[0] : v[1] == v[2] ? v[0] / 2 : 0;
    case OP_T_MINIMUM_GRAD: return v[1] < v[2] ? v[0] : v[1] == v[2] ? v[0] / 2 : 0;
    case OP_T_WHERE: return v[0] != 0 ? v[1] : v[2];
    case OP_T_FILL_IF: return v[1] != 0 ? lo : v[0];
    case OP_T_KEEP_IF: return v[1] != 0 ? v[0] : lo;
    default:
        fprintf(stderr, "gradcheck: no formula for %s\n", op_text[n->op]);
        exit(1);
    }
}

/* Scaled dot-product attention and its gradients from their definitions,
 * in double: per leading coordinate the scores s = q k^T scale (masked),
 * p their softmax; the forward p v; the gradients, with dS = p (dO v^T -
 * rowsum(dO o)): dq = dS k scale, dk = dS^T q scale, dv = p^T dO */
static void eval_attention(const Node *n, double *y)
{
    const int grad = n->op != OP_T_ATTN, b = grad ? 1 : 0;
    const Node *at = grad ? g->n[n->in[4]] : n;
    const Shape *qs = &g->n[n->in[b]]->shape, *ks = &g->n[n->in[b + 1]]->shape;
    const int r = qs->rank;
    const int64_t L = qs->d[r - 2], E = qs->d[r - 1], S = ks->d[r - 2], Ev = at->shape.d[r - 1];
    const int64_t H = ir_numel(qs, BATCH) / (L * E);
    const double *q = val[n->in[b]].v, *k = val[n->in[b + 1]].v, *v = val[n->in[b + 2]].v;
    const double *dO = grad ? val[n->in[0]].v : NULL, *m = at->attn.mask ? val[n->in[grad ? 5 : 3]].v : NULL;
    Shape scs = *qs;
    scs.d[r - 1] = S;
    const Dims scv = dims_of(&scs), mv = m ? dims_of(&g->n[n->in[grad ? 5 : 3]]->shape) : scv;
    double *p = malloc(sizeof(double) * (size_t)(L * S)), *ds = malloc(sizeof(double) * (size_t)(L * S));
    double *o = malloc(sizeof(double) * (size_t)(L * Ev));
    memset(y, 0, sizeof(double) * (size_t)ir_numel(&n->shape, BATCH));
    int64_t c[MAX_RANK];
    for (int64_t e = 0; e < H; e++) {
        for (int64_t i = 0; i < L; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < S; j++) {
                double z = 0;
                for (int64_t a = 0; a < E; a++)
                    z += q[(e * L + i) * E + a] * k[(e * S + j) * E + a];
                z *= at->attn.scale;
                coords(&scv, (e * L + i) * S + j, c);
                const double mk = m ? m[bcast_at(&mv, c, r)] : 1;
                if ((at->attn.causal && j > i) || (at->attn.mask == ATTN_MASK_BOOL && mk == 0))
                    z = -INFINITY;
                else if (at->attn.mask == ATTN_MASK_ADD)
                    z += mk;
                p[i * S + j] = z;
                mx = z > mx ? z : mx;
            }
            for (int64_t j = 0; j < S; j++)
                sum += (p[i * S + j] = exp(p[i * S + j] - mx));
            for (int64_t j = 0; j < S; j++)
                p[i * S + j] /= sum;
            for (int64_t a = 0; a < Ev; a++) {
                double acc = 0;
                for (int64_t j = 0; j < S; j++)
                    acc += p[i * S + j] * v[(e * S + j) * Ev + a];
                o[i * Ev + a] = acc;
            }
        }
        if (!grad) {
            memcpy(y + e * L * Ev, o, sizeof(double) * (size_t)(L * Ev));
            continue;
        }
        for (int64_t i = 0; i < L; i++) {
            double D = 0;
            for (int64_t a = 0; a < Ev; a++)
                D += dO[(e * L + i) * Ev + a] * o[i * Ev + a];
            for (int64_t j = 0; j < S; j++) {
                double dp = 0;
                for (int64_t a = 0; a < Ev; a++)
                    dp += dO[(e * L + i) * Ev + a] * v[(e * S + j) * Ev + a];
                ds[i * S + j] = p[i * S + j] * (dp - D) * at->attn.scale;
            }
        }
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++) {
                if (n->op == OP_T_ATTN_DQ)
                    for (int64_t a = 0; a < E; a++)
                        y[(e * L + i) * E + a] += ds[i * S + j] * k[(e * S + j) * E + a];
                else if (n->op == OP_T_ATTN_DK)
                    for (int64_t a = 0; a < E; a++)
                        y[(e * S + j) * E + a] += ds[i * S + j] * q[(e * L + i) * E + a];
                else
                    for (int64_t a = 0; a < Ev; a++)
                        y[(e * S + j) * Ev + a] += p[i * S + j] * dO[(e * L + i) * Ev + a];
            }
    }
    free(p);
    free(ds);
    free(o);
}

/* ---- recurrences: T_RNN, its gradient T_RNN_BWD, T_RNN_CN ---- */

/* a recurrence's geometry and its inputs' values (NULL: not given) */
typedef struct {
    int cell, X, rev;
    int64_t T, H, GH;
    const double *xw, *whh, *bhh, *h0, *c0;
} Rnn;

static Rnn rnn_of(const Node *r)
{
    Rnn q = {r->rnn.cell, ten_rnn_saved(r->rnn.cell), r->rnn.reverse, r->shape.d[1], r->shape.d[2],
             ten_rnn_gates(r->rnn.cell) * r->shape.d[2], val[r->in[0]].v, val[r->in[1]].v, NULL, NULL, NULL};
    int k = 2;
    if (r->rnn.bias)
        q.bhh = val[r->in[k++]].v;
    if (r->rnn.h0)
        q.h0 = val[r->in[k++]].v;
    if (r->rnn.c0)
        q.c0 = val[r->in[k++]].v;
    return q;
}

/* the step the forward takes k-th (from 0), and the one it took before t */
static int64_t rnn_step(const Rnn *q, int64_t k) { return q->rev ? q->T - 1 - k : k; }
static int64_t rnn_before(const Rnn *q, int64_t t) { return q->rev ? t + 1 : t - 1; }

/* sample i's hidden state before step t (h0 or zeros before the first),
 * and the LSTM's cell state (c0 or zeros; else the step's saved c) */
static const double *rnn_hp(const Rnn *q, const double *h, const double *zero, int64_t i, int64_t t)
{
    if (t == rnn_step(q, 0))
        return q->h0 ? q->h0 + i * q->H : zero;
    return h + (i * q->T + rnn_before(q, t)) * q->H;
}

static const double *rnn_cp(const Rnn *q, const double *sv, const double *zero, int64_t i, int64_t t)
{
    if (t == rnn_step(q, 0))
        return q->c0 ? q->c0 + i * q->H : zero;
    return sv + (i * q->T + rnn_before(q, t)) * q->X * q->H + 4 * q->H;
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* the least |pre-activation| an RNN relu forward met: the differences
 * are only valid away from the kink */
static double rnn_kink = INFINITY;

/* PyTorch's cells, in double, for one row: the gates a = hg + x (hg =
 * W_hh h' + b_hh), then
 *   LSTM  i, f, o = sigmoid, g = tanh; c = f c' + i g; h = o tanh(c)
 *   GRU   r, z = sigmoid; n = tanh(xn + r (W_hn h' + b_hn)); h = (h' - n) z + n
 *   RNN   h = tanh(a) or relu(a)
 * into h and the row's saved floats s (LSTM i, f, g, o, c; GRU r, z, n,
 * W_hn h' + b_hn) */
static void rnn_cell(const Rnn *q, const double *hg, const double *x, const double *hp, const double *cp, double *h,
                     double *s)
{
    const int64_t H = q->H;
    for (int64_t j = 0; j < H; j++) {
        if (q->cell == RNN_LSTM) {
            const double ig = sigm(hg[j] + x[j]), fg = sigm(hg[H + j] + x[H + j]);
            const double gg = tanh(hg[2 * H + j] + x[2 * H + j]), og = sigm(hg[3 * H + j] + x[3 * H + j]);
            const double c = fg * cp[j] + ig * gg;
            h[j] = og * tanh(c);
            s[j] = ig, s[H + j] = fg, s[2 * H + j] = gg, s[3 * H + j] = og, s[4 * H + j] = c;
        } else if (q->cell == RNN_GRU) {
            const double r = sigm(hg[j] + x[j]), z = sigm(hg[H + j] + x[H + j]);
            const double nn = tanh(x[2 * H + j] + r * hg[2 * H + j]);
            h[j] = (hp[j] - nn) * z + nn;
            s[j] = r, s[H + j] = z, s[2 * H + j] = nn, s[3 * H + j] = hg[2 * H + j];
        } else {
            const double a = hg[j] + x[j];
            h[j] = q->cell == RNN_TANH ? tanh(a) : a > 0 ? a : 0;
            if (q->cell == RNN_RELU)
                rnn_kink = fmin(rnn_kink, fabs(a));
        }
    }
}

/* T_RNN: the steps in the forward's order; y holds h [N, T, H], then the
 * saved floats of row n T + t as the kernels lay them out */
static void eval_rnn(const Node *n, double *y)
{
    const Rnn q = rnn_of(n);
    const int64_t T = q.T, H = q.H, GH = q.GH;
    double *sv = y + BATCH * T * H, *hg = malloc(sizeof(double) * (size_t)GH);
    double *zero = calloc((size_t)H, sizeof(double));
    for (int64_t i = 0; i < BATCH; i++)
        for (int64_t k = 0; k < T; k++) {
            const int64_t t = rnn_step(&q, k), row = i * T + t;
            const double *hp = rnn_hp(&q, y, zero, i, t);
            for (int64_t r = 0; r < GH; r++) {
                double acc = q.bhh ? q.bhh[r] : 0;
                for (int64_t j = 0; j < H; j++)
                    acc += q.whh[r * H + j] * hp[j];
                hg[r] = acc;
            }
            rnn_cell(&q, hg, q.xw + row * GH, hp, q.cell == RNN_LSTM ? rnn_cp(&q, sv, zero, i, t) : zero, y + row * H,
                     sv + row * q.X * H);
        }
    free(hg);
    free(zero);
}

/* one row's gate gradients from the derivative of those cells, d what
 * reaches h (dy and the later steps'), dc the LSTM's cell gradient from
 * the later step (then the one to carry), h and s the row's values:
 *   LSTM  dc = d o (1 - tanh^2 c) + dc_later; da_i = dc g i (1 - i),
 *         da_f = dc c' f (1 - f), da_g = dc i (1 - g^2), da_o = d tanh(c) o (1 - o);
 *         dc f carried
 *   GRU   dn = d (1 - z) (1 - n^2); da_r = dn (W_hn h' + b_hn) r (1 - r),
 *         da_z = d (h' - n) z (1 - z): xw's (da_r, da_z, dn) into dg,
 *         W_hh h + b_hh's (da_r, da_z, dn r) into dgh; h' gets d z direct
 *   RNN   d (1 - h^2), or d where h > 0 */
static void rnn_cell_grad(const Rnn *q, const double *d, const double *h, const double *s, const double *hp,
                          const double *cp, double *dc, double *direct, double *dg, double *dgh)
{
    const int64_t H = q->H;
    for (int64_t j = 0; j < H; j++) {
        direct[j] = 0;
        if (q->cell == RNN_LSTM) {
            const double ig = s[j], fg = s[H + j], gg = s[2 * H + j], og = s[3 * H + j], tc = tanh(s[4 * H + j]);
            const double dcj = d[j] * og * (1 - tc * tc) + dc[j];
            dg[j] = dcj * gg * ig * (1 - ig);
            dg[H + j] = dcj * cp[j] * fg * (1 - fg);
            dg[2 * H + j] = dcj * ig * (1 - gg * gg);
            dg[3 * H + j] = d[j] * tc * og * (1 - og);
            dc[j] = dcj * fg;
        } else if (q->cell == RNN_GRU) {
            const double r = s[j], z = s[H + j], nn = s[2 * H + j], hn = s[3 * H + j];
            const double dn = d[j] * (1 - z) * (1 - nn * nn);
            dg[j] = dgh[j] = dn * hn * r * (1 - r);
            dg[H + j] = dgh[H + j] = d[j] * (hp[j] - nn) * z * (1 - z);
            dg[2 * H + j] = dn;
            dgh[2 * H + j] = dn * r;
            direct[j] = d[j] * z;
        } else {
            dg[j] = q->cell == RNN_TANH ? d[j] * (1 - h[j] * h[j]) : h[j] > 0 ? d[j] : 0;
        }
    }
}

/* T_RNN_BWD: the steps in the backward's order, reading the recurrence's
 * buffer (h, then the saved floats); what reaches h_t is dy_t plus the
 * later step's gradients of W_hh h + b_hh times W_hh (plus the GRU's
 * direct h' z); the LSTM's dc starts from dc_n when rnn.dcn gives it.
 * With rnn.dstate what the first step passes back is the initial state's
 * gradient: dh0 [N, H] (the first step's W_hh h gate gradients times
 * W_hh, plus the GRU's direct h0 z) kept after the N T W values, then
 * the LSTM's dc0 [N, H] (dc f at the first step) */
static void eval_rnn_bwd(const Node *n, double *y)
{
    const Node *rn = g->n[n->in[1]];
    const Rnn q = rnn_of(rn);
    const int64_t T = q.T, H = q.H, GH = q.GH, W = q.cell == RNN_GRU ? 2 * GH : GH;
    const double *dy = val[n->in[0]].v, *hs = val[rn->id].v, *sv = hs + BATCH * T * H;
    const double *dcn = n->rnn.dcn ? val[n->in[n->nin - 1]].v : NULL;
    double *d = malloc(sizeof(double) * (size_t)H), *dh = malloc(sizeof(double) * (size_t)H);
    double *dc = malloc(sizeof(double) * (size_t)H), *direct = malloc(sizeof(double) * (size_t)H);
    double *zero = calloc((size_t)H, sizeof(double));
    double *dh0 = y + BATCH * T * W, *dc0 = dh0 + BATCH * H;
    for (int64_t i = 0; i < BATCH; i++) {
        for (int64_t j = 0; j < H; j++)
            dh[j] = 0, dc[j] = dcn ? dcn[i * H + j] : 0;
        for (int64_t k = T - 1; k >= 0; k--) {
            const int64_t t = rnn_step(&q, k), row = i * T + t;
            double *dg = y + row * W, *dgh = dg + (W - GH);
            for (int64_t j = 0; j < H; j++)
                d[j] = dy[row * H + j] + dh[j];
            rnn_cell_grad(&q, d, hs + row * H, sv + row * q.X * H, rnn_hp(&q, hs, zero, i, t),
                          q.cell == RNN_LSTM ? rnn_cp(&q, sv, zero, i, t) : zero, dc, direct, dg, dgh);
            for (int64_t j = 0; j < H; j++) {   /* what reaches the step before */
                double acc = direct[j];
                for (int64_t r = 0; r < GH; r++)
                    acc += dgh[r] * q.whh[r * H + j];
                dh[j] = acc;
            }
        }
        if (n->rnn.dstate)  /* dh, dc now what reaches h0, c0 */
            for (int64_t j = 0; j < H; j++) {
                dh0[i * H + j] = dh[j];
                if (q.cell == RNN_LSTM)
                    dc0[i * H + j] = dc[j];
            }
    }
    free(d);
    free(dh);
    free(dc);
    free(direct);
    free(zero);
}

/* T_RNN_DSTATE: h0's gradient (rnn.dstate 0) or the LSTM's c0's (1),
 * copied from where the recurrence's gradient keeps them */
static void eval_rnn_dstate(const Node *n, double *y)
{
    const Node *b = g->n[n->in[0]];
    const int64_t H = n->shape.d[1], TW = b->shape.d[1] * b->shape.d[2];
    memcpy(y, val[b->id].v + BATCH * (TW + (n->rnn.dstate ? H : 0)), sizeof(double) * (size_t)(BATCH * H));
}

/* the LSTM's last cell state: the saved c of the forward's last step */
static void eval_rnn_cn(const Node *n, double *y)
{
    const Rnn q = rnn_of(g->n[n->in[0]]);
    const double *sv = val[n->in[0]].v + BATCH * q.T * q.H;
    const int64_t last = rnn_step(&q, q.T - 1);
    for (int64_t i = 0; i < BATCH; i++)
        for (int64_t j = 0; j < q.H; j++)
            y[i * q.H + j] = sv[(i * q.T + last) * q.X * q.H + 4 * q.H + j];
}

static void eval_tensor(const Node *n, double *y)
{
    if (ir_is_attention(n->op)) {
        eval_attention(n, y);
        return;
    }
    switch (n->op) {
    case OP_T_RNN: eval_rnn(n, y); return;
    case OP_T_RNN_BWD: eval_rnn_bwd(n, y); return;
    case OP_T_RNN_CN: eval_rnn_cn(n, y); return;
    case OP_T_RNN_DSTATE: eval_rnn_dstate(n, y); return;
    default: break;
    }
    const Dims yv = dims_of(&n->shape);
    const int64_t total = ir_numel(&n->shape, BATCH);
    const double *x = val[n->in[0]].v;
    const Dims xv = dims_of(&g->n[n->in[0]]->shape);
    int64_t c[MAX_RANK];
    switch (n->op) {
    case OP_T_SUM: case OP_T_MEAN: case OP_T_AMAX: case OP_T_AMIN: case OP_T_COUNT_EQ: {
        const int mx = n->op == OP_T_AMAX, mn = n->op == OP_T_AMIN;
        for (int64_t e = 0; e < total; e++)
            y[e] = mx ? -INFINITY : mn ? INFINITY : 0;
        double count = 1;
        for (int i = 0; i < xv.rank; i++)
            if (n->ten.axes & (1u << i))
                count *= (double)xv.d[i];
        for (int64_t e = 0; e < ir_numel(&g->n[n->in[0]]->shape, BATCH); e++) {
            coords(&xv, e, c);
            int64_t o = 0;
            for (int i = 0; i < xv.rank; i++)
                o += (n->ten.axes & (1u << i) ? 0 : c[i]) * yv.st[i];
            const double v = x[e];
            if (mx)
                y[o] = v > y[o] ? v : y[o];
            else if (mn)
                y[o] = v < y[o] ? v : y[o];
            else if (n->op == OP_T_COUNT_EQ)
                y[o] += v == val[n->in[1]].v[o];
            else
                y[o] += n->op == OP_T_MEAN ? v / count : v;
        }
        return;
    }
    case OP_T_PERMUTE:
        for (int64_t e = 0; e < total; e++) {
            coords(&yv, e, c);
            int64_t o = 0;
            for (int d = 0; d < yv.rank; d++)
                o += c[d] * xv.st[n->ten.perm[d]];
            y[e] = x[o];
        }
        return;
    case OP_T_SLICE:
        for (int64_t e = 0; e < total; e++) {
            coords(&yv, e, c);
            c[n->ten.axis] = n->ten.start + c[n->ten.axis] * n->ten.step;
            int64_t o = 0;
            for (int d = 0; d < yv.rank; d++)
                o += c[d] * xv.st[d];
            y[e] = x[o];
        }
        return;
    case OP_T_PAD:
        memset(y, 0, sizeof(double) * (size_t)total);
        for (int64_t e = 0; e < ir_numel(&g->n[n->in[0]]->shape, BATCH); e++) {
            coords(&xv, e, c);
            c[n->ten.axis] = n->ten.start + c[n->ten.axis] * n->ten.step;
            int64_t o = 0;
            for (int d = 0; d < yv.rank; d++)
                o += c[d] * yv.st[d];
            y[o] = x[e];
        }
        return;
    case OP_T_CAT: {
        const Dims bv = dims_of(&g->n[n->in[1]]->shape);
        const int a = n->ten.axis;
        for (int64_t e = 0; e < total; e++) {
            coords(&yv, e, c);
            const int first = c[a] < xv.d[a];
            if (!first)
                c[a] -= xv.d[a];
            int64_t o = 0;
            for (int d = 0; d < yv.rank; d++)
                o += c[d] * (first ? xv.st[d] : bv.st[d]);
            y[e] = first ? x[o] : val[n->in[1]].v[o];
        }
        return;
    }
    case OP_T_TRIL: case OP_T_TRIU:
        for (int64_t e = 0; e < total; e++) {
            coords(&yv, e, c);
            const int64_t d = c[yv.rank - 1] - c[yv.rank - 2];
            y[e] = (n->op == OP_T_TRIL ? d <= n->ten.lo : d >= n->ten.lo) ? x[e] : 0;
        }
        return;
    case OP_T_GATHER: case OP_T_GATHER_GRAD: {
        /* gather: y at c is x at c with the index's value on the axis;
         * its gradient: each dy added at the place its index names */
        const int a = n->ten.axis, grad = n->op == OP_T_GATHER_GRAD;
        const Node *src = grad ? n : g->n[n->in[0]], *res = grad ? g->n[n->in[0]] : n;
        const Dims sv = dims_of(&src->shape), rv = dims_of(&res->shape), iv = dims_of(&g->n[n->in[1]]->shape);
        if (grad)
            memset(y, 0, sizeof(double) * (size_t)total);
        for (int64_t e = 0; e < ir_numel(&res->shape, BATCH); e++) {
            coords(&rv, e, c);
            const int64_t k = (int64_t)val[n->in[1]].v[bcast_at(&iv, c, rv.rank)];
            int64_t o = 0;
            for (int d = 0; d < rv.rank; d++)
                o += (d == a ? k : c[d]) * sv.st[d];
            if (grad)
                y[o] += x[e];
            else
                y[e] = x[o];
        }
        return;
    }
    case OP_T_EMBED: case OP_T_EMBED_GRAD: {
        /* nn.Embedding: y's row p is the weight's row idx[p]; its gradient
         * adds dy's row p to row idx[p], padding_idx's row (ten.lo) none */
        const int grad = n->op == OP_T_EMBED_GRAD;
        const int64_t D = n->shape.d[n->shape.rank - 1], P = val[n->in[1]].n;
        if (grad)
            memset(y, 0, sizeof(double) * (size_t)total);
        for (int64_t p = 0; p < P; p++) {
            const int64_t k = (int64_t)val[n->in[1]].v[p];
            for (int64_t c2 = 0; c2 < D; c2++) {
                if (grad && k != (int64_t)n->ten.lo)
                    y[k * D + c2] += x[p * D + c2];
                else if (!grad)
                    y[p * D + c2] = x[k * D + c2];
            }
        }
        return;
    }
    case OP_T_BMM: {
        const Dims bv = dims_of(&g->n[n->in[1]]->shape);
        const int r = yv.rank;
        const int64_t M = yv.d[r - 2], N = yv.d[r - 1], K = xv.d[xv.rank - (n->ten.ta ? 2 : 1)];
        for (int64_t e = 0; e < total; e++) {
            coords(&yv, e, c);
            const int64_t i = c[r - 2], j = c[r - 1];
            c[r - 2] = c[r - 1] = 0;   /* the leading coordinates; the matrices' below */
            const int64_t oa = bcast_at(&xv, c, r), ob = bcast_at(&bv, c, r);
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += x[oa + (n->ten.ta ? k * M + i : i * K + k)] * val[n->in[1]].v[ob + (n->ten.tb ? j * K + k : k * N + j)];
            y[e] = s;
        }
        return;
    }
    default:
        break;
    }
    Dims ov[MAX_IN];
    for (int k = 0; k < n->nin; k++)
        ov[k] = dims_of(&g->n[n->in[k]]->shape);
    for (int64_t e = 0; e < total; e++) {
        coords(&yv, e, c);
        double v[MAX_IN];
        for (int k = 0; k < n->nin; k++)
            v[k] = val[n->in[k]].v[bcast_at(&ov[k], c, yv.rank)];
        y[e] = tensor_formula(n, v);
    }
}

static void eval_node(int id)
{
    Node *n = g->n[id];
    if (n->op == OP_IMAGES || n->op == OP_PARAM || n->op == OP_LABELS)
        return;     /* inputs: values set by the test */
    /* the values, then what the op saves after them (a recurrence's gates
     * and states) as the kernels' buffers hold it; Val.n counts the values */
    int64_t sz = size_of(id), all = sz + ir_extra_elems(n) * (ir_batched(&n->shape) ? BATCH : 1);
    if (!val[id].v || val[id].n != sz) {
        free(val[id].v);
        val[id].v = calloc((size_t)(all ? all : 1), sizeof(double));
        val[id].n = sz;
    }
    double *y = val[id].v, *a = n->nin > 0 ? val[n->in[0]].v : NULL, *b = n->nin > 1 ? val[n->in[1]].v : NULL;
    const Shape *sa = n->nin > 0 ? &g->n[n->in[0]]->shape : NULL, *sb = n->nin > 1 ? &g->n[n->in[1]]->shape : NULL;
    int64_t M = n->shape.rank > 0 ? dim(n->shape.d[0]) : 1, N = n->shape.rank > 1 ? dim(n->shape.d[1]) : 1;
    switch (n->op) {
    case OP_RESHAPE: memcpy(y, a, sizeof(double) * (size_t)sz); break;
    case OP_MM_NT: case OP_MM_NN: case OP_MM_TN: {
        int64_t K = n->op == OP_MM_TN ? dim(sa->d[0]) : dim(sa->d[1]);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = n->op == OP_MM_TN ? a[k * M + i] : a[i * K + k];
                    double bv = n->op == OP_MM_NT ? b[j * K + k] : b[k * N + j];
                    s += av * bv;
                }
                y[i * N + j] = s;
            }
        break;
    }
    case OP_BIAS_ADD:
        if (n->shape.rank == 4) {   /* per channel over [N, C, H, W] */
            int64_t hw = n->shape.d[2] * n->shape.d[3];
            for (int64_t k = 0; k < sz; k++)
                y[k] = a[k] + b[k / hw % N];
            break;
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                y[i * N + j] = a[i * N + j] + b[j];
        break;
    case OP_ADD: for (int64_t k = 0; k < sz; k++) y[k] = a[k] + b[k]; break;
    case OP_SUB: for (int64_t k = 0; k < sz; k++) y[k] = a[k] - b[k]; break;
    case OP_MUL: for (int64_t k = 0; k < sz; k++) y[k] = a[k] * b[k]; break;
    case OP_AFFINE: for (int64_t k = 0; k < sz; k++) y[k] = a[k] * n->act.a + n->act.b; break;
    case OP_DIV_SCALAR: for (int64_t k = 0; k < sz; k++) y[k] = a[k] / n->act.a; break;
    case OP_RELU: for (int64_t k = 0; k < sz; k++) y[k] = a[k] > 0 ? a[k] : 0; break;
    case OP_RELU_GRAD: for (int64_t k = 0; k < sz; k++) y[k] = b[k] > 0 ? a[k] : 0; break;
    case OP_TANH: for (int64_t k = 0; k < sz; k++) y[k] = tanh(a[k]); break;
    case OP_TANH_GRAD: for (int64_t k = 0; k < sz; k++) y[k] = a[k] * (1 - b[k] * b[k]); break;
    /* the activations in float64, written from their definitions (not
     * from ops.def's formulas); b is the forward's input (sigmoid: output) */
    case OP_SIGMOID: for (int64_t k = 0; k < sz; k++) y[k] = 1 / (1 + exp(-a[k])); break;
    case OP_SIGMOID_GRAD: for (int64_t k = 0; k < sz; k++) y[k] = a[k] * b[k] * (1 - b[k]); break;
    case OP_SILU: for (int64_t k = 0; k < sz; k++) y[k] = a[k] / (1 + exp(-a[k])); break;
    case OP_SILU_GRAD:
        for (int64_t k = 0; k < sz; k++) {
            double s = 1 / (1 + exp(-b[k]));
            y[k] = a[k] * (s + b[k] * s * (1 - s));
        }
        break;
    case OP_GELU: for (int64_t k = 0; k < sz; k++) y[k] = a[k] * 0.5 * erfc(-a[k] / sqrt(2.0)); break;
    case OP_GELU_GRAD:
        for (int64_t k = 0; k < sz; k++)
            y[k] = a[k] * (0.5 * erfc(-b[k] / sqrt(2.0)) + b[k] * exp(-b[k] * b[k] / 2) / sqrt(2 * M_PI));
        break;
    case OP_GELU_TANH:
        for (int64_t k = 0; k < sz; k++)
            y[k] = 0.5 * a[k] * (1 + tanh(sqrt(2 / M_PI) * (a[k] + 0.044715 * pow(a[k], 3))));
        break;
    case OP_GELU_TANH_GRAD:
        for (int64_t k = 0; k < sz; k++) {
            double x = b[k], u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), t = tanh(u);
            y[k] = a[k] * (0.5 * (1 + t) + 0.5 * x / (cosh(u) * cosh(u)) * sqrt(2 / M_PI) * (1 + 0.134145 * x * x));
        }
        break;
    case OP_LEAKY_RELU: for (int64_t k = 0; k < sz; k++) y[k] = a[k] >= 0 ? a[k] : n->act.a * a[k]; break;
    case OP_LEAKY_RELU_GRAD: for (int64_t k = 0; k < sz; k++) y[k] = b[k] > 0 ? a[k] : n->act.a * a[k]; break;
    case OP_ELU: for (int64_t k = 0; k < sz; k++) y[k] = a[k] > 0 ? a[k] : n->act.a * (exp(a[k]) - 1); break;
    case OP_ELU_GRAD: for (int64_t k = 0; k < sz; k++) y[k] = b[k] > 0 ? a[k] : a[k] * n->act.a * exp(b[k]); break;
    case OP_SOFTPLUS:
        for (int64_t k = 0; k < sz; k++)
            y[k] = n->act.a * a[k] > n->act.b ? a[k] : log(1 + exp(n->act.a * a[k])) / n->act.a;
        break;
    case OP_SOFTPLUS_GRAD:
        for (int64_t k = 0; k < sz; k++)
            y[k] = n->act.a * b[k] > n->act.b ? a[k] : a[k] / (1 + exp(-n->act.a * b[k]));
        break;
    case OP_HARDTANH: for (int64_t k = 0; k < sz; k++) y[k] = fmin(fmax(a[k], n->act.a), n->act.b); break;
    case OP_HARDTANH_GRAD:
        for (int64_t k = 0; k < sz; k++) y[k] = b[k] > n->act.a && b[k] < n->act.b ? a[k] : 0;
        break;
    case OP_DROPOUT: case OP_DROPOUT_GRAD: {     /* the same mask forward and backward */
        unsigned long long key = cddp_drop_key(DROP_SEED, DROP_RANK, DROP_STEP, n->drop.key);
        for (int64_t k = 0; k < sz; k++)
            y[k] = cddp_drop_u(key, k) >= (float)n->drop.p ? a[k] / (1 - n->drop.p) : 0;
        break;
    }
    case OP_SUM_ROWS: {
        int64_t R = dim(sa->d[0]), C = dim(sa->d[1]);
        for (int64_t j = 0; j < C; j++) {
            y[j] = 0;
            for (int64_t i = 0; i < R; i++)
                y[j] += a[i * C + j];
        }
        break;
    }
    case OP_CE_LOSS: case OP_CE_GRAD: {
        int64_t C = dim(sa->d[1]);
        (void)sb;
        if (n->nw) {
            eval_weighted_ce(n, y, a, C);
            break;
        }
        if (n->counts) {
            eval_counted_ce(n, y, a, C, ir_numel(sa, BATCH) / C);
            break;
        }
        for (int64_t i = 0; i < BATCH; i++) {
            const double *x = a + i * C;
            double mx = x[0], se = 0;
            for (int64_t j = 1; j < C; j++) mx = x[j] > mx ? x[j] : mx;
            for (int64_t j = 0; j < C; j++) se += exp(x[j] - mx);
            double lse = mx + log(se);
            /* the target distribution (1 - e) one-hot + e / C (label smoothing) */
            double e = n->smooth, lp = 0;
            for (int64_t j = 0; j < C; j++)
                lp += ((j == lab[i]) * (1 - e) + e / (double)C) * (x[j] - lse);
            if (n->op == OP_CE_LOSS)
                y[i] = -lp;
            else
                for (int64_t j = 0; j < C; j++)
                    y[i * C + j] = (exp(x[j] - lse) - (j == lab[i]) * (1 - e) - e / (double)C)
                                   * (n->red == RED_MEAN ? 1.0 / BATCH : 1.0);
        }
        break;
    }
    case OP_MSE_LOSS: case OP_L1_LOSS: case OP_SMOOTH_L1_LOSS: case OP_HUBER_LOSS: case OP_BCE_LOSS:
    case OP_MSE_GRAD: case OP_L1_GRAD: case OP_SMOOTH_L1_GRAD: case OP_HUBER_GRAD: case OP_BCE_GRAD:
        eval_float_loss(n, y, a, b);
        break;
    case OP_MUL_COLS: {
        int64_t R = dim(sa->d[0]), C = dim(sa->d[1]);
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++)
                y[i * C + j] = a[i * C + j] * b[j];
        break;
    }
    case OP_CAT: {      /* per sample: a's elements, then b's */
        int64_t ra = ir_row_elems(sa), rb = ir_row_elems(sb);
        for (int64_t i = 0; i < BATCH; i++) {
            memcpy(y + i * (ra + rb), a + i * ra, sizeof(double) * (size_t)ra);
            memcpy(y + i * (ra + rb) + ra, b + i * rb, sizeof(double) * (size_t)rb);
        }
        break;
    }
    case OP_SLICE: {
        int64_t ra = ir_row_elems(sa), r = ir_row_elems(&n->shape);
        for (int64_t i = 0; i < BATCH; i++)
            for (int64_t j = 0; j < r; j++)
                y[i * r + j] = a[i * ra + n->slice.off + j];
        break;
    }
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SOFTMAX_GRAD: case OP_LOG_SOFTMAX_GRAD: case OP_LAYER_NORM:
    case OP_LAYER_NORM_DX:
        eval_norm(n, y, a, b);
        break;
    case OP_CONV2D: case OP_CONV2D_DX: case OP_CONV2D_DW: eval_conv(n, y, a, b); break;
    case OP_SUM_CHAN: case OP_BN_APPLY: case OP_BN_DW: eval_bn(n, y); break;
    case OP_MAXPOOL: case OP_MAXPOOL_DX: case OP_AVGPOOL: case OP_AVGPOOL_DX: eval_pool(n, y, a, b); break;
    case OP_ALLREDUCE: case OP_MEAN_CHAN: case OP_BN_SQDEV: case OP_BN_STATS: case OP_BN_DPART: case OP_BN_DX:
        eval_bn_pass(n, y);
        break;
    default:
        if (op_kind[n->op] == K_TENSOR) {
            eval_tensor(n, y);
            break;
        }
        fprintf(stderr, "gradcheck: interpreter lacks %s\n", op_text[n->op]);
        exit(1);
    }
}

static void eval_all(void)
{
    for (int i = 0; i < g->nn; i++)
        eval_node(i);
}

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

static int input(Op op, Shape s)
{
    int id = op == OP_PARAM ? ir_param(g, "p", s, 0, 1, (Loc){0}) : ir_add(g, op, 0, NULL, s, DT_F32, (Loc){0});
    return id;
}

static void fill(int id)
{
    int64_t sz = size_of(id);
    val[id].v = calloc((size_t)sz, sizeof(double));
    val[id].n = sz;
    for (int64_t k = 0; k < sz; k++) {
        double r = urand();
        val[id].v[k] = r + (r < 0 ? -0.05 : 0.05);  /* keep clear of the ReLU kink */
    }
}

/* L = sum(w * y) for a seed w, or the reduced loss for a CE_LOSS node
 * (over positions: the mean over the rows counted). */
static double objective(int y, int w, int red)
{
    eval_all();
    double L = 0;
    for (int64_t k = 0; k < val[y].n; k++)
        L += (w >= 0 ? val[w].v[k] : 1.0) * val[y].v[k];
    if (red == RED_MEAN && g->n[y]->counts)
        return L / counted_rows(g->n[y], val[y].n);
    return red == RED_MEAN ? L / BATCH : L;
}

static int check(const char *what, int y, int w, int red, const int *wrt, int nwrt)
{
    int grads[8], n0 = g->nn;
    ad_grad(g, y, w, wrt, nwrt, grads);
    val = realloc(val, sizeof(Val) * (size_t)(g->nn > 256 ? g->nn : 256));
    for (int i = n0; i < g->nn; i++)
        val[i] = (Val){0};
    eval_all();
    double worst = 0;
    for (int t = 0; t < nwrt; t++) {
        int x = wrt[t];
        eval_all();     /* analytic gradient at the unperturbed point */
        /* no gradient node (-1): the rule found that L does not depend
         * on x (W_hh of a one-step recurrence from zeros), which the
         * differences must show */
        double *an = calloc((size_t)val[x].n, sizeof(double));
        if (grads[t] >= 0)
            memcpy(an, val[grads[t]].v, sizeof(double) * (size_t)val[x].n);
        for (int64_t k = 0; k < val[x].n; k++) {
            const double h = 1e-5, x0 = val[x].v[k];
            val[x].v[k] = x0 + h;
            double lp = objective(y, w, red);
            val[x].v[k] = x0 - h;
            double lm = objective(y, w, red);
            val[x].v[k] = x0;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - an[k]) / fmax(1.0, fabs(fd));
            worst = err > worst ? err : worst;
        }
        free(an);
    }
    int ok = worst < 1e-7;
    printf("%s %-28s max rel err %.3g\n", ok ? "PASS" : "FAIL", what, worst);
    return !ok;
}

static void reset(void)
{
    g = ir_new();
    free(val);
    val = calloc(256, sizeof(Val));
}

/* y = op(a, b) with a, b differentiable inputs of the given shapes. */
static int check_binary(const char *what, Op op, Shape sa, Shape sb, Shape sy)
{
    reset();
    int a = input(ir_batched(&sa) ? OP_IMAGES : OP_PARAM, sa), b = input(ir_batched(&sb) ? OP_IMAGES : OP_PARAM, sb);
    fill(a);
    fill(b);
    int y = ir_add(g, op, 2, (int[]){a, b}, sy, DT_F32, (Loc){0});
    int w = input(ir_batched(&sy) ? OP_IMAGES : OP_PARAM, sy);
    fill(w);
    return check(what, y, w, RED_SUM, (int[]){a, b}, 2);
}

static int check_unary(const char *what, Op op, Shape sa, Shape sy)
{
    reset();
    int a = input(OP_IMAGES, sa);
    fill(a);
    int y = ir_add(g, op, 1, &a, sy, DT_F32, (Loc){0});
    int w = input(OP_IMAGES, sy);
    fill(w);
    return check(what, y, w, RED_SUM, &a, 1);
}

/* An activation with its parameters (Node.act): what sema builds. */
static int check_act(const char *what, Op op, double pa, double pb)
{
    reset();
    Shape s = ir_shape(2, DIM_N, 4);
    int a = input(OP_IMAGES, s);
    fill(a);
    int y = ir_add(g, op, 1, &a, s, DT_F32, (Loc){0});
    g->n[y]->act.a = pa;
    g->n[y]->act.b = pb;
    int w = input(OP_IMAGES, s);
    fill(w);
    return check(what, y, w, RED_SUM, &a, 1);
}

/* A value used twice and more: y = x * x - sigmoid(x) * 3 + x / 4, the
 * residual gate r + g * f(r) with g = sigmoid(r); x's gradient sums
 * every use (autodiff's accumulate). */
static int check_reuse(void)
{
    reset();
    Shape s = ir_shape(2, DIM_N, 4);
    int x = input(OP_IMAGES, s);
    fill(x);
    int sq = ir_add(g, OP_MUL, 2, (int[]){x, x}, s, DT_F32, (Loc){0});
    int sg = ir_add(g, OP_SIGMOID, 1, &x, s, DT_F32, (Loc){0});
    int s3 = ir_add(g, OP_AFFINE, 1, &sg, s, DT_F32, (Loc){0});
    g->n[s3]->act.a = 3;
    int q = ir_add(g, OP_DIV_SCALAR, 1, &x, s, DT_F32, (Loc){0});
    g->n[q]->act.a = 4;
    int d = ir_add(g, OP_SUB, 2, (int[]){sq, s3}, s, DT_F32, (Loc){0});
    int y = ir_add(g, OP_ADD, 2, (int[]){d, q}, s, DT_F32, (Loc){0});
    int f = ir_add(g, OP_GELU, 1, &y, s, DT_F32, (Loc){0});
    int gt = ir_add(g, OP_SIGMOID, 1, &y, s, DT_F32, (Loc){0});
    int gf = ir_add(g, OP_MUL, 2, (int[]){gt, f}, s, DT_F32, (Loc){0});
    int r = ir_add(g, OP_ADD, 2, (int[]){y, gf}, s, DT_F32, (Loc){0});
    int w = input(OP_IMAGES, s);
    fill(w);
    return check("x*x - 3 sigmoid(x) + x/4, then y + sigmoid(y) * gelu(y)", r, w, RED_SUM, &x, 1);
}

/* y = dropout(relu(x), p) (and a second dropout of y when twice, so two
 * keys meet in one backward); prints how many elements the mask kept so
 * a trivial mask is visible. */
static int check_dropout(const char *what, Shape xs, double p, int twice)
{
    reset();
    int x = input(OP_IMAGES, xs);
    fill(x);
    int r = ir_add(g, OP_RELU, 1, &x, xs, DT_F32, (Loc){0});
    int y = ir_dropout(g, r, p, (Loc){0});
    if (twice)
        y = ir_dropout(g, y, p, (Loc){0});
    int seed = input(OP_IMAGES, xs);
    fill(seed);
    eval_all();
    int64_t kept = 0;
    for (int64_t k = 0; k < val[y].n; k++)
        kept += val[y].v[k] != 0;
    printf("     %s: %lld of %lld elements nonzero\n", what, (long long)kept, (long long)val[y].n);
    return check(what, y, seed, RED_SUM, &x, 1);
}

static Window win(int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int groups)
{
    return (Window){kh, kw, sh, sw, ph, pw, dh, dw, groups};
}

/* y = conv2d(x, w) (+ b per channel) for x[N, C, H, W], w[O, C/g, kh, kw]. */
static int check_conv(const char *what, int64_t C, int64_t H, int64_t W, int64_t O, Window v, int bias)
{
    reset();
    Shape xs = ir_shape(4, DIM_N, C, H, W), ws = ir_shape(4, O, C / v.groups, v.kh, v.kw);
    Shape ys = ir_shape(4, DIM_N, O, ir_window_out(H, v.kh, v.sh, v.ph, v.dh), ir_window_out(W, v.kw, v.sw, v.pw, v.dw));
    int x = input(OP_IMAGES, xs), w = input(OP_PARAM, ws), b = input(OP_PARAM, ir_shape(1, O));
    fill(x);
    fill(w);
    fill(b);
    int y = ir_add(g, OP_CONV2D, 2, (int[]){x, w}, ys, DT_F32, (Loc){0});
    g->n[y]->win = v;
    if (bias)
        y = ir_add(g, OP_BIAS_ADD, 2, (int[]){y, b}, ys, DT_F32, (Loc){0});
    int seed = input(OP_IMAGES, ys);
    fill(seed);
    return check(what, y, seed, RED_SUM, (int[]){x, w, b}, bias ? 3 : 2);
}

/* ConvTranspose2d: y = conv2d_dx(u, w) over x [N, C, H, W] from u, the
 * output of a Conv2d(C, O) with window v (so the window fits exactly when
 * H and W are an output's input) */
static int check_convt(const char *what, int64_t C, int64_t H, int64_t W, int64_t O, Window v)
{
    reset();
    Shape ys = ir_shape(4, DIM_N, C, H, W), ws = ir_shape(4, O, C / v.groups, v.kh, v.kw);
    Shape us = ir_shape(4, DIM_N, O, ir_window_out(H, v.kh, v.sh, v.ph, v.dh), ir_window_out(W, v.kw, v.sw, v.pw, v.dw));
    int u = input(OP_IMAGES, us), w = input(OP_PARAM, ws);
    fill(u);
    fill(w);
    int y = ir_add(g, OP_CONV2D_DX, 2, (int[]){u, w}, ys, DT_F32, (Loc){0});
    g->n[y]->win = v;
    int seed = input(OP_IMAGES, ys);
    fill(seed);
    return check(what, y, seed, RED_SUM, (int[]){u, w}, 2);
}

/* Batch norm in train mode: y = bn_apply(x, bn_stats(x, ...), w, b), the
 * statistics from mean_chan and bn_sqdev (summed over the ranks under
 * SyncBatchNorm); the gradient of x goes through the batch mean and
 * variance. */
static int check_bn(const char *what, int64_t C, int64_t H, int64_t W, double eps, int sync)
{
    reset();
    Shape xs = ir_shape(4, DIM_N, C, H, W), cs = ir_shape(1, C);
    int x = input(OP_IMAGES, xs), w = input(OP_PARAM, cs), b = input(OP_PARAM, cs);
    int rm = input(OP_PARAM, cs), rv = input(OP_PARAM, cs);
    int ids[] = {x, w, b, rm, rv};
    for (int i = 0; i < 5; i++)
        fill(ids[i]);
    /* what sema builds (layers.c apply_batchnorm) */
    int s = ir_add(g, OP_MEAN_CHAN, 1, &x, cs, DT_F32, (Loc){0});
    if (sync)
        s = ir_add(g, OP_ALLREDUCE, 1, &s, cs, DT_F32, (Loc){0});
    int q = ir_add(g, OP_BN_SQDEV, 2, (int[]){x, s}, cs, DT_F32, (Loc){0});
    if (sync)
        q = ir_add(g, OP_ALLREDUCE, 1, &q, cs, DT_F32, (Loc){0});
    int st = ir_add(g, OP_BN_STATS, 5, (int[]){x, rm, rv, s, q}, ir_shape(2, 2, C), DT_F32, (Loc){0});
    int y = ir_add(g, OP_BN_APPLY, 4, (int[]){x, st, w, b}, xs, DT_F32, (Loc){0});
    const int set[] = {g->n[q]->op == OP_ALLREDUCE ? g->n[q]->in[0] : q, st, y};
    for (int k = 0; k < 3; k++) {
        g->n[set[k]]->bn.eps = eps;
        g->n[set[k]]->bn.sync = sync;
    }
    int seed = input(OP_IMAGES, xs);
    fill(seed);
    return check(what, y, seed, RED_SUM, (int[]){x, w, b}, 3);
}

static int check_pool(const char *what, Op op, int64_t C, int64_t H, int64_t W, Window v)
{
    reset();
    Shape xs = ir_shape(4, DIM_N, C, H, W);
    Shape ys = ir_shape(4, DIM_N, C, ir_window_out(H, v.kh, v.sh, v.ph, 1), ir_window_out(W, v.kw, v.sw, v.pw, 1));
    int x = input(OP_IMAGES, xs);
    fill(x);
    int y = ir_add(g, op, 1, &x, ys, DT_F32, (Loc){0});
    g->n[y]->win = v;
    int seed = input(OP_IMAGES, ys);
    fill(seed);
    return check(what, y, seed, RED_SUM, &x, 1);
}

/* LayerNorm as sema builds it: layer_norm(x), then * w[col] + b[col]
 * (affine), with its eps on the node. */
static int check_layer_norm(const char *what, int64_t F, double eps, int affine)
{
    reset();
    Shape xs = ir_shape(2, DIM_N, F), cs = ir_shape(1, F);
    int x = input(OP_IMAGES, xs), w = input(OP_PARAM, cs), b = input(OP_PARAM, cs);
    fill(x);
    fill(w);
    fill(b);
    int y = ir_add(g, OP_LAYER_NORM, 1, &x, xs, DT_F32, (Loc){0});
    g->n[y]->bn.eps = eps;
    if (affine) {
        y = ir_add(g, OP_MUL_COLS, 2, (int[]){y, w}, xs, DT_F32, (Loc){0});
        y = ir_add(g, OP_BIAS_ADD, 2, (int[]){y, b}, xs, DT_F32, (Loc){0});
    }
    int seed = input(OP_IMAGES, xs);
    fill(seed);
    return check(what, y, seed, RED_SUM, (int[]){x, w, b}, affine ? 3 : 1);
}

/* LayerNorm((C, H, W)) over [N, C, H, W] as sema builds it: the sample's
 * row [N, C*H*W], normalized, times w and plus b shaped [C, H, W]. */
static int check_layer_norm_chw(const char *what, int64_t C, int64_t H, int64_t W)
{
    reset();
    Shape xs = ir_shape(4, DIM_N, C, H, W), rs = ir_shape(2, DIM_N, C * H * W), ws = ir_shape(3, C, H, W);
    int x = input(OP_IMAGES, xs), w = input(OP_PARAM, ws), b = input(OP_PARAM, ws);
    fill(x);
    fill(w);
    fill(b);
    int r = ir_add(g, OP_RESHAPE, 1, &x, rs, DT_F32, (Loc){0});
    int y = ir_add(g, OP_LAYER_NORM, 1, &r, rs, DT_F32, (Loc){0});
    g->n[y]->bn.eps = 1e-5;
    y = ir_add(g, OP_MUL_COLS, 2, (int[]){y, w}, rs, DT_F32, (Loc){0});
    y = ir_add(g, OP_BIAS_ADD, 2, (int[]){y, b}, rs, DT_F32, (Loc){0});
    y = ir_add(g, OP_RESHAPE, 1, &y, xs, DT_F32, (Loc){0});
    int seed = input(OP_IMAGES, xs);
    fill(seed);
    return check(what, y, seed, RED_SUM, (int[]){x, w, b}, 3);
}

/* Two layers and ReLU from images [N, 2, 3] to logits [N, classes], its
 * inputs and parameters in ids[0..5), filled */
static int two_layers(int64_t classes, int *ids)
{
    int x = input(OP_IMAGES, ir_shape(3, DIM_N, 2, 3));
    int w1 = input(OP_PARAM, ir_shape(2, 5, 6)), b1 = input(OP_PARAM, ir_shape(1, 5));
    int w2 = input(OP_PARAM, ir_shape(2, classes, 5)), b2 = input(OP_PARAM, ir_shape(1, classes));
    const int in[] = {x, w1, b1, w2, b2};
    for (int i = 0; i < 5; i++)
        fill(ids[i] = in[i]);
    int f = ir_add(g, OP_RESHAPE, 1, &x, ir_shape(2, DIM_N, 6), DT_F32, (Loc){0});
    int h = ir_add(g, OP_MM_NT, 2, (int[]){f, w1}, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    h = ir_add(g, OP_BIAS_ADD, 2, (int[]){h, b1}, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    h = ir_add(g, OP_RELU, 1, &h, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    int z = ir_add(g, OP_MM_NT, 2, (int[]){h, w2}, ir_shape(2, DIM_N, classes), DT_F32, (Loc){0});
    return ir_add(g, OP_BIAS_ADD, 2, (int[]){z, b2}, ir_shape(2, DIM_N, classes), DT_F32, (Loc){0});
}

/* Two layers, ReLU, cross-entropy: the loss seeds itself. */
static int check_network_w(int red, const char *what, double smooth, const double *w)
{
    reset();
    int ids[5];
    int z = two_layers(4, ids);
    int l = ir_add(g, OP_LABELS, 0, NULL, ir_shape(1, DIM_N), DT_I32, (Loc){0});
    static int labels[BATCH] = {2, 0, 3};
    lab = labels;
    int loss = ir_add(g, OP_CE_LOSS, 2, (int[]){z, l}, ir_shape(1, DIM_N), DT_F32, (Loc){0});
    g->n[loss]->red = red;
    g->n[loss]->smooth = smooth;
    g->n[loss]->w = w;
    g->n[loss]->nw = w ? 4 : 0;
    return check(what, loss, -1, red, ids, 5);
}

static int check_network(int red, const char *what, double smooth) { return check_network_w(red, what, smooth, NULL); }

/* The network above with logits for 2 positions a sample, [N, 2, 4]
 * viewed as [N*2, 4] rows, labels [N*2] with two ignored (-100). */
static int check_positions(int red, const char *what)
{
    reset();
    int ids[5];
    int z = two_layers(8, ids);
    int l = ir_add(g, OP_LABELS, 0, NULL, ir_shape(1, -2), DT_I32, (Loc){0});
    static int labels[2 * BATCH] = {2, -100, 0, 3, -100, 1};
    lab = labels;
    z = ir_add(g, OP_RESHAPE, 1, &z, ir_shape(2, -2, 4), DT_F32, (Loc){0});
    int loss = ir_add(g, OP_CE_LOSS, 2, (int[]){z, l}, ir_shape(1, -2), DT_F32, (Loc){0});
    g->n[loss]->red = red;
    g->n[loss]->counts = g->n[loss]->ignore_on = 1;
    g->n[loss]->ignore = -100;
    return check(what, loss, -1, red, ids, 5);
}

/* The network above with a loss of float targets [N, 4] seeding itself. */
static int check_float_loss(Op op, int red, const char *what, double delta, const double *w)
{
    reset();
    int x = input(OP_IMAGES, ir_shape(2, DIM_N, 6));
    int t = input(OP_LABELS, ir_shape(2, DIM_N, 4));
    int w1 = input(OP_PARAM, ir_shape(2, 5, 6)), b1 = input(OP_PARAM, ir_shape(1, 5));
    int w2 = input(OP_PARAM, ir_shape(2, 4, 5)), b2 = input(OP_PARAM, ir_shape(1, 4));
    int ids[] = {x, w1, b1, w2, b2};
    for (int i = 0; i < 5; i++)
        fill(ids[i]);
    fill(t);
    if (op == OP_BCE_LOSS)      /* targets in [0, 1] */
        for (int64_t k = 0; k < val[t].n; k++)
            val[t].v[k] = fabs(val[t].v[k]);
    int h = ir_add(g, OP_MM_NT, 2, (int[]){x, w1}, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    h = ir_add(g, OP_BIAS_ADD, 2, (int[]){h, b1}, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    h = ir_add(g, OP_TANH, 1, &h, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    int z = ir_add(g, OP_MM_NT, 2, (int[]){h, w2}, ir_shape(2, DIM_N, 4), DT_F32, (Loc){0});
    z = ir_add(g, OP_BIAS_ADD, 2, (int[]){z, b2}, ir_shape(2, DIM_N, 4), DT_F32, (Loc){0});
    int loss = ir_add(g, op, 2, (int[]){z, t}, ir_shape(1, DIM_N), DT_F32, (Loc){0});
    g->n[loss]->red = red;
    g->n[loss]->delta = delta;
    g->n[loss]->w = w;
    g->n[loss]->nw = w ? 4 : 0;
    return check(what, loss, -1, red, ids, 5);
}

/* ---- tensors of any rank ---------------------------------------------- */

static int t_input(Shape s, int positive)
{
    int id = input(ten_batch_dim(&s) >= 0 ? OP_IMAGES : OP_PARAM, s);
    fill(id);
    if (positive)   /* log, sqrt, a fractional power: away from 0 */
        for (int64_t k = 0; k < val[id].n; k++)
            val[id].v[k] = fabs(val[id].v[k]) + 0.3;
    return id;
}

/* y = op(inputs) with the node's tensor attributes from `t` (a Node
 * carrying them, or NULL); the last input positive when asked (log, sqrt,
 * a divisor) */
static int check_tn(const char *what, Op op, int nin, const Shape *in, Shape sy, const Node *t, int positive_last)
{
    reset();
    int x[4];
    for (int k = 0; k < nin; k++)
        x[k] = t_input(in[k], positive_last && k == nin - 1);
    int y = ir_add(g, op, nin, x, sy, DT_F32, (Loc){0});
    if (t)
        g->n[y]->ten = t->ten;
    const char *why = ten_verify(g, g->n[y]);
    if (why) {
        printf("FAIL %-28s shape rule: %s\n", what, why);
        return 1;
    }
    int w = t_input(sy, 0);
    return check(what, y, w, RED_SUM, x, nin);
}

static int check_t1(const char *what, Op op, Shape sx, Shape sy, const Node *t, int positive)
{
    return check_tn(what, op, 1, &sx, sy, t, positive);
}

static int check_t2(const char *what, Op op, Shape sa, Shape sb, Shape sy, const Node *t, int positive_b)
{
    return check_tn(what, op, 2, (Shape[]){sa, sb}, sy, t, positive_b);
}

static Shape sh3(int64_t a, int64_t b, int64_t c) { return ir_shape(3, a, b, c); }

/* an input that is a mask (0/1, every other element; t DT_BOOL) or an
 * index (k * 3 + 1 mod range: repeats, so a gather's gradient sums) */
static int aux(Shape s, DType t, int64_t range)
{
    int id = input(ten_batch_dim(&s) >= 0 ? OP_IMAGES : OP_PARAM, s);
    g->n[id]->dt = t;
    fill(id);
    for (int64_t k = 0; k < val[id].n; k++)
        val[id].v[k] = t == DT_BOOL ? (double)((k * 7 / 3) % 2) : (double)((k * 3 + 1) % range);
    return id;
}

/* y = op(inputs) with a mask or an index among them (at position `at`):
 * the gradients of the others */
static int check_sel(const char *what, Op op, int nin, const Shape *in, int at, DType t, int64_t range, Shape sy,
                     const Node *attr)
{
    reset();
    int x[4], wrt[4], nw = 0;
    for (int k = 0; k < nin; k++) {
        x[k] = k == at ? aux(in[k], t, range) : t_input(in[k], 0);
        if (k != at)
            wrt[nw++] = x[k];
    }
    int y = ir_add(g, op, nin, x, sy, DT_F32, (Loc){0});
    if (attr)
        g->n[y]->ten = attr->ten;
    const char *why = ten_verify(g, g->n[y]);
    if (!why)
        why = ten_dtype_check(g, g->n[y]);
    if (why) {
        printf("FAIL %-28s shape rule: %s\n", what, why);
        return 1;
    }
    int w = t_input(sy, 0);
    return check(what, y, w, RED_SUM, wrt, nw);
}

/* scaled dot-product attention (attention.c): q, k and v differentiated,
 * with no mask, causal (a row with one key: T = 1), a bool mask over
 * [L, S] and an additive one per batch, the batch among the leading
 * dimensions or not first, S != L and Ev != E */
static int check_attention(void)
{
    int fails = 0;
    Node t;
    memset(&t, 0, sizeof t);
    const Shape q = ir_shape(4, DIM_N, 2, 3, 4), k = ir_shape(4, DIM_N, 2, 5, 4), v = ir_shape(4, DIM_N, 2, 5, 3);
    const Shape y = ir_shape(4, DIM_N, 2, 3, 3);
    t.attn.scale = 0.5;
    fails += check_tn("attention q[N,2,3,4] k,v[N,2,5,*]", OP_T_ATTN, 3, (Shape[]){q, k, v}, y, &t, 0);
    t.attn.causal = 1;
    fails += check_tn("attention causal [2,N,4,4]", OP_T_ATTN, 3, (Shape[]){ir_shape(4, 2, DIM_N, 4, 4),
                      ir_shape(4, 2, DIM_N, 4, 4), ir_shape(4, 2, DIM_N, 4, 2)}, ir_shape(4, 2, DIM_N, 4, 2), &t, 0);
    fails += check_tn("attention causal T=1", OP_T_ATTN, 3, (Shape[]){sh3(DIM_N, 1, 4), sh3(DIM_N, 1, 4),
                      sh3(DIM_N, 1, 2)}, sh3(DIM_N, 1, 2), &t, 0);
    t.attn.causal = 0;
    t.attn.mask = ATTN_MASK_BOOL;
    fails += check_sel("attention bool mask [3,5]", OP_T_ATTN, 4, (Shape[]){q, k, v, ir_shape(2, 3, 5)}, 3, DT_BOOL,
                       2, y, &t);
    t.attn.mask = ATTN_MASK_ADD;
    fails += check_sel("attention float mask [N,1,3,5]", OP_T_ATTN, 4, (Shape[]){q, k, v, ir_shape(4, DIM_N, 1, 3, 5)},
                       3, DT_F32, 5, y, &t);
    return fails;
}

/* a recurrence as recurrent.c builds it: xw [N, T, G H], W_hh [G H, H],
 * then b_hh [G H], h0 [N, H], c0 [N, H] as t's Node.rnn says, xw shifted
 * by `shift`; y = h [N, T, H], or with `cn` the LSTM's last cell state
 * (cn 1) or h plus it at every step (cn 2). Every input but h0 and c0 is
 * differentiated, and with `dstate` h0 and c0 too (an encoder's final
 * state: T_RNN_BWD keeps their gradients, T_RNN_DSTATE reads them). */
static int check_rnn_state(const char *what, const Node *t, int64_t T, int64_t H, double shift, int cn, int dstate)
{
    reset();
    const int64_t GH = ten_rnn_gates(t->rnn.cell) * H;
    const Shape hs = sh3(DIM_N, T, H), ss = ir_shape(2, DIM_N, H);
    int in[5], nin = 0;
    in[nin++] = t_input(sh3(DIM_N, T, GH), 0);
    in[nin++] = t_input(ir_shape(2, GH, H), 0);
    if (t->rnn.bias)
        in[nin++] = t_input(ir_shape(1, GH), 0);
    int nwrt = nin;
    if (t->rnn.h0)
        in[nin++] = t_input(ss, 0);
    if (t->rnn.c0)
        in[nin++] = t_input(ss, 0);
    if (dstate)
        nwrt = nin;
    for (int64_t k = 0; k < val[in[0]].n; k++)
        val[in[0]].v[k] += shift;
    int y = ir_add(g, OP_T_RNN, nin, in, hs, DT_F32, (Loc){0});
    g->n[y]->rnn = t->rnn;
    const char *why = ten_verify(g, g->n[y]);
    if (cn) {
        const int r = y, c = ir_add(g, OP_T_RNN_CN, 1, &r, ss, DT_F32, (Loc){0});
        why = why ? why : ten_verify(g, g->n[c]);
        y = c;
        if (cn == 2) {
            const int c1 = ir_add(g, OP_RESHAPE, 1, &c, sh3(DIM_N, 1, H), DT_F32, (Loc){0});
            y = ir_add(g, OP_BC_ADD, 2, (int[]){r, c1}, hs, DT_F32, (Loc){0});
        }
    }
    if (why) {
        printf("FAIL %-28s shape rule: %s\n", what, why);
        return 1;
    }
    int w = t_input(g->n[y]->shape, 0);
    rnn_kink = INFINITY;
    if (t->rnn.cell == RNN_RELU) {  /* both sides of the kink met, and how near it */
        eval_all();
        int64_t on = 0;
        for (int64_t k = 0; k < val[y].n; k++)
            on += val[y].v[k] > 0;
        printf("     %s: %lld of %lld units active, least |pre-activation| %.3g\n", what, (long long)on,
               (long long)val[y].n, rnn_kink);
    }
    int fail = check(what, y, w, RED_SUM, in, nwrt);
    if (t->rnn.cell == RNN_RELU && rnn_kink < 1e-3) {
        printf("FAIL %-28s a pre-activation %.3g from relu's kink: the differences do not hold\n", what, rnn_kink);
        fail = 1;
    }
    return fail;
}

static int check_rnn(const char *what, const Node *t, int64_t T, int64_t H, double shift, int cn)
{
    return check_rnn_state(what, t, T, H, shift, cn, 0);
}

static Node rnn_attrs(int cell, int reverse, int bias, int h0, int c0)
{
    Node t;
    memset(&t, 0, sizeof t);
    t.rnn.cell = cell, t.rnn.reverse = reverse, t.rnn.bias = bias, t.rnn.h0 = h0, t.rnn.c0 = c0;
    return t;
}

/* the recurrences (recurrent.c; autodiff's rule_t_rnn): each cell forward
 * and in reverse (hidden_before's slice, pad and cat both ways), with and
 * without b_hh and the initial state, one step (no hidden product: W_hh
 * has a gradient only through h0), and the LSTM's last cell state c_n in
 * the loss (its gradient enters T_RNN_BWD as dc, rnn.dcn) */
static int check_recurrences(void)
{
    int fails = 0;
    Node t;
    t = rnn_attrs(RNN_LSTM, 0, 1, 0, 0);
    fails += check_rnn("LSTM T=4 H=3 bias", &t, 4, 3, 0, 0);
    t = rnn_attrs(RNN_LSTM, 1, 1, 1, 1);
    fails += check_rnn("LSTM reverse bias h0 c0", &t, 4, 3, 0, 0);
    t = rnn_attrs(RNN_GRU, 0, 1, 1, 0);
    fails += check_rnn("GRU T=3 H=2 bias h0", &t, 3, 2, 0, 0);
    t = rnn_attrs(RNN_GRU, 1, 0, 0, 0);
    fails += check_rnn("GRU reverse no bias", &t, 3, 2, 0, 0);
    t = rnn_attrs(RNN_TANH, 0, 1, 0, 0);
    fails += check_rnn("RNN tanh T=5 H=3 bias", &t, 5, 3, 0, 0);
    t = rnn_attrs(RNN_RELU, 0, 1, 0, 0);
    fails += check_rnn("RNN relu T=3 H=3 bias", &t, 3, 3, 0.3, 0);
    t = rnn_attrs(RNN_LSTM, 0, 1, 0, 0);
    fails += check_rnn("LSTM T=1 bias (W_hh none)", &t, 1, 3, 0, 0);
    t = rnn_attrs(RNN_GRU, 1, 1, 1, 0);
    fails += check_rnn("GRU T=1 reverse bias h0", &t, 1, 2, 0, 0);
    t = rnn_attrs(RNN_LSTM, 1, 1, 0, 0);
    fails += check_rnn("LSTM reverse c_n alone", &t, 3, 2, 0, 1);
    t = rnn_attrs(RNN_LSTM, 0, 1, 1, 1);
    fails += check_rnn("LSTM h + c_n, h0 c0", &t, 3, 2, 0, 2);
    /* gradients into the initial state (rnn.dstate): dh0, dc0. The
     * random stream is restored after them, so the checks that follow
     * draw the same inputs as without these */
    const uint64_t rng0 = rng;
    t = rnn_attrs(RNN_LSTM, 0, 1, 1, 1);
    fails += check_rnn_state("LSTM d(h0 c0) T=4 H=3", &t, 4, 3, 0, 0, 1);
    t = rnn_attrs(RNN_LSTM, 1, 1, 1, 1);
    fails += check_rnn_state("LSTM reverse d(h0 c0)", &t, 4, 3, 0, 0, 1);
    t = rnn_attrs(RNN_GRU, 0, 1, 1, 0);
    fails += check_rnn_state("GRU d(h0) T=3 H=2", &t, 3, 2, 0, 0, 1);
    t = rnn_attrs(RNN_GRU, 1, 1, 1, 0);
    fails += check_rnn_state("GRU reverse d(h0)", &t, 3, 2, 0, 0, 1);
    t = rnn_attrs(RNN_TANH, 0, 1, 1, 0);
    fails += check_rnn_state("RNN tanh d(h0) T=4 H=3", &t, 4, 3, 0, 0, 1);
    t = rnn_attrs(RNN_RELU, 0, 1, 1, 0);
    fails += check_rnn_state("RNN relu d(h0) T=3 H=3", &t, 3, 3, 0.3, 0, 1);
    t = rnn_attrs(RNN_LSTM, 0, 1, 1, 1);
    fails += check_rnn_state("LSTM T=1 d(h0 c0)", &t, 1, 3, 0, 0, 1);
    rng = rng0;
    return fails;
}

/* the ops that select by a mask or an index (tensor_ints.c) */
static int check_selections(void)
{
    int fails = 0;
    Node t;
    const Shape n34 = sh3(DIM_N, 3, 4);
    memset(&t, 0, sizeof t);
    fails += check_sel("where c[N,3,1] a[N,3,4] b[4]", OP_T_WHERE, 3, (Shape[]){sh3(DIM_N, 3, 1), n34, ir_shape(1, 4)},
                       0, DT_BOOL, 2, n34, &t);
    t.ten.lo = 2.5;
    fails += check_sel("masked_fill x[N,3,4] m[3,4]", OP_T_FILL_IF, 2, (Shape[]){n34, ir_shape(2, 3, 4)}, 1, DT_BOOL,
                       2, n34, &t);
    t.ten.lo = -1;
    fails += check_sel("keep_if x[N,1,4] m[N,3,4]", OP_T_KEEP_IF, 2, (Shape[]){sh3(DIM_N, 1, 4), n34}, 1, DT_BOOL, 2,
                       n34, &t);
    memset(&t, 0, sizeof t);
    t.ten.lo = 0;
    fails += check_t1("tril [N,3,4]", OP_T_TRIL, n34, n34, &t, 0);
    t.ten.lo = -1;
    fails += check_t1("triu diagonal -1 [2,N,4,3]", OP_T_TRIU, ir_shape(4, 2, DIM_N, 4, 3), ir_shape(4, 2, DIM_N, 4, 3),
                      &t, 0);
    memset(&t, 0, sizeof t);
    t.ten.axis = 2;
    fails += check_sel("gather x[N,3,5] i[N,3,4] dim 2", OP_T_GATHER, 2, (Shape[]){sh3(DIM_N, 3, 5), n34}, 1, DT_I64,
                       5, n34, &t);
    fails += check_sel("gather x[N,4,5] i[N,2,3] dim 2", OP_T_GATHER, 2, (Shape[]){sh3(DIM_N, 4, 5), sh3(DIM_N, 2, 3)},
                       1, DT_I64, 5, sh3(DIM_N, 2, 3), &t);
    t.ten.axis = 1;
    fails += check_sel("index_select x[N,4,3] i[1,6,1] dim 1", OP_T_GATHER, 2, (Shape[]){sh3(DIM_N, 4, 3),
                       sh3(1, 6, 1)}, 1, DT_I64, 4, sh3(DIM_N, 6, 3), &t);
    /* nn.Embedding(5, 3): tokens [N, 4] (repeating: rows get several dy),
     * positions [4] (no batch). (padding_idx's row gets no gradient by
     * PyTorch's definition, not by the derivative: torch-equiv-lm-tokmlp) */
    memset(&t, 0, sizeof t);
    t.ten.lo = -1;
    fails += check_sel("embedding w[5,3] i[N,4]", OP_T_EMBED, 2, (Shape[]){ir_shape(2, 5, 3),
                       ir_shape(2, DIM_N, 4)}, 1, DT_I64, 5, sh3(DIM_N, 4, 3), &t);
    fails += check_sel("embedding w[6,3] i[4] (arange)", OP_T_EMBED, 2, (Shape[]){ir_shape(2, 6, 3),
                       ir_shape(1, 4)}, 1, DT_I64, 6, ir_shape(2, 4, 3), &t);

    return fails;
}

static int check_tensors(void)
{
    int fails = 0;
    Node t;
    const Shape n34 = sh3(DIM_N, 3, 4);
    fails += check_t2("bc_add [N,3,1] + [4]", OP_BC_ADD, sh3(DIM_N, 3, 1), ir_shape(1, 4), n34, NULL, 0);
    fails += check_t2("bc_sub [N,1,4] - [3,1]", OP_BC_SUB, sh3(DIM_N, 1, 4), ir_shape(2, 3, 1), n34, NULL, 0);
    fails += check_t2("bc_mul [2,N,3] * [N,1]", OP_BC_MUL, sh3(2, DIM_N, 3), ir_shape(2, DIM_N, 1), sh3(2, DIM_N, 3),
                      NULL, 0);
    fails += check_t2("bc_div [N,3,4] / [3,1]", OP_BC_DIV, n34, ir_shape(2, 3, 1), n34, NULL, 1);
    fails += check_t1("bc_copy [N,1,4] -> [N,3,4]", OP_BC_COPY, sh3(DIM_N, 1, 4), n34, NULL, 0);
    memset(&t, 0, sizeof t);
    t.ten.scale = -3;
    fails += check_t1("bc_scale [N,1,4] / -3 -> [N,3,4]", OP_BC_SCALE, sh3(DIM_N, 1, 4), n34, &t, 0);
    memset(&t, 0, sizeof t);
    t.ten.axes = 2;
    fails += check_t1("sum dim 1 [N,3,4]", OP_T_SUM, n34, sh3(DIM_N, 1, 4), &t, 0);
    t.ten.axes = 6;
    fails += check_t1("mean dims (1,2) [N,3,4]", OP_T_MEAN, n34, sh3(DIM_N, 1, 1), &t, 0);
    t.ten.axes = 4;
    fails += check_t1("amax dim 2 [N,3,4]", OP_T_AMAX, n34, sh3(DIM_N, 3, 1), &t, 0);
    t.ten.axes = 2;
    fails += check_t1("amin dim 1 [N,3,4]", OP_T_AMIN, n34, sh3(DIM_N, 1, 4), &t, 0);
    memset(&t, 0, sizeof t);
    t.ten.perm[0] = 2, t.ten.perm[1] = 0, t.ten.perm[2] = 1;
    fails += check_t1("permute (2,0,1) [N,3,4]", OP_T_PERMUTE, n34, sh3(4, DIM_N, 3), &t, 0);
    memset(&t, 0, sizeof t);
    t.ten.axis = 1, t.ten.start = 1, t.ten.step = 2;
    fails += check_t1("slice [:, 1::2] [N,5,4]", OP_T_SLICE, sh3(DIM_N, 5, 4), sh3(DIM_N, 2, 4), &t, 0);
    memset(&t, 0, sizeof t);
    t.ten.axis = 1;
    fails += check_t2("cat dim 1 [N,2,4] [N,3,4]", OP_T_CAT, sh3(DIM_N, 2, 4), n34, sh3(DIM_N, 5, 4), &t, 0);
    static const struct { const char *what; Op op; double lo, hi; int pos; } un[] = {
        {"exp [N,3,4]", OP_T_EXP, 0, 0, 0},        {"log [N,3,4]", OP_T_LOG, 0, 0, 1},
        {"sqrt [N,3,4]", OP_T_SQRT, 0, 0, 1},      {"rsqrt [N,3,4]", OP_T_RSQRT, 0, 0, 1},
        {"abs [N,3,4]", OP_T_ABS, 0, 0, 0},        {"pow 3 [N,3,4]", OP_T_POW, 3, 0, 0},
        {"pow 2.5 [N,3,4]", OP_T_POW, 2.5, 0, 1},  {"clamp (-0.5, 0.5)", OP_T_CLAMP, -0.5, 0.5, 0},
        {"clamp (min 0.2)", OP_T_CLAMP, 0.2, INFINITY, 0}, {"affine_nd x * -1.5 + 0.25", OP_T_AFFINE, -1.5, 0.25, 0},
    };
    for (size_t i = 0; i < sizeof un / sizeof *un; i++) {
        memset(&t, 0, sizeof t);
        t.ten.lo = un[i].lo, t.ten.hi = un[i].hi;
        fails += check_t1(un[i].what, un[i].op, n34, n34, &t, un[i].pos);
    }
    fails += check_t2("maximum [N,3,4] [4]", OP_T_MAXIMUM, n34, ir_shape(1, 4), n34, NULL, 0);
    fails += check_t2("minimum [N,3,1] [N,3,4]", OP_T_MINIMUM, sh3(DIM_N, 3, 1), n34, n34, NULL, 0);
    static const struct { const char *what; int ta, tb; } mm[] = {
        {"bmm a @ b", 0, 0}, {"bmm a^T @ b", 1, 0}, {"bmm a @ b^T", 0, 1}, {"bmm a^T @ b^T", 1, 1},
    };
    for (size_t i = 0; i < sizeof mm / sizeof *mm; i++) {
        memset(&t, 0, sizeof t);
        t.ten.ta = mm[i].ta, t.ten.tb = mm[i].tb;
        fails += check_t2(mm[i].what, OP_T_BMM, mm[i].ta ? sh3(DIM_N, 4, 3) : n34,
                          mm[i].tb ? sh3(DIM_N, 5, 4) : sh3(DIM_N, 4, 5), sh3(DIM_N, 3, 5), &t, 0);
    }
    memset(&t, 0, sizeof t);
    fails += check_t2("bmm [2,N,3,4] @ [N,4,5]", OP_T_BMM, ir_shape(4, 2, DIM_N, 3, 4), sh3(DIM_N, 4, 5),
                      ir_shape(4, 2, DIM_N, 3, 5), &t, 0);
    t.ten.tb = 1;
    fails += check_t2("bmm [N,3,4] @ w[5,4]^T", OP_T_BMM, n34, ir_shape(2, 5, 4), sh3(DIM_N, 3, 5), &t, 0);
    return fails;
}

int main(void)
{
    int fails = 0;
    Shape nk = ir_shape(2, DIM_N, 4), ok_ = ir_shape(2, 3, 4), kn = ir_shape(2, 4, 3), nn = ir_shape(2, DIM_N, 3);
    fails += check_binary("mm_nt  x[N,4] w[3,4]^T", OP_MM_NT, nk, ok_, nn);
    fails += check_binary("mm_nn  x[N,4] w[4,3]", OP_MM_NN, nk, kn, nn);
    fails += check_binary("mm_tn  x[N,4]^T y[N,3]", OP_MM_TN, nk, nn, ir_shape(2, 4, 3));
    fails += check_binary("mm_tn  w[3,4]^T v[3,5]", OP_MM_TN, ok_, ir_shape(2, 3, 5), ir_shape(2, 4, 5));
    fails += check_binary("bias_add x[N,3] b[3]", OP_BIAS_ADD, nn, ir_shape(1, 3), nn);
    fails += check_binary("add    x[N,3] y[N,3]", OP_ADD, nn, nn, nn);
    fails += check_unary("relu   x[N,4]", OP_RELU, nk, nk);
    fails += check_unary("tanh   x[N,4]", OP_TANH, nk, nk);
    fails += check_binary("sub    x[N,3] y[N,3]", OP_SUB, nn, nn, nn);
    fails += check_binary("mul    x[N,3] y[N,3]", OP_MUL, nn, nn, nn);
    fails += check_act("affine x * -1.5 + 0.3", OP_AFFINE, -1.5, 0.3);
    fails += check_act("div_scalar x / 4", OP_DIV_SCALAR, 4, 0);
    fails += check_reuse();
    fails += check_tensors();
    fails += check_selections();
    fails += check_attention();
    fails += check_recurrences();
    fails += check_act("sigmoid x[N,4]", OP_SIGMOID, 0, 0);
    fails += check_act("silu   x[N,4]", OP_SILU, 0, 0);
    fails += check_act("gelu   x[N,4]", OP_GELU, 0, 0);
    fails += check_act("gelu tanh x[N,4]", OP_GELU_TANH, 0, 0);
    fails += check_act("leaky_relu 0.2 x[N,4]", OP_LEAKY_RELU, 0.2, 0);
    fails += check_act("leaky_relu -0.5 x[N,4]", OP_LEAKY_RELU, -0.5, 0);
    fails += check_act("elu 1.3 x[N,4]", OP_ELU, 1.3, 0);
    fails += check_act("softplus beta 2 threshold 20", OP_SOFTPLUS, 2, 20);
    fails += check_act("softplus beta 1 threshold 0.1", OP_SOFTPLUS, 1, 0.1);
    fails += check_act("hardtanh -0.3 0.4", OP_HARDTANH, -0.3, 0.4);
    fails += check_unary("reshape x[N,2,2] -> [N,4]", OP_RESHAPE, ir_shape(3, DIM_N, 2, 2), nk);
    fails += check_dropout("dropout p=0.5 relu x[N,7]", ir_shape(2, DIM_N, 7), 0.5, 0);
    fails += check_dropout("dropout p=0.2 x2 [N,2,3,4]", ir_shape(4, DIM_N, 2, 3, 4), 0.2, 1);
    fails += check_conv("conv2d 5x5 pad 2 + bias", 2, 6, 5, 3, win(5, 5, 1, 1, 2, 2, 1, 1, 1), 1);
    fails += check_conv("conv2d 3x3 stride 2 pad 1", 3, 7, 6, 4, win(3, 3, 2, 2, 1, 1, 1, 1, 1), 1);
    fails += check_conv("conv2d 3x2 dil 2x1 groups 2", 4, 7, 5, 6, win(3, 2, 1, 2, 2, 1, 2, 1, 2), 0);
    fails += check_conv("conv2d 1x1 groups 3 (depthwise)", 3, 4, 4, 3, win(1, 1, 1, 1, 0, 0, 1, 1, 3), 1);
    fails += check_convt("conv_transpose2d 3x3 stride 2 pad 1", 2, 7, 6, 3, win(3, 3, 2, 2, 1, 1, 1, 1, 1));
    fails += check_convt("conv_transpose2d 2x3 dil 2x1 groups 2", 4, 8, 7, 6, win(2, 3, 1, 2, 0, 1, 2, 1, 2));
    fails += check_bn("batchnorm2d train [N,3,4,5]", 3, 4, 5, 1e-5, 0);
    fails += check_bn("batchnorm2d train eps 0.1", 2, 1, 3, 0.1, 0);
    fails += check_bn("syncbatchnorm, 2 equal ranks [N,3,4,5]", 3, 4, 5, 1e-5, 1);
    fails += check_bn("syncbatchnorm, 2 equal ranks eps 0.1", 2, 1, 3, 0.1, 1);
    fails += check_pool("maxpool 2x2", OP_MAXPOOL, 2, 6, 5, win(2, 2, 2, 2, 0, 0, 1, 1, 1));
    fails += check_pool("maxpool 3x3 stride 2 pad 1", OP_MAXPOOL, 2, 7, 6, win(3, 3, 2, 2, 1, 1, 1, 1, 1));
    fails += check_pool("avgpool 2x2", OP_AVGPOOL, 2, 6, 5, win(2, 2, 2, 2, 0, 0, 1, 1, 1));
    fails += check_pool("avgpool 3x2 stride 1 pad 1", OP_AVGPOOL, 2, 5, 4, win(3, 2, 1, 1, 1, 1, 1, 1, 1));
    fails += check_unary("softmax x[N,5]", OP_SOFTMAX, ir_shape(2, DIM_N, 5), ir_shape(2, DIM_N, 5));
    fails += check_unary("log_softmax x[N,5]", OP_LOG_SOFTMAX, ir_shape(2, DIM_N, 5), ir_shape(2, DIM_N, 5));
    fails += check_binary("mul_cols x[N,3] w[3]", OP_MUL_COLS, nn, ir_shape(1, 3), nn);
    fails += check_binary("cat x[N,3] y[N,4] dim 1", OP_CAT, nn, nk, ir_shape(2, DIM_N, 7));
    fails += check_binary("cat x[N,2,3,2] y[N,3,3,2] channels", OP_CAT, ir_shape(4, DIM_N, 2, 3, 2),
                          ir_shape(4, DIM_N, 3, 3, 2), ir_shape(4, DIM_N, 5, 3, 2));
    fails += check_layer_norm("layer_norm [N,6] eps 1e-5", 6, 1e-5, 0);
    fails += check_layer_norm("layer_norm [N,5] eps 0.5 affine", 5, 0.5, 1);
    fails += check_layer_norm_chw("layer_norm (C,H,W) [N,2,3,2] affine", 2, 3, 2);
    fails += check_network(RED_MEAN, "ce_loss mean (2-layer net)", 0);
    fails += check_positions(RED_MEAN, "ce_loss mean over positions, ignore_index");
    fails += check_positions(RED_SUM, "ce_loss sum over positions, ignore_index");
    fails += check_network(RED_MEAN, "ce_loss mean label_smoothing 0.1", 0.1);
    fails += check_network(RED_SUM, "ce_loss sum label_smoothing 0.3", 0.3);
    fails += check_network(RED_SUM, "ce_loss sum (2-layer net)", 0);
    fails += check_network(RED_NONE, "ce_loss none (2-layer net)", 0);
    static const double pw[4] = {1.0, 2.5, 0.5, 3.0};
    fails += check_network_w(RED_MEAN, "ce_loss mean weight", 0, pw);
    fails += check_network_w(RED_MEAN, "ce_loss mean weight smoothing 0.1", 0.1, pw);
    fails += check_network_w(RED_SUM, "ce_loss sum weight smoothing 0.3", 0.3, pw);
    fails += check_network_w(RED_NONE, "ce_loss none weight", 0, pw);
    fails += check_float_loss(OP_MSE_LOSS, RED_MEAN, "mse_loss mean", 0, NULL);
    fails += check_float_loss(OP_MSE_LOSS, RED_SUM, "mse_loss sum", 0, NULL);
    fails += check_float_loss(OP_L1_LOSS, RED_MEAN, "l1_loss mean", 0, NULL);
    fails += check_float_loss(OP_L1_LOSS, RED_NONE, "l1_loss none", 0, NULL);
    fails += check_float_loss(OP_SMOOTH_L1_LOSS, RED_MEAN, "smooth_l1_loss mean beta 0.5", 0.5, NULL);
    fails += check_float_loss(OP_SMOOTH_L1_LOSS, RED_SUM, "smooth_l1_loss sum beta 1", 1.0, NULL);
    fails += check_float_loss(OP_HUBER_LOSS, RED_MEAN, "huber_loss mean delta 0.7", 0.7, NULL);
    fails += check_float_loss(OP_HUBER_LOSS, RED_SUM, "huber_loss sum delta 0.3", 0.3, NULL);
    fails += check_float_loss(OP_BCE_LOSS, RED_MEAN, "bce_logits mean", 0, NULL);
    fails += check_float_loss(OP_BCE_LOSS, RED_SUM, "bce_logits sum pos_weight", 0, pw);
    fails += check_float_loss(OP_BCE_LOSS, RED_MEAN, "bce_logits mean pos_weight", 0, pw);
    if (fails)
        printf("%d gradient checks failed\n", fails);
    return fails != 0;
}
