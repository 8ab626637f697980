/* md5.c: MD5 from RFC 1321 (four rounds of 16 operations on a 512-bit block). */
#include "md5.h"

#include "bytes.h"

#include <string.h>

/* T[i] = floor(2^32 * |sin(i + 1)|), the RFC's table, and the per-operation shift amounts. */
static const uint32_t T[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391,
};
static const uint8_t S[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};

static inline uint32_t rotl32(uint32_t x, unsigned r) { return (x << r) | (x >> (32 - r)); }

/* The four rounds, unrolled (RFC 1321 section 3.4), so that the round function, message index
 * and shift of every step are constants. step: a = b + ((a + f(b, c, d) + x[g] + T[i]) <<< s). */
#define F(b, c, d) ((d) ^ ((b) & ((c) ^ (d))))
#define G(b, c, d) ((c) ^ ((d) & ((b) ^ (c))))
#define H(b, c, d) ((b) ^ (c) ^ (d))
#define I(b, c, d) ((c) ^ ((b) | ~(d)))
#define STEP(f, a, b, c, d, xg, t, s) (a) = (b) + rotl32((a) + f((b), (c), (d)) + (xg) + (t), (s))

/* The 64 steps of a block on a, b, c, d and the message words x[0 .. 16), with `step` the
 * one-step macro of the word type (STEP: one message; LSTEP: a lane each). */
#define MD5_ROUNDS(step)                                                                           \
    for (int i = 0; i < 16; i += 4) { /* round 1: g = i */                                         \
        step(F, a, b, c, d, x[i], T[i], S[0][0]);                                                  \
        step(F, d, a, b, c, x[i + 1], T[i + 1], S[0][1]);                                          \
        step(F, c, d, a, b, x[i + 2], T[i + 2], S[0][2]);                                          \
        step(F, b, c, d, a, x[i + 3], T[i + 3], S[0][3]);                                          \
    }                                                                                              \
    for (int i = 16; i < 32; i += 4) { /* round 2: g = 5i + 1 mod 16 */                            \
        step(G, a, b, c, d, x[(5 * i + 1) & 15], T[i], S[1][0]);                                   \
        step(G, d, a, b, c, x[(5 * i + 6) & 15], T[i + 1], S[1][1]);                               \
        step(G, c, d, a, b, x[(5 * i + 11) & 15], T[i + 2], S[1][2]);                              \
        step(G, b, c, d, a, x[(5 * i + 16) & 15], T[i + 3], S[1][3]);                              \
    }                                                                                              \
    for (int i = 32; i < 48; i += 4) { /* round 3: g = 3i + 5 mod 16 */                            \
        step(H, a, b, c, d, x[(3 * i + 5) & 15], T[i], S[2][0]);                                   \
        step(H, d, a, b, c, x[(3 * i + 8) & 15], T[i + 1], S[2][1]);                               \
        step(H, c, d, a, b, x[(3 * i + 11) & 15], T[i + 2], S[2][2]);                              \
        step(H, b, c, d, a, x[(3 * i + 14) & 15], T[i + 3], S[2][3]);                              \
    }                                                                                              \
    for (int i = 48; i < 64; i += 4) { /* round 4: g = 7i mod 16 */                                \
        step(I, a, b, c, d, x[(7 * i) & 15], T[i], S[3][0]);                                       \
        step(I, d, a, b, c, x[(7 * i + 7) & 15], T[i + 1], S[3][1]);                               \
        step(I, c, d, a, b, x[(7 * i + 14) & 15], T[i + 2], S[3][2]);                              \
        step(I, b, c, d, a, x[(7 * i + 21) & 15], T[i + 3], S[3][3]);                              \
    }

