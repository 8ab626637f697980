"""The table of kinds (urlseen.kinds): every front end builds the same filter from the same
inputs, options apply to the kinds that take them, and `describe` (urlseen info) reads and
verifies a state of every kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cli_helpers import dedup, invoke, lines
from urlseen import kinds
from urlseen.errors import ConfigError, FormatError

pytest.importorskip("scrapy")

from scrapy.utils.test import get_crawler

from urlseen.integrations.scrapy import UrlseenDupeFilter

URLS = lines(*(f"https://example.com/page/{i}" for i in range(40)))
SCRAPY_KINDS = [k.name for k in kinds.KINDS.values() if not k.url_keys]


def _signature(seen: Any) -> dict[str, Any]:
    """What makes two filters the same filter: kind, sizing, layout, hash, bits."""
    stats = seen.stats()
    inner = getattr(seen, "seen", seen)  # Scrapy's grouped adds wrap a local exact filter
    return {
        "class": type(inner).__name__,
        "kind": stats.kind,
        "capacity": stats.capacity,
        "error_rate": stats.error_rate,
        "bits": stats.bits,
        **{key: stats.details.get(key) for key in ("layout", "hash", "k", "leaf_bits")},
    }


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The signature of every filter kinds.open_filter returns, whoever called it."""
    record: list[dict[str, Any]] = []
    real = kinds.open_filter

    def recording(*args: Any, **values: Any) -> Any:
        seen = real(*args, **values)
        record.append(_signature(seen))
        return seen

    monkeypatch.setattr(kinds, "open_filter", recording)
    return record


def _through_cli(kind: str, sizing: dict[str, str], place: list[str]) -> None:
    args = ["--filter", kind, *place]
    for name, value in sizing.items():
        args += [f"--{name.replace('_', '-')}", value]
    dedup(*args, input=URLS)


def _through_scrapy(kind: str, sizing: dict[str, str], place: dict[str, Any]) -> None:
    settings = {"URLSEEN_FILTER": kind, **place}
    settings.update({f"URLSEEN_{name.upper()}": value for name, value in sizing.items()})
    dupefilter = UrlseenDupeFilter.from_crawler(get_crawler(settings_dict=settings))
    dupefilter.close("finished")


SIZINGS = {"defaults": {}, "given": {"capacity": "5000", "error_rate": "0.01"}}


@pytest.mark.parametrize("sizing", sorted(SIZINGS))
@pytest.mark.parametrize("kind", SCRAPY_KINDS)
def test_cli_and_scrapy_build_the_same_local_filter(
    kind: str, sizing: str, tmp_path: Path, opened: list[dict[str, Any]]
) -> None:
    values = SIZINGS[sizing]
    if kind == "library" and values:
        values = {"capacity": values["capacity"]}  # the library alone has no error rate
    _through_cli(kind, values, [])
    _through_scrapy(kind, values, {})
    row = kinds.KINDS[kind]
    if row.state:  # and persisted: the CLI's --state, Scrapy's URLSEEN_STATE
        suffix = "" if row.state == "folder" else f".{kind}"
        _through_cli(kind, values, ["--state", str(tmp_path / f"cli{suffix}")])
        _through_scrapy(kind, values, {"URLSEEN_STATE": str(tmp_path / f"scrapy{suffix}")})
    assert len(opened) == (4 if row.state else 2)
    assert opened[0] == opened[1], (opened[0], opened[1])
    if row.state:
        assert opened[2] == opened[3]
        if opened[0]["class"] != "GrowingBloomFilter":  # a state file keeps a planned capacity
            assert opened[2] == opened[0]
    if values and kind != "library":  # the library alone is not sized: it holds every URL
        assert opened[0]["capacity"] == 5000


@pytest.mark.parametrize("kind", [k.name for k in kinds.KINDS.values() if k.open_shared])
def test_cli_and_scrapy_build_the_same_shared_filter(
    kind: str, redis_url: str, redis_name: str, opened: list[dict[str, Any]]
) -> None:
    values = (
        {"capacity": "5000"} if kind == "library" else {"capacity": "5000", "error_rate": "0.01"}
    )
    _through_cli(kind, values, ["--redis", redis_url, "--name", f"{redis_name}-cli"])
    _through_scrapy(  # a filter of its own, not the one the CLI made
        kind, values, {"URLSEEN_REDIS_URL": redis_url, "URLSEEN_REDIS_NAME": f"{redis_name}-s"}
    )
    assert len(opened) == 2 and opened[0] == opened[1], opened


def test_scrapy_refuses_a_kind_that_reads_urls() -> None:
    with pytest.raises(ConfigError, match="URLSEEN_FILTER 'similar' reads URLs"):
        _through_scrapy("similar", {}, {})


@pytest.mark.parametrize(
    ("kind", "option", "value"),
    [("bloom", "groups", 2), ("exact", "layout", "standard"), ("mdbf", "cache_entries", 5)],
)
def test_an_option_of_another_kind_is_refused(kind: str, option: str, value: object) -> None:
    with pytest.raises(kinds.OptionError, match=f"{option} applies to filter"):
        kinds.open_filter(kind, capacity=100, **{option: value})
    result = invoke("dedup", "--filter", kind, f"--{option.replace('_', '-')}", str(value),
                    input=URLS)  # fmt: skip
    assert result.exit_code == 2 and f"--{option.replace('_', '-')} applies to" in result.stderr


def test_unknown_kind_names_the_kinds() -> None:
    with pytest.raises(kinds.OptionError, match="choose one of bloom, exact"):
        kinds.open_filter("cuckoo")


def test_state_in_a_folder_is_a_file_for_file_kinds(tmp_path: Path) -> None:
    assert kinds.state_in(tmp_path, "bloom") == tmp_path / "seen.bloom"
    assert kinds.state_in(tmp_path, "exact") == tmp_path


# -- describe / info --verify on a state of every kind ---------------------------------------

STATEFUL = [k for k in kinds.KINDS.values() if k.state]


@pytest.mark.parametrize("row", STATEFUL, ids=lambda row: row.name)
def test_info_verify_works_on_a_state_of_every_kind(row: kinds.Kind, tmp_path: Path) -> None:
    state = tmp_path / ("state" if row.state == "folder" else f"state.{row.name}")
    dedup("--filter", row.name, "--state", state, "--capacity", "1000", input=URLS)
    result = invoke("info", "--verify", "--json", state)
    assert result.exit_code == 0, result.stderr
    desc = kinds.describe(state, verify=True)
    verified = [value for key, value in _flatten(desc) if key.endswith("verified")]
    assert verified and all(v is True for v in verified), desc


@pytest.mark.parametrize("row", [k for k in STATEFUL if k.state == "file"], ids=lambda r: r.name)
def test_info_verify_catches_a_flipped_data_byte(row: kinds.Kind, tmp_path: Path) -> None:
    state = tmp_path / f"state.{row.name}"
    dedup("--filter", row.name, "--state", state, "--capacity", "1000", input=URLS)
    data = bytearray(state.read_bytes())
    data[4096 + 3] ^= 0x10  # the first data page: bits every kind keeps
    state.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="checksum"):
        kinds.describe(state, verify=True)
    assert invoke("info", "--verify", state).exit_code == 1


def _flatten(value: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _flatten(v, k)]
    if isinstance(value, list):
        return [pair for v in value for pair in _flatten(v, key)]
    return [(key, value)]
