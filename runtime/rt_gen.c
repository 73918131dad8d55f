/* rt_gen.c: --generate N: a language model writes text (the CPU, one
 * sequence), as nanoGPT's sample.py does.
 *
 * The forward-only plan (rt_model.predict) runs on a window of the
 * model's T tokens: the last T of the prompt and what was written so far;
 * a shorter context sits at positions 0 .. L-1, the rest token 0, and the
 * next token is read from the logits at L-1 (exact for a causal model:
 * no position sees a later one). The next token is the argmax (temperature
 * 0: greedy, the first of equal maxima, as torch.argmax), or a draw from
 * softmax(logits / temperature) over the top_k largest, seeded by --seed.
 * The text maps to tokens through the vocabulary the training run saved
 * in the weights' file (data.vocab.I, text data's characters), or bytes. */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen_vocab {
    int n;
    char **s;               /* token i's characters (UTF-8); NULL: bytes */
} gen_vocab;

static void vocab_free(gen_vocab *v)
{
    for (int i = 0; v->s && i < v->n; i++)
        free(v->s[i]);
    free(v->s);
}

static int read_vocab(const rt_model *m, const char *path, gen_vocab *v)
{
    rt_st_kv *kv;
    int n;
    memset(v, 0, sizeof *v);
    if (rt_st_meta_prefix(path, "data.vocab.", &kv, &n) != 0)
        return -1;
    if (n == 0) {       /* vocab = bytes, or weights from elsewhere: bytes */
        v->n = 256;
        return 0;
    }
    v->n = n;
    v->s = rt_calloc((size_t)n, sizeof *v->s);
    int rc = v->s ? 0 : -1;
    if (rc)
        rt_err("%s: out of memory for its vocabulary", path);
    for (int i = 0; rc == 0 && i < n; i++) {
        char *e;
        long k = strtol(kv[i].key + strlen("data.vocab."), &e, 10);
        if (*e || k < 0 || k >= n || v->s[k] || !*kv[i].val) {
            rt_err("%s: corrupt metadata: \"%s\" (a vocabulary of %d)", path, kv[i].key, n);
            rc = -1;
        } else if (!(v->s[k] = rt_strdup(kv[i].val))) {
            rt_err("%s: out of memory for its vocabulary", path);
            rc = -1;
        }
    }
    rt_st_kv_free(kv, n);
    if (rc == 0 && (n > m->in_vocab || n > m->nclass)) {
        rt_err("%s: its vocabulary has %d tokens, but model '%s' takes %lld", path, n, m->name,
               (long long)m->in_vocab);
        rc = -1;
    }
    if (rc)
        vocab_free(v);
    return rc;
}

/* the prompt's tokens: characters of the vocabulary (longest first), or bytes */
static int encode(const gen_vocab *v, const char *prompt, int32_t **out, int64_t *n)
{
    const size_t len = strlen(prompt);
    int32_t *t = rt_malloc((len + 1) * sizeof *t);
    if (!t) {
        rt_err("out of memory for the prompt");
        return -1;
    }
    int64_t k = 0;
    for (size_t at = 0; at < len;) {
        int best = -1;
        size_t bl = 0;
        for (int i = 0; v->s && i < v->n; i++) {
            const size_t l = strlen(v->s[i]);
            if (l > bl && !strncmp(prompt + at, v->s[i], l))
                best = i, bl = l;
        }
        if (!v->s)
            best = (unsigned char)prompt[at], bl = 1;
        if (best < 0) {
            rt_err("--prompt: the character at byte %zu ('%.4s') is not in the model's vocabulary", at, prompt + at);
            free(t);
            return -1;
        }
        t[k++] = best;
        at += bl;
    }
    *out = t;
    *n = k;
    return 0;
}

/* the next token from logits x[V]; p[V] and s[V]: scratch (allocated once
 * per run, so that no token's choice depends on an allocation) */
