"""The counting filter's blocked layout (csrc/counting.h, bloom/sizing.py): a key's
counters in one 128-byte block, sized to the same error rate; the exact filter's default.
Counter files of the standard layout (every file written before the layouts) are still read as
they are, and a rebuilt one becomes blocked."""

from __future__ import annotations

import os
import warnings
from collections import Counter

import pytest

from urlseen import ExactFilter
from urlseen.bloom import sizing
from urlseen.bloom.counting import BLOCKED_KIND, CountingBloomFilter, make_params
from urlseen.errors import ConfigError, CountersRebuiltWarning
from urlseen.exact import folder as exact_folder
from urlseen.state.mmapfile import read_header


def keys(n: int, tag: str = "k") -> list[str]:
    return [f"https://{tag}.example/{i}" for i in range(n)]


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_a_keys_counters_are_in_one_block(bits):
    c = CountingBloomFilter(5000, 0.01, counter_bits=bits, layout="blocked", hash="md5")
    per_block = sizing.block_counters(bits)
    assert c.layout == "blocked" and c._layout == 1 and c.ncounters % per_block == 0
    spread = Counter()
    for key in keys(2000):
        idx = c._indices(c._digest(key))
        assert len(idx) == c.k and all(0 <= i < c.ncounters for i in idx)
        assert len({i // per_block for i in idx}) == 1, "one block per key"
        spread[idx[0] // per_block] += 1
    # 2000 keys over the blocks: most blocks get some (the block comes from the digest's h1)
    assert len(spread) > 0.6 * min(2000, c.ncounters // per_block)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_blocked_counters_count_and_remove_exactly(bits):
    c = CountingBloomFilter(3000, 0.01, counter_bits=bits, layout="blocked")
    ks = keys(3000)
    added = [key for key, new in zip(ks, c.add_many(ks), strict=True) if new]  # all but FPs
    assert len(added) > 0.95 * len(ks) and not any(c.add_many(ks))
    occurrences: Counter[int] = Counter()
    for key in added:
        occurrences.update(c._indices(c._digest(key)))
    top = (1 << bits) - 1
    assert [c._get(i) for i in occurrences] == [min(n, top) for n in occurrences.values()]
    assert sum(c.histogram()[1:]) == len(occurrences), "no counter outside the keys' indices"
    assert all(key in c for key in ks)
    if bits == 8:  # nothing saturates: removing everything empties the counters
        assert c.remove_many(added) == [True] * len(added)
        assert c.histogram()[0] == c.ncounters


@pytest.mark.parametrize("error_rate", [0.001, 0.01, 0.05])
def test_blocked_sizing_meets_the_error_rate(error_rate):
    capacity = 20_000
    c = CountingBloomFilter(capacity, error_rate, layout="blocked")
    assert sizing.counting_blocked_error_rate(capacity, c.ncounters, c.k, 4) <= error_rate
    c.add_many(keys(capacity))
    probes = 200_000
    false = sum(c.contains_many(keys(probes, "absent")))
    assert false / probes < 1.5 * error_rate + 3 * (error_rate / probes) ** 0.5
    assert 0.9 * error_rate < c.stats().estimated_error_rate <= error_rate


def test_layout_choice():
    standard = make_params(10**7, 0.001, 4, None, None, 0, "md5")
    assert standard["kind"] == "counting"
    auto = make_params(10**7, 0.001, 4, None, None, 0, "md5", "auto")
    assert auto["kind"] == BLOCKED_KIND
    assert standard["ncounters"] < auto["ncounters"] <= 1.25 * standard["ncounters"]
    # explicit sizing (the paper's experiment) stays standard under "auto"
    explicit = make_params(1000, 0.001, 4, 8, 20, 0, "md5", "auto")
    assert explicit["kind"] == "counting" and (explicit["ncounters"], explicit["k"]) == (20000, 8)
    # tiny error rates cost the blocked layout too much: "auto" keeps them standard
    assert make_params(10**6, 1e-6, 4, None, None, 0, "md5", "auto")["kind"] == "counting"
    forced = make_params(1000, 0.001, 4, 8, 20, 0, "md5", "blocked")
    assert forced["kind"] == BLOCKED_KIND and forced["ncounters"] == 20224 and forced["k"] == 8
    with pytest.raises(ConfigError, match="layout"):
        make_params(1000, 0.001, 4, None, None, 0, "md5", "diagonal")


def test_a_blocked_file_says_so_and_reopens(tmp_path):
    path = tmp_path / "c.urlseen"
    ks = keys(500)
    with CountingBloomFilter.create(path, 1000, 0.01, layout="blocked") as c:
        c.add_many(ks)
        counters = [c._get(i) for i in range(c.ncounters)]
    assert read_header(path).params["kind"] == BLOCKED_KIND  # older urlseens refuse the kind
    with CountingBloomFilter.open(path) as c:
        assert c.layout == "blocked" and [c._get(i) for i in range(c.ncounters)] == counters
        assert all(key in c for key in ks)


def test_the_exact_filter_counts_in_blocks_and_stays_exact(tmp_path):
    ks = keys(3000)
    with ExactFilter.create(tmp_path / "s", 5000) as f:
        assert f.counters.layout == "blocked"
        assert f.add_many(ks + ks[:100]) == [True] * 3000 + [False] * 100
        assert f.remove_many(ks[:50]) == [True] * 50
        assert f.add_many(ks[:60]) == [False] * 60  # the first 50 still had one reference
        assert f.forget_many(ks[:5]) == [True] * 5 and f.add_many(ks[:6]) == [True] * 5 + [False]
        assert f.stats().details["layout"] == "blocked"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in sync: no rebuild
        with ExactFilter.open(tmp_path / "s") as g:
            assert g.counters.layout == "blocked"
            assert g.contains_many(ks) == [True] * 3000
            assert g.add_many(keys(10, "new")) == [True] * 10


def test_a_standard_counter_file_is_read_as_it_is_and_rebuilt_blocked(tmp_path, monkeypatch):
    """A folder written before the layouts (standard counters) opens without a rebuild and
    answers the same; when its counters must be rebuilt, the new ones are blocked."""
    folder = tmp_path / "old"
    sized = exact_folder.sized_params

    def standard(sizing: dict, library: object) -> dict:  # as before the layouts
        params = make_params(sizing["capacity"], sizing["error_rate"], 4, None, None, 0, "md5")
        return {**sized(sizing, library), **{n: params[n] for n in ("kind", "ncounters", "k")}}

    monkeypatch.setattr(exact_folder, "sized_params", standard)
    ks = keys(2000)
    with ExactFilter.create(folder, 5000) as f:
        assert f.counters.layout == "standard"
        f.add_many(ks)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ExactFilter.open(folder) as g:
            assert g.counters.layout == "standard"
            assert g.add_many(ks[:10] + keys(10, "new")) == [False] * 10 + [True] * 10
            g._dirty = True  # counters may disagree with the library: rebuilt before the next use
            assert g.contains_many(ks[:5]) == [True] * 5
    os.remove(folder / exact_folder.COUNTERS_FILE)
    with pytest.warns(CountersRebuiltWarning), ExactFilter.open(folder) as h:
        assert h.counters.layout == "blocked"
        assert h.add_many(ks + keys(10, "new")) == [False] * 2010
        assert h.add_many(keys(5, "newer")) == [True] * 5
