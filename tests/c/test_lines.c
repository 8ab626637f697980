/* test_lines.c: csrc/lines (the dedup job's line splitting, keying, canonical shortcut, digest
 * set and key memo). The Python tests hold the shortcut equal to urlseen.canonical on the dev
 * file and on generated streams; these pin the C side alone, under valgrind in CI. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "lines.h"

static const uint8_t *u8(const char *s) { return (const uint8_t *)s; }

static void test_split(void)
{
    const char *text = "a\r\n\nbb\nlast";
    size_t len = strlen(text), pos = 0;
    us_line lines[8];
    size_t n = us_split_lines(u8(text), len, &pos, 8, 0, lines);
    CHECK(n == 3); /* "last" has no newline and the input has not ended */
    CHECK(lines[0].off == 0 && lines[0].len == 2 && lines[0].terminated);
    CHECK(lines[1].off == 3 && lines[1].len == 0);
    CHECK(lines[2].off == 4 && lines[2].len == 2);
    CHECK(pos == 7);
    n = us_split_lines(u8(text), len, &pos, 8, 1, lines);
    CHECK(n == 1 && lines[0].off == 7 && lines[0].len == 4 && !lines[0].terminated);
    CHECK(pos == len);
    pos = 0;
    CHECK(us_split_lines(u8(text), len, &pos, 2, 1, lines) == 2 && pos == 4); /* max_lines */
}

static void test_blank(void)
{
    CHECK(us_is_blank(u8(""), 0));
    CHECK(us_is_blank(u8(" \t\r\v\f"), 5));
    CHECK(!us_is_blank(u8(" \x01"), 2));
    CHECK(!us_is_blank(u8("\0"), 1));
    CHECK(!us_is_blank(u8("\xa0"), 1)); /* not ASCII whitespace */
}

static void check_canonical(const char *url, const char *want)
{
    uint8_t out[512];
    size_t n = us_canonical_plain(u8(url), strlen(url), out, sizeof out);
    if (want == NULL) {
        CHECK(n == 0);
        if (n) fprintf(stderr, "  %s: expected a deferral, got %.*s\n", url, (int)n, out);
        return;
    }
    int ok = n == strlen(want) && memcmp(out, want, n) == 0;
    CHECK(ok);
    if (!ok) fprintf(stderr, "  %s: expected %s, got %.*s\n", url, want, (int)n, out);
}

static void test_canonical(void)
{
    check_canonical("http://a.example/", "http://a.example/");
    check_canonical("http://a.example", "http://a.example/");
    check_canonical("https://a.example:8080/x#frag", "https://a.example:8080/x");
    check_canonical("http://a.example/p?b=2&a=1", "http://a.example/p?a=1&b=2");
    check_canonical("http://a.example/p?b&a=1&&", "http://a.example/p?a=1&b=");
    check_canonical("http://a.example/p?", "http://a.example/p");
    check_canonical("http://a.example/p?&&#x", "http://a.example/p");
    check_canonical("http://a.example?z=1", "http://a.example/?z=1");
    check_canonical("http://a.example/p?a=2&a=1&ab=0&a=", "http://a.example/p?a=&a=1&a=2&ab=0");
    check_canonical("http://a.example/(x)*!$'+,=:@", "http://a.example/(x)*!$'+,=:@");
    /* everything w3lib must decide */
    check_canonical("HTTP://a.example/", NULL);
    check_canonical("http://A.example/", NULL);
    check_canonical("http://a.example:0/", NULL);
    check_canonical("http://a.example:12345/", NULL);
    check_canonical("http://a.example:/", NULL);
    check_canonical("http://a.example:80x/", NULL);
    check_canonical("http://user@a.example/", NULL);
    check_canonical("http:///", NULL);
    check_canonical("ftp://a.example/", NULL);
    check_canonical("http://a.example/%41", NULL);
    check_canonical("http://a.example/a;b", NULL);
    check_canonical("http://a.example/a/./b", NULL);
    check_canonical("http://a.example/a/../b", NULL);
    check_canonical("http://a.example/.", NULL);
    check_canonical("http://a.example/p?a=b=c", NULL);
    check_canonical("http://a.example/p?a=%41", NULL);
    check_canonical("http://a.example/p?a+b", NULL);
    check_canonical("http://a.example/p?a?b", NULL);
    check_canonical("http://a.example/p#\x7f", NULL);
    check_canonical("http://a.example/p# x", NULL);
    check_canonical(" http://a.example/", NULL);
    check_canonical("http://a.example/caf\xc3\xa9", NULL);
    /* too little room: deferred, never cut */
    uint8_t small[8];
    CHECK(us_canonical_plain(u8("http://a.example/"), 17, small, sizeof small) == 0);
    /* too many query fields: deferred */
    char many[1200] = "http://a.example/?";
    for (int i = 0; i < US_CANONICAL_MAX_FIELDS + 1; i++) strcat(many, "a&");
    uint8_t out[2048];
    CHECK(us_canonical_plain(u8(many), strlen(many), out, sizeof out) == 0);
}

