/* bindings/counting_filter.c: the CPython binding of the counting filter and the
 * hot-fingerprint cache.
 *
 * CountingFilter is the C base of urlseen.CountingBloomFilter (key-level check-and-add, remove,
 * batches) and the counter array of urlseen.ExactFilter, which drives it by 16-byte digests.
 * `_exact_step` is the exact filter's hot loop in one C call: per key, hash, test the counters,
 * then either count it new (some counter was 0: no library I/O), answer it from the cache (a
 * known duplicate), or hand it back to Python to ask the library. Only that last group, a
 * small minority on a crawl's stream, costs Python work per key.
 *
 * Threads: every method holds the GIL throughout (the Python owners add their own lock around
 * multi-step operations); a batch hashes every key before it changes anything, so a bad key
 * raises and leaves the filter as it was.
 */
#include "common.h"

#include "csrc/counting.h"
#include "csrc/fpcache.h"

/* ---- FingerprintCache ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    us_fpcache cache;
    uint64_t entries; /* nbuckets * US_FPCACHE_WAYS */
} FingerprintCache;

static PyObject *FingerprintCache_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"entries", NULL};
    unsigned long long want;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&:FingerprintCache", kwlist, to_u64, &want))
        return NULL;
    if (want < 1 || want > (1ULL << 32)) {
        PyErr_Format(PyExc_ValueError, "entries must be in [1, 2**32], not %llu", want);
        return NULL;
    }
    FingerprintCache *self = (FingerprintCache *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    uint64_t nbuckets = (want + US_FPCACHE_WAYS - 1) / US_FPCACHE_WAYS;
    self->cache.nbuckets = nbuckets;
    self->entries = nbuckets * US_FPCACHE_WAYS;
    self->cache.entries = PyMem_RawCalloc((size_t)self->entries, sizeof(us_fp_entry));
    self->cache.dirty = PyMem_RawCalloc((size_t)nbuckets, 1);
    self->cache.dirty_list = PyMem_RawMalloc((size_t)nbuckets * sizeof(uint32_t));
    if (!self->cache.entries || !self->cache.dirty || !self->cache.dirty_list) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void FingerprintCache_dealloc(FingerprintCache *self)
{
    PyMem_RawFree(self->cache.entries);
    PyMem_RawFree(self->cache.dirty);
    PyMem_RawFree(self->cache.dirty_list);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int fingerprint_arg(PyObject *obj, const uint8_t **fp)
{
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != 16) {
        PyErr_SetString(PyExc_TypeError, "a fingerprint is 16 bytes");
        return -1;
    }
    *fp = (const uint8_t *)PyBytes_AS_STRING(obj);
    return 0;
}

/* (fingerprint, pending, batch, seen) of an entry. */
static PyObject *entry_tuple(const us_fp_entry *e)
{
    return Py_BuildValue("(NIII)", digest_bytes(e->a, e->b), e->pending, e->batch, e->seen);
}

/* Append item (a new reference, taken over; NULL: its exception is set) to list. */
static int append_new(PyObject *list, PyObject *item)
{
    if (item == NULL) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static int append_entry(PyObject *list, const us_fp_entry *e)
{
    return append_new(list, entry_tuple(e));
}

PyDoc_STRVAR(cache_hit_doc,
             "hit(fp, now=0) -> bool\n\n"
             "True if fp is cached; then it gets one increment in the current batch, is noted as\n"
             "seen at `now` (Unix seconds) and becomes most recently used.");

static PyObject *FingerprintCache_hit(FingerprintCache *self, PyObject *args)
{
    PyObject *obj;
    unsigned int now = 0;
    const uint8_t *fp;
    if (!PyArg_ParseTuple(args, "O|I:hit", &obj, &now) || fingerprint_arg(obj, &fp) < 0)
        return NULL;
    return PyBool_FromLong(us_fpcache_hit(&self->cache, fp, now) & US_FP_FOUND);
}

PyDoc_STRVAR(cache_insert_doc,
             "insert(fp, batch=0, now=0, pending=0) -> tuple | None\n\n"
             "Cache fp (the caller knows it is absent) as most recently used, with `batch`\n"
             "increments in the current batch and `pending` committed ones. Returns the evicted\n"
             "(fingerprint, pending, batch, seen) whose increments must be written back, or None.");

static PyObject *FingerprintCache_insert(FingerprintCache *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fp", "batch", "now", "pending", NULL};
    PyObject *obj;
    unsigned int batch = 0, now = 0, pending = 0;
    const uint8_t *fp;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|III:insert", kwlist, &obj, &batch, &now,
                                     &pending) ||
        fingerprint_arg(obj, &fp) < 0)
        return NULL;
    us_fp_entry spill;
    if (us_fpcache_insert(&self->cache, fp, pending, batch, now, &spill) & US_FP_SPILLED)
        return entry_tuple(&spill);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(cache_take_doc,
             "take(fp) -> tuple[int, int, int] | None\n\n"
             "Remove fp; its (pending, batch, seen), or None if it was not cached.");

static PyObject *FingerprintCache_take(FingerprintCache *self, PyObject *arg)
{
    const uint8_t *fp;
    if (fingerprint_arg(arg, &fp) < 0) return NULL;
    us_fp_entry e;
    if (!us_fpcache_take(&self->cache, fp, &e)) Py_RETURN_NONE;
    return Py_BuildValue("(III)", e.pending, e.batch, e.seen);
}

PyDoc_STRVAR(cache_commit_doc,
             "commit() -> list[tuple[bytes, int, int, int]]\n\n"
             "The batch's library transaction committed: fold its increments into the pending\n"
             "counts. Returns entries whose pending count would overflow (to write back).");

static PyObject *FingerprintCache_commit(FingerprintCache *self, PyObject *unused)
{
    us_fp_entry *spills = PyMem_RawMalloc(((size_t)self->cache.ndirty + 1) * US_FPCACHE_WAYS *
                                          sizeof(us_fp_entry));
    if (spills == NULL) return PyErr_NoMemory();
    size_t n = 0;
    us_fpcache_commit(&self->cache, spills, &n);
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list != NULL && i < n; i++)
        if (append_entry(list, &spills[i]) < 0) Py_CLEAR(list);
    PyMem_RawFree(spills);
    return list;
}

