"""One default per kind, whoever opens the filter: the library's constructors, the kinds table
(and through it the CLI), the Scrapy dupefilter and the Crawlee manager create a filter with the
same error rate and capacity when none is given (urlseen.defaults holds them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import urlseen
from cli_helpers import invoke
from conftest import in_ci
from urlseen import defaults, kinds

RATED = [name for name, rate in defaults.ERROR_RATE.items() if rate is not None]


def _rate(seen: Any) -> float:
    """The error rate a filter was created with (an exact filter's: its counting filter's)."""
    stats = seen.stats()
    return stats.details.get("filter_error_rate", stats.error_rate)


def _state(kind: str, tmp_path: Path) -> Path | None:
    return tmp_path / f"state-{kind}" if kinds.KINDS[kind].state else None


def test_the_table_reads_every_kind_from_the_defaults():
    assert set(kinds.KINDS) == set(defaults.ERROR_RATE)
    for name, row in kinds.KINDS.items():
        assert row.error_rate == defaults.ERROR_RATE[name]
        assert row.defaults()["capacity"] == defaults.CAPACITY
    assert kinds.DEFAULT_CAPACITY == defaults.CAPACITY


LIBRARY = {
    "bloom": lambda: urlseen.BloomFilter(1000),
    "exact": lambda: urlseen.ExactFilter.temporary(1000),
    "dsbf": lambda: urlseen.SplittableBloomFilter(1000),
    "mdbf": lambda: urlseen.MultiDimensionalBloomFilter(1000),
    "rotating": lambda: urlseen.RotatingBloomFilter(1000),
    "similar": lambda: urlseen.SimilarityFilter(1000),
}


@pytest.mark.parametrize("kind", RATED)
def test_the_library_and_the_kinds_table_agree(kind, tmp_path):
    with LIBRARY[kind]() as seen:
        assert _rate(seen) == defaults.ERROR_RATE[kind]
    with kinds.open_filter(kind, capacity=1000, state=_state(kind, tmp_path)) as seen:
        assert _rate(seen) == defaults.ERROR_RATE[kind]


@pytest.mark.parametrize("kind", [k for k in RATED if kinds.KINDS[k].state])
def test_the_cli_creates_the_tables_default(kind, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\nhttps://b.example/\n")
    state = _state(kind, tmp_path)
    result = invoke("dedup", "--filter", kind, "--state", state, "--capacity", "1000",
                    "-o", tmp_path / "out.txt", src)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert kinds.describe(state)["error_rate"] == defaults.ERROR_RATE[kind]


@pytest.mark.parametrize("kind", RATED)
def test_the_scrapy_dupefilter_creates_the_tables_default(kind, tmp_path):
    if not in_ci():  # CI installs Scrapy: there a missing one fails
        pytest.importorskip("scrapy")
    from scrapy.settings import Settings

    from urlseen.integrations.scrapy import UrlseenDupeFilter

    settings = {"URLSEEN_FILTER": kind, "URLSEEN_CAPACITY": 1000}
    if kinds.KINDS[kind].state:
        settings["URLSEEN_STATE"] = str(_state(kind, tmp_path))
    if kinds.KINDS[kind].url_keys:
        settings["URLSEEN_KEYS"] = "url"
    try:
        dupefilter = UrlseenDupeFilter.from_settings(Settings(settings))
    except urlseen.ConfigError as exc:  # a kind that cannot read request fingerprints
        assert kinds.KINDS[kind].url_keys, exc
        return
    try:
        assert _rate(dupefilter.seen) == defaults.ERROR_RATE[kind]
    finally:
        dupefilter.close("finished")


@pytest.mark.parametrize("kind", ["bloom", "exact"])
def test_the_crawlee_manager_creates_the_tables_default(kind, tmp_path):
    if not in_ci():  # CI installs Crawlee: there a missing one fails
        pytest.importorskip("crawlee")
    from urlseen.integrations.crawlee import UrlseenRequestManager

    manager = UrlseenRequestManager(tmp_path / "crawl", filter=kind, capacity=1000)
    try:
        assert _rate(manager.handle.seen) == defaults.ERROR_RATE[kind]
    finally:
        manager.close()


@pytest.mark.parametrize("kind", ["bloom", "dsbf"])
def test_shared_filters_take_the_same_defaults(kind, redis_url, redis_name):
    if kind == "bloom":
        made = urlseen.RedisBloomFilter(redis_url, redis_name, capacity=1000)
    else:
        made = urlseen.SplittableBloomFilter(1000, redis=redis_url, name=redis_name)
    with made as seen:
        assert _rate(seen) == defaults.ERROR_RATE[kind]
    with kinds.open_filter(kind, capacity=1000, redis=redis_url, name=redis_name) as seen:
        assert _rate(seen) == defaults.ERROR_RATE[kind]
