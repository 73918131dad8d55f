/* train_block.c: the train block's settings (data, loss, optimizer,
 * schedule, precision, ...), each key checked by its own function. */
#include <string.h>

#include "sema.h"
#include "cddprt.h"         /* RT_PREC_*, RT_SCHED_* */

/* `name` or `name(args)`: the callee, with e itself as a call node. */
static const char *callee(const Expr *e, const char *what)
{
    if (e->kind == E_NAME || e->kind == E_CALL)
        return e->s;
    diag_error(e->loc, "%s must be a name such as %s, got %s", what,
               strcmp(what, "loss") == 0 ? "cross_entropy()"
               : strcmp(what, "scaler") == 0 ? "dynamic(init_scale = 65536)" : "sgd(lr = 0.01)", arg_show(e));
    return NULL;
}

static int num_at_least(const Expr *e, const char *what, double lo, int open, double *out);

/* PyTorch's class names for the train block's settings (the namespace,
 * nn., torch.optim., optim., lr_scheduler., is gone from Expr.s) */
static const char *const pytorch_names[][2] = {
    {"BCEWithLogitsLoss", "binary_cross_entropy_with_logits"}, {"CrossEntropyLoss", "cross_entropy"},
    {"HuberLoss", "huber_loss"}, {"L1Loss", "l1_loss"}, {"MSELoss", "mse_loss"}, {"NLLLoss", "nll_loss"},
    {"SmoothL1Loss", "smooth_l1_loss"},
    {"Adagrad", "adagrad"}, {"Adam", "adam"}, {"AdamW", "adamw"}, {"RMSprop", "rmsprop"}, {"SGD", "sgd"},
    {"CosineAnnealingLR", "cosine"}, {"ExponentialLR", "exponential"}, {"MultiStepLR", "multistep"},
    {"OneCycleLR", "onecycle"}, {"StepLR", "step"},
};

/* a misspelt PyTorch class is hinted at as PyTorch spells it */
static void near_pytorch(Near *s)
{
    for (size_t i = 0; i < sizeof pytorch_names / sizeof *pytorch_names; i++)
        arg_near_try(s, pytorch_names[i][0]);
}

/* e as the train block's own spelling: PyTorch's class (nn.CrossEntropyLoss(),
 * torch.optim.Adam(model.parameters(), lr = 1e-3), StepLR(optimizer,
 * step_size = 30)) named as ours, the optimizer's parameters and the
 * schedule's optimizer, which the train block implies, left out */
static const Expr *ours(const Expr *e)
{
    if (e->kind != E_NAME && e->kind != E_CALL)
        return e;
    const char *name = e->s;
    for (size_t i = 0; i < sizeof pytorch_names / sizeof *pytorch_names; i++)
        if (strcmp(e->s, pytorch_names[i][0]) == 0)
            name = pytorch_names[i][1];
    const Expr *first = e->kind == E_CALL && e->nargs > 0 && !e->args[0]->key ? e->args[0]->val : NULL;
    const int implied = first && ((first->kind == E_CALL && strcmp(first->s, "parameters") == 0)
                                  || (first->kind == E_NAME && (strcmp(first->s, "params") == 0
                                                                || strcmp(first->s, "optimizer") == 0
                                                                || strcmp(first->s, "opt") == 0)));
    if (name == e->s && !implied)
        return e;
    Expr *c = util_alloc(sizeof *c);
    *c = *e;
    c->s = name;
    if (implied)
        c->args++, c->nargs--;
    return c;
}

/* The losses, sorted by name (the unknown-loss message lists them so):
 * LOSS_* and the arguments each takes after `reduction`. */
static const struct {
    const char *name;
    int loss;
    const char *arg, *weights; /* its own arguments, or NULL */
    int ignore;                 /* takes ignore_index */
} losses[] = {
    {"binary_cross_entropy_with_logits", LOSS_BCE_LOGITS, NULL, "pos_weight", 0},
    {"cross_entropy", LOSS_CE, "label_smoothing", "weight", 1},
    {"huber_loss", LOSS_HUBER, "delta", NULL, 0},
    {"l1_loss", LOSS_L1, NULL, NULL, 0},
    {"mse_loss", LOSS_MSE, NULL, NULL, 0},
    {"nll_loss", LOSS_CE, NULL, "weight", 1},
    {"smooth_l1_loss", LOSS_SMOOTH_L1, "beta", NULL, 0},
};
enum { NLOSSES = sizeof losses / sizeof losses[0] };

/* pos_weight or weight = [w0, w1, ...]: one number per output or class
 * (front.c checks the count against the model's output width) */
static void loss_weights(TrainCfg *t, const Expr *e, const char *what)
{
    if (e->kind == E_CALL && strcmp(e->s, "tensor") == 0 && e->nargs == 1 && !e->args[0]->key)
        e = e->args[0]->val;    /* nn.CrossEntropyLoss(weight = torch.tensor([...])) */
    int n = e->kind == E_TUPLE ? e->nargs : 0;
    if (n == 0) {
        diag_error(e->loc, "%s must be a list of numbers, one per %s, such as [1.0, 2.0], got %s", what,
                   t->loss == LOSS_CE ? "class" : "output", arg_show(e));
        return;
    }
    double *w = util_alloc(sizeof *w * (size_t)n);
    for (int i = 0; i < n; i++) {
        if (!arg_num(e->args[i]->val, what, &w[i]))
            return;
        if (!(w[i] >= 0) || w[i] > 1e30) {
            diag_error(e->args[i]->val->loc, "%s must be finite and not negative, got %s", what,
                       arg_show(e->args[i]->val));
            return;
        }
    }
    t->loss_w = w;
    t->loss_nw = n;
}