static PyObject *FingerprintCache_rollback(FingerprintCache *self, PyObject *unused)
{
    us_fpcache_rollback(&self->cache);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(cache_drain_doc,
             "drain() -> list[tuple[bytes, int, int, int]]\n\n"
             "Every cached (fingerprint, pending, batch, seen) with committed increments; their\n"
             "pending counts are reset to 0 (the caller writes them back). Entries stay cached.");

static PyObject *FingerprintCache_drain(FingerprintCache *self, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    if (list == NULL) return NULL;
    for (uint64_t i = 0; i < self->entries; i++) {
        us_fp_entry *e = &self->cache.entries[i];
        if (!e->used || !e->pending) continue;
        if (append_entry(list, e) < 0) {
            Py_DECREF(list);
            return NULL;
        }
        e->pending = 0;
    }
    return list;
}

PyDoc_STRVAR(cache_clear_doc, "clear()\n\nForget every entry (pending increments included).");

static PyObject *FingerprintCache_clear(FingerprintCache *self, PyObject *unused)
{
    memset(self->cache.entries, 0, (size_t)self->entries * sizeof(us_fp_entry));
    memset(self->cache.dirty, 0, (size_t)self->cache.nbuckets);
    self->cache.ndirty = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t FingerprintCache_len(FingerprintCache *self)
{
    Py_ssize_t used = 0;
    for (uint64_t i = 0; i < self->entries; i++) used += self->cache.entries[i].used != 0;
    return used;
}

static PyObject *cache_get_entries(FingerprintCache *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->entries);
}

static PyObject *cache_get_nbytes(FingerprintCache *self, void *c)
{
    uint64_t n = self->cache.nbuckets;
    return PyLong_FromUnsignedLongLong(self->entries * sizeof(us_fp_entry) + n * 5);
}

static PyGetSetDef FingerprintCache_getset[] = {
    {"entries", (getter)cache_get_entries, NULL, "Entries the cache holds at most.", NULL},
    {"nbytes", (getter)cache_get_nbytes, NULL, "Memory of the cache, in bytes.", NULL},
    {NULL},
};

static PyMethodDef FingerprintCache_methods[] = {
    {"hit", (PyCFunction)FingerprintCache_hit, METH_VARARGS, cache_hit_doc},
    {"insert", (PyCFunction)(void (*)(void))FingerprintCache_insert, METH_VARARGS | METH_KEYWORDS,
     cache_insert_doc},
    {"take", (PyCFunction)FingerprintCache_take, METH_O, cache_take_doc},
    {"commit", (PyCFunction)FingerprintCache_commit, METH_NOARGS, cache_commit_doc},
    {"rollback", (PyCFunction)FingerprintCache_rollback, METH_NOARGS,
     "rollback()\n\nThe batch failed: drop its increments."},
    {"drain", (PyCFunction)FingerprintCache_drain, METH_NOARGS, cache_drain_doc},
    {"clear", (PyCFunction)FingerprintCache_clear, METH_NOARGS, cache_clear_doc},
    {NULL},
};

static PySequenceMethods FingerprintCache_as_sequence = {
    .sq_length = (lenfunc)FingerprintCache_len,
};

PyDoc_STRVAR(FingerprintCache_doc,
             "FingerprintCache(entries)\n\n"
             "A bounded, set-associative LRU cache of 16-byte fingerprints known to be in an exact\n"
             "filter's library, with their increments not yet written back: committed ones\n"
             "(`pending`) and those of the batch in progress (`batch`, see commit/rollback).");

static PyTypeObject FingerprintCacheType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "urlseen._core.FingerprintCache",
    .tp_basicsize = sizeof(FingerprintCache),
    .tp_dealloc = (destructor)FingerprintCache_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = FingerprintCache_doc,
    .tp_methods = FingerprintCache_methods,
    .tp_getset = FingerprintCache_getset,
    .tp_as_sequence = &FingerprintCache_as_sequence,
    .tp_new = FingerprintCache_new,
};

