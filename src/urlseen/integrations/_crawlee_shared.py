"""The frontier of UrlseenRequestManager(share_work=True): Crawlee's requests in the crawl's
shared frontier in Redis (urlseen.shared.frontier.RedisFrontier, the one `urlseen crawl
--redis` uses), so every process of the crawl takes its work from one queue.

It answers the calls the manager makes of its local frontier (crawlee._Frontier): a request
taken is leased to this process until Crawlee marks it handled (then dropped) or reclaims it
(queued again, as Crawlee changed it, in the same MULTI/EXEC); a process killed with requests
in progress leaves them to whoever takes after their lease. A request that failed after
Crawlee's retries stays leased to this process for the rest of its run (no process retries it
meanwhile) and is queued again, its retries reset, when the manager closes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from crawlee import Request

from urlseen.frontier import Token
from urlseen.shared.frontier import RedisFrontier

FRONT, BACK = 1, 0  # priorities: forefront requests first


def _payload(key: str, request: Request) -> bytes:
    return json.dumps([key, request.model_dump_json(by_alias=True)]).encode()


class SharedFrontier:
    """Crawlee's side of a RedisFrontier shared by the crawl's processes."""

    def __init__(self, frontier: RedisFrontier) -> None:
        self.frontier = frontier
        self._taken: dict[str, Token] = {}  # key -> its lease, while in progress here
        self._failed: dict[str, tuple[Token, Request]] = {}  # held until close
        self._handled = 0

    def add(self, requests: Sequence[tuple[str, Request]], front: bool) -> None:
        priority = FRONT if front else BACK
        self.frontier.commit([(priority, _payload(k, r)) for k, r in requests], [])

    def present(self, keys: Sequence[str]) -> set[str]:
        """Not known without reading the whole queue: every seen request counts as handled
        (Crawlee only reports it)."""
        return set()

    def take(self) -> tuple[str, Request] | None:
        self.frontier.renew()
        taken = self.frontier.take()
        if taken is None:
            return None
        token, payload = taken
        key, request = json.loads(payload)
        self._taken[key] = token
        return key, Request.model_validate_json(request)

    def handled(self, key: str) -> bool:
        token = self._taken.pop(key, None)
        if token is None:
            return False
        self.frontier.commit([], [token])
        self._handled += 1
        return True

    def failed(self, key: str, request: Request) -> bool:
        token = self._taken.pop(key, None)
        if token is None:
            return False
        self._failed[key] = (token, request)
        self.frontier.renew()
        return True

    def put_back(self, key: str, request: Request, front: bool) -> bool:
        token = self._taken.pop(key, None)
        if token is None:
            return False
        self.frontier.commit([(FRONT if front else BACK, _payload(key, request))], [token])
        return True

    def counts(self) -> tuple[int, int, int, int]:
        """(waiting, in progress in any process, failed here, handled here)."""
        waiting = self.frontier.ready()
        leased = max(0, self.frontier.pending() - waiting)
        return waiting, max(0, leased - len(self._failed)), len(self._failed), self._handled

    def clear(self) -> None:
        self.frontier.clear()
        self._taken.clear()
        self._failed.clear()
        self._handled = 0

    def close(self) -> None:
        """Queue this run's failed requests again (their retries reset by the manager), then
        close; requests still in progress return to the queue after their lease."""
        try:
            if self._failed:
                entries = [(BACK, _payload(k, r)) for k, (_, r) in self._failed.items()]
                self.frontier.commit(entries, [token for token, _ in self._failed.values()])
                self._failed.clear()
        finally:
            self.frontier.close()
