"""Expiry by generations for any kind of filter, the seed content-management crawler's way: G
whole filters of the kind, each covering one window of time (window = age / G), so that a
filter that cannot delete (a Bloom filter, local or shared through Redis) still forgets what
it saw long enough ago.

Windows are aligned on the clock: generation n covers [n * window, (n + 1) * window). While the
clock is in window n, generations n - G + 1 to n are live; a request is seen if a live
generation holds it, and a new one goes into generation n (the current one: its atomic
check-and-add decides who gets "new" among the clients of a shared filter). When the clock
enters window n + 1, generation n - G + 1 is dropped: no longer asked, and its data deleted
(after the store's grace: a shared filter's clients do not all cross a boundary at the same
instant, and one still asking it must find it). A duplicate does not
refresh a request: it stays in the generation that first took it. So a request first seen at t,
in generation n = floor(t / window), is seen until (n + G) * window and new again from then:
it expires more than age * (G - 1) / G and at most age after it was first seen.

What a generation boundary can do: two clients whose clocks straddle a boundary (a shared
filter's clients estimate the Redis server's clock; a lagging one still adds to the previous
generation) may both answer one request new, so a page can be fetched twice near a boundary;
never is a request answered seen that no live generation holds. A request answered new in an
older generation whose claim was never acknowledged (its client died) is taken over by the
next asker after the lease, as in the current one (older generations are asked through their
claims, not only read).

The generations are kept by a GenerationStore: LocalGenerations here (this process's memory,
or a folder of state files), shared/generations.py's RedisGenerations in Redis. The filter
itself knows neither: it opens generations through the store, by number.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from urlseen._lifecycle import Closeable
from urlseen.errors import ConfigError, FilterLostError, FormatError
from urlseen.protocol import ClaimCounts, FilterStats, Key, SeenFilter, key_batch

T = TypeVar("T")
MAX_GENERATIONS = 64
MANIFEST = "generations.json"  # a local folder of generations: what says it holds them
FORMAT = "urlseen-generations"


def generation_error_rate(error_rate: float, generations: int) -> float:
    """p_g such that G generations at p_g err at most at error_rate: 1 - (1 - p)^(1/G)."""
    return -math.expm1(math.log1p(-error_rate) / generations)


def check_shape(window: object, generations: object) -> tuple[float, int]:
    """(window, generations) checked: seconds > 0, and a whole number in [1, 64]."""
    if (
        isinstance(window, bool)
        or not isinstance(window, (int, float))
        or not (window > 0 and math.isfinite(window))
    ):
        raise ConfigError(f"a generation's window must be seconds > 0, not {window!r}")
    if isinstance(generations, bool) or not isinstance(generations, int):
        raise ConfigError(f"generations must be a whole number, not {generations!r}")
    if not 1 <= generations <= MAX_GENERATIONS:
        raise ConfigError(f"generations must be in [1, {MAX_GENERATIONS}], not {generations}")
    return float(window), generations


class GenerationStore(Protocol):
    """Where a Generations filter keeps its generations, by number: the clock that numbers
    them, opening one (made if asked), the ones that exist, and dropping one.

    claims: the generations claim their answers (shared): an older generation's hits are
    confirmed through its check-and-add, so that an unacknowledged claim is taken over.
    grace: seconds after a window starts before the generation it dropped is deleted (shared:
    a client whose clock lags by less still finds the generations it asks)."""

    claims: bool
    grace: float

    def now(self) -> float:
        """Seconds on the clock that numbers the generations."""
        raise NotImplementedError

    def open(self, number: int, create: bool) -> SeenFilter | None:
        """Generation `number`, made if create and missing; None if missing (not create)."""
        raise NotImplementedError

    def recorded(self) -> list[int]:
        """The generations that exist (made, not yet dropped)."""
        raise NotImplementedError

    def remove(self, number: int) -> bool:
        """Delete generation `number`'s data (nothing if it is gone); True if this call did."""
        raise NotImplementedError

    def dropped(self) -> None:
        """This client removed generations: tell whoever keeps answers of them (shared: the
        clients' memories of seen answers)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's connection, if any."""
        raise NotImplementedError