/* ---- CountingFilter ----------------------------------------------------------------------- */

static PyTypeObject CountingFilterType;

typedef struct {
    us_bound base; /* the buffer, its read-only flag and the count (common.h); the count is of
                    * keys reported new and not removed */
    us_counters c;
    int layout; /* US_COUNTERS_STANDARD or US_COUNTERS_BLOCKED (_set_layout) */
    int hash_id;
    uint32_t seed;
} CountingFilter;

/* The key's counter indices and their prefetch, in this filter's layout. */
static inline const uint64_t *key_indices(const CountingFilter *self, us_hash128 h, uint64_t *idx)
{
    us_counter_indices(&self->c, self->layout, h, idx);
    return idx;
}

static inline void key_prefetch(const CountingFilter *self, us_hash128 h)
{
    us_counter_prefetch(&self->c, self->layout, h);
}

static int CountingFilter_init(CountingFilter *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"buffer", "offset", "ncounters",    "k",    "counter_bits",
                             "seed",   "count",  "count_offset", "hash", NULL};
    PyObject *buffer, *seed_obj = NULL;
    Py_ssize_t offset, count_offset = -1;
    unsigned long long m, k64, count = 0;
    int width, hash_id = US_HASH_XXH3_128;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnO&O&i|OO&ni:CountingFilter", kwlist,
                                     &buffer, &offset, to_u64, &m, to_u64, &k64, &width,
                                     &seed_obj, to_u64, &count, &count_offset, &hash_id))
        return -1;
    if (parse_hash_id(hash_id) < 0 || parse_k(k64) < 0) return -1;
    if (width != 2 && width != 4 && width != 8) {
        PyErr_Format(PyExc_ValueError, "counter_bits must be 2, 4 or 8, not %d", width);
        return -1;
    }
    if (m == 0 || m > (1ULL << 60)) {
        PyErr_Format(PyExc_ValueError, "ncounters must be in [1, 2**60], not %llu", m);
        return -1;
    }
    uint32_t seed = 0;
    if (seed_obj && parse_seed(seed_obj, &seed) < 0) return -1;
    unsigned long long need = (m * (unsigned)width + 7) / 8;
    if (us_bound_bind(&self->base, buffer, offset, need, count_offset) < 0) return -1;
    self->c.cells = (uint8_t *)self->base.view.buf + offset;
    self->c.m = m;
    self->c.k = (uint32_t)k64;
    self->c.width = (uint32_t)width;
    self->seed = seed;
    self->hash_id = hash_id;
    self->layout = US_COUNTERS_STANDARD;
    us_bound_set_count(&self->base, count);
    return 0;
}

PyDoc_STRVAR(cf_set_layout_doc,
             "_set_layout(layout)\n\n"
             "Index the counters by `layout`: 0 standard, 1 blocked (csrc/counting.h; ncounters a\n"
             "multiple of the counters per block). Set once, before any key is counted in.");

static PyObject *CountingFilter_set_layout(CountingFilter *self, PyObject *arg)
{
    long layout = PyLong_AsLong(arg);
    if (layout == -1 && PyErr_Occurred()) return NULL;
    if (layout != US_COUNTERS_STANDARD && layout != US_COUNTERS_BLOCKED) {
        PyErr_Format(PyExc_ValueError, "layout must be 0 (standard) or 1 (blocked), not %ld",
                     layout);
        return NULL;
    }
    if (layout == US_COUNTERS_BLOCKED && self->c.m % us_counter_block(&self->c)) {
        PyErr_Format(PyExc_ValueError,
                     "the blocked layout needs a multiple of %llu counters, not %llu",
                     (unsigned long long)us_counter_block(&self->c),
                     (unsigned long long)self->c.m);
        return NULL;
    }
    self->layout = (int)layout;
    Py_RETURN_NONE;
}

static inline int hash_key(CountingFilter *self, PyObject *key, us_hash128 *h, Py_ssize_t index)
{
    return key_hash(key, self->hash_id, self->seed, h, index);
}

/* -- single keys -- */

PyDoc_STRVAR(cf_add_doc,
             "add(key) -> bool\n\n"
             "Check-and-add: if some counter of key is 0, increment its counters and return True\n"
             "(new); otherwise change nothing and return False. Each distinct key is counted once.");

static PyObject *CountingFilter_add(CountingFilter *self, PyObject *key)
{
    us_hash128 h;
    uint64_t idx[US_MAX_K];
    if (us_bound_usable(&self->base, 1) < 0 || hash_key(self, key, &h, -1) < 0) return NULL;
    if (!us_counting_add_new_at(&self->c, key_indices(self, h, idx), NULL, NULL)) Py_RETURN_FALSE;
    us_bound_add_count(&self->base, 1);
    Py_RETURN_TRUE;
}

