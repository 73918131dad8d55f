/* data_cfg.c: the train block's `data`, the source of the samples and
 * targets (README "Data"):
 *
 *   idx("DIR", normalize = ..., split = ..., target = input)   mnist(...) is the same
 *   npz("FILE.npz", x_train = "x_train", y_train = ..., x_test = ..., y_test = ...,
 *       normalize = ..., split = ..., target = input)
 *
 * target = input (an autoencoder): the loss compares the output with the
 * normalized sample; no labels file or y arrays are read.
 *   csv("TRAIN.csv", test = "TEST.csv", target = "COLUMN" | targets = ["a", "b"],
 *       features = ["f1", ...], normalize = ..., split = ...)
 *   text("FILE", block = T, split = F, vocab = chars | bytes)   a character model's
 *       windows of T + 1 tokens (runtime/rt_text.c); split holds out the file's tail
 *
 * normalize is (mean, std), ([m1, m2, ...], [s1, s2, ...]) per channel or
 * feature, or auto (measured on the training set by the program). The
 * compiler checks only what the file says; whether the data fits the
 * model is the program's check when it loads the data. */
#include <string.h>

#include "sema.h"
#include "cddprt.h"         /* RT_SRC_* */

static const char *const source_names[] = {"csv", "idx", "mnist", "npz", "text"};
#define NSOURCES 5

/* a string argument, or NULL (reported) */
static const char *str_arg(const Expr *e, const char *what)
{
    if (e->kind != E_STR) {
        diag_error(e->loc, "%s must be a string, got %s", what, arg_show(e));
        return NULL;
    }
    if (!*e->s) {
        diag_error(e->loc, "%s must not be empty", what);
        return NULL;
    }
    return e->s;
}

/* a string or a list of strings: ["a", "b"] */
static int str_list(const Expr *e, const char *what, const char ***out, int *n);

/* npz(..., y_train = ["y_cls", "y_reg"], y_test = ["y_cls_test", "y_reg_test"]):
 * several target arrays, each a column of the targets (a loss block's
 * tuple), in d->targets: the training set's, then the test set's */
static void npz_y_lists(DataCfg *d, const Expr *ytrain, const Expr *ytest, Loc loc)
{
    const char **tr = NULL, **te = NULL;
    int ntr = 0, nte = 0;
    if (!ytrain || !ytest) {
        diag_error(ytrain ? ytrain->loc : ytest ? ytest->loc : loc, "several target arrays need both lists, "
                   "y_train = [...] and y_test = [...], one name each per target");
        return;
    }
    if (!str_list(ytrain, "y_train", &tr, &ntr) || !str_list(ytest, "y_test", &te, &nte))
        return;
    if (ntr != nte || ntr < 2) {
        diag_error(ytest->loc, "y_train and y_test name the same targets: %d and %d arrays (at least 2 each)", ntr,
                   nte);
        return;
    }
    d->targets = util_alloc(sizeof *d->targets * (size_t)(2 * ntr));
    for (int k = 0; k < ntr; k++)
        d->targets[k] = tr[k], d->targets[ntr + k] = te[k];
    d->ntargets = 2 * ntr;
}

static int str_list(const Expr *e, const char *what, const char ***out, int *n)
{
    if (e->kind == E_STR) {
        const char *s = str_arg(e, what);
        if (!s)
            return 0;
        *out = util_alloc(sizeof **out);
        (*out)[0] = s;
        *n = 1;
        return 1;
    }
    if (e->kind != E_TUPLE) {
        diag_error(e->loc, "%s must be a list of column names such as [\"a\", \"b\"], got %s", what, arg_show(e));
        return 0;
    }
    const char **v = util_alloc((size_t)e->nargs * sizeof *v);
    int ok = 1;
    for (int i = 0; i < e->nargs; i++) {
        v[i] = str_arg(e->args[i]->val, what);
        ok &= v[i] != NULL;
        for (int j = 0; ok && j < i; j++)
            if (strcmp(v[i], v[j]) == 0) {
                diag_error(e->args[i]->val->loc, "column '%s' is named twice in %s", v[i], what);
                ok = 0;
            }
    }
    *out = v;
    *n = e->nargs;
    return ok;
}

