/* emit_tensor.c: the kernels of the ops over tensors of any rank
 * (K_TENSOR, tensor.c), one per node, for both targets from one text.
 *
 * Each kernel runs over the elements of its result, the batch's extent n
 * wherever the batch's dimension is: an element's index e is decoded into
 * the result's coordinates i0, i1, ..., and each operand is read at its
 * base plus the coordinates times its strides. Broadcasting (stride 0),
 * permutations (the strides permuted) and slices (a base and a stepped
 * stride) are only strides, so no copy precedes these kernels. A
 * reduction's result element then loops over the reduced coordinates in
 * order: sums in double, one order on both targets (deterministic, and
 * within float rounding of PyTorch's). The targets supply the outer loop:
 * OpenMP over the elements on the CPU, a grid-stride loop on the GPU. */
#include <math.h>
#include <string.h>

#include "cddpc.h"

#define THREADS 256

/* The product of s's dimensions from `from` on, as a C expression. */
static char *extent(const Shape *s, int from)
{
    int64_t c = 1;
    int batch = 0;
    for (int i = from; i < s->rank; i++)
        if (IR_IS_BATCH(s->d[i]))
            batch = 1, c *= ir_batch_mul(s->d[i]);
        else
            c *= s->d[i];
    return batch ? util_fmt("(int64_t)%lld * n", (long long)c) : util_fmt("(int64_t)%lld", (long long)c);
}

/* s's contiguous stride of dimension d */
static char *stride(const Shape *s, int d) { return extent(s, d + 1); }

/* "i<d> * stride" terms of an operand read at the result's coordinates:
 * st[d] the operand's stride for result dimension d, NULL for none */
static char *offset(const char *base, char *const *st, int rank)
{
    char *o = util_strdup(base ? base : "0");
    for (int d = 0; d < rank; d++)
        if (st[d])
            o = util_fmt("%s + i%d * %s", o, d, st[d]);
    return o;
}

/* An operand of shape x broadcast to the result's shape s: its offset */
static char *broadcast_at(const Shape *x, const Shape *s)
{
    char *st[MAX_RANK] = {0};
    for (int d = 0; d < s->rank; d++) {
        const int j = d - (s->rank - x->rank);
        if (j >= 0 && x->d[j] != 1)
            st[d] = stride(x, j);
    }
    return offset(NULL, st, s->rank);
}

/* The decode of element e of shape s into i0 ... (dimensions of extent 1
 * are 0 and not named), into the caller's scope. */
static void decode(FILE *f, const Shape *s, const char *e, const char *ind)
{
    int any = 0;     /* a dimension to decode: else no r_ (NVRTC warns of one set and never read) */
    for (int d = 0; d < s->rank; d++)
        any |= s->d[d] != 1;
    if (!any) {
        for (int d = 0; d < s->rank; d++)
            fprintf(f, "%sconst int64_t i%d = 0;\n%s(void)i%d;\n", ind, d, ind, d);
        fprintf(f, "%s(void)(%s);\n", ind, e);
        return;
    }
    fprintf(f, "%sint64_t r_ = %s;\n", ind, e);
    for (int d = s->rank - 1; d >= 0; d--) {
        if (s->d[d] == 1) {
            fprintf(f, "%sconst int64_t i%d = 0;\n", ind, d);
            continue;
        }
        const char *ext = ex_dim(s->d[d]);
        if (d == 0)
            fprintf(f, "%sconst int64_t i0 = r_;\n", ind);
        else
            fprintf(f, "%sconst int64_t i%d = r_ %% %s;\n%sr_ /= %s;\n", ind, d, ext, ind, ext);
    }
    fprintf(f, "%s(void)r_;\n", ind);
    /* a coordinate no operand reads (broadcast along it, or of extent 1) */
    for (int d = 0; d < s->rank; d++)
        fprintf(f, "%s(void)i%d;\n", ind, d);
}

/* a float constant of the kernel text; clamp's open side is infinite */
static char *constant(double v)
{
    return isinf(v) ? util_strdup(v > 0 ? "INFINITY" : "-INFINITY") : util_cfloat(v);
}

/* (i0 * d1 + i1) * d2 + i2 ...: the element at n's coordinates, counted
 * over n's shape (the batch's extent the step's) */
static char *flat_index(const Node *n)
{
    char *s = util_strdup("(int64_t)0");
    for (int k = 0; k < n->shape.rank; k++)
        s = util_fmt("(%s) * %s + i%d", s, ex_dim(n->shape.d[k]), k);
    return s;
}