/* ignore_index = k: an integer, as PyTorch's (whose default -100 is a
 * value no class has: a target out of range is the data's error here
 * unless the loss names it, rt_data.c says so) */
static void loss_ignore(TrainCfg *t, const Expr *e)
{
    double v;
    if (!arg_num(e, "ignore_index", &v))
        return;
    if (v != (double)(int64_t)v || v < -2147483648.0 || v > 2147483647.0) {
        diag_error(e->loc, "ignore_index must be an integer (a target value), got %s", arg_show(e));
        return;
    }
    t->has_ignore = 1;
    t->ignore_index = (int64_t)v;
}

/* loss NAME(reduction = mean | sum | none, ...): torch.nn.functional's
 * losses. nll_loss of a model returning log_softmax: PyTorch's
 * F.nll_loss(F.log_softmax(z)) is cross_entropy(z), which is what is built
 * (front.c checks the model). */
static void train_loss(TrainCfg *t, const Expr *e)
{
    e = ours(e);
    const char *name = callee(e, "loss");
    if (!name)
        return;
    int k = 0;
    while (k < NLOSSES && strcmp(name, losses[k].name) != 0)
        k++;
    if (k == NLOSSES) {
        Near s = arg_near(name);
        char *all = util_strdup("");
        for (int i = 0; i < NLOSSES; i++) {
            arg_near_try(&s, losses[i].name);
            all = util_fmt("%s%s%s", all, i ? ", " : "", losses[i].name);
        }
        near_pytorch(&s);
        diag_error(e->loc, "unknown loss '%s'%s (supported: %s; or PyTorch's classes: nn.BCEWithLogitsLoss, "
                   "nn.CrossEntropyLoss, nn.HuberLoss, nn.L1Loss, nn.MSELoss, nn.NLLLoss, nn.SmoothL1Loss; a loss "
                   "block, loss(out, y) { ... }, takes any other as code)", name, arg_near_hint(&s), all);
        return;
    }
    t->loss = losses[k].loss;
    t->nll = strcmp(name, "nll_loss") == 0;
    t->loss_delta = 1.0;    /* smooth_l1's beta and huber's delta default to 1 */
    /* reduction, then the loss's own arguments, in that order */
    const char *names[4] = {"reduction"};
    int nnames = 1, at_arg = -1, at_w = -1, at_ignore = -1;
    if (losses[k].arg)
        at_arg = nnames, names[nnames++] = losses[k].arg;
    if (losses[k].weights)
        at_w = nnames, names[nnames++] = losses[k].weights;
    if (losses[k].ignore)
        at_ignore = nnames, names[nnames++] = "ignore_index";
    const Sig sig = {name, names, nnames, 0, 0};
    Expr *b[4] = {NULL, NULL, NULL, NULL}, *a[2];
    if (e->kind == E_CALL && !arg_bind(e, &sig, b))
        return;
    a[0] = b[0];
    a[1] = at_arg > 0 ? b[at_arg] : NULL;
    if (at_w > 0 && b[at_w])
        loss_weights(t, b[at_w], losses[k].weights);
    if (at_ignore > 0 && b[at_ignore])
        loss_ignore(t, b[at_ignore]);
    if (a[1] && t->loss == LOSS_CE && arg_num(a[1], "label_smoothing", &t->label_smoothing)
        && !(t->label_smoothing >= 0 && t->label_smoothing <= 1)) {
        diag_error(a[1]->loc, "label_smoothing must be in [0, 1], got %g", t->label_smoothing);
        t->label_smoothing = 0;
    }
    if (a[1] && t->loss == LOSS_SMOOTH_L1)
        num_at_least(a[1], "beta", 0, 0, &t->loss_delta);
    if (a[1] && t->loss == LOSS_HUBER)
        num_at_least(a[1], "delta", 0, 1, &t->loss_delta);
    if (!a[0])
        return;
    static const char *const reds[] = {"mean", "sum", "none"};   /* Reduction order */
    const char *r = a[0]->kind == E_NAME || a[0]->kind == E_STR ? a[0]->s : "";
    for (int i = 0; i < 3; i++)
        if (strcmp(r, reds[i]) == 0) {
            t->reduction = i;
            return;
        }
    diag_error(a[0]->loc, "reduction must be mean, sum or none, got %s", arg_show(a[0]));
}

/* A number >= lo (or > lo when open) into *out; 0 after reporting. */
static int num_at_least(const Expr *e, const char *what, double lo, int open, double *out)
{
    double v;
    if (!arg_num(e, what, &v))
        return 0;
    if (v < lo || (open && v == lo)) {
        if (!open && lo == 0)
            diag_error(e->loc, "%s must not be negative, got %s", what, arg_show(e));
        else
            diag_error(e->loc, "%s must be %s %g, got %s", what, open ? "greater than" : "at least", lo, arg_show(e));
        return 0;
    }
    *out = v;
    return 1;
}

/* decay = "all" | "dim>=2": the parameters weight_decay applies to, all
 * of them (torch.optim's default) or those of 2 or more dimensions
 * (nanoGPT's configure_optimizers: the weights of Linear, Embedding and
 * Conv decay, biases, norms' weights and other vectors do not). Either is
 * accepted with no weight decay, where it changes nothing. */
