/* _binding.h: what the binding files (_core.c, _counting.c) share: the error types from
 * urlseen.errors, key access (str as UTF-8, bytes, buffers) and argument parsing.
 *
 * The key accessors are static inline: they sit on the per-call hot path of `add`, and a call
 * into another translation unit would cost a visible part of it. The cold helpers live in
 * _binding.c.
 */
#ifndef URLSEEN_BINDING_H
#define URLSEEN_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "csrc/digest.h"

extern PyObject *us_InvalidKeyError; /* urlseen.errors.InvalidKeyError */
extern PyObject *us_ClosedError;     /* urlseen.errors.ClosedError */
extern PyObject *us_ReadOnlyError;   /* urlseen.errors.ReadOnlyError */

/* Import the error types above (once, at module init). */
int us_load_errors(void);

typedef struct {
    const char *data;
    Py_ssize_t len;
    Py_buffer view;
    int has_view;
} key_bytes;

/* Re-raise a failed UTF-8 encoding as us_InvalidKeyError, naming the batch position if any. */
void raise_unencodable(Py_ssize_t index);
void raise_bad_key_type(PyObject *key, Py_ssize_t index);
/* ValueError unless hash_id is one of csrc/digest.h's ids. */
int parse_hash_id(int hash_id);
/* A seed below 2**bits (32 for filters and MurmurHash3, 64 for plain XXH3), as ValueError. */
int parse_seed_bits(PyObject *obj, int bits, uint64_t *seed);
int parse_seed(PyObject *obj, uint32_t *seed);
/* PyArg "O&" converter: a Python int in [0, 2**64), with OverflowError outside. */
int to_u64(PyObject *obj, void *out);
/* ValueError unless (nbits, k, layout) is a filter shape the probes accept; max_nbits = 0
 * means no limit beyond the layout's own. */
int check_shape(unsigned long long nbits, unsigned long long k, int layout,
                unsigned long long max_nbits);

/* A 16-byte digest as bytes: h1 then h2, little-endian (the fingerprint every API returns). */
static inline PyObject *digest_bytes(uint64_t h1, uint64_t h2)
{
    uint8_t out[16];
    us_store64_le(out, h1);
    us_store64_le(out + 8, h2);
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

/* Export `buffer` for a filter whose data is `need` bytes at `offset` (writable if it can be,
 * else read-only: *readonly says which), with room for a live count at count_offset (-1: none,
 * and it needs a writable buffer). ValueError, nothing held, if it does not fit. */
int bind_buffer(PyObject *buffer, Py_ssize_t offset, unsigned long long need,
                Py_ssize_t count_offset, Py_buffer *view, int *readonly);

/* The batch as a list or tuple (any other iterable is read into a tuple first); a single str or
 * bytes is refused. */
PyObject *batch_sequence(PyObject *keys);

/* Borrow the bytes of a key: a str's UTF-8 (cached by CPython; an ASCII str is its own UTF-8),
 * a bytes object, or any contiguous buffer. Call key_release afterwards. */
static inline int key_get(PyObject *key, key_bytes *kb, Py_ssize_t index)
{
    kb->has_view = 0;
    if (PyUnicode_Check(key)) {
        if (PyUnicode_IS_COMPACT_ASCII(key)) {
            kb->data = (const char *)PyUnicode_DATA(key);
            kb->len = PyUnicode_GET_LENGTH(key);
            return 0;
        }
        kb->data = PyUnicode_AsUTF8AndSize(key, &kb->len);
        if (kb->data == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) raise_unencodable(index);
            return -1;
        }
        return 0;
    }
    if (PyBytes_Check(key)) {
        kb->data = PyBytes_AS_STRING(key);
        kb->len = PyBytes_GET_SIZE(key);
        return 0;
    }
    if (PyObject_CheckBuffer(key)) {
        if (PyObject_GetBuffer(key, &kb->view, PyBUF_SIMPLE) < 0) {
            if (PyErr_ExceptionMatches(PyExc_BufferError)) { /* e.g. a strided memoryview */
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "key%s must be a contiguous buffer, not a strided '%.200s'",
                             index >= 0 ? " of the batch" : "", Py_TYPE(key)->tp_name);
            }
            return -1;
        }
        kb->has_view = 1;
        kb->data = (const char *)kb->view.buf;
        kb->len = kb->view.len;
        return 0;
    }
    raise_bad_key_type(key, index);
    return -1;
}

static inline void key_release(key_bytes *kb)
{
    if (kb->has_view) PyBuffer_Release(&kb->view);
}

static inline int key_hash(PyObject *key, int hash_id, uint64_t seed, us_hash128 *out,
                    Py_ssize_t index)
{
    key_bytes kb;
    if (key_get(key, &kb, index) < 0) return -1;
    *out = us_digest(hash_id, kb.data, (size_t)kb.len, seed);
    key_release(&kb);
    return 0;
}

/* Defined in _counting.c: adds CountingFilter and FingerprintCache to the _core module. */
int us_counting_add_types(PyObject *module);
/* Defined in _remote.c: adds byte_masks (for bits kept in Redis) to the _core module. */
int us_remote_add_functions(PyObject *module);

#endif
