"""UrlseenRequestManager: urlseen as the seen-test of a Crawlee for Python crawler, through
Crawlee's own extension point (the request manager). Its contract with Crawlee in-process, then
real ParselCrawler crawls of the python3-doc site on loopback in subprocesses: each page once,
a stopped crawl resumed, one filter shared by two processes through a real Redis."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Gate, fetched_once, in_ci

if not in_ci():  # CI installs urlseen[test], Crawlee included: there a missing one fails
    pytest.importorskip("crawlee")

from crawlee import Request

from urlseen.errors import ConfigError
from urlseen.integrations.crawlee import UrlseenRequestManager, canonical_key

JOB = Path(__file__).with_name("crawlee_job.py")


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[UrlseenRequestManager]:
    with_state = UrlseenRequestManager(tmp_path / "crawl", capacity=10_000)
    yield with_state
    with_state.close()


def test_adds_each_unique_key_once_and_says_so(manager: UrlseenRequestManager) -> None:
    async def scenario() -> None:
        first = await manager.add_request("http://a.test/x?b=2&a=1")
        assert first is not None and not first.was_already_present
        again = await manager.add_request("http://a.test/x?a=1&b=2#frag")  # Crawlee's key
        assert again is not None and again.was_already_present
        assert not again.was_already_handled
        await manager.add_requests(["http://a.test/y", "http://a.test/x?a=1&b=2"])
        assert await manager.get_total_count() == 2
        fetched = await manager.fetch_next_request()
        assert fetched is not None and fetched.url == "http://a.test/x?b=2&a=1"
        await manager.mark_request_as_handled(fetched)
        done = await manager.add_request("http://a.test/x?a=1&b=2")
        assert done is not None and done.was_already_handled
        assert await manager.get_handled_count() == 1
        assert not await manager.is_finished()

    run(scenario())


def test_frontier_order_reclaim_and_finish(manager: UrlseenRequestManager) -> None:
    async def scenario() -> None:
        await manager.add_requests([f"http://a.test/{i}" for i in range(3)])
        await manager.add_request("http://a.test/urgent", forefront=True)
        order = [await manager.fetch_next_request() for _ in range(4)]
        assert [r.url for r in order if r] == [
            "http://a.test/urgent",
            "http://a.test/0",
            "http://a.test/1",
            "http://a.test/2",
        ]
        assert await manager.is_empty() and not await manager.is_finished()
        assert order[1] is not None
        assert await manager.reclaim_request(order[1], forefront=True)
        assert await manager.fetch_next_request() == order[1]
        for request in order:
            assert request is not None
            assert await manager.mark_request_as_handled(request)
        assert await manager.is_finished()
        assert await manager.fetch_next_request() is None
        assert await manager.get_handled_count() == 4

    run(scenario())


def test_state_resumes_and_requests_in_progress_come_back(tmp_path: Path) -> None:
    async def first_run() -> None:
        manager = UrlseenRequestManager(tmp_path / "crawl", capacity=10_000)
        await manager.add_requests([f"http://a.test/{i}" for i in range(4)])
        done = await manager.fetch_next_request()
        assert done is not None
        await manager.mark_request_as_handled(done)
        await manager.fetch_next_request()  # in progress when the run stops
        manager.close()

    async def second_run() -> None:
        manager = UrlseenRequestManager(tmp_path / "crawl")
        await manager.add_requests([f"http://a.test/{i}" for i in range(6)])
        urls = []
        while (request := await manager.fetch_next_request()) is not None:
            urls.append(request.url)
            await manager.mark_request_as_handled(request)
        assert urls == [f"http://a.test/{i}" for i in (1, 2, 3, 4, 5)]
        assert await manager.get_handled_count() == 6
        manager.close()

    run(first_run())
    run(second_run())
    assert (tmp_path / "crawl" / "seen" / "library.sqlite").is_file()  # exact by default


def test_keys_crawlees_or_urlseens_canonical_url(tmp_path: Path) -> None:
    lower, upper = Request.from_url("http://a.test/Page"), Request.from_url("http://a.test/page")
    assert lower.unique_key == upper.unique_key  # Crawlee's normaliser lower-cases the path
    assert canonical_key(lower) != canonical_key(upper)  # urlseen's canonical URL does not
    own = Request.from_url("http://a.test/Page", unique_key="mine")
    assert canonical_key(own) == "mine"

    async def scenario(key: str) -> list[bool]:
        manager = UrlseenRequestManager(None, key=key)
        answers = [await manager.add_request(r) for r in (lower, upper)]
        manager.close()
        return [a is not None and a.was_already_present for a in answers]

    assert run(scenario("crawlee")) == [False, True]
    assert run(scenario("canonical")) == [False, False]


def test_without_state_nothing_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)

    async def scenario() -> None:
        manager = UrlseenRequestManager(None)
        await manager.add_requests(["http://a.test/1", "http://a.test/1"])
        assert await manager.get_total_count() == 1
        manager.close()

    run(scenario())
    assert not list(tmp_path.glob("urlseen-*"))


def test_purge_and_drop(tmp_path: Path) -> None:
    async def scenario() -> None:
        manager = UrlseenRequestManager(tmp_path / "crawl")
        await manager.add_requests(["http://a.test/1", "http://a.test/2"])
        await manager.purge()  # Crawlee: before a crawler's second run()
        assert await manager.is_finished()
        again = await manager.add_request("http://a.test/1")
        assert again is not None and not again.was_already_present
        await manager.drop()

    run(scenario())
    assert not (tmp_path / "crawl").exists()


def test_shared_filter_claims_each_request_once(redis_url: str, redis_name: str) -> None:
    async def scenario() -> None:
        shared = {"redis_url": redis_url, "redis_name": redis_name, "capacity": 10_000}
        one = UrlseenRequestManager(None, **shared)
        two = UrlseenRequestManager(None, **shared)
        urls = [f"http://a.test/{i}" for i in range(100)]
        await one.add_requests(urls[:60])
        await two.add_requests(urls)
        assert await one.get_total_count() == 60 and await two.get_total_count() == 40
        memory = one.handle.seen  # the requests it knows seen cost no round trip again
        asked = (memory.asked, memory.batches)
        await one.add_requests(urls[:60])
        assert await one.get_total_count() == 60
        assert (memory.hits, memory.asked, memory.batches) == (60, *asked)
        one.close()
        two.close()

    run(scenario())


# -- real crawls in subprocesses -------------------------------------------------------------


def _job(site: str, tmp: Path, label: str, **config: Any) -> subprocess.Popen[str]:
    (tmp / f"{label}.tmp").mkdir(exist_ok=True)
    config = {
        "start": site + config.pop("start", "index.html"),
        "prefix": site,
        "fetched": str(tmp / f"{label}.fetched"),
        **config,
    }
    env = {**os.environ, "TMPDIR": str(tmp / f"{label}.tmp")}
    return subprocess.Popen(
        [sys.executable, str(JOB), json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp,
    )


def _finish(proc: subprocess.Popen[str], tmp: Path, label: str) -> list[str]:
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "temporary folders left after the crawl: 0" in out, out[-3000:]
    assert not list((tmp / f"{label}.tmp").glob("urlseen-*"))
    fetched = tmp / f"{label}.fetched"
    return fetched.read_text().splitlines() if fetched.exists() else []


@pytest.fixture(scope="module")
def crawlee_pages(site: str, tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The pages a Crawlee crawl with its own request queue fetches: the reference set."""
    tmp = tmp_path_factory.mktemp("crawlee-reference")
    pages = fetched_once(_finish(_job(site, tmp, "ref", manager="crawlee"), tmp, "ref"))
    assert len(pages) >= 50
    return pages


