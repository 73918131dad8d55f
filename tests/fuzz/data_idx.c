/* tests/fuzz/data_idx.c: libFuzzer harness for the IDX reader, through
 * rt_idx_load as a run calls it: the input is split into an images file
 * and a labels file (its first two bytes, little-endian: how many bytes
 * of the rest, times 4, are the images', so images up to 256 KB),
 * written to a directory of this process's in /dev/shm when there is one
 * (files in memory: the harness runs at the reader's speed, not the
 * disk's), plain or (as the fuzzer finds the gzip magic) gzip. The model takes 2x2 = 4
 * values per sample, 10 classes. Any outcome is fine but a crash, a
 * sanitizer report, a leak or a hang; a set that loads must be
 * consistent. */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void put(const char *name, const uint8_t *b, size_t n)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    if (n && fwrite(b, 1, n, f) != n)
        abort();
    fclose(f);
}

static void cleanup(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    unlink(p);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/cddp-fuzz-idx.%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
                 (int)getpid());
        mkdir(dir, 0700);
        atexit(cleanup);
    }
    if (size < 2)
        return 0;
    size_t cut = ((size_t)data[0] | (size_t)data[1] << 8) * 4;
    if (cut > size - 2)
        cut = size - 2;
    put("train-images-idx3-ubyte", data + 2, cut);
    put("train-labels-idx1-ubyte", data + 2 + cut, size - 2 - cut);
    rt_model m = {0};
    m.name = "fuzz";
    m.in_rank = 2;
    m.in_dim[0] = m.in_dim[1] = 2;
    m.nclass = 10;
    m.target = RT_TGT_CLASS;
    rt_dataset s;
    if (rt_idx_load(&m, dir, "train", &s) == 0) {
        if (s.xsize != 4 || s.n < 1)
            abort();
        for (int64_t i = 0; i < s.n * s.ysize; i++)
            if (!s.y_float && (((int32_t *)s.y)[i] < 0 || ((int32_t *)s.y)[i] >= 10))
                abort();
        rt_dataset_free(&s);
    }
    return 0;
}
