/* bindings/bit_filter.c: the BitFilter type, the C base of urlseen.BloomFilter.
 *
 * The hot path of the library: a Python subclass (urlseen.BloomFilter) inherits add /
 * __contains__ so that a per-call check-and-add is one C call. The probes live in csrc/bloom.h.
 *
 * Threads: single-key calls hold the GIL throughout. Batch calls hash with the GIL (they read
 * Python objects) and release it while they probe the bits, holding the filter's own lock; the
 * `busy` flag (read and written only under the GIL) tells a single-key call that it must take
 * that lock too. So a key reported new is reported new exactly once, whatever the threads do.
 */
#include "common.h"

#include <pythread.h>
#include <sys/mman.h>

#include "csrc/bloom.h"


/* ---- the BitFilter type ------------------------------------------------------------------ */

typedef struct {
    us_bound base; /* the buffer, its read-only flag and the count (common.h) */
    int busy;      /* a batch is probing without the GIL; read/written under the GIL only */
    us_bloom bloom;
    int hash_id; /* csrc/digest.h */
    uint32_t seed;
    PyThread_type_lock lock;
} BitFilter;

static void acquire(BitFilter *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static PyObject *BitFilter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    BitFilter *self = (BitFilter *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void BitFilter_dealloc(BitFilter *self)
{
    PyObject_GC_UnTrack(self);
    us_bound_unbind(&self->base);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int BitFilter_init(BitFilter *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"buffer", "offset", "nbits",        "k",    "layout",
                             "seed",   "count",  "count_offset", "hash", NULL};
    PyObject *buffer, *seed_obj = NULL;
    Py_ssize_t offset, count_offset = -1;
    unsigned long long nbits, k64, count = 0;
    int layout, hash_id = US_HASH_XXH3_128;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnO&O&i|OO&ni:BitFilter", kwlist, &buffer,
                                     &offset, to_u64, &nbits, to_u64, &k64, &layout, &seed_obj,
                                     to_u64, &count, &count_offset, &hash_id))
        return -1;
    if (parse_hash_id(hash_id) < 0 || parse_k(k64) < 0) return -1;
    unsigned int k = (unsigned int)k64;
    uint32_t seed = 0;
    if (seed_obj && parse_seed(seed_obj, &seed) < 0) return -1;
    if (layout != US_LAYOUT_STANDARD && layout != US_LAYOUT_BLOCKED) {
        PyErr_Format(PyExc_ValueError, "layout must be %d (standard) or %d (blocked), not %d",
                     US_LAYOUT_STANDARD, US_LAYOUT_BLOCKED, layout);
        return -1;
    }
    if (nbits == 0 || (layout == US_LAYOUT_BLOCKED && nbits % US_BLOCK_BITS)) {
        PyErr_Format(PyExc_ValueError, "nbits must be positive%s, not %llu",
                     layout == US_LAYOUT_BLOCKED ? " and a multiple of 512" : "", nbits);
        return -1;
    }
    Py_buffer view;
    int readonly;
    if (bind_buffer(buffer, offset, (nbits + 7) / 8, count_offset, &view, &readonly) < 0)
        return -1;

    acquire(self);
    if (self->busy) { /* re-init during a batch of another thread: refuse */
        PyThread_release_lock(self->lock);
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "cannot re-initialize a filter in use");
        return -1;
    }
    us_bound_attach(&self->base, &view, readonly, count_offset);
    self->bloom.bits = (uint8_t *)view.buf + offset;
    self->bloom.nbits = nbits;
    self->bloom.k = k;
    self->bloom.layout = layout;
    self->seed = seed;
    self->hash_id = hash_id;
    us_bound_add_count(&self->base, count);
    PyThread_release_lock(self->lock);
    return 0;
}

PyDoc_STRVAR(add_doc,
             "add(key) -> bool\n\n"
             "Check-and-add in one step: set key's bits and return True if key was new (at least\n"
             "one bit was 0), False if it was (probably) seen before.");

/* Any key, any hash, a batch running or not. Out of line, so that the common case below keeps
 * a small frame: no Py_buffer on its stack, no registers saved for paths it never takes. */
US_NOINLINE static PyObject *add_any(BitFilter *self, PyObject *key)
{
    us_hash128 h;
    if (key_hash(key, self->hash_id, self->seed, &h, -1) < 0) return NULL;
    int fresh;
    if (self->busy) { /* a batch holds the bits: wait for it */
        acquire(self);
        if (us_bound_usable(&self->base, 1) < 0) {
            PyThread_release_lock(self->lock);
            return NULL;
        }
        fresh = us_bloom_test_and_set(&self->bloom, h);
        us_bound_add_count(&self->base, (unsigned)fresh);
        PyThread_release_lock(self->lock);
    } else {
        if (us_bound_usable(&self->base, 1) < 0) return NULL;
        fresh = us_bloom_test_and_set(&self->bloom, h);
        us_bound_add_count(&self->base, (unsigned)fresh);
    }
    return PyBool_FromLong(fresh);
}

