"""UrlseenDupeFilter inside Scrapy's real scheduler (no reactor needed): settings, Scrapy's
fingerprints, JOBDIR persistence, Redis sharing, logs and stats, bad input."""

from __future__ import annotations

import hashlib
import logging
import random
import warnings
from pathlib import Path
from typing import Any

import pytest

from conftest import in_ci

if not in_ci():  # CI installs urlseen[test], Scrapy included: there a missing one fails
    pytest.importorskip("scrapy")

from scrapy import Request, Spider
from scrapy.core.scheduler import Scheduler
from scrapy.utils.test import get_crawler

from urlseen.bloom.bloom import BloomFilter
from urlseen.errors import ConfigError, FormatError
from urlseen.integrations._grouped import GroupedAdds
from urlseen.integrations.scrapy import UrlseenDupeFilter
from urlseen.kinds import open_filter

DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"


class _Spider(Spider):
    name = "test-spider"


def _scheduler(**settings: Any) -> tuple[Scheduler, Any]:
    """Scrapy's own scheduler with our dupefilter, built from settings as a crawl builds it."""
    crawler = get_crawler(
        _Spider,
        settings_dict={
            "DUPEFILTER_CLASS": DUPEFILTER,
            "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",
            "URLSEEN_CAPACITY": 10_000,
            **settings,
        },
    )
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler, crawler


def _enqueue(scheduler: Scheduler, urls: list[str]) -> list[bool]:
    """True where the scheduler took the request (new), False where the dupefilter dropped it."""
    return [scheduler.enqueue_request(Request(u)) for u in urls]


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_scheduler_drops_duplicates_by_scrapys_fingerprint(kind: str) -> None:
    scheduler, crawler = _scheduler(URLSEEN_FILTER=kind)
    assert isinstance(scheduler.df, UrlseenDupeFilter)
    # The fingerprint canonicalizes: fragment and query order do not make a new request.
    urls = ["http://a.test/x?b=2&a=1", "http://a.test/x?a=1&b=2#top", "http://a.test/y"]
    assert _enqueue(scheduler, urls) == [True, False, True]
    assert _enqueue(scheduler, urls) == [False, False, False]
    scheduler.close("finished")
    stats = crawler.stats.get_stats()
    assert stats["dupefilter/filtered"] == 4
    assert stats["urlseen/new"] == 2
    assert stats["urlseen/filter"] == kind
    assert stats["urlseen/filter_bits"] > 0


def test_uses_the_crawlers_request_fingerprinter() -> None:
    class PathOnly:
        """A fingerprinter that ignores the query: proves the crawler's one is used."""

        def fingerprint(self, request: Request) -> bytes:
            return request.url.split("?")[0].encode()

    scheduler, _ = _scheduler(REQUEST_FINGERPRINTER_CLASS=PathOnly)
    assert _enqueue(scheduler, ["http://a.test/p?x=1", "http://a.test/p?x=2"]) == [True, False]
    scheduler.close("finished")


def test_dont_filter_bypasses_the_filter() -> None:
    scheduler, _ = _scheduler()
    assert scheduler.enqueue_request(Request("http://a.test/"))
    assert scheduler.enqueue_request(Request("http://a.test/", dont_filter=True))
    scheduler.close("finished")


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_jobdir_persists_the_filter(kind: str, tmp_path: Path) -> None:
    urls = [f"http://a.test/{i}" for i in range(3000)]
    first, _ = _scheduler(URLSEEN_FILTER=kind, JOBDIR=str(tmp_path))
    assert all(_enqueue(first, urls[:2000]))
    first.close("shutdown")
    assert (tmp_path / "urlseen").is_dir()
    second, crawler = _scheduler(URLSEEN_FILTER=kind, JOBDIR=str(tmp_path))
    assert _enqueue(second, urls) == [False] * 2000 + [True] * 1000
    second.close("finished")
    assert crawler.stats.get_value("urlseen/new") == 1000


def test_explicit_state_wins_over_jobdir(tmp_path: Path) -> None:
    state = tmp_path / "seen.bloom"
    scheduler, _ = _scheduler(
        URLSEEN_FILTER="bloom", URLSEEN_STATE=str(state), JOBDIR=str(tmp_path / "job")
    )
    _enqueue(scheduler, ["http://a.test/"])
    scheduler.close("finished")
    with BloomFilter.open(state) as seen:
        assert len(seen) == 1
    assert not (tmp_path / "job" / "urlseen" / "seen.bloom").exists()


