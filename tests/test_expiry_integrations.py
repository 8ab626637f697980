"""Expiry and forget-on-failure through the crawler integrations, with real crawls of a site
served on loopback: Scrapy (its own scheduler, and scrapy-redis's with a filter shared through
a real Redis) and Crawlee, each run in its own process (Twisted's reactor runs once per
process), several runs on one state: a page expired by age, or whose download failed for good,
is fetched again in the next run, and nothing else is.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import in_ci
from crawl_site import ServedSite, page_path
from urlseen import kinds

if not in_ci():
    pytest.importorskip("scrapy")

HERE = Path(__file__).parent
PAGES = 30
FAILING = page_path(5)
DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"
EXPIRE = "URLSEEN_EXPIRE_AFTER"
FORGET = "urlseen.integrations.scrapy_forget"
FORGET_SETTINGS = {
    "DOWNLOADER_MIDDLEWARES": {f"{FORGET}.ForgetFailedDownloads": 0},
    "SPIDER_MIDDLEWARES": {f"{FORGET}.ForgetFailedResponses": 0},
    "RETRY_TIMES": 1,
}


def crawl(
    site: ServedSite, tmp: Path, label: str, *, job: str = "scrapy_job.py", start: str = "/",
    **config: Any,
) -> Counter[str]:  # fmt: skip
    """Crawl the site from `start` in a subprocess; the pages the server served in that run
    (their paths, query dropped: a page linked with a query is fetched once more)."""
    before = site.requests.copy()
    config = {
        "start": site.base + start,
        "prefix": site.prefix,
        "name": config.pop("name", "expiry"),
        "fetched": str(tmp / f"{label}.fetched"),
        "stats": str(tmp / f"{label}.stats"),
        **config,
    }
    proc = subprocess.run(
        [sys.executable, str(HERE / job), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    out = proc.stdout + proc.stderr
    (tmp / f"{label}.log").write_text(out)
    assert proc.returncode == 0, out[-3000:]
    served = site.requests.copy()
    served.subtract(before)
    return Counter(path.split("?")[0] for path in (+served).elements())


def pages(site: ServedSite) -> set[str]:
    """Every page's path."""
    return {"/", *(page_path(n) for n in range(PAGES))}


@pytest.fixture
def site(serve_site: Callable[..., ServedSite]) -> ServedSite:
    return serve_site(pages=PAGES, seed=7)


def _scrapy(state: Path | None = None, **settings: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"DUPEFILTER_CLASS": DUPEFILTER, "LOG_LEVEL": "INFO"}
    if state is not None:
        base["URLSEEN_STATE"] = str(state)
    return {"settings": base | settings}


def _scrapy_redis(redis_url: str, name: str, **settings: Any) -> dict[str, Any]:
    return _scrapy(
        SCHEDULER="scrapy_redis.scheduler.Scheduler",
        SCHEDULER_PERSIST=True,
        REDIS_URL=redis_url,
        URLSEEN_REDIS_NAME=name,
        **settings,
    )


# -- expiry by age ---------------------------------------------------------------------------


def expires_and_refetches(
    run: Callable[..., Counter[str]], key: str, *, fixed: bool, generations: str = ""
) -> None:
    """Three runs of one crawl on one state: the first sets no age; the second, with an age
    not reached, fetches nothing; the third, once the pages are older than its age, fetches
    the whole site again, each page once. The age is 1.5 times the first run's duration plus
    1 s (the machine may be loaded): a crawl that outlasts its age re-fetches pages that
    expire while it runs (a continuous re-crawl), which the third run must not do.

    fixed: the kind takes its age when created (expiry by generations), so the first run sets
    it too, from a warm-up run's duration d (run "0": another state, no age): 3 d + 1 s, at
    least 8 s, in 8 generations (the `generations` setting), so the earliest a page can expire
    (7/8 of the age after it was first seen) comes after the first two runs."""
    if fixed:
        began = time.monotonic()
        run("0", {})
        age = max(8, math.ceil(3 * (time.monotonic() - began) + 1))
        given = {key: age, generations: 8}
    started = time.monotonic()
    first = run("1", given if fixed else {})
    ended = time.monotonic()
    if not fixed:
        age = math.ceil(1.5 * (ended - started) + 1)
        given = {key: age}
    assert run("2", given if fixed else {key: 600}) == Counter(), "re-fetched before its age"
    time.sleep(max(0.0, age + 1.1 - (time.monotonic() - ended)))  # Redis keeps whole seconds
    third = run("3", given)
    assert third == first, f"not the whole site again, once each (age {age} s)"


@pytest.mark.parametrize("kind", ["exact", "rotating", "bloom"])
def test_scrapy_page_expired_by_age_is_fetched_again(
    site: ServedSite, tmp_path: Path, kind: str
) -> None:
    """exact: expired by its library's times; rotating: by generations (a window of age / 4,
    set when the filter is created); bloom: by generations of whole Bloom filters (a folder
    of them, the age set when it is created)."""

    def run(label: str, age: dict[str, Any]) -> Counter[str]:
        state = tmp_path / ("warm-up" if label == "0" else "state")
        served = crawl(site, tmp_path, label, **_scrapy(state, URLSEEN_FILTER=kind, **age))
        if label == "1":
            assert set(served) == pages(site)
        return served

    fixed = kind != "exact"
    expires_and_refetches(run, EXPIRE, fixed=fixed, generations="URLSEEN_GENERATIONS")


