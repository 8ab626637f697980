"""UrlseenRequestManager: urlseen as the seen-test of a Crawlee for Python crawler.

Crawlee's extension point for where requests come from and go to is the request manager
(`crawlee.request_loaders.RequestManager`), passed as `BasicCrawler(request_manager=...)` (every
crawler takes it). Crawlee's own, the request queue, decides "seen" by keeping every request it
was ever given, handled ones included (in memory, or one file each): memory and files grow with
the crawl. This manager asks a urlseen filter instead, keyed by Crawlee's `unique_key`, and keeps
only the requests still to do (the frontier) in a SQLite file; a handled request is deleted.

    from crawlee.crawlers import ParselCrawler
    from urlseen.integrations.crawlee import UrlseenRequestManager

    manager = UrlseenRequestManager.open("my-crawl")   # exact, in ./storage/urlseen/my-crawl
    crawler = ParselCrawler(request_manager=manager)
    ...
    await crawler.run(["https://example.com/"])        # stopped? run again: it resumes
    manager.close()

Defaults: the exact filter (never drops a page), persistent: filter and frontier in one
folder, so a crawl stopped at any moment (kill -9 included) resumes where it was: each request
is fetched at least once across the runs, and a kill costs at most the requests in progress at
that moment (fetched again). A request that failed after Crawlee's retries stays in the
frontier for the next run. `redis_url` shares the filter, not the work: each request is new,
and fetched, in exactly one process, the one whose page linked to it first, and stays in that
process's own frontier (give each process its own `state` for that frontier to survive a
kill); a process that starts later finds the pages the others already met "seen", so it
fetches only what it meets first. `share_work=True` shares the frontier too (in Redis,
_crawlee_shared.py): every process takes its requests from one queue. Memory stays bounded:
the exact filter's counters and cache, not the requests.

Keys: Crawlee's `unique_key`, which Crawlee computes with its normaliser: it strips whitespace,
drops `utm_*` parameters, sorts the query, drops the fragment and a trailing slash of the path,
and lower-cases the whole URL (path and query too, so `/Page` and `/page` become one request).
`key="canonical"` replaces such computed keys with urlseen's canonical URL
(`urlseen.canonical.canonicalize`: w3lib's rule, Scrapy's, case kept where it matters); a key
the user gave (`Request.from_url(url, unique_key=...)`) is kept either way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from urlseen import kinds
from urlseen.canonical import canonicalize
from urlseen.errors import ConfigError, MissingDependencyError
from urlseen.frontier.admit import admit
from urlseen.integrations._handle import SeenHandle
from urlseen.job.expiry import expire_seconds

try:
    from crawlee import Request, RequestState
    from crawlee._utils.requests import compute_unique_key
    from crawlee.request_loaders import RequestManager
    from crawlee.storage_clients.models import ProcessedRequest

    from urlseen.integrations._crawlee_shared import SharedFrontier
except ImportError as exc:  # pragma: no cover - exercised only without crawlee
    raise MissingDependencyError(
        "urlseen.integrations.crawlee needs Crawlee: pip install 'urlseen[crawlee]'"
    ) from exc

logger = logging.getLogger(__name__)

STATE_FOLDER = "urlseen"  # beside Crawlee's own storages, in its storage_dir
SEEN = "seen"  # the filter's state in the manager's folder
FRONTIER = "frontier.sqlite"  # the requests still to do

KeyRule = Callable[[Request], str]


def canonical_key(request: Request) -> str:
    """urlseen's key for a request whose unique_key Crawlee computed: the canonical URL (for a
    GET without payload; otherwise Crawlee's key). A unique_key the user gave is kept."""
    if request.method != "GET" or request.payload:
        return request.unique_key
    if request.unique_key != compute_unique_key(request.url):
        return request.unique_key  # the user's own key
    return canonicalize(request.url)


WAITING, IN_PROGRESS, FAILED = 0, 1, 2  # a frontier row's `taken`


