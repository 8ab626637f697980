"""The crawl frontier: requests to fetch, kept so that none is lost when the seen-test has
already answered it "new".

A URL-seen test remembers every request it let through; a crawl that loses its queue (killed,
or stopped before its queue was written) then never fetches what it remembered. The frontier
closes that gap: a request the filter answers new is written here *before* the filter's answer
is committed (admit.py orders the two writes for each kind of filter), and a request taken for
fetching stays here, marked in flight, until its response has been handled (its new requests
admitted in the same commit). So after a kill at any instruction every request the filter
calls seen is either done or still here; in-flight ones go back to the queue when the frontier
opens again (fetched at least once; a kill refetches at most the requests in flight).

This wing knows nothing of Redis or Scrapy: sqlite.py keeps a local frontier (the crawl's
JOBDIR), shared/frontier.py the same interface in Redis for a fleet, and
integrations/scheduler.py drives either from Scrapy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

Token = int | str  # what identifies a request taken from a frontier until it is done
Entry = tuple[int, bytes]  # (priority, the serialized request)


class Frontier(Protocol):
    """The requests of one crawl that are queued or in flight."""

    lifo: bool  # within one priority, the newest request first (else the oldest)
    returned: int  # requests found in flight when it opened (back in the queue)

    def commit(self, entries: Sequence[Entry], done: Sequence[Token]) -> None:
        """Queue the entries and drop the done requests, in one durable commit."""
        ...

    def take(self) -> tuple[Token, bytes] | None:
        """The next request by priority, marked in flight; None if none is queued."""
        ...

    def ready(self) -> int:
        """Requests that take() can hand out now."""
        ...

    def pending(self) -> int:
        """Requests not done: queued, in flight, failed in this run."""
        ...

    def renew(self) -> None:
        """Keep this process's in-flight requests its own (a shared frontier renews their
        leases when a third of the lease has passed; call it often)."""
        ...

    def release(self) -> None:
        """Put this process's in-flight requests back in the queue (a shared frontier, at
        close: its failed fetches, for the next taker; a local one does so when it opens)."""
        ...

    def clear(self) -> None:
        """Forget every request."""
        ...

    def close(self) -> None: ...


__all__ = ["Entry", "Frontier", "Token"]
