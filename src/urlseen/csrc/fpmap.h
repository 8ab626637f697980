/* fpmap.h: a growing hash map from 16-byte fingerprints to a 64-bit value.
 *
 * Why: the fingerprint library stages a batch's new records as one row (exact/staging.py) and
 * must still answer look-ups of them from memory: a million staged fingerprints in a Python dict
 * cost ~150 bytes each (the bytes objects kept alive, the table) and a Python operation per
 * insert; here they cost ~24-48 bytes and no Python object.
 *
 * Open addressing with linear probing over 24-byte slots, grown (doubled) at 3/4 full. The
 * keys are digests, already uniform; they are mixed anyway, so any 16 bytes work. The all-zero
 * fingerprint marks an empty slot and is kept apart. Pure C, no allocation: the caller owns
 * the slot arrays (us_fpmap_room says when a larger one is needed, us_fpmap_move fills it).
 */
#ifndef URLSEEN_FPMAP_H
#define URLSEEN_FPMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t a, b; /* the fingerprint's bytes 0-7 and 8-15, little-endian; 0, 0: empty */
    uint64_t value;
} us_fpmap_slot;

typedef struct {
    us_fpmap_slot *slots; /* capacity slots (a power of two), or NULL while empty */
    uint64_t capacity;
    uint64_t count;       /* entries, the zero fingerprint included */
    int has_zero;         /* the all-zero fingerprint is in, with zero_value */
    uint64_t zero_value;
} us_fpmap;

/* The capacity (a power of two) the map needs to take `more` entries within 3/4 full, or 0 if
 * it has room already. */
uint64_t us_fpmap_room(const us_fpmap *m, uint64_t more);

/* Move every entry into `slots` (capacity of them, zeroed, from us_fpmap_room), which the map
 * then uses; returns its former slot array for the caller to free. */
us_fpmap_slot *us_fpmap_move(us_fpmap *m, us_fpmap_slot *slots, uint64_t capacity);

/* Insert fp with value if absent: 1 if inserted, 0 if it was there (value left as it was).
 * The map must have room (us_fpmap_room(m, 1) == 0). */
int us_fpmap_insert(us_fpmap *m, const uint8_t fp[16], uint64_t value);

/* Hint that fp is about to be inserted or looked up (its slot is fetched into the cache). */
void us_fpmap_prefetch(const us_fpmap *m, const uint8_t fp[16]);

/* 1 and *value if fp is in, else 0. */
int us_fpmap_get(const us_fpmap *m, const uint8_t fp[16], uint64_t *value);

/* Copy every entry into out (room for m->count) in the fingerprints' byte order (memcmp's,
 * SQLite's for blobs); start is scratch room for US_FPMAP_BUCKETS counts. */
#define US_FPMAP_BUCKETS 65537u
void us_fpmap_sorted(const us_fpmap *m, us_fpmap_slot *out, uint64_t *start);

/* Calls fn(fp, value, arg) for every entry, in slot order; stops at the first nonzero return
 * and returns it. */
int us_fpmap_each(const us_fpmap *m, int (*fn)(const uint8_t fp[16], uint64_t value, void *arg),
                  void *arg);

#endif
