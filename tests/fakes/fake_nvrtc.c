/* fake_nvrtc.c: an NVRTC of another version, for testing how the runtime
 * chooses one (tests/cuda/test_cuda_device.sh). Copied to a file named
 * libnvrtc.so.MAJOR it claims to be NVRTC MAJOR.0 (nvrtcVersion) and to
 * know the architectures in FAKE_NVRTC_ARCHS_MAJOR (comma-separated, as
 * nvrtcGetSupportedArchs numbers them: 70, 90, 121), else NVRTC 12.x's
 * list (50 to 90) or 13.0's (75 to 121). Everything else goes to the real
 * NVRTC (FAKE_NVRTC_REAL, default /usr/local/cuda/lib64/libnvrtc.so),
 * which compiles for its own sm_90 whatever architecture was asked for:
 * the fake driver runs emulated kernels and only needs the kernel names.
 * Each compile appends "NVRTC MAJOR.0 --gpu-architecture=ARCH" to
 * FAKE_NVRTC_LOG when that is set, so a test sees what was asked. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

static void *real;

static void *sym(const char *name)
{
    if (!real) {
        const char *p = getenv("FAKE_NVRTC_REAL");
        real = dlopen(p && *p ? p : "/usr/local/cuda/lib64/libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
        if (!real) {
            fprintf(stderr, "fake nvrtc: cannot load the real NVRTC: %s\n", dlerror());
            abort();
        }
    }
    void *f = dlsym(real, name);
    if (!f) {
        fprintf(stderr, "fake nvrtc: the real NVRTC lacks %s\n", name);
        abort();
    }
    return f;
}
#define REAL(ret, name, ...) ((ret(*)(__VA_ARGS__))sym(#name))

/* MAJOR from this file's own name: libnvrtc.so.MAJOR */
static int my_major(void)
{
    Dl_info info;
    if (!dladdr((void *)my_major, &info) || !info.dli_fname)
        return 13;
    const char *s = strstr(info.dli_fname, ".so.");
    return s ? atoi(s + 4) : 13;
}

static int archs(int *out)
{
    static const int v12[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};
    static const int v13[] = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};
    char name[64];
    const int major = my_major();
    snprintf(name, sizeof name, "FAKE_NVRTC_ARCHS_%d", major);
    const char *e = getenv(name);
    int n = 0;
    if (e && *e) {
        for (char *p = (char *)e; *p && n < 64;) {
            char *end;
            long x = strtol(p, &end, 10);
            if (end == p)
                break;
            if (out)
                out[n] = (int)x;
            n++;
            p = *end == ',' ? end + 1 : end;
        }
        return n;
    }
    const int *v = major >= 13 ? v13 : v12;
    n = major >= 13 ? (int)(sizeof v13 / sizeof v13[0]) : (int)(sizeof v12 / sizeof v12[0]);
    for (int i = 0; out && i < n; i++)
        out[i] = v[i];
    return n;
}

nvrtcResult nvrtcVersion(int *major, int *minor)
{
    *major = my_major();
    *minor = 0;
    return 0;
}

nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
    *n = archs(NULL);
    return 0;
}

nvrtcResult nvrtcGetSupportedArchs(int *a)
{
    archs(a);
    return 0;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int nopt, const char *const *opts)
{
    const char *log = getenv("FAKE_NVRTC_LOG");
    const char **o = calloc((size_t)nopt + 1, sizeof *o);
    if (!o)
        return 1;
    for (int i = 0; i < nopt; i++) {
        o[i] = opts[i];
        if (!strncmp(opts[i], "--gpu-architecture=", 19)) {
            if (log && *log) {
                FILE *f = fopen(log, "a");
                if (f) {
                    fprintf(f, "NVRTC %d.0 %s\n", my_major(), opts[i]);
                    fclose(f);
                }
            }
            o[i] = "--gpu-architecture=sm_90";
        }
    }
    nvrtcResult r = REAL(nvrtcResult, nvrtcCompileProgram, nvrtcProgram, int, const char *const *)(p, nopt, o);
    free(o);
    return r;
}

const char *nvrtcGetErrorString(nvrtcResult r)
{
    return REAL(const char *, nvrtcGetErrorString, nvrtcResult)(r);
}
nvrtcResult nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int n, const char *const *h,
                               const char *const *hn)
{
    return REAL(nvrtcResult, nvrtcCreateProgram, nvrtcProgram *, const char *, const char *, int,
                const char *const *, const char *const *)(p, src, name, n, h, hn);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *p)
{
    return REAL(nvrtcResult, nvrtcDestroyProgram, nvrtcProgram *)(p);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    return REAL(nvrtcResult, nvrtcGetProgramLogSize, nvrtcProgram, size_t *)(p, n);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    return REAL(nvrtcResult, nvrtcGetProgramLog, nvrtcProgram, char *)(p, log);
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    return REAL(nvrtcResult, nvrtcGetCUBINSize, nvrtcProgram, size_t *)(p, n);
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *c)
{
    return REAL(nvrtcResult, nvrtcGetCUBIN, nvrtcProgram, char *)(p, c);
}
nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    return REAL(nvrtcResult, nvrtcGetPTXSize, nvrtcProgram, size_t *)(p, n);
}
nvrtcResult nvrtcGetPTX(nvrtcProgram p, char *c)
{
    return REAL(nvrtcResult, nvrtcGetPTX, nvrtcProgram, char *)(p, c);
}
