"""A Scrapy crawl whose shared filter is lost stops promptly and says so.

A shared filter's keys deleted, FLUSHDB, a Redis restarted empty: every later answer may be
wrong, so the crawl closes with the finish reason `urlseen_filter_lost`, the error in its log
and stats, and leaves nothing in Redis (its fleet membership is not written back). A Redis
stopped for a while and restarted with its data is retried: the crawl fetches every page once.

Real components: scrapy-redis's scheduler, crawls of the python3-doc site in subprocesses
(tests/scrapy_job.py), private redis-servers the tests flush, restart empty or stop.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from conftest import fetched_once, in_ci
from doc_site import slowed, wait_served

if not in_ci():  # CI installs urlseen[test], scrapy-redis included: there a missing one fails
    pytest.importorskip("scrapy_redis")

from test_scrapy_redis import (
    URLS,
    _enqueue,
    _filter_keys,
    _finish,
    _job,
    _scheduler,
    pages,  # noqa: F401 - the reference set, a fixture
)
from urlseen import FilterLostError

SCRAPY_REDIS = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"
DELETE_ALL = "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end"


def test_checkpoint_after_the_keys_vanished_raises_and_writes_nothing_back(
    redis_url: str, redis_name: str
) -> None:
    """No crawl to close (the scheduler driven by hand): the caller gets FilterLostError; the
    fleet's heartbeat does not re-create the members key the deletion took."""
    sched, _ = _scheduler(redis_url, redis_name, SCHEDULER_PERSIST=True)
    assert all(_enqueue(sched, URLS[:50]))
    sched.df.checkpoint()
    client = redis.Redis.from_url(redis_url)
    client.delete(*_filter_keys(redis_url, redis_name))
    with pytest.raises(FilterLostError):
        sched.df.checkpoint()
    assert not _filter_keys(redis_url, redis_name)
    with pytest.raises(FilterLostError):
        _enqueue(sched, URLS[50:51])
    assert not _filter_keys(redis_url, redis_name)


# -- real crawls -----------------------------------------------------------------------------


def _settings(url: str, scrapy_redis: bool = True) -> dict[str, Any]:
    """Under scrapy-redis's scheduler (its queue in the same Redis), or Scrapy's own with
    URLSEEN_REDIS_URL (the queue in memory: a Redis outage concerns the filter alone)."""
    settings = {
        "DUPEFILTER_CLASS": DUPEFILTER,
        "URLSEEN_REDIS_URL": url,
        "URLSEEN_CAPACITY": 100_000,
        "CONCURRENT_REQUESTS": 4,
    }
    if scrapy_redis:
        settings |= {"SCHEDULER": SCRAPY_REDIS, "SCHEDULER_PERSIST": True, "REDIS_URL": url}
    return settings


def _stopped(proc: Any, tmp: Path, label: str, started: float) -> dict[str, Any]:
    """A crawl that stopped on its own, promptly, with no traceback; its stats."""
    out, _ = proc.communicate(timeout=max(1.0, started + 40 - time.monotonic()))
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    return dict(json.loads((tmp / f"{label}.stats").read_text()))


@pytest.mark.parametrize("fault", ["delete-keys", "flushdb", "restart-empty"])
def test_two_processes_stop_when_the_shared_filter_is_lost(
    server: Any, site: str, redis_servers: Any, tmp_path: Path, fault: str
) -> None:
    private = redis_servers(persist=False)
    # A restart also breaks scrapy-redis's own queue for a moment (it does not retry, and
    # logs the traceback): there the processes use Scrapy's scheduler, the filter alone shared.
    settings = _settings(private.url, scrapy_redis=fault != "restart-empty")
    with slowed(server, 0.2) as procs:
        procs.append(_job(site, tmp_path, "lost", "one", settings, idle=60))
        procs.append(_job(site, tmp_path, "lost", "two", settings, idle=60, start="intro.html"))
        wait_served(server, 6, procs)
        client = private.client()
        if fault == "delete-keys":  # at once (a script): no batch runs between list and delete
            client.eval(DELETE_ALL, 0, "urlseen:*")
        elif fault == "flushdb":
            client.flushdb()
        else:
            private.kill()
            private.start()
        started = time.monotonic()
        # idle=60: a process with nothing to fetch waits for the other's links; it must
        # still notice the loss (its heartbeat), not wait out the minute
        labels = zip(procs, ["one", "two"], strict=True)
        both = [_stopped(proc, tmp_path, label, started) for proc, label in labels]
    for stats in both:
        assert stats["finish_reason"] == "urlseen_filter_lost", stats
        assert stats["urlseen/error"].startswith("FilterLostError: ")
    assert not private.client().keys("urlseen:*")  # no member written back, nothing made anew


def test_a_redis_stopped_briefly_and_restarted_with_its_data_loses_no_page(
    server: Any, site: str, redis_servers: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    reference = request.getfixturevalue("pages")
    private = redis_servers()  # every write persisted (appendfsync always)
    with slowed(server, 0.05) as procs:
        procs.append(_job(site, tmp_path, "outage", "one", _settings(private.url, False)))
        wait_served(server, 4, procs)
        private.kill()
        time.sleep(2)  # within the filter's retries (~7 s)
        private.start()
        urls, stats = _finish(procs[0], tmp_path, "one")
    assert stats["finish_reason"] == "finished"
    assert fetched_once(urls) == reference


def test_a_redis_down_past_the_retries_stops_the_crawl(
    server: Any, site: str, redis_servers: Any, tmp_path: Path
) -> None:
    private = redis_servers()
    with slowed(server, 0.2) as procs:
        procs.append(_job(site, tmp_path, "down", "one", _settings(private.url, False)))
        wait_served(server, 6, procs)
        private.kill()
        out, _ = procs[0].communicate(timeout=60)
    stats = json.loads((tmp_path / "one.stats").read_text())
    assert stats["finish_reason"] == "urlseen_filter_failed", out[-3000:]
    assert "Redis unreachable" in stats["urlseen/error"]
