/* front.c: front_compile, the front end's one entry point: parse, then
 * check every model (forward.c) and the train block (train_block.c),
 * then the model the train block names becomes the program's graph. */
#include <string.h>

#include "sema.h"
#include "cddprt.h"         /* RT_TGT_* */

static int reads_param(const Graph *g, int y)
{
    char *seen = util_alloc((size_t)g->nn);
    seen[y] = 1;
    for (int i = y; i >= 0; i--) {
        if (!seen[i])
            continue;
        if (g->n[i]->op == OP_PARAM)
            return 1;
        for (int k = 0; k < g->n[i]->nin; k++)
            seen[g->n[i]->in[k]] = 1;
    }
    return 0;
}

/* The per-sample loss node (g->loss). Class losses read LABELS as
 * i32[N]; the float-target ones make it f32[N, K], K the output width, and
 * the program's target RT_TGT_FLOAT (the data's targets must match). */
static void build_loss(Program *p, Loc loc)
{
    static const Op ops[] = {[LOSS_CE] = OP_CE_LOSS, [LOSS_MSE] = OP_MSE_LOSS, [LOSS_L1] = OP_L1_LOSS,
                             [LOSS_SMOOTH_L1] = OP_SMOOTH_L1_LOSS, [LOSS_HUBER] = OP_HUBER_LOSS,
                             [LOSS_BCE_LOGITS] = OP_BCE_LOSS};
    Graph *g = p->g;
    const TrainCfg *t = &p->train;
    Op op = ops[t->loss];
    if (t->loss == LOSS_SMOOTH_L1 && t->loss_delta == 0)
        op = OP_L1_LOSS;    /* torch: beta 0 is l1_loss (the formula would divide by 0) */
    int target = g->labels;
    if (t->data.target_input) {
        /* an autoencoder: the output against the normalized sample, viewed
         * as [N, elements] as the output is; the labels stay unused */
        if (t->loss == LOSS_CE || t->loss == LOSS_BCE_LOGITS) {
            diag_error(loc, "target = input (an autoencoder) needs a loss of float values (mse_loss, l1_loss, "
                       "smooth_l1_loss, huber_loss), not %s", t->loss == LOSS_CE ? "cross_entropy"
                       : "binary_cross_entropy_with_logits");
            return;
        }
        target = ir_add(g, OP_RESHAPE, 1, &g->images, shape2(DIM_N, p->nclass), DT_F32, loc);
        p->target = RT_TGT_INPUT;
    } else if (t->loss != LOSS_CE) {
        Node *lb = g->n[g->labels];
        lb->dt = DT_F32;
        lb->shape = shape2(DIM_N, p->nclass);
        p->target = RT_TGT_FLOAT;
    }
    if (t->loss_w && t->loss_nw != p->nclass)
        diag_error(loc, "%s has %d values, but model '%s' has %d %s (one per %s)",
                   t->loss == LOSS_CE ? "weight" : "pos_weight", t->loss_nw, p->model_name, p->nclass,
                   t->loss == LOSS_CE ? "classes" : "outputs", t->loss == LOSS_CE ? "class" : "output");
    if (t->loss == LOSS_BCE_LOGITS && 3 * p->nclass > RT_METRIC_MAX)    /* TP, FP, FN per output */
        diag_error(loc, "binary_cross_entropy_with_logits: model '%s' has %d outputs, but the evaluation's "
                   "per-output counts (macro-F1) support at most %d", p->model_name, p->nclass, RT_METRIC_MAX / 3);
    g->loss = ir_add(g, op, 2, (int[]){g->logits, target}, shape1(g->n[g->logits]->shape.d[0]), DT_F32, loc);
    Node *n = g->n[g->loss];
    n->counts = t->has_ignore || p->positions > 1;
    n->ignore_on = t->has_ignore;
    n->ignore = t->ignore_index;
    n->red = t->reduction;
    n->smooth = t->label_smoothing;
    n->delta = t->loss_delta;
    n->w = t->loss_w;
    n->nw = t->loss_nw;
}

/* The model's output as the loss reads it. A class loss reads rows of C
 * logits: [N, C] one per sample, [N, T..., C] (or its rows [N*T, C]) one
 * per position, viewed as [N*T, C] with labels [N*T] (F.cross_entropy(
 * logits.view(-1, C), y.view(-1))). The other losses compare every
 * output with its target, viewed as [N, elements] (their mean is over all
 * of them, as torch's). */
