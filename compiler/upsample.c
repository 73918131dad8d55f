/* upsample.c: nn.Upsample and F.interpolate over images [N, C, H, W], as
 * compositions of the ops over tensors of any rank (ups_):
 *
 *   nearest, an integer scale: each pixel repeated s x s times, a view of
 *     x as [N, C, H, 1, W, 1] expanded to [N, C, H, s, W, s] and viewed as
 *     [N, C, H s, W s]; its gradient sums each block (the expand's);
 *   bilinear: y = A_h x A_w^T, the interpolation matrices A [out, in]
 *     built from aranges as PyTorch computes its source coordinates
 *     (align_corners false: (dst + 0.5) scale - 0.5 clamped into [0, in - 1];
 *     true: dst (in - 1) / (out - 1)), each row the tent max(0, 1 - |src - j|),
 *     whose two nonzero entries are PyTorch's (1 - lambda, lambda); the
 *     products are batched matmuls (constant left and right operands, no
 *     gradient of their own), so x's gradient is A_h^T dy A_w.
 *
 * Each matrix is a constant of the program: a few small kernels a step
 * recompute it (they take no input). */
#include <math.h>
#include <string.h>

#include "sema.h"

static Val node(Sema *S, Op op, Val a, Val b, Shape s, double lo, double hi, Loc loc)
{
    if ((op_arity[op] > 0 && a.id < 0) || (op_arity[op] > 1 && b.id < 0))
        return POISON;
    Val y = layer_node(S, op, a.id, b.id, s, loc);
    if (y.id >= 0)
        S->g->n[y.id]->ten.lo = lo, S->g->n[y.id]->ten.hi = hi;
    return y;
}

/* A [out, in]: row i the weights of input j for output i */
static Val interp_matrix(Sema *S, int64_t out, int64_t in, double scale, int align, Loc loc)
{
    Val i = node(S, OP_T_ARANGE, POISON, POISON, shape1(out), 0, 1, loc);
    i = layer_view(S, i, shape2(out, 1), loc);
    Val src;
    if (align) {
        const double r = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0;
        src = node(S, OP_T_AFFINE, i, POISON, i.s, r, 0, loc);
    } else {
        src = node(S, OP_T_AFFINE, i, POISON, i.s, 1, 0.5, loc);
        src = node(S, OP_T_AFFINE, src, POISON, src.s, scale, -0.5, loc);
    }
    src = node(S, OP_T_CLAMP, src, POISON, src.s, 0, (double)(in - 1), loc);
    Val j = layer_view(S, node(S, OP_T_ARANGE, POISON, POISON, shape1(in), 0, 1, loc), shape2(1, in), loc);
    Val d = node(S, OP_BC_SUB, src, j, shape2(out, in), 0, 0, loc);
    Val t = node(S, OP_T_AFFINE, node(S, OP_T_ABS, d, POISON, d.s, 0, 0, loc), POISON, d.s, -1, 1, loc);
    return node(S, OP_T_CLAMP, t, POISON, t.s, 0, INFINITY, loc);
}

static Val resize(Sema *S, Val x, int bilinear, int64_t oh, int64_t ow, double sh, double sw, int align, Loc loc)
{
    if (x.id < 0)
        return x;
    const int64_t n = x.s.d[0], c = x.s.d[1], h = x.s.d[2], w = x.s.d[3];
    if (!bilinear) {
        if (oh % h || ow % w) {
            diag_error(loc, "nearest upsampling from %lldx%lld to %lldx%lld is not supported: integer scales only",
                       (long long)h, (long long)w, (long long)oh, (long long)ow);
            return POISON;
        }
        const int64_t kh = oh / h, kw = ow / w;
        Val v = layer_view(S, x, (Shape){6, {n, c, h, 1, w, 1}}, loc);
        v = node(S, OP_BC_COPY, v, POISON, (Shape){6, {n, c, h, kh, w, kw}}, 0, 0, loc);
        return layer_view(S, v, (Shape){4, {n, c, oh, ow}}, loc);
    }
    /* PyTorch's scale: 1 / scale_factor where one is given, in / out else */
    Val ah = interp_matrix(S, oh, h, sh > 0 ? 1.0 / sh : (double)h / (double)oh, align, loc);
    Val aw = interp_matrix(S, ow, w, sw > 0 ? 1.0 / sw : (double)w / (double)ow, align, loc);
    Val awt = node(S, OP_T_PERMUTE, aw, POISON, shape2(w, ow), 0, 0, loc);
    if (awt.id >= 0)
        S->g->n[awt.id]->ten.perm[0] = 1, S->g->n[awt.id]->ten.perm[1] = 0;
    return tfn_matmul(S, tfn_matmul(S, ah, x, "interpolate", loc), awt, "interpolate", loc);
}

Val ups_apply(Sema *S, const Layer *l, Val x, Loc loc)
{
    if (x.s.rank != 4) {
        diag_error(loc, "%s expects input [N, C, H, W], got %s", l->what, ir_shape_str(&x.s));
        return POISON;
    }
    int64_t o[2];
    for (int d = 0; d < 2; d++)
        o[d] = l->scale[d] > 0 ? (int64_t)floor((double)x.s.d[2 + d] * l->scale[d]) : l->osize[d];
    if (o[0] < 1 || o[1] < 1 || (double)o[0] * (double)o[1] * (double)x.s.d[1] > MAX_DIM) {
        diag_error(loc, "%s of %s to %lldx%lld: %s", l->what, ir_shape_str(&x.s), (long long)o[0], (long long)o[1],
                   o[0] < 1 || o[1] < 1 ? "empty" : "too large");
        return POISON;
    }
    return resize(S, x, l->bilinear, o[0], o[1], l->scale[0], l->scale[1], l->align, loc);
}