/* The per-call hot path, in one straight line for the common case: an exact str in compact
 * ASCII form (its characters are its UTF-8 bytes), an XXH3 hash, no batch running, a writable
 * filter. Everything else takes add_any. */
static PyObject *BitFilter_add(BitFilter *self, PyObject *key)
{
    if (!(PyUnicode_CheckExact(key) && PyUnicode_IS_COMPACT_ASCII(key)) || self->busy ||
        !self->base.bound || self->base.readonly)
        return add_any(self, key);
    const void *data = (const PyASCIIObject *)key + 1;
    size_t len = (size_t)((PyASCIIObject *)key)->length;
    us_hash128 h;
    if (self->hash_id == US_HASH_XXH3_64)
        h = us_digest_of_64(us_xxh3_64(data, len, self->seed));
    else if (self->hash_id == US_HASH_XXH3_128)
        h = us_xxh3_128(data, len, self->seed);
    else
        return add_any(self, key);
    int fresh = us_bloom_test_and_set(&self->bloom, h);
    us_bound_add_count(&self->base, (unsigned)fresh);
    return Py_NewRef(fresh ? Py_True : Py_False);
}

static int BitFilter_contains(BitFilter *self, PyObject *key)
{
    us_hash128 h;
    if (key_hash(key, self->hash_id, self->seed, &h, -1) < 0) return -1;
    int present;
    if (self->busy) {
        acquire(self);
        if (us_bound_usable(&self->base, 0) < 0) {
            PyThread_release_lock(self->lock);
            return -1;
        }
        present = us_bloom_test(&self->bloom, h);
        PyThread_release_lock(self->lock);
    } else {
        if (us_bound_usable(&self->base, 0) < 0) return -1;
        present = us_bloom_test(&self->bloom, h);
    }
    return present;
}

enum batch_mode { BATCH_ADD_LIST, BATCH_ADD_COUNT, BATCH_TEST_LIST };

/* Ask for transparent huge pages on a large block that nothing has written yet (a list's
 * calloc'd item array: 160 MB at 20M keys; the batch's digests). Its first writes then fault
 * 2 MiB at a time, not 4 KiB (~40,000 faults for 160 MB, a few microseconds each on a VM).
 * Only whole 2 MiB pages inside the block are advised; where there is no THP this does nothing. */
static void want_huge_pages(void *p, size_t nbytes)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)p + nbytes) & ~(huge - 1);
    if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#endif
}

/* A batch is hashed whole before any bit changes: the hash pass itself proves every key valid
 * (a bad key at position 900000 must not leave the first 899999 applied, since the caller would
 * never learn which were new), and the keys' objects are read once: a separate validation pass
 * over 20M str objects (far beyond the cache) is a visible share of a batch's CPU
 * (benchmarks/peers/REPORT.md). The digests are kept at 8 bytes a key for XXH3-64 (h2 is derived from h1, so only
 * h1 is stored: 160 MB at 20M keys) and 16 for the others, in a private map with huge pages when
 * large (fresh 4 KiB pages cost a fault each). Then the bits are probed a chunk at a time
 * without the GIL: CHUNK digests are 1 MiB, so a 20M-key batch gives the GIL back ~300 times. */
#define CHUNK 65536
/* Smaller blocks come from malloc, which hands a freed block back to the next batch without
 * fresh page faults (glibc raises its mmap threshold up to 32 MiB as blocks are freed). */
#define MAP_MIN ((size_t)32 << 20)

typedef struct {
    void *mem;
    size_t nbytes;
    int mapped; /* mem is our own mmap (else PyMem_RawMalloc) */
    int narrow; /* 8 bytes a key: h1 of an XXH3-64 digest */
} digest_store;

