/* gpu_model.c: `cddpc MODEL.net --report --target h200` predicts the
 * training step on a GPU the user may not have, kernel by kernel, from
 * the cost model (cost.c, GPU target: epilogues in registers), each
 * kernel's launch geometry as the CUDA emitter sets it (emit_cuda.c), and
 * the GPU's datasheet peaks (gpu_rates.c).
 *
 * A kernel's time: its roofline time, max(FLOPs / FP32 peak, bytes /
 * bandwidth: L2's when the step's working set stays in L2, gpu_step_bw),
 * divided by the share of the GPU its grid keeps busy, plus a split-K
 * GEMM's tail (gpu_splitk_tail), at least GPU_MIN_KERNEL_US, plus a
 * per-node overhead of the CUDA graph the runtime replays each step:
 *   - resident blocks: GPU_BLOCKS_PER_SM, the emitter's __launch_bounds__(256, 2)
 *     (the GEMM tiles need those registers);
 *   - waves = ceil(blocks / (SMs x GPU_BLOCKS_PER_SM)); busy share =
 *     min(1, blocks / (waves x SMs)): a grid smaller than the GPU, or a
 *     last wave partly empty, leaves SMs idle;
 *   - a sibling pair (sched_pair.c) is one node: its parts side by side,
 *     the slower part's time, or both parts' roofline over the combined
 *     grid's share if longer;
 *   - the step adds a sixteenth of a graph launch (RT_CUDA_RUN_STEPS steps
 *     a graph). The overheads and the floor are gpu_rates.c's, each with
 *     its source; tests/gpu/predict.sh (a step of tests/gpu/run.sh) prints
 *     predicted against measured when a GPU is lent.
 * FP32 peaks are the non-tensor-core ones: the emitted fp32 GEMMs use FMA.
 * Those of precision bf16|fp16 run on the tensor cores (emit_cuda.c's
 * m16n8k16 mma, sm_80 on) against the dense BF16/FP16 tensor peak.
 *
 * A GEMM kernel's rate, the share of the SMs a grid keeps busy and the
 * targets' peaks are gpu_rates.c's (the scheduler, sched_gpu.c, chooses
 * tiles with the same formulas).
 *
 * The runtime's own graph node between two steps of a run (cuda device,
 * rt_cuda_dev.c issue_step): step_turn, which ends one step and zeroes
 * the accumulated gradients, fix and stat for the next (their bytes on
 * its grid); or no node, that work done by the last block of the step's
 * last optimizer kernel (rt_cuda_turn_fits), its bytes on one block. */
#include <math.h>
#include <string.h>

#include "cddpc.h"

#define EPOCH_SAMPLES 60000     /* MNIST's and Fashion-MNIST's training sets */

/* Blocks of a launch at batch n, as rt_cuda.c computes the grid. */
static double grid_blocks(const rt_cuda_launch *l, int64_t n)
{
    double blocks = 1;
    for (int d = 0; d < 3; d++)
        blocks *= l->gdiv[d] == 0 ? (double)l->gfix[d]
                                  : fmax(1, ceil((double)l->gmul[d] * (double)n / (double)l->gdiv[d]));
    return blocks;
}

