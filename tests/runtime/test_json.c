/* test_json.c: unit tests of the runtime's JSON parser (rt_json.c), the
 * part of the safetensors reader that sees untrusted bytes first. Each
 * malformed input must be rejected with a reason, never read out of
 * bounds (run under ASan via SAN=1), and valid ones must decode exactly. */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>

static int fails;

static void check(int ok, const char *what)
{
    printf("%s json: %s\n", ok ? "PASS" : "FAIL", what);
    fails += !ok;
}

/* Parses text (without its NUL, so reads past the end are caught). */
static int parse(rt_json *j, const char *text, char *err)
{
    size_t n = strlen(text);
    char *copy = malloc(n ? n : 1);
    memcpy(copy, text, n);
    int rc = rt_json_parse(j, copy, n, err, 256);
    free(copy);
    return rc;
}

static void bad(const char *text, const char *want_in_msg)
{
    rt_json j;
    char err[256] = "";
    int rc = parse(&j, text, err);
    char what[200];
    snprintf(what, sizeof what, "rejects %.60s (%s)", text, err);
    check(rc != 0 && strstr(err, want_in_msg) != NULL, what);
    if (rc == 0)
        rt_json_free(&j);
}

int main(void)
{
    rt_json j;
    char err[256];

    /* A realistic header, with padding and escapes. */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[10,784],"
                    "\"data_offsets\":[0,31360]},"
                    "\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00\\n\":{\"x\":[true,false,null,-1.5e3,0]}}   ";
    check(parse(&j, h, err) == 0, "parses a safetensors header");
    int w = rt_json_get(&j, 0, "fc1.weight");
    check(w > 0 && j.nodes[w].type == RT_J_OBJ, "finds a tensor entry");
    int s = rt_json_get(&j, w, "shape");
    check(s > 0 && j.nodes[s].nchild == 2 && j.nodes[j.nodes[s].child].u == 10 &&
              j.nodes[j.nodes[j.nodes[s].child].next].u == 784, "shape [10,784]");
    check(rt_json_streq(&j.nodes[rt_json_get(&j, w, "dtype")], "F32"), "dtype string");
    check(rt_json_get(&j, 0, "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80\n") > 0,
          "decodes escapes, \\u and surrogate pairs to UTF-8");
    int x = rt_json_get(&j, rt_json_get(&j, 0, "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80\n"), "x");
    int c = j.nodes[x].child;
    check(j.nodes[c].type == RT_J_BOOL && j.nodes[c].u == 1, "true");
    c = j.nodes[c].next;
    check(j.nodes[c].type == RT_J_BOOL && j.nodes[c].u == 0, "false");
    c = j.nodes[c].next;
    check(j.nodes[c].type == RT_J_NULL, "null");
    c = j.nodes[c].next;
    check(j.nodes[c].type == RT_J_NUM && !j.nodes[c].is_uint && j.nodes[c].num == -1500.0,
          "negative float with exponent");
    c = j.nodes[c].next;
    check(j.nodes[c].is_uint && j.nodes[c].u == 0, "zero");
    check(rt_json_get(&j, 0, "missing") < 0, "absent key gives -1");
    rt_json_free(&j);

    check(parse(&j, "[9007199254740993]", err) == 0 &&
              j.nodes[j.nodes[0].child].u == 9007199254740993ull,
          "integers above 2^53 stay exact");
    rt_json_free(&j);
    check(parse(&j, "{}", err) == 0 && j.nodes[0].nchild == 0, "empty object");
    rt_json_free(&j);

    bad("", "unexpected end");
    bad("{", "unexpected end");
    bad("{\"a\":1", "unexpected end");
    bad("{\"a\" 1}", "':' expected");
    bad("{\"a\":1,}", "object key");
    bad("{a:1}", "object key");
    bad("[1 2]", "',' or ']'");
    bad("[1,]", "unexpected character");
    bad("\"abc", "unterminated string");
    bad("\"a\\", "unterminated escape");
    bad("\"\\x\"", "invalid escape");
    bad("\"\\u12zz\"", "hex digit");
    bad("\"\\u12", "truncated \\u");
    bad("\"\\ud800\"", "unpaired high surrogate");
    bad("\"\\udc00\"", "unpaired low surrogate");
    bad("\"a\tb\"", "control character");
    bad("01", "leading zero");
    bad("-", "invalid number");
    bad("1.", "digit expected");
    bad("1e", "digit expected");
    bad("tru", "unexpected character");
    bad("{} {}", "unexpected data after");
    bad("{}\x01", "unexpected data after");
    {
        /* NUL padding: the typical result of an overlong header length. */
        char t[] = {'{', '}', 0, 0};
        char e2[256];
        int rc = rt_json_parse(&j, t, sizeof t, e2, sizeof e2);
        check(rc != 0 && strstr(e2, "NUL byte"), "rejects NUL padding");
    }
    {
        char deep[200];
        memset(deep, '[', sizeof deep - 1);
        deep[sizeof deep - 1] = 0;
        bad(deep, "nesting deeper");
    }
    bad("\x80", "unexpected byte");

    printf("%s\n", fails ? "json: FAILED" : "json: all passed");
    return fails != 0;
}