static int store_alloc(digest_store *st, size_t n, int hash_id)
{
    st->narrow = hash_id == US_HASH_XXH3_64;
    st->nbytes = (n ? n : 1) * (st->narrow ? sizeof(uint64_t) : sizeof(us_hash128));
    st->mapped = 0;
#ifdef MAP_ANONYMOUS
    if (st->nbytes >= MAP_MIN) {
        st->mem = mmap(NULL, st->nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (st->mem != MAP_FAILED) {
            want_huge_pages(st->mem, st->nbytes);
            st->mapped = 1;
            return 0;
        }
    }
#endif
    st->mem = PyMem_RawMalloc(st->nbytes);
    return st->mem ? 0 : -1;
}

static void store_free(digest_store *st)
{
    if (st->mem == NULL) return;
#ifdef MAP_ANONYMOUS
    if (st->mapped) {
        munmap(st->mem, st->nbytes);
        st->mem = NULL;
        return;
    }
#endif
    PyMem_RawFree(st->mem);
    st->mem = NULL;
}

/* Keys ahead whose objects the hash pass prefetches (header and first data line): the objects
 * of a fresh list sit in memory in order, but a key's hash waits on its object otherwise. */
#define KEY_AHEAD 16

/* Hash all n keys of the batch into the store. 0, or -1 with the first failing key's error. */
static int store_hash(digest_store *st, PyObject *seq, Py_ssize_t n, int hash_id, uint64_t seed)
{
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* The size is read again: hashing a non-ASCII str can run code that shrinks the list. */
        if (i + KEY_AHEAD < PySequence_Fast_GET_SIZE(seq)) {
            const char *next = (const char *)items[i + KEY_AHEAD];
            __builtin_prefetch(next);
            __builtin_prefetch(next + 64);
        }
        us_hash128 h;
        if (batch_key_hash(seq, i, hash_id, seed, &h) < 0) return -1;
        if (st->narrow)
            ((uint64_t *)st->mem)[i] = h.h1;
        else
            ((us_hash128 *)st->mem)[i] = h;
    }
    return 0;
}

/* The digests of keys [start, start + m), m <= CHUNK: in place, or expanded into scratch. */
static const us_hash128 *store_chunk(const digest_store *st, Py_ssize_t start, Py_ssize_t m,
                                     us_hash128 *scratch)
{
    if (!st->narrow) return (const us_hash128 *)st->mem + start;
    const uint64_t *h1 = (const uint64_t *)st->mem + start;
    for (Py_ssize_t j = 0; j < m; j++) scratch[j] = us_digest_of_64(h1[j]);
    return scratch;
}

