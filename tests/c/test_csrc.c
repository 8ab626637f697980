/* test_csrc.c: the pure-C core tested without Python (built and run by .ci/run, once under
 * valgrind): the hash's published verification value, probe invariants, batch == single. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "bloom.h"
#include "hash.h"


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

int main(void)
{
    test_verification_value();
    test_layout(US_LAYOUT_STANDARD, 100003, 10);
    test_layout(US_LAYOUT_BLOCKED, 512 * 200, 9);
    test_layout(US_LAYOUT_BLOCKED, 512 * 200, 20); /* more fields than one word holds */
    if (failures) {
        fprintf(stderr, "%d failed\n", failures);
        return 1;
    }
    printf("csrc: all checks passed\n");
    return 0;
}
