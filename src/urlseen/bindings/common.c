/* bindings/common.c: the cold helpers the binding files share (see common.h). */
#include "common.h"

PyObject *us_InvalidKeyError;
PyObject *us_ClosedError;
PyObject *us_ReadOnlyError;

int us_load_errors(void)
{
    if (us_InvalidKeyError != NULL) return 0;
    PyObject *errors = PyImport_ImportModule("urlseen.errors");
    if (errors == NULL) return -1;
    us_InvalidKeyError = PyObject_GetAttrString(errors, "InvalidKeyError");
    us_ClosedError = PyObject_GetAttrString(errors, "ClosedError");
    us_ReadOnlyError = PyObject_GetAttrString(errors, "ReadOnlyError");
    Py_DECREF(errors);
    return (us_InvalidKeyError && us_ClosedError && us_ReadOnlyError) ? 0 : -1;
}

PyObject *take_exception(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

void set_cause(PyObject *cause)
{
    if (cause == NULL) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyException_SetCause(value, cause);
    PyErr_Restore(type, value, tb);
}

/* Re-raise a failed UTF-8 encoding as InvalidKeyError, naming the batch position if any. */
void raise_unencodable(Py_ssize_t index)
{
    PyObject *cause = take_exception();
    if (index >= 0)
        PyErr_Format(us_InvalidKeyError,
                     "key %zd of the batch cannot be encoded as UTF-8 (%S); pass bytes, or "
                     "a str without lone surrogates",
                     index, cause ? cause : Py_None);
    else
        PyErr_Format(us_InvalidKeyError,
                     "key cannot be encoded as UTF-8 (%S); pass bytes, or a str without lone "
                     "surrogates",
                     cause ? cause : Py_None);
    set_cause(cause);
}

void raise_bad_key_type(PyObject *key, Py_ssize_t index)
{
    if (index >= 0)
        PyErr_Format(PyExc_TypeError,
                     "key %zd of the batch must be str or bytes-like, not '%.200s'", index,
                     Py_TYPE(key)->tp_name);
    else
        PyErr_Format(PyExc_TypeError, "key must be str or bytes-like, not '%.200s'",
                     Py_TYPE(key)->tp_name);
}

int parse_hash_id(int hash_id)
{
    if (hash_id != US_HASH_XXH3_128 && hash_id != US_HASH_MURMUR3_X64_128 &&
        hash_id != US_HASH_MD5 && hash_id != US_HASH_XXH3_64) {
        PyErr_Format(PyExc_ValueError,
                     "hash must be %d (xxh3_128), %d (murmur3_x64_128), %d (md5) or %d (xxh3_64), "
                     "not %d",
                     US_HASH_XXH3_128, US_HASH_MURMUR3_X64_128, US_HASH_MD5, US_HASH_XXH3_64,
                     hash_id);
        return -1;
    }
    return 0;
}

/* A seed below 2**bits (32 for filters and MurmurHash3, 64 for plain XXH3), as ValueError. */
int parse_seed_bits(PyObject *obj, int bits, uint64_t *seed)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    int bad = v == (unsigned long long)-1 && PyErr_Occurred();
    if (bad && !PyErr_ExceptionMatches(PyExc_OverflowError) &&
        !PyErr_ExceptionMatches(PyExc_TypeError))
        return -1;
    if (bad || (bits < 64 && v >> bits)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "seed must be an integer in [0, 2**%d)", bits);
        return -1;
    }
    *seed = v;
    return 0;
}

int parse_seed(PyObject *obj, uint32_t *seed)
{
    uint64_t v;
    if (parse_seed_bits(obj, 32, &v) < 0) return -1;
    *seed = (uint32_t)v;
    return 0;
}

int parse_hash_seed(int hash_id, PyObject *seed_obj, uint32_t *seed)
{
    if (parse_hash_id(hash_id) < 0) return -1;
    return seed_obj ? parse_seed(seed_obj, seed) : 0;
}

int parse_k(unsigned long long k)
{
    if (k < 1 || k > US_MAX_K) {
        PyErr_Format(PyExc_ValueError, "k must be in [1, %u], not %llu", US_MAX_K, k);
        return -1;
    }
    return 0;
}

