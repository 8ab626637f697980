/* lines.c: see lines.h. Pure C, no allocation. */
#include "lines.h"

#include <string.h>

size_t us_split_lines(const uint8_t *buf, size_t len, size_t *pos, size_t max_lines, int at_end,
                      us_line *out)
{
    size_t p = *pos, n = 0;
    while (n < max_lines && p < len) {
        const uint8_t *nl = memchr(buf + p, '\n', len - p);
        size_t end;
        if (nl != NULL) {
            end = (size_t)(nl - buf);
        } else if (at_end) {
            end = len;
        } else {
            break;
        }
        us_line *line = &out[n++];
        line->off = p;
        line->len = end - p;
        line->terminated = nl != NULL;
        line->kind = US_LINE_EMPTY;
        line->key_in_arena = 0;
        line->key_text = 0;
        line->memo = 0;
        line->hashed = 0;
        line->same = 0;
        line->key_off = p;
        line->key_len = 0;
        p = nl != NULL ? end + 1 : end;
    }
    *pos = p;
    return n;
}

int us_is_blank(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!us_is_space(s[i])) return 0;
    return 1;
}

void us_line_key(const uint8_t *buf, us_line *line, int canonicalize, size_t max_canonical,
                 uint8_t *arena, size_t arena_cap, size_t *arena_used, uint8_t *scratch)
{
    const uint8_t *s = buf + line->off;
    size_t n = line->len;
    if (n && s[n - 1] == '\r') n--;
    if (us_is_blank(s, n)) {
        line->kind = US_LINE_EMPTY;
        return;
    }
    if (!canonicalize) {
        line->kind = US_LINE_KEY;
        line->key_off = line->off;
        line->key_len = n;
        return;
    }
    line->kind = US_LINE_DEFER;
    if (n > max_canonical) return; /* over-long: Python keys and counts it */
    size_t used = *arena_used;
    size_t k = us_canonical_plain(s, n, arena + used, arena_cap - used);
    if (k == 0) k = us_canonical_ascii(s, n, arena + used, arena_cap - used, scratch);
    if (k == 0) return;
    line->kind = US_LINE_KEY;
    line->key_in_arena = 1;
    line->key_text = 1;
    line->key_off = used;
    line->key_len = k;
    *arena_used = used + k;
}

/* ---- the canonical-URL shortcut ---------------------------------------------------------- */

/* Character classes of canonical._PLAIN_HTTP_URL, one bit each: host [a-z0-9._-], path
 * [A-Za-z0-9._~!$&'()*+,=:@/-], query [A-Za-z0-9._~=&-], fragment [!-~]. Bytes >= 128 are in
 * none (zero-initialised). */
enum { C_HOST = 1, C_PATH = 2, C_QUERY = 4, C_FRAGMENT = 8 };
static const uint8_t CLASSES[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 10, 8, 8, 10, 8, 14, 10, 10, 10, 10, 10, 10, 15, 15, 10,
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 10, 8, 8, 14, 8, 8,
    10, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14,
    14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 8, 8, 8, 8, 15,
    8, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 8, 8, 8, 14, 0,
};

/* The first index >= i of s[0, n) whose byte is not in class c. */
static inline size_t span(const uint8_t *s, size_t i, size_t n, uint8_t c)
{
    /* four bytes a step while they all belong (half the instructions of one at a time) */
    while (i + 4 <= n &&
           (CLASSES[s[i]] & CLASSES[s[i + 1]] & CLASSES[s[i + 2]] & CLASSES[s[i + 3]] & c))
        i += 4;
    while (i < n && (CLASSES[s[i]] & c)) i++;
    return i;
}

#define NOT_CANONICAL SIZE_MAX

/* Past an optional port at i (":" then [1-9][0-9]{0,3}, the only ports this shortcut passes),
   or NOT_CANONICAL when what follows the colon is not one. */
static inline size_t skip_port(const uint8_t *s, size_t i, size_t n)
{
    if (i >= n || s[i] != ':') return i;
    i++;
    if (i >= n || s[i] < '1' || s[i] > '9') return NOT_CANONICAL;
    size_t digits = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    return i - digits > 4 ? NOT_CANONICAL : i;
}

typedef struct {
    const uint8_t *name, *value;
    size_t name_len, value_len;
} field;

static int bytes_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    size_t m = na < nb ? na : nb;
    int c = m ? memcmp(a, b, m) : 0;
    if (c) return c;
    return na < nb ? -1 : na > nb;
}

/* Python's order of (name, value) tuples of ASCII str: by name, then by value. */
static int field_cmp(const field *a, const field *b)
{
    int c = bytes_cmp(a->name, a->name_len, b->name, b->name_len);
    return c ? c : bytes_cmp(a->value, a->value_len, b->value, b->value_len);
}

