/* tests/fuzz/data_text.c: libFuzzer harness for the text reader
 * (rt_text_parse: UTF-8 decoding, the sorted vocabulary, the windows and
 * the held-out tail) on the input's bytes. The first byte picks the
 * model: vocab = bytes or characters (bit 0), the block 1..8 (bits 1-3),
 * a vocabulary of 64 or 256 tokens (bit 4), split 0.1 or 0.5 (bit 5).
 * Any outcome is fine but a crash, a sanitizer report, a leak or a hang;
 * a set that loads must be consistent: every token and target inside the
 * vocabulary, the test windows the text's tail, each window's targets its
 * samples shifted by one. The harness runs as a rank other than 0, so the
 * reader prints nothing. */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    rt_world.rank = 1;
    const int B = 1 + ((data[0] >> 1) & 7);
    rt_model m = {0};
    m.name = "fuzz";
    m.in_rank = 1;
    m.in_dim[0] = B;
    m.positions = B;
    m.target = RT_TGT_CLASS;
    m.in_vocab = m.nclass = data[0] & 16 ? 256 : 64;
    m.data.kind = RT_SRC_TEXT;
    m.data.block = B;
    m.data.vocab_bytes = data[0] & 1;
    m.data.split = data[0] & 32 ? 0.5 : 0.1;
    /* a copy of exactly size bytes: ASan sees any read past the end */
    uint8_t *b = malloc(size - 1 ? size - 1 : 1);
    memcpy(b, data + 1, size - 1);
    rt_data d;
    memset(&d, 0, sizeof d);
    if (rt_text_parse(&m, "fuzz.txt", b, size - 1, &d) == 0) {
        const rt_dataset *s[2] = {&d.train, &d.test};
        if (d.train.n < 1 || d.test.n < 1 || d.vocab.n > m.in_vocab)
            abort();
        for (int k = 0; k < 2; k++)
            for (int64_t i = 0; i < s[k]->n; i++)
                for (int64_t j = 0; j < B; j++) {
                    const float x = ((const float *)s[k]->x)[i * B + j];
                    const int32_t y = ((const int32_t *)s[k]->y)[i * B + j];
                    if (!(x >= 0 && x < d.vocab.n) || y < 0 || y >= d.vocab.n)
                        abort();
                    if (j + 1 < B && ((const float *)s[k]->x)[i * B + j + 1] != (float)y)
                        abort();    /* the next position's token is this one's target */
                }
    }
    rt_dataset_free(&d.train);
    rt_dataset_free(&d.test);
    rt_classes_free(&d.vocab);
    free(b);
    return 0;
}