static int pick(const float *x, int V, double temperature, int top_k, rt_rng *r, double *p, float *s)
{
    int best = 0;
    for (int j = 1; j < V; j++)
        if (x[j] > x[best])
            best = j;
    if (temperature <= 0)
        return best;
    /* the top_k largest (all when 0): the k-th largest as the threshold */
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(s, x, (size_t)V * sizeof *s);
        for (int i = 0; i < top_k; i++) {     /* a partial selection: top_k is small */
            int at = i;
            for (int j = i + 1; j < V; j++)
                if (s[j] > s[at])
                    at = j;
            float t = s[i];
            s[i] = s[at];
            s[at] = t;
        }
        kth = s[top_k - 1];
    }
    double sum = 0;
    for (int j = 0; j < V; j++) {
        p[j] = x[j] >= kth ? exp(((double)x[j] - (double)x[best]) / temperature) : 0.0;
        sum += p[j];
    }
    double u = rt_rng_uniform(r) * sum;
    int tok = best;
    for (int j = 0; j < V; j++) {
        if (p[j] > 0 && u < p[j]) {
            tok = j;
            break;
        }
        u -= p[j];
    }
    return tok;
}

int rt_generate(const rt_model *m, const rt_opts *o, const float *param)
{
    const rt_plan *p = m->predict;
    if (!p) {
        rt_err("model '%s' does not generate text: --generate needs a language model (forward(idx: i64[N, T]) "
               "returning [N, T, V] logits)", m->name);
        return -1;
    }
    gen_vocab v;
    if (read_vocab(m, o->gen_weights, &v) != 0)
        return -1;
    int32_t *prompt = NULL;
    int64_t L0 = 0;
    const int64_t T = rt_model_in_elems(m), V = m->nclass;
    if (encode(&v, o->prompt ? o->prompt : "", &prompt, &L0) != 0) {
        vocab_free(&v);
        return -1;
    }
    const int64_t n = L0 + o->generate;
    int32_t *seq = rt_malloc((size_t)(n + 1) * sizeof *seq);
    float *act = rt_alloc_n(p->act_units > 0 ? p->act_units : 1, sizeof(float), "the activations");
    float *fix = rt_alloc_n(p->fix_floats > 0 ? p->fix_floats : 1, sizeof(float), "the fixed arena");
    double *stat = rt_alloc_n(p->nstat > 0 ? p->nstat : 1, sizeof(double), "statistics");
    float *x = rt_calloc((size_t)T, sizeof *x), *scratch_s = rt_calloc((size_t)V + 1, sizeof *scratch_s);
    double *scratch_p = rt_calloc((size_t)V + 1, sizeof *scratch_p);
    int32_t y[1] = {0}, idx[1] = {0};
    const float norm[2] = {0.0f, 1.0f};
    int rc = -1;
    if (!seq || !act || !fix || !stat || !x || !scratch_s || !scratch_p)
        goto out;
    memcpy(seq, prompt, (size_t)L0 * sizeof *seq);
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.n = e.nmax = 1;
    e.act = act;
    e.fix = fix;
    e.param = (float *)param;
    e.stat = stat;
    e.x = x;
    e.y = y;
    e.norm = norm;
    e.norm_n = 1;
    e.idx = idx;
    e.x_size = T;
    e.y_size = T;
    e.norm_div = T;
    e.nthreads = 1;
    e.world = 1;
    e.seed = o->seed;
    e.scale = 1.0f;
    rt_rng r;
    rt_rng_init(&r, o->seed, rt_hash_str("generate"));
    for (int64_t at = L0; at < n; at++) {
        /* the context: the last T tokens, or all of them from position 0 */
        const int64_t from = at > T ? at - T : 0, L = at - from;
        for (int64_t k = 0; k < T; k++)     /* no prompt: the first token follows token 0 */
            x[k] = k < L ? (float)seq[from + k] : 0.0f;
        for (int k = 0; k < p->nk; k++)
            p->k[k].fn(&e);
        const float *logits = act + m->predict_out + (L > 0 ? L - 1 : 0) * V;
        seq[at] = pick(logits, (int)(V < v.n ? V : v.n), o->temperature, o->top_k, &r, scratch_p, scratch_s);
    }
    /* the prompt and what followed it, as text */
    for (int64_t k = 0; k < n; k++) {
        if (v.s)
            fputs(v.s[seq[k]], stdout);
        else
            putchar(seq[k]);
    }
    putchar('\n');
    fflush(stdout);
    rc = 0;
out:
    if (rc)
        rt_err("out of memory for generating");
    free(prompt);
    free(seq);
    rt_free(act);
    rt_free(fix);
    rt_free(stat);
    free(x);
    free(scratch_s);
    free(scratch_p);
    vocab_free(&v);
    return rc;
}
