/* bindings/core_module.c: the extension module urlseen._core: its init, its constants, and the
 * module-level functions (the digests of a key or of a batch, a key's bit positions without a
 * filter, the prefetch distance, a buffer's alignment). Each of the other binding files adds its own types
 * and functions to the module (common.h lists them).
 *
 * The binding is CPython glue and nothing else: argument parsing, exceptions, docstrings and
 * buffer access live in bindings/; the algorithms live in csrc/ (pure C).
 */
#include "common.h"

#include "csrc/bloom.h"
#include "csrc/digest.h"

/* ---- the digests ----------------------------------------------------------------------------- */

/* The module-level digest functions: key and seed in, h1 then h2 (little-endian) out. */
static PyObject *digest_function(PyObject *args, PyObject *kwargs, const char *format,
                                 int hash_id, int seed_bits)
{
    static char *kwlist[] = {"key", "seed", NULL};
    PyObject *key, *seed_obj = NULL;
    uint64_t seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, kwlist, &key, &seed_obj)) return NULL;
    if (seed_obj && parse_seed_bits(seed_obj, seed_bits, &seed) < 0) return NULL;
    us_hash128 h;
    if (key_hash(key, hash_id, seed, &h, -1) < 0) return NULL;
    return digest_bytes(h.h1, h.h2);
}

PyDoc_STRVAR(murmur3_doc,
             "murmur3_x64_128(key, seed=0) -> bytes\n\n"
             "The 16-byte MurmurHash3 x64-128 digest of key (str as UTF-8, or bytes), exactly as\n"
             "the reference implementation writes it.");

static PyObject *mod_murmur3(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    return digest_function(args, kwargs, "O|O:murmur3_x64_128", US_HASH_MURMUR3_X64_128, 32);
}

PyDoc_STRVAR(xxh3_doc,
             "xxh3_128(key, seed=0) -> bytes\n\n"
             "The 16-byte XXH3-128 digest of key (str as UTF-8, or bytes) with a 64-bit seed:\n"
             "the result's low 64 bits little-endian, then its high 64 bits little-endian, i.e.\n"
             "xxhash.xxh3_128_intdigest(key, seed).to_bytes(16, 'little').");

static PyObject *mod_xxh3(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    return digest_function(args, kwargs, "O|O:xxh3_128", US_HASH_XXH3_128, 64);
}

PyDoc_STRVAR(xxh3_64_doc,
             "xxh3_64(key, seed=0) -> int\n\n"
             "The XXH3-64 hash of key (str as UTF-8, or bytes) with a 64-bit seed, as\n"
             "xxhash.xxh3_64_intdigest(key, seed) gives it. A filter with hash 'xxh3_64' probes\n"
             "with h1 = this value and h2 = MurmurHash3's fmix64 of it.");

static PyObject *mod_xxh3_64(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "seed", NULL};
    PyObject *key, *seed_obj = NULL;
    uint64_t seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:xxh3_64", kwlist, &key, &seed_obj))
        return NULL;
    if (seed_obj && parse_seed_bits(seed_obj, 64, &seed) < 0) return NULL;
    key_bytes kb;
    if (key_get(key, &kb, -1) < 0) return NULL;
    uint64_t h = us_xxh3_64(kb.data, (size_t)kb.len, seed);
    key_release(&kb);
    return PyLong_FromUnsignedLongLong(h);
}

PyDoc_STRVAR(md5_doc,
             "md5(key, seed=0) -> bytes\n\n"
             "The 16-byte MD5 digest of key (str as UTF-8, or bytes), as hashlib.md5 gives it; with\n"
             "a seed (< 2**32), the MD5 of the seed's 4 little-endian bytes followed by the key.");

static PyObject *mod_md5(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    return digest_function(args, kwargs, "O|O:md5", US_HASH_MD5, 32);
}

PyDoc_STRVAR(digests_doc,
             "digests(keys, hash=HASH_MD5, seed=0) -> list[bytes]\n\n"
             "The 16-byte digest (fingerprint) of every key, in C: h1 then h2, little-endian.");

static PyObject *mod_digests(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"keys", "hash", "seed", NULL};
    PyObject *keys, *seed_obj = NULL;
    int hash_id = US_HASH_MD5;
    uint32_t seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|iO:digests", kwlist, &keys, &hash_id,
                                     &seed_obj))
        return NULL;
    if (parse_hash_seed(hash_id, seed_obj, &seed) < 0) return NULL;
    PyObject *seq = batch_sequence(keys);
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        us_hash128 h;
        PyObject *d = batch_key_hash(seq, i, hash_id, seed, &h) == 0 ? digest_bytes(h.h1, h.h2)
                                                                      : NULL;
        if (d == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, d);
    }
    Py_DECREF(seq);
    return out;
}

/* ---- positions, prefetch, alignment and the module ------------------------------------------------------ */

