/* rt_gpu.c: the CUDA device as rt_main opens, starts and names it: the
 * driver and device (rt_cuda.c), NCCL (rt_nccl.c) and the device that the
 * loop drives (rt_cuda_dev.c), behind one opaque handle, so that CUDA's
 * types stay inside the CUDA files. */
#include "rt_cuda.h"
#include <stdlib.h>
#include <string.h>

struct rt_gpu {
    rt_cuda cu;
    rt_nccl nccl;
    int want_nccl, nccl_version, started;
};

rt_gpu *rt_gpu_open(int local_rank, int local_size, int want_nccl, char *why, size_t whylen)
{
    rt_gpu *g = rt_calloc(1, sizeof *g);
    if (!g) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    g->want_nccl = want_nccl;
    if (rt_cuda_open(&g->cu, local_rank, local_size, why, whylen) != 0) {
        free(g);
        return NULL;
    }
    if (want_nccl && rt_nccl_load(g->cu.driver, &g->nccl_version, why, whylen) != 0) {
        rt_cuda_close(&g->cu);
        free(g);
        return NULL;
    }
    return g;
}

const char *rt_gpu_bus_id(const rt_gpu *g) { return g->cu.bus_id; }

int rt_gpu_start(rt_gpu *g, const rt_model *m, int use_cache, double comm_timeout)
{
    char *src = rt_cuda_source(m->cuda_src, rt_cuda_turn_body(&m->train));
    int bad = !src || rt_cuda_load_module(&g->cu, src, use_cache) != 0;
    free(src);
    if (bad)
        return -1;
    /* GPU ranks: the NCCL communicator on this rank's device; a wait then
     * means "no progress for --comm-timeout", as on the CPU, and polls
     * NCCL's asynchronous errors (NCCL's first all-reduce is waited for
     * that way too) */
    if (g->want_nccl) {
        g->cu.timeout = comm_timeout;
        g->cu.poll = rt_nccl_check;
        g->cu.poll_arg = &g->nccl;
        if (rt_nccl_init(&g->nccl, &g->cu) != 0)
            return -1;
        g->cu.nccl = &g->nccl;
    }
    g->started = 1;
    return 0;
}

void rt_gpu_describe(const rt_gpu *g, const char *sched, char *buf, size_t len)
{
    const rt_cuda *cu = &g->cu;
    char nc[48] = "", code[48] = "", other[96] = "";
    /* the launches were sized for another GPU: they run, perhaps slower */
    if (sched && *sched && !strcasestr(cu->name, sched))
        snprintf(other, sizeof other, "; launches scheduled for %s (cddpc --target)", sched);
    if (cu->nccl)
        snprintf(nc, sizeof nc, ", NCCL %d.%d.%d", g->nccl_version / 10000, g->nccl_version / 100 % 100,
                 g->nccl_version % 100);
    if (strcmp(cu->arch, cu->dev_arch))
        snprintf(code, sizeof code, " (code for %s)", cu->arch);
    snprintf(buf, len, "cuda:%d (%s, %s%s, driver %d.%d, NVRTC %d.%d%s, kernels %s%s)", cu->ordinal, cu->name,
             cu->dev_arch, code, cu->driver / 1000, cu->driver % 1000 / 10, rt_nv.major, rt_nv.minor, nc,
             cu->from_cache ? "cached" : "compiled", other);
}

void rt_gpu_coll(rt_gpu *g, rt_coll *c)
{
    if (g->cu.nccl)
        rt_coll_nccl(c, &g->nccl);
    else
        rt_coll_mpi(c);
}

int rt_gpu_dev_open(rt_device *dev, rt_gpu *g, const rt_model *m, const rt_opts *o, rt_ws *w,
                    const rt_start *st, const rt_data *data, rt_coll *coll,
                    rt_trace *trace)
{
    return rt_cuda_dev_open(dev, &g->cu, m, o, w, st, data, coll, trace);
}

void rt_gpu_close(rt_gpu *g)
{
    if (!g)
        return;
    rt_nccl_close(&g->nccl, rt_cuda_failed());
    rt_cuda_close(&g->cu);
    free(g);
}
