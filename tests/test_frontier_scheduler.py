"""UrlseenScheduler's set-up errors, and a fetch that fails for good: kept for the next run,
counted in the summary, exit status 3, fetched once the site answers again."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import in_ci
from test_crawl_resume import Site, paths, run, serve, write_site

if not in_ci():
    pytest.importorskip("scrapy")

from scrapy.utils.test import get_crawler

from urlseen.errors import ConfigError
from urlseen.integrations._crawl import FRONTIER_SETTINGS, SiteSpider
from urlseen.integrations.scheduler import UrlseenScheduler

DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"


def test_scrapys_dupefilter_is_refused_by_name() -> None:
    crawler = get_crawler(SiteSpider, {**FRONTIER_SETTINGS})
    with pytest.raises(ConfigError, match=r"needs DUPEFILTER_CLASS = .*UrlseenDupeFilter"):
        UrlseenScheduler.from_crawler(crawler)


def test_missing_middlewares_are_named(tmp_path: Path) -> None:
    settings = {"DUPEFILTER_CLASS": DUPEFILTER, "JOBDIR": str(tmp_path / "job")}
    crawler = get_crawler(SiteSpider, settings)
    with pytest.raises(ConfigError, match=r"SPIDER_MIDDLEWARES = .*FrontierSpiderMiddleware"):
        UrlseenScheduler.from_crawler(crawler)


def test_a_bad_order_is_refused(tmp_path: Path) -> None:
    settings = {**FRONTIER_SETTINGS, "DUPEFILTER_CLASS": DUPEFILTER, "URLSEEN_FRONTIER_ORDER": "x"}
    with pytest.raises(ConfigError, match="URLSEEN_FRONTIER_ORDER must be 'lifo' or 'fifo'"):
        UrlseenScheduler.from_crawler(get_crawler(SiteSpider, settings))


def test_a_page_that_fails_for_good_is_kept_and_fetched_by_the_next_run(tmp_path: Path) -> None:
    root = tmp_path / "site"
    site = Site("", root, write_site(root, pages=40))
    site.broken = {"/p7.html"}
    server = serve(site)
    try:
        site.url = f"http://127.0.0.1:{server.server_address[1]}/"
        fetched = tmp_path / "fetched.txt"
        command = [
            sys.executable, "-m", "urlseen", "crawl", site.url, "--no-progress",
            "--jobdir", str(tmp_path / "job"), "--fetched", str(fetched),
        ]  # fmt: skip
        first = run(command, status=3)
        assert "(unfinished)" in first.stdout, first.stdout
        assert "1 requests left to fetch (1 failed in this run" in first.stdout, first.stdout
        assert site.requests.count("/p7.html") == 3  # the first try and Scrapy's 2 retries
        site.broken = set()
        second = run(command)
        assert "(finished)" in second.stdout and "left to fetch" not in second.stdout
        pages = paths(fetched.read_text().splitlines(), site)
        assert "/p7.html" in pages and set(pages) == site.pages
    finally:
        server.shutdown()
        server.server_close()
