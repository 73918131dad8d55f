/* rt_text.c: text("FILE", block = B, split = F, vocab = chars | bytes),
 * the data of a character language model, as nanoGPT's shakespeare_char
 * prepares it.
 *
 * The vocabulary: the sorted set of the file's characters (UTF-8 decoded,
 * sorted by code point as Python's sorted(set(text))), token i the i-th;
 * or vocab = bytes, the 256 byte values. The token stream t[0, L) is cut
 * into windows of B + 1 tokens at stride B, in file order: window i is
 * x = t[iB, iB + B) and y = t[iB + 1, iB + B + 1) (each position's target
 * the next token), so (L - 1) / B windows. split = F holds out the last
 * round(F n) windows as the test set: the file's tail, not a random
 * sample (neighbouring windows share their text; a random one would leak
 * it into the test set). shuffle permutes the training windows per epoch
 * as for any data set (DistributedSampler's semantics, rt_sampler.c). */
#include "rt_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The code point at s[*at] (advancing *at), or -1 for a byte that does
 * not begin a well-formed UTF-8 sequence (overlong forms, surrogates and
 * values past U+10FFFF are not). */
static int32_t utf8_next(const uint8_t *s, size_t n, size_t *at)
{
    const size_t i = *at;
    const uint8_t c = s[i];
    int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || i + (size_t)len > n)
        return -1;
    int32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80)
            return -1;
        cp = cp << 6 | (s[i + k] & 0x3F);
    }
    static const int32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *at = i + (size_t)len;
    return cp;
}

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* code point cp as UTF-8 into out (5 bytes with the NUL) */
static void utf8_put(int32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)), out[3] = 0;
    } else {
        out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F)), out[4] = 0;
    }
}

/* the file's tokens and vocabulary (names[i]: token i as text) */
static int tokenize(const rt_model *m, const char *path, const uint8_t *buf, size_t len, int32_t **tok,
                    int64_t *ntok, rt_classes *vocab)
{
    int32_t *t = rt_malloc((len ? len : 1) * sizeof *t);
    if (!t) {
        rt_err("%s: out of memory for %zu bytes of text", path, len);
        return -1;
    }
    int64_t n = 0;
    if (m->data.vocab_bytes) {
        for (size_t i = 0; i < len; i++)
            t[n++] = buf[i];
        vocab->n = 256;
    } else {
        for (size_t at = 0; at < len;) {
            const size_t here = at;
            const int32_t cp = utf8_next(buf, len, &at);
            if (cp < 0) {
                rt_err("%s: byte offset %zu: not UTF-8 (byte 0x%02x); the character vocabulary needs UTF-8 text "
                       "(or vocab = bytes)", path, here, buf[here]);
                free(t);
                return -1;
            }
            t[n++] = cp;
        }
        /* the distinct code points, sorted: each token's index by bisection */
        int32_t *cs = rt_malloc((size_t)n * sizeof *cs);
        if (!cs) {
            rt_err("%s: out of memory", path);
            free(t);
            return -1;
        }
        memcpy(cs, t, (size_t)n * sizeof *cs);
        qsort(cs, (size_t)n, sizeof *cs, cmp_i32);
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++)
            if (i == 0 || cs[i] != cs[k - 1])
                cs[k++] = cs[i];
        for (int64_t i = 0; i < n; i++) {
            const int32_t *at = bsearch(&t[i], cs, (size_t)k, sizeof *cs, cmp_i32);
            t[i] = (int32_t)(at - cs);
        }
        vocab->name = rt_calloc((size_t)k, sizeof *vocab->name);
        vocab->n = 0;       /* the names made: those to free */
        for (int64_t i = 0; vocab->name && i < k && (vocab->name[i] = rt_malloc(5)); i++) {
            utf8_put(cs[i], vocab->name[i]);
            vocab->n = (int)i + 1;
        }
        free(cs);
        if (vocab->n != k) {
            rt_err("%s: out of memory for the vocabulary", path);
            free(t);
            return -1;
        }
    }
    *tok = t;
    *ntok = n;
    return 0;
}

/* windows [w0, w1) of the stream into a data set: x the first B tokens of
 * each (floats, exact), y the next B (class indices) */
