"""RedisFrontier: one crawl's frontier in Redis, shared by every process of the crawl, so a
fleet shares the work (the interface of urlseen.frontier.Frontier).

Keys, in the hash slot of the frontier's name (`urlseen:{name}:frontier:*`): `queue`, a sorted
set of members "<priority>|<order>" scored -priority; `leases`, the members taken by some
process, scored by the end of their lease (the server's clock); `data`, member -> request;
`order`, the counter that numbers members. A commit (new requests, done requests) is one
MULTI/EXEC; taking is one script (shared/lua/frontier.lua) that first puts back every member
whose lease ended, then moves the best one from the queue to the leases. A process renews the
leases of the requests it holds while it runs, so only a process that died or stalled past
its lease loses them, to whoever takes next: a request is fetched at least once, and twice
only when its holder died or stalled with it in flight.

With Redis persistence (appendonly yes, appendfsync always) a commit is on disk when EXEC
answers; without it, a Redis restart loses the frontier. Each process keeps a write mark in
`marks` (shared/marks.py): a frontier that came back empty or from an earlier snapshot stops
every process that used it before (FilterRolledBackError) instead of reading as finished.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from urlseen.errors import ConfigError
from urlseen.frontier import Entry, Token
from urlseen.shared import client as redis_store
from urlseen.shared.marks import WriteMarks, marked_ack

LEASE_SECONDS = 60.0  # a taken request's lease; renewed every third of it while held
PREFETCH = 8  # requests taken per script call (leased to this process until it hands them out)
COMMIT_SECONDS = 0.2  # the scheduler commits at least this often (each commit is an fsync)
ORDER_WIDTH = 16  # digits of a member's order: equal priorities sort by it
_LAST = 10**ORDER_WIDTH - 1


class RedisFrontier:
    """A frontier named `name` in the Redis at url (or a redis-py client).

    Args:
        lifo: within one priority, the newest request first; else the oldest.
        lease: seconds a taken request stays this process's without a renewal.
        prefetch: requests taken per script call (fewer round trips; a process that takes one
            at a time leaves the rest to the others at once).
    """

    def __init__(
        self,
        url: Any,
        name: str,
        *,
        lifo: bool = False,
        lease: float = LEASE_SECONDS,
        prefetch: int = PREFETCH,
    ) -> None:
        redis_store.check_name(name)
        if not 0 < lease <= 86_400:
            raise ConfigError(f"frontier lease must be in (0, 86400] s, not {lease}")
        self.client = redis_store.connect(url)
        self.name, self.lifo, self.lease = name, lifo, float(lease)
        self.prefetch = max(1, int(prefetch))
        self.keys = [redis_store.key(name, f"frontier:{part}") for part in ("queue", "leases")]
        self.keys.append(redis_store.key(name, "frontier:data"))
        self._order_key = redis_store.key(name, "frontier:order")
        self._marks_key = redis_store.key(name, "frontier:marks")
        self._owner = redis_store.new_instance()
        self._marks = WriteMarks()  # this process's write mark (shared/marks.py)
        self._script = redis_store.load_script(self.client, "frontier.lua")
        self.commit_seconds = COMMIT_SECONDS
        self._held: set[str] = set()
        self._taken: collections.deque[tuple[str, bytes]] = collections.deque()
        self._renewed = time.monotonic()
        self.returned = 0
        self._counts = (0, 0)  # queue, leases, as last read
        self.ready()

    def _call(self, *args: Any) -> Any:
        lease_ms = str(max(1, round(self.lease * 1000)))
        mark = self._marks.expected(self._marks_key)
        argv = [args[0], lease_ms, self._owner, mark, *args[1:]]
        reply = redis_store.retrying(
            lambda: self._script(keys=[*self.keys, self._marks_key], args=argv),
            f"frontier {self.name!r}: {args[0]}",
        )
        self._marks.advanced(self._marks_key)
        return reply

    def commit(self, entries: Sequence[Entry], done: Sequence[Token]) -> None:
        """Queue the entries and drop the done requests: one MULTI/EXEC. A reply lost to a
        dropped connection is sent again: an entry may then be queued twice (fetched twice),
        never lost."""
        if not entries and not done:
            return
        queue, leases, data = self.keys
        last = 0
        if entries:
            last = int(
                redis_store.retrying(
                    lambda: self.client.incrby(self._order_key, len(entries)), "frontier order"
                )
            )
        members: list[tuple[str, int, bytes]] = []
        for i, (priority, payload) in enumerate(entries):
            order = last - len(entries) + 1 + i
            rank = _LAST - order if self.lifo else order
            members.append((f"{int(priority)}|{rank:0{ORDER_WIDTH}d}", int(priority), payload))

        def run() -> Any:
            pipe = self.client.pipeline(transaction=True)
            for member, priority, payload in members:
                pipe.hset(data, member, payload)
                pipe.zadd(queue, {member: -priority})
            for token in done:
                pipe.zrem(leases, str(token))
                pipe.hdel(data, str(token))
            marked_ack(pipe, self._marks_key, self._owner)
            return pipe.execute()

        what = f"frontier {self.name!r}"
        replies = redis_store.retrying(run, f"{what}: commit")
        self._marks.acked(what, self.client, self._marks_key, self._owner, replies[-3:])
        self._held.difference_update(str(t) for t in done)
        self.renew()

    def take(self) -> tuple[Token, bytes] | None:
        """The next request, from those taken ahead (`prefetch` per script call)."""
        if not self._taken:
            reply = self._call("take", str(self.prefetch))
            self.returned += int(reply[0])
            for i in range(1, len(reply) - 1, 2):
                member = reply[i].decode() if isinstance(reply[i], bytes) else str(reply[i])
                self._held.add(member)
                self._taken.append((member, bytes(reply[i + 1])))
        return self._taken.popleft() if self._taken else None

    def _read_counts(self) -> tuple[int, int]:
        returned, queued, leased = (int(x) for x in self._call("count"))
        self.returned += returned
        self._counts = (queued, leased)
        return self._counts

    def ready(self) -> int:
        """Requests to hand out now: those taken ahead, else those queued (asked)."""
        return len(self._taken) or self._read_counts()[0]

    def pending(self) -> int:
        """Requests queued or leased, by any process of the crawl."""
        queued, leased = self._read_counts()
        return queued + leased

    def renew(self) -> None:
        """Start a new lease on every request this process holds (one script call), if a
        third of the lease has passed since the last renewal."""
        if time.monotonic() - self._renewed < self.lease / 3:
            return
        self._renewed = time.monotonic()
        if self._held:
            self._call("renew", *sorted(self._held))

    def clear(self) -> None:
        redis_store.retrying(
            lambda: self.client.delete(*self.keys, self._order_key, self._marks_key),
            f"frontier {self.name!r}",
        )
        self._marks = WriteMarks()
        self._held.clear()
        self._taken.clear()

    def release(self) -> None:
        """Put the requests this process holds (fetches that failed for good) back in the
        queue for the next process that takes: another attempt, by a rerun or the fleet."""
        if self._held:
            self._call("release", *sorted(self._held))
            self._held.clear()
            self._taken.clear()

    def close(self) -> None:
        """Close the connection. The requests taken ahead and never handed out go back to the
        queue now (if Redis answers); those handed out and not done stay leased, and return
        to the queue when their lease ends."""
        ahead = [member for member, _ in self._taken]
        if ahead:
            with contextlib.suppress(Exception):  # unanswered: their leases end on their own
                self._call("release", *ahead)
        self._held.clear()
        self._taken.clear()
        self._marks.forget(self.client, self._owner)
        self.client.close()
