"""SplittableBloomFilter (DSBF): the FP bound as it grows, splits, the fleet, failures.

Every algorithmic test runs on both stores (in memory, and a real Redis server); the fleet,
cluster and outage tests need Redis.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import random
import time
import tracemalloc

import pytest
import redis

from urlseen import ConfigError, FormatError, _core
from urlseen.bloom import sizing as _sizing
from urlseen.errors import FilterLostError, RemoteError
from urlseen.shared import client as redis_store
from urlseen.shared.leaves import RedisLeafStore
from urlseen.splittable import sizing as _sizing_splittable
from urlseen.splittable.filter import SplittableBloomFilter
from urlseen.splittable.rounds import MAX_SPREAD
from urlseen.splittable.tree import (
    MISSING,
    LeafAnswer,
    LeafOp,
    MemoryLeafStore,
    Split,
    loc_hash,
    write_limit,
)


def urls(n: int, seed: int = 0, tag: str = "p") -> list[str]:
    rng = random.Random(seed)
    return [
        f"https://site{rng.randrange(99)}.example/{tag}/{rng.getrandbits(64)}" for _ in range(n)
    ]


@pytest.fixture(params=["memory", "redis", "redis-native", "redis-script"])
def make(request, redis_url, redis_name):
    """make(**params) -> a new SplittableBloomFilter on the parametrized store. Redis: as
    configured by default; "native": every ADD reads natively first, even after a batch of new
    URLs; "script": every key through bloom_batch.lua, copies included (the way on a Cluster
    for claims, and the fallback)."""

    def make_filter(**params):
        if request.param == "memory":
            return SplittableBloomFilter(**params)
        seen = SplittableBloomFilter(redis=redis_url, name=redis_name, **params)
        if request.param == "redis-native":
            seen._store.native_from = 0.0
        elif request.param == "redis-script":
            seen._store.native_from = 2.0
            seen._store.native_copy = False
            seen._store.optimistic = False
        return seen

    return make_filter


def add_in_batches(seen, keys, batch=500):
    out = []
    for i in range(0, len(keys), batch):
        out += seen.add_many(keys[i : i + batch])
    return out


# ---- sizing and parameters --------------------------------------------------------------------


def test_standard_sizing_is_the_worked_example_and_blocked_keeps_the_bound():
    assert _sizing_splittable.size_splittable(
        10**9, 1 << 23, 1e-3
    ) == _sizing_splittable.SplittableSize(10, 583_448, 1_714)
    blocked = _sizing_splittable.size_splittable(10**9, 1 << 23, 1e-3, "blocked")
    assert _sizing.blocked_error_rate(blocked.leaf_capacity, (1 << 23) // 512, blocked.k) <= 1e-3
    assert _sizing.blocked_error_rate(blocked.leaf_capacity + 1, (1 << 23) // 512, blocked.k) > 1e-3


@pytest.mark.parametrize(
    "params",
    [
        {"leaf_bits": 1000},
        {"leaf_bits": 256},
        {"fanout": 1},
        {"layout": "fancy"},
        {"error_rate": 1.5},
        {"capacity": 0},
        {"seed": -1},
    ],
)
def test_invalid_parameters_are_config_errors(params):
    with pytest.raises(ConfigError):
        SplittableBloomFilter(**{"capacity": 1000, **params})


def test_an_existing_filter_keeps_its_parameters_and_a_foreign_tree_is_refused(
    redis_url, redis_name
):
    SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=4096)
    again = SplittableBloomFilter(redis=redis_url, name=redis_name)
    assert (again.leaf_bits, again.error_rate, again.capacity) == (4096, 0.01, 1000)
    with pytest.raises(ConfigError, match="leaf_bits=4096"):
        SplittableBloomFilter(redis=redis_url, name=redis_name, leaf_bits=8192)
    with pytest.raises(ConfigError, match="give a capacity"):
        SplittableBloomFilter(redis=redis_url, name=redis_name + "-missing")
    client = redis.Redis.from_url(redis_url)
    client.hset(redis_store.key(redis_name + "-x", "tree"), mapping={"params": "{}", "version": 1})
    with pytest.raises(FormatError):
        SplittableBloomFilter(redis=redis_url, name=redis_name + "-x")
    client.delete(redis_store.key(redis_name + "-x", "tree"))


def test_a_tree_of_another_format_or_with_a_missing_parameter_is_refused(redis_url, redis_name):
    """The stored parameters are checked on load: a tree of the previous format (its fields
    were n, f, m, b, u, c, cap) or one missing a field is a FormatError, never used."""
    SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=4096)
    client = redis.Redis.from_url(redis_url)
    tree_key = redis_store.key(redis_name, "tree")
    params = json.loads(client.hget(tree_key, "params"))
    old = {"format": "urlseen-dsbf/1", "n": 1000, "f": 0.01, "m": 4096, "b": 2, "u": 1,
           "c": 1, "cap": 2, "k": params["k"], "layout": params["layout"], "seed": 0,
           "hash": "xxh3", "hash_id": params["hash_id"]}  # fmt: skip
    for stored in (old, {key: v for key, v in params.items() if key != "leaf_write_limit"}):
        client.hset(tree_key, "params", json.dumps(stored))
        with pytest.raises(FormatError, match="not a urlseen splittable filter"):
            SplittableBloomFilter(redis=redis_url, name=redis_name)
    client.hset(tree_key, "params", json.dumps(old))
    with pytest.raises(FormatError, match="urlseen-dsbf/1"):
        SplittableBloomFilter(redis=redis_url, name=redis_name)
    # format 3 made every leaf full-grown at creation, its nodes "leaf" without a size
    client.hset(tree_key, "params", json.dumps({**params, "format": "urlseen-dsbf/3"}))
    with pytest.raises(FormatError, match="urlseen-dsbf/3"):
        SplittableBloomFilter(redis=redis_url, name=redis_name)


# ---- the algorithm ----------------------------------------------------------------------------


def test_no_url_reported_new_is_ever_lost_through_many_splits(make):
    seen = make(capacity=2000, error_rate=0.01, leaf_bits=1 << 14)
    keys = urls(30_000, seed=1)
    stream = keys + keys[:10_000]  # then some again
    new = add_in_batches(seen, stream)
    reported = [k for k, n in zip(stream, new, strict=True) if n]
    assert len(reported) == len(set(reported)), "a URL was reported new twice"
    # A second sighting may be new only for a URL whose first was a false positive: a split
    # re-inserts what was reported new, so a child may no longer answer for a false positive.
    first_fps = {k for k, n in zip(keys, new[:30_000], strict=True) if not n}
    again = {k for k, n in zip(stream[30_000:], new[30_000:], strict=True) if n}
    assert again <= first_fps
    assert len(first_fps) <= 0.02 * len(keys)
    assert all(seen.contains_many(reported))
    stats = seen.stats()
    assert stats.details["leaves"] > stats.details["first_leaves"] * 4, "it did not split"
    assert stats.count == len(reported)
    fullest = max(leaf["count"] for leaf in seen.leaves())
    assert fullest <= seen.leaf_capacity + seen.leaf_capacity // 8


def test_a_split_divides_a_leaf_evenly_with_independent_loc_hashes(make):
    # An even c is the pitfall of one hash for every level: h mod c at the root and h mod 2
    # below sends all of a leaf's URLs to one child. The root routes by the digest's bytes
    # 8-15, a split below by the fingerprint's top bits (bytes 0-7): every split child must get
    # close to half of its parent.
    seen = make(capacity=5900, error_rate=0.01, leaf_bits=1 << 14, fanout=2)
    assert seen.tree.params["first_leaves"] % 2 == 0
    add_in_batches(seen, urls(20_000, seed=2))
    tree = seen.tree
    counts = {leaf["leaf"]: leaf["count"] for leaf in seen.leaves()}

    def under(node):  # a child may have grown since: its URLs are its subtree's
        split = tree.splits.get(node)
        return counts[node] if split is None else sum(under(c) for c in split.children)

    checked = 0
    for node, split in tree.splits.items():
        if node == "root" or len(split.children) == 1:
            continue
        a, b = (under(c) for c in split.children)
        total = a + b
        # each child got Binomial(total, 1/2) of the copies, plus later inserts: 5 sigma
        assert abs(a - b) <= 5 * math.sqrt(total) + 0.15 * total, (a, b)
        checked += 1
    assert checked >= 2


def test_loc_hash_seeds_route_independently():
    rng = random.Random(4)
    values = [rng.getrandbits(64) for _ in range(20_000)]
    root = [loc_hash(v, 11) % 4 for v in values]
    below = [loc_hash(v, 12) % 2 for v in values]
    for r in range(4):
        share = sum(b for a, b in zip(root, below, strict=True) if a == r) / root.count(r)
        assert 0.45 < share < 0.55


def test_contains_does_not_add_and_duplicates_in_one_batch_count_once(make):
    seen = make(capacity=1000, error_rate=0.01, leaf_bits=1 << 13)
    keys = urls(100, seed=5)
    assert seen.contains_many(keys) == [False] * 100
    assert len(seen) == 0
    assert seen.add_many([keys[0], keys[0], keys[1]]) == [True, False, True]
    assert keys[0] in seen and keys[2] not in seen


def test_fp_rate_stays_within_the_bound_at_ten_times_n_unlike_a_fixed_filter(dev_urls, make):
    """A query touches one leaf, and a full leaf splits, so the FP bound holds at any size.
    Insert 10 n distinct URLs, measuring the FP rate on never-inserted URLs at every
    checkpoint n, 2n, ... 10n. Data: the distinct dev URLs, made unique beyond their count by
    a query parameter `urlseen-copy=<r>`; the probes carry `urlseen-probe=<r>` instead, so no
    probe was ever inserted. Contrast: one fixed Bloom filter with the memory of the DSBF's
    planned first layer (first_leaves full-grown leaves of leaf_bits bits) and the same k, fed
    and probed the same way."""
    n, f = 10_000, 0.01
    seen = make(capacity=n, error_rate=f, leaf_bits=1 << 14)
    initial_bits = seen.tree.params["first_leaves"] * seen.leaf_bits
    fixed = _core.BitFilter(
        bytearray(initial_bits // 8), 0, initial_bits, seen.k, _core.LAYOUT_BLOCKED
    )

    def variant(i: int, tag: str) -> str:
        url = dev_urls[i % len(dev_urls)]
        return f"{url}{'&' if '?' in url else '?'}urlseen-{tag}={i // len(dev_urls)}"

    assert seen.first_leaf_bits < seen.leaf_bits, "its leaves should start small and grow"
    probes = [variant(i, "probe") for i in range(0, 40 * n, 7)][:5000]
    margin = 4 * math.sqrt(f * (1 - f) / len(probes))  # 4 sigma above f
    dsbf_rates, fixed_rates = [], []
    for checkpoint in range(1, 11):
        batch = [variant(i, "copy") for i in range((checkpoint - 1) * n, checkpoint * n)]
        add_in_batches(seen, batch, batch=1000)
        fixed.add_many(batch)
        dsbf_rates.append(sum(seen.contains_many(probes)) / len(probes))
        fixed_rates.append(sum(fixed.contains_many(probes)) / len(probes))
        assert dsbf_rates[-1] <= f + margin, (checkpoint, dsbf_rates)
    print(f"DSBF FP by checkpoint: {dsbf_rates}; fixed filter: {fixed_rates}")
    assert fixed_rates[-1] > 10 * f, "the contrast filter should have failed its bound by 10 n"
    assert seen.stats().details["leaves"] >= 8 * seen.tree.params["first_leaves"]
    sizes = [row[0] for row in seen.tree.params["leaf_sizes"]]
    grown = {leaf["bits"] for leaf in seen.leaves()}
    assert grown <= set(sizes[-3:]), "all grown (split children start fitted) by 10 n"


# ---- memory follows what was inserted ----------------------------------------------------------


def test_a_filter_planned_for_10_to_the_8_holding_1000_urls_takes_under_2_mb(make):
    """The first layer starts at its smallest leaves (512 B each with the defaults), so a filter
    planned for 10^8 URLs holding 1,000 takes kilobytes per leaf, not 1 MiB (in Redis: MEMORY
    USAGE of every key; in memory: its buffers)."""
    seen = make(capacity=10**8, error_rate=1e-3)
    assert seen.leaf_bits == 1 << 23 and seen.first_leaf_bits == (1 << 12) - 512
    first_leaves = seen.tree.params["first_leaves"]
    assert first_leaves == -(-(10**8) // seen.leaf_capacity) == 196  # 510,755 URLs per leaf
    keys = urls(1000, seed=20)
    assert sum(add_in_batches(seen, keys)) >= 998
    used = seen.memory_usage()
    assert used < 2_000_000, used
    assert seen.stats().details["leaves"] == first_leaves, "nothing grew or split"
    store = seen._store
    if isinstance(store, RedisLeafStore):  # 448 bytes of bits fit the 512-byte allocator class
        bits_key = store._keys(seen.tree.leaves()[0][0])[1]
        # (512 bytes of bits would take the 640-byte class: the 16-byte header)
        assert store.client.memory_usage(bits_key) - len(bits_key) < 512 + 100


def test_an_empty_filter_planned_for_10_to_the_9_allocates_megabytes_not_gigabytes():
    """In this process: every allocation creating the filter counted (tracemalloc sees the
    leaves' buffers), against 1.8 GB when the first layer was made full-grown."""
    tracemalloc.start()
    try:
        seen = SplittableBloomFilter(capacity=10**9, error_rate=1e-3)
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen.tree.params["first_leaves"] == 1958
    assert allocated < 8_000_000, allocated
    assert seen.memory_usage() == 1958 * 448


def test_leaves_grow_by_steps_then_split_and_lose_nothing(make):
    """A leaf below leaf_bits that fills grows (one child, a size or more larger: allocator
    classes (1, 1.25, 1.5, 1.75) * 2^j bits at least 1.15x apart) until full-grown, then
    splits; every URL reported new is still there, and each leaf stays within its own size's
    capacity."""
    seen = make(capacity=500, error_rate=1e-3, leaf_bits=1 << 17)
    sizes = [row[0] for row in seen.tree.params["leaf_sizes"]]
    classes = [c << j for j in range(10, 15) for c in (4, 5, 6)]
    assert sizes == [bits - 512 for bits in [*classes, 1 << 17]]
    keys = urls(20_000, seed=21)
    reported = [k for k, new in zip(keys, add_in_batches(seen, keys), strict=True) if new]
    assert len(reported) >= 0.995 * len(keys)
    assert seen.grows_done >= 2 and seen.splits_done >= 1
    assert all(seen.contains_many(reported))
    capacity = {bits: cap for bits, cap, _ in seen.tree.params["leaf_sizes"]}
    leaves = seen.leaves()
    assert len(leaves) > 2
    assert {leaf["bits"] for leaf in leaves} <= set(sizes)
    assert all(leaf["count"] <= capacity[leaf["bits"]] * 9 // 8 for leaf in leaves)
    assert seen.stats().count == len(reported)
    # memory in step with what was inserted: leaves hold at least half their capacity
    assert sum(leaf["bits"] for leaf in leaves) < 2 * sum(
        leaf["count"] * leaf["bits"] / capacity[leaf["bits"]] for leaf in leaves
    )


def test_a_large_batch_into_small_growing_leaves_routes_each_url_from_the_root_once(
    make, monkeypatch
):
    """A batch far larger than its small first leaves take per round (1/16 of their
    capacity) goes in many rounds while they grow and split: each URL is routed from the root
    once, and later only from the leaf it waited for, down (routing the whole batch each round
    made `urlseen dedup --filter dsbf`, batches of 8192, spend most of its time routing). The
    answers are those of the same URLs in small batches: no URL new twice, a repeat within
    the batch seen, unless its first was a false positive that a split since left out of the
    leaf it now routes to (a split copies only the URLs reported new: the filter's one false
    negative: asking every repeat to be seen failed 1 of 30 runs at 93f92cd, 2 of 15 once
    keys past a leaf's room waited for later rounds)."""
    seen = make(capacity=2000, error_rate=1e-3, leaf_bits=1 << 15)
    routes = 0
    real_route = seen._route

    def counted(root_value, value):
        nonlocal routes
        routes += 1
        return real_route(root_value, value)

    monkeypatch.setattr(seen, "_route", counted)
    seen.auto_acknowledge = False  # the acknowledgement routes its URLs too: counted apart
    keys = urls(6000, seed=41)
    batch = keys + keys[:500]  # repeats of the batch's own first URLs
    answers = seen.add_many(batch)
    assert seen.grows_done + seen.splits_done >= 3
    assert routes == len(batch)
    seen.acknowledge()
    firsts, repeats = answers[:6000], answers[6000:]
    assert sum(firsts) >= 0.995 * 6000
    assert not any(first and again for first, again in zip(firsts, repeats, strict=False))
    assert all(seen.contains_many(k for k, new in zip(batch, answers, strict=True) if new))


def _counted_calls(seen, monkeypatch):
    """The store's ADD calls, each as (its rooms, its replies), recorded as they happen."""
    calls = []
    real = seen._store.check_and_add

    def counted(groups, op, records=None, room=None):
        replies = real(groups, op, records, room)
        if op == LeafOp.ADD:
            calls.append((dict(room or {}), replies))
        return replies

    monkeypatch.setattr(seen._store, "check_and_add", counted)
    return calls


def test_a_batch_of_repeats_into_a_small_leaf_is_not_sent_a_room_at_a_time(make, monkeypatch):
    """A leaf takes a room (1/16 of its capacity) of possibly new keys per call; keys found
    seen, and repeats within the call, don't count, so a batch of 20,100 repeats into a leaf
    with a room of 13 goes in a few calls, not ~1,500 (`urlseen dedup --filter dsbf --redis`
    of 1M dev lines cost Redis 3.3x pipelined SADD's CPU that way). Without a snapshot
    (every key through the script) each distinct key takes room."""
    seen = make(capacity=1000, error_rate=1e-3, leaf_bits=1 << 15)  # one leaf, room 13
    keys = urls(150, seed=43)
    assert all(seen.add_many(keys))
    assert seen.grows_done + seen.splits_done == 0
    calls = _counted_calls(seen, monkeypatch)
    assert not any(seen.add_many(keys * 134))
    (leaf,) = {leaf for rooms, _ in calls for leaf in rooms}
    assert calls[0][0][leaf] == 13
    scripted = isinstance(seen._store, RedisLeafStore) and seen._store.native_from > 1
    if not scripted:  # the script alone can't tell a seen key before deciding it
        assert len(calls) <= 8
        # A batch with a few new URLs is acknowledged (DROP), which says nothing of what is
        # seen: the batch after it starts sending as many keys as the last ADD round did.
        assert sum(seen.add_many(keys * 134 + urls(5, seed=47))) >= 4
        calls.clear()
        assert not any(seen.add_many(keys * 134))
        assert len(calls) <= 2


def test_repeats_within_a_call_are_answered_as_their_first(make):
    """The store sends the script each fingerprint once per call: a repeat is seen after its
    first, whether the first was new or seen, and a batch of repeats leaves no claim behind
    after the acknowledgement."""
    seen = make(capacity=1000, error_rate=1e-3, leaf_bits=1 << 15)
    old, fresh = urls(100, seed=45), urls(100, seed=46)
    assert all(seen.add_many(old))
    batch = [u for pair in zip(old, fresh, old, fresh, strict=True) for u in pair]
    answers = seen.add_many(batch)
    assert answers[0::4] == [False] * 100 and answers[2::4] == [False] * 100
    assert sum(answers[1::4]) >= 97 and answers[3::4] == [False] * 100  # 97: false positives
    assert seen.claims_held() == 0


def test_an_add_puts_at_most_a_leafs_room_of_new_keys_in_it_per_call(make, monkeypatch):
    """However many keys a round sends (here up to MAX_SPREAD times the room, as after a
    batch of repeats), the store adds at most the room and defers the rest, in order: the
    bound on how far one call can fill a leaf past its capacity holds. (In one process, whose
    leaf count is exact, as many as fit under the write limit may go in one call.)"""
    seen = make(capacity=4000, error_rate=1e-3, leaf_bits=1 << 15)
    calls = _counted_calls(seen, monkeypatch)
    seen._keys_per_maybe_new = MAX_SPREAD
    keys = urls(3000, seed=44)
    batch = keys + keys[:200]
    answers = seen.add_many(batch)
    firsts, repeats = answers[:3000], answers[3000:]  # no URL new twice (a repeat of a false
    assert sum(firsts) >= 0.995 * 3000  # positive may be new after a split: see above)
    assert not any(first and again for first, again in zip(firsts, repeats, strict=False))
    deferred = 0
    for rooms, replies in calls:
        for leaf, reply in replies.items():
            if isinstance(reply, LeafAnswer):
                room = rooms[leaf]
                if isinstance(seen._store, MemoryLeafStore):
                    params, sizes = seen._store._tree["params"], seen._store._tree["sizes"]
                    limit = write_limit(params, sizes[leaf])  # the leaf may be split since
                    room = max(room, limit - (reply.count - sum(reply.new)))
                assert sum(reply.new) <= room
                deferred += len(reply.deferred)
    assert deferred > 0  # the store was sent more than a room, and held it back


# ---- fingerprints: as short as collisions allow --------------------------------------------------


@pytest.mark.parametrize(
    "leaf_bits, error_rate, width",
    [(1 << 17, 1e-3, 5), (1 << 23, 1e-3, 6), (1 << 14, 1e-9, 7), (1 << 13, 1e-2, 4)],
)
def test_fingerprint_width_keeps_collisions_a_tenth_of_the_rate_at_1024_times_capacity(
    leaf_bits, error_rate, width
):
    """w bytes: the fewest with 1024 full leaves' URLs / 2^(8 w) <= error_rate / 10 (a query
    equal to a kept fingerprint under its root child is a false positive whatever the bits)."""
    seen = SplittableBloomFilter(10_000, error_rate, leaf_bits=leaf_bits)
    assert seen.fingerprint_bytes == width
    crowd = 1024 * seen.leaf_capacity
    assert crowd / 2 ** (8 * width) <= error_rate / 10
    assert width == 4 or crowd / 2 ** (8 * (width - 1)) > error_rate / 10, "one byte fewer"


def test_fingerprint_bytes_is_validated_and_kept(redis_url, redis_name):
    for bad in (3, 9, True, 4.0):
        with pytest.raises(ConfigError, match="fingerprint_bytes"):
            SplittableBloomFilter(1000, fingerprint_bytes=bad)
    SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, fingerprint_bytes=7)
    assert SplittableBloomFilter(redis=redis_url, name=redis_name).fingerprint_bytes == 7
    with pytest.raises(ConfigError, match="fp_bytes=7"):
        SplittableBloomFilter(redis=redis_url, name=redis_name, fingerprint_bytes=8)


def test_stats_count_equal_fingerprints_in_the_error_rate(make):
    """With 4-byte fingerprints the rate from equal fingerprints is that of the fullest child
    of the root, its URLs / 2^32, and stats() adds it to the leaves' own."""
    seen = make(capacity=2000, error_rate=0.01, leaf_bits=1 << 14, fingerprint_bytes=4)
    keys = urls(12_000, seed=22)
    reported = [k for k, new in zip(keys, add_in_batches(seen, keys), strict=True) if new]
    assert all(seen.contains_many(reported))
    tree, counts = seen.tree, {leaf["leaf"]: leaf["count"] for leaf in seen.leaves()}

    def under(node):
        split = tree.splits.get(node)
        return counts[node] if split is None else sum(under(c) for c in split.children)

    fullest = max(under(child) for child in tree.splits["root"].children)
    stats = seen.stats()
    assert fullest > 12_000 / len(tree.splits["root"].children) * 0.8
    assert stats.details["collision_rate"] == fullest / 2**32
    assert stats.details["fingerprint_bytes"] == 4
    assert stats.estimated_error_rate > stats.details["collision_rate"] > 0


# ---- splits that go wrong ---------------------------------------------------------------------


def _store_of(seen):
    return seen._store


@pytest.mark.parametrize("leaf_bits", [1 << 12, 1 << 13], ids=["split", "grow"])
def test_a_crashed_splitter_is_taken_over_when_its_lock_expires(make, leaf_bits):
    """A splitter that sealed its leaf and died: writers to that leaf wait, take the expired
    lock, drop the dead splitter's children and finish the split; nothing is lost. With
    leaf_bits 2^13 the leaves start at 2^12 bits, so what is taken over is a growth."""
    seen = make(capacity=1000, error_rate=0.01, leaf_bits=leaf_bits)
    assert seen.first_leaf_bits == (1 << 12) - 512
    store = _store_of(seen)
    before = urls(300, seed=7)
    before = [k for k, new in zip(before, add_in_batches(seen, before), strict=True) if new]
    assert len(before) >= 295  # leaves far below leaf_capacity: a false positive is rare
    leaf = seen.tree.leaves()[0][0]
    status, _ = store.lock(leaf, "dead-splitter", 300)  # a lease of 0.3 s, never renewed
    assert status == "ok"
    orphans = store.new_leaf_ids(2)
    assert store.refresh(leaf, "dead-splitter", 300, orphans)
    store.make_leaves(orphans, seen.leaf_bits, seen.tree.params)
    assert store.seal(leaf) >= 0  # ... and then it died
    t0 = time.monotonic()
    later = urls(300, seed=8)
    new = add_in_batches(seen, later)
    assert time.monotonic() - t0 >= 0.2, "writers should have waited for the lease"
    later = [k for k, fresh in zip(later, new, strict=True) if fresh]
    assert len(later) >= 295
    assert all(seen.contains_many(before + later))
    assert leaf in seen.tree.splits
    assert store.leaf_info(orphans) == [None, None], "the dead splitter's children were kept"
    children = seen.tree.splits[leaf].children
    assert len(children) == (2 if leaf_bits == 1 << 12 else 1)  # a full leaf splits, else grows
    sizes = [row[0] for row in seen.tree.params["leaf_sizes"]]
    # a split's children fit their URLs (here the smallest size), a growth's are one step larger
    assert {seen.tree.sizes[child] for child in children} == {sizes[0 if len(children) > 1 else 1]}


def test_a_splitter_whose_lock_expired_cannot_install_its_children(make):
    seen = make(capacity=1000, error_rate=0.01, leaf_bits=1 << 13)
    store = _store_of(seen)
    leaf = seen.tree.leaves()[0][0]
    assert store.lock(leaf, "slow", 50)[0] == "ok"
    assert store.lock(leaf, "other", 50_000)[0] == "busy"
    time.sleep(0.15)
    assert store.lock(leaf, "fast", 50_000)[0] == "ok"
    assert store.swap(leaf, "slow", Split(1, ("x", "y")), 4096) == 0
    assert not store.refresh(leaf, "slow", 1000, ["x", "y"])
    assert store.swap(leaf, "fast", Split(1, ("x", "y")), 4096) > 0
    assert store.lock(leaf, "late", 1000)[0] == "done"


# ---- native reads and copies in Redis (issue 17) ------------------------------------------------


def _leaf_state(client, store, leaf):
    meta, bits, fps, _ = store._keys(leaf)
    count = int(client.hget(meta, "count"))
    return client.get(bits), client.getrange(fps, 0, count * store._fp_bytes() - 1), count


def test_a_native_copy_writes_what_the_script_copy_writes(redis_url, redis_name):
    seen = SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=1 << 15)
    store = _store_of(seen)
    client = redis.Redis.from_url(redis_url)
    native, script = store.new_leaf_ids(2)
    store.make_leaves([native, script], seen._full_bits, seen.tree.params)
    width = seen.fingerprint_bytes
    fps = [bytes(random.Random(i).getrandbits(8) for _ in range(width)) for i in range(900)]
    for part in (fps[:500], fps[500:]):  # a split copies while the leaf is written, then the rest
        store.native_copy = True
        replies = store.check_and_add({native: part}, LeafOp.COPY)
        store.native_copy = False
        replies.update(store.check_and_add({script: part}, LeafOp.COPY))
        assert replies[native] == replies[script]
    assert _leaf_state(client, store, native) == _leaf_state(client, store, script)
    assert _leaf_state(client, store, native)[2] == 900
    assert client.hget(store._keys(script)[0], "filled") is None  # the script path was taken


