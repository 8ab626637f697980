/* xxh3.h: XXH3-128 (xxHash's 128-bit XXH3, `XXH3_128bits_withSeed`), the faster 128-bit hash,
 * and XXH3-64 (`XXH3_64bits_withSeed`).
 *
 * Written here from the published algorithm description, the xxHash specification
 * (doc/xxhash_spec.md in Cyan4973/xxHash), not from any implementation's code; the default
 * secret and the primes are the spec's. On the 17-128-byte inputs URLs are, it is a handful of
 * independent 64x64->128 multiplies instead of MurmurHash3's serial multiply chain.
 *
 * The output must never change: persisted filters, Redis bitmaps and other processes depend on
 * the same key giving the same bits everywhere. tests/test_xxh3.py pins it with known answers
 * from the xxhash package (which wraps the reference C library) and a pure-Python reference
 * written from the same spec; tests/c/test_xxh3.c pins it without Python.
 *
 * Pure C: no Python.h, no allocation (a seeded long input derives its 192-byte secret on the
 * stack).
 */
#ifndef URLSEEN_XXH3_H
#define URLSEEN_XXH3_H

#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "hash128.h"

/* XXH3-128 of len bytes at key with a 64-bit seed and the spec's default secret (for inputs
 * over 240 bytes the secret derived from the seed, as the spec prescribes), exactly as
 * XXH3_128bits_withSeed computes it: h1 is the result's low64 and h2 its high64, so the 128-bit
 * value is (h2 << 64) | h1. The input is read little-endian on any machine, so the result is the
 * same everywhere. key may be NULL when len is 0. */
us_hash128 us_xxh3_128(const void *key, size_t len, uint64_t seed);

/* ---- XXH3-64 --------------------------------------------------------------------------------
 * `XXH3_64bits_withSeed` of the same arguments: the 64-bit member of the family, cheaper on
 * 17-128-byte URLs (one accumulator, one final mix). That length class, where nearly every URL
 * falls, is inline here, so a per-call add pays no call for it; every other length is
 * us_xxh3_64_other_ (xxh3.c). The helpers below are the spec's, shared with xxh3.c. */

#define US_XXH3_SECRET_LEN 192
#define US_XXH3_P64_1 0x9E3779B185EBCA87ULL
extern const uint8_t us_xxh3_secret[US_XXH3_SECRET_LEN]; /* the spec's default secret */

uint64_t us_xxh3_64_other_(const void *key, size_t len, uint64_t seed);

/* The full 64x64 -> 128-bit product, the spec's (u128)x * (u128)y. The portable branch splits
 * into 32-bit halves for compilers without a 128-bit integer type. */
static inline uint64_t us_xxh3_mul128_(uint64_t a, uint64_t b, uint64_t *hi)
{
#if defined(__SIZEOF_INT128__)
    __extension__ unsigned __int128 r = (unsigned __int128)a * b;
    *hi = (uint64_t)(r >> 64);
    return (uint64_t)r;
#else
    uint64_t a_lo = a & 0xFFFFFFFFU, a_hi = a >> 32, b_lo = b & 0xFFFFFFFFU, b_hi = b >> 32;
    uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
    uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFU) + lo_hi;
    *hi = (hi_lo >> 32) + (cross >> 32) + hi_hi;
    return (cross << 32) | (lo_lo & 0xFFFFFFFFU);
#endif
}

/* lowerHalf(p) xor higherHalf(p) of the 128-bit product: keeps all of it in 64 bits. */
static inline uint64_t us_xxh3_fold64_(uint64_t a, uint64_t b)
{
    uint64_t hi, lo = us_xxh3_mul128_(a, b, &hi);
    return lo ^ hi;
}

static inline uint64_t us_xxh3_avalanche_(uint64_t x)
{
    x ^= x >> 37;
    x *= 0x165667919E3779F9ULL;
    x ^= x >> 32;
    return x;
}

/* mixStep: one 16-byte chunk against 16 bytes of secret, the seed added to one word and
 * subtracted from the other. */
static inline uint64_t us_xxh3_mix16_(const uint8_t *data, const uint8_t *secret, uint64_t seed)
{
    return us_xxh3_fold64_(us_load64_le(data) ^ (us_load64_le(secret) + seed),
                           us_load64_le(data + 8) ^ (us_load64_le(secret + 8) - seed));
}

static inline uint64_t us_xxh3_64(const void *key, size_t len, uint64_t seed)
{
    if (len - 17 > 128 - 17) return us_xxh3_64_other_(key, len, seed); /* len < 17 wraps */
    /* Chunks from the front and the back, outermost first, into one accumulator. */
    const uint8_t *p = (const uint8_t *)key, *s = us_xxh3_secret;
    uint64_t acc = (uint64_t)len * US_XXH3_P64_1;
    if (len > 32) {
        if (len > 64) {
            if (len > 96) {
                acc += us_xxh3_mix16_(p + 48, s + 96, seed);
                acc += us_xxh3_mix16_(p + len - 64, s + 112, seed);
            }
            acc += us_xxh3_mix16_(p + 32, s + 64, seed);
            acc += us_xxh3_mix16_(p + len - 48, s + 80, seed);
        }
        acc += us_xxh3_mix16_(p + 16, s + 32, seed);
        acc += us_xxh3_mix16_(p + len - 32, s + 48, seed);
    }
    acc += us_xxh3_mix16_(p, s, seed);
    acc += us_xxh3_mix16_(p + len - 16, s + 16, seed);
    return us_xxh3_avalanche_(acc);
}

#endif
