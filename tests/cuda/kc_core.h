/* tests/cuda/kc_core.h: the kernel checker's core, shared by its two
 * backends: the CUDA emulator on the CPU (tests/cuda/kc_emu.c, every
 * `make test`) and a real GPU through the driver API (tests/gpu/kc_gpu.c,
 * tests/gpu/run.sh). The core owns everything but running a CUDA kernel:
 * random state, the C kernels, NaN poisoning of the outputs and the
 * read-before-write search, the perturbation error scale, the judging,
 * the sizes and plans, the whole-plan run, the options and the report
 * (kc_core.c says how). A backend only moves state to and from where
 * its kernels run and launches one of them.
 * Plain C11, so that the C++ emulator harness links it unchanged. */
#ifndef KC_CORE_H
#define KC_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "cddprt.h"

#ifdef __cplusplus
extern "C" { /* the core is C; a C++ harness links it as such */
#endif

/* The arenas a plan works on, host side. */
typedef struct kc_state {
    float *act, *fix, *param, *grad, *opt;
    double *stat;
} kc_state;

/* Element counts of the arenas (act for one nmax), and the dataset the
 * kernels read through rt_exec.x/y/norm/idx (bytes, samples, indices). */
typedef struct kc_dims {
    int64_t act, fix, param, opt, stat;
    int64_t x_bytes, y_bytes, norm_bytes, nsample, nidx;
} kc_dims;

typedef struct kc_backend {
    const char *name;   /* "emulator", "gpu": in the report */
    int orders;         /* 2 when launch can run each block's threads in reverse order */
    int fatal_errors;   /* a failed put, launch or get leaves the backend unusable (a
                           GPU's errors are sticky): the check stops there */
    void *ctx;
    /* Allocate for the largest arenas of the run. 0 on success. */
    int (*open)(void *ctx, const kc_dims *max);
    /* Optional: the layout of rt_exec where the kernels run against
     * cddprt.h's (kc_layout_host). Prints its verdict; 0 when they agree. */
    int (*layout)(void *ctx, const rt_model *m);
    /* Optional: the backend's own checks of plan `which` (its kernel
     * table against program.c's). Prints failures; 0 when all is well. */
    int (*check_plan)(void *ctx, const char *which, const rt_plan *p);
    /* Optional: --compile-only (compile every kernel, report time and
     * resources). Exit status. */
    int (*compile_only)(void *ctx, const rt_model *m);
    /* The kernel called name: a handle >= 0, or -1 after printing why. */
    int (*find)(void *ctx, const char *name);
    /* The dataset and the scalars of e (its pointers are the host's; the
     * backend points its own copy at its arenas) for the next launches. */
    int (*bind)(void *ctx, const kc_dims *d, const rt_exec *e);
    /* Copy s to where the kernels run, and back into s. */
    int (*put)(void *ctx, const kc_dims *d, const kc_state *s);
    int (*get)(void *ctx, const kc_dims *d, kc_state *s);
    /* Run kernel fn over grid x block on the state put last, to the end;
     * reverse: each block's threads in descending order (orders == 2). */
    int (*launch)(void *ctx, int fn, const char *name, const unsigned grid[3], const unsigned block[3],
                  int reverse);
    /* Why the last call failed (may be "" when it was printed already). */
    const char *(*error)(void *ctx);
    /* Optional: one line of the backend's own counts for the summary. */
    void (*summary)(void *ctx, char *buf, size_t len);
    void (*close)(void *ctx);
} kc_backend;

/* sizeof(rt_exec) and the offsets of its fields, in the order of
 * kc_layout_names, as cddprt.h lays it out; returns the count. */
int kc_layout_host(size_t *out);
extern const char *const kc_layout_names[];

/* kc_act16.c: 16-bit activations (rt_cuda_launch.acts), for kernels
 * [k0, k1) of p at nmax rows, n of them live, prec the model's precision
 * (the file's comment says how). any: whether they touch one; canon: the C
 * state's values in those the backend gets packed, as their 16 bits read;
 * put: the C layout packed in place (what the backend gets); get: the
 * backend's layout back to the C one in place (put: what the backend got;
 * ref: the C result, for values left without a counterpart, counted in
 * *uncompared), returning how many floats changed past a buffer's 16-bit
 * values (the first in why); check_c: how many values C kernel k stored
 * in a 16-bit buffer that 16 bits do not hold (the first in why). */
int kc_act16_any(const rt_plan *p, int k0, int k1);
void kc_act16_canon(const rt_plan *p, int k0, int k1, float *act, int64_t nmax, int64_t n, int prec);
void kc_act16_put(const rt_plan *p, int k0, int k1, float *act, int64_t nmax, int64_t n, int prec);
int64_t kc_act16_get(const rt_plan *p, int k0, int k1, float *act, const float *put, const float *ref, int64_t total,
                     int64_t nmax, int64_t n, int prec, int64_t *uncompared, char *why, size_t wlen);
int64_t kc_act16_check_c(const rt_plan *p, int k, const float *act, int64_t nmax, int64_t n, int prec, char *why,
                         size_t wlen);

/* The checker: parses argv, runs every check through b, prints the
 * report; returns the exit status (0: every check passed). sizes: the
 * default --sizes. */
int kc_main(int argc, char **argv, const rt_model *m, const kc_backend *b, const char *sizes);

#ifdef __cplusplus
}
#endif
#endif
