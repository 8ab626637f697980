"""A shared filter's memory of "seen" answers on its client, so that the repeats of a crawl
(nine in ten of the requests it checks) cost no round trip to Redis.

The memory answers only "seen", and only while nothing was forgotten since: every forget that
removes records from a shared filter (RedisLibrary.forget and release, so forget_older_than
and expiry too) writes the filter's *epoch* key (`bump_epoch`), a destroy deletes it, and each
client keeps one RESP3 connection on which Redis tracks that key
(server-assisted client-side caching, CLIENT TRACKING): any write to it, its deletion, a
FLUSHDB or the loss of the connection drops the memory before the next local answer.

The bound on staleness. `bump_epoch` returns only after one more round trip than the write,
so Redis has written every tracking client's invalidation before `forget` returns. A check
that starts after `forget` returned in any process therefore sees it at once on the same host,
and otherwise once the invalidation crossed the network from Redis to this client (the one-way
delay from Redis to this client). A forget whose process died between
its forget and its epoch write (forget returned to no one) may stay unseen by other clients'
memories until the next epoch change. Without RESP3 tracking (Redis before 6, a Redis Cluster,
the tracking connection down) nothing is answered locally.

Expiry by generations (job/generations.py) drops requests without a forget: the client that
deletes a generation writes the epoch afterwards (every memory drops, as for a forget), and
this client's memory drops too whenever its own filter enters a new generation
(`current_generation()`, read from the local clock before every local answer, no round trip):
the memory never answers seen for a request of a generation this client has dropped, nor,
once the invalidation arrived, of one another client has.

Claims stay whole (shared/claims.py): a key this client was answered new is known seen at once
(its own claim: Redis answers it seen to this client too); a key answered seen is answered seen
locally for one lease and then asked once more, because its "seen" may have been another
client's live claim: if that client died before delivering it, the second ask takes it over
(new) rather than the memory hiding it for good. Local answers do not touch the library's
per-request counts and last-seen times (a forget by first-seen time is unaffected).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from urlseen.protocol import FilterStats, Key, SeenFilter
from urlseen.shared.client import connect, is_cluster, key, retrying
from urlseen.splittable.tree import LEASE_SECONDS

DEFAULT_ENTRIES = 200_000  # ~160 bytes each with Scrapy's 20-byte fingerprints: ~32 MB
RETRY_SECONDS = 1.0  # a lost tracking connection is tried again at most this often


def epoch_key(name: str) -> str:
    """The key whose every write tells the clients' memories that keys were forgotten."""
    return key(name, "epoch")


def bump_epoch(client: Any, name: str) -> None:
    """Keys of the filter `name` were forgotten: write its epoch (Redis pushes an invalidation
    to every client tracking it), then one more round trip, after which Redis has written those
    invalidations to their sockets."""
    epoch = epoch_key(name)

    def bump() -> None:
        client.incr(epoch)
        client.ping()

    retrying(bump, f"filter {name!r}: tell the clients' memories of a forget")


def drop_epoch(client: Any, name: str) -> None:
    """Delete the epoch key with the filter (a deletion invalidates too)."""
    retrying(lambda: client.delete(epoch_key(name)), f"filter {name!r}: destroy")