static int output_rows(Program *p, const Shape *o, Loc loc)
{
    Graph *g = p->g;
    const int64_t elems = ir_row_elems(o), last = o->d[o->rank - 1];
    if (p->train.loss != LOSS_CE) {
        if (elems > INT32_MAX / 4) {
            diag_error(loc, "model '%s' outputs %lld values a sample: too many for a loss", p->model_name,
                       (long long)elems);
            return 0;
        }
        p->nclass = (int)elems;
        p->positions = 1;
        if (!(o->rank == 2 && o->d[0] == DIM_N))
            g->logits = ir_add(g, OP_RESHAPE, 1, &g->logits, shape2(DIM_N, elems), DT_F32, loc);
        return 1;
    }
    p->nclass = (int)last;
    p->positions = elems / last;
    if (p->positions > 1) {
        g->logits = ir_add(g, OP_RESHAPE, 1, &g->logits, shape2(-p->positions, last), DT_F32, loc);
        if (!p->train.loss_block)   /* a loss block reads y as [N, T]; the metric views it (autodiff.c) */
            g->n[g->labels]->shape = shape1(-p->positions);
    } else if (!(o->rank == 2 && o->d[0] == DIM_N)) {   /* [N, 1, C]: one position (text(block = 1)) */
        g->logits = ir_add(g, OP_RESHAPE, 1, &g->logits, shape2(DIM_N, last), DT_F32, loc);
    }
    return 1;
}

/* What building a model needs of the train block, read before it is
 * checked (train_check reports a bad value later): SyncBatchNorm changes
 * how each BatchNorm2d is built; with data ... target = input forward
 * returns a sample; a loss of each output takes outputs of any shape. */
static void peek_train(const File *f, FwdCfg *c)
{
    *c = (FwdCfg){0};
    for (int i = 0; f->ntrains > 0 && i < f->trains[0]->nitems; i++) {
        const TrainItem *it = f->trains[0]->items[i];
        const Expr *v = it->val;
        if (strcmp(it->key, "sync_batchnorm") == 0 && v->kind == E_BOOL)
            c->sync_bn = (int)v->i;
        for (int k = 0; strcmp(it->key, "data") == 0 && v->kind == E_CALL && k < v->nargs; k++) {
            const Arg *a = v->args[k];
            c->autoenc |= a->key && strcmp(a->key, "target") == 0 && a->val->kind == E_NAME
                          && strcmp(a->val->s, "input") == 0;
        }
        if (strcmp(it->key, "loss") == 0 && it->has_body)
            c->loss_block = it;
        if (strcmp(it->key, "metric") == 0 && v->kind == E_CALL && v->nargs == 2)
            c->metric = v;
        else if (strcmp(it->key, "loss") == 0 && (v->kind == E_NAME || v->kind == E_CALL))
            c->elementwise = strcmp(v->s, "cross_entropy") != 0 && strcmp(v->s, "nll_loss") != 0;
        if (strcmp(it->key, "model") == 0 && v->kind == E_NAME)
            c->model = v->s;
    }
}

/* forward(idx: i64[...]): tokens. The largest one the program takes is
 * the smallest vocabulary of the embeddings that read the input (through
 * views); 2^24 (a float slot's exact integers) where none does. The data
 * is taken as it is: normalize does not apply. */
static int token_input(Program *p)
{
    const Graph *g = p->g;
    if (g->n[g->images]->dt != DT_I64)
        return 1;
    DataCfg *d = &p->train.data;
    if (d->norm_given || d->norm_auto) {
        diag_error(d->loc, "normalize does not apply to tokens (forward's input is i64): leave it out");
        return 0;
    }
    if (d->target_input) {
        diag_error(d->loc, "target = input needs float samples, but forward's input is i64 (tokens)");
        return 0;
    }
    d->nnorm = 0;
    p->in_vocab = MAX_DIM;
    for (int i = 0; i < g->nn; i++) {
        const Node *n = g->n[i];
        int src = n->op == OP_T_EMBED ? n->in[1] : -1;
        while (src >= 0 && g->n[src]->op == OP_RESHAPE)
            src = g->n[src]->in[0];
        if (src == g->images && g->n[n->in[0]]->shape.d[0] < p->in_vocab)
            p->in_vocab = g->n[n->in[0]]->shape.d[0];
    }
    return 1;
}

/* text(..., block = T): windows of T tokens, a target at each position:
 * forward(idx: i64[N, T]) returning [N, T, V] with a class loss */
static int text_data(const Program *p, const Shape *in)
{
    const DataCfg *d = &p->train.data;
    if (d->kind != RT_SRC_TEXT)
        return 1;
    const long long T = (long long)d->block;
    if (p->g->n[p->g->images]->dt != DT_I64 || in->rank != 2 || in->d[1] != d->block) {
        diag_error(d->loc, "text(block = %lld) gives windows of %lld tokens: forward's input must be i64[N, %lld], "
                   "got %s%s", T, T, T, p->g->n[p->g->images]->dt == DT_I64 ? "i64" : "f32", ir_shape_str(in));
        return 0;
    }
    if (p->train.loss != LOSS_CE || p->positions != d->block) {
        diag_error(d->loc, "text(block = %lld) gives a target at each of %lld positions: forward must return "
                   "logits [N, %lld, V] and the loss be cross_entropy (or nll_loss)", T, T, T);
        return 0;
    }
    return 1;
}

