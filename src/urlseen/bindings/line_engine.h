/* bindings/line_engine.h: the LineEngine type's state and what its three files share.
 *
 *   line_engine.c          the type; a batch's deferred lines, keys, answers and output
 *   line_engine_input.c    bytes in: feed, end_input, next_batch (splitting, keying, the key
 *                          memo) and the worker thread's start, close_input and stop
 *   line_engine_filters.c  the filter steps in C: the Bloom probe with its known-digest cache
 *                          (bloom_add, bloom_test, bloom_commit) and the exact step
 *
 * The engine's fields are grouped by idea, one sub-struct each: input splitting (in), the
 * current batch (batch), its keys and answers (keys), the memo of deferred lines' keys (memo),
 * the Bloom step (bloom) and the worker thread (work).
 */
#ifndef URLSEEN_BINDINGS_LINE_ENGINE_H
#define URLSEEN_BINDINGS_LINE_ENGINE_H

#include "common.h"

#include "csrc/lines.h"
#include "line_worker.h"

/* Input splitting: buf[pos, len) is not yet part of a batch; lines[0 .. nscan) of the next
 * batch are split so far (from pos), and splitting resumes at scan. */
typedef struct {
    uint8_t *buf;
    size_t cap, len, pos, scan, nscan;
    size_t *synth; /* offsets of the "\n" end_input added after an unterminated last line */
    size_t nsynth, synth_cap;
} us_engine_input;

/* The current batch: its lines, the keys made in C (arena) and its counts. */
typedef struct {
    us_line *lines;
    size_t nlines, lines_cap;
    uint8_t *arena;
    size_t arena_cap, arena_used;
    uint8_t *scratch; /* for the canonicalizer: as long as the longest line it may see */
    size_t scratch_cap;
    us_repeat_slot *rep; /* the repeats' table (csrc/repeats.h) */
    size_t rep_cap;
    size_t bytes, empty, deferred, fresh;
    int deferred_done; /* every deferred line has its key from Python (or none) */
} us_engine_batch;

/* The batch's keys (its lines with a key), their digests and their answers; line, digests and
 * flags have room for cap keys. */
typedef struct {
    size_t *line; /* line index of key i */
    us_hash128 *digests;
    uint8_t *flags; /* per key: 1 = new */
    size_t n, cap;
    int flagged; /* flags hold the answers */
} us_engine_keys;

/* Keys Python gave for deferred lines, by line digest (csrc/lines.h); ddig: the digests of the
 * batch's deferred lines the memo lacks, in order, to remember their keys by. */
typedef struct {
    us_key_memo memo;
    us_memo_slot *slots;
    uint8_t *arena;
    us_hash128 *ddig;
    size_t ddig_cap;
} us_engine_memo;

/* The Bloom step. known: digests known to be in the Bloom filter `known_bits` (every one of
 * their bits is set, and a Bloom filter never clears a bit), so a repeat found there is a
 * duplicate without a probe; direct-mapped, KNOWN_SLOTS entries (line_engine_filters.c).
 * miss_*: the keys of a batch that must be probed. set_*: the digest set in which bloom_test
 * finds a batch's repeats. */
typedef struct {
    us_hash128 *known;
    const void *known_bits;
    size_t *miss_key;
    us_hash128 *miss_digest;
    uint8_t *miss_flag;
    size_t miss_cap;
    us_hash128 *set_slots;
    uint8_t *set_used;
    size_t set_cap;
    int tested; /* flags hold bloom_test's answers, not yet committed */
} us_engine_bloom;

/* The worker thread (start), and the digests it made of the batch's keys: per line, where
 * line->hashed, made with hash_id and seed, valid when `valid`. */
typedef struct {
    us_worker thread;
    int started;
    us_hash128 *ldig;
    size_t ldig_cap;
    int valid, hash_id;
    uint64_t seed;
} us_engine_worker;

