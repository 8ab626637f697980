/* bindings/redis_masks.c: the bytes that a Bloom filter whose bits live in a Redis string asks
 * Redis to test and set.
 *
 * byte_masks() turns a batch of keys into the bytes each key must find set: per key, a count
 * and (byte offset, bit mask) pairs. A Lua script on the server tests and sets them for a whole
 * batch in one round trip; hashing and position arithmetic stay here, in C, with the same
 * positions as a local filter, so a Redis bitmap and a local filter of the same parameters hold
 * identical bytes (bit j is bit j % 8 of byte j / 8).
 */
#include "common.h"

#include "csrc/bloom.h"

PyDoc_STRVAR(byte_masks_doc,
             "byte_masks(keys, nbits, k, layout, seed=0, hash=0) -> bytes\n\n"
             "For each key, in order, one byte c (the number of distinct bytes its k bits fall\n"
             "in), then: standard layout, c records of a 4-byte little-endian byte offset and a\n"
             "1-byte mask; blocked layout, the 4-byte offset of the key's 64-byte block, then c\n"
             "records of a 1-byte offset in the block and a 1-byte mask. For a filter of at most\n"
             "2**32 bits. Every key is hashed before anything is returned.");

static PyObject *mod_byte_masks(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"keys", "nbits", "k", "layout", "seed", "hash", NULL};
    PyObject *keys;
    us_bloom b;
    uint32_t seed;
    int hash_id;
    if (parse_probe_args(args, kwargs, "OO&O&i|Oi:byte_masks", kwlist, 1ULL << 32, &keys, &b,
                         &seed, &hash_id) < 0)
        return NULL;
    uint32_t k = b.k;
    int layout = b.layout;
    PyObject *seq = batch_sequence(keys);
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    size_t cap = (size_t)n * (5 + 5 * (size_t)k); /* either format, with room to spare */
    uint8_t *out = PyMem_RawMalloc(cap ? cap : 1);
    if (out == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    size_t used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        us_hash128 h;
        if (batch_key_hash(seq, i, hash_id, seed, &h) < 0) {
            PyMem_RawFree(out);
            Py_DECREF(seq);
            return NULL;
        }
        uint64_t pos[US_MAX_K];
        us_bloom_positions(&b, h, pos);
        uint32_t offsets[US_MAX_K];
        uint8_t masks[US_MAX_K];
        unsigned c = 0;
        for (uint32_t j = 0; j < k; j++) {
            uint32_t off = (uint32_t)(pos[j] >> 3);
            uint8_t bit = (uint8_t)(1u << (pos[j] & 7));
            unsigned t = 0;
            while (t < c && offsets[t] != off) t++;
            if (t == c) {
                offsets[c] = off;
                masks[c++] = 0;
            }
            masks[t] |= bit;
        }
        out[used++] = (uint8_t)c;
        if (layout == US_LAYOUT_BLOCKED) { /* every byte of the key is in one 64-byte block */
            uint32_t base = offsets[0] & ~(uint32_t)(US_BLOCK_BYTES - 1);
            out[used++] = (uint8_t)base;
            out[used++] = (uint8_t)(base >> 8);
            out[used++] = (uint8_t)(base >> 16);
            out[used++] = (uint8_t)(base >> 24);
            for (unsigned t = 0; t < c; t++) {
                out[used++] = (uint8_t)(offsets[t] - base);
                out[used++] = masks[t];
            }
            continue;
        }
        for (unsigned t = 0; t < c; t++) {
            out[used++] = (uint8_t)offsets[t];
            out[used++] = (uint8_t)(offsets[t] >> 8);
            out[used++] = (uint8_t)(offsets[t] >> 16);
            out[used++] = (uint8_t)(offsets[t] >> 24);
            out[used++] = masks[t];
        }
    }
    Py_DECREF(seq);
    PyObject *result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)used);
    PyMem_RawFree(out);
    return result;
}

