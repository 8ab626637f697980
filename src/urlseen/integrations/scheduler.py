"""UrlseenScheduler: Scrapy's scheduler on a durable frontier that commits with urlseen's
seen-test, so a crawl killed at any moment (kill -9, OOM, a container rescheduled) resumes
every page.

Scrapy's own scheduler keeps its queue in memory, or in JOBDIR written at a clean close; the
dupefilter remembers every request it let through. Killed, the crawl forgets its queue and
its rerun skips every request the filter remembers. Here a request the filter answers new is
in the frontier (urlseen.frontier) before that answer is durable, and a request handed to the
engine stays there, in flight, until its response has been handled and every request its
callback yielded has reached the scheduler; they are committed together. After a kill the
requests in flight go back to the queue: a page is fetched at least once, and a kill refetches
at most the requests in flight at that moment (CONCURRENT_REQUESTS downloading, plus the
responses whose callbacks were running; with a shared frontier, which commits every
COMMIT_SECONDS or DONE_PER_COMMIT handled requests, also those fewer than DONE_PER_COMMIT
handled since its last commit).

Settings::

    SCHEDULER = "urlseen.integrations.scheduler.UrlseenScheduler"
    DUPEFILTER_CLASS = "urlseen.integrations.scrapy.UrlseenDupeFilter"   # required
    SPIDER_MIDDLEWARES = {"urlseen.integrations.scheduler.FrontierSpiderMiddleware": 0}
    DOWNLOADER_MIDDLEWARES = {"urlseen.integrations.scheduler.FrontierDownloaderMiddleware": 0}
    URLSEEN_FRONTIER = None         # the frontier's SQLite file (default: <JOBDIR>/frontier.sqlite,
                                    # else beside URLSEEN_STATE, else in memory); with
                                    # URLSEEN_REDIS_URL the frontier is in Redis, shared
    URLSEEN_FRONTIER_ORDER = None   # "lifo" or "fifo" within a priority (default: Scrapy's
                                    # SCHEDULER_DISK_QUEUE order, LIFO; with Redis,
                                    # scrapy-redis's SCHEDULER_QUEUE_CLASS order, FIFO)
    URLSEEN_FRONTIER_LEASE = 60     # Redis: seconds a taken request stays this process's
                                    # (renewed while it runs)
    URLSEEN_FRONTIER_IDLE = None    # Redis: seconds an idle process waits for the work other
                                    # processes hold (default: 2 leases)
    SCHEDULER_PERSIST = True        # False: forget the frontier and the filter at close
    SCHEDULER_FLUSH_ON_START = False  # True: forget them at start
    SCHEDULER_QUEUE_KEY = None      # Redis: the frontier's name, "%(spider)s" expanded
                                    # (default: the filter's URLSEEN_REDIS_NAME)

A request whose fetch fails for good (an error after RetryMiddleware gave up, or a status of
RETRY_HTTP_CODES the spider does not handle) stays in the frontier: the run's stats count it
(urlseen/frontier/failed) and the next run fetches it again. Other error statuses (404, 410)
are the site's answer: done.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError, HttpErrorMiddleware
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import request_from_dict

from urlseen.errors import ConfigError
from urlseen.frontier import Frontier, Token
from urlseen.frontier.sqlite import FRONTIER_FILE, SQLiteFrontier
from urlseen.integrations.scrapy import UrlseenDupeFilter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

TOKEN = "urlseen_frontier"  # request.meta: the frontier entry a request was taken as
PARENT = "urlseen_parent"  # request.meta: the taken request whose callback yielded it
BATCH = 512  # requests admitted per commit at most (they are admitted at every next_request)
# A shared frontier commits every COMMIT_SECONDS, or sooner once this many requests are done:
# a kill refetches at most these, however fast the pages come.
DONE_PER_COMMIT = 8
HANDLED = object()  # signal: a response's output has all been yielded (token, children, ok),
# or its fetch failed for good (ok False)
DROPPED = object()  # signal: a request was dropped on purpose (IgnoreRequest): done
SCHEDULER_PATH = "urlseen.integrations.scheduler.UrlseenScheduler"
SPIDER_MIDDLEWARE = "urlseen.integrations.scheduler.FrontierSpiderMiddleware"
DOWNLOADER_MIDDLEWARE = "urlseen.integrations.scheduler.FrontierDownloaderMiddleware"

logger = logging.getLogger("urlseen.scheduler")


class UrlseenScheduler(BaseScheduler):
    """A Scrapy scheduler whose queue is a durable frontier (see the module docstring).

    Args:
        dupefilter: urlseen's dupefilter (its filter is asked in batches, in commit order).
        frontier: where queued and in-flight requests live.
        crawler: the crawler (stats, signals, closing the crawl if the frontier fails).
        persist: keep the frontier and the filter after close (False: forget both).
        flush_on_start: forget both when the crawl opens.
        idle_seconds: a shared frontier: how long an idle process waits, without taking a
            request, for work other processes hold (leased) before it closes.
    """

    def __init__(
        self,
        dupefilter: UrlseenDupeFilter,
        frontier: Frontier,
        crawler: Crawler | None = None,
        *,
        persist: bool = True,
        flush_on_start: bool = False,
        idle_seconds: float = 0.0,
    ) -> None:
        self.df, self.frontier, self.crawler = dupefilter, frontier, crawler
        dupefilter.batched = True  # admitted in batches: nothing to check ahead
        self.stats = None if crawler is None else crawler.stats
        self.persist, self.flush_on_start = persist, flush_on_start
        self.spider: Spider | None = None
        self._incoming: list[Request] = []  # enqueued, not admitted yet
        self._finished: list[Token] = []  # done, not committed yet
        self._taken: set[Token] = set()  # handed to the engine, not done
        self._failures: set[Token] = set()  # taken, failed for good in this run
        self._children: Counter[Token] = Counter()  # taken request -> children arrived
        self._expected: dict[Token, int] = {}  # taken request -> children its callback yielded
        self._volatile: list[Request] = []  # requests that cannot be serialized (memory only)
        self._timer: Any = None
        self.failed = 0
        self.idle_seconds = idle_seconds
        self._progress = time.monotonic()  # the last request taken
        self._settled = 0.0  # the last commit
        if crawler is not None:
            crawler.signals.connect(self._handled, signal=HANDLED)
            crawler.signals.connect(self._dropped, signal=DROPPED)
            crawler.signals.connect(self._idle, signal=signals.spider_idle)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlseenScheduler:
        settings = crawler.settings
        dupefilter = build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler)
        if not isinstance(dupefilter, UrlseenDupeFilter):
            raise ConfigError(
                f"SCHEDULER {SCHEDULER_PATH} needs DUPEFILTER_CLASS = "
                "'urlseen.integrations.scrapy.UrlseenDupeFilter', not "
                f"{settings['DUPEFILTER_CLASS']!r}"
            )
        _check_middlewares(settings)
        spider_name = getattr(crawler.spidercls, "name", None) or "spider"
        frontier = open_frontier(settings, dupefilter, spider_name)
        lease = getattr(frontier, "lease", 0.0)
        return cls(
            dupefilter,
            frontier,
            crawler,
            persist=settings.getbool("SCHEDULER_PERSIST", True),
            flush_on_start=settings.getbool("SCHEDULER_FLUSH_ON_START", False),
            idle_seconds=settings.getfloat("URLSEEN_FRONTIER_IDLE", 2 * lease),
        )

    # -- Scrapy's scheduler interface -------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self.spider = spider
        if self.flush_on_start:
            self.frontier.clear()
            self.df.clear()
        self.df.open()
        lease = getattr(self.frontier, "lease", 0.0)
        if lease:  # leases renewed while responses take their time, not only per request
            from twisted.internet.task import LoopingCall

            self._timer = LoopingCall(self._renew)
            self._timer.start(lease / 3, now=False)
        queued, back = self.frontier.ready(), self.frontier.returned
        if queued:
            logger.info("urlseen frontier: resuming with %d requests queued (%d were in flight)",
                        queued, back)  # fmt: skip
        self._set("returned", back)

    def close(self, reason: str) -> None:
        self._settle()
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        self.failed = len(self._failures & self._taken)
        self._set("failed", self.failed)
        if self.df.failure is None:  # after a failure, the storage is not asked again
            try:
                self.frontier.release()  # a shared frontier's failed requests: queued now
                self._set("pending", self.frontier.pending())
                if not self.persist:
                    self.frontier.clear()
                    self.df.clear()
            except Exception as exc:
                logger.error("urlseen frontier: could not close: %s", exc)
        self.frontier.close()
        self.df.close(reason)

    def has_pending_requests(self) -> bool:
        if self._incoming or self._volatile:
            return True
        if self.df.failure is not None:
            return False
        try:
            return self.frontier.ready() > 0
        except Exception as exc:
            self._fail(exc, "reading the frontier")
            return False

    def enqueue_request(self, request: Request) -> bool:
        token = request.meta.pop(TOKEN, None)
        parent = request.meta.pop(PARENT, None)
        self._incoming.append(request)
        if token in self._taken and (
            request.dont_filter or "retry_times" in request.meta or "redirect_times" in request.meta
        ):  # a retry or a redirect of a taken request replaces it, in the same commit
            self._done(token)
        if parent is not None:
            self._children[parent] += 1
            self._check_children(parent)
        if len(self._incoming) >= BATCH:
            self._settle()
        return True

    def next_request(self) -> Request | None:
        interval = getattr(self.frontier, "commit_seconds", 0.0)
        if (
            len(self._incoming) >= BATCH
            or len(self._finished) >= DONE_PER_COMMIT
            or time.monotonic() - self._settled >= interval
        ):
            self._settle()
        if self.df.failure is not None:
            return None
        if self._volatile:
            return self._volatile.pop()
        try:
            self.frontier.renew()
            taken = self.frontier.take()
            if taken is None and (self._incoming or self._finished):
                self._settle()
                taken = self.frontier.take()
        except Exception as exc:
            self._fail(exc, "taking a request")
            return None
        if taken is None:
            return None
        token, payload = taken
        self._progress = time.monotonic()
        request = request_from_dict(pickle.loads(payload), spider=self.spider)
        request.meta[TOKEN] = token
        self._taken.add(token)
        self._inc("scheduler/dequeued")
        return request

    def __len__(self) -> int:
        return len(self._incoming) + len(self._volatile) + self.frontier.ready()

    # -- the frontier's bookkeeping ---------------------------------------------------------

    def _settle(self) -> None:
        """Admit the incoming requests and commit the done ones, in one frontier commit made
        before the filter's answers are durable."""
        self._settled = time.monotonic()
        if not self._incoming and not self._finished:
            return
        if self.df.failure is not None:
            # The crawl is closing on that failure: nothing more is written (a lost shared
            # filter is not written back); the requests in flight stay there, for a rerun.
            self._incoming, self._finished = [], []
            return
        batch, self._incoming = self._incoming, []
        done, self._finished = self._finished, []
        forced = [r for r in batch if r.dont_filter]
        checked = [r for r in batch if not r.dont_filter]

        def keep(new: list[Request]) -> None:
            entries = []
            for request in forced + new:
                try:
                    data = pickle.dumps(request.to_dict(spider=self.spider), protocol=4)
                except (ValueError, TypeError, AttributeError, pickle.PicklingError) as exc:
                    logger.warning("urlseen frontier: %s kept in memory only: %s", request, exc)
                    self._volatile.append(request)
                    continue
                entries.append((request.priority, data))
            self.frontier.commit(entries, done)
            self._inc("scheduler/enqueued", len(entries))

        try:
            self.df.admit(checked, keep, self.spider)
        except Exception as exc:
            self._fail(exc, "admitting requests")

    def _done(self, token: Token) -> None:
        self._taken.discard(token)
        self._children.pop(token, None)
        self._expected.pop(token, None)
        self._finished.append(token)

    def _check_children(self, token: Token) -> None:
        expected = self._expected.get(token)
        if expected is not None and self._children[token] >= expected:
            self._done(token)

    def _handled(self, token: Token, children: int, ok: bool) -> None:
        """A taken request's response was handled (ok), or failed for good (not ok: it stays
        in flight, so in the frontier, for the next run). Done once its children arrived."""
        if token not in self._taken:
            return
        if not ok:
            self._failures.add(token)
            return
        self._expected[token] = children
        self._check_children(token)

    def _renew(self) -> None:
        if self.df.failure is not None:
            return
        try:
            self.frontier.renew()
        except Exception as exc:
            self._fail(exc, "renewing leases")

    def _idle(self) -> None:
        """A shared frontier's process stays open while other processes hold requests (their
        callbacks may queue more, or their leases end and the requests come back), for at
        most idle_seconds without taking one: every wait is bounded."""
        if self.df.failure is not None or self.idle_seconds <= 0:
            return
        if time.monotonic() - self._progress > self.idle_seconds:
            return
        try:
            pending = self.frontier.pending()
        except Exception as exc:
            self._fail(exc, "waiting for work")
            return
        if pending > len(self._taken):
            raise DontCloseSpider

    def _dropped(self, token: Token) -> None:
        if token in self._taken:
            self._done(token)

    def _fail(self, exc: BaseException, during: str) -> None:
        if not self.df.fail(exc, f"the frontier, {during}"):
            raise exc

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None and count:
            self.stats.inc_value(key, count)

    def _set(self, name: str, value: int) -> None:
        if self.stats is not None:
            self.stats.set_value(f"urlseen/frontier/{name}", value)