def test_settings_map_to_constructor_arguments(tmp_path: Path) -> None:
    scheduler, _ = _scheduler(
        URLSEEN_FILTER="bloom",
        URLSEEN_CAPACITY="5000",
        URLSEEN_ERROR_RATE="0.01",
        URLSEEN_STATE=str(tmp_path / "f.bloom"),
    )
    stats = scheduler.df.seen.stats()
    assert (stats.kind, stats.capacity, stats.error_rate) == ("bloom", 5000, 0.01)
    assert stats.details["path"] == str(tmp_path / "f.bloom")
    scheduler.close("finished")


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"URLSEEN_FILTER": "bloom", "URLSEEN_LAYOUT": "standard"}, {"layout": "standard"}),
        ({"URLSEEN_FILTER": "mdbf", "URLSEEN_GROUPS": "3"}, {"groups": 3}),
        ({"URLSEEN_FILTER": "rotating", "URLSEEN_GENERATIONS": "2"}, {"generations": 2}),
    ],
)
def test_kind_options_are_read_from_settings(
    settings: dict[str, Any], expected: dict[str, Any]
) -> None:
    scheduler, _ = _scheduler(**settings)
    details = scheduler.df.seen.stats().details
    assert {key: details[key] for key in expected} == expected
    scheduler.close("finished")


def test_default_is_exact_and_not_persisted() -> None:
    scheduler, _ = _scheduler()
    assert scheduler.df.kind == "exact"
    assert isinstance(scheduler.df.seen, GroupedAdds)
    folder = scheduler.df.seen.seen._temporary  # a temporary library, removed on close
    assert folder is not None
    assert folder.is_dir()
    scheduler.close("finished")
    assert not folder.exists()


@pytest.mark.parametrize("kind", [None, "bloom", "dsbf"])
def test_redis_shares_one_filter(redis_url: str, redis_name: str, kind: str | None) -> None:
    settings = {"URLSEEN_REDIS_URL": redis_url, "URLSEEN_REDIS_NAME": redis_name}
    if kind is not None:
        settings["URLSEEN_FILTER"] = kind
    one, _ = _scheduler(**settings)
    two, _ = _scheduler(**settings)
    assert one.df.kind == (kind or "exact")  # exact by default, shared or not
    urls = [f"http://a.test/{i}" for i in range(200)]
    first = _enqueue(one, urls[:100])
    second = _enqueue(two, urls)
    assert all(first)
    assert second == [False] * 100 + [True] * 100
    one.close("finished")
    two.close("finished")


