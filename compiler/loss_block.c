/* loss_block.c: the train block's loss block, loss(out, y) { ... }, run
 * after forward in the trained model's scope (forward.c runs its
 * statements through Sema.run, binds its names through Sema.bind): what
 * out and y are, model.NAME, the targets as a tuple, and the `metric`
 * setting read with the block's names. Its F.* losses are loss_fns.c's. */
#include <string.h>

#include "sema.h"

/* model.fc1.weight in a loss block: a parameter or buffer by its
 * state_dict name (a tied weight's other name too), or one of the top
 * model's own tensors (model.class_weights of register_buffer) */
Val lblk_model_tensor(Sema *S, const Expr *e)
{
    const Graph *g = S->g;
    const char *name = e->s + 6;
    Near s = arg_near(name);
    for (int i = 0; i < g->nn; i++) {
        const Node *n = g->n[i];
        if (n->op != OP_PARAM)
            continue;
        if (strcmp(n->name, name) == 0)
            return (Val){i, n->shape};
        arg_near_try(&s, n->name);
    }
    for (int k = 0; k < g->naliases; k++)
        if (strcmp(g->aliases[k], name) == 0)
            return (Val){g->alias_of[k], g->n[g->alias_of[k]]->shape};
    for (int k = 0; k < S->ntensors; k++) {
        if (strcmp(S->tensors[k].name, name) == 0)
            return S->tensors[k].v;
        arg_near_try(&s, S->tensors[k].name);
    }
    diag_error(e->loc, "model '%s' has no parameter or buffer '%s'%s", S->m->name, name, arg_near_hint(&s));
    return POISON;
}

/* metric accuracy(p, t): scores [N, C] against class indices [N];
 * metric mse(p, t): floats of one shape with the batch first; metric
 * macro_f1(p, t): a multi-label head's logits [N, K] (an output is on
 * where its sigmoid is over 0.5) against 0/1 targets [N, K], K the first
 * output's (the runtime sizes the sums by it); read with the loss block's
 * names (autodiff.c builds the sums) */
static void read_metric(Sema *S, const Expr *e, const Shape *first)
{
    const int acc = strcmp(e->s, "accuracy") == 0, f1 = strcmp(e->s, "macro_f1") == 0;
    S->in_loss = 1;
    Val p = S->eval(S, e->args[0]->val), t = S->eval(S, e->args[1]->val);
    S->in_loss = 0;
    if (p.id < 0 || t.id < 0)
        return;
    const DType pt = S->g->n[p.id]->dt, tt = S->g->n[t.id]->dt;
    if (acc && !(p.s.rank == 2 && p.s.d[0] == DIM_N && pt == DT_F32 && t.s.rank == 1 && t.s.d[0] == DIM_N
                 && tt != DT_F32 && tt != DT_BOOL)) {
        diag_error(e->loc, "accuracy takes scores [N, C] and class indices [N], a sample each, got %s%s and %s%s",
                   ir_dtype_text(pt), ir_shape_str(&p.s), ir_dtype_text(tt), ir_shape_str(&t.s));
        return;
    }
    if (!acc && !(ten_same(&p.s, &t.s) && ten_batch_dim(&p.s) == 0 && pt == DT_F32 && tt == DT_F32)) {
        diag_error(e->loc, "%s takes two float tensors of one shape with the batch first, got %s%s and %s%s", e->s,
                   ir_dtype_text(pt), ir_shape_str(&p.s), ir_dtype_text(tt), ir_shape_str(&t.s));
        return;
    }
    if (f1 && !(p.s.rank == 2 && first->rank == 2 && p.s.d[1] == first->d[1])) {
        diag_error(e->loc, "macro_f1 takes a multi-label head's logits [N, K] with K the first output's (%s), got %s",
                   ir_shape_str(first), ir_shape_str(&p.s));
        return;
    }
    S->g->metric_kind = acc ? METRIC_ACCURACY : f1 ? METRIC_MACRO_F1 : METRIC_MSE;
    S->g->metric_pred = p.id;
    S->g->metric_t = acc ? layer_node(S, OP_T_TO_I64, t.id, -1, t.s, e->loc).id : t.id;
}

/* y as a tuple (cls, reg = y; y[1]): the data's targets are ntup float
 * columns, each element one of them, [N]: class indices (i64) where a
 * class loss takes it, else floats */
