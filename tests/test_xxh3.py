"""XXH3-128 (csrc/xxh3.c, `_core.xxh3_128`): known answers, the xxhash package, a Python oracle.

Three references pin the hash: digests produced by the xxhash package (a wrapper of the reference
xxHash C library) hard-coded below, the package itself on random inputs, and a pure-Python
XXH3-128 written below from the xxHash specification (doc/xxhash_spec.md in Cyan4973/xxHash).
`_core.xxh3_128` returns the 128-bit result as 16 bytes, low64 then high64, each little-endian:
`xxhash.xxh3_128_intdigest(key, seed).to_bytes(16, "little")` (not the package's big-endian
canonical `xxh3_128_digest`).
"""

from __future__ import annotations

import random

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen import _core

M64 = (1 << 64) - 1

# ---- the oracle: XXH3-128 in pure Python -------------------------------------------------------
# From the xxHash specification (doc/xxhash_spec.md), section by section: one branch per length
# class (0, 1-3, 4-8, 9-16, 17-128, 129-240, > 240), the default secret and primes as printed
# there, all words read little-endian, all arithmetic mod 2**64.

P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
P64_1, P64_2, P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P64_4, P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
PRIME_MX1, PRIME_MX2 = 0x165667919E3779F9, 0x9FB21C651E98DF25

DEFAULT_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)


def _u64(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 8], "little")


def _u32(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 4], "little")


def _bswap32(x: int) -> int:
    return int.from_bytes(x.to_bytes(4, "little"), "big")


def _bswap64(x: int) -> int:
    return int.from_bytes(x.to_bytes(8, "little"), "big")


def _fold(a: int, b: int) -> int:
    """lowerHalf xor higherHalf of the full 128-bit product."""
    p = a * b
    return (p ^ (p >> 64)) & M64


def _avalanche(x: int) -> int:
    x ^= x >> 37
    x = (x * PRIME_MX1) & M64
    return x ^ (x >> 32)


def _avalanche_xxh64(x: int) -> int:
    x ^= x >> 33
    x = (x * P64_2) & M64
    x ^= x >> 29
    x = (x * P64_3) & M64
    return x ^ (x >> 32)


def _mix_step(data: bytes, off: int, secret: bytes, soff: int, seed: int) -> int:
    return _fold(
        _u64(data, off) ^ ((_u64(secret, soff) + seed) & M64),
        _u64(data, off + 8) ^ ((_u64(secret, soff + 8) - seed) & M64),
    )


def _mix_two(acc: list[int], data: bytes, o1: int, o2: int, soff: int, seed: int) -> None:
    acc[0] = (acc[0] + _mix_step(data, o1, DEFAULT_SECRET, soff, seed)) & M64
    acc[1] = (acc[1] + _mix_step(data, o2, DEFAULT_SECRET, soff + 16, seed)) & M64
    acc[0] ^= (_u64(data, o2) + _u64(data, o2 + 8)) & M64
    acc[1] ^= (_u64(data, o1) + _u64(data, o1 + 8)) & M64


def _short(data: bytes, seed: int) -> tuple[int, int]:
    n, s = len(data), DEFAULT_SECRET
    if n == 0:
        return (
            _avalanche_xxh64(seed ^ _u64(s, 64) ^ _u64(s, 72)),
            _avalanche_xxh64(seed ^ _u64(s, 80) ^ _u64(s, 88)),
        )
    if n <= 3:
        combined = data[n - 1] | n << 8 | data[0] << 16 | data[n >> 1] << 24
        swapped = _bswap32(combined)
        rot = ((swapped << 13) | (swapped >> 19)) & 0xFFFFFFFF
        low = (((_u32(s, 0) ^ _u32(s, 4)) + seed) & M64) ^ combined
        high = (((_u32(s, 8) ^ _u32(s, 12)) - seed) & M64) ^ rot
        return _avalanche_xxh64(low), _avalanche_xxh64(high)
    if n <= 8:
        modified_seed = seed ^ (_bswap32(seed & 0xFFFFFFFF) << 32)
        combined = _u32(data, 0) | _u32(data, n - 4) << 32
        value = (((_u64(s, 16) ^ _u64(s, 24)) + modified_seed) & M64) ^ combined
        product = value * ((P64_1 + (n << 2)) & M64)
        high, low = product >> 64, product & M64
        high = (high + (low << 1)) & M64
        low ^= high >> 3
        low ^= low >> 35
        low = (low * PRIME_MX2) & M64
        low ^= low >> 28
        return low, _avalanche(high)
    first, last = _u64(data, 0), _u64(data, n - 8)
    val1 = (((_u64(s, 32) ^ _u64(s, 40)) - seed) & M64) ^ first ^ last
    val2 = (((_u64(s, 48) ^ _u64(s, 56)) + seed) & M64) ^ last
    product = val1 * P64_1
    low = ((product & M64) + ((n - 1) << 54)) & M64
    high = ((product >> 64) + ((val2 >> 32) << 32) + (val2 & 0xFFFFFFFF) * P32_2) & M64
    low ^= _bswap64(high)
    product = low * P64_2
    low, high = product & M64, ((product >> 64) + high * P64_2) & M64
    return _avalanche(low), _avalanche(high)