/* formula with $0.. replaced by x<0>.., $c by the node's ten.scale, $a and
 * $b by its ten.lo and ten.hi, $q and $r by the last coordinate and the
 * one before, $k by its id (dk$k: its random stream's key), $e by its
 * element's index */
static char *expand(const Node *n)
{
    const char *p = op_formula[n->op];
    char *out = util_strdup("");
    for (; *p; p++) {
        if (p[0] == '$' && p[1] >= '0' && p[1] <= '9')
            out = util_fmt("%sx%c", out, *++p);
        else if (p[0] == '$' && (p[1] == 'q' || p[1] == 'r'))
            out = util_fmt("%si%d", out, n->shape.rank - (*++p == 'q' ? 1 : 2));
        else if (p[0] == '$' && p[1] == 'k')
            out = util_fmt("%s%d", out, n->id), p++;
        else if (p[0] == '$' && p[1] == 'e')     /* the element's index in n's row-major order */
            out = util_fmt("%s%s", out, flat_index(n)), p++;
        else if (p[0] == '$' && p[1] == 'c')
            out = util_fmt("%s%s", out, util_cfloat(n->ten.scale)), p++;
        else if (p[0] == '$' && (p[1] == 'a' || p[1] == 'b'))
            out = util_fmt("%s(%s)", out, constant(p[1] == 'a' ? n->ten.lo : n->ten.hi)), p++;
        else
            out = util_fmt("%s%c", out, *p);
    }
    return out;
}

/* expr as n stores it: rounded to the plan's precision where autocast
 * holds n in it (memplan.c: mem_rounded) */
static char *stored(const Emit *m, const Node *n, char *expr)
{
    return mem_rounded(m->p, n->id) ? ex_round(m, expr) : expr;
}

/* Index tensor ix read where it broadcasts to shape `at` at the element's
 * coordinates, with `along` for coordinate a, as an int64 within [0, len):
 * an index out of range is clamped (PyTorch raises; a kernel cannot, and
 * a read past the source must not happen) */
static char *index_at(const Emit *m, int ix, const Shape *at, int a, const char *along, int64_t len)
{
    const Shape *is = &ex_node(m, ix)->shape;
    char *o = util_strdup("0");
    for (int d = 0; d < at->rank; d++) {
        const int j = d - (at->rank - is->rank);
        if (j >= 0 && is->d[j] != 1)
            o = util_fmt("%s + %s * %s", o, d == a ? along : util_fmt("i%d", d), stride(is, j));
    }
    return util_fmt("cddp_index(b%d[%s], %lld)", plan_source(m->p, ix), o, (long long)len);
}

static void body(const Emit *m, const Node *n, const char *ind);

/* The group's members k0 .. k1 - 1 at the element (coordinates decoded),
 * in order: each value a local v<id>, stored at `at` where something
 * outside the kernel reads it. */
static void member_range(const Emit *m, int k0, int k1, const char *at, const char *ind)
{
    FILE *f = m->f;
    const char *in2 = util_fmt("%s    ", ind);
    for (int k = k0; k < k1; k++) {
        const Node *n = ex_node(m, m->gr->nodes[k]);
        fprintf(f, "%sfloat v%d;\n%s{\n", ind, n->id, ind);
        body(m, n, in2);
        fprintf(f, "%s}\n", ind);
        if (plan_uses_outside(m->p, n->id))
            fprintf(f, "%sb%d[%s] = v%d;\n", ind, n->id, at, n->id);
    }
}

/* The index in the group of its reduction, the members before it its
 * prologue (rule tensor-chain); 0 when none or the anchor is one */
static int prologue_len(const Emit *m)
{
    for (int k = 0; k < m->gr->nnodes; k++)
        if (ten_is_reduction(ex_node(m, m->gr->nodes[k])->op))
            return k;
    return 0;
}

/* The node whose elements the kernel runs over: the reduction after a
 * prologue, else the anchor */
static const Node *iter_node(const Emit *m) { return ex_node(m, m->gr->nodes[prologue_len(m)]); }