class _Frontier:
    """The requests added and not yet handled, in order (forefront ones first), in SQLite: in
    a file (persistent) or in memory. A request in progress when a run stopped, or failed in
    it after Crawlee's retries, waits again in the next run: the filter has it as seen, so
    only the frontier can bring it back."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._db = sqlite3.connect(":memory:" if path is None else str(path), isolation_level=None)
        self._db.executescript(
            """
            PRAGMA journal_mode = WAL;
            CREATE TABLE IF NOT EXISTS requests (
                key TEXT PRIMARY KEY, ord INTEGER NOT NULL, taken INTEGER NOT NULL DEFAULT 0,
                request TEXT NOT NULL);
            CREATE INDEX IF NOT EXISTS requests_order ON requests (taken, ord);
            CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
            INSERT OR IGNORE INTO meta VALUES ('handled', 0);
            UPDATE requests SET taken = 0 WHERE taken <> 0;  -- in progress or failed
            """
        )
        low, high = self._db.execute("SELECT min(ord), max(ord) FROM requests").fetchone()
        self._low, self._high = low or 0, high or 0

    def _end(self, front: bool) -> int:
        """A place at the front or the back of the order."""
        if front:
            self._low -= 1
            return self._low
        self._high += 1
        return self._high

    def add(self, requests: Sequence[tuple[str, Request]], front: bool) -> None:
        with self._transaction():
            for key, request in requests:
                self._db.execute(
                    "INSERT OR IGNORE INTO requests (key, ord, request) VALUES (?, ?, ?)",
                    (key, self._end(front), request.model_dump_json(by_alias=True)),
                )

    def present(self, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT key FROM requests WHERE key IN ({marks})", chunk)
            found.update(row[0] for row in rows)
        return found

    def take(self) -> tuple[str, Request] | None:
        with self._transaction():
            row = self._db.execute(
                "SELECT key, request FROM requests WHERE taken = 0 ORDER BY ord LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE requests SET taken = 1 WHERE key = ?", (row[0],))
        return row[0], Request.model_validate(json.loads(row[1]))

    def handled(self, key: str) -> bool:
        with self._transaction():
            gone = self._db.execute("DELETE FROM requests WHERE key = ?", (key,)).rowcount
            if gone:
                self._db.execute("UPDATE meta SET value = value + 1 WHERE name = 'handled'")
        return bool(gone)

    def failed(self, key: str, request: Request) -> bool:
        """Keep a request that failed after its retries for the next run (not this one)."""
        with self._transaction():
            changed = self._db.execute(
                "UPDATE requests SET taken = ?, request = ? WHERE key = ? AND taken = ?",
                (FAILED, request.model_dump_json(by_alias=True), key, IN_PROGRESS),
            ).rowcount
        return bool(changed)

    def put_back(self, key: str, request: Request, front: bool) -> bool:
        with self._transaction():
            changed = self._db.execute(
                "UPDATE requests SET taken = 0, ord = ?, request = ? WHERE key = ? AND taken = 1",
                (self._end(front), request.model_dump_json(by_alias=True), key),
            ).rowcount
        return bool(changed)

    def counts(self) -> tuple[int, int, int, int]:
        """(waiting, in progress, failed in this run, handled)."""
        by_state = dict(self._db.execute("SELECT taken, count(*) FROM requests GROUP BY taken"))
        handled = self._db.execute("SELECT value FROM meta WHERE name = 'handled'").fetchone()
        return (
            by_state.get(WAITING, 0),
            by_state.get(IN_PROGRESS, 0),
            by_state.get(FAILED, 0),
            int(handled[0]),
        )

    def clear(self) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM requests")
            self._db.execute("UPDATE meta SET value = 0")

    def failed_keys(self) -> list[str]:
        """The requests that failed after their retries in this run."""
        return [row[0] for row in self._db.execute("SELECT key FROM requests WHERE taken = ?",
                                                    (FAILED,))]  # fmt: skip

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Any:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


class UrlseenRequestManager(RequestManager):
    """A Crawlee request manager whose seen-test is a urlseen filter, keyed by unique_key.

    Args:
        state: the folder of the crawl's state (the filter, and the frontier of requests still
            to do): a stopped crawl resumes from it. None: nothing persists (the frontier in
            memory, the filter in a temporary folder).
        filter: a kind of urlseen.kinds.KINDS that takes opaque keys: "exact" (never drops a
            page; the default), "bloom" (smallest; drops about error_rate of new pages), ...
        capacity, error_rate: the filter's sizing (None: the stored one, or the kind's default).
        redis_url: share the filter through Redis with every process using redis_name: each
            request is new in exactly one of them (which fetches it). The frontier stays this
            process's own (in state; in memory without one, and then lost with the process).
        redis_name: the shared filter's name (default "crawlee:default").
        share_work: with redis_url, the frontier too is shared, in Redis under redis_name (the
            frontier `urlseen crawl --redis` uses): every process takes its requests from one
            queue, so the processes share the work; a request in progress in a process that
            died comes back after the lease (the `lease` option, else 60 s).
        key: "crawlee" (Crawlee's unique_key, the default), "canonical" (urlseen's canonical
            URL for keys Crawlee computed: see canonical_key), or a function of the request.
        expire_after: seconds after which a seen request is new again (job/expiry.py).
        options: the kind's own options (urlseen.kinds.OPTIONS), and seen_cache: with
            redis_url, the requests remembered seen and answered without asking Redis
            (shared/seen_cache.py; default 200,000; 0: none).

    A request that failed after Crawlee's retries with no persistent frontier (no state nor
    share_work) is forgotten by the filter, so a later run fetches it again.
    """

    def __init__(
        self,
        state: str | os.PathLike[str] | None,
        *,
        filter: str | None = None,
        capacity: int | None = None,
        error_rate: float | None = None,
        redis_url: str | None = None,
        redis_name: str | None = None,
        key: str | KeyRule = "crawlee",
        share_work: bool = False,
        expire_after: float | None = None,
        **options: Any,
    ) -> None:
        kind = filter or kinds.DEFAULT_KIND
        if share_work and redis_url is None:
            raise ConfigError("share_work needs redis_url: the shared frontier is in Redis")
        if key == "crawlee":
            self._key: KeyRule = _crawlee_key
        elif key == "canonical":
            self._key = canonical_key
        elif callable(key):
            self._key = key
        else:
            raise ConfigError(f"key is 'crawlee', 'canonical' or a function, not {key!r}")
        folder = None if state is None else Path(state)
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        seen_state = None
        if folder is not None and redis_url is None:
            seen_state = kinds.state_in(folder / SEEN, kind)
            seen_state.parent.mkdir(exist_ok=True)
        self.folder = folder
        self.handle = SeenHandle(
            kind,
            capacity=capacity,
            error_rate=error_rate,
            state=seen_state,
            redis=redis_url,
            name=redis_name or "crawlee:default" if redis_url is not None else None,
            keys="Crawlee's unique keys",
            expire_after=expire_seconds(expire_after, "expire_after"),
            **options,
        )
        self._frontier: _Frontier | SharedFrontier
        if share_work:
            self._frontier = _shared_frontier(self.handle, options.get("lease"))
        else:
            self._frontier = _Frontier(None if folder is None else folder / FRONTIER)
        self._closed = False

    @classmethod
    def open(cls, name: str = "default", **kwargs: Any) -> UrlseenRequestManager:
        """The manager whose state is `name` in Crawlee's storage folder (its configuration's
        storage_dir, ./storage by default): <storage_dir>/urlseen/<name>."""
        from crawlee import service_locator

        storage = Path(service_locator.get_configuration().storage_dir)
        return cls(storage / STATE_FOLDER / name, **kwargs)

    # -- RequestManager ---------------------------------------------------------------------

    async def add_request(
        self, request: str | Request, *, forefront: bool = False
    ) -> ProcessedRequest | None:
        return self._add([request], forefront)[0]

    async def add_requests(
        self,
        requests: Sequence[str | Request],
        *,
        forefront: bool = False,
        batch_size: int = 1000,
        wait_time_between_batches: timedelta = timedelta(seconds=1),
        wait_for_all_requests_to_be_added: bool = False,
        wait_for_all_requests_to_be_added_timeout: timedelta | None = None,
    ) -> None:
        for start in range(0, len(requests), batch_size):
            self._add(requests[start : start + batch_size], forefront)

    def _add(self, items: Sequence[str | Request], forefront: bool) -> list[ProcessedRequest]:
        """Ask the filter about a batch; the new requests join the frontier before the filter's
        "new" answers are durable (urlseen.frontier.admit: before an exact filter commits,
        before a shared filter's claims are acknowledged, before a Bloom filter's bits are
        set), so a kill never leaves a request seen and not to do."""
        batch = [(self._key(r), r) for r in (self._transform_request(i) for i in items)]
        keys = [k for k, _ in batch]

        def enqueue(flags: list[bool]) -> None:
            self._frontier.add([kr for kr, new in zip(batch, flags, strict=True) if new], forefront)

        added = admit(self.handle.seen, keys, enqueue)
        self.handle.checkpoint()
        waiting = self._frontier.present([k for k, new in zip(keys, added, strict=True) if not new])
        return [
            ProcessedRequest(
                unique_key=key,
                was_already_present=not new,
                was_already_handled=not new and key not in waiting,
            )
            for key, new in zip(keys, added, strict=True)
        ]

    async def fetch_next_request(self) -> Request | None:
        taken = self._frontier.take()
        return None if taken is None else taken[1]

    async def mark_request_as_handled(self, request: Request) -> ProcessedRequest | None:
        """Done with a request: deleted from the frontier; one that failed after Crawlee's
        retries (state ERROR) stays in it, with its retries reset, for the next run."""
        key = self._key(request)
        if request.state == RequestState.ERROR:
            again = request.model_copy(deep=True)
            again.retry_count, again.state = 0, RequestState.UNPROCESSED
            done = self._frontier.failed(key, again)
            if self.folder is None and not isinstance(self._frontier, SharedFrontier):
                self.handle.forget([key], "a request failed after its retries")
        else:
            done = self._frontier.handled(key)
        if not done:
            return None
        return ProcessedRequest(unique_key=key, was_already_present=True, was_already_handled=True)

    async def reclaim_request(
        self, request: Request, *, forefront: bool = False
    ) -> ProcessedRequest | None:
        key = self._key(request)
        if not self._frontier.put_back(key, request, forefront):
            return None
        return ProcessedRequest(unique_key=key, was_already_present=True, was_already_handled=False)

    async def is_empty(self) -> bool:
        return self._frontier.counts()[0] == 0

    async def is_finished(self) -> bool:
        waiting, taken, _, _ = self._frontier.counts()
        return waiting == 0 and taken == 0

    async def get_handled_count(self) -> int:
        """Requests handled, those failed in this run included (as Crawlee counts them)."""
        return sum(self._frontier.counts()[2:])

    async def get_total_count(self) -> int:
        return sum(self._frontier.counts())

    async def purge(self) -> None:
        """Forget the crawl but stay usable (Crawlee purges before a crawler's second run()):
        the frontier emptied, the filter cleared (a shared one deleted from Redis only when no
        other live process uses it; a shared frontier with it)."""
        if not isinstance(self._frontier, SharedFrontier):
            self._frontier.clear()
        done = self.handle.clear()
        if isinstance(self._frontier, SharedFrontier) and done.startswith("deleted"):
            self._frontier.clear()  # no other live process uses the crawl's filter
        logger.info("urlseen request manager purged: %s", done)

    async def drop(self) -> None:
        """Remove the state: the frontier, and the filter as purge() clears it."""
        await self.purge()
        self.close()
        if self.folder is not None:
            for path in self.folder.glob(f"{FRONTIER}*"):
                path.unlink(missing_ok=True)
            for folder in (self.folder / SEEN, self.folder):
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only if empty

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Commit and close the filter and the frontier (also done at exit if forgotten)."""
        if self._closed:
            return
        self._closed = True
        try:
            # the frontier goes with the process: a failed request answered new again later
            # in the run (kept here as failed, not queued twice) is forgotten again
            frontier, failed = self._frontier, []
            if self.folder is None and isinstance(frontier, _Frontier):
                failed = frontier.failed_keys()
            if failed:
                self.handle.forget(failed, "a request failed after its retries")
        finally:
            try:
                self.handle.close()
            finally:
                self._frontier.close()

    async def __aenter__(self) -> UrlseenRequestManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f"shared as {self.handle.name!r}" if self.handle.shared else str(self.folder)
        return f"<{type(self).__name__} {self.handle.kind} {where}>"


def _crawlee_key(request: Request) -> str:
    return request.unique_key


def _shared_frontier(handle: SeenHandle, lease: float | None) -> SharedFrontier:
    from urlseen.shared.frontier import LEASE_SECONDS, RedisFrontier

    assert handle.redis is not None and handle.name is not None
    # One request per call: Crawlee asks as its concurrency allows, and what one process does
    # not hold stays for the others.
    frontier = RedisFrontier(handle.redis, handle.name, lease=lease or LEASE_SECONDS, prefetch=1)
    return SharedFrontier(frontier)


__all__ = ["UrlseenRequestManager", "canonical_key"]