def test_a_fill_is_resent_safely_and_refused_on_a_changed_or_lost_child(redis_url, redis_name):
    seen = SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=1 << 15)
    store = _store_of(seen)
    client = redis.Redis.from_url(redis_url)
    (child,) = store.new_leaf_ids(1)
    store.make_leaves([child], seen._full_bits, seen.tree.params)
    meta, bits, fps, _ = store._keys(child)
    nbytes, width = len(client.get(bits)), seen.fingerprint_bytes

    def fill(count, token, data):
        args = ["fill", store._instance, count, token, b"\xff" * nbytes, data, width]
        return store._leaf_script(keys=[meta, bits, fps], args=args)

    assert fill(0, "t1", b"a" * width * 3) == 1
    assert fill(0, "t1", b"a" * width * 3) == 1  # resent after a lost reply: done once
    assert int(client.hget(meta, "count")) == 3 and client.strlen(fps) == 3 * width
    assert fill(0, "t2", b"b" * width) == b"M"  # the child changed since it was read
    assert int(client.hget(meta, "count")) == 3
    client.delete(meta)
    assert fill(3, "t3", b"b" * width) == b"X"
    assert store.check_and_add({child: [b"c" * width]}, LeafOp.COPY) == {child: MISSING}


@pytest.mark.parametrize("native_from", [0.0, 2.0], ids=["native-reads", "script-only"])
def test_a_lost_or_damaged_leaf_stops_a_batch_of_repeats_either_way(
    redis_url, redis_name, native_from
):
    seen = SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=1 << 13)
    seen._store.native_from = native_from
    keys = urls(200, seed=21)
    assert sum(seen.add_many(keys)) >= 195
    client = redis.Redis.from_url(redis_url)
    store = _store_of(seen)
    first, second = seen.tree.leaves()[0][0], seen.tree.leaves()[1][0]
    client.setrange(store._keys(first)[1], 0, b"")  # untouched: still seen
    client.append(store._keys(first)[1], b"x")  # the bits one byte too long: damaged
    with pytest.raises(FilterLostError, match="gone or damaged"):
        seen.add_many(keys)
    client.delete(*store._keys(second))
    client.delete(store._keys(first)[1])
    with pytest.raises(FilterLostError):
        seen.add_many(keys)


