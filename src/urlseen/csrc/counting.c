/* counting.c: counting Bloom-filter operations (see counting.h for the contract). */
#include "counting.h"

#include "bytes.h"

/* Increment the counters at idx[0 .. k) (saturating), appending overflow events if ev is set. */
static void increment(us_counters *c, const uint64_t *idx, us_overflow *ev, size_t *nev)
{
    unsigned max = us_counter_max(c);
    for (uint32_t i = 0; i < c->k; i++) {
        unsigned v = us_counter_get(c, idx[i]);
        if (v < max) us_counter_set(c, idx[i], v + 1);
        if (ev != NULL && v >= max - 1) {
            ev[*nev].index = idx[i];
            ev[*nev].delta = v == max ? 1 : max;
            (*nev)++;
        }
    }
}

static int any_zero(const us_counters *c, const uint64_t *idx)
{
    for (uint32_t i = 0; i < c->k; i++)
        if (us_counter_get(c, idx[i]) == 0) return 1;
    return 0;
}

void us_counter_indices(const us_counters *c, int layout, us_hash128 h, uint64_t *idx)
{
    if (layout != US_COUNTERS_BLOCKED) {
        us_standard_indices(h, c->m, c->k, idx);
        return;
    }
    uint64_t per = us_counter_block(c), base = us_reduce(h.h1, c->m / per) * per;
    unsigned bits = (unsigned)__builtin_ctzll(per), left = 64;
    uint64_t word = h.h2, fields = word;
    for (uint32_t i = 0; i < c->k; i++) {
        if (left < bits) {
            fields = word = us_fmix64(word + h.h1);
            left = 64;
        }
        idx[i] = base + (fields & (per - 1));
        fields >>= bits;
        left -= bits;
    }
}

void us_counter_prefetch(const us_counters *c, int layout, us_hash128 h)
{
    if (layout != US_COUNTERS_BLOCKED) {
        us_counting_prefetch(c, h);
        return;
    }
    uint64_t per = us_counter_block(c);
    const uint8_t *block = c->cells + us_reduce(h.h1, c->m / per) * US_COUNTER_BLOCK_BYTES;
    __builtin_prefetch(block, 1);
    __builtin_prefetch(block + 64, 1);
}

int us_counting_test_at(const us_counters *c, const uint64_t *idx)
{
    return !any_zero(c, idx);
}

int us_counting_add_at(us_counters *c, const uint64_t *idx, us_overflow *ev, size_t *nev)
{
    int fresh = any_zero(c, idx);
    increment(c, idx, ev, nev);
    return fresh;
}

int us_counting_add_new_at(us_counters *c, const uint64_t *idx, us_overflow *ev, size_t *nev)
{
    if (!any_zero(c, idx)) return 0;
    increment(c, idx, ev, nev);
    return 1;
}

int us_counting_remove_at(us_counters *c, const uint64_t *idx, us_overflow *ev, size_t *nev)
{
    unsigned max = us_counter_max(c);
    for (uint32_t i = 0; i < c->k; i++) {
        unsigned v = us_counter_get(c, idx[i]), occurrences = 0;
        if (v == max) continue;
        for (uint32_t j = 0; j < c->k; j++) occurrences += idx[j] == idx[i];
        if (v < occurrences) return 0;
    }
    for (uint32_t i = 0; i < c->k; i++) {
        unsigned v = us_counter_get(c, idx[i]);
        if (v < max) {
            us_counter_set(c, idx[i], v - 1);
        } else if (ev != NULL) {
            ev[*nev].index = idx[i];
            ev[*nev].delta = 1;
            (*nev)++;
        }
    }
    return 1;
}

int us_counting_test(const us_counters *c, us_hash128 h)
{
    uint64_t idx[US_MAX_K];
    us_standard_indices(h, c->m, c->k, idx);
    return us_counting_test_at(c, idx);
}

int us_counting_add(us_counters *c, us_hash128 h, us_overflow *ev, size_t *nev)
{
    uint64_t idx[US_MAX_K];
    us_standard_indices(h, c->m, c->k, idx);
    return us_counting_add_at(c, idx, ev, nev);
}

int us_counting_add_new(us_counters *c, us_hash128 h, us_overflow *ev, size_t *nev)
{
    uint64_t idx[US_MAX_K];
    us_standard_indices(h, c->m, c->k, idx);
    return us_counting_add_new_at(c, idx, ev, nev);
}

int us_counting_remove(us_counters *c, us_hash128 h, us_overflow *ev, size_t *nev)
{
    uint64_t idx[US_MAX_K];
    us_standard_indices(h, c->m, c->k, idx);
    return us_counting_remove_at(c, idx, ev, nev);
}

void us_counting_prefetch(const us_counters *c, us_hash128 h)
{
    uint64_t idx[US_MAX_K];
    us_standard_indices(h, c->m, c->k, idx);
    for (uint32_t i = 0; i < c->k; i++) __builtin_prefetch(c->cells + (idx[i] * c->width >> 3), 1);
}

void us_counting_histogram(const us_counters *c, uint64_t *hist)
{
    for (uint64_t i = 0; i < c->m; i++) hist[us_counter_get(c, i)]++;
}
