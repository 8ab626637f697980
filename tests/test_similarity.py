"""SimilarityFilter: each mode's decisions on hand-made cases, the patent's rule reproduced
exactly against an independent oracle (hashlib's MD5, a Python set of bits), sizing, batches,
persistence, the URL_DB audit log, and no crash on any string.

The oracle re-implements the patent's procedure from its text alone: bit = MD5(value) as a
128-bit big-endian integer mod N (depth raw), plus the region offset; a URL is SIMILAR iff all
its bits are set.
"""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen.bloom import sizing as _sizing
from urlseen.bloom.bloom import BloomFilter
from urlseen.errors import (
    ClosedError,
    ConfigError,
    FormatError,
    InvalidKeyError,
    ReadOnlyError,
)
from urlseen.protocol import SeenFilter
from urlseen.similarity import SimilarityFilter
from urlseen.similarity.features import FeatureExtractor
from urlseen.similarity.sizing import is_prime, largest_prime_at_most
from urlseen.similarity.url_db import SQLiteUrlDB
from urlseen.state import format

MODES = ("patent", "exact4", "composite")


def _random_urls(rng: random.Random, n: int, names: int = 6) -> list[str]:
    """Small alphabets, so features repeat and both answers occur often."""
    urls = []
    for _ in range(n):
        depth = rng.randint(0, 4)
        path = "/".join(f"s{rng.randrange(names)}" for _ in range(depth))
        query = f"?p={rng.randint(0, 3)}" if rng.random() < 0.3 else ""
        urls.append(f"http://{rng.choice('xyz')}.com/{path}{query}")
    return urls


# -- the modes on hand-made cases ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_same_pattern_is_dropped_by_every_mode(mode: str) -> None:
    f = SimilarityFilter(10_000, 0.001, mode=mode)
    assert f.add("http://x.com/cal/2024/01/day.html") is True
    # same site, depth 5, first directory "cal", tail "day.html": a calendar variant
    assert f.add("http://x.com/cal/2025/07/day.html") is False
    assert f.add("http://x.com/cal/2024/01/day.html") is False  # the URL itself
    assert f.add("HTTP://X.com/cal/2024/01/day.html#top") is False  # canonicalized first


@pytest.mark.parametrize("mode", MODES)
def test_different_site_or_shape_is_kept_by_every_mode(mode: str) -> None:
    f = SimilarityFilter(10_000, 0.001, mode=mode)
    assert f.add("http://x.com/a/p.html") is True
    assert f.add("http://y.com/a/p.html") is True  # another site
    assert f.add("http://x.com/a/b/p.html") is True  # another depth
    assert f.add("http://x.com/q.html") is True  # another tail (and depth)
    assert len(f) == 4


@pytest.mark.parametrize("mode", ["patent", "exact4"])
def test_per_feature_modes_drop_combinations_of_earlier_urls(mode: str) -> None:
    """Each feature value seen in *some* earlier URL is enough to be dropped: features are
    tested one by one."""
    f = SimilarityFilter(10_000, 0.001, mode=mode)
    assert f.add("http://site.com/a/y/p.html") is True
    assert f.add("http://site.com/b/x/q.html") is True
    assert f.add("http://site.com/a/x/q.html") is False  # site, depth, dir1 'a', tail 'q.html'
    g = SimilarityFilter(10_000, 0.001, mode=mode)
    assert g.add("http://site.com/b/p.html") is True
    assert g.add("http://other.com/x/q.html") is True
    assert g.add("http://site.com/b/q.html") is False  # tail from another site


def test_composite_keeps_combinations_of_earlier_urls() -> None:
    f = SimilarityFilter(10_000, 0.001, mode="composite")
    for url in ("http://site.com/a/y/p.html", "http://site.com/b/x/q.html"):
        assert f.add(url) is True
    assert f.add("http://site.com/a/x/q.html") is True
    assert f.add("http://site.com/a/z/q.html") is False  # matches the previous one whole


def test_query_in_tail_decides_whether_session_parameters_matter() -> None:
    with_query = SimilarityFilter(1000, 0.001, mode="composite")
    without = SimilarityFilter(1000, 0.001, mode="composite", query_in_tail=False)
    for f in (with_query, without):
        assert f.add("http://x.com/a/list.php?sid=1") is True
    assert with_query.add("http://x.com/a/list.php?sid=2") is True
    assert without.add("http://x.com/a/list.php?sid=2") is False


def test_extra_features_narrow_the_match() -> None:
    f = SimilarityFilter(
        1000, 0.001, mode="composite", features=("site", "dir1", "query_keys"), canonicalize="none"
    )
    assert f.add("http://x.com/a/p?id=1") is True
    assert f.add("http://x.com/a/q/r?id=2") is False  # same site, dir1 and parameter names
    assert f.add("http://x.com/a/p?id=1&page=2") is True
    assert f.stats().details["features"] == ["site", "dir1", "query_keys"]


