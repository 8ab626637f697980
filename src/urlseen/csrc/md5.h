/* md5.h: MD5 (RFC 1321), the fingerprint of the exact filter's library.
 *
 * Written here from the RFC's description of the algorithm. MD5 is not used for security: it is
 * the 16-byte fingerprint the IMP-CBFilter paper stores per URL, so a library made by urlseen
 * holds the same fingerprints as the paper's. tests/test_counting.py pins it against hashlib.
 * Pure C: no Python.h, no allocation.
 */
#ifndef URLSEEN_MD5_H
#define URLSEEN_MD5_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t state[4];
    uint64_t length; /* bytes so far */
    uint8_t block[64];
    size_t used; /* bytes in block */
} us_md5_ctx;

void us_md5_init(us_md5_ctx *ctx);
void us_md5_update(us_md5_ctx *ctx, const void *data, size_t len);
void us_md5_final(us_md5_ctx *ctx, uint8_t out[16]);

/* One-shot digest; when seed is not 0 the input is the seed's 4 bytes (little-endian) followed
 * by the data: digest(seed || key) under another seed is an unrelated function of the key, so
 * each seed gives an independent hash family. */
void us_md5(const void *data, size_t len, uint32_t seed, uint8_t out[16]);

/* The digests of n keys (key i: data[i], len[i] bytes), each equal to us_md5's with the same
 * seed. Why: one MD5 is a chain of 64 dependent steps that leaves most of a core idle; here
 * US_MD5_LANES keys go through the steps side by side in vector registers, each lane taking
 * the next key as soon as its own is done (keys of 1 and 2 blocks mix in a URL batch). */
#define US_MD5_LANES 8
void us_md5_many(const uint8_t *const *data, const size_t *len, size_t n, uint32_t seed,
                 uint8_t (*out)[16]);

#endif
