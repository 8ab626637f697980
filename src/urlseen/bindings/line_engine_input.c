/* bindings/line_engine_input.c: the LineEngine's input (line_engine.h): bytes in, batches of
 * split and keyed lines out.
 *
 * Serial: feed appends bytes to in.buf, end_input ends an input's last line, and next_batch
 * splits and keys max_lines lines (csrc/lines.h) without the GIL, then keys the deferred lines
 * the memo knows. After start, the worker thread (line_worker.h) does the splitting, keying and
 * hashing ahead; next_batch swaps its batch's arrays into the engine's, so every other method
 * works on them unchanged.
 */
#include "line_engine.h"

/* Move buf[pos, len) to the front; the lines split so far and the added newlines move along. */
static void compact(LineEngine *self)
{
    size_t shift = self->in.pos;
    if (shift == 0) return;
    memmove(self->in.buf, self->in.buf + shift, self->in.len - shift);
    self->in.len -= shift;
    self->in.pos = 0;
    self->in.scan -= shift;
    for (size_t i = 0; i < self->in.nscan; i++) self->batch.lines[i].off -= shift;
    for (size_t i = 0; i < self->in.nsynth; i++) self->in.synth[i] -= shift;
}

US_ENGINE_DOC(us_engine_feed_doc,
              "feed(data) -> bool\n\n"
              "Append bytes of the current input (any bytes-like object). Ends the current batch.\n"
              "After start: queued for the worker (waiting while it is a few blocks behind), from\n"
              "any thread; False if the worker has stopped (the bytes are dropped).");