def test_crawl_fetches_each_page_once_and_resumes(
    site: str, crawlee_pages: set[str], tmp_path: Path
) -> None:
    ours = {"manager": "urlseen", "state": str(tmp_path / "state")}
    ours["options"] = {"capacity": 100_000}  # type: ignore[assignment]
    before = _finish(_job(site, tmp_path, "first", max_requests=15, **ours), tmp_path, "first")
    assert 15 <= len(before) < len(crawlee_pages)
    after = _finish(_job(site, tmp_path, "second", **ours), tmp_path, "second")
    assert after, "the resumed crawl fetched nothing"
    assert fetched_once(before + after) == crawlee_pages
    assert (tmp_path / "state" / "seen" / "library.sqlite").is_file()


def test_two_processes_share_one_filter(
    server: Any,
    site: str,
    crawlee_pages: set[str],
    redis_url: str,
    redis_name: str,
    tmp_path: Path,
) -> None:
    options = {"redis_url": redis_url, "redis_name": redis_name, "capacity": 100_000}
    server.gate = Gate(2)
    try:
        one = _job(site, tmp_path, "one", manager="urlseen", state=None, options=options)
        two = _job(
            site, tmp_path, "two", manager="urlseen", state=None, options=options,
            start="intro.html",
        )  # fmt: skip
        first, second = _finish(one, tmp_path, "one"), _finish(two, tmp_path, "two")
    finally:
        server.gate = None
    assert first and second, "one process fetched nothing: the crawls did not overlap"
    assert fetched_once(first + second) == crawlee_pages


