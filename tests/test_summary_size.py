"""Summaries show a filter's memory in a unit that keeps it readable, and the real memory of a
filter whose data lives in a library (SQLite, Redis): not "0.0 MiB" for megabytes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_helpers import dedup, lines, summary
from urlseen.cli._common import human

SIZE = re.compile(r"filter (\d+(?:\.\d)?) (B|KiB|MiB|GiB|TiB) ")


@pytest.mark.parametrize(
    ("nbytes", "shown"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1024, "1.0 KiB"),
        (203_162, "198.4 KiB"),
        (3_418_648, "3.3 MiB"),
        (48 * 2**20, "48.0 MiB"),
        (5 * 2**30 + 2**29, "5.5 GiB"),
        (2**41, "2.0 TiB"),
    ],
)
def test_sizes_take_the_binary_unit_that_keeps_them_readable(nbytes: int, shown: str) -> None:
    assert human(nbytes, "B") == shown


def test_counts_keep_their_short_decimal_form() -> None:
    assert [human(n) for n in (7, 1000, 1_234_567, 2.5e9)] == ["7", "1k", "1.23M", "2.5G"]


def _shown_bytes(stderr: str) -> float:
    match = SIZE.search(stderr)
    assert match, stderr
    number, unit = float(match.group(1)), match.group(2)
    return number * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)


def test_a_shared_exact_library_shows_what_it_takes_in_redis(
    redis_url: str, redis_name: str
) -> None:
    import redis

    urls = lines(*(f"https://example.com/page/{i}?q={i % 7}" for i in range(40_000)))
    args = ("--filter", "exact", "--redis", redis_url, "--name", redis_name)
    text = dedup(*args, input=urls)
    assert "40,000 new" in text.stderr
    shown = _shown_bytes(text.stderr)
    client = redis.Redis.from_url(redis_url)
    used = sum(
        int(client.memory_usage(key, samples=0) or 0)
        for key in client.scan_iter(match=f"*{redis_name}*", count=1000)
    )
    assert used > 2**20  # megabytes: the summary printed "0.0 MiB" for this
    assert 0.5 * used < shown < 1.5 * used, (shown, used, text.stderr)
    again = summary(dedup(*args, "--json", input=urls))
    assert again["new"] == 0 and 0.5 * used < again["filter_bits"] / 8 < 1.5 * used


def test_a_local_library_shows_its_file(tmp_path: Path) -> None:
    urls = lines(*(f"https://example.com/{i}" for i in range(5_000)))
    state = tmp_path / "seen"
    text = dedup("--filter", "library", "--state", state, input=urls)
    on_disk = sum(p.stat().st_size for p in state.iterdir() if p.name.startswith("library.sqlite"))
    # Shown while the library is open (its WAL beside it), measured after its close folded it.
    assert 0.5 * on_disk < _shown_bytes(text.stderr) < 2 * on_disk, (text.stderr, on_disk)