# -- the patent's rule, exactly --------------------------------------------------------------


def _oracle_positions(values: tuple[str, ...], n: int, regions: bool) -> list[int]:
    out = []
    for i, (name, value) in enumerate(zip(("site", "depth", "dir1", "tail"), values, strict=True)):
        if name == "depth":
            r = int(value)  # raw
        else:
            r = int.from_bytes(hashlib.md5(value.encode()).digest(), "big")
        out.append((i * n if regions else 0) + r % n)
    return out


@pytest.mark.parametrize("index", ["shared", "prime", "regions"])
def test_patent_mode_reproduces_the_rule(index: str) -> None:
    capacity, p = 500, 0.05  # small: many collisions, so the test sees both answers often
    f = SimilarityFilter(capacity, p, mode="patent", index=index)
    m = math.ceil(-capacity * math.log(p) / math.log(2) ** 2)
    assert f.stats().bits == m
    n = {"shared": m, "prime": largest_prime_at_most(m), "regions": m // 4}[index]
    assert f.stats().details["modulus"] == n
    extractor = FeatureExtractor()
    bits: set[int] = set()
    answers = []
    for url in _random_urls(random.Random(7), 3000, names=300):
        expected = _oracle_positions(extractor.values(url), n, index == "regions")
        assert f.positions(url) == expected
        new = not all(b in bits for b in expected)
        bits.update(expected)
        answers.append(new)
        assert f.add(url) is new
    assert 300 < sum(answers) < 2700
    assert len(f) == sum(answers)


def test_patent_depth_is_raw_and_exact4_hashes_it() -> None:
    patent = SimilarityFilter(1000, 0.01, mode="patent")
    exact4 = SimilarityFilter(1000, 0.01, mode="exact4")
    for depth in range(1, 6):
        url = "http://x.com/" + "/".join("a" * depth)
        assert patent.positions(url)[1] == depth + 1  # n = 1 + segments, used raw
    depth_bits = {exact4.positions("http://x.com/" + "a/" * d)[1] for d in range(1, 30)}
    assert max(depth_bits) > 100  # spread over the array, not the ~20 lowest bits


def test_exact4_uses_an_independent_family_per_feature() -> None:
    f = SimilarityFilter(100_000, 0.01, mode="exact4")
    site, _, dir1, tail = f.positions("http://same/same/same")
    # the value "same" as dir1 and as tail, and the site "http://same", hash apart
    assert len({site, dir1, tail}) == 3
    g = SimilarityFilter(100_000, 0.01, mode="patent")
    assert g.positions("http://same/same/same")[2] == g.positions("http://same/same/same")[3]


# -- sizing ----------------------------------------------------------------------------------


def test_sizing_formulas() -> None:
    k = 1_000_000
    assert SimilarityFilter(k, 0.01, mode="patent").stats().bits == math.ceil(
        -k * math.log(0.01) / math.log(2) ** 2
    )
    # exact for 4 probes, M = -4k / ln(1 - P^(1/4)): 10.52 k bits at 1 %, 20.43 k at 0.1 %
    assert SimilarityFilter(k, 0.01, mode="exact4").stats().bits / k == pytest.approx(10.52, 1e-3)
    assert SimilarityFilter(k, 0.001, mode="exact4").stats().bits / k == pytest.approx(20.43, 1e-3)
    stats = SimilarityFilter(k, 0.01, mode="exact4").stats()
    assert stats.estimated_error_rate == 0.0
    size = _sizing.size_filter(k, 0.01, "standard")
    composite = SimilarityFilter(k, 0.01, mode="composite").stats()
    assert (composite.bits, composite.details["k"]) == (size.nbits, size.k)


def test_largest_prime() -> None:
    assert [largest_prime_at_most(m) for m in (2, 3, 4, 10, 100, 7919, 7920)] == [
        2,
        3,
        3,
        7,
        97,
        7919,
        7919,
    ]
    small = [n for n in range(2, 2000) if all(n % d for d in range(2, int(n**0.5) + 1))]
    assert [n for n in range(2000) if is_prime(n)] == small
    assert is_prime(2**61 - 1) and not is_prime(2**61 + 1)
    m = 9_585_059
    p = largest_prime_at_most(m)
    assert is_prime(p) and not any(is_prime(q) for q in range(p + 1, m + 1))


def test_estimated_rate_follows_the_random_feature_formula() -> None:
    f = SimilarityFilter(1000, 0.01, mode="exact4")
    f.add_many([f"http://h{i}.com/d{i}/t{i}" for i in range(200)])
    stats = f.stats()
    t, m = 4, stats.bits
    assert stats.estimated_error_rate == pytest.approx((1 - math.exp(-t * len(f) / m)) ** t)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"error_rate": 1.5},
        {"mode": "fuzzy"},
        {"index": "random"},
        {"mode": "composite", "index": "regions"},
        {"features": ()},
        {"features": ("site", "colour")},
        {"query_in_tail": "yes"},
        {"canonicalize": "strict"},
        {"record": "some"},
    ],
)
def test_bad_parameters_raise_config_error(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"capacity": 100, "error_rate": 0.01, **kwargs}
    with pytest.raises(ConfigError):
        SimilarityFilter(**args)  # type: ignore[arg-type]


