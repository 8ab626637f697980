/* bytes.h: the little-endian loads and stores and the 64-bit mixer the hashes and the probes
 * share. memcpy keeps unaligned input legal and compiles to one mov on little-endian machines;
 * elsewhere the bytes are assembled one by one, so every result is the same on any machine.
 * Pure C, header only.
 */
#ifndef URLSEEN_BYTES_H
#define URLSEEN_BYTES_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define US_LITTLE_ENDIAN 1
#else
#define US_LITTLE_ENDIAN 0
#endif

static inline uint64_t us_load64_le(const uint8_t *p)
{
#if US_LITTLE_ENDIAN
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
#endif
}

static inline uint32_t us_load32_le(const uint8_t *p)
{
#if US_LITTLE_ENDIAN
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

static inline void us_store64_le(uint8_t *p, uint64_t v)
{
#if US_LITTLE_ENDIAN
    memcpy(p, &v, 8);
#else
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
#endif
}

static inline uint64_t us_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* MurmurHash3's 64-bit finalizer: every input bit affects every output bit. Used by
 * MurmurHash3 itself and by the blocked layout to stretch h2 into more bit fields. */
static inline uint64_t us_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

#endif