static int CountingFilter_contains(CountingFilter *self, PyObject *key)
{
    us_hash128 h;
    uint64_t idx[US_MAX_K];
    if (us_bound_usable(&self->base, 0) < 0 || hash_key(self, key, &h, -1) < 0) return -1;
    return us_counting_test_at(&self->c, key_indices(self, h, idx));
}

PyDoc_STRVAR(cf_remove_doc,
             "remove(key) -> bool\n\n"
             "Decrement key's counters (saturated ones stay) and return True; False, changing\n"
             "nothing, if key is certainly absent. Precondition: key was added (a false positive\n"
             "removed would take counts from other keys and could make them look new).");

static PyObject *CountingFilter_remove(CountingFilter *self, PyObject *key)
{
    us_hash128 h;
    uint64_t idx[US_MAX_K];
    if (us_bound_usable(&self->base, 1) < 0 || hash_key(self, key, &h, -1) < 0) return NULL;
    if (!us_counting_remove_at(&self->c, key_indices(self, h, idx), NULL, NULL)) Py_RETURN_FALSE;
    if (self->base.count) us_bound_set_count(&self->base, self->base.count - 1);
    Py_RETURN_TRUE;
}

/* -- batches: every key hashed first, then applied in order -- */

#define PREFETCH_AHEAD 8

/* MD5 of a batch's m keys (the exact filter's fingerprint), MD5_CHUNK at a time through
 * us_md5_many (several keys side by side: one MD5 alone leaves most of the core idle). Each key
 * of a chunk is held, and its bytes borrowed, until the chunk is hashed. 0, or -1 with the
 * first failing key's exception, as batch_hash. */
#define MD5_CHUNK 128

static int batch_md5(PyObject *seq, Py_ssize_t m, uint32_t seed, us_hash128 *out)
{
    PyObject *keys[MD5_CHUNK];
    key_bytes kb[MD5_CHUNK];
    const uint8_t *data[MD5_CHUNK];
    size_t len[MD5_CHUNK];
    uint8_t digests[MD5_CHUNK][16];
    for (Py_ssize_t done = 0; done < m; done += MD5_CHUNK) {
        Py_ssize_t count = m - done < MD5_CHUNK ? m - done : MD5_CHUNK, got = 0;
        int rc = 0;
        for (; got < count; got++) {
            Py_ssize_t i = done + got;
            if (i >= PySequence_Fast_GET_SIZE(seq)) {
                raise_batch_changed();
                rc = -1;
                break;
            }
            keys[got] = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
            if (key_get(keys[got], &kb[got], i) < 0) {
                Py_DECREF(keys[got]);
                rc = -1;
                break;
            }
            data[got] = (const uint8_t *)kb[got].data;
            len[got] = (size_t)kb[got].len;
        }
        if (rc == 0) us_md5_many(data, len, (size_t)count, seed, digests);
        for (Py_ssize_t j = 0; j < got; j++) {
            key_release(&kb[j]);
            Py_DECREF(keys[j]);
        }
        if (rc < 0) return -1;
        for (Py_ssize_t j = 0; j < count; j++) {
            out[done + j].h1 = us_load64_le(digests[j]);
            out[done + j].h2 = us_load64_le(digests[j] + 8);
        }
    }
    return 0;
}

/* The digests of every key of the batch (*n of them, to free with PyMem_RawFree); NULL with an
 * exception (nothing changed). */
static us_hash128 *hash_batch(CountingFilter *self, PyObject *keys, Py_ssize_t *n)
{
    PyObject *seq = batch_sequence(keys);
    if (seq == NULL) return NULL;
    *n = PySequence_Fast_GET_SIZE(seq);
    us_hash128 *h = PyMem_RawMalloc(((size_t)*n + 1) * sizeof *h);
    int rc = -1;
    if (h == NULL)
        PyErr_NoMemory();
    else if (self->hash_id == US_HASH_MD5)
        rc = batch_md5(seq, *n, self->seed, h);
    else
        rc = batch_hash(seq, 0, *n, self->hash_id, self->seed, h);
    Py_DECREF(seq);
    if (rc < 0) {
        PyMem_RawFree(h);
        return NULL;
    }
    return h;
}

enum counting_op { OP_ADD, OP_TEST, OP_REMOVE };

static PyObject *counting_batch(CountingFilter *self, PyObject *keys, enum counting_op op)
{
    if (us_bound_usable(&self->base, op != OP_TEST) < 0) return NULL;
    Py_ssize_t n;
    us_hash128 *h = hash_batch(self, keys, &n);
    if (h == NULL) return NULL;
    PyObject *result = PyList_New(n);
    if (result == NULL) {
        PyMem_RawFree(h);
        return NULL;
    }
    unsigned long long count = self->base.count;
    uint64_t idx[US_MAX_K];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) key_prefetch(self, h[i + PREFETCH_AHEAD]);
        int yes;
        key_indices(self, h[i], idx);
        if (op == OP_TEST) {
            yes = us_counting_test_at(&self->c, idx);
        } else if (op == OP_ADD) {
            yes = us_counting_add_new_at(&self->c, idx, NULL, NULL);
            count += (unsigned)yes;
        } else {
            yes = us_counting_remove_at(&self->c, idx, NULL, NULL);
            if (yes && count) count--;
        }
        PyList_SET_ITEM(result, i, Py_NewRef(yes ? Py_True : Py_False));
    }
    if (op != OP_TEST) us_bound_set_count(&self->base, count);
    PyMem_RawFree(h);
    return result;
}

