/* tests/cuda/kc_emu.c: kernel_check's emulator backend and its main. The
 * CUDA kernels are the emitted all.cu compiled by g++ under emu.h
 * (kc_cuda.cpp), run on the CPU; "device memory" is a second set of host
 * arenas, so put and get are memcpy. The emulator can run each block's
 * threads in reverse order, which exposes a missing barrier: two thread
 * orders. Built by kernel_check.sh from this file, kc_core.c (the
 * checker), kc_program.c (the C kernels), kc_cuda.o and libcddprt.a.
 * Beyond the core's checks it holds the kernels to launch.txt (from which
 * its table was generated): the plan's kernels in order, the same
 * geometry as program.c's launch table, and no block larger than the
 * kernel's __launch_bounds__. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_core.h"

const rt_model *cddp_the_model(void);
int kc_cuda_count(void);
const char *kc_cuda_name(int i);
const char *kc_cuda_plan(int i);
int kc_cuda_bounds(int i);
void kc_cuda_geometry(int i, int nmax, unsigned grid[3], unsigned block[3], const long long **gmul,
                      const long long **gdiv, const unsigned **gfix);
int kc_cuda_launch(int i, const void *exec, const unsigned grid[3], const unsigned block[3], int reverse);
const char *kc_cuda_error(void);
unsigned long long kc_cuda_switches(void);
int kc_cuda_layout(size_t *out);

typedef struct emu {
    kc_state dev; /* the emulated device's arenas */
    rt_exec e;    /* pointing at them */
    char why[128];
} emu;

static int emu_open(void *ctx, const kc_dims *max)
{
    emu *u = ctx;
    u->dev.act = calloc((size_t)max->act + 1, 4);
    u->dev.fix = calloc((size_t)max->fix + 1, 4);
    u->dev.param = calloc((size_t)max->param + 1, 4);
    u->dev.grad = calloc((size_t)max->param + 1, 4);
    u->dev.opt = calloc((size_t)max->opt + 1, 4);
    u->dev.stat = calloc((size_t)max->stat + 1, 8);
    if (!u->dev.act || !u->dev.fix || !u->dev.param || !u->dev.grad || !u->dev.opt || !u->dev.stat) {
        snprintf(u->why, sizeof u->why, "out of memory");
        return -1;
    }
    return 0;
}

static int emu_layout(void *ctx, const rt_model *m)
{
    (void)ctx;
    (void)m;
    size_t cu[32], host[32];
    const int k = kc_cuda_layout(cu), kh = kc_layout_host(host);
    if (k != kh) {
        printf("FAIL rt_exec layout: %d fields in the CUDA prelude's list, %d in cddprt.h's\n", k, kh);
        return -1;
    }
    for (int i = 0; i < k; i++)
        if (cu[i] != host[i]) {
            printf("FAIL rt_exec layout: %s is %zu in the CUDA prelude, %zu in cddprt.h\n", kc_layout_names[i], cu[i],
                   host[i]);
            return -1;
        }
    printf("rt_exec layout of the CUDA prelude matches cddprt.h (%zu bytes)\n", host[0]);
    return 0;
}

/* launch.txt against the plan and program.c's launch table */
static int emu_check_plan(void *ctx, const char *which, const rt_plan *p)
{
    (void)ctx;
    int ok = 1, nlisted = 0;
    for (int i = 0; i < kc_cuda_count(); i++) {
        const char *pl = kc_cuda_plan(i);
        if (strstr(pl, which) != pl && strstr(which, pl) != which)
            continue;
        if (nlisted < p->nk && strcmp(kc_cuda_name(i), p->k[nlisted].name)) {
            printf("FAIL %s kernel %d is %s in the C plan but %s in launch.txt\n", which, nlisted,
                   p->k[nlisted].name, kc_cuda_name(i));
            ok = 0;
        }
        nlisted++;
    }
    if (nlisted != p->nk) {
        printf("FAIL %s plan has %d C kernels, launch.txt lists %d for it\n", which, p->nk, nlisted);
        ok = 0;
    }
    for (int k = 0; ok && k < p->nk; k++) {
        int i = 0;
        while (i < kc_cuda_count() && strcmp(kc_cuda_name(i), p->k[k].name))
            i++;
        const rt_cuda_launch *L = &p->cu[k];
        unsigned g[3], b[3];
        const long long *gm, *gd;
        const unsigned *gf;
        kc_cuda_geometry(i, 1, g, b, &gm, &gd, &gf);
        int same = 1;
        for (int d = 0; d < 3; d++)
            same = same && L->block[d] == b[d] && L->gdiv[d] == gd[d] && L->gmul[d] == gm[d] &&
                   (gd[d] != 0 || L->gfix[d] == gf[d]);
        if (!same) {
            printf("FAIL %s kernel %s: the launch table in program.c disagrees with launch.txt\n", which,
                   p->k[k].name);
            ok = 0;
        }
        const unsigned threads = b[0] * b[1] * b[2];
        const int lb = kc_cuda_bounds(i);
        if (lb > 0 && threads > (unsigned)lb) {
            printf("FAIL %s: block of %u threads exceeds __launch_bounds__(%d): the launch would fail\n",
                   p->k[k].name, threads, lb);
            ok = 0;
        }
    }
    if (ok)
        printf("%s: launch.txt agrees with the C plan and program.c's rt_cuda_launch table\n", which);
    return ok ? 0 : -1;
}

