"""The shared filter's memory of seen answers (shared/seen_cache.py) on a real Redis: repeats
answered without a round trip, and never "seen" once another process's forget or expiry has
returned; claims answered by the memory for one lease only."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

redis = pytest.importorskip("redis")

from urlseen import kinds  # noqa: E402
from urlseen.shared.seen_cache import EpochWatch, SeenCache, epoch_key  # noqa: E402

# The other process: opens the same filter, then for each line "forget KEY" or "expire" forgets
# (expire: forget_older_than a time to come, which expires every key) and says "done".
FORGETTER = textwrap.dedent(
    """
    import sys, time
    from urlseen import kinds
    seen = kinds.open_filter("exact", redis=sys.argv[1], name=sys.argv[2], capacity=10000)
    print("ready", flush=True)
    for line in sys.stdin:
        word, _, key = line.strip().partition(" ")
        if word == "forget":
            seen.forget_many([bytes.fromhex(key)])
        else:
            seen.forget_older_than(time.time() + 3600)
        print("done", flush=True)
    seen.close()
    """
)


def _cache(redis_url: str, name: str, lease: float = 10.0) -> SeenCache:
    seen = kinds.open_filter("exact", redis=redis_url, name=name, capacity=10000)
    return SeenCache(seen, EpochWatch(redis_url, name), 10000, lease)


def test_repeats_cost_no_round_trip(redis_url: str, redis_name: str) -> None:
    cache = _cache(redis_url, redis_name)
    try:
        keys = [bytes([i]) * 20 for i in range(50)]
        assert cache.add_many(keys) == [True] * 50
        trips = cache.watch.round_trips if cache.watch else 0
        for _ in range(3):
            assert cache.add_many(keys) == [False] * 50
        assert (cache.hits, cache.asked, cache.batches) == (150, 50, 1)
        assert cache.watch is not None and cache.watch.round_trips == trips  # no re-read
    finally:
        cache.destroy()
    assert not redis.Redis.from_url(redis_url).exists(epoch_key(redis_name))


@pytest.mark.parametrize("how", ["forget", "expire"])
def test_a_forget_in_another_process_is_seen_by_the_next_check(
    redis_url: str, redis_name: str, how: str
) -> None:
    """Many rounds of: this process knows a key seen (from memory); the other forgets it (or
    expires everything) while this one keeps checking it; once the other's forget returned,
    this one's next check answers new (or one of its checks during the forget already did:
    the key is this process's again)."""
    cache = _cache(redis_url, redis_name)
    proc = subprocess.Popen(
        [sys.executable, "-c", FORGETTER, redis_url, redis_name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stale, retaken, rounds = [], 0, 150
    try:
        assert proc.stdout.readline().strip() == "ready"
        for i in range(rounds):
            key = i.to_bytes(4, "big") * 5
            assert cache.add(key)
            cache.acknowledge()
            hits = cache.hits
            assert not cache.add(key) and cache.hits == hits + 1  # from memory
            proc.stdin.write(f"forget {key.hex()}\n" if how == "forget" else "expire\n")
            proc.stdin.flush()
            during = []
            deadline = time.monotonic() + 0.002 * (i % 5)  # checks racing the forget
            while time.monotonic() < deadline:
                during.append(cache.add(key))
            assert proc.stdout.readline().strip() == "done"
            after = cache.add(key)
            if any(during):
                retaken += 1
            elif not after:
                stale.append(i)
            cache.acknowledge()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        cache.destroy()
    assert not stale, f"{len(stale)} of {rounds} rounds answered seen after the forget: {stale}"
    assert cache.watch is not None and cache.watch.invalidations >= rounds - retaken


def test_a_seen_answer_is_asked_again_after_a_lease(redis_url: str, redis_name: str) -> None:
    """A key answered seen (maybe only another client's claim) is answered from memory for one
    lease, then asked once more; a key this client was answered new is known at once."""
    cache = _cache(redis_url, redis_name, lease=0.3)
    other = kinds.open_filter("exact", redis=redis_url, name=redis_name, capacity=10000)
    try:
        mine, theirs = b"m" * 20, b"t" * 20
        assert other.add(theirs)
        assert cache.add_many([mine, theirs]) == [True, False]
        assert cache.add_many([mine, theirs]) == [False, False] and cache.asked == 2
        time.sleep(0.35)
        assert cache.add_many([mine, theirs]) == [False, False] and cache.asked == 3
        assert cache.add_many([mine, theirs]) == [False, False] and cache.asked == 3
    finally:
        other.close()
        cache.destroy()


def test_without_tracking_nothing_is_answered_locally(redis_url: str, redis_name: str) -> None:
    seen = kinds.open_filter("exact", redis=redis_url, name=redis_name, capacity=10000)
    cache = SeenCache(seen, None, 100, 10.0)
    try:
        assert cache.add(b"k" * 20) and not cache.add(b"k" * 20)
        assert (cache.hits, cache.asked) == (0, 2)
    finally:
        cache.destroy()


def _tracking_connections_lost(client: Any) -> int:
    """Kill every tracking connection (flag t: only this test's memories track here)."""
    ids = [c["id"] for c in client.client_list() if "t" in c.get("flags", "")]
    for me in ids:
        client.client_kill_filter(_id=me)
    return len(ids)


def test_a_lost_tracking_connection_drops_the_memory(redis_url: str, redis_name: str) -> None:
    cache = _cache(redis_url, redis_name)
    client = redis.Redis.from_url(redis_url)
    try:
        key = b"x" * 20
        assert cache.add(key) and not cache.add(key) and cache.hits == 1
        assert cache.watch is not None
        assert _tracking_connections_lost(client) >= 1
        time.sleep(0.05)
        assert not cache.add(key) and cache.hits == 1  # asked Redis: the memory was dropped
        assert not cache.add(key) and cache.hits == 2  # tracked again
    finally:
        cache.destroy()


# The other process: opens the same expiring filter and keeps moving on with the server's
# clock (deleting the generations dropped, then writing the epoch) until its stdin closes.
MOVER = textwrap.dedent(
    """
    import sys, threading, time
    from urlseen import kinds
    seen = kinds.open_expiring(
        "bloom", float(sys.argv[3]), 2, capacity=10000, redis=sys.argv[1], name=sys.argv[2]
    )
    print("ready", flush=True)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    while not done.wait(0.003):
        seen.current_generation()
    seen.close()
    """
)


@pytest.mark.parametrize("lag", [0.0, 0.5], ids=["same-clock", "lagging-0.5s"])
def test_an_expiry_in_another_process_is_seen_by_the_next_check(
    redis_url: str, redis_name: str, lag: float
) -> None:
    """Rounds of: this process knows a key seen (from memory); the other moves on with the
    clock and deletes the key's generation; once it is deleted, this one's next check answers
    new (or one of its checks meanwhile already did). lagging: this process's clock runs
    0.5 s behind (past the 0.3 s grace): the other deletes the generation before this one
    stops asking it, and only the epoch the deleter writes drops this memory in time: some
    checks answer new while this process's own clock still holds the generation live. (A
    check that starts after the deletion returned: as for a forget, shared/seen_cache.py.)"""
    age = 1.2  # two windows of 0.6 s
    seen = kinds.open_expiring("bloom", age, 2, capacity=10000, redis=redis_url, name=redis_name)
    clock = seen.store.now
    seen.store.now = lambda: clock() - lag  # type: ignore[method-assign]
    cache = SeenCache(seen, EpochWatch(redis_url, redis_name), 10000, 10.0)
    client = redis.Redis.from_url(redis_url)
    proc = subprocess.Popen(
        [sys.executable, "-c", MOVER, redis_url, redis_name, str(age)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stale, retaken, early, rounds = [], 0, 0, 6
    try:
        assert proc.stdout.readline().strip() == "ready"
        for i in range(rounds):
            key = f"round-{i}".encode()
            assert cache.add(key)
            number = seen.current_generation()
            hits = cache.hits
            while cache.hits == hits:  # known from memory (asked again after a turn or epoch)
                assert not cache.add(key)
            during = []
            # until the key's generation is deleted and the deleter wrote the epoch after it
            # (as a forget returns: the first epoch write after its keys are gone is its own)
            held, epoch, deadline = True, b"", 0.0
            while held or (
                client.get(epoch_key(redis_name)) == epoch and time.monotonic() < deadline
            ):
                if held:
                    pipe = client.pipeline(transaction=True)
                    pipe.exists(f"urlseen:{{{redis_name}~g{number}}}:kind")
                    pipe.get(epoch_key(redis_name))
                    held, epoch = pipe.execute()
                    deadline = time.monotonic() + 0.1  # at most, for the epoch after it
                during.append(cache.add(key))
                if during[-1] and seen.current_generation() < number + 2:
                    early += 1  # new while this clock still holds its generation
                time.sleep(0.002)
            after = cache.add(key)
            if any(during):
                retaken += 1
            elif not after:
                stale.append(i)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        cache.destroy()
    assert not stale, f"{len(stale)} of {rounds} rounds answered seen after the expiry: {stale}"
    assert cache.watch is not None and cache.watch.invalidations >= 1
    assert early >= (1 if lag else 0)
