/* bindings/fingerprint_cache.c: the FingerprintCache type and fold_entries(), the exact
 * filter's cache of hot fingerprints (csrc/fpcache.h) and its write-back bookkeeping.
 *
 * The cache holds fingerprints known to be in the exact filter's library, with the increments
 * not yet written back, so a repeat costs no library I/O; its entries come out as (fingerprint,
 * pending, batch, seen) tuples, which fold_entries adds up into the write-back's counts.
 */
#include "counting_filter.h"

typedef struct {
    PyObject_HEAD
    us_fpcache cache; /* its arrays grow with what it holds (csrc/fpcache.h) */
    uint64_t entries; /* at most: max_buckets * US_FPCACHE_WAYS */
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
    self->entries = nbuckets * US_FPCACHE_WAYS;
    if (us_fpcache_init(&self->cache, nbuckets) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void FingerprintCache_dealloc(FingerprintCache *self)
{
    us_fpcache_free(&self->cache);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* (fingerprint, pending, batch, seen) of an entry (no format string: a batch may evict one
 * entry per new URL). */
static PyObject *entry_tuple(const us_fp_entry *e)
{
    PyObject *t = PyTuple_New(4);
    if (t == NULL) return NULL;
    PyObject *items[4] = {digest_bytes(e->a, e->b), PyLong_FromUnsignedLong(e->pending),
                          PyLong_FromUnsignedLong(e->batch), PyLong_FromUnsignedLong(e->seen)};
    int ok = 1;
    for (Py_ssize_t i = 0; i < 4; i++) {
        ok &= items[i] != NULL;
        PyTuple_SET_ITEM(t, i, items[i]); /* NULL items: the tuple's dealloc skips them */
    }
    if (!ok) Py_CLEAR(t);
    return t;
}

/* Append an entry to list as (fingerprint, pending, batch, seen). */
int us_fingerprint_cache_append(PyObject *list, const us_fp_entry *e)
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
        if (us_fingerprint_cache_append(list, &spills[i]) < 0) Py_CLEAR(list);
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
    for (uint64_t i = 0; i < self->cache.nbuckets * US_FPCACHE_WAYS; i++) {
        us_fp_entry *e = &self->cache.entries[i];
        if (!e->used || !e->pending) continue;
        if (us_fingerprint_cache_append(list, e) < 0) {
            Py_DECREF(list);
            return NULL;
        }
        e->pending = 0;
    }
    return list;
}

PyDoc_STRVAR(cache_drain_into_doc,
             "drain_into(counts, seen) -> None\n\n"
             "drain() folded into two dicts in C, with no tuple per entry (a checkpoint drains\n"
             "one entry per URL repeated since the last): counts[fp] += pending, and\n"
             "seen[fp] = its seen if later than seen.get(fp, 0). Pending counts are reset to 0.");

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

/* dict[key] = value if value > dict.get(key, 0) (as Python compares them); 0 or -1. */
static int dict_set_if_later(PyObject *dict, PyObject *key, PyObject *value)
{
    PyObject *zero = PyLong_FromLong(0), *last = zero ? dict_get(dict, key, zero) : NULL;
    Py_XDECREF(zero);
    if (last == NULL) return -1;
    int later = PyObject_RichCompareBool(value, last, Py_GT);
    Py_DECREF(last);
    return later < 0 ? -1 : later ? PyDict_SetItem(dict, key, value) : 0;
}

/* drain_into for empty dicts (a checkpoint with nothing carried, as at close): the entries
 * go into two dicts made at their final size, then into counts and seen at once (no lookup,
 * no resize per entry); the pending counts are reset only when both are filled. */
static int drain_into_empty(FingerprintCache *self, PyObject *counts, PyObject *seen)
{
    us_fp_entry *entries = self->cache.entries;
    uint64_t total = self->cache.nbuckets * US_FPCACHE_WAYS, n = 0;
    for (uint64_t i = 0; i < total; i++) n += entries[i].used && entries[i].pending;
    PyObject *c = _PyDict_NewPresized((Py_ssize_t)n), *s = _PyDict_NewPresized((Py_ssize_t)n);
    int rc = c != NULL && s != NULL ? 0 : -1;
    for (uint64_t i = 0; rc == 0 && i < total; i++) {
        us_fp_entry *e = &entries[i];
        if (!e->used || !e->pending) continue;
        PyObject *fp = digest_bytes(e->a, e->b), *count = PyLong_FromUnsignedLong(e->pending);
        PyObject *when = PyLong_FromUnsignedLong(e->seen);
        /* seen[fp] only when later than 0, as dict_set_if_later folds it */
        rc = fp && count && when && PyDict_SetItem(c, fp, count) == 0 &&
                     (e->seen == 0 || PyDict_SetItem(s, fp, when) == 0)
                 ? 0
                 : -1;
        Py_XDECREF(fp);
        Py_XDECREF(count);
        Py_XDECREF(when);
    }
    if (rc == 0) rc = PyDict_Update(counts, c);
    if (rc == 0) rc = PyDict_Update(seen, s);
    for (uint64_t i = 0; rc == 0 && i < total; i++) entries[i].pending = 0;
    Py_XDECREF(c);
    Py_XDECREF(s);
    return rc;
}

static PyObject *FingerprintCache_drain_into(FingerprintCache *self, PyObject *args)
{
    PyObject *counts, *seen;
    if (!PyArg_ParseTuple(args, "O!O!:drain_into", &PyDict_Type, &counts, &PyDict_Type, &seen))
        return NULL;
    if (PyDict_GET_SIZE(counts) == 0 && PyDict_GET_SIZE(seen) == 0) {
        if (drain_into_empty(self, counts, seen) < 0) return NULL;
        Py_RETURN_NONE;
    }
    for (uint64_t i = 0; i < self->cache.nbuckets * US_FPCACHE_WAYS; i++) {
        us_fp_entry *e = &self->cache.entries[i];
        if (!e->used || !e->pending) continue;
        PyObject *fp = digest_bytes(e->a, e->b), *add = PyLong_FromUnsignedLong(e->pending);
        PyObject *when = PyLong_FromUnsignedLong(e->seen);
        int rc = fp && add && when ? dict_add(counts, fp, add) : -1;
        if (rc == 0) {
            e->pending = 0; /* in counts: the caller carries counts if this raises */
            rc = dict_set_if_later(seen, fp, when);
        }
        Py_XDECREF(fp);
        Py_XDECREF(add);
        Py_XDECREF(when);
        if (rc < 0) return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(cache_clear_doc, "clear()\n\nForget every entry (pending increments included).");

static PyObject *FingerprintCache_clear(FingerprintCache *self, PyObject *unused)
{
    us_fpcache_clear(&self->cache);
    Py_RETURN_NONE;
}

static Py_ssize_t FingerprintCache_len(FingerprintCache *self)
{
    Py_ssize_t used = 0;
    for (uint64_t i = 0; i < self->cache.nbuckets * US_FPCACHE_WAYS; i++)
        used += self->cache.entries[i].used != 0;
    return used;
}

static PyObject *cache_get_entries(FingerprintCache *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->entries);
}

static PyObject *cache_get_nbytes(FingerprintCache *self, void *c)
{
    uint64_t n = self->cache.nbuckets;
    return PyLong_FromUnsignedLongLong(n * (US_FPCACHE_WAYS * sizeof(us_fp_entry) + 5));
}

static PyGetSetDef FingerprintCache_getset[] = {
    {"entries", (getter)cache_get_entries, NULL, "Entries the cache holds at most.", NULL},
    {"nbytes", (getter)cache_get_nbytes, NULL, "Memory of the cache now, in bytes (it grows).",
     NULL},
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
    {"drain_into", (PyCFunction)FingerprintCache_drain_into, METH_VARARGS, cache_drain_into_doc},
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

int us_fingerprint_cache_of(PyObject *obj, us_fpcache **cache)
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

/* ---- fold_entries ---------------------------------------------------------------------------- */

PyDoc_STRVAR(fold_entries_doc,
             "fold_entries(counts, seen, entries) -> None\n\n"
             "For each cache entry (fingerprint, pending, batch, seen) with increments:\n"
             "counts[fp] += pending + batch, and seen[fp] = its seen if later than seen.get(fp, 0).\n"
             "The exact filter's write-back bookkeeping in one call a batch (a batch evicts up to\n"
             "one entry per new URL).");

/* An int as unsigned long long: 0, or -1 (no exception) if obj is not an exact int in range. */
static int small_uint(PyObject *obj, unsigned long long *out)
{
    if (!PyLong_CheckExact(obj)) return -1;
    *out = PyLong_AsUnsignedLongLong(obj);
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* One entry as the cache makes them (bytes, then three ints below 2**32, as the tuples
 * entry_tuple makes), folded in C: 1 done, 0 not such an entry (the caller folds it the
 * generic way), -1 with an exception. */
static int fold_plain(PyObject *counts, PyObject *seen, PyObject *e)
{
    if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) != 4) return 0;
    PyObject *fp = PyTuple_GET_ITEM(e, 0), *when = PyTuple_GET_ITEM(e, 3);
    unsigned long long pending, batch, at, old = 0, last = 0;
    if (!PyBytes_CheckExact(fp) || small_uint(PyTuple_GET_ITEM(e, 1), &pending) < 0 ||
        small_uint(PyTuple_GET_ITEM(e, 2), &batch) < 0 || small_uint(when, &at) < 0 ||
        pending > UINT32_MAX || batch > UINT32_MAX)
        return 0;
    if (pending + batch == 0) return 1;
    PyObject *count = PyDict_GetItemWithError(counts, fp); /* borrowed */
    if (count == NULL && PyErr_Occurred()) return -1;
    if (count != NULL && (small_uint(count, &old) < 0 || old > UINT64_MAX / 2)) return 0;
    PyObject *prior = PyDict_GetItemWithError(seen, fp); /* borrowed */
    if (prior == NULL && PyErr_Occurred()) return -1;
    if (prior != NULL && small_uint(prior, &last) < 0) return 0;
    PyObject *sum = PyLong_FromUnsignedLongLong(old + pending + batch);
    int rc = sum != NULL ? PyDict_SetItem(counts, fp, sum) : -1;
    Py_XDECREF(sum);
    if (rc == 0 && at > last) rc = PyDict_SetItem(seen, fp, when);
    return rc < 0 ? -1 : 1;
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
        int plain = fold_plain(counts, seen, e);
        if (plain < 0) goto fail;
        if (plain) continue;
        if (!PyArg_ParseTuple(e, "OOOO:fold_entries", &fp, &pending, &batch, &when)) goto fail;
        PyObject *add = PyNumber_Add(pending, batch);
        if (add == NULL) goto fail;
        int nonzero = PyObject_IsTrue(add), rc = 0;
        if (nonzero > 0) rc = dict_add(counts, fp, add);
        Py_DECREF(add);
        if (nonzero < 0 || rc < 0) goto fail;
        if (!nonzero) continue;
        if (dict_set_if_later(seen, fp, when) < 0) goto fail;
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    return NULL;
}


static PyMethodDef fingerprint_cache_functions[] = {
    {"fold_entries", mod_fold_entries, METH_VARARGS, fold_entries_doc},
    {NULL},
};

int us_fingerprint_cache_add(PyObject *module)
{
    if (PyModule_AddFunctions(module, fingerprint_cache_functions) < 0 ||
        PyType_Ready(&FingerprintCacheType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "FingerprintCache", (PyObject *)&FingerprintCacheType) < 0 ||
        PyModule_AddIntConstant(module, "FPCACHE_ENTRY_BYTES", sizeof(us_fp_entry)) < 0)
        return -1;
    return 0;
}
