/* rt_fake_model.c: a hand-written stand-in for a cddpc-emitted program, so
 * the runtime can be tested without the compiler.
 *
 * Model: softmax regression on 28x28 images,
 *   x = (pixel/255 - mean) / std;  logits = x W^T + b  (nn.Linear(784, 10))
 *   loss = cross_entropy(logits, y, reduction='mean')
 *   SGD(lr, momentum=0.9) with PyTorch's momentum rule
 *   (buf = g on the first step, then buf = momentum*buf + g; p -= lr*buf),
 * which also exercises the opt arena and e->step.
 *
 * act arena layout (units = floats per sample; buffer at act + off*nmax):
 *   X   784 @ 0     normalized images
 *   Y     1 @ 784   labels, int32
 *   Z    10 @ 785   logits
 *   DZ   10 @ 795   dloss/dlogits (train only)
 * stat: [0] sum of per-sample losses, [1] correct predictions. */
#include "cddprt.h"
#include <math.h>
#include <string.h>

#define NIN 784
#define NOUT 10
#define U_X 0
#define U_Y 784
#define U_Z 785
#define U_DZ 795
#define OFF_W 0
#define OFF_B (NOUT * NIN)
#define MEAN 0.2860f
#define STD 0.3530f
#define MOMENTUM 0.9f

static void k0_load(rt_exec *e)
{
    float *x = e->act + (int64_t)U_X * e->nmax;
    int32_t *y = (int32_t *)(e->act + (int64_t)U_Y * e->nmax);
    const float scale = 1.0f / (255.0f * STD), shift = MEAN / STD;
#pragma omp parallel for
    for (int i = 0; i < e->n; i++) {
        int64_t s = e->idx[i];
        const uint8_t *src = (const uint8_t *)e->x + s * e->x_size;
        for (int j = 0; j < NIN; j++)
            x[(int64_t)i * NIN + j] = (float)src[j] * scale - shift;
        y[i] = ((const int32_t *)e->y)[s];
    }
}

static void k1_linear(rt_exec *e)
{
    const float *x = e->act + (int64_t)U_X * e->nmax;
    float *z = e->act + (int64_t)U_Z * e->nmax;
    const float *w = e->param + OFF_W, *b = e->param + OFF_B;
    rt_sgemm(0, 1, e->n, NOUT, NIN, x, NIN, w, NIN, z, NOUT);
    for (int i = 0; i < e->n; i++)
        for (int j = 0; j < NOUT; j++)
            z[i * NOUT + j] += b[j];
}

/* Loss and accuracy; with dz != NULL also dloss/dlogits for 'mean'. */
static void cross_entropy(rt_exec *e, float *dz)
{
    const float *z = e->act + (int64_t)U_Z * e->nmax;
    const int32_t *y = (const int32_t *)(e->act + (int64_t)U_Y * e->nmax);
    double loss = 0, correct = 0;
    for (int i = 0; i < e->n; i++) {
        const float *zi = z + i * NOUT;
        int am = 0;
        for (int j = 1; j < NOUT; j++)
            if (zi[j] > zi[am])
                am = j;
        double se = 0;
        for (int j = 0; j < NOUT; j++)
            se += exp((double)zi[j] - zi[am]);
        double lse = zi[am] + log(se);
        loss += lse - zi[y[i]];
        correct += am == y[i];
        if (dz)
            for (int j = 0; j < NOUT; j++)
                dz[i * NOUT + j] =
                    (float)((exp((double)zi[j] - lse) - (j == y[i])) / e->n);
    }
    e->stat[0] = loss;
    e->stat[1] = correct;
}

static void k2_ce_train(rt_exec *e) { cross_entropy(e, e->act + (int64_t)U_DZ * e->nmax); }
static void k2_ce_eval(rt_exec *e) { cross_entropy(e, NULL); }

static void k3_linear_bwd(rt_exec *e)
{
    const float *x = e->act + (int64_t)U_X * e->nmax;
    const float *dz = e->act + (int64_t)U_DZ * e->nmax;
    float *gw = e->grad + OFF_W, *gb = e->grad + OFF_B;
    rt_sgemm(1, 0, NOUT, NIN, e->n, dz, NOUT, x, NIN, gw, NIN);
    for (int j = 0; j < NOUT; j++) {
        float s = 0;
        for (int i = 0; i < e->n; i++)
            s += dz[i * NOUT + j];
        gb[j] = s;
    }
}

static void k4_sgd(rt_exec *e)
{
    const int64_t n = NOUT * NIN + NOUT;
    float *p = e->param, *g = e->grad, *buf = e->opt;
    for (int64_t k = 0; k < n; k++) {
        buf[k] = e->step == 0 ? g[k] : MOMENTUM * buf[k] + g[k];
        p[k] -= e->lr * buf[k];
    }
}

static const rt_kernel train_k[] = {
    {.fn = k0_load, .name = "k0_load", .phase = RT_PH_DATA},
    {.fn = k1_linear, .name = "k1_linear", .phase = RT_PH_FORWARD},
    {.fn = k2_ce_train, .name = "k2_ce_train", .phase = RT_PH_BACKWARD},
    {.fn = k3_linear_bwd, .name = "k3_linear_bwd", .phase = RT_PH_BACKWARD},
    {.fn = k4_sgd, .name = "k4_sgd", .phase = RT_PH_OPTIMIZER},
};
static const rt_kernel eval_k[] = {
    {.fn = k0_load, .name = "k0_load", .phase = RT_PH_DATA},
    {.fn = k1_linear, .name = "k1_linear", .phase = RT_PH_FORWARD},
    {.fn = k2_ce_eval, .name = "k2_ce_eval", .phase = RT_PH_FORWARD},
};

static const rt_param params[] = {
    {"fc.weight", 2, {NOUT, NIN, 0, 0}, OFF_W, NOUT * NIN, NIN, RT_INIT_KAIMING_UNIFORM, 0, 3},
    {"fc.bias", 1, {NOUT, 0, 0, 0}, OFF_B, NOUT, NIN, RT_INIT_BIAS_UNIFORM, 0, 3},
};

static const rt_model cddp_model = {
    .abi = RT_ABI_VERSION,
    .name = "fake_softmax",
    .source = "tests/runtime/rt_fake_model.c",
    .params = params,
    .nparam = 2,
    .param_floats = NOUT * NIN + NOUT,
    .opt_floats = NOUT * NIN + NOUT,
    .train = {train_k, 5, U_DZ + NOUT, 0, 2, 0, 1},
    .eval = {eval_k, 3, U_Z + NOUT, 0, 2, 0, 1},
    .in_rank = 3, .in_dim = {1, 28, 28},
    .nclass = NOUT,
    .target = RT_TGT_CLASS,
    .data = {.kind = RT_SRC_IDX, .path = "/usr/share/datasets/fashion-mnist", .nnorm = 1,
             .norm_mean = (const float[]){MEAN}, .norm_std = (const float[]){STD}},
    .reduction = RT_RED_MEAN,
    .lr = 0.01f, .momentum = MOMENTUM, .dampening = 0, .weight_decay = 0, .nesterov = 0,
    .batch = 64, .epochs = 1, .shuffle = 1, .drop_last = 0,
    .seed = 42,
};

int main(int c, char **v) { return rt_main(&cddp_model, c, v); }
