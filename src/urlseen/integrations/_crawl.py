"""The crawl behind `urlseen crawl`: one Scrapy spider that follows links within a site, with
a dupefilter chosen by name, and the metrics a URL-seen test is judged by
(pages, new URLs/s, duplicate rate, bits), measured around it.

Kept apart from the CLI so the command stays thin, and apart from scrapy.py so that the
dupefilter module imports nothing but what a Scrapy project needs.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, NoReturn, TextIO
from urllib.parse import urldefrag

import scrapy
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler, CrawlerProcess
from scrapy.dupefilters import RFPDupeFilter
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor
from scrapy.statscollectors import StatsCollector
from twisted.python.failure import Failure

import urlseen
from urlseen.errors import ConfigError, UrlseenError
from urlseen.integrations._stop import ERROR_STAT, LOST, UNCHECKED_STAT

URLSEEN_DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"
SCRAPY_DUPEFILTER = "urlseen.integrations._crawl.MeasuredRFPDupeFilter"
SCHEDULER = "urlseen.integrations.scheduler"
FRONTIER_SETTINGS = {
    "SCHEDULER": f"{SCHEDULER}.UrlseenScheduler",
    "SPIDER_MIDDLEWARES": {f"{SCHEDULER}.FrontierSpiderMiddleware": 0},
    "DOWNLOADER_MIDDLEWARES": {f"{SCHEDULER}.FrontierDownloaderMiddleware": 0},
}


class SiteSpider(Spider):
    """Fetches start_url, then every link whose URL starts with prefix.

    The start request goes through the dupefilter like any other (Scrapy's default start
    requests bypass it): a resumed or shared crawl then never fetches the start page twice.
    """

    name = "urlseen-crawl"

    def __init__(self, start_url: str, prefix: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url, self.prefix = start_url, prefix
        self.links = LinkExtractor()

    async def start(self) -> Any:  # Scrapy >= 2.13
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[Request]:  # Scrapy < 2.13
        yield Request(self.start_url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Request]:
        if not isinstance(response, HtmlResponse):
            return
        for link in self.links.extract_links(response):
            if link.url.startswith(self.prefix):
                yield Request(link.url, callback=self.parse)


class MeasuredRFPDupeFilter(RFPDupeFilter):
    """Scrapy's own RFPDupeFilter, reporting the stats UrlseenDupeFilter reports (new
    requests, memory of its fingerprint set by sys.getsizeof) for a side-by-side run."""

    new = 0
    crawler_stats: StatsCollector | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MeasuredRFPDupeFilter:
        self = super().from_crawler(crawler)
        self.crawler_stats = crawler.stats
        return self

    def request_seen(self, request: Request) -> bool:
        seen = super().request_seen(request)
        self.new += not seen
        return seen

    def close(self, reason: str) -> None:
        fingerprints = self.__dict__.get("_fingerprints", self.__dict__.get("fingerprints", ()))
        nbytes = sys.getsizeof(fingerprints) + sum(sys.getsizeof(f) for f in fingerprints)
        stats = self.crawler_stats
        if stats is not None:
            stats.set_value("urlseen/filter", "scrapy")
            stats.set_value("urlseen/new", self.new)
            stats.set_value("urlseen/filter_bits", nbytes * 8)
        super().close(reason)


@dataclass(frozen=True)
class CrawlReport:
    """Seed B's metrics of one crawl: speed (new URLs/s), duplicate rate, space (bits)."""

    pages: int  # HTTP responses downloaded (redirects included)
    new: int  # requests the filter let through
    duplicates: int  # requests it dropped as seen
    seconds: float
    filter_kind: str
    filter_bits: int
    false_positives: int | None  # new requests dropped as seen (audited runs only)
    finish_reason: str
    pending: int | None = None  # requests left in the frontier (None: Scrapy's scheduler)
    failed: int = 0  # requests whose fetch failed for good in this run (left in the frontier)
    first_error: str = ""  # the first download error, one line

    @property
    def finished(self) -> bool:
        """Nothing left to fetch (as far as the frontier knows)."""
        return self.finish_reason == "finished" and not self.pending

    @property
    def left(self) -> str:
        """What is left to fetch, for the summary ("" when nothing is)."""
        if not self.pending:
            return ""
        first = f", first: {self.first_error}" if self.first_error else ""
        failed = f" ({self.failed:,} failed in this run{first})" if self.failed else ""
        return f"{self.pending:,} requests left to fetch{failed}; run the same command again"

    @property
    def unreachable(self) -> str:
        """The error of a crawl that fetched nothing because its fetches failed, else ""."""
        if self.pages or not self.failed or not self.first_error:
            return ""
        return f"no page fetched: {self.first_error}; run the same command again to retry"

    @property
    def duplicate_rate(self) -> float:
        total = self.new + self.duplicates
        return self.duplicates / total if total else 0.0

    @property
    def new_per_second(self) -> float:
        return self.new / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "duplicate_rate": self.duplicate_rate,
            "new_per_second": self.new_per_second,
            "finished": self.finished,
        }


class DownloadErrors(logging.Filter):
    """Scrapy's "Error downloading" records, counted and kept as one line (the first); with
    quiet, not logged (their traceback says nothing to a crawl's user: the summary counts
    them, and the frontier keeps their requests for the next run)."""

    def __init__(self, quiet: bool) -> None:
        super().__init__()
        self.quiet, self.first, self.count = quiet, "", 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Error downloading"):
            return True
        self.count += 1
        if not self.first:
            error = record.exc_info[1] if record.exc_info else None
            args = record.args if isinstance(record.args, dict) else {}
            url = getattr(args.get("request"), "url", "a request")
            self.first = f"{url}: {error or record.getMessage()}"
        return not self.quiet


