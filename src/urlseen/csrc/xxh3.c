/* xxh3.c: XXH3-128 and XXH3-64 with a 64-bit seed, from the xxHash specification (doc/xxhash_spec.md in
 * Cyan4973/xxHash, not in this repository; "the spec" below).
 *
 * One function per length class of the spec: 0, 1-3, 4-8, 9-16, 17-128, 129-240 and > 240
 * bytes. Names follow the spec's pseudo-code where it has one (mix_step = mixStep, ...).
 */
#include "xxh3.h"

#include "bytes.h"

#include <string.h>

#define P32_1 0x9E3779B1U
#define P32_2 0x85EBCA77U
#define P32_3 0xC2B2AE3DU
#define P64_2 0xC2B2AE3D27D4EB4FULL
#define P64_3 0x165667B19E3779F9ULL
#define P64_4 0x85EBCA77C2B2AE63ULL
#define P64_5 0x27D4EB2F165667C5ULL
#define PRIME_MX2 0x9FB21C651E98DF25ULL

#define SECRET_LEN US_XXH3_SECRET_LEN
#define STRIPE_LEN 64
/* (SECRET_LEN - STRIPE_LEN) / 8 stripes per block: each stripe reads the secret 8 bytes further
 * on, and the last 64 bytes of the secret are kept for the scramble. */
#define STRIPES_PER_BLOCK ((SECRET_LEN - STRIPE_LEN) / 8)
#define BLOCK_LEN (STRIPE_LEN * STRIPES_PER_BLOCK)

/* The spec's default secret, read as little-endian words at arbitrary byte offsets. */
const uint8_t us_xxh3_secret[US_XXH3_SECRET_LEN] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

#if defined(__GNUC__) || defined(__clang__)
#define US_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define US_NOINLINE __declspec(noinline)
#else
#define US_NOINLINE
#endif

static inline uint32_t bswap32(uint32_t x)
{
    return (x >> 24) | ((x >> 8) & 0xff00U) | ((x << 8) & 0xff0000U) | (x << 24);
}

static inline uint64_t bswap64(uint64_t x)
{
    return (uint64_t)bswap32((uint32_t)x) << 32 | bswap32((uint32_t)(x >> 32));
}

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint64_t avalanche_xxh64(uint64_t x)
{
    x ^= x >> 33;
    x *= P64_2;
    x ^= x >> 29;
    x *= P64_3;
    x ^= x >> 32;
    return x;
}

static inline us_hash128 make(uint64_t low, uint64_t high)
{
    us_hash128 out = {low, high};
    return out;
}

/* ---- 0-16 bytes: the input is read at most twice, overlapping; one or two multiplies ------ */

static us_hash128 len_0(uint64_t seed)
{
    const uint8_t *s = us_xxh3_secret;
    return make(avalanche_xxh64(seed ^ us_load64_le(s + 64) ^ us_load64_le(s + 72)),
                avalanche_xxh64(seed ^ us_load64_le(s + 80) ^ us_load64_le(s + 88)));
}

static us_hash128 len_1to3(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint8_t *s = us_xxh3_secret;
    /* The last, first and middle byte plus the length: for len 1 or 2 some bytes are read
     * twice, which is why the length must be folded in too. */
    uint32_t combined = (uint32_t)p[len - 1] | (uint32_t)len << 8 | (uint32_t)p[0] << 16 |
                        (uint32_t)p[len >> 1] << 24;
    uint64_t low = ((uint64_t)(us_load32_le(s) ^ us_load32_le(s + 4)) + seed) ^ combined;
    uint64_t high = ((uint64_t)(us_load32_le(s + 8) ^ us_load32_le(s + 12)) - seed) ^
                    (uint64_t)rotl32(bswap32(combined), 13);
    return make(avalanche_xxh64(low), avalanche_xxh64(high));
}