static void opt_decay(TrainCfg *t, const Expr *e)
{
    if ((e->kind == E_STR || e->kind == E_NAME) && strcmp(e->s, "all") == 0) {
        t->decay_dim = 0;
        return;
    }
    if (e->kind == E_STR && strcmp(e->s, "dim>=2") == 0) {
        t->decay_dim = 2;
        return;
    }
    diag_error(e->loc, "decay must be \"all\" (the default: every parameter) or \"dim>=2\" (parameters of 2 or "
               "more dimensions: weights, not biases or norms' weights, as nanoGPT's two groups), got %s", arg_show(e));
}

/* adam / adamw(lr, betas, eps, weight_decay, amsgrad, decay), torch.optim.Adam's
 * and AdamW's, with their defaults (AdamW decays by 0.01 unless told). */
static void train_adam(TrainCfg *t, const Expr *e, int which)
{
    static const char *const names[] = {"lr", "betas", "eps", "weight_decay", "amsgrad", "decay"};
    const Sig sig = {which == OPT_ADAM ? "adam" : "adamw", names, 6, 1, 0};
    Expr *a[6] = {NULL};
    if (e->kind == E_CALL && !arg_bind(e, &sig, a))
        return;
    t->optimizer = which;
    t->lr = 1e-3;
    t->beta1 = 0.9;
    t->beta2 = 0.999;
    t->eps = 1e-8;
    t->weight_decay = which == OPT_ADAMW ? 1e-2 : 0;
    if (a[0])
        num_at_least(a[0], "lr", 0, 1, &t->lr);
    if (a[1]) {
        const Expr *b = a[1];
        double b1, b2;
        if (b->kind != E_TUPLE || b->nargs != 2)
            diag_error(b->loc, "betas must be a pair (beta1, beta2), got %s", arg_show(b));
        else if (arg_num(b->args[0]->val, "beta1", &b1) && arg_num(b->args[1]->val, "beta2", &b2)) {
            for (int i = 0; i < 2; i++) {
                double v = i ? b2 : b1;
                if (v < 0 || v >= 1)
                    diag_error(b->args[i]->val->loc, "beta%d must be in [0, 1), got %s", i + 1,
                               arg_show(b->args[i]->val));
            }
            t->beta1 = b1;
            t->beta2 = b2;
        }
    }
    if (a[2])
        num_at_least(a[2], "eps", 0, 1, &t->eps);
    if (a[3])
        num_at_least(a[3], "weight_decay", 0, 0, &t->weight_decay);
    if (a[4])
        arg_bool(a[4], "amsgrad", &t->amsgrad);
    if (a[5])
        opt_decay(t, a[5]);
}

/* rmsprop(lr, alpha, eps, weight_decay, momentum, centered, decay):
 * torch.optim.RMSprop's arguments and defaults (lr 0.01, alpha 0.99,
 * eps 1e-8). */
static void train_rmsprop(TrainCfg *t, const Expr *e)
{
    static const char *const names[] = {"lr", "alpha", "eps", "weight_decay", "momentum", "centered", "decay"};
    const Sig sig = {"rmsprop", names, 7, 1, 0};
    Expr *a[7] = {NULL};
    if (e->kind == E_CALL && !arg_bind(e, &sig, a))
        return;
    t->optimizer = OPT_RMSPROP;
    t->lr = 1e-2;
    t->alpha = 0.99;
    t->eps = 1e-8;
    t->weight_decay = t->momentum = 0;
    if (a[0])
        num_at_least(a[0], "lr", 0, 1, &t->lr);
    if (a[1] && arg_num(a[1], "alpha", &t->alpha) && !(t->alpha >= 0 && t->alpha <= 1))
        diag_error(a[1]->loc, "alpha must be in [0, 1], got %s", arg_show(a[1]));
    if (a[2])
        num_at_least(a[2], "eps", 0, 1, &t->eps);
    if (a[3])
        num_at_least(a[3], "weight_decay", 0, 0, &t->weight_decay);
    if (a[4])
        num_at_least(a[4], "momentum", 0, 0, &t->momentum);
    if (a[5])
        arg_bool(a[5], "centered", &t->centered);
    if (a[6])
        opt_decay(t, a[6]);
}

/* adagrad(lr, lr_decay, weight_decay, initial_accumulator_value, eps,
 * decay), torch.optim.Adagrad's, with its defaults */
static void train_adagrad(TrainCfg *t, const Expr *e)
{
    static const char *const names[] = {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
                                        "decay"};
    const Sig sig = {"adagrad", names, 6, 1, 0};
    Expr *a[6] = {NULL};
    if (e->kind == E_CALL && !arg_bind(e, &sig, a))
        return;
    t->optimizer = OPT_ADAGRAD;
    t->lr = 1e-2;
    t->eps = 1e-10;
    t->weight_decay = t->lr_decay = t->init_acc = 0;
    if (a[0])
        num_at_least(a[0], "lr", 0, 1, &t->lr);
    if (a[1])
        num_at_least(a[1], "lr_decay", 0, 0, &t->lr_decay);
    if (a[2])
        num_at_least(a[2], "weight_decay", 0, 0, &t->weight_decay);
    if (a[3])
        num_at_least(a[3], "initial_accumulator_value", 0, 0, &t->init_acc);
    if (a[4])
        num_at_least(a[4], "eps", 0, 1, &t->eps);
    if (a[5])
        opt_decay(t, a[5]);
}

/* sgd(lr, momentum, dampening, weight_decay, nesterov, decay),
 * torch.optim.SGD's; adam(...), adamw(...), rmsprop(...). */
