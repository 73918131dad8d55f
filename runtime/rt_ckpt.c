/* rt_ckpt.c: --checkpoint and --resume.
 *
 * A checkpoint is one safetensors file, written by rank 0 atomically (temp
 * file, fsync, rename, directory fsync: rt_st_save_kv), that holds
 *   - the parameters and buffers under their PyTorch state_dict names, so
 *     it loads into the PyTorch module (and through --init) like --save
 *     (batch norm's num_batches_tracked as I64, as PyTorch keeps it);
 *   - the optimizer state as tensors named "optimizer.<param>.<slot>"
 *     (momentum_buffer for SGD, exp_avg and exp_avg_sq for Adam: the
 *     names of PyTorch's optimizer state), shaped as the parameter;
 *   - the training state in __metadata__ (strings, doubles in C's exact
 *     hexadecimal form): the epoch to continue, the optimizer steps taken,
 *     the batches of that epoch already trained, the epoch's loss and row
 *     sums and time so far, and the sampler's settings; for fp16 models
 *     also GradScaler's state (scale, growth tracker), the steps it
 *     skipped and the optimizer steps taken (Adam's t).
 * That is the whole state of a run: the sample order is a pure function
 * of (seed, epoch) and initialization happens before the first step, so
 * with (seed, epoch, batches done) the sampler resumes exactly where it
 * stopped, and a run killed at any point and resumed from its last
 * checkpoint ends with the same weights, bit for bit, as one never
 * interrupted (the kernels are deterministic for a given thread count).
 * Loading checks everything before using anything: the tensors (names,
 * dtypes, shapes, the file's integrity: rt_st_load, whose checksums cover
 * the header and so this training state too), the model, the optimizer
 * state's size, the state's own consistency, and, for a checkpoint taken
 * inside an epoch, the sampler settings that give "batches done" its
 * meaning (rt_loop then holds "batches done" and the rows to the epoch's
 * batches). */
#include "rt_internal.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { K_FORMAT, K_EPOCH, K_STEP, K_SKIP, K_LOSS, K_ROWS, K_SECS, K_BATCH, K_WORLD, K_SEED,
       K_SHUFFLE, K_DROP, K_OPT, K_MODEL, NK };
static const char *const keys[NK] = {
    "cddp.checkpoint", "cddp.epoch", "cddp.step", "cddp.skip", "cddp.loss_sum", "cddp.rows",
    "cddp.seconds", "cddp.batch", "cddp.world", "cddp.seed", "cddp.shuffle", "cddp.drop_last",
    "cddp.optimizer_floats", "model",
};
#define FORMAT "1"

/* fp16 models only (older checkpoints and other precisions lack them) */
enum { A_SCALE, A_TRACKER, A_SKIPPED, A_OPT_STEPS, NA };
static const char *const amp_keys[NA] = {"cddp.amp.scale", "cddp.amp.growth_tracker", "cddp.amp.skipped",
                                         "cddp.optimizer_steps"};

/* The model with the optimizer state's slots as extra "parameters" over
 * one slab [param | opt], so rt_st_save/rt_st_load write and check them
 * like the rest. */
typedef struct ck_model {
    rt_model m;
    rt_param *p;
    int *flags;             /* the model's, then 0: optimizer state is F32 */
    char **names;
    int np;
    float *slab;
} ck_model;

static void ck_free(ck_model *c)
{
    for (int i = 0; c->names && i < c->np; i++)
        free(c->names[i]);
    free(c->names);
    free(c->p);
    free(c->flags);
    rt_free(c->slab);
    memset(c, 0, sizeof *c);
}

/* Name s of the comma-separated list (rt_model.opt_state), or "stateS". */
static void slot_name(const char *list, int s, char *out, size_t cap)
{
    snprintf(out, cap, "state%d", s);
    for (int i = 0; list && *list; i++) {
        size_t n = strcspn(list, ",");
        if (i == s && n > 0 && n < cap) {
            memcpy(out, list, n);
            out[n] = 0;
            return;
        }
        list += n + (list[n] == ',');
    }
}

