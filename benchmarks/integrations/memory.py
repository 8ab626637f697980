#!/usr/bin/env python3
"""Memory of urlseen in a crawler framework against the framework's own default seen-test.

scrapy-redis, as a crawl meets it (Redis memory of the dupefilter's keys, MEMORY USAGE summed
over every key it has, nothing deleted before measuring): the dev set's lines in order, as a
crawl's links come (repeats included), until N distinct URLs, each enqueued by scrapy-redis's
Scheduler one request at a time (enqueue_request: its dupefilter's request_seen, then the
queue), through

1. scrapy-redis's RFPDupeFilter (its own request_fingerprint, a 40-character SHA1 hex per
   request in one Redis set, `<spider>:dupefilter`);
2. UrlseenDupeFilter as scrapy-redis builds it (from_spider; the shared exact filter, the
   default under scrapy-redis), at its defaults (capacity 10M: what a crawl that sets nothing
   gets);
3. the same with URLSEEN_FILTER = "bloom" (its defaults too).

The dupefilter's memory is sampled every N/50 requests and after the last: its peak, and at
rest (after the crawl, its queue drained, with no key deleted and nothing waited for); the
samples are kept (results.json: "samples", requests checked, distinct enqueued, bytes) for
benchmarks/tools/plots.py's memory-as-a-crawl-grows picture. Each
N is its own crawl (--crawl-n, default 527 and 20,000: the size of the python3-doc crawl of
tests/test_scrapy_redis.py, and a larger one). scrapy-redis-bloomfilter's default filter is a
2**30-bit string whatever the crawl (1,000 requests of its own RFPDupeFilter show its size).

Crawlee (memory of the crawler process: resident set growth, VmRSS after minus before, in a
fresh subprocess per way; and the bytes left on disk): N requests added in batches of 100 (as
enqueue_links adds a page's links), then each fetched and marked handled, through

1. Crawlee's RequestQueue on its MemoryStorageClient;
2. Crawlee's RequestQueue on its FileSystemStorageClient (Crawlee's default);
3. UrlseenRequestManager (exact, persistent: the defaults).

The resident set is also sampled every ~N/50 requests added ("samples": added, growth).

URLs: the first N distinct lines of the dev set (../shared/data/urls-dev.txt.gz, or
$URLSEEN_DEV_URLS). Redis: $URLSEEN_REDIS_URL, else redis://127.0.0.1:6379/15 (keys under a
unique name, deleted at the end).

Usage (from the repository root):

    python benchmarks/integrations/memory.py    # writes key memory of results.json here
    python benchmarks/integrations/memory.py --crawl-n 527 --crawlee-n 5000     # quick
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEV_URLS = Path(os.environ.get("URLSEEN_DEV_URLS", ROOT.parent / "shared/data/urls-dev.txt.gz"))
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "memory"
REDIS_URL = os.environ.get("URLSEEN_REDIS_URL", "redis://127.0.0.1:6379/15")


def urls(n: int) -> list[str]:
    seen: dict[str, None] = {}
    with gzip.open(DEV_URLS, "rt", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            url = line.strip()
            if url.startswith(("http://", "https://")):
                seen[url] = None
                if len(seen) == n:
                    break
    return list(seen)


def redis_bytes(client: Any, pattern: str) -> int:
    """MEMORY USAGE summed over every key matching pattern (none deleted)."""
    keys = list(client.scan_iter(match=pattern, count=1000))
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


def crawl_lines(n: int) -> list[str]:
    """The dev set's http(s) lines in order, repeats kept, until n distinct."""
    out: list[str] = []
    seen: set[str] = set()
    with gzip.open(DEV_URLS, "rt", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            url = line.strip()
            if url.startswith(("http://", "https://")):
                out.append(url)
                seen.add(url)
                if len(seen) == n:
                    break
    return out


def crawl(client: Any, way: str, name: str, lines: list[str]) -> dict[str, Any]:
    """One crawl through scrapy-redis's scheduler with `way`'s dupefilter: the dupefilter's
    Redis memory at its peak and at rest."""
    from scrapy import Request, Spider
    from scrapy.utils.misc import load_object
    from scrapy.utils.test import get_crawler

    settings: dict[str, Any] = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "REDIS_URL": REDIS_URL,
        "SCHEDULER_PERSIST": True,  # the filter stays after the crawl: measured at rest
    }
    if way == "scrapy_redis_set":
        settings["DUPEFILTER_CLASS"] = "scrapy_redis.dupefilter.RFPDupeFilter"
        pattern = f"{name}:dupefilter"
    else:
        settings["DUPEFILTER_CLASS"] = "urlseen.integrations.scrapy.UrlseenDupeFilter"
        settings["URLSEEN_FILTER"] = way.removeprefix("urlseen_")
        pattern = f"urlseen:{{*{name}*"  # its name holds the spider's, escaped
    crawler = get_crawler(type("S", (Spider,), {"name": name}), settings)
    crawler.spider = crawler._create_spider()
    scheduler = load_object(settings["SCHEDULER"]).from_crawler(crawler)
    scheduler.open(crawler.spider)
    every = max(1, len(lines) // 50)
    enqueued = 0
    samples: list[tuple[int, int, int]] = []  # (requests checked, distinct enqueued, bytes)
    for i, url in enumerate(lines, 1):
        enqueued += scheduler.enqueue_request(Request(url))
        if i % every == 0:
            samples.append((i, enqueued, redis_bytes(client, pattern)))
    while scheduler.next_request() is not None:  # the crawl fetches its queue
        pass
    scheduler.close("finished")
    rest = redis_bytes(client, pattern)
    peak = max([rest] + [b for _, _, b in samples])
    return {"enqueued": enqueued, "peak": peak, "rest": rest, "samples": samples}


def scrapy_redis(sizes: list[int]) -> dict[str, Any]:
    import redis
    from scrapy import Request
    from scrapy_redis_bloomfilter.dupefilter import RFPDupeFilter as BitDupeFilter

    client = redis.Redis.from_url(REDIS_URL)
    results: dict[str, Any] = {"crawls": []}
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        bits = BitDupeFilter(client, f"{prefix}:bloomfilter", False, 30, 6)
        for url in urls(1000):
            bits.request_seen(Request(url))
        results["scrapy_redis_bloomfilter_default"] = redis_bytes(client, f"{prefix}:bloomfilter")
        for n in sizes:
            lines = crawl_lines(n)
            one: dict[str, Any] = {"distinct": n, "requests": len(lines)}
            for way in ("scrapy_redis_set", "urlseen_exact", "urlseen_bloom"):
                # enqueued: distinct requests to Scrapy (its fingerprint canonicalizes URLs)
                one[way] = crawl(client, way, f"{prefix}-{n}-{way}", lines)
            base = one["scrapy_redis_set"]
            for way in ("urlseen_exact", "urlseen_bloom"):
                for when in ("peak", "rest"):
                    one[way][f"{when}_vs_scrapy_redis"] = round(one[way][when] / base[when], 3)
            for way in ("scrapy_redis_set", "urlseen_exact", "urlseen_bloom"):
                one[way]["rest_bytes_per_url"] = round(one[way]["rest"] / one[way]["enqueued"], 1)
            results["crawls"].append(one)
    finally:
        for key in client.scan_iter(match=f"*{prefix}*", count=1000):
            client.delete(key)
    return results


# -- Crawlee: one way per fresh process ------------------------------------------------------


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def crawlee_way(way: str, n: int, folder: Path) -> dict[str, Any]:
    from crawlee import Request, service_locator
    from crawlee.configuration import Configuration
    from crawlee.storage_clients import FileSystemStorageClient, MemoryStorageClient
    from crawlee.storages import RequestQueue

    from urlseen.integrations.crawlee import UrlseenRequestManager

    data = urls(n)
    service_locator.set_configuration(Configuration(storage_dir=str(folder)))
    requests = [Request.from_url(u) for u in data[:10]]  # warm up imports and pydantic
    del requests
    before = rss()
    if way == "urlseen":
        manager: Any = UrlseenRequestManager(folder / "urlseen", capacity=n)
    else:
        client = MemoryStorageClient() if way == "crawlee-memory" else FileSystemStorageClient()
        manager = await RequestQueue.open(storage_client=client)
    every = max(100, len(data) // 50 // 100 * 100)
    samples: list[tuple[int, int]] = []  # (requests added, resident set growth)
    for start in range(0, len(data), 100):
        await manager.add_requests(data[start : start + 100])
        if (start + 100) % every == 0:
            samples.append((min(start + 100, len(data)), rss() - before))
    while (request := await manager.fetch_next_request()) is not None:
        await manager.mark_request_as_handled(request)
    after = rss()
    handled = await manager.get_handled_count()
    if way == "urlseen":
        manager.close()
    disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {
        "way": way,
        "requests": handled,
        "rss_growth": after - before,
        "disk": disk,
        "samples": samples,
    }


def crawlee(n: int) -> dict[str, Any]:
    results: dict[str, Any] = {"requests": n}
    for way in ("crawlee-memory", "crawlee-filesystem", "urlseen"):
        command = [sys.executable, __file__, "--crawlee-way", way, "--crawlee-n", str(n)]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        one = json.loads(out.strip().splitlines()[-1])
        results[way] = one
        one["rss_bytes_per_request"] = round(one["rss_growth"] / max(1, one["requests"]), 1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crawl-n", default="527,20000", help="distinct URLs per crawl")
    parser.add_argument("--crawlee-n", type=int, default=50_000)
    parser.add_argument("--crawlee-way", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.crawlee_way:
        with tempfile.TemporaryDirectory() as folder:
            print(
                json.dumps(asyncio.run(crawlee_way(args.crawlee_way, args.crawlee_n, Path(folder))))
            )
        return
    sizes = [int(n) for n in args.crawl_n.split(",")]
    stored = json.loads(RESULTS.read_text())["memory"] if RESULTS.exists() else {}
    results = stored | {"scrapy_redis_crawl": scrapy_redis(sizes)}
    if args.crawlee_n:  # --crawlee-n 0: the Crawlee part as results.json holds it
        results["crawlee"] = crawlee(args.crawlee_n)
    print(json.dumps(results, indent=2))
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(json.dumps(kept | {"memory": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