def progress_bar(stack: contextlib.ExitStack) -> Callable[[dict[str, Any]], None]:
    """An on_page callback drawing a progress bar on stderr, closed with the stack."""
    from tqdm import tqdm  # type: ignore[import-untyped]

    bar = stack.enter_context(tqdm(unit=" pages", file=sys.stderr, leave=False, mininterval=0.2))

    def on_page(stats: dict[str, Any]) -> None:
        bar.set_postfix(duplicates=stats.get("dupefilter/filtered", 0), refresh=False)
        bar.update(1)

    return on_page


def _raise_ours(exc: BaseException | None) -> NoReturn:
    """Re-raise the urlseen error behind a failed crawl (Scrapy may raise another one while
    it cleans up, with ours as its context), else the failure itself."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, UrlseenError):
        cause = cause.__cause__ or cause.__context__
    raise cause or exc or RuntimeError("the crawl failed")


def _stopped(stats: dict[str, Any], pages: int) -> UrlseenError:
    """The error of a crawl its filter stopped: what failed, and what was done meanwhile."""
    reason = str(stats.get("finish_reason", ""))
    message = (
        f"the crawl stopped ({reason}) after {pages:,} pages: {stats[ERROR_STAT]}; "
        f"{int(stats.get(UNCHECKED_STAT, 0)):,} requests were passed on unchecked after it"
    )
    if reason == LOST:
        return urlseen.FilterLostError(message)
    return UrlseenError(message)


def crawl(
    start_url: str,
    *,
    prefix: str,
    dupefilter: dict[str, Any],
    jobdir: str | None = None,
    max_pages: int = 0,
    concurrency: int = 16,
    delay: float = 0.0,
    fetched: TextIO | None = None,
    on_page: Callable[[dict[str, Any]], None] | None = None,
    log_level: str = "WARNING",
) -> CrawlReport:
    """Crawl in this process (once: Twisted's reactor does not restart) and report.

    dupefilter: {"filter": "scrapy"} for Scrapy's own RFPDupeFilter, else URLSEEN_* values
    by their lower-case names (filter, capacity, error_rate, state, redis_url, redis_name,
    audit).
    """
    settings: dict[str, Any] = {
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "CLOSESPIDER_PAGECOUNT": max_pages,
        "DOWNLOAD_DELAY": delay,
        "LOG_LEVEL": log_level,
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "RETRY_GIVE_UP_LOG_LEVEL": "INFO",  # counted in the summary (DownloadErrors)
        "USER_AGENT": f"urlseen/{urlseen.__version__} (urlseen crawl)",
    }
    if scrapy.version_info < (2, 12):  # the fingerprints of Scrapy >= 2.7, without a warning
        settings["REQUEST_FINGERPRINTER_IMPLEMENTATION"] = "2.7"
    if jobdir is not None:
        settings["JOBDIR"] = jobdir
    options = dict(dupefilter)
    if options.get("filter") == "scrapy":
        settings["DUPEFILTER_CLASS"] = SCRAPY_DUPEFILTER
    else:
        settings["DUPEFILTER_CLASS"] = URLSEEN_DUPEFILTER
        settings.update(FRONTIER_SETTINGS)
        if options.get("lease") is not None:  # with --redis: the frontier's leases too
            settings["URLSEEN_FRONTIER_LEASE"] = options["lease"]
        for name, value in options.items():
            if value is not None:
                settings[f"URLSEEN_{name.upper()}"] = value
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SiteSpider)
    clock: dict[str, float] = {}
    failures: list[Failure] = []
    pages = [0]

    def opened() -> None:
        clock["start"] = time.perf_counter()

    def closed() -> None:
        clock["end"] = time.perf_counter()

    def downloaded(response: Response, request: Request) -> None:
        pages[0] += 1
        if fetched is not None:
            fetched.write(urldefrag(request.url)[0] + "\n")  # the fragment is never sent
            fetched.flush()  # a killed crawl's record is complete up to its last page
        if on_page is not None:
            on_page(crawler.stats.get_stats() if crawler.stats is not None else {})

    crawler.signals.connect(opened, signal=signals.spider_opened)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    crawler.signals.connect(downloaded, signal=signals.response_downloaded)
    errors = DownloadErrors(quiet=log_level != "INFO")
    scraper_log = logging.getLogger("scrapy.core.scraper")
    scraper_log.addFilter(errors)
    try:
        deferred = process.crawl(crawler, start_url=start_url, prefix=prefix)
        deferred.addErrback(failures.append)
        process.start()
    finally:
        scraper_log.removeFilter(errors)
    if failures:
        _raise_ours(failures[0].value)
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    if "urlseen/filter" not in stats:
        raise ConfigError("the crawl did not start (see the log above)")
    if ERROR_STAT in stats:
        raise _stopped(stats, pages[0])
    fps = stats.get("urlseen/false_positives")
    pending = stats.get("urlseen/frontier/pending")
    return CrawlReport(
        pages=pages[0],
        new=int(stats.get("urlseen/new", 0)),
        duplicates=int(stats.get("dupefilter/filtered", 0)),
        seconds=clock.get("end", 0.0) - clock.get("start", 0.0),
        filter_kind=str(stats["urlseen/filter"]),
        filter_bits=int(stats.get("urlseen/filter_bits", 0)),
        false_positives=None if fps is None else int(fps),
        finish_reason=str(stats.get("finish_reason", "")),
        pending=None if pending is None else int(pending),
        failed=int(stats.get("urlseen/frontier/failed", 0)),
        first_error=errors.first,
    )