# -- batches ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "index"),
    [("patent", "shared"), ("patent", "regions"), ("exact4", "shared"), ("exact4", "regions"),
     ("composite", "shared")],
)  # fmt: skip
def test_batch_equals_one_by_one(mode: str, index: str) -> None:
    urls = _random_urls(random.Random(3), 2000)
    one = SimilarityFilter(300, 0.05, mode=mode, index=index)
    many = SimilarityFilter(300, 0.05, mode=mode, index=index)
    expected = [one.add(u) for u in urls]
    got = many.add_many(urls[:700]) + many.add_many(urls[700:])
    assert got == expected
    assert len(many) == len(one) == sum(expected)
    assert many.contains_many(urls) == one.contains_many(urls)


@pytest.mark.parametrize("mode", MODES)
def test_before_commit_sees_answers_before_any_bit(mode: str) -> None:
    urls = _random_urls(random.Random(5), 500)
    reference = SimilarityFilter(300, 0.05, mode=mode).add_many(urls)
    f = SimilarityFilter(300, 0.05, mode=mode)
    calls = []

    def before_commit(flags: list[bool]) -> None:
        calls.append(list(flags))
        assert len(f) == 0
        assert not any(f.contains_many(urls))  # nothing written yet

    flags = f.add_many(urls, before_commit=before_commit)
    assert calls == [flags]
    assert len(f) == sum(flags)
    if mode == "composite":
        # answers from one look-up plus exact repeats in the batch: never fewer NEW answers
        assert all(a or not b for a, b in zip(flags, reference, strict=True))
    else:
        assert flags == reference


@pytest.mark.parametrize("mode", MODES)
def test_contains_never_writes(mode: str) -> None:
    f = SimilarityFilter(100, 0.01, mode=mode)
    assert "http://x.com/a" not in f
    assert f.contains_many(["http://x.com/a", "http://x.com/a"]) == [False, False]
    assert len(f) == 0
    f.add("http://x.com/a")
    assert "http://x.com/a" in f


@pytest.mark.parametrize("mode", MODES)
def test_a_bad_key_changes_nothing(mode: str, tmp_path: Path) -> None:
    f = SimilarityFilter(100, 0.01, mode=mode, url_db=tmp_path / "db.sqlite")
    with pytest.raises(InvalidKeyError):
        f.add_many(["http://x.com/a", "http://x.com/\ud800"])
    with pytest.raises(InvalidKeyError):
        f.add_many(["http://x.com/a", 7])  # type: ignore[list-item]
    assert len(f) == 0 and "http://x.com/a" not in f
    assert f.url_db is not None and f.url_db.count() == 0


@pytest.mark.parametrize("mode", MODES)
def test_protocol_and_stats(mode: str) -> None:
    f = SimilarityFilter(100, 0.01, mode=mode)
    assert isinstance(f, SeenFilter)
    f.add_many(["http://x.com/a", b"http://y.com/b/c", b"\xff\xfe"])
    stats = f.stats()
    assert (stats.kind, stats.capacity, stats.count, stats.error_rate) == (
        "similarity",
        100,
        3,
        0.01,
    )
    assert stats.details["mode"] == mode
    assert f.features("http://x.com/a/b") == {
        "site": "http://x.com",
        "depth": "3",
        "dir1": "a",
        "tail": "b",
    }
    assert mode in repr(f)
    f.close()
    f.close()
    assert "closed" in repr(f)
    for call in (lambda: f.add("http://x.com/"), lambda: len(f), f.stats):
        with pytest.raises(ClosedError):
            call()


