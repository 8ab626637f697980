/* bindings/fingerprint_map.c: FingerprintMap, the Python face of csrc/fpmap.h (the library's
 * staged fingerprints with their batch times, exact/staging.py), and the run functions, the
 * face of csrc/runs.h (the runs those become, exact/runs.py). */
#include "common.h"

#include <math.h>
#include <string.h>

#include "csrc/fpmap.h"
#include "csrc/runs.h"

#define FPMAP_AHEAD 8 /* fingerprints whose slots are fetched ahead of the one at hand */

typedef struct {
    PyObject_HEAD
    us_fpmap map;
} FingerprintMap;

/* The 16 bytes of a fingerprint, or NULL with an exception. */
static const uint8_t *fp_bytes(PyObject *obj)
{
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != 16) {
        PyErr_SetString(PyExc_ValueError, "fingerprints must be 16 bytes each");
        return NULL;
    }
    return (const uint8_t *)PyBytes_AS_STRING(obj);
}

#include <sys/mman.h>
#ifndef MAP_POPULATE
#define MAP_POPULATE 0 /* not Linux: the pages fault in as they are written */
#endif

/* A slot table: from 1 MiB on mapped with its pages populated at once (a grown table is
 * written all over by the move: one call instead of a page fault per 4 KiB). */
#define FPMAP_MAPPED_BYTES ((size_t)1 << 20)