Program *front_compile(const char *path, const char *text, unsigned fusion)
{
    diag_source(path, text);
    File *f = parse_file(path, text);
    if (!f || diag_count() > 0)
        return NULL;
    Loc file_loc = {path, 0, 0};

    FwdCfg fc;
    peek_train(f, &fc);
    fc.file = f;
    Graph **graphs = util_alloc(sizeof *graphs * (size_t)(f->nmodels + 1));
    Val *logits = util_alloc(sizeof *logits * (size_t)(f->nmodels + 1));
    Shape *inputs = util_alloc(sizeof *inputs * (size_t)(f->nmodels + 1));
    for (int i = 0; i < f->nmodels; i++) {
        const Model *m = f->models[i];
        for (int j = 0; j < i; j++)
            if (strcmp(f->models[j]->name, m->name) == 0) {
                diag_error(m->loc, "model '%s' is already defined", m->name);
                diag_note(f->models[j]->loc, "'%s' was first defined here", m->name);
                break;
            }
        graphs[i] = ir_new();
        graphs[i]->fusion = fusion;
        if (fwd_is_block(m)) {      /* made inside other models, not alone */
            logits[i] = POISON;
            continue;
        }
        logits[i] = fwd_model(graphs[i], m, &inputs[i], &fc);
    }
    if (f->nmodels == 0)
        diag_error(file_loc, "no model in this file (add 'model NAME { ... }')");

    Program *p = util_alloc(sizeof *p);
    int mi = -1;
    if (f->ntrains == 0) {
        diag_error(file_loc, "no train block (add 'train { model NAME ... }')");
    } else {
        for (int i = 1; i < f->ntrains; i++) {
            diag_error(f->trains[i]->loc, "only one train block is allowed");
            diag_note(f->trains[0]->loc, "the first is here");
        }
        mi = train_check(f, f->trains[0], &p->train);
    }
    if (diag_count() > 0 || mi < 0)
        return NULL;

    /* The input type says how to view each sample; whether the data's
     * samples have that many values is the runtime's check, at load. */
    const Model *m = f->models[mi];
    if (fwd_is_block(m)) {
        diag_error(f->trains[0]->loc, "model '%s' is a block (%s): it is made inside another model, which the "
                   "train block names", m->name, m->nparams >= 0 ? "it has a constructor list" : "its forward's "
                   "input has no type");
        diag_note(m->loc, "'%s' is here", m->name);
        return NULL;
    }
    const Shape *in = &inputs[mi];
    Graph *g = graphs[mi];
    if (!reads_param(g, logits[mi].id)) {
        diag_error(m->loc, "the output of model '%s' does not depend on any parameter: there is nothing to train",
                   m->name);
        return NULL;
    }
    p->g = g;
    p->model_name = m->name;
    p->in_rank = in->rank - 1;
    for (int d = 1; d < in->rank; d++)
        p->in_dim[d - 1] = in->d[d];
    p->target = RT_TGT_CLASS;
    g->logits = logits[mi].id;
    if (p->train.loss_block) {
        /* the loss block built the loss (forward.c); the metric follows
         * the first output and what y is: classes, floats or the input */
        if (g->loss < 0)
            diag_ice("front: the loss block gave no loss and no error");
        const int classes = !p->train.data.target_input && g->n[g->labels]->dt != DT_F32;   /* a tuple's are floats */
        p->train.loss = classes ? LOSS_CE : LOSS_MSE;
        p->target = p->train.data.target_input ? RT_TGT_INPUT : classes ? RT_TGT_CLASS : RT_TGT_FLOAT;
    }
    if (!output_rows(p, &logits[mi].s, m->loc) || !token_input(p) || !text_data(p, in))
        return NULL;
    if (g->ntargets > 0)    /* the targets as a tuple: their columns, as the data must give them */
        p->nclass = g->ntargets;

    const TrainItem *loss_item = NULL;
    for (int i = 0; i < f->trains[0]->nitems; i++)
        if (strcmp(f->trains[0]->items[i]->key, "loss") == 0)
            loss_item = f->trains[0]->items[i];
    Loc loss_loc = loss_item ? loss_item->val->loc : f->trains[0]->loc;
    if (p->train.nll && !g->log_probs && g->n[g->logits]->op != OP_LOG_SOFTMAX) {
        /* nll_loss of logits is -x[y], not a loss of a classifier */
        diag_error(loss_loc, "nll_loss expects log-probabilities: return F.log_softmax(x, dim = 1) from forward "
                   "(or use cross_entropy on the logits)");
        return NULL;
    }
    if (p->train.loss != LOSS_CE && g->log_probs) {
        /* g->logits is log_softmax's operand: these losses would not see its result */
        diag_error(loss_loc, "log_softmax as the model's output goes with nll_loss only: return the raw outputs "
                   "for this loss");
        return NULL;
    }
    if (!p->train.loss_block)
        build_loss(p, loss_loc);
    if (diag_count() > 0)
        return NULL;
    for (int i = 0; i < g->nn; i++)
        g->n[i]->phase = i == g->loss ? PH_LOSS : PH_FWD;
    return p;
}
