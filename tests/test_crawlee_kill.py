"""A Crawlee crawl with UrlseenRequestManager killed with SIGKILL at random moments and run
again resumes every page: the generated site (crawl_site.py) crawled by ParselCrawler in
subprocesses (crawlee_job.py), each page fetched at least once across the runs and refetched
only as often as a kill can cost (the requests in progress when it lands). A request that
failed after Crawlee's retries is fetched by the next run."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crawl_site import (
    Crawl,
    ServedSite,
    fetched_pages,
    finish,
    kill_after,
    kill_seed,
    missing,
    start_crawl,
)
from doc_site import in_ci

if not in_ci():  # CI installs urlseen[test], Crawlee included: there a missing one fails
    pytest.importorskip("crawlee")

JOB = Path(__file__).with_name("crawlee_job.py")
CONCURRENCY = 8  # crawlee_job.py's max_concurrency: the requests in progress at a kill
KILLS = 5


def crawlee_run(site: ServedSite, tmp: Path, run: int, **config: Any) -> Crawl:
    """One run of the crawl, its pages in tmp/fetched-<run>.txt."""
    config = {
        "start": site.url,
        "prefix": site.prefix,
        "fetched": str(tmp / f"fetched-{run}.txt"),
        "manager": "urlseen",
        "state": str(tmp / "state"),
        **config,
    }
    (tmp / "tmp").mkdir(exist_ok=True)
    argv = [sys.executable, str(JOB), json.dumps(config)]
    return start_crawl(argv, tmp / f"log-{run}.txt", cwd=tmp, env={"TMPDIR": str(tmp / "tmp")})


def fetched_files(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("fetched-*.txt"))


def test_killed_crawl_resumes_every_page(crawl_site: ServedSite, tmp_path: Path) -> None:
    seed = kill_seed()
    rng = random.Random(seed)
    story, kills = [f"seed {seed}"], 0
    for run in range(KILLS * 2):
        if kills == KILLS:
            break
        crawl = crawlee_run(crawl_site, tmp_path, run)
        # At a seeded number of this run's pages, so that each kill lands mid-crawl (a delay
        # would often land in the interpreter's start).
        pages = (tmp_path / f"fetched-{run}.txt", rng.randrange(10, 250))
        said = kill_after(crawl, lines=pages)
        story.append(f"run {run}: {said}")
        kills += said.startswith("killed")
        assert said.startswith("killed"), f"a run ended before its kill: {story}"
    last = crawlee_run(crawl_site, tmp_path, KILLS)
    assert finish(last, timeout=120) == 0, last.log_text()
    counts = fetched_pages(fetched_files(tmp_path))
    lost = missing(crawl_site, counts)
    assert not lost, f"{len(lost)} pages never fetched ({sorted(lost)[:3]}...); {story}"
    refetched = sum(counts.values()) - len(counts)
    assert refetched <= CONCURRENCY * kills, f"{refetched} refetches; {story}"
    assert max(counts.values()) <= kills + 1, story
    assert "Traceback" not in last.log_text(10**6)


@pytest.mark.parametrize("failure", ["503", "refused"])
def test_failed_first_fetch_is_fetched_by_the_next_run(
    serve_site: Callable[..., ServedSite], tmp_path: Path, failure: str
) -> None:
    site = serve_site(pages=60)
    if failure == "503":
        site.fail_next(2)  # the start page, and its one retry
    else:
        site.down()
    first = crawlee_run(site, tmp_path, 0, retries=1)
    assert finish(first, timeout=60) == 0, first.log_text()
    assert not fetched_pages(fetched_files(tmp_path)), "the site was down"
    assert "failed and reached maximum retries" in first.log_text(10**6)
    if failure == "refused":
        site.up()
    second = crawlee_run(site, tmp_path, 1)
    assert finish(second, timeout=60) == 0, second.log_text()
    counts = fetched_pages(fetched_files(tmp_path))
    assert set(counts) == site.urls and max(counts.values()) == 1


def test_two_processes_share_the_work_and_survive_a_kill(
    crawl_site: ServedSite, tmp_path: Path, redis_url: str, redis_name: str
) -> None:
    """share_work: one frontier in Redis for both processes; one is killed mid-crawl, and the
    other fetches the rest, the killed one's requests in progress included (after their
    lease)."""
    options = {"redis_url": redis_url, "redis_name": redis_name, "share_work": True}
    options.update(capacity=100_000, lease=3)
    seed = kill_seed()
    lines = random.Random(f"{seed}-shared").randrange(50, 300)
    killed = crawlee_run(crawl_site, tmp_path, 0, state=None, options=options)
    other = crawlee_run(crawl_site, tmp_path, 1, state=None, options=options)
    try:
        said = kill_after(killed, lines=(tmp_path / "fetched-0.txt", lines))
        assert said.startswith("killed"), f"seed {seed}: {said}"
        meanwhile = fetched_pages([tmp_path / "fetched-1.txt"])
        assert meanwhile, f"seed {seed}: {said}; the other process fetched nothing meanwhile"
        assert finish(other, timeout=120) == 0, other.log_text()
    finally:
        other.kill()
    counts = fetched_pages(fetched_files(tmp_path))
    story = f"seed {seed}: {said}"
    assert not missing(crawl_site, counts), story
    assert sum(counts.values()) - len(counts) <= CONCURRENCY, story
    survivor = fetched_pages([tmp_path / "fetched-1.txt"])
    assert len(survivor) >= len(counts) // 4, f"{story}: the work was not shared"
