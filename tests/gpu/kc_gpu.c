/* tests/gpu/kc_gpu.c: kernel_check's GPU backend and its main: the
 * checker of tests/cuda/kc_core.c (random state, the C kernels, NaN
 * poisoning, the perturbation error scale, the judging, the whole-plan
 * run) with the CUDA kernels run on a GPU through the runtime's own
 * driver-API layer (rt_cuda: the NVRTC compile, the module, device
 * memory, the launch with program.c's geometry). A real GPU runs a
 * block's threads in an order of its own: one thread order.
 *
 * Built by tests/gpu/run.sh on the GPU host, and here by
 * tests/cuda/kernel_check_gpu.sh against the fake driver
 * (tests/fakes/fake_cuda.c), which runs it on the CPU:
 *   cc -Iruntime -Itests/cuda -IDIR tests/gpu/kc_gpu.c tests/cuda/kc_core.c tests/cuda/kc_act16.c \
 *      tests/cuda/kc_program.c libcddprt.a ...      (DIR: cddpc --emit c DIR)
 *
 *   kernel_check --compile-only   NVRTC compile of every kernel for the
 *                                 device's arch (no cache): time, and per
 *                                 kernel registers, local and shared memory
 *   kernel_check [options]        the comparison (kc_core.h's options);
 *                                 default sizes: the model's batch B, full,
 *                                 about half and one row, steps 0 and 3 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_core.h"
#include "rt_cuda.h"

const rt_model *cddp_the_model(void);

#define MAXFN 512

typedef struct gpu {
    rt_cuda cu;
    int opened;
    CUdeviceptr act, fix, param, grad, opt, stat, x, y, norm, idx, exec;
    CUfunction fn[MAXFN];
    int nfn;
    const char *why;
} gpu;

static const rt_model *M;

/* The driver, the device and the module of the model's full NVRTC source
 * (use_cache 0: compiled now, for the timing). 0 on success. */
static int gpu_start(gpu *g, int use_cache, double *compile_s)
{
    static char why[640];
    if (!M->cuda_src) {
        g->why = "the model has no CUDA source";
        return -1;
    }
    if (rt_cuda_open(&g->cu, 0, 1, why, sizeof why) != 0) {
        g->why = why;
        return -1;
    }
    g->opened = 1;
    char *src = rt_cuda_source(M->cuda_src, rt_cuda_turn_body(&M->train));
    const double t0 = rt_now();
    const int rc = !src || rt_cuda_load_module(&g->cu, src, use_cache) != 0;
    if (compile_s)
        *compile_s = rt_now() - t0;
    free(src);
    if (rc) {
        g->why = "the CUDA source did not load (above)";
        return -1;
    }
    return 0;
}

static int gpu_open(void *ctx, const kc_dims *d)
{
    gpu *g = ctx;
    if (gpu_start(g, 1, NULL))
        return -1;
    g->why = "device memory (above)";
    return rt_cuda_alloc(&g->cu, &g->act, (size_t)d->act * 4, "activations") ||
           rt_cuda_alloc(&g->cu, &g->fix, (size_t)d->fix * 4, "scratch") ||
           rt_cuda_alloc(&g->cu, &g->param, (size_t)d->param * 4, "parameters") ||
           rt_cuda_alloc(&g->cu, &g->grad, (size_t)d->param * 4, "gradients") ||
           rt_cuda_alloc(&g->cu, &g->opt, (size_t)d->opt * 4, "optimizer state") ||
           rt_cuda_alloc(&g->cu, &g->stat, (size_t)d->stat * 8, "statistics") ||
           rt_cuda_alloc(&g->cu, &g->x, (size_t)d->x_bytes, "samples") ||
           rt_cuda_alloc(&g->cu, &g->y, (size_t)d->y_bytes, "targets") ||
           rt_cuda_alloc(&g->cu, &g->norm, (size_t)d->norm_bytes, "normalization") ||
           rt_cuda_alloc(&g->cu, &g->idx, (size_t)d->nidx * 4, "indices") ||
           rt_cuda_alloc(&g->cu, &g->exec, sizeof(rt_exec), "exec");
}

