"""One real Crawlee crawl (ParselCrawler) in this process, for the tests that run crawls in
subprocesses: `python tests/crawlee_job.py '<json>'`.

The JSON holds: start (URL), prefix (links followed), fetched (a file: one line per handled
URL, written as it happens), manager ("crawlee": Crawlee's own request queue; "urlseen": our
request manager, with `options` for UrlseenRequestManager and `state`), max_requests (stop after
so many; 0: no limit), retries (Crawlee's max_request_retries, default 1) and storage (a folder:
Crawlee's storages, its request queue included, persist there and are kept between runs;
default: they stay in memory).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag

from crawlee import ConcurrencySettings, service_locator
from crawlee.configuration import Configuration
from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
from crawlee.storage_clients import FileSystemStorageClient, MemoryStorageClient

from urlseen.integrations.crawlee import UrlseenRequestManager


async def crawl(config: dict[str, Any]) -> None:
    if config.get("storage"):
        service_locator.set_configuration(
            Configuration(storage_dir=config["storage"], purge_on_start=False)
        )
        service_locator.set_storage_client(FileSystemStorageClient())
    else:
        service_locator.set_storage_client(MemoryStorageClient())
    manager = None
    kwargs: dict[str, Any] = {}
    if config["manager"] == "urlseen":
        manager = UrlseenRequestManager(config.get("state"), **config.get("options", {}))
        kwargs["request_manager"] = manager
    if config.get("max_requests"):
        kwargs["max_requests_per_crawl"] = config["max_requests"]
    crawler = ParselCrawler(
        concurrency_settings=ConcurrencySettings(desired_concurrency=4, max_concurrency=8),
        max_request_retries=config.get("retries", 1),
        **kwargs,
    )
    fetched = open(config["fetched"], "a", buffering=1)  # noqa: SIM115 - open for the crawl
    include = [re.compile(re.escape(config["prefix"]) + ".*")]

    @crawler.router.default_handler
    async def handler(context: ParselCrawlingContext) -> None:
        fetched.write(urldefrag(context.request.url)[0] + "\n")
        await context.enqueue_links(include=include)  # type: ignore[arg-type]

    await crawler.run([config["start"]])
    fetched.close()
    if manager is not None:
        manager.close()
    left = list(Path(tempfile.gettempdir()).glob("urlseen-*"))
    print(f"temporary folders left after the crawl: {len(left)}", flush=True)


if __name__ == "__main__":
    asyncio.run(crawl(json.loads(sys.argv[1])))