static int ck_build(const rt_model *m, ck_model *c)
{
    memset(c, 0, sizeof *c);
    /* opt is nslot copies of the param layout (SGD momentum: one) */
    int nslot = m->opt_floats == 0 ? 0
                : m->param_floats > 0 && m->opt_floats % m->param_floats == 0
                    ? (int)(m->opt_floats / m->param_floats) : -1;
    /* buffers (batch norm statistics) are never updated: no state */
    int trained = 0;
    for (int i = 0; i < m->nparam; i++)     /* a tied weight's state is its target's */
        trained += !(rt_param_flags(m, i) & (RT_PARAM_BUFFER | RT_PARAM_ALIAS));
    int extra = nslot >= 0 ? trained * nslot : 1;
    c->np = m->nparam + extra;
    c->p = rt_calloc((size_t)c->np + 1, sizeof *c->p);
    c->flags = rt_calloc((size_t)c->np + 1, sizeof *c->flags);
    c->names = rt_calloc((size_t)c->np + 1, sizeof *c->names);
    c->slab = rt_alloc((size_t)(m->param_floats + m->opt_floats) * sizeof(float), "the checkpoint");
    if (!c->p || !c->flags || !c->names || !c->slab) {
        rt_err("out of memory for the checkpoint");
        ck_free(c);
        return -1;
    }
    memcpy(c->p, m->params, (size_t)m->nparam * sizeof *c->p);
    for (int i = 0; i < m->nparam; i++)
        c->flags[i] = rt_param_flags(m, i);
    int k = m->nparam;
    if (nslot < 0) {            /* an unknown layout: one flat tensor */
        rt_param *q = &c->p[k];
        q->name = c->names[k] = rt_strdup("optimizer.state");
        q->rank = 1;
        q->shape[0] = q->numel = m->opt_floats;
        q->off = m->param_floats;
        k++;
    }
    for (int s = 0; s < nslot; s++)
        for (int i = 0; i < m->nparam; i++) {
            if (rt_param_flags(m, i) & (RT_PARAM_BUFFER | RT_PARAM_ALIAS))
                continue;
            const rt_param *p = &m->params[i];
            rt_param *q = &c->p[k];
            size_t len = strlen(p->name) + 32;
            char slot[64];
            slot_name(m->opt_state, s, slot, sizeof slot);
            len += strlen(slot);
            if ((c->names[k] = rt_malloc(len)))
                snprintf(c->names[k], len, "optimizer.%s.%s", p->name, slot);
            *q = *p;
            q->name = c->names[k];
            q->off = m->param_floats * (1 + s) + p->off;
            k++;
        }
    for (int i = m->nparam; i < c->np; i++)
        if (!c->names[i]) {
            rt_err("out of memory for the checkpoint");
            ck_free(c);
            return -1;
        }
    c->m = *m;
    c->m.params = c->p;
    c->m.param_flags = c->flags;
    c->m.nparam = c->np;
    c->m.param_floats = m->param_floats + m->opt_floats;
    return 0;
}

