/* murmur3.c: MurmurHash3 x64-128, from the published algorithm description. */
#include "murmur3.h"

#include "bytes.h"

#include <string.h>

#define US_MURMUR3_C1 0x87c37b91114253d5ULL
#define US_MURMUR3_C2 0x4cf5ad432745937fULL

us_hash128 us_murmur3_x64_128(const void *key, size_t len, uint32_t seed)
{
    const uint8_t *data = (const uint8_t *)key;
    const size_t nblocks = len / 16;
    uint64_t h1 = seed, h2 = seed;

    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = us_load64_le(data + 16 * i);
        uint64_t k2 = us_load64_le(data + 16 * i + 8);

        k1 *= US_MURMUR3_C1; k1 = us_rotl64(k1, 31); k1 *= US_MURMUR3_C2; h1 ^= k1;
        h1 = us_rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;

        k2 *= US_MURMUR3_C2; k2 = us_rotl64(k2, 33); k2 *= US_MURMUR3_C1; h2 ^= k2;
        h2 = us_rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }

    /* Tail: the last len % 16 bytes, zero-padded; bytes 0-7 go to k1, bytes 8-14 to k2. */
    size_t rest = len & 15;
    if (rest) {
        uint8_t pad[16] = {0};
        memcpy(pad, data + nblocks * 16, rest);
        uint64_t k1 = us_load64_le(pad), k2 = us_load64_le(pad + 8);
        if (rest > 8) {
            k2 *= US_MURMUR3_C2; k2 = us_rotl64(k2, 33); k2 *= US_MURMUR3_C1; h2 ^= k2;
        }
        k1 *= US_MURMUR3_C1; k1 = us_rotl64(k1, 31); k1 *= US_MURMUR3_C2; h1 ^= k1;
    }

    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = us_fmix64(h1);
    h2 = us_fmix64(h2);
    h1 += h2;
    h2 += h1;

    us_hash128 out = {h1, h2};
    return out;
}