static void train_optimizer(TrainCfg *t, const Expr *e)
{
    e = ours(e);
    const char *name = callee(e, "optimizer");
    if (!name)
        return;
    if (strcmp(name, "adam") == 0 || strcmp(name, "adamw") == 0) {
        train_adam(t, e, strcmp(name, "adam") == 0 ? OPT_ADAM : OPT_ADAMW);
        return;
    }
    if (strcmp(name, "rmsprop") == 0) {
        train_rmsprop(t, e);
        return;
    }
    if (strcmp(name, "adagrad") == 0) {
        train_adagrad(t, e);
        return;
    }
    if (strcmp(name, "sgd") != 0) {
        Near s = arg_near(name);
        static const char *const known[] = {"adagrad", "adam", "adamw", "rmsprop", "sgd"};   /* sorted */
        for (int i = 0; i < 5; i++)
            arg_near_try(&s, known[i]);
        near_pytorch(&s);
        diag_error(e->loc, "unknown optimizer '%s'%s (supported: adagrad, adam, adamw, rmsprop, sgd, or as PyTorch "
                   "spells them: torch.optim.Adagrad, Adam, AdamW, RMSprop, SGD)", name, arg_near_hint(&s));
        return;
    }
    static const char *const names[] = {"lr", "momentum", "dampening", "weight_decay", "nesterov", "decay"};
    const Sig sig = {"sgd", names, 6, 1, 0};
    Expr *a[6] = {NULL};
    if (e->kind == E_CALL && !arg_bind(e, &sig, a))
        return;
    t->optimizer = 0;
    double *dst[4] = {&t->lr, &t->momentum, &t->dampening, &t->weight_decay};
    for (int i = 0; i < 4; i++) {
        if (!a[i] || !arg_num(a[i], names[i], dst[i]))
            continue;
        if (i == 0 && t->lr <= 0)
            diag_error(a[i]->loc, "lr must be positive, got %s", arg_show(a[i]));
        else if (i != 0 && *dst[i] < 0)
            diag_error(a[i]->loc, "%s must not be negative, got %s", names[i], arg_show(a[i]));
    }
    if (a[4] && arg_bool(a[4], "nesterov", &t->nesterov) && t->nesterov
        && (t->momentum <= 0 || t->dampening != 0))
        diag_error(a[4]->loc, "nesterov needs momentum > 0 and dampening = 0");
    if (a[5])
        opt_decay(t, a[5]);
}

/* multistep(milestones, gamma = 0.1): MultiStepLR, stepped once an
 * epoch; milestones a tuple of increasing epochs, or one epoch. */
static void sched_multistep(TrainCfg *t, Expr **a)
{
    const Expr *m = a[0];
    const int n = m->kind == E_TUPLE ? m->nargs : 1;
    if (n > RT_SCHED_MAX_V) {
        diag_error(m->loc, "at most %d milestones, got %d", RT_SCHED_MAX_V, n);
        return;
    }
    for (int i = 0; i < n; i++) {
        const Expr *v = m->kind == E_TUPLE ? m->args[i]->val : m;
        int64_t k;
        if (!arg_int(v, "a milestone", 1, 1000000, &k))
            return;
        if (i > 0 && (double)k <= t->sched_v[i - 1]) {
            diag_error(v->loc, "milestones must increase, got %lld after %g", (long long)k, t->sched_v[i - 1]);
            return;
        }
        t->sched_v[i] = (double)k;
    }
    t->sched_n = n;
    t->gamma = 0.1;
    if (a[1])
        num_at_least(a[1], "gamma", 0, 1, &t->gamma);
    t->sched = RT_SCHED_MULTISTEP;
}

/* warmup_cosine(warmup_steps, total_steps = the run's, start_factor = 1/3,
 * eta_min = 0), per optimizer step: LinearLR(start_factor, total_iters =
 * warmup_steps) then CosineAnnealingLR(T_max = total_steps - warmup_steps,
 * eta_min), as SequentialLR(milestones = [warmup_steps]) joins them. */
static void sched_warmup_cosine(TrainCfg *t, Expr **a)
{
    int64_t w, total = 0;
    double sf = 1.0 / 3, eta = 0;
    if (!arg_int(a[0], "warmup_steps", 1, INT32_MAX, &w))
        return;
    if (a[1] && !arg_int(a[1], "total_steps", 1, INT32_MAX, &total))
        return;
    if (total && total <= w) {
        diag_error(a[1]->loc, "total_steps must exceed warmup_steps (%lld), got %lld", (long long)w, (long long)total);
        return;
    }
    if (a[2] && arg_num(a[2], "start_factor", &sf) && !(sf > 0 && sf <= 1)) {
        diag_error(a[2]->loc, "start_factor must be in (0, 1], got %s", arg_show(a[2]));
        return;
    }
    if (a[3] && !num_at_least(a[3], "eta_min", 0, 0, &eta))
        return;
    t->sched_v[0] = (double)w;
    t->sched_v[1] = (double)total;
    t->sched_v[2] = sf;
    t->sched_v[3] = eta;
    t->sched_n = 4;
    t->sched = RT_SCHED_WARMUP_COSINE;
}

/* onecycle(max_lr, total_steps = the run's, pct_start = 0.3,
 * anneal_strategy = cos, div_factor = 25, final_div_factor = 1e4,
 * three_phase = false, cycle_momentum = false): OneCycleLR, per optimizer
 * step. Unlike torch, the momentum is not cycled (it stays the
 * optimizer's); cycle_momentum = true is refused. epochs and
 * steps_per_epoch may give total_steps as torch's do. */
