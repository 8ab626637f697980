/* bindings/line_worker.c: see line_worker.h. */
#include "line_worker.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* ---- memory: the worker has no GIL, so no Python exception either ------------------------- */

static int wgrow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *q = PyMem_RawRealloc(*p, n * size);
    if (q == NULL) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* ---- building a batch (the worker thread) ------------------------------------------------- */

static void add_line(us_batch *b, size_t off, size_t len, int terminated)
{
    us_line *line = &b->lines[b->nlines++];
    memset(line, 0, sizeof *line);
    line->off = line->key_off = off;
    line->len = len;
    line->kind = US_LINE_EMPTY;
    line->terminated = (uint8_t)terminated;
}

static const uint8_t *key_of(const us_batch *b, const us_line *line)
{
    return (line->key_in_arena ? b->arena : b->buf) + line->key_off;
}

/* Hash the keys the C rules gave (deferred lines are keyed and hashed later, by the main
 * thread): MD5 several at a time, the other hashes one by one; a repeat of an earlier line of
 * the batch (line->same) takes that line's digest. */
static int hash_batch(us_worker *w, us_batch *b)
{
    if (wgrow((void **)&b->ldig, &b->ldig_cap, b->nlines, sizeof(us_hash128)) < 0) return -1;
    if (w->hash_id != US_HASH_MD5) {
        for (size_t i = 0; i < b->nlines; i++) {
            us_line *line = &b->lines[i];
            if (line->kind != US_LINE_KEY) continue;
            if (line->same) {
                b->ldig[i] = b->ldig[line->same - 1];
            } else {
                b->ldig[i] = us_digest(w->hash_id, key_of(b, line), line->key_len, w->seed);
            }
            line->hashed = 1;
        }
        return 0;
    }
    if (b->nlines > w->md5_cap) {
        size_t n = b->nlines;
        const uint8_t **d = PyMem_RawRealloc(w->md5_data, n * sizeof *d);
        if (d != NULL) w->md5_data = d;
        size_t *l = PyMem_RawRealloc(w->md5_len, n * sizeof *l);
        if (l != NULL) w->md5_len = l;
        size_t *li = PyMem_RawRealloc(w->md5_line, n * sizeof *li);
        if (li != NULL) w->md5_line = li;
        uint8_t(*o)[16] = PyMem_RawRealloc(w->md5_out, n * 16);
        if (o != NULL) w->md5_out = o;
        if (d == NULL || l == NULL || li == NULL || o == NULL) return -1;
        w->md5_cap = n;
    }
    size_t m = 0;
    for (size_t i = 0; i < b->nlines; i++) {
        const us_line *line = &b->lines[i];
        if (line->kind != US_LINE_KEY || line->same) continue;
        w->md5_data[m] = key_of(b, line);
        w->md5_len[m] = line->key_len;
        w->md5_line[m++] = i;
    }
    us_md5_many(w->md5_data, w->md5_len, m, (uint32_t)w->seed, w->md5_out);
    for (size_t j = 0; j < m; j++) {
        size_t i = w->md5_line[j];
        b->ldig[i].h1 = us_load64_le(w->md5_out[j]);
        b->ldig[i].h2 = us_load64_le(w->md5_out[j] + 8);
        b->lines[i].hashed = 1;
    }
    for (size_t i = 0; i < b->nlines; i++) { /* the repeats: their first line's digest */
        us_line *line = &b->lines[i];
        if (line->kind != US_LINE_KEY || !line->same) continue;
        b->ldig[i] = b->ldig[line->same - 1];
        line->hashed = 1;
    }
    return 0;
}

/* 1 if the main thread has taken every batch built: it waits for this one, so the batch goes
 * to it split only (keyed 0: next_batch keys it, and the filter step hashes it, without the
 * GIL) while this thread builds the next. The split follows the load: with a slow filter step
 * (the exact filter's) batches wait and this thread keys and hashes them all; with the Bloom
 * filter's fast probes the two threads share the keying (canonicalization) and hashing instead
 * of the main thread idling. */
