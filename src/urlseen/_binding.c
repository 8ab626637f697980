/* _binding.c: the cold helpers the binding files share (see _binding.h). */
#include "_binding.h"

#include "csrc/bloom.h"

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

/* Re-raise a failed UTF-8 encoding as InvalidKeyError, naming the batch position if any. */
void raise_unencodable(Py_ssize_t index)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (index >= 0)
        PyErr_Format(us_InvalidKeyError,
                     "key %zd of the batch cannot be encoded as UTF-8 (%S); pass bytes, or "
                     "a str without lone surrogates",
                     index, value ? value : Py_None);
    else
        PyErr_Format(us_InvalidKeyError,
                     "key cannot be encoded as UTF-8 (%S); pass bytes, or a str without lone "
                     "surrogates",
                     value ? value : Py_None);
    PyObject *type2, *value2, *tb2;
    PyErr_Fetch(&type2, &value2, &tb2);
    PyErr_NormalizeException(&type2, &value2, &tb2);
    if (value) PyException_SetCause(value2, Py_NewRef(value));
    PyErr_Restore(type2, value2, tb2);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
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
        hash_id != US_HASH_MD5) {
        PyErr_Format(PyExc_ValueError,
                     "hash must be %d (xxh3_128), %d (murmur3_x64_128) or %d (md5), not %d",
                     US_HASH_XXH3_128, US_HASH_MURMUR3_X64_128, US_HASH_MD5, hash_id);
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
