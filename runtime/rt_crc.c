/* rt_crc.c: CRC-32C (Castagnoli, the polynomial iSCSI, ext4 and
 * safetensors tooling use), which checkpoints and --save files carry for
 * their header and each tensor (rt_safetensors.c).
 *
 * Slicing by 8 (eight 256-entry tables, 8 KB, built once on first use):
 * about 8x a table a byte, so a 100 MB checkpoint costs a fraction of its
 * write. The reflected polynomial 0x82F63B78; crc32c("123456789") is
 * 0xE3069283 (the standard check value, tests/runtime/test_crc.c). */
#include "rt_internal.h"

static uint32_t table[8][256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? c >> 1 ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            table[t][i] = table[t - 1][i] >> 8 ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t rt_crc32c(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&once, build);
    const unsigned char *p = buf;
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        const uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = table[7][lo & 0xff] ^ table[6][lo >> 8 & 0xff] ^ table[5][lo >> 16 & 0xff] ^ table[4][lo >> 24] ^
              table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
    }
    while (n--)
        crc = crc >> 8 ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}
