"""RedisBloomFilter written by a fleet at once: concurrent batches merged into the same blocks
lose no bit, and a key another client holds is waited on natively (no script call for it)."""

from __future__ import annotations

import multiprocessing
import random
import threading

import redis

from conftest import filter_bits
from urlseen import BloomFilter
from urlseen.shared import client as redis_store
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.shared.scripts import Op

CAPACITY, RATE = 8_000, 1e-6  # small: the writers' batches meet in most of its 64-byte blocks


def urls(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"https://fleet{seed}.example/{rng.randrange(10**12)}" for _ in range(n)]


def _add_all(args: tuple[str, str, list[str]]) -> list[bool]:
    url, name, keys = args
    seen = RedisBloomFilter(url, name)
    answers = []
    for start in range(0, len(keys), 250):
        answers += seen.add_many(keys[start : start + 250])
    seen.close()
    return answers


def test_concurrent_writers_of_the_same_blocks_lose_no_bit(redis_url, redis_name):
    """Four processes add disjoint URLs into one small filter at once, so that each batch's
    blocks were written by another between its read and its script (the merge): every URL is
    answered new to its one writer (false positives aside: ~1e-6 each), every URL is seen
    afterwards, and the bits are exactly a local filter's holding them all (no write lost)."""
    RedisBloomFilter(redis_url, redis_name, capacity=CAPACITY, error_rate=RATE).close()
    streams = [urls(2_000, seed) for seed in range(4)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        answers = pool.map(_add_all, [(redis_url, redis_name, s) for s in streams])
    missed = sum(a.count(False) for a in answers)
    assert missed <= 1, f"{missed} URLs answered seen though only their writer added them"
    everyone = [k for s in streams for k in s]
    seen = RedisBloomFilter(redis_url, redis_name)
    try:
        assert all(seen.contains_many(everyone)), "an added URL is not seen"
        local = BloomFilter(CAPACITY, error_rate=RATE)
        local.add_many(everyone)
        stored = redis.Redis.from_url(redis_url).get(redis_store.key(redis_name, "bits"))
        assert stored == filter_bits(local), "the bits are not the union of every write"
        assert seen.claims_held() == 0
    finally:
        seen.destroy()


def test_a_key_held_by_an_older_claim_is_polled_without_the_script(redis_url, redis_name):
    """A batch whose native read finds its keys present under another client's older live
    claim does not send them to the script: it polls their claims natively, and once the
    claimer acknowledges, answers them seen with no script call at all."""
    first = RedisBloomFilter(redis_url, redis_name, capacity=10_000, error_rate=1e-9, lease=5)
    first.auto_acknowledge = False
    keys = urls(100, seed=7)
    assert all(first.add_many(keys))
    second = RedisBloomFilter(redis_url, redis_name, lease=5)
    calls: list[object] = []
    polls: list[list[bool]] = []
    script, shard = second._script, second._shards[0]
    real_poll = shard._still_pending

    def spy(keys: list[str], args: list[bytes]) -> object:
        calls.append(args[0])
        return script(keys=keys, args=args)

    def poll(fps: list[bytes], priority: int) -> list[bool]:
        polls.append(real_poll(fps, priority))
        return polls[-1]

    second._script = spy  # type: ignore[method-assign]
    shard._still_pending = poll  # type: ignore[method-assign]
    answers: list[list[bool]] = []
    asking = threading.Thread(target=lambda: answers.append(second.add_many(keys)))
    asking.start()
    for _ in range(500):
        if polls:
            break
        asking.join(0.01)
    assert polls and all(polls[0]) and asking.is_alive(), "pending on the older claims"
    assert first.acknowledge() == 0
    asking.join()
    assert answers == [[False] * 100]
    assert Op.ADD not in calls, "no script call"
    assert second.claims_held() == 0
    second.destroy()