@pytest.mark.parametrize("native_from", [0.0, 2.0], ids=["native-reads", "script-only"])
def test_a_sealed_leaf_sends_its_repeats_to_the_split_either_way(
    redis_url, redis_name, native_from
):
    """A leaf sealed by a splitter that died: a batch of repeats is not answered from it (the
    script answers "moved"), the writer finishes the split, and the children answer seen."""
    seen = SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=1 << 13)
    seen._store.native_from = native_from
    store = _store_of(seen)
    keys = urls(300, seed=22)
    reported = [k for k, new in zip(keys, seen.add_many(keys), strict=True) if new]
    leaf = seen.tree.leaves()[0][0]
    assert store.lock(leaf, "dead-splitter", 200)[0] == "ok"
    assert store.seal(leaf) >= 0
    assert seen.add_many(reported) == [False] * len(reported)
    assert leaf in seen.tree.splits


def test_native_reads_answer_repeats_without_the_script(private_redis):
    # a private server: commandstats count only this filter's calls (a shared one counts other
    # suites' too)
    redis_url = private_redis.url
    seen = SplittableBloomFilter(5000, 0.001, redis=redis_url, name="f", leaf_bits=1 << 15)
    keys = urls(3000, seed=23)
    keys = [k for k, new in zip(keys, add_in_batches(seen, keys), strict=True) if new]
    assert len(keys) >= 2990
    client = redis.Redis.from_url(redis_url)
    before = client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert add_in_batches(seen, keys) == [False] * len(keys)
    after = client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert after - before < len(keys) // 500, "repeats went to the script"