def test_failed_request_waits_for_the_next_run(tmp_path: Path) -> None:
    from crawlee import RequestState

    async def first_run() -> None:
        manager = UrlseenRequestManager(tmp_path / "crawl")
        await manager.add_requests(["http://a.test/down", "http://a.test/up"])
        failed = await manager.fetch_next_request()
        assert failed is not None and failed.url == "http://a.test/down"
        failed.retry_count, failed.state = 3, RequestState.ERROR  # as Crawlee gives up
        assert await manager.mark_request_as_handled(failed)
        done = await manager.fetch_next_request()
        assert done is not None and await manager.mark_request_as_handled(done)
        assert await manager.fetch_next_request() is None  # not again in this run
        assert await manager.is_finished() and await manager.get_handled_count() == 2
        manager.close()

    async def second_run() -> None:
        manager = UrlseenRequestManager(tmp_path / "crawl")
        added = await manager.add_request("http://a.test/down")
        assert added is not None and added.was_already_present
        assert not added.was_already_handled
        again = await manager.fetch_next_request()
        assert again is not None and again.url == "http://a.test/down"
        assert again.retry_count == 0 and again.state == RequestState.UNPROCESSED
        assert await manager.mark_request_as_handled(again)
        assert await manager.is_finished() and await manager.get_handled_count() == 2
        manager.close()

    run(first_run())
    run(second_run())


def test_shared_work_one_queue_for_every_process(redis_url: str, redis_name: str) -> None:
    from crawlee import RequestState

    async def scenario() -> None:
        shared = {"redis_url": redis_url, "redis_name": redis_name, "share_work": True}
        one = UrlseenRequestManager(None, capacity=10_000, **shared)
        two = UrlseenRequestManager(None, **shared)
        await one.add_requests([f"http://a.test/{i}" for i in range(4)])
        await two.add_request("http://a.test/urgent", forefront=True)
        first = await one.fetch_next_request()
        assert first is not None and first.url == "http://a.test/urgent"
        taken = [await two.fetch_next_request() for _ in range(3)]
        assert [r.url for r in taken if r] == [f"http://a.test/{i}" for i in range(3)]
        assert not await one.is_finished()  # two holds requests in progress
        last = await one.fetch_next_request()
        assert last is not None and await one.fetch_next_request() is None
        last.state = RequestState.ERROR  # failed after Crawlee's retries: not again this run
        assert await one.mark_request_as_handled(last)
        assert await one.mark_request_as_handled(first)
        for request in taken:
            assert request is not None and await two.mark_request_as_handled(request)
        assert await one.is_finished() and await one.get_handled_count() == 2
        assert not await two.is_finished()  # one holds its failed request until it closes
        assert await two.get_handled_count() == 3
        one.close()  # the failed request goes back to the queue, retries reset
        again = await two.fetch_next_request()
        assert again is not None and again.url == last.url and again.retry_count == 0
        assert await two.mark_request_as_handled(again) and await two.is_finished()
        two.close()

    run(scenario())


def test_shared_work_needs_redis() -> None:
    with pytest.raises(ConfigError, match="share_work needs redis_url"):
        UrlseenRequestManager(None, share_work=True)
