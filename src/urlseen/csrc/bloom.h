/* bloom.h: Bloom-filter probes on a bit array the caller owns (a bytearray, an mmap, ...).
 *
 * Two layouts share one contract: `test` never writes; `test_and_set` sets the key's bits and
 * reports whether any of them was 0 (the key is new), so the URL-seen test is one call.
 *
 *  - US_LAYOUT_STANDARD: k positions over all nbits by enhanced double hashing (Dillinger and
 *    Manolios 2004): x = h1, y = h2 | 1; position i = reduce(x); x += y; y += i + 1. Bit-for-bit
 *    the textbook filter, sized by the textbook formula; k cache misses per key once the array
 *    outgrows the cache.
 *  - US_LAYOUT_BLOCKED: reduce(h1) picks one 512-bit block (one cache line); the k bits inside
 *    it are successive 9-bit fields of h2, least significant first; after every 7 fields the
 *    next word is fmix64(previous word + h1) (MurmurHash3's finalizer). Independent positions, not
 *    double hashing: mod 512, an arithmetic progression has only 2^17 patterns, and measured
 *    twice the planned false-positive rate. One cache miss per key, which a batch prefetches;
 *    it costs extra bits for the same error rate (bloom/sizing.py, benchmarks/peers/REPORT.md).
 *
 * reduce(x) = (x * n) >> 64 maps a 64-bit value onto [0, n) without a division (Lemire's
 * "fastrange"); n need not be a power of two, so the filter is sized exactly.
 *
 * Bit j lives in byte j / 8 at bit j % 8 (least significant first): the layout of the bytes is
 * the same on every machine, so a state file or Redis bitmap moves between machines as is.
 * Pure C: no Python.h, no allocation.
 */
#ifndef URLSEEN_BLOOM_H
#define URLSEEN_BLOOM_H

#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "hash128.h"

enum us_layout { US_LAYOUT_STANDARD = 0, US_LAYOUT_BLOCKED = 1 };

#define US_BLOCK_BITS 512u
#define US_BLOCK_BYTES 64u
#define US_MAX_K 64u

/* A view of a filter's bits. Invariants: bits points at ceil(nbits / 8) bytes the caller owns;
 * 1 <= k <= US_MAX_K; for US_LAYOUT_BLOCKED nbits is a multiple of US_BLOCK_BITS and
 * k <= US_BLOCK_BITS. */
typedef struct {
    uint8_t *bits;
    uint64_t nbits;
    uint32_t k;
    int layout;
} us_bloom;