/* ---- reading the answers natively: the bytes a client read test the masks ------------------ */

static uint32_t read_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The length of the key record at p (of at most `left` bytes), 0 if it is cut short. */
static size_t record_size(const uint8_t *p, size_t left, int layout)
{
    if (left < 1) return 0;
    size_t size = layout == US_LAYOUT_BLOCKED ? 5 + 2 * (size_t)p[0] : 1 + 5 * (size_t)p[0];
    return size <= left ? size : 0;
}

static PyObject *bad_masks(void)
{
    PyErr_SetString(PyExc_ValueError, "masks: not byte_masks output of this layout");
    return NULL;
}

/* The byte offset in data of key n's 64-byte block (blocked record at p): the record's own, or
   with an index (ix->buf set) the block it names; -1 with ValueError if the index is short. */
static int key_block(const uint8_t *p, size_t n, const Py_buffer *ix, const char *who,
                     size_t *base)
{
    if (ix->buf == NULL) {
        *base = read_u32(p + 1);
        return 0;
    }
    if ((n + 1) * 4 > (size_t)ix->len) {
        PyErr_Format(PyExc_ValueError, "%s: index too short", who);
        return -1;
    }
    *base = (size_t)read_u32((const uint8_t *)ix->buf + 4 * n) * US_BLOCK_BYTES;
    return 0;
}

PyDoc_STRVAR(mask_blocks_doc,
             "mask_blocks(masks) -> list[int]\n\n"
             "The byte offset of each key's 64-byte block, in order, from blocked-layout\n"
             "byte_masks output.");

static PyObject *mod_mask_blocks(PyObject *mod, PyObject *args)
{
    Py_buffer m;
    if (!PyArg_ParseTuple(args, "y*:mask_blocks", &m)) return NULL;
    PyObject *out = PyList_New(0);
    const uint8_t *p = m.buf;
    size_t left = (size_t)m.len;
    while (out != NULL && left > 0) {
        size_t size = record_size(p, left, US_LAYOUT_BLOCKED);
        PyObject *base = size ? PyLong_FromUnsignedLong(read_u32(p + 1)) : bad_masks();
        if (base == NULL || PyList_Append(out, base) < 0) Py_CLEAR(out);
        Py_XDECREF(base);
        p += size;
        left -= size;
    }
    PyBuffer_Release(&m);
    return out;
}

PyDoc_STRVAR(masks_present_doc,
             "masks_present(masks, layout, data, index=None) -> bytes\n\n"
             "One byte per key of byte_masks output: 1 if every bit the key needs is set in\n"
             "data, else 0. index None: data is the filter's whole bit string. Else (blocked\n"
             "layout) data is 64-byte blocks one after another and index holds, per key, the\n"
             "4-byte little-endian number of its block in data. Bytes past data's end are 0.");

static PyObject *mod_masks_present(PyObject *mod, PyObject *args)
{
    Py_buffer m, d, ix = {0};
    int layout;
    PyObject *index = Py_None;
    if (!PyArg_ParseTuple(args, "y*iy*|O:masks_present", &m, &layout, &d, &index)) return NULL;
    PyObject *result = NULL;
    uint8_t *out = NULL;
    if (index != Py_None && (layout != US_LAYOUT_BLOCKED ||
                             PyObject_GetBuffer(index, &ix, PyBUF_SIMPLE) < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "masks_present: an index needs the blocked layout");
        goto done;
    }
    out = PyMem_RawMalloc(m.len ? (size_t)m.len : 1);
    if (out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *p = m.buf, *data = d.buf;
    size_t left = (size_t)m.len, n = 0, dlen = (size_t)d.len;
    while (left > 0) {
        size_t size = record_size(p, left, layout);
        if (size == 0) {
            bad_masks();
            goto done;
        }
        unsigned c = p[0];
        int present = 1;
        if (layout == US_LAYOUT_BLOCKED) {
            size_t base;
            if (key_block(p, n, &ix, "masks_present", &base) < 0) goto done;
            for (unsigned t = 0; t < c && present; t++) {
                size_t at = base + p[5 + 2 * t];
                uint8_t mask = p[6 + 2 * t];
                present = at < dlen && (data[at] & mask) == mask;
            }
        } else {
            for (unsigned t = 0; t < c && present; t++) {
                size_t at = read_u32(p + 1 + 5 * t);
                uint8_t mask = p[5 + 5 * t];
                present = at < dlen && (data[at] & mask) == mask;
            }
        }
        out[n++] = (uint8_t)present;
        p += size;
        left -= size;
    }
    result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)n);
