/* tests/cuda/kc_cuda.cpp: the emitted CUDA source (all.cu), compiled by
 * the host C++ compiler against emu.h, behind a small C interface for
 * the emulator backend of kernel_check (kc_emu.c). kernel_check.sh generates kc_table.inc from launch.txt
 * (one entry per kernel: plan, name, function, geometry, and the
 * __launch_bounds__ the source declares). Compiled with -DCDDP_HAVE_STDINT
 * and -I the directory holding all.cu and kc_table.inc. */
#include <cstddef>
#include <cstdint>

#include "emu.h"

#include "all.cu"

namespace {
struct kc_entry {
    const char *plan, *name;
    void (*fn)(const rt_exec *);
    unsigned block[3], gfix[3];
    long long gmul[3], gdiv[3];
    int bounds; /* __launch_bounds__ of the kernel, 0 if none */
};
const kc_entry kc_table[] = {
#include "kc_table.inc"
};
} // namespace

extern "C" {

int kc_cuda_count(void) { return (int)(sizeof kc_table / sizeof kc_table[0]); }
const char *kc_cuda_name(int i) { return kc_table[i].name; }
const char *kc_cuda_plan(int i) { return kc_table[i].plan; }
int kc_cuda_bounds(int i) { return kc_table[i].bounds; }

/* Launch geometry for nmax, as the runtime computes it (cddprt.h,
 * rt_cuda_launch): gfix[d] when gdiv[d] == 0, else ceil(nmax*gmul/gdiv),
 * at least 1. */
void kc_cuda_geometry(int i, int nmax, unsigned grid[3], unsigned block[3], const long long **gmul,
                      const long long **gdiv, const unsigned **gfix)
{
    const kc_entry &k = kc_table[i];
    for (int d = 0; d < 3; d++) {
        block[d] = k.block[d];
        if (k.gdiv[d] == 0)
            grid[d] = k.gfix[d];
        else {
            long long g = ((long long)nmax * k.gmul[d] + k.gdiv[d] - 1) / k.gdiv[d];
            grid[d] = (unsigned)(g < 1 ? 1 : g);
        }
    }
    if (gmul)
        *gmul = k.gmul;
    if (gdiv)
        *gdiv = k.gdiv;
    if (gfix)
        *gfix = k.gfix;
}

/* Run kernel i on the CPU over grid x block with exec (an rt_exec of
 * cddprt.h's layout; kc_cuda_layout lets the caller check that), each
 * block's threads in descending order when reverse. 0 on success. */
int kc_cuda_launch(int i, const void *exec, const unsigned grid[3], const unsigned block[3], int reverse)
{
    emu_set_reverse(reverse != 0);
    int rc = emu_launch(kc_table[i].fn, dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]),
                        (const rt_exec *)exec, kc_table[i].name);
    emu_set_reverse(false);
    return rc;
}

const char *kc_cuda_error(void) { return emu_last_error(); }
unsigned long long kc_cuda_switches(void) { return emu_switches(); }

/* sizeof and field offsets of the CUDA source's rt_exec */
int kc_cuda_layout(size_t *out)
{
    int k = 0;
    out[k++] = sizeof(rt_exec);
#define F(f) out[k++] = offsetof(rt_exec, f)
    F(n); F(nmax); F(act); F(fix); F(param); F(grad); F(opt); F(stat);
    F(x); F(y); F(norm); F(idx); F(x_size); F(y_size); F(norm_div); F(x_u8); F(norm_n); F(lr); F(step); F(nthreads); F(rank); F(world); F(seed); F(scale); F(found_inf);
#undef F
    return k;
}
}