/* The body of element e (coordinates decoded) of node n. */
static void body(const Emit *m, const Node *n, const char *ind)
{
    FILE *f = m->f;
    const Shape *s = &n->shape;
    const int x = plan_source(m->p, n->in[0]);
    const Shape *xs = &ex_node(m, n->in[0])->shape;
    switch (n->op) {
    case OP_T_PERMUTE: {
        char *st[MAX_RANK];
        for (int d = 0; d < s->rank; d++)
            st[d] = xs->d[n->ten.perm[d]] == 1 ? NULL : stride(xs, n->ten.perm[d]);
        fprintf(f, "%sv%d = b%d[%s];\n", ind, n->id, x, offset(NULL, st, s->rank));
        return;
    }
    case OP_T_SLICE: {
        char *st[MAX_RANK];
        const int a = n->ten.axis;
        for (int d = 0; d < s->rank; d++)
            st[d] = s->d[d] == 1 ? NULL : d == a ? util_fmt("%lld * %s", (long long)n->ten.step, stride(xs, d))
                                               : stride(xs, d);
        fprintf(f, "%sv%d = b%d[%s];\n", ind, n->id, x,
                offset(util_fmt("%lld * %s", (long long)n->ten.start, stride(xs, a)), st, s->rank));
        return;
    }
    /* pad and cat load from an index that is in range either way, then
     * select: a load under a ?: becomes a masked load, which GCC 12 can
     * pair with the wrong mask (emit_expr.c: named_load) */
    case OP_T_PAD: {    /* s the sliced tensor's shape, xs the slice's */
        const int a = n->ten.axis;
        char *st[MAX_RANK];
        for (int d = 0; d < s->rank; d++)
            st[d] = d == a || xs->d[d] == 1 ? NULL : stride(xs, d);
        const long long step = n->ten.step;
        fprintf(f, "%sconst int64_t k_ = i%d - %lld;\n", ind, a, (long long)n->ten.start);
        fprintf(f, "%sconst int in_ = k_ >= 0 && k_ %% %lld == 0 && k_ / %lld < %lld;\n", ind, step, step,
                (long long)xs->d[a]);
        fprintf(f, "%sconst float v_ = b%d[%s + (in_ ? k_ / %lld : 0) * %s];\n", ind, x, offset(NULL, st, s->rank),
                step, stride(xs, a));
        fprintf(f, "%sv%d = in_ ? v_ : 0.0f;\n", ind, n->id);
        return;
    }
    case OP_T_CAT: {
        const int a = n->ten.axis, y = plan_source(m->p, n->in[1]);
        const Shape *ys = &ex_node(m, n->in[1])->shape;
        char *sa[MAX_RANK], *sb[MAX_RANK];
        for (int d = 0; d < s->rank; d++) {
            sa[d] = d == a || xs->d[d] == 1 ? NULL : stride(xs, d);
            sb[d] = d == a || ys->d[d] == 1 ? NULL : stride(ys, d);
        }
        const long long la = (long long)xs->d[a];
        fprintf(f, "%sconst int first_ = i%d < %lld;\n", ind, a, la);
        fprintf(f, "%sconst float va_ = b%d[%s + (first_ ? i%d : 0) * %s];\n", ind, x, offset(NULL, sa, s->rank), a,
                stride(xs, a));
        fprintf(f, "%sconst float vb_ = b%d[%s + (first_ ? 0 : i%d - %lld) * %s];\n", ind, y,
                offset(NULL, sb, s->rank), a, la, stride(ys, a));
        fprintf(f, "%sv%d = first_ ? va_ : vb_;\n", ind, n->id);
        return;
    }
    case OP_T_GATHER: {     /* x at the result's coordinates, the index's along the axis */
        const int a = n->ten.axis;
        char *st[MAX_RANK];
        for (int d = 0; d < s->rank; d++)
            st[d] = d == a || xs->d[d] == 1 ? NULL : stride(xs, d);
        fprintf(f, "%sconst int64_t k_ = %s;\n", ind, index_at(m, n->in[1], s, a, util_fmt("i%d", a), xs->d[a]));
        fprintf(f, "%sv%d = b%d[%s + k_ * %s];\n", ind, n->id, x, offset(NULL, st, s->rank), stride(xs, a));
        return;
    }
    case OP_T_GATHER_GRAD: {    /* s: the source's shape; xs: dy's, the gather's result */
        const int a = n->ten.axis;
        /* a place beyond dy's extent beside the axis was never gathered */
        char *in_range = util_strdup("1");
        for (int d = 0; d < s->rank; d++)
            if (d != a && xs->d[d] != s->d[d])
                in_range = util_fmt("%s && i%d < %s", in_range, d, ex_dim(xs->d[d]));
        char *st[MAX_RANK];
        for (int d = 0; d < s->rank; d++)
            st[d] = d == a || xs->d[d] == 1 ? NULL : stride(xs, d);
        /* dy's places along the axis in order, each added where its index
         * names this one: one order on every run and target, no atomics */
        fprintf(f, "%sdouble acc = 0.0;\n%sif (%s) {\n", ind, ind, in_range);
        fprintf(f, "%s    const int64_t o_ = %s;\n", ind, offset(NULL, st, s->rank));
        fprintf(f, "%s    for (int64_t j_ = 0; j_ < %lld; j_++) {\n", ind, (long long)xs->d[a]);
        fprintf(f, "%s        const int64_t k_ = %s;\n", ind, index_at(m, n->in[1], xs, a, "j_", s->d[a]));
        fprintf(f, "%s        const float d_ = b%d[o_ + j_ * %s];\n", ind, x, stride(xs, a));
        fprintf(f, "%s        acc += k_ == i%d ? (double)d_ : 0.0;\n", ind, a);
        fprintf(f, "%s    }\n%s}\n", ind, ind);
        fprintf(f, "%sv%d = %s;\n", ind, n->id, stored(m, n, "(float)acc"));
        return;
    }
    case OP_T_EMBED: {      /* the weight's row the index names (clamped, as index_at) */
        const int64_t V = xs->d[0], D = xs->d[1];
        fprintf(f, "%sconst int64_t k_ = cddp_index(b%d[e / %lld], %lld);\n", ind, plan_source(m->p, n->in[1]),
                (long long)D, (long long)V);
        fprintf(f, "%sv%d = b%d[k_ * %lld + e %% %lld];\n", ind, n->id, x, (long long)D, (long long)D);
        return;
    }
    case OP_T_EMBED_GRAD: { /* element (v, c): the positions whose index is v, in order */
        const int64_t V = s->d[0], D = s->d[1];
        fprintf(f, "%sdouble acc = 0.0;\n", ind);
        fprintf(f, "%sif (i0 != %lld)\n", ind, (long long)n->ten.lo);   /* padding_idx's row: none */
        fprintf(f, "%s    for (int64_t p_ = 0; p_ < %s; p_++)\n", ind, extent(&ex_node(m, n->in[1])->shape, 0));
        fprintf(f, "%s        acc += cddp_index(b%d[p_], %lld) == i0 ? (double)b%d[p_ * %lld + i1] : 0.0;\n", ind,
                plan_source(m->p, n->in[1]), (long long)V, x, (long long)D);
        fprintf(f, "%sv%d = %s;\n", ind, n->id, stored(m, n, "(float)acc"));
        return;
    }
    default:
        break;
    }
    if (ten_is_reduction(n->op)) {
        /* the kept coordinates index x; the reduced ones loop, in order */
        char *st[MAX_RANK];
        int red[MAX_RANK], nred = 0;
        for (int d = 0; d < s->rank; d++) {
            st[d] = (n->ten.axes & (1u << d)) || xs->d[d] == 1 ? NULL : stride(xs, d);
            if (n->ten.axes & (1u << d))
                red[nred++] = d;
        }
        Shape rs = {nred, {0}};
        for (int k = 0; k < nred; k++)
            rs.d[k] = xs->d[red[k]];
        fprintf(f, "%sconst int64_t o_ = %s;\n", ind, offset(NULL, st, s->rank));
        const int mx = n->op == OP_T_AMAX || n->op == OP_T_AMIN, arg = n->op == OP_T_ARGMAX || n->op == OP_T_ARGMIN;
        if (arg)    /* torch's: the first extreme, a NaN the first of all */
            fprintf(f, "%sfloat best_ = 0.0f;\n%sint64_t acc = 0;\n", ind, ind);
        else if (mx)
            fprintf(f, "%sfloat acc = %s;\n", ind, n->op == OP_T_AMAX ? "-INFINITY" : "INFINITY");
        else
            fprintf(f, "%sdouble acc = 0.0;\n", ind);
        if (n->op == OP_T_COUNT_EQ)
            fprintf(f, "%sconst float y_ = b%d[e];\n", ind, plan_source(m->p, n->in[1]));
        fprintf(f, "%sfor (int64_t k = 0; k < %s; k++) {\n", ind, extent(&rs, 0));
        const char *in2 = util_fmt("%s    ", ind);
        if (nred == 1) {    /* one axis: a stride, no decode */
            fprintf(f, "%sconst int64_t o2_ = o_ + k * %s;\n", in2, stride(xs, red[0]));
        } else {
            fprintf(f, "%sint64_t q_ = k, o2_ = o_;\n", in2);
            for (int k = nred - 1; k >= 0; k--) {
                const char *ext = ex_dim(rs.d[k]);
                fprintf(f, "%so2_ += q_ %% %s * %s;\n%sq_ /= %s;\n", in2, ext, stride(xs, red[k]), in2, ext);
            }
        }
        if (ex_in_group(m, n->in[0])) {
            /* the prologue at this element of x: its reduced coordinates
             * named over the kept ones, its values computed here (x's
             * elements are each visited once, so one stored is stored once) */
            const char *in3 = util_fmt("%s    ", in2);
            fprintf(f, "%sfloat v;\n%s{\n", in2, in2);
            if (nred == 1) {    /* (void): a prologue of constants (a count's ones) reads no coordinate */
                fprintf(f, "%sconst int64_t i%d = k;\n%s(void)i%d;\n", in3, red[0], in3, red[0]);
            } else {
                fprintf(f, "%sint64_t c_ = k;\n", in3);
                for (int k = nred - 1; k >= 0; k--)
                    fprintf(f, "%sconst int64_t i%d = c_ %% %s;\n%sc_ /= %s;\n%s(void)i%d;\n", in3, red[k],
                            ex_dim(rs.d[k]), in3, ex_dim(rs.d[k]), in3, red[k]);
                fprintf(f, "%s(void)c_;\n", in3);
            }
            member_range(m, 0, prologue_len(m), "o2_", in3);
            fprintf(f, "%s(void)o2_;    /* where no prologue value is stored */\n", in3);
            fprintf(f, "%sv = v%d;\n%s}\n", in3, n->in[0], in2);
        } else {
            fprintf(f, "%sconst float v = b%d[o2_];\n", in2, x);
        }
        switch (n->op) {
        case OP_T_AMAX: fprintf(f, "%sacc = v > acc || v != v ? v : acc;\n", in2); break;  /* NaN wins, as torch */
        case OP_T_AMIN: fprintf(f, "%sacc = v < acc || v != v ? v : acc;\n", in2); break;
        case OP_T_COUNT_EQ: fprintf(f, "%sacc += v == y_ ? 1.0 : 0.0;\n", in2); break;
        case OP_T_ARGMAX: case OP_T_ARGMIN:
            fprintf(f, "%sif (k == 0 || (best_ == best_ && (v != v || v %c best_))) {\n%s    best_ = v;\n"
                    "%s    acc = k;\n%s}\n", in2, n->op == OP_T_ARGMAX ? '>' : '<', in2, in2, in2);
            break;
        default: fprintf(f, "%sacc += (double)v;\n", in2); break;
        }
        fprintf(f, "%s}\n", ind);
        if (n->op == OP_T_MEAN)
            fprintf(f, "%sv%d = %s;\n", ind, n->id, stored(m, n, util_fmt("(float)(acc / (double)(%s))",
                                                                          extent(&rs, 0))));
        else
            fprintf(f, "%sv%d = %s;\n", ind, n->id, stored(m, n, "(float)acc"));
        return;
    }
    /* pointwise: each operand at its broadcast offset, or the value a
     * member of the kernel computed at this element (rule tensor-chain) */
    for (int k = 0; k < n->nin; k++) {
        if (ex_in_group(m, n->in[k]))
            fprintf(f, "%sconst float x%d = v%d;\n", ind, k, n->in[k]);
        else
            fprintf(f, "%sconst float x%d = b%d[%s];\n", ind, k, plan_source(m->p, n->in[k]),
                    broadcast_at(&ex_node(m, n->in[k])->shape, s));
    }
    fprintf(f, "%sv%d = %s;\n", ind, n->id, stored(m, n, expand(n)));
}

