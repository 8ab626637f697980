/* fpcache.c: the hot-fingerprint cache (see fpcache.h). */
#include "fpcache.h"

#include "bloom.h"
#include "bytes.h"

#include <stdlib.h>
#include <string.h>

/* The fewest buckets a cache starts with (16 KiB of entries), when max_buckets allows. */
#define START_BUCKETS 64u

static uint64_t start_buckets(uint64_t max_buckets)
{
    uint64_t n = max_buckets;
    while (n % 4 == 0 && n / 4 >= START_BUCKETS) n /= 4;
    return n;
}

/* Arrays for n buckets, all zero; -1 out of memory (c unchanged). */
static int alloc_arrays(us_fpcache *c, uint64_t n)
{
    us_fp_entry *entries = calloc((size_t)n * US_FPCACHE_WAYS, sizeof *entries);
    uint8_t *dirty = calloc((size_t)n, 1);
    uint32_t *dirty_list = malloc((size_t)n * sizeof *dirty_list);
    if (entries == NULL || dirty == NULL || dirty_list == NULL) {
        free(entries);
        free(dirty);
        free(dirty_list);
        return -1;
    }
    c->entries = entries;
    c->dirty = dirty;
    c->dirty_list = dirty_list;
    c->nbuckets = n;
    c->ndirty = 0;
    return 0;
}

int us_fpcache_init(us_fpcache *c, uint64_t max_buckets)
{
    memset(c, 0, sizeof *c);
    c->max_buckets = max_buckets;
    return alloc_arrays(c, start_buckets(max_buckets));
}

void us_fpcache_free(us_fpcache *c)
{
    free(c->entries);
    free(c->dirty);
    free(c->dirty_list);
    c->entries = NULL;
    c->dirty = NULL;
    c->dirty_list = NULL;
}

void us_fpcache_clear(us_fpcache *c)
{
    us_fpcache old = *c;
    if (alloc_arrays(c, start_buckets(c->max_buckets)) == 0) {
        us_fpcache_free(&old);
        return;
    }
    memset(c->entries, 0, (size_t)c->nbuckets * US_FPCACHE_WAYS * sizeof *c->entries);
    memset(c->dirty, 0, (size_t)c->nbuckets);
    c->ndirty = 0;
}

static inline uint64_t bucket_number(const us_fpcache *c, uint64_t b)
{
    /* The counters index by the first half (h1); the bucket comes from the second. */
    return us_reduce(b, c->nbuckets);
}

static inline void mark(us_fpcache *c, uint64_t bucket)
{
    if (!c->dirty[bucket]) {
        c->dirty[bucket] = 1;
        c->dirty_list[c->ndirty++] = (uint32_t)bucket;
    }
}

static inline int find(const us_fp_entry *bucket, uint64_t a, uint64_t b)
{
    for (unsigned i = 0; i < US_FPCACHE_WAYS && bucket[i].used; i++)
        if (bucket[i].a == a && bucket[i].b == b) return (int)i;
    return -1;
}

int us_fpcache_hit(us_fpcache *c, const uint8_t fp[16], uint32_t now)
{
    uint64_t a = us_load64_le(fp), b = us_load64_le(fp + 8);
    uint64_t n = bucket_number(c, b);
    us_fp_entry *bucket = c->entries + n * US_FPCACHE_WAYS;
    int i = find(bucket, a, b);
    if (i < 0) return 0;
    us_fp_entry e = bucket[i];
    if (e.batch < UINT32_MAX) e.batch++; /* 2^32 hits in one batch: more keys than memory */
    if (now > e.seen) e.seen = now;
    memmove(bucket + 1, bucket, (size_t)i * sizeof *bucket);
    bucket[0] = e;
    mark(c, n);
    return US_FP_FOUND;
}

/* 4 times the buckets: each entry goes to its bucket among 4n .. 4n+3 in its order, and one
 * with uncommitted increments marks its bucket dirty. -1 out of memory (c unchanged). */