static int windows(const int32_t *t, int64_t B, int64_t w0, int64_t w1, const char *path, rt_dataset *s)
{
    const int64_t n = w1 - w0;
    s->n = n;
    s->xrank = 1;
    s->xdim[0] = s->xsize = B;
    s->ysize = B;
    s->x = rt_malloc((size_t)(n * B) * sizeof(float));
    s->y = rt_malloc((size_t)(n * B) * sizeof(int32_t));
    if (!s->x || !s->y) {
        rt_err("%s: out of memory for %lld windows of %lld tokens", path, (long long)n, (long long)B);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < B; k++) {
            ((float *)s->x)[i * B + k] = (float)t[(w0 + i) * B + k];
            ((int32_t *)s->y)[i * B + k] = t[(w0 + i) * B + k + 1];
        }
    return 0;
}

int rt_text_load(const rt_model *m, const char *path, rt_data *d)
{
    uint8_t *buf;
    size_t len;
    if (rt_data_read_file(path, &buf, &len) != 0)
        return -1;
    const int rc = rt_text_parse(m, path, buf, len, d);
    free(buf);
    return rc;
}

int rt_text_parse(const rt_model *m, const char *path, const uint8_t *buf, size_t len, rt_data *d)
{
    const int64_t B = m->data.block;
    if (!m->in_vocab || B < 1 || rt_model_in_elems(m) != B || rt_model_positions(m) != B) {
        rt_err("model '%s' is malformed: text data needs an input of i64[N, %lld] and a target at each position",
               m->name, (long long)B);
        return -1;
    }
    int32_t *t = NULL;
    int64_t L = 0;
    int rc = -1;
    if (len == 0) {
        rt_err("%s: the text is empty", path);
        goto out;
    }
    if (tokenize(m, path, buf, len, &t, &L, &d->vocab) != 0)
        goto out;
    if (!m->data.vocab_bytes && !d->vocab.name) {
        rt_err("%s: out of memory", path);
        goto out;
    }
    if (d->vocab.n > m->in_vocab || d->vocab.n > m->nclass) {
        rt_err("%s: the text has %d distinct characters, but model '%s' %s %lld: give its embeddings and its "
               "output %d rows (or more)", path, d->vocab.n, m->name,
               d->vocab.n > m->in_vocab ? "embeds tokens below" : "predicts classes below",
               (long long)(d->vocab.n > m->in_vocab ? m->in_vocab : m->nclass), d->vocab.n);
        goto out;
    }
    const int64_t n = (L - 1) / B;
    if (n < 1) {
        rt_err("%s: the text has %lld tokens, but a window of block %lld needs %lld", path, (long long)L,
               (long long)B, (long long)B + 1);
        goto out;
    }
    const double f = m->data.split;
    const int64_t ntest = f > 0 ? (int64_t)floor(f * (double)n + 0.5) : 0;
    if (f <= 0 || ntest < 1 || ntest >= n) {
        rt_err("%s: %lld windows of %lld tokens: %s", path, (long long)n, (long long)B,
               f <= 0 ? "text data needs split = F, the file's tail held out as the test set"
                      : "split leaves the training or the test set empty");
        goto out;
    }
    if (windows(t, B, 0, n - ntest, path, &d->train) != 0 || windows(t, B, n - ntest, n, path, &d->test) != 0)
        goto out;
    if (rt_world.rank == 0) {
        printf("text %s: %lld tokens, vocabulary %d%s; %lld windows of %lld: train %lld, test %lld (the last %g "
               "of the file)\n", path, (long long)L, d->vocab.n, m->data.vocab_bytes ? " (bytes)" : " characters",
               (long long)n, (long long)B, (long long)(n - ntest), (long long)ntest, f);
        if (!m->data.vocab_bytes) {
            printf("vocabulary (sorted): ");
            for (int i = 0; i < d->vocab.n; i++)
                printf("%s", d->vocab.name[i][0] == '\n' ? "\\n" : d->vocab.name[i]);
            printf("\n");
        }
    }
    rc = 0;
out:
    free(t);
    return rc;
}