def _medium(data: bytes, seed: int) -> tuple[int, int]:
    n = len(data)
    acc = [(n * P64_1) & M64, 0]
    if n <= 128:
        for i in reversed(range(((n - 1) >> 5) + 1)):
            _mix_two(acc, data, i * 16, n - i * 16 - 16, i * 32, seed)
    else:
        for i in range(4):
            _mix_two(acc, data, i * 32, i * 32 + 16, i * 32, seed)
        acc = [_avalanche(acc[0]), _avalanche(acc[1])]
        for i in range(4, n >> 5):
            _mix_two(acc, data, i * 32, i * 32 + 16, (i - 4) * 32 + 3, seed)
        _mix_two(acc, data, n - 16, n - 32, 103, -seed & M64)
    low = (acc[0] + acc[1]) & M64
    high = (acc[0] * P64_1 + acc[1] * P64_4 + ((n - seed) & M64) * P64_2) & M64
    return _avalanche(low), -_avalanche(high) & M64


def _long(data: bytes, seed: int) -> tuple[int, int]:
    n = len(data)
    words = [_u64(DEFAULT_SECRET, 8 * i) for i in range(24)]
    words = [(w + seed if i % 2 == 0 else w - seed) & M64 for i, w in enumerate(words)]
    secret = b"".join(w.to_bytes(8, "little") for w in words)
    acc = [P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1]

    def accumulate(off: int, soff: int) -> None:
        for i in range(8):
            lane = _u64(data, off + 8 * i)
            value = lane ^ _u64(secret, soff + 8 * i)
            acc[i ^ 1] = (acc[i ^ 1] + lane) & M64
            acc[i] = (acc[i] + (value & 0xFFFFFFFF) * (value >> 32)) & M64

    stripes_per_block = (192 - 64) // 8
    block = 64 * stripes_per_block
    blocks = (n - 1) // block  # the last block, even a full one, is not scrambled
    for b in range(blocks):
        for j in range(stripes_per_block):
            accumulate(b * block + 64 * j, 8 * j)
        for i in range(8):
            a = acc[i] ^ (acc[i] >> 47) ^ _u64(secret, 128 + 8 * i)
            acc[i] = (a * P32_1) & M64
    for j in range((n - blocks * block - 1) // 64):
        accumulate(blocks * block + 64 * j, 8 * j)
    accumulate(n - 64, 192 - 71)

    def merge(init: int, soff: int) -> int:
        result = init
        for i in range(4):
            result += _fold(
                acc[2 * i] ^ _u64(secret, soff + 16 * i),
                acc[2 * i + 1] ^ _u64(secret, soff + 16 * i + 8),
            )
        return _avalanche(result & M64)

    return merge((n * P64_1) & M64, 11), merge(~(n * P64_2) & M64, 192 - 75)


def oracle_xxh3_128(key: bytes | str, seed: int = 0) -> int:
    """XXH3-128 of key (str as UTF-8) as the 128-bit integer (high64 << 64) | low64."""
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if len(data) <= 16:
        low, high = _short(data, seed)
    elif len(data) <= 240:
        low, high = _medium(data, seed)
    else:
        low, high = _long(data, seed)
    return high << 64 | low


def as_core_bytes(digest: int) -> bytes:
    """The layout `_core.xxh3_128` returns: low64 then high64, each little-endian."""
    return digest.to_bytes(16, "little")


# ---- known answers ------------------------------------------------------------------------------


def kat_data(n: int) -> bytes:
    return bytes((i * 131 + 17) % 251 for i in range(n))


MIB_KEY = bytes(range(256)) * 4096  # 1 MiB

# (len, seed, xxh3_128_intdigest(kat_data(len), seed)). Digests from the xxhash package 4.1
# (xxhash.xxh3_128_intdigest, which wraps the reference xxHash 0.8 C library). The lengths
# bracket every class boundary (0 | 1-3 | 4-8 | 9-16 | 17-128 | 129-240 | > 240), the 17-128
# round boundaries (32, 64, 96), the 129-240 chunk boundaries, and the 1024-byte block of the
# long path (1024 = one unscrambled block, 1025 = one scramble).
KNOWN_DIGESTS = [
    (0, 0, 0x99AA06D3014798D86001C324468D497F),
    (0, 1, 0xD9265CC53BB2B9AE6131B78F753823CD),
    (0, M64, 0x5334EC22748B5FCD2D10110A247D19DD),
    (1, 0, 0xF46D8182F5A4994AF319FE2BDFCDFEBD),
    (1, 1, 0xFB39FB176FBE631520B77B9979362F8E),
    (1, M64, 0x0A1AE145CB7873D79DD1943F75A68EC3),
    (2, 0, 0xAA3A4E432E4C5D126C2CA74CA555B69D),
    (2, 1, 0x8326F00DDEBECD6962A3B97375AAEF44),
    (2, M64, 0x1C5CF2EF2CF881A6387EF03CD8000C00),
    (3, 0, 0xF96F0BB52A613771783F5BB022906E8D),
    (3, 1, 0x37B84B0B3D77C515BF9610F63FEC3765),
    (3, M64, 0x1D927601D61CEBEF72C65D07854A90FF),
    (4, 0, 0x6D6586A87CF1E015C0B558323EE47119),
    (4, 1, 0x1CBDCC44A2AB7F76F099FCF9BA74B483),
    (4, M64, 0xB93D2B292811A6B0870B0E5706202701),
    (5, 0, 0xB565D1BA0C9A6386778E07B466BE3208),
    (5, 1, 0x835137CA08B84A90B7EF97233384F823),
    (5, M64, 0x1AD2827BEDE2153DC3A4CFD2352CC6AB),
    (7, 0, 0x2CE1F4C19C778D79730101EBE8458410),
    (7, 1, 0x00661473C0996E8FC83B5A62AFB68956),
    (7, M64, 0x18A90ED02A09EF6FF99635C8FC43A96A),
    (8, 0, 0x931E9B27F65C5C343E96B9C735855762),
    (8, 1, 0xB5DAD484218FA8AE744DAB481F29AFDC),
    (8, M64, 0xC6AF71C18E06D3FB0C06B3336818AB97),
    (9, 0, 0x94D17D7C66158802AC267F38040CDA37),
    (9, 1, 0xCF05337E71C2C9C42CCF85BC94BC3AA9),
    (9, M64, 0x86ABF26DF7D175AB8C6C737516AF653B),
    (12, 0, 0x8E35E14C936191A7A24CF042BE411C1F),
    (12, 1, 0x393F34B113EBD71E98B9B148FFC872AE),
    (12, M64, 0x07B85B8685C07B14FA9FF9563B7F93B2),
    (15, 0, 0x6DB4E4445D5745013DEF3BD87A1AC6FC),
    (15, 1, 0x1B173C8A350E20CBB2F124D2AAA5A25D),
    (15, M64, 0xF72DD34C211FC4C1123F7D66914F89F4),
    (16, 0, 0x2088DA67F0BB69BD55148810A7C7220F),
    (16, 1, 0x5F9CFE63F82A8FF878213DFD06F51095),
    (16, M64, 0xAE1891307B848F396B4FD3039A66BF9B),
    (17, 0, 0x67DF71659277E887EED4468381BD4C82),
    (17, 1, 0x087546978C46FD903DEEABDF2DB6DA31),
    (17, M64, 0xAF668E556E54857AB06621B6B2E05E06),
    (31, 0, 0x39C58551D1ACB26A691A8064C7B53E8F),
    (31, 1, 0x2EBB5DF54CD6B3E4469EEFB64A8B1416),
    (31, M64, 0x6C8B7BAAA724622852D8FDDE9D08A6AA),
    (32, 0, 0xF2212B144F039AA5851B34FC259B770C),
    (32, 1, 0x0D6C717305DB432AA5D4E88B0D28A5A1),
    (32, M64, 0x469BC88814A2742DEF70D8D0FEA6BB16),
    (33, 0, 0x8A9963A3D636E68C0CFD5589081E54B1),
    (33, 1, 0xAD82CDDEA914752B06B73202F514B097),
    (33, M64, 0x352CDFCDCA62F8F9D18E6151B6C17CB2),
    (48, 0, 0x2F3EF2097AB71CC9AF002C9D010CDF3D),
    (48, 1, 0xB1BF8C687DDB193E21831A73CCE8774C),
    (48, M64, 0xB0F958B24895DD8CD34B8E5367B133C7),
    (63, 0, 0xCBA00FA889A5224994EADD5B0D2E0890),
    (63, 1, 0xA354DFF94B25A24AC7C098972E06507B),
    (63, M64, 0x2EB4044BA11E35068ED6913CC66DC9F6),
    (64, 0, 0x65D32C8070EA5D70AD9481382BF76826),
    (64, 1, 0x9F990B272C98C04B054A87A9CF7F39CA),
    (64, M64, 0x767C9F507C7568BEC7ABDFD7396A6C15),
    (65, 0, 0xF06AEC932F6EB03E487AFE83A47F3373),
    (65, 1, 0x0C75293A3DD021AC5820E47035D4D930),
    (65, M64, 0x923F2EF0F5E52BE9A0E7CDFC52B450EE),
    (96, 0, 0xAFCE68C60FDB563383B9432D2E54A639),
    (96, 1, 0xCAF4BD9B993628D93174CFAC6139757C),
    (96, M64, 0x76108661AFCC019D1252CE7EA4B567A0),
    (127, 0, 0xE5AB7109A10CAEC8F684373B9D166CDD),
    (127, 1, 0x16661440952146F7C510E604E0938775),
    (127, M64, 0x008EE9415440619BEC259A34AE5ABA0E),
    (128, 0, 0x095CA7A2455B39871644D778513DA7D7),
    (128, 1, 0x4F0493259548683FAFDC0C13C57DC9C1),
    (128, M64, 0xB2484E20F2E5D535559EFA13C67CE2F7),
    (129, 0, 0x2ED460C68B9FA257D26BD9267025E357),
    (129, 1, 0x61B170586B2FE556D46ED07515D5B552),
    (129, M64, 0xD37601BD59673CE54EC722C159C92601),
    (144, 0, 0xD74CC56B9861A0F96C598F623792366C),
    (144, 1, 0x1F2195EA0196DBC5A7AEE9BC9E139F54),
    (144, M64, 0x2DE69415A7A00BD8CFB473D587136365),
    (159, 0, 0xD1B1ADF80A37154C70989318F1E412F2),
    (159, 1, 0xB071DF1FA273EFBCA53664B58D7A3E7D),
    (159, M64, 0x12554104D5EA9FF8C453263D88A28088),
    (160, 0, 0x4967CE7EE73AFD7D44698A206F87215C),
    (160, 1, 0x5F5AAFBEEDC4899E2B7D5FA59589B929),
    (160, M64, 0xCCA400F32EEE05968F7F2BC939EE9F6F),
    (161, 0, 0x1421654658033D601EFB8B4D5F11B95A),
    (161, 1, 0x36A50CCF59C7DFB44447C060208FC6DA),
    (161, M64, 0xBF026DF76A0746BE7BD7559842B7EA8B),
    (192, 0, 0xC0E23BDD9D14E48779261AC342B59E6F),
    (192, 1, 0xE39FB26490634A3B9C2DA4BD71065822),
    (192, M64, 0x39E3941C63E3B366B380DD56652BD09D),
    (223, 0, 0x2082076FF673D6FC9EAEC186F2627CD2),
    (223, 1, 0xA231206483E517C9647753945F33442B),
    (223, M64, 0xC9D5B996E4ED78B5102DDE2CA87C164E),
    (224, 0, 0x55FB58F245EB7380C3D1F5AEC50AD11A),
    (224, 1, 0x2D37339B4B3C2F3B84399AAAB0D6A8AA),
    (224, M64, 0x34B60377A3C1C2424D0F631E4ACD5F20),
    (239, 0, 0x2A50E91A0B78F97EAE75C76EB8E0F8BA),
    (239, 1, 0x5FFB300C976E6C28769E6A4134387D07),
    (239, M64, 0x58F8F645217B7C232CD46D9B3CBF66E6),
    (240, 0, 0xFB0A8726D71CD0EFA0475D2F71F49157),
    (240, 1, 0xE93750171C03D4694078ABA03E1F69B5),
    (240, M64, 0x7B6A658BBB305EA41E48960CA1E6041A),
    (241, 0, 0xB950025876F5F710CCF4C89522B37F0A),
    (241, 1, 0x0538226D0988C53368CAADE8592B49F9),
    (241, M64, 0xFE342A622EF47E913ED5D67E5F877217),
    (255, 0, 0xFD0E9FF86C00F9EB9727E8296C83A430),
    (255, 1, 0xFB4ABED4818C62A143F783595623C5ED),
    (255, M64, 0x8A4DE5F896039133F8D74E6D6875577A),
    (256, 0, 0x0AFC1581E0B3CE8147C1156A94BEF3EE),
    (256, 1, 0x0F3297EB67477121C1D4F57B835BDFDB),
    (256, M64, 0x4AF66C16FD549DB31EB1A113C57F58DB),
    (260, 0, 0x9A6FA80E025C8B80BE44A645C852C543),
    (260, 1, 0x675D8174541A4C268649FDA801821AB3),
    (260, M64, 0xADA95E8B976ACEB452ED31DD711AD324),
    (1024, 0, 0x63B2432A9BAF0F34FCC808DC4130319C),
    (1024, 1, 0xB810B26B96BEC3F0E02AFE870F675CFD),
    (1024, M64, 0x0D27BD30F0B360687EED85213666AF04),
    (1025, 0, 0x807153D7F20E289CE843AAB14FDFD0BF),
    (1025, 1, 0x0D39FC0DF288EF237D331179B872598A),
    (1025, M64, 0x3E8357D86595F13587AC283BA3309FA0),
    (2048, 0, 0x3CBEE39154CF8499BC82CF5266784A2C),
    (2048, 1, 0x29085D556649F2EA1D3044F84135CA88),
    (2048, M64, 0x9FC7FA45018C28881EB20E83EC90F6D7),
    (2049, 0, 0x00FAC2E4D94AA3D1533F3414D7E1C594),
    (2049, 1, 0x34ED3B376F71CA1D49500A63624498C7),
    (2049, M64, 0x92C81D8FF4F0FA698678E828683F1510),
]

# (seed, digest) of MIB_KEY, from the same package.
KNOWN_MIB_DIGESTS = [
    (0, 0x1B208D2839093774D36C0E13A3DF139E),
    (1, 0x37BE93F35FF95B4994F6A4FED326C421),
    (M64, 0xB362E1300A2B07360D9E88A23AEA575E),
]


@pytest.mark.parametrize(
    "n, seed, expected", KNOWN_DIGESTS, ids=[f"len{n}-seed{s:x}" for n, s, _ in KNOWN_DIGESTS]
)
def test_known_digests(n, seed, expected):
    data = kat_data(n)
    assert _core.xxh3_128(data, seed) == as_core_bytes(expected)
    assert _core.xxh3_128(data, seed=seed) == as_core_bytes(expected)


@pytest.mark.parametrize("seed, expected", KNOWN_MIB_DIGESTS)
def test_known_digests_mib(seed, expected):
    assert _core.xxh3_128(MIB_KEY, seed) == as_core_bytes(expected)


@pytest.mark.parametrize(
    "n, seed, expected", KNOWN_DIGESTS, ids=[f"len{n}-seed{s:x}" for n, s, _ in KNOWN_DIGESTS]
)
def test_oracle_known_digests(n, seed, expected):
    # The oracle is a reference only if it is right: pin it to the same known answers.
    assert oracle_xxh3_128(kat_data(n), seed) == expected


def test_default_seed_is_zero():
    assert _core.xxh3_128(b"hello") == _core.xxh3_128(b"hello", 0)
    assert _core.xxh3_128(b"hello") != _core.xxh3_128(b"hello", 1)


def test_str_hashes_as_its_utf8_bytes():
    for text in ["", "https://example.com/", "héllo", "日本語", "🌍\x00x", "\u0080" * 40]:
        assert _core.xxh3_128(text, 5) == _core.xxh3_128(text.encode(), 5)


def test_buffer_keys_hash_as_their_bytes():
    key = b"https://example.com/\x00\xff"
    expected = _core.xxh3_128(key, 3)
    assert _core.xxh3_128(bytearray(key), 3) == expected
    assert _core.xxh3_128(memoryview(key), 3) == expected


@pytest.mark.parametrize("seed", [-1, 2**64, 2**70, 1.0, "1", None])
def test_seed_outside_u64_is_rejected(seed):
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        _core.xxh3_128(b"x", seed)


def test_bad_keys_are_rejected():
    with pytest.raises(TypeError):
        _core.xxh3_128(42)
    with pytest.raises(TypeError):
        _core.xxh3_128(memoryview(b"abcdef")[::2])
    with pytest.raises(ValueError):  # InvalidKeyError is a ValueError
        _core.xxh3_128("\ud800")


def test_docstring_opens_with_the_signature():
    assert _core.xxh3_128.__doc__.startswith("xxh3_128(key, seed=0) -> bytes\n")


# ---- C == the xxhash package on random inputs ---------------------------------------------------


seeds = st.integers(0, M64)
# Every class: many short keys (the small cases), up to 260 (the medium ones), up to 1000, and
# a few long ones built from a random seed (Hypothesis's input buffer is too small for them).
data = st.one_of(
    st.binary(max_size=20),
    st.binary(max_size=260),
    st.binary(max_size=1000),
    st.builds(
        lambda n, s: random.Random(s).randbytes(n), st.integers(1000, 5000), st.integers(0, M64)
    ),
)


@settings(max_examples=500, deadline=None)
@given(key=data, seed=seeds)
def test_matches_xxhash_package(key, seed):
    assert _core.xxh3_128(key, seed) == as_core_bytes(xxhash.xxh3_128_intdigest(key, seed))


@settings(max_examples=200, deadline=None)
@given(key=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80), seed=seeds)
def test_str_matches_xxhash_package_on_utf8(key, seed):
    expected = xxhash.xxh3_128_intdigest(key.encode("utf-8"), seed)
    assert _core.xxh3_128(key, seed) == as_core_bytes(expected)


