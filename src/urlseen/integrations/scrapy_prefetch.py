"""UrlseenPrefetchMiddleware: a callback's requests checked against a shared filter in one
round trip, not one each.

Scrapy's scheduler asks its dupefilter one request at a time, so a shared filter would ask
Redis once per request the memory (shared/seen_cache.py) does not know. This spider middleware,
last before the engine, groups what a callback yields (up to URLSEEN_PREFETCH_BATCH objects),
checks its requests in one batch and leaves the answers for the dupefilter's request_seen.

Settings::

    SPIDER_MIDDLEWARES = {"urlseen.integrations.scrapy_prefetch.UrlseenPrefetchMiddleware": 10}
    URLSEEN_PREFETCH_BATCH = 1000     # objects of a callback's output grouped at most
    URLSEEN_PREFETCH_START = False    # also group the spider's start (a start that waits
                                      # between requests would hold back the group's first)

Requests with dont_filter, and everything under urlseen's own scheduler (it asks in batches
already) or with a filter that cannot forget, pass as they are. A request answered new here
and dropped before it reached the scheduler (a request_scheduled handler, the crawl closing)
is forgotten again after PREFETCH_WAIT seconds (it was claimed: it is new again for every
client, a page fetched twice at worst, never lost). The callback's output is grouped, so its
objects reach the engine when the group is complete rather than one by one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from scrapy import Request

from urlseen.integrations.scrapy import FILTERS, UrlseenDupeFilter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

BATCH = 1000


class UrlseenPrefetchMiddleware:
    """Groups a callback's output and checks its requests in one batch (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.batch = max(1, crawler.settings.getint("URLSEEN_PREFETCH_BATCH", BATCH))
        self.start = crawler.settings.getbool("URLSEEN_PREFETCH_START")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlseenPrefetchMiddleware:
        return cls(crawler)

    def _filter(self) -> UrlseenDupeFilter | None:
        df = FILTERS.get(self.crawler)
        return df if df is not None and df.cache() is not None else None

    def _check(self, group: list[Any]) -> list[Any]:
        df = self._filter()
        if df is not None:
            requests = [o for o in group if isinstance(o, Request) and not o.dont_filter]
            if requests:
                df.prefetch(requests)
        return group

    def _groups(self, result: Iterable[Any]) -> Iterator[list[Any]]:
        group: list[Any] = []
        for output in result:
            group.append(output)
            if len(group) >= self.batch:
                yield self._check(group)
                group = []
        if group:
            yield self._check(group)

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Any = None
    ) -> Iterator[Any]:
        for group in self._groups(result):
            yield from group

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        async for output in self._async_groups(result):
            yield output

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for output in self._async_groups(start) if self.start else start:
            yield output

    async def _async_groups(self, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        group: list[Any] = []
        async for output in result:
            group.append(output)
            if len(group) >= self.batch:
                for item in self._check(group):
                    yield item
                group = []
        for item in self._check(group):
            yield item


__all__ = ["UrlseenPrefetchMiddleware"]