US_BATCH_METHOD(CountingFilter_add_many, CountingFilter, counting_batch, OP_ADD)

US_BATCH_METHOD(CountingFilter_contains_many, CountingFilter, counting_batch, OP_TEST)

US_BATCH_METHOD(CountingFilter_remove_many, CountingFilter, counting_batch, OP_REMOVE)

/* -- digest-level access for the exact filter -- */

static int bytes_to_digest(PyObject *obj, us_hash128 *h)
{
    const uint8_t *fp;
    if (fingerprint_arg(obj, &fp) < 0) return -1;
    h->h1 = us_load64_le(fp);
    h->h2 = us_load64_le(fp + 8);
    return 0;
}

static int append_events(PyObject *list, const us_overflow *ev, size_t nev)
{
    for (size_t i = 0; i < nev; i++)
        if (append_new(list, Py_BuildValue("(KI)", (unsigned long long)ev[i].index,
                                           ev[i].delta)) < 0)
            return -1;
    return 0;
}

PyDoc_STRVAR(cf_digest_doc,
             "_digest(key) -> bytes\n\nThe key's 16-byte digest (its fingerprint) with this "
             "filter's hash and seed.");

static PyObject *CountingFilter_digest(CountingFilter *self, PyObject *key)
{
    us_hash128 h;
    if (hash_key(self, key, &h, -1) < 0) return NULL;
    return digest_bytes(h.h1, h.h2);
}

PyDoc_STRVAR(cf_indices_doc,
             "_indices(fp) -> list[int]\n\nThe k counter indices of a 16-byte digest, with repeats.");

static PyObject *CountingFilter_indices(CountingFilter *self, PyObject *arg)
{
    us_hash128 h;
    if (us_bound_usable(&self->base, 0) < 0 || bytes_to_digest(arg, &h) < 0) return NULL;
    uint64_t idx[US_MAX_K];
    return u64_list(key_indices(self, h, idx), self->c.k);
}

/* Apply increments (add=1) or decrements to a list of digests; returns the overflow events. A
 * digest that cannot be removed (a counter below its occurrences) raises RuntimeError after the
 * ones before it were applied: the caller then rebuilds the counters from its library. */
static PyObject *apply_digests(CountingFilter *self, PyObject *fps, int add)
{
    if (us_bound_usable(&self->base, 1) < 0) return NULL;
    PyObject *seq = PySequence_Fast(fps, "expected a sequence of 16-byte digests");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    us_hash128 *h = PyMem_RawMalloc(((size_t)n + 1) * sizeof *h);
    PyObject *events = PyList_New(0);
    if (h == NULL || events == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++)
        if (bytes_to_digest(PySequence_Fast_GET_ITEM(seq, i), &h[i]) < 0) goto fail;
    us_overflow ev[US_MAX_K];
    uint64_t idx[US_MAX_K];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) key_prefetch(self, h[i + PREFETCH_AHEAD]);
        size_t nev = 0;
        key_indices(self, h[i], idx);
        if (add) {
            us_counting_add_at(&self->c, idx, ev, &nev);
        } else if (!us_counting_remove_at(&self->c, idx, ev, &nev)) {
            PyErr_Format(PyExc_RuntimeError,
                         "digest %zd cannot be removed: the counters do not hold it", i);
            goto fail;
        }
        if (nev && append_events(events, ev, nev) < 0) goto fail;
    }
    PyMem_RawFree(h);
    Py_DECREF(seq);
    return events;
fail:
    PyMem_RawFree(h);
    Py_XDECREF(events);
    Py_DECREF(seq);
    return NULL;
}

PyDoc_STRVAR(cf_add_fps_doc,
             "_add_digests(fps) -> list[tuple[int, int]]\n\n"
             "Increment the counters of each 16-byte digest (no check); the overflow events\n"
             "(index, delta) of counters that reached or were at their maximum.");

static PyObject *CountingFilter_add_digests(CountingFilter *self, PyObject *fps)
{
    return apply_digests(self, fps, 1);
}

PyDoc_STRVAR(cf_remove_fps_doc,
             "_remove_digests(fps) -> list[tuple[int, int]]\n\n"
             "Decrement the counters of each digest; events (index, 1) for saturated counters,\n"
             "which stay unchanged (the caller recounts them).");

static PyObject *CountingFilter_remove_digests(CountingFilter *self, PyObject *fps)
{
    return apply_digests(self, fps, 0);
}

static int counter_index(CountingFilter *self, PyObject *obj, uint64_t *i)
{
    unsigned long long v;
    if (!to_u64(obj, &v)) return -1;
    if (v >= self->c.m) {
        PyErr_Format(PyExc_IndexError, "counter %llu out of range [0, %llu)", v,
                     (unsigned long long)self->c.m);
        return -1;
    }
    *i = v;
    return 0;
}

