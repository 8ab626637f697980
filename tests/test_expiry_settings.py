"""Expiry and forget settings checked when the crawl is configured: a one-line error naming
the setting (and the kinds that can expire); the exact filter forgets exactly, through its
grouped adds too; a Bloom filter cannot forget and says so."""

from __future__ import annotations

import time

import pytest
from scrapy import Request
from scrapy.settings import Settings

from urlseen.errors import ConfigError
from urlseen.integrations._handle import SeenHandle
from urlseen.integrations.scrapy import FILTERS, UrlseenDupeFilter
from urlseen.job.expiry import expire_seconds

DUPEFILTER = "urlseen.integrations.scrapy.UrlseenDupeFilter"


@pytest.mark.parametrize("value", ["soon", 0, -5, True, "nan", float("inf")])
def test_a_bad_age_names_the_setting(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^URLSEEN_EXPIRE_AFTER must be a number of seconds"):
        UrlseenDupeFilter.from_settings(Settings({"URLSEEN_EXPIRE_AFTER": value}))


@pytest.mark.parametrize(("value", "seconds"), [(3, 3.0), ("86400", 86400.0), (0.5, 0.5)])
def test_an_age_is_seconds(value: object, seconds: float) -> None:
    assert expire_seconds(value, "X") == seconds


@pytest.mark.parametrize("kind", ["bloom", "dsbf", "mdbf"])
def test_a_kind_that_cannot_expire_is_refused_when_configured(kind: str) -> None:
    settings = Settings({"URLSEEN_FILTER": kind, "URLSEEN_EXPIRE_AFTER": 60})
    with pytest.raises(ConfigError) as caught:
        UrlseenDupeFilter.from_settings(settings)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"URLSEEN_EXPIRE_AFTER: the {kind} filter cannot expire")
    assert "exact and library (local or shared through Redis), rotating (local)" in message


def test_a_shared_bloom_filter_cannot_expire(redis_url: str, redis_name: str) -> None:
    with pytest.raises(ConfigError, match="the bloom filter shared through Redis cannot expire"):
        SeenHandle("bloom", redis=redis_url, name=redis_name, expire_after=60)


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
