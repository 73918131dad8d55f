/* tests/fuzz/frontend_fuzz.c: libFuzzer's entry into the compiler. Each
 * input is a model file's text, taken through everything `cddpc MODEL.net
 * -o X` does short of running the C compiler: lexer, parser, semantic
 * checks, graph, autodiff, fusion, memory plan, the verifiers between them
 * and the emission of the C and CUDA source (in memory), and what the
 * listing options print (-d of every pass, --report --target h200,
 * --explain-fusion). The fusion level is the input's length mod 3 (all,
 * elementwise, none), so an input always replays the same way.
 * Diagnostics and listings go to /dev/null (FUZZ_VERBOSE=1 shows them);
 * sanitizer reports write to fd 2 directly and are unaffected. After each input the arena and the
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

    static const FuseLevel levels[] = {FUSE_ALL, FUSE_ELEMENTWISE, FUSE_NONE};
    PipelineOptions o = {.input = "fuzz.net", .fusion = levels[size % 3], .report = 1, .target = COST_GPU,
                         .gpu = gpu_target("h200"), .explain = 1,
                         .dump = {"sema", "autodiff", "fuse", "memplan", "buckets"}, .ndump = 5};
    FILE *saved_err = stderr, *saved_out = stdout;
    if (quiet)
        stderr = stdout = quiet;
    pipeline_compile(&o, text, NULL, NULL, 0, NULL);
    stderr = saved_err;
    stdout = saved_out;

    util_free_all();
    diag_reset();
    free(text);
    return 0;
}
