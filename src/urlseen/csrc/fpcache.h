/* fpcache.h: a bounded cache of hot 16-byte fingerprints, in front of the exact filter's library.
 *
 * Why: on a crawl's stream most URLs are duplicates (63% of the dev file's lines: 2,754,357
 * lines, 1,029,818 distinct, benchmarks/exact/REPORT.md), and a counting filter sends every
 * duplicate to the library. A duplicate whose fingerprint is here is answered from memory, exactly (only
 * fingerprints known to be in the library are cached), and its reference-count increment waits
 * here until it is written back: on eviction, or when the owner drains the cache at a
 * checkpoint, with the time it was last seen.
 *
 * Batches: increments made during a batch are kept apart (`batch`) until the owner's library
 * transaction commits (us_fpcache_commit folds them into `pending`) or fails
 * (us_fpcache_rollback drops them), so a failed batch changes no reference count. Only the
 * buckets touched since the last commit or rollback are visited.
 *
 * Set-associative: a fingerprint lives in one bucket of US_FPCACHE_WAYS entries, kept in
 * most-recently-used order; a full bucket evicts its least recently used entry. 32 bytes per
 * entry, no load-factor slack. (benchmarks/exact/REPORT.md, part c: with 2^17 entries the whole dev
 * file leaves 0.0105 library look-ups per URL.)
 *
 * Memory follows what the cache holds: it starts with max_buckets / 4^j buckets (a few KiB) and
 * an insert that would evict first grows it 4-fold, up to max_buckets. Bucket n's fingerprints
 * go to buckets 4n .. 4n+3 (us_reduce), in the same order, so the cache holds and evicts
 * exactly what one of max_buckets from the start would; only its memory differs.
 */
#ifndef URLSEEN_FPCACHE_H
#define URLSEEN_FPCACHE_H

#include <stddef.h>
#include <stdint.h>

#define US_FPCACHE_WAYS 8u

typedef struct {
    uint64_t a, b;    /* the fingerprint's bytes 0-7 and 8-15, little-endian */
    uint32_t pending; /* committed reference-count increments not yet written back */
    uint32_t batch;   /* increments of the batch in progress */
    uint32_t seen;    /* when it was last seen (Unix seconds) */
    uint32_t used;
} us_fp_entry;

typedef struct {
    us_fp_entry *entries;  /* nbuckets * US_FPCACHE_WAYS, zeroed */
    uint64_t nbuckets;     /* now; max_buckets / 4^j */
    uint8_t *dirty;        /* nbuckets flags, zeroed */
    uint32_t *dirty_list;  /* room for nbuckets bucket numbers */
    uint64_t ndirty;
    uint64_t max_buckets;  /* at most 2^32 */
} us_fpcache;

/* A cache of at most max_buckets buckets (>= 1), its arrays allocated small: 0, or -1 out of
 * memory (nothing to free). */
int us_fpcache_init(us_fpcache *c, uint64_t max_buckets);

/* Free the arrays. */
void us_fpcache_free(us_fpcache *c);

/* Forget every entry (and shrink to the starting size). */
void us_fpcache_clear(us_fpcache *c);

/* Results of hit / insert: US_FP_FOUND if the fingerprint was there; US_FP_SPILLED if *spill
 * received an evicted entry with increments the caller must write back (pending + batch). */
enum { US_FP_FOUND = 1, US_FP_SPILLED = 2 };

/* Look up fp; if found, count one increment in this batch, note `now` and make it most
 * recently used. */
int us_fpcache_hit(us_fpcache *c, const uint8_t fp[16], uint32_t now);

/* Insert fp (the caller knows it is absent) as most recently used, with `pending` committed
 * and `batch` uncommitted increments, last seen at `now`. */
int us_fpcache_insert(us_fpcache *c, const uint8_t fp[16], uint32_t pending, uint32_t batch,
                      uint32_t now, us_fp_entry *spill);

/* 1 if fp is cached; changes nothing (a look-ahead: the batch step asks it a few keys early,
 * so that a cached duplicate needs no counter probes). */
int us_fpcache_contains(const us_fpcache *c, const uint8_t fp[16]);

/* Prefetch the cache lines of fp's bucket (the batch step calls it a few keys ahead). */
void us_fpcache_prefetch(const us_fpcache *c, const uint8_t fp[16]);

/* Remove fp; returns 1 and its entry in *out if it was there. */
int us_fpcache_take(us_fpcache *c, const uint8_t fp[16], us_fp_entry *out);

/* The batch committed: fold batch increments into pending. An entry whose pending count would
 * overflow is copied to spills[*nspills] (room for all entries of the touched buckets is the
 * caller's; in practice it never happens) and reset. */
void us_fpcache_commit(us_fpcache *c, us_fp_entry *spills, size_t *nspills);

/* The batch failed: drop its increments. */
void us_fpcache_rollback(us_fpcache *c);

#endif
