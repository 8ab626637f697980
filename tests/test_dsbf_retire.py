"""A splittable filter's retired leaves in Redis: kept while a client reads a tree that routes
to them, freed once none does (or its announcement lapsed), never a wrong answer either way."""

from __future__ import annotations

import time

import redis

from urlseen.shared import client as redis_store
from urlseen.splittable.filter import SplittableBloomFilter
from urlseen.splittable.tree import LeafAnswer, LeafOp, Tree


def _urls(n: int, tag: str) -> list[str]:
    return [f"https://site{i % 97}.example/{tag}/{i}" for i in range(n)]


def _grow(seen: SplittableBloomFilter, keys: list[str]) -> list[bool]:
    out: list[bool] = []
    for i in range(0, len(keys), 500):
        out += seen.add_many(keys[i : i + 500])
    return out


def _retired(client: redis.Redis, name: str) -> list[str]:
    fields = client.hkeys(redis_store.key(name, "tree"))
    return [f[8:].decode() for f in fields if f.startswith(b"retired:")]


def _leaf_keys(client: redis.Redis, name: str, leaves: list[str]) -> list[bytes]:
    escaped = redis_store.escape(name)
    return [k for leaf in leaves for k in client.scan_iter(f"urlseen:{{{escaped}:leaf:{leaf}}}:*")]


def _routed_leaves(tree: Tree) -> set[str]:
    return {leaf for leaf, _ in tree.leaves()}


def test_retired_leaves_stay_while_a_client_reads_an_older_tree_then_go(redis_url, redis_name):
    client = redis.Redis.from_url(redis_url)
    grower = SplittableBloomFilter(
        500, 0.01, redis=redis_url, name=redis_name, leaf_bits=4096, lease=60
    )
    reader = SplittableBloomFilter(redis=redis_url, name=redis_name, lease=60)
    first = _urls(200, "first")
    assert all(reader.add_many(first))
    old = reader.tree
    grown = _urls(6000, "grown")
    new = _grow(grower, grown)
    assert sum(new) > 5900  # new, but for false positives
    retired = _retired(client, redis_name)
    assert grower.splits_done + grower.grows_done == len(retired) > 0
    assert _routed_leaves(old) & set(retired)  # the reader's tree routes to some of them
    assert len(_leaf_keys(client, redis_name, retired)) >= 4 * len(retired)
    for leaf in _routed_leaves(old) & set(retired):  # still there, as the reader reads them
        fps = reader._store.fingerprints(leaf, 0, 1 << 30)
        assert isinstance(reader._store.check_and_add({leaf: [fps[:4]]}, LeafOp.CONTAINS)[leaf],
                          LeafAnswer)  # fmt: skip
    grower._reload()  # another load by the grower frees nothing: the reader holds them
    assert sorted(_retired(client, redis_name)) == sorted(retired)

    time.sleep(1.1)  # ANNOUNCE_SECONDS: the reader's next batch loads the tree first
    assert reader.contains_many(first) == [True] * len(first)
    assert reader.tree.version > old.version
    assert _retired(client, redis_name) == []
    assert _leaf_keys(client, redis_name, retired) == []
    assert all(hit for hit, fresh in zip(reader.contains_many(grown), new, strict=True) if fresh)
    grower.destroy()
    reader.close()
    assert list(client.scan_iter(f"urlseen:{{{redis_store.escape(redis_name)}*")) == []


def test_a_lapsed_reader_holds_nothing_and_its_stale_tree_reroutes(redis_url, redis_name):
    client = redis.Redis.from_url(redis_url)
    grower = SplittableBloomFilter(
        500, 0.01, redis=redis_url, name=redis_name, leaf_bits=4096, lease=60
    )
    reader = SplittableBloomFilter(redis=redis_url, name=redis_name, lease=0.5)
    assert reader._store.reader_ms == 2000  # announced 2 s: MIN_READER_MS
    first = _urls(200, "first")
    assert all(reader.add_many(first))
    old = reader.tree
    grown = _urls(6000, "grown")
    new = _grow(grower, grown)
    assert sum(new) > 5900
    time.sleep(max(0.0, 2.5 - (time.monotonic() - reader._store._loaded_at)))
    grower._reload()  # the reader's announcement lapsed: every retired leaf is freed
    assert _retired(client, redis_name) == []
    assert _routed_leaves(old) - _routed_leaves(grower.tree)  # the reader routes to freed ones

    reader._store._loaded_at = time.monotonic()  # not due: it asks with its stale tree
    assert reader.tree.version == old.version
    hits = reader.contains_many(first + grown)
    assert all(hits[: len(first)])  # a URL answered new is never lost, whichever tree asks
    assert all(hit for hit, fresh in zip(hits[len(first) :], new, strict=True) if fresh)
    assert reader.tree.version > old.version  # MISSING made it reload, and route below
    assert reader.add_many(first[:50]) == [False] * 50
    grower.destroy()
    reader.close()


def test_the_last_client_to_close_frees_the_leaves_it_alone_held(redis_url, redis_name):
    """A client that closes takes back its announcement at once (not after its lease): the
    leaves retired while it read an older tree go, and the filter keeps every URL."""
    client = redis.Redis.from_url(redis_url)
    reader = SplittableBloomFilter(
        500, 0.01, redis=redis_url, name=redis_name, leaf_bits=4096, lease=60
    )
    first = _urls(200, "first")
    assert all(reader.add_many(first))
    grower = SplittableBloomFilter(redis=redis_url, name=redis_name, lease=60)
    new = _grow(grower, _urls(6000, "grown"))
    retired = _retired(client, redis_name)
    assert retired and _leaf_keys(client, redis_name, retired)  # the reader holds them
    grower.close()
    assert sorted(_retired(client, redis_name)) == sorted(retired)  # still the reader's
    reader.close()  # the last reader: nothing holds them any more
    assert _retired(client, redis_name) == []
    assert _leaf_keys(client, redis_name, retired) == []
    again = SplittableBloomFilter(redis=redis_url, name=redis_name, lease=60)
    assert again.contains_many(first) == [True] * len(first)
    assert sum(again.contains_many(_urls(6000, "grown"))) >= sum(new)
    again.destroy()
    assert list(client.scan_iter(f"urlseen:{{{redis_store.escape(redis_name)}*")) == []
