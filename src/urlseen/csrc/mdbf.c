/* mdbf.c: probes of the multi-dimensional Bloom filter (contract in mdbf.h). */
#include "mdbf.h"

/* One vector of one group: where its bits start, its size, its probe count and its digest. */
typedef struct {
    uint8_t *bits;
    uint64_t n;
    uint32_t k;
    us_hash128 h;
} vec_probe;

static inline vec_probe vector_of(const us_mdbf *f, uint32_t s, uint32_t v, const void *key,
                                  size_t len)
{
    vec_probe p;
    p.bits = f->bits + s * us_mdbf_group_bytes(f->n1, f->n2) + (v ? (f->n1 + 7) / 8 : 0);
    p.n = v ? f->n2 : f->n1;
    p.k = v ? f->k2 : f->k1;
    us_hash128 unused = {0, 0}; /* a vector probed 0 times is never hashed */
    p.h = p.k ? us_digest(f->hash_id, key, len, us_mdbf_family_seed(f->seed, s, v)) : unused;
    return p;
}

static inline int vector_test(const vec_probe *p)
{
    us_bloom b = {p->bits, p->n, p->k, US_LAYOUT_STANDARD};
    return p->k == 0 || us_bloom_test(&b, p->h);
}

static inline int vector_test_and_set(const vec_probe *p)
{
    us_bloom b = {p->bits, p->n, p->k, US_LAYOUT_STANDARD};
    return p->k != 0 && us_bloom_test_and_set(&b, p->h);
}

/* A group's test: every probed bit of both its vectors set. V2 first: small, likely cached. */
static int group_test(const us_mdbf *f, uint32_t s, const void *key, size_t len)
{
    vec_probe v2 = vector_of(f, s, 1, key, len);
    if (!vector_test(&v2)) return 0;
    vec_probe v1 = vector_of(f, s, 0, key, len);
    return vector_test(&v1);
}

int us_mdbf_test(const us_mdbf *f, int rule, const void *key, size_t len)
{
    for (uint32_t s = 0; s < f->groups; s++) {
        int full = group_test(f, s, key, len);
        if (rule == US_MDBF_ANY && full) return 1;
        if (rule != US_MDBF_ANY && !full) return 0;
    }
    return rule != US_MDBF_ANY;
}

int us_mdbf_test_and_set(us_mdbf *f, int rule, const void *key, size_t len)
{
    if (rule == US_MDBF_ANY) {
        /* Present as soon as one group is full (group_test's probes); only a new key is
         * written, in a second pass that hashes only the V1s the first one skipped. */
        vec_probe p[US_MDBF_MAX_GROUPS][2];
        for (uint32_t s = 0; s < f->groups; s++) {
            p[s][1] = vector_of(f, s, 1, key, len);
            p[s][0].bits = NULL; /* not hashed yet */
            if (!vector_test(&p[s][1])) continue;
            p[s][0] = vector_of(f, s, 0, key, len);
            if (vector_test(&p[s][0])) return 0;
        }
        for (uint32_t s = 0; s < f->groups; s++) {
            if (p[s][0].bits == NULL) p[s][0] = vector_of(f, s, 0, key, len);
            vector_test_and_set(&p[s][0]);
            vector_test_and_set(&p[s][1]);
        }
        return 1;
    }
    /* ALL: present only if no bit anywhere was 0, and then setting changes nothing; so one
     * pass that sets every bit and notes a 0 is exact, and hashes each family once. */
    int fresh = 0;
    for (uint32_t s = 0; s < f->groups; s++)
        for (uint32_t v = 0; v < 2; v++) {
            vec_probe p = vector_of(f, s, v, key, len);
            fresh |= vector_test_and_set(&p);
        }
    return fresh;
}

void us_mdbf_positions(const us_mdbf *f, const void *key, size_t len, uint64_t *out)
{
    for (uint32_t s = 0; s < f->groups; s++)
        for (uint32_t v = 0; v < 2; v++) {
            vec_probe p = vector_of(f, s, v, key, len);
            if (p.k) us_standard_indices(p.h, p.n, p.k, out);
            out += p.k;
        }
}
