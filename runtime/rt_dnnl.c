/* rt_dnnl.c: fp32 convolutions (forward, data gradient, weight gradient)
 * through oneDNN, the library PyTorch itself runs CPU convolutions with.
 *
 * The emitted C kernel of a convolution calls rt_dnnl_conv first and runs
 * its own im2col + rt_sgemm loops only when this returns 0: a runtime
 * built without oneDNN (CDDP_NO_DNNL: no <oneapi/dnnl/dnnl.h> at build
 * time, e.g. the GPU hosts), or a geometry oneDNN refuses.
 *
 * Our tensors stay NCHW (every other kernel indexes them so); oneDNN picks
 * its own layouts (format `any`: channel-blocked by 16 with AVX-512, where
 * its direct JIT kernels run 2-4x faster than on NCHW, which it only
 * serves through its own im2col GEMM), and reorders move the operands in
 * and out of them around each call. The primitives, reorders and blocked
 * buffers are created on a kernel's first call for a geometry and reused
 * every step after: a small list per kernel (the train batch, the last
 * partial batch, the eval batch), kept until exit.
 *
 * kind | RT_CONV_BF16 (`precision bf16`, where the CPU has AVX512-BF16):
 * the two operands read go in as bf16 (the reorders into oneDNN's layouts
 * convert them, round to nearest even), fp32 accumulation, the operand
 * written comes out fp32 and is rounded to bf16 as autocast stores it: the
 * emitted loops' numbers up to the order of the fp32 sums (and bf16
 * subnormal operands, which the bf16 dot product reads as 0). */
#include "rt_internal.h"

#ifdef CDDP_NO_DNNL
int rt_dnnl_conv(rt_dnnl_conv_cache **cache, int kind, const rt_conv_geo *g, const float *x, const float *w,
                 const float *bias, float *y)
{
    (void)cache, (void)kind, (void)g, (void)x, (void)w, (void)bias, (void)y;
    return 0;
}
#else
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

/* One operand: the user's NCHW (or OIHW) memory, and when the primitive
 * wants another layout, its own buffer and the reorder into it (operands
 * read) or out of it (the operand written). */
typedef struct Operand {
    dnnl_memory_t user, mine;       /* mine == user when no reorder is needed */
    dnnl_primitive_t reorder;
    int out;                        /* written by the primitive: reorder after */
} Operand;

enum { OP_X, OP_W, OP_Y, OP_B, NOPS };

struct rt_dnnl_conv_cache {
    rt_dnnl_conv_cache *next;
    int kind;
    rt_conv_geo g;
    int ok;                         /* 0: oneDNN refused this geometry: the caller's loops */
    dnnl_primitive_t prim;
    Operand op[NOPS];
    int has_bias;
};

static dnnl_engine_t engine;
static dnnl_stream_t stream;

/* CDDP_DNNL=0 in the environment: the emitted loops do every convolution
 * (tests/SUITE checks that path against PyTorch too). */
static int started(void)
{
    static int state;               /* 0 untried, 1 ready, -1 off or failed */
    if (state == 0) {
        const char *env = getenv("CDDP_DNNL");
        state = env && strcmp(env, "0") == 0 ? -1 : 0;
    }
    if (state == 0) {
        state = dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success &&
                        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success
                    ? 1
                    : -1;
    }
    return state == 1;
}

/* The user layouts: x, y as NCHW; weights OIHW, or GOIHW with groups. */
static int user_md(dnnl_memory_desc_t *md, int which, const rt_conv_geo *g, dnnl_format_tag_t *any_tag)
{
    dnnl_dims_t d;
    int nd = 4;
    dnnl_format_tag_t tag = dnnl_nchw;
    switch (which) {
    case OP_X: d[0] = g->n, d[1] = g->C, d[2] = g->H, d[3] = g->W; break;
    case OP_Y: d[0] = g->n, d[1] = g->O, d[2] = g->OH, d[3] = g->OW; break;
    case OP_B: d[0] = g->O, nd = 1, tag = dnnl_x; break;
    default:
        if (g->groups > 1) {
            d[0] = g->groups, d[1] = g->O / g->groups, d[2] = g->C / g->groups, d[3] = g->kh, d[4] = g->kw;
            nd = 5, tag = dnnl_goihw;
        } else {
            d[0] = g->O, d[1] = g->C, d[2] = g->kh, d[3] = g->kw;
            tag = dnnl_oihw;
        }
    }
    if (any_tag)
        *any_tag = which == OP_B ? dnnl_x : dnnl_format_tag_any;
    return dnnl_memory_desc_init_by_tag(md, nd, d, dnnl_f32, tag) == dnnl_success;
}

