/* fuse.h: the fuser's state and its legality predicates, shared by the
 * grouping (fuse.c) and the explanation of what it left apart
 * (fuse_explain.c), so a reason given is the predicate that decided. */
#ifndef FUSE_H
#define FUSE_H
#include "cddpc.h"

typedef struct Fuser {
    Plan *p;
    FuseLevel rules;        /* the rules switched on */
} Fuser;

/* ---- fuse.c: the legality predicates --------------------------------- */
int fuse_single_consumer(const Fuser *f, int x);
int fuse_consumer_of(const Fuser *f, int x);
int fuse_inputs_ready(const Fuser *f, int c, int grp);
int fuse_sum_in_place(const Fuser *f, int a, int grp);
int fuse_same_space(const Fuser *f, int c, int x);
int fuse_reduction_of_group(const Fuser *f, int r, int grp);
int fuse_chan_pass_result(const Fuser *f, int c, int a);
int fuse_conv_bias_epilogue(const Fuser *f, int conv, int grp);
int fuse_dropout_consumer(const Fuser *f, int x);
/* The activation of x whose gradient is x's only other reader, or -1 */
int fuse_act_consumer(const Fuser *f, int x);
int fuse_same_logits(const Fuser *f, int c, int a);
int fuse_data_prologue(const Fuser *f, int mm, int dg);   /* rule data-prologue */
int fuse_row_tail(const Fuser *f, int r);       /* rule row-tail: the GEMM group row op r joins, or -1 */
/* rule pool-chain: pool pl joins elementwise group grp; pool gradient pl
 * may take the elementwise chain consuming it */
int fuse_pool_of_chain(const Fuser *f, int pl, int grp);
int fuse_pool_grad_chains(const Fuser *f, int pl);
int fuse_pool_tiles(const Fuser *f, int pl);    /* ir_pool_tiles of pool pl */
#endif
