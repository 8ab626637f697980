/* repeats.h: keying a batch's lines once per distinct line.
 *
 * A crawl's stream repeats most of its lines, and mostly close together (the dev file's first
 * million lines, a polled feed, hold 12-17% distinct lines per batch of 8,192-65,536). A line's
 * key and its digest depend only on its bytes, so a line whose bytes an earlier line of the
 * same batch has takes that line's key (and, where the hash is costly, its digest) instead of
 * being canonicalized and hashed again. Lines are compared byte for byte: the answer is exact
 * whatever the hash used to find them.
 *
 * us_key_batch keys lines[0 .. n) as us_line_key does each, and sets line->same to 1 + the
 * index of the batch's first line with the same bytes (0 for that first line itself), which
 * the hashing loops read to copy a digest. Pure C, header only, no allocation.
 */
#ifndef URLSEEN_REPEATS_H
#define URLSEEN_REPEATS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lines.h"
#include "xxh3.h"

/* An open-addressing slot: line = 1 + a line index (0: free), tag = its hash's high half. */
typedef struct {
    uint32_t tag, line;
} us_repeat_slot;

/* Slots us_key_batch needs for n lines (a power of two, at least twice n). */
static inline size_t us_repeat_slots(size_t n)
{
    size_t s = 64;
    while (s < 2 * n) s *= 2;
    return s;
}

/* The index of the first of lines[0 .. i) with the bytes of lines[i], or i (then remembered). */
static inline size_t us_repeat_first(us_repeat_slot *slots, size_t mask, const uint8_t *buf,
                                     const us_line *lines, size_t i)
{
    const us_line *line = &lines[i];
    const uint8_t *s = buf + line->off;
    uint64_t h = us_xxh3_64(s, line->len, 0);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t p = (size_t)h & mask;; p = (p + 1) & mask) {
        us_repeat_slot *slot = &slots[p];
        if (slot->line == 0) {
            slot->tag = tag;
            slot->line = (uint32_t)i + 1;
            return i;
        }
        const us_line *o = &lines[slot->line - 1];
        if (slot->tag == tag && o->len == line->len && memcmp(buf + o->off, s, line->len) == 0)
            return slot->line - 1;
    }
}

/* Key lines[0 .. n) of buf (us_line_key's arguments), each distinct line once; slots: NULL
 * (key every line, same = 0) or us_repeat_slots(n) of them. Counts the empty and deferred
 * lines into *empty and *deferred. */
static inline void us_key_batch(const uint8_t *buf, us_line *lines, size_t n, int canonicalize,
                                size_t max_canonical, uint8_t *arena, size_t arena_cap,
                                size_t *arena_used, uint8_t *scratch, us_repeat_slot *slots,
                                size_t *empty, size_t *deferred)
{
    size_t mask = slots != NULL ? us_repeat_slots(n) - 1 : 0, e = 0, d = 0;
    if (slots != NULL) memset(slots, 0, (mask + 1) * sizeof *slots);
    for (size_t i = 0; i < n; i++) {
        us_line *line = &lines[i];
        size_t first = slots != NULL ? us_repeat_first(slots, mask, buf, lines, i) : i;
        const uint8_t *s = buf + line->off;
        size_t len = line->len - (line->len && s[line->len - 1] == '\r');
        if (first == i && !canonicalize && len && !us_is_space(s[0])) {
            line->kind = US_LINE_KEY; /* us_line_key's answer for a line that is not blank */
            line->key_off = line->off;
            line->key_len = len;
            line->same = 0;
        } else if (first == i) {
            us_line_key(buf, line, canonicalize, max_canonical, arena, arena_cap, arena_used,
                        scratch);
            line->same = 0;
        } else {
            const us_line *o = &lines[first];
            line->kind = o->kind;
            line->key_in_arena = o->key_in_arena;
            line->key_text = o->key_text;
            line->key_off = o->key_off;
            line->key_len = o->key_len;
            line->same = (uint32_t)first + 1;
        }
        e += line->kind == US_LINE_EMPTY;
        d += line->kind == US_LINE_DEFER;
    }
    *empty = e;
    *deferred = d;
}

#endif
