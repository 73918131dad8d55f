/* rt_json.c: a small, strict JSON parser, just enough for safetensors
 * headers (objects, arrays, strings with escapes, numbers, literals).
 *
 * The header comes from a file we did not write, so everything is bounds
 * checked against the given length (no NUL terminator is assumed), nesting
 * is limited, and anything outside RFC 8259 is rejected with the byte
 * offset rather than guessed at. Nodes live in one growing array and are
 * linked by index; strings are decoded into a private copy of the text
 * (a decoded string is never longer than its source). */
#include "rt_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct parser {
    rt_json *j;
    const char *t;          /* source text */
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
} parser;

static int fail(parser *p, const char *fmt, ...) RT_PRINTF(2, 3);
static int fail(parser *p, const char *fmt, ...)
{
    if (!p->failed) {
        char msg[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(p->err, p->errlen, "%s at byte %zu", msg, p->pos);
        p->failed = 1;
    }
    return -1;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->t[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int new_node(parser *p, int type)
{
    rt_json *j = p->j;
    if (j->n == j->cap) {
        if (j->cap > (1 << 24))
            return fail(p, "too many JSON values");
        int cap = j->cap ? j->cap * 2 : 64;
        rt_jnode *nn = rt_realloc(j->nodes, (size_t)cap * sizeof *nn);
        if (!nn)
            return fail(p, "out of memory");
        j->nodes = nn;
        j->cap = cap;
    }
    rt_jnode *n = &j->nodes[j->n];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->child = n->next = -1;
    return j->n++;
}

static int hex4(parser *p, size_t at, unsigned *out)
{
    if (at + 4 > p->len)
        return fail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->t[at + i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail(p, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

/* Parses the string starting at the opening quote; the decoded bytes go
 * to the same offset in j->buf. */
static int parse_string(parser *p, const char **s, size_t *slen)
{
    p->pos++;                               /* opening quote */
    char *dst = p->j->buf + p->pos, *d = dst;
    for (;;) {
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->t[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return fail(p, "control character in string");
        if (c != '\\') {
            *d++ = (char)c;
            p->pos++;
            continue;
        }
        if (p->pos + 1 >= p->len)
            return fail(p, "unterminated escape");
        char e = p->t[p->pos + 1];
        p->pos += 2;
        switch (e) {
        case '"': *d++ = '"'; break;
        case '\\': *d++ = '\\'; break;
        case '/': *d++ = '/'; break;
        case 'b': *d++ = '\b'; break;
        case 'f': *d++ = '\f'; break;
        case 'n': *d++ = '\n'; break;
        case 'r': *d++ = '\r'; break;
        case 't': *d++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p, p->pos, &cp) != 0)
                return -1;
            p->pos += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(p, "unpaired low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p->pos + 2 > p->len || p->t[p->pos] != '\\' || p->t[p->pos + 1] != 'u')
                    return fail(p, "unpaired high surrogate in \\u escape");
                if (hex4(p, p->pos + 2, &lo) != 0)
                    return -1;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, "bad low surrogate in \\u escape");
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* UTF-8: at most 4 bytes, never more than the 6 or 12 read. */
            if (cp < 0x80) {
                *d++ = (char)cp;
            } else if (cp < 0x800) {
                *d++ = (char)(0xC0 | cp >> 6);
                *d++ = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *d++ = (char)(0xE0 | cp >> 12);
                *d++ = (char)(0x80 | (cp >> 6 & 0x3F));
                *d++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *d++ = (char)(0xF0 | cp >> 18);
                *d++ = (char)(0x80 | (cp >> 12 & 0x3F));
                *d++ = (char)(0x80 | (cp >> 6 & 0x3F));
                *d++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            p->pos -= 2;
            if ((unsigned char)e < 0x20 || (unsigned char)e >= 0x7F)    /* one line: no raw byte */
                return fail(p, "invalid escape: '\\' then byte 0x%02x", (unsigned char)e);
            return fail(p, "invalid escape '\\%c'", e);
        }
    }
    *s = dst;
    *slen = (size_t)(d - dst);
    return 0;
}

static int is_digit(parser *p, size_t at)
{
    return at < p->len && p->t[at] >= '0' && p->t[at] <= '9';
}

static int parse_number(parser *p, rt_jnode *n)
{
    size_t start = p->pos, i = p->pos;
    int neg = 0, integral = 1;
    if (i < p->len && p->t[i] == '-') {
        neg = 1;
        i++;
    }
    if (!is_digit(p, i))
        return fail(p, "invalid number");
    if (p->t[i] == '0' && is_digit(p, i + 1))
        return fail(p, "leading zero in number");
    while (is_digit(p, i))
        i++;
    if (i < p->len && p->t[i] == '.') {
        integral = 0;
        i++;
        if (!is_digit(p, i))
            return fail(p, "digit expected after '.'");
        while (is_digit(p, i))
            i++;
    }
    if (i < p->len && (p->t[i] == 'e' || p->t[i] == 'E')) {
        integral = 0;
        i++;
        if (i < p->len && (p->t[i] == '+' || p->t[i] == '-'))
            i++;
        if (!is_digit(p, i))
            return fail(p, "digit expected in exponent");
        while (is_digit(p, i))
            i++;
    }
    /* strtod needs a terminated copy; numbers in a header are short. */
    char tmp[64];
    size_t nlen = i - start;
    if (nlen >= sizeof tmp)
        return fail(p, "number too long");
    memcpy(tmp, p->t + start, nlen);
    tmp[nlen] = 0;
    n->num = strtod(tmp, NULL);
    if (integral && !neg) {
        /* Exact integer path: offsets above 2^53 must not be rounded. */
        uint64_t u = 0;
        int ok = 1;
        for (size_t k = start; k < i; k++) {
            unsigned dgt = (unsigned)(p->t[k] - '0');
            if (u > (UINT64_C(0x7FFFFFFFFFFFFFFF) - dgt) / 10) {
                ok = 0;
                break;
            }
            u = u * 10 + dgt;
        }
        n->is_uint = ok;
        n->u = ok ? u : 0;
    }
    p->pos = i;
    return 0;
}

static int literal(parser *p, const char *word)
{
    size_t l = strlen(word);
    if (p->pos + l > p->len || memcmp(p->t + p->pos, word, l) != 0) {
        unsigned char c = (unsigned char)p->t[p->pos];
        if (c < 0x20 || c >= 0x7F)
            return fail(p, "unexpected byte 0x%02x", c);
        return fail(p, "unexpected character '%c'", c);
    }
    p->pos += l;
    return 0;
}

static int parse_value(parser *p, int depth);

/* Parses an array or object body; `obj` selects which. */
static int parse_container(parser *p, int self, int depth, int obj)
{
    char close = obj ? '}' : ']';
    int last = -1;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->t[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t klen = 0;
        if (obj) {
            skip_ws(p);
            if (p->pos >= p->len || p->t[p->pos] != '"')
                return fail(p, p->pos >= p->len ? "unexpected end of header"
                                                : "object key (a string) expected");
            if (parse_string(p, &key, &klen) != 0)
                return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->t[p->pos] != ':')
                return fail(p, "':' expected after object key");
            p->pos++;
        }
        int c = parse_value(p, depth + 1);
        if (c < 0)
            return -1;
        rt_jnode *cn = &p->j->nodes[c];
        cn->key = key;
        cn->klen = klen;
        if (last < 0)
            p->j->nodes[self].child = c;
        else
            p->j->nodes[last].next = c;
        p->j->nodes[self].nchild++;
        last = c;
        skip_ws(p);
        if (p->pos >= p->len)
            return fail(p, "unexpected end of header");
        char ch = p->t[p->pos];
        p->pos++;
        if (ch == close)
            return 0;
        if (ch != ',') {
            p->pos--;
            return fail(p, obj ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
}

/* Returns the new node's index or -1. */
static int parse_value(parser *p, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(p, "nesting deeper than %d", MAX_DEPTH);
    skip_ws(p);
    if (p->pos >= p->len)
        return fail(p, "unexpected end of header");
    char c = p->t[p->pos];
    int id;
    switch (c) {
    case '{':
    case '[':
        if ((id = new_node(p, c == '{' ? RT_J_OBJ : RT_J_ARR)) < 0)
            return -1;
        return parse_container(p, id, depth, c == '{') < 0 ? -1 : id;
    case '"': {
        const char *s;
        size_t sl;
        if ((id = new_node(p, RT_J_STR)) < 0 || parse_string(p, &s, &sl) != 0)
            return -1;
        p->j->nodes[id].s = s;
        p->j->nodes[id].slen = sl;
        return id;
    }
    case 't':
    case 'f':
        if ((id = new_node(p, RT_J_BOOL)) < 0 || literal(p, c == 't' ? "true" : "false") != 0)
            return -1;
        p->j->nodes[id].u = c == 't';
        return id;
    case 'n':
        if ((id = new_node(p, RT_J_NULL)) < 0 || literal(p, "null") != 0)
            return -1;
        return id;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            if ((id = new_node(p, RT_J_NUM)) < 0 || parse_number(p, &p->j->nodes[id]) != 0)
                return -1;
            return id;
        }
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7F)
            return fail(p, "unexpected byte 0x%02x", (unsigned char)c);
        return fail(p, "unexpected character '%c'", c);
    }
}

int rt_json_parse(rt_json *j, const char *text, size_t len, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    parser p = { j, text, len, 0, err, errlen, 0 };
    j->buf = rt_malloc(len ? len : 1);
    if (!j->buf) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(j->buf, text, len);
    if (parse_value(&p, 0) < 0)
        goto bad;
    skip_ws(&p);
    /* NUL padding is not valid JSON, but say so explicitly: it is the
     * usual sign of a header length that overshoots the real header. */
    if (p.pos < len) {
        fail(&p, text[p.pos] == 0 ? "NUL byte after the JSON value"
                                  : "unexpected data after the JSON value");
        goto bad;
    }
    return 0;
bad:
    rt_json_free(j);
    return -1;
}

void rt_json_free(rt_json *j)
{
    free(j->nodes);
    free(j->buf);
    memset(j, 0, sizeof *j);
}

int rt_json_keyeq(const rt_jnode *n, const char *key)
{
    size_t l = strlen(key);
    return n->key && n->klen == l && memcmp(n->key, key, l) == 0;
}

int rt_json_streq(const rt_jnode *n, const char *s)
{
    size_t l = strlen(s);
    return n->type == RT_J_STR && n->slen == l && memcmp(n->s, s, l) == 0;
}

int rt_json_get(const rt_json *j, int obj, const char *key)
{
    if (obj < 0 || obj >= j->n || j->nodes[obj].type != RT_J_OBJ)
        return -1;
    for (int c = j->nodes[obj].child; c >= 0; c = j->nodes[c].next)
        if (rt_json_keyeq(&j->nodes[c], key))
            return c;
    return -1;
}
