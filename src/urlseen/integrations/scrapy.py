"""UrlseenDupeFilter: urlseen as Scrapy's duplicate-request filter (DUPEFILTER_CLASS), under
Scrapy's own scheduler and under scrapy-redis's (and scrapy-redis-bloomfilter's).

Settings (all optional)::

    DUPEFILTER_CLASS = "urlseen.integrations.scrapy.UrlseenDupeFilter"
    URLSEEN_FILTER = "exact"          # or any kind of urlseen.kinds.KINDS that takes opaque keys
    URLSEEN_CAPACITY = None           # distinct requests (default: the kind's, 10M)
    URLSEEN_ERROR_RATE = None         # default: the kind's (exact 1e-3, never a wrong answer;
                                      # bloom 1e-6)
    URLSEEN_STATE = None              # default: <JOBDIR>/urlseen (a folder for exact, the file
                                      # seen.bloom in it for bloom), else nothing persists
    URLSEEN_REDIS_URL = None          # share one filter between crawler processes (under
                                      # scrapy-redis's scheduler: default its REDIS_URL)
    URLSEEN_REDIS_NAME = None         # the shared filter's name (default: "scrapy:<spider>",
                                      # or scrapy-redis's SCHEDULER_DUPEFILTER_KEY when set)
    URLSEEN_DEBUG = False             # log every filtered request (default: DUPEFILTER_DEBUG)
    URLSEEN_AUDIT = False             # count false positives against an exact in-memory set
    URLSEEN_FLUSH_SECONDS = 1.0       # commit grouped adds at least this often while crawling
    URLSEEN_LEASE = None              # with Redis: seconds an answer stays claimed (default 10)
    URLSEEN_ALLOW_EVICTION = False    # with Redis: use a server that may evict keys (refused)
    URLSEEN_EXPIRE_AFTER = None       # seconds until a seen request is new (job/expiry.py)
    URLSEEN_SEEN_CACHE = 200000       # with Redis: requests remembered seen, answered without a
                                      # round trip (shared/seen_cache.py; 0: ask Redis each time)
    URLSEEN_LAYOUT = None             # any other kind option by its name (urlseen.kinds.OPTIONS):
                                      # LAYOUT, LEAF_BITS, GROUPS, GENERATIONS, WINDOW, ...

Keys are the crawler's own request fingerprints (`crawler.request_fingerprinter`, 20 raw
bytes by default), so the filter agrees with Scrapy's HTTP cache and REQUEST_FINGERPRINTER_*
settings; they are already canonical. Records go to Scrapy's dupefilter logger,
`scrapy.dupefilters`, with Scrapy's messages.

scrapy-redis builds its dupefilter with `from_spider` and never calls open() or close(); it
calls clear() when the crawl ends with SCHEDULER_PERSIST off (and at start with
SCHEDULER_FLUSH_ON_START). So the filter keeps itself durable (grouped commits flushed every
URLSEEN_FLUSH_SECONDS and on spider_idle), closes on spider_closed / engine_stopped (and at exit
if neither came), and clear() forgets the crawl: a local state is removed, a shared filter is
deleted from Redis by the last live process using it.

A filter that fails (a shared filter lost from Redis, a Redis unreachable past the retries)
closes the crawl with the finish reason urlseen_filter_lost or urlseen_filter_failed
(integrations/_stop.py): raised into Scrapy's callbacks, the error would be logged while the
crawl went on, or hung.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from urlseen import kinds
from urlseen.errors import MissingDependencyError
from urlseen.frontier.admit import admit
from urlseen.integrations._grouped import GroupedAdds
from urlseen.integrations._handle import SeenHandle
from urlseen.integrations._prefetched import PREFETCH_WAIT, PrefetchedAnswers
from urlseen.integrations._scrapy_settings import (  # _warned: the warnings given once
    _warned,  # noqa: F401
    bloomfilter_in_use,
    kind_settings,
    scrapy_redis_url,
    setting_name,
    translate_bloomfilter,
    typed,
)
from urlseen.integrations._stop import CrawlStopper
from urlseen.job.expiry import expire_seconds
from urlseen.protocol import SeenFilter
from urlseen.shared.seen_cache import DEFAULT_ENTRIES, SeenCache

try:
    from scrapy import signals
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.utils.job import job_dir
    from scrapy.utils.request import RequestFingerprinter, referer_str
except ImportError as exc:  # pragma: no cover - exercised only without scrapy
    raise MissingDependencyError(
        "urlseen.integrations.scrapy needs Scrapy: pip install 'urlseen[scrapy]'"
    ) from exc

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol
    from twisted.internet.task import LoopingCall

STATE_FOLDER = "urlseen"  # the filter's state inside JOBDIR
EXPIRE = "URLSEEN_EXPIRE_AFTER"
GROUP_SIZE = 8192  # exact filter, one writer: a library commit per this many new requests (or 1 s)
FLUSH_SECONDS = 1.0
FILTERS: weakref.WeakKeyDictionary[Crawler, UrlseenDupeFilter] = weakref.WeakKeyDictionary()

logger = logging.getLogger("scrapy.dupefilters")  # Scrapy's dupefilter logger, as RFPDupeFilter


class UrlseenDupeFilter(PrefetchedAnswers, BaseDupeFilter):
    """Scrapy's duplicate filter on a urlseen filter: bounded memory, persistent, shareable.

    Build it with plain values (tests, scripts) or let Scrapy build it from the URLSEEN_*
    settings (from_crawler; scrapy-redis: from_spider).

    Args:
        filter: a kind of urlseen.kinds.KINDS: "exact" (IMP-CBFilter: never drops a request;
            the default), "bloom" (smallest and fastest; drops about error_rate of new
            requests), "dsbf" (with redis_url: keeps error_rate as the crawl grows), ...
        capacity: distinct requests the filter is sized for. None: the stored one, or the
            kind's default.
        error_rate: bloom: share of new requests dropped at capacity; exact: share of new
            requests that cost a library look-up. None: the stored one, or the kind's default.
        state: where the filter persists (a folder; for kinds kept in one file, that file or
            a folder to keep it in). None: nothing persists.
        redis_url: share one filter between processes through Redis (each request is new
            for exactly one of them). Excludes state.
        redis_name: the shared filter's name.
        debug: log every filtered request, not only the first.
        fingerprinter: the crawler's request fingerprinter (default: Scrapy's default one).
        stats: the crawler's stats collector (dupefilter/filtered, urlseen/*).
        audit: also keep every fingerprint in a Python set to count the filter's false
            positives (urlseen/false_positives): a measurement, at a set's memory.
        options: the kind's own options (urlseen.kinds.OPTIONS), e.g. {"layout": "standard"}.
        bloomfilter_stat: also count filtered requests as `bloomfilter/filtered`, the stat
            scrapy-redis-bloomfilter's users read.
    """

    def __init__(
        self,
        filter: str | None = None,
        capacity: int | None = None,
        error_rate: float | None = None,
        state: str | Path | None = None,
        redis_url: str | None = None,
        redis_name: str = "scrapy",
        debug: bool = False,
        *,
        fingerprinter: RequestFingerprinterProtocol | None = None,
        stats: StatsCollector | None = None,
        audit: bool = False,
        options: dict[str, Any] | None = None,
        bloomfilter_stat: bool = False,
        flush_seconds: float = FLUSH_SECONDS,
        expire_after: float | None = None,
        seen_cache: int = DEFAULT_ENTRIES,
    ) -> None:
        kind = filter or kinds.DEFAULT_KIND
        row = kinds.kind(kind, setting_name)
        if state is not None and row.state == "file" and Path(state).is_dir():
            own = kinds.holds_generations(Path(state))  # a folder of generations: the state
            state = state if own else kinds.state_in(state, kind)
        self.kind = kind
        self.logger = logger
        self.fingerprinter: RequestFingerprinterProtocol = fingerprinter or RequestFingerprinter()
        self.debug = debug
        self.logdupes = True
        self.stats = stats
        self.bloomfilter_stat = bloomfilter_stat
        self.flush_seconds = flush_seconds
        self.new = 0
        self.false_positives = 0
        self.where = (
            f"{kind} filter {redis_name!r} shared through Redis"
            if redis_url is not None
            else f"{kind} filter " + (f"at {state}" if state is not None else "(not persisted)")
        )
        # One local writer of an exact filter: group the commits. Shared or Bloom: each add
        # is its own atomic check-and-add.
        self.handle = SeenHandle(
            kind,
            capacity=capacity,
            error_rate=error_rate,
            state=state,
            redis=redis_url,
            name=redis_name,
            spell=setting_name,
            group=GROUP_SIZE,
            keys="Scrapy's request fingerprints",
            expire_after=expire_after,
            seen_cache=seen_cache,
            **(options or {}),
        )
        self._timer: LoopingCall | None = None
        self.batched = False  # set by a scheduler that asks in batches (admit), not per request
        self._closed = False
        self._stop = CrawlStopper(None)
        self._audit: set[bytes] | None = None
        if audit:
            if len(self.seen) or redis_url is not None:
                logger.warning(
                    "URLSEEN_AUDIT ignored: the filter is shared or already holds requests, "
                    "so its positives cannot be checked against this run alone"
                )
            else:
                self._audit = set()

    @property
    def seen(self) -> SeenFilter:
        """The urlseen filter (a GroupedAdds around a local exact filter)."""
        return self.handle.seen

    @property
    def failure(self) -> BaseException | None:
        """The error that made the filter fail (the crawl is closing on it), else None."""
        return self._stop.failure

    def fail(self, exc: BaseException, during: str) -> bool:
        """Record a failure of the crawl's storage (the filter's, or its frontier's) and close
        the crawl on it; False when no crawl runs (the caller raises instead)."""
        return self._stop.fail(exc, during)

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlseenDupeFilter:
        """The filter from the crawler's URLSEEN_* settings (see the module docstring), as
        Scrapy's scheduler builds it."""
        spider = getattr(crawler, "spider", None)
        self = cls._from_settings(crawler.settings, crawler, getattr(spider, "name", None))
        self._connect(crawler)
        return self

    @classmethod
    def from_spider(cls, spider: Spider) -> UrlseenDupeFilter:
        """As scrapy-redis's scheduler builds it (and never opens or closes it): shared
        through the scheduler's Redis unless URLSEEN_REDIS_URL, URLSEEN_STATE or JOBDIR says
        otherwise; closed on the engine's signals."""
        crawler = spider.crawler
        self = cls._from_settings(crawler.settings, crawler, spider.name, scrapy_redis=True)
        self._connect(crawler)
        return self

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> UrlseenDupeFilter:
        """From settings alone (no crawler: Scrapy's default fingerprinter, no stats, no
        signals: the caller closes it). Prefer from_crawler."""
        return cls._from_settings(settings, None, None)

    @classmethod
    def _from_settings(
        cls,
        settings: BaseSettings,
        crawler: Crawler | None,
        spider_name: str | None,
        *,
        scrapy_redis: bool = False,
    ) -> UrlseenDupeFilter:
        kind = settings.get("URLSEEN_FILTER") or kinds.DEFAULT_KIND
        state = settings.get("URLSEEN_STATE")
        redis_url = settings.get("URLSEEN_REDIS_URL")
        jobdir = job_dir(settings)
        if state is None and jobdir and redis_url is None:
            state = Path(jobdir, STATE_FOLDER)  # a file kind keeps its file in it
            state.mkdir(parents=True, exist_ok=True)
        if scrapy_redis and redis_url is None and state is None:
            redis_url = scrapy_redis_url(settings)
        name = settings.get("URLSEEN_REDIS_NAME")
        if not name and scrapy_redis and settings.get("SCHEDULER_DUPEFILTER_KEY"):
            name = settings["SCHEDULER_DUPEFILTER_KEY"] % {"spider": spider_name}
        sizing = (
            typed(settings, "URLSEEN_CAPACITY", int),
            typed(settings, "URLSEEN_ERROR_RATE", float),
        )
        capacity, rate, options = translate_bloomfilter(settings, kind, *sizing)
        options |= kind_settings(settings)
        debug = settings.get("URLSEEN_DEBUG")
        return cls(
            kind,
            capacity,
            rate,
            state,
            redis_url,
            name or f"scrapy:{spider_name or 'spider'}",
            settings.getbool("DUPEFILTER_DEBUG") if debug is None else bool(debug),
            fingerprinter=None if crawler is None else crawler.request_fingerprinter,
            stats=None if crawler is None else crawler.stats,
            audit=settings.getbool("URLSEEN_AUDIT"),
            options=options,
            bloomfilter_stat=bloomfilter_in_use(settings),
            flush_seconds=settings.getfloat("URLSEEN_FLUSH_SECONDS", FLUSH_SECONDS),
            expire_after=expire_seconds(settings.get(EXPIRE), EXPIRE),
            seen_cache=settings.getint("URLSEEN_SEEN_CACHE", DEFAULT_ENTRIES),
        )

    def _connect(self, crawler: Crawler) -> None:
        """Durable and closed whoever drives the filter: Scrapy's scheduler opens and closes
        it, scrapy-redis's does neither. A failing filter closes the crawl."""
        self._stop = CrawlStopper(crawler)
        FILTERS[crawler] = self  # where the prefetching and forgetting middlewares find it
        crawler.signals.connect(self._start_timer, signal=signals.spider_opened)
        crawler.signals.connect(self.checkpoint, signal=signals.spider_idle)
        crawler.signals.connect(self.close, signal=signals.spider_closed)
        crawler.signals.connect(self.close, signal=signals.engine_stopped)

    # -- Scrapy's dupefilter interface ------------------------------------------------------

    def open(self) -> None:
        logger.info("urlseen dupefilter: %s", self.where)
        self._start_timer()
        self._report()

    def request_seen(self, request: Request) -> bool:
        """True if the request was seen (Scrapy drops it); else it is recorded as seen.

        Once the filter failed (the crawl is closing), every request is passed on unchecked
        (counted as urlseen/unchecked): a page may be fetched twice, none is lost."""
        fp = self.fingerprinter.fingerprint(request)
        try:
            seen = self.seen if self._stop.failure is None else None
            new = seen is not None and (
                (isinstance(seen, SeenCache) and seen.take(fp)) or seen.add(fp)
            )
        except Exception as exc:
            if not self._stop.fail(exc, f"request_seen({request.url})"):
                raise  # no running crawl to close: the caller gets the error
        if self._stop.failure is not None:
            self._stop.count_unchecked()
            return False
        if new:
            self.new += 1
            if self._audit is not None:
                self._audit.add(fp)
            return False
        if self._audit is not None and fp not in self._audit:
            self.false_positives += 1
            self._audit.add(fp)  # counted once: later repeats are true duplicates
        return True

    def admit(
        self,
        requests: list[Request],
        keep: Callable[[list[Request]], object],
        spider: Spider | None = None,
    ) -> list[bool]:
        """request_seen for a batch, for a durable frontier (UrlseenScheduler): keep(the new
        requests) runs once the answers are known and before the filter's new answers are
        durable (urlseen.frontier.admit orders the two commits). Duplicates are logged as
        the scheduler logs them. Once the filter failed (the crawl is closing), nothing is
        kept: the requests that yielded these stay in the frontier, in flight, and a rerun
        fetches them again. Returns the answers (empty after a failure)."""
        if self._stop.failure is None:
            try:
                return self._admit(requests, keep, spider)
            except Exception as exc:
                if not self._stop.fail(exc, "admitting requests"):
                    raise
        return []

    def _admit(
        self,
        requests: list[Request],
        keep: Callable[[list[Request]], object],
        spider: Spider | None,
    ) -> list[bool]:
        fps = [self.fingerprinter.fingerprint(r) for r in requests]
        seen = self.seen
        if isinstance(seen, GroupedAdds):  # its commits are ordered here, not grouped
            seen.flush()
            seen = seen.seen
        flags = admit(
            seen, fps, lambda new: keep([r for r, f in zip(requests, new, strict=True) if f])
        )
        for request, fp, new in zip(requests, fps, flags, strict=True):
            if new:
                self.new += 1
                if self._audit is not None:
                    self._audit.add(fp)
                continue
            if self._audit is not None and fp not in self._audit:
                self.false_positives += 1
                self._audit.add(fp)
            if spider is not None:
                self.log(request, spider)
        return flags

    def forget(self, request: Request, why: str) -> bool:
        """Forget a request (new again); False if not held or the kind cannot (logged once)."""
        if self._stop.failure is not None:
            return False
        return self.handle.forget([self.fingerprinter.fingerprint(request)], why) > 0

    def log(self, request: Request, spider: Spider) -> None:
        """Scrapy's duplicate log, word for word: the first filtered request, or all with
        debug; and the dupefilter/filtered stat."""
        if self.debug:
            msg = "Filtered duplicate request: %(request)s (referer: %(referer)s)"
            args = {"request": request, "referer": referer_str(request)}
            self.logger.debug(msg, args, extra={"spider": spider})
        elif self.logdupes:
            msg = (
                "Filtered duplicate request: %(request)s"
                " - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)"
            )
            self.logger.debug(msg, {"request": request}, extra={"spider": spider})
            self.logdupes = False
        stats = self.stats or getattr(getattr(spider, "crawler", None), "stats", None)
        if stats is not None:
            stats.inc_value("dupefilter/filtered")
            if self.bloomfilter_stat:
                stats.inc_value("bloomfilter/filtered")

    def clear(self) -> None:
        """Forget the crawl, as scrapy-redis means it (its scheduler calls this at the end of a
        crawl with SCHEDULER_PERSIST off, and at start with SCHEDULER_FLUSH_ON_START): a local
        state is removed, a temporary filter dropped, a shared filter deleted from Redis if no
        other live process uses it (else only left to them). The next request, if any, opens
        a new empty filter."""
        if self._stop.failure is not None:
            logger.error("urlseen dupefilter not cleared: the filter failed (see above)")
            return
        done = self.handle.clear()
        logger.info("urlseen dupefilter cleared: %s", done)

    def checkpoint(self) -> None:
        """Make every answer so far durable (commit grouped adds; acknowledge to a shared
        filter) and update the stats. Runs on a timer, on spider_idle and at close; a failure
        closes the crawl."""
        if not self.handle.opened or self._stop.failure is not None:
            return
        try:
            self.release(PREFETCH_WAIT)
            self.handle.checkpoint()
            self._report()
        except Exception as exc:
            if not self._stop.fail(exc, "a checkpoint"):
                raise

    def close(self, reason: str = "finished") -> None:
        """Write the state (a paused crawl resumes with every fetched request seen). Runs once,
        from Scrapy's scheduler or from the spider_closed / engine_stopped signals."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        if self._stop.failure is None:
            try:
                self.release()
                self._report()
                self.handle.close()
                return
            except Exception as exc:
                if not self._stop.fail(exc, "close", closing=True):
                    self.handle.abandon()
                    raise
        self._report()
        self.handle.abandon()

    # -- helpers ----------------------------------------------------------------------------

    def _start_timer(self) -> None:
        """Checkpoint every flush_seconds while the reactor runs (not in reactor-less tests)."""
        reactor = sys.modules.get("twisted.internet.reactor")
        if self._timer is not None or self._closed or not getattr(reactor, "running", False):
            return
        from twisted.internet.task import LoopingCall

        self._timer = LoopingCall(self._tick)
        self._timer.start(self.flush_seconds, now=False)

    def _tick(self) -> None:
        try:
            self.checkpoint()
        except Exception:  # no crawl to close (the filter built without one)
            logger.exception("urlseen dupefilter: checkpoint failed (retried at the next tick)")
        if self._stop.failure is not None and self._timer is not None and self._timer.running:
            self._timer.stop()

    def _report(self) -> None:
        if self.stats is None:
            return
        info: dict[str, Any] = {"urlseen/filter": self.kind, "urlseen/new": self.new}
        if self.handle.opened and self._stop.failure is None:  # not after clear() (a new
            # filter would open) nor after a failure (it would fail again)
            info["urlseen/filter_bits"] = self.seen.stats().bits
            if isinstance(self.seen, SeenCache):
                info["urlseen/cache_hits"] = self.seen.hits
                info["urlseen/redis_checks"] = self.seen.asked
                info["urlseen/redis_batches"] = self.seen.batches
        if self._audit is not None:
            info["urlseen/false_positives"] = self.false_positives
        for key, value in info.items():
            self.stats.set_value(key, value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.where}>"


__all__ = ["UrlseenDupeFilter"]
