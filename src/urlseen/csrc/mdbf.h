/* mdbf.h: the multi-dimensional Bloom filter (MDBF) on a buffer the caller owns, from the paper
 * "The use of the multi-dimensional Bloom filter algorithm in web-page de-duplication", whose
 * missing formal description is reconstructed from its claims and experiments.
 *
 * S groups; group s holds two bit vectors, V1 of n1 bits probed k1 times and V2 of n2 bits
 * (n2 = n1 / r, the paper's "N/k") probed k2 times. Every (group, vector) pair has its own hash
 * family: the key's 128-bit digest under seed + 2*s + v (mod 2^32), v = 0 for V1 and 1 for V2,
 * and its probes are the standard layout's double hashing over that vector (bloom.h), so the
 * 2S families are as independent as differently seeded digests are: the false-positive rate of
 * all S groups together is the product of theirs only if they are.
 *
 * Memory layout: group s starts at byte s * (bytes(n1) + bytes(n2)); V1 first, then V2, each
 * byte aligned, bit j of a vector is bit j % 8 of its byte j / 8 (as everywhere in urlseen).
 *
 * Query rules: US_MDBF_ALL (the default) reports a key present only if every group has all its
 * bits set, which is the reading under which the false-positive rate falls as S grows, as the
 * paper claims and measures; US_MDBF_ANY (the paper's text as written) reports it present if
 * some group has, and its false-positive rate rises with S. Insert sets the bits of every
 * group, so neither rule has false negatives. test_and_set changes nothing for a key it reports
 * present.
 *
 * Pure C: no Python.h, no allocation.
 */
#ifndef URLSEEN_MDBF_H
#define URLSEEN_MDBF_H

#include <stddef.h>
#include <stdint.h>

#include "bloom.h"
#include "digest.h"

#define US_MDBF_MAX_GROUPS 64u

enum us_mdbf_rule { US_MDBF_ALL = 0, US_MDBF_ANY = 1 };

/* Invariants: 1 <= groups <= US_MDBF_MAX_GROUPS; 1 <= k1 + k2; k1, k2 <= US_MAX_K; n1 >= 1 if
 * k1 > 0 and n2 >= 1 if k2 > 0; bits points at us_mdbf_data_bytes() bytes the caller owns. */
typedef struct {
    uint8_t *bits;
    uint32_t groups;
    uint64_t n1, n2;
    uint32_t k1, k2;
    int hash_id; /* digest.h */
    uint32_t seed;
} us_mdbf;

/* Bytes of one group (V1 then V2) and of the whole filter. */
static inline uint64_t us_mdbf_group_bytes(uint64_t n1, uint64_t n2)
{
    return (n1 + 7) / 8 + (n2 + 7) / 8;
}

static inline uint64_t us_mdbf_data_bytes(const us_mdbf *f)
{
    return (uint64_t)f->groups * us_mdbf_group_bytes(f->n1, f->n2);
}

/* The seed of (group, vector)'s hash family: distinct for all 2 * groups pairs. */
static inline uint32_t us_mdbf_family_seed(uint32_t seed, uint32_t group, uint32_t vector)
{
    return seed + 2u * group + vector;
}

/* 1 if the key is (probably) present under rule, else 0. Never writes. Probes V2 first (it is
 * the smaller vector, the likelier to be cached) and stops at the first decisive group. */
int us_mdbf_test(const us_mdbf *f, int rule, const void *key, size_t len);

/* Check-and-add: if the key is present under rule, change nothing and return 0; else set its
 * bits in every group and return 1 (new). */
int us_mdbf_test_and_set(us_mdbf *f, int rule, const void *key, size_t len);

/* The key's positions, for tests and oracles: per group, k1 positions in [0, n1) for V1, then
 * k2 in [0, n2) for V2; out holds groups * (k1 + k2) values. */
void us_mdbf_positions(const us_mdbf *f, const void *key, size_t len, uint64_t *out);

#endif