static int emu_find(void *ctx, const char *name)
{
    (void)ctx;
    for (int i = 0; i < kc_cuda_count(); i++)
        if (!strcmp(kc_cuda_name(i), name))
            return i;
    printf("FAIL kernel %s has no CUDA twin in launch.txt\n", name);
    return -1;
}

static int emu_bind(void *ctx, const kc_dims *d, const rt_exec *e)
{
    (void)d;
    emu *u = ctx;
    u->e = *e; /* the dataset stays where the core keeps it */
    u->e.act = u->dev.act;
    u->e.fix = u->dev.fix;
    u->e.param = u->dev.param;
    u->e.grad = u->dev.grad;
    u->e.opt = u->dev.opt;
    u->e.stat = u->dev.stat;
    return 0;
}

static void copy_state(kc_state *t, const kc_state *s, const kc_dims *d)
{
    memcpy(t->act, s->act, (size_t)d->act * 4);
    memcpy(t->fix, s->fix, (size_t)d->fix * 4);
    memcpy(t->param, s->param, (size_t)d->param * 4);
    memcpy(t->grad, s->grad, (size_t)d->param * 4);
    memcpy(t->opt, s->opt, (size_t)d->opt * 4);
    memcpy(t->stat, s->stat, (size_t)d->stat * 8);
}

static int emu_put(void *ctx, const kc_dims *d, const kc_state *s)
{
    copy_state(&((emu *)ctx)->dev, s, d);
    return 0;
}

static int emu_get(void *ctx, const kc_dims *d, kc_state *s)
{
    copy_state(s, &((emu *)ctx)->dev, d);
    return 0;
}

static int emu_launch(void *ctx, int fn, const char *name, const unsigned grid[3], const unsigned block[3],
                      int reverse)
{
    (void)name;
    return kc_cuda_launch(fn, &((emu *)ctx)->e, grid, block, reverse);
}

static const char *emu_error(void *ctx)
{
    emu *u = ctx;
    return u->why[0] ? u->why : kc_cuda_error();
}

static void emu_summary(void *ctx, char *buf, size_t len)
{
    (void)ctx;
    snprintf(buf, len, "%llu emulated context switches", kc_cuda_switches());
}

static void emu_close(void *ctx)
{
    emu *u = ctx;
    free(u->dev.act);
    free(u->dev.fix);
    free(u->dev.param);
    free(u->dev.grad);
    free(u->dev.opt);
    free(u->dev.stat);
    memset(&u->dev, 0, sizeof u->dev);
}

int main(int argc, char **argv)
{
    static emu u;
    const kc_backend b = {
        .name = "emulator",
        .orders = 2,
        .ctx = &u,
        .open = emu_open,
        .layout = emu_layout,
        .check_plan = emu_check_plan,
        .find = emu_find,
        .bind = emu_bind,
        .put = emu_put,
        .get = emu_get,
        .launch = emu_launch,
        .error = emu_error,
        .summary = emu_summary,
        .close = emu_close,
    };
    /* small batches, one partial, a step past 0 (Adam's bias correction,
     * dropout's stream) and a width no block size divides */
    return kc_main(argc, argv, cddp_the_model(), &b, "19:19:0,64:37:3,70:70:1");
}