/* Insertion sort: queries are short, and it is stable (equal pairs are equal bytes). */
static void sort_fields(field *fields, size_t nf)
{
    for (size_t a = 1; a < nf; a++) {
        field f = fields[a];
        size_t b = a;
        while (b > 0 && field_cmp(&fields[b - 1], &f) > 0) {
            fields[b] = fields[b - 1];
            b--;
        }
        fields[b] = f;
    }
}

/* Sort a plain query as canonical._sort_plain_query does and write it to out: its length, or
 * (size_t)-1 to defer to w3lib (a "=" in a value, too many fields, no room). */
static size_t sort_query(const uint8_t *q, size_t n, uint8_t *out, size_t cap)
{
    field fields[US_CANONICAL_MAX_FIELDS];
    size_t nf = 0;
    size_t i = 0;
    while (i <= n) {
        size_t start = i;
        while (i < n && q[i] != '&') i++;
        if (i > start) { /* empty fields are dropped */
            if (nf == US_CANONICAL_MAX_FIELDS) return (size_t)-1;
            const uint8_t *eq = memchr(q + start, '=', i - start);
            field *f = &fields[nf++];
            f->name = q + start;
            if (eq == NULL) {
                f->name_len = i - start;
                f->value = q + i;
                f->value_len = 0;
            } else {
                f->name_len = (size_t)(eq - (q + start));
                f->value = eq + 1;
                f->value_len = (size_t)(q + i - f->value);
                if (memchr(f->value, '=', f->value_len)) return (size_t)-1; /* w3lib: %3D */
            }
        }
        i++;
    }
    sort_fields(fields, nf);
    size_t o = 0;
    for (size_t a = 0; a < nf; a++) {
        size_t need = (a ? 1 : 0) + fields[a].name_len + 1 + fields[a].value_len;
        if (cap - o < need) return (size_t)-1;
        if (a) out[o++] = '&';
        memcpy(out + o, fields[a].name, fields[a].name_len);
        o += fields[a].name_len;
        out[o++] = '=';
        memcpy(out + o, fields[a].value, fields[a].value_len);
        o += fields[a].value_len;
    }
    return o;
}

size_t us_canonical_plain(const uint8_t *s, size_t n, uint8_t *out, size_t cap)
{
    size_t i;
    if (n >= 7 && memcmp(s, "http://", 7) == 0) {
        i = 7;
    } else if (n >= 8 && memcmp(s, "https://", 8) == 0) {
        i = 8;
    } else {
        return 0;
    }
    size_t host = i;
    i = span(s, i, n, C_HOST);
    if (i == host) return 0;
    i = skip_port(s, i, n);
    if (i == NOT_CANONICAL) return 0;
    size_t origin_end = i;
    size_t path = i, path_end = i;
    int has_path = 0;
    if (i < n && s[i] == '/') {
        has_path = 1;
        i++;
        i = span(s, i, n, C_PATH);
        path_end = i;
    }
    size_t query = 0, query_end = 0;
    if (i < n && s[i] == '?') {
        query = ++i;
        i = span(s, i, n, C_QUERY);
        query_end = i;
    }
    if (i < n && s[i] == '#') {
        i++;
        i = span(s, i, n, C_FRAGMENT);
    }
    if (i != n) return 0;
    /* A dot segment may need resolving: w3lib decides. */
    for (size_t j = path; j + 1 < path_end; j++)
        if (s[j] == '/' && s[j + 1] == '.') return 0;

    size_t o = origin_end;
    if (cap < o + 1) return 0;
    memcpy(out, s, o);
    if (has_path) {
        size_t plen = path_end - path;
        if (cap - o < plen) return 0;
        memcpy(out + o, s + path, plen);
        o += plen;
    } else {
        out[o++] = '/';
    }
    if (query_end > query) {
        if (cap - o < 1) return 0;
        size_t q = sort_query(s + query, query_end - query, out + o + 1, cap - o - 1);
        if (q == (size_t)-1) return 0;
        if (q) {
            out[o] = '?';
            o += 1 + q;
        }
    }
    return o;
}

/* ---- the general ASCII case ------------------------------------------------------------ */

static const char HEX[] = "0123456789ABCDEF";