/* PyArg "O&" converter: a Python int in [0, 2**64), with OverflowError outside (the "K" format
 * would silently wrap a negative or oversized value). */
int to_u64(PyObject *obj, void *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "expected an int, not '%.200s'", Py_TYPE(obj)->tp_name);
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *(unsigned long long *)out = v;
    return 1;
}

/* The batch as a list or tuple (any other iterable is read into a tuple first). */
PyObject *batch_sequence(PyObject *keys)
{
    if (PyUnicode_Check(keys) || PyBytes_Check(keys) || PyByteArray_Check(keys)) {
        /* Iterating would add every character as a key: surely not what was meant. */
        PyErr_Format(PyExc_TypeError,
                     "expected an iterable of keys, not a single '%.200s' (wrap it in a list)",
                     Py_TYPE(keys)->tp_name);
        return NULL;
    }
    if (PyList_CheckExact(keys) || PyTuple_CheckExact(keys)) return Py_NewRef(keys);
    PyObject *tuple = PySequence_Tuple(keys);
    if (tuple == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "expected an iterable of str or bytes, not '%.200s'",
                     Py_TYPE(keys)->tp_name);
    }
    return tuple;
}

int batch_check_keys(PyObject *seq)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, i);
        if (PyUnicode_Check(key) ? PyUnicode_IS_COMPACT_ASCII(key) : PyBytes_Check(key)) continue;
        key_bytes kb;
        Py_INCREF(key);
        int rc = key_get(key, &kb, i);
        if (rc == 0) key_release(&kb);
        Py_DECREF(key);
        if (rc < 0) return -1;
        if (PySequence_Fast_GET_SIZE(seq) != n) { /* encoding allocates: a finalizer may run */
            PyErr_SetString(PyExc_RuntimeError, "the list of keys changed size during the batch");
            return -1;
        }
    }
    return 0;
}

void raise_batch_changed(void)
{
    PyErr_SetString(PyExc_RuntimeError, "the list of keys changed during the batch");
}

int batch_hash(PyObject *seq, Py_ssize_t start, Py_ssize_t m, int hash_id, uint64_t seed,
               us_hash128 *out)
{
    for (Py_ssize_t j = 0; j < m; j++)
        if (batch_key_hash(seq, start + j, hash_id, seed, &out[j]) < 0) return -1;
    return 0;
}