# -- persistence -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "index"), [("patent", "prime"), ("exact4", "regions"), ("composite", "shared")]
)
def test_state_file_round_trip(mode: str, index: str, tmp_path: Path) -> None:
    urls = _random_urls(random.Random(11), 1000)
    path = tmp_path / "sim.urlseen"
    reference = SimilarityFilter(400, 0.05, mode=mode, index=index)
    expected = reference.add_many(urls)
    with SimilarityFilter.create(path, 400, 0.05, mode=mode, index=index) as f:
        assert f.add_many(urls[:600]) == expected[:600]
    with SimilarityFilter.open(path) as f:
        assert len(f) == sum(expected[:600])
        assert f.add_many(urls[600:]) == expected[600:]
        f.save(tmp_path / "copy.urlseen")
    with SimilarityFilter.open(path, readonly=True) as f:
        assert len(f) == sum(expected)
        assert f.contains_many(urls) == reference.contains_many(urls)
        with pytest.raises(ReadOnlyError):
            f.add("http://new.example/")
    with SimilarityFilter.open(tmp_path / "copy.urlseen") as f:
        assert f.contains_many(urls) == reference.contains_many(urls)
        assert f.stats().details["index"] == index


def test_foreign_and_damaged_state_files_are_refused(tmp_path: Path) -> None:
    bloom = tmp_path / "bloom.urlseen"
    BloomFilter.create(bloom, 1000, 0.01).close()
    with pytest.raises(FormatError, match="not a similarity"):
        SimilarityFilter.open(bloom)
    good = tmp_path / "sim.urlseen"
    SimilarityFilter.create(good, 1000, 0.01, mode="patent").close()
    header = format.decode(good.read_bytes()[: format.HEADER_SIZE], good.stat().st_size, "x")
    for change in ({"nbits": header.params["nbits"] - 8}, {"rules": 99}, {"mode": "fuzzy"}):
        bad = tmp_path / "bad.urlseen"
        raw = bytearray(good.read_bytes())
        forged = format.Header({**header.params, **change}, header.data_length).encode()
        raw[: len(forged)] = forged
        bad.write_bytes(bytes(raw))
        with pytest.raises(FormatError):
            SimilarityFilter.open(bad)
    truncated = tmp_path / "short.urlseen"
    truncated.write_bytes(good.read_bytes()[:5000])
    with pytest.raises(FormatError):
        SimilarityFilter.open(truncated)


# -- URL_DB ----------------------------------------------------------------------------------


def test_url_db_records_every_decision_with_its_reasons(tmp_path: Path) -> None:
    db = tmp_path / "url_db.sqlite"
    with SimilarityFilter(1000, 0.001, mode="exact4", url_db=db) as f:
        f.add_many(["http://x.com/a/y/p.html", "http://x.com/b/q.html"])
        f.add("http://x.com/a/z/q.html")
    with SQLiteUrlDB(db, readonly=True) as log:
        rows = list(log.decisions())
        assert [r.url for r in rows] == [
            "http://x.com/a/y/p.html",
            "http://x.com/b/q.html",
            "http://x.com/a/z/q.html",
        ]
        assert [r.new for r in rows] == [True, True, False]
        assert rows[1].matched == ("site",)
        assert rows[2].matched == ("site", "depth", "dir1", "tail")
        assert rows[2].features == {
            "site": "http://x.com",
            "depth": "4",
            "dir1": "a",
            "tail": "q.html",
        }
        assert log.count(new=False) == 1


def test_url_db_can_keep_only_new_urls(tmp_path: Path) -> None:
    db = tmp_path / "url_db.sqlite"
    with SimilarityFilter(1000, 0.001, mode="composite", url_db=db, record="new") as f:
        f.add_many(["http://x.com/a", "http://x.com/a", "http://x.com/b"])
    with SimilarityFilter(1000, 0.001, mode="composite", url_db=db, record="new") as f:
        f.add("http://x.com/c")  # an existing URL_DB is appended to
    with SQLiteUrlDB(db, readonly=True) as log:
        assert [r.url for r in log.decisions()] == [
            "http://x.com/a",
            "http://x.com/b",
            "http://x.com/c",
        ]


def test_url_db_object_is_not_closed_by_the_filter(tmp_path: Path) -> None:
    log = SQLiteUrlDB(tmp_path / "db.sqlite", create=True)
    with SimilarityFilter(100, 0.01, url_db=log) as f:
        f.add("http://x.com/")
    assert log.count() == 1
    log.close()


# -- no crash on any string ------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(st.text(min_size=1, max_size=40), st.binary(min_size=1, max_size=40)), max_size=8
    ),
    st.sampled_from(MODES),
)
def test_any_strings_get_an_answer_or_a_clear_error(keys: list[str | bytes], mode: str) -> None:
    f = SimilarityFilter(50, 0.01, mode=mode, index="shared")
    try:
        flags = f.add_many(keys)
    except InvalidKeyError:
        assert len(f) == 0
        return
    assert len(flags) == len(keys) and all(isinstance(x, bool) for x in flags)
    assert all(f.contains_many(keys))  # what was added now looks seen
    assert len(f) == sum(flags)
