/* bindings/mdbf_filter.c: the CPython binding of the multi-dimensional Bloom filter (csrc/mdbf.h).
 *
 * MDBFilter is the C base of urlseen.MultiDimensionalBloomFilter, as BitFilter is of
 * BloomFilter: add / in / len / the batch forms are C methods, so the 2S digests and probes of
 * a key cost one C call, and a batch none per key in Python.
 *
 * Threads: every method holds the GIL throughout (no lock of its own). A batch checks every key
 * before it changes anything, so a bad key raises and leaves the filter as it was.
 */
#include "common.h"

#include "csrc/mdbf.h"

typedef struct {
    us_bound base; /* the buffer, its read-only flag and the count (common.h) */
    int rule;
    us_mdbf f;
} MDBFilter;

static int MDBFilter_init(MDBFilter *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"buffer", "offset", "groups", "n1",    "n2",           "k1",
                             "k2",     "rule",   "seed",   "count", "count_offset", "hash",
                             NULL};
    PyObject *buffer, *seed_obj = NULL;
    Py_ssize_t offset, count_offset = -1;
    unsigned long long groups, n1, n2, k1, k2, count = 0;
    int rule, hash_id = US_HASH_XXH3_128;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnO&O&O&O&O&i|OO&ni:MDBFilter", kwlist,
                                     &buffer, &offset, to_u64, &groups, to_u64, &n1, to_u64, &n2,
                                     to_u64, &k1, to_u64, &k2, &rule, &seed_obj, to_u64, &count,
                                     &count_offset, &hash_id))
        return -1;
    uint32_t seed = 0;
    if (parse_hash_seed(hash_id, seed_obj, &seed) < 0) return -1;
    if (groups < 1 || groups > US_MDBF_MAX_GROUPS) {
        PyErr_Format(PyExc_ValueError, "groups must be in [1, %u], not %llu", US_MDBF_MAX_GROUPS,
                     groups);
        return -1;
    }
    if (k1 > US_MAX_K || k2 > US_MAX_K || k1 + k2 < 1 || (k1 && !n1) || (k2 && !n2) ||
        n1 > (1ULL << 46) || n2 > (1ULL << 46)) {
        PyErr_Format(PyExc_ValueError,
                     "invalid vector shape (n1=%llu, n2=%llu, k1=%llu, k2=%llu): k1, k2 in "
                     "[0, %u] with k1 + k2 >= 1, and a vector probed must have bits",
                     n1, n2, k1, k2, US_MAX_K);
        return -1;
    }
    if (rule != US_MDBF_ALL && rule != US_MDBF_ANY) {
        PyErr_Format(PyExc_ValueError, "rule must be %d (all) or %d (any), not %d", US_MDBF_ALL,
                     US_MDBF_ANY, rule);
        return -1;
    }
    unsigned long long need = groups * us_mdbf_group_bytes(n1, n2);
    if (us_bound_bind(&self->base, buffer, offset, need, count_offset) < 0) return -1;
    self->rule = rule;
    us_mdbf f = {(uint8_t *)self->base.view.buf + offset, (uint32_t)groups, n1, n2, (uint32_t)k1,
                 (uint32_t)k2, hash_id, seed};
    self->f = f;
    us_bound_add_count(&self->base, count);
    return 0;
}

PyDoc_STRVAR(add_doc,
             "add(key) -> bool\n\n"
             "Check-and-add in one step: True if key was new under the filter's query rule (its\n"
             "bits are then set in every group), False if it was (probably) seen (nothing changes).");

static PyObject *MDBFilter_add(MDBFilter *self, PyObject *key)
{
    key_bytes kb;
    if (key_get(key, &kb, -1) < 0) return NULL;
    if (us_bound_usable(&self->base, 1) < 0) {
        key_release(&kb);
        return NULL;
    }
    int fresh = us_mdbf_test_and_set(&self->f, self->rule, kb.data, (size_t)kb.len);
    key_release(&kb);
    us_bound_add_count(&self->base, (unsigned)fresh);
    return PyBool_FromLong(fresh);
}

static int MDBFilter_contains(MDBFilter *self, PyObject *key)
{
    key_bytes kb;
    if (key_get(key, &kb, -1) < 0) return -1;
    if (us_bound_usable(&self->base, 0) < 0) {
        key_release(&kb);
        return -1;
    }
    int present = us_mdbf_test(&self->f, self->rule, kb.data, (size_t)kb.len);
    key_release(&kb);
    return present;
}

