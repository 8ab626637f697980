/* bindings/common.h: what the binding files share: the error types from urlseen.errors, key
 * access (str as UTF-8, bytes, buffers), argument parsing, batch reading, fingerprint arguments,
 * and the head of every filter type over a caller-owned buffer (us_bound).
 *
 * The key accessors are static inline: they sit on the per-call hot path of `add`, and a call
 * into another translation unit would cost a visible part of it. The cold helpers live in
 * common.c.
 */
#ifndef URLSEEN_BINDINGS_COMMON_H
#define URLSEEN_BINDINGS_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "csrc/bloom.h"
#include "csrc/digest.h"

/* Keeps a cold path out of a hot function's frame. */
#if defined(__GNUC__) || defined(__clang__)
#define US_NOINLINE __attribute__((noinline))
#else
#define US_NOINLINE
#endif

extern PyObject *us_InvalidKeyError; /* urlseen.errors.InvalidKeyError */
extern PyObject *us_ClosedError;     /* urlseen.errors.ClosedError */
extern PyObject *us_ReadOnlyError;   /* urlseen.errors.ReadOnlyError */

/* Import the error types above (once, at module init). */
int us_load_errors(void);

/* Take the exception being raised, normalized, clearing it: a new reference, or NULL if none. */
PyObject *take_exception(void);
/* Make cause (a reference taken over; NULL: nothing to do) the __cause__ of the exception just
 * raised, as `raise ... from cause` does. */
void set_cause(PyObject *cause);

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
/* parse_hash_id, then parse_seed of seed_obj unless it is NULL (the argument was not given). */
int parse_hash_seed(int hash_id, PyObject *seed_obj, uint32_t *seed);
/* ValueError unless 1 <= k <= US_MAX_K (probes per key). */
int parse_k(unsigned long long k);
/* PyArg "O&" converter: a Python int in [0, 2**64), with OverflowError outside. */
int to_u64(PyObject *obj, void *out);
/* ValueError unless (nbits, k, layout) is a filter shape the probes accept; max_nbits = 0
 * means no limit beyond the layout's own. */
int check_shape(unsigned long long nbits, unsigned long long k, int layout,
                unsigned long long max_nbits);
/* The arguments of a function that probes without a filter: one object (the key or keys), then
 * nbits, k, layout, seed=0, hash=0 (format "OO&O&i|Oi:name" and its kwlist), checked as
 * check_shape with max_nbits says. The shape goes to *b (bits NULL). */
int parse_probe_args(PyObject *args, PyObject *kwargs, const char *format, char **kwlist,
                     unsigned long long max_nbits, PyObject **first, us_bloom *b,
                     uint32_t *seed, int *hash_id);

