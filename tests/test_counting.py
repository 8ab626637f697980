"""The counting layer of the exact filter: MD5 fingerprints (pinned against hashlib), the packed
saturating counters of CountingBloomFilter (check-and-add, remove, saturation, persistence,
format errors, sizing, the measured false-positive rate), and the hot-fingerprint cache.

The oracles are independent of the C code: hashlib for MD5, a Python transcription of the
documented index rule (bloom.h) and counter rules (counting.h), and a Python set-associative LRU
for the cache (fpcache.h).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct
import tempfile
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen import (
    BloomFilter,
    ClosedError,
    ConfigError,
    FormatError,
    ReadOnlyError,
    StateInUseError,
    _core,
)
from urlseen.bloom import sizing as _sizing
from urlseen.bloom.counting import CountingBloomFilter

PROPERTY = settings(max_examples=60, deadline=None)
MASK64 = (1 << 64) - 1

keys = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=30),
    st.binary(max_size=30),
)


def as_bytes(key: str | bytes) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else key


def seeded_md5(key: bytes, seed: int) -> bytes:
    """md5(seed || key), seed as 4 little-endian bytes; seed 0 is plain MD5 (md5.h)."""
    return hashlib.md5((seed.to_bytes(4, "little") if seed else b"") + key).digest()


def indices(digest: bytes, m: int, k: int) -> list[int]:
    """Enhanced double hashing over m (Kirsch and Mitzenmacher), written from bloom.h's
    description, not from its code."""
    x = int.from_bytes(digest[:8], "little")
    y = int.from_bytes(digest[8:], "little") | 1
    out = []
    for i in range(k):
        out.append((x * m) >> 64)
        x = (x + y) & MASK64
        y = (y + i + 1) & MASK64
    return out


def counters_of(f: CountingBloomFilter) -> list[int]:
    return [f._get(i) for i in range(f.ncounters)]


# ---- MD5 --------------------------------------------------------------------------------------

RFC1321 = {
    b"": "d41d8cd98f00b204e9800998ecf8427e",
    b"a": "0cc175b9c0f1b6a831c399e269772661",
    b"abc": "900150983cd24fb0d6963f7d28e17f72",
    b"message digest": "f96b697d7cb7938d525a2f31aaf161d0",
    b"abcdefghijklmnopqrstuvwxyz": "c3fcd3d76192e4007dfb496cca67e13b",
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789": (
        "d174ab98d277d9f5a5611c2c9f419d9f"
    ),
    b"1234567890" * 8: "57edf4a22be3c955ac49da2e2107b67a",
}


@pytest.mark.parametrize("data", list(RFC1321), ids=lambda d: f"len{len(d)}")
def test_md5_rfc1321_suite(data):
    assert _core.md5(data).hex() == RFC1321[data]


def test_md5_every_length_around_the_block_and_padding_boundaries():
    # 0..200 covers the 55/56/63/64 padding cases and several blocks; random bytes, not text.
    rng = random.Random(1321)
    for n in range(201):
        data = rng.randbytes(n)
        assert _core.md5(data) == hashlib.md5(data).digest(), n
        for seed in (1, 0x01020304, 2**31, 2**32 - 1):
            assert _core.md5(data, seed=seed) == seeded_md5(data, seed), (n, seed)
    assert _core.md5(b"x" * 100_000) == hashlib.md5(b"x" * 100_000).digest()


def test_md5_of_str_is_md5_of_utf8_and_seed_zero_is_plain_md5():
    assert _core.md5("héllo/✓") == hashlib.md5("héllo/✓".encode()).digest()
    assert _core.md5(b"abc", seed=0) == hashlib.md5(b"abc").digest()
    assert _core.md5(b"abc", seed=1) != _core.md5(b"abc")  # a different family
    for bad in (-1, 2**32):
        with pytest.raises(ValueError, match="seed"):
            _core.md5(b"abc", seed=bad)


@PROPERTY
@given(ks=st.lists(keys, max_size=40), seed=st.sampled_from([0, 7, 2**32 - 1]))
def test_digests_is_md5_per_key(ks, seed):
    assert _core.digests(ks, _core.HASH_MD5, seed) == [seeded_md5(as_bytes(k), seed) for k in ks]
    assert _core.digests(ks) == [hashlib.md5(as_bytes(k)).digest() for k in ks]  # md5 default


def test_digests_rejects_bad_input_as_a_whole():
    with pytest.raises(TypeError, match="key 1"):
        _core.digests([b"a", 5])
    with pytest.raises(TypeError, match="single"):
        _core.digests("abc")  # a str is one key, not an iterable of keys
    assert _core.digests(iter(["a", b"b"])) == [hashlib.md5(x).digest() for x in (b"a", b"b")]


def test_counting_filter_md5_digest_and_indices_follow_the_documented_rule():
    f = CountingBloomFilter(1000, 0.01, hash="md5", seed=5)
    for key in (b"", b"https://example.com/", "https://ex.com/é"):
        d = f._digest(key)
        assert d == seeded_md5(as_bytes(key), 5)
        assert f._indices(d) == indices(d, f.ncounters, f.k)
    g = CountingBloomFilter(1000, 0.01)  # xxh3 by default: the same digest as _core.xxh3_128
    assert g._digest(b"abc") == _core.xxh3_128(b"abc")


# ---- CountingBloomFilter: the URL-seen contract -------------------------------------------------


@PROPERTY
@given(
    ks=st.lists(keys, max_size=120),
    capacity=st.integers(1, 60),
    bits=st.sampled_from([2, 4, 8]),
    batch=st.booleans(),
)
def test_no_false_negatives(ks, capacity, bits, batch):
    # Small filters run over capacity and saturate: that must never hide an added key.
    f = CountingBloomFilter(capacity, 0.1, counter_bits=bits)
    if batch:
        f.add_many(ks)
    else:
        for k in ks:
            f.add(k)
    assert all(f.contains_many(ks)) and all(k in f for k in ks)
    assert not any(f.add_many(ks))


def test_check_and_add_counts_each_distinct_key_once():
    f = CountingBloomFilter(1000, 0.0001)
    assert f.add("https://a.example/") is True
    after_first = counters_of(f)
    assert sum(after_first) == f.k  # k increments (with repeats counted per occurrence)
    assert f.add("https://a.example/") is False
    assert f.add(b"https://a.example/") is False  # str and its UTF-8 bytes are one key
    assert counters_of(f) == after_first, "a duplicate must not push counters up"
    assert f.add_many(["b", "a", "b", "https://a.example/"]) == [True, True, False, False]
    assert len(f) == 3


def test_counters_are_the_multiset_of_indices_of_new_keys():
    f = CountingBloomFilter(50, 0.01, counter_bits=8)
    expected: Counter[int] = Counter()
    for i in range(50):
        key = f"https://m.example/{i}"
        if f.add(key):
            expected.update(indices(f._digest(key), f.ncounters, f.k))
    assert counters_of(f) == [expected[i] for i in range(f.ncounters)]
    assert f.histogram() == [Counter(counters_of(f))[v] for v in range(256)]


def test_batch_and_single_calls_agree():
    ks = [f"k{i % 300}" for i in range(500)]
    single = CountingBloomFilter(200, 0.05, counter_bits=2)
    batch = CountingBloomFilter(200, 0.05, counter_bits=2)
    assert batch.add_many(ks) == [single.add(k) for k in ks]
    assert counters_of(batch) == counters_of(single) and len(batch) == len(single)
    drop = ks[:100]
    assert batch.remove_many(drop) == [single.remove(k) for k in drop]
    assert counters_of(batch) == counters_of(single) and len(batch) == len(single)


@PROPERTY
@given(
    ks=st.lists(st.one_of(keys, st.binary(min_size=50, max_size=200)), max_size=300),
    seed=st.sampled_from([0, 1, 2**32 - 1]),
)
def test_md5_batches_hash_as_single_keys(ks, seed):
    """A batch's MD5 fingerprints come from csrc's many-keys-at-once MD5 (us_md5_many): the
    same counters as one key at a time, for keys of 0 to 4 blocks, str, bytes and buffers."""
    ks = [*ks, memoryview(b"https://buffer.example/" * 5), bytearray(b"ba")]
    single = CountingBloomFilter(500, 0.05, counter_bits=8, hash="md5", seed=seed)
    batch = CountingBloomFilter(500, 0.05, counter_bits=8, hash="md5", seed=seed)
    assert batch.add_many(ks) == [single.add(k) for k in ks]
    assert counters_of(batch) == counters_of(single)
    # Without a cache every key's fingerprint comes back: new, or undecided.
    step = CountingBloomFilter(500, 0.05, hash="md5", seed=seed)._exact_step(ks, None)
    new_at = [i for i, flag in enumerate(step.answers) if flag]
    got = dict(zip(new_at, step.new_fingerprints, strict=True))
    got.update(step.undecided)
    raw = [as_bytes(k) if isinstance(k, str) else bytes(k) for k in ks]
    assert got == {i: seeded_md5(k, seed) for i, k in enumerate(raw)}


def test_md5_batch_with_a_bad_key_past_the_first_chunk_changes_nothing():
    f = CountingBloomFilter(1000, 0.01, hash="md5")
    before = counters_of(f)
    with pytest.raises(TypeError):
        f.add_many([f"https://c.example/{i}" for i in range(300)] + [3.5])
    assert counters_of(f) == before and len(f) == 0


def test_a_bad_key_in_a_batch_changes_nothing():
    f = CountingBloomFilter(100, 0.01)
    f.add("kept")
    before = counters_of(f)
    for method in (f.add_many, f.remove_many):
        with pytest.raises(TypeError):
            method(["x", "kept", 3])
        assert counters_of(f) == before and len(f) == 1


# ---- remove --------------------------------------------------------------------------------------


def test_remove_undoes_add():
    f = CountingBloomFilter(1000, 0.0001)
    f.add_many(["a", "b"])
    with_a = counters_of(f)
    assert f.remove("b") is True
    assert "b" not in f and "a" in f and len(f) == 1
    assert f.add("b") is True, "a removed key is new again"
    assert counters_of(f) == with_a
    assert f.remove_many(["a", "b"]) == [True, True]
    assert f.histogram()[0] == f.ncounters and len(f) == 0


def test_removing_a_certainly_absent_key_returns_false_and_changes_nothing():
    f = CountingBloomFilter(100, 0.001)
    f.add_many([f"in{i}" for i in range(50)])
    before, count = counters_of(f), len(f)
    absent = [k for k in (f"out{i}" for i in range(500)) if k not in f]
    assert len(absent) > 400
    assert f.remove_many(absent) == [False] * len(absent)
    assert all(f.remove(k) is False for k in absent[:50])
    assert counters_of(f) == before and len(f) == count
    empty = CountingBloomFilter(10, 0.1)
    assert empty.remove("x") is False and len(empty) == 0


def test_remove_refuses_a_key_whose_repeated_index_holds_too_little():
    # A key whose k indices repeat needs that counter to hold every occurrence: a key
    # that finds it lower cannot have been added, and remove must not touch anything.
    f = CountingBloomFilter(1, 0.5, k=4, counters_per_key=1, counter_bits=4)  # m = 1: all repeat
    assert f.ncounters == 1 and f._indices(f._digest("x")) == [0, 0, 0, 0]
    f._set(0, 3)
    assert f.remove("x") is False and f._get(0) == 3
    f._set(0, 0)
    assert f.add("x") is True and f._get(0) == 4  # one increment per occurrence
    assert f.remove("x") is True and f._get(0) == 0


# ---- saturation ----------------------------------------------------------------------------------


class CounterModel:
    """counting.h in Python: saturating counters, sticky at max, multiset indices."""

    def __init__(self, m: int, k: int, bits: int) -> None:
        self.v = [0] * m
        self.k = k
        self.max = (1 << bits) - 1

    def add(self, idx: list[int]) -> bool:
        if all(self.v[i] for i in idx):
            return False
        for i in idx:
            self.v[i] = min(self.v[i] + 1, self.max)
        return True

    def remove(self, idx: list[int]) -> bool:
        occ = Counter(idx)
        if any(self.v[i] != self.max and self.v[i] < n for i, n in occ.items()):
            return False
        for i in idx:
            if self.v[i] != self.max:
                self.v[i] -= 1
        return True


@PROPERTY
@given(
    n=st.integers(1, 120),
    removes=st.lists(st.integers(0, 119), max_size=80),
    seed=st.integers(0, 2**32 - 1),
)
def test_saturation_with_two_bit_counters(n, removes, seed):
    # m = 20 counters of 2 bits, k = 4: a few keys saturate counters. Saturated counters are
    # never decremented, and removing added keys never hides another added key.
    f = CountingBloomFilter(10, 0.5, counter_bits=2, k=4, counters_per_key=2, seed=seed)
    model = CounterModel(f.ncounters, f.k, 2)
    added = []
    for i in range(n):
        key = f"https://s.example/{i}"
        new = f.add(key)
        assert new is model.add(f._indices(f._digest(key)))
        if new:
            added.append(key)
    saturated = {i for i in range(f.ncounters) if f._get(i) == 3}
    live = list(added)
    for r in removes:
        if not live:
            break
        key = live.pop(r % len(live))
        assert f.remove(key) is True
        assert model.remove(f._indices(f._digest(key)))
        assert counters_of(f) == model.v
        assert all(f._get(i) == 3 for i in saturated), "a saturated counter was decremented"
        assert all(f.contains_many(live)), "false negative after removing added keys"
    assert len(f) == len(live)


# ---- persistence --------------------------------------------------------------------------------


def test_create_close_open_round_trip(state_path):
    ks = [f"https://p.example/{i}" for i in range(300)]
    with CountingBloomFilter.create(state_path, 500, 0.01, counter_bits=2, seed=9, hash="md5") as f:
        f.add_many(ks)
        f.remove_many(ks[:50])
        shape = (f.ncounters, f.k, f.counter_bits, f.seed, len(f))
        values = counters_of(f)
        assert f.verify() is False, "an open writer has no checksum to compare"
    with CountingBloomFilter.open(state_path, readonly=True) as g:
        assert (g.ncounters, g.k, g.counter_bits, g.seed, len(g)) == shape
        assert counters_of(g) == values and g.verify() is True
        assert all(g.contains_many(ks[50:]))
        assert g.params["hash"] == "md5" and g.stats().details["path"] == str(state_path)
        with pytest.raises(ReadOnlyError):
            g.add("x")
        with pytest.raises(ReadOnlyError):
            g.remove(ks[60])
    with CountingBloomFilter.open(state_path) as h:  # a writer continues where it stopped
        assert h.add(ks[0]) is True and h.add(ks[60]) is False and len(h) == shape[4] + 1
    with CountingBloomFilter.open(state_path) as h:
        assert len(h) == shape[4] + 1


def test_save_writes_an_equal_file(state_path):
    f = CountingBloomFilter(200, 0.01, counter_bits=8)
    f.add_many(str(i) for i in range(150))
    f.save(state_path)
    with CountingBloomFilter.open(state_path) as g:
        assert counters_of(g) == counters_of(f) and len(g) == len(f) == 150
    with pytest.raises(FileExistsError):
        f.save(state_path)


def test_one_writer_and_closed_filters(state_path):
    f = CountingBloomFilter.create(state_path, 100, 0.01)
    with pytest.raises(StateInUseError):
        CountingBloomFilter.open(state_path)
    f.close()
    f.close()  # idempotent
    with pytest.raises(ClosedError):
        f.add("x")
    with pytest.raises(ClosedError):
        len(f)
    CountingBloomFilter.open(state_path).close()


# ---- format errors (the header layout of tests/test_format.py) ---------------------------------

STATIC = struct.Struct("<8sHHIQI")
PARAMS_AT, SEAL_AT, DATA_AT = 48, 4092, 4096


def _params(raw: bytes) -> dict:
    (params_len,) = struct.unpack_from("<I", raw, 24)
    return json.loads(raw[PARAMS_AT : PARAMS_AT + params_len])


def edit_params(path: Path, **changes) -> None:
    """Rewrite the params JSON (value ... deletes a field) with a valid header CRC and seal, so
    that only the intended check can trip."""
    raw = bytearray(path.read_bytes())
    params = _params(raw)
    for key, value in changes.items():
        if value is ...:
            params.pop(key, None)
        else:
            params[key] = value
    body = json.dumps(params).encode()
    (old_len,) = struct.unpack_from("<I", raw, 24)
    raw[PARAMS_AT : PARAMS_AT + old_len] = bytes(old_len)
    raw[PARAMS_AT : PARAMS_AT + len(body)] = body
    struct.pack_into("<I", raw, 24, len(body))
    struct.pack_into("<I", raw, 28, zlib.crc32(body, zlib.crc32(bytes(raw[:28]))))
    # the seal: CRC32 of bytes 32..4091 (the file is closed: its count is under it)
    struct.pack_into("<I", raw, SEAL_AT, zlib.crc32(bytes(raw[32:SEAL_AT])))
    path.write_bytes(bytes(raw))


@pytest.fixture
def counting_file(state_path: Path) -> Path:
    with CountingBloomFilter.create(state_path, 1000, 0.01, counter_bits=4) as f:
        f.add_many(f"https://f.example/{i}" for i in range(200))
    return state_path


def assert_refused(path: Path, *fragments: str) -> None:
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    for readonly in (True, False):
        with pytest.raises(FormatError) as info:
            CountingBloomFilter.open(path, readonly=readonly)
        assert str(path) in str(info.value)
        for fragment in fragments:
            assert fragment in str(info.value), str(info.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "a refused file was changed"


def test_the_file_layout(counting_file):
    raw = counting_file.read_bytes()
    magic, version, _, data_offset, data_length, _ = STATIC.unpack_from(raw)
    assert (magic, version, data_offset) == (b"\x89URLSEEN", 2, DATA_AT)
    params = _params(raw)
    assert params["kind"] == "counting" and params["counter_bits"] == 4
    assert data_length == (params["ncounters"] * 4 + 7) // 8 == len(raw) - DATA_AT
    # Counter i is bits [4i, 4i + 4) of the data, least significant first (counting.h).
    with CountingBloomFilter.open(counting_file, readonly=True) as f:
        data = raw[DATA_AT:]
        for i in range(0, f.ncounters, 7):
            assert (data[i // 2] >> (4 * (i % 2))) & 0xF == f._get(i)


@pytest.mark.parametrize(
    "content",
    [b"", b"\x89URLSEEN", random.Random(2).randbytes(9000), b"https://x/\n" * 900, bytes(8192)],
    ids=["empty", "magic-only", "random", "text", "zeros"],
)
def test_foreign_files(state_path, content):
    state_path.write_bytes(content)
    assert_refused(state_path)


@pytest.mark.parametrize("keep", [10, PARAMS_AT, DATA_AT - 1, DATA_AT, DATA_AT + 1, -1])
def test_truncated(counting_file, keep):
    counting_file.write_bytes(counting_file.read_bytes()[:keep])
    assert_refused(counting_file)


def test_flipped_header_byte(counting_file):
    raw = bytearray(counting_file.read_bytes())
    raw[PARAMS_AT + 3] ^= 0x01
    counting_file.write_bytes(bytes(raw))
    assert_refused(counting_file, "corrupted header")


def test_flipped_data_byte_is_found_at_open(counting_file):
    raw = bytearray(counting_file.read_bytes())
    raw[DATA_AT + 5] ^= 0x10
    counting_file.write_bytes(bytes(raw))
    assert_refused(counting_file, "corrupted data")


def test_a_bloom_file_is_not_a_counting_file_and_back(counting_file, other_state_path):
    BloomFilter.create(other_state_path, capacity=100, error_rate=0.01).close()
    assert_refused(other_state_path, "not a counting filter")
    with pytest.raises(FormatError, match="not a Bloom filter"):
        BloomFilter.open(counting_file)


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"kind": "bloom"}, "not a counting filter"),
        ({"kind": ...}, "not a counting filter"),
        ({"ncounters": ...}, "'ncounters'"),
        ({"ncounters": "9600"}, "'ncounters'"),
        ({"counter_bits": 3}, "invalid counter shape"),
        ({"counter_bits": ...}, "'counter_bits'"),
        ({"k": 0}, "invalid counter shape"),
        ({"k": 65}, "invalid counter shape"),
        ({"ncounters": 0}, "invalid counter shape"),
        ({"seed": 2**32}, "invalid seed"),
        ({"hash": "sha1"}, "unknown hash"),
        ({"error_rate": 1.5}, "invalid parameters"),
        ({"capacity": 0}, "invalid parameters"),
    ],
    ids=repr,
)
def test_params_that_do_not_describe_usable_counters(counting_file, changes, fragment):
    edit_params(counting_file, **changes)
    assert_refused(counting_file, fragment)


def test_counter_count_that_does_not_match_the_data(counting_file):
    params = _params(counting_file.read_bytes())
    edit_params(counting_file, ncounters=params["ncounters"] + 2)  # one byte more than stored
    assert_refused(counting_file, "does not match")
    edit_params(counting_file, ncounters=params["ncounters"], counter_bits=8)
    assert_refused(counting_file, "does not match")


# ---- parameters and sizing -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"capacity": -3},
        {"capacity": 10.0},
        {"capacity": True},
        {"error_rate": 0.0},
        {"error_rate": 1.0},
        {"error_rate": float("nan")},
        {"error_rate": "0.01"},
        {"counter_bits": 1},
        {"counter_bits": 3},
        {"counter_bits": 16},
        {"counter_bits": True},
        {"k": 0},
        {"k": 65},
        {"k": 2.0},
        {"counters_per_key": 0},
        {"counters_per_key": 0.5},
        {"counters_per_key": 2000},
        {"counters_per_key": float("nan")},
        {"counters_per_key": "20"},
        {"seed": -1},
        {"seed": 2**32},
        {"seed": True},
        {"hash": "sha1"},
    ],
    ids=repr,
)
def test_invalid_parameters(kwargs, state_path):
    args = {"capacity": 100, "error_rate": 0.01, **kwargs}
    with pytest.raises(ConfigError):
        CountingBloomFilter(**args)
    with pytest.raises(ConfigError):
        CountingBloomFilter.create(state_path, **args)
    assert not state_path.exists()


def test_sizing():
    f = CountingBloomFilter(10_000, 0.01)
    std = _sizing.size_standard(10_000, 0.01)
    assert (f.ncounters, f.k) == (std.nbits, std.k)  # counters for bits, the standard sizing
    paper = CountingBloomFilter(10_000, 0.01, k=8, counters_per_key=20)  # IMP-CBFilter's experiment
    assert (paper.ncounters, paper.k) == (200_000, 8)
    assert paper.stats().bits == 200_000 * 4
    assert CountingBloomFilter(100, counters_per_key=10).k == round(10 * math.log(2))
    only_k = CountingBloomFilter(10_000, 0.01, k=4)
    assert only_k.k == 4
    assert _sizing.standard_error_rate(10_000, only_k.ncounters, 4) <= 0.01
    s = f.stats()
    assert (s.kind, s.capacity, s.count, s.error_rate) == ("counting", 10_000, 0, 0.01)
    assert s.details["counter_bits"] == 4 and s.details["ncounters"] == f.ncounters


@pytest.mark.parametrize(
    "kwargs, n, queries",
    [
        ({"error_rate": 0.01}, 20_000, 200_000),
        ({"k": 8, "counters_per_key": 5}, 20_000, 40_000),  # IMP-CBFilter's k, 5 counters per key
    ],
    ids=["sized-0.01", "k8-m5n"],
)
def test_measured_false_positive_rate(kwargs, n, queries):
    # A key reported seen on insert adds nothing, but all its counters were already above 0:
    # the set of non-zero counters is the one n plain insertions make, so the formula takes
    # the n distinct keys offered (not len(f), which is lower by the insert-time false
    # positives, ~3% in the second case). Binomial bound, 5 sigma.
    f = CountingBloomFilter(n, **kwargs, seed=3)
    f.add_many(f"https://in.example/{i}" for i in range(n))
    nonzero = f.ncounters - f.histogram()[0]
    assert nonzero / f.ncounters == pytest.approx(-math.expm1(-f.k * n / f.ncounters), rel=0.01)
    p = _sizing.standard_error_rate(n, f.ncounters, f.k)
    hits = sum(f.contains_many([f"https://out.example/{i}" for i in range(queries)]))
    expected, sigma = queries * p, math.sqrt(queries * p * (1 - p))
    assert abs(hits - expected) <= 5 * sigma + 3, (hits, expected, sigma)


# ---- FingerprintCache ---------------------------------------------------------------------------

WAYS = 8


def fp(i: int) -> bytes:
    """A fingerprint whose bytes 8-15 (they pick the bucket) are 0: always bucket 0."""
    return i.to_bytes(8, "little") + bytes(8)


def random_fp(i: int) -> bytes:
    return hashlib.md5(i.to_bytes(4, "little")).digest()


def test_entries_round_up_to_whole_buckets():
    assert [_core.FingerprintCache(n).entries for n in (1, 8, 9, 10, 17)] == [8, 8, 16, 16, 24]
    c = _core.FingerprintCache(10)
    # 32-byte entries, plus a dirty flag and a dirty-list slot (1 + 4 bytes) per bucket
    assert _core.FPCACHE_ENTRY_BYTES == 32 and c.nbytes == 16 * 32 + 2 * 5 and len(c) == 0
    for bad in (0, 2**32 + 1):
        with pytest.raises(ValueError):
            _core.FingerprintCache(bad)


def test_memory_grows_with_what_the_cache_holds():
    c = _core.FingerprintCache(1 << 17)
    start = c.nbytes
    assert start < (1 << 17) * 32 // 100, "a new cache is small, not its 4 MiB"
    for i in range(5000):
        c.insert(random_fp(i), pending=1)
    assert start < c.nbytes <= (1 << 17) * 37 and c.entries == 1 << 17
    assert len(c) == 5000 and all(c.hit(random_fp(i)) for i in range(5000)), "none evicted"
    assert len(c.drain()) == 5000
    c.clear()
    assert c.nbytes == start and len(c) == 0


def test_hit_insert_take_drain_commit():
    c = _core.FingerprintCache(64)
    a, b = random_fp(1), random_fp(2)
    assert c.hit(a) is False and c.take(a) is None, "an absent fingerprint is not invented"
    assert c.insert(a, 0, 10) is None and len(c) == 1
    assert c.hit(a, 11) and c.hit(a, 12)  # two increments in the batch
    assert c.insert(b, 5, 13) is None and len(c) == 2
    assert c.drain() == [], "uncommitted increments are not written back"
    assert c.commit() == []
    assert sorted(c.drain()) == sorted([(a, 2, 0, 12), (b, 5, 0, 13)])
    assert c.drain() == [] and len(c) == 2, "drain resets pending counts, keeps the entries"
    c.hit(b, 20)
    assert c.take(b) == (0, 1, 20) and c.take(b) is None and len(c) == 1
    assert c.take(a) == (0, 0, 12) and len(c) == 0
    c.insert(a, 3)
    c.clear()
    assert len(c) == 0 and c.hit(a) is False and c.drain() == []
    for bad in (b"short", "x" * 16, bytearray(16), b"x" * 17):
        with pytest.raises(TypeError):
            c.hit(bad)


def test_rollback_drops_only_the_batch():
    c = _core.FingerprintCache(64)
    a = random_fp(1)
    c.insert(a, 1, 5)
    c.commit()  # one committed increment
    c.hit(a, 6)
    c.hit(a, 7)
    c.rollback()
    assert c.take(a) == (1, 0, 7), "the batch's increments are gone, the committed one stays"
    c.insert(a, 0, 8, 4)  # put back with its committed increments
    assert c.drain() == [(a, 4, 0, 8)]


def test_eviction_is_lru_within_a_bucket_and_returns_increments():
    c = _core.FingerprintCache(WAYS)  # one bucket
    for i in range(WAYS):
        assert c.insert(fp(i), i + 1) is None
    c.hit(fp(0))  # now most recently used; fp(1) is the least
    assert c.insert(fp(100), 0) == (fp(1), 0, 2, 0)
    assert c.hit(fp(1)) is False and len(c) == WAYS
    c.commit()
    assert c.insert(fp(101), 0) == (fp(2), 3, 0, 0), "committed increments come back as pending"
    assert c.take(fp(3)) == (4, 0, 0)  # a free way: the next insert evicts nothing
    assert c.insert(fp(102), 0) is None
    # Order now (LRU first): 4, 5, 6, 7, 0, 100, 101, 102. Entries without increments leave
    # silently: the library already has everything about them.
    c.drain()
    assert [c.insert(fp(200 + i)) for i in range(WAYS)] == [None] * WAYS
    assert all(c.hit(fp(i)) is False for i in (4, 5, 6, 7, 0, 100, 101, 102))


def test_a_pending_count_that_would_overflow_is_spilled_at_commit():
    c = _core.FingerprintCache(WAYS)
    c.insert(fp(1), 0, 3, 2**32 - 1)
    c.hit(fp(1), 4)
    assert c.commit() == [(fp(1), 2**32 - 1, 1, 4)], "the full count goes back to the caller"
    assert c.take(fp(1)) == (0, 0, 4)


def test_exact_step_names_its_results():
    """_exact_step returns a struct sequence: the exact filter reads each part by its name."""
    counters = _core.CountingFilter(bytearray(1 << 15), 0, 1 << 16, 4, 4)
    cache = _core.FingerprintCache(WAYS)  # one bucket
    fps = {key: counters._digest(key) for key in [f"k{i}" for i in range(16)] + ["x"]}
    first = counters._exact_step(["k0", "k1", "k0"], cache, 7)
    assert type(first) is _core.ExactStepResult and len(first) == 5
    assert _core.ExactStepResult.__match_args__ == (
        "answers",
        "new_fingerprints",
        "undecided",
        "evicted",
        "counter_overflows",
    )
    assert first.answers == [True, True, False], "the repeat is answered by the cache"
    assert first.new_fingerprints == [fps["k0"], fps["k1"]]
    assert first.undecided == [] and first.evicted == [] and first.counter_overflows == []
    assert tuple(first) == (first.answers, first.new_fingerprints, [], [], [])

    without_cache = counters._exact_step(["k1", "k2"], None)
    assert without_cache.answers == [None, True]
    assert without_cache.undecided == [(0, fps["k1"])], "(key index, fingerprint)"

    # The cache holds k0 (one increment in its batch) and k1; eight more new keys fill the
    # bucket until k0, the least recently used entry with an increment, is evicted.
    more = counters._exact_step([f"k{i}" for i in range(3, 11)], cache, 8)
    assert more.answers == [True] * 8
    assert more.evicted == [(fps["k0"], 0, 1, 7)], "(fingerprint, pending, batch, seen)"

    # A counter one below its maximum (15) overflows when a new key increments it.
    i, j = counters._indices(fps["x"])[:2]
    assert i != j
    counters._set(i, 14)
    assert counters._exact_step(["x"], None).counter_overflows == [(i, 15)]


class CacheModel:
    """fpcache.h in Python: nbuckets buckets of WAYS entries [fp, pending, batch, seen], most
    recently used first."""

    def __init__(self, entries: int) -> None:
        self.n = -(-entries // WAYS)
        self.buckets: list[list[list]] = [[] for _ in range(self.n)]

    def bucket(self, f: bytes) -> list[list]:
        return self.buckets[(int.from_bytes(f[8:], "little") * self.n) >> 64]

    def hit(self, f: bytes, now: int) -> bool:
        b = self.bucket(f)
        for pos, e in enumerate(b):
            if e[0] == f:
                b.insert(0, b.pop(pos))
                e[2] += 1
                e[3] = max(e[3], now)
                return True
        return False

    def insert(self, f: bytes, batch: int, now: int) -> tuple | None:
        b = self.bucket(f)
        out = None
        if len(b) == WAYS:
            last = b.pop()
            out = tuple(last) if last[1] or last[2] else None
        b.insert(0, [f, 0, batch, now])
        return out

    def take(self, f: bytes) -> tuple | None:
        b = self.bucket(f)
        for pos, e in enumerate(b):
            if e[0] == f:
                return tuple(b.pop(pos)[1:])
        return None

    def entries(self):
        return [e for b in self.buckets for e in b]


@PROPERTY
@given(
    entries=st.integers(1, 40),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["hit", "take", "drain", "commit", "rollback"]), st.integers(0, 60)
        )
    ),
)
def test_cache_against_a_model(entries, ops):
    c, model = _core.FingerprintCache(entries), CacheModel(entries)
    for step, (op, i) in enumerate(ops):
        f = random_fp(i)
        if op == "hit":
            got = c.hit(f, step)
            assert got == model.hit(f, step)
            if not got:  # the exact filter's pattern: a miss is inserted
                assert c.insert(f, 1, step) == model.insert(f, 1, step)
        elif op == "take":
            assert c.take(f) == model.take(f)
        elif op == "commit":
            assert c.commit() == []
            for e in model.entries():
                e[1], e[2] = e[1] + e[2], 0
        elif op == "rollback":
            c.rollback()
            for e in model.entries():
                e[2] = 0
        else:
            expected = sorted(tuple(e) for e in model.entries() if e[1])
            for e in model.entries():
                e[1] = 0
            assert sorted(c.drain()) == expected
        assert len(c) == sum(map(len, model.buckets)) <= c.entries


def test_cache_increments_add_up():
    # Many fingerprints through a small multi-bucket cache, batch by batch, some batches
    # rolled back: the increments that come back (evictions plus a final drain) add up to
    # exactly the hits of the committed batches.
    c = _core.FingerprintCache(64)
    rng = random.Random(5)
    committed = returned = 0
    for _ in range(200):
        batch_hits = batch_returned = 0
        for _ in range(100):
            f = random_fp(rng.randrange(500))
            if c.hit(f):
                batch_hits += 1
            else:
                evicted = c.insert(f, 0)
                if evicted:
                    returned += evicted[1]  # committed: kept whatever the batch does
                    batch_returned += evicted[2]
        if rng.random() < 0.2:
            c.rollback()
        else:
            committed += batch_hits
            returned += batch_returned + sum(p + b for _, p, b, _ in c.commit())
    returned += sum(p for _, p, _, _ in c.drain())
    assert committed > 1000 and returned == committed


def test_a_file_backed_filter_matches_an_in_memory_one():
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.urlseen"
        ks = [f"k{i}" for i in range(400)]
        mem = CountingBloomFilter(300, 0.02, counter_bits=2)
        with CountingBloomFilter.create(path, 300, 0.02, counter_bits=2) as disk:
            assert disk.add_many(ks) == mem.add_many(ks)
            assert disk.remove_many(ks[:200:3]) == mem.remove_many(ks[:200:3])
            assert counters_of(disk) == counters_of(mem)
