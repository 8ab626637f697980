"""UrlseenDupeFilter under scrapy-redis's scheduler and scrapy-redis-bloomfilter's (the real
packages, a real Redis): the constructors they call, clear() as they mean it, state durable
without close(), stats, their settings; and real crawls of the python3-doc site on loopback by
two processes at once, with SCHEDULER_PERSIST on and off, stopped and resumed.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Gate, fetched_once, in_ci

if not in_ci():  # CI installs urlseen[test], scrapy-redis included: there a missing one fails
    pytest.importorskip("scrapy_redis")
    pytest.importorskip("scrapy_redis_bloomfilter")

import redis
from scrapy import Request, Spider, signals
from scrapy.utils.test import get_crawler

from urlseen.exact.sqlite_library import STORED_RECORDS
from urlseen.integrations.scrapy import UrlseenDupeFilter
from urlseen.shared.library import RedisLibrary

DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"
PREFETCH = "urlseen.integrations.scrapy_prefetch.UrlseenPrefetchMiddleware"
SCHEDULERS = {
    "scrapy_redis": "scrapy_redis.scheduler.Scheduler",
    "bloomfilter": "scrapy_redis_bloomfilter.scheduler.Scheduler",
}
JOB = Path(__file__).with_name("scrapy_job.py")


def _scheduler(redis_url: str, name: str, scheduler: str = "scrapy_redis", **settings: Any):
    """scrapy-redis's scheduler, built and opened as its engine does (it builds the
    dupefilter with from_spider in open()), on a spider named `name` (its keys start so)."""
    from scrapy.utils.misc import load_object

    crawler = get_crawler(
        type("NamedSpider", (Spider,), {"name": name}),
        settings_dict={
            "SCHEDULER": SCHEDULERS[scheduler],
            "DUPEFILTER_CLASS": DUPEFILTER,
            "REDIS_URL": redis_url,
            "URLSEEN_CAPACITY": 10_000,
            **settings,
        },
    )
    crawler.spider = crawler._create_spider()
    sched = load_object(SCHEDULERS[scheduler]).from_crawler(crawler)
    sched.open(crawler.spider)
    return sched, crawler


def _enqueue(scheduler: Any, urls: list[str]) -> list[bool]:
    return [scheduler.enqueue_request(Request(u)) for u in urls]


def _close(scheduler: Any, crawler: Any) -> None:
    """What the engine does at the end: the scheduler's close, then spider_closed."""
    scheduler.close("finished")
    crawler.signals.send_catch_log(signals.spider_closed, spider=crawler.spider, reason="finished")


def _filter_keys(redis_url: str, name: str) -> list[bytes]:
    """The shared filter's keys in Redis, receipts aside (they expire on their own)."""
    client = redis.Redis.from_url(redis_url)
    keys = client.scan_iter(match=f"urlseen:{{*{name}*", count=1000)
    return [k for k in keys if b":receipt:" not in k]


URLS = [f"http://a.test/{i}" for i in range(300)]


@pytest.mark.parametrize("scheduler", ["scrapy_redis", "bloomfilter"])
def test_built_by_from_spider_and_shared_through_the_schedulers_redis(
    redis_url: str, redis_name: str, scheduler: str
) -> None:
    one, crawler = _scheduler(redis_url, redis_name, scheduler, SCHEDULER_PERSIST=True)
    two, _ = _scheduler(redis_url, redis_name, scheduler, SCHEDULER_PERSIST=True)
    assert isinstance(one.df, UrlseenDupeFilter)
    assert one.df.kind == "exact" and one.df.handle.shared  # REDIS_URL: one filter for both
    assert one.df.handle.name == f"scrapy:{redis_name}"
    assert all(_enqueue(one, URLS[:100]))
    assert _enqueue(two, URLS[:200]) == [False] * 100 + [True] * 100
    assert _enqueue(one, URLS[:1]) == [False]
    _close(one, crawler)
    stats = crawler.stats.get_stats()
    assert stats["dupefilter/filtered"] == 1 and stats["urlseen/new"] == 100
    assert ("bloomfilter/filtered" in stats) == (scheduler == "bloomfilter")
    _close(two, crawler)
    assert RedisLibrary.exists(redis_url, f"scrapy:{redis_name}")  # persisted


