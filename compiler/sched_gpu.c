/* sched_gpu.c: every launch decision of the CUDA kernels, made once, for
 * one named target (--target h100|h200|a100|t4; SCHED_GPU_DEFAULT when none
 * is named), between fusion and the memory plan: each GEMM's tile and
 * split-K, each channel pass's slices. The memory plan places what they
 * need (mem_plan_gpu: workspaces, counters, partials), the emitters and
 * the report only read them. The rates they are weighed with are
 * gpu_rates.c's.
 *
 * A GEMM group's tiling at the train batch (gemm_choose): R rows of
 * outputs per thread (a 16R x 64 tile of GPU_THREADS threads; R =
 * GPU_GEMM_R, 2 or 1) and S slices of K. For each R, the split-K the grid
 * of 16R x 64 tiles allows (one under a quarter of the target's SMs in
 * tiles is split into at most SMs / tiles slices, each at least
 * SPLIT_MIN_KT k-slices deep, none empty) and no split; then the (R, S)
 * the GPU model (gpu_rates.c: the rate, the operands from L2 or memory,
 * the split-K tail) predicts fastest, ties to the larger R. A thinner
 * tile gives a small grid blocks without the tail deeper slices cost (a
 * fence, a counter, and each tile's last block reading S partial tiles
 * back alone), at a lower FMA rate (r x 4 FMAs for r + 4 shared loads:
 * 50% of peak at 4 x 4, 33% at 2 x 4, 20% at 1 x 4; gpu_gemm_rate); a
 * split pays its tail (over 1 us) only where the SMs it fills save more.
 * SimpleNet on the H100: fc1's forward 32x64 x 7 slices (112 blocks),
 * fc2's 16x64 x 8 (128), fc3's input gradient (K = 10) 16x64 unsplit
 * (16 blocks), fc2's weight gradient 16x64 unsplit (128 blocks: split,
 * 64x64 x 2, predicted 2.29 us against 1.29). Under precision bf16|fp16
 * every tile runs on the tensor cores (emit_mma_step: rr mmas a warp per
 * k slice; a thinner tile loads more fragments per mma, which the
 * model's rate weighs).
 * `cddpc --gpu-tile 64|32|16` sets one tile for every GEMM instead.
 *
 * Channel passes: the passes that sum (emit_nchw.c says which, and how
 * many sums) run S blocks a channel, S giving the train batch's grid at
 * most two blocks an SM on the target (one wave of 2 an SM), each slice at
 * least CHAN_MIN elements deep. */
#include "cddpc.h"
#include "cddprt.h"         /* RT_PREC_* */

/* split-K: at least SPLIT_MIN_KT k-slices of GPU_TILE_K a slice. Two (32
 * of K) or four predict within 1% of each other on the H100: SimpleNet's
 * step 24.4 us against 24.6 with four, the ConvNet's 78.0 against 77.8 */
#define SPLIT_MIN_KT 2
#define CHAN_MIN 2048

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The split-K of group gr (a GEMM) in 16r x 64 tiles at p->batch. */
static int gemm_split_at(const Plan *p, const Group *gr, const GpuTarget *t, int r, int64_t *rows, int64_t *cols)
{
    const Node *mm = p->g->n[gr->anchor];
    const Shape *as = &p->g->n[mm->in[0]]->shape;
    const int64_t K = mm->op == OP_MM_TN ? as->d[0] : as->d[1];
    /* batch rows (forward, input gradients), K fixed; or a weight
     * gradient: M x N fixed, K the batch (sliced as the train batch would
     * be; a step's own rows are sliced alike at run time) */
    const int weight = !IR_IS_BATCH(mm->shape.d[0]) && IR_IS_BATCH(K);
    const int splits = !IR_IS_BATCH(mm->shape.d[1]) && (weight || (IR_IS_BATCH(mm->shape.d[0]) && !IR_IS_BATCH(K)));
    *rows = weight ? mm->shape.d[0] : IR_IS_BATCH(mm->shape.d[0]) ? p->batch * ir_batch_mul(mm->shape.d[0]) : mm->shape.d[0];
    *cols = IR_IS_BATCH(mm->shape.d[1]) ? p->batch * ir_batch_mul(mm->shape.d[1]) : mm->shape.d[1];
    const int64_t kt = cdiv(IR_IS_BATCH(K) ? p->batch * ir_batch_mul(K) : K, GPU_TILE_K), tiles = cdiv(*rows, 16 * r) * cdiv(*cols, GPU_TILE_N);
    if (!splits || tiles < 1 || 4 * tiles > t->sms)
        return 1;
    const int64_t s = t->sms / tiles < kt / SPLIT_MIN_KT ? t->sms / tiles : kt / SPLIT_MIN_KT;
    return s < 2 ? 1 : (int)cdiv(kt, cdiv(kt, s));  /* no empty slice */
}