/* The group's nodes at element e from the iteration node on (a prologue
 * runs inside its reduction's loop) */
static void members(const Emit *m, const char *ind) { member_range(m, prologue_len(m), m->gr->nnodes, "e", ind); }

/* A reduction's work per result element (for OpenMP's threshold) */
static char *work(const Node *n, const Shape *xs)
{
    if (!ten_is_reduction(n->op))
        return extent(&n->shape, 0);
    return extent(xs, 0);
}

/* ---- T_BMM --------------------------------------------------------------- */

typedef struct {
    Shape lead;             /* the result's leading (batch) dimensions */
    const char *offa, *offb;    /* each operand's matrix at the leading coordinates, in elements */
    int64_t m, n, k;
    int a, b;               /* the operands' buffers */
} Bmm;

static Shape leading(const Shape *s)
{
    Shape l = *s;
    l.rank -= 2;
    return l;
}

static Bmm bmm_parts(const Emit *m, const Node *n)
{
    Bmm v;
    const Shape *as = &ex_node(m, n->in[0])->shape, *bs = &ex_node(m, n->in[1])->shape;
    v.lead = leading(&n->shape);
    v.m = n->shape.d[n->shape.rank - 2], v.n = n->shape.d[n->shape.rank - 1];
    v.k = as->d[as->rank - (n->ten.ta ? 2 : 1)];
    const Shape la = leading(as), lb = leading(bs);
    v.offa = util_fmt("(%s) * %lld", broadcast_at(&la, &v.lead), (long long)(v.m * v.k));
    v.offb = util_fmt("(%s) * %lld", broadcast_at(&lb, &v.lead), (long long)(v.k * v.n));
    v.a = plan_source(m->p, n->in[0]), v.b = plan_source(m->p, n->in[1]);
    return v;
}

