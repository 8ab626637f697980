"""UrlseenDupeFilter: urlseen as Scrapy's duplicate-request filter (DUPEFILTER_CLASS).

Settings (all optional)::

    DUPEFILTER_CLASS = "urlseen.integrations.scrapy.UrlseenDupeFilter"
    URLSEEN_FILTER = "exact"          # or any kind of urlseen.kinds.KINDS that takes opaque keys
    URLSEEN_CAPACITY = None           # distinct requests (default: the kind's, 10M)
    URLSEEN_ERROR_RATE = None         # default: the kind's (exact 1e-3, never a wrong answer;
                                      # bloom 1e-6)
    URLSEEN_STATE = None              # default: <JOBDIR>/urlseen (a folder for exact, the file
                                      # seen.bloom in it for bloom), else nothing persists
    URLSEEN_REDIS_URL = None          # share one filter between crawler processes
    URLSEEN_REDIS_NAME = None         # the shared filter's name (default: "scrapy:<spider>")
    URLSEEN_DEBUG = False             # log every filtered request (default: DUPEFILTER_DEBUG)
    URLSEEN_AUDIT = False             # count false positives against an exact in-memory set

Keys are the crawler's own request fingerprints (`crawler.request_fingerprinter`, 20 raw
bytes by default), so the filter agrees with Scrapy's HTTP cache and REQUEST_FINGERPRINTER_*
settings; they are already canonical.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from urlseen import kinds
from urlseen.errors import MissingDependencyError
from urlseen.filters.base import SeenFilter
from urlseen.integrations._grouped import grouped

try:
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
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

STATE_FOLDER = "urlseen"  # the filter's state inside JOBDIR
GROUP_SIZE = 8192  # exact filter, one writer: a library commit per this many new requests (or 1 s)

logger = logging.getLogger(__name__)


class UrlseenDupeFilter(BaseDupeFilter):
    """Scrapy's duplicate filter on a urlseen filter: bounded memory, persistent, shareable.

    Build it with plain values (tests, scripts) or let Scrapy build it from the URLSEEN_*
    settings (from_crawler).

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
    ) -> None:
        kind = filter or kinds.DEFAULT_KIND
        row = kinds.kind(kind, _setting)
        if row.url_keys:
            raise kinds.OptionError(
                f"URLSEEN_FILTER {kind!r} reads URLs' structure; Scrapy's keys are request "
                "fingerprints"
            )
        if state is not None and row.state == "file" and Path(state).is_dir():
            state = kinds.state_in(state, kind)
        self.kind = kind
        self.fingerprinter: RequestFingerprinterProtocol = fingerprinter or RequestFingerprinter()
        self.debug = debug
        self.logdupes = True
        self.stats = stats
        self.new = 0
        self.false_positives = 0
        self.where = (
            f"{kind} filter {redis_name!r} shared through Redis"
            if redis_url is not None
            else f"{kind} filter " + (f"at {state}" if state is not None else "(not persisted)")
        )
        seen = kinds.open_filter(
            kind,
            capacity=capacity,
            error_rate=error_rate,
            state=state,
            redis=redis_url,
            name=redis_name,
            spell=_setting,
        )
        # One local writer of an exact filter: group the commits. Shared or Bloom: each add
        # is its own atomic check-and-add.
        self.seen: SeenFilter = (
            grouped(seen, GROUP_SIZE) if kind == "exact" and redis_url is None else seen
        )
        self._audit: set[bytes] | None = None
        if audit:
            if len(self.seen) or redis_url is not None:
                logger.warning(
                    "URLSEEN_AUDIT ignored: the filter is shared or already holds requests, "
                    "so its positives cannot be checked against this run alone"
                )
            else:
                self._audit = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlseenDupeFilter:
        """The filter from the crawler's URLSEEN_* settings (see the module docstring)."""
        settings = crawler.settings
        state = settings.get("URLSEEN_STATE")
        jobdir = job_dir(settings)
        if state is None and jobdir:
            state = Path(jobdir, STATE_FOLDER)  # a file kind keeps its file in it
            state.mkdir(parents=True, exist_ok=True)
        spider = getattr(crawler, "spider", None)
        name = settings.get("URLSEEN_REDIS_NAME") or f"scrapy:{getattr(spider, 'name', 'spider')}"
        rate = settings.get("URLSEEN_ERROR_RATE")
        capacity = settings.get("URLSEEN_CAPACITY")
        debug = settings.get("URLSEEN_DEBUG")
        return cls(
            settings.get("URLSEEN_FILTER"),
            None if capacity is None else settings.getint("URLSEEN_CAPACITY"),
            None if rate is None else settings.getfloat("URLSEEN_ERROR_RATE"),
            state,
            settings.get("URLSEEN_REDIS_URL"),
            name,
            settings.getbool("DUPEFILTER_DEBUG") if debug is None else bool(debug),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
            audit=settings.getbool("URLSEEN_AUDIT"),
        )

    def open(self) -> None:
        logger.info("urlseen dupefilter: %s", self.where)
        self._report()

    def request_seen(self, request: Request) -> bool:
        """True if the request was seen (Scrapy drops it); else it is recorded as seen."""
        fp = self.fingerprinter.fingerprint(request)
        if self.seen.add(fp):
            self.new += 1
            if self._audit is not None:
                self._audit.add(fp)
            return False
        if self._audit is not None and fp not in self._audit:
            self.false_positives += 1
            self._audit.add(fp)  # counted once: later repeats are true duplicates
        return True

    def log(self, request: Request, spider: Spider) -> None:
        """Scrapy's duplicate log: the first filtered request, or all with debug."""
        if self.debug:
            logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": request, "referer": referer_str(request)},
                extra={"spider": spider},
            )
        elif self.logdupes:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown "
                "(see URLSEEN_DEBUG or DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
                extra={"spider": spider},
            )
            self.logdupes = False
        if self.stats is not None:
            self.stats.inc_value("dupefilter/filtered")

    def close(self, reason: str) -> None:
        """Write the state (a paused crawl resumes with every fetched request seen)."""
        try:
            self._report()
        finally:
            self.seen.close()

    def _report(self) -> None:
        if self.stats is None:
            return
        info: dict[str, Any] = {
            "urlseen/filter": self.kind,
            "urlseen/new": self.new,
            "urlseen/filter_bits": self.seen.stats().bits,
        }
        if self._audit is not None:
            info["urlseen/false_positives"] = self.false_positives
        for key, value in info.items():
            self.stats.set_value(key, value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.where}>"


_SETTINGS = {"filter": "URLSEEN_FILTER", "redis": "URLSEEN_REDIS_URL", "name": "URLSEEN_REDIS_NAME"}


def _setting(name: str) -> str:
    """A filter parameter's name as a Scrapy setting, for messages."""
    return _SETTINGS.get(name, f"URLSEEN_{name.upper()}")


__all__ = ["UrlseenDupeFilter"]