class FrontierSpiderMiddleware:
    """Tells UrlseenScheduler how many requests a response's callback yielded (each tagged
    with its parent), once it has yielded them all, and whether the response counts as
    handled: a status of RETRY_HTTP_CODES that the spider does not handle is a failure."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.httperror = HttpErrorMiddleware.from_crawler(crawler)
        self.retry_codes = {int(c) for c in crawler.settings.getlist("RETRY_HTTP_CODES")}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierSpiderMiddleware:
        return cls(crawler)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        token, children = response.meta.get(TOKEN), 0
        for output in result:
            if token is not None and isinstance(output, Request):
                output.meta[PARENT] = token
                children += 1
            yield output
        self._handled(response, token, children)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        token, children = response.meta.get(TOKEN), 0
        async for output in result:
            if token is not None and isinstance(output, Request):
                output.meta[PARENT] = token
                children += 1
            yield output
        self._handled(response, token, children)

    def _handled(self, response: Response, token: Token | None, children: int) -> None:
        if token is None:
            return
        ok = True
        if response.status in self.retry_codes:
            try:
                self.httperror.process_spider_input(response)
            except HttpError:
                ok = False  # a transient error status the spider does not handle
        self.crawler.signals.send_catch_log(HANDLED, token=token, children=children, ok=ok)


class FrontierDownloaderMiddleware:
    """Tells UrlseenScheduler that a request was dropped on purpose (IgnoreRequest: offsite,
    robots.txt, ...): done; or that its fetch failed for good (an error RetryMiddleware, called
    before this one, did not retry): kept for the next run."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierDownloaderMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        token = request.meta.get(TOKEN)
        if token is None:
            return
        if isinstance(exception, IgnoreRequest):
            self.crawler.signals.send_catch_log(DROPPED, token=token)
        else:
            self.crawler.signals.send_catch_log(HANDLED, token=token, children=0, ok=False)