/* the device's rt_exec (and the runtime's own structs) against the
 * host's, by the runtime's layout kernel */
static int gpu_layout(void *ctx, const rt_model *m)
{
    gpu *g = ctx;
    if (rt_cuda_check_layout(&g->cu, m->cuda_src) != 0) {
        printf("FAIL rt_exec layout on the device differs from cddprt.h (above)\n");
        return -1;
    }
    printf("rt_exec layout on the device (%s, %s) matches cddprt.h\n", g->cu.name, g->cu.arch);
    return 0;
}

static int gpu_find(void *ctx, const char *name)
{
    gpu *g = ctx;
    if (g->nfn == MAXFN) {
        printf("FAIL more than %d kernels\n", MAXFN);
        return -1;
    }
    if (rt_cuda_function(&g->cu, name, &g->fn[g->nfn]) != 0)
        return -1;
    return g->nfn++;
}

static int gpu_bind(void *ctx, const kc_dims *d, const rt_exec *e)
{
    gpu *g = ctx;
    rt_exec de = *e;
    de.act = (float *)(uintptr_t)g->act;
    de.fix = (float *)(uintptr_t)g->fix;
    de.param = (float *)(uintptr_t)g->param;
    de.grad = (float *)(uintptr_t)g->grad;
    de.opt = (float *)(uintptr_t)g->opt;
    de.stat = (double *)(uintptr_t)g->stat;
    de.x = (const void *)(uintptr_t)g->x;
    de.y = (const void *)(uintptr_t)g->y;
    de.norm = (const float *)(uintptr_t)g->norm;
    de.idx = (const int32_t *)(uintptr_t)g->idx;
    g->why = "a copy to the device (above)";
    return rt_cuda_htod(&g->cu, g->x, e->x, (size_t)d->x_bytes) ||
           rt_cuda_htod(&g->cu, g->y, e->y, (size_t)d->y_bytes) ||
           rt_cuda_htod(&g->cu, g->norm, e->norm, (size_t)d->norm_bytes) ||
           rt_cuda_htod(&g->cu, g->idx, e->idx, (size_t)d->nidx * 4) ||
           rt_cuda_htod(&g->cu, g->exec, &de, sizeof de);
}

static int gpu_put(void *ctx, const kc_dims *d, const kc_state *s)
{
    gpu *g = ctx;
    g->why = "a copy to the device (above)";
    return rt_cuda_htod(&g->cu, g->act, s->act, (size_t)d->act * 4) ||
           rt_cuda_htod(&g->cu, g->fix, s->fix, (size_t)d->fix * 4) ||
           rt_cuda_htod(&g->cu, g->param, s->param, (size_t)d->param * 4) ||
           rt_cuda_htod(&g->cu, g->grad, s->grad, (size_t)d->param * 4) ||
           rt_cuda_htod(&g->cu, g->opt, s->opt, (size_t)d->opt * 4) ||
           rt_cuda_htod(&g->cu, g->stat, s->stat, (size_t)d->stat * 8);
}

static int gpu_get(void *ctx, const kc_dims *d, kc_state *s)
{
    gpu *g = ctx;
    g->why = "a copy from the device (above)";
    return rt_cuda_dtoh(&g->cu, s->act, g->act, (size_t)d->act * 4) ||
           rt_cuda_dtoh(&g->cu, s->fix, g->fix, (size_t)d->fix * 4) ||
           rt_cuda_dtoh(&g->cu, s->param, g->param, (size_t)d->param * 4) ||
           rt_cuda_dtoh(&g->cu, s->grad, g->grad, (size_t)d->param * 4) ||
           rt_cuda_dtoh(&g->cu, s->opt, g->opt, (size_t)d->opt * 4) ||
           rt_cuda_dtoh(&g->cu, s->stat, g->stat, (size_t)d->stat * 8);
}

static int gpu_launch(void *ctx, int fn, const char *name, const unsigned grid[3], const unsigned block[3],
                      int reverse)
{
    gpu *g = ctx;
    (void)reverse; /* orders is 1: the core never asks */
    g->why = "the launch (above)";
    return rt_cuda_launch1(&g->cu, g->fn[fn], name, grid, block, g->exec) || rt_cuda_wait(&g->cu, name);
}

