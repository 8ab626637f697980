"""A shared filter's generations in Redis (job/generations.py's GenerationStore): every client
numbers them by the Redis server's clock, records each one before making it, and deletes the
ones that fell out of the window, whichever client moves on first.

Keys beside the filter's name N (one hash slot): `urlseen:{N}:kind` says "<kind> (expiring)",
so N is never opened as a plain filter (nor a plain filter's name as generations);
`urlseen:{N}:generations`, a hash: `shape` (the kind, window and generations it was made with,
which every client must match) and one field `g<n>` per generation made. Generation n is a
whole filter of the kind named `N~g<n>` (its keys in slots of their own).

The clock. A client reads the server's TIME (through a script on the registry's key, so a
Cluster answers from that key's node) and keeps the offset to its monotonic clock, read again
at most every window (and every minute), from the quickest of three reads: clients agree on
the generation within their offset errors (half that read's round trip each, plus drift
between two syncs), and a client's own clock being set does not move its generations.

Deletion. A client entering a new window stops asking the generation that fell out of it at
once, and deletes every recorded generation older than the live ones a grace later (1 s, or
half a window if shorter: a client whose clock lags by less never finds a generation it still
asks deleted): it opens each, destroys it, then removes its record (a client that dies half
way leaves the record, and the next one finishes), then writes the filter's epoch, so every
client's memory of seen answers drops (shared/seen_cache.py). A client that opens late deletes
what the others left. Two clients deleting at once both succeed (deleting is idempotent). So
Redis holds at most G + 1 generations, the extra one for a grace after each boundary.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from urlseen.errors import ConfigError, FilterLostError, FormatError
from urlseen.protocol import SeenFilter
from urlseen.shared.client import check_name, connect, key, retrying
from urlseen.shared.seen_cache import bump_epoch, drop_epoch

FORMAT = "urlseen-generations/1"
SYNC_SECONDS = 60.0  # the server's clock is read again at least this often
SAMPLES = 3  # reads of the server's clock per sync: the quickest one's offset is kept
GRACE_SECONDS = 1.0  # a dropped generation is deleted this long into the next window (or half)
_TIME = "return redis.call('TIME')"
GONE = (ConfigError, FormatError, FilterLostError)  # opening or deleting a generation gone


def generation_name(name: str, number: int) -> str:
    """The name of generation `number` of the filter `name` (checked: at most 200 bytes)."""
    return check_name(f"{name}~g{number}")


def kind_record(kind: str) -> str:
    return f"{kind} (expiring)"


class RedisGenerations:
    """The generations of the shared filter `name` of `kind` (a GenerationStore of
    job/generations.py), each opened by open_name(generation's name, create) (None: it does
    not exist and create is False)."""

    claims = True
    grace: float

    def __init__(
        self,
        redis: Any,
        name: str,
        kind: str,
        window: float,
        generations: int,
        open_name: Callable[[str, bool], SeenFilter | None],
    ) -> None:
        generation_name(name, 10**12)  # a long number still makes a valid name
        self.name, self.window, self._open_name = name, window, open_name
        self.grace = min(GRACE_SECONDS, window / 2)
        self._client = connect(redis)
        self._registry = key(name, "generations")
        self._what = f"expiring filter {name!r}"
        shape = {"format": FORMAT, "kind": kind, "window": window, "generations": generations}
        self._claim_name(kind, shape)
        self._offset = 0.0
        self._sync_at = -1.0

    def _claim_name(self, kind: str, shape: dict[str, Any]) -> None:
        """Record the kind and shape if the name is free; ConfigError if it holds another
        kind, a plain filter, or generations of another shape."""
        text = json.dumps(shape, sort_keys=True)

        def claim() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.set(key(self.name, "kind"), kind_record(kind), nx=True)
            pipe.hsetnx(self._registry, "shape", text)
            pipe.get(key(self.name, "kind"))
            pipe.hget(self._registry, "shape")
            return list(pipe.execute())

        _, _, found, stored = retrying(claim, f"{self._what}: open")
        if found is not None and found.decode() != kind_record(kind):
            raise ConfigError(
                f"Redis holds a {found.decode()} filter named {self.name!r}, not one whose "
                "requests expire: a filter keeps the expiry it was made with (choose another "
                "name, or destroy it)"
            )
        if json.loads(stored) != json.loads(text):
            old = json.loads(stored)
            raise ConfigError(
                f"{self._what} expires after {old['window'] * old['generations']:g} s in "
                f"{old['generations']} generations, not {window_text(shape)}: a filter keeps "
                "the expiry it was made with (choose another name, or destroy it)"
            )

    def now(self) -> float:
        clock = time.monotonic()
        if clock >= self._sync_at:
            self._sync()
            clock = time.monotonic()
        return clock + self._offset

    def _sync(self) -> None:
        """The offset to the server's clock, from the quickest of SAMPLES reads of TIME (its
        error is at most half that read's round trip)."""
        best = None
        for _ in range(SAMPLES):
            before = time.monotonic()
            seconds, micros = retrying(
                lambda: self._client.eval(_TIME, 1, self._registry), f"{self._what}: clock"
            )
            after = time.monotonic()
            if best is None or after - before < best[0]:
                best = (after - before, int(seconds) + int(micros) / 1e6 - (before + after) / 2)
        assert best is not None
        self._offset = best[1]
        self._sync_at = time.monotonic() + min(self.window, SYNC_SECONDS)

    def open(self, number: int, create: bool) -> SeenFilter | None:
        name = generation_name(self.name, number)
        if create:  # recorded before it is made: whoever deletes it finds it
            retrying(lambda: self._client.hset(self._registry, f"g{number}", 1), self._what)
        return self._open_name(name, create)

    def recorded(self) -> list[int]:
        fields = retrying(lambda: self._client.hkeys(self._registry), f"{self._what}: list")
        return sorted(int(f[1:]) for f in fields if f.startswith(b"g") and f[1:].isdigit())

    def remove(self, number: int) -> bool:
        name = generation_name(self.name, number)
        seen = None
        with contextlib.suppress(*GONE):
            seen = self._open_name(name, False)
        if seen is not None:
            with contextlib.suppress(*GONE):
                seen.destroy()  # type: ignore[attr-defined]
            seen.close()
        removed = retrying(lambda: self._client.hdel(self._registry, f"g{number}"), self._what)
        return bool(removed)

    def dropped(self) -> None:
        bump_epoch(self._client, self.name)

    def destroy(self) -> None:
        """Delete the records (the generations first: SharedGenerations.destroy)."""
        kind = key(self.name, "kind")
        retrying(lambda: self._client.delete(self._registry, kind), f"{self._what}: destroy")
        drop_epoch(self._client, self.name)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()


def window_text(shape: dict[str, Any]) -> str:
    return f"{shape['window'] * shape['generations']:g} s in {shape['generations']}"


def read_generations(redis: Any, name: str) -> dict[str, Any] | None:
    """What `urlseen info` shows of an expiring filter: its shape, the server's clock and
    the generations recorded (None if the name holds none)."""
    client = connect(redis)
    registry = key(name, "generations")

    def read() -> tuple[Any, Any]:  # two calls: a Cluster's pipeline cannot send EVAL
        return client.hgetall(registry), client.eval(_TIME, 1, registry)

    fields, (seconds, micros) = retrying(read, f"expiring filter {name!r}: info")
    if b"shape" not in fields:
        return None
    numbers = sorted(int(f[1:]) for f in fields if f.startswith(b"g") and f[1:].isdigit())
    return {
        **json.loads(fields[b"shape"]),
        "server_time": int(seconds) + int(micros) / 1e6,
        "recorded": [(n, generation_name(name, n)) for n in numbers],
    }


__all__ = ["RedisGenerations", "generation_name", "kind_record", "read_generations"]