# ---- XXH3-64 (the Bloom filters' default hash) == the xxhash package ----------------------------


@settings(max_examples=500, deadline=None)
@given(key=data, seed=seeds)
def test_xxh3_64_matches_xxhash_package(key, seed):
    assert _core.xxh3_64(key, seed) == xxhash.xxh3_64_intdigest(key, seed)


@pytest.mark.parametrize(
    "lo, hi", [(0, 0), (1, 3), (4, 8), (9, 16), (17, 128), (129, 240), (241, 1024), (1025, 3000)]
)
def test_xxh3_64_matches_xxhash_package_per_length_class(lo, hi):
    rng = random.Random(lo * 31 + hi)
    for i in range(30):
        key = rng.randbytes(rng.randint(lo, hi))
        seed = [0, 1, M64][i] if i < 3 else rng.getrandbits(64)
        assert _core.xxh3_64(key, seed) == xxhash.xxh3_64_intdigest(key, seed)
    text = "https://例え.jp/" + "ü" * hi
    assert _core.xxh3_64(text, 7) == xxhash.xxh3_64_intdigest(text.encode(), 7)


# ---- C == the Python oracle on random inputs ----------------------------------------------------

CLASSES = [(0, 0), (1, 3), (4, 8), (9, 16), (17, 128), (129, 240), (241, 1024), (1025, 3000)]


@pytest.mark.parametrize("lo, hi", CLASSES, ids=[f"{lo}-{hi}" for lo, hi in CLASSES])
def test_oracle_matches_c_per_length_class(lo, hi):
    rng = random.Random(lo * 7919 + hi)
    for i in range(30):
        key = rng.randbytes(rng.randint(lo, hi))
        seed = [0, 1, M64][i] if i < 3 else rng.getrandbits(64)
        assert as_core_bytes(oracle_xxh3_128(key, seed)) == _core.xxh3_128(key, seed)


@settings(max_examples=200, deadline=None)
@given(key=st.one_of(st.binary(max_size=20), st.binary(max_size=300)), seed=seeds)
def test_oracle_matches_c(key, seed):
    assert as_core_bytes(oracle_xxh3_128(key, seed)) == _core.xxh3_128(key, seed)
