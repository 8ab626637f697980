"""The splittable filter's leaf format 5: fingerprints routed by their own prefix below the
root, coded per leaf by a split (splittable/coding.py), raw since; on both stores.

What must hold: the code round-trips; a split's children answer every URL reported new; the
fingerprints take fewer bits than raw; a damaged or vanished code stops a split with an error
instead of routing wrong fingerprints; a format-4 tree is refused by name."""

from __future__ import annotations

import random

import numpy as np
import pytest
import redis

from urlseen import FormatError
from urlseen.errors import FilterLostError
from urlseen.shared.leaves import RedisLeafStore
from urlseen.splittable import coding as code
from urlseen.splittable.filter import SplittableBloomFilter


def urls(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"https://s{rng.randrange(50)}.example/c/{rng.getrandbits(64)}" for _ in range(n)]


@pytest.fixture(params=["memory", "redis"])
def make(request, redis_url, redis_name):
    def make_filter(**params):
        if request.param == "memory":
            return SplittableBloomFilter(**params)
        return SplittableBloomFilter(redis=redis_url, name=redis_name, **params)

    return make_filter


def grown(seen: SplittableBloomFilter, keys: list[str]) -> list[str]:
    new: list[bool] = []
    for i in range(0, len(keys), 500):
        new += seen.add_many(keys[i : i + 500])
    return [k for k, fresh in zip(keys, new, strict=True) if fresh]


@pytest.mark.parametrize(
    ("n", "universe", "prefix"), [(0, 35, 0), (1, 35, 0), (7, 3, 5), (3000, 33, 2), (200, 64, 0)]
)
def test_a_code_round_trips_with_its_prefix(n, universe, prefix):
    rng = np.random.default_rng(n)
    rest = rng.integers(0, 1 << min(universe, 63), n, dtype=np.uint64)
    values = rest | np.uint64(prefix << universe if universe < 64 else 0)
    block = code.encode(values, universe, prefix)
    back, got_universe, got_prefix = code.decode(block)
    assert np.array_equal(back, np.sort(values))
    assert (got_universe, got_prefix) == (universe, prefix)
    if n >= 3000:  # near log2(2^u / n) + 2 bits each, not u
        assert 8 * len(block) / n <= universe - np.log2(n) + 2.5


@pytest.mark.parametrize("damage", ["flip", "truncate", "count"])
def test_a_damaged_code_is_refused_not_decoded(damage):
    values = np.random.default_rng(1).integers(0, 1 << 30, 500, dtype=np.uint64)
    block = bytearray(code.encode(values, 30))
    if damage == "flip":
        block[40] ^= 0x10
    elif damage == "truncate":
        del block[-3:]
    else:
        block[4:8] = (499).to_bytes(4, "little")
    with pytest.raises(FormatError, match=r"damaged|cannot read"):
        code.decode(bytes(block))


def test_children_answer_every_url_and_keep_fewer_bits_than_raw(make):
    """Grown 10x past its capacity: every URL reported new is still found, most fingerprints
    sit in coded blocks, and they take under 3/4 of the raw width per URL."""
    seen = make(capacity=2000, error_rate=1e-3, leaf_bits=1 << 15)
    reported = grown(seen, urls(20_000, seed=1))
    assert len(reported) >= 19_950
    assert all(seen.contains_many(reported))
    assert seen.splits_done >= 2 and seen.grows_done >= 2
    universes = {seen._universe(leaf) for leaf, _ in seen.tree.leaves()}
    assert min(universes) < seen.fingerprint_bits, "no leaf was split by prefix"
    leaves = seen.leaves()
    kept = sum(leaf["fingerprint_bytes"] for leaf in leaves)
    count = sum(leaf["count"] for leaf in leaves)
    assert count == len(reported)
    assert 8 * kept / count < 0.75 * 8 * seen.fingerprint_bytes, 8 * kept / count


def test_fp_rate_on_never_inserted_urls_stays_within_f_after_growing(make):
    f = 1e-3
    seen = make(capacity=1500, error_rate=f, leaf_bits=1 << 15)
    grown(seen, urls(15_000, seed=2))
    probes = urls(30_000, seed=3)
    rate = sum(seen.contains_many(probes)) / len(probes)
    assert rate <= f + 4 * (f / len(probes)) ** 0.5, rate


def _corrupt_codes(seen: SplittableBloomFilter) -> int:
    """Flip a payload byte of every live leaf's coded block; how many were flipped."""
    store, done = seen._store, 0
    for leaf, _ in seen.tree.leaves():
        if isinstance(store, RedisLeafStore):
            meta, _, key, _ = store._keys(leaf)
            if int(store.client.hget(meta, "code_bytes") or 0) > 21:
                flipped = store.client.getrange(key, 21, 21)[0] ^ 0x01
                store.client.setrange(key, 21, bytes([flipped]))
                done += 1
        else:
            entry = store._leaves[leaf]
            if len(entry.code) > 21:
                entry.code = entry.code[:21] + bytes([entry.code[21] ^ 0x01]) + entry.code[22:]
                done += 1
    return done


