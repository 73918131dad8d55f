/* tests/cuda/nvrtc_check.c: compile CUDA sources with NVRTC, as the
 * runtime will on a GPU machine, and demand an EMPTY log: no error and no
 * warning (DESIGN.md section 5, tier 3). NVRTC needs no GPU.
 *
 * Usage: nvrtc_check [--arch sm_80,sm_90] [--syntax-only] [--ptxas-info DIR] [--cache DIR] FILE.cu...
 *   --arch        every FILE is compiled for every arch (sm_XX: to a cubin,
 *                 through ptxas, as the runtime does; compute_XX: to PTX)
 *   --syntax-only NVRTC's front end alone (-fdevice-syntax-only): the
 *                 errors and warnings, in a twentieth of the time; no NVVM,
 *                 no ptxas
 *   --ptxas-info  ptxas -v for the sm_XX compilations: its info lines go to
 *                 DIR/BASE.ARCH.ptxas (registers, shared memory, spills per
 *                 kernel) and are not counted as log; any other line is
 *   --cache       a compilation whose key (NVRTC's version, the arch, the
 *                 options, the source) passed before is not repeated; the
 *                 key's file in DIR holds what ptxas said
 * Prints one line per file; exit status 1 if any compilation failed or
 * logged anything (the log is printed). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvrtc.h>

#define NVRTC_CHECK(call)                                                                           \
    do {                                                                                            \
        nvrtcResult r_ = (call);                                                                    \
        if (r_ != NVRTC_SUCCESS) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, nvrtcGetErrorString(r_));  \
            return -1;                                                                              \
        }                                                                                           \
    } while (0)

static int major, minor, syntax_only;
static const char *info_dir, *cache_dir;

static char *read_file(const char *path, size_t *lenp)
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
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = 0;
    if (lenp)
        *lenp = len;
    return buf;
}

static int write_file(const char *path, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "nvrtc_check: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* FNV-1a, twice with other offsets: 128 bits of key for a test's cache */
static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* ptxas's -v lines out of the log into info; 1 when anything else is left */
static int split_ptxas(const char *log, char *rest, char *info)
{
    rest[0] = info[0] = 0;
    for (const char *l = log; *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l + 1) : strlen(l);
        /* "ptxas info    : ..." and "ptxas         .     0 bytes stack frame, ..." */
        const char *t = l + 5;
        while (!strncmp(l, "ptxas", 5) && *t == ' ')
            t++;
        int is_info = !strncmp(l, "ptxas ", 6) && (*t == '.' || !strncmp(t, "info", 4));
        strncat(is_info ? info : rest, l, n);
        l += n;
    }
    return rest[0] != 0;
}

/* One compilation. Returns 0 when it succeeded with an empty log, 1 when
 * it failed or logged, -1 on an NVRTC API error. */
