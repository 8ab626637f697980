/* bindings/line_engine.c: the LineEngine type, the dedup job's hot path (urlseen.job.dedup).
 *
 * Bytes in (feed), batches of lines out (next_batch): the lines are split, keyed (csrc/lines.h)
 * and, for a Bloom filter, hashed and probed here, and the new lines come back as one bytes
 * object per batch (output), so a batch costs a handful of Python calls, not objects per line.
 * Python keeps what needs Python: the lines the C rules defer (not plain ASCII URLs: w3lib),
 * filters other than the C Bloom filter (keys() gives their keys, set_flags takes the answers),
 * writing, flushing and the summary.
 *
 * A batch lives from next_batch until the next call of next_batch or feed. Heavy loops run
 * without the GIL; `busy` (read and written under the GIL) refuses a second thread meanwhile.
 *
 * After start(), a C worker thread (line_worker.h) splits, keys and hashes the batches ahead:
 * feed and end_input (from any thread, e.g. the one that reads the input) queue bytes for it,
 * close_input ends the input, and next_batch takes the batches it built, in order, into the
 * same fields the serial engine fills; every other method works on them unchanged.
 */
#include "common.h"

#include "csrc/lines.h"
#include "line_worker.h"

typedef struct {
    PyObject_HEAD
    int canonicalize;
    size_t max_canonical;
    int busy;
    /* input: buf[pos, len) is not yet part of a batch; scan/nscan: lines of the next batch
     * split so far (lines[0 .. nscan) from pos, scanning resumes at scan) */
    uint8_t *buf;
    size_t cap, len, pos, scan, nscan;
    /* offsets of the "\n" that end_input added after an input's unterminated last line */
    size_t *synth;
    size_t nsynth, synth_cap;
    /* the current batch */
    us_line *lines;
    size_t nlines, lines_cap;
    uint8_t *arena;
    size_t arena_cap, arena_used;
    uint8_t *scratch; /* for the canonicalizer: as long as the longest line it may see */
    size_t scratch_cap;
    size_t *key_line; /* line index of key i */
    us_hash128 *digests;
    uint8_t *flags; /* per key: 1 = new */
    size_t nkeys, keys_cap;
    us_hash128 *set_slots;
    uint8_t *set_used;
    size_t set_cap;
    size_t batch_bytes, batch_empty, batch_deferred, batch_new;
    /* keys Python gave for deferred lines, by line digest (csrc/lines.h); ddig: the digests of
     * the batch's deferred lines, in order */
    us_key_memo memo;
    us_memo_slot *memo_slots;
    uint8_t *memo_arena;
    us_hash128 *ddig;
    size_t ddig_cap;
    /* digests known to be in the Bloom filter `known_bits` (every one of their bits is set, and
     * a Bloom filter never clears a bit): a repeat found here is a duplicate without a probe.
     * Direct-mapped, KNOWN_SLOTS entries; miss_*: the keys of a batch that must be probed. */
    us_hash128 *known;
    const void *known_bits;
    size_t *miss_key;
    us_hash128 *miss_digest;
    uint8_t *miss_flag;
    size_t miss_cap;
    int deferred_done, flagged, tested;
    /* the worker thread (start), and the digests it made of the batch's keys (per line, where
     * line->hashed; made with hash_id/seed of `ldig_hash`, valid when ldig_valid) */
    us_worker worker;
    int threaded;
    us_hash128 *ldig;
    size_t ldig_cap;
    int ldig_valid, ldig_hash_id;
    uint64_t ldig_seed;
} LineEngine;

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *q = PyMem_RawRealloc(*p, n * size);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = n;
    return 0;
}

static int enter(LineEngine *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the line engine is in use by another thread");
        return -1;
    }
    return 0;
}

static void drop_batch(LineEngine *self)
{
    self->nlines = self->nkeys = 0;
    self->arena_used = 0;
    self->batch_bytes = self->batch_empty = self->batch_deferred = self->batch_new = 0;
    self->deferred_done = self->flagged = self->tested = 0;
    self->ldig_valid = 0;
}

static int LineEngine_init(LineEngine *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"canonicalize", "max_canonical_bytes", NULL};
    int canonicalize;
    Py_ssize_t max_canonical;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "pn:LineEngine", kwlist, &canonicalize,
                                     &max_canonical))
        return -1;
    if (max_canonical < 0) {
        PyErr_SetString(PyExc_ValueError, "max_canonical_bytes must be >= 0");
        return -1;
    }
    if (enter(self) < 0) return -1;
    if (self->threaded) {
        PyErr_SetString(PyExc_RuntimeError, "the line engine has started its worker");
        return -1;
    }
    self->canonicalize = canonicalize;
    self->max_canonical = (size_t)max_canonical;
    self->len = self->pos = self->scan = self->nscan = self->nsynth = 0;
    drop_batch(self);
    return 0;
}

