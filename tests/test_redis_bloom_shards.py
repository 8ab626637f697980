"""RedisBloomFilter split in shards: each shard in a slot of its own (on a Cluster, one per
primary), each holding the bytes of its own URLs' Bloom filter; the one-key format 2 read as
one shard; a batch's claims, marks and answers per shard."""

from __future__ import annotations

import json
import random

import pytest
import redis

from urlseen import FormatError, _core
from urlseen.bloom.bloom import HASHES, LAYOUT_CODES
from urlseen.errors import FilterLostError, FilterRolledBackError
from urlseen.shared import client as redis_store
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.shared.bloom_shard import shard_of


def urls(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"https://site{rng.randrange(50)}.example/p/{rng.randrange(10**9)}" for _ in range(n)]


def first_seen(keys: list[str]) -> list[bool]:
    """True at each key's first place."""
    first: dict[str, int] = {}
    return [first.setdefault(k, i) == i for i, k in enumerate(keys)]


def model_bits(seen: RedisBloomFilter, shard: int, keys: list[str]) -> bytes:
    """The bytes shard `shard` holds after `keys`, set here in Python from byte_masks' records
    (blocked: c, a 4-byte block offset, c (offset in block, mask) pairs; standard: c, then c
    (4-byte offset, mask) records)."""
    p = seen._params
    layout, hash_, size = LAYOUT_CODES[p["layout"]], HASHES[p["hash"]], int(p["shard_bits"])
    mine = [
        k for k in keys if shard_of(_core.digests([k], hash_, p["seed"])[0], seen.shards) == shard
    ]
    masks = _core.byte_masks(mine, size, seen.k, layout, p["seed"], hash_)
    out, pos = bytearray((size + 7) // 8), 0
    while pos < len(masks):
        c = masks[pos]
        if p["layout"] == "blocked":
            base = int.from_bytes(masks[pos + 1 : pos + 5], "little")
            for j in range(c):
                out[base + masks[pos + 5 + 2 * j]] |= masks[pos + 6 + 2 * j]
            pos += 5 + 2 * c
        else:
            for j in range(c):
                at = pos + 1 + 5 * j
                out[int.from_bytes(masks[at : at + 4], "little")] |= masks[at + 4]
            pos += 1 + 5 * c
    return bytes(out)


@pytest.mark.parametrize("layout", ["blocked", "standard"])
def test_shards_on_one_server_answer_and_hold_their_own_urls_bits(redis_url, redis_name, layout):
    client = redis.Redis.from_url(redis_url)
    keys = urls(6000) + urls(3000)[:1500]
    seen = RedisBloomFilter(
        redis_url, redis_name, capacity=20_000, error_rate=1e-9, layout=layout, shards=4
    )
    try:
        assert seen.shards == 4 and seen.nbits == 4 * seen._params["shard_bits"]
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            assert seen.add_many(batch) == first_seen(keys[: start + 1000])[start:]
        assert len(seen) == len(set(keys))
        tags = {k.split("}")[0] for s in seen._shards for k in s.stored_keys()}
        assert len(tags) == 4, "one hash tag per shard"
        for i, shard in enumerate(seen._shards):
            assert client.get(shard.bits) == model_bits(seen, i, keys)
            assert client.hget(shard.meta, "instance").decode() == seen._instance
        assert seen.popcount() == sum(bin(b).count("1") for b in b"".join(
            client.get(s.bits) for s in seen._shards))  # fmt: skip
        probe = urls(2000, seed=9)
        assert seen.contains_many(keys[:500] + probe) == [True] * 500 + [False] * 2000
        assert seen.claims_held() == 0
        reopened = RedisBloomFilter(redis_url, redis_name)
        assert reopened.shards == 4 and reopened.add_many(keys[:10] + probe[:3]) == (
            [False] * 10 + [True] * 3
        )
        reopened.close()
    finally:
        seen.destroy()
    assert client.keys(f"*{redis_name}*") == [], "destroy deletes every shard's keys"


def test_unacknowledged_answers_are_claimed_in_each_shard(redis_url, redis_name):
    """Claims live in the shard of their URL: another client waits for them, and gets them
    as new once their claimer abandons them (closing without acknowledging)."""
    first = RedisBloomFilter(redis_url, redis_name, capacity=10_000, shards=3, lease=30)
    second = RedisBloomFilter(redis_url, redis_name, lease=30)
    keys = urls(300, seed=4)
    try:
        first.auto_acknowledge = False
        assert all(first.add_many(keys))
        assert first.claims_held() == 300
        held = [s for s in first._shards if s.records]
        assert len(held) == 3, "every shard took some of the batch"
        first.close()  # abandons its claims: the next asker gets them
        assert all(second.add_many(keys))
        assert second.claims_held() == 0
    finally:
        second.destroy()


def test_a_shard_that_vanished_or_went_back_stops_the_batch(redis_url, redis_name):
    client = redis.Redis.from_url(redis_url)
    seen = RedisBloomFilter(redis_url, redis_name, capacity=10_000, shards=3)
    try:
        assert all(seen.add_many(urls(300)))
        one = seen._shards[1]
        client.hdel(one.meta, f"w:{seen._claims.owner}")  # as if restored from before
        seen.native_from = 2.0  # the script sees it
        with pytest.raises(FilterRolledBackError):
            seen.add_many(urls(300, seed=1))
        client.hdel(one.meta, "rolled_back")
        client.delete(seen._shards[2].bits)
        other = RedisBloomFilter(redis_url, redis_name)
        with pytest.raises(FilterLostError):
            other.add_many(urls(300, seed=2))
        other.close()
    finally:
        seen.destroy()


def test_format_2_is_read_as_one_shard_and_older_formats_are_refused(redis_url, redis_name):
    client = redis.Redis.from_url(redis_url)
    meta = redis_store.key(redis_name, "meta")
    seen = RedisBloomFilter(redis_url, redis_name, capacity=5000)
    assert all(seen.add_many(urls(100)))
    seen.close()
    params = json.loads(client.hget(meta, "params"))
    assert params["format"] == "urlseen-redis-bloom/3" and params["tags"] is None
    old = {k: v for k, v in params.items() if k not in ("shard_bits", "tags")}
    client.hset(meta, "params", json.dumps({**old, "format": "urlseen-redis-bloom/2"}))
    again = RedisBloomFilter(redis_url, redis_name)
    try:
        assert again.shards == 1 and again.nbits == params["nbits"]
        assert again.add_many(urls(100) + urls(5, seed=7)) == [False] * 100 + [True] * 5
        client.hset(meta, "params", json.dumps({**old, "format": "urlseen-redis-bloom/1"}))
        with pytest.raises(FormatError, match="another version"):
            RedisBloomFilter(redis_url, redis_name)
    finally:
        again.destroy()


def test_shards_must_be_a_sane_number(redis_url, redis_name):
    from urlseen import ConfigError

    for bad in (0, -1, 1025, 2.5, True):
        with pytest.raises(ConfigError, match="shards"):
            RedisBloomFilter(redis_url, redis_name, capacity=100, shards=bad)  # type: ignore[arg-type]


# ---- Redis Cluster (3 primaries started by the test session) ----------------------------------


def test_on_a_cluster_each_primary_holds_one_shard(redis_cluster_url):
    client = redis_store.connect(redis_cluster_url)
    keys = urls(4000) + urls(1000)
    seen = RedisBloomFilter(redis_cluster_url, "cluster-shards", capacity=10_000, error_rate=1e-9)
    other = RedisBloomFilter(redis_cluster_url, "cluster-shards")
    try:
        assert seen.shards == 3
        nodes = set()
        for shard in seen._shards:
            slots = {client.keyslot(k) for k in shard.stored_keys()}
            assert len(slots) == 1, "a shard's keys share a slot"
            nodes.add(client.get_node_from_key(shard.bits).name)
        assert len(nodes) == 3, "one shard on each primary"
        assert seen.add_many(keys[:2500]) == first_seen(keys)[:2500]
        assert other.add_many(keys[2500:]) == [
            k not in set(keys[:2500]) for k in keys[2500:]
        ] and len(seen) == len(set(keys))
        for i, shard in enumerate(seen._shards):
            assert client.get(shard.bits) == model_bits(seen, i, keys)
        assert seen.contains_many(keys[:100] + urls(100, seed=3)) == [True] * 100 + [False] * 100
        assert seen.claims_held() == 0
    finally:
        other.close()
        seen.destroy()
    left = client.keys("*cluster-shards*", target_nodes=client.PRIMARIES)
    assert left == [], left
