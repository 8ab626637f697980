"""MultiDimensionalBloomFilter: the predicted rates against numbers worked out by hand, positions
against the standard probes (the oracle), no false negatives under both query rules, measured
false positives within a statistical bound of the prediction, persistence, and refused input."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen import (
    BloomFilter,
    ClosedError,
    ConfigError,
    FormatError,
    InvalidKeyError,
    MultiDimensionalBloomFilter,
    QueryAnyWarning,
    ReadOnlyError,
    _core,
)
from urlseen.bloom import mdbf_sizing as sizing
from urlseen.bloom.sizing import standard_error_rate

M = MultiDimensionalBloomFilter


def shape(groups: int, nbits: int, k1: int, k2: int, ratio: int, n: int, query: str = "all") -> M:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", QueryAnyWarning)
        return M.with_shape(n, groups=groups, nbits=nbits, k1=k1, k2=k2, ratio=ratio, query=query)


# -- the formulas ------------------------------------------------------------------------------


def test_the_papers_experiment_numbers():
    # The paper's experiment, N = 150, k = 4, r = 4, n = 20, worked out by hand.
    assert standard_error_rate(20, 150, 4) == pytest.approx(0.0295, abs=5e-4)
    assert sizing.best_k1(20, 150, 37, 4)[0] == 3
    f_g = sizing.group_error_rate(20, 150, 37, 3, 1)
    assert f_g == pytest.approx(0.0151, rel=0.02)
    four = sizing.MDBFSize(4, 150, 37, 3, 1, 4)
    assert sizing.error_rate(20, four, "all") == pytest.approx(f_g**4)
    assert sizing.error_rate(20, four, "all") == pytest.approx(5.2e-8, rel=0.05)
    assert sizing.error_rate(20, four, "any") == pytest.approx(0.059, rel=0.02)
    # Equal memory: one standard filter of S*N*(1 + 1/r) bits and S*k hashes does better.
    assert standard_error_rate(20, 4 * (150 + 37), 16) < sizing.error_rate(20, four, "all")


@pytest.mark.parametrize(
    ("groups", "expect_all", "expect_any"),
    [(1, 2.48e-3, 2.48e-3), (2, 6.17e-6, 4.96e-3), (4, 3.81e-11, 9.90e-3)],
)
def test_a_large_filter_by_groups(groups, expect_all, expect_any):
    # N = 1e7, r = 4, k1 = 7, k2 = 2 at n = 1e6, worked out by hand.
    size = sizing.MDBFSize(groups, 10**7, 10**7 // 4, 7, 2, 4)
    assert sizing.error_rate(1e6, size, "all") == pytest.approx(expect_all, rel=0.01)
    assert sizing.error_rate(1e6, size, "any") == pytest.approx(expect_any, rel=0.01)


@pytest.mark.parametrize("error_rate", [0.1, 1e-3, 1e-6])
@pytest.mark.parametrize("groups", [None, 1, 3])
def test_sizing_meets_its_target_and_is_minimal_in_n1(error_rate, groups):
    size = sizing.size_mdbf(50_000, error_rate, groups=groups)
    assert sizing.error_rate(50_000, size) <= error_rate
    smaller = sizing.MDBFSize(size.groups, size.n1 - 1, (size.n1 - 1) // size.ratio, 0, 0, 1)
    best = sizing.best_k1(50_000, smaller.n1, smaller.n2, size.k)[1]
    assert sizing.combine(best, size.groups, "all") > error_rate
    if groups is not None:
        assert size.groups == groups


def test_sizing_any_rule_needs_more_per_group():
    all_ = sizing.size_mdbf(10_000, 1e-3, "all", groups=4, k=4)
    any_ = sizing.size_mdbf(10_000, 1e-3, "any", groups=4, k=4)
    assert any_.bits > all_.bits
    assert sizing.error_rate(10_000, any_, "any") <= 1e-3


# -- positions: each vector is a standard Bloom probe with seed + 2s + v -----------------------


@pytest.mark.parametrize("hash_name", ["xxh3_128", "murmur3_x64_128", "md5"])
def test_positions_are_standard_probes_per_family(hash_name):
    f = M(5000, 0.01, groups=3, k=4, seed=77, hash=hash_name)
    s = f.size
    hid = {"xxh3_128": 0, "murmur3_x64_128": 1, "md5": 2}[hash_name]
    for key in ["https://example.com/", "b", "\u00e9t\u00e9", b"\x00\xff"]:
        got = f.positions(key)
        want: list[int] = []
        for g in range(s.groups):
            if s.k1:
                want += _core.positions(key, s.n1, s.k1, _core.LAYOUT_STANDARD, 77 + 2 * g, hid)
            if s.k2:
                want += _core.positions(key, s.n2, s.k2, _core.LAYOUT_STANDARD, 78 + 2 * g, hid)
        assert got == want


def test_bits_land_where_positions_say():
    f = shape(2, 150, 3, 1, 4, 20)
    f.add("key")
    pos = f.positions("key")
    ones = f.popcounts()
    assert ones[0] == len(set(pos[0:3])) and ones[1] == len(set(pos[3:4]))
    assert ones[2] == len(set(pos[4:7])) and ones[3] == len(set(pos[7:8]))


# -- the URL-seen contract ---------------------------------------------------------------------

keys = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=30),
    st.binary(max_size=30),
)
rules = st.sampled_from(["all", "any"])
PROPERTY = settings(max_examples=100, deadline=None)


@PROPERTY
@given(
    ks=st.lists(keys, max_size=120),
    groups=st.integers(1, 5),
    nbits=st.integers(1, 400),
    k1=st.integers(0, 5),
    k2=st.integers(1, 4),
    query=rules,
    batch=st.booleans(),
)
def test_no_false_negatives(ks, groups, nbits, k1, k2, query, batch):
    f = shape(groups, nbits, k1, k2, 1 if nbits < 4 else 4, 50, query)
    flags = f.add_many(ks) if batch else [f.add(k) for k in ks]
    assert all(k in f for k in ks)
    assert all(f.contains_many(ks))
    assert not any(f.add_many(ks))
    assert len(f) == sum(flags)


@PROPERTY
@given(ks=st.lists(keys, max_size=80), query=rules)
def test_batch_equals_sequential_and_seen_is_never_new(ks, query):
    a, b = shape(3, 200, 2, 1, 4, 30, query), shape(3, 200, 2, 1, 4, 30, query)
    seq = [a.add(k) for k in ks]
    assert b.add_many(ks) == seq
    seen: set[bytes] = set()
    for k, new in zip(ks, seq, strict=True):
        kb = k.encode() if isinstance(k, str) else k
        if kb in seen:
            assert not new
        seen.add(kb)


def test_reported_seen_changes_nothing_under_any():
    f = shape(4, 64, 2, 1, 4, 10, "any")
    f.add_many([f"k{i}" for i in range(40)])
    before = f.popcounts()
    probe = [f"q{i}" for i in range(2000)]
    seen = [k for k, hit in zip(probe, f.contains_many(probe), strict=True) if hit]
    assert seen, "a tiny overfull filter has false positives"
    assert not any(f.add_many(seen))
    assert f.popcounts() == before


# -- measured false positives against the prediction ------------------------------------------


def measured_rate(f: M, n: int, queries: int) -> float:
    f.add_many([f"https://in.example/{i}" for i in range(n)])
    hits = f.contains_many([f"https://out.example/{i}" for i in range(queries)])
    return sum(hits) / queries


@pytest.mark.parametrize(
    ("groups", "nbits", "k1", "k2", "n", "query"),
    [
        (1, 4000, 3, 1, 500, "all"),
        (2, 3000, 3, 1, 500, "all"),
        (3, 1500, 2, 1, 250, "all"),
        (2, 3000, 3, 1, 500, "any"),
        (4, 3000, 3, 1, 500, "any"),
    ],
)
def test_measured_rate_within_bound_of_the_prediction(groups, nbits, k1, k2, n, query):
    # The bound: for a fixed filter the false positives among Q foreign queries are
    # Binomial(Q, q); 4.5 sigma plus 10% of q for the model (double hashing and the finite-N
    # fill of one filter instance are not exactly the formula's average) is a one-sided false
    # alarm of about 3e-6 for a correct filter. Inputs are fixed, so the outcome is the same
    # every run.
    queries = 200_000
    f = shape(groups, nbits, k1, k2, 4, n, query)
    q = sizing.error_rate(n, f.size, query)
    got = measured_rate(f, n, queries)
    slack = 4.5 * math.sqrt(q * (1 - q) / queries) + 0.1 * q
    assert abs(got - q) <= slack, (got, q)


def test_any_rule_rises_with_groups_and_all_falls():
    rates = {}
    for query in ("all", "any"):
        for groups in (1, 4):
            rates[query, groups] = measured_rate(
                shape(groups, 2000, 3, 1, 4, 300, query), 300, 50_000
            )
    assert rates["all", 4] < rates["all", 1] < rates["any", 4]


def test_any_warns_and_all_does_not():
    with pytest.warns(QueryAnyWarning):
        M(1000, 0.01, query="any")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M(1000, 0.01)


# -- persistence -------------------------------------------------------------------------------


def test_file_round_trip(tmp_path: Path):
    path = tmp_path / "seen.mdbf"
    urls = [f"https://example.com/{i}" for i in range(3000)]
    with M.create(path, 5000, 0.001, groups=3) as f:
        assert sum(f.add_many(urls)) == 3000
        params = f.stats().details
    with M.open(path) as g:
        assert len(g) == 3000
        assert all(g.contains_many(urls))
        assert g.stats().details == {**params, "path": str(path), "readonly": False}
        assert g.verify() is False  # open for writing: no checksum to check yet
    with M.open(path, readonly=True) as r:
        assert r.verify() is True
        with pytest.raises(ReadOnlyError):
            r.add("https://new.example/")


def test_save_from_memory(tmp_path: Path):
    f = shape(4, 150, 3, 1, 4, 20)
    f.add_many(["a", "b", "c"])
    f.save(tmp_path / "x.mdbf")
    with M.open(tmp_path / "x.mdbf") as g:
        assert g.size == f.size and len(g) == 3 and g.popcounts() == f.popcounts()
        assert g.error_rate == f.error_rate


@pytest.mark.parametrize(("groups", "nbits", "n"), [(64, 100_000, 1), (1, 1, 50)])
def test_extreme_predicted_rates_still_save_and_open(tmp_path: Path, groups, nbits, n):
    f = shape(groups, nbits, 1, 1, 1, n)
    assert 0.0 < f.error_rate < 1.0
    f.save(tmp_path / "x.mdbf")
    with M.open(tmp_path / "x.mdbf") as g:
        assert g.size == f.size


def test_both_filters_are_seen_filters():
    from urlseen import RotatingBloomFilter, SeenFilter

    assert isinstance(M(100, 0.01), SeenFilter)
    assert isinstance(RotatingBloomFilter(100, 0.01), SeenFilter)


def test_query_rule_persists(tmp_path: Path):
    with pytest.warns(QueryAnyWarning):
        M.create(tmp_path / "any.mdbf", 100, 0.01, groups=2, query="any").close()
    with pytest.warns(QueryAnyWarning):
        g = M.open(tmp_path / "any.mdbf")
    assert g.query == "any"
    g.close()


def test_foreign_and_damaged_files_are_refused(tmp_path: Path):
    bloom = tmp_path / "bloom.urlseen"
    BloomFilter.create(bloom, 1000).close()
    with pytest.raises(FormatError, match="not an MDBF"):
        M.open(bloom)
    path = tmp_path / "seen.mdbf"
    M.create(path, 1000, 0.01, groups=2).close()
    raw = bytearray(path.read_bytes())
    for name, damaged in {
        "text": b"hello, world\n" * 10,
        "header bit flipped": bytes(raw[:60]) + bytes([raw[60] ^ 1]) + bytes(raw[61:]),
        "truncated": bytes(raw[: len(raw) - 1]),
    }.items():
        bad = tmp_path / f"{name}.mdbf"
        bad.write_bytes(damaged)
        with pytest.raises(FormatError):
            M.open(bad)


# -- refused input ----------------------------------------------------------------------------


def test_bad_key_in_batch_changes_nothing():
    f = M(1000, 0.01, groups=2)
    with pytest.raises(TypeError, match="key 2 of the batch"):
        f.add_many(["a", "b", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidKeyError):
        f.add_many(["a", "\ud800"])
    assert len(f) == 0 and sum(f.popcounts()) == 0
    with pytest.raises(TypeError, match="single 'str'"):
        f.add_many("abc")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"error_rate": 1.5},
        {"groups": 0},
        {"groups": 65},
        {"k": 0},
        {"ratio": 0},
        {"query": "some"},
        {"seed": -1},
        {"hash": "sha1"},
    ],
)
def test_bad_config_is_config_error(kwargs):
    args = {"capacity": 1000, "error_rate": 0.01, **kwargs}
    with pytest.raises(ConfigError):
        M(**args)


def test_bad_shape_is_config_error():
    with pytest.raises(ConfigError):
        M.with_shape(10, groups=1, nbits=3, k1=0, k2=1, ratio=4)  # V2 of 0 bits probed
    with pytest.raises(ConfigError):
        M.with_shape(10, groups=1, nbits=100, k1=0, k2=0, ratio=4)


def test_closed_filter_raises():
    f = M(100, 0.01)
    f.close()
    with pytest.raises(ClosedError):
        f.add("a")
    with pytest.raises(ClosedError):
        "a" in f  # noqa: B015


# -- urlseen dedup --filter mdbf --------------------------------------------------------------


def test_cli_dedup_with_mdbf_and_its_state(tmp_path: Path):
    from cli_helpers import dedup, invoke

    text = b"https://a.example/1\nhttps://a.example/2\nhttps://a.example/1\n"
    state = tmp_path / "seen.mdbf"
    first = dedup("--filter", "mdbf", "--groups", "3", "--state", state, input=text)
    assert first.stdout == "https://a.example/1\nhttps://a.example/2\n"
    again = dedup("--filter", "mdbf", "--state", state, input=text + b"https://b.example/\n")
    assert again.stdout == "https://b.example/\n"
    with M.open(state) as f:
        assert f.size.groups == 3 and len(f) == 3
    clash = invoke("dedup", "--filter", "mdbf", "--groups", "2", "--state", state, input=text)
    assert clash.exit_code == 2 and "--groups 2 differs" in clash.stderr


def test_cli_query_any_warns(tmp_path: Path):
    from cli_helpers import dedup

    result = dedup("--filter", "mdbf", "--query", "any", "--groups", "2", input=b"http://a/\n")
    assert result.stdout == "http://a/\n"
    assert "warning: query='any'" in result.stderr


def test_cli_warns_when_an_mdbf_holds_more_than_its_capacity(tmp_path: Path):
    from cli_helpers import dedup

    text = "".join(f"https://a.example/{i}\n" for i in range(300)).encode()
    result = dedup("--filter", "mdbf", "--capacity", "100", input=text)
    assert "new URLs likely dropped as seen" in result.stderr