static int grow(us_fpcache *c)
{
    us_fpcache old = *c;
    if (alloc_arrays(c, old.nbuckets * 4) < 0) return -1;
    for (uint64_t n = 0; n < old.nbuckets; n++) {
        const us_fp_entry *from = old.entries + n * US_FPCACHE_WAYS;
        unsigned fill[4] = {0, 0, 0, 0};
        for (unsigned i = 0; i < US_FPCACHE_WAYS && from[i].used; i++) {
            uint64_t m = bucket_number(c, from[i].b);
            c->entries[m * US_FPCACHE_WAYS + fill[m - 4 * n]++] = from[i];
            if (from[i].batch) mark(c, m);
        }
    }
    us_fpcache_free(&old);
    return 0;
}

int us_fpcache_insert(us_fpcache *c, const uint8_t fp[16], uint32_t pending, uint32_t batch,
                      uint32_t now, us_fp_entry *spill)
{
    uint64_t a = us_load64_le(fp), b = us_load64_le(fp + 8);
    uint64_t n = bucket_number(c, b);
    /* a full bucket: grow rather than evict while the cache may (a failed grow evicts) */
    while (c->entries[(n + 1) * US_FPCACHE_WAYS - 1].used && c->nbuckets < c->max_buckets &&
           grow(c) == 0)
        n = bucket_number(c, b);
    us_fp_entry *bucket = c->entries + n * US_FPCACHE_WAYS;
    int result = 0;
    us_fp_entry *last = &bucket[US_FPCACHE_WAYS - 1];
    if (last->used && (last->pending || last->batch)) {
        *spill = *last;
        result = US_FP_SPILLED;
    }
    memmove(bucket + 1, bucket, (US_FPCACHE_WAYS - 1) * sizeof *bucket);
    us_fp_entry e = {a, b, pending, batch, now, 1};
    bucket[0] = e;
    mark(c, n);
    return result;
}

int us_fpcache_contains(const us_fpcache *c, const uint8_t fp[16])
{
    uint64_t a = us_load64_le(fp), b = us_load64_le(fp + 8);
    return find(c->entries + bucket_number(c, b) * US_FPCACHE_WAYS, a, b) >= 0;
}

void us_fpcache_prefetch(const us_fpcache *c, const uint8_t fp[16])
{
    const char *bucket = (const char *)(c->entries + bucket_number(c, us_load64_le(fp + 8)) *
                                                         US_FPCACHE_WAYS);
    for (size_t off = 0; off < US_FPCACHE_WAYS * sizeof(us_fp_entry); off += 64)
        __builtin_prefetch(bucket + off, 1);
    __builtin_prefetch(bucket + US_FPCACHE_WAYS * sizeof(us_fp_entry) - 1, 1);
}

int us_fpcache_take(us_fpcache *c, const uint8_t fp[16], us_fp_entry *out)
{
    uint64_t a = us_load64_le(fp), b = us_load64_le(fp + 8);
    us_fp_entry *bucket = c->entries + bucket_number(c, b) * US_FPCACHE_WAYS;
    int i = find(bucket, a, b);
    if (i < 0) return 0;
    *out = bucket[i];
    memmove(bucket + i, bucket + i + 1, (US_FPCACHE_WAYS - 1 - (size_t)i) * sizeof *bucket);
    memset(&bucket[US_FPCACHE_WAYS - 1], 0, sizeof *bucket);
    return 1;
}

void us_fpcache_commit(us_fpcache *c, us_fp_entry *spills, size_t *nspills)
{
    for (uint64_t d = 0; d < c->ndirty; d++) {
        uint32_t n = c->dirty_list[d];
        us_fp_entry *bucket = c->entries + (uint64_t)n * US_FPCACHE_WAYS;
        for (unsigned i = 0; i < US_FPCACHE_WAYS; i++) {
            us_fp_entry *e = &bucket[i];
            if (e->pending > UINT32_MAX - e->batch) {
                spills[(*nspills)++] = *e;
                e->pending = e->batch = 0;
            }
            e->pending += e->batch;
            e->batch = 0;
        }
        c->dirty[n] = 0;
    }
    c->ndirty = 0;
}

void us_fpcache_rollback(us_fpcache *c)
{
    for (uint64_t d = 0; d < c->ndirty; d++) {
        uint32_t n = c->dirty_list[d];
        us_fp_entry *bucket = c->entries + (uint64_t)n * US_FPCACHE_WAYS;
        for (unsigned i = 0; i < US_FPCACHE_WAYS; i++) bucket[i].batch = 0;
        c->dirty[n] = 0;
    }
    c->ndirty = 0;
}