/* one number, or a list of them, into a fresh array */
static int num_list(const Expr *e, const char *what, double **out, int *n)
{
    int cnt = e->kind == E_TUPLE ? e->nargs : 1;
    double *v = util_alloc((size_t)cnt * sizeof *v);
    for (int i = 0; i < cnt; i++)
        if (!arg_num(e->kind == E_TUPLE ? e->args[i]->val : e, what, &v[i]))
            return 0;
    *out = v;
    *n = cnt;
    return 1;
}

/* normalize = (mean, std) | ([means], [stds]) | auto */
static void normalize_arg(DataCfg *d, const Expr *e)
{
    if (e->kind == E_NAME && strcmp(e->s, "auto") == 0) {
        d->norm_auto = 1;
        d->norm_given = 1;
        d->nnorm = 0;
        return;
    }
    if (e->kind != E_TUPLE || e->nargs != 2) {
        diag_error(e->loc, "normalize must be (mean, std), ([means], [stds]) or auto, got %s", arg_show(e));
        return;
    }
    double *m, *s;
    int nm, ns;
    if (!num_list(e->args[0]->val, "the mean", &m, &nm) || !num_list(e->args[1]->val, "the std", &s, &ns))
        return;
    if (nm != ns) {
        diag_error(e->loc, "normalize has %d means but %d stds", nm, ns);
        return;
    }
    for (int i = 0; i < ns; i++)
        if (!(s[i] > 0)) {
            const Expr *at = e->args[1]->val->kind == E_TUPLE ? e->args[1]->val->args[i]->val : e->args[1]->val;
            diag_error(at->loc, "the std must be positive, got %s", arg_show(at));
            return;
        }
    d->norm_auto = 0;
    d->norm_given = 1;
    d->nnorm = nm;
    d->norm_mean = m;
    d->norm_std = s;
}

/* text(..., block = B, vocab = chars | bytes): B tokens a window,
 * required (the model's T) */
static void text_args(DataCfg *n, const Expr *e, const Expr *block, const Expr *vocab)
{
    if (!block)
        diag_error(e->loc, "text needs block = T, the tokens a window (forward's i64[N, T])");
    else
        arg_int(block, "block", 1, MAX_DIM, &n->block);
    if (vocab) {
        const char *v = vocab->kind == E_NAME || vocab->kind == E_STR ? vocab->s : "";
        if (strcmp(v, "chars") != 0 && strcmp(v, "bytes") != 0)
            diag_error(vocab->loc, "vocab must be chars (the file's characters, sorted) or bytes (256), got %s",
                       arg_show(vocab));
        n->vocab_bytes = strcmp(v, "bytes") == 0;
    }
}

void data_cfg_default(DataCfg *d)
{
    static double mean = 0.1307, std = 0.3081;   /* MNIST's, as the PyTorch examples */
    *d = (DataCfg){.kind = RT_SRC_IDX, .path = "data/mnist", .nnorm = 1, .norm_mean = &mean, .norm_std = &std};
}

