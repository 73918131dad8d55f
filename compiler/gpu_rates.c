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
 * */
#include <math.h>
#include <string.h>

#include "cddpc.h"

/* The one table of GPU peaks, each with where it comes from. */
static const GpuTarget targets[] = {
    {"h100", "H100 SXM5 80GB", 66.9e12, 3.35e12, 989.5e12, 132,
     "NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOPS, BF16/FP16 tensor 1,979 TFLOPS with sparsity "
     "(989.5 dense), HBM3 3.35 TB/s; 132 SMs (H100 whitepaper)"},
    {"h200", "H200 SXM 141GB", 66.9e12, 4.8e12, 989.5e12, 132,
     "NVIDIA H200 Tensor Core GPU datasheet: FP32 67 TFLOPS, BF16/FP16 tensor 1,979 TFLOPS with sparsity "
     "(989.5 dense), HBM3e 4.8 TB/s; 132 SMs"},
    {"a100", "A100 SXM4 80GB", 19.5e12, 2.039e12, 312e12, 108,
     "NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5 TFLOPS, BF16/FP16 tensor 312 TFLOPS (dense), "
     "HBM2e 2,039 GB/s; 108 SMs"},
    {"t4", "T4", 8.1e12, 320e9, 0, 40,
     "NVIDIA T4 datasheet: FP32 8.1 TFLOPS, GDDR6 320 GB/s; 40 SMs (sm_75: the mma path needs sm_80, "
     "its GEMMs stay FMA)"},
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

double gpu_gemm_secs(const GpuTarget *t, const GemmTiling *gt, double flops, double bytes, double blocks)
{
    return fmax(flops / gpu_gemm_rate(t, gt), bytes / t->bw) / gpu_busy_share(t, blocks);
}