def test_a_corrupted_code_stops_the_split_with_an_error(make):
    """A leaf's coded block is read only to split it: damaged, the split raises FormatError
    (its checksum) instead of giving the children wrong fingerprints; until then the leaf's
    bits answer as before."""
    seen = make(capacity=1000, error_rate=1e-3, leaf_bits=1 << 14)
    before = grown(seen, urls(3000, seed=4))
    assert seen.grows_done + seen.splits_done > 0
    assert _corrupt_codes(seen) > 0
    assert all(seen.contains_many(before))
    with pytest.raises(FormatError, match="damaged"):
        grown(seen, urls(40_000, seed=5))


def test_a_vanished_code_is_a_lost_filter(redis_url, redis_name):
    """A leaf whose fingerprints string lost its code (here: cut short) stops the next batch
    or split that reads it with FilterLostError."""
    seen = SplittableBloomFilter(1000, 1e-3, redis=redis_url, name=redis_name, leaf_bits=1 << 14)
    grown(seen, urls(3000, seed=6))
    store = seen._store
    client = redis.Redis.from_url(redis_url)
    coded = [
        leaf
        for leaf, _ in seen.tree.leaves()
        if int(client.hget(store._keys(leaf)[0], "code_bytes") or 0) > 0
    ]
    assert coded
    for leaf in coded:
        client.set(store._keys(leaf)[2], b"short")
    with pytest.raises(FilterLostError):
        store.code(coded[0])
    with pytest.raises(FilterLostError):
        grown(seen, urls(40_000, seed=7))


def _a_leaf_with_raw(seen: SplittableBloomFilter, least: int = 1) -> tuple[str, int]:
    """The leaf with the most raw fingerprints, and its universe (new URLs added until one
    has `least`: the tree's root seed is random, and a leaf may have just been coded)."""
    for more in range(10):
        leaf = max(seen.leaves(), key=lambda info: info["count"] - info["coded"])
        if leaf["count"] - leaf["coded"] >= least:
            return leaf["leaf"], seen._universe(leaf["leaf"])
        grown(seen, urls(50, seed=1000 + more))
    raise AssertionError("no leaf holds raw fingerprints")


def test_a_compaction_codes_the_raw_fingerprints_and_keeps_every_one(make):
    """Leaves code their raw fingerprints each 1/16 of their capacity (so few stay raw), and
    a compaction keeps the same fingerprints: all coded, none raw."""
    seen = make(capacity=2000, error_rate=1e-3, leaf_bits=1 << 15)
    new = grown(seen, urls(12_000, seed=61))
    assert seen.compactions_done > 0
    for info in seen.leaves():  # raw: a step and a round's room past the step first seen in
        assert info["count"] - info["coded"] <= 3 * seen._capacity(info["leaf"]) // 16 + 1
    seen._compact_due = lambda leaf, count: False  # now only this test compacts
    for more in range(20):  # until a leaf has raw ones worth a compaction
        leaf, universe = _a_leaf_with_raw(seen)
        before, raw_bytes, _ = seen._held(leaf, universe)
        if raw_bytes >= seen._capacity(leaf) // 32 * seen.fingerprint_bytes:
            break
        grown(seen, urls(300, seed=62 + more))
    assert seen._compact(leaf)
    after, raw_after, coded_after = seen._held(leaf, universe)
    assert np.array_equal(np.sort(before), after)
    assert (raw_after, coded_after) == (0, len(before))
    assert seen.contains_many(new) == [True] * len(new)


def test_a_compaction_keeps_raw_ones_written_since_and_fences_a_stale_splitter(make):
    """A compaction of the raw ones read (here half of them) keeps those written after its
    read raw, after the new code; a splitter that read the code before is refused its seal
    (-2: its offsets into the raw ones are stale), and the leaf stays writable."""
    seen = make(capacity=2000, error_rate=1e-3, leaf_bits=1 << 15)
    grown(seen, urls(5000, seed=63))
    leaf, universe = _a_leaf_with_raw(seen, least=2)
    store = seen._store
    before, raw_bytes, coded = seen._held(leaf, universe)
    width = seen.fingerprint_bytes
    half = (raw_bytes // width // 2) * width
    part = before[: coded + half // width]  # the coded ones, then the first raw ones
    block = code.encode(part, universe, int(before[0]) >> universe)
    assert store.compact(leaf, block, coded, half)
    assert not store.compact(leaf, block, coded, half)  # stale: its code changed since
    after, raw_after, coded_after = seen._held(leaf, universe)
    assert np.array_equal(np.sort(before), np.sort(after))
    assert (raw_after, coded_after) == (raw_bytes - half, coded + half // width)
    assert store.seal(leaf, coded) == -2  # a splitter's read from before the compaction
    assert [info["state"] for info in seen.leaves() if info["leaf"] == leaf] == ["active"]
    assert store.seal(leaf, coded_after) == raw_bytes - half