static inline int hex_value(uint8_t c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The percent-escape at s[i] (two hex digits follow within n), as a byte, or -1. */
static inline int escape_at(const uint8_t *s, size_t i, size_t n)
{
    if (s[i] != '%' || i + 2 >= n) return -1;
    int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    return hi < 0 || lo < 0 ? -1 : hi << 4 | lo;
}

/* Bytes w3lib leaves as they are in a path (_PATH_SAFE_CHARS: RFC 3986 reserved and unreserved,
 * "|" and "%", not "#"), and in a query field (RFC 3986 unreserved). */
static int path_safe(uint8_t c)
{
    if (c >= 128) return 0;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != '#' && memchr(":/?[]@!$&'()*+,;=-._~|%", c, 23) != NULL;
}

static int unreserved(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

typedef struct {
    uint8_t *o;
    size_t left;
} sink;

static inline int put(sink *k, uint8_t c)
{
    if (k->left == 0) return -1;
    *k->o++ = c;
    k->left--;
    return 0;
}

static inline int put_escape(sink *k, uint8_t v)
{
    if (k->left < 3) return -1;
    k->o[0] = '%';
    k->o[1] = (uint8_t)HEX[v >> 4];
    k->o[2] = (uint8_t)HEX[v & 15];
    k->o += 3;
    k->left -= 3;
    return 0;
}

/* w3lib's path: quoted (a no-op for what follows), then _unquotepath (every escape decoded but
 * %25 %2F %3B %3F), then quoted with _PATH_SAFE_CHARS. */
static int put_path(sink *k, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int v = escape_at(p, i, n);
        if (v < 0) {
            if (path_safe(p[i]) ? put(k, p[i]) : put_escape(k, p[i])) return -1;
            continue;
        }
        i += 2;
        int kept = v == '%' || v == '/' || v == ';' || v == '?';
        if ((kept || !path_safe((uint8_t)v)) ? put_escape(k, (uint8_t)v) : put(k, (uint8_t)v))
            return -1;
    }
    return 0;
}

/* _unquote_plus of s[0, n) into out: "+" is a space, valid escapes are decoded. */
static size_t unquote_plus(const uint8_t *s, size_t n, uint8_t *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = escape_at(s, i, n);
        if (v >= 0) {
            out[o++] = (uint8_t)v;
            i += 2;
        } else {
            out[o++] = s[i] == '+' ? ' ' : s[i];
        }
    }
    return o;
}

static int put_quoted_plus(sink *k, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        int rc = unreserved(c) ? put(k, c) : c == ' ' ? put(k, '+') : put_escape(k, c);
        if (rc) return -1;
    }
    return 0;
}

/* w3lib's query: _parse_qsl (fields at "&", empty ones dropped, name and value at the first
 * "=", each _unquote_plus'ed), sorted, then _urlencode (quote_plus of each, "=", "&"). */
static int put_query(sink *k, const uint8_t *q, size_t n, uint8_t *scratch, int *empty)
{
    field fields[US_CANONICAL_MAX_FIELDS];
    size_t nf = 0, used = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t start = i;
        while (i < n && q[i] != '&') i++;
        if (i == start) continue;
        if (nf == US_CANONICAL_MAX_FIELDS) return -1;
        const uint8_t *eq = memchr(q + start, '=', i - start);
        size_t name_end = eq ? (size_t)(eq - q) : i;
        field *f = &fields[nf++];
        f->name = scratch + used;
        f->name_len = unquote_plus(q + start, name_end - start, scratch + used);
        used += f->name_len;
        f->value = scratch + used;
        f->value_len = eq ? unquote_plus(eq + 1, i - name_end - 1, scratch + used) : 0;
        used += f->value_len;
    }
    sort_fields(fields, nf);
    *empty = nf == 0;
    for (size_t a = 0; a < nf; a++) {
        if ((a && put(k, '&')) || put_quoted_plus(k, fields[a].name, fields[a].name_len) ||
            put(k, '=') || put_quoted_plus(k, fields[a].value, fields[a].value_len))
            return -1;
    }
    return 0;
}

static inline uint8_t lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c; }

