"""Known-answer and oracle tests of the C core: the hash and the bit positions it derives.

Three independent references pin the hash: SMHasher's verification value, digests produced by
the mmh3 package (a wrapper of Appleby's reference C++ code), and a pure-Python MurmurHash3
written below from the published algorithm. The index derivation is pinned by a Python oracle
written from the description in csrc/bloom.h, for both layouts.
"""

from __future__ import annotations

import random
import struct

import mmh3
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from test_xxh3 import as_core_bytes, oracle_xxh3_128
from urlseen import BloomFilter, _core

M64 = (1 << 64) - 1

# ---- the oracle: MurmurHash3 x64-128 in pure Python ---------------------------------------
# From Appleby's published description (MurmurHash3.cpp, MurmurHash3_x64_128): 16-byte blocks
# read as two little-endian u64, mixed into h1/h2; a zero-padded tail of up to 15 bytes; length
# folded in; both halves finalized with fmix64. Output = h1 then h2, each little-endian.

_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    h ^= h >> 33
    return h


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & M64, 31) * _C2) & M64


def _mix_k2(k2: int) -> int:
    return (_rotl((k2 * _C2) & M64, 33) * _C1) & M64


def oracle_murmur3(key: bytes | str, seed: int = 0) -> bytes:
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    h1 = h2 = seed
    nblocks = len(data) // 16
    for k1, k2 in struct.iter_unpack("<QQ", data[: nblocks * 16]):
        h1 ^= _mix_k1(k1)
        h1 = (((_rotl(h1, 27) + h2) & M64) * 5 + 0x52DCE729) & M64
        h2 ^= _mix_k2(k2)
        h2 = (((_rotl(h2, 31) + h1) & M64) * 5 + 0x38495AB5) & M64
    tail = data[nblocks * 16 :]
    if len(tail) > 8:
        h2 ^= _mix_k2(int.from_bytes(tail[8:], "little"))
    if tail:
        h1 ^= _mix_k1(int.from_bytes(tail[:8], "little"))
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & M64
    h2 = (h2 + h1) & M64
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & M64
    h2 = (h2 + h1) & M64
    return h1.to_bytes(8, "little") + h2.to_bytes(8, "little")


# ---- the oracle: bit positions (csrc/bloom.h) -----------------------------------------------

LAYOUT_CODES = {"standard": _core.LAYOUT_STANDARD, "blocked": _core.LAYOUT_BLOCKED}


def _reduce(x: int, n: int) -> int:
    """Lemire's fastrange: (x * n) >> 64 maps a u64 onto [0, n)."""
    return (x * n) >> 64


def oracle_digest(key: bytes | str, seed: int, hash_id: int) -> bytes:
    """The filter's 128-bit digest as 16 bytes h1 || h2 (little-endian), by hash id."""
    if hash_id == _core.HASH_MURMUR3_X64_128:
        return oracle_murmur3(key, seed)
    if hash_id == _core.HASH_XXH3_64:
        # h1 = XXH3-64 (the xxhash package wraps the reference library), h2 = fmix64(h1).
        h1 = xxhash.xxh3_64_intdigest(key.encode() if isinstance(key, str) else key, seed)
        return h1.to_bytes(8, "little") + _fmix(h1).to_bytes(8, "little")
    return as_core_bytes(oracle_xxh3_128(key, seed))