static inline uint64_t us_reduce(uint64_t x, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/* The k indices of the standard layout, in [0, n): enhanced double hashing (header comment).
 * Shared with the counting filter (counting.h), whose counters are indexed the same way. */
static inline void us_standard_indices(us_hash128 h, uint64_t n, uint32_t k, uint64_t *out)
{
    uint64_t x = h.h1, y = h.h2 | 1;
    for (uint32_t i = 0; i < k; i++) {
        out[i] = us_reduce(x, n);
        x += y;
        y += i + 1;
    }
}

/* Writes the key's k bit positions (absolute, in [0, nbits)) to out[0..k-1]: the reference that
 * the Python oracle and the Redis backends reproduce. */
void us_bloom_positions(const us_bloom *b, us_hash128 h, uint64_t *out);

/* Single-key probes, inline: the per-call path is a few dozen instructions, and a call
 * and a layout branch would be a visible part of them. Names ending in _ are private. */
static inline uint8_t *us_block_of_(const us_bloom *b, us_hash128 h)
{
    return b->bits + us_reduce(h.h1, b->nbits / US_BLOCK_BITS) * US_BLOCK_BYTES;
}

/* Where the i-th bit inside the block comes from: 9-bit fields of `fields`, which is refilled
 * every 7 fields from `word`, the unshifted word those fields were cut from. */
#define US_BLOCK_FIELDS_PER_WORD 7u
typedef struct {
    uint64_t word, fields;
} us_block_bits_;

static inline us_block_bits_ us_block_bits_start_(us_hash128 h)
{
    us_block_bits_ s = {h.h2, h.h2};
    return s;
}

static inline uint32_t us_block_bit_(uint32_t i, us_block_bits_ *s, uint64_t h1)
{
    if (i && i % US_BLOCK_FIELDS_PER_WORD == 0) s->fields = s->word = us_fmix64(s->word + h1);
    uint32_t bit = (uint32_t)(s->fields & (US_BLOCK_BITS - 1));
    s->fields >>= 9;
    return bit;
}

/* The key's bits as a mask per 64-bit word of its block: bit j of the block is bit j % 64 of
 * word j / 64, which on every machine is byte j / 8, bit j % 8 (words are read little-endian).
 * Building masks first and touching each word once costs about half the instructions of a
 * byte read-modify-write per probe (callgrind, per-call add). The fields are cut a word (7
 * fields) at a time, so no field pays a refill test (the same bits as us_block_bit_). */
static inline void us_block_masks_(uint32_t k, us_hash128 h, uint64_t masks[8])
{
    for (uint32_t i = 0; i < 8; i++) masks[i] = 0;
    uint64_t word = h.h2, fields = word;
    /* Whole words of 7 fields unrolled (no test per field), then the rest. */
    while (k >= US_BLOCK_FIELDS_PER_WORD) {
        for (uint32_t i = 0; i < US_BLOCK_FIELDS_PER_WORD; i++, fields >>= 9)
            masks[(fields >> 6) & 7] |= 1ULL << (fields & 63);
        k -= US_BLOCK_FIELDS_PER_WORD;
        if (k == 0) return;
        fields = word = us_fmix64(word + h.h1);
    }
    for (; k; k--, fields >>= 9) masks[(fields >> 6) & 7] |= 1ULL << (fields & 63);
}

static inline int us_test_blocked_(const us_bloom *b, us_hash128 h)
{
    const uint8_t *block = us_block_of_(b, h);
    uint64_t masks[8];
    us_block_masks_(b->k, h, masks);
    uint64_t missing = 0;
    for (int w = 0; w < 8; w++) missing |= masks[w] & ~us_load64_le(block + 8 * w);
    return missing == 0;
}

static inline int us_test_and_set_blocked_(us_bloom *b, us_hash128 h)
{
    uint8_t *block = us_block_of_(b, h);
    uint64_t masks[8];
    us_block_masks_(b->k, h, masks);
    uint64_t missing = 0;
    for (int w = 0; w < 8; w++) {
        uint64_t old = us_load64_le(block + 8 * w);
        missing |= masks[w] & ~old;
        us_store64_le(block + 8 * w, old | masks[w]);
    }
    return missing != 0;
}

static inline int us_test_standard_(const us_bloom *b, us_hash128 h)
{
    uint64_t x = h.h1, y = h.h2 | 1;
    for (uint32_t i = 0; i < b->k; i++) {
        uint64_t j = us_reduce(x, b->nbits);
        if (!(b->bits[j >> 3] & (1u << (j & 7)))) return 0;
        x += y;
        y += i + 1;
    }
    return 1;
}

static inline int us_test_and_set_standard_(us_bloom *b, us_hash128 h)
{
    uint64_t x = h.h1, y = h.h2 | 1;
    unsigned missing = 0;
    for (uint32_t i = 0; i < b->k; i++) {
        uint64_t j = us_reduce(x, b->nbits);
        uint8_t mask = (uint8_t)(1u << (j & 7));
        missing |= !(b->bits[j >> 3] & mask);
        b->bits[j >> 3] |= mask;
        x += y;
        y += i + 1;
    }
    return (int)missing;
}

/* 1 if every bit of the key is set (present, or a false positive), else 0. Never writes.
 * us_bloom_test_and_set sets the key's bits and returns 1 if at least one was 0 (new). */
static inline int us_bloom_test(const us_bloom *b, us_hash128 h)
{
    return b->layout == US_LAYOUT_BLOCKED ? us_test_blocked_(b, h) : us_test_standard_(b, h);
}

static inline int us_bloom_test_and_set(us_bloom *b, us_hash128 h)
{
    return b->layout == US_LAYOUT_BLOCKED ? us_test_and_set_blocked_(b, h)
                                          : us_test_and_set_standard_(b, h);
}


/* Batch forms over n digests, in order (a key repeated in the batch is new only the first time).
 * They prefetch the cache lines of keys a few places ahead, which is where a batch wins over
 * single calls once the filter is larger than the cache. out[i] gets 1 for new / present.
 * test_and_set returns the number of new keys. */
/* Keys ahead that batches prefetch (0: none). A process-wide tuning knob for benchmarks. */
extern unsigned us_prefetch_ahead;

size_t us_bloom_test_and_set_many(us_bloom *b, const us_hash128 *h, size_t n, uint8_t *out);
void us_bloom_test_many(const us_bloom *b, const us_hash128 *h, size_t n, uint8_t *out);

/* Number of set bits among the first nbits (for fill and count estimates). */
uint64_t us_popcount(const uint8_t *bits, uint64_t nbits);

/* dst |= src over nbytes: the union of two filters with identical parameters. */
void us_or_bytes(uint8_t *dst, const uint8_t *src, size_t nbytes);

#endif
