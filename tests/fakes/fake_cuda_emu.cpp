/* fake_cuda_emu.cpp: the one entry point tests/fakes/fake_cuda.c needs from
 * the emulated kernels' shared object: run kernel fn over grid x block on
 * the CPU with tests/cuda/emu.h. Every kernel of a cddp program takes one
 * pointer argument, so one instantiation of emu_launch serves them all
 * (the kernel is called through a pointer to a function of one pointer
 * argument, which is how x86-64 and aarch64 pass it either way).
 * Built together with the program's NVRTC source (CDDP_CUDA_DUMP) by
 * tests/fakes/emu_kernels.sh:
 *   g++ -std=c++17 -fPIC -shared -include tests/cuda/emu.h -x c++ SRC.cu \
 *       -x none tests/fakes/fake_cuda_emu.cpp -Itests/cuda -o kernels.so */
#include "emu.h"

extern "C" int fake_emu_launch(void *fn, const unsigned *g, const unsigned *b, void *arg, const char *name)
{
    typedef void (*kernel)(const char *);
    return emu_launch((kernel)fn, dim3(g[0], g[1], g[2]), dim3(b[0], b[1], b[2]), (const char *)arg, name);
}