def _one_leaf_store(redis_url, redis_name):
    """A filter's store with one fresh active leaf of full size, and fingerprints for it."""
    seen = SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=1 << 15)
    store = _store_of(seen)
    (leaf,) = store.new_leaf_ids(1)
    store.make_leaves([leaf], seen._full_bits, seen.tree.params)
    width = seen.fingerprint_bytes
    fps = [random.Random(i).randbytes(width) for i in range(300)]
    return seen, store, leaf, fps


@pytest.mark.parametrize("writer", ["add", "copy", "fill"])
def test_a_leaf_written_between_our_read_and_our_script_makes_the_script_decide(
    redis_url, redis_name, monkeypatch, writer
):
    """Every script that writes a leaf's bits adds to its count (ADD, COPY and dsbf_leaf.lua's
    fill), so an optimistic batch whose leaf another client wrote after its read is decided by
    the script from the masks: the other client's keys are seen, never new twice, and the reply
    says it fell back (the store then pauses the optimistic path)."""
    seen, store, leaf, fps = _one_leaf_store(redis_url, redis_name)
    other = RedisLeafStore(redis_url, redis_name)
    other.load()
    other._sizes.update(store._sizes)  # the fresh leaf, made by `store`
    other.native_copy = writer == "fill"
    theirs = fps[::7]
    real = store._native

    def read_then_other_writes(*args):
        got = real(*args)
        op = LeafOp.ADD if writer == "add" else LeafOp.COPY
        assert all(other.check_and_add({leaf: theirs}, op)[leaf].new)
        return got

    monkeypatch.setattr(store, "_native", read_then_other_writes)
    sent = []
    real_run = store._run
    monkeypatch.setattr(store, "_run", lambda calls, *a: sent.append(calls) or real_run(calls, *a))
    reply = store.check_and_add({leaf: fps}, LeafOp.ADD)[leaf]
    assert len(sent[0][leaf].extra) == 4, "the optimistic arguments were sent"
    local, buffer = MemoryLeafStore._bits(seen._full_bits, seen.tree.params)
    local.add_many(theirs)
    assert reply.new == local.add_many(fps) and not any(reply.new[::7])
    assert reply.count == sum(reply.new) + len(theirs)
    assert store._native_reads.backoff.fallbacks == 1, "the reply said it fell back"
    client = redis.Redis.from_url(redis_url)
    assert client.get(store._keys(leaf)[1]) == bytes(buffer)