def oracle_positions(
    key: bytes | str, nbits: int, k: int, layout: int, seed: int = 0, hash_id: int = 0
) -> list[int]:
    digest = oracle_digest(key, seed, hash_id)
    h1 = int.from_bytes(digest[:8], "little")
    h2 = int.from_bytes(digest[8:], "little")
    if layout == _core.LAYOUT_BLOCKED:
        # reduce(h1) picks the 512-bit block; the k bits in it are successive 9-bit fields of
        # h2, least significant first; after every 7 fields the next word is
        # fmix64(previous word + h1). Independent positions: two may coincide.
        base = _reduce(h1, nbits // 512) * 512
        word = fields = h2
        out = []
        for i in range(k):
            if i and i % 7 == 0:
                word = fields = _fmix((word + h1) & M64)
            out.append(base + (fields & 511))
            fields >>= 9
        return out
    # Standard: enhanced double hashing (Dillinger and Manolios): x = h1, y = h2 | 1;
    # position i = reduce(x); x += y; y += i + 1 (all mod 2**64).
    x, y = h1, h2 | 1
    out = []
    for i in range(k):
        out.append(_reduce(x, nbits))
        x = (x + y) & M64
        y = (y + i + 1) & M64
    return out


# ---- known answers --------------------------------------------------------------------------


def smhasher_verification(hash_fn) -> int:
    """SMHasher's VerificationTest: hash key[0..i) = 0, 1, ..., i-1 with seed 256 - i for
    i in 0..255, hash the 256 concatenated digests with seed 0, and read the first 4 bytes of
    that as a little-endian u32."""
    digests = b"".join(hash_fn(bytes(range(i)), 256 - i) for i in range(256))
    return int.from_bytes(hash_fn(digests, 0)[:4], "little")


# Published by SMHasher (main.cpp, the g_hashes table) for MurmurHash3_x64_128.
SMHASHER_X64_128 = 0x6384BA69


def test_smhasher_verification_value():
    assert smhasher_verification(_core.murmur3_x64_128) == SMHASHER_X64_128


def test_oracle_passes_smhasher_verification():
    # The oracle is a reference only if it is right: check it against the published value too.
    assert smhasher_verification(oracle_murmur3) == SMHASHER_X64_128


MIB_KEY = bytes(range(256)) * 4096  # 1 MiB

# (key, seed, hex digest). Digests from mmh3 5.x, mmh3.hash_bytes(key, seed, x64arch=True),
# which wraps Appleby's reference MurmurHash3_x64_128. "The quick brown fox..." is also the
# digest commonly published for that sentence. Lengths 15/16/17 and 31/32 straddle the
# block and tail boundaries.
KNOWN_DIGESTS = [
    (b"", 0, "00000000000000000000000000000000"),
    (b"", 1, "b55cff6ee5ab10468335f878aa2d6251"),
    (b"hello", 0, "029bbd41b3a7d8cb191dae486a901e5b"),
    (b"hello", 42, "086faf60c9b3b8c47abcefb075b83423"),
    (b"The quick brown fox jumps over the lazy dog", 0, "6c1b07bc7bbc4be347939ac4a93c437a"),
    (bytes(range(15)), 0, "e92549fd98152347e97dc688ee6d84cd"),
    (bytes(range(16)), 0, "303f9091b524494445e82f76566490ab"),
    (bytes(range(17)), 0, "0ec2e79f0ff4765c24a8da9e6b025fc1"),
    (bytes(range(31)), 123, "a2e53825f0880ec59c8ebce27fade0a2"),
    (bytes(range(32)), 0xFFFFFFFF, "81a5ce72a144f6b1381ccc40a1894854"),
    ("héllo wörld ☃ 🌍".encode(), 7, "f5bd1b23dc789401866faa330f78e316"),
    (b"\x00" * 8, 0, "cbc357ccb763df2852fee8c4fc7d55f2"),
    (MIB_KEY, 0, "2ef9c143e2d2d20eaf36c43449c9abc1"),
    (MIB_KEY, 2**31, "5ee2e362dc13cefbdfed48059e8c8b1b"),
]


@pytest.mark.parametrize(
    "key, seed, expected", KNOWN_DIGESTS, ids=[f"len{len(k)}-seed{s}" for k, s, _ in KNOWN_DIGESTS]
)
def test_known_digests(key, seed, expected):
    assert _core.murmur3_x64_128(key, seed).hex() == expected
    assert _core.murmur3_x64_128(key, seed=seed).hex() == expected


@pytest.mark.parametrize(
    "key, seed, expected",
    [v for v in KNOWN_DIGESTS if len(v[0]) < 100],
    ids=[f"len{len(k)}-seed{s}" for k, s, _ in KNOWN_DIGESTS if len(k) < 100],
)
def test_oracle_known_digests(key, seed, expected):
    assert oracle_murmur3(key, seed).hex() == expected


def test_default_seed_is_zero():
    assert _core.murmur3_x64_128(b"hello") == _core.murmur3_x64_128(b"hello", 0)
    assert _core.murmur3_x64_128(b"hello") != _core.murmur3_x64_128(b"hello", 1)


def test_str_hashes_as_its_utf8_bytes():
    for text in ["", "https://example.com/", "héllo", "日本語", "🌍\x00x", "\u0080" * 40]:
        assert _core.murmur3_x64_128(text, 5) == _core.murmur3_x64_128(text.encode(), 5)
        assert _core.positions(text, 10_000, 7, 0) == _core.positions(text.encode(), 10_000, 7, 0)


def test_buffer_keys_hash_as_their_bytes():
    key = b"https://example.com/\x00\xff"
    expected = _core.murmur3_x64_128(key, 3)
    assert _core.murmur3_x64_128(bytearray(key), 3) == expected
    assert _core.murmur3_x64_128(memoryview(key), 3) == expected


def test_randomized_cross_check_against_mmh3():
    rng = random.Random(20240611)
    for _ in range(2000):
        key = rng.randbytes(rng.choice([rng.randrange(0, 40), rng.randrange(0, 4000)]))
        seed = rng.getrandbits(32)
        assert _core.murmur3_x64_128(key, seed) == mmh3.hash_bytes(key, seed, x64arch=True)


# ---- C == Python oracle on random inputs ---------------------------------------------------

keys = st.one_of(
    st.binary(max_size=200),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=60),
)
seeds = st.integers(0, 2**32 - 1)
ks = st.integers(1, _core.MAX_K)


