"""Forget on failure: UrlseenDupeFilter forgets a request whose download failed for good (as
UrlseenScheduler counts failures), or one a callback marks (meta urlseen_forget), so a later
run fetches it again. README: "Expiring seen requests, forgetting failed ones"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError, HttpErrorMiddleware

from urlseen.integrations.scrapy import FILTERS, logger

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

FORGET = "urlseen_forget"  # the request.meta key a callback sets to have its request forgotten


class ForgetFailedDownloads:
    """Downloader middleware (priority 0): forgets a request whose download raised an error
    RetryMiddleware did not retry (IgnoreRequest, offsite or robots.txt, is no failure)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        scheduler = crawler.settings.get("SCHEDULER")
        path = scheduler if isinstance(scheduler, str) else getattr(scheduler, "__name__", "")
        self.frontier_keeps_failures = str(path).endswith("UrlseenScheduler")
        self._warned = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Any:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, IgnoreRequest):
            self.forget(request, "failed")

    def forget(self, request: Request, why: str) -> None:
        """Forget request in the crawl's UrlseenDupeFilter; stats urlseen/forgotten/<why>."""
        if why == "failed" and self.frontier_keeps_failures:
            return  # the frontier fetches it again in the next run
        df = FILTERS.get(self.crawler)  # the crawl's UrlseenDupeFilter registers itself
        if df is None:
            if not self._warned:
                self._warned = True
                logger.warning("urlseen forget: DUPEFILTER_CLASS is not UrlseenDupeFilter")
            return
        if df.forget(request, f"a request {why}") and self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"urlseen/forgotten/{why}")


class ForgetFailedResponses(ForgetFailedDownloads):
    """Spider middleware (priority 0): once a callback has yielded all it yields, forgets its
    request if marked, or if its status is one of RETRY_HTTP_CODES the spider does not handle
    (404, 410: the site's answer, stay seen)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.httperror = HttpErrorMiddleware.from_crawler(crawler)
        self.retry_codes = {int(c) for c in crawler.settings.getlist("RETRY_HTTP_CODES")}

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        yield from result
        self._done(response)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        async for output in result:
            yield output
        self._done(response)

    def _done(self, response: Response) -> None:
        if response.request is None:
            return
        if response.meta.get(FORGET):
            self.forget(response.request, "marked")
        elif response.status in self.retry_codes:
            try:
                self.httperror.process_spider_input(response)
            except HttpError:
                self.forget(response.request, "failed")


__all__ = ["FORGET", "ForgetFailedDownloads", "ForgetFailedResponses"]