GemmTiling sched_gemm_tile(const Plan *p, int r)
{
    return (GemmTiling){r, GPU_GEMM_R, 16 * r, GPU_TILE_N, GPU_TILE_K, GPU_THREADS, p->g->prec != RT_PREC_FP32};
}

int sched_gemm_options(const Plan *p, int grp, const GpuTarget *t, GemmOption *o)
{
    const Group *gr = &p->groups[grp];
    if (gr->kind != G_MATMUL || p->batch <= 0)
        return 0;
    const KernelCost c = cost_group(p, gr, p->batch, COST_GPU);
    const double bw = gpu_step_bw(t, gpu_working_set(p, p->batch));
    int n = 0;
    for (int r = GPU_GEMM_R; r >= 1; r /= 2) {
        if (p->gpu_tile && 16 * r != p->gpu_tile)
            continue;   /* --gpu-tile: that one */
        const GemmTiling gt = sched_gemm_tile(p, r);
        int64_t rows, cols;
        const int s = gemm_split_at(p, gr, t, r, &rows, &cols);
        const double tiles = (double)(cdiv(rows, 16 * r) * cdiv(cols, GPU_TILE_N));
        /* the split the grid allows, and none: the split's tail (a
         * fence, a counter, the partials read back) can cost more than
         * the idle SMs it fills */
        for (int k = s; k >= 1; k = k > 1 ? 1 : 0) {
            const double partials = k > 1 ? 4.0 * k * (double)rows * (double)cols : 0;   /* stored; read in the tail */
            o[n++] = (GemmOption){16 * r, k, gpu_gemm_secs(t, &gt, c.flops, c.bytes + partials, bw, tiles * k)
                                             + gpu_splitk_tail(t, 16.0 * r * GPU_TILE_N, k, tiles)};
        }
    }
    return n;
}

static void gemm_choose(Plan *p, int grp, const GpuTarget *t)
{
    Group *gr = &p->groups[grp];
    gr->tile_m = gr->kind == G_MATMUL ? (p->gpu_tile ? p->gpu_tile : 16 * GPU_GEMM_R) : 0;
    gr->split = 1;
    GemmOption o[SCHED_GEMM_OPTIONS];
    const int n = sched_gemm_options(p, grp, t, o);
    int b = -1;
    for (int k = 0; k < n; k++)     /* ties to the larger tile, the first */
        if (b < 0 || o[k].secs < o[b].secs)
            b = k;
    if (b >= 0)
        gr->tile_m = o[b].tile_m, gr->split = o[b].split;
}

int sched_gemm_tiling(const Plan *p, int grp, GemmTiling *t)
{
    const Group *gr = &p->groups[grp];
    if (gr->kind != G_MATMUL)
        return 0;
    if (gr->tile_m != 16 * GPU_GEMM_R && gr->tile_m != 32 && gr->tile_m != 16)
        diag_ice("sched_gpu: GEMM group %s has no tile (sched_gpu runs before its readers)", gr->name);
    const int r = gr->tile_m / 16;
    *t = sched_gemm_tile(p, r);
    return 1;
}

/* A recurrence group's work at p's batch: its anchor is the forward
 * (T_RNN) or the gradient (T_RNN_BWD, the forward its in[1]) */