static void md5_block(uint32_t state[4], const uint8_t *p)
{
    uint32_t x[16];
    for (int i = 0; i < 16; i++) x[i] = us_load32_le(p + 4 * i);
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    MD5_ROUNDS(STEP)
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

void us_md5_init(us_md5_ctx *ctx)
{
    ctx->state[0] = 0x67452301;
    ctx->state[1] = 0xefcdab89;
    ctx->state[2] = 0x98badcfe;
    ctx->state[3] = 0x10325476;
    ctx->length = 0;
    ctx->used = 0;
}

void us_md5_update(us_md5_ctx *ctx, const void *data, size_t len)
{
    const uint8_t *p = (const uint8_t *)data;
    ctx->length += len;
    if (ctx->used) {
        size_t take = 64 - ctx->used < len ? 64 - ctx->used : len;
        memcpy(ctx->block + ctx->used, p, take);
        ctx->used += take;
        p += take;
        len -= take;
        if (ctx->used < 64) return;
        md5_block(ctx->state, ctx->block);
        ctx->used = 0;
    }
    for (; len >= 64; p += 64, len -= 64) md5_block(ctx->state, p);
    memcpy(ctx->block, p, len);
    ctx->used = len;
}

void us_md5_final(us_md5_ctx *ctx, uint8_t out[16])
{
    uint64_t bits = ctx->length * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = ctx->used < 56 ? 56 - ctx->used : 120 - ctx->used;
    us_store64_le(pad + padlen, bits);
    us_md5_update(ctx, pad, padlen + 8);
    for (int i = 0; i < 4; i++) {
        uint32_t s = ctx->state[i];
        out[4 * i] = (uint8_t)s;
        out[4 * i + 1] = (uint8_t)(s >> 8);
        out[4 * i + 2] = (uint8_t)(s >> 16);
        out[4 * i + 3] = (uint8_t)(s >> 24);
    }
}

void us_md5(const void *data, size_t len, uint32_t seed, uint8_t out[16])
{
    us_md5_ctx ctx;
    us_md5_init(&ctx);
    if (seed) {
        uint8_t s[4] = {(uint8_t)seed, (uint8_t)(seed >> 8), (uint8_t)(seed >> 16),
                        (uint8_t)(seed >> 24)};
        us_md5_update(&ctx, s, 4);
    }
    us_md5_update(&ctx, data, len);
    us_md5_final(&ctx, out);
}

/* ---- many keys side by side (us_md5_many) ---- */

typedef uint32_t lanes_u32 __attribute__((vector_size(4 * US_MD5_LANES)));

/* A macro, not a function: a 32-byte vector argument changes the ABI without AVX. */
#define LSTEP(f, a, b, c, d, xg, t, s)                                                             \
    do {                                                                                           \
        lanes_u32 sum_ = (a) + f((b), (c), (d)) + (xg) + (t);                                      \
        (a) = (b) + ((sum_ << (s)) | (sum_ >> (32 - (s))));                                        \
    } while (0)

/* md5_block for every lane: state[j] holds word j of each lane's state; x[w] word w of each
 * lane's block. */
static void md5_block_lanes(lanes_u32 state[4], const lanes_u32 x[16])
{
    lanes_u32 a = state[0], b = state[1], c = state[2], d = state[3];
    MD5_ROUNDS(LSTEP)
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

static inline void store32_le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* One lane's key: the message is prefix (the seed, 0 or 4 bytes) then the key, padded as
 * us_md5_final pads it, in nblocks blocks. */
typedef struct {
    const uint8_t *key;
    size_t len, total; /* key bytes; prefix + key bytes */
    size_t index;      /* the key's place in the batch */
    size_t block, nblocks;
} md5_lane;

/* Block `lane->block` of the lane's padded message into out (64 bytes). */
static void lane_block(const md5_lane *lane, const uint8_t *prefix, size_t plen, uint8_t *out)
{
    size_t start = lane->block * 64, end = start + 64;
    if (plen == 0 && end <= lane->len) { /* whole inside the key: the common case */
        memcpy(out, lane->key + start, 64);
        return;
    }
    memset(out, 0, 64);
    for (size_t pos = start; pos < end && pos < plen; pos++) out[pos - start] = prefix[pos];
    size_t lo = start > plen ? start : plen, hi = end < lane->total ? end : lane->total;
    if (lo < hi) memcpy(out + (lo - start), lane->key + (lo - plen), hi - lo);
    if (lane->total >= start && lane->total < end) out[lane->total - start] = 0x80;
    if (lane->block + 1 == lane->nblocks) us_store64_le(out + 56, (uint64_t)lane->total * 8);
}

static void lane_start(md5_lane *lane, const uint8_t *const *data, const size_t *len, size_t i,
                       size_t plen)
{
    lane->key = data[i];
    lane->len = len[i];
    lane->total = plen + len[i];
    lane->index = i;
    lane->block = 0;
    lane->nblocks = (lane->total + 8) / 64 + 1;
}

void us_md5_many(const uint8_t *const *data, const size_t *len, size_t n, uint32_t seed,
                 uint8_t (*out)[16])
{
    static const uint32_t init[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    const uint8_t prefix[4] = {(uint8_t)seed, (uint8_t)(seed >> 8), (uint8_t)(seed >> 16),
                               (uint8_t)(seed >> 24)};
    size_t plen = seed ? 4 : 0, next = 0, busy = 0;
    md5_lane lane[US_MD5_LANES];
    int active[US_MD5_LANES];
    lanes_u32 state[4], x[16];
    uint8_t block[64];
    for (unsigned l = 0; l < US_MD5_LANES; l++) {
        active[l] = next < n;
        if (active[l]) lane_start(&lane[l], data, len, next++, plen), busy++;
        for (int j = 0; j < 4; j++) state[j][l] = init[j];
    }
    while (busy) {
        for (unsigned l = 0; l < US_MD5_LANES; l++) {
            if (active[l]) lane_block(&lane[l], prefix, plen, block);
            else memset(block, 0, sizeof block); /* an idle lane hashes nothing it keeps */
            for (int w = 0; w < 16; w++) x[w][l] = us_load32_le(block + 4 * w);
        }
        md5_block_lanes(state, x);
        for (unsigned l = 0; l < US_MD5_LANES; l++) {
            if (!active[l] || ++lane[l].block < lane[l].nblocks) continue;
            for (int j = 0; j < 4; j++) {
                store32_le(out[lane[l].index] + 4 * j, state[j][l]);
                state[j][l] = init[j];
            }
            if (next < n) lane_start(&lane[l], data, len, next++, plen);
            else active[l] = 0, busy--;
        }
    }
}