static us_hash128 len_4to8(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint8_t *s = us_xxh3_secret;
    uint32_t first = us_load32_le(p), last = us_load32_le(p + len - 4);
    /* The seed's low half, byte-swapped, also lands in the high half. */
    uint64_t modified_seed = seed ^ ((uint64_t)bswap32((uint32_t)seed) << 32);
    uint64_t combined = (uint64_t)first | (uint64_t)last << 32;
    uint64_t value = ((us_load64_le(s + 16) ^ us_load64_le(s + 24)) + modified_seed) ^ combined;
    uint64_t high, low = us_xxh3_mul128_(value, US_XXH3_P64_1 + ((uint64_t)len << 2), &high);
    high += low << 1;
    low ^= high >> 3;
    low ^= low >> 35;
    low *= PRIME_MX2;
    low ^= low >> 28;
    return make(low, us_xxh3_avalanche_(high));
}

static us_hash128 len_9to16(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint8_t *s = us_xxh3_secret;
    uint64_t first = us_load64_le(p), last = us_load64_le(p + len - 8);
    uint64_t val1 = ((us_load64_le(s + 32) ^ us_load64_le(s + 40)) - seed) ^ first ^ last;
    uint64_t val2 = ((us_load64_le(s + 48) ^ us_load64_le(s + 56)) + seed) ^ last;
    uint64_t mhi, mlo = us_xxh3_mul128_(val1, US_XXH3_P64_1, &mhi);
    uint64_t low = mlo + ((uint64_t)(len - 1) << 54);
    /* The spec's simplified form of hi32(val2) << 32 + lo32(val2) * PRIME32_2. */
    uint64_t high = mhi + val2 + (uint64_t)(uint32_t)val2 * (P32_2 - 1);
    low ^= bswap64(high);
    /* {low, high} * PRIME64_2 as a 128x64 -> 128-bit multiply. */
    uint64_t m2hi, m2lo = us_xxh3_mul128_(low, P64_2, &m2hi);
    high = m2hi + high * P64_2;
    return make(us_xxh3_avalanche_(m2lo), us_xxh3_avalanche_(high));
}

/* ---- 17-240 bytes: pairs of 16-byte chunks into two accumulators ---------------------------- */

/* mixTwoChunks: each accumulator also takes the raw sum of the *other* chunk's words, so a
 * chunk whose mix step happens to multiply by zero still reaches the result. */
static inline void mix_two_chunks(uint64_t acc[2], const uint8_t *d1, const uint8_t *d2,
                                  const uint8_t *secret, uint64_t seed)
{
    acc[0] += us_xxh3_mix16_(d1, secret, seed);
    acc[1] += us_xxh3_mix16_(d2, secret + 16, seed);
    acc[0] ^= us_load64_le(d2) + us_load64_le(d2 + 8);
    acc[1] ^= us_load64_le(d1) + us_load64_le(d1 + 8);
}

static inline us_hash128 finish_17to240(const uint64_t acc[2], size_t len, uint64_t seed)
{
    uint64_t low = acc[0] + acc[1];
    uint64_t high = acc[0] * US_XXH3_P64_1 + acc[1] * P64_4 + ((uint64_t)len - seed) * P64_2;
    return make(us_xxh3_avalanche_(low), (uint64_t)0 - us_xxh3_avalanche_(high));
}

static us_hash128 len_17to128(const uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t acc[2] = {(uint64_t)len * US_XXH3_P64_1, 0};
    /* N = ceil(len / 32) chunks from the front paired with N from the back, innermost pair
     * first (the order matters: each step xors into what the previous one added). Nested ifs
     * rather than the spec's loop: the same order, with straight-line code and constant secret
     * offsets for each count of pairs. */
    const uint8_t *s = us_xxh3_secret;
    if (len > 32) {
        if (len > 64) {
            if (len > 96) mix_two_chunks(acc, p + 48, p + len - 64, s + 96, seed);
            mix_two_chunks(acc, p + 32, p + len - 48, s + 64, seed);
        }
        mix_two_chunks(acc, p + 16, p + len - 32, s + 32, seed);
    }
    mix_two_chunks(acc, p, p + len - 16, s, seed);
    return finish_17to240(acc, len, seed);
}