typedef struct {
    PyObject_HEAD
    int canonicalize;
    size_t max_canonical;
    int busy; /* a method runs without the GIL: another thread is refused */
    us_engine_input in;
    us_engine_batch batch;
    us_engine_keys keys;
    us_engine_memo memo;
    us_engine_bloom bloom;
    us_engine_worker work;
} LineEngine;

/* Room for `need` items of `size` bytes in *p (doubling); -1 with MemoryError. */
static inline int us_engine_grow(void **p, size_t *cap, size_t need, size_t size)
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

/* us_engine_grow for an array and its capacity field. */
#define US_ENGINE_GROW(array, cap, need) \
    us_engine_grow((void **)&(array), &(cap), (need), sizeof *(array))

/* RuntimeError while another thread runs a method without the GIL. */
static inline int us_engine_enter(LineEngine *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the line engine is in use by another thread");
        return -1;
    }
    return 0;
}

/* Forget the current batch (its arrays stay allocated). */
static inline void us_engine_drop_batch(LineEngine *self)
{
    us_engine_batch *b = &self->batch;
    b->nlines = b->arena_used = 0;
    b->bytes = b->empty = b->deferred = b->fresh = 0;
    b->deferred_done = 0;
    self->keys.n = 0;
    self->keys.flagged = 0;
    self->bloom.tested = 0;
    self->work.valid = 0;
}

/* RuntimeError unless there is a current batch (keyed: with every deferred key given). */
static inline int us_engine_need_batch(LineEngine *self, int keyed)
{
    if (us_engine_enter(self) < 0) return -1;
    if (self->batch.nlines == 0) {
        PyErr_SetString(PyExc_RuntimeError, "no current batch: call next_batch first");
        return -1;
    }
    if (keyed && !self->batch.deferred_done) {
        PyErr_SetString(PyExc_RuntimeError, "the batch has deferred lines: call set_deferred");
        return -1;
    }
    return 0;
}

/* The bytes of a line's key: in the arena (made in C or given by Python) or the line itself. */
static inline const uint8_t *us_engine_key_ptr(const LineEngine *self, const us_line *line)
{
    return (line->key_in_arena ? self->batch.arena : self->in.buf) + line->key_off;
}

/* line_engine.c: index the batch's keys (keys.line), with room for their digests and flags. */
int us_engine_index_keys(LineEngine *self);

/* A docstring of a method defined outside line_engine.c, for the type's method table there. */
#define US_ENGINE_DOC(name, text) const char name[] = PyDoc_STR(text)

/* The methods each file defines for the type's method table, with their docstrings.
 * line_engine_input.c: */
extern const char us_engine_feed_doc[], us_engine_end_input_doc[], us_engine_next_batch_doc[],
    us_engine_start_doc[], us_engine_close_input_doc[], us_engine_stop_doc[];
PyObject *us_engine_feed(LineEngine *self, PyObject *data);
PyObject *us_engine_end_input(LineEngine *self, PyObject *unused);
PyObject *us_engine_next_batch(LineEngine *self, PyObject *args, PyObject *kwargs);
PyObject *us_engine_start(LineEngine *self, PyObject *args, PyObject *kwargs);
PyObject *us_engine_close_input(LineEngine *self, PyObject *args, PyObject *kwargs);
PyObject *us_engine_stop(LineEngine *self, PyObject *unused);
/* line_engine_filters.c: */
extern const char us_engine_bloom_add_doc[], us_engine_bloom_test_doc[],
    us_engine_bloom_test_also_doc[], us_engine_bloom_add_layers_doc[],
    us_engine_bloom_commit_doc[], us_engine_exact_step_doc[];
PyObject *us_engine_bloom_add(LineEngine *self, PyObject *filter);
PyObject *us_engine_bloom_test(LineEngine *self, PyObject *filter);
PyObject *us_engine_bloom_test_also(LineEngine *self, PyObject *filter);
PyObject *us_engine_bloom_add_layers(LineEngine *self, PyObject *args);
PyObject *us_engine_bloom_commit(LineEngine *self, PyObject *filter);
PyObject *us_engine_exact_step(LineEngine *self, PyObject *args);

#endif