static int compile(const char *path, const char *src, size_t srclen, const char *arch)
{
    char opt_arch[64];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
    const char *opts[3] = {opt_arch};
    int nopt = 1;
    int cubin = !strncmp(arch, "sm_", 3);
    int want_info = info_dir && cubin && !syntax_only;
    if (syntax_only)
        opts[nopt++] = "-fdevice-syntax-only";
    if (want_info)
        opts[nopt++] = "--ptxas-options=-v";

    const char *b = base_name(path);
    size_t bl = strlen(b);
    if (bl > 3 && !strcmp(b + bl - 3, ".cu"))
        bl -= 3;
    char info_path[4200] = "";
    if (want_info)
        snprintf(info_path, sizeof info_path, "%s/%.*s.%s.ptxas", info_dir, (int)bl, b, arch);

    char key_path[4200] = "";
    if (cache_dir) {
        char head[128];
        int hn = snprintf(head, sizeof head, "nvrtc %d.%d", major, minor);
        uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
        for (int k = 0; k < nopt; k++) {
            h1 = fnv(h1, opts[k], strlen(opts[k]) + 1);
            h2 = fnv(h2, opts[k], strlen(opts[k]) + 1);
        }
        h1 = fnv(fnv(h1, head, (size_t)hn), src, srclen);
        h2 = fnv(fnv(h2, head, (size_t)hn), src, srclen);
        snprintf(key_path, sizeof key_path, "%s/%016llx%016llx", cache_dir, (unsigned long long)h1,
                 (unsigned long long)h2);
        char *hit = read_file(key_path, NULL);
        if (hit) {      /* it passed before: what ptxas said then */
            int rc = want_info ? write_file(info_path, hit) : 0;
            free(hit);
            return rc;
        }
    }

    nvrtcProgram prog;
    NVRTC_CHECK(nvrtcCreateProgram(&prog, src, base_name(path), 0, NULL, NULL));
    nvrtcResult rc = nvrtcCompileProgram(prog, nopt, opts);
    size_t logsz = 0;
    NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &logsz));
    char *log = malloc(logsz + 1), *rest = malloc(logsz + 1), *info = malloc(logsz + 1);
    if (!log || !rest || !info)
        return -1;
    log[0] = 0;
    if (logsz > 0)
        NVRTC_CHECK(nvrtcGetProgramLog(prog, log));
    log[logsz] = 0;
    NVRTC_CHECK(nvrtcDestroyProgram(&prog));
    int logged = want_info ? split_ptxas(log, rest, info) : (strcpy(rest, log), info[0] = 0, rest[0] != 0);
    int bad = rc != NVRTC_SUCCESS || logged;
    if (bad) {
        printf("FAIL %s [%s]: %s%s\n", path, arch, rc != NVRTC_SUCCESS ? nvrtcGetErrorString(rc) : "compiled",
               rest[0] ? ", with this log:" : "");
        fputs(rest, stdout);
        if (rest[0] && rest[strlen(rest) - 1] != '\n')
            putchar('\n');
    } else {
        if (want_info && write_file(info_path, info) != 0)
            bad = -1;
        if (!bad && key_path[0] && write_file(key_path, info) != 0)
            bad = -1;
    }
    free(log);
    free(rest);
    free(info);
    return bad;
}

int main(int argc, char **argv)
{
    char archs_buf[256] = "sm_80,sm_90";
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--arch") && i + 1 < argc)
            snprintf(archs_buf, sizeof archs_buf, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--syntax-only"))
            syntax_only = 1;
        else if (!strcmp(argv[i], "--ptxas-info") && i + 1 < argc)
            info_dir = argv[++i];
        else if (!strcmp(argv[i], "--cache") && i + 1 < argc)
            cache_dir = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--arch A,B] [--syntax-only] [--ptxas-info DIR] [--cache DIR] FILE.cu...\n",
                    argv[0]);
            return 2;
        }
    }
    if (i == argc) {
        fprintf(stderr, "nvrtc_check: no input files\n");
        return 2;
    }
    nvrtcVersion(&major, &minor);
    char archs_list[256];
    snprintf(archs_list, sizeof archs_list, "%s", archs_buf);
    char *archs[16];
    int narch = 0;
    for (char *tok = strtok(archs_buf, ","); tok && narch < 16; tok = strtok(NULL, ","))
        archs[narch++] = tok;
    int failed = 0, total = 0;
    for (; i < argc; i++) {
        size_t len = 0;
        char *src = read_file(argv[i], &len);
        if (!src) {
            printf("FAIL %s: cannot read\n", argv[i]);
            failed++;
            continue;
        }
        int ok = 1;
        for (int a = 0; a < narch; a++) {
            int r = compile(argv[i], src, len, archs[a]);
            total++;
            if (r != 0) {
                ok = 0;
                failed++;
                if (r < 0)
                    printf("FAIL %s [%s]: NVRTC API error\n", argv[i], archs[a]);
            }
        }
        if (ok)
            printf("ok   %s [%s%s]\n", argv[i], archs_list, syntax_only ? ", front end" : "");
        free(src);
    }
    printf("NVRTC %d.%d: %d compilations%s, %d failed or logged\n", major, minor, total,
           syntax_only ? " (front end only)" : "", failed);
    return failed != 0;
}