static us_hash128 len_129to240(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint8_t *s = us_xxh3_secret;
    uint64_t acc[2] = {(uint64_t)len * US_XXH3_P64_1, 0};
    size_t chunks = len >> 5;
    for (size_t i = 0; i < 4; i++)
        mix_two_chunks(acc, p + 32 * i, p + 32 * i + 16, s + 32 * i, seed);
    acc[0] = us_xxh3_avalanche_(acc[0]);
    acc[1] = us_xxh3_avalanche_(acc[1]);
    /* Past 128 bytes the secret is reused from offset 3, so its words are read misaligned with
     * respect to the first pass. */
    for (size_t i = 4; i < chunks; i++)
        mix_two_chunks(acc, p + 32 * i, p + 32 * i + 16, s + 32 * (i - 4) + 3, seed);
    /* The last 32 bytes (which may overlap the loop's): halves swapped and the seed negated. */
    mix_two_chunks(acc, p + len - 16, p + len - 32, s + 103, (uint64_t)0 - seed);
    return finish_17to240(acc, len, seed);
}

/* ---- > 240 bytes: 8 lanes over 64-byte stripes, scrambled after every 1024-byte block ------- */

static inline void accumulate(uint64_t acc[8], const uint8_t *stripe, const uint8_t *secret)
{
    for (int i = 0; i < 8; i++) {
        uint64_t lane = us_load64_le(stripe + 8 * i);
        uint64_t value = lane ^ us_load64_le(secret + 8 * i);
        /* The raw lane goes into the neighbour, so a lane the 32x32 product loses (a zero
         * half) still counts. */
        acc[i ^ 1] += lane;
        acc[i] += (value & 0xFFFFFFFFU) * (value >> 32);
    }
}

static inline void scramble(uint64_t acc[8], const uint8_t *secret)
{
    for (int i = 0; i < 8; i++) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= us_load64_le(secret + 8 * i);
        acc[i] = a * P32_1;
    }
}

static uint64_t final_merge(const uint64_t acc[8], uint64_t init, const uint8_t *secret)
{
    uint64_t result = init;
    for (int i = 0; i < 4; i++)
        result += us_xxh3_fold64_(acc[2 * i] ^ us_load64_le(secret + 16 * i),
                             acc[2 * i + 1] ^ us_load64_le(secret + 16 * i + 8));
    return us_xxh3_avalanche_(result);
}

/* The eight accumulators of an input over 240 bytes and the secret they were made with (the
 * default one, or `derived` filled from the seed): both widths merge them at the end. */
static const uint8_t *accumulate_long(uint64_t acc[8], const uint8_t *p, size_t len, uint64_t seed,
                                      uint8_t derived[SECRET_LEN])
{
    /* A seed reaches long inputs only through the secret: 24 words, the seed added to the even
     * ones and subtracted from the odd. Seed 0 derives the default secret, so skip the copy. */
    const uint8_t *s = us_xxh3_secret;
    if (seed) {
        for (int i = 0; i < SECRET_LEN; i += 16) {
            us_store64_le(derived + i, us_load64_le(us_xxh3_secret + i) + seed);
            us_store64_le(derived + i + 8, us_load64_le(us_xxh3_secret + i + 8) - seed);
        }
        s = derived;
    }

    static const uint64_t init[8] = {P32_3, US_XXH3_P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1};
    memcpy(acc, init, sizeof init);
    /* Full blocks, each followed by a scramble, while more than one block remains: the last
     * block (even a full one) is left for the tail below and never scrambled. */
    size_t blocks = (len - 1) / BLOCK_LEN;
    for (size_t b = 0; b < blocks; b++) {
        const uint8_t *block = p + b * BLOCK_LEN;
        for (size_t n = 0; n < STRIPES_PER_BLOCK; n++)
            accumulate(acc, block + n * STRIPE_LEN, s + n * 8);
        scramble(acc, s + SECRET_LEN - STRIPE_LEN);
    }
    const uint8_t *last_block = p + blocks * BLOCK_LEN;
    size_t stripes = (len - blocks * BLOCK_LEN - 1) / STRIPE_LEN;
    for (size_t n = 0; n < stripes; n++) accumulate(acc, last_block + n * STRIPE_LEN, s + n * 8);
    /* The last 64 bytes of the input, overlapping what came before unless len is a multiple of
     * 64, with a secret offset no full stripe uses. */
    accumulate(acc, p + len - STRIPE_LEN, s + SECRET_LEN - STRIPE_LEN - 7);
    return s;
}

/* Out of line: inlined into us_xxh3_128, its 192-byte secret and eight accumulators would make
 * every call, even a 60-byte URL's, save six registers and reserve the stack frame. */
