/* bindings/exact_step.c: CountingFilter._exact_step, the exact filter's hot loop in one C call,
 * and its result type, ExactStepResult.
 *
 * Per key: hash, test the counters, then either count it new (some counter was 0: no library
 * I/O), answer it from the cache (a known duplicate), or hand it back to Python to ask the
 * library. Only that last group, a small minority on a crawl's stream, costs Python work per
 * key. The line engine runs the same step on digests it made from its own buffers
 * (us_counting_exact_step).
 */
#include "counting_filter.h"

/* The result of _exact_step: a struct sequence (a named tuple, as os.stat_result), so the
 * caller reads its parts by name. The type is made at module init (us_exact_step_add). */
static PyTypeObject *ExactStepResultType;

static PyStructSequence_Field exact_step_fields[] = {
    {"answers", "Per key, in order: True if new, False if a duplicate the cache answered, None "
                "if undecided (the library decides; see undecided)."},
    {"new_fingerprints", "The 16-byte fingerprints of the keys found new, in order: the "
                         "library's inserts."},
    {"undecided", "(key index, fingerprint) of each key the counters and the cache could not "
                  "decide: all its counters are above 0 and it is not cached."},
    {"evicted", "(fingerprint, pending, batch, seen) of each cache entry evicted to make room, "
                "whose increments must be written back to the library."},
    {"counter_overflows", "(counter index, delta) of each increment the saturated counters "
                          "could not record (csrc/counting.h), for the library's true counts."},
    {NULL, NULL},
};

PyDoc_STRVAR(exact_step_result_doc,
             "ExactStepResult(answers, new_fingerprints, undecided, evicted, counter_overflows)\n\n"
             "What CountingFilter._exact_step decided for one batch of keys, and what the exact\n"
             "filter still has to do with its library.");

static PyStructSequence_Desc exact_step_desc = {
    "urlseen._core.ExactStepResult",
    exact_step_result_doc,
    exact_step_fields,
    5,
};

const char us_cf_exact_step_doc[] = PyDoc_STR(
    "_exact_step(keys, cache, now=0) -> ExactStepResult\n\n"
    "One batch of the exact filter's check-and-add. Every key is hashed first (a bad key\n"
    "raises, nothing changed). Then in order, per key: some counter 0 -> new: counters\n"
    "incremented, fingerprint cached, answers[i] = True, fingerprint appended to\n"
    "new_fingerprints; else cached -> duplicate, one increment in the cache's batch,\n"
    "answers[i] = False; else answers[i] = None and (i, fingerprint) appended to\n"
    "undecided (the library decides). evicted: cache entries (fingerprint, pending,\n"
    "batch, seen) evicted with increments to write back; counter_overflows: overflow\n"
    "events (counter index, delta) of the increments. cache may be None; now: Unix\n"
    "seconds.");

static inline void fingerprint_of(uint8_t fp[16], us_hash128 h)
{
    us_store64_le(fp, h.h1);
    us_store64_le(fp + 8, h.h2);
}

/* The exact step on the digests h[0 .. n) of a batch's keys (see us_cf_exact_step_doc).
 * repeat: NULL, or per key 1 if it repeats an earlier key of the batch (the line engine's
 * repeats, csrc/repeats.h): such a key is looked up in the cache first, without its counters'
 * look-ahead; found, it is the duplicate the usual order would answer (a cached fingerprint's
 * counters are all above 0), else it takes the usual way. */