static void check_ascii(const char *url, const char *want)
{
    uint8_t out[512], scratch[512];
    size_t n = us_canonical_ascii(u8(url), strlen(url), out, sizeof out, scratch);
    int ok = want == NULL ? n == 0 : n == strlen(want) && memcmp(out, want, n) == 0;
    CHECK(ok);
    if (!ok) fprintf(stderr, "  %s: expected %s, got %.*s\n", url, want ? want : "(deferred)",
                     (int)n, out);
}

/* Expected keys from w3lib 2.5's canonicalize_url (checked by the Python tests as well). */
static void test_canonical_ascii(void)
{
    check_ascii("HTTP://WWW.Example.COM/a%2fb%41%e2%82%ac?b=%41+c&a=x=y&&c#frag",
                "http://www.example.com/a%2FbA%E2%82%AC?a=x%3Dy&b=A+c&c=");
    check_ascii("http://x.y/p?q=%zz&r=1+1", "http://x.y/p?q=%25zz&r=1+1");
    check_ascii("http://x.y/a|b[c]{d}", "http://x.y/a|b[c]%7Bd%7D");
    check_ascii("http://x.y?%41=1", "http://x.y/?A=1");
    check_ascii("http://x.y/p?a\\b=c", "http://x.y/p?a%5Cb=c");
    check_ascii("http://x.y/%25%32%46", "http://x.y/%252F");
    check_ascii("http://x.y/%%2f%3b%3F%4", "http://x.y/%%2F%3B%3F%4");
    check_ascii("https://a.b/?&&", "https://a.b/");
    check_ascii("http://a.b/x", "http://a.b/x"); /* the plain case too */
    check_ascii("http://x.y/%2e%2e/a", NULL);    /* dot segments: w3lib */
    check_ascii("http://x.y/a b", NULL);
    check_ascii("http://x.y/a;b", NULL);
    check_ascii("http://x.y/a\\b", NULL);
    check_ascii("http://x.y%20z/", NULL);
    check_ascii("http://u@x.y/", NULL);
    check_ascii("ftp://x.y/", NULL);
    check_ascii("http://x.y/caf\xc3\xa9", NULL);
    uint8_t out[16], scratch[64];
    CHECK(us_canonical_ascii(u8("http://x.y/\"\"\"\""), 15, out, sizeof out, scratch) == 0);
}

static void test_digest_set(void)
{
    us_hash128 slots[16];
    uint8_t used[16];
    us_digest_set s;
    us_digest_set_init(&s, slots, used, 16);
    us_hash128 a = {1, 2}, b = {1, 3}, c = {17, 2}; /* c collides with a in the slot index */
    CHECK(us_digest_set_add(&s, a) == 1);
    CHECK(us_digest_set_add(&s, b) == 1);
    CHECK(us_digest_set_add(&s, c) == 1);
    CHECK(us_digest_set_add(&s, a) == 0);
    CHECK(us_digest_set_add(&s, c) == 0);
}

static void test_memo(void)
{
    us_memo_slot slots[8];
    uint8_t arena[10];
    us_key_memo m;
    us_key_memo_init(&m, slots, 8, arena, sizeof arena);
    us_hash128 a = {5, 6}, b = {7, 8}, c = {9, 10};
    size_t len = 0;
    CHECK(us_key_memo_get(&m, a, &len) == NULL);
    us_key_memo_put(&m, a, u8("abcd"), 4);
    const uint8_t *k = us_key_memo_get(&m, a, &len);
    CHECK(k != NULL && len == 4 && memcmp(k, "abcd", 4) == 0);
    us_key_memo_put(&m, b, u8("efghij"), 6); /* fills the arena exactly */
    CHECK(us_key_memo_get(&m, b, &len) != NULL && len == 6);
    us_key_memo_put(&m, c, u8("xy"), 2); /* no room: the memo starts over */
    CHECK(us_key_memo_get(&m, a, &len) == NULL);
    CHECK(us_key_memo_get(&m, c, &len) != NULL && len == 2);
    us_key_memo_put(&m, a, u8("0123456789A"), 11); /* longer than the arena: not kept */
    CHECK(us_key_memo_get(&m, a, &len) == NULL);
    for (uint64_t i = 0; i < 20; i++) { /* more keys than 3/4 of the slots: starts over */
        us_hash128 h = {i * 0x9E3779B97F4A7C15ULL, i};
        us_key_memo_put(&m, h, u8("k"), 1);
        CHECK(us_key_memo_get(&m, h, &len) != NULL);
    }
}

int main(void)
{
    test_split();
    test_blank();
    test_canonical();
    test_canonical_ascii();
    test_digest_set();
    test_memo();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_lines: all checks passed\n");
    return 0;
}