static void target_tuple(Sema *S, const TrainItem *it, const char *yn, int ntup, const char *const *names)
{
    Graph *g = S->g;
    Node *lb = g->n[g->labels];
    lb->dt = DT_F32;
    lb->shape = shape2(DIM_N, ntup);
    g->ntargets = ntup;
    g->target_classes = util_alloc(sizeof *g->target_classes * (size_t)ntup);
    S->ycols = util_alloc(sizeof *S->ycols * (size_t)ntup);
    Val *tup = util_alloc(sizeof *tup * (size_t)ntup);
    for (int k = 0; k < ntup; k++) {
        const int col = ir_add(g, OP_T_SLICE, 1, &g->labels, shape2(DIM_N, 1), DT_F32, it->loc);
        g->n[col]->ten.axis = 1;
        g->n[col]->ten.start = k;
        g->n[col]->ten.step = 1;
        Val c = layer_view(S, (Val){col, shape2(DIM_N, 1)}, shape1(DIM_N), it->loc);
        if (lfn_class_column(it->body, it->nbody, yn, k, names ? names[k] : NULL))
            c = layer_node(S, OP_T_TO_I64, c.id, -1, c.s, it->loc);
        S->ycols[k] = col;
        tup[k] = c;
    }
    S->bind(S, yn, POISON, tup, ntup);
}

/* The train block's loss block, run after forward in the model's scope:
 * out is what forward returned (a tensor, or the tuple), y the targets
 * (the normalized input under target = input; class indices where a class
 * loss takes them, one per output row or position; else float targets of
 * the first output's elements), model.NAME any parameter or buffer. Its
 * return, a 0-d float tensor, becomes g->loss. */
void lblk_run(Sema *S, Val out, int target_input)
{
    const TrainItem *it = S->lossb;
    Graph *g = S->g;
    const Expr *h = it->val;
    if (!(h->kind == E_TUPLE && h->nargs == 2 && h->args[0]->val->kind == E_NAME
          && h->args[1]->val->kind == E_NAME)) {
        diag_error(h->loc, "a loss block names two things, forward's output and the targets: loss(out, y) { ... }, "
                   "got %s", arg_show(h));
        return;
    }
    const char *on = h->args[0]->val->s, *yn = h->args[1]->val->s;
    if (S->nouts > 1) {
        S->bind(S, on, POISON, S->outs, S->nouts);
    } else {
        S->bind(S, on, out, NULL, 0);
    }
    Node *lb = g->n[g->labels];
    const char *const *names;
    const int ntup = target_input ? 0 : lfn_target_tuple(it->body, it->nbody, yn, &names);
    Val y;
    if (ntup > 0) {
        target_tuple(S, it, yn, ntup, names);
        y = POISON;
    } else if (target_input) {
        y = (Val){g->images, g->n[g->images]->shape};
    } else if (lfn_class_target(it->body, it->nbody, yn)) {
        lb->shape = out.s;      /* [N, C] gives [N]; [N, T, C] a class at each position, [N, T] */
        lb->shape.rank--;
        y = (Val){g->labels, lb->shape};
    } else {
        lb->dt = DT_F32;
        lb->shape = shape2(DIM_N, ir_row_elems(&out.s));
        y = (Val){g->labels, lb->shape};
    }
    if (ntup == 0)
        S->bind(S, yn, y, NULL, 0);
    Val loss = POISON;
    int returned = 0;
    S->in_loss = 1;
    S->run(S, it->body, it->nbody, &loss, &returned);
    S->in_loss = 0;
    if (!returned) {
        diag_error(it->end, "the loss block does not return the loss (add 'return ...')");
        return;
    }
    const Stmt *ret = it->body[0];
    for (int i = 0; i < it->nbody; i++)
        if (it->body[i]->kind == S_RETURN)
            ret = it->body[i];
    if (loss.id >= 0 && (loss.s.rank != 0 || g->n[loss.id]->dt != DT_F32)) {
        diag_error(ret->val->loc, "the loss block must return the loss, a 0-d float tensor, got %s%s: reduce it "
                   "(.mean(), .sum(), or a loss's reduction = 'mean')", ir_dtype_text(g->n[loss.id]->dt),
                   ir_shape_str(&loss.s));
        return;
    }
    if (S->metric)
        read_metric(S, S->metric, &out.s);
    if (ntup > 0 && !S->metric && loss.id >= 0 && (g->mt_class_out < 0 || g->mt_reg_out < 0)) {
        diag_error(it->loc, "the targets as a tuple are a multi-task model's: a class loss on one of them and a float "
                   "loss on another (the evaluation reports the first's accuracy and the second's MSE); this block "
                   "has no %s loss on an element of %s (or say what to report: metric accuracy(out[0], %s[0]))",
                   g->mt_class_out < 0 ? "class" : "float", yn, yn);
        return;
    }
    g->loss = loss.id;
}
