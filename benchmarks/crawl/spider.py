"""One crawl of the generated site in this process, for run.py: a spider that follows every
link, under the scheduler and dupefilter of one way; writes the crawl's stats and its Redis
round trips as JSON.

    python spider.py WAY START_URL REDIS_URL OUT.json [--concurrency 16]

Round trips are counted in the client: every command or pipeline redis-py sends is one, and is
put down to the dupefilter ("filter": the call came through scrapy_redis/dupefilter.py or
urlseen), the scheduler's queue ("queue": the rest of scrapy_redis) or "other". run.py checks
the total against the server's own count (INFO stats total_reads_processed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis.connection
import scrapy
from scrapy.crawler import CrawlerProcess

PREFETCH = "urlseen.integrations.scrapy_prefetch.UrlseenPrefetchMiddleware"
WAYS: dict[str, dict[str, Any]] = {
    # scrapy-redis's scheduler with its own dupefilter: a SADD round trip per request
    "scrapy-redis": {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    },
    # scrapy-redis's scheduler with urlseen's shared filter (README: scrapy-redis section)
    "scrapy-redis+urlseen": {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "urlseen.integrations.scrapy.UrlseenDupeFilter",
    },
    # Scrapy's own scheduler (queue in memory) with urlseen's filter shared through Redis
    "scrapy+urlseen-redis": {
        "DUPEFILTER_CLASS": "urlseen.integrations.scrapy.UrlseenDupeFilter",
    },
    # the two urlseen ways with the prefetch middleware: a callback's requests in one round trip
    "scrapy-redis+urlseen+prefetch": {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "urlseen.integrations.scrapy.UrlseenDupeFilter",
        "SPIDER_MIDDLEWARES": {PREFETCH: 10},
    },
    "scrapy+urlseen-redis+prefetch": {
        "DUPEFILTER_CLASS": "urlseen.integrations.scrapy.UrlseenDupeFilter",
        "SPIDER_MIDDLEWARES": {PREFETCH: 10},
    },
    # Scrapy's defaults, no Redis at all: the crawl's ceiling on this machine
    "scrapy": {},
}
REDIS_WAYS = tuple(way for way in WAYS if way != "scrapy")

trips: Counter[str] = Counter()


def _origin() -> str:
    """Who sends the command being sent: the dupefilter, the scheduler's queue, or other."""
    frame = sys._getframe(2)
    depth = 0
    while frame is not None and depth < 40:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("urlseen.") or module == "scrapy_redis.dupefilter":
            return "filter"
        if module.startswith("scrapy_redis."):
            return "queue"
        frame = frame.f_back  # type: ignore[assignment]
        depth += 1
    return "other"


def _count_round_trips() -> None:
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        trips[_origin()] += 1
        send(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


class SiteSpider(scrapy.Spider):
    """Follows every link on every page; keeps the distinct page URLs it fetched."""

    name = "site"

    def __init__(self, start: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.pages: set[str] = set()
        self.fetches = 0
        self.yielded = 0  # requests handed to the scheduler: each one the dupefilter checks

    def parse(self, response: Any) -> Any:
        self.fetches += 1
        self.pages.add(response.url)
        for href in response.css("a::attr(href)").getall():
            self.yielded += 1
            yield response.follow(href)


def settings(way: str, redis_url: str, concurrency: int) -> dict[str, Any]:
    """The crawl's settings: the way's scheduler and dupefilter, the network's concurrency."""
    common = {
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "LOGSTATS_INTERVAL": 10,
        "REDIS_URL": redis_url,
        "SCHEDULER_PERSIST": False,  # scrapy-redis: delete its keys at close
        "SCHEDULER_FLUSH_ON_START": True,
        "URLSEEN_REDIS_URL": redis_url if way.startswith("scrapy+urlseen-redis") else None,
    }
    return common | WAYS[way]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("way", choices=list(WAYS))
    parser.add_argument("start")
    parser.add_argument("redis_url")
    parser.add_argument("out", type=Path)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    _count_round_trips()
    process = CrawlerProcess(settings(args.way, args.redis_url, args.concurrency))
    crawler = process.create_crawler(SiteSpider)
    began = time.perf_counter()
    cpu = time.process_time()
    process.crawl(crawler, start=args.start)
    process.start()
    wall = time.perf_counter() - began
    stats = crawler.stats.get_stats()  # type: ignore[union-attr]
    spider = crawler.spider
    payload = {
        "way": args.way,
        "wall_seconds": wall,
        "crawler_cpu_seconds": time.process_time() - cpu,
        "pages": len(spider.pages),  # type: ignore[union-attr]
        "fetches": spider.fetches,  # type: ignore[union-attr]
        "checked": spider.yielded,  # type: ignore[union-attr]
        "round_trips": dict(trips),
        "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float, str))},
        "elapsed_seconds": stats.get("elapsed_time_seconds"),
        "finish_reason": stats.get("finish_reason"),
    }
    args.out.write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