int rt_ckpt_save(const rt_model *m, const rt_opts *o, const char *path, const float *param,
                 const float *opt, const rt_resume *st)
{
    if (rt_world.rank != 0)
        return 0;       /* every rank holds the same state: rank 0 writes it */
    ck_model c;
    if (ck_build(m, &c) != 0)
        return -1;
    memcpy(c.slab, param, (size_t)m->param_floats * sizeof(float));
    memcpy(c.slab + m->param_floats, opt, (size_t)m->opt_floats * sizeof(float));
    rt_st_kv kv[NK];
    for (int i = 0; i < NK; i++)
        kv[i].key = keys[i];
    snprintf(kv[K_FORMAT].val, sizeof kv[0].val, FORMAT);
    snprintf(kv[K_EPOCH].val, sizeof kv[0].val, "%d", st->epoch);
    snprintf(kv[K_STEP].val, sizeof kv[0].val, "%lld", (long long)st->step);
    snprintf(kv[K_SKIP].val, sizeof kv[0].val, "%lld", (long long)st->skip);
    snprintf(kv[K_LOSS].val, sizeof kv[0].val, "%a", st->loss_sum);
    snprintf(kv[K_ROWS].val, sizeof kv[0].val, "%a", st->rows);
    snprintf(kv[K_SECS].val, sizeof kv[0].val, "%a", st->secs);
    snprintf(kv[K_BATCH].val, sizeof kv[0].val, "%d", o->batch);
    snprintf(kv[K_WORLD].val, sizeof kv[0].val, "%d", rt_world.size);
    snprintf(kv[K_SEED].val, sizeof kv[0].val, "%llu", (unsigned long long)o->seed);
    snprintf(kv[K_SHUFFLE].val, sizeof kv[0].val, "%d", o->shuffle);
    snprintf(kv[K_DROP].val, sizeof kv[0].val, "%d", o->drop_last);
    snprintf(kv[K_OPT].val, sizeof kv[0].val, "%lld", (long long)m->opt_floats);
    /* "model" (kv[K_MODEL]) is the header's own: the amp keys take its
     * place; then the data's (an evaluation from a checkpoint uses them) */
    rt_st_kv *all = rt_malloc(sizeof *all * (size_t)(NK - 1 + NA + o->ndata_meta));
    if (!all) {
        rt_err("out of memory for the checkpoint");
        ck_free(&c);
        return -1;
    }
    memcpy(all, kv, sizeof kv[0] * K_MODEL);
    int nkv = K_MODEL;
    if (m->precision == RT_PREC_FP16) {
        for (int i = 0; i < NA; i++)
            all[K_MODEL + i].key = amp_keys[i];
        snprintf(all[K_MODEL + A_SCALE].val, sizeof kv[0].val, "%a", (double)st->scale);
        snprintf(all[K_MODEL + A_TRACKER].val, sizeof kv[0].val, "%lld", (long long)st->tracker);
        snprintf(all[K_MODEL + A_SKIPPED].val, sizeof kv[0].val, "%lld", (long long)st->skipped);
        snprintf(all[K_MODEL + A_OPT_STEPS].val, sizeof kv[0].val, "%lld", (long long)st->opt_steps);
        nkv += NA;
    }
    if (o->ndata_meta > 0) {
        memcpy(all + nkv, o->data_meta, sizeof *all * (size_t)o->ndata_meta);
        nkv += o->ndata_meta;
    }
    int rc = rt_st_save_kv(&c.m, path, c.slab, all, nkv);
    free(all);
    ck_free(&c);
    return rc;
}

/* A metadata number: the whole string must parse. */
static int num(const char *path, const rt_st_kv *kv, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(kv->val, &end);
    if (!*kv->val || *end || errno || !isfinite(*out)) {
        rt_err("%s: corrupt checkpoint: \"%s\" is \"%s\", not a number", path, kv->key, kv->val);
        return -1;
    }
    return 0;
}

/* cddp writes no control character into its metadata, and the values go
 * into one-line messages: a line break there is damage */
static int one_line(const char *path, const rt_st_kv *kv, int n)
{
    for (int i = 0; i < n; i++)
        for (const char *c = kv[i].val; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                rt_err("%s: corrupt metadata: \"%s\" holds a control character", path, kv[i].key);
                return -1;
            }
    return 0;
}

