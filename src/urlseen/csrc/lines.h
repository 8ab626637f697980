/* lines.h: the dedup job's per-line work on raw bytes: splitting a buffer into lines, the
 * line-to-key rules of urlseen.job.linekeys for the lines they decide without Python, the
 * canonical-URL shortcut of urlseen.canonical, and a set of a batch's digests.
 *
 * The rules (urlseen/linekeys.py is the reference; tests compare the two on the dev file and on
 * generated streams):
 *  - a line ends at "\n" (not part of it); a last line may have none;
 *  - one trailing "\r" is not part of the key (it stays in the line that is written out);
 *  - a line of ASCII whitespace only (bytes.strip()) is empty: no key;
 *  - without canonicalization the key is the line's bytes;
 *  - with it, a line that us_canonical_plain or us_canonical_ascii keys gets its key here; every other line
 *    (not ASCII, over-long, not an http(s) URL of plain characters...) is deferred to Python,
 *    which applies the whole reference rule to it (LineKeyer.key), counting included.
 * Pure C: no Python.h, no allocation.
 */
#ifndef URLSEEN_LINES_H
#define URLSEEN_LINES_H

#include <stddef.h>
#include <stdint.h>

#include "hash128.h"

enum us_line_kind {
    US_LINE_EMPTY = 0, /* no URL: skipped and counted */
    US_LINE_KEY = 1,   /* key known: key_off / key_len */
    US_LINE_DEFER = 2, /* Python decides the key */
};

/* One line of a batch. off/len: the line in the input buffer, without its "\n". The key lives in
 * the input buffer, or in the key arena when key_in_arena is set (offsets, not pointers: either
 * buffer may move while the batch is built). */
typedef struct {
    size_t off, len;
    size_t key_off, key_len;
    uint8_t kind;
    uint8_t key_in_arena;
    uint8_t terminated; /* the line had its "\n" in the input */
    uint8_t key_text;   /* the key is text (UTF-8): canonicalized, not the raw line */
    uint8_t memo;       /* deferred, and its key may be remembered (us_key_memo) */
    uint8_t hashed;     /* its key's digest is already made (the line engine's worker) */
    uint32_t same;      /* 1 + the index of the batch's first line of the same bytes, whose
                           key this line took (repeats.h); 0: keyed itself */
} us_line;

/* The length of the longest of n lines, at most max (the canonicalizer's scratch: one byte
 * more). */
static inline size_t us_longest_line(const us_line *lines, size_t n, size_t max)
{
    size_t longest = 0;
    for (size_t i = 0; i < n; i++)
        if (lines[i].len > longest) longest = lines[i].len;
    return longest < max ? longest : max;
}

/* Split up to max_lines complete lines of buf[*pos, len) into out[]; *pos moves past them.
 * A line is complete when its "\n" is in the buffer, or, with at_end, when the buffer ends
 * (the last line of an input without a newline). Returns the number of lines. */
size_t us_split_lines(const uint8_t *buf, size_t len, size_t *pos, size_t max_lines, int at_end,
                      us_line *out);

/* bytes.isspace() of one byte: space, \t, \n, \v, \f, \r. */
static inline int us_is_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* 1 if the n bytes are ASCII whitespace only (Python's bytes.strip() leaves nothing). */
int us_is_blank(const uint8_t *s, size_t n);

/* Decide the key of line->off/len in buf when the rules allow it without Python: sets kind and,
 * for US_LINE_KEY, the key (in buf, or written to arena[*arena_used ...] within arena_cap).
 * scratch: at least max_canonical bytes the canonicalizer may use. */
void us_line_key(const uint8_t *buf, us_line *line, int canonicalize, size_t max_canonical,
                 uint8_t *arena, size_t arena_cap, size_t *arena_used, uint8_t *scratch);

/* urlseen.canonical's shortcut: if url (n bytes) is an http(s) URL that canonicalize_url returns
 * unchanged apart from dropping the fragment, adding "/" for an empty path and sorting a plain
 * query, write that canonical form to out (at most cap bytes) and return its length. Returns 0
 * when w3lib must decide (anything else, or cap too small). Same pattern as
 * canonical._PLAIN_HTTP_URL and canonical._sort_plain_query; the tests hold them equal. */
size_t us_canonical_plain(const uint8_t *url, size_t n, uint8_t *out, size_t cap);

/* w3lib's canonicalize_url for the http(s) URLs of printable ASCII that it treats as plain text
 * (no userinfo, no "\\" or ";" or dot segment in the path, a port of 1-4 digits without a
 * leading zero), written to out (at most cap bytes): scheme and host lower-cased, the path's
 * percent-escapes normalised (decoded where the byte is safe in a path, upper-case hex
 * otherwise, %25 %2F %3B %3F kept), the query's fields split at "&" and "=", decoded ("+" is a
 * space), sorted by (name, value) bytes and re-encoded (unreserved bytes as is, space as "+",
 * the rest %XX), the fragment dropped. Returns the key's length, or 0 to let w3lib decide.
 * scratch: at least n bytes. The tests compare it with w3lib on every dev-file line and on
 * generated URLs; us_canonical_plain is its fast case (no byte to decode or encode). */
size_t us_canonical_ascii(const uint8_t *url, size_t n, uint8_t *out, size_t cap,
                          uint8_t *scratch);

/* The most query fields the canonicalizers sort; more go to w3lib. */
#define US_CANONICAL_MAX_FIELDS 128

/* A set of digests, open addressing over caller-owned slots (a power of two, at least twice the
 * keys it will hold): which keys of a batch were already new in it. */
typedef struct {
    us_hash128 *slots;
    uint8_t *used;
    size_t mask;
} us_digest_set;

/* Empty the set over nslots slots (a power of two). */
void us_digest_set_init(us_digest_set *s, us_hash128 *slots, uint8_t *used, size_t nslots);
/* Insert h: 1 if it was not there yet, else 0. */
int us_digest_set_add(us_digest_set *s, us_hash128 h);

/* A memo of keys that Python computed for deferred lines, by the line's digest: repeats of a
 * line that is not plainly canonical (a polled feed repeats most of them) are keyed here without
 * Python. Open addressing over caller-owned slots (a power of two) and a caller-owned arena of
 * key bytes; when either fills, the memo starts over empty. A slot with len 0 is free (keys are
 * never empty). */
typedef struct {
    us_hash128 h;
    uint32_t off, len;
} us_memo_slot;

typedef struct {
    us_memo_slot *slots;
    size_t mask, used;
    uint8_t *arena;
    size_t arena_cap, arena_used;
} us_key_memo;

void us_key_memo_init(us_key_memo *m, us_memo_slot *slots, size_t nslots, uint8_t *arena,
                      size_t arena_cap);
/* The key remembered for h (its length in *len), or NULL. */
const uint8_t *us_key_memo_get(const us_key_memo *m, us_hash128 h, size_t *len);
/* Remember key (len >= 1) for h; a key too long for the arena is not kept. */
void us_key_memo_put(us_key_memo *m, us_hash128 h, const uint8_t *key, size_t len);

#endif
