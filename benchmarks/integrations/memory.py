#!/usr/bin/env python3
"""Memory of urlseen in a crawler framework against the framework's own default seen-test.

scrapy-redis (Redis memory, MEMORY USAGE summed over the keys, receipts deleted first: they
expire on their own within two minutes): N requests of real URLs go through

1. scrapy-redis's RFPDupeFilter (its own request_fingerprint, a 40-character SHA1 hex per
   request in one Redis set, `<spider>:dupefilter`);
2. scrapy-redis-bloomfilter's RFPDupeFilter at its defaults (BLOOMFILTER_BIT 30, 6 hashes: a
   2**30-bit string, fixed; 1,000 requests suffice to see its size);
3. UrlseenDupeFilter as scrapy-redis builds it (from_spider; shared exact filter, the default
   under scrapy-redis; fingerprints added in batches, as request_seen would one by one);
4. the same with URLSEEN_FILTER = "bloom" sized for N at error rate 1e-6.

Crawlee (memory of the crawler process: resident set growth, VmRSS after minus before, in a
fresh subprocess per way; and the bytes left on disk): N requests added in batches of 100 (as
enqueue_links adds a page's links), then each fetched and marked handled, through

1. Crawlee's RequestQueue on its MemoryStorageClient;
2. Crawlee's RequestQueue on its FileSystemStorageClient (Crawlee's default);
3. UrlseenRequestManager (exact, persistent: the defaults).

URLs: the first N distinct lines of the dev set (../shared/data/urls-dev.txt.gz, or
$URLSEEN_DEV_URLS). Redis: $URLSEEN_REDIS_URL, else redis://127.0.0.1:6379/15 (keys under a
unique name, deleted at the end).

Usage (from the repository root):

    python benchmarks/integrations/memory.py    # writes key memory of results.json here
    python benchmarks/integrations/memory.py --scrapy-n 20000 --crawlee-n 5000     # quick
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
    for receipt in client.scan_iter(match=pattern + "*receipt*", count=1000):
        client.delete(receipt)
    keys = list(client.scan_iter(match=pattern, count=1000))
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


def scrapy_redis(n: int) -> dict[str, Any]:
    import redis
    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler
    from scrapy_redis.dupefilter import RFPDupeFilter as SetDupeFilter
    from scrapy_redis_bloomfilter.dupefilter import RFPDupeFilter as BitDupeFilter

    from urlseen.integrations.scrapy import UrlseenDupeFilter

    client = redis.Redis.from_url(REDIS_URL)
    requests = [Request(u) for u in urls(n)]
    name = f"bench-{uuid.uuid4().hex[:8]}"
    results: dict[str, Any] = {"requests": len(requests)}
    try:
        own = SetDupeFilter(client, key=f"{name}:dupefilter")
        pipe = client.pipeline(transaction=False)
        for request in requests:
            pipe.sadd(own.key, own.request_fingerprint(request))
        pipe.execute()
        results["scrapy_redis_set"] = redis_bytes(client, f"{name}:dupefilter")
        bits = BitDupeFilter(client, f"{name}:bloomfilter", False, 30, 6)
        for request in requests[:1000]:
            bits.request_seen(request)
        results["scrapy_redis_bloomfilter_default"] = redis_bytes(client, f"{name}:bloomfilter")
        for kind, extra in (("exact", {}), ("bloom", {"URLSEEN_ERROR_RATE": 1e-6})):
            settings = {
                "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                "REDIS_URL": REDIS_URL,
                "URLSEEN_FILTER": kind,
                "URLSEEN_CAPACITY": len(requests),
                **extra,
            }
            crawler = get_crawler(type("S", (Spider,), {"name": f"{name}-{kind}"}), settings)
            crawler.spider = crawler._create_spider()
            df = UrlseenDupeFilter.from_spider(crawler.spider)
            fps = [df.fingerprinter.fingerprint(r) for r in requests]
            for start in range(0, len(fps), 8192):
                df.seen.add_many(fps[start : start + 8192])
            results[f"urlseen_{kind}"] = redis_bytes(client, f"urlseen:{{scrapy:{name}-{kind}*")
            df.clear()
    finally:
        for key in client.scan_iter(match=f"*{name}*", count=1000):
            client.delete(key)
    for way in ("scrapy_redis_set", "urlseen_exact", "urlseen_bloom"):
        results[f"{way}_bytes_per_request"] = round(results[way] / len(requests), 1)
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
    for start in range(0, len(data), 100):
        await manager.add_requests(data[start : start + 100])
    while (request := await manager.fetch_next_request()) is not None:
        await manager.mark_request_as_handled(request)
    after = rss()
    handled = await manager.get_handled_count()
    if way == "urlseen":
        manager.close()
    disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {"way": way, "requests": handled, "rss_growth": after - before, "disk": disk}


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
    parser.add_argument("--scrapy-n", type=int, default=200_000)
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
    results = {"scrapy_redis": scrapy_redis(args.scrapy_n), "crawlee": crawlee(args.crawlee_n)}
    print(json.dumps(results, indent=2))
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(json.dumps(kept | {"memory": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
