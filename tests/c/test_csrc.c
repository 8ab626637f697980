/* test_csrc.c: the pure-C core tested without Python (built and run by .ci/run, once under
 * valgrind): the hash's published verification value, probe invariants, batch == single;
 * MD5's RFC 1321 test suite; the counting filter's packed saturating counters and overflow
 * events (counting.h); the hot-fingerprint cache's LRU eviction and spills (fpcache.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "bloom.h"
#include "counting.h"
#include "fpcache.h"
#include "md5.h"
#include "murmur3.h"


static void put_digest(uint8_t *out, us_hash128 h)
{
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(h.h1 >> (8 * i));
        out[8 + i] = (uint8_t)(h.h2 >> (8 * i));
    }
}

/* SMHasher's VerificationTest for MurmurHash3_x64_128: 0x6384BA69. */
static void test_verification_value(void)
{
    uint8_t key[256], digests[256 * 16], final[16];
    for (int i = 0; i < 256; i++) {
        key[i] = (uint8_t)i;
        put_digest(digests + 16 * i, us_murmur3_x64_128(key, (size_t)i, (uint32_t)(256 - i)));
    }
    put_digest(final, us_murmur3_x64_128(digests, sizeof digests, 0));
    uint32_t v = (uint32_t)final[0] | (uint32_t)final[1] << 8 | (uint32_t)final[2] << 16 |
                 (uint32_t)final[3] << 24;
    CHECK(v == 0x6384BA69u);
}

static void test_layout(int layout, uint64_t nbits, uint32_t k)
{
    size_t nbytes = (size_t)((nbits + 7) / 8);
    uint8_t *single = calloc(nbytes, 1), *batch = calloc(nbytes, 1);
    us_bloom a = {single, nbits, k, layout}, b = {batch, nbits, k, layout};
    enum { N = 5000 };
    us_hash128 *h = malloc(N * sizeof *h);
    uint8_t *flags = malloc(N);
    char key[32];
    for (int i = 0; i < N; i++) {
        int len = snprintf(key, sizeof key, "https://x/%d", i % 4000); /* 1000 repeats */
        h[i] = us_murmur3_x64_128(key, (size_t)len, 0);
    }
    size_t fresh_single = 0;
    for (int i = 0; i < N; i++) {
        uint64_t pos[US_MAX_K];
        us_bloom_positions(&a, h[i], pos);
        for (uint32_t j = 0; j < k; j++) CHECK(pos[j] < nbits);
        if (layout == US_LAYOUT_BLOCKED)
            for (uint32_t j = 1; j < k; j++) CHECK(pos[j] / 512 == pos[0] / 512);
        fresh_single += (size_t)us_bloom_test_and_set(&a, h[i]);
        CHECK(us_bloom_test(&a, h[i])); /* no false negative, ever */
    }
    size_t fresh_batch = us_bloom_test_and_set_many(&b, h, N, flags);
    CHECK(fresh_batch == fresh_single);
    CHECK(memcmp(single, batch, nbytes) == 0);
    CHECK(fresh_batch <= 4000 && fresh_batch > 3900); /* repeats are never new */
    for (int i = 4000; i < N; i++) CHECK(flags[i] == 0);
    us_bloom_test_many(&b, h, N, flags);
    for (int i = 0; i < N; i++) CHECK(flags[i] == 1);
    CHECK(us_popcount(batch, nbits) > 0 && us_popcount(batch, nbits) <= nbits);
    free(single);
    free(batch);
    free(h);
    free(flags);
}

/* ---- MD5 ---------------------------------------------------------------------------------- */

