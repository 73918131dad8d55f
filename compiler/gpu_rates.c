/* gpu_rates.c: the GPU model's rates, shared by the scheduler (sched_gpu.c,
 * which chooses each GEMM's tile and split with them) and the report
 * (gpu_model.c): the targets' datasheet peaks, a tiled GEMM's rate, and
 * the share of the SMs a grid keeps busy.
 *
 * Resident blocks: GPU_BLOCKS_PER_SM, the emitter's
 * __launch_bounds__(256, 2) (the GEMM tiles need those registers); waves
 * = ceil(blocks / (SMs x GPU_BLOCKS_PER_SM)); busy share = min(1, blocks /
 * (waves x SMs)): a grid smaller than the GPU, or a last wave partly
 * empty, leaves SMs idle.
 *
 * A tiled GEMM reaches that peak only if shared memory keeps up. Each k
 * step a thread with an r x c register tile loads r + c operands from
 * shared memory for r x c FMAs. An SM serves 32 banks x 4 B per clock
 * (CUDA C++ Programming Guide, "Shared Memory": successive 32-bit words in
 * 32 banks, 32 bits per bank per clock), one warp-wide 4-byte load, while
 * it retires 128 FP32 FMAs per clock (the guide's "Arithmetic
 * Instructions" table, compute capability 8.x/9.0), four warp-wide FMAs.
 * So the FMA share is min(1, r c / (4 (r + c))): 0.5 for the emitter's
 * 4x4 (16 FMAs per 8 loads), 0.33 for its 2x4, 0.2 for its 1x4, 1 from
 * 8x8; the scheduler (sched_gpu.c) picks each GEMM's tile with this same model
 * (gpu_gemm_secs, in sched_gpu.c). Assumed: the operands are scalar
 * loads (the emitter's stride-16 layout rules out 128-bit ones), and the
 * tile fills (one shared store per 16 loads) are left out. A split-K GEMM
 * also moves its partials: split x M x N floats stored and read back once
 * (counted at memory bandwidth, though they may stay in L2).
 * The mma k step is bound the same way: per 16-deep slice a warp of a
 * 16r x 64 tile loads 8 + 4r scalars from shared memory (8 for its A
 * fragment, 4 for each of its r B fragments) for r mmas of 16 x 8 x 16
 * multiply-adds, while the SM's tensor cores retire tensor / flops x 128
 * multiply-adds per clock (the FP32 peak is 128 FMAs per SM per clock): a
 * share of (r x 2048 / (8 + 4r)) / that of the tensor peak, on an H200
 * 18% at 64x64 (24 loads for 4 mmas), 14% at 32x64, 9% at 16x64: the
 * fragments come from scalar loads, not ldmatrix.
 *
 * Where the operands come from: a training step touches the same buffers
 * every step (gpu_working_set: activations at the batch, the fixed arena,
 * parameters, gradients, optimizer state). When they fit in one half of
 * the L2 (H100's L2 is two partitions; an SM reaches the far one slower:
 * Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth",
 * 2023) they stay there from step to step, and every kernel's bytes come
 * at the L2's rate instead of the memory's. SimpleNet at batch 64 needs
 * about 5 MB; H100 and H200 have 50 MB of L2.
 *
 * The fixed costs, each an assumption until tests/gpu/predict.sh measures
 * it on a lent GPU (no GPU has yet):
 *   - GPU_NODE_US, a kernel node of a replayed graph: NVIDIA's "Getting
 *     Started with CUDA Graphs" (A. Gray, 2019) measured about 0.5 us a
 *     node (V100: 3.4 us a 2.9-us kernel in a graph, 3.8 in a stream);
 *     doubled, our nodes are a chain each waiting on the one before;
 *   - GPU_GRAPH_LAUNCH_US, one cuGraphLaunch a RT_CUDA_RUN_STEPS steps:
 *     an estimate of the driver call, paid once a graph;
 *   - GPU_MIN_KERNEL_US, no kernel node ends sooner: block dispatch, a
 *     first load at DRAM latency and the completion's flush; an estimate
 *     matching the review of issue 30, which expected 20-40 us for
 *     SimpleNet's 7-node step where the roofline alone gave 15;
 *   - the split-K tail (gpu_splitk_tail): SPLITK_SYNC_US for the fence,
 *     the counter's atomic and the second fence (a few L2 round trips;
 *     an estimate, the same review's 1-2 us a split kernel), then each
 *     tile's last block reads its slices' partials back alone, at one
 *     SM's share of the L2 rate or SM_L2_BYTES_CLK a clock, whichever is
 *     less (assumed: no datasheet gives an SM's own L2 rate).
 * */

#include <math.h>
#include <string.h>

#include "cddpc.h"