def _check_middlewares(settings: BaseSettings) -> None:
    missing = [
        f"{setting} = {{{path!r}: 0}}"
        for setting, path in (
            ("SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARE),
            ("DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARE),
        )
        if path not in settings.getwithbase(setting)
    ]
    if missing:
        raise ConfigError(f"SCHEDULER {SCHEDULER_PATH} needs " + " and ".join(missing))


def _lifo(settings: BaseSettings, shared: bool) -> bool:
    order = settings.get("URLSEEN_FRONTIER_ORDER")
    if order is not None:
        if str(order).lower() not in ("lifo", "fifo"):
            raise ConfigError(f"URLSEEN_FRONTIER_ORDER must be 'lifo' or 'fifo', not {order!r}")
        return str(order).lower() == "lifo"
    name = settings.get("SCHEDULER_QUEUE_CLASS") if shared else None
    name = name or (None if shared else settings.get("SCHEDULER_DISK_QUEUE"))
    path = name if isinstance(name, str) else getattr(name, "__name__", "")
    return "lifo" in str(path).lower()  # Scrapy's default disk queue is LIFO, scrapy-redis's
    # default (PriorityQueue) has no order within a priority: FIFO here


def open_frontier(settings: BaseSettings, dupefilter: UrlseenDupeFilter, spider: str) -> Frontier:
    """The frontier the settings name: in Redis beside a shared filter, else a SQLite file
    (URLSEEN_FRONTIER, <JOBDIR>/frontier.sqlite, or beside the filter's state), else memory."""
    handle = dupefilter.handle
    lifo = _lifo(settings, handle.shared)
    if handle.shared:
        from urlseen.shared.frontier import LEASE_SECONDS, RedisFrontier

        key = settings.get("SCHEDULER_QUEUE_KEY")
        name = key % {"spider": spider} if key else handle.name or f"scrapy:{spider}"
        lease = settings.getfloat("URLSEEN_FRONTIER_LEASE", LEASE_SECONDS)
        return RedisFrontier(handle.redis, name, lifo=lifo, lease=lease)
    path = settings.get("URLSEEN_FRONTIER")
    jobdir = job_dir(settings)
    if path is None and jobdir:
        path = Path(jobdir, FRONTIER_FILE)
    elif path is None and handle.state is not None:
        state = handle.state
        path = state / FRONTIER_FILE if state.is_dir() else Path(f"{state}.{FRONTIER_FILE}")
    return SQLiteFrontier(path, lifo=lifo)


__all__ = ["FrontierDownloaderMiddleware", "FrontierSpiderMiddleware", "UrlseenScheduler"]
