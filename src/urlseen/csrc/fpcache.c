/* fpcache.c: the hot-fingerprint cache (see fpcache.h). */
#include "fpcache.h"

#include "bloom.h"
#include "bytes.h"

#include <string.h>

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

int us_fpcache_insert(us_fpcache *c, const uint8_t fp[16], uint32_t pending, uint32_t batch,
                      uint32_t now, us_fp_entry *spill)
{
    uint64_t a = us_load64_le(fp), b = us_load64_le(fp + 8);
    uint64_t n = bucket_number(c, b);
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
