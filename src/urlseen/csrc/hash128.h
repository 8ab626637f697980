/* hash128.h: the 128-bit digest every hash here returns (murmur3.h, xxh3.h, md5.h through
 * digest.h) and every probe takes (bloom.h, counting.h, mdbf.h). Pure C, header only.
 */
#ifndef URLSEEN_HASH128_H
#define URLSEEN_HASH128_H

#include <stdint.h>

/* The two 64-bit halves of a 128-bit digest. MurmurHash3: h1 is bytes 0-7 of the reference
 * output and h2 bytes 8-15, each read little-endian. XXH3-128: h1 = low64, h2 = high64. MD5:
 * h1 = its bytes 0-7 and h2 = bytes 8-15, little-endian (digest.h). */
typedef struct {
    uint64_t h1;
    uint64_t h2;
} us_hash128;

#endif
