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

#endif
