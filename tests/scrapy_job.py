"""One real Scrapy crawl in this process (Twisted's reactor runs once per process), for the
tests that run crawls in subprocesses: `python tests/scrapy_job.py '<json>'`.

The JSON holds: start (URL), prefix (links followed), name (the spider's: under scrapy-redis its
keys start with it), fetched (a file: one line per downloaded URL, written as it happens),
stats (a file: the crawl's stats as JSON, written at the end), settings (Scrapy settings) and
idle (seconds without activity before an idle spider may close: a fleet's processes wait for
one another's links, as scrapy-redis's RedisSpider does; 0: close when idle).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag

from scrapy import Request, signals
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response

from urlseen.integrations._crawl import SiteSpider


class IdleWaitingSpider(SiteSpider):
    """urlseen crawl's spider (start, then every link under prefix, the start request through
    the dupefilter) that stays open while idle until `idle` seconds pass without activity."""

    def __init__(self, start_url: str, prefix: str, idle: float = 0, **kwargs: Any) -> None:
        super().__init__(start_url, prefix, **kwargs)
        self.idle = idle
        self.active = time.monotonic()

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> IdleWaitingSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.touch, signal=signals.response_received)
        crawler.signals.connect(spider.touch, signal=signals.request_scheduled)
        crawler.signals.connect(spider.on_idle, signal=signals.spider_idle)
        return spider

    def touch(self) -> None:
        self.active = time.monotonic()

    def on_idle(self) -> None:
        if time.monotonic() - self.active < self.idle:
            raise DontCloseSpider


class BrokenQueue:
    """A priority queue that cannot be built (SCHEDULER_PRIORITY_QUEUE): Scrapy's scheduler
    then fails in open(), and its close() fails before it reaches the dupefilter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("broken on purpose")


def main(config: dict[str, Any]) -> None:
    settings = {
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "CONCURRENT_REQUESTS": 8,
        **config.get("settings", {}),
    }
    process = CrawlerProcess(settings)
    spider = type("JobSpider", (IdleWaitingSpider,), {"name": config["name"]})
    crawler = process.create_crawler(spider)
    fetched = open(config["fetched"], "a", buffering=1)  # noqa: SIM115 - open for the crawl

    def downloaded(response: Response, request: Request) -> None:
        fetched.write(urldefrag(request.url)[0] + "\n")  # the fragment is never sent

    crawler.signals.connect(downloaded, signal=signals.response_downloaded)
    process.crawl(
        crawler, start_url=config["start"], prefix=config["prefix"], idle=config.get("idle", 0)
    )
    process.start()
    fetched.close()
    # Checked while the process lives on (as a service running crawls, or a test suite, does).
    left = list(Path(tempfile.gettempdir()).glob("urlseen-*"))
    print(f"temporary folders left after the crawl: {len(left)}", flush=True)
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    with open(config["stats"], "w") as out:
        json.dump(stats, out, default=str)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
