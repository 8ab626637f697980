"""The baseline the README cites: a Scrapy project with Scrapy's own scheduler and a JOBDIR,
killed with SIGKILL mid-crawl and run again, loses pages, with Scrapy's RFPDupeFilter as with
urlseen's dupefilter. The dupefilter remembers every request that reached it; the scheduler's
disk queues are found again only through the state Scrapy writes at a clean close, so the
rerun drops every request queued at the kill as a duplicate and finishes with rc 0.

The generated site (crawl_site.py) crawled by tests/scrapy_job.py in subprocesses. These tests
pass while the loss is there: they document it, and fail the day it is gone."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from crawl_site import (
    ServedSite,
    fetched_pages,
    finish,
    kill_after,
    kill_seed,
    missing,
    start_crawl,
)

JOB = Path(__file__).with_name("scrapy_job.py")
DUPEFILTERS = {
    "scrapy": "scrapy.dupefilters.RFPDupeFilter",
    "urlseen": "urlseen.integrations.scrapy.UrlseenDupeFilter",
}


@pytest.mark.parametrize("dupefilter", sorted(DUPEFILTERS))
def test_scrapy_scheduler_with_jobdir_loses_pages_at_a_kill(
    crawl_site: ServedSite, tmp_path: Path, dupefilter: str
) -> None:
    seed = kill_seed()
    lines = random.Random(f"{seed}-{dupefilter}").randrange(200, 500)
    settings = {
        "JOBDIR": str(tmp_path / "job"),
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",  # Scrapy's own, whatever the default
        "DUPEFILTER_CLASS": DUPEFILTERS[dupefilter],
        "URLSEEN_CAPACITY": 100_000,
    }
    runs = []
    for run in range(2):
        config = {
            "start": crawl_site.url,
            "prefix": crawl_site.prefix,
            "name": "baseline",
            "fetched": str(tmp_path / f"fetched-{run}.txt"),
            "stats": str(tmp_path / f"stats-{run}.json"),
            "settings": settings,
        }
        argv = [sys.executable, str(JOB), json.dumps(config)]
        runs.append(start_crawl(argv, tmp_path / f"log-{run}.txt", cwd=tmp_path))
        if run == 0:
            said = kill_after(runs[0], lines=(tmp_path / "fetched-0.txt", lines))
            assert said.startswith("killed"), f"seed {seed}: {said}"
    assert finish(runs[1], timeout=120) == 0, runs[1].log_text()
    counts = fetched_pages([tmp_path / "fetched-0.txt", tmp_path / "fetched-1.txt"])
    lost = missing(crawl_site, counts)
    pages = len(crawl_site.urls)
    story = f"seed {seed}, {dupefilter}: {said}; {len(lost)} of {pages} pages never fetched"
    assert len(lost) >= pages // 4, story  # the queue at the kill: most of the site
    assert json.loads((tmp_path / "stats-1.json").read_text())["finish_reason"] == "finished"
