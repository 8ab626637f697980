"""Fuzz the C entry points with arbitrary str / bytes / other objects: no crash, and only the
promised exceptions (TypeError, InvalidKeyError); and a leak check over many calls."""

from __future__ import annotations

import gc
import os
import random
import resource
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from urlseen import BloomFilter, InvalidKeyError, _core

# Any str, lone surrogates included (st.text() leaves out category Cs by default).
any_text = st.text(alphabet=st.characters(), max_size=80)
surrogate_text = st.lists(
    st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    max_size=30,
).map("".join)
nul_heavy = st.lists(st.sampled_from(["\x00", "a", "\udc80", "é", "\U0010ffff"]), max_size=50).map(
    "".join
)
# Big keys, up to 2 MiB, built by repetition (hypothesis cannot draw megabytes directly).
big_bytes = st.builds(
    lambda chunk, n: (chunk or b"\x00") * n, st.binary(max_size=64), st.integers(0, 1 << 15)
)
big_text = st.builds(lambda chunk, n: chunk * n, any_text, st.integers(0, 1 << 14))
keys = st.one_of(any_text, surrogate_text, nul_heavy, st.binary(max_size=200), big_bytes, big_text)
not_keys = st.one_of(
    st.integers(),
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
    st.complex_numbers(),
    st.lists(st.binary(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.tuples(st.binary(max_size=3)),
    st.just(object()),
    st.just(Ellipsis),
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def utf8_or_none(key: str | bytes) -> bytes | None:
    """The bytes the core must hash, or None where it must raise InvalidKeyError."""
    if isinstance(key, bytes):
        return key
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError:
        return None


@FUZZ
@given(key=keys, seed=st.integers(0, 2**32 - 1))
def test_murmur3_any_key(key, seed):
    expected = utf8_or_none(key)
    if expected is None:
        with pytest.raises(InvalidKeyError):
            _core.murmur3_x64_128(key, seed)
    else:
        digest = _core.murmur3_x64_128(key, seed)
        assert len(digest) == 16 and digest == _core.murmur3_x64_128(expected, seed)


@FUZZ
@given(
    key=keys, nbits=st.integers(1, 2**64 - 1), k=st.integers(1, 64), seed=st.integers(0, 2**32 - 1)
)
def test_positions_any_key(key, nbits, k, seed):
    for layout, bits in (
        (_core.LAYOUT_STANDARD, nbits),
        (_core.LAYOUT_BLOCKED, max(512, nbits - nbits % 512)),
    ):
        if utf8_or_none(key) is None:
            with pytest.raises(InvalidKeyError):
                _core.positions(key, bits, k, layout, seed)
        else:
            got = _core.positions(key, bits, k, layout, seed)
            assert len(got) == k and all(0 <= p < bits for p in got)


@pytest.fixture(scope="module")
def shared_filters():
    # Module-scoped (hypothesis reruns a test body many times on one fixture value).
    return [
        BloomFilter(capacity=2000, error_rate=0.01, layout=layout)
        for layout in ("blocked", "standard")
    ]


# Every way a key reaches the C core: single calls, and batches as list, tuple and iterator.
KEY_CALLS = (
    lambda f, key: f.add(key),
    lambda f, key: key in f,
    lambda f, key: f.positions(key),
    lambda f, key: f.add_many(["ok", key]),
    lambda f, key: f.contains_many(("ok", key)),
    lambda f, key: f.update(iter(["ok", key])),
)
CORE_CALLS = (
    lambda f, key: _core.murmur3_x64_128(key),
    lambda f, key: _core.xxh3_128(key),
    lambda f, key: _core.positions(key, 512, 3, _core.LAYOUT_BLOCKED),
    lambda f, key: _core.positions(key, 512, 3, _core.LAYOUT_STANDARD, 0, 1),
)


@FUZZ
@given(key=keys)
def test_filter_methods_any_key(shared_filters, key):
    good = utf8_or_none(key) is not None
    for f in shared_filters:
        before = len(f)
        for call in KEY_CALLS:
            if good:
                call(f, key)
            else:
                with pytest.raises(InvalidKeyError):
                    call(f, key)
        if good:
            assert key in f and len(f) <= before + 2  # the key and "ok"
        else:
            assert len(f) == before


@FUZZ
@given(obj=not_keys)
def test_filter_methods_reject_other_types(shared_filters, obj):
    name = type(obj).__name__
    for f in shared_filters:
        before = len(f)
        for call in (*KEY_CALLS, *CORE_CALLS):
            with pytest.raises(TypeError, match=f"'{name}'"):
                call(f, obj)
        assert len(f) == before


@FUZZ
@given(batch=st.lists(st.one_of(keys, not_keys), max_size=30))
def test_mixed_batches_are_all_or_nothing(shared_filters, batch):
    def problem(key):
        if not isinstance(key, (str, bytes)):
            return TypeError
        return None if utf8_or_none(key) is not None else InvalidKeyError

    first = next((problem(k) for k in batch if problem(k) is not None), None)
    for f in shared_filters:
        before, ones = len(f), f.popcount()
        for op in (f.add_many, f.update, f.contains_many):
            if first is None:
                op(batch)
            else:
                with pytest.raises(first):
                    op(batch)
        if first is not None:
            assert len(f) == before and f.popcount() == ones


@pytest.mark.parametrize("size", [2**20, 2**20 + 7, 3 * 2**20])
def test_megabyte_keys(size):
    f = BloomFilter(capacity=100, error_rate=0.01)
    key = random.Random(size).randbytes(size)
    text = "é" * (size // 2)  # non-ASCII: goes through the UTF-8 encoding path
    assert f.add(key) is True and key in f and f.add(bytearray(key)) is False
    assert f.add(text) is True and text.encode() in f
    assert f.add_many([key, text, key[:-1]]) == [False, False, True]
    assert _core.murmur3_x64_128(text) == _core.murmur3_x64_128(text.encode())


def test_str_subclasses_hash_as_their_text():
    class Url(str):
        pass

    class Raw(bytes):
        pass

    f = BloomFilter(capacity=100, error_rate=0.01)
    assert f.add(Url("https://ex.com/é")) is True
    assert "https://ex.com/é" in f and f.add(Raw("https://ex.com/é".encode())) is False
    assert _core.murmur3_x64_128(Url("abc")) == _core.murmur3_x64_128("abc")


# ---- leak check -----------------------------------------------------------------------------


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: peak RSS is the best we have (kB on Linux, bytes on macOS)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def churn(f: BloomFilter, rng: random.Random, rounds: int) -> None:
    """Every entry point with fresh keys each time, then every one again with a bad key."""
    for i in range(rounds):
        key = (
            f"https://ex.com/{rng.getrandbits(48):x}/é"
            if i % 2
            else rng.randbytes(rng.randrange(40))
        )
        batch = [f"https://b.ex/{rng.getrandbits(32)}", rng.randbytes(8), "ü" * rng.randrange(5)]
        f.add(key)
        _ = key in f
        f.add_many(batch)
        f.contains_many(iter(batch))
        f.update(tuple(batch))
        f.positions(key)
        _core.murmur3_x64_128(key)
        bad = "\ud800" + str(i) if i % 3 == 0 else i
        for call in KEY_CALLS:
            try:
                call(f, bad)
            except (TypeError, InvalidKeyError):
                pass
            else:
                raise AssertionError(f"{bad!r} was accepted")


def test_no_leaks_over_many_calls():
    f = BloomFilter(capacity=200_000, error_rate=0.01)  # its bits are paged in during warm-up
    rng = random.Random(5)
    churn(f, rng, 3000)  # warm-up: caches, free lists, the filter's pages
    gc.collect()
    rss_before = rss_bytes()
    tracemalloc.start()
    try:
        traced_before, _ = tracemalloc.get_traced_memory()
        churn(f, rng, 20_000)
        gc.collect()
        traced_after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_after = rss_bytes()
    # 20k rounds of 13 calls each: a leak of even one small object per call would show as
    # megabytes here (tracemalloc also sees PyMem_Raw allocations, e.g. digest buffers).
    assert traced_after - traced_before < 256 * 1024, traced_after - traced_before
    assert rss_after - rss_before < 4 * 2**20, rss_after - rss_before
