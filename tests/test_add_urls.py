"""canonical.add_urls (and BloomFilter.add_urls): canonicalize and check-and-add a batch in C,
with the answers and the filter state of add_many on the canonical forms, on real URLs."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from conftest import require_dev_urls_path
from urlseen.bloom.bloom import BloomFilter
from urlseen.bloom.growing import GrowingBloomFilter
from urlseen.canonical import add_urls, canonicalize
from urlseen.errors import InvalidKeyError
from urlseen.exact.filter import ExactFilter


class SetFilter:
    """A filter without a dedup step: add_urls hands it the engine's keys."""

    def __init__(self) -> None:
        self.keys: set[str | bytes] = set()

    def add_many(self, keys: Iterable[str | bytes]) -> list[bool]:
        out = []
        for key in keys:
            if isinstance(key, str):
                key = key.encode()
            out.append(key not in self.keys)
            self.keys.add(key)
        return out


FILTERS: dict[str, Callable[[], Any]] = {
    "bloom": lambda: BloomFilter(400_000, 1e-7),
    "growing": lambda: GrowingBloomFilter(1e-7, start_capacity=20_000),
    "exact": lambda: ExactFilter(400_000),
    "set": SetFilter,
}


@pytest.fixture(scope="module")
def dev_lines() -> list[str]:
    """Every 8th line of the development set, repeats, IRIs, spaces and typos included (the
    blank lines are no URLs: canonicalize refuses them)."""
    with gzip.open(require_dev_urls_path(), "rt", encoding="utf-8", newline="\n") as f:
        lines = [line.rstrip("\n") for line in itertools.islice(f, 0, None, 8)]
    return [line for line in lines if line.strip()]


@pytest.mark.parametrize("kind", sorted(FILTERS))
def test_answers_equal_add_many_of_canonical_forms_on_dev_lines(
    kind: str, dev_lines: list[str]
) -> None:
    fast, slow = FILTERS[kind](), FILTERS[kind]()
    half = len(dev_lines) // 2  # two calls: the second meets the first one's URLs again
    got = add_urls(fast, dev_lines[:half]) + add_urls(fast, dev_lines)
    keys = [canonicalize(url) for url in dev_lines]
    want = slow.add_many(keys[:half]) + slow.add_many(keys)
    assert got == want
    assert 0 < sum(got) < len(dev_lines)
    if kind == "set":
        assert fast.keys == slow.keys


def test_bytes_lines_equal_str_lines(dev_lines: list[str]) -> None:
    lines = dev_lines[:50_000]
    one, two = BloomFilter(100_000, 1e-7), BloomFilter(100_000, 1e-7)
    assert one.add_urls([line.encode() for line in lines]) == two.add_urls(lines)
    assert len(one) == len(two)


def test_odd_urls_take_the_per_url_path_with_the_same_answers() -> None:
    urls = [
        "HTTP://Example.com/a?b=2&a=1#x",
        "http://example.com/a?a=1&b=2",
        "http://x/\nhttp://y/",
    ]
    urls += ["http://x/", "http://y/", " http://x/ ", "http://x/\r"]
    seen, ref = BloomFilter(1000, 1e-7), BloomFilter(1000, 1e-7)
    assert add_urls(seen, urls) == ref.add_many([canonicalize(u) for u in urls])
    assert add_urls(seen, iter(urls)) == [False] * len(urls)


def test_not_utf8_bytes_are_keyed_by_their_bytes() -> None:
    seen = SetFilter()
    assert add_urls(seen, [b"http://x/\xff", b"http://x/\xff\r", b"http://x/%FF"]) == [
        True,
        False,
        True,
    ]
    assert b"http://x/\xff" in seen.keys


@pytest.mark.parametrize("bad", ["", "   ", "\ud800", 7])
def test_a_url_without_a_key_raises_invalid_key_error(bad: Any) -> None:
    with pytest.raises(InvalidKeyError):
        add_urls(BloomFilter(1000, 1e-7), ["http://a/", bad])


def test_raw_answers_are_add_many_of_the_text() -> None:
    urls = ["http://A/", "http://a/", "http://A/", "http://a/\r"]
    seen = BloomFilter(1000, 1e-7)
    assert seen.add_urls(urls, canonicalize=False) == [True, True, False, True]
