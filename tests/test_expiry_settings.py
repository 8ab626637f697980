"""Expiry and forget settings checked when the crawl is configured: a one-line error naming
the setting (and the kinds that can expire); every kind a crawler can use expires (Bloom
kinds by generations); the exact filter forgets exactly, through its grouped adds too; a
Bloom filter cannot forget and says so."""

from __future__ import annotations

import time

import pytest
from scrapy import Request
from scrapy.settings import Settings

from urlseen.errors import ConfigError, OptionError
from urlseen.integrations._handle import SeenHandle
from urlseen.integrations.scrapy import FILTERS, UrlseenDupeFilter
from urlseen.job.expiry import CAN_EXPIRE, expire_seconds, expiry_options

DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"


@pytest.mark.parametrize("value", ["soon", 0, -5, True, "nan", float("inf")])
def test_a_bad_age_names_the_setting(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^URLSEEN_EXPIRE_AFTER must be a number of seconds"):
        UrlseenDupeFilter.from_settings(Settings({"URLSEEN_EXPIRE_AFTER": value}))


@pytest.mark.parametrize(("value", "seconds"), [(3, 3.0), ("86400", 86400.0), (0.5, 0.5)])
def test_an_age_is_seconds(value: object, seconds: float) -> None:
    assert expire_seconds(value, "X") == seconds


@pytest.mark.parametrize("kind", ["bloom", "dsbf", "mdbf"])
def test_a_bloom_kind_expires_by_generations(kind: str) -> None:
    settings = Settings(
        {"URLSEEN_FILTER": kind, "URLSEEN_EXPIRE_AFTER": 60, "URLSEEN_GENERATIONS": 3}
    )
    df = UrlseenDupeFilter.from_settings(settings)
    try:
        assert not df.request_seen(Request("http://a.test/1"))
        assert df.request_seen(Request("http://a.test/1"))
        details = df.seen.stats().details
        assert (details["window"], details["generations"], details["expire_after"]) == (20, 3, 60)
    finally:
        df.close()


def test_a_kind_that_can_do_neither_is_refused_naming_those_that_can() -> None:
    with pytest.raises(ConfigError) as caught:
        expiry_options("similar", False, 60.0, {}, "URLSEEN_EXPIRE_AFTER", 4)
    message = str(caught.value)
    assert message.startswith("URLSEEN_EXPIRE_AFTER: the similar filter cannot expire")
    assert CAN_EXPIRE in message and "bloom and dsbf (local or shared)" in CAN_EXPIRE


@pytest.mark.parametrize("value", [0, 65])
def test_generations_out_of_range_name_the_setting(value: int) -> None:
    settings = Settings(
        {"URLSEEN_FILTER": "bloom", "URLSEEN_EXPIRE_AFTER": 60, "URLSEEN_GENERATIONS": value}
    )
    with pytest.raises(OptionError, match=r"^URLSEEN_GENERATIONS must be >= 1 and <= 64"):
        UrlseenDupeFilter.from_settings(settings)


def test_a_shared_bloom_filter_expires(redis_url: str, redis_name: str) -> None:
    handle = SeenHandle("bloom", redis=redis_url, name=redis_name, expire_after=60)
    try:
        assert handle.seen.add(b"k") and not handle.seen.add(b"k")
        assert handle.seen.stats().details["window"] == 15.0
    finally:
        handle.clear()


def test_a_state_keeps_whether_it_expires(tmp_path) -> None:
    """A Bloom state made without an age is refused one, and one made with an age is refused
    without it (or with another): either would silently start a new filter beside it."""
    plain = tmp_path / "plain"
    UrlseenDupeFilter("bloom", capacity=100, state=plain).close()
    with pytest.raises(ConfigError, match="made without URLSEEN_EXPIRE_AFTER"):
        UrlseenDupeFilter("bloom", capacity=100, state=plain, expire_after=60)
    aged = tmp_path / "aged"
    UrlseenDupeFilter("bloom", capacity=100, state=aged, expire_after=60).close()
    with pytest.raises(ConfigError, match="was made with URLSEEN_EXPIRE_AFTER"):
        UrlseenDupeFilter("bloom", capacity=100, state=aged)
    with pytest.raises(ConfigError, match="expiry after 60 s in 4, not 'bloom', expiry after 90"):
        UrlseenDupeFilter("bloom", capacity=100, state=aged, expire_after=90)


def test_rotating_takes_its_window_from_the_age(tmp_path) -> None:
    handle = SeenHandle("rotating", state=tmp_path / "r", capacity=1000, expire_after=40)
    try:
        assert handle.seen.stats().details["window"] == 10.0  # 40 s / 4 generations
    finally:
        handle.close()
    with pytest.raises(ConfigError, match="drop the window option"):
        SeenHandle("rotating", capacity=1000, expire_after=40, window=3)


def test_the_exact_filter_forgets_exactly_through_grouped_adds(tmp_path) -> None:
    df = UrlseenDupeFilter("exact", capacity=1000, state=tmp_path / "s")
    try:
        a, b = Request("http://a.test/1"), Request("http://a.test/2")
        assert not df.request_seen(a) and not df.request_seen(b)
        assert df.request_seen(a)  # waiting in the group: still seen
        assert df.forget(a, "test")
        assert not df.request_seen(a)  # new again
        assert df.request_seen(b)  # the other is untouched
        df.checkpoint()
        assert df.forget(a, "test") and not df.forget(a, "test")  # committed, then gone
    finally:
        df.close()


def test_the_exact_filter_expires_by_first_seen_time(tmp_path) -> None:
    df = UrlseenDupeFilter("exact", capacity=1000, state=tmp_path / "s")
    old = Request("http://a.test/old")
    assert not df.request_seen(old)
    df.close()
    time.sleep(1.2)
    df = UrlseenDupeFilter("exact", capacity=1000, state=tmp_path / "s", expire_after=1)
    try:
        assert df.handle.expiry is not None and df.handle.expiry.expired == 1
        assert not df.request_seen(old)  # expired when the filter opened
        assert df.request_seen(old)
    finally:
        df.close()


def test_a_bloom_filter_cannot_forget(tmp_path) -> None:
    df = UrlseenDupeFilter("bloom", capacity=1000)
    try:
        request = Request("http://a.test/1")
        df.request_seen(request)
        assert not df.forget(request, "a request failed")
        assert df.request_seen(request)  # still seen
    finally:
        df.close()


def test_a_request_a_callback_marks_is_forgotten(tmp_path) -> None:
    """ForgetFailedResponses, after the callback's output: the marked request is forgotten,
    an unmarked 200 and a 404 (the site's answer) are not, a 503 the spider does not handle is."""
    from scrapy import Spider
    from scrapy.http import HtmlResponse
    from scrapy.utils.test import get_crawler

    from urlseen.integrations.scrapy_forget import ForgetFailedResponses

    crawler = get_crawler(Spider, settings_dict={"DUPEFILTER_CLASS": DUPEFILTER})
    crawler.spider = crawler._create_spider("s")
    df = UrlseenDupeFilter("exact", capacity=1000, state=tmp_path / "s")
    FILTERS[crawler] = df  # as from_crawler registers it
    middleware = ForgetFailedResponses.from_crawler(crawler)
    try:
        answers = {}
        for path, status, mark in [("a", 200, True), ("b", 200, False), ("c", 404, False),
                                   ("d", 503, False)]:  # fmt: skip
            request = Request(
                f"http://a.test/{path}", meta={"urlseen_forget": True} if mark else {}
            )
            assert not df.request_seen(request)
            response = HtmlResponse(request.url, status=status, request=request, body=b"")
            assert list(middleware.process_spider_output(response, iter(["item"]))) == ["item"]
            answers[path] = df.request_seen(request)  # False: forgotten, new again
        assert answers == {"a": False, "b": True, "c": True, "d": False}
    finally:
        df.close()
