/* bindings/line_engine_filters.c: the LineEngine's filter steps in C (line_engine.h): the
 * batch's keys are hashed from the engine's buffers (or taken from the worker's digests) and
 * answered without a Python object per key.
 *
 * Bloom (bloom_add, bloom_test, bloom_commit): the keys whose digest the known-digest cache
 * holds are duplicates (or present) without a probe; the rest are probed in one call of the
 * BitFilter (us_bit_filter_probe). Exact (exact_step): MD5 digests, several keys at a time,
 * then the CountingFilter's exact step (us_counting_exact_step).
 */
#include "line_engine.h"

/* Digests known to be in the filter: 32K slots, 512 KiB (stays in L2/L3 beside the probes). */
#define KNOWN_SLOTS (1u << 15)

/* 1 if the worker's digests of the batch (line->hashed) were made with this hash. */
static int made_with(const LineEngine *self, int hash_id, uint64_t seed)
{
    return self->work.valid && self->work.hash_id == hash_id && self->work.seed == seed;
}

/* Hash the batch's keys with the filter's hash, without the GIL; the known digests are reset
 * when the filter's bits are not the ones they describe. */
static int hash_keys(LineEngine *self, PyObject *filter)
{
    int hash_id;
    uint64_t seed;
    const void *bits;
    if (us_bit_filter_hash_of(filter, &hash_id, &seed, &bits) < 0) {
        PyErr_Format(PyExc_TypeError, "expected a BitFilter, not '%.200s'",
                     Py_TYPE(filter)->tp_name);
        return -1;
    }
    if (us_engine_index_keys(self) < 0) return -1;
    if (self->bloom.known == NULL &&
        (self->bloom.known = PyMem_RawCalloc(KNOWN_SLOTS, sizeof(us_hash128))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (self->bloom.miss_cap < self->keys.cap) {
        size_t n = self->keys.cap;
        size_t *mk = PyMem_RawRealloc(self->bloom.miss_key, n * sizeof(size_t));
        if (mk != NULL) self->bloom.miss_key = mk;
        us_hash128 *md = PyMem_RawRealloc(self->bloom.miss_digest, n * sizeof(us_hash128));
        if (md != NULL) self->bloom.miss_digest = md;
        uint8_t *mf = PyMem_RawRealloc(self->bloom.miss_flag, n);
        if (mf != NULL) self->bloom.miss_flag = mf;
        if (mk == NULL || md == NULL || mf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->bloom.miss_cap = n;
    }
    if (bits != self->bloom.known_bits) { /* another filter, or its bits moved: forget */
        memset(self->bloom.known, 0, KNOWN_SLOTS * sizeof(us_hash128));
        self->bloom.known_bits = bits;
    }
    /* the worker's digests where it made them (it leaves a batch to this thread when this
     * thread would wait for it), the rest hashed here */
    int made = made_with(self, hash_id, seed);
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    for (size_t k = 0; k < self->keys.n; k++) {
        size_t i = self->keys.line[k];
        const us_line *line = &self->batch.lines[i];
        self->keys.digests[k] =
            made && line->hashed
                ? self->work.ldig[i]
                : us_digest(hash_id, us_engine_key_ptr(self, line), line->key_len, seed);
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return 0;
}

static inline size_t known_slot(us_hash128 h)
{
    return (size_t)((h.h1 >> 32) ^ (h.h2 >> 40)) & (KNOWN_SLOTS - 1);
}

/* The batch's keys that are not known to be in the filter: miss_key / miss_digest[0 .. m).
 * Known keys get flag `known_flag` (0: a duplicate for test-and-set; 1: present for a test).
 * For a test-and-set (known_flag 0) a miss is known from here on: the probe will add it before
 * any later key of the batch is answered, so a repeat within the batch is a duplicate without a
 * probe of its own (a polled feed repeats most of its URLs within a batch); a failed probe
 * forgets the known digests (forget_known). */
static size_t gather_misses(LineEngine *self, uint8_t known_flag)
{
    size_t m = 0;
    for (size_t k = 0; k < self->keys.n; k++) {
        us_hash128 h = self->keys.digests[k];
        us_hash128 *slot = &self->bloom.known[known_slot(h)];
        if (slot->h1 == h.h1 && slot->h2 == h.h2) {
            self->keys.flags[k] = known_flag;
            continue;
        }
        if (known_flag == 0) *slot = h;
        self->bloom.miss_key[m] = k;
        self->bloom.miss_digest[m++] = h;
    }
    return m;
}

/* After a failed probe: the known digests may name keys never added. */
static void forget_known(LineEngine *self)
{
    memset(self->bloom.known, 0, KNOWN_SLOTS * sizeof(us_hash128));
}

/* Probe the misses (write: test-and-set, else test), put their answers in flags, and remember
 * the digests now known to be in the filter: all of them after a test-and-set, the present
 * ones after a test. */
static Py_ssize_t probe_misses(LineEngine *self, PyObject *filter, size_t m, int write)
{
    Py_ssize_t fresh =
        us_bit_filter_probe(filter, self->bloom.miss_digest, m, self->bloom.miss_flag, write);
    if (fresh < 0) return -1;
    for (size_t j = 0; j < m; j++) {
        self->keys.flags[self->bloom.miss_key[j]] = self->bloom.miss_flag[j];
        if (write || self->bloom.miss_flag[j]) {
            us_hash128 h = self->bloom.miss_digest[j];
            self->bloom.known[known_slot(h)] = h;
        }
    }
    return fresh;
}

US_ENGINE_DOC(us_engine_bloom_add_doc,
              "bloom_add(filter) -> int\n\n"
              "Check-and-add the batch's keys in a BitFilter (as its add_many would); returns the\n"
              "number of new keys.");

PyObject *us_engine_bloom_add(LineEngine *self, PyObject *filter)
{
    if (us_engine_need_batch(self, 1) < 0 || hash_keys(self, filter) < 0) return NULL;
    Py_ssize_t fresh = probe_misses(self, filter, gather_misses(self, 0), 1);
    if (fresh < 0) return forget_known(self), NULL;
    self->keys.flagged = 1;
    self->bloom.tested = 0;
    self->batch.fresh = (size_t)fresh;
    return PyLong_FromSsize_t(fresh);
}

US_ENGINE_DOC(us_engine_bloom_test_doc,
              "bloom_test(filter) -> int\n\n"
              "Test the batch's keys in a BitFilter without writing: a key is new if the filter\n"
              "lacks it and no earlier key of the batch is the same. Returns the number of new\n"
              "keys; bloom_commit adds them once their lines are out.");

PyObject *us_engine_bloom_test(LineEngine *self, PyObject *filter)
{
    if (us_engine_need_batch(self, 1) < 0 || hash_keys(self, filter) < 0) return NULL;
    if (probe_misses(self, filter, gather_misses(self, 1), 0) < 0) return NULL;
    size_t slots = 16;
    while (slots < 2 * self->keys.n) slots *= 2;
    if (slots > self->bloom.set_cap) {
        us_hash128 *s = PyMem_RawRealloc(self->bloom.set_slots, slots * sizeof(us_hash128));
        if (s == NULL) return PyErr_NoMemory();
        self->bloom.set_slots = s;
        uint8_t *u = PyMem_RawRealloc(self->bloom.set_used, slots);
        if (u == NULL) return PyErr_NoMemory();
        self->bloom.set_used = u;
        self->bloom.set_cap = slots;
    }
    size_t fresh = 0;
    us_digest_set set;
    us_digest_set_init(&set, self->bloom.set_slots, self->bloom.set_used, slots);
    for (size_t k = 0; k < self->keys.n; k++) {
        uint8_t f = !self->keys.flags[k] && us_digest_set_add(&set, self->keys.digests[k]);
        self->keys.flags[k] = f;
        fresh += f;
    }
    self->keys.flagged = 1;
    self->bloom.tested = 1;
    self->batch.fresh = fresh;
    return PyLong_FromSize_t(fresh);
}

/* 0 if obj is a BitFilter (a layer of the filter the engine probes), else -1 and TypeError. */
static int layer_of(PyObject *obj)
{
    int hash_id;
    uint64_t seed;
    const void *bits;
    if (us_bit_filter_hash_of(obj, &hash_id, &seed, &bits) < 0) {
        PyErr_Format(PyExc_TypeError, "expected a BitFilter, not '%.200s'", Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

/* Drop from the misses the keys an older layer holds (flag 0: a duplicate), remembering them
 * as known: the known digests are those in any layer of the filter the engine probes. */
static int drop_older(LineEngine *self, PyObject *older, size_t *m)
{
    if (us_bit_filter_probe(older, self->bloom.miss_digest, *m, self->bloom.miss_flag, 0) < 0)
        return -1;
    size_t kept = 0;
    for (size_t j = 0; j < *m; j++) {
        us_hash128 h = self->bloom.miss_digest[j];
        if (self->bloom.miss_flag[j]) {
            self->keys.flags[self->bloom.miss_key[j]] = 0;
            self->bloom.known[known_slot(h)] = h;
            continue;
        }
        self->bloom.miss_key[kept] = self->bloom.miss_key[j];
        self->bloom.miss_digest[kept++] = h;
    }
    *m = kept;
    return 0;
}

US_ENGINE_DOC(us_engine_bloom_add_layers_doc,
              "bloom_add_layers(newest, older) -> int\n\n"
              "bloom_add for a filter in layers (a tuple of older BitFilters with the newest's\n"
              "hash and seed): a key an older layer holds is a duplicate, the rest are\n"
              "checked-and-added in the newest. Returns the number of new keys.");

PyObject *us_engine_bloom_add_layers(LineEngine *self, PyObject *args)
{
    PyObject *newest, *older;
    if (!PyArg_ParseTuple(args, "OO!:bloom_add_layers", &newest, &PyTuple_Type, &older))
        return NULL;
    if (us_engine_need_batch(self, 1) < 0 || hash_keys(self, newest) < 0) return NULL;
    size_t m = gather_misses(self, 0);
    for (Py_ssize_t i = PyTuple_GET_SIZE(older) - 1; i >= 0 && m; i--) {
        PyObject *layer = PyTuple_GET_ITEM(older, i);
        if (layer_of(layer) < 0 || drop_older(self, layer, &m) < 0) {
            forget_known(self);
            return NULL;
        }
    }
    Py_ssize_t fresh = probe_misses(self, newest, m, 1);
    if (fresh < 0) return forget_known(self), NULL;
    self->keys.flagged = 1;
    self->bloom.tested = 0;
    self->batch.fresh = (size_t)fresh;
    return PyLong_FromSsize_t(fresh);
}

US_ENGINE_DOC(us_engine_bloom_test_also_doc,
              "bloom_test_also(filter) -> int\n\n"
              "After bloom_test: the keys it found new that this BitFilter (another layer of a\n"
              "growing filter, with the same hash and seed) holds are not new. Returns the number\n"
              "of new keys left; bloom_commit adds them to the filter bloom_test probed.");

PyObject *us_engine_bloom_test_also(LineEngine *self, PyObject *filter)
{
    if (us_engine_need_batch(self, 1) < 0) return NULL;
    if (!self->bloom.tested) {
        PyErr_SetString(PyExc_RuntimeError, "bloom_test_also needs bloom_test first");
        return NULL;
    }
    if (layer_of(filter) < 0) return NULL;
    size_t m = 0; /* the keys still new; miss_* hold >= keys.cap since bloom_test */
    for (size_t k = 0; k < self->keys.n; k++) {
        if (!self->keys.flags[k]) continue;
        self->bloom.miss_key[m] = k;
        self->bloom.miss_digest[m++] = self->keys.digests[k];
    }
    if (us_bit_filter_probe(filter, self->bloom.miss_digest, m, self->bloom.miss_flag, 0) < 0)
        return NULL;
    size_t fresh = m;
    for (size_t j = 0; j < m; j++) {
        if (!self->bloom.miss_flag[j]) continue;
        self->keys.flags[self->bloom.miss_key[j]] = 0;
        fresh--;
    }
    self->batch.fresh = fresh;
    return PyLong_FromSize_t(fresh);
}

US_ENGINE_DOC(us_engine_bloom_commit_doc,
              "bloom_commit(filter) -> int\n\n"
              "Add the keys bloom_test found new to the filter (after their lines are written);\n"
              "returns how many the filter counted new.");

PyObject *us_engine_bloom_commit(LineEngine *self, PyObject *filter)
{
    if (us_engine_need_batch(self, 1) < 0) return NULL;
    if (!self->bloom.tested) {
        PyErr_SetString(PyExc_RuntimeError, "bloom_commit needs bloom_test first");
        return NULL;
    }
    /* the new keys' digests, packed at the front (in place: k' <= k) */
    size_t m = 0;
    for (size_t k = 0; k < self->keys.n; k++)
        if (self->keys.flags[k]) self->keys.digests[m++] = self->keys.digests[k];
    self->bloom.tested = 0; /* the digests are no longer per key */
    uint8_t *scratch = self->bloom.set_used; /* >= 2 * nkeys bytes since bloom_test */
    Py_ssize_t fresh = us_bit_filter_probe(filter, self->keys.digests, m, scratch, 1);
    if (fresh < 0) return NULL;
    for (size_t j = 0; j < m; j++) {
        us_hash128 h = self->keys.digests[j];
        self->bloom.known[known_slot(h)] = h;
    }
    return PyLong_FromSsize_t(fresh);
}

/* The index of the key of line `line` among keys[0 .. k) (ascending line indices; it is
 * there). */
static size_t key_of_line(const size_t *keys, size_t k, size_t line)
{
    size_t lo = 0, hi = k;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] <= line)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The digests of the batch's keys with the given hash into self->keys.digests, without the GIL:
 * MD5 (the exact filter's fingerprint) several keys at a time (us_md5_many). repeat: room for
 * a flag per key, set for a key whose line repeats an earlier key's (line->same). The keys are
 * indexed (us_engine_index_keys). */
static int digest_keys(LineEngine *self, int hash_id, uint64_t seed, uint8_t *repeat)
{
    size_t n = self->keys.n;
    const uint8_t **data = PyMem_RawMalloc((n + 1) * sizeof *data);
    size_t *len = PyMem_RawMalloc((n + 1) * sizeof *len);
    size_t *at = PyMem_RawMalloc((n + 1) * sizeof *at);
    uint8_t(*md5)[16] = hash_id == US_HASH_MD5 ? PyMem_RawMalloc((n + 1) * 16) : NULL;
    if (data == NULL || len == NULL || at == NULL || (hash_id == US_HASH_MD5 && md5 == NULL)) {
        PyMem_RawFree(data);
        PyMem_RawFree(len);
        PyMem_RawFree(at);
        PyMem_RawFree(md5);
        PyErr_NoMemory();
        return -1;
    }
    /* the keys the worker hashed already are taken as they are; the rest are hashed here, but
     * for a repeat of an earlier key of the batch (line->same, csrc/repeats.h), which takes
     * that key's digest: at[] holds the keys to hash from the front, the repeats from the back */
    int made = made_with(self, hash_id, seed);
    const us_line *lines = self->batch.lines;
    size_t m = 0, r = n + 1;
    for (size_t k = 0; k < n; k++) {
        size_t i = self->keys.line[k];
        const us_line *line = &lines[i];
        repeat[k] = line->same && lines[line->same - 1].kind == US_LINE_KEY;
        if (made && line->hashed) {
            self->keys.digests[k] = self->work.ldig[i];
        } else if (repeat[k]) {
            at[--r] = k;
        } else {
            data[m] = us_engine_key_ptr(self, line);
            len[m] = line->key_len;
            at[m++] = k;
        }
    }
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    if (md5 != NULL) {
        us_md5_many(data, len, m, (uint32_t)seed, md5);
        for (size_t j = 0; j < m; j++) {
            self->keys.digests[at[j]].h1 = us_load64_le(md5[j]);
            self->keys.digests[at[j]].h2 = us_load64_le(md5[j] + 8);
        }
    } else {
        for (size_t j = 0; j < m; j++)
            self->keys.digests[at[j]] = us_digest(hash_id, data[j], len[j], seed);
    }
    for (size_t j = n; j >= r; j--) { /* in key order: a repeat's first key has its digest */
        size_t k = at[j];
        size_t first = key_of_line(self->keys.line, k, lines[self->keys.line[k]].same - 1);
        self->keys.digests[k] = self->keys.digests[first];
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyMem_RawFree(data);
    PyMem_RawFree(len);
    PyMem_RawFree(at);
    PyMem_RawFree(md5);
    return 0;
}

US_ENGINE_DOC(us_engine_exact_step_doc,
              "exact_step(counters, cache, now=0) -> ExactStepResult\n\n"
              "CountingFilter._exact_step(keys, cache, now) on the batch's keys, hashed here from\n"
              "the engine's buffers (no Python object per key): what ExactFilter's batch step needs.\n"
              "The answers are the filter's to finish; set_flags takes them.");

PyObject *us_engine_exact_step(LineEngine *self, PyObject *args)
{
    PyObject *counters, *cache;
    unsigned int now = 0;
    int hash_id;
    uint64_t seed;
    if (!PyArg_ParseTuple(args, "OO|I:exact_step", &counters, &cache, &now)) return NULL;
    if (us_counting_filter_hash_of(counters, &hash_id, &seed) < 0) {
        PyErr_Format(PyExc_TypeError, "expected a CountingFilter, not '%.200s'",
                     Py_TYPE(counters)->tp_name);
        return NULL;
    }
    if (us_engine_need_batch(self, 1) < 0 || us_engine_index_keys(self) < 0) return NULL;
    uint8_t *repeat = PyMem_RawMalloc(self->keys.n + 1);
    if (repeat == NULL) return PyErr_NoMemory();
    PyObject *result = NULL;
    if (digest_keys(self, hash_id, seed, repeat) == 0)
        result = us_counting_exact_step(counters, self->keys.digests, repeat,
                                        (Py_ssize_t)self->keys.n, cache, now);
    PyMem_RawFree(repeat);
    return result;
}