static PyObject *CountingFilter_get(CountingFilter *self, PyObject *arg)
{
    uint64_t i;
    if (us_bound_usable(&self->base, 0) < 0 || counter_index(self, arg, &i) < 0) return NULL;
    return PyLong_FromUnsignedLong(us_counter_get(&self->c, i));
}

static PyObject *CountingFilter_set(CountingFilter *self, PyObject *args)
{
    PyObject *iobj;
    unsigned int v;
    uint64_t i;
    if (!PyArg_ParseTuple(args, "OI:_set", &iobj, &v)) return NULL;
    if (us_bound_usable(&self->base, 1) < 0 || counter_index(self, iobj, &i) < 0) return NULL;
    if (v > us_counter_max(&self->c)) {
        PyErr_Format(PyExc_ValueError, "counter value %u above the maximum %u", v,
                     us_counter_max(&self->c));
        return NULL;
    }
    us_counter_set(&self->c, i, v);
    Py_RETURN_NONE;
}

static PyObject *CountingFilter_zero(CountingFilter *self, PyObject *unused)
{
    if (us_bound_usable(&self->base, 1) < 0) return NULL;
    memset(self->c.cells, 0, (size_t)((self->c.m * self->c.width + 7) / 8));
    us_bound_set_count(&self->base, 0);
    Py_RETURN_NONE;
}

static PyObject *CountingFilter_histogram(CountingFilter *self, PyObject *unused)
{
    if (us_bound_usable(&self->base, 0) < 0) return NULL;
    uint64_t hist[256] = {0};
    us_counting_histogram(&self->c, hist);
    return u64_list(hist, (size_t)us_counter_max(&self->c) + 1);
}

/* -- the exact filter's batch step -- */

/* The result of _exact_step: a struct sequence (a named tuple, as os.stat_result), so the
 * caller reads its parts by name. The type is made at module init (us_counting_filter_add). */
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