int rt_ckpt_load(const rt_model *m, const rt_opts *o, const char *path, float *param, float *opt,
                 rt_resume *st)
{
    memset(st, 0, sizeof *st);
    rt_st_kv kv[NK];
    for (int i = 0; i < NK; i++)
        kv[i].key = keys[i];
    /* the metadata first: a plain --save file is told apart clearly */
    if (rt_st_load_meta(path, kv, 1) != 0 || one_line(path, kv, 1) != 0)
        return -1;
    if (strcmp(kv[K_FORMAT].val, FORMAT) != 0) {
        rt_err("%s: checkpoint format %s; this program reads format " FORMAT, path, kv[K_FORMAT].val);
        return -1;
    }
    if (rt_st_load_meta(path, kv, NK) != 0 || one_line(path, kv, NK) != 0)
        return -1;
    if (strcmp(kv[K_MODEL].val, m->name ? m->name : "") != 0) {
        rt_err("%s: a checkpoint of model '%s'; this program trains '%s'", path, kv[K_MODEL].val,
               m->name ? m->name : "");
        return -1;
    }
    double v[NK];
    for (int i = K_EPOCH; i < K_MODEL; i++)
        if (num(path, &kv[i], &v[i]) != 0)
            return -1;
    if (v[K_OPT] != (double)m->opt_floats) {
        rt_err("%s: the checkpoint's optimizer state is %.0f floats, this program's is %lld "
               "(another optimizer or model)", path, v[K_OPT], (long long)m->opt_floats);
        return -1;
    }
    if (v[K_EPOCH] < 1 || v[K_EPOCH] > 1e9 || v[K_STEP] < 0 || v[K_SKIP] < 0 || v[K_ROWS] < 0 ||
        v[K_STEP] != floor(v[K_STEP]) || v[K_SKIP] != floor(v[K_SKIP]) || v[K_STEP] > 1e15 || v[K_SKIP] > 1e15) {
        rt_err("%s: corrupt checkpoint: epoch %s, step %s, skip %s", path, kv[K_EPOCH].val,
               kv[K_STEP].val, kv[K_SKIP].val);
        return -1;
    }
    /* the epoch's sums so far: none before its first batch (after it,
     * rt_loop holds the rows to the batches done), time not negative */
    if ((v[K_SKIP] == 0 && (v[K_ROWS] != 0 || v[K_LOSS] != 0)) || v[K_SECS] < 0) {
        rt_err("%s: corrupt checkpoint: %s batches done with %s rows, loss sum %s, %s s", path, kv[K_SKIP].val,
               kv[K_ROWS].val, kv[K_LOSS].val, kv[K_SECS].val);
        return -1;
    }
    /* Inside an epoch, "batches done" counts batches of this sampler. */
    int same = v[K_BATCH] == o->batch && v[K_WORLD] == rt_world.size &&
               v[K_SEED] == (double)o->seed && v[K_SHUFFLE] == o->shuffle && v[K_DROP] == o->drop_last;
    if (!same && v[K_SKIP] > 0) {
        rt_err("%s: the checkpoint was taken inside epoch %s, with batch %s on %s rank(s), seed %s, "
               "shuffle %s, drop_last %s; resuming there needs the same (this run: batch %d on %d, "
               "seed %llu, shuffle %d, drop_last %d)", path, kv[K_EPOCH].val, kv[K_BATCH].val,
               kv[K_WORLD].val, kv[K_SEED].val, kv[K_SHUFFLE].val, kv[K_DROP].val, o->batch,
               rt_world.size, (unsigned long long)o->seed, o->shuffle, o->drop_last);
        return -1;
    }
    if (!same)
        rt_warn("%s: resuming with other sampler settings than the checkpoint's (batch %s on %s "
                "rank(s), seed %s): the run goes on, but not as the original would have", path,
                kv[K_BATCH].val, kv[K_WORLD].val, kv[K_SEED].val);
    /* fp16: the loss scaler's state */
    rt_st_kv akv[NA];
    double av[NA] = {1, 0, 0, v[K_STEP]};
    for (int i = 0; i < NA; i++)
        akv[i].key = amp_keys[i];
    if (m->precision == RT_PREC_FP16) {
        if (rt_st_load_meta(path, akv, NA) != 0)
            return -1;
        for (int i = 0; i < NA; i++)
            if (num(path, &akv[i], &av[i]) != 0)
                return -1;
        if (!(av[A_SCALE] > 0) || av[A_TRACKER] < 0 || av[A_SKIPPED] < 0 || av[A_OPT_STEPS] < 0 ||
            av[A_OPT_STEPS] + av[A_SKIPPED] != v[K_STEP]) {
            rt_err("%s: corrupt checkpoint: loss scale %s, growth tracker %s, %s skipped + %s taken != %s steps",
                   path, akv[A_SCALE].val, akv[A_TRACKER].val, akv[A_SKIPPED].val, akv[A_OPT_STEPS].val,
                   kv[K_STEP].val);
            return -1;
        }
    }
    /* the tensors, all checked before any is used */
    ck_model c;
    if (ck_build(m, &c) != 0)
        return -1;
    int rc = rt_st_load(&c.m, path, c.slab);
    if (rc == 0) {
        memcpy(param, c.slab, (size_t)m->param_floats * sizeof(float));
        memcpy(opt, c.slab + m->param_floats, (size_t)m->opt_floats * sizeof(float));
        st->active = 1;
        st->epoch = (int)v[K_EPOCH];
        st->step = (int64_t)v[K_STEP];
        st->skip = (int64_t)v[K_SKIP];
        st->loss_sum = v[K_LOSS];
        st->rows = v[K_ROWS];
        st->secs = v[K_SECS];
        st->scale = (float)av[A_SCALE];
        st->tracker = (int64_t)av[A_TRACKER];
        st->skipped = (int64_t)av[A_SKIPPED];
        st->opt_steps = (int64_t)av[A_OPT_STEPS];
    }
    ck_free(&c);
    return rc;
}

