/* runs.h: the kernels of the library's sorted runs (exact/runs.py), header-only.
 *
 * Why in C: a run is packed records, 40 bytes each (the 16-byte fingerprint, then refs, first
 * seen and last seen as little-endian int64s), in fingerprint order. Merging runs and probing
 * their Bloom filters touch every record; at ~5 ns a record here, against ~1 us for a row
 * that SQLite's VDBE moves, a merge costs about what its bytes cost to read and write.
 */
#ifndef URLSEEN_RUNS_H
#define URLSEEN_RUNS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "csrc/bytes.h"

#define US_RUN_RECORD 40
#define US_RUN_KEY 16
#define US_RUN_BLOOM_K 7 /* probes per key (see the Bloom filter below) */

/* Merge k runs' records (in[i]: n[i] records each, sorted, keys distinct within a run) into
 * out (room for the sum), taking only records whose key is <= bound (all if bound is NULL).
 * A key in more than one run keeps the record of the lowest i; the others are dropped and
 * counted in *repeats. used[i]: records of in[i] consumed. Returns the records written. */
static inline size_t us_run_merge(const uint8_t *const *in, const size_t *n, size_t *used,
                                  size_t k, const uint8_t *bound, uint8_t *out, size_t *repeats)
{
    size_t written = 0;
    for (size_t i = 0; i < k; i++) used[i] = 0;
    for (;;) {
        const uint8_t *best = NULL;
        size_t from = 0;
        for (size_t i = 0; i < k; i++) {
            if (used[i] == n[i]) continue;
            const uint8_t *p = in[i] + used[i] * US_RUN_RECORD;
            if (bound != NULL && memcmp(p, bound, US_RUN_KEY) > 0) continue;
            if (best == NULL || memcmp(p, best, US_RUN_KEY) < 0) {
                best = p;
                from = i;
            }
        }
        if (best == NULL) return written;
        memcpy(out + written * US_RUN_RECORD, best, US_RUN_RECORD);
        written++;
        used[from]++;
        for (size_t i = 0; i < k; i++) {
            while (i != from && used[i] < n[i] &&
                   memcmp(in[i] + used[i] * US_RUN_RECORD, best, US_RUN_KEY) == 0) {
                used[i]++;
                (*repeats)++;
            }
        }
    }
}

/* The record of key in data (count records, sorted), or -1. */
static inline ptrdiff_t us_run_find(const uint8_t *data, size_t count, const uint8_t *key)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(data + mid * US_RUN_RECORD, key, US_RUN_KEY);
        if (c == 0) return (ptrdiff_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* A run's Bloom filter, blocked: its bytes are 64-byte blocks (a cache line), and a key's
 * US_RUN_BLOOM_K bits all fall in one block, so adding or asking costs one cache miss however
 * large the filter (~1% false positives at 10 bits a key, a little above an unblocked one's).
 * The fingerprints are digests, but the counting filter in front of the library probes by the
 * same digests: the halves are mixed (splitmix64's finalizer) so these probes do not follow
 * its. */
#define US_RUN_BLOCK 64

static inline uint64_t us_run_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The key's block (of nblocks) and, in `bits`, its K bit numbers within the block (9 bits
 * each). */
static inline uint8_t *us_run_block(uint8_t *filter, uint64_t nblocks, const uint8_t *key,
                                    uint64_t *bits)
{
    uint64_t h1 = us_run_mix(us_load64_le(key) ^ 0x9e3779b97f4a7c15ULL);
    *bits = us_run_mix(us_load64_le(key + 8) ^ 0x2545f4914f6cdd1dULL);
    return filter + US_RUN_BLOCK * (uint64_t)(((unsigned __int128)h1 * nblocks) >> 64);
}

static inline void us_run_bloom_add(uint8_t *filter, uint64_t nblocks, const uint8_t *key)
{
    uint64_t bits;
    uint8_t *block = us_run_block(filter, nblocks, key, &bits);
    for (unsigned j = 0; j < US_RUN_BLOOM_K; j++, bits >>= 9)
        block[(bits & 511) >> 3] |= (uint8_t)(1u << (bits & 7));
}

static inline int us_run_bloom_has(const uint8_t *filter, uint64_t nblocks, const uint8_t *key)
{
    uint64_t bits;
    const uint8_t *block = us_run_block((uint8_t *)filter, nblocks, key, &bits);
    for (unsigned j = 0; j < US_RUN_BLOOM_K; j++, bits >>= 9)
        if (!(block[(bits & 511) >> 3] & (1u << (bits & 7)))) return 0;
    return 1;
}

#endif