static int rnn_work(const Plan *p, const Group *gr, RnnWork *w)
{
    if (gr->kind != G_TENSOR || gr->anchor < 0)
        return 0;
    const Node *a = p->g->n[gr->anchor];
    if (a->op != OP_T_RNN && a->op != OP_T_RNN_BWD)
        return 0;
    const Node *r = a->op == OP_T_RNN ? a : p->g->n[a->in[1]];
    *w = (RnnWork){p->batch, r->shape.d[1], r->shape.d[2], ten_rnn_gates(r->rnn.cell), a->op == OP_T_RNN_BWD};
    return 1;
}

RnnDesign sched_rnn_design(const Plan *p, int grp)
{
    const Group *gr = &p->groups[grp];
    RnnWork w;
    if (!rnn_work(p, gr, &w))
        diag_ice("sched_gpu: group %s is no recurrence", gr->name);
    return gpu_rnn_design(w.H, gr->rnn_rows, gr->rnn_split);
}

int sched_rnn_options(const Plan *p, int grp, const GpuTarget *t, RnnOption *o)
{
    const Group *gr = &p->groups[grp];
    RnnWork w;
    if (!rnn_work(p, gr, &w) || p->batch <= 0)
        return 0;
    const double bw = gpu_step_bw(t, gpu_working_set(p, p->batch));
    Group as = *gr;     /* the group in that design: cost_group reads its rows */
    int n = 0;
    for (int r = 8; r >= 1; r /= 2)
        for (int k = 1; k <= 8; k *= 2) {
            if (p->gpu_rnn_rows && (r != p->gpu_rnn_rows || k != p->gpu_rnn_split))
                continue;   /* --gpu-rnn: that one */
            const RnnDesign d = gpu_rnn_design(w.H, r, k);
            if (!gpu_rnn_fits(&w, &d) && !p->gpu_rnn_rows)
                continue;
            as.rnn_rows = r;
            const KernelCost c = cost_group(p, &as, p->batch, COST_GPU);
            o[n++] = (RnnOption){r, k, gpu_rnn_secs(t, &w, &d, c.bytes, cost_rnn_rereads(p, &as, p->batch), bw),
                                 gpu_rnn_secs(t, &w, &d, 0, 0, bw)};
        }
    return n;
}

static void rnn_choose(Plan *p, int grp, const GpuTarget *t)
{
    Group *gr = &p->groups[grp];
    RnnOption o[SCHED_RNN_OPTIONS];
    const int n = sched_rnn_options(p, grp, t, o);
    int b = -1;
    for (int k = 0; k < n; k++)     /* ties to the more rows, then the fewer threads: the first */
        if (b < 0 || o[k].secs < o[b].secs)
            b = k;
    gr->rnn_rows = b >= 0 ? o[b].rows : 1;
    gr->rnn_split = b >= 0 ? o[b].split : 1;
}

/* A channel pass's slices: split, with its counters (ctr_n) and partials
 * (wsf_n) for mem_plan_gpu to place; split stays 1 for a pass that cannot
 * split or that one block a channel fills. */
static void chan_split(Plan *p, int grp, const GpuTarget *t)
{
    Group *gr = &p->groups[grp];
    int64_t ch, hw;
    const int ns = emit_nchw_chan_sums(p, grp, &ch, &hw);
    const int64_t want = GPU_BLOCKS_PER_SM * t->sms / ch, deep = p->batch * hw / CHAN_MIN, S = want < deep ? want : deep;
    if (ns < 0 || S < 2)
        return;
    gr->split = (int)S;
    gr->ctr_n = ns ? ch : 0;                /* a counter a channel */
    gr->wsf_n = ch * S * ns;                /* [channel][slice][sum] */
}

void sched_gpu(Plan *p, const GpuTarget *t)
{
    p->gpu = t;
    for (int i = 0; i < p->ngroups; i++) {
        Group *gr = &p->groups[i];
        gr->split = 1;
        gr->tile_m = 0;
        gr->rnn_rows = gr->rnn_split = 0;
        if (gr->kind == G_MATMUL)
            gemm_choose(p, i, t);
        else if (gr->kind == G_CHAN && p->batch > 0)
            chan_split(p, i, t);
        else if (gr->kind == G_TENSOR)
            rnn_choose(p, i, t);
    }
}