/* CPU: one BLAS product a matrix, the leading coordinates in order */
static void bmm_c(const Emit *m, const Node *n)
{
    FILE *f = m->f;
    const Bmm v = bmm_parts(m, n);
    const long long lda = n->ten.ta ? v.m : v.k, ldb = n->ten.tb ? v.k : v.n;
    fprintf(f, "    const int64_t total = %s;\n", extent(&v.lead, 0));
    fprintf(f, "    for (int64_t e = 0; e < total; e++) {\n");
    decode(f, &v.lead, "e", "        ");
    /* under bf16|fp16 autocast's bmm: operands rounded as read, the
     * result as stored */
    fprintf(f, "        %s%d, %d, %lld, %lld, %lld, b%d + %s, %lld, b%d + %s, %lld, b%d + e * %lld, %lld);\n",
            ex_gemm_call(m), n->ten.ta, n->ten.tb, (long long)v.m, (long long)v.n, (long long)v.k, v.a, v.offa, lda,
            v.b, v.offb, ldb, n->id, (long long)(v.m * v.n), (long long)v.n);
    if (mem_rounded(m->p, n->id))
        fprintf(f, "        for (int64_t i = e * %lld; i < (e + 1) * %lld; i++)\n            b%d[i] = %s;\n",
                (long long)(v.m * v.n), (long long)(v.m * v.n), n->id, ex_round(m, util_fmt("b%d[i]", n->id)));
    fprintf(f, "    }\n");
}