def test_optimistic_leaves_take_their_answers_and_drop_young_claims(
    redis_url, redis_name, monkeypatch
):
    """A batch of new URLs in several leaves: each leaf gets its snapshot's answers and blocks
    (and takes them: no fallback), and the acknowledgement deletes the young claims by DROP,
    while claims older than half a lease go through the checked release. (A long lease, and
    claims made old by moving their start back, not by sleeping: a loaded machine may take
    more than a short half-lease over the first batch.)"""
    seen = SplittableBloomFilter(20_000, 0.001, redis=redis_url, name=redis_name, lease=30.0,
                                 leaf_bits=1 << 15)  # fmt: skip
    store = _store_of(seen)
    ops, extras = [], []
    real_run = store._run

    def spy(calls, op, claim):
        ops.append(op)
        extras.extend(len(call.extra) for call in calls.values() if op == LeafOp.ADD)
        return real_run(calls, op, claim)

    monkeypatch.setattr(store, "_run", spy)
    keys = urls(1000, seed=31)
    assert sum(seen.add_many(keys)) >= 995
    assert len(extras) > 1 and set(extras) == {4} and store._native_reads.backoff.fallbacks == 0
    assert ops[-1] == LeafOp.DROP and LeafOp.ACK not in ops and seen.claims_held() == 0
    seen.auto_acknowledge = False
    more = urls(200, seed=32)
    assert sum(seen.add_many(more)) >= 195 and seen.claims_held() >= 195
    assert store._claims._since is not None
    store._claims._since -= 16.0  # older than half a lease: the release reads them first
    assert seen.acknowledge() == 0 and ops[-1] == LeafOp.ACK and seen.claims_held() == 0
    assert add_in_batches(seen, keys + more) == [False] * 1200


