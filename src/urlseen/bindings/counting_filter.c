/* bindings/counting_filter.c: the CountingFilter type, the C base of urlseen.CountingBloomFilter
 * (key-level check-and-add, remove, batches) and the counter array of urlseen.ExactFilter, which
 * drives it by 16-byte digests (the _add_digests / _remove_digests / _get / _set family here,
 * _exact_step in exact_step.c).
 *
 * Threads: every method holds the GIL throughout (the Python owners add their own lock around
 * multi-step operations); a batch hashes every key before it changes anything, so a bad key
 * raises and leaves the filter as it was.
 */
#include "counting_filter.h"

static PyTypeObject CountingFilterType;

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
    if (!us_counting_add_new_at(&self->c, us_cf_indices(self, h, idx), NULL, NULL)) Py_RETURN_FALSE;
    us_bound_add_count(&self->base, 1);
    Py_RETURN_TRUE;
}

static int CountingFilter_contains(CountingFilter *self, PyObject *key)
{
    us_hash128 h;
    uint64_t idx[US_MAX_K];
    if (us_bound_usable(&self->base, 0) < 0 || hash_key(self, key, &h, -1) < 0) return -1;
    return us_counting_test_at(&self->c, us_cf_indices(self, h, idx));
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
    if (!us_counting_remove_at(&self->c, us_cf_indices(self, h, idx), NULL, NULL)) Py_RETURN_FALSE;
    if (self->base.count) us_bound_set_count(&self->base, self->base.count - 1);
    Py_RETURN_TRUE;
}

/* -- batches: every key hashed first, then applied in order -- */

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
us_hash128 *us_cf_hash_batch(CountingFilter *self, PyObject *keys, Py_ssize_t *n)
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
    us_hash128 *h = us_cf_hash_batch(self, keys, &n);
    if (h == NULL) return NULL;
    PyObject *result = PyList_New(n);
    if (result == NULL) {
        PyMem_RawFree(h);
        return NULL;
    }
    unsigned long long count = self->base.count;
    uint64_t idx[US_MAX_K];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) us_cf_prefetch(self, h[i + PREFETCH_AHEAD]);
        int yes;
        us_cf_indices(self, h[i], idx);
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

int us_cf_append_events(PyObject *list, const us_overflow *ev, size_t nev)
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
    return u64_list(us_cf_indices(self, h, idx), self->c.k);
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
        if (i + PREFETCH_AHEAD < n) us_cf_prefetch(self, h[i + PREFETCH_AHEAD]);
        size_t nev = 0;
        us_cf_indices(self, h[i], idx);
        if (add) {
            us_counting_add_at(&self->c, idx, ev, &nev);
        } else if (!us_counting_remove_at(&self->c, idx, ev, &nev)) {
            PyErr_Format(PyExc_RuntimeError,
                         "digest %zd cannot be removed: the counters do not hold it", i);
            goto fail;
        }
        if (nev && us_cf_append_events(events, ev, nev) < 0) goto fail;
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
    {"_exact_step", (PyCFunction)us_cf_exact_step, METH_VARARGS, us_cf_exact_step_doc},
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

/* The line engine's access (line_engine_filters.c): the filter's hash id and seed. */
int us_counting_filter_hash_of(PyObject *obj, int *hash_id, uint64_t *seed)
{
    if (!PyObject_TypeCheck(obj, &CountingFilterType)) return -1;
    *hash_id = ((CountingFilter *)obj)->hash_id;
    *seed = ((CountingFilter *)obj)->seed;
    return 0;
}

int us_counting_filter_add(PyObject *module)
{
    if (us_exact_step_add(module) < 0 || PyType_Ready(&CountingFilterType) < 0) return -1;
    return PyModule_AddObjectRef(module, "CountingFilter", (PyObject *)&CountingFilterType);
}
