"""Scrapy settings of the wrong form are refused naming the setting, and a value that looks
false (0) is checked, not read as "not set"."""

from __future__ import annotations

import pytest

from conftest import in_ci

if not in_ci():  # CI installs urlseen[test], Scrapy included: there a missing one fails
    pytest.importorskip("scrapy")
from scrapy.settings import Settings

from urlseen.errors import ConfigError
from urlseen.integrations.scrapy import UrlseenDupeFilter


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"URLSEEN_CAPACITY": "abc"}, "URLSEEN_CAPACITY must be a whole number, not 'abc'"),
        ({"URLSEEN_CAPACITY": True}, "URLSEEN_CAPACITY must be a whole number, not True"),
        ({"URLSEEN_ERROR_RATE": "tiny"}, "URLSEEN_ERROR_RATE must be a number, not 'tiny'"),
        ({"URLSEEN_CACHE_ENTRIES": "many"}, "URLSEEN_CACHE_ENTRIES must be a whole number"),
        ({"URLSEEN_LEASE": "soon", "URLSEEN_REDIS_URL": "redis://127.0.0.1:6379/15"},
         "URLSEEN_LEASE must be a number"),
    ],
)  # fmt: skip
def test_a_setting_of_the_wrong_type_is_refused_by_name(settings, problem):
    with pytest.raises(ConfigError, match=problem):
        UrlseenDupeFilter.from_settings(Settings(settings))


@pytest.mark.parametrize("lease", [0, 0.0, "0", -1, 86401])
def test_a_lease_out_of_range_is_refused_not_read_as_the_default(lease, redis_url):
    settings = {"URLSEEN_LEASE": lease, "URLSEEN_REDIS_URL": redis_url}
    with pytest.raises(ConfigError, match=r"URLSEEN_LEASE must be > 0 and <= 86400"):
        UrlseenDupeFilter.from_settings(Settings(settings))


def test_a_zero_cache_is_a_value_not_an_absence(tmp_path):
    settings = {"URLSEEN_FILTER": "exact", "URLSEEN_STATE": str(tmp_path / "st"),
                "URLSEEN_CACHE_ENTRIES": 0, "URLSEEN_CAPACITY": 1000}  # fmt: skip
    dupefilter = UrlseenDupeFilter.from_settings(Settings(settings))
    try:
        assert dupefilter.seen.stats().details["cache_entries"] == 0
    finally:
        dupefilter.close("finished")