static void sched_onecycle(TrainCfg *t, Expr **a)
{
    double max_lr, pct = 0.3, div = 25, fdiv = 1e4;
    int64_t total = 0, ep = 0, spe = 0;
    int three = 0, cyc = 0, linear = 0;
    if (!num_at_least(a[0], "max_lr", 0, 1, &max_lr))
        return;
    if (a[1] && !arg_int(a[1], "total_steps", 1, INT32_MAX, &total))
        return;
    if (a[8] && !arg_int(a[8], "epochs", 1, 1000000, &ep))
        return;
    if (a[9] && !arg_int(a[9], "steps_per_epoch", 1, INT32_MAX, &spe))
        return;
    if (a[1] && (a[8] || a[9])) {
        diag_error(a[8] ? a[8]->loc : a[9]->loc, "give total_steps, or epochs and steps_per_epoch, not both");
        return;
    }
    if (!!a[8] != !!a[9]) {
        diag_error(a[8] ? a[8]->loc : a[9]->loc, "epochs and steps_per_epoch go together (their product is "
                   "total_steps)");
        return;
    }
    if (ep)
        total = ep * spe;
    if (a[2] && arg_num(a[2], "pct_start", &pct) && !(pct >= 0 && pct <= 1)) {
        diag_error(a[2]->loc, "pct_start must be in [0, 1], got %s", arg_show(a[2]));
        return;
    }
    if (a[3]) {
        const char *v = a[3]->kind == E_NAME || a[3]->kind == E_STR ? a[3]->s : "";
        linear = strcmp(v, "linear") == 0;
        if (!linear && strcmp(v, "cos") != 0) {
            diag_error(a[3]->loc, "anneal_strategy must be cos or linear, got %s", arg_show(a[3]));
            return;
        }
    }
    if ((a[4] && !num_at_least(a[4], "div_factor", 0, 1, &div)) ||
        (a[5] && !num_at_least(a[5], "final_div_factor", 0, 1, &fdiv)))
        return;
    if (a[6] && !arg_bool(a[6], "three_phase", &three))
        return;
    if (a[7] && arg_bool(a[7], "cycle_momentum", &cyc) && cyc) {
        diag_error(a[7]->loc, "cycle_momentum = true is not supported: the momentum stays the optimizer's "
                   "(write cycle_momentum = false)");
        return;
    }
    const double v[] = {max_lr, (double)total, pct, linear, div, fdiv, three};
    memcpy(t->sched_v, v, sizeof v);
    t->sched_n = 7;
    t->sched = RT_SCHED_ONECYCLE;
}

/* step(step_size, gamma = 0.1) | cosine(T_max, eta_min = 0) | multistep |
 * exponential(gamma), stepped once an epoch as torch.optim.lr_scheduler's
 * StepLR, CosineAnnealingLR, MultiStepLR and ExponentialLR;
 * warmup_cosine | onecycle, stepped once an optimizer step. */
static void train_schedule(TrainCfg *t, const Expr *e)
{
    static const struct {
        const char *name, *example;
        const char *const names[10];
        int n;
    } scheds[] = {   /* sorted, as the list of them says */
        {"cosine", "cosine(T_max = 10)", {"T_max", "eta_min"}, 2},
        {"exponential", "exponential(gamma = 0.95)", {"gamma"}, 1},
        {"multistep", "multistep(milestones = (30, 80), gamma = 0.1)", {"milestones", "gamma"}, 2},
        {"onecycle", "onecycle(max_lr = 0.1)", {"max_lr", "total_steps", "pct_start", "anneal_strategy",
                                                 "div_factor", "final_div_factor", "three_phase",
                                                 "cycle_momentum", "epochs", "steps_per_epoch"}, 10},
        {"step", "step(step_size = 30, gamma = 0.1)", {"step_size", "gamma"}, 2},
        {"warmup_cosine", "warmup_cosine(warmup_steps = 500)", {"warmup_steps", "total_steps", "start_factor",
                                                               "eta_min"}, 4},
    };
    enum { NSCHED = sizeof scheds / sizeof scheds[0] };
    e = ours(e);
    const char *name = callee(e, "schedule");
    if (!name)
        return;
    int k = 0;
    while (k < NSCHED && strcmp(scheds[k].name, name) != 0)
        k++;
    if (k == NSCHED) {
        Near s = arg_near(name);
        for (int i = 0; i < NSCHED; i++)
            arg_near_try(&s, scheds[i].name);
        near_pytorch(&s);
        diag_error(e->loc, "unknown schedule '%s'%s (supported: cosine, exponential, multistep, onecycle, step, "
                   "warmup_cosine, or as PyTorch spells them: lr_scheduler.CosineAnnealingLR, ExponentialLR, "
                   "MultiStepLR, OneCycleLR, StepLR)", name, arg_near_hint(&s));
        return;
    }
    const Sig sig = {name, scheds[k].names, scheds[k].n, scheds[k].n, 1};
    Expr *a[10] = {NULL};
    if (e->kind != E_CALL) {
        diag_error(e->loc, "%s needs %s: schedule %s", name, scheds[k].names[0], scheds[k].example);
        return;
    }
    if (!arg_bind(e, &sig, a) || !a[0])
        return;
    const int step = strcmp(name, "step") == 0;
    if (strcmp(name, "multistep") == 0) {
        sched_multistep(t, a);
        return;
    }
    if (strcmp(name, "exponential") == 0) {
        if (num_at_least(a[0], "gamma", 0, 1, &t->gamma))
            t->sched = RT_SCHED_EXPONENTIAL;
        return;
    }
    if (strcmp(name, "warmup_cosine") == 0) {
        sched_warmup_cosine(t, a);
        return;
    }
    if (strcmp(name, "onecycle") == 0) {
        sched_onecycle(t, a);
        return;
    }
    int64_t n;
    if (!arg_int(a[0], step ? "step_size" : "T_max", 1, 1000000, &n))
        return;
    t->sched = step ? RT_SCHED_STEP : RT_SCHED_COSINE;
    if (step) {
        t->step_size = (double)n;
        t->gamma = 0.1;
        if (a[1])
            num_at_least(a[1], "gamma", 0, 1, &t->gamma);
    } else {
        t->t_max = (double)n;
        t->eta_min = 0;
        if (a[1])
            num_at_least(a[1], "eta_min", 0, 0, &t->eta_min);
    }
}