/* CUDA: shared-memory tiles, a T x T tile of one matrix a block (T 64,
 * 32 or 16 as the matrices are large; 16 x 16 threads, (T/16)^2 outputs
 * each), 16-deep k slices; blockIdx.x walks the matrices and their column
 * tiles grid-stride, blockIdx.y the row tiles. Every thread of a block
 * takes the same matrices, so the barriers are uniform. Under bf16|fp16
 * the operands are rounded as loaded (autocast's bmm), the result as
 * stored; fp32 FMA accumulation in k order. */
static int bmm_tile(const Bmm *v)
{
    const int64_t lo = v->m < v->n ? v->m : v->n;
    return lo >= 48 ? 64 : lo >= 24 ? 32 : 16;
}

static void bmm_cuda(const Emit *m, const Node *n, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Bmm v = bmm_parts(m, n);
    const long long M = v.m, N = v.n, K = v.k;
    const int T = bmm_tile(&v), R = T / 16;
    const long long ct = (N + T - 1) / T;
    fprintf(f, "    __shared__ float As[16][%d + 1], Bs[16][%d + 1];\n", T, T);
    fprintf(f, "    const int64_t total = %s * %lld;   /* matrices x column tiles */\n", extent(&v.lead, 0), ct);
    fprintf(f, "    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;\n");
    fprintf(f, "    const int64_t row0 = (int64_t)blockIdx.y * %d;\n", T);
    fprintf(f, "    for (int64_t x = blockIdx.x; x < total; x += gridDim.x) {\n");
    fprintf(f, "        const int64_t e = x / %lld, col0 = x %% %lld * %d;\n", ct, ct, T);
    decode(f, &v.lead, "e", "        ");
    fprintf(f, "        const %s *pa = b%d + %s;\n        const %s *pb = b%d + %s;\n", ex_elem_type(m, n->in[0]), v.a,
            v.offa, ex_elem_type(m, n->in[1]), v.b, v.offb);
    fprintf(f, "        float acc[%d][%d];\n", R, R);
    fprintf(f, "        for (int r = 0; r < %d; r++)\n            for (int c = 0; c < %d; c++)\n"
               "                acc[r][c] = 0.0f;\n", R, R);
    fprintf(f, "        for (int64_t k0 = 0; k0 < %lld; k0 += 16) {\n", K);
    fprintf(f, "            for (int l = threadIdx.x; l < %d; l += %d) {\n", 16 * T, THREADS);
    /* consecutive threads walk each operand's contiguous index */
    if (!n->ten.ta)
        fprintf(f, "                const int r = l / 16, kk = l %% 16;\n");
    else
        fprintf(f, "                const int kk = l / %d, r = l %% %d;\n", T, T);
    fprintf(f, "                const int64_t gi = row0 + r, gk = k0 + kk;\n");
    fprintf(f, "                As[kk][r] = gi < %lld && gk < %lld ? %s : 0.0f;\n", M, K,
            ex_round(m, util_fmt("(float)pa[%s]", n->ten.ta ? util_fmt("gk * %lld + gi", M)
                                                            : util_fmt("gi * %lld + gk", K))));
    if (!n->ten.tb)
        fprintf(f, "                const int kb = l / %d, c = l %% %d;\n", T, T);
    else
        fprintf(f, "                const int c = l / 16, kb = l %% 16;\n");
    fprintf(f, "                const int64_t gj = col0 + c, gkb = k0 + kb;\n");
    fprintf(f, "                Bs[kb][c] = gj < %lld && gkb < %lld ? %s : 0.0f;\n", N, K,
            ex_round(m, util_fmt("(float)pb[%s]", n->ten.tb ? util_fmt("gj * %lld + gkb", K)
                                                            : util_fmt("gkb * %lld + gj", N))));
    fprintf(f, "            }\n            __syncthreads();\n");
    fprintf(f, "            for (int kk = 0; kk < 16; kk++)\n");
    fprintf(f, "                for (int r = 0; r < %d; r++)\n                    for (int c = 0; c < %d; c++)\n", R, R);
    fprintf(f, "                        acc[r][c] += As[kk][ty + 16 * r] * Bs[kk][tx + 16 * c];\n");
    fprintf(f, "            __syncthreads();\n        }\n");
    fprintf(f, "        for (int r = 0; r < %d; r++)\n            for (int c = 0; c < %d; c++) {\n", R, R);
    fprintf(f, "                const int64_t i = row0 + ty + 16 * r, j = col0 + tx + 16 * c;\n");
    fprintf(f, "                if (i < %lld && j < %lld)\n", M, N);
    fprintf(f, "                    b%d[e * %lld + i * %lld + j] = %s;\n", n->id, M * N, N, stored(m, n, "acc[r][c]"));
    fprintf(f, "            }\n    }\n");
    /* the grid: every matrix's column tiles at the largest batch, the row tiles */
    const int64_t per = ir_row_elems(&v.lead) * ct;
    L->block[0] = THREADS;
    if (ir_batched(&v.lead)) {
        L->gmul[0] = per;
        L->gdiv[0] = 1;
    } else {
        L->gfix[0] = (unsigned)per;
    }
    L->gfix[1] = (unsigned)((M + T - 1) / T);
}