size_t us_canonical_ascii(const uint8_t *s, size_t n, uint8_t *out, size_t cap, uint8_t *scratch)
{
    size_t i = 0;
    while (i < n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z'))) i++;
    int https;
    if (i == 4 && (lower(s[0]) == 'h' && lower(s[1]) == 't' && lower(s[2]) == 't' &&
                   lower(s[3]) == 'p')) {
        https = 0;
    } else if (i == 5 && lower(s[0]) == 'h' && lower(s[1]) == 't' && lower(s[2]) == 't' &&
               lower(s[3]) == 'p' && lower(s[4]) == 's') {
        https = 1;
    } else {
        return 0;
    }
    if (n - i < 3 || memcmp(s + i, "://", 3) != 0) return 0;
    i += 3;
    size_t host = i;
    while (i < n && ((CLASSES[s[i]] & C_HOST) || (s[i] >= 'A' && s[i] <= 'Z'))) i++;
    if (i == host) return 0;
    size_t host_end = i;
    i = skip_port(s, i, n);
    if (i == NOT_CANONICAL) return 0;
    size_t origin_end = i;
    if (i < n && s[i] != '/' && s[i] != '?' && s[i] != '#') return 0; /* the host goes on */
    size_t path = i;
    while (i < n && s[i] != '?' && s[i] != '#') {
        if (s[i] < '!' || s[i] > '~' || s[i] == '\\' || s[i] == ';') return 0;
        i++;
    }
    size_t path_end = i, query = 0, query_end = 0;
    int has_query = 0;
    if (i < n && s[i] == '?') {
        has_query = 1;
        query = ++i;
        while (i < n && s[i] != '#') {
            if (s[i] < '!' || s[i] > '~') return 0;
            i++;
        }
        query_end = i;
    }
    for (; i < n; i++) /* the fragment, dropped */
        if (s[i] < '!' || s[i] > '~') return 0;

    sink k = {out, cap};
    const char *scheme = https ? "https://" : "http://";
    for (const char *c = scheme; *c; c++)
        if (put(&k, (uint8_t)*c)) return 0;
    for (size_t j = host; j < host_end; j++)
        if (put(&k, lower(s[j]))) return 0;
    for (size_t j = host_end; j < origin_end; j++)
        if (put(&k, s[j])) return 0;
    uint8_t *path_out = k.o;
    if (path_end > path) {
        if (put_path(&k, s + path, path_end - path)) return 0;
    } else if (put(&k, '/')) {
        return 0;
    }
    /* dot segments: w3lib resolves them; let it */
    for (uint8_t *c = path_out; c + 1 < k.o; c++)
        if (c[0] == '/' && c[1] == '.') return 0;
    if (has_query && query_end > query) {
        uint8_t *mark = k.o;
        size_t left = k.left;
        int empty = 0;
        if (put(&k, '?') || put_query(&k, s + query, query_end - query, scratch, &empty)) return 0;
        if (empty) { /* no field: no "?" */
            k.o = mark;
            k.left = left;
        }
    }
    return (size_t)(k.o - out);
}

/* ---- a set of digests -------------------------------------------------------------------- */

void us_digest_set_init(us_digest_set *s, us_hash128 *slots, uint8_t *used, size_t nslots)
{
    s->slots = slots;
    s->used = used;
    s->mask = nslots - 1;
    memset(used, 0, nslots);
}

int us_digest_set_add(us_digest_set *s, us_hash128 h)
{
    size_t i = (size_t)(h.h1 ^ (h.h2 >> 7)) & s->mask;
    while (s->used[i]) {
        if (s->slots[i].h1 == h.h1 && s->slots[i].h2 == h.h2) return 0;
        i = (i + 1) & s->mask;
    }
    s->used[i] = 1;
    s->slots[i] = h;
    return 1;
}

/* ---- the memo of deferred keys ----------------------------------------------------------- */

static void memo_clear(us_key_memo *m)
{
    memset(m->slots, 0, (m->mask + 1) * sizeof(us_memo_slot));
    m->used = 0;
    m->arena_used = 0;
}

void us_key_memo_init(us_key_memo *m, us_memo_slot *slots, size_t nslots, uint8_t *arena,
                      size_t arena_cap)
{
    m->slots = slots;
    m->mask = nslots - 1;
    m->arena = arena;
    m->arena_cap = arena_cap;
    memo_clear(m);
}

static inline size_t memo_index(const us_key_memo *m, us_hash128 h)
{
    return (size_t)(h.h1 ^ (h.h2 >> 11)) & m->mask;
}

const uint8_t *us_key_memo_get(const us_key_memo *m, us_hash128 h, size_t *len)
{
    for (size_t i = memo_index(m, h);; i = (i + 1) & m->mask) {
        const us_memo_slot *s = &m->slots[i];
        if (s->len == 0) return NULL;
        if (s->h.h1 == h.h1 && s->h.h2 == h.h2) {
            *len = s->len;
            return m->arena + s->off;
        }
    }
}

void us_key_memo_put(us_key_memo *m, us_hash128 h, const uint8_t *key, size_t len)
{
    if (len == 0 || len > m->arena_cap || len > UINT32_MAX) return;
    if (m->arena_cap - m->arena_used < len || 4 * (m->used + 1) > 3 * (m->mask + 1)) memo_clear(m);
    size_t i = memo_index(m, h);
    while (m->slots[i].len != 0) {
        if (m->slots[i].h.h1 == h.h1 && m->slots[i].h.h2 == h.h2) return; /* already known */
        i = (i + 1) & m->mask;
    }
    memcpy(m->arena + m->arena_used, key, len);
    m->slots[i].h = h;
    m->slots[i].off = (uint32_t)m->arena_used;
    m->slots[i].len = (uint32_t)len;
    m->arena_used += len;
    m->used++;
}