static us_fpmap_slot *table_new(uint64_t capacity)
{
    size_t bytes = (size_t)capacity * sizeof(us_fpmap_slot);
    if (bytes < FPMAP_MAPPED_BYTES) return PyMem_RawCalloc(capacity, sizeof(us_fpmap_slot));
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void table_free(us_fpmap_slot *slots, uint64_t capacity)
{
    size_t bytes = (size_t)capacity * sizeof(us_fpmap_slot);
    if (slots == NULL) return;
    if (bytes < FPMAP_MAPPED_BYTES) PyMem_RawFree(slots);
    else munmap(slots, bytes);
}

/* Room for `more` entries (one rehash, not several, for a batch): 0, or -1 with MemoryError. */
static int reserve(FingerprintMap *self, uint64_t more)
{
    uint64_t capacity = us_fpmap_room(&self->map, more);
    if (capacity == 0) return 0;
    us_fpmap_slot *slots = table_new(capacity);
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t old = self->map.capacity;
    table_free(us_fpmap_move(&self->map, slots, capacity), old);
    return 0;
}

static void FingerprintMap_dealloc(FingerprintMap *self)
{
    table_free(self->map.slots, self->map.capacity);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(fm_add_many_doc,
             "add_many(fps, value) -> int\n\n"
             "Insert each 16-byte fingerprint of the sequence fps with value (0 <= value < 2**64)\n"
             "unless it is in already (its value stays); returns how many were inserted.\n"
             "ValueError, nothing inserted, if one is not 16 bytes.");

static PyObject *FingerprintMap_add_many(FingerprintMap *self, PyObject *args)
{
    PyObject *fps;
    unsigned long long value;
    if (!PyArg_ParseTuple(args, "OK:add_many", &fps, &value)) return NULL;
    PyObject *seq = PySequence_Fast(fps, "fps must be a sequence of bytes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fp_bytes(items[i]) == NULL) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_ssize_t added = 0;
    if (reserve(self, (uint64_t)n) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + FPMAP_AHEAD < n)
            us_fpmap_prefetch(&self->map, (const uint8_t *)PyBytes_AS_STRING(items[i + FPMAP_AHEAD]));
        added += us_fpmap_insert(&self->map, (const uint8_t *)PyBytes_AS_STRING(items[i]), value);
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(added);
}

PyDoc_STRVAR(fm_get_doc, "get(fp) -> int | None\n\nThe value of fp, or None if it is not in.");

static PyObject *FingerprintMap_get(FingerprintMap *self, PyObject *fp)
{
    const uint8_t *b = fp_bytes(fp);
    if (b == NULL) return NULL;
    uint64_t value;
    if (!us_fpmap_get(&self->map, b, &value)) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(value);
}

/* The end of a function that built two new objects from seq: (a, b), taken over, if ok; else
 * both dropped and NULL (the exception is set). seq is released either way. */
static PyObject *pair_or_fail(PyObject *seq, PyObject *a, PyObject *b, int ok)
{
    Py_DECREF(seq);
    if (ok) return Py_BuildValue("(NN)", a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return NULL;
}

PyDoc_STRVAR(fm_partition_doc,
             "partition(fps) -> (inside, outside)\n\n"
             "The fingerprints of the sequence fps that are in the map and those that are not,\n"
             "each list in the order of fps.");

static PyObject *FingerprintMap_partition(FingerprintMap *self, PyObject *fps)
{
    PyObject *seq = PySequence_Fast(fps, "fps must be a sequence of bytes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *inside = PyList_New(0), *outside = PyList_New(0);
    if (inside == NULL || outside == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *b = fp_bytes(items[i]);
        uint64_t value;
        if (b == NULL) goto fail;
        if (i + FPMAP_AHEAD < n && PyBytes_Check(items[i + FPMAP_AHEAD]) &&
            PyBytes_GET_SIZE(items[i + FPMAP_AHEAD]) == 16)
            us_fpmap_prefetch(&self->map, (const uint8_t *)PyBytes_AS_STRING(items[i + FPMAP_AHEAD]));
        if (PyList_Append(us_fpmap_get(&self->map, b, &value) ? inside : outside, items[i]) < 0)
            goto fail;
    }
    return pair_or_fail(seq, inside, outside, 1);
fail:
    return pair_or_fail(seq, inside, outside, 0);
}

static int append_item(const uint8_t fp[16], uint64_t value, void *arg)
{
    PyObject *item = Py_BuildValue("(y#K)", (const char *)fp, (Py_ssize_t)16,
                                   (unsigned long long)value);
    if (item == NULL) return -1;
    int r = PyList_Append((PyObject *)arg, item);
    Py_DECREF(item);
    return r;
}

static int append_key(const uint8_t fp[16], uint64_t value, void *arg)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)fp, 16);
    if (key == NULL) return -1;
    int r = PyList_Append((PyObject *)arg, key);
    Py_DECREF(key);
    return r;
}

static PyObject *collect(FingerprintMap *self, int (*fn)(const uint8_t *, uint64_t, void *))
{
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    if (us_fpmap_each(&self->map, fn, out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *FingerprintMap_items(FingerprintMap *self, PyObject *unused)
{
    return collect(self, append_item);
}

static PyObject *FingerprintMap_keys(FingerprintMap *self, PyObject *unused)
{
    return collect(self, append_key);
}

PyDoc_STRVAR(fm_sorted_records_doc,
             "sorted_records() -> bytes\n\n"
             "Every entry as a new run's record (csrc/runs.h: the fingerprint, refs 1, first and\n"
             "last seen both the value), in byte order, packed 40 bytes each.");

static PyObject *FingerprintMap_sorted_records(FingerprintMap *self, PyObject *unused)
{
    uint64_t n = self->map.count;
    us_fpmap_slot *all = PyMem_RawMalloc((n ? n : 1) * sizeof *all);
    uint64_t *buckets = PyMem_RawMalloc(US_FPMAP_BUCKETS * sizeof *buckets);
    if (all == NULL || buckets == NULL) {
        PyMem_RawFree(all);
        PyMem_RawFree(buckets);
        return PyErr_NoMemory();
    }
    us_fpmap_sorted(&self->map, all, buckets); /* byte order, as the runs keep it */
    PyMem_RawFree(buckets);
    PyObject *records = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(US_RUN_RECORD * n));
    if (records != NULL) {
        uint8_t *out = (uint8_t *)PyBytes_AS_STRING(records);
        for (uint64_t i = 0; i < n; i++, out += US_RUN_RECORD) {
            us_store64_le(out, all[i].a);
            us_store64_le(out + 8, all[i].b);
            us_store64_le(out + 16, 1);
            us_store64_le(out + 24, all[i].value);
            us_store64_le(out + 32, all[i].value);
        }
    }
    PyMem_RawFree(all);
    return records;
}

static int FingerprintMap_contains(FingerprintMap *self, PyObject *fp)
{
    const uint8_t *b = fp_bytes(fp);
    uint64_t value;
    if (b == NULL) return -1;
    return us_fpmap_get(&self->map, b, &value);
}

static Py_ssize_t FingerprintMap_len(FingerprintMap *self)
{
    return (Py_ssize_t)self->map.count;
}

US_GETTER(fm_get_nbytes, FingerprintMap,
          PyLong_FromUnsignedLongLong(self->map.capacity * sizeof(us_fpmap_slot)))

static PyGetSetDef FingerprintMap_getset[] = {
    {"nbytes", (getter)fm_get_nbytes, NULL, "Bytes of the slot table.", NULL},
    {NULL},
};

static PyMethodDef FingerprintMap_methods[] = {
    {"add_many", (PyCFunction)FingerprintMap_add_many, METH_VARARGS, fm_add_many_doc},
    {"get", (PyCFunction)FingerprintMap_get, METH_O, fm_get_doc},
    {"partition", (PyCFunction)FingerprintMap_partition, METH_O, fm_partition_doc},
    {"sorted_records", (PyCFunction)FingerprintMap_sorted_records, METH_NOARGS,
     fm_sorted_records_doc},
    {"items", (PyCFunction)FingerprintMap_items, METH_NOARGS,
     "items() -> list[tuple[bytes, int]]\n\nEvery (fingerprint, value), in no useful order."},
    {"keys", (PyCFunction)FingerprintMap_keys, METH_NOARGS,
     "keys() -> list[bytes]\n\nEvery fingerprint, in no useful order."},
    {NULL},
};

static PySequenceMethods FingerprintMap_as_sequence = {
    .sq_length = (lenfunc)FingerprintMap_len,
    .sq_contains = (objobjproc)FingerprintMap_contains,
};

static PyTypeObject FingerprintMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "urlseen._core.FingerprintMap",
    .tp_doc = PyDoc_STR("FingerprintMap()\n\nA growing hash map from 16-byte fingerprints to "
                        "64-bit values (csrc/fpmap.h)."),
    .tp_basicsize = sizeof(FingerprintMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)FingerprintMap_dealloc,
    .tp_methods = FingerprintMap_methods,
    .tp_getset = FingerprintMap_getset,
    .tp_as_sequence = &FingerprintMap_as_sequence,
};

/* ---- the staged rows of reference deltas (exact/staging.py) ---------------------------- */

/* *out = round(value * 1000) for an int or a float (as Python's round: ties to even); 0 or -1. */
static int millis(PyObject *value, int64_t *out)
{
    if (PyLong_Check(value)) {
        long long v = PyLong_AsLongLong(value);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v > INT64_MAX / 1000 || v < INT64_MIN / 1000) goto range;
        *out = (int64_t)v * 1000;
        return 0;
    }
    double x = PyFloat_AsDouble(value);
    if (x == -1.0 && PyErr_Occurred()) return -1;
    x = nearbyint(x * 1000.0);
    if (!(x > -9.2e18 && x < 9.2e18)) goto range;
    *out = (int64_t)x;
    return 0;
range:
    PyErr_SetString(PyExc_OverflowError, "a time out of range");
    return -1;
}

PyDoc_STRVAR(pack_refs_doc,
             "pack_refs(fps, refs, seen, now) -> (bytes, bytes)\n\n"
             "One staged row of reference deltas for the 16-byte fingerprints fps: their bytes\n"
             "joined, and per fingerprint refs[fp] and round(seen.get(fp, now) * 1000) as\n"
             "little-endian int64 pairs (read by _staging.unpack_deltas), in one pass.");

static PyObject *pack_refs(PyObject *module, PyObject *args)
{
    PyObject *fps, *refs, *seen, *now;
    if (!PyArg_ParseTuple(args, "OO!O!O:pack_refs", &fps, &PyDict_Type, &refs, &PyDict_Type,
                          &seen, &now))
        return NULL;
    PyObject *seq = PySequence_Fast(fps, "fps must be a sequence of bytes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *keys = PyBytes_FromStringAndSize(NULL, 16 * n);
    PyObject *pairs = PyBytes_FromStringAndSize(NULL, 16 * n);
    if (keys == NULL || pairs == NULL) goto fail;
    uint8_t *k = (uint8_t *)PyBytes_AS_STRING(keys), *d = (uint8_t *)PyBytes_AS_STRING(pairs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *fp = PySequence_Fast_GET_ITEM(seq, i);
        const uint8_t *b = fp_bytes(fp);
        if (b == NULL) goto fail;
        PyObject *delta = PyDict_GetItemWithError(refs, fp), *when;
        if (delta == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "a fingerprint without refs");
            goto fail;
        }
        long long count = PyLong_AsLongLong(delta);
        if (count == -1 && PyErr_Occurred()) goto fail;
        when = PyDict_GetItemWithError(seen, fp);
        if (when == NULL && PyErr_Occurred()) goto fail;
        int64_t ms;
        if (millis(when != NULL ? when : now, &ms) < 0) goto fail;
        memcpy(k + 16 * i, b, 16);
        us_store64_le(d + 16 * i, (uint64_t)count);
        us_store64_le(d + 16 * i + 8, (uint64_t)ms);
    }
    return pair_or_fail(seq, keys, pairs, 1);
fail:
    return pair_or_fail(seq, keys, pairs, 0);
}

/* ---- the run functions (csrc/runs.h) ---------------------------------------------------- */

/* A buffer of whole records (or keys: size 16), or -1 with ValueError. */
static int records_of(PyObject *obj, Py_buffer *view, Py_ssize_t size, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (view->len % size) {
        PyErr_Format(PyExc_ValueError, "%s must be whole %zd-byte records", what, size);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(run_merge_doc,
             "run_merge(buffers, bound) -> (bytes, list[int], int)\n\n"
             "Merge the sorted records of each buffer (40 bytes each), taking those whose key is\n"
             "<= bound (16 bytes; None: all); a key in several buffers keeps the first buffer's\n"
             "record. Returns the merged records, the records used of each buffer, and how many\n"
             "repeats were dropped.");

static PyObject *run_merge(PyObject *module, PyObject *args)
{
    PyObject *list, *bound_obj, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!O:run_merge", &PyList_Type, &list, &bound_obj)) return NULL;
    Py_ssize_t k = PyList_GET_SIZE(list), ready = 0;
    Py_buffer bound = {0}, *views = PyMem_Calloc(k ? k : 1, sizeof *views);
    const uint8_t **in = PyMem_Calloc(k ? k : 1, sizeof *in);
    size_t *n = PyMem_Calloc(k ? k : 1, sizeof *n), *used = PyMem_Calloc(k ? k : 1, sizeof *used);
    int has_bound = bound_obj != Py_None;
    if (views == NULL || in == NULL || n == NULL || used == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (has_bound && records_of(bound_obj, &bound, US_RUN_KEY, "bound") < 0) goto done;
    if (has_bound && bound.len != US_RUN_KEY) {
        PyErr_SetString(PyExc_ValueError, "bound must be one 16-byte key");
        PyBuffer_Release(&bound);
        goto done;
    }
    size_t total = 0;
    for (; ready < k; ready++) {
        if (records_of(PyList_GET_ITEM(list, ready), &views[ready], US_RUN_RECORD, "buffers") < 0)
            goto release;
        in[ready] = views[ready].buf;
        n[ready] = (size_t)views[ready].len / US_RUN_RECORD;
        total += n[ready];
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(total * US_RUN_RECORD));
    if (out == NULL) goto release;
    size_t repeats = 0, written;
    Py_BEGIN_ALLOW_THREADS
    written = us_run_merge(in, n, used, (size_t)k, has_bound ? bound.buf : NULL,
                           (uint8_t *)PyBytes_AS_STRING(out), &repeats);
    Py_END_ALLOW_THREADS
    if (_PyBytes_Resize(&out, (Py_ssize_t)(written * US_RUN_RECORD)) < 0) goto release;
    PyObject *counts = PyList_New(k);
    if (counts == NULL) {
        Py_DECREF(out);
        goto release;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *c = PyLong_FromSize_t(used[i]);
        if (c == NULL) {
            Py_DECREF(out);
            Py_DECREF(counts);
            goto release;
        }
        PyList_SET_ITEM(counts, i, c);
    }
    result = Py_BuildValue("(NNn)", out, counts, (Py_ssize_t)repeats);
release:
    for (Py_ssize_t i = 0; i < ready; i++) PyBuffer_Release(&views[i]);
    if (has_bound) PyBuffer_Release(&bound);
done:
    PyMem_Free(views);
    PyMem_Free(in);
    PyMem_Free(n);
    PyMem_Free(used);
    return result;
}

PyDoc_STRVAR(run_find_doc, "run_find(records, key) -> int\n\n"
                           "The index of key's record among sorted records, or -1.");

static PyObject *run_find(PyObject *module, PyObject *args)
{
    PyObject *data_obj, *key_obj;
    if (!PyArg_ParseTuple(args, "OO:run_find", &data_obj, &key_obj)) return NULL;
    Py_buffer data, key;
    if (records_of(data_obj, &data, US_RUN_RECORD, "records") < 0) return NULL;
    if (records_of(key_obj, &key, US_RUN_KEY, "key") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    int whole = key.len == US_RUN_KEY;
    ptrdiff_t at = whole ? us_run_find(data.buf, (size_t)data.len / US_RUN_RECORD, key.buf) : -1;
    PyBuffer_Release(&data);
    PyBuffer_Release(&key);
    if (!whole) {
        PyErr_SetString(PyExc_ValueError, "key must be 16 bytes");
        return NULL;
    }
    return PyLong_FromSsize_t(at);
}

/* The Bloom filter's bits (writable or not) and its size in bits, or -1 with an exception. */
static int bloom_of(PyObject *obj, Py_buffer *view, int writable)
{
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return -1;
    if (view->len == 0 || view->len % US_RUN_BLOCK) {
        PyErr_SetString(PyExc_ValueError, "a Bloom filter is whole 64-byte blocks");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(run_bloom_add_doc,
             "run_bloom_add(bits, items, stride) -> None\n\n"
             "Add the key at the start of each stride-byte item (16: keys; 40: records) to the\n"
             "Bloom filter bits (a bytearray of whole 64-byte blocks).");

PyDoc_STRVAR(run_bloom_check_doc,
             "run_bloom_check(bits, keys) -> bytes\n\n"
             "For each 16-byte key, 1 if the Bloom filter bits may hold it, 0 if it does not.");

static PyObject *run_bloom(PyObject *args, int add)
{
    PyObject *bits_obj, *items_obj;
    Py_ssize_t stride = US_RUN_KEY;
    if (add ? !PyArg_ParseTuple(args, "OOn:run_bloom_add", &bits_obj, &items_obj, &stride)
            : !PyArg_ParseTuple(args, "OO:run_bloom_check", &bits_obj, &items_obj))
        return NULL;
    if (stride != US_RUN_KEY && stride != US_RUN_RECORD) {
        PyErr_SetString(PyExc_ValueError, "stride must be 16 or 40");
        return NULL;
    }
    Py_buffer bits, items;
    if (bloom_of(bits_obj, &bits, add) < 0) return NULL;
    if (records_of(items_obj, &items, stride, "items") < 0) {
        PyBuffer_Release(&bits);
        return NULL;
    }
    size_t count = (size_t)items.len / (size_t)stride;
    uint64_t nblocks = (uint64_t)bits.len / US_RUN_BLOCK;
    const uint8_t *p = items.buf;
    PyObject *result = add ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count);
    if (result != NULL && add) {
        for (size_t i = 0; i < count; i++) us_run_bloom_add(bits.buf, nblocks, p + i * stride);
    } else if (result != NULL) {
        uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
        for (size_t i = 0; i < count; i++)
            out[i] = (uint8_t)us_run_bloom_has(bits.buf, nblocks, p + i * stride);
    }
    PyBuffer_Release(&bits);
    PyBuffer_Release(&items);
    return result;
}

static PyObject *run_bloom_add(PyObject *module, PyObject *args)
{
    return run_bloom(args, 1);
}

static PyObject *run_bloom_check(PyObject *module, PyObject *args)
{
    return run_bloom(args, 0);
}

static PyMethodDef run_functions[] = {
    {"pack_refs", pack_refs, METH_VARARGS, pack_refs_doc},
    {"run_merge", run_merge, METH_VARARGS, run_merge_doc},
    {"run_find", run_find, METH_VARARGS, run_find_doc},
    {"run_bloom_add", run_bloom_add, METH_VARARGS, run_bloom_add_doc},
    {"run_bloom_check", run_bloom_check, METH_VARARGS, run_bloom_check_doc},
    {NULL},
};

int us_fingerprint_map_add(PyObject *module)
{
    if (PyType_Ready(&FingerprintMapType) < 0) return -1;
    if (PyModule_AddFunctions(module, run_functions) < 0) return -1;
    return PyModule_AddObjectRef(module, "FingerprintMap", (PyObject *)&FingerprintMapType);
}
