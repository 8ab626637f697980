/* bindings/line_worker.h: the line engine's worker thread (LineEngine.start).
 *
 * Splitting lines, keying them by the C rules and hashing their keys do not depend on the
 * filter's state, so a C thread (no GIL, no Python object) does them a few batches ahead of the
 * thread that runs the filter: the dedup job then keeps two cores busy, where the serial engine
 * left that work on the filter's critical path.
 *
 *   feeder thread (Python)  --us_worker_feed-->  ring of input blocks (Py_buffer views, held)
 *   worker thread (C)       --builds-->          slots: batches of batch_size lines, in order
 *   main thread (Python)    --us_worker_next-->  the next batch, swapped into the LineEngine
 *
 * A batch holds a copy of its lines' bytes (offsets into its own buffer), so the worker never
 * touches a batch the main thread holds. Batches have exactly batch_size lines but the last
 * (as next_batch's), the last line of an input may lack its "\n" (not counted in its bytes),
 * and an input closed as failed drops the lines of its unfinished batch, as the serial engine
 * does when the chunks raise.
 *
 * Locking: one mutex for the ring and the slots' states; the worker never takes the GIL, and
 * no thread waits for the GIL while holding the mutex.
 */
#ifndef URLSEEN_BINDINGS_LINE_WORKER_H
#define URLSEEN_BINDINGS_LINE_WORKER_H

#include "common.h"

#include <pthread.h>

#include "csrc/lines.h"
#include "csrc/repeats.h"

#define US_WORKER_SLOTS 2 /* batches built ahead of the engine's (a third: +1-2 MiB peak RSS) */
#define US_WORKER_BIG_BATCH 16384 /* lines: a batch this large is built one ahead only */
#define US_WORKER_DEPTH 2 /* input blocks queued before feed waits */
#define US_WORKER_RING 4  /* input blocks held: queued, and read but not yet released */

/* One batch, as the worker built it: the arrays of LineEngine's current batch, swapped in. */
typedef struct {
    uint8_t *buf;
    size_t cap, len;
    size_t open; /* offset of the line not ended yet (len if none) */
    us_line *lines;
    size_t nlines, lines_cap;
    uint8_t *arena;
    size_t arena_cap, arena_used;
    us_hash128 *ldig; /* per line: the digest of its key, where line->hashed */
    size_t ldig_cap;
    size_t bytes, empty, deferred;
    int keyed; /* keyed (and hashed) here; else split only, for the main thread to key */
    int ready;
} us_batch;

typedef struct {
    Py_buffer view;
    int end_input; /* a marker: the current input ends here (no view) */
} us_block;

typedef struct {
    int running;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* the worker: input, a free slot, or stop */
    pthread_cond_t ready; /* the main thread: a batch ready, or the end */
    pthread_cond_t space; /* the feeder: room in the ring */
    int stop, closed, failed, ended, error;
    us_block ring[US_WORKER_RING];
    size_t q_write, q_read, q_release;
    us_batch slots[US_WORKER_SLOTS];
    size_t nslots;       /* slots in use: one for big batches (memory), else all */
    size_t built, taken; /* slots built by the worker, taken by the main thread */
    size_t batch_size, max_canonical;
    int canonicalize;
    int hashing, hash_id; /* hash the keys the C rules give, with hash_id and seed */
    uint64_t seed;
    /* the worker's own scratch: the canonicalizer's, and MD5's batch arrays */
    uint8_t *scratch;
    size_t scratch_cap;
    us_repeat_slot *rep; /* the repeats' table (csrc/repeats.h), when they are looked for */
    size_t rep_cap;
    const uint8_t **md5_data;
    size_t *md5_len, *md5_line;
    uint8_t (*md5_out)[16];
    size_t md5_cap;
} us_worker;

/* Start the thread (with the GIL): -1 with an exception. hashing: the keys' digests are made
 * with (hash_id, seed) as the batches are built. */
int us_worker_start(us_worker *w, size_t batch_size, int canonicalize, size_t max_canonical,
                    int hashing, int hash_id, uint64_t seed);
/* Queue the bytes of `view` (taken over: released later, with the GIL), waiting while the ring
 * is full: 1 queued, 0 the worker has stopped (the view released), -1 with an exception. */
int us_worker_feed(us_worker *w, Py_buffer *view);
/* The current input has ended (its last line may lack a "\n"): as us_worker_feed. */
int us_worker_end_input(us_worker *w);
/* No more input; failed: the input broke, drop the unfinished batch. */
void us_worker_close(us_worker *w, int failed);
/* The next batch, waiting for it with the GIL released (and signals checked); NULL at the end
 * of the input (no exception) or with an exception (MemoryError, KeyboardInterrupt...). Hand it
 * back with us_worker_done before the next call. */
us_batch *us_worker_next(us_worker *w);
void us_worker_done(us_worker *w, us_batch *b);
/* Stop the thread and wait for it; release every held view (with the GIL). Idempotent. */
void us_worker_stop(us_worker *w);
/* Free the slots' and the worker's memory (after us_worker_stop). */
void us_worker_free(us_worker *w);

#endif