/* A 16-byte digest as bytes: h1 then h2, little-endian (the fingerprint every API returns). */
static inline PyObject *digest_bytes(uint64_t h1, uint64_t h2)
{
    uint8_t out[16];
    us_store64_le(out, h1);
    us_store64_le(out + 8, h2);
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

/* A list of n Python ints (probe positions, counts), or NULL with an exception. */
PyObject *u64_list(const uint64_t *values, size_t n);

/* The bytes of a fingerprint argument: a bytes object of 16 bytes, else TypeError. */
int fingerprint_arg(PyObject *obj, const uint8_t **fp);

/* Append item (a new reference, taken over; NULL: its exception is set) to list. */
int append_new(PyObject *list, PyObject *item);

/* Export `buffer` for a filter whose data is `need` bytes at `offset` (writable if it can be,
 * else read-only: *readonly says which), with room for a live count at count_offset (-1: none,
 * and it needs a writable buffer). ValueError, nothing held, if it does not fit. */
int bind_buffer(PyObject *buffer, Py_ssize_t offset, unsigned long long need,
                Py_ssize_t count_offset, Py_buffer *view, int *readonly);

/* The batch as a list or tuple (any other iterable is read into a tuple first); a single str or
 * bytes is refused. */
PyObject *batch_sequence(PyObject *keys);

/* Check that every key of a batch (from batch_sequence) can be read, before anything changes: a
 * bad key at position 900000 must not leave the first 899999 applied, since the caller would
 * never learn which were new. Reads only each object's type and flags where it can (an ASCII str
 * or bytes cannot fail); a non-ASCII str gets its UTF-8 form made (and cached by CPython) here.
 * RuntimeError if the encoding ran a finalizer that changed the list's size. */
int batch_check_keys(PyObject *seq);

/* RuntimeError: a list of keys lost items while a batch read it. */
void raise_batch_changed(void);

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

/* The digest of key i of a batch (seq from batch_sequence). Reading a key can run Python code
 * (a str's UTF-8 encoding allocates, which may run a finalizer) that changes a list: the key is
 * held while it is read, and a list that no longer has an item i is refused (RuntimeError)
 * rather than read past its end. */
static inline int batch_key_hash(PyObject *seq, Py_ssize_t i, int hash_id, uint64_t seed,
                                 us_hash128 *out)
{
    if (i >= PySequence_Fast_GET_SIZE(seq)) {
        raise_batch_changed();
        return -1;
    }
    PyObject *key = PySequence_Fast_GET_ITEM(seq, i);
    if (PyUnicode_Check(key) && PyUnicode_IS_COMPACT_ASCII(key)) {
        /* Reading it runs no Python code, so no reference is taken: with keys far beyond the
         * cache (20M of them), refcount writes would dirty every key's cache line, to be
         * written back to memory once more. */
        *out = us_digest(hash_id, PyUnicode_DATA(key), (size_t)PyUnicode_GET_LENGTH(key), seed);
        return 0;
    }
    Py_INCREF(key);
    int rc = key_hash(key, hash_id, seed, out, i);
    Py_DECREF(key);
    return rc;
}

/* The digests of keys [start, start + m) of a batch into out[0 .. m): the hot loop of every
 * batch that hashes before it probes. 0, or -1 with the first failing key's exception. */
int batch_hash(PyObject *seq, Py_ssize_t start, Py_ssize_t m, int hash_id, uint64_t seed,
               us_hash128 *out);

/* ---- filter types over a caller-owned buffer ---------------------------------------------- */

/* The head of every filter type whose data lives in a buffer the caller owns (BitFilter,
 * CountingFilter, MDBFilter): put it first in the type's struct, as `us_bound base;`, the way
 * CPython's own types start with PyObject. It holds the buffer export and the live count of
 * keys; the count is mirrored into the buffer when count_ptr is set (a state file's mmap: then a
 * killed process leaves an exact count in the page cache, not one from its last flush). */
typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int bound;                /* view holds a buffer */
    int readonly;             /* the buffer is read-only: writes raise */
    unsigned long long count; /* keys reported new (len) */
    uint8_t *count_ptr;       /* if set, count is mirrored here (u64 LE, in the buffer) */
} us_bound;

/* ClosedError once released; ReadOnlyError for a write to a read-only buffer. */
static inline int us_bound_usable(const us_bound *b, int write)
{
    if (!b->bound) {
        PyErr_SetString(us_ClosedError, "the filter is closed");
        return -1;
    }
    if (write && b->readonly) {
        PyErr_SetString(us_ReadOnlyError, "the filter was opened read-only");
        return -1;
    }
    return 0;
}

static inline void us_bound_set_count(us_bound *b, unsigned long long count)
{
    b->count = count;
    if (b->count_ptr) us_store64_le(b->count_ptr, count);
}

/* Count `fresh` more keys new (nothing is written for 0). */
static inline void us_bound_add_count(us_bound *b, unsigned long long fresh)
{
    if (fresh) us_bound_set_count(b, b->count + fresh);
}

/* Hold `view` (from bind_buffer; any earlier buffer is released) with count 0, mirrored at
 * count_offset of the buffer if that is >= 0. */
void us_bound_attach(us_bound *b, const Py_buffer *view, int readonly, Py_ssize_t count_offset);
/* bind_buffer, then us_bound_attach; the filter's data then starts at view.buf + offset. */
int us_bound_bind(us_bound *b, PyObject *buffer, Py_ssize_t offset, unsigned long long need,
                  Py_ssize_t count_offset);
/* Let go of the buffer (the filter is closed afterwards). */
void us_bound_unbind(us_bound *b);