PyDoc_STRVAR(cf_exact_step_doc,
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

/* The cache argument of an exact step: *cache is NULL for None. -1 with TypeError otherwise. */
static int cache_arg(PyObject *obj, us_fpcache **cache)
{
    *cache = NULL;
    if (obj == Py_None) return 0;
    if (!PyObject_TypeCheck(obj, &FingerprintCacheType)) {
        PyErr_SetString(PyExc_TypeError, "cache must be a FingerprintCache or None");
        return -1;
    }
    *cache = &((FingerprintCache *)obj)->cache;
    return 0;
}

/* The exact step on the digests h[0 .. n) of a batch's keys (see cf_exact_step_doc). */
static PyObject *exact_step(CountingFilter *self, const us_hash128 *h, Py_ssize_t n,
                            us_fpcache *cache, unsigned int now)
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
            if (i + PREFETCH_AHEAD < n) key_prefetch(self, h[i + PREFETCH_AHEAD]);
        } else {
            if (i + 2 * PREFETCH_AHEAD < n) {
                fingerprint_of(fp, h[i + 2 * PREFETCH_AHEAD]);
                us_fpcache_prefetch(cache, fp);
            }
            if (i + PREFETCH_AHEAD < n) {
                Py_ssize_t j = i + PREFETCH_AHEAD;
                fingerprint_of(fp, h[j]);
                cached[j] = (uint8_t)us_fpcache_contains(cache, fp);
                if (!cached[j]) key_prefetch(self, h[j]);
            }
        }
        fingerprint_of(fp, h[i]);
        us_fp_entry spill;
        PyObject *answer;
        size_t nev = 0;
        if (cache && cached[i] && us_fpcache_hit(cache, fp, now)) {
            answer = Py_False; /* one evicted since the look-ahead is asked in the usual order */
        } else if (us_counting_add_new_at(&self->c, key_indices(self, h[i], idx), ev, &nev)) {
            count++;
            if (nev && append_events(overflows, ev, nev) < 0) goto fail;
            if (append_new(new_fps, digest_bytes(h[i].h1, h[i].h2)) < 0) goto fail;
            if (cache && (us_fpcache_insert(cache, fp, 0, 0, now, &spill) & US_FP_SPILLED) &&
                append_entry(evicted, &spill) < 0)
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


static PyObject *CountingFilter_exact_step(CountingFilter *self, PyObject *args)
{
    PyObject *keys, *cache_obj;
    unsigned int now = 0;
    us_fpcache *cache;
    if (!PyArg_ParseTuple(args, "OO|I:_exact_step", &keys, &cache_obj, &now)) return NULL;
    if (cache_arg(cache_obj, &cache) < 0 || us_bound_usable(&self->base, 1) < 0) return NULL;
    Py_ssize_t n;
    us_hash128 *h = hash_batch(self, keys, &n);
    if (h == NULL) return NULL;
    PyObject *result = exact_step(self, h, n, cache, now);
    PyMem_RawFree(h);
    return result;
}

/* ---- for the line engine (line_engine.c) -------------------------------------------------- */

int us_counting_filter_hash_of(PyObject *obj, int *hash_id, uint64_t *seed)
{
    if (!PyObject_TypeCheck(obj, &CountingFilterType)) return -1;
    *hash_id = ((CountingFilter *)obj)->hash_id;
    *seed = ((CountingFilter *)obj)->seed;
    return 0;
}

PyObject *us_counting_exact_step(PyObject *obj, const us_hash128 *h, Py_ssize_t n,
                                 PyObject *cache_obj, unsigned int now)
{
    CountingFilter *self = (CountingFilter *)obj;
    us_fpcache *cache;
    if (cache_arg(cache_obj, &cache) < 0 || us_bound_usable(&self->base, 1) < 0) return NULL;
    return exact_step(self, h, n, cache, now);
}

/* -- attributes and type -- */

US_GETTER(cf_get_m, CountingFilter, PyLong_FromUnsignedLongLong(self->c.m))
US_GETTER(cf_get_k, CountingFilter, PyLong_FromUnsignedLong(self->c.k))
US_GETTER(cf_get_width, CountingFilter, PyLong_FromUnsignedLong(self->c.width))
US_GETTER(cf_get_seed, CountingFilter, PyLong_FromUnsignedLong(self->seed))
US_GETTER(cf_get_hash, CountingFilter, PyLong_FromLong(self->hash_id))
US_GETTER(cf_get_layout, CountingFilter, PyLong_FromLong(self->layout))

static PyGetSetDef CountingFilter_getset[] = {
    {"ncounters", (getter)cf_get_m, NULL, "Number of counters (m).", NULL},
    {"k", (getter)cf_get_k, NULL, "Counters per key.", NULL},
    {"counter_bits", (getter)cf_get_width, NULL, "Bits per counter (2, 4 or 8).", NULL},
    {"seed", (getter)cf_get_seed, NULL, "Hash seed.", NULL},
    {"hash", (getter)cf_get_hash, NULL, "Hash id (csrc/digest.h).", NULL},
    {"_layout", (getter)cf_get_layout, NULL, "0: standard layout, 1: blocked.", NULL},
    US_BOUND_GETSET(us_bound_set_count_attr, "Keys counted in."),
    {NULL},
};

static PyMethodDef CountingFilter_methods[] = {
    {"add", (PyCFunction)CountingFilter_add, METH_O, cf_add_doc},
    {"remove", (PyCFunction)CountingFilter_remove, METH_O, cf_remove_doc},
    {"add_many", (PyCFunction)CountingFilter_add_many, METH_O,
     "add_many(keys) -> list[bool]\n\nadd() for each key, in order."},
    {"contains_many", (PyCFunction)CountingFilter_contains_many, METH_O,
     "contains_many(keys) -> list[bool]\n\n`key in filter` for each key; never writes."},
    {"remove_many", (PyCFunction)CountingFilter_remove_many, METH_O,
     "remove_many(keys) -> list[bool]\n\nremove() for each key, in order."},
    {"_digest", (PyCFunction)CountingFilter_digest, METH_O, cf_digest_doc},
    {"_indices", (PyCFunction)CountingFilter_indices, METH_O, cf_indices_doc},
    {"_add_digests", (PyCFunction)CountingFilter_add_digests, METH_O, cf_add_fps_doc},
    {"_remove_digests", (PyCFunction)CountingFilter_remove_digests, METH_O, cf_remove_fps_doc},
    {"_get", (PyCFunction)CountingFilter_get, METH_O, "_get(i) -> int: counter i."},
    {"_set", (PyCFunction)CountingFilter_set, METH_VARARGS, "_set(i, value): set counter i."},
    {"_zero", (PyCFunction)CountingFilter_zero, METH_NOARGS, "_zero(): all counters and count to 0."},
    {"_set_layout", (PyCFunction)CountingFilter_set_layout, METH_O, cf_set_layout_doc},
    {"_histogram", (PyCFunction)CountingFilter_histogram, METH_NOARGS,
     "_histogram() -> list[int]: how many counters hold each value 0 .. max (reads all)."},
    {"_exact_step", (PyCFunction)CountingFilter_exact_step, METH_VARARGS, cf_exact_step_doc},
    {"_release", us_bound_release, METH_NOARGS,
     "_release(): let go of the buffer (the filter is closed afterwards)."},
    {NULL},
};

static PySequenceMethods CountingFilter_as_sequence = {
    .sq_length = us_bound_len,
    .sq_contains = (objobjproc)CountingFilter_contains,
};

PyDoc_STRVAR(CountingFilter_doc,
             "CountingFilter(buffer, offset, ncounters, k, counter_bits, seed=0, count=0,\n"
             "               count_offset=-1, hash=0)\n\n"
             "Packed saturating counters on a caller-owned buffer (see csrc/counting.h).");

static PyTypeObject CountingFilterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "urlseen._core.CountingFilter",
    .tp_basicsize = sizeof(CountingFilter),
    .tp_dealloc = us_bound_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = us_bound_traverse,
    .tp_clear = us_bound_clear,
    .tp_doc = CountingFilter_doc,
    .tp_methods = CountingFilter_methods,
    .tp_getset = CountingFilter_getset,
    .tp_as_sequence = &CountingFilter_as_sequence,
    .tp_init = (initproc)CountingFilter_init,
    .tp_new = PyType_GenericNew,
};