/* Every key is checked before any bit changes (all or nothing, as BitFilter's batches). */
static PyObject *run_batch(MDBFilter *self, PyObject *keys, int write)
{
    if (us_bound_usable(&self->base, write) < 0) return NULL;
    PyObject *seq = batch_sequence(keys);
    if (seq == NULL) return NULL;
    if (batch_check_keys(seq) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = PyList_New(n);
    if (result == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    unsigned long long fresh = 0;
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        key_bytes kb;
        /* Checked above; only a finalizer run by an allocation (the result list) could have
         * changed a list since, and then we stop with what was applied counted. */
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_Format(PyExc_RuntimeError,
                         "the list of keys changed during the batch: the first %zd keys were "
                         "processed, the rest were not", i);
            break;
        }
        if (key_get(PySequence_Fast_GET_ITEM(seq, i), &kb, i) < 0) break;
        int hit = write ? us_mdbf_test_and_set(&self->f, self->rule, kb.data, (size_t)kb.len)
                        : us_mdbf_test(&self->f, self->rule, kb.data, (size_t)kb.len);
        key_release(&kb);
        fresh += (unsigned)(write && hit);
        PyList_SET_ITEM(result, i, Py_NewRef(hit ? Py_True : Py_False));
    }
    us_bound_add_count(&self->base, fresh); /* what was applied, also when stopped early */
    Py_DECREF(seq);
    if (i < n) Py_CLEAR(result);
    return result;
}

PyDoc_STRVAR(add_many_doc,
             "add_many(keys) -> list[bool]\n\n"
             "Check-and-add every key of an iterable, in order; element i is True if key i was\n"
             "new. Every key is checked first, so a bad key raises and changes nothing.");
US_BATCH_METHOD(MDBFilter_add_many, MDBFilter, run_batch, 1)

PyDoc_STRVAR(contains_many_doc,
             "contains_many(keys) -> list[bool]\n\n"
             "Test every key of an iterable without writing; element i is True if key i is\n"
             "(probably) present under the query rule.");
US_BATCH_METHOD(MDBFilter_contains_many, MDBFilter, run_batch, 0)

PyDoc_STRVAR(positions_doc,
             "positions(key) -> list[int]\n\n"
             "The key's probe positions: per group, k1 positions in V1 (in [0, n1)), then k2 in\n"
             "V2 (in [0, n2)); groups * (k1 + k2) values (for tests and oracles).");

static PyObject *MDBFilter_positions(MDBFilter *self, PyObject *key)
{
    if (us_bound_usable(&self->base, 0) < 0) return NULL;
    key_bytes kb;
    if (key_get(key, &kb, -1) < 0) return NULL;
    size_t total = (size_t)self->f.groups * (self->f.k1 + self->f.k2);
    uint64_t *pos = PyMem_Malloc(total * sizeof(uint64_t));
    if (pos == NULL) {
        key_release(&kb);
        return PyErr_NoMemory();
    }
    us_mdbf_positions(&self->f, kb.data, (size_t)kb.len, pos);
    key_release(&kb);
    PyObject *out = u64_list(pos, total);
    PyMem_Free(pos);
    return out;
}

PyDoc_STRVAR(popcounts_doc,
             "popcounts() -> list[int]\n\n"
             "Bits set in each vector: V1 of group 0, V2 of group 0, V1 of group 1, ... Reads\n"
             "every bit.");

static PyObject *MDBFilter_popcounts(MDBFilter *self, PyObject *unused)
{
    if (us_bound_usable(&self->base, 0) < 0) return NULL;
    uint64_t *ones = PyMem_Malloc(2 * (size_t)self->f.groups * sizeof(uint64_t));
    if (ones == NULL) return PyErr_NoMemory();
    uint64_t group = us_mdbf_group_bytes(self->f.n1, self->f.n2);
    for (uint32_t s = 0; s < self->f.groups; s++) {
        const uint8_t *base = self->f.bits + s * group;
        ones[2 * s] = us_popcount(base, self->f.n1);
        ones[2 * s + 1] = us_popcount(base + (self->f.n1 + 7) / 8, self->f.n2);
    }
    PyObject *out = u64_list(ones, 2 * (size_t)self->f.groups);
    PyMem_Free(ones);
    return out;
}

PyDoc_STRVAR(release_doc,
             "_release() -> None\n\n"
             "Let go of the buffer so that its owner (an mmap) can be closed; afterwards every\n"
             "operation raises ClosedError.");