/* precision fp32 | bf16 | fp16: torch.autocast's dtype (fp32: no autocast). */
static void train_precision(TrainCfg *t, const Expr *e)
{
    static const char *const names[] = {"fp32", "bf16", "fp16"};   /* RT_PREC_* order */
    static const char *const alias[][2] = {{"float32", "fp32"}, {"bfloat16", "bf16"}, {"float16", "fp16"},
                                           {"half", "fp16"}, {"f32", "fp32"}, {"f16", "fp16"}};
    const char *v = e->kind == E_NAME || e->kind == E_STR ? e->s : NULL;
    if (v)
        for (int i = 0; i < 3; i++)
            if (strcmp(v, names[i]) == 0) {
                t->precision = i;
                return;
            }
    const char *hint = "";
    for (size_t i = 0; v && i < sizeof alias / sizeof alias[0]; i++)
        if (strcmp(v, alias[i][0]) == 0)
            hint = util_fmt("; did you mean '%s'?", alias[i][1]);
    diag_error(e->loc, "precision must be fp32, bf16 or fp16, got %s%s", arg_show(e), hint);
}

/* scaler dynamic(init_scale, growth_factor, backoff_factor,
 * growth_interval): torch.cuda.amp.GradScaler's arguments and defaults;
 * fp16 only. */
static void train_scaler(TrainCfg *t, const Expr *e)
{
    static const char *const names[] = {"init_scale", "growth_factor", "backoff_factor", "growth_interval"};
    const Sig sig = {"dynamic", names, 4, 0, 0};
    Expr *a[4] = {NULL};
    const char *name = callee(e, "scaler");
    if (!name)
        return;
    if (strcmp(name, "dynamic") != 0) {
        Near s = arg_near(name);
        arg_near_try(&s, "dynamic");
        diag_error(e->loc, "unknown loss scaler '%s'%s (supported: dynamic, GradScaler's)", name, arg_near_hint(&s));
        return;
    }
    if (e->kind == E_CALL && !arg_bind(e, &sig, a))
        return;
    double v;
    if (a[0] && num_at_least(a[0], "init_scale", 0, 1, &v)) {
        if (v > 3.4e38)
            diag_error(a[0]->loc, "init_scale must be a finite float, got %s", arg_show(a[0]));
        else
            t->init_scale = v;
    }
    if (a[1] && num_at_least(a[1], "growth_factor", 1, 1, &v))
        t->growth_factor = v;
    if (a[2] && arg_num(a[2], "backoff_factor", &v)) {
        if (v <= 0 || v >= 1)
            diag_error(a[2]->loc, "backoff_factor must be in (0, 1), got %s", arg_show(a[2]));
        else
            t->backoff_factor = v;
    }
    int64_t n;
    if (a[3] && arg_int(a[3], "growth_interval", 1, INT32_MAX, &n))
        t->growth_interval = n;
}

/* PyTorch habits: settings that live elsewhere, or under another name. */
static const char *moved_hint(const char *key, const Near *s)
{
    static const char *const moved[][2] = {
        {"lr", "; the learning rate is set in the optimizer: optimizer sgd(lr = 0.01)"},
        {"learning_rate", "; the learning rate is set in the optimizer: optimizer sgd(lr = 0.01)"},
        {"momentum", "; momentum is set in the optimizer: optimizer sgd(lr = 0.01, momentum = 0.9)"},
        {"weight_decay", "; weight decay is set in the optimizer: optimizer sgd(lr = 0.01, weight_decay = 1e-4)"},
        {"decay", "; the parameters weight decay applies to are set in the optimizer: "
                  "optimizer adamw(weight_decay = 0.1, decay = \"dim>=2\")"},
        {"batch_size", "; did you mean 'batch'?"},
        {"num_epochs", "; did you mean 'epochs'?"},
        {"dataset", "; did you mean 'data'?"},
        {"clip_grad_norm_", "; did you mean 'clip_grad_norm'?"},
        {"clip_grad_value_", "; did you mean 'clip_grad_value'?"},
        {"max_norm", "; gradient clipping is set as clip_grad_norm 1.0"},
        {"max_iters", "; did you mean 'max_steps'?"},
        {"gradient_accumulation_steps", "; did you mean 'accumulate'?"},
        {"accumulation_steps", "; did you mean 'accumulate'?"},
        {"lr_scheduler", "; did you mean 'schedule'?"},
        {"scheduler", "; did you mean 'schedule'?"},
    };
    for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++)
        if (strcmp(key, moved[i][0]) == 0)
            return moved[i][1];
    return arg_near_hint(s);
}

