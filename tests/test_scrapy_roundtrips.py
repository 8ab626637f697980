"""Round trips to Redis per request a shared dupefilter checks, in real Scrapy crawls of the
generated loopback site: the memory of seen answers (shared/seen_cache.py) and the prefetching
middleware (integrations/scrapy_prefetch.py) against the filter asked once per request.

Round trips are counted by the server: INFO stats total_reads_processed (one read event per
request a client sends and waits on), over the whole crawl, on a private redis-server that only
this test's crawls use (Scrapy's own scheduler keeps its queue in memory; the suite's other
processes share the common server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapy")
import redis

from urlseen.canonical import canonicalize

JOB = Path(__file__).with_name("scrapy_job.py")
DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"
PREFETCH = "urlseen.integrations.scrapy_prefetch.UrlseenPrefetchMiddleware"
# 500 pages: ~5,900 requests checked, where the target is for >= 5,000
PAGES = int(os.environ.get("URLSEEN_ROUNDTRIP_PAGES", "500"))


def _reads(client: redis.Redis) -> int:
    return int(client.info("stats")["total_reads_processed"])


def _crawl(site: Any, tmp: Path, label: str, settings: dict[str, Any]) -> tuple[list[str], dict]:
    config = {
        "start": site.url,
        "prefix": site.prefix,
        "name": label,
        "fetched": str(tmp / f"{label}.fetched"),
        "stats": str(tmp / f"{label}.stats"),
        "settings": {"DUPEFILTER_CLASS": DUPEFILTER, "LOG_LEVEL": "WARNING", **settings},
    }
    proc = subprocess.run(
        [sys.executable, str(JOB), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    stats = json.loads((tmp / f"{label}.stats").read_text())
    fetched = (tmp / f"{label}.fetched").read_text().splitlines()
    return [canonicalize(url) for url in fetched], stats  # a query's order is the first met


def _checked(stats: dict) -> int:
    return int(stats.get("urlseen/new", 0)) + int(stats.get("dupefilter/filtered", 0))


def test_a_crawl_checks_its_requests_in_a_fifth_of_a_round_trip_each(
    serve_site: Any, redis_servers: Any, redis_name: str, tmp_path: Path
) -> None:
    site = serve_site(pages=PAGES)
    server = redis_servers(persist=False)
    redis_url, client = server.url, server.client()
    runs: dict[str, tuple[list[str], dict, float]] = {}
    variants = {
        "each": {"URLSEEN_SEEN_CACHE": 0},  # the filter asked once per request
        "memory": {},
        "prefetch": {"SPIDER_MIDDLEWARES": {PREFETCH: 10}},
    }
    for label, more in variants.items():
        name = f"{redis_name}-{label}"
        settings = {"URLSEEN_REDIS_URL": redis_url, "URLSEEN_REDIS_NAME": name, **more}
        before = _reads(client)
        fetched, stats = _crawl(site, tmp_path, label, settings)
        trips = _reads(client) - before - 1  # this test's own INFO
        runs[label] = (fetched, stats, trips / _checked(stats))
    ratios = {label: round(ratio, 3) for label, (_, _, ratio) in runs.items()}
    for label, (fetched, stats, _) in runs.items():
        counts = Counter(fetched)
        assert not [u for u, n in counts.items() if n > 1], f"{label}: a page fetched twice"
        assert set(fetched) == set(runs["each"][0]), f"{label}: other pages than asked each time"
        assert len(counts) >= PAGES, f"{label}: {len(counts)} pages"
        assert _checked(stats) >= 5 * PAGES, f"{label}: {_checked(stats)} requests checked"
    assert ratios["each"] >= 1.0, ratios  # the count is real: each check is a round trip
    assert ratios["prefetch"] <= 0.2, ratios
    assert runs["prefetch"][1]["urlseen/redis_batches"] < runs["memory"][1]["urlseen/redis_batches"]
    checked = {label: _checked(stats) for label, (_, stats, _) in runs.items()}
    print(f"round trips per checked request: {ratios}; requests checked: {checked}")
