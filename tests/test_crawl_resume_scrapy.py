"""A plain Scrapy project (scrapy.cfg, settings.py, a spider; `scrapy crawl site` with JOBDIR)
using urlseen's dupefilter, killed with SIGKILL at random moments and run again: with
UrlseenScheduler every page of the generated site is fetched; with Scrapy's own scheduler
(the baseline) the rerun skips the pages the filter remembers and the lost queue held."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import test_crawl_resume
from conftest import in_ci
from test_crawl_resume import (
    CONCURRENCY,
    Site,
    check_every_page,
    kill_at_random,
    paths,
    run,
    seeded,
)

generated_site = test_crawl_resume.generated_site  # the module's fixture, shared

if not in_ci():
    pytest.importorskip("scrapy")

SETTINGS = f"""
import os

BOT_NAME = "siteproj"
SPIDER_MODULES = ["siteproj.spiders"]
ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = {CONCURRENCY}
LOG_LEVEL = "WARNING"
TELNETCONSOLE_ENABLED = False
DUPEFILTER_CLASS = "urlseen.integrations.scrapy.UrlseenDupeFilter"
if os.environ.get("TEST_SCHEDULER") != "scrapy":
    SCHEDULER = "urlseen.integrations.scheduler.UrlseenScheduler"
    SPIDER_MIDDLEWARES = {{"urlseen.integrations.scheduler.FrontierSpiderMiddleware": 0}}
    DOWNLOADER_MIDDLEWARES = {{"urlseen.integrations.scheduler.FrontierDownloaderMiddleware": 0}}
"""

SPIDER = """
import scrapy


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start, fetched, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.fetched = open(fetched, "a")

    def parse(self, response):
        self.fetched.write(response.url + "\\n")
        self.fetched.flush()
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
"""


def make_project(folder: Path) -> Path:
    package = folder / "siteproj"
    (package / "spiders").mkdir(parents=True)
    (folder / "scrapy.cfg").write_text("[settings]\ndefault = siteproj.settings\n")
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(SETTINGS)
    (package / "spiders" / "__init__.py").write_text("")
    (package / "spiders" / "site.py").write_text(SPIDER)
    return folder


def scrapy_command(site: Site, fetched: Path, jobdir: Path) -> list[str]:
    return [
        sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start={site.url}",
        "-a", f"fetched={fetched}", "-s", f"JOBDIR={jobdir}",
    ]  # fmt: skip


def test_scrapy_project_with_the_scheduler_killed_four_times_fetches_every_page(
    generated_site: Site, tmp_path: Path
) -> None:
    site, rng = generated_site, seeded("scrapy project")
    project = make_project(tmp_path / "project")
    fetched, jobdir = tmp_path / "fetched.txt", tmp_path / "job"
    command = scrapy_command(site, fetched, jobdir)
    mark, kills, in_flight = site.served(), 0, 0
    for _ in range(4):
        kills += kill_at_random(command, site, rng, cwd=project)
        in_flight += taken(jobdir / "frontier.sqlite")  # before the next run puts them back
    assert kills >= 3, "the crawls ended before their kills"
    run(command, cwd=project)
    with sqlite3.connect(jobdir / "frontier.sqlite") as db:
        assert db.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    db.close()
    fetched_paths = paths(fetched.read_text().splitlines(), site)
    check_every_page(site, fetched_paths, mark, kills, in_flight=in_flight)


def taken(path: Path) -> int:
    """The requests a killed crawl's frontier had handed out and not seen done: those a rerun
    fetches again (a take is committed at once, so the mark survives a kill)."""
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT count(*) FROM requests WHERE taken = 1").fetchone()[0])


def test_baseline_scrapys_own_scheduler_loses_the_pages_its_queue_held(
    generated_site: Site, tmp_path: Path
) -> None:
    """The loss urlseen's scheduler exists to prevent: Scrapy's scheduler writes its queue's
    state at a clean close only; killed, its rerun starts from an empty queue while the
    filter remembers every request it let through."""
    site, rng = generated_site, seeded("scrapy's scheduler")
    project = make_project(tmp_path / "project")
    fetched, jobdir = tmp_path / "fetched.txt", tmp_path / "job"
    command = scrapy_command(site, fetched, jobdir)
    env = {**os.environ, "TEST_SCHEDULER": "scrapy"}
    # Past the filter's first grouped commit (1 s after the crawl's first page), before the
    # crawl's end: a kill before any commit leaves a filter that remembers nothing.
    start = site.served()
    proc = subprocess.Popen(command, cwd=project, env=env, stderr=subprocess.DEVNULL)
    try:
        until, first_page = start + rng.randint(250, 350), None
        while proc.poll() is None:
            served = site.served()
            if first_page is None and served > start:
                first_page = time.monotonic()
            if first_page is not None and served >= until and time.monotonic() - first_page > 1.5:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the crawl ended before its kill"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    run(command, cwd=project, env=env)
    lost = site.pages - set(paths(fetched.read_text().splitlines(), site))
    print(f"Scrapy's scheduler after one kill: {len(lost)} of {len(site.pages)} pages lost")
    assert len(lost) > len(site.pages) // 4