PyDoc_STRVAR(digests_doc,
             "digests(keys, hash=HASH_MD5, seed=0) -> list[bytes]\n\n"
             "The 16-byte digest (fingerprint) of every key, in C: h1 then h2, little-endian.");

static PyObject *mod_digests(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"keys", "hash", "seed", NULL};
    PyObject *keys, *seed_obj = NULL;
    int hash_id = US_HASH_MD5;
    uint32_t seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|iO:digests", kwlist, &keys, &hash_id,
                                     &seed_obj))
        return NULL;
    if (parse_hash_seed(hash_id, seed_obj, &seed) < 0) return NULL;
    PyObject *seq = batch_sequence(keys);
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        us_hash128 h;
        PyObject *d = batch_key_hash(seq, i, hash_id, seed, &h) == 0 ? digest_bytes(h.h1, h.h2)
                                                                      : NULL;
        if (d == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, d);
    }
    Py_DECREF(seq);
    return out;
}

PyDoc_STRVAR(fold_entries_doc,
             "fold_entries(counts, seen, entries) -> None\n\n"
             "For each cache entry (fingerprint, pending, batch, seen) with increments:\n"
             "counts[fp] += pending + batch, and seen[fp] = its seen if later than seen.get(fp, 0).\n"
             "The exact filter's write-back bookkeeping in one call a batch (a batch evicts up to\n"
             "one entry per new URL).");

/* dict[key] (a new reference), or `missing` (new reference) if absent; NULL on error. */
static PyObject *dict_get(PyObject *dict, PyObject *key, PyObject *missing)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL && PyErr_Occurred()) return NULL;
    return Py_NewRef(value != NULL ? value : missing);
}

/* dict[key] = dict.get(key, 0) + add (add > 0); 0 or -1. */
static int dict_add(PyObject *dict, PyObject *key, PyObject *add)
{
    PyObject *zero = PyLong_FromLong(0), *old = zero ? dict_get(dict, key, zero) : NULL;
    Py_XDECREF(zero);
    if (old == NULL) return -1;
    PyObject *sum = PyNumber_Add(old, add);
    Py_DECREF(old);
    if (sum == NULL) return -1;
    int rc = PyDict_SetItem(dict, key, sum);
    Py_DECREF(sum);
    return rc;
}

static PyObject *mod_fold_entries(PyObject *mod, PyObject *args)
{
    PyObject *counts, *seen, *entries;
    if (!PyArg_ParseTuple(args, "O!O!O:fold_entries", &PyDict_Type, &counts, &PyDict_Type, &seen,
                          &entries))
        return NULL;
    PyObject *seq = PySequence_Fast(entries, "entries must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(seq, i), *fp, *pending, *batch, *when;
        if (!PyArg_ParseTuple(e, "OOOO:fold_entries", &fp, &pending, &batch, &when)) goto fail;
        PyObject *add = PyNumber_Add(pending, batch);
        if (add == NULL) goto fail;
        int nonzero = PyObject_IsTrue(add), rc = 0;
        if (nonzero > 0) rc = dict_add(counts, fp, add);
        Py_DECREF(add);
        if (nonzero < 0 || rc < 0) goto fail;
        if (!nonzero) continue;
        PyObject *zero = PyLong_FromLong(0), *last = zero ? dict_get(seen, fp, zero) : NULL;
        Py_XDECREF(zero);
        if (last == NULL) goto fail;
        int later = PyObject_RichCompareBool(when, last, Py_GT);
        Py_DECREF(last);
        if (later < 0 || (later && PyDict_SetItem(seen, fp, when) < 0)) goto fail;
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef counting_functions[] = {
    {"digests", (PyCFunction)(void (*)(void))mod_digests, METH_VARARGS | METH_KEYWORDS,
     digests_doc},
    {"fold_entries", mod_fold_entries, METH_VARARGS, fold_entries_doc},
    {NULL},
};

int us_counting_filter_add(PyObject *module)
{
    if (PyModule_AddFunctions(module, counting_functions) < 0) return -1;
    if (ExactStepResultType == NULL &&
        (ExactStepResultType = PyStructSequence_NewType(&exact_step_desc)) == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "ExactStepResult", (PyObject *)ExactStepResultType) < 0)
        return -1;
    if (PyType_Ready(&CountingFilterType) < 0 || PyType_Ready(&FingerprintCacheType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "CountingFilter", (PyObject *)&CountingFilterType) < 0 ||
        PyModule_AddObjectRef(module, "FingerprintCache", (PyObject *)&FingerprintCacheType) < 0 ||
        PyModule_AddIntConstant(module, "FPCACHE_ENTRY_BYTES", sizeof(us_fp_entry)) < 0)
        return -1;
    return 0;
}
