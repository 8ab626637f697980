/* digest.h: the hash a filter uses, chosen by a small integer stored in its state file.
 *
 * Ids are part of the file format and never change meaning: 0 = XXH3-128 (the default: ~9 ns
 * per 60-byte URL here), 1 = MurmurHash3 x64-128 (~22 ns; kept so that filters made with it,
 * or compared against systems that use it, keep working), 2 = MD5 (the fingerprint the
 * IMP-CBFilter paper stores and the URL-similarity patent CN106407485 hashes with, kept so that
 * their results can be reproduced; h1 = its bytes 0-7 and h2 = bytes 8-15, little-endian; a seed
 * is prefixed, md5.h), 3 = XXH3-64 (the Bloom filters' default since it exists: a
 * Bloom filter's probes need no more than 64 bits, and on a URL XXH3-64 costs about two thirds
 * of XXH3-128; h1 = the hash, h2 = fmix64(h1), MurmurHash3's finalizer, so the two halves the
 * probes take apart are unrelated).
 * Pure C.
 */
#ifndef URLSEEN_DIGEST_H
#define URLSEEN_DIGEST_H

#include "bytes.h"
#include "hash128.h"
#include "md5.h"
#include "murmur3.h"
#include "xxh3.h"

enum us_hash_id { US_HASH_XXH3_128 = 0, US_HASH_MURMUR3_X64_128 = 1, US_HASH_MD5 = 2, US_HASH_XXH3_64 = 3 };

/* The digest of an XXH3-64 hash: h2 stretched from h1 (see above). */
static inline us_hash128 us_digest_of_64(uint64_t h1)
{
    us_hash128 h = {h1, us_fmix64(h1)};
    return h;
}

/* MurmurHash3 takes a 32-bit seed: callers keep seeds below 2**32 for every hash id. */
static inline us_hash128 us_digest(int hash_id, const void *key, size_t len, uint64_t seed)
{
    if (hash_id == US_HASH_MURMUR3_X64_128) return us_murmur3_x64_128(key, len, (uint32_t)seed);
    if (hash_id == US_HASH_MD5) {
        uint8_t out[16];
        us_md5(key, len, (uint32_t)seed, out);
        us_hash128 h = {us_load64_le(out), us_load64_le(out + 8)};
        return h;
    }
    if (hash_id == US_HASH_XXH3_64) return us_digest_of_64(us_xxh3_64(key, len, seed));
    return us_xxh3_128(key, len, seed);
}

#endif