# ---- the fleet ---------------------------------------------------------------------------------


def _claim(args):
    url, name, keys = args
    seen = SplittableBloomFilter(redis=url, name=name)
    claimed = []
    for i in range(0, len(keys), 400):
        chunk = keys[i : i + 400]
        claimed += [k for k, new in zip(chunk, seen.add_many(chunk), strict=True) if new]
    return claimed, seen.splits_done


def _fleet(url, name, workers=4):
    SplittableBloomFilter(3000, 0.001, redis=url, name=name, leaf_bits=1 << 15)
    pool_keys = urls(25_000, seed=9)
    streams = []
    for worker in range(workers):
        rng = random.Random(60 + worker)
        streams.append([pool_keys[rng.randrange(len(pool_keys))] for _ in range(15_000)])
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        results = pool.map(_claim, [(url, name, s) for s in streams])
    everyone = [k for claimed, _ in results for k in claimed]
    assert len(everyone) == len(set(everyone)), "a URL was claimed by two workers"
    distinct = {k for s in streams for k in s}
    seen = SplittableBloomFilter(redis=url, name=name)
    assert all(seen.contains_many(everyone)), "a claimed URL was lost in a split"
    # Unclaimed distinct URLs are false positives: at f = 0.001 a handful at most.
    assert len(distinct) - len(everyone) <= max(5, 0.004 * len(distinct))
    limit = seen.tree.params["leaf_write_limit"]
    fullest = max(leaf["count"] for leaf in seen.leaves())
    assert fullest <= limit + seen.leaf_capacity // 16, "overfilled"
    splits = sum(done for _, done in results)
    assert splits >= 4, f"the fleet should have split leaves while running ({splits})"
    return seen