class Generations(Closeable):
    """A filter in G generations of window seconds each (see the module docstring).

    Args:
        store: keeps the generations (LocalGenerations, RedisGenerations).
        window: seconds per generation (the expiry age / generations).
        generations: G, in [1, 64].
        error_rate: the whole filter's error rate (each generation errs at
            generation_error_rate(error_rate, G)), for stats().

    Example:
        >>> from urlseen.bloom.bloom import BloomFilter
        >>> clock = [0.0]
        >>> store = LocalGenerations(lambda path: BloomFilter(1000), clock=lambda: clock[0])
        >>> seen = Generations(store, window=10.0, generations=2)
        >>> seen.add("https://a.example/"), seen.add("https://a.example/")
        (True, False)
        >>> clock[0] = 20.0  # two windows later: its generation was dropped
        >>> seen.add("https://a.example/")
        True
    """

    def __init__(
        self,
        store: GenerationStore,
        window: float,
        generations: int,
        error_rate: float | None = None,
    ) -> None:
        self.window, self.generations = check_shape(window, generations)
        self.store, self.error_rate = store, error_rate
        self._open: dict[int, SeenFilter] = {}
        self._current: int | None = None
        self._delete_at: float | None = None  # when the generations dropped are deleted
        self.turns = 0  # generation changes this client went through
        try:
            self.current_generation()  # opened now: bad settings fail before the first batch
        except BaseException:
            self.close()
            raise

    # -- the generations -----------------------------------------------------------------

    def current_generation(self) -> int:
        """The number of the generation new requests go to. When the clock enters a new
        window, the oldest generation is no longer asked; its data is deleted `grace`
        seconds later (never backwards: a clock set back keeps the current generation)."""
        self._usable()
        now = self.store.now()
        number = math.floor(now / self.window)
        if self._current is None or number > self._current:
            self._move(number)
        current = self._current
        assert current is not None
        if self._delete_at is not None and now >= self._delete_at:
            self._delete_at = None
            oldest = current - self.generations + 1
            removed = [m for m in self.store.recorded() if m < oldest and self.store.remove(m)]
            if removed:
                self.store.dropped()
        return current

    def _move(self, number: int) -> None:
        oldest = number - self.generations + 1
        for old in [m for m in self._open if m < oldest]:
            with contextlib.suppress(Exception):  # it may be gone already
                self._open.pop(old).close()
        self._current = number
        self.turns += 1
        self._take(number, self.store.open(number, True))
        for m in self.store.recorded():
            if oldest <= m < number and m not in self._open:
                self._take(m, self.store.open(m, False))
        self._delete_at = number * self.window + self.store.grace

    def _take(self, number: int, seen: SeenFilter | None) -> None:
        if seen is not None:
            self._open[number] = seen

    def _lost(self, number: int) -> None:
        """An older generation vanished (a client that moved on first dropped it)."""
        with contextlib.suppress(Exception):
            self._open.pop(number).close()

    def _older(self) -> list[int]:
        """The live generations before the current one, newest first."""
        return sorted((m for m in self._open if m != self._current), reverse=True)

    # -- the seen-test -------------------------------------------------------------------

    def add(self, key: Key) -> bool:
        """Check-and-add one request: True if no live generation holds it (it goes into the
        current one)."""
        return self.add_many([key])[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch; True where new. Older generations are asked first (a hit
        there is seen, and is not refreshed), the rest is the current generation's
        check-and-add."""
        batch = key_batch(keys)
        current = self.current_generation()
        answers = [False] * len(batch)
        rest = list(range(len(batch)))
        for number in self._older():
            if not rest:
                break
            held = self._held(number, [batch[i] for i in rest])
            for i, state in zip(rest, held, strict=True):
                answers[i] = state == 2
            rest = [i for i, state in zip(rest, held, strict=True) if not state]
        if rest:
            got = self._open[current].add_many([batch[i] for i in rest])
            for i, new in zip(rest, got, strict=True):
                answers[i] = new
        return answers

    def _held(self, number: int, keys: list[Key]) -> list[int]:
        """Per key, in an older generation: 0 not held, 1 held (seen), 2 held under a claim
        that was taken over (new: its client never acknowledged it)."""
        seen = self._open[number]
        try:
            hits = seen.contains_many(keys)
            found = [k for k, hit in zip(keys, hits, strict=True) if hit]
            if not (self.store.claims and found):
                return [int(hit) for hit in hits]
            taken = iter(seen.add_many(found))  # only claims change: its bits are all set
            return [(2 if next(taken) else 1) if hit else 0 for hit in hits]
        except FilterLostError:
            self._lost(number)
            return [0] * len(keys)

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        """Whether a live generation holds each key (nothing is written)."""
        batch = key_batch(keys)
        hits = [False] * len(batch)
        for got in self._each(lambda seen: seen.contains_many(batch)).values():
            hits = [h or g for h, g in zip(hits, got, strict=True)]
        return hits

    def __len__(self) -> int:
        """Requests the live generations took as new (one answered new twice near a
        boundary counts twice)."""
        return sum(self._each(len).values())

    def _each(self, ask: Callable[[Any], T]) -> dict[int, T]:
        """ask(generation) of every live generation, by number (an older one found gone is
        dropped: another client deleted it)."""
        self.current_generation()
        found: dict[int, T] = {}
        for number in sorted(self._open):
            try:
                found[number] = ask(self._open[number])
            except FilterLostError:
                if number == self._current:
                    raise
                self._lost(number)
        return found

    # -- what it holds -------------------------------------------------------------------

    def ages(self) -> list[dict[str, Any]]:
        """Each live generation, oldest first: its number, start (seconds on the store's
        clock) and age (seconds since it started: its requests expire when the oldest's
        reaches generations * window)."""
        now = self.store.now()
        return [
            {"generation": m, "started": m * self.window, "age_seconds": now - m * self.window}
            for m in sorted(self._open)
        ]

    def stats(self) -> FilterStats:
        """The current generation's kind, capacity and error rate (the whole filter's: G
        generations), the live ones' counts and bits, and their ages in details."""
        parts = self._each(lambda seen: seen.stats())
        current = parts[self._current]  # type: ignore[index]
        miss = math.prod(1.0 - part.estimated_error_rate for part in parts.values())
        ages = self.ages()
        for row in ages:
            row["count"] = parts[row["generation"]].count
        rate = self.error_rate
        if rate is None:
            rate = -math.expm1(self.generations * math.log1p(-current.error_rate))
        return FilterStats(
            kind=current.kind,
            capacity=current.capacity,
            count=sum(part.count for part in parts.values()),
            bits=sum(part.bits for part in parts.values()),
            error_rate=rate,
            estimated_error_rate=1.0 - miss,
            details={
                **current.details,
                "generations": self.generations,
                "window": self.window,
                "expire_after": self.window * self.generations,
                "live_generations": ages,
                "oldest_generation_age_seconds": ages[0]["age_seconds"],
                "generation_error_rate": current.error_rate,
            },
        )

    def flush(self) -> None:
        for seen in self._open.values():
            flush: Callable[[], None] | None = getattr(seen, "flush", None)
            if flush is not None:
                flush()

    def _close(self) -> None:
        try:
            for seen in getattr(self, "_open", {}).values():
                with contextlib.suppress(Exception):
                    seen.close()
        finally:
            self.store.close()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} generations={len(self._open)}/{self.generations} "
            f"window={self.window:g}s current={self._current}>"
        )