/* Rank 0's state to every rank, as doubles (exact for these values). */
/* Rank 0's saved data (rt_data_saved_read of the checkpoint: a resumed
 * run normalizes and maps labels as it started) to every rank: the counts,
 * the means and stds, then each class name with its length. -1 after an
 * error (out of memory). */
int rt_ckpt_bcast_data(rt_data_saved *sv)
{
    const char *what = "the checkpoint's data broadcast";
    int32_t n[2] = {sv->norm_n, sv->classes.n};
    rt_comm_bcast_bytes(n, sizeof n, what);
    if (rt_world.rank != 0) {
        rt_data_saved_free(sv);
        sv->norm_n = n[0];
        sv->classes.n = n[1];
        if ((n[0] && !(sv->norm = rt_calloc(2 * (size_t)n[0], sizeof(float)))) ||
            (n[1] && !(sv->classes.name = rt_calloc((size_t)n[1], sizeof(char *))))) {
            rt_err("out of memory");
            return -1;
        }
    }
    if (n[0])
        rt_comm_bcast_bytes(sv->norm, 2 * (int64_t)n[0] * (int64_t)sizeof(float), what);
    for (int i = 0; i < n[1]; i++) {
        int32_t len = rt_world.rank == 0 ? (int32_t)strlen(sv->classes.name[i]) + 1 : 0;
        rt_comm_bcast_bytes(&len, sizeof len, what);
        if (rt_world.rank != 0 && !(sv->classes.name[i] = rt_malloc((size_t)len))) {
            rt_err("out of memory");
            return -1;
        }
        rt_comm_bcast_bytes(sv->classes.name[i], len, what);
    }
    return 0;
}

void rt_ckpt_bcast(rt_resume *st)
{
    double v[11] = {st->active, st->epoch, (double)st->step, (double)st->skip, st->loss_sum,
                    st->rows, st->secs, (double)st->opt_steps, st->scale, (double)st->tracker,
                    (double)st->skipped};
    rt_comm_bcast_bytes(v, sizeof v, "the checkpoint's state broadcast");
    st->active = (int)v[0];
    st->epoch = (int)v[1];
    st->step = (int64_t)v[2];
    st->skip = (int64_t)v[3];
    st->loss_sum = v[4];
    st->rows = v[5];
    st->secs = v[6];
    st->opt_steps = (int64_t)v[7];
    st->scale = (float)v[8];
    st->tracker = (int64_t)v[9];
    st->skipped = (int64_t)v[10];
}