done:
    PyMem_RawFree(out);
    if (ix.buf != NULL) PyBuffer_Release(&ix);
    PyBuffer_Release(&d);
    PyBuffer_Release(&m);
    return result;
}

PyDoc_STRVAR(masks_apply_doc,
             "masks_apply(masks, data, index=None) -> bytes\n\n"
             "Blocked layout: the keys of byte_masks output in order, each tested against data\n"
             "as masks_present does and, when a bit is missing, its bits set in data (a writable\n"
             "buffer, changed in place) so that a later key sees them, as a batch script does.\n"
             "One byte per key: 1 where it was missing a bit (new), else 0. index as for\n"
             "masks_present; every byte a key needs must lie inside data.");

static PyObject *mod_masks_apply(PyObject *mod, PyObject *args)
{
    Py_buffer m, d, ix = {0};
    PyObject *index = Py_None, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*w*|O:masks_apply", &m, &d, &index)) return NULL;
    if (index != Py_None && PyObject_GetBuffer(index, &ix, PyBUF_SIMPLE) < 0) goto done;
    result = PyBytes_FromStringAndSize(NULL, m.len);
    if (result == NULL) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result), *data = d.buf;
    const uint8_t *p = m.buf;
    size_t left = (size_t)m.len, n = 0, dlen = (size_t)d.len;
    while (left > 0) {
        size_t size = record_size(p, left, US_LAYOUT_BLOCKED);
        if (size == 0) {
            Py_CLEAR(result);
            bad_masks();
            goto done;
        }
        unsigned c = p[0];
        size_t base;
        if (key_block(p, n, &ix, "masks_apply", &base) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        if (base + US_BLOCK_BYTES > dlen) {
            Py_CLEAR(result);
            PyErr_SetString(PyExc_ValueError, "masks_apply: a block lies outside data");
            goto done;
        }
        int present = 1;
        for (unsigned t = 0; t < c && present; t++) {
            uint8_t mask = p[6 + 2 * t];
            present = (data[base + p[5 + 2 * t] % US_BLOCK_BYTES] & mask) == mask;
        }
        if (!present) {
            for (unsigned t = 0; t < c; t++)
                data[base + p[5 + 2 * t] % US_BLOCK_BYTES] |= p[6 + 2 * t];
        }
        out[n++] = (uint8_t)!present;
        p += size;
        left -= size;
    }
    if (_PyBytes_Resize(&result, (Py_ssize_t)n) < 0) result = NULL;
done:
    if (ix.buf != NULL) PyBuffer_Release(&ix);
    PyBuffer_Release(&d);
    PyBuffer_Release(&m);
    return result;
}

static PyMethodDef redis_masks_functions[] = {
    {"byte_masks", (PyCFunction)(void (*)(void))mod_byte_masks, METH_VARARGS | METH_KEYWORDS,
     byte_masks_doc},
    {"mask_blocks", mod_mask_blocks, METH_VARARGS, mask_blocks_doc},
    {"masks_present", mod_masks_present, METH_VARARGS, masks_present_doc},
    {"masks_apply", mod_masks_apply, METH_VARARGS, masks_apply_doc},
    {NULL},
};

int us_redis_masks_add(PyObject *module)
{
    return PyModule_AddFunctions(module, redis_masks_functions);
}