static void LineEngine_dealloc(LineEngine *self)
{
    if (self->threaded) {
        us_worker_stop(&self->worker);
        us_worker_free(&self->worker);
    }
    PyMem_RawFree(self->ldig);
    PyMem_RawFree(self->buf);
    PyMem_RawFree(self->synth);
    PyMem_RawFree(self->lines);
    PyMem_RawFree(self->arena);
    PyMem_RawFree(self->scratch);
    PyMem_RawFree(self->key_line);
    PyMem_RawFree(self->digests);
    PyMem_RawFree(self->flags);
    PyMem_RawFree(self->set_slots);
    PyMem_RawFree(self->set_used);
    PyMem_RawFree(self->memo_slots);
    PyMem_RawFree(self->memo_arena);
    PyMem_RawFree(self->ddig);
    PyMem_RawFree(self->known);
    PyMem_RawFree(self->miss_key);
    PyMem_RawFree(self->miss_digest);
    PyMem_RawFree(self->miss_flag);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Move buf[pos, len) to the front; the lines split so far and the added newlines move along. */
static void compact(LineEngine *self)
{
    size_t shift = self->pos;
    if (shift == 0) return;
    memmove(self->buf, self->buf + shift, self->len - shift);
    self->len -= shift;
    self->pos = 0;
    self->scan -= shift;
    for (size_t i = 0; i < self->nscan; i++) self->lines[i].off -= shift;
    for (size_t i = 0; i < self->nsynth; i++) self->synth[i] -= shift;
}

PyDoc_STRVAR(feed_doc,
             "feed(data) -> bool\n\n"
             "Append bytes of the current input (any bytes-like object). Ends the current batch.\n"
             "After start: queued for the worker (waiting while it is a few blocks behind), from\n"
             "any thread; False if the worker has stopped (the bytes are dropped).");

static PyObject *LineEngine_feed(LineEngine *self, PyObject *data)
{
    Py_buffer view;
    if (self->threaded) { /* any thread: the bytes are held until the worker has read them */
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
        int rc = us_worker_feed(&self->worker, &view);
        return rc < 0 ? NULL : PyBool_FromLong(rc);
    }
    if (enter(self) < 0) return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    drop_batch(self);
    /* Compact only when the kept bytes are few or the buffer would have to grow anyway. */
    if (self->pos && (self->len - self->pos <= self->pos || self->len + (size_t)view.len > self->cap))
        compact(self);
    if (grow((void **)&self->buf, &self->cap, self->len + (size_t)view.len + 1, 1) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    memcpy(self->buf + self->len, view.buf, (size_t)view.len);
    self->len += (size_t)view.len;
    PyBuffer_Release(&view);
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(end_input_doc,
             "end_input() -> None\n\n"
             "The current input has ended: a last line without a newline ends here.");

static PyObject *LineEngine_end_input(LineEngine *self, PyObject *unused)
{
    if (self->threaded) {
        int rc = us_worker_end_input(&self->worker);
        if (rc < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (enter(self) < 0) return NULL;
    if (self->len > self->pos && self->buf[self->len - 1] != '\n') {
        if (grow((void **)&self->buf, &self->cap, self->len + 1, 1) < 0 ||
            grow((void **)&self->synth, &self->synth_cap, self->nsynth + 1, sizeof(size_t)) < 0)
            return NULL;
        self->buf[self->len] = '\n';
        self->synth[self->nsynth++] = self->len;
        self->len++;
    }
    Py_RETURN_NONE;
}

/* Digests known to be in the filter: 32K slots, 512 KiB (stays in L2/L3 beside the probes). */
#define KNOWN_SLOTS (1u << 15)

/* Lines no longer than this have their deferred keys remembered (as canonical._MEMO_MAX_CHARS). */
#define MEMO_MAX_LINE 1024
#define MEMO_SLOTS (1u << 16)
#define MEMO_ARENA (8u << 20)

/* Key the batch's deferred lines that the memo knows; *deferred becomes the number left. */
static int recall(LineEngine *self, size_t *deferred)
{
    if (self->memo_slots == NULL) {
        self->memo_slots = PyMem_RawMalloc(MEMO_SLOTS * sizeof(us_memo_slot));
        self->memo_arena = PyMem_RawMalloc(MEMO_ARENA);
        if (self->memo_slots == NULL || self->memo_arena == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        us_key_memo_init(&self->memo, self->memo_slots, MEMO_SLOTS, self->memo_arena, MEMO_ARENA);
    }
    if (grow((void **)&self->ddig, &self->ddig_cap, *deferred, sizeof(us_hash128)) < 0) return -1;
    size_t left = 0;
    for (size_t i = 0; i < self->nlines; i++) {
        us_line *line = &self->lines[i];
        if (line->kind != US_LINE_DEFER) continue;
        const uint8_t *s = self->buf + line->off;
        size_t n = line->len - (line->len && s[line->len - 1] == '\r');
        if (n > MEMO_MAX_LINE) {
            left++;
            continue;
        }
        us_hash128 h = us_xxh3_128(s, n, 0);
        size_t klen;
        const uint8_t *key = us_key_memo_get(&self->memo, h, &klen);
        if (key == NULL) {
            line->memo = 1;
            self->ddig[left++] = h;
            continue;
        }
        if (grow((void **)&self->arena, &self->arena_cap, self->arena_used + klen, 1) < 0)
            return -1;
        memcpy(self->arena + self->arena_used, key, klen);
        line->kind = US_LINE_KEY;
        line->key_in_arena = 1;
        line->key_text = 1;
        line->key_off = self->arena_used;
        line->key_len = klen;
        self->arena_used += klen;
    }
    *deferred = left;
    return 0;
}

#define SWAP(type, a, b) \
    do {                   \
        type t_ = (a);     \
        (a) = (b);         \
        (b) = t_;          \
    } while (0)

/* next_batch after start: the worker's next batch, its arrays swapped with the current ones
 * (the worker refills the old ones). */
static PyObject *next_batch_threaded(LineEngine *self, size_t max_lines)
{
    if (max_lines != self->worker.batch_size) {
        PyErr_Format(PyExc_ValueError, "max_lines must be the batch size given to start (%zu)",
                     self->worker.batch_size);
        return NULL;
    }
    drop_batch(self);
    self->busy = 1;
    us_batch *b = us_worker_next(&self->worker);
    self->busy = 0;
    if (b == NULL) return PyErr_Occurred() ? NULL : PyLong_FromLong(0);
    SWAP(uint8_t *, self->buf, b->buf);
    SWAP(size_t, self->cap, b->cap);
    SWAP(us_line *, self->lines, b->lines);
    SWAP(size_t, self->lines_cap, b->lines_cap);
    SWAP(uint8_t *, self->arena, b->arena);
    SWAP(size_t, self->arena_cap, b->arena_cap);
    SWAP(us_hash128 *, self->ldig, b->ldig);
    SWAP(size_t, self->ldig_cap, b->ldig_cap);
    size_t n = b->nlines, deferred = b->deferred;
    self->nlines = n;
    self->arena_used = b->arena_used;
    self->batch_bytes = b->bytes;
    self->batch_empty = b->empty;
    us_worker_done(&self->worker, b);
    self->ldig_valid = self->worker.hashing;
    self->ldig_hash_id = self->worker.hash_id;
    self->ldig_seed = self->worker.seed;
    if (deferred && recall(self, &deferred) < 0) {
        self->nlines = 0;
        return NULL;
    }
    self->batch_deferred = deferred;
    self->deferred_done = deferred == 0;
    return PyLong_FromSize_t(n);
}

PyDoc_STRVAR(start_doc,
             "start(batch_size, hasher=None) -> None\n\n"
             "Start the worker thread: from now on it splits, keys and (with hasher, a BitFilter\n"
             "or CountingFilter whose hash it uses) hashes batches of batch_size lines ahead of\n"
             "next_batch, from the bytes feed and end_input queue; close_input ends the input,\n"
             "stop ends the thread. The engine must hold no input yet.");

static PyObject *LineEngine_start(LineEngine *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"batch_size", "hasher", NULL};
    Py_ssize_t batch_size;
    PyObject *hasher = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|O:start", kwlist, &batch_size, &hasher))
        return NULL;
    if (batch_size < 1) {
        PyErr_SetString(PyExc_ValueError, "batch_size must be >= 1");
        return NULL;
    }
    if (enter(self) < 0) return NULL;
    if (self->threaded || self->len > self->pos) {
        PyErr_SetString(PyExc_RuntimeError,
                        self->threaded ? "the worker has started already"
                                       : "start needs an engine that holds no input");
        return NULL;
    }
    int hashing = hasher != Py_None, hash_id = 0;
    uint64_t seed = 0;
    const void *bits;
    if (hashing && us_bit_filter_hash_of(hasher, &hash_id, &seed, &bits) < 0 &&
        us_counting_filter_hash_of(hasher, &hash_id, &seed) < 0) {
        PyErr_Format(PyExc_TypeError, "hasher must be a BitFilter or CountingFilter, not '%.200s'",
                     Py_TYPE(hasher)->tp_name);
        return NULL;
    }
    drop_batch(self);
    if (us_worker_start(&self->worker, (size_t)batch_size, self->canonicalize,
                        self->max_canonical, hashing, hash_id, seed) < 0) {
        us_worker_free(&self->worker);
        return NULL;
    }
    self->threaded = 1;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(close_input_doc,
             "close_input(failed=False) -> None\n\n"
             "After start: no more input. failed: the input broke off, and the lines of the\n"
             "unfinished batch are dropped (the serial engine's caller never asks for them).");

static PyObject *LineEngine_close_input(LineEngine *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"failed", NULL};
    int failed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:close_input", kwlist, &failed))
        return NULL;
    if (!self->threaded) {
        PyErr_SetString(PyExc_RuntimeError, "close_input needs start first");
        return NULL;
    }
    us_worker_close(&self->worker, failed);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stop_doc,
             "stop() -> None\n\n"
             "Stop the worker thread and wait for it (a feed waiting for room returns False).\n"
             "The current batch stays usable; next_batch raises RuntimeError.");

static PyObject *LineEngine_stop(LineEngine *self, PyObject *unused)
{
    if (self->threaded) us_worker_stop(&self->worker);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(next_batch_doc,
             "next_batch(max_lines, final=False) -> int\n\n"
             "Start the next batch: max_lines lines (fewer only with final, at the end of all\n"
             "input), split and keyed. Returns its number of lines; 0 when more input is needed\n"
             "(or, with final, none is left). After start: the worker's next batch (max_lines\n"
             "must be its batch size; final is implied by close_input), waiting for it; 0 at\n"
             "the end of the input.");

static PyObject *LineEngine_next_batch(LineEngine *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"max_lines", "final", NULL};
    Py_ssize_t max_lines;
    int final = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|p:next_batch", kwlist, &max_lines, &final))
        return NULL;
    if (max_lines < 1) {
        PyErr_SetString(PyExc_ValueError, "max_lines must be >= 1");
        return NULL;
    }
    if (enter(self) < 0) return NULL;
    if (self->threaded) return next_batch_threaded(self, (size_t)max_lines);
    drop_batch(self);
    if (grow((void **)&self->lines, &self->lines_cap, (size_t)max_lines, sizeof(us_line)) < 0)
        return NULL;
    size_t want = self->nscan < (size_t)max_lines ? (size_t)max_lines - self->nscan : 0;
    size_t got = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    if (want)
        got = us_split_lines(self->buf, self->len, &self->scan, want, final,
                             self->lines + self->nscan);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    self->nscan += got;
    if (self->nscan == 0 || (self->nscan < (size_t)max_lines && !final)) return PyLong_FromLong(0);

    size_t n = self->nscan < (size_t)max_lines ? self->nscan : (size_t)max_lines;
    size_t start = self->pos;
    size_t end = n < self->nscan ? self->lines[n].off : self->scan;
    size_t bytes = end - start;
    if (self->canonicalize) {
        size_t longest = 0;
        for (size_t i = 0; i < n; i++)
            if (self->lines[i].len > longest) longest = self->lines[i].len;
        if (longest > self->max_canonical) longest = self->max_canonical;
        /* a canonical key is at most 3 bytes per byte of its line (escapes), plus "/" */
        if (grow((void **)&self->arena, &self->arena_cap, 3 * bytes + 2 * n + 16, 1) < 0 ||
            grow((void **)&self->scratch, &self->scratch_cap, longest + 1, 1) < 0)
            return NULL;
    }

    size_t empty = 0, deferred = 0, used = 0, synth = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < n; i++) {
        us_line *line = &self->lines[i];
        us_line_key(self->buf, line, self->canonicalize, self->max_canonical, self->arena,
                    self->arena_cap, &used, self->scratch);
        empty += line->kind == US_LINE_EMPTY;
        deferred += line->kind == US_LINE_DEFER;
    }
    while (synth < self->nsynth && self->synth[synth] < end) synth++;
    Py_END_ALLOW_THREADS
    self->busy = 0;
    /* the added newlines of this batch were never read */
    memmove(self->synth, self->synth + synth, (self->nsynth - synth) * sizeof(size_t));
    self->nsynth -= synth;
    self->arena_used = used;
    self->nlines = n;
    if (deferred && recall(self, &deferred) < 0) {
        self->nlines = 0; /* nothing consumed: the next call splits again */
        return NULL;
    }
    self->batch_bytes = bytes - synth;
    self->batch_empty = empty;
    self->batch_deferred = deferred;
    self->deferred_done = deferred == 0;
    self->pos = end;
    /* Lines split beyond the batch (only when max_lines shrank) are split again next time. */
    if (n < self->nscan) self->scan = end;
    self->nscan = 0;
    return PyLong_FromSize_t(n);
}

static int need_batch(LineEngine *self, int keyed)
{
    if (enter(self) < 0) return -1;
    if (self->nlines == 0) {
        PyErr_SetString(PyExc_RuntimeError, "no current batch: call next_batch first");
        return -1;
    }
    if (keyed && !self->deferred_done) {
        PyErr_SetString(PyExc_RuntimeError, "the batch has deferred lines: call set_deferred");
        return -1;
    }
    return 0;
}

static PyObject *line_bytes(LineEngine *self, const us_line *line)
{
    return PyBytes_FromStringAndSize((const char *)self->buf + line->off, (Py_ssize_t)line->len);
}

PyDoc_STRVAR(deferred_doc,
             "deferred() -> list[bytes]\n\n"
             "The lines of the batch whose key Python decides (without their newline), in order.");

static PyObject *LineEngine_deferred(LineEngine *self, PyObject *unused)
{
    if (need_batch(self, 0) < 0) return NULL;
    PyObject *list = PyList_New((Py_ssize_t)self->batch_deferred);
    if (list == NULL) return NULL;
    Py_ssize_t j = 0;
    for (size_t i = 0; i < self->nlines && j < (Py_ssize_t)self->batch_deferred; i++) {
        if (self->lines[i].kind != US_LINE_DEFER) continue;
        PyObject *b = line_bytes(self, &self->lines[i]);
        if (b == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, j++, b);
    }
    return list;
}

PyDoc_STRVAR(set_deferred_doc,
             "set_deferred(keys) -> None\n\n"
             "The keys of the deferred lines, in order: str (hashed as UTF-8), bytes, or None\n"
             "for a line that is no URL after all.");

static PyObject *LineEngine_set_deferred(LineEngine *self, PyObject *keys)
{
    if (need_batch(self, 0) < 0) return NULL;
    if (self->deferred_done) {
        PyErr_SetString(PyExc_RuntimeError, "the batch has no deferred lines left");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (seq == NULL) return NULL;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != self->batch_deferred) {
        PyErr_Format(PyExc_ValueError, "expected %zu keys, got %zd", self->batch_deferred,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t j = 0;
    for (size_t i = 0; i < self->nlines; i++) {
        us_line *line = &self->lines[i];
        if (line->kind != US_LINE_DEFER) continue;
        PyObject *key = PySequence_Fast_GET_ITEM(seq, j++);
        if (key == Py_None) {
            line->kind = US_LINE_EMPTY; /* counted by whoever said so */
            continue;
        }
        key_bytes kb;
        if (key_get(key, &kb, j - 1) < 0) goto fail;
        if (grow((void **)&self->arena, &self->arena_cap, self->arena_used + (size_t)kb.len + 1,
                 1) < 0) {
            key_release(&kb);
            goto fail;
        }
        memcpy(self->arena + self->arena_used, kb.data, (size_t)kb.len);
        key_release(&kb);
        line->kind = US_LINE_KEY;
        line->key_in_arena = 1;
        line->key_text = PyUnicode_Check(key) != 0;
        line->key_off = self->arena_used;
        line->key_len = (size_t)kb.len;
        /* str keys only: a bytes key means the keyer counted the line (invalid, verbatim) */
        if (line->memo && line->key_text)
            us_key_memo_put(&self->memo, self->ddig[j - 1], self->arena + self->arena_used,
                            line->key_len);
        self->arena_used += (size_t)kb.len;
    }
    Py_DECREF(seq);
    self->deferred_done = 1;
    Py_RETURN_NONE;
fail:
    /* lines already given keys keep them; the batch stays unusable */
    Py_DECREF(seq);
    return NULL;
}

static const uint8_t *key_ptr(const LineEngine *self, const us_line *line)
{
    return (line->key_in_arena ? self->arena : self->buf) + line->key_off;
}

/* Index the batch's keys (lines with a key): key_line, and room for their digests and flags. */
static int index_keys(LineEngine *self)
{
    if (self->nlines > self->keys_cap) {
        size_t n = self->keys_cap ? self->keys_cap : 1024;
        while (n < self->nlines) n *= 2;
        size_t *kl = PyMem_RawRealloc(self->key_line, n * sizeof(size_t));
        if (kl == NULL) return PyErr_NoMemory(), -1;
        self->key_line = kl;
        us_hash128 *d = PyMem_RawRealloc(self->digests, n * sizeof(us_hash128));
        if (d == NULL) return PyErr_NoMemory(), -1;
        self->digests = d;
        uint8_t *f = PyMem_RawRealloc(self->flags, n);
        if (f == NULL) return PyErr_NoMemory(), -1;
        self->flags = f;
        self->keys_cap = n;
    }
    size_t k = 0;
    for (size_t i = 0; i < self->nlines; i++)
        if (self->lines[i].kind == US_LINE_KEY) self->key_line[k++] = i;
    self->nkeys = k;
    return 0;
}

PyDoc_STRVAR(keys_doc,
             "keys() -> list[str | bytes]\n\n"
             "The keys of the batch's URL lines, in order (empty lines have none): str for a\n"
             "canonicalized URL, bytes for a line keyed by its bytes, as LineKeyer.key gives them.");

static PyObject *LineEngine_keys(LineEngine *self, PyObject *unused)
{
    if (need_batch(self, 1) < 0 || index_keys(self) < 0) return NULL;
    PyObject *list = PyList_New((Py_ssize_t)self->nkeys);
    if (list == NULL) return NULL;
    for (size_t k = 0; k < self->nkeys; k++) {
        const us_line *line = &self->lines[self->key_line[k]];
        const char *data = (const char *)key_ptr(self, line);
        PyObject *b = line->key_text
                          ? PyUnicode_DecodeUTF8(data, (Py_ssize_t)line->key_len, "strict")
                          : PyBytes_FromStringAndSize(data, (Py_ssize_t)line->key_len);
        if (b == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, b);
    }
    return list;
}

PyDoc_STRVAR(set_flags_doc,
             "set_flags(flags) -> int\n\n"
             "Which keys of the batch are new (a sequence of truth values, one per key, as a\n"
             "filter's add_many answers). Returns the number of new keys.");

static PyObject *LineEngine_set_flags(LineEngine *self, PyObject *flags)
{
    if (need_batch(self, 1) < 0 || index_keys(self) < 0) return NULL;
    PyObject *seq = PySequence_Fast(flags, "flags must be a sequence");
    if (seq == NULL) return NULL;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != self->nkeys) {
        PyErr_Format(PyExc_ValueError, "expected %zu flags, got %zd", self->nkeys,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    size_t fresh = 0;
    for (size_t k = 0; k < self->nkeys; k++) {
        int t = PyObject_IsTrue(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)k));
        if (t < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        self->flags[k] = (uint8_t)t;
        fresh += (size_t)t;
    }
    Py_DECREF(seq);
    self->flagged = 1;
    self->tested = 0;
    self->batch_new = fresh;
    return PyLong_FromSize_t(fresh);
}

/* 1 if the worker's digests of the batch (line->hashed) were made with this hash. */
static int made_with(const LineEngine *self, int hash_id, uint64_t seed)
{
    return self->ldig_valid && self->ldig_hash_id == hash_id && self->ldig_seed == seed;
}

/* Hash the batch's keys with the filter's hash, without the GIL; the known digests are reset
 * when the filter's bits are not the ones they describe. */
static int hash_keys(LineEngine *self, PyObject *filter)
{
    int hash_id;
    uint64_t seed;
    const void *bits;
    if (us_bit_filter_hash_of(filter, &hash_id, &seed, &bits) < 0) {
        PyErr_Format(PyExc_TypeError, "expected a BitFilter, not '%.200s'",
                     Py_TYPE(filter)->tp_name);
        return -1;
    }
    if (index_keys(self) < 0) return -1;
    if (self->known == NULL &&
        (self->known = PyMem_RawCalloc(KNOWN_SLOTS, sizeof(us_hash128))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (self->miss_cap < self->keys_cap) {
        size_t n = self->keys_cap;
        size_t *mk = PyMem_RawRealloc(self->miss_key, n * sizeof(size_t));
        if (mk != NULL) self->miss_key = mk;
        us_hash128 *md = PyMem_RawRealloc(self->miss_digest, n * sizeof(us_hash128));
        if (md != NULL) self->miss_digest = md;
        uint8_t *mf = PyMem_RawRealloc(self->miss_flag, n);
        if (mf != NULL) self->miss_flag = mf;
        if (mk == NULL || md == NULL || mf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->miss_cap = n;
    }
    if (bits != self->known_bits) { /* another filter, or its bits moved: forget */
        memset(self->known, 0, KNOWN_SLOTS * sizeof(us_hash128));
        self->known_bits = bits;
    }
    int made = made_with(self, hash_id, seed);
    if (made) { /* the worker's digests, and the few keys Python gave: no GIL hand-off */
        for (size_t k = 0; k < self->nkeys; k++) {
            size_t i = self->key_line[k];
            const us_line *line = &self->lines[i];
            self->digests[k] = line->hashed ? self->ldig[i]
                                            : us_digest(hash_id, key_ptr(self, line),
                                                        line->key_len, seed);
        }
        return 0;
    }
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    for (size_t k = 0; k < self->nkeys; k++) {
        const us_line *line = &self->lines[self->key_line[k]];
        self->digests[k] = us_digest(hash_id, key_ptr(self, line), line->key_len, seed);
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return 0;
}

static inline size_t known_slot(us_hash128 h)
{
    return (size_t)((h.h1 >> 32) ^ (h.h2 >> 40)) & (KNOWN_SLOTS - 1);
}

/* The batch's keys that are not known to be in the filter: miss_key / miss_digest[0 .. m).
 * Known keys get flag `known_flag` (0: a duplicate for test-and-set; 1: present for a test). */
static size_t gather_misses(LineEngine *self, uint8_t known_flag)
{
    size_t m = 0;
    for (size_t k = 0; k < self->nkeys; k++) {
        us_hash128 h = self->digests[k];
        const us_hash128 *slot = &self->known[known_slot(h)];
        if (slot->h1 == h.h1 && slot->h2 == h.h2) {
            self->flags[k] = known_flag;
            continue;
        }
        self->miss_key[m] = k;
        self->miss_digest[m++] = h;
    }
    return m;
}

/* Probe the misses (write: test-and-set, else test), put their answers in flags, and remember
 * the digests now known to be in the filter: all of them after a test-and-set, the present
 * ones after a test. */
static Py_ssize_t probe_misses(LineEngine *self, PyObject *filter, size_t m, int write)
{
    Py_ssize_t fresh = us_bit_filter_probe(filter, self->miss_digest, m, self->miss_flag, write);
    if (fresh < 0) return -1;
    for (size_t j = 0; j < m; j++) {
        self->flags[self->miss_key[j]] = self->miss_flag[j];
        if (write || self->miss_flag[j]) {
            us_hash128 h = self->miss_digest[j];
            self->known[known_slot(h)] = h;
        }
    }
    return fresh;
}

PyDoc_STRVAR(bloom_add_doc,
             "bloom_add(filter) -> int\n\n"
             "Check-and-add the batch's keys in a BitFilter (as its add_many would); returns the\n"
             "number of new keys.");

static PyObject *LineEngine_bloom_add(LineEngine *self, PyObject *filter)
{
    if (need_batch(self, 1) < 0 || hash_keys(self, filter) < 0) return NULL;
    Py_ssize_t fresh = probe_misses(self, filter, gather_misses(self, 0), 1);
    if (fresh < 0) return NULL;
    self->flagged = 1;
    self->tested = 0;
    self->batch_new = (size_t)fresh;
    return PyLong_FromSsize_t(fresh);
}

PyDoc_STRVAR(bloom_test_doc,
             "bloom_test(filter) -> int\n\n"
             "Test the batch's keys in a BitFilter without writing: a key is new if the filter\n"
             "lacks it and no earlier key of the batch is the same. Returns the number of new\n"
             "keys; bloom_commit adds them once their lines are out.");

static PyObject *LineEngine_bloom_test(LineEngine *self, PyObject *filter)
{
    if (need_batch(self, 1) < 0 || hash_keys(self, filter) < 0) return NULL;
    if (probe_misses(self, filter, gather_misses(self, 1), 0) < 0) return NULL;
    size_t slots = 16;
    while (slots < 2 * self->nkeys) slots *= 2;
    if (slots > self->set_cap) {
        us_hash128 *s = PyMem_RawRealloc(self->set_slots, slots * sizeof(us_hash128));
        if (s == NULL) return PyErr_NoMemory();
        self->set_slots = s;
        uint8_t *u = PyMem_RawRealloc(self->set_used, slots);
        if (u == NULL) return PyErr_NoMemory();
        self->set_used = u;
        self->set_cap = slots;
    }
    size_t fresh = 0;
    us_digest_set set;
    us_digest_set_init(&set, self->set_slots, self->set_used, slots);
    for (size_t k = 0; k < self->nkeys; k++) {
        uint8_t f = !self->flags[k] && us_digest_set_add(&set, self->digests[k]);
        self->flags[k] = f;
        fresh += f;
    }
    self->flagged = 1;
    self->tested = 1;
    self->batch_new = fresh;
    return PyLong_FromSize_t(fresh);
}

PyDoc_STRVAR(bloom_commit_doc,
             "bloom_commit(filter) -> int\n\n"
             "Add the keys bloom_test found new to the filter (after their lines are written);\n"
             "returns how many the filter counted new.");

static PyObject *LineEngine_bloom_commit(LineEngine *self, PyObject *filter)
{
    if (need_batch(self, 1) < 0) return NULL;
    if (!self->tested) {
        PyErr_SetString(PyExc_RuntimeError, "bloom_commit needs bloom_test first");
        return NULL;
    }
    /* the new keys' digests, packed at the front (in place: k' <= k) */
    size_t m = 0;
    for (size_t k = 0; k < self->nkeys; k++)
        if (self->flags[k]) self->digests[m++] = self->digests[k];
    self->tested = 0; /* the digests are no longer per key */
    uint8_t *scratch = self->set_used; /* >= 2 * nkeys bytes since bloom_test */
    Py_ssize_t fresh = us_bit_filter_probe(filter, self->digests, m, scratch, 1);
    if (fresh < 0) return NULL;
    for (size_t j = 0; j < m; j++) self->known[known_slot(self->digests[j])] = self->digests[j];
    return PyLong_FromSsize_t(fresh);
}

/* The digests of the batch's keys with the given hash into self->digests, without the GIL:
 * MD5 (the exact filter's fingerprint) several keys at a time (us_md5_many). */
static int digest_keys(LineEngine *self, int hash_id, uint64_t seed)
{
    if (index_keys(self) < 0) return -1;
    size_t n = self->nkeys;
    const uint8_t **data = PyMem_RawMalloc((n + 1) * sizeof *data);
    size_t *len = PyMem_RawMalloc((n + 1) * sizeof *len);
    size_t *at = PyMem_RawMalloc((n + 1) * sizeof *at);
    uint8_t(*md5)[16] = hash_id == US_HASH_MD5 ? PyMem_RawMalloc((n + 1) * 16) : NULL;
    if (data == NULL || len == NULL || at == NULL || (hash_id == US_HASH_MD5 && md5 == NULL)) {
        PyMem_RawFree(data);
        PyMem_RawFree(len);
        PyMem_RawFree(at);
        PyMem_RawFree(md5);
        PyErr_NoMemory();
        return -1;
    }
    /* the keys the worker hashed already are taken as they are; the rest are hashed here */
    int made = made_with(self, hash_id, seed);
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = self->key_line[k];
        const us_line *line = &self->lines[i];
        if (made && line->hashed) {
            self->digests[k] = self->ldig[i];
            continue;
        }
        data[m] = key_ptr(self, line);
        len[m] = line->key_len;
        at[m++] = k;
    }
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    if (md5 != NULL) {
        us_md5_many(data, len, m, (uint32_t)seed, md5);
        for (size_t j = 0; j < m; j++) {
            self->digests[at[j]].h1 = us_load64_le(md5[j]);
            self->digests[at[j]].h2 = us_load64_le(md5[j] + 8);
        }
    } else {
        for (size_t j = 0; j < m; j++)
            self->digests[at[j]] = us_digest(hash_id, data[j], len[j], seed);
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyMem_RawFree(data);
    PyMem_RawFree(len);
    PyMem_RawFree(at);
    PyMem_RawFree(md5);
    return 0;
}

PyDoc_STRVAR(exact_step_doc,
             "exact_step(counters, cache, now=0) -> ExactStepResult\n\n"
             "CountingFilter._exact_step(keys, cache, now) on the batch's keys, hashed here from\n"
             "the engine's buffers (no Python object per key): what ExactFilter's batch step needs.\n"
             "The answers are the filter's to finish; set_flags takes them.");

static PyObject *LineEngine_exact_step(LineEngine *self, PyObject *args)
{
    PyObject *counters, *cache;
    unsigned int now = 0;
    int hash_id;
    uint64_t seed;
    if (!PyArg_ParseTuple(args, "OO|I:exact_step", &counters, &cache, &now)) return NULL;
    if (us_counting_filter_hash_of(counters, &hash_id, &seed) < 0) {
        PyErr_Format(PyExc_TypeError, "expected a CountingFilter, not '%.200s'",
                     Py_TYPE(counters)->tp_name);
        return NULL;
    }
    if (need_batch(self, 1) < 0 || digest_keys(self, hash_id, seed) < 0) return NULL;
    return us_counting_exact_step(counters, self->digests, (Py_ssize_t)self->nkeys, cache, now);
}

PyDoc_STRVAR(output_doc,
             "output() -> bytes\n\n"
             "The batch's new lines, each as read plus b\"\\n\", in order (b\"\" if none).");

static PyObject *LineEngine_output(LineEngine *self, PyObject *unused)
{
    if (need_batch(self, 1) < 0) return NULL;
    if (!self->flagged) {
        PyErr_SetString(PyExc_RuntimeError, "the batch has no answers yet");
        return NULL;
    }
    size_t total = 0;
    for (size_t k = 0; k < self->nkeys; k++)
        if (self->flags[k]) total += self->lines[self->key_line[k]].len + 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL) return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    for (size_t k = 0; k < self->nkeys; k++) {
        if (!self->flags[k]) continue;
        const us_line *line = &self->lines[self->key_line[k]];
        memcpy(o, self->buf + line->off, line->len);
        o += line->len;
        *o++ = '\n';
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return out;
}

static PyObject *stats_of(LineEngine *self, PyObject *unused)
{
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n}", "lines", (Py_ssize_t)self->nlines, "keys",
                         (Py_ssize_t)self->nkeys, "empty", (Py_ssize_t)self->batch_empty, "new",
                         (Py_ssize_t)self->batch_new, "bytes", (Py_ssize_t)self->batch_bytes);
}

US_GETTER(get_lines, LineEngine, PyLong_FromSize_t(self->nlines))
US_GETTER(get_empty, LineEngine, PyLong_FromSize_t(self->batch_empty))
US_GETTER(get_bytes, LineEngine, PyLong_FromSize_t(self->batch_bytes))
US_GETTER(get_ndeferred, LineEngine, PyLong_FromSize_t(self->batch_deferred))
US_GETTER(get_nkeys, LineEngine, PyLong_FromSize_t(self->nkeys))

static PyGetSetDef LineEngine_getset[] = {
    {"lines", (getter)get_lines, NULL, "Lines in the current batch.", NULL},
    {"empty", (getter)get_empty, NULL, "Empty lines of the batch the C rules found.", NULL},
    {"input_bytes", (getter)get_bytes, NULL, "Input bytes of the batch (newlines included).",
     NULL},
    {"ndeferred", (getter)get_ndeferred, NULL, "Lines of the batch deferred to Python.", NULL},
    {"nkeys", (getter)get_nkeys, NULL, "Keys of the batch (once keyed and indexed).", NULL},
    {NULL},
};

static PyMethodDef LineEngine_methods[] = {
    {"start", (PyCFunction)(void (*)(void))LineEngine_start, METH_VARARGS | METH_KEYWORDS,
     start_doc},
    {"close_input", (PyCFunction)(void (*)(void))LineEngine_close_input,
     METH_VARARGS | METH_KEYWORDS, close_input_doc},
    {"stop", (PyCFunction)LineEngine_stop, METH_NOARGS, stop_doc},
    {"feed", (PyCFunction)LineEngine_feed, METH_O, feed_doc},
    {"end_input", (PyCFunction)LineEngine_end_input, METH_NOARGS, end_input_doc},
    {"next_batch", (PyCFunction)(void (*)(void))LineEngine_next_batch,
     METH_VARARGS | METH_KEYWORDS, next_batch_doc},
    {"deferred", (PyCFunction)LineEngine_deferred, METH_NOARGS, deferred_doc},
    {"set_deferred", (PyCFunction)LineEngine_set_deferred, METH_O, set_deferred_doc},
    {"keys", (PyCFunction)LineEngine_keys, METH_NOARGS, keys_doc},
    {"set_flags", (PyCFunction)LineEngine_set_flags, METH_O, set_flags_doc},
    {"bloom_add", (PyCFunction)LineEngine_bloom_add, METH_O, bloom_add_doc},
    {"bloom_test", (PyCFunction)LineEngine_bloom_test, METH_O, bloom_test_doc},
    {"bloom_commit", (PyCFunction)LineEngine_bloom_commit, METH_O, bloom_commit_doc},
    {"exact_step", (PyCFunction)LineEngine_exact_step, METH_VARARGS, exact_step_doc},
    {"output", (PyCFunction)LineEngine_output, METH_NOARGS, output_doc},
    {"stats", (PyCFunction)stats_of, METH_NOARGS, "stats() -> dict: the batch's counts."},
    {NULL},
};

PyDoc_STRVAR(LineEngine_doc,
             "LineEngine(canonicalize, max_canonical_bytes)\n\n"
             "The dedup job's line engine: bytes in, batches of keyed lines, new lines out as\n"
             "bytes (urlseen.job.dedup drives it; urlseen.job.linekeys holds the reference rules).");

static PyTypeObject LineEngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "urlseen._core.LineEngine",
    .tp_basicsize = sizeof(LineEngine),
    .tp_dealloc = (destructor)LineEngine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = LineEngine_doc,
    .tp_methods = LineEngine_methods,
    .tp_getset = LineEngine_getset,
    .tp_init = (initproc)LineEngine_init,
    .tp_new = PyType_GenericNew,
};

int us_line_engine_add(PyObject *module)
{
    if (PyType_Ready(&LineEngineType) < 0) return -1;
    return PyModule_AddObjectRef(module, "LineEngine", (PyObject *)&LineEngineType);
}