def test_persist_off_deletes_the_shared_filter_when_the_last_process_leaves(
    redis_url: str, redis_name: str
) -> None:
    one, crawler_one = _scheduler(redis_url, redis_name)
    two, crawler_two = _scheduler(redis_url, redis_name)
    assert all(_enqueue(one, URLS[:50]))
    _close(one, crawler_one)  # SCHEDULER_PERSIST off: clear(), but another process crawls on
    assert _filter_keys(redis_url, redis_name)
    assert _enqueue(two, URLS[:60]) == [False] * 50 + [True] * 10
    _close(two, crawler_two)  # the last one out deletes the filter
    assert not _filter_keys(redis_url, redis_name)
    assert not list(redis.Redis.from_url(redis_url).scan_iter(match=f"{redis_name}*"))


def test_flush_on_start_forgets_an_earlier_crawl(redis_url: str, redis_name: str) -> None:
    first, crawler = _scheduler(redis_url, redis_name, SCHEDULER_PERSIST=True)
    assert all(_enqueue(first, URLS[:20]))
    _close(first, crawler)
    again, crawler = _scheduler(
        redis_url, redis_name, SCHEDULER_PERSIST=True, SCHEDULER_FLUSH_ON_START=True
    )
    assert all(_enqueue(again, URLS[:20]))  # cleared at open, reopened on first use
    _close(again, crawler)


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_local_state_persist_on_and_off(
    redis_url: str, redis_name: str, kind: str, tmp_path: Path
) -> None:
    job = {"JOBDIR": str(tmp_path / "job"), "URLSEEN_FILTER": kind}
    first, crawler = _scheduler(redis_url, redis_name, SCHEDULER_PERSIST=True, **job)
    assert first.df.handle.state is not None and not first.df.handle.shared
    assert all(_enqueue(first, URLS[:100]))
    _close(first, crawler)
    second, crawler = _scheduler(redis_url, redis_name, **job)  # persist off
    assert _enqueue(second, URLS[:150]) == [False] * 100 + [True] * 50
    _close(second, crawler)
    assert not list((tmp_path / "job" / "urlseen").glob("*"))  # the crawl's state is gone
    third, crawler = _scheduler(redis_url, redis_name, **job)
    assert all(_enqueue(third, URLS[:10]))  # a fresh crawl
    _close(third, crawler)


def test_local_state_is_durable_without_close(
    redis_url: str, redis_name: str, tmp_path: Path
) -> None:
    """scrapy-redis never closes its dupefilter: spider_idle (and the timer) commit."""
    sched, crawler = _scheduler(redis_url, redis_name, SCHEDULER_PERSIST=True, JOBDIR=str(tmp_path))
    assert all(_enqueue(sched, URLS[:100]))
    library = tmp_path / "urlseen" / "library.sqlite"

    def records() -> int:
        with sqlite3.connect(f"file:{library}?mode=ro", uri=True) as db:
            return int(db.execute(STORED_RECORDS).fetchone()[0])  # B-tree and stage

    assert records() == 0  # grouped: waiting for the next commit
    crawler.signals.send_catch_log(signals.spider_idle, spider=crawler.spider)
    assert records() == 100  # committed while the filter is still open
    _close(sched, crawler)
    assert sched.df.handle.opened is False


def test_bloomfilter_settings_translate_for_a_bloom_filter(redis_url: str, redis_name: str) -> None:
    sched, crawler = _scheduler(
        redis_url,
        redis_name,
        "bloomfilter",
        URLSEEN_FILTER="bloom",
        URLSEEN_CAPACITY=None,
        BLOOMFILTER_BIT=16,
        BLOOMFILTER_HASH_NUMBER=6,
    )
    stats = sched.df.seen.stats()
    # the bits (to a word: sizes are rounded) and hashes of scrapy-redis-bloomfilter's filter
    assert abs(stats.bits - 2**16) <= 64
    assert stats.details["k"] == 6
    assert stats.details["layout"] == "standard"
    assert _enqueue(sched, URLS[:3] * 2) == [True] * 3 + [False] * 3
    _close(sched, crawler)
    assert crawler.stats.get_value("bloomfilter/filtered") == 3


