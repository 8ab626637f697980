"""Forget on failure: a request whose download failed for good, or one a callback marks, is
forgotten by UrlseenDupeFilter, so a later run (or the same crawl, when a page links to it
again) fetches it again instead of skipping it as seen forever.

    DOWNLOADER_MIDDLEWARES = {"urlseen.integrations.scrapy_forget.ForgetFailedDownloads": 0}
    SPIDER_MIDDLEWARES = {"urlseen.integrations.scrapy_forget.ForgetFailedResponses": 0}

"Failed for good" is what urlseen's UrlseenScheduler counts as failed (integrations/
scheduler.py): an error RetryMiddleware gave up on (the downloader middleware, at priority 0,
sees a download error only after RetryMiddleware, at 550, declined to retry it), or a status of
RETRY_HTTP_CODES the spider does not handle (the spider middleware asks HttpErrorMiddleware).
IgnoreRequest (offsite, robots.txt) and other statuses (404, 410: the site's answer) are not
failures. A callback marks a request to forget with `response.meta["urlseen_forget"] = True`
(the request's meta); a request yielded with that meta is forgotten once its response is
handled. Under UrlseenScheduler a failed request already stays in the frontier for the next
run, so only marked requests are forgotten there (forgetting a failure too would fetch it
twice). The exact kinds forget exactly; a Bloom filter cannot delete (logged once).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError, HttpErrorMiddleware

from urlseen.integrations.scrapy import UrlseenDupeFilter, logger

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

FORGET = "urlseen_forget"  # request.meta key a callback sets to have the request forgotten


class _Forgetter:
    """Finds the crawl's UrlseenDupeFilter and forgets requests in it, counting them
    (urlseen/forgotten/failed, urlseen/forgotten/marked)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        scheduler = crawler.settings.get("SCHEDULER")
        path = scheduler if isinstance(scheduler, str) else getattr(scheduler, "__name__", "")
        self.frontier_keeps_failures = str(path).endswith("UrlseenScheduler")
        self._warned = False

    def forget(self, request: Request, why: str) -> None:
        if why == "failed" and self.frontier_keeps_failures:
            return  # the frontier fetches it again in the next run
        df = self._dupefilter()
        if df is None:
            return
        if df.forget(request, f"a request {why}") and self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"urlseen/forgotten/{why}")
        logger.debug("urlseen forgot %s (%s)", request, why)

    def _dupefilter(self) -> UrlseenDupeFilter | None:
        slot = getattr(getattr(self.crawler, "engine", None), "_slot", None)
        df = getattr(getattr(slot, "scheduler", None), "df", None)
        if isinstance(df, UrlseenDupeFilter):
            return df
        if not self._warned:
            self._warned = True
            logger.warning(
                "urlseen forget middleware: the crawl's dupefilter is %s, not UrlseenDupeFilter "
                "(DUPEFILTER_CLASS): nothing is forgotten",
                type(df).__name__,
            )
        return None


class ForgetFailedDownloads:
    """Downloader middleware (priority below RetryMiddleware's 550, e.g. 0): forgets a request
    whose download raised an error RetryMiddleware did not retry."""

    def __init__(self, crawler: Crawler) -> None:
        self.forgetter = _Forgetter(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ForgetFailedDownloads:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, IgnoreRequest):
            self.forgetter.forget(request, "failed")


class ForgetFailedResponses:
    """Spider middleware (e.g. priority 0): once a response's callback has yielded all it
    yields, forgets its request if the callback marked it (meta urlseen_forget) or if its
    status is one of RETRY_HTTP_CODES that the spider does not handle."""

    def __init__(self, crawler: Crawler) -> None:
        self.forgetter = _Forgetter(crawler)
        self.httperror = HttpErrorMiddleware.from_crawler(crawler)
        self.retry_codes = {int(c) for c in crawler.settings.getlist("RETRY_HTTP_CODES")}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ForgetFailedResponses:
        return cls(crawler)

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
        request = response.request
        if request is None:
            return
        if response.meta.get(FORGET):
            self.forgetter.forget(request, "marked")
        elif response.status in self.retry_codes and self._unhandled(response):
            self.forgetter.forget(request, "failed")

    def _unhandled(self, response: Response) -> bool:
        try:
            self.httperror.process_spider_input(response)
        except HttpError:
            return True
        return False


__all__ = ["FORGET", "ForgetFailedDownloads", "ForgetFailedResponses"]
