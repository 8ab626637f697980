/* bindings/fingerprint_map.c: FingerprintMap, the Python face of csrc/fpmap.h (the library's
 * staged fingerprints with their batch times, stores/_staging.py). */
#include "common.h"

#include "csrc/fpmap.h"

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

/* Room for `more` entries (one rehash, not several, for a batch): 0, or -1 with MemoryError. */
static int reserve(FingerprintMap *self, uint64_t more)
{
    uint64_t capacity = us_fpmap_room(&self->map, more);
    if (capacity == 0) return 0;
    us_fpmap_slot *slots = PyMem_RawCalloc(capacity, sizeof *slots);
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyMem_RawFree(us_fpmap_move(&self->map, slots, capacity));
    return 0;
}

static void FingerprintMap_dealloc(FingerprintMap *self)
{
    PyMem_RawFree(self->map.slots);
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
    Py_DECREF(seq);
    return Py_BuildValue("(NN)", inside, outside);
fail:
    Py_DECREF(seq);
    Py_XDECREF(inside);
    Py_XDECREF(outside);
    return NULL;
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

PyDoc_STRVAR(fm_sorted_doc,
             "sorted() -> (fps, values)\n\n"
             "Every fingerprint in byte order, packed in one bytes object (16 bytes each), and\n"
             "their values in the same order: a sorted merge's input without a Python object\n"
             "per fingerprint.");

static PyObject *FingerprintMap_sorted(FingerprintMap *self, PyObject *unused)
{
    uint64_t n = self->map.count;
    us_fpmap_slot *all = PyMem_RawMalloc((n ? n : 1) * sizeof *all);
    uint64_t *buckets = PyMem_RawMalloc(US_FPMAP_BUCKETS * sizeof *buckets);
    if (all == NULL || buckets == NULL) {
        PyMem_RawFree(all);
        PyMem_RawFree(buckets);
        return PyErr_NoMemory();
    }
    us_fpmap_sorted(&self->map, all, buckets);
    PyMem_RawFree(buckets);
    PyObject *fps = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(16 * n));
    PyObject *values = PyList_New((Py_ssize_t)n);
    if (fps == NULL || values == NULL) goto fail;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(fps);
    for (uint64_t i = 0; i < n; i++) {
        us_store64_le(out + 16 * i, all[i].a);
        us_store64_le(out + 16 * i + 8, all[i].b);
        PyObject *value = PyLong_FromUnsignedLongLong(all[i].value);
        if (value == NULL) goto fail;
        PyList_SET_ITEM(values, (Py_ssize_t)i, value);
    }
    PyMem_RawFree(all);
    return Py_BuildValue("(NN)", fps, values);
fail:
    PyMem_RawFree(all);
    Py_XDECREF(fps);
    Py_XDECREF(values);
    return NULL;
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
    {"sorted", (PyCFunction)FingerprintMap_sorted, METH_NOARGS, fm_sorted_doc},
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

int us_fingerprint_map_add(PyObject *module)
{
    if (PyType_Ready(&FingerprintMapType) < 0) return -1;
    return PyModule_AddObjectRef(module, "FingerprintMap", (PyObject *)&FingerprintMapType);
}