static int main_waits(us_worker *w)
{
    pthread_mutex_lock(&w->mu);
    int waits = w->built == w->taken;
    pthread_mutex_unlock(&w->mu);
    return waits;
}

/* Key (and hash) the batch's lines, as LineEngine.next_batch does for the serial engine. */
static int finish_batch(us_worker *w, us_batch *b)
{
    b->keyed = !main_waits(w);
    if (!b->keyed) return 0;
    size_t n = b->nlines;
    if (w->canonicalize) {
        size_t longest = us_longest_line(b->lines, n, w->max_canonical);
        /* a canonical key is at most 3 bytes per byte of its line (escapes), plus "/" */
        if (wgrow((void **)&b->arena, &b->arena_cap, 3 * b->len + 2 * n + 16, 1) < 0 ||
            wgrow((void **)&w->scratch, &w->scratch_cap, longest + 1, 1) < 0)
            return -1;
    }
    /* repeats are looked for where keying or hashing a line costs more than finding them */
    us_repeat_slot *rep = NULL;
    if (w->canonicalize || (w->hashing && w->hash_id == US_HASH_MD5)) {
        if (wgrow((void **)&w->rep, &w->rep_cap, us_repeat_slots(n), sizeof *w->rep) < 0)
            return -1;
        rep = w->rep;
    }
    size_t used = 0, empty, deferred;
    us_key_batch(b->buf, b->lines, n, w->canonicalize, w->max_canonical, b->arena, b->arena_cap,
                 &used, w->scratch, rep, &empty, &deferred);
    b->arena_used = used;
    b->empty = empty;
    b->deferred = deferred;
    return w->hashing ? hash_batch(w, b) : 0;
}

/* The next free slot, emptied (NULL: stopped). */
static us_batch *acquire(us_worker *w)
{
    us_batch *b = &w->slots[w->built % w->nslots];
    pthread_mutex_lock(&w->mu);
    while (!w->stop && b->ready) pthread_cond_wait(&w->wake, &w->mu);
    int stop = w->stop;
    pthread_mutex_unlock(&w->mu);
    if (stop) return NULL;
    b->len = b->open = b->nlines = b->arena_used = 0;
    b->bytes = b->empty = b->deferred = 0;
    return b;
}