static int any_md(dnnl_memory_desc_t *md, int which, const rt_conv_geo *g, dnnl_data_type_t type)
{
    dnnl_memory_desc_t u;
    dnnl_format_tag_t t;
    if (!user_md(&u, which, g, &t))
        return 0;
    return dnnl_memory_desc_init_by_tag(md, u.ndims, u.dims, type, t) == dnnl_success;
}

/* the operand a kind writes: dst, diff_src or diff_weights */
static int written(int kind)
{
    kind &= ~RT_CONV_BF16;
    return kind == RT_CONV_FWD ? OP_Y : kind == RT_CONV_DX ? OP_X : OP_W;
}

/* bf16 for an operand read at RT_CONV_BF16 (all three in the forward
 * hint of a backward kind, hint = 1), f32 otherwise */
static dnnl_data_type_t op_type(int kind, int which, int hint)
{
    return (kind & RT_CONV_BF16) && which != OP_B && (hint || which != written(kind)) ? dnnl_bf16 : dnnl_f32;
}

/* The operand `which`, whose layout the primitive reports as `want`. */
static int operand(Operand *o, int which, const rt_conv_geo *g, const dnnl_memory_desc_t *want, int out)
{
    dnnl_memory_desc_t u;
    if (!user_md(&u, which, g, NULL) || dnnl_memory_create(&o->user, &u, engine, DNNL_MEMORY_NONE) != dnnl_success)
        return 0;
    o->out = out;
    if (dnnl_memory_desc_equal(&u, want)) {
        o->mine = o->user;
        return 1;
    }
    dnnl_primitive_desc_t rpd;
    if (dnnl_memory_create(&o->mine, want, engine, DNNL_MEMORY_ALLOCATE) != dnnl_success)
        return 0;
    if (out ? dnnl_reorder_primitive_desc_create(&rpd, want, engine, &u, engine, NULL)
            : dnnl_reorder_primitive_desc_create(&rpd, &u, engine, want, engine, NULL))
        return 0;
    int ok = dnnl_primitive_create(&o->reorder, rpd) == dnnl_success;
    dnnl_primitive_desc_destroy(rpd);
    return ok;
}

static int build(rt_dnnl_conv_cache *c)
{
    const rt_conv_geo *g = &c->g;
    const int kind = c->kind & ~RT_CONV_BF16, hint_all = kind != RT_CONV_FWD;
    dnnl_memory_desc_t x, w, y, b, hx, hw, hy;
    if (!any_md(&x, OP_X, g, op_type(c->kind, OP_X, 0)) || !any_md(&w, OP_W, g, op_type(c->kind, OP_W, 0)) ||
        !any_md(&y, OP_Y, g, op_type(c->kind, OP_Y, 0)) || !any_md(&b, OP_B, g, dnnl_f32) ||
        !any_md(&hx, OP_X, g, op_type(c->kind, OP_X, hint_all)) ||
        !any_md(&hw, OP_W, g, op_type(c->kind, OP_W, hint_all)) ||
        !any_md(&hy, OP_Y, g, op_type(c->kind, OP_Y, hint_all)))
        return 0;
    /* oneDNN's dilation counts the gaps (0: none) and takes the right
     * padding, which PyTorch's floor division leaves implicit */
    dnnl_dims_t stride = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pl = {g->ph, g->pw};
    dnnl_dims_t pr = {(g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->H - g->ph,
                      (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->W - g->pw};
    dnnl_convolution_desc_t fd, bd;
    if (dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &hx, &hw,
                                                   c->has_bias ? &b : NULL, &hy, stride, dil, pl, pr) != dnnl_success)
        return 0;
    dnnl_primitive_desc_t hint, pd;
    if (dnnl_primitive_desc_create(&hint, &fd, NULL, engine, NULL) != dnnl_success)
        return 0;
    int ok = 1;
    if (kind == RT_CONV_FWD) {
        pd = hint, hint = NULL;
    } else {
        dnnl_status_t s = kind == RT_CONV_DX
                              ? dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &x, &w,
                                                                                 &y, stride, dil, pl, pr)
                              : dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &x,
                                                                                    &w, NULL, &y, stride, dil, pl, pr);
        ok = s == dnnl_success && dnnl_primitive_desc_create(&pd, &bd, NULL, engine, hint) == dnnl_success;
        dnnl_primitive_desc_destroy(hint);
    }
    if (!ok)
        return 0;
    const int fwd = kind == RT_CONV_FWD, dx = kind == RT_CONV_DX, dw = kind == RT_CONV_DW;
    ok = operand(&c->op[OP_X], OP_X, g, dnnl_primitive_desc_query_md(pd, dx ? dnnl_query_diff_src_md : dnnl_query_src_md, 0), dx) &&
         operand(&c->op[OP_W], OP_W, g, dnnl_primitive_desc_query_md(pd, dw ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0), dw) &&
         operand(&c->op[OP_Y], OP_Y, g, dnnl_primitive_desc_query_md(pd, fwd ? dnnl_query_dst_md : dnnl_query_diff_dst_md, 0), fwd) &&
         (!c->has_bias || operand(&c->op[OP_B], OP_B, g, &b, 0)) &&
         dnnl_primitive_create(&c->prim, pd) == dnnl_success;
    /* oneDNN's reference kernels are far slower than the emitted loops */
    const char *impl = NULL;
    if (ok && (c->kind & RT_CONV_BF16))
        ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
             strncmp(impl, "ref", 3) != 0;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static int exec_reorder(const Operand *o, int after)
{
    if (!o->reorder || o->out != after)
        return 1;
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, after ? o->mine : o->user}, {DNNL_ARG_TO, after ? o->user : o->mine}};
    return dnnl_primitive_execute(o->reorder, stream, 2, a) == dnnl_success;
}