def test_scrapy_redis_shared_exact_expires_across_processes(
    site: ServedSite, tmp_path: Path, redis_url: str, redis_name: str
) -> None:
    """Each run is its own process on one filter in Redis."""

    def run(label: str, age: dict[str, Any]) -> Counter[str]:
        settings = _scrapy_redis(redis_url, redis_name, **age)
        served = crawl(site, tmp_path, label, name=redis_name, **settings)
        if label == "1":
            assert set(served) == pages(site)
        return served

    expires_and_refetches(run, EXPIRE, fixed=False)


@pytest.mark.parametrize("kind", ["bloom", "dsbf"])
def test_scrapy_redis_shared_bloom_kinds_expire_across_processes(
    site: ServedSite, tmp_path: Path, redis_url: str, redis_name: str, kind: str
) -> None:
    """The shared Bloom and splittable filters, each run its own process on one filter in
    Redis, expire by generations numbered by the server's clock."""

    def run(label: str, age: dict[str, Any]) -> Counter[str]:
        name = f"{redis_name}-warm-up" if label == "0" else redis_name
        settings = _scrapy_redis(
            redis_url, name, URLSEEN_FILTER=kind, URLSEEN_CAPACITY=10_000, **age
        )
        served = crawl(site, tmp_path, label, name=name, **settings)
        if label == "1":
            assert set(served) == pages(site)
        return served

    expires_and_refetches(run, EXPIRE, fixed=True, generations="URLSEEN_GENERATIONS")
    info = kinds.describe(redis=redis_url, name=redis_name)
    assert info["kind"] == kind and info["generations"] == 8
    assert all(row["age_seconds"] < info["expire_after"] for row in info["live_generations"])


# -- forget on failure -----------------------------------------------------------------------


@pytest.mark.parametrize("failure", [500, None], ids=["status-500", "connection-reset"])
def test_scrapy_page_failed_for_good_is_fetched_again(
    site: ServedSite, tmp_path: Path, failure: int | None
) -> None:
    state = tmp_path / "state"
    site.failing[FAILING] = failure
    first = crawl(site, tmp_path, "1", **_scrapy(state, **FORGET_SETTINGS))
    assert set(first) == pages(site) - {FAILING}
    stats = json.loads((tmp_path / "1.stats").read_text())
    assert stats.get("urlseen/forgotten/failed", 0) >= 1, stats  # again if linked again
    del site.failing[FAILING]
    # The next run, started from the failed page: it is fetched, and nothing else is.
    second = crawl(site, tmp_path, "2", start=FAILING, **_scrapy(state, **FORGET_SETTINGS))
    assert second == Counter({FAILING: 1})


def test_scrapy_without_forgetting_a_failed_page_stays_seen(
    site: ServedSite, tmp_path: Path
) -> None:
    """The control: without the middlewares, the failed page is skipped in the next run."""
    state = tmp_path / "state"
    site.failing[FAILING] = 500
    crawl(site, tmp_path, "1", **_scrapy(state, RETRY_TIMES=1))
    del site.failing[FAILING]
    assert crawl(site, tmp_path, "2", start=FAILING, **_scrapy(state)) == Counter()


def test_scrapy_redis_shared_failed_page_is_fetched_again(
    site: ServedSite, tmp_path: Path, redis_url: str, redis_name: str
) -> None:
    settings = _scrapy_redis(redis_url, redis_name, **FORGET_SETTINGS)
    site.failing[FAILING] = 503
    first = crawl(site, tmp_path, "1", name=redis_name, **settings)
    assert set(first) == pages(site) - {FAILING}
    del site.failing[FAILING]
    second = crawl(site, tmp_path, "2", name=redis_name, start=FAILING, **settings)
    assert second == Counter({FAILING: 1})


def test_scrapy_bloom_cannot_forget_says_so_once(site: ServedSite, tmp_path: Path) -> None:
    state = tmp_path / "state"
    site.failing[FAILING] = 500
    site.failing[page_path(6)] = 500
    crawl(site, tmp_path, "1", **_scrapy(state, URLSEEN_FILTER="bloom", **FORGET_SETTINGS))
    log = (tmp_path / "1.log").read_text()
    assert log.count("the bloom filter cannot forget a request") == 1, log[-3000:]


# -- Crawlee ---------------------------------------------------------------------------------


def _crawlee(**options: Any) -> dict[str, Any]:
    return {"job": "crawlee_job.py", "manager": "urlseen", "options": options, "retries": 1}


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_crawlee_page_expired_by_age_is_fetched_again(
    site: ServedSite, tmp_path: Path, kind: str
) -> None:
    pytest.importorskip("crawlee")

    def run(label: str, age: dict[str, Any]) -> Counter[str]:
        state = str(tmp_path / ("warm-up" if label == "0" else "state"))
        served = crawl(site, tmp_path, label, state=state, **_crawlee(filter=kind, **age))
        if label == "1":
            assert set(served) == pages(site)
        return served

    expires_and_refetches(run, "expire_after", fixed=kind == "bloom", generations="generations")


def test_crawlee_shared_failed_page_is_forgotten(
    site: ServedSite, tmp_path: Path, redis_url: str, redis_name: str
) -> None:
    """A shared filter with the frontier in memory (lost with the process): a request that
    failed after its retries is forgotten, so the next process fetches it again."""
    pytest.importorskip("crawlee")
    options = {"redis_url": redis_url, "redis_name": redis_name}
    site.failing[FAILING] = 500
    first = crawl(site, tmp_path, "1", **_crawlee(**options))
    assert set(first) == pages(site) - {FAILING}
    del site.failing[FAILING]
    second = crawl(site, tmp_path, "2", start=FAILING, **_crawlee(**options))
    assert second == Counter({FAILING: 1})