class SharedGenerations(Generations):
    """Generations that claim their answers (shared through Redis): acknowledged together,
    their claim counts summed, and deleted from the store with destroy()."""

    _auto = True

    def _take(self, number: int, seen: SeenFilter | None) -> None:
        if seen is not None and hasattr(seen, "auto_acknowledge"):
            seen.auto_acknowledge = self._auto
        super()._take(number, seen)

    @property
    def auto_acknowledge(self) -> bool:
        """True (default): answers acknowledged before add_many returns them; False: held
        until acknowledge()."""
        return self._auto

    @auto_acknowledge.setter
    def auto_acknowledge(self, value: bool) -> None:
        self._auto = bool(value)
        for seen in self._open.values():
            seen.auto_acknowledge = self._auto  # type: ignore[attr-defined]

    def acknowledge(self) -> int:
        """Release every live generation's claims of the answers given so far."""
        self._usable()
        acknowledged = [seen.acknowledge() for seen in self._open.values()]  # type: ignore[attr-defined]
        return sum(int(n) for n in acknowledged)

    @property
    def wait_for_claims(self) -> bool:
        return any(getattr(seen, "wait_for_claims", False) for seen in self._open.values())

    @wait_for_claims.setter
    def wait_for_claims(self, value: bool) -> None:
        for seen in self._open.values():
            seen.wait_for_claims = bool(value)  # type: ignore[attr-defined]

    @property
    def claim_counts(self) -> ClaimCounts:
        counts = [seen.claim_counts for seen in self._open.values()]  # type: ignore[attr-defined]
        return ClaimCounts(sum(c.unconfirmed for c in counts), sum(c.lapsed for c in counts))

    def destroy(self) -> None:
        """Delete every generation and the store's records from Redis."""
        self._usable()
        for number in list(self._open):
            self._lost(number)  # closed here, deleted below
        for number in self.store.recorded():
            self.store.remove(number)
        destroy: Callable[[], None] = self.store.destroy  # type: ignore[attr-defined]
        destroy()
        self.close()