PyObject *u64_list(const uint64_t *values, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(values[i]);
        if (v == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

int fingerprint_arg(PyObject *obj, const uint8_t **fp)
{
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != 16) {
        PyErr_SetString(PyExc_TypeError, "a fingerprint is 16 bytes");
        return -1;
    }
    *fp = (const uint8_t *)PyBytes_AS_STRING(obj);
    return 0;
}

int append_new(PyObject *list, PyObject *item)
{
    if (item == NULL) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

int bind_buffer(PyObject *buffer, Py_ssize_t offset, unsigned long long need,
                Py_ssize_t count_offset, Py_buffer *view, int *readonly)
{
    if (offset < 0) {
        PyErr_Format(PyExc_ValueError, "offset must be >= 0, not %zd", offset);
        return -1;
    }
    *readonly = 0;
    if (PyObject_GetBuffer(buffer, view, PyBUF_WRITABLE) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        if (PyObject_GetBuffer(buffer, view, PyBUF_SIMPLE) < 0) return -1;
        *readonly = 1;
    }
    if ((unsigned long long)view->len < (unsigned long long)offset ||
        (unsigned long long)(view->len - offset) < need) {
        PyErr_Format(PyExc_ValueError,
                     "buffer of %zd bytes is too small for %llu bytes of data at offset %zd",
                     view->len, need, offset);
        PyBuffer_Release(view);
        return -1;
    }
    if (count_offset >= 0 && (*readonly || count_offset > view->len - 8)) {
        PyErr_Format(PyExc_ValueError, "count_offset %zd does not fit a writable buffer of %zd bytes",
                     count_offset, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

int check_shape(unsigned long long nbits, unsigned long long k, int layout,
                unsigned long long max_nbits)
{
    if ((layout != US_LAYOUT_STANDARD && layout != US_LAYOUT_BLOCKED) || k < 1 || k > US_MAX_K ||
        nbits == 0 || (max_nbits && nbits > max_nbits) ||
        (layout == US_LAYOUT_BLOCKED && nbits % US_BLOCK_BITS)) {
        if (max_nbits)
            PyErr_Format(PyExc_ValueError, "invalid nbits (at most %llu), k or layout", max_nbits);
        else
            PyErr_SetString(PyExc_ValueError, "invalid nbits, k or layout");
        return -1;
    }
    return 0;
}

int parse_probe_args(PyObject *args, PyObject *kwargs, const char *format, char **kwlist,
                     unsigned long long max_nbits, PyObject **first, us_bloom *b,
                     uint32_t *seed, int *hash_id)
{
    PyObject *seed_obj = NULL;
    unsigned long long nbits, k;
    int layout;
    *hash_id = US_HASH_XXH3_128;
    *seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, kwlist, first, to_u64, &nbits, to_u64,
                                     &k, &layout, &seed_obj, hash_id))
        return -1;
    if (parse_hash_seed(*hash_id, seed_obj, seed) < 0) return -1;
    if (check_shape(nbits, k, layout, max_nbits) < 0) return -1;
    us_bloom shape = {NULL, nbits, (uint32_t)k, layout};
    *b = shape;
    return 0;
}

/* ---- us_bound: filter types over a caller-owned buffer ------------------------------------ */

void us_bound_attach(us_bound *b, const Py_buffer *view, int readonly, Py_ssize_t count_offset)
{
    us_bound_unbind(b);
    b->view = *view;
    b->bound = 1;
    b->readonly = readonly;
    b->count_ptr = count_offset >= 0 ? (uint8_t *)view->buf + count_offset : NULL;
    b->count = 0;
}

int us_bound_bind(us_bound *b, PyObject *buffer, Py_ssize_t offset, unsigned long long need,
                  Py_ssize_t count_offset)
{
    Py_buffer view;
    int readonly;
    if (bind_buffer(buffer, offset, need, count_offset, &view, &readonly) < 0) return -1;
    us_bound_attach(b, &view, readonly, count_offset);
    return 0;
}

void us_bound_unbind(us_bound *b)
{
    b->count_ptr = NULL;
    if (b->bound) {
        PyBuffer_Release(&b->view);
        b->bound = 0;
    }
}

void us_bound_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    us_bound_unbind((us_bound *)self);
    Py_TYPE(self)->tp_free(self);
}

int us_bound_traverse(PyObject *self, visitproc visit, void *arg)
{
    us_bound *b = (us_bound *)self;
    if (b->bound) Py_VISIT(b->view.obj);
    return 0;
}

int us_bound_clear(PyObject *self)
{
    us_bound_unbind((us_bound *)self);
    return 0;
}

Py_ssize_t us_bound_len(PyObject *self)
{
    us_bound *b = (us_bound *)self;
    if (us_bound_usable(b, 0) < 0) return -1;
    if (b->count > (unsigned long long)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "count does not fit len(); see the count attribute");
        return -1;
    }
    return (Py_ssize_t)b->count;
}

PyObject *us_bound_release(PyObject *self, PyObject *unused)
{
    us_bound_unbind((us_bound *)self);
    Py_RETURN_NONE;
}

PyObject *us_bound_get_closed(PyObject *self, void *closure)
{
    return PyBool_FromLong(!((us_bound *)self)->bound);
}

PyObject *us_bound_get_readonly(PyObject *self, void *closure)
{
    return PyBool_FromLong(((us_bound *)self)->readonly);
}

PyObject *us_bound_get_count(PyObject *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(((us_bound *)self)->count);
}

int us_bound_set_count_attr(PyObject *self, PyObject *value, void *closure)
{
    us_bound *b = (us_bound *)self;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete count");
        return -1;
    }
    unsigned long long v;
    if (!to_u64(value, &v)) return -1;
    us_bound_set_count(b, v); /* written through to the buffer, 0 included */
    return 0;
}
