"""A shared filter that went back in time (Redis restored from an earlier snapshot, a failover
to a replica that lagged) stops every client that wrote to it since with FilterRolledBackError,
never answers its lost URLs new again in silence, and never spins: a real private
redis-server, SAVEd, written to, then restarted from the old RDB file."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from urlseen.errors import FilterLostError, FilterRolledBackError, FormatError

LIMIT = 30.0  # seconds any one call may take here: a spin or a hang fails the test


def _restore(server: Any) -> None:
    """Restart the server from the RDB file its last SAVE wrote (what came after is lost)."""
    import redis

    with contextlib.suppress(redis.exceptions.ConnectionError):  # it closes as it goes
        server.client().shutdown(nosave=True)
    server.proc.wait(timeout=10)
    server.start()


def _bounded(call: Callable[[], Any]) -> BaseException | None:
    """Run call in a thread; the exception it raised (None if it returned). Fails the test
    if it is still running after LIMIT seconds."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(LIMIT)
    assert not thread.is_alive(), f"still running after {LIMIT} s: a spin or a hang"
    return raised[0]


def _urls(tag: str, n: int) -> list[str]:
    return [f"https://{tag}.example/{i}" for i in range(n)]


@pytest.fixture
def snapshot_server(redis_servers):
    return redis_servers(persist=False)  # RDB only: SAVE writes dump.rdb in its folder


def test_a_bloom_client_stops_after_a_restore_and_so_does_the_other(snapshot_server) -> None:
    from urlseen.shared.bloom import RedisBloomFilter

    url = snapshot_server.url
    writer = RedisBloomFilter(url, "rb", capacity=100_000)
    idle = RedisBloomFilter(url, "rb")
    assert all(writer.add_many(_urls("a", 300)))
    assert all(idle.add_many(_urls("i", 10)))
    snapshot_server.client().save()
    later = _urls("b", 300)
    assert all(writer.add_many(later))
    _restore(snapshot_server)
    error = _bounded(lambda: writer.add_many(later))
    assert isinstance(error, FilterRolledBackError), error
    assert "'rb'" in str(error) and "went back in time" in str(error)
    # the idle client lost nothing of its own, but the filter is marked: it stops too
    error = _bounded(lambda: idle.add_many(_urls("c", 5)))
    assert isinstance(error, FilterRolledBackError), error
    assert isinstance(error, FilterLostError)  # callers that catch the lost filter catch it


def test_a_clean_close_takes_its_write_marks_away(snapshot_server) -> None:
    from urlseen.shared.bloom import RedisBloomFilter

    seen = RedisBloomFilter(snapshot_server.url, "rm", capacity=1000)
    seen.add_many(_urls("a", 10))
    fields = snapshot_server.client().hkeys("urlseen:{rm}:meta")
    assert any(f.startswith(b"w:") for f in fields)  # the mark is there while it runs
    seen.close()
    fields = snapshot_server.client().hkeys("urlseen:{rm}:meta")
    assert not any(f.startswith(b"w:") for f in fields)


def test_an_exact_library_stops_after_a_restore(snapshot_server) -> None:
    from urlseen.shared.library import RedisLibrary

    library = RedisLibrary(snapshot_server.url, "rl", capacity=10_000)
    first = [uuid.uuid4().bytes for _ in range(200)]
    later = [uuid.uuid4().bytes for _ in range(200)]
    assert all(library.claim(first))
    snapshot_server.client().save()
    assert all(library.claim(later))
    _restore(snapshot_server)
    error = _bounded(lambda: library.claim(later))
    assert isinstance(error, FilterRolledBackError), error


@pytest.mark.parametrize("when", ["before-growth", "after-growth"])
def test_a_splittable_client_stops_after_a_restore_without_spinning(
    snapshot_server, when: str
) -> None:
    from urlseen.splittable.filter import SplittableBloomFilter

    url = snapshot_server.url
    seen = SplittableBloomFilter(1000, 0.01, redis=url, name="rs", leaf_bits=4096)
    first = _urls("a", 20 if when == "before-growth" else 2000)
    assert sum(seen.add_many(first)) > 0.97 * len(first)
    snapshot_server.client().save()
    grows = seen.grows_done + seen.splits_done
    later = _urls("b", 3000)
    assert sum(seen.add_many(later)) > 2900  # a Bloom filter's false positives aside
    assert seen.grows_done + seen.splits_done > grows  # its leaves grew after the snapshot
    _restore(snapshot_server)
    error = _bounded(lambda: seen.add_many(later + _urls("c", 100)))
    assert isinstance(error, FilterRolledBackError), error


def test_the_redis_frontier_stops_after_a_restore_or_an_empty_restart(snapshot_server) -> None:
    from urlseen.shared.frontier import RedisFrontier

    frontier = RedisFrontier(snapshot_server.url, "rf")
    frontier.commit([(0, b"a"), (0, b"b")], [])
    snapshot_server.client().save()
    frontier.commit([(0, b"c")], [])
    token, _ = frontier.take() or (None, None)
    assert token is not None
    _restore(snapshot_server)
    error = _bounded(frontier.pending)  # take() would hand out what it took ahead first
    assert isinstance(error, FilterRolledBackError), error
    assert "'rf'" in str(error)
    error = _bounded(lambda: frontier.commit([(0, b"d")], [token]))
    assert isinstance(error, FilterRolledBackError), error
    frontier.clear()  # a user who knows starts the frontier again

    fresh = RedisFrontier(snapshot_server.url, "rf2")
    fresh.commit([(0, b"x")], [])
    snapshot_server.client().flushall()  # a restart without persistence: empty
    error = _bounded(fresh.pending)
    assert isinstance(error, FilterRolledBackError), error


def test_garbled_metadata_is_a_clear_error_naming_key_and_field(snapshot_server) -> None:
    from urlseen.shared.bloom import RedisBloomFilter

    seen = RedisBloomFilter(snapshot_server.url, "rg", capacity=1000)
    seen.add_many(_urls("a", 3))
    meta = "urlseen:{rg}:meta"
    snapshot_server.client().hset(meta, "count", "abc")
    with pytest.raises(FormatError, match=r"urlseen:\{rg\}:meta: field 'count'"):
        len(seen)
    with pytest.raises(FormatError, match=r"urlseen:\{rg\}:meta: field '?count'? is not"):
        seen.add_many(_urls("b", 3))


_SPLITTING_CLIENT = """
import sys
from urlseen.splittable.filter import SplittableBloomFilter
seen = SplittableBloomFilter(redis=sys.argv[1], name="rsplit", lease=0.001)
for start in range(0, 20000, 500):
    seen.add_many([f"https://u.example/{i}" for i in range(start, start + 500)])
seen.close()
"""


def test_no_false_data_gone_while_another_client_takes_a_split_over(snapshot_server) -> None:
    """Four processes on a filter that splits often, at a lease so short that split locks
    expire mid-split: a client whose split another took over (dropping its children) steps
    back instead of reporting the filter's data gone."""
    import subprocess
    import sys

    from urlseen.splittable.filter import SplittableBloomFilter

    url = snapshot_server.url
    SplittableBloomFilter(1000, 0.01, redis=url, name="rsplit", leaf_bits=4096).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SPLITTING_CLIENT, url],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        errors = [proc.communicate(timeout=LIMIT * 2)[1] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    assert not any("gone" in e for e in errors), errors
    assert [proc.returncode for proc in procs] == [0] * 4, errors
    seen = SplittableBloomFilter(redis=url, name="rsplit")
    assert len(seen.leaves()) > 8  # they split
    seen.close()