void gpu_report(FILE *f, const Plan *p, int64_t batch, const GpuTarget *t)
{
    fprintf(f, "predicted %s plan on %s (batch %lld): %.1f TFLOP/s FP32, %.0f GB/s, %d SMs x %d blocks\n",
            p->name, t->full, (long long)batch, t->flops / 1e12, t->bw / 1e9, t->sms, GPU_BLOCKS_PER_SM);
    fprintf(f, "  peaks: %s\n", t->source);
    const double ws = gpu_working_set(p, batch), bw = gpu_step_bw(t, ws);
    if (bw != t->bw)
        fprintf(f, "  working set %.1f MB, within half of the %.0f MB L2: operands at its %.1f TB/s\n", ws / 1e6,
                t->l2 / 1e6, bw / 1e12);
    else
        fprintf(f, "  working set %.1f MB, more than half of the %.0f MB L2: operands at memory bandwidth\n", ws / 1e6,
                t->l2 / 1e6);
    fprintf(f, "  %-38s %8s %7s %6s %6s %10s %10s %9s %7s  %s\n", "kernel", "blocks", "threads", "waves", "busy",
            "roofline us", "overhead us", "total us", "bound", "GEMM tile (k/S: K in S slices) | rnn RxK");
    /* the steps of an epoch go in graphs of RT_CUDA_RUN_STEPS: a launch per run */
    double step = GPU_GRAPH_LAUNCH_US * 1e-6 / RT_CUDA_RUN_STEPS;
    unsigned mma_rows = 0;      /* rows of outputs a thread (bits) of the GEMMs on the tensor cores */
    unsigned gemm_rows = 0;    /* bit r: some GEMM has r x gemm_cols outputs per thread */
    int gemm_cols = 0;
    /* the runtime's node between two steps of a run: step_turn ends one
     * step and zeroes the accumulated gradients (emit_cuda_zero_ranges),
     * fix and stat (doubles) for the next on
     * rt_cuda_begin_blocks' grid (step_begin and step_end, once per run,
     * are left out) */
    int64_t *zr = util_alloc(sizeof(int64_t) * 2 * (size_t)(p->g->nparam + 1));
    double zgrad = 0;   /* only the gradients the kernels accumulate into */
    for (int r = 0, nr = emit_cuda_zero_ranges(p, zr); r < nr; r++)
        zgrad += (double)zr[2 * r + 1];
    const double zero_words = fmax(fmax(zgrad, (double)p->fix_zero), 2.0 * p->nstat);
    const double rt_bytes = 4.0 * zgrad + 4.0 * (double)p->fix_zero + 8.0 * p->nstat;
    /* or, when the train plan ends with an optimizer kernel and that
     * zeroing is small (rt_cuda_turn_fits, as the runtime decides), the
     * same work in the optimizer grid's last block after the rest: no
     * node, its bytes at one block's share of the bandwidth */
    const int folds = p->ngroups > 0 && p->groups[p->ngroups - 1].kind == G_OPT &&
                      rt_cuda_turn_fits((int64_t)zgrad, p->fix_zero, p->nstat);
    const double rt_blocks = folds ? 1 : rt_cuda_begin_blocks((int64_t)zero_words);
    {
        /* folded, it adds to a kernel that already runs past the floor */
        const double node = folds ? 0 : GPU_NODE_US;
        const double busy = fmin(1, rt_blocks / t->sms), work = rt_bytes / bw / busy;
        const double secs = (folds ? work : gpu_kernel_floor(work)) + node * 1e-6;
        step += secs;
        fprintf(f, "  %-38s %8.0f %7d %6d %5.0f%% %10.2f %10.2f %9.2f %7s\n", "runtime_step_turn", rt_blocks, 256, 1,
                100 * busy, 1e6 * work, node, 1e6 * secs, folds || work >= GPU_MIN_KERNEL_US * 1e-6 ? "memory" : "min");
        if (folds)
            fprintf(f, "    (no node: in the last block of %s)\n", p->groups[p->ngroups - 1].name);
    }
    double pair_roof = 0, pair_alone = 0, pair_blocks = 0;  /* the first part of a sibling pair */
    for (int i = 0; i < p->ngroups; i++) {
        rt_cuda_launch l;
        emit_cuda_kernel(p, i, &l);
        KernelCost c = cost_group(p, &p->groups[i], batch, COST_GPU);
        double blocks = grid_blocks(&l, batch), threads = (double)l.block[0] * l.block[1] * l.block[2];
        double waves = ceil(blocks / (t->sms * GPU_BLOCKS_PER_SM));
        double busy = gpu_busy_share(t, blocks);
        GemmTiling gt;
        double rate = t->flops;
        const char *tile = "";
        double splitk = 0;  /* the split-K tail */
        if (sched_gemm_tiling(p, i, &gt)) {
            rate = gpu_gemm_rate(t, &gt);
            tile = util_fmt("%dx%d%s%s", gt.tile_m, gt.tile_n,
                            p->groups[i].split > 1 ? util_fmt(" k/%d", p->groups[i].split) : "",
                            gt.mma && t->tensor > 0 ? " mma" : "");
            if (gt.mma && t->tensor > 0)
                mma_rows |= 1u << gt.rows;
            else
                gemm_rows |= 1u << gt.rows, gemm_cols = gt.cols;
            if (p->groups[i].split > 1) {   /* the partials stored, then read back in the tail */
                const Shape *s = &p->g->n[p->groups[i].anchor]->shape;
                c.bytes += 4.0 * p->groups[i].split * (double)ir_numel(s, batch);
                splitk = gpu_splitk_tail(t, (double)gt.tile_m * gt.tile_n, p->groups[i].split,
                                         blocks / p->groups[i].split);
            }
        }
        double tf = c.flops / rate, tb = c.bytes / bw, roof = fmax(tf, tb);
        double tail_s = 0;  /* rule row-tail: after the GEMM, the row ops in one block a row tile */
        if (p->groups[i].row_anchor >= 0) {
            /* they read the rows back: their bytes at those blocks' share
             * of the bandwidth, the rest of the GPU idle */
            GemmParts v;
            const Emit e = {NULL, p, &p->groups[i], i, 1};
            ex_gemm_parts(&e, &v);
            const Node *r = p->g->n[v.tail.anchor];
            double bytes = cost_group(p, &v.tail, batch, COST_GPU).bytes
                         + 4.0 * (double)ir_numel(&p->g->n[r->in[0]]->shape, batch);
            tail_s = bytes / (bw * fmin(1, ceil((double)batch / gt.tile_m) / t->sms));
        }
        const int first = p->groups[i].pair_next, second = i > 0 && p->groups[i - 1].pair_next;
        double work = roof / busy + splitk + tail_s;
        RnnOption ro[SCHED_RNN_OPTIONS];
        const int nro = sched_rnn_options(p, i, t, ro);
        int chain = 0;  /* a recurrence: its steps' chain or its traffic (gpu_rnn_secs) in its design */
        for (int k = 0; k < nro; k++)
            if (ro[k].rows == p->groups[i].rnn_rows && ro[k].split == p->groups[i].rnn_split)
                work = ro[k].secs, tile = util_fmt("rnn %dx%d", ro[k].rows, ro[k].split), chain = ro[k].steps >= work;
        if (nro && !*tile)
            diag_ice("gpu_model: %s's design is none of its options", p->groups[i].name);
        /* a pair's parts: the pair's row has the floor and the node */
        double secs = first || second ? work : gpu_kernel_floor(work) + GPU_NODE_US * 1e-6;
        if (!first && !second)
            step += secs;
        const char *bound = !first && !second && work < GPU_MIN_KERNEL_US * 1e-6 ? "min"
                          : nro ? (chain ? "steps" : "memory") : tf >= tb ? "flops" : "memory";
        fprintf(f, "  %-38s %8.0f %7.0f %6.0f %5.0f%% %10.2f %10.2f %9.2f %7s%s%s\n", p->groups[i].name, blocks,
                threads, waves, 100 * busy, 1e6 * work, first || second ? 0 : GPU_NODE_US,
                1e6 * secs, bound, *tile ? "  " : "", tile);
        GemmOption opt[SCHED_GEMM_OPTIONS];
        const int nopt = sched_gemm_options(p, i, t, opt);
        if (nopt > 1) {   /* the scheduler's choice (sched_gpu.c, for this target) among them */
            fprintf(f, "    (tiles:");
            for (int k = 0; k < nopt; k++)
                fprintf(f, "%s %s%dx%d%s %.2f us", k ? "," : "", opt[k].tile_m == gt.tile_m && opt[k].split == p->groups[i].split ? "*" : "", opt[k].tile_m,
                        gt.tile_n, opt[k].split > 1 ? util_fmt(" k/%d", opt[k].split) : "", 1e6 * opt[k].secs);
            fprintf(f, ")\n");
        }
        if (nro > 1) {  /* the scheduler's choice among the recurrence's designs */
            fprintf(f, "    (designs, rows x split:");
            for (int k = 0; k < nro; k++)
                fprintf(f, "%s %s%dx%d %.2f us", k ? "," : "",
                        ro[k].rows == p->groups[i].rnn_rows && ro[k].split == p->groups[i].rnn_split ? "*" : "",
                        ro[k].rows, ro[k].split, 1e6 * ro[k].secs);
            fprintf(f, ")\n");
        }
        if (first) {
            pair_roof = roof, pair_alone = work, pair_blocks = blocks;
            continue;
        }
        if (!second)
            continue;
        /* a sibling pair, one launch: its parts side by side, so the
         * slower part alone, unless both together need more of the GPU
         * than there is (their roofline over the combined grid's share) */
        const double pb = pair_blocks + blocks, pw = ceil(pb / (t->sms * GPU_BLOCKS_PER_SM));
        const double pbusy = gpu_busy_share(t, pb);
        const double ptime = fmax(fmax(pair_alone, work), (pair_roof + roof) / pbusy);
        step += gpu_kernel_floor(ptime) + GPU_NODE_US * 1e-6;
        fprintf(f, "  %-38s %8.0f %7.0f %6.0f %5.0f%% %10.2f %10.2f %9.2f %7s\n",
                util_fmt("  = %s", emit_cuda_pair_name(p, i - 1)), pb, threads, pw, 100 * pbusy, 1e6 * ptime,
                GPU_NODE_US, 1e6 * (gpu_kernel_floor(ptime) + GPU_NODE_US * 1e-6),
                ptime < GPU_MIN_KERNEL_US * 1e-6 ? "min" : "-");
    }
    double steps = ceil((double)EPOCH_SAMPLES / (double)batch);
    fprintf(f, "  step %.1f us (with 1/%d of a graph launch, %.0f us); an epoch of %d samples, %.0f steps: %.3f s "
               "(training steps only)\n", 1e6 * step, RT_CUDA_RUN_STEPS, GPU_GRAPH_LAUNCH_US, EPOCH_SAMPLES, steps,
            step * steps);
    fprintf(f, "  assumed, not yet measured (gpu_rates.c, sources there): %.1f us per graph node, %.1f us per graph "
               "launch, no kernel under %.1f us (bound \"min\"), split-K tails\n",
            GPU_NODE_US, GPU_GRAPH_LAUNCH_US, GPU_MIN_KERNEL_US);
    if (mma_rows) {
        fprintf(f, "  GEMMs: tensor cores (m16n8k16 mma, %.0f TFLOP/s dense), rate bound by shared-memory loads to",
                t->tensor / 1e12);
        for (int r = 4; r >= 1; r /= 2)
            if (mma_rows & (1u << r)) {
                const GemmTiling g = sched_gemm_tile(p, r);
                fprintf(f, " %.0f%% of that peak in %dx%d tiles%s", 100 * gpu_gemm_rate(t, &g) / t->tensor, g.tile_m,
                        g.tile_n, mma_rows & ((1u << r) - 1) ? "," : "\n");
            }
    }
    if (gemm_rows) {
        /* per kernel, from its tiling (sched_gpu) */
        fprintf(f, "  GEMMs: FMA rate bound by shared-memory loads to");
        for (int r = 8; r >= 1; r /= 2)
            if (gemm_rows & (1u << r))
                fprintf(f, " %.0f%% of peak at %d x %d outputs per thread%s",
                        100 * fmin(1, r * gemm_cols / (4.0 * (r + gemm_cols))), r, gemm_cols,
                        gemm_rows & ((1u << r) - 1) ? "," : "\n");
    }
}
