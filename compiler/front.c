/* front.c: front_compile, the front end's one entry point: parse, then
 * check every model (forward.c) and the train block (train_block.c),
 * then the model the train block names becomes the program's graph. */
#include <string.h>

#include "sema.h"

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

Program *front_compile(const char *path, const char *text)
{
    diag_source(path, text);
    File *f = parse_file(path, text);
    if (!f || diag_count() > 0)
        return NULL;
    Loc file_loc = {path, 0, 0};

    /* SyncBatchNorm changes how each BatchNorm2d is built: read it first
     * (check_train reports a bad value later) */
    int sync_bn = 0;
    for (int i = 0; f->ntrains > 0 && i < f->trains[0]->nitems; i++)
        if (strcmp(f->trains[0]->items[i]->key, "sync_batchnorm") == 0 && f->trains[0]->items[i]->val->kind == E_BOOL)
            sync_bn = (int)f->trains[0]->items[i]->val->i;
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
        logits[i] = fwd_model(graphs[i], m, &inputs[i], sync_bn);
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
    const Shape *in = &inputs[mi];
    Graph *g = graphs[mi];
    if (!reads_param(g, logits[mi].id)) {
        diag_error(m->loc, "the output of model '%s' does not depend on any parameter: there is nothing to train",
                   m->name);
        return NULL;
    }
    p->g = g;
    p->model_name = m->name;
    p->in_c = in->rank == 4 ? (int)in->d[1] : 1;
    p->in_h = in->rank == 4 ? (int)in->d[2] : in->rank == 3 ? (int)in->d[1] : 1;
    p->in_w = (int)in->d[in->rank - 1];
    p->nclass = (int)logits[mi].s.d[1];
    g->logits = logits[mi].id;

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
    g->loss = ir_add(g, OP_CE_LOSS, 2, (int[]){g->logits, g->labels}, shape1(DIM_N), DT_F32, loss_loc);
    g->n[g->loss]->red = p->train.reduction;
    g->n[g->loss]->smooth = p->train.label_smoothing;
    for (int i = 0; i < g->nn; i++)
        g->n[i]->phase = i == g->loss ? PH_LOSS : PH_FWD;
    return p;
}