/* CPU: the result's rows (every dimension but the last, flattened) over
 * the threads, then the last dimension as a loop of its own: no index
 * decode per element, and operands read at a constant stride along it,
 * which the compiler vectorizes */
/* CPU: an embedding's gradient as a scatter in the positions' order, a
 * row of dy added to the row its index names, in double (the sums, and
 * so the bits, of the CUDA kernel's loop over the positions), O(P D)
 * rather than the element loop's O(V D P) */
static void embed_grad_c(const Emit *m, const Node *n)
{
    FILE *f = m->f;
    const int64_t V = n->shape.d[0], D = n->shape.d[1];
    const int ix = plan_source(m->p, n->in[1]), dy = plan_source(m->p, n->in[0]);
    fprintf(f, "    double *acc = calloc((size_t)%lld, sizeof(double));\n", (long long)(V * D));
    fprintf(f, "    if (!acc)\n        abort();    /* %lld doubles */\n", (long long)(V * D));
    fprintf(f, "    const int64_t P = %s;\n", extent(&ex_node(m, n->in[1])->shape, 0));
    fprintf(f, "    for (int64_t p_ = 0; p_ < P; p_++) {\n");
    fprintf(f, "        double *r_ = acc + cddp_index(b%d[p_], %lld) * %lld;\n", ix, (long long)V, (long long)D);
    fprintf(f, "        const float *d_ = b%d + p_ * %lld;\n", dy, (long long)D);
    fprintf(f, "        for (int64_t c = 0; c < %lld; c++)\n            r_[c] += (double)d_[c];\n", (long long)D);
    fprintf(f, "    }\n");
    fprintf(f, "    for (int64_t e = 0; e < %lld; e++)\n", (long long)(V * D));
    fprintf(f, "        b%d[e] = e / %lld == %lld ? 0.0f : %s;\n", n->id, (long long)D, (long long)n->ten.lo,
            stored(m, n, "(float)acc[e]"));
    fprintf(f, "    free(acc);\n");
}