def test_redis_default_name_is_the_spiders(redis_url: str) -> None:
    from urlseen.shared.library import RedisLibrary

    scheduler, _ = _scheduler(URLSEEN_REDIS_URL=redis_url)
    assert RedisLibrary.exists(redis_url, "scrapy:test-spider")
    scheduler.close("finished")
    RedisLibrary(redis_url, "scrapy:test-spider").destroy()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"URLSEEN_FILTER": "nope"}, "unknown filter 'nope'"),
        ({"URLSEEN_FILTER": "nope", "URLSEEN_REDIS_URL": "redis://127.0.0.1:1/0"}, "shared"),
        ({"URLSEEN_STATE": "x", "URLSEEN_REDIS_URL": "redis://127.0.0.1:1/0"}, "not both"),
        ({"URLSEEN_CAPACITY": 0}, "capacity"),
        ({"URLSEEN_FILTER": "bloom", "URLSEEN_ERROR_RATE": 2}, "error_rate"),
        ({"URLSEEN_LAYOUT": "standard"}, "URLSEEN_LAYOUT applies to URLSEEN_FILTER"),
        ({"URLSEEN_FILTER": "bloom", "URLSEEN_LAYOUT": "wide"}, "layout"),
    ],
)
def test_bad_settings_raise_config_error(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _scheduler(**settings)


def test_damaged_state_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "seen.bloom"
    state.write_bytes(b"not a urlseen state file" * 200)
    with pytest.raises(FormatError):
        _scheduler(URLSEEN_FILTER="bloom", URLSEEN_STATE=str(state))


def test_logs_like_scrapy_and_never_calls_the_deprecated_base_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecation warning would fail the test
        scheduler, crawler = _scheduler()
        with caplog.at_level(logging.DEBUG, logger="scrapy.dupefilters"):
            _enqueue(scheduler, ["http://a.test/1"] * 3 + ["http://a.test/2"] * 2)
        scheduler.close("finished")
    filtered = [r for r in caplog.records if "Filtered duplicate request" in r.getMessage()]
    assert len(filtered) == 1  # the first only, as Scrapy does without DUPEFILTER_DEBUG
    assert "no more duplicates will be shown" in filtered[0].getMessage()
    assert crawler.stats.get_value("dupefilter/filtered") == 3


@pytest.mark.parametrize("setting", ["URLSEEN_DEBUG", "DUPEFILTER_DEBUG"])
def test_debug_logs_every_duplicate(setting: str, caplog: pytest.LogCaptureFixture) -> None:
    scheduler, _ = _scheduler(**{setting: True})
    with caplog.at_level(logging.DEBUG, logger="scrapy.dupefilters"):
        _enqueue(scheduler, ["http://a.test/1"] * 4)
    scheduler.close("finished")
    filtered = [r for r in caplog.records if "Filtered duplicate request" in r.getMessage()]
    assert len(filtered) == 3
    assert all("referer" in r.getMessage() for r in filtered)


def test_audit_counts_the_bloom_filters_false_positives() -> None:
    scheduler, crawler = _scheduler(
        URLSEEN_FILTER="bloom", URLSEEN_CAPACITY=20, URLSEEN_ERROR_RATE=0.2, URLSEEN_AUDIT=True
    )
    urls = [f"http://a.test/{i}" for i in range(500)]
    taken = _enqueue(scheduler, urls)
    scheduler.close("finished")
    lost = taken.count(False)  # every URL is distinct: each drop is a false positive
    assert lost > 0
    assert crawler.stats.get_value("urlseen/false_positives") == lost
    assert crawler.stats.get_value("urlseen/new") == 500 - lost


def test_plain_constructor_without_a_crawler() -> None:
    seen = UrlseenDupeFilter("bloom", capacity=1000)
    assert not seen.request_seen(Request("http://a.test/"))
    assert seen.request_seen(Request("http://a.test/#x"))
    seen.close("finished")


@pytest.mark.parametrize("quick_test", [False, True])
def test_grouped_adds_answer_exactly_like_a_set(quick_test: bool) -> None:
    rng = random.Random(7)
    keys = [rng.randrange(400).to_bytes(4, "big") for _ in range(5000)]
    seen = open_filter("exact", capacity=50)  # small: its counters say "maybe" often
    maybe = seen.counters.__contains__ if quick_test else None
    grouped = GroupedAdds(seen, size=37, recent=16, maybe=maybe)
    model: set[bytes] = set()
    for key in keys:
        assert grouped.add(key) == (key not in model)
        model.add(key)
    assert len(grouped) == len(model)
    grouped.close()


def test_grouped_adds_commit_on_close(tmp_path: Path) -> None:
    grouped = GroupedAdds(open_filter("exact", capacity=1000, state=tmp_path), size=1000)
    assert grouped.add(b"k1") and grouped.add(b"k2")
    assert b"k1" in grouped
    grouped.close()
    with open_filter("exact", capacity=1000, state=tmp_path) as seen:
        assert seen.contains_many([b"k1", b"k2", b"k3"]) == [True, True, False]


# -- Scrapy's own contract: each public behaviour its tests/test_dupefilters.py checks of a
# dupefilter, checked here of ours (our tests, written from what Scrapy's check) -------------


class FromCrawlerDupeFilter(UrlseenDupeFilter):
    """A subclass that overrides from_crawler, as Scrapy's test does with RFPDupeFilter."""

    method = "n/a"

    @classmethod
    def from_crawler(cls, crawler: Any) -> UrlseenDupeFilter:
        df = super().from_crawler(crawler)
        df.method = "from_crawler"  # type: ignore[attr-defined]
        return df


SUBCLASS = f"{__name__}.FromCrawlerDupeFilter"


def _dupefilter(
    settings: dict[str, Any] | None = None, *, crawler: Any = None, open: bool = True
) -> UrlseenDupeFilter:
    """The dupefilter as Scrapy's scheduler builds it from the crawler's settings."""
    if crawler is None:
        crawler = get_crawler(settings_dict=_settings(settings))
    df = Scheduler.from_crawler(crawler).df
    if open:
        df.open()
    return df


def _settings(settings: dict[str, Any] | None) -> dict[str, Any]:
    return {"DUPEFILTER_CLASS": DUPEFILTER, "URLSEEN_CAPACITY": 10_000, **(settings or {})}


def test_scrapy_contract_from_crawler_through_the_scheduler() -> None:
    crawler = get_crawler(settings_dict=_settings({"DUPEFILTER_DEBUG": True}))
    scheduler = Scheduler.from_crawler(crawler)
    assert isinstance(scheduler.df, UrlseenDupeFilter)
    assert scheduler.df.debug
    scheduler.df.close("finished")
    sub = _dupefilter({"DUPEFILTER_DEBUG": True, "DUPEFILTER_CLASS": SUBCLASS}, open=False)
    assert type(sub) is FromCrawlerDupeFilter
    assert sub.debug and sub.method == "from_crawler"  # type: ignore[attr-defined]
    sub.close("finished")


def test_scrapy_contract_request_seen() -> None:
    df = _dupefilter()
    r1, r2, r3 = (Request(f"http://scrapytest.org/{i}") for i in (1, 2, 2))
    assert not df.request_seen(r1)
    assert df.request_seen(r1)
    assert not df.request_seen(r2)
    assert df.request_seen(r3)
    df.close("finished")


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_scrapy_contract_jobdir(kind: str, tmp_path: Path) -> None:
    r1, r2 = Request("http://scrapytest.org/1"), Request("http://scrapytest.org/2")
    settings = {"JOBDIR": str(tmp_path), "URLSEEN_FILTER": kind}
    df = _dupefilter(settings, open=False)
    try:
        df.open()
        assert not df.request_seen(r1)
        assert df.request_seen(r1)
    finally:
        df.close("finished")
    df2 = _dupefilter(settings, open=False)
    assert df != df2
    try:
        df2.open()
        assert df2.request_seen(r1)
        assert not df2.request_seen(r2)
        assert df2.request_seen(r2)
    finally:
        df2.close("finished")


def test_scrapy_contract_the_crawlers_fingerprinter() -> None:
    r1 = Request("http://scrapytest.org/index.html")
    r2 = Request("http://scrapytest.org/INDEX.html")
    df = _dupefilter()
    assert not df.request_seen(r1)
    assert not df.request_seen(r2)  # Scrapy's default fingerprint keeps the path's case
    df.close("finished")

    class CaseInsensitive:
        def fingerprint(self, request: Request) -> bytes:
            return hashlib.sha1(request.url.lower().encode()).digest()

    df = _dupefilter({"REQUEST_FINGERPRINTER_CLASS": CaseInsensitive})
    assert not df.request_seen(r1)
    assert df.request_seen(r2)
    df.close("finished")


def _log_twice(dupefilter_class: str, debug: bool, caplog: pytest.LogCaptureFixture) -> Any:
    """log() called twice, as Scrapy's test calls it; the records of Scrapy's logger."""
    settings = _settings({"DUPEFILTER_DEBUG": debug, "DUPEFILTER_CLASS": dupefilter_class})
    crawler = get_crawler(_Spider, settings_dict=settings)
    spider = _Spider.from_crawler(crawler)
    df = _dupefilter(crawler=crawler)
    r1 = Request("http://scrapytest.org/index.html")
    r2 = Request(
        "http://scrapytest.org/index.html",
        headers={"Referer": "http://scrapytest.org/INDEX.html"},
    )
    with caplog.at_level(logging.DEBUG):
        df.log(r1, spider)
        df.log(r2, spider)
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    df.close("finished")
    return caplog.record_tuples


@pytest.mark.parametrize("dupefilter_class", [DUPEFILTER, SUBCLASS])
def test_scrapy_contract_log(dupefilter_class: str, caplog: pytest.LogCaptureFixture) -> None:
    records = _log_twice(dupefilter_class, False, caplog)
    message = (
        "Filtered duplicate request: <GET http://scrapytest.org/index.html> - no more"
        " duplicates will be shown (see DUPEFILTER_DEBUG to show all duplicates)"
    )
    assert ("scrapy.dupefilters", logging.DEBUG, message) in records
    assert [r for r in records if "Filtered" in r[2]] == [
        ("scrapy.dupefilters", logging.DEBUG, message)
    ]


@pytest.mark.parametrize("dupefilter_class", [DUPEFILTER, SUBCLASS])
def test_scrapy_contract_log_debug(dupefilter_class: str, caplog: pytest.LogCaptureFixture) -> None:
    records = _log_twice(dupefilter_class, True, caplog)
    prefix = "Filtered duplicate request: <GET http://scrapytest.org/index.html>"
    assert ("scrapy.dupefilters", logging.DEBUG, f"{prefix} (referer: None)") in records
    assert (
        "scrapy.dupefilters",
        logging.DEBUG,
        f"{prefix} (referer: http://scrapytest.org/INDEX.html)",
    ) in records