def test_fleet_of_workers_claims_each_url_once_through_splits(redis_url, redis_name):
    _fleet(redis_url, redis_name)


def test_fleet_on_a_redis_cluster_spreads_leaves_over_the_nodes(redis_cluster_url):
    name = f"dsbf-fleet-{random.getrandbits(32)}"
    seen = _fleet(redis_cluster_url, name)
    try:
        client = redis.RedisCluster.from_url("redis://" + redis_cluster_url.split("://")[1])
        nodes = {
            client.get_node_from_key(redis_store.key(f"{name}:leaf:{leaf['leaf']}", "bits")).name
            for leaf in seen.leaves()
        }
        assert len(nodes) == 3, f"leaves on {nodes}"
    finally:
        seen.destroy()


# ---- a Redis that goes away --------------------------------------------------------------------


def test_a_killed_server_is_a_clear_error_and_acknowledged_urls_survive(private_redis, monkeypatch):
    """While Redis is down add_many retries, then raises RemoteError; a server that persists
    every write (appendfsync always) comes back with every URL reported new, splits included."""
    monkeypatch.setattr(redis_store, "RETRIES", 2)
    seen = SplittableBloomFilter(1000, 0.01, redis=private_redis.url, name="f", leaf_bits=1 << 13)
    acknowledged = urls(3000, seed=10)
    reported = [
        k for k, n in zip(acknowledged, add_in_batches(seen, acknowledged), strict=True) if n
    ]
    assert seen.splits_done > 0
    private_redis.kill()
    with pytest.raises(RemoteError, match="unreachable"):
        seen.add_many(urls(10, seed=11))
    private_redis.start()
    again = SplittableBloomFilter(redis=private_redis.url, name="f")
    assert all(again.contains_many(reported))
    assert len(again) == len(reported)
    fresh = urls(20, seed=13, tag="fresh")
    after = seen.add_many([*reported[:5], *fresh])
    assert after[:5] == [False] * 5 and sum(after[5:]) >= 18  # f = 0.01: a false positive or two