#define SPLITK_SYNC_US 1.0   /* estimate: see above */
#define SM_L2_BYTES_CLK 64.0  /* assumed: one SM's reads from L2 a clock */
#define L2_BYTES_CLK 5120.0   /* A100 whitepaper: L2 read bandwidth 5120 bytes a clock */

/* The one table of GPU peaks, each with where it comes from. L2 read
 * rates: the A100 whitepaper's 5120 bytes a clock at the boost clock;
 * for Hopper, which NVIDIA gives no figure for, assumed the same bytes a
 * clock; none for the T4 (its operands at memory bandwidth). */
static const GpuTarget targets[] = {
    {"h100", "H100 SXM5 80GB", 66.9e12, 3.35e12, 989.5e12, 132, 1.98e9, 50e6, L2_BYTES_CLK * 1.98e9,
     "NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOPS, BF16/FP16 tensor 1,979 TFLOPS with sparsity "
     "(989.5 dense), HBM3 3.35 TB/s; 132 SMs at 1.98 GHz, 50 MB L2 (H100 whitepaper)"},
    {"h200", "H200 SXM 141GB", 66.9e12, 4.8e12, 989.5e12, 132, 1.98e9, 50e6, L2_BYTES_CLK * 1.98e9,
     "NVIDIA H200 Tensor Core GPU datasheet: FP32 67 TFLOPS, BF16/FP16 tensor 1,979 TFLOPS with sparsity "
     "(989.5 dense), HBM3e 4.8 TB/s; 132 SMs at 1.98 GHz, 50 MB L2 (the H100's GH100)"},
    {"a100", "A100 SXM4 80GB", 19.5e12, 2.039e12, 312e12, 108, 1.41e9, 40e6, L2_BYTES_CLK * 1.41e9,
     "NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5 TFLOPS, BF16/FP16 tensor 312 TFLOPS (dense), "
     "HBM2e 2,039 GB/s; 108 SMs at 1.41 GHz, 40 MB L2 (A100 whitepaper)"},
    {"t4", "T4", 8.1e12, 320e9, 0, 40, 1.59e9, 4e6, 0,
     "NVIDIA T4 datasheet: FP32 8.1 TFLOPS, GDDR6 320 GB/s; 40 SMs at 1.59 GHz, 4 MB L2 (sm_75: the mma "
     "path needs sm_80, its GEMMs stay FMA)"},
};

const GpuTarget *gpu_target(const char *name)
{
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
        if (!strcmp(name, targets[i].name))
            return &targets[i];
    return NULL;
}

double gpu_gemm_rate(const GpuTarget *t, const GemmTiling *gt)
{
    if (gt->mma && t->tensor > 0)   /* r mmas for 8 + 4r shared loads a warp */
        return t->tensor * fmin(1, (gt->rows * 16.0 * 8 * 16 / (8 + 4 * gt->rows)) / (t->tensor / t->flops * 128));
    return t->flops * fmin(1, gt->rows * gt->cols / (4.0 * (gt->rows + gt->cols)));
}

/* The share of t's SMs a grid of that many blocks keeps busy: a grid
 * smaller than the GPU, or a last wave partly empty, leaves SMs idle. */
double gpu_busy_share(const GpuTarget *t, double blocks)
{
    const double waves = ceil(blocks / (t->sms * GPU_BLOCKS_PER_SM));
    return fmin(1, blocks / (waves * t->sms));
}

double gpu_gemm_secs(const GpuTarget *t, const GemmTiling *gt, double flops, double bytes, double bw, double blocks)
{
    return fmax(flops / gpu_gemm_rate(t, gt), bytes / bw) / gpu_busy_share(t, blocks);
}

double gpu_working_set(const Plan *p, int64_t n)
{
    return 4.0 * ((double)p->cpu_act_units * (double)n + (double)p->cpu_fix_floats
                  + (double)p->param_floats * (2.0 + ir_opt_slots(p->g)));
}

double gpu_step_bw(const GpuTarget *t, double working_set)
{
    return t->l2_bw > 0 && working_set <= t->l2 / 2 ? t->l2_bw : t->bw;
}

double gpu_kernel_floor(double secs)
{
    return fmax(GPU_MIN_KERNEL_US * 1e-6, secs);
}

double gpu_splitk_tail(const GpuTarget *t, double tile_floats, int split, double tiles)
{
    if (split < 2)
        return 0;
    /* the partials were just stored: they come from L2 (or, with no L2
     * rate in the table, from memory) */
    const double all = t->l2_bw > 0 ? t->l2_bw : t->bw;
    const double sm = fmin(all / fmax(1, fmin(tiles, t->sms)), SM_L2_BYTES_CLK * t->clock);
    return SPLITK_SYNC_US * 1e-6 + 4.0 * split * tile_floats / sm;
}

