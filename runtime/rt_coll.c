/* rt_coll.c: the collectives' interface over MPI (CPU ranks, host memory).
 * The NCCL side is in rt_nccl.c (GPU ranks, device memory on a stream);
 * the devices call both the same way (rt_internal.h, rt_coll). */
#include "rt_internal.h"

static int mpi_bucket_avg(rt_coll *c, void *x, int64_t n, int bucket, void *q)
{
    (void)q;
    float *g = x;
    rt_comm_allreduce_bucket(g, n, bucket);
    const float s = 1.0f / (float)c->size;
    for (int64_t i = 0; i < n; i++)
        g[i] *= s;
    return 0;
}

static int mpi_sum_f32(rt_coll *c, void *x, int64_t n, const char *what, void *q)
{
    (void)c, (void)what, (void)q;
    rt_comm_sync_sum(x, n);
    return 0;
}

static int mpi_any(rt_coll *c, void *flag, void *q)
{
    (void)c, (void)q;
    double found = *(float *)flag > 0;
    rt_comm_sum_f64(&found, 1, "the loss scaler's found_inf all-reduce");
    *(float *)flag = found > 0 ? 1.0f : 0.0f;
    return 0;
}

static int mpi_bcast_f32(rt_coll *c, void *x, int64_t n, const char *what, void *q)
{
    (void)c, (void)q;
    rt_comm_bcast_f32(x, n, what);
    return 0;
}

static void mpi_sum_f64(rt_coll *c, double *x, int64_t n, const char *what)
{
    (void)c;
    rt_comm_sum_f64(x, n, what);
}

void rt_coll_mpi(rt_coll *c)
{
    *c = (rt_coll){"mpi", rt_world.rank, rt_world.size, 0, NULL, mpi_bucket_avg, mpi_sum_f32, mpi_any,
                   mpi_bcast_f32, mpi_sum_f64};
}

/* The generated C kernels of SyncBatchNorm call rt_sync_sum (cddprt.h)
 * between the passes that need the whole batch's sums; the CUDA device
 * calls sum_f32 after the kernel its launch table names. Both go through
 * the device's rt_coll: the CPU device registers its own here. */
static rt_coll *kernel_coll;

void rt_coll_for_kernels(rt_coll *c) { kernel_coll = c; }

void rt_sync_sum(float *x, int64_t n)
{
    if (kernel_coll && kernel_coll->size > 1)
        kernel_coll->sum_f32(kernel_coll, x, n, "SyncBatchNorm's all-reduce", NULL);
}

int rt_coll_bcast_buffers(rt_coll *c, const rt_model *m, void *param, void *q)
{
    for (int i = 0; c->size > 1 && i < m->nparam; i++)
        if ((rt_param_flags(m, i) & RT_PARAM_BUFFER) &&
            c->bcast_f32(c, (char *)param + m->params[i].off * (int64_t)sizeof(float), m->params[i].numel,
                         "the broadcast of the buffers", q) != 0)
            return -1;
    return 0;
}
