"""The prefetching spider middleware and the dupefilter's answers given ahead: a callback's
requests checked in one batch, each answer handed to its request by request_seen, dont_filter
left alone, and a request answered new that never reached the scheduler forgotten again (new
for every client: never lost). Real Scrapy objects, real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("scrapy")
from scrapy import Request, Spider
from scrapy.core.scheduler import Scheduler
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from urlseen import kinds
from urlseen.integrations.scrapy_prefetch import UrlseenPrefetchMiddleware

DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"


class _Spider(Spider):
    name = "prefetch-spider"


def _crawl(redis_url: str, name: str, **settings: Any) -> tuple[Scheduler, Any]:
    crawler = get_crawler(
        _Spider,
        settings_dict={
            "DUPEFILTER_CLASS": DUPEFILTER,
            "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",
            "URLSEEN_REDIS_URL": redis_url,
            "URLSEEN_REDIS_NAME": name,
            "URLSEEN_CAPACITY": 10_000,
            **settings,
        },
    )
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler, crawler


def _output(urls: list[str]) -> list[Any]:
    return [{"item": 1}, *(Request(u) for u in urls), Request(urls[0], dont_filter=True)]


def test_a_callbacks_requests_cost_one_round_trip(redis_url: str, redis_name: str) -> None:
    scheduler, crawler = _crawl(redis_url, redis_name, URLSEEN_PREFETCH_BATCH=4)
    middleware = UrlseenPrefetchMiddleware.from_crawler(crawler)
    response = HtmlResponse("http://a.test/", body=b"")
    urls = [f"http://a.test/{i}" for i in range(10)] + ["http://a.test/1"]
    cache = scheduler.df.cache()
    assert cache is not None
    out = list(middleware.process_spider_output(response, iter(_output(urls))))
    assert len(out) == 13 and isinstance(out[0], dict) and out[-1].dont_filter
    assert cache.batches == 3  # 12 requests checked in groups of 4 objects; dont_filter not
    taken = [scheduler.enqueue_request(r) for r in out[1:]]
    assert taken == [True] * 10 + [False, True]  # the repeat dropped; dont_filter passes
    assert cache.batches == 3  # every answer was there already
    scheduler.close("finished")
    assert crawler.stats.get_value("urlseen/new") == 10
    assert crawler.stats.get_value("urlseen/redis_batches") == 3


def test_the_async_output_and_the_start_are_grouped_too(redis_url: str, redis_name: str) -> None:
    scheduler, crawler = _crawl(redis_url, redis_name, URLSEEN_PREFETCH_START=True)
    middleware = UrlseenPrefetchMiddleware.from_crawler(crawler)
    urls = [f"http://a.test/{i}" for i in range(5)]

    async def source() -> Any:
        for obj in _output(urls):
            yield obj

    async def collect(method: Any, *args: Any) -> list[Any]:
        return [o async for o in method(*args)]

    cache = scheduler.df.cache()
    assert cache is not None
    start = asyncio.run(collect(middleware.process_start, source()))
    assert cache.batches == 1 and len(start) == 7
    response = HtmlResponse("http://a.test/", body=b"")
    again = asyncio.run(collect(middleware.process_spider_output_async, response, source()))
    assert cache.batches == 1 and len(again) == 7  # known seen: no round trip
    assert [scheduler.enqueue_request(r) for r in start[1:]] == [True] * 5 + [True]
    scheduler.close("finished")


def test_a_request_checked_ahead_and_never_scheduled_is_new_again(
    redis_url: str, redis_name: str
) -> None:
    scheduler, _ = _crawl(redis_url, redis_name)
    df = scheduler.df
    kept, dropped = Request("http://a.test/kept"), Request("http://a.test/dropped")
    df.prefetch([kept, dropped])
    assert scheduler.enqueue_request(kept)  # dropped never reaches the scheduler
    assert df.release(older_than=60) == 0  # not late yet
    assert df.release() == 1
    other = kinds.open_filter("exact", redis=redis_url, name=redis_name)
    try:
        fps = [df.fingerprinter.fingerprint(r) for r in (kept, dropped)]
        assert other.add_many(fps) == [False, True]  # another client gets it: not lost
    finally:
        other.close()
    scheduler.close("finished")


def test_nothing_is_checked_ahead_without_a_memory_or_for_a_bloom_filter(
    redis_url: str, redis_name: str
) -> None:
    for n, settings in enumerate(({"URLSEEN_SEEN_CACHE": 0}, {"URLSEEN_FILTER": "bloom"})):
        scheduler, crawler = _crawl(redis_url, f"{redis_name}-{n}", **settings)
        assert scheduler.df.cache() is None
        middleware = UrlseenPrefetchMiddleware.from_crawler(crawler)
        response = HtmlResponse("http://a.test/", body=b"")
        out = list(middleware.process_spider_output(response, iter(_output(["http://a.test/"]))))
        assert [scheduler.enqueue_request(r) for r in out[1:]] == [True, True]
        scheduler.close("finished")


def test_the_start_passes_ungrouped_unless_asked(redis_url: str, redis_name: str) -> None:
    """A start may wait between its requests (polling a queue): grouping would hold back the
    first ones, so it is grouped only with URLSEEN_PREFETCH_START."""
    scheduler, crawler = _crawl(redis_url, redis_name)
    middleware = UrlseenPrefetchMiddleware.from_crawler(crawler)
    first: list[Any] = []

    async def start() -> Any:
        yield Request("http://a.test/first")
        assert first, "the first start request was held back"
        yield Request("http://a.test/second")

    async def consume() -> None:
        async for request in middleware.process_start(start()):
            first.append(request)

    asyncio.run(consume())
    cache = scheduler.df.cache()
    assert len(first) == 2 and cache is not None and cache.batches == 0
    scheduler.close("finished")


def test_answers_checked_ahead_stay_claimed_until_their_requests_take_them(
    redis_url: str, redis_name: str
) -> None:
    """A process that dies between the check and the scheduler leaves the requests claimed
    (another client takes them after the lease), not acknowledged (lost)."""
    scheduler, _ = _crawl(redis_url, redis_name)
    df = scheduler.df
    requests = [Request(f"http://a.test/{i}") for i in range(3)]
    df.prefetch(requests)
    library = df.handle.seen.library
    assert library.claims_held() == 3
    df.handle.checkpoint()  # the timer's acknowledge waits for them too
    assert library.claims_held() == 3
    assert scheduler.enqueue_request(requests[0]) and scheduler.enqueue_request(requests[1])
    assert library.claims_held() == 3
    assert scheduler.enqueue_request(requests[2])  # the last one: all acknowledged
    assert library.claims_held() == 0
    scheduler.close("finished")