PyDoc_STRVAR(positions_fn_doc,
             "positions(key, nbits, k, layout, seed=0, hash=0) -> list[int]\n\n"
             "The k bit positions of key in a filter of nbits bits, without a filter.");

static PyObject *mod_positions(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "nbits", "k", "layout", "seed", "hash", NULL};
    PyObject *key;
    us_bloom b;
    uint32_t seed;
    int hash_id;
    if (parse_probe_args(args, kwargs, "OO&O&i|Oi:positions", kwlist, 0, &key, &b, &seed,
                         &hash_id) < 0)
        return NULL;
    us_hash128 h;
    if (key_hash(key, hash_id, seed, &h, -1) < 0) return NULL;
    uint64_t pos[US_MAX_K];
    us_bloom_positions(&b, h, pos);
    return u64_list(pos, b.k);
}

PyDoc_STRVAR(set_prefetch_doc,
             "set_prefetch_distance(keys) -> int\n\n"
             "Set how many keys ahead batch calls prefetch (0 turns prefetching off) and return\n"
             "the previous value. Process-wide; for benchmarks (benchmarks/peers/layouts.py).");

static PyObject *mod_set_prefetch(PyObject *mod, PyObject *arg)
{
    unsigned long v = PyLong_AsUnsignedLong(arg);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (v > 1024) {
        PyErr_SetString(PyExc_ValueError, "prefetch distance must be in [0, 1024]");
        return NULL;
    }
    unsigned old = us_prefetch_ahead;
    us_prefetch_ahead = (unsigned)v;
    return PyLong_FromUnsignedLong(old);
}

PyDoc_STRVAR(align_offset_doc,
             "align_offset(buffer, alignment) -> int\n\n"
             "Bytes from the start of buffer to its first address that is a multiple of\n"
             "alignment (a power of two): where a memory store puts its data so that it starts on\n"
             "a huge page.");

static PyObject *mod_align_offset(PyObject *mod, PyObject *args)
{
    PyObject *buffer;
    unsigned long long alignment;
    if (!PyArg_ParseTuple(args, "OK:align_offset", &buffer, &alignment)) return NULL;
    if (alignment == 0 || (alignment & (alignment - 1))) {
        PyErr_SetString(PyExc_ValueError, "alignment must be a power of two");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE) < 0) return NULL;
    unsigned long long offset = (unsigned long long)(-(uintptr_t)view.buf) & (alignment - 1);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(offset);
}

static PyMethodDef module_methods[] = {
    {"align_offset", (PyCFunction)mod_align_offset, METH_VARARGS, align_offset_doc},
    {"set_prefetch_distance", (PyCFunction)mod_set_prefetch, METH_O, set_prefetch_doc},
    {"murmur3_x64_128", (PyCFunction)(void (*)(void))mod_murmur3, METH_VARARGS | METH_KEYWORDS,
     murmur3_doc},
    {"xxh3_128", (PyCFunction)(void (*)(void))mod_xxh3, METH_VARARGS | METH_KEYWORDS, xxh3_doc},
    {"xxh3_64", (PyCFunction)(void (*)(void))mod_xxh3_64, METH_VARARGS | METH_KEYWORDS,
     xxh3_64_doc},
    {"md5", (PyCFunction)(void (*)(void))mod_md5, METH_VARARGS | METH_KEYWORDS, md5_doc},
    {"digests", (PyCFunction)(void (*)(void))mod_digests, METH_VARARGS | METH_KEYWORDS,
     digests_doc},
    {"positions", (PyCFunction)(void (*)(void))mod_positions, METH_VARARGS | METH_KEYWORDS,
     positions_fn_doc},
    {NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "urlseen._core",
    "The C core of urlseen: the fixed 128-bit hash and Bloom-filter probes on caller-owned "
    "buffers.",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    if (us_load_errors() < 0) return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "LAYOUT_STANDARD", US_LAYOUT_STANDARD) < 0 ||
        PyModule_AddIntConstant(m, "LAYOUT_BLOCKED", US_LAYOUT_BLOCKED) < 0 ||
        PyModule_AddIntConstant(m, "BLOCK_BITS", US_BLOCK_BITS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_K", US_MAX_K) < 0 ||
        PyModule_AddIntConstant(m, "HASH_XXH3_128", US_HASH_XXH3_128) < 0 ||
        PyModule_AddIntConstant(m, "HASH_MURMUR3_X64_128", US_HASH_MURMUR3_X64_128) < 0 ||
        PyModule_AddIntConstant(m, "HASH_MD5", US_HASH_MD5) < 0 ||
        PyModule_AddIntConstant(m, "HASH_XXH3_64", US_HASH_XXH3_64) < 0 || us_bit_filter_add(m) < 0 ||
        us_counting_filter_add(m) < 0 || us_fingerprint_cache_add(m) < 0 ||
        us_mdbf_filter_add(m) < 0 || us_redis_masks_add(m) < 0 ||
        us_line_engine_add(m) < 0 || us_fingerprint_map_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
