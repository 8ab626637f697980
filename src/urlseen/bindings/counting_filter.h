/* bindings/counting_filter.h: what the counting filter's binding files share.
 *
 *   counting_filter.c    the CountingFilter type: keys, batches, digest-level access, counters
 *   exact_step.c         its _exact_step, the exact filter's batch step, and ExactStepResult
 *   fingerprint_cache.c  the FingerprintCache type, the exact step's cache of hot fingerprints
 */
#ifndef URLSEEN_BINDINGS_COUNTING_FILTER_H
#define URLSEEN_BINDINGS_COUNTING_FILTER_H

#include "common.h"

#include "csrc/counting.h"
#include "csrc/fpcache.h"

/* Keys ahead of the current one whose counters a batch loop prefetches. */
#define PREFETCH_AHEAD 8

typedef struct {
    us_bound base; /* the buffer, its read-only flag and the count (common.h); the count is of
                    * keys reported new and not removed */
    us_counters c;
    int layout; /* US_COUNTERS_STANDARD or US_COUNTERS_BLOCKED (_set_layout) */
    int hash_id;
    uint32_t seed;
} CountingFilter;

/* The key's counter indices and their prefetch, in this filter's layout. */
static inline const uint64_t *us_cf_indices(const CountingFilter *self, us_hash128 h,
                                            uint64_t *idx)
{
    us_counter_indices(&self->c, self->layout, h, idx);
    return idx;
}

static inline void us_cf_prefetch(const CountingFilter *self, us_hash128 h)
{
    us_counter_prefetch(&self->c, self->layout, h);
}

/* counting_filter.c: the digests of every key of a batch (*n of them, to free with
 * PyMem_RawFree), NULL with an exception (nothing changed); and the overflow events ev[0 .. nev)
 * appended to list as (counter index, delta). */
us_hash128 *us_cf_hash_batch(CountingFilter *self, PyObject *keys, Py_ssize_t *n);
int us_cf_append_events(PyObject *list, const us_overflow *ev, size_t nev);

/* exact_step.c: the _exact_step method and its docstring; and the ExactStepResult type, made
 * and added to the module (with the GIL, at module init). */
extern const char us_cf_exact_step_doc[];
PyObject *us_cf_exact_step(CountingFilter *self, PyObject *args);
int us_exact_step_add(PyObject *module);

/* fingerprint_cache.c: the cache of a FingerprintCache argument (*cache NULL for None; -1 with
 * TypeError for anything else), and an entry appended to list as (fingerprint, pending, batch,
 * seen). */
int us_fingerprint_cache_of(PyObject *obj, us_fpcache **cache);
int us_fingerprint_cache_append(PyObject *list, const us_fp_entry *e);

#endif
