/* fpmap.c: see fpmap.h. */
#include "csrc/fpmap.h"

#include "csrc/bytes.h"

#include <stdlib.h>

static inline uint64_t slot_of(uint64_t a, uint64_t b, uint64_t mask)
{
    uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ull)) * 0xD6E8FEB86659FD93ull;
    return (h ^ (h >> 32)) & mask;
}

/* Place (a, b, value), known absent, in slots of size mask + 1 with room to spare. */
static void place(us_fpmap_slot *slots, uint64_t mask, uint64_t a, uint64_t b, uint64_t value)
{
    uint64_t i = slot_of(a, b, mask);
    while (slots[i].a | slots[i].b) i = (i + 1) & mask;
    slots[i].a = a;
    slots[i].b = b;
    slots[i].value = value;
}

uint64_t us_fpmap_room(const us_fpmap *m, uint64_t more)
{
    uint64_t capacity = m->capacity ? m->capacity : 1024;
    while (4 * (m->count + more) > 3 * capacity) capacity *= 2;
    return capacity == m->capacity ? 0 : capacity;
}

us_fpmap_slot *us_fpmap_move(us_fpmap *m, us_fpmap_slot *slots, uint64_t capacity)
{
    for (uint64_t i = 0; i < m->capacity; i++) {
        const us_fpmap_slot *s = &m->slots[i];
        if (s->a | s->b) place(slots, capacity - 1, s->a, s->b, s->value);
    }
    us_fpmap_slot *old = m->slots;
    m->slots = slots;
    m->capacity = capacity;
    return old;
}

void us_fpmap_prefetch(const us_fpmap *m, const uint8_t fp[16])
{
    if (m->capacity == 0) return;
    uint64_t i = slot_of(us_load64_le(fp), us_load64_le(fp + 8), m->capacity - 1);
    __builtin_prefetch(&m->slots[i]);
}

int us_fpmap_insert(us_fpmap *m, const uint8_t fp[16], uint64_t value)
{
    uint64_t a = us_load64_le(fp), b = us_load64_le(fp + 8);
    if (!(a | b)) {
        if (m->has_zero) return 0;
        m->has_zero = 1;
        m->zero_value = value;
        m->count++;
        return 1;
    }
    uint64_t mask = m->capacity - 1, i = slot_of(a, b, mask);
    for (;; i = (i + 1) & mask) {
        us_fpmap_slot *s = &m->slots[i];
        if (s->a == a && s->b == b) return 0;
        if (!(s->a | s->b)) {
            s->a = a;
            s->b = b;
            s->value = value;
            m->count++;
            return 1;
        }
    }
}

int us_fpmap_get(const us_fpmap *m, const uint8_t fp[16], uint64_t *value)
{
    uint64_t a = us_load64_le(fp), b = us_load64_le(fp + 8);
    if (!(a | b)) {
        if (m->has_zero) *value = m->zero_value;
        return m->has_zero;
    }
    if (m->capacity == 0) return 0;
    uint64_t mask = m->capacity - 1, i = slot_of(a, b, mask);
    for (;; i = (i + 1) & mask) {
        const us_fpmap_slot *s = &m->slots[i];
        if (s->a == a && s->b == b) {
            *value = s->value;
            return 1;
        }
        if (!(s->a | s->b)) return 0;
    }
}

/* Order of two slots by their fingerprints' bytes: the little-endian halves byte-swapped. */
static int by_bytes(const void *x, const void *y)
{
    const us_fpmap_slot *p = x, *q = y;
    uint64_t pa = __builtin_bswap64(p->a), qa = __builtin_bswap64(q->a);
    if (pa != qa) return pa < qa ? -1 : 1;
    uint64_t pb = __builtin_bswap64(p->b), qb = __builtin_bswap64(q->b);
    return pb < qb ? -1 : pb > qb;
}

/* The first two bytes of a slot's fingerprint, as a number: its bucket in us_fpmap_sorted. */
static inline unsigned first_two(const us_fpmap_slot *s)
{
    return (unsigned)(s->a & 0xFFFF) >> 8 | (unsigned)(s->a & 0xFF) << 8;
}

void us_fpmap_sorted(const us_fpmap *m, us_fpmap_slot *out, uint64_t *start)
{
    /* A counting pass by the first two bytes (digests spread evenly over the 65,536
     * buckets), then each small bucket sorted in place: linear where one qsort is not. */
    for (unsigned i = 0; i < US_FPMAP_BUCKETS; i++) start[i] = 0;
    if (m->has_zero) start[1]++;
    for (uint64_t i = 0; i < m->capacity; i++)
        if (m->slots[i].a | m->slots[i].b) start[first_two(&m->slots[i]) + 1]++;
    for (unsigned i = 1; i <= 65536; i++) start[i] += start[i - 1];
    if (m->has_zero) out[start[0]++] = (us_fpmap_slot){0, 0, m->zero_value};
    for (uint64_t i = 0; i < m->capacity; i++)
        if (m->slots[i].a | m->slots[i].b) out[start[first_two(&m->slots[i])]++] = m->slots[i];
    /* start[b] is now the end of bucket b, the start of bucket b + 1 */
    uint64_t from = 0;
    for (unsigned b = 0; b < 65536; b++) {
        qsort(out + from, start[b] - from, sizeof *out, by_bytes);
        from = start[b];
    }
}

int us_fpmap_each(const us_fpmap *m, int (*fn)(const uint8_t fp[16], uint64_t value, void *arg),
                  void *arg)
{
    uint8_t fp[16];
    if (m->has_zero) {
        for (int j = 0; j < 16; j++) fp[j] = 0;
        int r = fn(fp, m->zero_value, arg);
        if (r) return r;
    }
    for (uint64_t i = 0; i < m->capacity; i++) {
        const us_fpmap_slot *s = &m->slots[i];
        if (!(s->a | s->b)) continue;
        us_store64_le(fp, s->a);
        us_store64_le(fp + 8, s->b);
        int r = fn(fp, s->value, arg);
        if (r) return r;
    }
    return 0;
}