int rt_dnnl_conv(rt_dnnl_conv_cache **cache, int kind, const rt_conv_geo *g, const float *x, const float *w,
                 const float *bias, float *y)
{
    if (!started() || ((kind & RT_CONV_BF16) && (bias || !rt_dnnl_has_bf16())))
        return 0;
    rt_dnnl_conv_cache *c = *cache;
    while (c && (c->kind != kind || c->has_bias != (bias != NULL) || memcmp(&c->g, g, sizeof *g) != 0))
        c = c->next;
    if (!c) {
        c = rt_calloc(1, sizeof *c);
        if (!c)
            return 0;
        c->kind = kind, c->g = *g, c->has_bias = bias != NULL;
        c->ok = build(c);   /* a half-built entry is never run, only kept (refused: fall back) */
        c->next = *cache, *cache = c;
    }
    if (!c->ok)
        return 0;
    const void *ptr[NOPS] = {x, w, y, bias};
    for (int k = 0; k < NOPS; k++)
        if (c->op[k].user && dnnl_memory_set_data_handle_v2(c->op[k].user, (void *)ptr[k], stream) != dnnl_success)
            return 0;
    for (int k = 0; k < NOPS; k++)
        if (!exec_reorder(&c->op[k], 0))
            return 0;
    dnnl_exec_arg_t a[4];
    int na = 0;
    switch (kind & ~RT_CONV_BF16) {
    case RT_CONV_FWD:
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, c->op[OP_X].mine};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, c->op[OP_W].mine};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DST, c->op[OP_Y].mine};
        if (c->has_bias)
            a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, c->op[OP_B].mine};
        break;
    case RT_CONV_DX:
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, c->op[OP_X].mine};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, c->op[OP_W].mine};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, c->op[OP_Y].mine};
        break;
    default:
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, c->op[OP_X].mine};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, c->op[OP_W].mine};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, c->op[OP_Y].mine};
        break;
    }
    if (dnnl_primitive_execute(c->prim, stream, na, a) != dnnl_success)
        return 0;
    for (int k = 0; k < NOPS; k++)
        if (!exec_reorder(&c->op[k], 1))
            return 0;
    if (dnnl_stream_wait(stream) != dnnl_success)
        return 0;
    if (kind & RT_CONV_BF16) {
        const int o = written(kind);
        const int64_t count = o == OP_Y ? g->n * g->O * g->OH * g->OW
                              : o == OP_X ? g->n * g->C * g->H * g->W
                                          : g->O * (g->C / g->groups) * g->kh * g->kw;
        rt_bf16_round((float *)ptr[o], count);
    }
    return 1;
}
#endif
