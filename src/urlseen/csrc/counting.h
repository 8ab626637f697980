/* counting.h: a counting Bloom filter's packed, saturating counters: those of
 * CountingBloomFilter, whose remove needs counts where a Bloom filter has bits, and those in
 * front of the exact filter's library.
 *
 * m counters of `width` bits (2, 4 or 8: a counter never straddles a byte), counter i at bit
 * i * width of the array, least significant first, so the bytes mean the same on every machine.
 * Values 0 .. max-1 count; max = 2^width - 1 is sticky (the true count is max or more), so a
 * decrement leaves it as it is: that can keep a false positive, never make a false negative.
 * The k indices of a key are the standard layout's (bloom.h: enhanced double hashing over m)
 * and are a multiset: a repeated index is incremented, decremented and checked once per
 * occurrence. The same rule in all three keeps an unsaturated counter equal to the number of
 * times its index occurs among the keys counted in, which remove and the exact filter's
 * recount of its counters rely on.
 *
 * Overflow events tell an exact owner (the IMP-CBFilter, which keeps the true counts of
 * saturated counters in its library) what the counters could not record: an increment that
 * took a counter from max-1 to max gives (index, max), one that found it at max gives
 * (index, 1), a decrement that found it at max gives (index, 1) and leaves it unchanged.
 * Layouts. The standard layout spreads a key's k counters over the whole array (k cache misses
 * per new key). The blocked layout keeps them in one block of US_COUNTER_BLOCK_BYTES (two cache
 * lines, fetched together): the block from h1, each counter's place in it from the next log2(B)
 * bits of h2, then of fmix64(word + h1) words as bloom.h's blocked layout does (B = counters per
 * block; repeats allowed, a multiset as above). m is then a multiple of B. The counter rules
 * are the same in both: the functions ending in _at take the key's indices, however computed.
 * Pure C: no Python.h, no allocation.
 */
#ifndef URLSEEN_COUNTING_H
#define URLSEEN_COUNTING_H

#include <stddef.h>
#include <stdint.h>

#include "bloom.h"
#include "hash128.h"

typedef struct {
    uint8_t *cells; /* ceil(m * width / 8) bytes the caller owns */
    uint64_t m;
    uint32_t k;     /* 1 .. US_MAX_K */
    uint32_t width; /* 2, 4 or 8 */
} us_counters;

enum { US_COUNTERS_STANDARD = 0, US_COUNTERS_BLOCKED = 1 };
#define US_COUNTER_BLOCK_BYTES 128u

/* Counters per block of the blocked layout: 1024 / width (512, 256 or 128). */
static inline uint64_t us_counter_block(const us_counters *c)
{
    return US_COUNTER_BLOCK_BYTES * 8u / c->width;
}

typedef struct {
    uint64_t index;
    uint32_t delta;
} us_overflow;

static inline unsigned us_counter_max(const us_counters *c) { return (1u << c->width) - 1; }

static inline unsigned us_counter_get(const us_counters *c, uint64_t i)
{
    uint64_t bit = i * c->width;
    return (c->cells[bit >> 3] >> (bit & 7)) & us_counter_max(c);
}

static inline void us_counter_set(us_counters *c, uint64_t i, unsigned v)
{
    uint64_t bit = i * c->width;
    unsigned shift = (unsigned)(bit & 7), max = us_counter_max(c);
    uint8_t *cell = &c->cells[bit >> 3];
    *cell = (uint8_t)((*cell & ~(max << shift)) | ((v & max) << shift));
}

/* The key's k counter indices in `layout` (US_COUNTERS_STANDARD or US_COUNTERS_BLOCKED; for
 * the blocked one c->m is a multiple of us_counter_block(c)). */
void us_counter_indices(const us_counters *c, int layout, us_hash128 h, uint64_t *idx);

/* Prefetch the key's counters in `layout` (blocked: the block's two cache lines). */
void us_counter_prefetch(const us_counters *c, int layout, us_hash128 h);

/* The operations below on a key's indices (from us_counter_indices). */
int us_counting_test_at(const us_counters *c, const uint64_t *idx);
int us_counting_add_at(us_counters *c, const uint64_t *idx, us_overflow *ev, size_t *nev);
int us_counting_add_new_at(us_counters *c, const uint64_t *idx, us_overflow *ev, size_t *nev);
int us_counting_remove_at(us_counters *c, const uint64_t *idx, us_overflow *ev, size_t *nev);

/* The standard layout's operations on a key's digest: */

/* 1 if every counter of the key is above 0 (present, or a false positive). Never writes. */
int us_counting_test(const us_counters *c, us_hash128 h);

/* Increment the key's counters (saturating) and return 1 if any was 0 before (the key is new).
 * If ev is not NULL, overflow events are appended at ev[*nev] (at most k per call). */
int us_counting_add(us_counters *c, us_hash128 h, us_overflow *ev, size_t *nev);

/* Check-and-add with one derivation of the indices: if some counter of the key is 0, increment
 * them as us_counting_add does and return 1 (new); otherwise change nothing and return 0. */
int us_counting_add_new(us_counters *c, us_hash128 h, us_overflow *ev, size_t *nev);

/* Decrement the key's counters, saturated ones excepted (reported as events if ev is not NULL).
 * If some counter is lower than the key's occurrences of it, the key cannot have been added:
 * nothing changes and 0 is returned; otherwise 1. */
int us_counting_remove(us_counters *c, us_hash128 h, us_overflow *ev, size_t *nev);

/* Prefetch the cache lines of the key's counters (batches call it a few keys ahead). */
void us_counting_prefetch(const us_counters *c, us_hash128 h);

/* hist[v] += number of counters holding v, for v in 0 .. max (hist has max + 1 entries). */
void us_counting_histogram(const us_counters *c, uint64_t *hist);

#endif
