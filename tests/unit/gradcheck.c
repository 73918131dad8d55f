/* gradcheck.c: every autodiff rule against float64 central differences.
 *
 * A small reference interpreter evaluates the graph IR in double; for
 * each op, a graph y = op(inputs) gets L = sum(w * y) with fixed random w
 * (passed to ad_grad as the seed dy = w), and the gradient nodes autodiff
 * appends are evaluated and compared with (L(x+h) - L(x-h)) / 2h per
 * element. The loss op is checked the same way with its own seed, for
 * each reduction, inside a two-layer network. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"

#define BATCH 3

typedef struct Val {
    double *v;
    int64_t n;
} Val;

static Graph *g;
static Val *val;
static int *lab;

static int64_t size_of(int id) { return ir_numel(&g->n[id]->shape, BATCH); }
static int64_t dim(int64_t d) { return d == DIM_N ? BATCH : d; }

static void eval_node(int id)
{
    Node *n = g->n[id];
    if (n->op == OP_IMAGES || n->op == OP_PARAM || n->op == OP_LABELS)
        return;     /* inputs: values set by the test */
    int64_t sz = size_of(id);
    if (!val[id].v || val[id].n != sz) {
        free(val[id].v);
        val[id].v = calloc((size_t)(sz ? sz : 1), sizeof(double));
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
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                y[i * N + j] = a[i * N + j] + b[j];
        break;
    case OP_ADD: for (int64_t k = 0; k < sz; k++) y[k] = a[k] + b[k]; break;
    case OP_RELU: for (int64_t k = 0; k < sz; k++) y[k] = a[k] > 0 ? a[k] : 0; break;
    case OP_RELU_GRAD: for (int64_t k = 0; k < sz; k++) y[k] = b[k] > 0 ? a[k] : 0; break;
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
        for (int64_t i = 0; i < BATCH; i++) {
            const double *x = a + i * C;
            double mx = x[0], se = 0;
            for (int64_t j = 1; j < C; j++) mx = x[j] > mx ? x[j] : mx;
            for (int64_t j = 0; j < C; j++) se += exp(x[j] - mx);
            double lse = mx + log(se);
            if (n->op == OP_CE_LOSS)
                y[i] = lse - x[lab[i]];
            else
                for (int64_t j = 0; j < C; j++)
                    y[i * C + j] = (exp(x[j] - lse) - (j == lab[i])) * (n->red == RED_MEAN ? 1.0 / BATCH : 1.0);
        }
        break;
    }
    default:
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

/* L = sum(w * y) for a seed w, or the reduced loss for a CE_LOSS node. */
static double objective(int y, int w, int red)
{
    eval_all();
    double L = 0;
    for (int64_t k = 0; k < val[y].n; k++)
        L += (w >= 0 ? val[w].v[k] : 1.0) * val[y].v[k];
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
        double *an = malloc(sizeof(double) * (size_t)val[x].n);
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

/* Two layers, ReLU, cross-entropy: the loss seeds itself. */
static int check_network(int red, const char *what)
{
    reset();
    int x = input(OP_IMAGES, ir_shape(3, DIM_N, 2, 3));
    int l = ir_add(g, OP_LABELS, 0, NULL, ir_shape(1, DIM_N), DT_I32, (Loc){0});
    int w1 = input(OP_PARAM, ir_shape(2, 5, 6)), b1 = input(OP_PARAM, ir_shape(1, 5));
    int w2 = input(OP_PARAM, ir_shape(2, 4, 5)), b2 = input(OP_PARAM, ir_shape(1, 4));
    int ids[] = {x, w1, b1, w2, b2};
    for (int i = 0; i < 5; i++)
        fill(ids[i]);
    static int labels[BATCH] = {2, 0, 3};
    lab = labels;
    int f = ir_add(g, OP_RESHAPE, 1, &x, ir_shape(2, DIM_N, 6), DT_F32, (Loc){0});
    int h = ir_add(g, OP_MM_NT, 2, (int[]){f, w1}, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    h = ir_add(g, OP_BIAS_ADD, 2, (int[]){h, b1}, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    h = ir_add(g, OP_RELU, 1, &h, ir_shape(2, DIM_N, 5), DT_F32, (Loc){0});
    int z = ir_add(g, OP_MM_NT, 2, (int[]){h, w2}, ir_shape(2, DIM_N, 4), DT_F32, (Loc){0});
    z = ir_add(g, OP_BIAS_ADD, 2, (int[]){z, b2}, ir_shape(2, DIM_N, 4), DT_F32, (Loc){0});
    int loss = ir_add(g, OP_CE_LOSS, 2, (int[]){z, l}, ir_shape(1, DIM_N), DT_F32, (Loc){0});
    g->n[loss]->red = red;
    (void)l;
    return check(what, loss, -1, red, ids, 5);
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
    fails += check_unary("reshape x[N,2,2] -> [N,4]", OP_RESHAPE, ir_shape(3, DIM_N, 2, 2), nk);
    fails += check_network(RED_MEAN, "ce_loss mean (2-layer net)");
    fails += check_network(RED_SUM, "ce_loss sum (2-layer net)");
    fails += check_network(RED_NONE, "ce_loss none (2-layer net)");
    if (fails)
        printf("%d gradient checks failed\n", fails);
    return fails != 0;
}
