/* tests/cuda/nvrtc_check.c: compile CUDA sources with NVRTC, as the
 * runtime will on a GPU machine, and demand an EMPTY log: no error and no
 * warning (DESIGN.md section 5, tier 3). NVRTC needs no GPU.
 *
 * Usage: nvrtc_check [--arch sm_80,sm_90] [--ptx-dir DIR --ptx-arch sm_90] FILE.cu...
 * Every FILE is compiled for every arch. With --ptx-dir, the PTX of the
 * --ptx-arch compilation is written to DIR/BASENAME.ptx (for ptxas -v).
 * Prints one line per file; exit status 1 if any compilation failed or
 * logged anything (the log is printed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#define NVRTC_CHECK(call)                                                                           \
    do {                                                                                            \
        nvrtcResult r_ = (call);                                                                    \
        if (r_ != NVRTC_SUCCESS) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, nvrtcGetErrorString(r_));  \
            return -1;                                                                              \
        }                                                                                           \
    } while (0)

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = 0;
    return buf;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* One compilation. Returns 0 when it succeeded with an empty log, 1 when
 * it failed or logged, -1 on an NVRTC API error. */
static int compile(const char *path, const char *src, const char *arch, const char *ptx_out)
{
    nvrtcProgram prog;
    NVRTC_CHECK(nvrtcCreateProgram(&prog, src, base_name(path), 0, NULL, NULL));
    char opt_arch[64];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt_arch};
    nvrtcResult rc = nvrtcCompileProgram(prog, 1, opts);
    size_t logsz = 0;
    NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &logsz));
    char *log = malloc(logsz + 1);
    if (!log)
        return -1;
    log[0] = 0;
    if (logsz > 0)
        NVRTC_CHECK(nvrtcGetProgramLog(prog, log));
    log[logsz] = 0;
    int bad = rc != NVRTC_SUCCESS || log[0] != 0;
    if (bad) {
        printf("FAIL %s [%s]: %s%s\n", path, arch, rc != NVRTC_SUCCESS ? nvrtcGetErrorString(rc) : "compiled",
               log[0] ? ", with this log:" : "");
        fputs(log, stdout);
        if (log[0] && log[strlen(log) - 1] != '\n')
            putchar('\n');
    }
    free(log);
    if (!bad && ptx_out) {
        size_t n = 0;
        NVRTC_CHECK(nvrtcGetPTXSize(prog, &n));
        char *ptx = malloc(n + 1);
        if (!ptx)
            return -1;
        NVRTC_CHECK(nvrtcGetPTX(prog, ptx));
        FILE *f = fopen(ptx_out, "wb");
        if (!f || fwrite(ptx, 1, strlen(ptx), f) != strlen(ptx) || fclose(f) != 0) {
            fprintf(stderr, "nvrtc_check: cannot write %s\n", ptx_out);
            free(ptx);
            return -1;
        }
        free(ptx);
    }
    NVRTC_CHECK(nvrtcDestroyProgram(&prog));
    return bad;
}

int main(int argc, char **argv)
{
    char archs_buf[256] = "sm_80,sm_90";
    const char *ptx_dir = NULL, *ptx_arch = "sm_90";
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--arch") && i + 1 < argc)
            snprintf(archs_buf, sizeof archs_buf, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--ptx-dir") && i + 1 < argc)
            ptx_dir = argv[++i];
        else if (!strcmp(argv[i], "--ptx-arch") && i + 1 < argc)
            ptx_arch = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--arch A,B] [--ptx-dir DIR] [--ptx-arch A] FILE.cu...\n", argv[0]);
            return 2;
        }
    }
    if (i == argc) {
        fprintf(stderr, "nvrtc_check: no input files\n");
        return 2;
    }
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    char archs_list[256];
    snprintf(archs_list, sizeof archs_list, "%s", archs_buf);
    char *archs[16];
    int narch = 0;
    for (char *tok = strtok(archs_buf, ","); tok && narch < 16; tok = strtok(NULL, ","))
        archs[narch++] = tok;
    int failed = 0, total = 0;
    for (; i < argc; i++) {
        char *src = read_file(argv[i]);
        if (!src) {
            printf("FAIL %s: cannot read\n", argv[i]);
            failed++;
            continue;
        }
        int ok = 1;
        for (int a = 0; a < narch; a++) {
            char ptx_path[4096];
            const char *out = NULL;
            if (ptx_dir && !strcmp(archs[a], ptx_arch)) {
                const char *b = base_name(argv[i]);
                size_t bl = strlen(b);
                if (bl > 3 && !strcmp(b + bl - 3, ".cu"))
                    bl -= 3;
                snprintf(ptx_path, sizeof ptx_path, "%s/%.*s.ptx", ptx_dir, (int)bl, b);
                out = ptx_path;
            }
            int r = compile(argv[i], src, archs[a], out);
            total++;
            if (r != 0) {
                ok = 0;
                failed++;
                if (r < 0)
                    printf("FAIL %s [%s]: NVRTC API error\n", argv[i], archs[a]);
            }
        }
        if (ok)
            printf("ok   %s [%s]\n", argv[i], archs_list);
        free(src);
    }
    printf("NVRTC %d.%d: %d compilations, %d failed or logged\n", major, minor, total, failed);
    return failed != 0;
}