US_GETTER(get_groups, MDBFilter, PyLong_FromUnsignedLong(self->f.groups))
US_GETTER(get_n1, MDBFilter, PyLong_FromUnsignedLongLong(self->f.n1))
US_GETTER(get_n2, MDBFilter, PyLong_FromUnsignedLongLong(self->f.n2))
US_GETTER(get_k1, MDBFilter, PyLong_FromUnsignedLong(self->f.k1))
US_GETTER(get_k2, MDBFilter, PyLong_FromUnsignedLong(self->f.k2))
US_GETTER(get_rule, MDBFilter, PyLong_FromLong(self->rule))
US_GETTER(get_seed, MDBFilter, PyLong_FromUnsignedLong(self->f.seed))
US_GETTER(get_hash, MDBFilter, PyLong_FromLong(self->f.hash_id))

static PyGetSetDef MDBFilter_getset[] = {
    {"groups", (getter)get_groups, NULL, "S: groups of two vectors.", NULL},
    {"n1", (getter)get_n1, NULL, "Bits of each group's V1 (N).", NULL},
    {"n2", (getter)get_n2, NULL, "Bits of each group's V2 (N / r).", NULL},
    {"k1", (getter)get_k1, NULL, "Probes per key in each V1.", NULL},
    {"k2", (getter)get_k2, NULL, "Probes per key in each V2.", NULL},
    {"rule", (getter)get_rule, NULL, "Query rule: 0 = all groups, 1 = any group.", NULL},
    {"seed", (getter)get_seed, NULL, "Base hash seed.", NULL},
    {"hash", (getter)get_hash, NULL, "Hash id (csrc/digest.h).", NULL},
    US_BOUND_GETSET(us_bound_set_count_attr, "Keys reported new (len(filter))."),
    {NULL},
};

static PyMethodDef MDBFilter_methods[] = {
    {"add", (PyCFunction)MDBFilter_add, METH_O, add_doc},
    {"add_many", (PyCFunction)MDBFilter_add_many, METH_O, add_many_doc},
    {"contains_many", (PyCFunction)MDBFilter_contains_many, METH_O, contains_many_doc},
    {"positions", (PyCFunction)MDBFilter_positions, METH_O, positions_doc},
    {"popcounts", (PyCFunction)MDBFilter_popcounts, METH_NOARGS, popcounts_doc},
    {"_release", us_bound_release, METH_NOARGS, release_doc},
    {NULL},
};

static PySequenceMethods MDBFilter_as_sequence = {
    .sq_length = us_bound_len,
    .sq_contains = (objobjproc)MDBFilter_contains,
};

PyDoc_STRVAR(MDBFilter_doc,
             "MDBFilter(buffer, offset, groups, n1, n2, k1, k2, rule, seed=0, count=0, "
             "count_offset=-1, hash=0)\n\n"
             "Multi-dimensional Bloom-filter probes (groups x (V1 of n1 bits, V2 of n2 bits)) over\n"
             "data at byte offset of a buffer the caller owns. With count_offset >= 0 the count\n"
             "of new keys is mirrored into the buffer there (8 bytes, little-endian).\n"
             "urlseen.MultiDimensionalBloomFilter is the public face of this type.");

static PyTypeObject MDBFilterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "urlseen._core.MDBFilter",
    .tp_basicsize = sizeof(MDBFilter),
    .tp_dealloc = us_bound_dealloc,
    .tp_as_sequence = &MDBFilter_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = MDBFilter_doc,
    .tp_traverse = us_bound_traverse,
    .tp_clear = us_bound_clear,
    .tp_methods = MDBFilter_methods,
    .tp_getset = MDBFilter_getset,
    .tp_init = (initproc)MDBFilter_init,
    .tp_new = PyType_GenericNew,
};

int us_mdbf_filter_add(PyObject *module)
{
    if (PyType_Ready(&MDBFilterType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "MDBFilter", (PyObject *)&MDBFilterType) < 0 ||
        PyModule_AddIntConstant(module, "MDBF_QUERY_ALL", US_MDBF_ALL) < 0 ||
        PyModule_AddIntConstant(module, "MDBF_QUERY_ANY", US_MDBF_ANY) < 0 ||
        PyModule_AddIntConstant(module, "MDBF_MAX_GROUPS", US_MDBF_MAX_GROUPS) < 0)
        return -1;
    return 0;
}
