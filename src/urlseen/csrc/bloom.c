/* bloom.c: the probe loops of both layouts (see bloom.h for the contract). */
#include "bloom.h"

#include <string.h>

/* How many keys ahead a batch prefetches. A miss costs ~100 ns and a probe ~15 ns, so ~8 misses
 * must be in flight to hide it; on the benchmark machine (20M keys, blocked, huge pages) the
 * probe loop ran 18 M/s at 4 ahead, 36-44 at 8, 53-58 at 16, 51-68 at 32 (noisy). 16 it is;
 * benchmarks/peers/layouts.py sweeps it end to end through _core.set_prefetch_distance. */
unsigned us_prefetch_ahead = 16;

void us_bloom_positions(const us_bloom *b, us_hash128 h, uint64_t *out)
{
    if (b->layout == US_LAYOUT_BLOCKED) {
        uint64_t base = (uint64_t)(us_block_of_(b, h) - b->bits) * 8;
        us_block_bits_ s = us_block_bits_start_(h);
        for (uint32_t i = 0; i < b->k; i++) out[i] = base + us_block_bit_(i, &s, h.h1);
        return;
    }
    us_standard_indices(h, b->nbits, b->k, out);
}

/* Prefetch every cache line the key will touch: one for a blocked filter, k for a standard one. */
static inline void prefetch(const us_bloom *b, us_hash128 h)
{
    if (b->layout == US_LAYOUT_BLOCKED) {
        __builtin_prefetch(us_block_of_(b, h), 1);
        return;
    }
    uint64_t x = h.h1, y = h.h2 | 1;
    for (uint32_t i = 0; i < b->k; i++) {
        __builtin_prefetch(b->bits + (us_reduce(x, b->nbits) >> 3), 1);
        x += y;
        y += i + 1;
    }
}

size_t us_bloom_test_and_set_many(us_bloom *b, const us_hash128 *h, size_t n, uint8_t *out)
{
    size_t fresh = 0, ahead = us_prefetch_ahead;
    for (size_t i = 0; i < n && i < ahead; i++) prefetch(b, h[i]);
    if (b->layout == US_LAYOUT_BLOCKED) {
        for (size_t i = 0; i < n; i++) {
            if (ahead && i + ahead < n) prefetch(b, h[i + ahead]);
            out[i] = (uint8_t)us_test_and_set_blocked_(b, h[i]);
            fresh += out[i];
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            if (ahead && i + ahead < n) prefetch(b, h[i + ahead]);
            out[i] = (uint8_t)us_test_and_set_standard_(b, h[i]);
            fresh += out[i];
        }
    }
    return fresh;
}

void us_bloom_test_many(const us_bloom *b, const us_hash128 *h, size_t n, uint8_t *out)
{
    size_t ahead = us_prefetch_ahead;
    for (size_t i = 0; i < n && i < ahead; i++) prefetch(b, h[i]);
    for (size_t i = 0; i < n; i++) {
        if (ahead && i + ahead < n) prefetch(b, h[i + ahead]);
        out[i] = (uint8_t)us_bloom_test(b, h[i]);
    }
}

uint64_t us_popcount(const uint8_t *bits, uint64_t nbits)
{
    uint64_t total = 0, nbytes = nbits / 8, i = 0;
    for (; i + 8 <= nbytes; i += 8) {
        uint64_t w;
        memcpy(&w, bits + i, 8);
        total += (uint64_t)__builtin_popcountll(w);
    }
    for (; i < nbytes; i++) total += (uint64_t)__builtin_popcount(bits[i]);
    if (nbits & 7) total += (uint64_t)__builtin_popcount(bits[nbytes] & ((1u << (nbits & 7)) - 1));
    return total;
}

void us_or_bytes(uint8_t *dst, const uint8_t *src, size_t nbytes)
{
    for (size_t i = 0; i < nbytes; i++) dst[i] |= src[i];
}
