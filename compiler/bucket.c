/* bucket.c: gradient buckets for data-parallel training.
 *
 * A bucket is a contiguous range of the gradient slab (memplan lays the
 * parameters out in reverse order, bucket 0 first), all-reduced as one
 * message as soon as backward has written its last gradient. PyTorch DDP's
 * rule: parameters in reverse declaration order, a bucket closes when its
 * size reaches the cap (so the tensor that crosses the cap still joins it);
 * the first bucket's cap is small so communication starts early. */
#include "cddpc.h"

void bucket_plan(Graph *g, double first_mb, double bucket_mb)
{
    int b = 0;
    double bytes = 0, cap = first_mb * 1024 * 1024;
    int last = 0;           /* the last trained parameter the reverse walk reaches */
    while (last < g->nparam && g->n[g->params[last]]->buffer)
        last++;
    for (int i = g->nparam - 1; i >= 0; i--) {
        Node *p = g->n[g->params[i]];
        if (p->buffer) {    /* batch norm statistics: never all-reduced nor updated */
            p->bucket = -1;
            continue;
        }
        p->bucket = b;
        bytes += 4.0 * (double)ir_numel(&p->shape, 1);
        if (bytes >= cap && i > last) {
            b++;
            bytes = 0;
            cap = bucket_mb * 1024 * 1024;
        }
    }
    g->nbuckets = last < g->nparam ? b + 1 : 0;
}