PyObject *us_engine_feed(LineEngine *self, PyObject *data)
{
    Py_buffer view;
    if (self->work.started) { /* any thread: the bytes are held until the worker has read them */
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
        int rc = us_worker_feed(&self->work.thread, &view);
        return rc < 0 ? NULL : PyBool_FromLong(rc);
    }
    if (us_engine_enter(self) < 0) return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    us_engine_drop_batch(self);
    /* Compact only when the kept bytes are few or the buffer would have to grow anyway. */
    us_engine_input *in = &self->in;
    if (in->pos && (in->len - in->pos <= in->pos || in->len + (size_t)view.len > in->cap))
        compact(self);
    if (US_ENGINE_GROW(in->buf, in->cap, in->len + (size_t)view.len + 1) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    memcpy(self->in.buf + self->in.len, view.buf, (size_t)view.len);
    self->in.len += (size_t)view.len;
    PyBuffer_Release(&view);
    Py_RETURN_TRUE;
}

US_ENGINE_DOC(us_engine_end_input_doc,
              "end_input() -> None\n\n"
              "The current input has ended: a last line without a newline ends here.");

PyObject *us_engine_end_input(LineEngine *self, PyObject *unused)
{
    if (self->work.started) {
        int rc = us_worker_end_input(&self->work.thread);
        if (rc < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (us_engine_enter(self) < 0) return NULL;
    if (self->in.len > self->in.pos && self->in.buf[self->in.len - 1] != '\n') {
        if (US_ENGINE_GROW(self->in.buf, self->in.cap, self->in.len + 1) < 0 ||
            US_ENGINE_GROW(self->in.synth, self->in.synth_cap, self->in.nsynth + 1) < 0)
            return NULL;
        self->in.buf[self->in.len] = '\n';
        self->in.synth[self->in.nsynth++] = self->in.len;
        self->in.len++;
    }
    Py_RETURN_NONE;
}


/* Lines no longer than this have their deferred keys remembered (as canonical._MEMO_MAX_CHARS). */
#define MEMO_MAX_LINE 1024
#define MEMO_SLOTS (1u << 16)
#define MEMO_ARENA (8u << 20)

/* Key the batch's deferred lines that the memo knows; *deferred becomes the number left. */
static int recall(LineEngine *self, size_t *deferred)
{
    if (self->memo.slots == NULL) {
        self->memo.slots = PyMem_RawMalloc(MEMO_SLOTS * sizeof(us_memo_slot));
        self->memo.arena = PyMem_RawMalloc(MEMO_ARENA);
        if (self->memo.slots == NULL || self->memo.arena == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        us_key_memo_init(&self->memo.memo, self->memo.slots, MEMO_SLOTS, self->memo.arena,
                         MEMO_ARENA);
    }
    if (US_ENGINE_GROW(self->memo.ddig, self->memo.ddig_cap, *deferred) < 0) return -1;
    size_t left = 0;
    for (size_t i = 0; i < self->batch.nlines; i++) {
        us_line *line = &self->batch.lines[i];
        if (line->kind != US_LINE_DEFER) continue;
        const uint8_t *s = self->in.buf + line->off;
        size_t n = line->len - (line->len && s[line->len - 1] == '\r');
        if (n > MEMO_MAX_LINE) {
            left++;
            continue;
        }
        us_hash128 h = us_xxh3_128(s, n, 0);
        size_t klen;
        const uint8_t *key = us_key_memo_get(&self->memo.memo, h, &klen);
        if (key == NULL) {
            line->memo = 1;
            self->memo.ddig[left++] = h;
            continue;
        }
        us_engine_batch *b = &self->batch;
        if (US_ENGINE_GROW(b->arena, b->arena_cap, b->arena_used + klen) < 0) return -1;
        memcpy(b->arena + b->arena_used, key, klen);
        line->kind = US_LINE_KEY;
        line->key_in_arena = 1;
        line->key_text = 1;
        line->key_off = b->arena_used;
        line->key_len = klen;
        b->arena_used += klen;
    }
    *deferred = left;
    return 0;
}

/* Key the batch's lines (batch.nlines of them, in `bytes` bytes of in.buf) without the GIL:
 * sets batch.arena_used and batch.empty, and *deferred to the lines left to Python. */
static int key_lines(LineEngine *self, size_t bytes, size_t *deferred)
{
    us_engine_batch *b = &self->batch;
    size_t n = b->nlines;
    if (self->canonicalize) {
        size_t longest = us_longest_line(b->lines, n, self->max_canonical);
        /* a canonical key is at most 3 bytes per byte of its line (escapes), plus "/" */
        if (US_ENGINE_GROW(b->arena, b->arena_cap, 3 * bytes + 2 * n + 16) < 0 ||
            US_ENGINE_GROW(b->scratch, b->scratch_cap, longest + 1) < 0)
            return -1;
    }
    /* repeats are looked for where keying or hashing a line costs more than finding them */
    us_repeat_slot *rep = NULL;
    if (self->canonicalize || (self->work.valid && self->work.hash_id == US_HASH_MD5)) {
        if (US_ENGINE_GROW(b->rep, b->rep_cap, us_repeat_slots(n)) < 0) return -1;
        rep = b->rep;
    }
    size_t empty, left, used = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    us_key_batch(self->in.buf, b->lines, n, self->canonicalize, self->max_canonical, b->arena,
                 b->arena_cap, &used, b->scratch, rep, &empty, &left);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    b->arena_used = used;
    b->empty = empty;
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
    if (max_lines != self->work.thread.batch_size) {
        PyErr_Format(PyExc_ValueError, "max_lines must be the batch size given to start (%zu)",
                     self->work.thread.batch_size);
        return NULL;
    }
    us_engine_drop_batch(self);
    self->busy = 1;
    us_batch *b = us_worker_next(&self->work.thread);
    self->busy = 0;
    if (b == NULL) return PyErr_Occurred() ? NULL : PyLong_FromLong(0);
    SWAP(uint8_t *, self->in.buf, b->buf);
    SWAP(size_t, self->in.cap, b->cap);
    SWAP(us_line *, self->batch.lines, b->lines);
    SWAP(size_t, self->batch.lines_cap, b->lines_cap);
    SWAP(uint8_t *, self->batch.arena, b->arena);
    SWAP(size_t, self->batch.arena_cap, b->arena_cap);
    SWAP(us_hash128 *, self->work.ldig, b->ldig);
    SWAP(size_t, self->work.ldig_cap, b->ldig_cap);
    size_t n = b->nlines, deferred = b->deferred, len = b->len;
    int keyed = b->keyed;
    self->batch.nlines = n;
    self->batch.arena_used = b->arena_used;
    self->batch.bytes = b->bytes;
    self->batch.empty = b->empty;
    us_worker_done(&self->work.thread, b);
    self->work.valid = self->work.thread.hashing;
    self->work.hash_id = self->work.thread.hash_id;
    self->work.seed = self->work.thread.seed;
    if (!keyed && key_lines(self, len, &deferred) < 0) {
        self->batch.nlines = 0;
        return NULL;
    }
    if (deferred && recall(self, &deferred) < 0) {
        self->batch.nlines = 0;
        return NULL;
    }
    self->batch.deferred = deferred;
    self->batch.deferred_done = deferred == 0;
    return PyLong_FromSize_t(n);
}

US_ENGINE_DOC(us_engine_start_doc,
              "start(batch_size, hasher=None) -> None\n\n"
              "Start the worker thread: from now on it splits, keys and (with hasher, a BitFilter\n"
              "or CountingFilter whose hash it uses) hashes batches of batch_size lines ahead of\n"
              "next_batch, from the bytes feed and end_input queue; close_input ends the input,\n"
              "stop ends the thread. The engine must hold no input yet.");

PyObject *us_engine_start(LineEngine *self, PyObject *args, PyObject *kwargs)
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
    if (us_engine_enter(self) < 0) return NULL;
    if (self->work.started || self->in.len > self->in.pos) {
        PyErr_SetString(PyExc_RuntimeError,
                        self->work.started ? "the worker has started already"
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
    us_engine_drop_batch(self);
    if (us_worker_start(&self->work.thread, (size_t)batch_size, self->canonicalize,
                        self->max_canonical, hashing, hash_id, seed) < 0) {
        us_worker_free(&self->work.thread);
        return NULL;
    }
    self->work.started = 1;
    Py_RETURN_NONE;
}

US_ENGINE_DOC(us_engine_close_input_doc,
              "close_input(failed=False) -> None\n\n"
              "After start: no more input. failed: the input broke off, and the lines of the\n"
              "unfinished batch are dropped (the serial engine's caller never asks for them).");

PyObject *us_engine_close_input(LineEngine *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"failed", NULL};
    int failed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:close_input", kwlist, &failed))
        return NULL;
    if (!self->work.started) {
        PyErr_SetString(PyExc_RuntimeError, "close_input needs start first");
        return NULL;
    }
    us_worker_close(&self->work.thread, failed);
    Py_RETURN_NONE;
}

US_ENGINE_DOC(us_engine_stop_doc,
              "stop() -> None\n\n"
              "Stop the worker thread and wait for it (a feed waiting for room returns False).\n"
              "The current batch stays usable; next_batch raises RuntimeError.");

PyObject *us_engine_stop(LineEngine *self, PyObject *unused)
{
    if (self->work.started) us_worker_stop(&self->work.thread);
    Py_RETURN_NONE;
}

US_ENGINE_DOC(us_engine_next_batch_doc,
              "next_batch(max_lines, final=False) -> int\n\n"
              "Start the next batch: max_lines lines (fewer only with final, at the end of all\n"
              "input), split and keyed. Returns its number of lines; 0 when more input is needed\n"
              "(or, with final, none is left). After start: the worker's next batch (max_lines\n"
              "must be its batch size; final is implied by close_input), waiting for it; 0 at\n"
              "the end of the input.");

PyObject *us_engine_next_batch(LineEngine *self, PyObject *args, PyObject *kwargs)
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
    if (us_engine_enter(self) < 0) return NULL;
    if (self->work.started) return next_batch_threaded(self, (size_t)max_lines);
    us_engine_drop_batch(self);
    if (US_ENGINE_GROW(self->batch.lines, self->batch.lines_cap, (size_t)max_lines) < 0)
        return NULL;
    size_t want = self->in.nscan < (size_t)max_lines ? (size_t)max_lines - self->in.nscan : 0;
    size_t got = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    if (want)
        got = us_split_lines(self->in.buf, self->in.len, &self->in.scan, want, final,
                             self->batch.lines + self->in.nscan);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    self->in.nscan += got;
    if (self->in.nscan == 0 || (self->in.nscan < (size_t)max_lines && !final))
        return PyLong_FromLong(0);

    size_t n = self->in.nscan < (size_t)max_lines ? self->in.nscan : (size_t)max_lines;
    size_t start = self->in.pos;
    size_t end = n < self->in.nscan ? self->batch.lines[n].off : self->in.scan;
    size_t bytes = end - start, deferred, synth = 0;
    self->batch.nlines = n;
    if (key_lines(self, bytes, &deferred) < 0) {
        self->batch.nlines = 0;
        return NULL;
    }
    while (synth < self->in.nsynth && self->in.synth[synth] < end) synth++;
    /* the added newlines of this batch were never read */
    memmove(self->in.synth, self->in.synth + synth, (self->in.nsynth - synth) * sizeof(size_t));
    self->in.nsynth -= synth;
    if (deferred && recall(self, &deferred) < 0) {
        self->batch.nlines = 0; /* nothing consumed: the next call splits again */
        return NULL;
    }
    self->batch.bytes = bytes - synth;
    self->batch.deferred = deferred;
    self->batch.deferred_done = deferred == 0;
    self->in.pos = end;
    /* Lines split beyond the batch (only when max_lines shrank) are split again next time. */
    if (n < self->in.nscan) self->in.scan = end;
    self->in.nscan = 0;
    return PyLong_FromSize_t(n);
}

