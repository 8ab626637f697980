"""Expiry by generations of whole filters (job/generations.py): the bounds a request expires
within, on an injected clock, for every local kind in memory and in a folder; then shared
through a real Redis, numbered by the server's clock: clients agree, dropped generations are
deleted (by whoever moves on, by a client that opens late), claims in an older generation are
taken over after their client died, and expiry holds across processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from urlseen import kinds
from urlseen.errors import ConfigError
from urlseen.job.generations import Generations, check_shape, generation_error_rate


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _local(kind: str, clock: Clock, age: float, generations: int, **kw: Any) -> Any:
    return kinds.open_expiring(kind, age, generations, capacity=1000, clock=clock, **kw)


# -- local, on an injected clock ------------------------------------------------------------


@pytest.mark.parametrize("generations", [1, 2, 4])
@pytest.mark.parametrize("offset", [0.0, 0.3, 0.999])
def test_a_request_expires_within_its_bounds(generations: int, offset: float) -> None:
    """First seen at t in window n: seen until (n + G) * window, new from then; so it
    expires more than age * (G - 1) / G and at most age after t."""
    clock = Clock(1000.0 + offset)
    window = 1.0
    with _local("bloom", clock, window * generations, generations) as seen:
        first = clock.now
        assert seen.add("k")
        end = (1000 + generations) * window
        clock.now = end - 1e-6
        assert "k" in seen and not seen.add("k")
        clock.now = end
        assert "k" not in seen
        assert window * (generations - 1) < end - first <= window * generations
        assert seen.add("k") and not seen.add("k")  # new again, in the current generation


def test_a_duplicate_does_not_refresh_a_request() -> None:
    clock = Clock(1000.0)
    with _local("bloom", clock, 4.0, 4) as seen:
        assert seen.add("old")
        for now in (1001.0, 1002.5, 1003.9):
            clock.now = now
            assert not seen.add("old")  # seen, and left in its first generation
        clock.now = 1004.0  # four windows after it was first seen
        assert seen.add("old")


@pytest.mark.parametrize("kind", ["bloom", "dsbf", "mdbf"])
def test_every_local_kind_expires_only_what_is_old(kind: str) -> None:
    clock = Clock(1000.0)
    with _local(kind, clock, 2.0, 2) as seen:
        assert seen.add_many(["a", "b", "a"]) == [True, True, False]
        clock.now = 1001.2
        assert seen.add_many(["c", "a"]) == [True, False]
        clock.now = 1002.0  # the first window is out: a and b expired, c stays
        assert seen.contains_many(["a", "b", "c"]) == [False, False, True]
        assert seen.add_many(["a", "c"]) == [True, False]
        assert len(seen) == 2  # c in one generation, a in the current one
        details = seen.stats().details
        assert [g["generation"] for g in details["live_generations"]] == [1001, 1002]
        assert details["oldest_generation_age_seconds"] == pytest.approx(1.0)


def test_a_clock_set_back_keeps_the_current_generation() -> None:
    clock = Clock(1000.0)
    with _local("bloom", clock, 2.0, 2) as seen:
        clock.now = 1003.0
        assert seen.add("k") and seen.current_generation() == 1003
        clock.now = 990.0
        assert not seen.add("k") and seen.current_generation() == 1003


@pytest.mark.parametrize("kind", ["bloom", "mdbf"])
def test_a_folder_keeps_its_generations_and_deletes_the_dropped(tmp_path: Path, kind: str) -> None:
    clock = Clock(1000.0)
    state = tmp_path / f"seen.{kind}"
    with _local(kind, clock, 3.0, 3, state=state) as seen:
        assert seen.add("a")
        clock.now = 1001.0
        assert seen.add("b")
    assert sorted(p.name for p in state.glob("gen-*")) == ["gen-1000.urlseen", "gen-1001.urlseen"]
    clock.now = 1002.5
    with _local(kind, clock, 3.0, 3, state=state) as seen:  # another run: the same requests
        assert seen.add_many(["a", "b", "c"]) == [False, False, True]
    clock.now = 1003.0  # a late run: generation 1000 dropped on opening
    with _local(kind, clock, 3.0, 3, state=state) as seen:
        assert sorted(p.name for p in state.glob("gen-*")) == [
            "gen-1001.urlseen", "gen-1002.urlseen", "gen-1003.urlseen"
        ]  # fmt: skip
        assert seen.add_many(["a", "b", "c"]) == [True, False, False]
    assert kinds.describe(state)["live_generations"][0]["generation"] == 1001
    with pytest.raises(ConfigError, match="keeps the expiry it was made with"):
        _local(kind, clock, 6.0, 3, state=state)


def test_the_shape_is_checked() -> None:
    assert check_shape(2, 4) == (2.0, 4)
    for window, generations in [(0, 4), (float("inf"), 4), (1.0, 0), (1.0, 65), (1.0, True)]:
        with pytest.raises(ConfigError):
            check_shape(window, generations)
    # G generations at the generation's rate err at the whole filter's rate
    assert 1 - (1 - generation_error_rate(0.01, 4)) ** 4 == pytest.approx(0.01)


# -- shared through Redis, by the server's clock --------------------------------------------


def _wait_for(moment: float, *clients: Generations) -> None:
    """Sleep until each client's clock (its estimate of the Redis server's) reaches moment."""
    for seen in clients:
        while (left := moment - seen.store.now()) > 0:
            time.sleep(min(left, 0.05) + 0.001)


def _shared(redis_url: str, name: str, kind: str, age: float, generations: int, **kw: Any) -> Any:
    return kinds.open_expiring(
        kind, age, generations, capacity=1000, redis=redis_url, name=name, **kw
    )


def _generation_keys(redis_url: str, name: str) -> set[str]:
    import redis

    client = redis.Redis.from_url(redis_url)
    return {k.decode() for k in client.scan_iter(match=f"urlseen:{{{name}~g*", count=1000)}


@pytest.mark.parametrize("kind", ["bloom", "dsbf"])
def test_shared_clients_agree_and_dropped_generations_are_deleted(
    redis_url: str, redis_name: str, kind: str
) -> None:
    one = _shared(redis_url, redis_name, kind, 4.0, 2)  # windows of 2 s (a loaded machine)
    two = _shared(redis_url, redis_name, kind, 4.0, 2)
    try:
        start = one.current_generation()
        assert [one.add("k"), two.add("k")] == [True, False]
        first = f"urlseen:{{{redis_name}~g{start}}}"
        assert any(k.startswith(first) for k in _generation_keys(redis_url, redis_name))
        _wait_for((start + 1) * one.window, one, two)
        assert not two.add("k")  # in the older generation: seen, not refreshed
        assert two.add("j")
        _wait_for((start + 2) * one.window, one, two)
        assert [two.add("k"), one.add("k")] == [True, False]  # new again, once
        assert not one.add("j")
        _wait_for((start + 2) * one.window + one.store.grace, one, two)
        two.add("x")  # the one that moves on first deletes it
        left = _generation_keys(redis_url, redis_name)
        assert left and not any(k.startswith(first) for k in left)
    finally:
        one.destroy()
        two.close()
    assert not _generation_keys(redis_url, redis_name)


def test_a_client_that_opens_late_deletes_what_was_left(redis_url: str, redis_name: str) -> None:
    seen = _shared(redis_url, redis_name, "bloom", 0.6, 2)
    start = seen.current_generation()
    seen.add("k")
    seen.close()
    assert _generation_keys(redis_url, redis_name)
    probe = _shared(redis_url, redis_name, "bloom", 0.6, 2)
    try:
        _wait_for((start + 3) * probe.window + probe.store.grace, probe)
        probe.close()
        late = _shared(redis_url, redis_name, "bloom", 0.6, 2)
        numbers = {
            int(k.split("~g")[1].split("}")[0]) for k in _generation_keys(redis_url, redis_name)
        }
        assert numbers and min(numbers) >= start + 2  # opened: what was left is gone
        assert late.add("k")
    finally:
        late.destroy()


# One process of the test: opens the shared filter, answers "new" for the keys on its command
# line without acknowledging them (its claims held), prints its generation and dies at once.
DIES_HOLDING_CLAIMS = textwrap.dedent(
    """
    import os, sys, time
    from urlseen import kinds
    url, name, kind, age = sys.argv[1:5]
    seen = kinds.open_expiring(kind, float(age), 2, capacity=1000, redis=url, name=name, lease=1.0)
    seen.auto_acknowledge = False
    while seen.store.now() % seen.window > seen.window / 2:  # early in a window: no boundary
        time.sleep(0.01)
    number = seen.current_generation()
    answers = seen.add_many(sys.argv[5:])
    assert seen.current_generation() == number, "a boundary passed: the machine is too slow"
    print(number, answers, flush=True)
    os._exit(0)
    """
)


@pytest.mark.parametrize("kind", ["bloom", "dsbf"])
def test_expiry_across_processes_and_claims_in_an_older_generation(
    redis_url: str, redis_name: str, kind: str
) -> None:
    """Another process is answered a and b new and dies before acknowledging them. This
    process, in the next window, finds them in the older generation under claims never
    acknowledged and takes them over after the lease (new: never lost), then sees them, and
    once their generation is dropped finds them new again (c, first seen later, stays seen).
    Windows of 4 s: the lease (1 s) ends early in the next window, with room for a loaded
    machine."""
    seen = _shared(redis_url, redis_name, kind, 8.0, 2, lease=1.0)
    try:
        seen.current_generation()
        done = subprocess.run(
            [sys.executable, "-c", DIES_HOLDING_CLAIMS, redis_url, redis_name, kind, "8", "a", "b"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        number, answers = done.stdout.split(" ", 1)
        assert answers.strip() == "[True, True]"
        _wait_for((int(number) + 1) * seen.window, seen)
        assert seen.current_generation() == int(number) + 1
        assert seen.add_many(["a", "b", "c"]) == [True, True, True]  # taken over, not lost
        assert seen.add_many(["a", "b"]) == [False, False]
        _wait_for((int(number) + 2) * seen.window, seen)
        assert seen.add_many(["a", "b", "c"]) == [True, True, False]  # a, b expired; c not
    finally:
        seen.destroy()