class EpochWatch:
    """One RESP3 connection on which Redis tracks the filter's epoch key: `generation()` changes
    whenever the epoch may have changed (an invalidation pushed, the connection lost).

    Each call polls the socket without waiting (no round trip); after a change it reads the
    key again (one round trip), which tracks it anew.
    """

    def __init__(self, redis: Any, name: str) -> None:
        base = connect(redis)
        self.usable = not is_cluster(base)
        self._key = epoch_key(name)
        self._generation = 0
        self._armed = False
        self._retry_at = 0.0
        self.round_trips = 0
        self.invalidations = 0
        self._conn: Any = None
        self.client, self.name = base, name
        if self.usable:
            pool = base.connection_pool
            self._conn = pool.connection_class(**{**pool.connection_kwargs, "protocol": 3})

    def generation(self) -> int | None:
        """The memory's generation now; None when freshness cannot be known (not tracking)."""
        if self._armed:
            try:
                if not self._conn.can_read(0):
                    return self._generation
                while self._conn.can_read(0):  # invalidations: nothing else comes unasked
                    self._conn.read_response(push_request=True)
                self.invalidations += 1
            except Exception:  # the connection is gone: so is its tracking
                self._conn.disconnect()
            self._armed = False
            self._generation += 1
        return self._generation if self._arm() else None

    def _arm(self) -> bool:
        now = time.monotonic()
        if not self.usable or now < self._retry_at:
            return False
        try:
            self._conn.connect()
            self._conn.send_command("CLIENT", "TRACKING", "ON")
            self._conn.send_command("GET", self._key)
            self._conn.read_response()
            self._conn.read_response()
        except Exception:  # no RESP3, no tracking or no Redis: answer nothing locally
            self._conn.disconnect()
            self._retry_at = now + RETRY_SECONDS
            return False
        self.round_trips += 1
        self._armed = True
        return True

    def close(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
        self._armed = False


class SeenCache:
    """A shared filter (any kind shared through Redis) that answers the keys this client knows
    seen without asking Redis (see the module docstring for when it knows).

    prefetch() checks a batch ahead of the requests that carry it (one round trip for a
    callback's requests); take() hands each new answer to its request when the scheduler asks;
    undelivered() returns those no request took (the caller forgets them: they were claimed).

    Acknowledgement: with auto_acknowledge (the default) the answers are acknowledged before
    add_many returns them, as the filter does, except while prefetched answers wait for their
    requests: then every claim stays held until the last of them is taken (or forgotten), so
    a process that dies with requests checked ahead but not scheduled leaves them claimed, and
    they go to the next asker after the lease. acknowledge() waits for the same.
    One thread at a time, as the crawlers call it; the oldest entries leave first when full.
    """

    def __init__(
        self, seen: SeenFilter, watch: EpochWatch | None, entries: int, lease: float | None
    ) -> None:
        self.seen, self.watch, self.entries = seen, watch, max(1, entries)
        self.lease = LEASE_SECONDS if lease is None else float(lease)
        self._known: OrderedDict[Key, None] = OrderedDict()  # the oldest leave first
        self._once: dict[Key, float] = {}  # answered seen once: asked again after a lease
        self._generation: int | None = None
        # an expiring filter's generation: the memory drops when it changes
        self._turn = getattr(seen, "current_generation", None)
        self._turned: int | None = None
        self._delivering: dict[Key, float] = {}  # prefetched new, not taken yet
        self.hits = self.asked = self.batches = 0
        self._auto = True
        if hasattr(seen, "auto_acknowledge"):
            seen.auto_acknowledge = False  # acknowledged here (add_many, take, acknowledge)

    # -- the memory ---------------------------------------------------------------------

    def _fresh(self) -> bool:
        """Whether local answers are allowed now (the memory dropped if the epoch moved, or
        the filter entered a new generation)."""
        if self._turn is not None:
            turned = self._turn()
            if turned != self._turned:
                self.drop()
                self._turned = turned
        generation = None if self.watch is None else self.watch.generation()
        if generation is None:
            return False
        if generation != self._generation:
            self.drop()
            self._generation = generation
        return True

    def drop(self) -> None:
        """Forget every local answer."""
        self._known.clear()
        self._once.clear()

    def _knows(self, k: Key, now: float) -> bool:
        if k in self._known:
            return True
        first = self._once.get(k)
        return first is not None and now - first < self.lease

    def _learn(self, k: Key, new: bool, now: float) -> None:
        if not new and k not in self._known:
            first = self._once.get(k)
            if first is None or now - first < self.lease:
                if first is None:
                    self._once[k] = now
                    if len(self._once) > self.entries:
                        del self._once[next(iter(self._once))]
                return
        self._once.pop(k, None)
        self._known[k] = None
        if len(self._known) > self.entries:
            self._known.popitem(last=False)

    # -- the SeenFilter protocol --------------------------------------------------------

    def add(self, key: Key) -> bool:
        return self.add_many([key])[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        answers = self._ask(list(keys))
        if self._auto and any(answers):
            self.acknowledge()
        return answers

    def _ask(self, keys: list[Key]) -> list[bool]:
        answers = [False] * len(keys)
        now = time.monotonic()
        fresh = self._fresh()
        ask = [i for i, k in enumerate(keys) if not (fresh and self._knows(k, now))]
        self.hits += len(keys) - len(ask)
        if ask:
            got = self.seen.add_many([keys[i] for i in ask])
            self.asked += len(ask)
            self.batches += 1
            for i, new in zip(ask, got, strict=True):
                answers[i] = new
                self._learn(keys[i], new, now)
        return answers

    def __contains__(self, key: object) -> bool:
        return key in self.seen

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        return list(self.seen.contains_many(keys))

    @property
    def auto_acknowledge(self) -> bool:
        """True (default): answers acknowledged before add_many returns them (see the class
        docstring for prefetched ones); False: by acknowledge()."""
        return self._auto

    @auto_acknowledge.setter
    def auto_acknowledge(self, value: bool) -> None:
        self._auto = bool(value)

    def acknowledge(self) -> int:
        """Release the claims of the answers given so far (the filter's acknowledge()), unless
        prefetched answers still wait for their requests (then when the last is taken)."""
        acknowledge = getattr(self.seen, "acknowledge", None)
        if acknowledge is None or self._delivering:
            return 0
        return int(acknowledge())

    def forget_many(self, keys: Iterable[Key]) -> list[bool]:
        """Forget keys in the filter (it writes the epoch: every client's memory drops)."""
        self.drop()
        return list(self.seen.forget_many(list(keys)))  # type: ignore[attr-defined]

    def forget_older_than(self, timestamp: float) -> int:
        self.drop()
        return int(self.seen.forget_older_than(timestamp))  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.seen)

    def stats(self) -> FilterStats:
        return self.seen.stats()

    def close(self) -> None:
        try:
            if self.watch is not None:
                self.watch.close()
        finally:
            self.seen.close()

    def destroy(self) -> None:
        """Delete the filter from Redis, its epoch with it (every memory of it drops)."""
        destroy = getattr(self.seen, "destroy", None)
        if destroy is None:  # the exact shared filter: its library holds the keys
            destroy = self.seen.library.destroy  # type: ignore[attr-defined]
        destroy()
        if self.watch is not None:
            drop_epoch(self.watch.client, self.watch.name)
            self.watch.close()

    def __getattr__(self, name: str) -> Any:  # destroy, library, flush, claim_counts, ...
        if name == "seen":
            raise AttributeError(name)
        return getattr(self.seen, name)

    # -- prefetching a batch ------------------------------------------------------------

    def prefetch(self, keys: list[Key]) -> int:
        """Check-and-add keys now; the new ones wait for take(). How many were new. (Hits
        count when request_seen takes the answers, not here too.)"""
        hits = self.hits
        answers = self._ask(keys)
        self.hits = hits
        now = time.monotonic()
        for k, new in zip(keys, answers, strict=True):
            if new:
                self._delivering[k] = now
        return sum(answers)

    def take(self, key: Key) -> bool:
        """True once for a key a prefetch answered new: its request gets the answer (the last
        one taken acknowledges them all)."""
        if self._delivering.pop(key, None) is None:
            return False
        if not self._delivering and self._auto:
            self.acknowledge()
        return True

    def undelivered(self, older_than: float = 0.0) -> list[Key]:
        """The prefetched new keys no request took within older_than seconds (removed here
        and from the memory: the caller forgets them in the filter)."""
        now = time.monotonic()
        late = [k for k, at in self._delivering.items() if now - at >= older_than]
        for k in late:
            del self._delivering[k]
            self._known.pop(k, None)
        return late


__all__ = ["DEFAULT_ENTRIES", "EpochWatch", "SeenCache", "bump_epoch", "drop_epoch", "epoch_key"]
