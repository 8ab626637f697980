"""The frontier's contract, local (SQLite) and shared (a real Redis): priorities first, LIFO or
FIFO within one, in-flight requests back in the queue when their holder is gone, and the
ordering that makes a kill harmless: the frontier commits before the filter's new answers do."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from urlseen import kinds
from urlseen.errors import ConfigError, FormatError
from urlseen.frontier import Frontier
from urlseen.frontier.admit import admit
from urlseen.frontier.sqlite import FRONTIER_FILE, SQLiteFrontier


@pytest.fixture(params=["sqlite", "redis"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """make(lifo=..., lease=...) -> a frontier; the same storage for every call of a test."""
    made: list[Frontier] = []
    name = f"test-frontier-{uuid.uuid4().hex[:8]}"

    def open_one(lifo: bool = False, lease: float = 60.0) -> Frontier:
        if request.param == "sqlite":
            frontier: Frontier = SQLiteFrontier(tmp_path / FRONTIER_FILE, lifo=lifo)
        else:
            from urlseen.shared.frontier import RedisFrontier

            url = request.getfixturevalue("redis_url")
            frontier = RedisFrontier(url, name, lifo=lifo, lease=lease)
        made.append(frontier)
        return frontier

    yield open_one
    for frontier in made[:-1]:  # their closes write (requests taken ahead go back): first
        frontier.close()
    if made:
        made[-1].clear()
        made[-1].close()


def _drain(frontier: Frontier) -> list[bytes]:
    out = []
    while (taken := frontier.take()) is not None:
        out.append(taken[1])
    return out


@pytest.mark.parametrize("lifo", [False, True])
def test_priority_first_then_the_order_asked(make: Any, lifo: bool) -> None:
    frontier = make(lifo=lifo)
    frontier.commit([(0, b"a0"), (5, b"b5"), (0, b"c0"), (-3, b"d-3"), (5, b"e5")], [])
    frontier.commit([(0, b"f0")], [])
    assert frontier.ready() == frontier.pending() == 6
    zeros = [b"a0", b"c0", b"f0"]
    fives = [b"b5", b"e5"]
    if lifo:
        zeros.reverse()
        fives.reverse()
    assert _drain(frontier) == [*fives, *zeros, b"d-3"]
    assert frontier.ready() == 0 and frontier.pending() == 6  # all in flight, none done


def test_in_flight_requests_come_back_when_the_holder_is_gone(make: Any) -> None:
    first = make(lease=0.3)
    first.commit([(0, b"one"), (0, b"two"), (0, b"three")], [])
    token_one, _ = first.take()
    first.take()
    first.commit([(1, b"child")], [token_one])  # one done, its child queued, with it
    assert first.pending() == 3
    time.sleep(0.4)  # a shared frontier's lease ends (a local one returns them on opening)
    second = make(lease=0.3)
    assert sorted(_drain(second)) == [b"child", b"three", b"two"]
    # Locally the one in flight; in Redis also the one taken ahead (PREFETCH), leased too.
    assert second.returned == (1 if isinstance(second, SQLiteFrontier) else 2)


def test_a_renewed_lease_keeps_the_request(make: Any) -> None:
    first = make(lease=0.6)
    first.commit([(0, b"slow")], [])
    assert first.take() is not None
    for _ in range(4):  # 0.8 s in all, renewed every 0.2 s: past the lease, still held
        time.sleep(0.2)
        first.renew()
    other = make(lease=0.6)
    if isinstance(first, SQLiteFrontier):
        return  # one process owns a local frontier: opening it again hands everything back
    assert other.take() is None
    first.release()  # a failed fetch: back in the queue at close, for the next taker
    assert other.take() is not None


def test_requests_taken_ahead_go_back_at_close(redis_url: str) -> None:
    from urlseen.shared.frontier import PREFETCH, RedisFrontier

    name = f"test-frontier-{uuid.uuid4().hex[:8]}"
    first = RedisFrontier(redis_url, name)
    first.commit([(0, b"%d" % i) for i in range(PREFETCH + 2)], [])
    assert first.take() is not None  # PREFETCH taken from Redis, one handed out
    first.close()
    second = RedisFrontier(redis_url, name)
    try:
        assert len(_drain(second)) == PREFETCH + 1  # all but the one handed out (leased)
    finally:
        second.clear()
        second.close()


def test_a_local_frontier_keeps_what_a_killed_process_committed(tmp_path: Path) -> None:
    path = tmp_path / FRONTIER_FILE
    frontier = SQLiteFrontier(path)
    frontier.commit([(0, b"x" * 100)] * 50, [])
    frontier.take()
    # No close: the file as a killed process leaves it (the WAL holds the commits).
    reopened = SQLiteFrontier(path)
    assert reopened.ready() == reopened.pending() == 50 and reopened.returned == 1
    reopened.close()
    frontier.close()


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    with pytest.raises(FormatError, match="not a urlseen frontier"):
        SQLiteFrontier(other)


def test_a_bad_lease_is_refused(redis_url: str) -> None:
    from urlseen.shared.frontier import RedisFrontier

    with pytest.raises(ConfigError, match="lease"):
        RedisFrontier(redis_url, "x", lease=0)


@pytest.mark.parametrize("kind", ["exact", "bloom", "library"])
def test_the_frontier_commits_before_the_filter_records_the_new_keys(
    kind: str, tmp_path: Path
) -> None:
    seen = kinds.open_filter(kind, capacity=1000, state=tmp_path / "state")
    try:
        seen.add_many([b"old-key-0000000000"])
        during: list[list[bool]] = []

        def keep(flags: list[bool]) -> None:
            assert flags == [False, True, False]
            if kind == "bloom":  # tested only so far: the new key is not in the filter yet
                during.append([key in seen for key in (b"new-key-0000000000",)])
            # (exact and library: keep runs inside the library's transaction, before COMMIT)

        keys = [b"old-key-0000000000", b"new-key-0000000000", b"new-key-0000000000"]
        assert admit(seen, keys, keep) == [False, True, False]
        assert during == ([[False]] if kind == "bloom" else [])
        assert b"new-key-0000000000" in seen  # recorded once keep returned
    finally:
        seen.close()
