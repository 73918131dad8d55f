/* fuse_rules.c: the fusion rules by name, for --fusion=LEVEL,-RULE,+RULE,
 * --no-fuse RULE, --report's rule column and --explain-fusion. Each rule
 * is one way fuse.c grows a kernel; a level is a set of rules. */
#include <string.h>

#include "cddpc.h"

const FuseRule fuse_rule[FUSE_NRULES] = {
    {R_DATA, "data", "the images and the labels gathered in one kernel"},
    {R_EPILOGUE, "epilogue", "a matrix product absorbs its elementwise chain (bias, ReLU; ReLU mask in backward)"},
    {R_EW_CHAIN, "ew-chain", "an elementwise op absorbs its elementwise consumer, and so on down the chain"},
    {R_REDUCTION, "reduction", "a row reduction of a kernel's result joins it (bias gradient, loss and accuracy sums)"},
    {R_ROW_OPS, "row-ops", "cross-entropy, its gradient and argmax of the same logits in one pass per sample"},
    {R_OPTIMIZER, "optimizer", "the updates of all parameters of a gradient bucket in one kernel"},
    {R_CHAN_PASS, "channel-pass", "a batch-norm pass also gives the channel sums, statistics and running statistics it has"},
    {R_CONV_BIAS, "conv-bias", "a convolution adds its bias as it stores its output"},
    {R_DROPOUT, "dropout", "a dropout joins the kernel computing its input although that input has other readers"},
    {R_ACT_INPUT, "act-input", "an activation joins the kernel computing its input although its gradient reads that input"},
    {R_SIBLINGS, "siblings", "two independent GEMMs reading the same operand (a layer's input and weight gradients) run as one GPU launch"},
    {R_POOL_CHAIN, "pool-chain", "a pooling whose windows tile the plane joins the elementwise chain it pools (batch norm + ReLU + max pool), its gradient the chain after it (ReLU's gradient)"},
    {R_DATA_PROLOGUE, "data-prologue", "the batch's gather (images normalized, labels) runs in the first GEMM reading the images, as it loads its operand tiles"},
    {R_ROW_TAIL, "row-tail", "the row ops of a narrow GEMM's result (logits of at most 64 classes: softmax + cross-entropy, its gradient, argmax) run after its epilogue in the GEMM's kernel"},
    {R_SUM_IN_PLACE, "sum-in-place", "a sum over the ranks (SyncBatchNorm's) runs in place on the channel pass's result, as its launch's collective: no copy kernel, and on one rank nothing"},
    {R_TENSOR_CHAIN, "tensor-chain", "an op over tensors of any rank absorbs its pointwise consumers of the same shape (exp after a broadcast subtract, a scale after a product): one pass over the elements; a reduction over the chain (its single reader) takes it as its prologue"},
    {R_ATTENTION, "attention", "scaled dot-product attention is one kernel per (batch, head, query block) with an online softmax, its gradients recompute the probabilities from the stored log-sum-exps: the L x S scores are never stored (off: the product, scale, mask, softmax and product PyTorch's math path runs)"},
};

int fuse_rule_bit(const char *name)
{
    for (int i = 0; i < FUSE_NRULES; i++)
        if (!strcmp(name, fuse_rule[i].name))
            return (int)fuse_rule[i].bit;
    return 0;
}

const char *fuse_rule_names(void)
{
    static char buf[256];
    size_t k = 0;
    for (int i = 0; i < FUSE_NRULES && k < sizeof buf; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", fuse_rule[i].name);
    return buf;
}

int fuse_parse(const char *spec, FuseLevel *out, const char **bad)
{
    char *copy = util_strdup(spec), *save = NULL;
    char *t = strtok_r(copy, ",", &save);
    if (!t) {
        *bad = spec;
        return -1;
    }
    if (!strcmp(t, "none")) *out = FUSE_NONE;
    else if (!strcmp(t, "elementwise")) *out = FUSE_ELEMENTWISE;
    else if (!strcmp(t, "all")) *out = FUSE_ALL;
    else {
        *bad = util_strdup(t);
        return -1;
    }
    while ((t = strtok_r(NULL, ",", &save))) {
        int bit = (t[0] == '-' || t[0] == '+') ? fuse_rule_bit(t + 1) : 0;
        if (!bit) {
            *bad = util_strdup(t);
            return -1;
        }
        *out = t[0] == '-' ? *out & ~(unsigned)bit : *out | (unsigned)bit;
    }
    return 0;
}