/* Finish the batch and hand it to the main thread. */
static int publish(us_worker *w, us_batch *b)
{
    if (finish_batch(w, b) < 0) return -1;
    pthread_mutex_lock(&w->mu);
    b->ready = 1;
    w->built++;
    pthread_cond_broadcast(&w->ready);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Lines from data[0, n) into batches: 0 done, 1 stopped, -1 out of memory. */
static int consume(us_worker *w, us_batch **current, const uint8_t *data, size_t n)
{
    size_t p = 0;
    while (p < n) {
        if (*current == NULL) {
            if ((*current = acquire(w)) == NULL) return 1;
            if (wgrow((void **)&(*current)->lines, &(*current)->lines_cap, w->batch_size,
                      sizeof(us_line)) < 0)
                return -1;
        }
        us_batch *b = *current;
        size_t base = b->len, start = b->open, q = p;
        while (b->nlines < w->batch_size) {
            const uint8_t *nl = memchr(data + q, '\n', n - q);
            if (nl == NULL) break;
            size_t end = (size_t)(nl - data);
            add_line(b, start, base + (end - p) - start, 1);
            q = end + 1;
            start = base + (q - p);
        }
        size_t take = (b->nlines == w->batch_size ? q : n) - p;
        if (wgrow((void **)&b->buf, &b->cap, base + take + 1, 1) < 0) return -1;
        memcpy(b->buf + base, data + p, take);
        b->len = base + take;
        b->bytes += take;
        b->open = start;
        p += take;
        if (b->nlines == w->batch_size) {
            if (publish(w, b) < 0) return -1;
            *current = NULL;
        }
    }
    return 0;
}

/* An input ended: its last line ends here even without a "\n" (which is not counted). */
static int end_input(us_worker *w, us_batch **current)
{
    us_batch *b = *current;
    if (b == NULL || b->open == b->len) return 0;
    add_line(b, b->open, b->len - b->open, 0);
    b->open = b->len;
    if (b->nlines < w->batch_size) return 0;
    *current = NULL;
    return publish(w, b);
}

static void *worker_main(void *arg)
{
    us_worker *w = arg;
    us_batch *current = NULL;
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->q_read == w->q_write && !w->closed)
            pthread_cond_wait(&w->wake, &w->mu);
        if (w->stop) break;
        if (w->q_read == w->q_write) { /* closed, and everything read */
            int failed = w->failed;
            pthread_mutex_unlock(&w->mu);
            if (!failed) { /* the last batch, short; a cut line still ends it */
                rc = end_input(w, &current);
                if (rc == 0 && current != NULL && current->nlines) rc = publish(w, current);
            }
            pthread_mutex_lock(&w->mu);
            break;
        }
        us_block *block = &w->ring[w->q_read % US_WORKER_RING];
        pthread_mutex_unlock(&w->mu);
        if (block->end_input)
            rc = end_input(w, &current);
        else
            rc = consume(w, &current, block->view.buf, (size_t)block->view.len);
        pthread_mutex_lock(&w->mu);
        if (rc != 0) break;
        w->q_read++;
        pthread_cond_broadcast(&w->space);
    }
    if (rc < 0) w->error = ENOMEM;
    w->ended = 1;
    pthread_cond_broadcast(&w->ready);
    pthread_cond_broadcast(&w->space);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- the Python side (the GIL held) --------------------------------------------------------- */

int us_worker_start(us_worker *w, size_t batch_size, int canonicalize, size_t max_canonical,
                    int hashing, int hash_id, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    w->batch_size = batch_size;
    /* a big batch (the library kinds' 65536 lines) is many milliseconds of the filter's work:
     * one built ahead keeps the worker ahead, and each one more would hold ~7 MB */
    w->nslots = batch_size > US_WORKER_BIG_BATCH ? 1 : US_WORKER_SLOTS;
    w->canonicalize = canonicalize;
    w->max_canonical = max_canonical;
    w->hashing = hashing;
    w->hash_id = hash_id;
    w->seed = seed;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->ready, NULL);
    pthread_cond_init(&w->space, NULL);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        w->ended = 1;
        return -1;
    }
    w->running = 1;
    return 0;
}

/* Wait on cond (the mutex held) while *flag_fn says so, the GIL released; every 50 ms the
 * signals are checked (Ctrl-C while the input is a silent pipe). -1 with an exception. */
static int wait_gil_free(us_worker *w, pthread_cond_t *cond, int (*more)(us_worker *))
{
    for (;;) {
        int again;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&w->mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 50 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while ((again = more(w)) && pthread_cond_timedwait(cond, &w->mu, &until) != ETIMEDOUT) {
        }
        pthread_mutex_unlock(&w->mu);
        Py_END_ALLOW_THREADS
        if (!again) return 0;
        if (PyErr_CheckSignals() < 0) return -1;
    }
}

/* Release the views of the blocks the worker has read. */
static void release_read(us_worker *w)
{
    Py_buffer done[US_WORKER_RING];
    size_t k = 0;
    pthread_mutex_lock(&w->mu);
    for (; w->q_release < w->q_read; w->q_release++) {
        us_block *block = &w->ring[w->q_release % US_WORKER_RING];
        if (!block->end_input) done[k++] = block->view;
    }
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < k; i++) PyBuffer_Release(&done[i]);
}