static void hex16(const uint8_t d[16], char out[33])
{
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* RFC 1321, appendix A.5: the test suite. */
static void test_md5_rfc1321(void)
{
    static const char *suite[][2] = {
        {"", "d41d8cd98f00b204e9800998ecf8427e"},
        {"a", "0cc175b9c0f1b6a831c399e269772661"},
        {"abc", "900150983cd24fb0d6963f7d28e17f72"},
        {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
        {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
         "d174ab98d277d9f5a5611c2c9f419d9f"},
        {"1234567890123456789012345678901234567890123456789012345678901234567890123456789"
         "0",
         "57edf4a22be3c955ac49da2e2107b67a"},
    };
    for (size_t t = 0; t < sizeof suite / sizeof suite[0]; t++) {
        uint8_t d[16];
        char hex[33];
        us_md5(suite[t][0], strlen(suite[t][0]), 0, d);
        hex16(d, hex);
        CHECK(strcmp(hex, suite[t][1]) == 0);
    }
}

/* The padding boundaries (55 | 56 bytes left in the last block, 63 | 64, two blocks):
 * hashlib.md5(data(n)).hexdigest() with data(n) = bytes((i * 131 + 17) & 0xff for i in
 * range(n)). */
static void test_md5_padding_boundaries(void)
{
    static const struct {
        size_t len;
        const char *hex;
    } vectors[] = {
        {55, "96799d8bf84d94466fb1d4785f0eae6c"},
        {56, "bf9c6bb58c938814a38d99d564393a53"},
        {57, "9eb14617df5fd442bf0c75940836ac23"},
        {63, "35692891f16306d06ba365a887de5dd3"},
        {64, "c99cacee8808c930ea7a2a5f79a58599"},
        {65, "99f97c2c46e2953fc2c2b315db172a78"},
        {119, "8c8f2677f6b4338b4477d6842ca735e3"},
        {120, "788134ee3f7a478b5eaaed0c7d6965f9"},
        {128, "11e4554b8031fd4aa009f2ca792f8989"},
        {200, "0cfc2f397fa8c44733a438f956151dd7"},
    };
    uint8_t data[200];
    for (int i = 0; i < 200; i++) data[i] = (uint8_t)(i * 131 + 17);
    for (size_t t = 0; t < sizeof vectors / sizeof vectors[0]; t++) {
        uint8_t d[16];
        char hex[33];
        us_md5(data, vectors[t].len, 0, d);
        hex16(d, hex);
        CHECK(strcmp(hex, vectors[t].hex) == 0);
    }
}

/* The streaming API gives the one-shot digest however the input is cut, and a seed is the
 * prefix of its 4 little-endian bytes. */
static void test_md5_streaming_and_seed(void)
{
    uint8_t data[200];
    for (int i = 0; i < 200; i++) data[i] = (uint8_t)(i * 131 + 17);
    for (size_t len = 0; len <= 200; len++) {
        uint8_t whole[16];
        us_md5(data, len, 0, whole);
        for (size_t cut = 0; cut <= len; cut += (len < 70 ? 1 : 13)) {
            us_md5_ctx ctx;
            uint8_t parts[16];
            us_md5_init(&ctx);
            us_md5_update(&ctx, data, cut);
            us_md5_update(&ctx, data + cut, len - cut);
            us_md5_final(&ctx, parts);
            CHECK(memcmp(whole, parts, 16) == 0);
        }
        us_md5_ctx ctx;
        uint8_t bytewise[16], seeded[16], prefixed[16];
        us_md5_init(&ctx);
        for (size_t i = 0; i < len; i++) us_md5_update(&ctx, data + i, 1);
        us_md5_final(&ctx, bytewise);
        CHECK(memcmp(whole, bytewise, 16) == 0);
        const uint8_t seed_le[4] = {0x04, 0x03, 0x02, 0x01};
        us_md5(data, len, 0x01020304u, seeded);
        us_md5_init(&ctx);
        us_md5_update(&ctx, seed_le, 4);
        us_md5_update(&ctx, data, len);
        us_md5_final(&ctx, prefixed);
        CHECK(memcmp(seeded, prefixed, 16) == 0);
        CHECK(memcmp(seeded, whole, 16) != 0);
    }
}

/* us_md5_many: key i's digest is us_md5's, whatever the batch's size (fewer keys than lanes,
 * lanes idle at the end), the keys' lengths (0 to 4 blocks, mixed, so lanes finish at different
 * times and take the next key) and the seed. */
static void test_md5_many(void)
{
    enum { N = 300 };
    static uint8_t data[N][260];
    static const uint8_t *keys[N];
    static size_t len[N];
    static uint8_t out[N][16];
    for (size_t i = 0; i < N; i++) {
        len[i] = (i * 37 + i / 7) % 260;
        for (size_t j = 0; j < len[i]; j++) data[i][j] = (uint8_t)(i * 131 + j * 17 + 5);
        keys[i] = data[i];
    }
    const uint32_t seeds[] = {0, 1, 0xffffffffu};
    const size_t sizes[] = {0, 1, US_MD5_LANES - 1, US_MD5_LANES, US_MD5_LANES + 1, 61, N};
    for (size_t s = 0; s < sizeof seeds / sizeof *seeds; s++)
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
            memset(out, 0, sizeof out);
            us_md5_many(keys, len, sizes[z], seeds[s], out);
            for (size_t i = 0; i < sizes[z]; i++) {
                uint8_t one[16];
                us_md5(keys[i], len[i], seeds[s], one);
                CHECK(memcmp(one, out[i], 16) == 0);
            }
            if (sizes[z] < N) CHECK(out[sizes[z]][0] == 0 && out[sizes[z]][15] == 0);
        }
}

/* A million 'a's (the classic long-message vector), fed in uneven pieces. */
static void test_md5_million(void)
{
    static uint8_t chunk[1000];
    memset(chunk, 'a', sizeof chunk);
    us_md5_ctx ctx;
    uint8_t d[16];
    char hex[33];
    us_md5_init(&ctx);
    size_t left = 1000000;
    for (size_t piece = 1; left; piece = piece % 997 + 1) {
        size_t n = piece < left ? piece : left;
        us_md5_update(&ctx, chunk, n);
        left -= n;
    }
    us_md5_final(&ctx, d);
    hex16(d, hex);
    CHECK(strcmp(hex, "7707d6ae4e027c70eea2a935c2296f21") == 0);
}

/* ---- counters ------------------------------------------------------------------------------ */

/* Counter i is bits [i * width, (i + 1) * width) of the array, least significant first; set
 * never touches a neighbour; values are masked to the width. */
static void test_counter_packing(void)
{
    static const uint32_t widths[] = {2, 4, 8};
    for (int w = 0; w < 3; w++) {
        uint8_t cells[16] = {0};
        us_counters c = {cells, 16 * 8 / widths[w], 1, widths[w]};
        unsigned max = us_counter_max(&c);
        CHECK(max == (1u << widths[w]) - 1);
        for (uint64_t i = 0; i < c.m; i++) us_counter_set(&c, i, (unsigned)(i * 7 + 3) & max);
        for (uint64_t i = 0; i < c.m; i++) CHECK(us_counter_get(&c, i) == ((i * 7 + 3) & max));
        us_counter_set(&c, 5, 0);
        CHECK(us_counter_get(&c, 4) == ((4 * 7 + 3) & max));
        CHECK(us_counter_get(&c, 6) == ((6 * 7 + 3) & max));
        memset(cells, 0, sizeof cells);
        us_counter_set(&c, 1, 1);
        /* counter 1 starts at bit `width` */
        CHECK(cells[widths[w] / 8] == (uint8_t)(1u << (widths[w] % 8)));
    }
}

/* h = {0, 0}: x = 0, 1, 3, 6, ... are all far below 2^64 / m, so every index is 0: one key
 * whose k indices all repeat (counted once per occurrence, by add, remove and test alike). */
static void test_counter_multiset_and_events(void)
{
    us_hash128 h = {0, 0};
    uint64_t idx[US_MAX_K];
    us_standard_indices(h, 1000, 4, idx);
    for (int i = 0; i < 4; i++) CHECK(idx[i] == 0);

    uint8_t cells[32] = {0};
    us_counters c = {cells, 64, 4, 4}; /* max 15 */
    us_overflow ev[US_MAX_K];
    size_t nev = 0;
    CHECK(!us_counting_test(&c, h));
    CHECK(us_counting_add(&c, h, ev, &nev) == 1);
    CHECK(us_counter_get(&c, 0) == 4 && nev == 0);
    CHECK(us_counting_test(&c, h));
    CHECK(us_counting_add(&c, h, ev, &nev) == 0); /* not new: all counters were above 0 */
    CHECK(us_counter_get(&c, 0) == 8);
    CHECK(us_counting_add_new(&c, h, ev, &nev) == 0); /* check-and-add: present, unchanged */
    CHECK(us_counter_get(&c, 0) == 8);
    CHECK(us_counting_remove(&c, h, ev, &nev) == 1 && us_counter_get(&c, 0) == 4);
    us_counter_set(&c, 0, 3); /* fewer than the key's 4 occurrences: it cannot be in */
    CHECK(us_counting_remove(&c, h, ev, &nev) == 0 && us_counter_get(&c, 0) == 3);
    CHECK(nev == 0);

    /* 2-bit counters (max 3): 0 -> 1 -> 2 -> 3 (reached max: event (0, 3)), then at max
     * (event (0, 1)); the true count 4 = 3 + 1. */
    uint8_t small[4] = {0};
    us_counters s = {small, 16, 4, 2};
    nev = 0;
    CHECK(us_counting_add(&s, h, ev, &nev) == 1);
    CHECK(us_counter_get(&s, 0) == 3);
    CHECK(nev == 2 && ev[0].index == 0 && ev[0].delta == 3 && ev[1].index == 0 && ev[1].delta == 1);
    /* A saturated counter is never decremented: one event (0, 1) per occurrence instead. */
    nev = 0;
    CHECK(us_counting_remove(&s, h, ev, &nev) == 1);
    CHECK(us_counter_get(&s, 0) == 3 && nev == 4);
    for (size_t i = 0; i < nev; i++) CHECK(ev[i].index == 0 && ev[i].delta == 1);
    /* Check-and-add of a new key increments, with the same events, exactly once. */
    uint8_t fresh_cells[4] = {0};
    us_counters t = {fresh_cells, 16, 4, 2};
    nev = 0;
    CHECK(us_counting_add_new(&t, h, ev, &nev) == 1 && us_counter_get(&t, 0) == 3);
    CHECK(nev == 2 && ev[0].index == 0 && ev[0].delta == 3 && ev[1].index == 0 && ev[1].delta == 1);
    CHECK(us_counting_add_new(&t, h, ev, &nev) == 0 && us_counter_get(&t, 0) == 3 && nev == 2);
    /* Without an event buffer the same happens, silently. */
    CHECK(us_counting_remove(&s, h, NULL, NULL) == 1 && us_counter_get(&s, 0) == 3);
    CHECK(us_counting_add(&s, h, NULL, NULL) == 0 && us_counter_get(&s, 0) == 3);
}

/* Many keys: with 8-bit counters (no saturation here) every counter is the exact multiset
 * count and removing every key empties the array; with 2-bit counters, removing half of the
 * keys never hides the other half, and a counter that reached 3 stays 3. */
static void test_counters_random(void)
{
    enum { M = 3001, K = 7, N = 800 };
    uint8_t *wide = calloc(M, 1), *narrow = calloc((M * 2 + 7) / 8, 1), *once = calloc(M, 1);
    unsigned *truth = calloc(M, sizeof *truth);
    uint8_t *was_max = calloc(M, 1);
    us_hash128 *h = malloc(N * sizeof *h);
    us_counters w = {wide, M, K, 8}, n = {narrow, M, K, 2}, o = {once, M, K, 8};
    char key[32];
    for (int i = 0; i < N; i++) {
        int len = snprintf(key, sizeof key, "https://c/%d", i);
        h[i] = us_murmur3_x64_128(key, (size_t)len, 0);
        uint64_t idx[US_MAX_K];
        us_standard_indices(h[i], M, K, idx);
        for (int j = 0; j < K; j++) truth[idx[j]]++;
        us_counting_add(&w, h[i], NULL, NULL);
        us_counting_add(&n, h[i], NULL, NULL);
        /* check-and-add: new exactly when some counter was 0, and then it is present */
        int present = us_counting_test(&o, h[i]);
        CHECK(us_counting_add_new(&o, h[i], NULL, NULL) == !present);
        CHECK(us_counting_test(&o, h[i]) && us_counting_add_new(&o, h[i], NULL, NULL) == 0);
    }
    uint64_t hist[256] = {0}, total = 0;
    us_counting_histogram(&w, hist);
    for (int v = 0; v < 256; v++) total += hist[v];
    CHECK(total == M);
    for (uint64_t i = 0; i < M; i++) {
        CHECK(us_counter_get(&w, i) == truth[i]);
        CHECK(us_counter_get(&o, i) <= truth[i]); /* keys reported present were not counted */
        CHECK(us_counter_get(&n, i) == (truth[i] < 3 ? truth[i] : 3));
        was_max[i] = us_counter_get(&n, i) == 3;
    }
    for (int i = 0; i < N; i += 2) {
        CHECK(us_counting_remove(&w, h[i], NULL, NULL) == 1);
        CHECK(us_counting_remove(&n, h[i], NULL, NULL) == 1);
    }
    for (int i = 1; i < N; i += 2) CHECK(us_counting_test(&n, h[i]) && us_counting_test(&w, h[i]));
    for (uint64_t i = 0; i < M; i++)
        if (was_max[i]) CHECK(us_counter_get(&n, i) == 3);
    for (int i = 1; i < N; i += 2) CHECK(us_counting_remove(&w, h[i], NULL, NULL) == 1);
    memset(hist, 0, sizeof hist);
    us_counting_histogram(&w, hist);
    CHECK(hist[0] == M);
    free(wide);
    free(narrow);
    free(once);
    free(truth);
    free(was_max);
    free(h);
}

/* ---- fingerprint cache --------------------------------------------------------------------- */

static void fp_of(uint8_t fp[16], uint64_t a, uint64_t b)
{
    for (int i = 0; i < 8; i++) {
        fp[i] = (uint8_t)(a >> (8 * i));
        fp[8 + i] = (uint8_t)(b >> (8 * i));
    }
}

/* A cache of nbuckets buckets from the start (it never grows), its arrays on the heap (free
 * with us_fpcache_free). */
static us_fpcache cache_new(uint64_t nbuckets)
{
    us_fpcache c;
    memset(&c, 0, sizeof c);
    c.entries = calloc(nbuckets * US_FPCACHE_WAYS, sizeof(us_fp_entry));
    c.nbuckets = c.max_buckets = nbuckets;
    c.dirty = calloc(nbuckets, 1);
    c.dirty_list = calloc(nbuckets, sizeof(uint32_t));
    return c;
}

static void cache_free(us_fpcache *c)
{
    us_fpcache_free(c);
}

static void test_fpcache_lru(void)
{
    us_fpcache c = cache_new(1);
    us_fp_entry spill, e;
    uint8_t fp[16];
    for (uint64_t i = 0; i < US_FPCACHE_WAYS; i++) {
        fp_of(fp, i, 0);
        CHECK(us_fpcache_insert(&c, fp, 0, (uint32_t)i + 1, 10, &spill) == 0);
    }
    /* contains answers without touching the order: 1 is still the one evicted below */
    fp_of(fp, 1, 0);
    us_fpcache_prefetch(&c, fp);
    CHECK(us_fpcache_contains(&c, fp) == 1);
    fp_of(fp, 1, 1);
    CHECK(us_fpcache_contains(&c, fp) == 0);
    fp_of(fp, 0, 0);
    CHECK(us_fpcache_hit(&c, fp, 11) == US_FP_FOUND); /* 0 is now most recent */
    fp_of(fp, 100, 0);
    CHECK(us_fpcache_insert(&c, fp, 0, 0, 12, &spill) == US_FP_SPILLED); /* evicts 1, the LRU */
    CHECK(spill.a == 1 && spill.b == 0 && spill.pending == 0 && spill.batch == 2);
    fp_of(fp, 1, 0);
    CHECK(us_fpcache_hit(&c, fp, 13) == 0);
    size_t n = 0;
    us_fp_entry overflow[US_FPCACHE_WAYS];
    us_fpcache_commit(&c, overflow, &n); /* batch increments become pending */
    CHECK(n == 0 && c.ndirty == 0);
    fp_of(fp, 0, 0);
    CHECK(us_fpcache_take(&c, fp, &e) == 1 && e.pending == 1 + 1 && e.batch == 0 && e.seen == 11);
    CHECK(us_fpcache_take(&c, fp, &e) == 0);
    fp_of(fp, 101, 0); /* a free way: nothing is evicted */
    CHECK(us_fpcache_insert(&c, fp, 0, 0, 14, &spill) == 0);
    /* order now, LRU first: 2 3 4 5 6 7 100 101; entries without increments leave silently */
    fp_of(fp, 200, 0);
    CHECK(us_fpcache_insert(&c, fp, 0, 0, 15, &spill) == US_FP_SPILLED && spill.a == 2);
    CHECK(spill.pending == 3 && spill.batch == 0);
    for (uint64_t i = 3; i < US_FPCACHE_WAYS; i++) {
        fp_of(fp, 300 + i, 0);
        CHECK(us_fpcache_insert(&c, fp, 0, 0, 16, &spill) == US_FP_SPILLED && spill.a == i);
    }
    fp_of(fp, 400, 0);
    CHECK(us_fpcache_insert(&c, fp, 0, 0, 17, &spill) == 0); /* 100 had no increments */
    fp_of(fp, 100, 0);
    CHECK(us_fpcache_hit(&c, fp, 18) == 0);
    /* The whole fingerprint must match, both halves. */
    fp_of(fp, 400, 1);
    CHECK(us_fpcache_hit(&c, fp, 18) == 0);
    /* Rollback drops the batch's increments and keeps the committed ones. */
    fp_of(fp, 400, 0);
    CHECK(us_fpcache_hit(&c, fp, 19) == US_FP_FOUND);
    us_fpcache_commit(&c, overflow, &n);
    CHECK(us_fpcache_hit(&c, fp, 20) == US_FP_FOUND && us_fpcache_hit(&c, fp, 21));
    us_fpcache_rollback(&c);
    CHECK(us_fpcache_take(&c, fp, &e) == 1 && e.pending == 1 && e.batch == 0 && e.seen == 21);
    /* A pending count that would overflow at commit comes back whole. */
    CHECK(us_fpcache_insert(&c, fp, UINT32_MAX, 0, 22, &spill) == 0);
    CHECK(us_fpcache_hit(&c, fp, 23) == US_FP_FOUND);
    us_fpcache_commit(&c, overflow, &n);
    CHECK(n == 1 && overflow[0].pending == UINT32_MAX && overflow[0].batch == 1);
    CHECK(us_fpcache_take(&c, fp, &e) == 1 && e.pending == 0 && e.batch == 0);
    cache_free(&c);
}

/* Fingerprints spread over buckets by their second half; what goes in comes back out. */
static void test_fpcache_buckets(void)
{
    enum { BUCKETS = 16, N = 5000 };
    us_fpcache c = cache_new(BUCKETS);
    us_fp_entry spill, overflow[BUCKETS * US_FPCACHE_WAYS];
    uint64_t hits = 0, returned = 0;
    size_t n = 0;
    uint8_t fp[16];
    for (int i = 0; i < N; i++) {
        us_hash128 h = us_murmur3_x64_128(&i, sizeof i, 1);
        uint64_t which = h.h1 % 300;
        us_hash128 f = us_murmur3_x64_128(&which, sizeof which, 2);
        fp_of(fp, f.h1, f.h2);
        if (us_fpcache_hit(&c, fp, (uint32_t)i) & US_FP_FOUND) {
            hits++;
        } else if (us_fpcache_insert(&c, fp, 0, 0, (uint32_t)i, &spill) & US_FP_SPILLED) {
            returned += spill.pending + spill.batch;
        }
        if (i % 100 == 99) us_fpcache_commit(&c, overflow, &n);
    }
    us_fpcache_commit(&c, overflow, &n);
    CHECK(n == 0);
    uint64_t used = 0;
    for (int i = 0; i < BUCKETS * (int)US_FPCACHE_WAYS; i++) {
        used += c.entries[i].used != 0;
        returned += c.entries[i].pending;
    }
    CHECK(used == BUCKETS * US_FPCACHE_WAYS); /* 300 fingerprints fill 128 ways */
    CHECK(hits > 0 && returned == hits);
    cache_free(&c);
}

/* A cache that starts small and grows answers, spills and holds exactly what one of its full
 * size from the start does, through hits, inserts, takes, commits and rollbacks. */
static void test_fpcache_grows_as_a_full_one(void)
{
    enum { BUCKETS = 1024, N = 40000 };
    us_fpcache full = cache_new(BUCKETS), grown;
    CHECK(us_fpcache_init(&grown, BUCKETS) == 0 && grown.nbuckets == 64);
    static us_fp_entry over_full[BUCKETS * US_FPCACHE_WAYS], over_grown[BUCKETS * US_FPCACHE_WAYS];
    us_fp_entry s1, s2;
    uint8_t fp[16];
    uint64_t spills = 0;
    for (int i = 0; i < N; i++) {
        us_hash128 h = us_murmur3_x64_128(&i, sizeof i, 3);
        uint64_t which = h.h1 % 12000; /* more fingerprints than the 8192 ways: evictions */
        us_hash128 f = us_murmur3_x64_128(&which, sizeof which, 4);
        fp_of(fp, f.h1, f.h2);
        if (h.h2 % 50 == 0) {
            CHECK(us_fpcache_take(&full, fp, &s1) == us_fpcache_take(&grown, fp, &s2));
        } else {
            int a = us_fpcache_hit(&full, fp, (uint32_t)i), b = us_fpcache_hit(&grown, fp, (uint32_t)i);
            CHECK(a == b);
            if (!a) {
                memset(&s1, 0, sizeof s1);
                memset(&s2, 0, sizeof s2);
                a = us_fpcache_insert(&full, fp, 0, 1, (uint32_t)i, &s1);
                b = us_fpcache_insert(&grown, fp, 0, 1, (uint32_t)i, &s2);
                CHECK(a == b && memcmp(&s1, &s2, sizeof s1) == 0);
                spills += a == US_FP_SPILLED;
            }
        }
        if (i % 97 == 96) {
            size_t n1 = 0, n2 = 0;
            if (h.h2 % 3 == 0) {
                us_fpcache_rollback(&full);
                us_fpcache_rollback(&grown);
            } else {
                us_fpcache_commit(&full, over_full, &n1);
                us_fpcache_commit(&grown, over_grown, &n2);
            }
            CHECK(n1 == n2 && full.ndirty == 0 && grown.ndirty == 0);
        }
    }
    CHECK(grown.nbuckets == BUCKETS && spills > 0);
    CHECK(memcmp(full.entries, grown.entries, BUCKETS * US_FPCACHE_WAYS * sizeof(us_fp_entry)) == 0);
    us_fpcache_clear(&grown);
    CHECK(grown.nbuckets == 64 && !grown.entries[0].used);
    cache_free(&full);
    us_fpcache_free(&grown);
}

int main(void)
{
    test_verification_value();
    test_layout(US_LAYOUT_STANDARD, 100003, 10);
    test_layout(US_LAYOUT_BLOCKED, 512 * 200, 9);
    test_layout(US_LAYOUT_BLOCKED, 512 * 200, 20); /* more fields than one word holds */
    test_md5_rfc1321();
    test_md5_padding_boundaries();
    test_md5_streaming_and_seed();
    test_md5_many();
    test_md5_million();
    test_counter_packing();
    test_counter_multiset_and_events();
    test_counters_random();
    test_fpcache_lru();
    test_fpcache_buckets();
    test_fpcache_grows_as_a_full_one();
    if (failures) {
        fprintf(stderr, "%d failed\n", failures);
        return 1;
    }
    printf("csrc: all checks passed\n");
    return 0;
}
