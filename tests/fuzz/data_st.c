/* tests/fuzz/data_st.c: libFuzzer harness for safetensors files and
 * checkpoints: the input, written to a file of this process's, is loaded
 * as --init loads it (rt_st_load), its metadata read (rt_st_load_meta; the
 * data.* entries as --evaluate reads them, rt_data_saved_read) and
 * loaded as --resume loads a checkpoint (rt_ckpt_load), for a model of
 * the shape of tests/fuzz/data_st_seed.net (fc.weight [3, 4], fc.bias [3],
 * SGD with momentum: the seeds are that program's --save and
 * --checkpoint files). Any outcome is fine but a crash, a sanitizer
 * report, a leak or a hang. */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* what rt_ckpt.c takes from rt_util.c and rt_comm.c besides the messages */
void *rt_alloc(size_t bytes, const char *what)
{
    (void)what;
    return calloc(1, bytes ? bytes : 1);
}

void *rt_alloc_n(int64_t n, size_t each, const char *what)
{
    return n < 0 ? NULL : rt_alloc((size_t)n * each, what);
}

void rt_free(void *p) { free(p); }
void rt_comm_bcast_bytes(void *buf, int64_t n, const char *what)
{
    (void)buf;
    (void)n;
    (void)what;
}

static char path[64];

static void cleanup(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const rt_param params[2] = {
        {.name = "fc.weight", .rank = 2, .shape = {3, 4}, .off = 0, .numel = 12, .fan_in = 4},
        {.name = "fc.bias", .rank = 1, .shape = {3}, .off = 16, .numel = 3, .fan_in = 4},
    };
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/cddp-fuzz-st.%d", (int)getpid());
        atexit(cleanup);
    }
    rt_world.size = 1;
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size))
        abort();
    fclose(f);
    rt_model m = {0};
    m.name = "TinyNet";
    m.params = params;
    m.nparam = 2;
    m.param_floats = 32;
    m.opt_floats = 32;
    m.opt_state = "momentum_buffer";
    m.in_rank = 1;
    m.in_dim[0] = 4;
    m.nclass = 3;
    float param[32], opt[32];
    rt_st_load(&m, path, param);
    rt_st_kv kv[2] = {{.key = "format"}, {.key = "data.mean.0"}};
    rt_st_load_meta(path, kv, 2);
    rt_data_saved sv;
    if (rt_data_saved_read(path, &sv) == 0)
        rt_data_saved_free(&sv);
    rt_opts o = {0};
    o.batch = 4;
    o.seed = 1;
    o.shuffle = 1;
    rt_resume st;
    rt_ckpt_load(&m, &o, path, param, opt, &st);
    return 0;
}