/* The recurrences (emit_rnn_cuda.c): one launch runs every step of a
 * layer and direction, a block owning `rows` samples, each hidden unit's
 * dot products split over `split` threads (then summed across them with
 * warp shuffles). A step of a block is a chain: its dot products, the
 * cells, two barriers; the next step needs every unit's result. The dot
 * loop of a thread is unrolled 4 deep, each round a wave of loads of
 * W_hh from L2 the round's multiply-adds wait for, so a step costs at
 * least its rounds x RNN_L2_LAT_CLK (the blocks of an SM wait side by
 * side), or the instructions of the SM's resident warps at 4 a clock (4
 * schedulers), whichever is longer, + 2 barriers. Over the kernel: the
 * steps x that, a wave of blocks after another when they do not all fit,
 * or its traffic, whichever is longer: W_hh read by each block each step
 * (cost_rnn_rereads: 256 KB for a 128-wide LSTM, it stays in L2) at the
 * L2's rate, the rest of its bytes at the step's bandwidth. More rows a block read W_hh fewer times
 * and issue more multiply-adds per load; more threads a unit shorten the
 * chain. Assumed, not yet measured (tests/gpu/predict.sh):
 *   - RNN_L2_LAT_CLK, an L2 hit: 222-339 clocks over the SMs of an L40
 *     (Ada, 96 MB L2), about 279 on average (arXiv 2606.22588); the
 *     H100's L2, split in two partitions, is taken the same;
 *   - RNN_SYNC_CLK a barrier, RNN_CELL_INSTR a cell's instructions a
 *     unit and sample (its transcendentals, its loads of x W_ih and
 *     stores of h and the saved gates): estimates.
 * Registers (estimated, for gpu_rnn_fits): a forward thread holds G x rows
 * sums, 4 rounds of G + rows operands and a unit's state for each of its
 * units and rows; a gradient thread rows sums, 4 x (1 + rows) operands and
 * dh and dc; within the cap __launch_bounds__ gives (65536 / threads, at
 * most 128: tests/cuda/nvrtc_check.sh --rnn compiles every design the
 * scheduler may choose and fails a spill). */
#define RNN_L2_LAT_CLK 280.0
#define RNN_SYNC_CLK 40.0
#define RNN_CELL_INSTR 40.0
#define SM_THREADS 2048.0       /* resident threads an SM (compute capability 8.0 / 9.0) */
#define SM_BLOCKS 32.0          /* resident blocks an SM */
#define RNN_SHARED_MAX (48 * 1024)  /* static shared memory a block */

RnnDesign gpu_rnn_design(int64_t H, int rows, int split)
{
    RnnDesign d;
    d.rows = rows > 0 ? rows : 1;
    d.split = split > 0 ? split : 1;
    d.slots = H >= 128 ? 128 : (int)((H + 31) / 32 * 32);
    d.units = (int)((H + d.slots - 1) / d.slots);
    d.threads = d.split * d.slots;
    return d;
}

static double rnn_shared(const RnnWork *w, const RnnDesign *d)
{
    return 4.0 * d->rows * (double)(w->backward ? w->G * w->H : w->H);
}

int gpu_rnn_fits(const RnnWork *w, const RnnDesign *d)
{
    const double cap = fmin(128, 65536.0 / d->threads);
    const double regs = w->backward ? d->rows + 4.0 * (1 + d->rows) + 2.0 * d->units * d->rows + 24
                                    : w->G * d->rows + 4.0 * (w->G + d->rows) + 2.0 * d->units * d->rows + 24;
    return d->threads <= 1024 && regs <= cap && (d->rows == 1 || rnn_shared(w, d) <= RNN_SHARED_MAX);
}

double gpu_rnn_secs(const GpuTarget *t, const RnnWork *w, const RnnDesign *d, double bytes, double rereads, double bw)
{
    const double R = d->rows, K = d->split, G = w->G;
    /* a thread's share of a unit's dot products, and per term its loads and multiply-adds */
    const double len = ceil((double)(w->backward ? w->G * w->H : w->H) / K);
    const double per = w->backward ? 1 + 2 * R : G + R + G * R, sums = w->backward ? R : G * R;
    const double rounds = d->units * ceil(len / 4);
    const double instr = d->units * (len * per + 2 * log2(K) * sums + ceil(R / K) * RNN_CELL_INSTR);
    const double blocks = ceil((double)w->n / R);
    const double res = fmin(fmin(floor(SM_THREADS / d->threads), SM_BLOCKS),
                            fmax(1, floor(228.0 * 1024 / fmax(1, rnn_shared(w, d)))));
    const double waves = ceil(blocks / (t->sms * res)), per_sm = ceil(blocks / (waves * t->sms));
    const double step = fmax(rounds * RNN_L2_LAT_CLK, per_sm * d->threads / 32 * instr / 4) + 2 * RNN_SYNC_CLK;
    const double traffic = (bytes - rereads) / bw + rereads / (t->l2_bw > 0 ? t->l2_bw : bw);
    return fmax(waves * (double)w->T * step / t->clock, traffic);
}
