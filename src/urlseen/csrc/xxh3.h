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

#include "hash128.h"

/* XXH3-128 of len bytes at key with a 64-bit seed and the spec's default secret (for inputs
 * over 240 bytes the secret derived from the seed, as the spec prescribes), exactly as
 * XXH3_128bits_withSeed computes it: h1 is the result's low64 and h2 its high64, so the 128-bit
 * value is (h2 << 64) | h1. The input is read little-endian on any machine, so the result is the
 * same everywhere. key may be NULL when len is 0. */
us_hash128 us_xxh3_128(const void *key, size_t len, uint64_t seed);

/* XXH3-64 (`XXH3_64bits_withSeed`) of the same arguments: the 64-bit member of the family,
 * cheaper on 17-128-byte URLs (one accumulator, one final mix). */
uint64_t us_xxh3_64(const void *key, size_t len, uint64_t seed);

#endif
