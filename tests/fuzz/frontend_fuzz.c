/* tests/fuzz/frontend_fuzz.c: libFuzzer's entry into the compiler. Each
 * input is a model file's text, taken through everything `cddpc MODEL.net
 * -o X` does short of running the C compiler: lexer, parser, semantic
 * checks, graph, autodiff, fusion, memory plan, the verifiers between them
 * and the emission of the C and CUDA source (in memory). Diagnostics go to
 * /dev/null (FUZZ_VERBOSE=1 shows them); sanitizer reports write to fd 2
 * directly and are unaffected. After each input the arena and the
 * diagnostics' state are reset, so nothing accumulates across inputs.
 *
 * Built by `make build/fuzz/frontend` (tests/fuzz/Makefile.inc) with
 * -fsanitize=fuzzer,address,undefined; a crash, sanitizer report, leak,
 * an internal error (diag_ice exits: libFuzzer reports the exit) or an
 * input over -timeout is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"

static FILE *quiet;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *v = getenv("FUZZ_VERBOSE");
    if (!(v && *v == '1'))
        quiet = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* cddpc refuses a file with NUL bytes before the front end sees it
     * (main.c's read_model): such inputs reach nothing, keep them out of
     * the corpus */
    if (memchr(data, 0, size))
        return -1;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;

    FILE *saved = stderr;
    if (quiet)
        stderr = quiet;
    PipelineOptions o = {.input = "fuzz.net", .fusion = FUSE_ALL};
    pipeline_compile(&o, text, NULL, NULL, 0, NULL);
    stderr = saved;

    util_free_all();
    diag_reset();
    free(text);
    return 0;
}