void emit_tensor_c(const Emit *m)
{
    FILE *f = m->f;
    const Node *n = iter_node(m);
    if (n->op == OP_T_BMM) {
        bmm_c(m, n);
        return;
    }
    if (n->op == OP_T_EMBED_GRAD) {
        embed_grad_c(m, n);
        return;
    }
    const Shape *s = &n->shape;
    const int last = s->rank - 1;
    Shape rows = *s;
    rows.rank = s->rank > 0 ? last : 0;
    const char *cols = last >= 0 ? ex_dim(s->d[last]) : "1";
    fprintf(f, "    const int64_t rows = %s;\n", extent(&rows, 0));
    fprintf(f, "    #pragma omp parallel for schedule(static) if (%s >= 65536)\n", work(n, &ex_node(m, n->in[0])->shape));
    fprintf(f, "    for (int64_t row = 0; row < rows; row++) {\n");
    decode(f, &rows, "row", "        ");
    if (last < 0) {
        fprintf(f, "        const int64_t e = row;\n");
        members(m, "        ");
    } else {
        fprintf(f, "        for (int64_t i%d = 0; i%d < %s; i%d++) {\n", last, last, cols, last);
        fprintf(f, "            const int64_t e = row * %s + i%d;\n", cols, last);
        members(m, "            ");
        fprintf(f, "        }\n");
    }
    fprintf(f, "    }\n");
}

void emit_tensor_cuda(const Emit *m, rt_cuda_launch *L)
{
    FILE *f = m->f;
    const Node *n = iter_node(m);
    if (n->op == OP_T_BMM) {
        bmm_cuda(m, n, L);
        return;
    }
    fprintf(f, "    const int64_t total = %s;\n", extent(&n->shape, 0));
    fprintf(f, "    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;"
               " e += (int64_t)gridDim.x * blockDim.x) {\n");
    decode(f, &n->shape, "e", "        ");
    members(m, "        ");
    fprintf(f, "    }\n");
    /* a thread an element, for the largest batch */
    const int64_t per = ir_row_elems(&n->shape);
    L->block[0] = THREADS;
    if (ir_batched(&n->shape)) {
        L->gmul[0] = per;
        L->gdiv[0] = THREADS;
    } else {
        L->gfix[0] = (unsigned)((per + THREADS - 1) / THREADS);
    }
}

/* The kernels' helpers, qualified for the target (static inline, or
 * __device__ __forceinline__): an index held in a float slot as an
 * in-range int64 (index_at). */
char *emit_tensor_prelude(const char *qual)
{
    return util_fmt("%s int64_t cddp_index(float v, int64_t len)\n{\n"
                    "    const int64_t k = (int64_t)v;\n    return k < 0 ? 0 : k >= len ? len - 1 : k;\n}\n", qual);
}

int emit_tensor_ten_is_reduction(Op op) { return ten_is_reduction(op); }

char *emit_tensor_extent(const Shape *s) { return extent(s, 0); }
char *emit_tensor_broadcast_at(const Shape *x, const Shape *s) { return broadcast_at(x, s); }
void emit_tensor_decode(FILE *f, const Shape *s, const char *e, const char *ind) { decode(f, s, e, ind); }