/* Finds the model named in the train block; -1 after reporting. */
static int train_model(const File *f, const Expr *e)
{
    if (e->kind != E_NAME) {
        diag_error(e->loc, "model must be the name of a model, got %s", arg_show(e));
        return -1;
    }
    if (f->nmodels == 0)           /* already reported: no model at all */
        return -1;
    Near s = arg_near(e->s);
    for (int i = 0; i < f->nmodels; i++) {
        if (strcmp(f->models[i]->name, e->s) == 0)
            return i;
        arg_near_try(&s, f->models[i]->name);
    }
    diag_error(e->loc, "unknown model '%s'%s", e->s, arg_near_hint(&s));
    return -1;
}

/* The train block: returns the index of its model, or -1. */
/* The train block being checked: what each key's function may need. */
typedef struct TrainCtx {
    const File *f;
    TrainCfg *t;
    int model;              /* index of the named model, or -1 */
} TrainCtx;

static void key_model(TrainCtx *c, const Expr *v) { c->model = train_model(c->f, v); }
static void key_data(TrainCtx *c, const Expr *v) { data_cfg_check(&c->t->data, v); }
static void key_loss(TrainCtx *c, const Expr *v) { train_loss(c->t, v); }
static void key_optimizer(TrainCtx *c, const Expr *v) { train_optimizer(c->t, v); }
static void key_schedule(TrainCtx *c, const Expr *v) { train_schedule(c->t, v); }
static void key_precision(TrainCtx *c, const Expr *v) { train_precision(c->t, v); }
static void key_scaler(TrainCtx *c, const Expr *v) { train_scaler(c->t, v); }
static void key_shuffle(TrainCtx *c, const Expr *v) { arg_bool(v, "shuffle", &c->t->shuffle); }
static void key_drop_last(TrainCtx *c, const Expr *v) { arg_bool(v, "drop_last", &c->t->drop_last); }
static void key_sync_batchnorm(TrainCtx *c, const Expr *v) { arg_bool(v, "sync_batchnorm", &c->t->sync_bn); }

static void key_batch(TrainCtx *c, const Expr *v)
{
    int64_t n;
    if (arg_int(v, "batch", 1, MAX_DIM, &n))
        c->t->batch = (int)n;
}

static void key_epochs(TrainCtx *c, const Expr *v)
{
    int64_t n;
    if (arg_int(v, "epochs", 1, 1000000, &n))
        c->t->epochs = (int)n;
}

/* max_steps N: stop after N optimizer steps (nanoGPT's max_iters), the
 * epoch's loss and the test pass then as after --max-steps */
static void key_max_steps(TrainCtx *c, const Expr *v)
{
    int64_t n;
    if (arg_int(v, "max_steps", 1, INT64_MAX, &n))
        c->t->max_steps = n;
}

static void key_seed(TrainCtx *c, const Expr *v)
{
    int64_t n;
    if (arg_int(v, "seed", 0, INT64_MAX, &n))
        c->t->seed = (uint64_t)n;
}

/* clip_grad_norm max_norm: torch.nn.utils.clip_grad_norm_(parameters,
 * max_norm) (norm_type 2) on the gradients averaged over the ranks, before
 * every optimizer step. */
static void key_clip_grad_norm(TrainCtx *c, const Expr *v)
{
    double x;
    if (!arg_num(v, "clip_grad_norm", &x))
        return;
    if (!(x > 0 && x <= 3.4e38))
        diag_error(v->loc, "clip_grad_norm must be a positive max_norm, got %s", arg_show(v));
    else
        c->t->clip_norm = x;
}

/* clip_grad_value v: torch.nn.utils.clip_grad_value_(parameters, v), each
 * gradient averaged over the ranks clamped to [-v, v], before every
 * optimizer step (before clip_grad_norm when both are set) */
static void key_clip_grad_value(TrainCtx *c, const Expr *v)
{
    double x;
    if (!arg_num(v, "clip_grad_value", &x))
        return;
    if (!(x > 0 && x <= 3.4e38))
        diag_error(v->loc, "clip_grad_value must be a positive clip_value, got %s", arg_show(v));
    else
        c->t->clip_value = x;
}

/* accumulate N: N micro-batches of `batch` rows per optimizer step */
static void key_accumulate(TrainCtx *c, const Expr *v)
{
    int64_t n;
    if (arg_int(v, "accumulate", 1, 65536, &n))
        c->t->accumulate = (int)n;
}

static void key_bucket_mb(TrainCtx *c, const Expr *v)
{
    double mb;
    if (arg_num(v, "bucket_mb", &mb)) {
        if (mb > 0 && mb <= 65536)
            c->t->bucket_mb = mb;
        else
            diag_error(v->loc, "bucket_mb must be a size in MB between 0 and 65536, got %g", mb);
    }
}

/* metric accuracy(out[1], y) | mse(out[0], y) | macro_f1(out, y): what
 * the evaluation reports, read in a loss block's scope (loss_block.c) */
static void key_metric(TrainCtx *c, const Expr *v)
{
    if (v->kind == E_CALL && (strcmp(v->s, "accuracy") == 0 || strcmp(v->s, "mse") == 0
                              || strcmp(v->s, "macro_f1") == 0)) {
        if (v->nargs != 2 || v->args[0]->key || v->args[1]->key)
            diag_error(v->loc, "%s takes the prediction and the targets: metric %s(out[1], y)", v->s, v->s);
        else
            c->t->metric = v;
        return;
    }
    diag_error(v->loc, "metric must be accuracy(PRED, TARGET), mse(PRED, TARGET) or macro_f1(LOGITS, TARGETS), got %s",
               arg_show(v));
}