def test_bloomfilter_settings_warn_once_where_they_mean_nothing(
    redis_url: str, redis_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    from urlseen.integrations import scrapy as integration

    integration._warned.clear()
    with caplog.at_level(logging.WARNING, logger="scrapy.dupefilters"):
        for _ in range(2):
            sched, crawler = _scheduler(redis_url, redis_name, "bloomfilter", BLOOMFILTER_BIT=20)
            assert sched.df.kind == "exact"
            _close(sched, crawler)
    warned = [r for r in caplog.records if "BLOOMFILTER_BIT" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].name == "scrapy.dupefilters"
    assert "ignored" in warned[0].getMessage()


# -- real crawls in subprocesses -------------------------------------------------------------


def _job(
    site: str, tmp: Path, name: str, label: str, settings: dict[str, Any], **config: Any
) -> subprocess.Popen[str]:
    """Start one crawl (tests/scrapy_job.py) with its own TMPDIR, to see what it leaves."""
    (tmp / f"{label}.tmp").mkdir(exist_ok=True)
    config = {
        "start": site + config.pop("start", "index.html"),
        "prefix": site,
        "name": name,
        "fetched": str(tmp / f"{label}.fetched"),
        "stats": str(tmp / f"{label}.stats"),
        "settings": settings,
        **config,
    }
    env = {**os.environ, "TMPDIR": str(tmp / f"{label}.tmp")}
    command = [sys.executable, str(JOB), json.dumps(config)]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def _finish(proc: subprocess.Popen[str], tmp: Path, label: str) -> tuple[list[str], dict]:
    """Wait for a crawl: the URLs it fetched and its stats; it left no temporary folder."""
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "temporary folders left after the crawl: 0" in out, out[-3000:]
    assert not list((tmp / f"{label}.tmp").glob("urlseen-*")), "a temporary folder was left"
    fetched = tmp / f"{label}.fetched"
    urls = fetched.read_text().splitlines() if fetched.exists() else []
    stats_file = tmp / f"{label}.stats"
    return urls, json.loads(stats_file.read_text()) if stats_file.exists() else {}


@pytest.fixture(scope="module")
def pages(site: str, tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The pages Scrapy's own scheduler and RFPDupeFilter fetch: the reference set."""
    tmp = tmp_path_factory.mktemp("reference")
    urls, _ = _finish(_job(site, tmp, "reference", "ref", {}), tmp, "ref")
    assert len(fetched_once(urls)) >= 50
    return set(urls)


def _redis_settings(redis_url: str, scheduler: str, persist: bool, **more: Any) -> dict:
    return {
        "SCHEDULER": SCHEDULERS[scheduler],
        "SCHEDULER_PERSIST": persist,
        "REDIS_URL": redis_url,
        "DUPEFILTER_CLASS": DUPEFILTER,
        "URLSEEN_CAPACITY": 100_000,
        **more,
    }


@pytest.mark.parametrize(
    ("scheduler", "persist", "more"),
    [
        ("scrapy_redis", True, {"URLSEEN_REDIS_URL": "<redis>"}),
        ("scrapy_redis", False, {}),  # URLSEEN_REDIS_URL defaults to scrapy-redis's REDIS_URL
        ("bloomfilter", False, {"URLSEEN_FILTER": "bloom", "BLOOMFILTER_BIT": 20}),
        ("scrapy_redis", True, {"SPIDER_MIDDLEWARES": {PREFETCH: 10}}),  # checked ahead
    ],
    ids=[
        "scrapy_redis-persist",
        "scrapy_redis-no-persist",
        "bloomfilter-no-persist",
        "scrapy_redis-prefetch",
    ],
)
def test_two_processes_fetch_every_page_exactlyfetched_once(
    server: Any,
    site: str,
    pages: set[str],
    redis_url: str,
    redis_name: str,
    tmp_path: Path,
    scheduler: str,
    persist: bool,
    more: dict[str, Any],
) -> None:
    more = {k: redis_url if v == "<redis>" else v for k, v in more.items()}
    settings = _redis_settings(redis_url, scheduler, persist, **more)
    server.gate = Gate(2)  # both crawls start together and race for the same links
    # A process whose start page the other took polls the shared queue only at Scrapy's 5 s
    # heartbeat: it waits 8 s before closing, and 0.4 s a page keeps the crawl going past it.
    server.delay = 0.4
    try:
        # Two crawls that did not overlap (one ended before the other's first poll) test
        # nothing: run the pair again on a new name, at most three times.
        for attempt in range(3):
            name, one_label, two_label = f"{redis_name}-{attempt}", f"one{attempt}", f"two{attempt}"
            one = _job(site, tmp_path, name, one_label, settings, idle=8)
            two = _job(site, tmp_path, name, two_label, settings, idle=8, start="intro.html")
            try:
                (first, stats_one), (second, stats_two) = [
                    _finish(one, tmp_path, one_label),
                    _finish(two, tmp_path, two_label),
                ]
            finally:  # a crawl that did not end is no longer left writing to Redis after it
                for job in (one, two):
                    if job.poll() is None:
                        job.kill()
                        job.wait()
            if first and second:
                break
            server.gate = Gate(2)
    finally:
        server.gate, server.delay = None, 0.0
    redis_name = name
    assert first and second, "one process fetched nothing three times: the crawls did not overlap"
    assert fetched_once(first + second) == pages
    both = [stats_one, stats_two]
    assert sum(s["urlseen/new"] for s in both) == len(pages)
    assert all(s["dupefilter/filtered"] > 0 for s in both)
    assert all(s["urlseen/cache_hits"] > 0 for s in both)  # repeats answered from memory
    if scheduler == "bloomfilter":
        assert all(s["bloomfilter/filtered"] == s["dupefilter/filtered"] for s in both)
    client = redis.Redis.from_url(redis_url)
    queue_left = list(client.scan_iter(match=f"{redis_name}:*"))
    assert bool(_filter_keys(redis_url, redis_name)) == persist
    if not persist:
        assert not queue_left  # scrapy-redis cleared its queue, the last of us the filter


@pytest.mark.parametrize("where", ["jobdir", "shared"])
def test_stopped_crawl_resumes_without_refetching(
    site: str, pages: set[str], redis_url: str, redis_name: str, tmp_path: Path, where: str
) -> None:
    more = {"JOBDIR": str(tmp_path / "job")} if where == "jobdir" else {}
    settings = _redis_settings(redis_url, "scrapy_redis", True, **more)
    stopped = {**settings, "CLOSESPIDER_PAGECOUNT": 15}
    before, stats = _finish(_job(site, tmp_path, redis_name, "first", stopped), tmp_path, "first")
    assert stats["finish_reason"] == "closespider_pagecount"
    assert 15 <= len(before) < len(pages)
    after, stats = _finish(_job(site, tmp_path, redis_name, "second", settings), tmp_path, "second")
    assert stats["finish_reason"] == "finished"
    assert after, "the resumed crawl fetched nothing"
    assert fetched_once(before + after) == pages


@pytest.mark.parametrize(
    "broken",
    [
        {"SCHEDULER_DISK_QUEUE": "no.such.Queue"},  # the scheduler fails after its dupefilter
        {"SCHEDULER_PRIORITY_QUEUE": "scrapy_job.BrokenQueue"},  # open() fails, close() too
    ],
    ids=["scheduler-not-built", "scheduler-not-opened"],
)
def test_scrapy_error_paths_leave_no_temporary_folder(
    site: str, tmp_path: Path, broken: dict[str, str]
) -> None:
    settings = {"DUPEFILTER_CLASS": DUPEFILTER, "URLSEEN_CAPACITY": 1000, **broken}
    proc = _job(site, tmp_path, "broken", "broken", settings)
    out, _ = proc.communicate(timeout=120)
    assert "temporary folders left after the crawl: 0" in out, out[-3000:]
    assert not list((tmp_path / "broken.tmp").glob("urlseen-*")), out[-3000:]
