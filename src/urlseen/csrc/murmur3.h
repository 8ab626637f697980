/* murmur3.h: MurmurHash3 x64-128, one of the two fixed, seeded 128-bit hashes a filter may use
 * (digest.h chooses; XXH3-128 in xxh3.h is the default).
 *
 * MurmurHash3 x64-128 (Austin Appleby, public domain), written here from its published
 * description. The output must never change: persisted filters, Redis bitmaps and other
 * processes depend on the same key giving the same bits everywhere. tests/test_core.py pins it
 * with the reference's own verification value and known-answer vectors.
 *
 * Pure C: no Python.h, no allocation.
 */
#ifndef URLSEEN_MURMUR3_H
#define URLSEEN_MURMUR3_H

#include <stddef.h>
#include <stdint.h>

#include "hash128.h"

/* MurmurHash3_x64_128 of len bytes at key with a 32-bit seed, exactly as the reference computes
 * it on a little-endian machine (this implementation reads the input little-endian on any
 * machine, so the result is the same everywhere). */
us_hash128 us_murmur3_x64_128(const void *key, size_t len, uint32_t seed);

#endif