def test_memory_store_is_the_default():
    seen = SplittableBloomFilter(1000, 0.01, leaf_bits=1 << 13)
    assert isinstance(seen._store, MemoryLeafStore)
    assert seen.add("https://a.example/") and "https://a.example/" in seen


def test_redis_store_reads_leaf_info(redis_url, redis_name):
    seen = SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name, leaf_bits=1 << 13)
    seen.add_many(urls(50, seed=12))
    store = RedisLeafStore(redis_url, redis_name)
    store.load()
    info = store.leaf_info([leaf for leaf, _ in seen.tree.leaves()])
    assert sum(i.count for i in info if i) == 50
    width = seen.fingerprint_bytes
    assert width == 4  # 1024 full leaves of ~800 URLs: 2^32 > 8.2e8 / (0.1 * 0.01)
    assert 50 * width <= sum(i.fingerprint_bytes for i in info if i) <= len(info) * 5120  # room
    first = seen.tree.leaves()[0][0]
    digests = _core.digests(urls(50, seed=12), _core.HASH_XXH3_128, 0)
    root_values = [int.from_bytes(d[8:16], "little") for d in digests]
    assert store.fingerprints(first, 0, 10**6) == b"".join(
        d[:width]
        for d, root in zip(digests, root_values, strict=True)
        if seen.tree.splits["root"].child(root) == first  # no split yet: the root's child
    )