static PyObject *run_batch(BitFilter *self, PyObject *keys, enum batch_mode mode)
{
    int write = mode != BATCH_TEST_LIST;
    if (us_bound_usable(&self->base, write) < 0) return NULL;
    PyObject *seq = batch_sequence(keys);
    if (seq == NULL) return NULL;
    PyObject *result = NULL;
    digest_store st = {NULL, 0, 0, 0};
    us_hash128 *scratch = NULL;
    uint8_t *flags = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t chunk = n < CHUNK ? (n ? n : 1) : CHUNK;
    if (store_alloc(&st, (size_t)n, self->hash_id) < 0 ||
        (st.narrow && (scratch = PyMem_RawMalloc((size_t)chunk * sizeof(us_hash128))) == NULL) ||
        (flags = PyMem_RawMalloc((size_t)chunk)) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if (store_hash(&st, seq, n, self->hash_id, self->seed) < 0) goto fail; /* nothing applied */
    if (mode != BATCH_ADD_COUNT) {
        if ((result = PyList_New(n)) == NULL) goto fail;
        want_huge_pages(((PyListObject *)result)->ob_item, (size_t)n * sizeof(PyObject *));
    }

    acquire(self);
    if (us_bound_usable(&self->base, write) < 0) { /* closed while we hashed or waited */
        PyThread_release_lock(self->lock);
        goto fail;
    }
    self->busy = 1;
    size_t hits = 0;
    for (Py_ssize_t done = 0; done < n; done += chunk) {
        Py_ssize_t m = n - done < chunk ? n - done : chunk;
        const us_hash128 *digests = store_chunk(&st, done, m, scratch);
        size_t fresh = 0;
        Py_BEGIN_ALLOW_THREADS
        if (write) {
            fresh = us_bloom_test_and_set_many(&self->bloom, digests, (size_t)m, flags);
        } else {
            us_bloom_test_many(&self->bloom, digests, (size_t)m, flags);
        }
        Py_END_ALLOW_THREADS
        hits += fresh;
        if (result != NULL)
            for (Py_ssize_t j = 0; j < m; j++)
                PyList_SET_ITEM(result, done + j, Py_NewRef(flags[j] ? Py_True : Py_False));
    }
    if (write) us_bound_add_count(&self->base, hits);
    self->busy = 0;
    PyThread_release_lock(self->lock);
    if (result == NULL) result = PyLong_FromSize_t(hits);
    PyMem_RawFree(flags);
    PyMem_RawFree(scratch);
    store_free(&st);
    Py_DECREF(seq);
    return result;

fail:
    Py_XDECREF(result);
    PyMem_RawFree(flags);
    PyMem_RawFree(scratch);
    store_free(&st);
    Py_DECREF(seq);
    return NULL;
}

PyDoc_STRVAR(add_many_doc,
             "add_many(keys) -> list[bool]\n\n"
             "Check-and-add every key of an iterable, in order, in C; element i is True if key i\n"
             "was new. A key repeated within the batch is new only the first time. Every key is\n"
             "checked before any bit changes, so a bad key raises and leaves the filter as it was.");

US_BATCH_METHOD(BitFilter_add_many, BitFilter, run_batch, BATCH_ADD_LIST)

PyDoc_STRVAR(update_doc,
             "update(keys) -> int\n\n"
             "Like add_many, but return only the number of new keys (no list is built).");

US_BATCH_METHOD(BitFilter_update, BitFilter, run_batch, BATCH_ADD_COUNT)

PyDoc_STRVAR(contains_many_doc,
             "contains_many(keys) -> list[bool]\n\n"
             "Test every key of an iterable without writing; element i is True if key i is\n"
             "(probably) present.");

US_BATCH_METHOD(BitFilter_contains_many, BitFilter, run_batch, BATCH_TEST_LIST)

PyDoc_STRVAR(positions_doc,
             "positions(key) -> list[int]\n\n"
             "The key's k bit positions in this filter, in probe order (for tests and for stores\n"
             "that keep the bits elsewhere, such as Redis).");

static PyObject *BitFilter_positions(BitFilter *self, PyObject *key)
{
    if (us_bound_usable(&self->base, 0) < 0) return NULL;
    us_hash128 h;
    if (key_hash(key, self->hash_id, self->seed, &h, -1) < 0) return NULL;
    uint64_t pos[US_MAX_K];
    us_bloom_positions(&self->bloom, h, pos);
    return u64_list(pos, self->bloom.k);
}

PyDoc_STRVAR(popcount_doc,
             "popcount() -> int\n\n"
             "The number of bits set. Reads the whole array: O(nbits).");

static PyObject *BitFilter_popcount(BitFilter *self, PyObject *unused)
{
    if (us_bound_usable(&self->base, 0) < 0) return NULL;
    acquire(self);
    uint64_t ones;
    Py_BEGIN_ALLOW_THREADS
    ones = us_popcount(self->bloom.bits, self->bloom.nbits);
    Py_END_ALLOW_THREADS
    PyThread_release_lock(self->lock);
    return PyLong_FromUnsignedLongLong(ones);
}

PyDoc_STRVAR(merge_bits_doc,
             "_merge_bits(other) -> None\n\n"
             "OR other's bits into this filter's. The caller checks that the parameters match.");

static PyTypeObject BitFilterType;

static PyObject *BitFilter_merge_bits(BitFilter *self, PyObject *other_obj)
{
    if (!PyObject_TypeCheck(other_obj, &BitFilterType)) {
        PyErr_Format(PyExc_TypeError, "expected a BitFilter, not '%.200s'",
                     Py_TYPE(other_obj)->tp_name);
        return NULL;
    }
    BitFilter *other = (BitFilter *)other_obj;
    if (us_bound_usable(&self->base, 1) < 0 || us_bound_usable(&other->base, 0) < 0) return NULL;
    if (other->bloom.nbits != self->bloom.nbits) {
        PyErr_SetString(PyExc_ValueError, "filters differ in size");
        return NULL;
    }
    if (other == self) Py_RETURN_NONE;
    acquire(self);
    acquire(other);
    us_or_bytes(self->bloom.bits, other->bloom.bits, (size_t)((self->bloom.nbits + 7) / 8));
    PyThread_release_lock(other->lock);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(release_doc,
             "_release() -> None\n\n"
             "Let go of the buffer (waiting for a running batch) so that its owner, e.g. an mmap,\n"
             "can be closed. Afterwards every operation raises us_ClosedError.");

static PyObject *BitFilter_release(BitFilter *self, PyObject *unused)
{
    acquire(self);
    us_bound_unbind(&self->base);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

US_GETTER(get_nbits, BitFilter, PyLong_FromUnsignedLongLong(self->bloom.nbits))
US_GETTER(get_k, BitFilter, PyLong_FromUnsignedLong(self->bloom.k))
US_GETTER(get_layout, BitFilter, PyLong_FromLong(self->bloom.layout))
US_GETTER(get_seed, BitFilter, PyLong_FromUnsignedLong(self->seed))
US_GETTER(get_hash, BitFilter, PyLong_FromLong(self->hash_id))

static PyGetSetDef BitFilter_getset[] = {
    {"nbits", (getter)get_nbits, NULL, "Number of bits in the filter.", NULL},
    {"k", (getter)get_k, NULL, "Bits probed per key.", NULL},
    {"layout", (getter)get_layout, NULL, "0 = standard, 1 = blocked (512-bit blocks).", NULL},
    {"seed", (getter)get_seed, NULL, "Hash seed.", NULL},
    {"hash", (getter)get_hash, NULL, "Hash id (csrc/digest.h).", NULL},
    US_BOUND_GETSET(us_bound_set_count_attr, "Keys reported new (len(filter))."),
    {NULL},
};

static PyMethodDef BitFilter_methods[] = {
    {"add", (PyCFunction)BitFilter_add, METH_O, add_doc},
    {"add_many", (PyCFunction)BitFilter_add_many, METH_O, add_many_doc},
    {"update", (PyCFunction)BitFilter_update, METH_O, update_doc},
    {"contains_many", (PyCFunction)BitFilter_contains_many, METH_O, contains_many_doc},
    {"positions", (PyCFunction)BitFilter_positions, METH_O, positions_doc},
    {"popcount", (PyCFunction)BitFilter_popcount, METH_NOARGS, popcount_doc},
    {"_merge_bits", (PyCFunction)BitFilter_merge_bits, METH_O, merge_bits_doc},
    {"_release", (PyCFunction)BitFilter_release, METH_NOARGS, release_doc},
    {NULL},
};

static PySequenceMethods BitFilter_as_sequence = {
    .sq_length = us_bound_len,
    .sq_contains = (objobjproc)BitFilter_contains,
};

PyDoc_STRVAR(BitFilter_doc,
             "BitFilter(buffer, offset, nbits, k, layout, seed=0, count=0, count_offset=-1, hash=0)\n\n"
             "Bloom-filter probes over nbits bits that start at byte offset of a buffer the\n"
             "caller owns (bytearray, mmap, ...). A read-only buffer gives a read-only filter.\n"
             "With count_offset >= 0 the count of new keys is mirrored into the buffer there\n"
             "(8 bytes, little-endian), so a state file's count survives a killed process.\n"
             "urlseen.BloomFilter is the public face of this type.");

static PyTypeObject BitFilterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "urlseen._core.BitFilter",
    .tp_basicsize = sizeof(BitFilter),
    .tp_dealloc = (destructor)BitFilter_dealloc,
    .tp_as_sequence = &BitFilter_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = BitFilter_doc,
    .tp_traverse = us_bound_traverse,
    .tp_clear = us_bound_clear, /* only when unreachable: no batch can be running */
    .tp_methods = BitFilter_methods,
    .tp_getset = BitFilter_getset,
    .tp_init = (initproc)BitFilter_init,
    .tp_new = BitFilter_new,
};

/* ---- for the line engine (line_engine_input.c, line_engine_filters.c) --------------------- */

int us_bit_filter_hash_of(PyObject *obj, int *hash_id, uint64_t *seed, const void **bits)
{
    if (!PyObject_TypeCheck(obj, &BitFilterType)) return -1;
    BitFilter *self = (BitFilter *)obj;
    *hash_id = self->hash_id;
    *seed = self->seed;
    *bits = self->base.bound ? self->bloom.bits : NULL;
    return 0;
}

Py_ssize_t us_bit_filter_probe(PyObject *obj, const us_hash128 *digests, size_t n, uint8_t *flags,
                               int write)
{
    BitFilter *self = (BitFilter *)obj;
    if (us_bound_usable(&self->base, write) < 0) return -1;
    acquire(self);
    if (us_bound_usable(&self->base, write) < 0) { /* closed while we waited */
        PyThread_release_lock(self->lock);
        return -1;
    }
    self->busy = 1;
    size_t fresh = 0;
    Py_BEGIN_ALLOW_THREADS
    if (write) {
        fresh = us_bloom_test_and_set_many(&self->bloom, digests, n, flags);
    } else {
        us_bloom_test_many(&self->bloom, digests, n, flags);
    }
    Py_END_ALLOW_THREADS
    if (write) us_bound_add_count(&self->base, fresh);
    self->busy = 0;
    PyThread_release_lock(self->lock);
    return (Py_ssize_t)fresh;
}

int us_bit_filter_add(PyObject *module)
{
    if (PyType_Ready(&BitFilterType) < 0) return -1;
    return PyModule_AddObjectRef(module, "BitFilter", (PyObject *)&BitFilterType);
}