void data_cfg_check(DataCfg *d, const Expr *e)
{
    const char *name = e->kind == E_NAME || e->kind == E_CALL ? e->s : NULL;
    if (!name) {
        diag_error(e->loc, "data must be a source such as idx(\"data/mnist\"), got %s", arg_show(e));
        return;
    }
    int kind = -1;
    if (!strcmp(name, "idx") || !strcmp(name, "mnist"))
        kind = RT_SRC_IDX;
    else if (!strcmp(name, "npz"))
        kind = RT_SRC_NPZ;
    else if (!strcmp(name, "csv"))
        kind = RT_SRC_CSV;
    else if (!strcmp(name, "text"))
        kind = RT_SRC_TEXT;
    if (kind < 0) {
        Near s = arg_near(name);
        for (int i = 0; i < NSOURCES; i++)
            arg_near_try(&s, source_names[i]);
        diag_error(e->loc, "unknown data source '%s'%s (supported: csv, idx, mnist, npz, text)", name,
                   arg_near_hint(&s));
        return;
    }
    if (e->kind == E_NAME) {
        diag_error(e->loc, "%s needs its path: %s(\"%s\")", name, name,
                   kind == RT_SRC_IDX ? "data/mnist" : kind == RT_SRC_NPZ ? "data.npz"
                   : kind == RT_SRC_TEXT ? "data/kjv.txt" : "train.csv");
        return;
    }
    /* one signature per source; the path first */
    static const char *const idx_names[] = {"path", "normalize", "split", "target"};
    static const char *const npz_names[] = {"path",   "normalize", "split",  "x_train",
                                            "y_train", "x_test",   "y_test", "target"};
    static const char *const csv_names[] = {"path",   "normalize", "split",   "test",
                                            "target", "targets",   "features"};
    static const char *const text_names[] = {"path", "normalize", "split", "block", "vocab"};
    const Sig sig = kind == RT_SRC_IDX   ? (Sig){name, idx_names, 4, 1, 1}
                    : kind == RT_SRC_NPZ ? (Sig){name, npz_names, 8, 1, 1}
                    : kind == RT_SRC_TEXT ? (Sig){name, text_names, 5, 1, 1}
                                         : (Sig){name, csv_names, 7, 1, 1};
    Expr *a[8] = {0};
    if (!arg_bind(e, &sig, a))
        return;
    DataCfg n = *d;
    n.kind = kind;
    n.loc = e->loc;
    if (!(n.path = str_arg(a[0], "the data path")))
        return;
    if (kind != RT_SRC_IDX) {   /* MNIST's numbers are for MNIST */
        n.nnorm = 0;
        n.norm_mean = n.norm_std = NULL;
    }
    if (a[1])
        normalize_arg(&n, a[1]);
    if (a[2] && arg_num(a[2], "split", &n.split) && !(n.split > 0 && n.split < 1)) {
        diag_error(a[2]->loc, "split is the held-out fraction, in (0, 1), got %s", arg_show(a[2]));
        n.split = 0;
    }
    const Expr *tgt = kind == RT_SRC_IDX ? a[3] : kind == RT_SRC_NPZ ? a[7] : NULL;
    if (tgt) {      /* target = input: an autoencoder's (no labels are read) */
        if (tgt->kind != E_NAME || strcmp(tgt->s, "input") != 0)
            diag_error(tgt->loc, "%s's target must be input (an autoencoder's: the loss compares the output with "
                       "the normalized sample), got %s", name, arg_show(tgt));
        else
            n.target_input = 1;
        if (kind == RT_SRC_NPZ && (a[4] || a[6]))
            diag_error((a[4] ? a[4] : a[6])->loc, "target = input reads no y arrays: leave out %s",
                       a[4] ? "y_train" : "y_test");
    }
    if (kind == RT_SRC_NPZ && ((a[4] && a[4]->kind == E_TUPLE) || (a[6] && a[6]->kind == E_TUPLE)))
        npz_y_lists(&n, a[4], a[6], e->loc);
    else if (kind == RT_SRC_NPZ)
        for (int i = 0; i < 4; i++)
            if (a[3 + i] && (n.arrays[i] = str_arg(a[3 + i], npz_names[3 + i])))
                n.narrays = 4;
    if (kind == RT_SRC_NPZ && n.narrays)
        for (int i = 0; i < 4; i++)
            if (!n.arrays[i])
                n.arrays[i] = npz_names[3 + i];
    if (kind == RT_SRC_TEXT)
        text_args(&n, e, a[3], a[4]);
    if (kind == RT_SRC_CSV) {
        if (a[3] && (n.test = str_arg(a[3], "test")) && n.split > 0)
            diag_error(a[2]->loc, "split holds out part of the training file, but test names a test file: "
                                  "give one or the other");
        if (a[4] && a[5])
            diag_error(a[5]->loc, "give target or targets, not both");
        else if (!a[4] && !a[5])
            diag_error(e->loc, "csv needs the target column: target = \"NAME\" (or targets = [\"a\", \"b\"])");
        else
            str_list(a[4] ? a[4] : a[5], a[4] ? "target" : "targets", &n.targets, &n.ntargets);
        if (a[6])
            str_list(a[6], "features", &n.features, &n.nfeatures);
        for (int i = 0; i < n.nfeatures; i++)
            for (int j = 0; j < n.ntargets; j++)
                if (strcmp(n.features[i], n.targets[j]) == 0)
                    diag_error(a[6]->loc, "column '%s' is both a feature and a target", n.features[i]);
    }
    *d = n;
}