@settings(max_examples=300, deadline=None)
@given(key=keys, seed=seeds)
def test_murmur3_matches_oracle(key, seed):
    assert _core.murmur3_x64_128(key, seed) == oracle_murmur3(key, seed)


@st.composite
def shapes(draw, max_nbits=M64):
    """(nbits, k, layout) of a valid filter: blocked nbits are whole 512-bit blocks."""
    layout = draw(st.sampled_from([_core.LAYOUT_STANDARD, _core.LAYOUT_BLOCKED]))
    if layout == _core.LAYOUT_BLOCKED:
        nbits = 512 * draw(st.integers(1, max_nbits // 512))
    else:
        nbits = draw(st.integers(1, max_nbits))
    return nbits, draw(ks), layout


hash_ids = st.sampled_from([_core.HASH_XXH3_128, _core.HASH_MURMUR3_X64_128, _core.HASH_XXH3_64])


@settings(max_examples=300, deadline=None)
@given(key=keys, shape=shapes(), seed=seeds, hash_id=hash_ids)
def test_positions_match_oracle(key, shape, seed, hash_id):
    nbits, k, layout = shape
    got = _core.positions(key, nbits, k, layout, seed, hash_id)
    assert got == oracle_positions(key, nbits, k, layout, seed, hash_id)
    assert len(got) == k and all(0 <= p < nbits for p in got)


@settings(max_examples=100, deadline=None)
@given(key=keys, shape=shapes(max_nbits=1 << 16), seed=seeds, hash_id=hash_ids)
def test_bitfilter_positions_and_bits_match_oracle(key, shape, seed, hash_id):
    nbits, k, layout = shape
    offset = 3  # the bits need not start at byte 0 of the buffer
    buf = bytearray(offset + (nbits + 7) // 8)
    f = _core.BitFilter(buf, offset, nbits, k, layout, seed, hash=hash_id)
    expected = oracle_positions(key, nbits, k, layout, seed, hash_id)
    assert f.positions(key) == expected
    assert key not in f
    assert f.add(key) is True
    # Bit j lives in byte j // 8 at bit j % 8, least significant first (csrc/bloom.h).
    bits = bytes(buf[offset:])
    set_bits = {j for j in range(nbits) if bits[j >> 3] >> (j & 7) & 1}
    assert set_bits == set(expected)
    assert buf[:offset] == bytearray(offset)
    assert key in f and f.add(key) is False
    # Membership needs every one of the k bits: clear any one and the key is new again.
    victim = expected[len(expected) // 2]
    buf[offset + (victim >> 3)] &= ~(1 << (victim & 7)) & 0xFF
    assert key not in f
    assert f.add(key) is True


@settings(max_examples=200, deadline=None)
@given(key=keys, blocks=st.integers(1, 1 << 40), k=ks, seed=seeds)
def test_blocked_positions_lie_in_one_block(key, blocks, k, seed):
    got = _core.positions(key, blocks * 512, k, _core.LAYOUT_BLOCKED, seed)
    assert len(got) == k and len({p // 512 for p in got}) == 1


def _blocked_patterns(k: int, nkeys: int = 20_000) -> list[list[int]]:
    return [_core.positions(f"k{i}".encode(), 512, k, _core.LAYOUT_BLOCKED) for i in range(nkeys)]


def test_blocked_offsets_are_uniform():
    patterns = _blocked_patterns(20)
    counts = [0] * 512
    for pattern in patterns:
        for p in pattern:
            counts[p] += 1
    mean = len(patterns) * 20 / 512
    assert all(abs(c - mean) < 6 * mean**0.5 for c in counts)
    assert len(set(map(tuple, patterns))) == len(patterns)


def test_blocked_positions_are_as_distinct_as_independent_picks():
    # With independent uniform offsets, some two of k = 20 coincide with probability
    # 1 - prod(1 - j/512 for j < 20) ~ 0.31 (a scheme with distinct offsets has 0); a
    # pattern whose later part copies an earlier part (probability 512**-7) must not happen.
    patterns = _blocked_patterns(20)
    repeats = sum(len(set(p)) < 20 for p in patterns) / len(patterns)
    assert repeats < 0.37
    assert not any(p[14:20] == p[7:13] for p in patterns)


@pytest.mark.parametrize("hash_name", ["xxh3_64", "xxh3_128", "murmur3_x64_128"])
def test_bloomfilter_positions_match_oracle(hash_name):
    for layout in ("standard", "blocked"):
        f = BloomFilter(capacity=5000, error_rate=0.01, layout=layout, seed=99, hash=hash_name)
        for i in range(200):
            key = f"https://example.com/{i}"
            expected = oracle_positions(key, f.nbits, f.k, LAYOUT_CODES[layout], 99, f.hash)
            assert f.positions(key) == expected


def test_count_is_mirrored_into_the_buffer():
    buf = bytearray(8 + 128)
    f = _core.BitFilter(buf, 8, 1024, 4, _core.LAYOUT_STANDARD, 0, 5, 0)
    assert len(f) == 5 and int.from_bytes(buf[:8], "little") == 5
    fresh = sum(f.add_many([b"a", b"b", b"a", b"c"]))
    assert len(f) == 5 + fresh
    assert int.from_bytes(buf[:8], "little") == len(f)


def test_count_is_mirrored_into_the_buffer_zero_included():
    import struct

    from urlseen import _core

    buffer = bytearray(64 + 8)
    bits = _core.BitFilter(buffer, 0, 512, 3, _core.LAYOUT_STANDARD, 0, 0, 64)
    bits.add_many(["a", "b"])
    assert struct.unpack_from("<Q", buffer, 64)[0] == 2
    bits.count = 7
    assert struct.unpack_from("<Q", buffer, 64)[0] == 7
    bits.count = 0  # a reset must reach the state file too, not only len()
    assert struct.unpack_from("<Q", buffer, 64)[0] == 0 and len(bits) == 0
