/* rt_cuda_cache.c: compiled kernels kept on disk between runs.
 *
 * NVRTC takes a second or more for a model's kernels; the result depends
 * only on the source, the target architecture, the NVRTC version and the
 * options, so it is kept in $XDG_CACHE_HOME/cddpc (or ~/.cache/cddpc)
 * under the SHA-256 of exactly those: KEY.cubin. The cached object is the
 * CUBIN for the device's own sm_XY (nvrtcGetCUBIN), so loading it costs no
 * JIT either.
 *
 * File format: "CDDPKC01", the payload length (8 bytes, little endian),
 * the payload, and its SHA-256. A file that is short, long or does not
 * match its checksum is treated as absent and replaced.
 *
 * Several ranks may start at once and all miss: each compiles, writes its
 * own temp file in the cache directory, fsyncs it and renames it over
 * KEY.cubin. rename is atomic within a directory, so a reader sees either
 * no file or a complete one, and since all writers write the same bytes
 * it does not matter whose rename lands last. Failing to write the cache
 * (read-only home, full disk) is a warning, never an error. */
#include "rt_cuda.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bump when anything that changes the compiled image but is not in the
 * key material changes (the NVRTC options in rt_nvrtc_compile). */
#define KEY_FORMAT "cddpc kernel cache 1; options --gpu-architecture=ARCH"
static const char magic[8] = {'C', 'D', 'D', 'P', 'K', 'C', '0', '1'};
#define MAX_IMAGE ((uint64_t)1 << 31)

/* ---- SHA-256 (FIPS 180-4) ------------------------------------------------ */
typedef struct sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    uint64_t len;
    size_t nbuf;
} sha256;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(sha256 *s, const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5],
             g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
    s->h[5] += f;
    s->h[6] += g;
    s->h[7] += h;
}

static void sha_init(sha256 *s)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
    s->nbuf = 0;
}

static void sha_update(sha256 *s, const void *data, size_t n)
{
    const uint8_t *p = data;
    s->len += n;
    while (n > 0) {
        size_t k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, k);
        s->nbuf += k;
        p += k;
        n -= k;
        if (s->nbuf == 64) {
            sha_block(s, s->buf);
            s->nbuf = 0;
        }
    }
}

static void sha_final(sha256 *s, uint8_t out[32])
{
    uint64_t bits = s->len * 8;
    uint8_t pad = 0x80, zero = 0, lenb[8];
    sha_update(s, &pad, 1);
    while (s->nbuf != 56)
        sha_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha_update(s, lenb, 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(s->h[i] >> (24 - 8 * j));
}

void rt_sha256(const void *data, size_t len, uint8_t out[32])
{
    sha256 s;
    sha_init(&s);
    sha_update(&s, data, len);
    sha_final(&s, out);
}

/* ---- key and directory ------------------------------------------------------ */

void rt_kcache_key(char hex[65], const char *src, const char *arch, int nvrtc_major, int nvrtc_minor)
{
    char head[256];
    int n = snprintf(head, sizeof head, "%s\narch %s\nnvrtc %d.%d\nsource %zu bytes\n", KEY_FORMAT, arch,
                     nvrtc_major, nvrtc_minor, strlen(src));
    sha256 s;
    sha_init(&s);
    sha_update(&s, head, (size_t)n);
    sha_update(&s, src, strlen(src));
    uint8_t d[32];
    sha_final(&s, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static int mkdir_p(char *path)
{
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            int r = mkdir(path, 0755);
            *p = '/';
            if (r != 0 && errno != EEXIST)
                return -1;
        }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

int rt_kcache_dir(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    /* XDG: a relative value is invalid and to be ignored */
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, len, "%s/cddpc", xdg);
    else if (home && home[0] == '/')
        n = snprintf(buf, len, "%s/.cache/cddpc", home);
    else
        return -1;
    if (n < 0 || (size_t)n >= len)
        return -1;
    return mkdir_p(buf);
}

/* ---- load and store ---------------------------------------------------------- */

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int rt_kcache_load(const char *dir, const char *key, void **image, size_t *len)
{
    *image = NULL;
    *len = 0;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s.cubin", dir, key) >= (int)sizeof path)
        return 1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 1;
    uint8_t head[16], sum[32], want[32];
    int rc = 1;
    char *img = NULL;
    if (fread(head, 1, 16, f) != 16 || memcmp(head, magic, 8) != 0)
        goto out;
    uint64_t n = get_u64(head + 8);
    if (n == 0 || n > MAX_IMAGE || !(img = rt_malloc((size_t)n)))
        goto out;
    if (fread(img, 1, (size_t)n, f) != n || fread(sum, 1, 32, f) != 32 || fgetc(f) != EOF)
        goto out;
    rt_sha256(img, (size_t)n, want);
    if (memcmp(sum, want, 32) != 0)
        goto out;
    *image = img;
    *len = (size_t)n;
    img = NULL;
    rc = 0;
out:
    free(img);
    fclose(f);
    return rc;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int rt_kcache_store(const char *dir, const char *key, const void *image, size_t len)
{
    char path[4096], tmp[4096];
    if (snprintf(path, sizeof path, "%s/%s.cubin", dir, key) >= (int)sizeof path ||
        snprintf(tmp, sizeof tmp, "%s/.%s.tmp-XXXXXX", dir, key) >= (int)sizeof tmp) {
        rt_warn("kernel cache: path too long in %s", dir);
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rt_warn("kernel cache: cannot create a file in %s: %s (kernels not cached)", dir, strerror(errno));
        return -1;
    }
    uint8_t head[16], sum[32];
    memcpy(head, magic, 8);
    put_u64(head + 8, (uint64_t)len);
    rt_sha256(image, len, sum);
    int ok = fchmod(fd, 0644) == 0 && write_all(fd, head, 16) == 0 && write_all(fd, image, len) == 0 &&
             write_all(fd, sum, 32) == 0 && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        rt_warn("kernel cache: cannot write %s: %s (kernels not cached)", path, strerror(e));
        return -1;
    }
    /* the rename itself on disk: fsync the directory (best effort) */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}