class LocalGenerations(GenerationStore):
    """Generations in this process's memory (folder None), or a folder of state files
    `gen-<n>.urlseen` beside a manifest (generations.json: the kind, window and generations
    it was made with, which a later run must match). open_path(path) opens or makes one
    generation's filter at path (None: in memory)."""

    claims = False
    grace = 0.0  # one process: nobody lags

    def __init__(
        self,
        open_path: Callable[[Path | None], SeenFilter],
        folder: Path | None = None,
        clock: Callable[[], float] = time.time,
        shape: dict[str, Any] | None = None,
    ) -> None:
        self._open_path, self.folder, self.clock = open_path, folder, clock
        self._numbers: set[int] = set()  # in memory: the generations made
        if folder is not None:
            check_manifest(folder, shape or {}, create=True)

    def now(self) -> float:
        return self.clock()

    def _path(self, number: int) -> Path | None:
        return None if self.folder is None else self.folder / f"gen-{number}.urlseen"

    def open(self, number: int, create: bool) -> SeenFilter | None:
        path = self._path(number)
        exists = number in self._numbers if path is None else path.exists()
        if not (exists or create):
            return None
        self._numbers.add(number)
        return self._open_path(path)

    def recorded(self) -> list[int]:
        if self.folder is None:
            return sorted(self._numbers)
        found = []
        for path in self.folder.glob("gen-*.urlseen"):
            with contextlib.suppress(ValueError):
                found.append(int(path.name[4 : -len(".urlseen")]))
        return sorted(found)

    def remove(self, number: int) -> bool:
        self._numbers.discard(number)
        path = self._path(number)
        if path is None:
            return True
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def dropped(self) -> None:
        """Nothing keeps answers of a local generation but the filter itself."""

    def close(self) -> None:
        """Nothing to release (the generations are the filter's to close)."""


def check_manifest(folder: Path, shape: dict[str, Any], create: bool = False) -> dict[str, Any]:
    """The shape a folder of generations was made with (made now with `shape` if create and
    there is none); ConfigError if it differs from a given shape, FormatError if unreadable."""
    path = folder / MANIFEST
    body = {"format": FORMAT, "version": 1, **shape}
    if create and not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f".{MANIFEST}.{os.getpid()}"
        part.write_text(json.dumps(body, sort_keys=True))
        os.replace(part, path)  # whole or absent
        return body
    try:
        stored = json.loads(path.read_text())
        if stored.get("format") != FORMAT or stored.get("version") != 1:
            raise ValueError("not a manifest of generations")
    except (OSError, ValueError, AttributeError) as exc:
        raise FormatError(f"{path}: not a urlseen generations manifest ({exc})") from None
    if any(stored.get(field) != value for field, value in shape.items()):
        made = f"{stored.get('kind')!r}, {_expiry(stored)}"
        raise ConfigError(
            f"{folder} holds generations of {made}, not {shape.get('kind')!r}, "
            f"{_expiry(shape)}: a filter keeps the expiry it was made with (remove the state "
            "to change it)"
        )
    return dict(stored)


def _expiry(shape: dict[str, Any]) -> str:
    try:
        return (
            f"expiry after {shape['window'] * shape['generations']:g} s in {shape['generations']}"
        )
    except (KeyError, TypeError):
        return "no readable expiry"


__all__ = [
    "MANIFEST",
    "GenerationStore",
    "Generations",
    "LocalGenerations",
    "SharedGenerations",
    "check_manifest",
    "check_shape",
    "generation_error_rate",
]
