"""Stopping a Scrapy crawl whose filter failed.

A shared filter lost from Redis (keys deleted, FLUSHDB, a server restarted empty, eviction)
makes every later answer a guess, and a Redis that stays unreachable past the filter's retries
answers nothing. An exception raised into Scrapy's callbacks is logged and the crawl goes on,
or hangs (a request that raised never leaves the scraper), so the dupefilter reports the
failure here instead: logged once, kept in the stats, and the crawl closed with a reason
naming it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import urlseen

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

LOST = "urlseen_filter_lost"  # finish reason: the shared filter's data is gone from Redis
FAILED = "urlseen_filter_failed"  # finish reason: any other failure (Redis unreachable, ...)
ERROR_STAT = "urlseen/error"  # the failure, "<type>: <message>"
UNCHECKED_STAT = "urlseen/unchecked"  # requests passed on unchecked after it

logger = logging.getLogger("scrapy.dupefilters")


def reason_for(exc: BaseException) -> str:
    return LOST if isinstance(exc, urlseen.FilterLostError) else FAILED


class CrawlStopper:
    """The first failure of one crawl's filter, and the crawl closed because of it."""

    def __init__(self, crawler: Crawler | None) -> None:
        self.crawler = crawler
        self.failure: BaseException | None = None
        self.unchecked = 0

    def fail(self, exc: BaseException, during: str, *, closing: bool = False) -> bool:
        """Record the failure and close the crawl (unless it is closing already). False when
        there is no running crawl to close: the caller raises the error instead."""
        try:
            engine = getattr(self.crawler, "engine", None)
        except RuntimeError:  # Scrapy >= 2.14 before the crawl starts: "not set yet"
            engine = None
        if engine is None or getattr(engine, "spider", None) is None:
            return False
        if self.failure is None:
            self.failure = exc
            reason = reason_for(exc)
            logger.error(
                "urlseen dupefilter: the filter failed during %s; %s (%s): %s",
                during,
                "the crawl was closing" if closing else "closing the crawl",
                reason,
                exc,
            )
            self._stats({ERROR_STAT: f"{type(exc).__name__}: {exc}"})
            if not closing:
                self._close(engine, reason)
        return True

    def count_unchecked(self) -> None:
        self.unchecked += 1
        self._stats({UNCHECKED_STAT: self.unchecked})

    def _stats(self, values: dict[str, Any]) -> None:
        stats = getattr(self.crawler, "stats", None)
        if stats is not None:
            for key, value in values.items():
                stats.set_value(key, value)

    @staticmethod
    def _close(engine: Any, reason: str) -> None:
        from scrapy.utils.defer import deferred_from_coro

        def failed(failure: Any) -> None:
            logger.error("urlseen dupefilter: closing the crawl failed: %s", failure.value)

        if hasattr(engine, "close_spider_async"):  # Scrapy >= 2.14
            deferred_from_coro(engine.close_spider_async(reason=reason)).addErrback(failed)
        else:  # pragma: no cover - older Scrapy
            engine.close_spider(engine.spider, reason=reason).addErrback(failed)