static int ring_full(us_worker *w)
{
    return !w->stop && !w->ended && w->q_write - w->q_read >= US_WORKER_DEPTH;
}

static int push(us_worker *w, Py_buffer *view)
{
    for (;;) {
        release_read(w);
        pthread_mutex_lock(&w->mu);
        int gone = w->stop || w->ended, closed = w->closed;
        if (!gone && !closed && w->q_write - w->q_read < US_WORKER_DEPTH &&
            w->q_write - w->q_release < US_WORKER_RING) {
            us_block *block = &w->ring[w->q_write % US_WORKER_RING];
            block->end_input = view == NULL;
            if (view != NULL) block->view = *view;
            w->q_write++;
            pthread_cond_signal(&w->wake);
            pthread_mutex_unlock(&w->mu);
            return 1;
        }
        pthread_mutex_unlock(&w->mu);
        if (gone || closed) {
            if (view != NULL) PyBuffer_Release(view);
            if (!closed) return 0;
            PyErr_SetString(PyExc_RuntimeError, "the line engine's input is closed");
            return -1;
        }
        if (wait_gil_free(w, &w->space, ring_full) < 0) {
            if (view != NULL) PyBuffer_Release(view);
            return -1;
        }
    }
}

int us_worker_feed(us_worker *w, Py_buffer *view) { return push(w, view); }

int us_worker_end_input(us_worker *w) { return push(w, NULL); }

void us_worker_close(us_worker *w, int failed)
{
    pthread_mutex_lock(&w->mu);
    if (!w->closed) {
        w->closed = 1;
        w->failed = failed;
    }
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

static int nothing_ready(us_worker *w)
{
    return !w->slots[w->taken % w->nslots].ready && !w->ended && !w->stop;
}

us_batch *us_worker_next(us_worker *w)
{
    release_read(w);
    pthread_mutex_lock(&w->mu);
    int wait = nothing_ready(w);
    pthread_mutex_unlock(&w->mu);
    /* the GIL is let go only to wait: once let go, the feeder may hold it for a while */
    if (wait && wait_gil_free(w, &w->ready, nothing_ready) < 0) return NULL;
    us_batch *b = &w->slots[w->taken % w->nslots];
    pthread_mutex_lock(&w->mu);
    int ready = b->ready, stop = w->stop, error = w->error;
    pthread_mutex_unlock(&w->mu);
    if (ready) {
        w->taken++;
        return b;
    }
    if (stop)
        PyErr_SetString(PyExc_RuntimeError, "the line engine was stopped");
    else if (error)
        PyErr_NoMemory();
    return NULL;
}

void us_worker_done(us_worker *w, us_batch *b)
{
    pthread_mutex_lock(&w->mu);
    b->ready = 0;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

void us_worker_stop(us_worker *w)
{
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_cond_broadcast(&w->ready);
    pthread_cond_broadcast(&w->space);
    pthread_mutex_unlock(&w->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(w->thread, NULL);
    Py_END_ALLOW_THREADS
    w->running = 0;
    pthread_mutex_lock(&w->mu);
    w->q_read = w->q_write; /* unread blocks: released with the read ones */
    pthread_mutex_unlock(&w->mu);
    release_read(w);
}

void us_worker_free(us_worker *w)
{
    for (size_t i = 0; i < US_WORKER_SLOTS; i++) {
        us_batch *b = &w->slots[i];
        PyMem_RawFree(b->buf);
        PyMem_RawFree(b->lines);
        PyMem_RawFree(b->arena);
        PyMem_RawFree(b->ldig);
    }
    PyMem_RawFree(w->scratch);
    PyMem_RawFree(w->rep);
    PyMem_RawFree(w->md5_data);
    PyMem_RawFree(w->md5_len);
    PyMem_RawFree(w->md5_line);
    PyMem_RawFree(w->md5_out);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->ready);
    pthread_cond_destroy(&w->space);
    memset(w, 0, sizeof *w);
}