static PyObject *exact_step(CountingFilter *self, const us_hash128 *h, const uint8_t *repeat,
                            Py_ssize_t n, us_fpcache *cache, unsigned int now)
{
    PyObject *answers = PyList_New(n), *new_fps = PyList_New(0), *undecided = PyList_New(0);
    PyObject *evicted = PyList_New(0), *overflows = PyList_New(0);
    PyObject *result = NULL;
    uint8_t *cached = NULL;
    if (!answers || !new_fps || !undecided || !evicted || !overflows) goto fail;
    /* cached[i]: key i was in the cache a few keys early, so its counters were not prefetched
     * (a cached fingerprint is in the library, so its counters are all above 0: asking the
     * cache first gives the same answer without probing them). */
    if (cache) cached = PyMem_RawCalloc((size_t)n + 1, 1);
    if (cache && cached == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    us_overflow ev[US_MAX_K];
    uint64_t idx[US_MAX_K];
    unsigned long long count = self->base.count;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t fp[16];
        if (cache == NULL) {
            if (i + PREFETCH_AHEAD < n) us_cf_prefetch(self, h[i + PREFETCH_AHEAD]);
        } else {
            if (i + 2 * PREFETCH_AHEAD < n && !(repeat && repeat[i + 2 * PREFETCH_AHEAD])) {
                fingerprint_of(fp, h[i + 2 * PREFETCH_AHEAD]);
                us_fpcache_prefetch(cache, fp);
            }
            if (i + PREFETCH_AHEAD < n && !(repeat && repeat[i + PREFETCH_AHEAD])) {
                Py_ssize_t j = i + PREFETCH_AHEAD;
                fingerprint_of(fp, h[j]);
                cached[j] = (uint8_t)us_fpcache_contains(cache, fp);
                if (!cached[j]) us_cf_prefetch(self, h[j]);
            }
        }
        fingerprint_of(fp, h[i]);
        us_fp_entry spill;
        PyObject *answer;
        size_t nev = 0;
        if (cache && (cached[i] || (repeat && repeat[i])) && us_fpcache_hit(cache, fp, now)) {
            answer = Py_False; /* one evicted since the look-ahead is asked in the usual order */
        } else if (us_counting_add_new_at(&self->c, us_cf_indices(self, h[i], idx), ev, &nev)) {
            count++;
            if (nev && us_cf_append_events(overflows, ev, nev) < 0) goto fail;
            if (append_new(new_fps, digest_bytes(h[i].h1, h[i].h2)) < 0) goto fail;
            if (cache && (us_fpcache_insert(cache, fp, 0, 0, now, &spill) & US_FP_SPILLED) &&
                us_fingerprint_cache_append(evicted, &spill) < 0)
                goto fail;
            answer = Py_True;
        } else if (cache && us_fpcache_hit(cache, fp, now)) {
            answer = Py_False;
        } else {
            if (append_new(undecided, Py_BuildValue("(nN)", i, digest_bytes(h[i].h1, h[i].h2))) <
                0)
                goto fail;
            answer = Py_None;
        }
        PyList_SET_ITEM(answers, i, Py_NewRef(answer));
    }
    us_bound_set_count(&self->base, count);
    result = PyStructSequence_New(ExactStepResultType);
    if (result == NULL) goto fail;
    PyMem_RawFree(cached);
    PyStructSequence_SET_ITEM(result, 0, answers); /* each reference is taken over */
    PyStructSequence_SET_ITEM(result, 1, new_fps);
    PyStructSequence_SET_ITEM(result, 2, undecided);
    PyStructSequence_SET_ITEM(result, 3, evicted);
    PyStructSequence_SET_ITEM(result, 4, overflows);
    return result;
fail:
    /* Only an allocation failure gets here, after counters may have changed: the caller
     * treats any exception from this step as "rebuild the counters from the library". */
    PyMem_RawFree(cached);
    Py_XDECREF(answers);
    Py_XDECREF(new_fps);
    Py_XDECREF(undecided);
    Py_XDECREF(evicted);
    Py_XDECREF(overflows);
    return NULL;
}

PyObject *us_cf_exact_step(CountingFilter *self, PyObject *args)
{
    PyObject *keys, *cache_obj;
    unsigned int now = 0;
    us_fpcache *cache;
    if (!PyArg_ParseTuple(args, "OO|I:_exact_step", &keys, &cache_obj, &now)) return NULL;
    if (us_fingerprint_cache_of(cache_obj, &cache) < 0 || us_bound_usable(&self->base, 1) < 0)
        return NULL;
    Py_ssize_t n;
    us_hash128 *h = us_cf_hash_batch(self, keys, &n);
    if (h == NULL) return NULL;
    PyObject *result = exact_step(self, h, NULL, n, cache, now);
    PyMem_RawFree(h);
    return result;
}

/* The exact step for the line engine (line_engine_filters.c), on digests it made. */
PyObject *us_counting_exact_step(PyObject *obj, const us_hash128 *h, const uint8_t *repeat,
                                 Py_ssize_t n, PyObject *cache_obj, unsigned int now)
{
    CountingFilter *self = (CountingFilter *)obj;
    us_fpcache *cache;
    if (us_fingerprint_cache_of(cache_obj, &cache) < 0 || us_bound_usable(&self->base, 1) < 0)
        return NULL;
    return exact_step(self, h, repeat, n, cache, now);
}

int us_exact_step_add(PyObject *module)
{
    if (ExactStepResultType == NULL &&
        (ExactStepResultType = PyStructSequence_NewType(&exact_step_desc)) == NULL)
        return -1;
    return PyModule_AddObjectRef(module, "ExactStepResult", (PyObject *)ExactStepResultType);
}