US_NOINLINE static us_hash128 len_long(const uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t acc[8];
    uint8_t derived[SECRET_LEN];
    const uint8_t *s = accumulate_long(acc, p, len, seed, derived);
    return make(final_merge(acc, (uint64_t)len * US_XXH3_P64_1, s + 11),
                final_merge(acc, ~((uint64_t)len * P64_2), s + SECRET_LEN - STRIPE_LEN - 11));
}

us_hash128 us_xxh3_128(const void *key, size_t len, uint64_t seed)
{
    const uint8_t *p = (const uint8_t *)key;
    if (len <= 16) {
        if (len > 8) return len_9to16(p, len, seed);
        if (len >= 4) return len_4to8(p, len, seed);
        if (len) return len_1to3(p, len, seed);
        return len_0(seed);
    }
    if (len <= 128) return len_17to128(p, len, seed);
    if (len <= 240) return len_129to240(p, len, seed);
    return len_long(p, len, seed);
}

/* ---- XXH3-64: the same secret and steps, one accumulator, its own constants per length ------ */

/* The spec's rrmxmx: the 4-8-byte finalizer, which folds the length in again. */
static inline uint64_t rrmxmx(uint64_t h, uint64_t len)
{
    h ^= us_rotl64(h, 49) ^ us_rotl64(h, 24);
    h *= PRIME_MX2;
    h ^= (h >> 35) + len;
    h *= PRIME_MX2;
    return h ^ (h >> 28);
}

static uint64_t len_0to16_64(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint8_t *s = us_xxh3_secret;
    if (len > 8) {
        uint64_t lo = us_load64_le(p) ^ ((us_load64_le(s + 24) ^ us_load64_le(s + 32)) + seed);
        uint64_t hi =
            us_load64_le(p + len - 8) ^ ((us_load64_le(s + 40) ^ us_load64_le(s + 48)) - seed);
        return us_xxh3_avalanche_((uint64_t)len + bswap64(lo) + hi + us_xxh3_fold64_(lo, hi));
    }
    if (len >= 4) {
        seed ^= (uint64_t)bswap32((uint32_t)seed) << 32;
        uint64_t both = (uint64_t)us_load32_le(p + len - 4) + ((uint64_t)us_load32_le(p) << 32);
        return rrmxmx(both ^ ((us_load64_le(s + 8) ^ us_load64_le(s + 16)) - seed), len);
    }
    if (len) {
        uint32_t combined = (uint32_t)p[len - 1] | (uint32_t)len << 8 | (uint32_t)p[0] << 16 |
                            (uint32_t)p[len >> 1] << 24;
        return avalanche_xxh64((uint64_t)combined ^
                               ((uint64_t)(us_load32_le(s) ^ us_load32_le(s + 4)) + seed));
    }
    return avalanche_xxh64(seed ^ us_load64_le(s + 56) ^ us_load64_le(s + 64));
}

static uint64_t len_129to240_64(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint8_t *s = us_xxh3_secret;
    uint64_t acc = (uint64_t)len * US_XXH3_P64_1;
    size_t rounds = len / 16;
    for (size_t i = 0; i < 8; i++) acc += us_xxh3_mix16_(p + 16 * i, s + 16 * i, seed);
    acc = us_xxh3_avalanche_(acc);
    /* As in the 128-bit form: past 128 bytes the secret is reused from offset 3. */
    for (size_t i = 8; i < rounds; i++) acc += us_xxh3_mix16_(p + 16 * i, s + 16 * (i - 8) + 3, seed);
    acc += us_xxh3_mix16_(p + len - 16, s + 119, seed);
    return us_xxh3_avalanche_(acc);
}

US_NOINLINE static uint64_t len_long_64(const uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t acc[8];
    uint8_t derived[SECRET_LEN];
    const uint8_t *s = accumulate_long(acc, p, len, seed, derived);
    return final_merge(acc, (uint64_t)len * US_XXH3_P64_1, s + 11);
}

uint64_t us_xxh3_64_other_(const void *key, size_t len, uint64_t seed)
{
    const uint8_t *p = (const uint8_t *)key;
    if (len <= 16) return len_0to16_64(p, len, seed);
    if (len <= 128) return us_xxh3_64(p, len, seed);
    if (len <= 240) return len_129to240_64(p, len, seed);
    return len_long_64(p, len, seed);
}
