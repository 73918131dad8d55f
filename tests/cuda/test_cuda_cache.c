/* test_cuda_cache.c: the CUDA kernel cache and the NVRTC layer, without a
 * GPU (NVRTC compiles for any architecture on any machine).
 *
 *   test_cuda_cache TMPDIR [ALL.CU]
 *
 * TMPDIR: an empty scratch directory. ALL.CU: optional, the CUDA source
 * of a model (cddpc --emit cuda DIR writes DIR/all.cu); it is then
 * compiled together with the runtime's own kernels and layout checks for
 * sm_80 and sm_90, as a program would at start-up.
 * Exit status 0 when every check passed. */
#include "rt_cuda.h"
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int fails, checks;
#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            fails++;                                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
        }                                                                                \
    } while (0)

static const char *good_src =
    "extern \"C\" __global__ void scale(float *x, float a, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] *= a;\n"
    "}\n";

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256(void)
{
    uint8_t d[32];
    char h[65];
    rt_sha256("", 0, d);
    hex(d, h);
    CHECK(!strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "%s", h);
    rt_sha256("abc", 3, d);
    hex(d, h);
    CHECK(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "%s", h);
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: 2 blocks */
    rt_sha256(two, strlen(two), d);
    hex(d, h);
    CHECK(!strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "%s", h);
    char *m = malloc(1000000);
    memset(m, 'a', 1000000);
    rt_sha256(m, 1000000, d);
    hex(d, h);
    CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "%s", h);
    free(m);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int count_temps(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static void test_compile(void)
{
    void *img;
    size_t len;
    CHECK(rt_nvrtc_compile(good_src, "compute_90", &img, &len) == 0, "PTX compile");
    CHECK(img && len > 0 && memmem(img, len, ".entry scale", 12), "PTX has the kernel");
    free(img);
    CHECK(rt_nvrtc_compile(good_src, "sm_90", &img, &len) == 0, "CUBIN compile");
    CHECK(img && len > 4 && !memcmp(img, "\177ELF", 4), "CUBIN is an ELF image");
    CHECK(img && memmem(img, len, "scale", 5), "CUBIN names the kernel");
    free(img);
    fprintf(stderr, "(an NVRTC error log is expected next)\n");
    CHECK(rt_nvrtc_compile("extern \"C\" __global__ void k() { undeclared_thing(); }", "sm_90", &img,
                           &len) == -1, "a compile error is reported");
    CHECK(img == NULL, "no image after an error");
}

static void test_cache(const char *tmp)
{
    char xdg[1024], dir[1024], path[2048], key[65], key2[65];
    snprintf(xdg, sizeof xdg, "%s/xdg", tmp);
    setenv("XDG_CACHE_HOME", xdg, 1);
    CHECK(rt_kcache_dir(dir, sizeof dir) == 0, "cache dir under XDG_CACHE_HOME");
    char want[1100];
    snprintf(want, sizeof want, "%s/cddpc", xdg);
    CHECK(!strcmp(dir, want) && exists(dir), "dir is %s", dir);

    /* the key: 64 hex digits, stable, and it changes with every input */
    rt_kcache_key(key, good_src, "sm_90", 13, 0);
    rt_kcache_key(key2, good_src, "sm_90", 13, 0);
    CHECK(strlen(key) == 64 && strspn(key, "0123456789abcdef") == 64, "hex key %s", key);
    CHECK(!strcmp(key, key2), "stable key");
    rt_kcache_key(key2, good_src, "sm_80", 13, 0);
    CHECK(strcmp(key, key2) != 0, "arch in the key");
    rt_kcache_key(key2, good_src, "sm_90", 12, 8);
    CHECK(strcmp(key, key2) != 0, "NVRTC version in the key");
    rt_kcache_key(key2, "x", "sm_90", 13, 0);
    CHECK(strcmp(key, key2) != 0, "source in the key");

    /* miss: compiled and stored; then a hit with the same bytes */
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int hit = -1;
    rt_kcache_key(key, good_src, "sm_90", rt_nv.major, rt_nv.minor);
    snprintf(path, sizeof path, "%s/%s.cubin", dir, key);
    CHECK(rt_kcache_get(good_src, "sm_90", 1, &a, &na, &hit) == 0 && hit == 0, "first get compiles");
    CHECK(exists(path), "stored as %s", path);
    CHECK(rt_kcache_get(good_src, "sm_90", 1, &b, &nb, &hit) == 0 && hit == 1, "second get is a hit");
    CHECK(na == nb && a && b && !memcmp(a, b, na), "cached image is the compiled one");
    free(b);
    b = NULL;
    CHECK(count_temps(dir) == 0, "no temp files left");

    /* --no-cache: compiles, reads and writes nothing */
    const char *other = "extern \"C\" __global__ void other(int *x) { x[0] = 1; }\n";
    char opath[2048];
    rt_kcache_key(key2, other, "sm_90", rt_nv.major, rt_nv.minor);
    snprintf(opath, sizeof opath, "%s/%s.cubin", dir, key2);
    CHECK(rt_kcache_get(other, "sm_90", 0, &b, &nb, &hit) == 0 && hit == 0 && !exists(opath),
          "--no-cache writes nothing");
    free(b);
    b = NULL;
    CHECK(rt_kcache_get(good_src, "sm_90", 0, &b, &nb, &hit) == 0 && hit == 0, "--no-cache ignores a hit");
    free(b);
    b = NULL;
    /* -1: rebuild and store */
    CHECK(rt_kcache_get(other, "sm_90", -1, &b, &nb, &hit) == 0 && hit == 0 && exists(opath),
          "rebuild stores");
    free(b);
    b = NULL;

    /* damage: truncated, flipped byte, trailing junk, wrong magic */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open cache file");
    if (f) {
        fseek(f, 40, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(c ^ 1, f);
        fclose(f);
    }
    CHECK(rt_kcache_load(dir, key, &b, &nb) == 1 && !b, "flipped byte: treated as absent");
    CHECK(rt_kcache_get(good_src, "sm_90", 1, &b, &nb, &hit) == 0 && hit == 0, "damaged entry recompiled");
    free(b);
    b = NULL;
    CHECK(rt_kcache_load(dir, key, &b, &nb) == 0 && nb == na && !memcmp(a, b, na), "and repaired");
    free(b);
    b = NULL;
    CHECK(truncate(path, 100) == 0, "truncate");
    CHECK(rt_kcache_load(dir, key, &b, &nb) == 1, "truncated: absent");
    CHECK(rt_kcache_store(dir, key, a, na) == 0, "store again");
    f = fopen(path, "ab");
    if (f) {
        fputc('x', f);
        fclose(f);
    }
    CHECK(rt_kcache_load(dir, key, &b, &nb) == 1, "trailing byte: absent");
    CHECK(rt_kcache_store(dir, key, a, na) == 0, "store again");
    f = fopen(path, "r+b");
    if (f) {
        fputc('X', f);
        fclose(f);
    }
    CHECK(rt_kcache_load(dir, key, &b, &nb) == 1, "bad magic: absent");
    CHECK(rt_kcache_load(dir, "0000", &b, &nb) == 1, "missing: absent");

    /* several processes storing the same entry at once (ranks starting
     * together): every reader sees a whole file, no temp file survives */
    enum { PROCS = 8, ROUNDS = 25 };
    pid_t kids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        kids[p] = fork();
        if (kids[p] == 0) {
            int bad = 0;
            for (int r = 0; r < ROUNDS; r++) {
                void *x = NULL;
                size_t nx = 0;
                bad |= rt_kcache_store(dir, key, a, na) != 0;
                int l = rt_kcache_load(dir, key, &x, &nx);
                bad |= l != 0 || nx != na || memcmp(x, a, na) != 0;
                free(x);
            }
            _exit(bad);
        }
    }
    int all_ok = 1;
    for (int p = 0; p < PROCS; p++) {
        int st = 0;
        all_ok &= kids[p] > 0 && waitpid(kids[p], &st, 0) == kids[p] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    CHECK(all_ok, "concurrent stores and loads all saw complete files");
    CHECK(rt_kcache_load(dir, key, &b, &nb) == 0 && nb == na && !memcmp(a, b, na), "final entry intact");
    free(b);
    b = NULL;
    CHECK(count_temps(dir) == 0, "no temp files after concurrent stores");

    /* no usable directory: compiled, not cached, not an error */
    setenv("XDG_CACHE_HOME", "/dev/null", 1);
    CHECK(rt_kcache_dir(dir, sizeof dir) == -1, "/dev/null/cddpc is not a directory");
    CHECK(rt_kcache_get(good_src, "sm_90", 1, &b, &nb, &hit) == 0 && hit == 0, "works without a cache");
    free(b);
    b = NULL;
    /* HOME fallback; a relative XDG_CACHE_HOME is ignored (XDG spec) */
    char home[1024];
    snprintf(home, sizeof home, "%s/home", tmp);
    CHECK(mkdir(home, 0755) == 0, "mkdir home");
    setenv("HOME", home, 1);
    setenv("XDG_CACHE_HOME", "relative/path", 1);
    CHECK(rt_kcache_dir(dir, sizeof dir) == 0, "HOME fallback");
    snprintf(want, sizeof want, "%s/.cache/cddpc", home);
    CHECK(!strcmp(dir, want) && exists(want), "dir is %s", dir);
    unsetenv("XDG_CACHE_HOME");
    CHECK(rt_kcache_dir(dir, sizeof dir) == 0 && !strcmp(dir, want), "unset XDG_CACHE_HOME");
    free(a);
}

/* The runtime's kernels and layout checks with a model's source. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

static void test_model_source(const char *all_cu)
{
    char *model = slurp(all_cu);
    CHECK(model != NULL, "read %s", all_cu);
    if (!model)
        return;
    /* the model's optimizer kernel, whose body cddprt_opt_turn runs: the
     * name before the first "_body(const rt_exec" */
    char turn[256] = "";
    const char *body = strstr(model, "_body(const rt_exec");
    if (body) {
        const char *s = body;
        while (s > model && s[-1] != ' ')
            s--;
        if ((size_t)(body - s) < sizeof turn)
            memcpy(turn, s, (size_t)(body - s)), turn[body - s] = 0;
    }
    CHECK(turn[0] != 0, "%s has an optimizer kernel body", all_cu);
    char *src = rt_cuda_source(model, turn[0] ? turn : NULL);
    CHECK(src && strstr(src, "cddprt_step_begin") && strstr(src, "::rt_exec r;") && strstr(src, "cddprt_opt_turn"),
          "full source has the runtime kernels, the optimizer's turn and the layout check of rt_exec");
    static const char *archs[] = {"sm_80", "sm_90"};
    for (int i = 0; src && i < 2; i++) {
        void *img = NULL;
        size_t n = 0;
        CHECK(rt_nvrtc_compile(src, archs[i], &img, &n) == 0, "model + runtime kernels for %s", archs[i]);
        CHECK(img && memmem(img, n, "cddprt_step_end", 15), "step_end in the %s image", archs[i]);
        CHECK(img && memmem(img, n, "cddprt_opt_turn", 15), "opt_turn in the %s image", archs[i]);
        free(img);
    }
    free(src);
    free(model);
    /* a model whose rt_exec lacks a field of cddprt.h does not compile
     * (one with all the fields in another order compiles and is caught
     * at start-up by rt_cuda_check_layout: tests/cuda/test_cuda_device.sh) */
    const char *wrong = "typedef struct rt_exec { int n, nmax; double *act; } rt_exec;\n";
    src = rt_cuda_source(wrong, NULL);
    void *img = NULL;
    size_t n = 0;
    fprintf(stderr, "(an NVRTC error log about rt_exec is expected next)\n");
    CHECK(src && rt_nvrtc_compile(src, "sm_90", &img, &n) == -1, "incomplete rt_exec is a compile error");
    free(img);
    free(src);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_cache TMPDIR [ALL.CU]\n");
        return 2;
    }
    test_sha256();
    char why[640];
    if (rt_nvrtc_load(0, 0, NULL, why, sizeof why) != 0) {
        fprintf(stderr, "FAIL: %s\n", why);
        return 1;
    }
    printf("NVRTC %d.%d from %s\n", rt_nv.major, rt_nv.minor, rt_nv.path);
    test_compile();
    test_cache(argv[1]);
    if (argc > 2)
        test_model_source(argv[2]);
    rt_nvrtc_unload();
    printf("%d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