/* Type slots for a GC type whose only reference is the buffer's exporter. The types are static:
 * a heap subclass's own traverse visits the type, so traverse must not. */
void us_bound_dealloc(PyObject *self);
int us_bound_traverse(PyObject *self, visitproc visit, void *arg);
int us_bound_clear(PyObject *self);
/* len(): the count, or OverflowError beyond Py_ssize_t. */
Py_ssize_t us_bound_len(PyObject *self);
/* _release(): unbind. */
PyObject *us_bound_release(PyObject *self, PyObject *unused);

PyObject *us_bound_get_closed(PyObject *self, void *closure);
PyObject *us_bound_get_readonly(PyObject *self, void *closure);
PyObject *us_bound_get_count(PyObject *self, void *closure);
/* `filter.count = v` for every us_bound type: the count of keys reported new, from then on,
 * written through to the buffer when it is mirrored there. */
int us_bound_set_count_attr(PyObject *self, PyObject *value, void *closure);

/* The PyGetSetDef entries of us_bound's attributes, with the count's setter and doc. */
#define US_BOUND_GETSET(count_setter, count_doc)                                             \
    {"closed", us_bound_get_closed, NULL, "True once the buffer was released.", NULL},        \
    {"readonly", us_bound_get_readonly, NULL, "True if the buffer is read-only.", NULL},      \
    {"count", us_bound_get_count, (setter)(count_setter), count_doc, NULL}

/* A getter returning one expression of `self` (a `type *`). */
#define US_GETTER(name, type, expr)                                                          \
    static PyObject *name(type *self, void *closure) { return expr; }

/* A METH_O batch method: `run(self, keys, mode)`, run being the type's batch function. */
#define US_BATCH_METHOD(name, type, run, mode)                                               \
    static PyObject *name(type *self, PyObject *keys) { return run(self, keys, mode); }

/* What each binding file adds to the _core module (core_module.c calls them at init): */
/* bit_filter.c: BitFilter (the Bloom filter's probes). */
int us_bit_filter_add(PyObject *module);
/* The line engine's access to a BitFilter: its hash id, seed and bits (their address tells
 * whether the filter is the one the engine knows; -1, no exception, if obj is not a BitFilter), and a batch probe of n digests under its lock, without the GIL: write = 1 is
 * test-and-set (returns the number of new keys), 0 a test (flags[i] = present). -1 on error. */
int us_bit_filter_hash_of(PyObject *obj, int *hash_id, uint64_t *seed, const void **bits);
Py_ssize_t us_bit_filter_probe(PyObject *obj, const us_hash128 *digests, size_t n, uint8_t *flags,
                               int write);
/* line_engine.c: LineEngine (the dedup job's line engine). */
int us_line_engine_add(PyObject *module);
/* counting_filter.c: CountingFilter and ExactStepResult (exact_step.c). */
int us_counting_filter_add(PyObject *module);
/* The line engine's access to a CountingFilter: its hash id and seed (-1, no exception, if obj
 * is not one), and its _exact_step (exact_step.c) on the digests h[0 .. n) of a batch's keys
 * (the engine hashes them from its own buffers: no Python object per key); repeat[i] set: key
 * i repeats an earlier key of the batch (the cache is asked first, without a counter probe). */
int us_counting_filter_hash_of(PyObject *obj, int *hash_id, uint64_t *seed);
PyObject *us_counting_exact_step(PyObject *obj, const us_hash128 *h, const uint8_t *repeat,
                                 Py_ssize_t n, PyObject *cache, unsigned int now);
/* fingerprint_cache.c: FingerprintCache, FPCACHE_ENTRY_BYTES and fold_entries(). */
int us_fingerprint_cache_add(PyObject *module);
/* fingerprint_map.c: FingerprintMap (the library's staged fingerprints). */
int us_fingerprint_map_add(PyObject *module);
/* mdbf_filter.c: MDBFilter (the multi-dimensional Bloom filter) and its constants. */
int us_mdbf_filter_add(PyObject *module);
/* redis_masks.c: byte_masks() (the bytes a Bloom filter kept in Redis must find set). */
int us_redis_masks_add(PyObject *module);

#endif