static const char *gpu_error(void *ctx) { return ((gpu *)ctx)->why ? ((gpu *)ctx)->why : ""; }

static void gpu_summary(void *ctx, char *buf, size_t len)
{
    gpu *g = ctx;
    snprintf(buf, len, "%s, %s, NVRTC %d.%d", g->cu.name, g->cu.arch, rt_nv.major, rt_nv.minor);
}

static void gpu_close(void *ctx)
{
    gpu *g = ctx;
    CUdeviceptr all[] = {g->act, g->fix, g->param, g->grad, g->opt, g->stat, g->x, g->y, g->norm, g->idx, g->exec};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            rt_cuda_free(all[i]);
    if (g->opened)
        rt_cuda_close(&g->cu);
    g->opened = 0;
}

/* --compile-only: NVRTC time and each kernel's resources */
static int gpu_compile_only(void *ctx, const rt_model *m)
{
    gpu *g = ctx;
    double tc = 0;
    if (gpu_start(g, 0, &tc)) {
        fprintf(stderr, "kernel_check: %s\n", g->why);
        gpu_close(g);
        return 1;
    }
    const rt_plan *plans[2] = {&m->train, &m->eval};
    const char *pname[2] = {"train", "eval"};
    int rc = 0, nk = 0;
    printf("  %-6s %-44s %5s %8s %8s %7s\n", "plan", "kernel", "regs", "local B", "shared B", "maxthr");
    for (int q = 0; q < 2; q++)
        for (int k = 0; k < plans[q]->nk; k++) {
            CUfunction f;
            int regs = 0, local = 0, shared = 0, maxt = 0;
            /* CUfunction_attribute: 0 max threads per block, 1 shared
             * bytes, 3 local bytes, 4 registers */
            if (rt_cuda_function(&g->cu, plans[q]->cu[k].name, &f) != 0 ||
                CU_CHECK(rt_cu.cuFuncGetAttribute(&regs, 4, f)) || CU_CHECK(rt_cu.cuFuncGetAttribute(&local, 3, f)) ||
                CU_CHECK(rt_cu.cuFuncGetAttribute(&shared, 1, f)) || CU_CHECK(rt_cu.cuFuncGetAttribute(&maxt, 0, f))) {
                rc = 1;
                continue;
            }
            printf("  %-6s %-44s %5d %8d %8d %7d%s\n", pname[q], plans[q]->cu[k].name, regs, local, shared, maxt,
                   local ? "  (local memory: spills?)" : "");
            nk++;
        }
    printf("compiled %d kernels for %s in %.2f s (NVRTC %d.%d, %s)\n", nk, g->cu.arch, tc, rt_nv.major, rt_nv.minor,
           g->cu.name);
    gpu_close(g);
    return rc;
}

int main(int argc, char **argv)
{
    static gpu g;
    rt_prog = "kernel_check";
    M = cddp_the_model();
    const kc_backend b = {
        .name = "gpu",
        .orders = 1,
        .fatal_errors = 1,
        .ctx = &g,
        .open = gpu_open,
        .layout = gpu_layout,
        .compile_only = gpu_compile_only,
        .find = gpu_find,
        .bind = gpu_bind,
        .put = gpu_put,
        .get = gpu_get,
        .launch = gpu_launch,
        .error = gpu_error,
        .summary = gpu_summary,
        .close = gpu_close,
    };
    /* the batch the model trains with: full, a partial batch and one row,
     * each at steps 0 and 3 (Adam's bias correction, dropout's stream) */
    const int B = M->batch > 0 ? M->batch : 64;
    const int h = B > 2 ? (B / 2 + 5 < B ? B / 2 + 5 : B - 1) : 1;
    char sizes[128];
    snprintf(sizes, sizeof sizes, "%d:%d:0,%d:%d:3,%d:%d:0,%d:%d:3,%d:1:0,%d:1:3", B, B, B, B, B, h, B, h, B, B);
    return kc_main(argc, argv, M, &b, sizes);
}
