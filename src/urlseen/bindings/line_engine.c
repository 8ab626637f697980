/* bindings/line_engine.c: the LineEngine type, the dedup job's hot path (urlseen.job.dedup).
 *
 * Bytes in (feed), batches of lines out (next_batch): the lines are split, keyed (csrc/lines.h)
 * and, for a Bloom filter, hashed and probed in C, and the new lines come back as one bytes
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
 *
 * This file holds the type and a batch's deferred lines, keys, answers and output; the input
 * side is line_engine_input.c, the filter steps in C line_engine_filters.c (line_engine.h).
 */
#include "line_engine.h"

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
    if (us_engine_enter(self) < 0) return -1;
    if (self->work.started) {
        PyErr_SetString(PyExc_RuntimeError, "the line engine has started its worker");
        return -1;
    }
    self->canonicalize = canonicalize;
    self->max_canonical = (size_t)max_canonical;
    self->in.len = self->in.pos = self->in.scan = self->in.nscan = self->in.nsynth = 0;
    us_engine_drop_batch(self);
    return 0;
}

static void LineEngine_dealloc(LineEngine *self)
{
    if (self->work.started) {
        us_worker_stop(&self->work.thread);
        us_worker_free(&self->work.thread);
    }
    PyMem_RawFree(self->in.buf);
    PyMem_RawFree(self->in.synth);
    PyMem_RawFree(self->batch.lines);
    PyMem_RawFree(self->batch.arena);
    PyMem_RawFree(self->batch.scratch);
    PyMem_RawFree(self->batch.rep);
    PyMem_RawFree(self->keys.line);
    PyMem_RawFree(self->keys.digests);
    PyMem_RawFree(self->keys.flags);
    PyMem_RawFree(self->memo.slots);
    PyMem_RawFree(self->memo.arena);
    PyMem_RawFree(self->memo.ddig);
    PyMem_RawFree(self->bloom.known);
    PyMem_RawFree(self->bloom.miss_key);
    PyMem_RawFree(self->bloom.miss_digest);
    PyMem_RawFree(self->bloom.miss_flag);
    PyMem_RawFree(self->bloom.set_slots);
    PyMem_RawFree(self->bloom.set_used);
    PyMem_RawFree(self->work.ldig);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *line_bytes(LineEngine *self, const us_line *line)
{
    return PyBytes_FromStringAndSize((const char *)self->in.buf + line->off, (Py_ssize_t)line->len);
}

PyDoc_STRVAR(deferred_doc,
             "deferred() -> list[bytes]\n\n"
             "The lines of the batch whose key Python decides (without their newline), in order.");

static PyObject *LineEngine_deferred(LineEngine *self, PyObject *unused)
{
    if (us_engine_need_batch(self, 0) < 0) return NULL;
    PyObject *list = PyList_New((Py_ssize_t)self->batch.deferred);
    if (list == NULL) return NULL;
    Py_ssize_t j = 0;
    for (size_t i = 0; i < self->batch.nlines && j < (Py_ssize_t)self->batch.deferred; i++) {
        if (self->batch.lines[i].kind != US_LINE_DEFER) continue;
        PyObject *b = line_bytes(self, &self->batch.lines[i]);
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
    if (us_engine_need_batch(self, 0) < 0) return NULL;
    if (self->batch.deferred_done) {
        PyErr_SetString(PyExc_RuntimeError, "the batch has no deferred lines left");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (seq == NULL) return NULL;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != self->batch.deferred) {
        PyErr_Format(PyExc_ValueError, "expected %zu keys, got %zd", self->batch.deferred,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t j = 0;
    for (size_t i = 0; i < self->batch.nlines; i++) {
        us_line *line = &self->batch.lines[i];
        if (line->kind != US_LINE_DEFER) continue;
        PyObject *key = PySequence_Fast_GET_ITEM(seq, j++);
        if (key == Py_None) {
            line->kind = US_LINE_EMPTY; /* counted by whoever said so */
            continue;
        }
        key_bytes kb;
        if (key_get(key, &kb, j - 1) < 0) goto fail;
        if (US_ENGINE_GROW(self->batch.arena, self->batch.arena_cap,
                           self->batch.arena_used + (size_t)kb.len + 1) < 0) {
            key_release(&kb);
            goto fail;
        }
        memcpy(self->batch.arena + self->batch.arena_used, kb.data, (size_t)kb.len);
        key_release(&kb);
        line->kind = US_LINE_KEY;
        line->key_in_arena = 1;
        line->key_text = PyUnicode_Check(key) != 0;
        line->key_off = self->batch.arena_used;
        line->key_len = (size_t)kb.len;
        /* str keys only: a bytes key means the keyer counted the line (invalid, verbatim) */
        if (line->memo && line->key_text)
            us_key_memo_put(&self->memo.memo, self->memo.ddig[j - 1],
                            self->batch.arena + self->batch.arena_used, line->key_len);
        self->batch.arena_used += (size_t)kb.len;
    }
    Py_DECREF(seq);
    self->batch.deferred_done = 1;
    Py_RETURN_NONE;
fail:
    /* lines already given keys keep them; the batch stays unusable */
    Py_DECREF(seq);
    return NULL;
}

int us_engine_index_keys(LineEngine *self)
{
    if (self->batch.nlines > self->keys.cap) {
        size_t n = self->keys.cap ? self->keys.cap : 1024;
        while (n < self->batch.nlines) n *= 2;
        size_t *kl = PyMem_RawRealloc(self->keys.line, n * sizeof(size_t));
        if (kl == NULL) return PyErr_NoMemory(), -1;
        self->keys.line = kl;
        us_hash128 *d = PyMem_RawRealloc(self->keys.digests, n * sizeof(us_hash128));
        if (d == NULL) return PyErr_NoMemory(), -1;
        self->keys.digests = d;
        uint8_t *f = PyMem_RawRealloc(self->keys.flags, n);
        if (f == NULL) return PyErr_NoMemory(), -1;
        self->keys.flags = f;
        self->keys.cap = n;
    }
    size_t k = 0;
    for (size_t i = 0; i < self->batch.nlines; i++)
        if (self->batch.lines[i].kind == US_LINE_KEY) self->keys.line[k++] = i;
    self->keys.n = k;
    return 0;
}

PyDoc_STRVAR(keys_doc,
             "keys() -> list[str | bytes]\n\n"
             "The keys of the batch's URL lines, in order (empty lines have none): str for a\n"
             "canonicalized URL, bytes for a line keyed by its bytes, as LineKeyer.key gives them.");

static PyObject *LineEngine_keys(LineEngine *self, PyObject *unused)
{
    if (us_engine_need_batch(self, 1) < 0 || us_engine_index_keys(self) < 0) return NULL;
    PyObject *list = PyList_New((Py_ssize_t)self->keys.n);
    if (list == NULL) return NULL;
    for (size_t k = 0; k < self->keys.n; k++) {
        const us_line *line = &self->batch.lines[self->keys.line[k]];
        const char *data = (const char *)us_engine_key_ptr(self, line);
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
    if (us_engine_need_batch(self, 1) < 0 || us_engine_index_keys(self) < 0) return NULL;
    PyObject *seq = PySequence_Fast(flags, "flags must be a sequence");
    if (seq == NULL) return NULL;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != self->keys.n) {
        PyErr_Format(PyExc_ValueError, "expected %zu flags, got %zd", self->keys.n,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    size_t fresh = 0;
    for (size_t k = 0; k < self->keys.n; k++) {
        PyObject *flag = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)k);
        int t = flag == Py_True ? 1 : flag == Py_False ? 0 : PyObject_IsTrue(flag);
        if (t < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        self->keys.flags[k] = (uint8_t)t;
        fresh += (size_t)t;
    }
    Py_DECREF(seq);
    self->keys.flagged = 1;
    self->bloom.tested = 0;
    self->batch.fresh = fresh;
    return PyLong_FromSize_t(fresh);
}

/* RuntimeError unless the current batch has its answers (a filter step or set_flags). */
static int need_answers(LineEngine *self)
{
    if (us_engine_need_batch(self, 1) < 0) return -1;
    if (!self->keys.flagged) {
        PyErr_SetString(PyExc_RuntimeError, "the batch has no answers yet");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(flags_doc,
             "flags() -> list[bool]\n\n"
             "The batch's answers, one per key in order (True: new), once a filter step or\n"
             "set_flags gave them.");

static PyObject *LineEngine_flags(LineEngine *self, PyObject *unused)
{
    if (need_answers(self) < 0) return NULL;
    PyObject *list = PyList_New((Py_ssize_t)self->keys.n);
    if (list == NULL) return NULL;
    for (size_t k = 0; k < self->keys.n; k++) {
        PyObject *b = self->keys.flags[k] ? Py_True : Py_False;
        Py_INCREF(b);
        PyList_SET_ITEM(list, (Py_ssize_t)k, b);
    }
    return list;
}

PyDoc_STRVAR(output_doc,
             "output() -> bytes\n\n"
             "The batch's new lines, each as read plus b\"\\n\", in order (b\"\" if none).");

static PyObject *LineEngine_output(LineEngine *self, PyObject *unused)
{
    if (need_answers(self) < 0) return NULL;
    size_t total = 0;
    for (size_t k = 0; k < self->keys.n; k++)
        if (self->keys.flags[k]) total += self->batch.lines[self->keys.line[k]].len + 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL) return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    for (size_t k = 0; k < self->keys.n; k++) {
        if (!self->keys.flags[k]) continue;
        const us_line *line = &self->batch.lines[self->keys.line[k]];
        memcpy(o, self->in.buf + line->off, line->len);
        o += line->len;
        *o++ = '\n';
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return out;
}

static PyObject *stats_of(LineEngine *self, PyObject *unused)
{
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n}", "lines", (Py_ssize_t)self->batch.nlines, "keys",
                         (Py_ssize_t)self->keys.n, "empty", (Py_ssize_t)self->batch.empty, "new",
                         (Py_ssize_t)self->batch.fresh, "bytes", (Py_ssize_t)self->batch.bytes);
}

US_GETTER(get_lines, LineEngine, PyLong_FromSize_t(self->batch.nlines))
US_GETTER(get_empty, LineEngine, PyLong_FromSize_t(self->batch.empty))
US_GETTER(get_bytes, LineEngine, PyLong_FromSize_t(self->batch.bytes))
US_GETTER(get_ndeferred, LineEngine, PyLong_FromSize_t(self->batch.deferred))
US_GETTER(get_nkeys, LineEngine, PyLong_FromSize_t(self->keys.n))

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
    {"start", (PyCFunction)(void (*)(void))us_engine_start, METH_VARARGS | METH_KEYWORDS,
     us_engine_start_doc},
    {"close_input", (PyCFunction)(void (*)(void))us_engine_close_input,
     METH_VARARGS | METH_KEYWORDS, us_engine_close_input_doc},
    {"stop", (PyCFunction)us_engine_stop, METH_NOARGS, us_engine_stop_doc},
    {"feed", (PyCFunction)us_engine_feed, METH_O, us_engine_feed_doc},
    {"end_input", (PyCFunction)us_engine_end_input, METH_NOARGS, us_engine_end_input_doc},
    {"next_batch", (PyCFunction)(void (*)(void))us_engine_next_batch,
     METH_VARARGS | METH_KEYWORDS, us_engine_next_batch_doc},
    {"deferred", (PyCFunction)LineEngine_deferred, METH_NOARGS, deferred_doc},
    {"set_deferred", (PyCFunction)LineEngine_set_deferred, METH_O, set_deferred_doc},
    {"keys", (PyCFunction)LineEngine_keys, METH_NOARGS, keys_doc},
    {"set_flags", (PyCFunction)LineEngine_set_flags, METH_O, set_flags_doc},
    {"bloom_add", (PyCFunction)us_engine_bloom_add, METH_O, us_engine_bloom_add_doc},
    {"bloom_test", (PyCFunction)us_engine_bloom_test, METH_O, us_engine_bloom_test_doc},
    {"bloom_commit", (PyCFunction)us_engine_bloom_commit, METH_O, us_engine_bloom_commit_doc},
    {"bloom_test_also", (PyCFunction)us_engine_bloom_test_also, METH_O,
     us_engine_bloom_test_also_doc},
    {"bloom_add_layers", (PyCFunction)us_engine_bloom_add_layers, METH_VARARGS,
     us_engine_bloom_add_layers_doc},
    {"exact_step", (PyCFunction)us_engine_exact_step, METH_VARARGS, us_engine_exact_step_doc},
    {"flags", (PyCFunction)LineEngine_flags, METH_NOARGS, flags_doc},
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