/* The keys, in the order suggestions are tried. */
static const struct {
    const char *key;
    void (*check)(TrainCtx *c, const Expr *v);
} train_keys[] = {
    {"model", key_model},         {"data", key_data},           {"loss", key_loss},
    {"optimizer", key_optimizer}, {"batch", key_batch},         {"epochs", key_epochs},
    {"shuffle", key_shuffle},     {"seed", key_seed},           {"drop_last", key_drop_last},
    {"bucket_mb", key_bucket_mb}, {"schedule", key_schedule},   {"sync_batchnorm", key_sync_batchnorm},
    {"precision", key_precision}, {"scaler", key_scaler},
    {"clip_grad_norm", key_clip_grad_norm}, {"clip_grad_value", key_clip_grad_value}, {"accumulate", key_accumulate}, {"max_steps", key_max_steps},
    {"metric", key_metric},
};
enum { NTRAIN_KEYS = sizeof train_keys / sizeof train_keys[0] };

/* The keys sorted, comma-separated, for the message of an unknown one. */
static const char *key_list(void)
{
    const char *sorted[NTRAIN_KEYS];
    for (int k = 0; k < NTRAIN_KEYS; k++) {
        int j = k;
        for (; j > 0 && strcmp(sorted[j - 1], train_keys[k].key) > 0; j--)
            sorted[j] = sorted[j - 1];
        sorted[j] = train_keys[k].key;
    }
    const char *out = sorted[0];
    for (int k = 1; k < NTRAIN_KEYS; k++)
        out = util_fmt("%s, %s", out, sorted[k]);
    return out;
}

/* The item that set key, or NULL. */
static const TrainItem *setting(const TrainItem *const *seen, const char *key)
{
    for (int k = 0; k < NTRAIN_KEYS; k++)
        if (strcmp(train_keys[k].key, key) == 0)
            return seen[k];
    diag_ice("train block: no key '%s'", key);
}

int train_check(const File *f, const Train *tr, TrainCfg *t)
{
    *t = (TrainCfg){.reduction = RED_MEAN,
                    .lr = 0.01, .batch = 64, .epochs = 10, .shuffle = 1, .seed = 0, .bucket_mb = 25,
                    .init_scale = 65536, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2000,
                    .accumulate = 1, .loc = tr->loc};
    data_cfg_default(&t->data);
    const TrainItem *seen[NTRAIN_KEYS] = {0};
    TrainCtx c = {f, t, -1};
    for (int i = 0; i < tr->nitems; i++) {
        const TrainItem *it = tr->items[i];
        int k = 0;
        while (k < NTRAIN_KEYS && strcmp(train_keys[k].key, it->key) != 0)
            k++;
        if (k == NTRAIN_KEYS) {
            Near s = arg_near(it->key);
            for (int j = 0; j < NTRAIN_KEYS; j++)
                arg_near_try(&s, train_keys[j].key);
            diag_error(it->loc, "unknown train setting '%s'%s (supported: %s)", it->key, moved_hint(it->key, &s),
                       key_list());
            continue;
        }
        if (seen[k]) {
            diag_error(it->loc, "'%s' is set twice", it->key);
            diag_note(seen[k]->loc, "first set here");
            continue;
        }
        seen[k] = it;
        if (it->has_body && strcmp(it->key, "loss") != 0)
            diag_error(it->loc, "'%s' takes a value, not a block (only loss has one: loss(out, y) { ... })",
                       it->key);
        else if (it->has_body)
            t->loss_block = it;     /* run after forward, in the model's scope (forward.c) */
        else
            train_keys[k].check(&c, it->val);
    }
    const TrainItem *metric = setting(seen, "metric");
    if (metric && !t->loss_block)
        diag_error(metric->loc, "metric goes with a loss block (loss(out, y) { ... }), whose names it reads; a "
                   "one-line loss's metric follows the task");
    /* GradScaler scales fp16's gradients; bf16 has fp32's range */
    const TrainItem *prec = setting(seen, "precision"), *scaler = setting(seen, "scaler");
    if (scaler && !(prec && t->precision == RT_PREC_FP16))
        diag_error(scaler->loc, "a loss scaler needs 'precision fp16'%s",
                   prec && t->precision == RT_PREC_BF16 ? " (bf16 has fp32's range: no scaling needed)" : "");
    /* the norm would be of the scaled gradients (GradScaler.unscale_ first) */
    const TrainItem *clip = setting(seen, "clip_grad_norm");
    if (clip && t->clip_norm > 0 && prec && t->precision == RT_PREC_FP16)
        diag_error(clip->loc, "clip_grad_norm with precision fp16 is not supported yet");
    const TrainItem *clipv = setting(seen, "clip_grad_value");
    if (clipv && t->clip_value > 0 && prec && t->precision == RT_PREC_FP16)
        diag_error(clipv->loc, "clip_grad_value with precision fp16 is not supported yet");
    const TrainItem *accu = setting(seen, "accumulate");
    if (accu && t->accumulate > 1 && prec && t->precision == RT_PREC_FP16)
        diag_error(accu->loc, "accumulate with precision fp16 is not supported yet");
    if (!setting(seen, "model")) {
        if (f->nmodels == 1)
            diag_error(tr->loc, "the train block does not name a model (add 'model %s')", f->models[0]->name);
        else
            diag_error(tr->loc, "the train block does not name a model (add 'model NAME')");
    }
    if (c.model >= 0)
        t->model = f->models[c.model]->name;
    return c.model;
}

