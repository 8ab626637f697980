"""ExactFilter (IMP-CBFilter): exact answers against a dict model on random streams across
every option, counters that stay the true occurrence counts (a repeated index counted once per
occurrence) through saturation and deletes, the library I/O rate on new keys, expiry,
reference counts, persistence and recovery (the library is the source of truth), damaged
state, and failed batches that leave nothing behind.

Oracles: a Python dict of reference counts; hashlib's MD5; the standard formula for the rate of
counter false positives. Tiny filters (a few dozen 2-bit counters) are the interesting ones:
they saturate and send most keys to the library.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen import (
    ClosedError,
    ConfigError,
    CountersRebuiltWarning,
    ExactFilter,
    FingerprintLibraryFilter,
    FormatError,
    ReadOnlyError,
    StateInUseError,
)
from urlseen.bloom import sizing
from urlseen.exact.filter import DEFAULT_CACHE_ENTRIES
from urlseen.exact.library_protocol import Changes
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import SQLiteLibrary

PROPERTY = settings(max_examples=40, deadline=None)
DEFAULT_CACHE = DEFAULT_CACHE_ENTRIES

POOL: list[str | bytes] = [f"https://m.example/{i}" for i in range(36)] + [
    "",
    b"\x00",
    "https://m.example/é",
    "https://m.example/é".encode(),  # the same key as the str before it
]


def as_bytes(key: str | bytes) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else key


def md5(key: str | bytes) -> bytes:
    return hashlib.md5(as_bytes(key)).digest()


class Clock:
    """A fake time source: tests move it by hand."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_library(kind: str, folder: Path) -> MemoryLibrary | SQLiteLibrary:
    if kind == "memory":
        return MemoryLibrary()
    return SQLiteLibrary(folder / f"lib-{len(os.listdir(folder))}.sqlite", create=True)


def files_digest(folder: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in ("library.sqlite", "counters.urlseen")
    }


def reopen(folder: Path, **kwargs) -> ExactFilter:
    """Open a cleanly closed state: any rebuild would be a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CountersRebuiltWarning)
        return ExactFilter.open(folder, **kwargs)


# ---- the model ------------------------------------------------------------------------------


class Model:
    """What an exact URL-seen filter must answer: reference counts and first-seen times."""

    def __init__(self) -> None:
        self.refs: dict[bytes, int] = {}
        self.first: dict[bytes, float] = {}

    def add(self, keys, now: float) -> list[bool]:
        out = []
        for k in map(as_bytes, keys):
            new = self.refs.get(k, 0) == 0
            self.refs[k] = self.refs.get(k, 0) + 1
            if new:
                self.first[k] = now
            out.append(new)
        return out

    def remove(self, keys) -> list[bool]:
        out = []
        for k in map(as_bytes, keys):
            out.append(self.refs.get(k, 0) > 0)
            if out[-1]:
                self.refs[k] -= 1
        return out

    def forget(self, keys) -> list[bool]:
        out = []
        for k in map(as_bytes, keys):
            out.append(self.refs.get(k, 0) > 0)
            self.refs[k] = 0
        return out

    def forget_older_than(self, ts: float) -> int:
        old = [k for k, n in self.refs.items() if n and self.first[k] < ts]
        for k in old:
            self.refs[k] = 0
        return len(old)

    def contains(self, keys) -> list[bool]:
        return [self.refs.get(as_bytes(k), 0) > 0 for k in keys]

    def __len__(self) -> int:
        return sum(1 for n in self.refs.values() if n)


def run_stream(f, model: Model, clock: Clock, rng: random.Random, steps: int) -> None:
    """Random batches of adds (with repeats), removes, forgets and expiries; every answer
    and, after every step, membership of the whole pool must match the model."""
    for _ in range(steps):
        clock.t += 1
        op = rng.choices(["add", "remove", "forget", "expire", "single"], [6, 2, 1, 0.3, 1])[0]
        batch = [rng.choice(POOL) for _ in range(rng.randint(0, 8))]
        if op == "add":
            assert f.add_many(batch) == model.add(batch, clock.t), batch
        elif op == "single":
            key = rng.choice(POOL)
            assert f.add(key) is model.add([key], clock.t)[0]
        elif op == "remove":
            assert f.remove_many(batch) == model.remove(batch)
        elif op == "forget":
            assert f.forget_many(batch) == model.forget(batch)
        else:
            ts = clock.t - rng.randint(0, 30)
            assert f.forget_older_than(ts) == model.forget_older_than(ts)
        assert f.contains_many(POOL) == model.contains(POOL), "false positive or negative"
        assert len(f) == len(model)
    for key in POOL:
        assert f.refs(key) == model.refs.get(as_bytes(key), 0)
        assert (key in f) is (model.refs.get(as_bytes(key), 0) > 0)


CACHES = [0, 8, DEFAULT_CACHE]
OPTIONS = list(
    itertools.product(["memory", "sqlite"], [2, 4], CACHES, [True, False], [True, False])
)


@pytest.mark.parametrize(
    "library, bits, cache, write_back, batched",
    OPTIONS,
    ids=[f"{lib}-{b}b-c{c}-wb{int(w)}-bl{int(bl)}" for lib, b, c, w, bl in OPTIONS],
)
def test_model_check_across_options(tmp_path, library, bits, cache, write_back, batched):
    clock = Clock()
    f = ExactFilter(
        10, 0.1, counter_bits=bits, k=3, counters_per_key=3,  # 30 counters for 39 keys
        cache_entries=cache, write_back=write_back, batched_lookups=batched,
        library=make_library(library, tmp_path), clock=clock,
    )  # fmt: skip
    model = Model()
    run_stream(f, model, clock, random.Random(hash((bits, cache, write_back, batched))), 250)
    f.flush()
    # After a checkpoint the library holds every reference count (nothing pending).
    stored = f.library.records([md5(k) for k in POOL])
    assert {fp: r.refs for fp, r in stored.items()} == {
        hashlib.md5(k).digest(): n for k, n in model.refs.items() if n
    }
    f.close()


@pytest.mark.parametrize("cache", [8, 16, DEFAULT_CACHE])
@pytest.mark.parametrize("seed", range(3))
def test_long_batches_answer_as_the_model(seed, cache):
    """Batches far longer than the C step's look-ahead (it asks the cache 8 keys early and
    prefetches 16 early), from a pool that overflows a one- or two-bucket cache, so entries
    are evicted between the look-ahead and the key's turn; with removes between batches."""
    rng = random.Random(seed)
    pool = [f"https://long.example/{i}" for i in range(120)]
    clock = Clock()
    f = ExactFilter(20, 0.2, counter_bits=2, cache_entries=cache, clock=clock)
    model = Model()
    for _ in range(30):
        clock.t += 1
        hot = rng.sample(pool, 12)  # repeats close together, as in a crawl's stream
        size = rng.randint(0, 400)
        batch = [rng.choice(hot if rng.random() < 0.6 else pool) for _ in range(size)]
        assert f.add_many(batch) == model.add(batch, clock.t)
        gone = rng.sample(pool, 5)
        assert f.remove_many(gone) == model.remove(gone)
        assert f.contains_many(pool) == model.contains(pool)
    for key in pool:
        assert f.refs(key) == model.refs.get(as_bytes(key), 0)
    f.close()


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    capacity=st.sampled_from([4, 30, 1000]),
    bits=st.sampled_from([2, 4, 8]),
    cache=st.sampled_from(CACHES),
    write_back=st.booleans(),
    hash=st.sampled_from(["md5", "xxh3_128"]),
)
def test_model_check_property(seed, capacity, bits, cache, write_back, hash):
    clock = Clock()
    f = ExactFilter(
        capacity, 0.05, counter_bits=bits, cache_entries=cache, write_back=write_back,
        hash=hash, clock=clock,
    )  # fmt: skip
    run_stream(f, Model(), clock, random.Random(seed), 60)


def test_fingerprints_are_the_papers_md5():
    f = ExactFilter(100)
    f.add_many(POOL)
    assert set(itertools.chain(*f.library.fingerprints())) == {md5(k) for k in POOL}
    assert f.counters._digest("https://m.example/1") == md5("https://m.example/1")


def test_a_bad_key_changes_nothing():
    f = ExactFilter(100, cache_entries=8)
    f.add("a")
    with pytest.raises(TypeError):
        f.add_many(["b", "a", 3])
    assert f.contains_many(["a", "b"]) == [True, False] and len(f) == 1 and f.refs("a") == 1
    with pytest.raises(TypeError):
        f.remove_many("a")  # a str is one key, not a batch
    with pytest.raises(TypeError):
        f.contains_many("a")
    assert f.add_many(["b", "a"]) == [True, False]


# ---- counters are true occurrence counts ---------------------------------------------------------


def assert_counters_exact(f: ExactFilter, live: set[bytes]) -> None:
    """Every counter is the number of occurrences of its index among the k indices of the
    library's fingerprints (a multiset), capped at the maximum; the overflow table holds the
    true count of every saturated counter and nothing else."""
    c = f.counters
    top = (1 << c.counter_bits) - 1
    occ: Counter[int] = Counter()
    for key in live:
        occ.update(c._indices(c._digest(key)))
    got = [c._get(i) for i in range(c.ncounters)]
    assert got == [min(occ[i], top) for i in range(c.ncounters)]
    assert f.library.overflow(range(c.ncounters)) == {i: n for i, n in occ.items() if n >= top}


@pytest.mark.parametrize("library", ["memory", "sqlite"])
@pytest.mark.parametrize("cache", [0, 8])
def test_forced_saturation_then_deletes(tmp_path, library, cache):
    f = ExactFilter(
        10, counter_bits=2, k=4, counters_per_key=2, cache_entries=cache,
        library=make_library(library, tmp_path),
    )  # fmt: skip
    assert (f.counters.ncounters, f.counters.k) == (20, 4)
    keys = [as_bytes(f"https://sat.example/{i}") for i in range(60)]
    assert f.add_many(keys) == [True] * 60
    f.add_many(keys[:20])  # duplicates: reference counts only, never counters
    live = set(keys)
    assert_counters_exact(f, live)
    assert f.counters.histogram()[3] > 10, "test precondition: most counters saturated"
    rng = random.Random(7)
    for step in range(8):
        drop = rng.sample(sorted(live), 7)
        if step % 2:
            assert f.forget_many(drop) == [True] * 7
        else:
            f.remove_many(drop + drop)  # keys added twice need two removes
            assert not any(f.contains_many(d for d in drop if d in keys[20:]))
            f.forget_many(drop)
        live -= set(drop)
        assert_counters_exact(f, live)
        assert all(f.contains_many(live)), "false negative after deletes"
        assert not any(f.contains_many(set(keys) - live)), "false positive after deletes"
    assert f.add_many(sorted(set(keys) - live)) == [True] * (60 - len(live))  # re-adds
    assert_counters_exact(f, set(keys))


def test_saturation_recount_survives_reopen(tmp_path):
    folder = tmp_path / "state"
    keys = [f"https://r.example/{i}" for i in range(40)]
    with ExactFilter.create(folder, 10, counter_bits=2, k=4, counters_per_key=2) as f:
        f.add_many(keys)
    with reopen(folder) as g:
        assert_counters_exact(g, {as_bytes(k) for k in keys})
        g.forget_many(keys[::2])
        assert_counters_exact(g, {as_bytes(k) for k in keys[1::2]})
    with reopen(folder) as h:
        assert_counters_exact(h, {as_bytes(k) for k in keys[1::2]})


# ---- library I/O rate on new keys ----------------------------------------------------------------


@pytest.mark.parametrize(
    "counters_per_key, capacity, inserted",
    [(20, 5000, 20_000), (5, 20_000, 20_000)],
    ids=["m20n-to-4x-capacity", "m5n"],
)
@pytest.mark.parametrize("batched", [True, False])
def test_library_lookups_on_new_keys_follow_the_fp_rate(
    counters_per_key, capacity, inserted, batched
):
    # A new key costs a look-up only when all its counters are above 0: with i keys in, that
    # has probability (1 - e^(-k i / m))^k. The total over the stream is a sum of independent
    # Bernoulli trials; 5 sigma at every checkpoint. k = 8 as in the IMP-CBFilter paper.
    f = ExactFilter(
        capacity, k=8, counters_per_key=counters_per_key, cache_entries=0,
        batched_lookups=batched,
    )  # fmt: skip
    m, k = f.counters.ncounters, f.counters.k
    assert (m, k) == (counters_per_key * capacity, 8)
    mean = var = 0.0
    for start in range(0, inserted, 1000):
        new = f.add_many(f"https://new.example/{i}" for i in range(start, start + 1000))
        assert new == [True] * 1000, "distinct keys are all new"
        for i in range(start, start + 1000):
            p = sizing.standard_error_rate(i, m, k)
            mean, var = mean + p, var + p * (1 - p)
        lookups = f.io.lookups
        assert abs(lookups - mean) <= 5 * math.sqrt(var) + 2, (start, lookups, mean)
    assert f.io.lookups > 20, "the rate was measurable"
    assert f.io.writes == inserted
    if not batched:  # the paper's method: one round trip per look-up, plus one commit a batch
        assert f.io.round_trips == f.io.lookups + inserted // 1000


def test_duplicates_cost_one_lookup_each_without_the_cache_and_none_with_it():
    keys = [f"https://d.example/{i}" for i in range(1000)]
    plain = ExactFilter(2000, cache_entries=0)
    plain.add_many(keys)
    before = plain.io.lookups
    assert plain.add_many(keys) == [False] * 1000
    assert plain.io.lookups - before == 1000
    cached = ExactFilter(2000)
    cached.add_many(keys)
    before = cached.io.lookups
    assert cached.add_many(keys) == [False] * 1000
    assert cached.io.lookups == before, "hot duplicates are answered from the cache"
    assert cached.refs(keys[5]) == 2 and plain.refs(keys[5]) == 2


# ---- expiry with a fake clock --------------------------------------------------------------------


@pytest.mark.parametrize("write_back", [True, False])
@pytest.mark.parametrize("cache", [0, 1024])
def test_forget_older_than_first_seen(cache, write_back):
    clock = Clock(100.0)
    f = ExactFilter(1000, cache_entries=cache, write_back=write_back, clock=clock)
    f.add_many(["a", "b"])
    clock.t = 200.0
    f.add_many(["c", "a"])
    clock.t = 300.0
    assert f.forget_older_than(150.0) == 2  # a and b: first seen at 100
    assert f.contains_many(["a", "b", "c"]) == [False, False, True]
    assert f.forget_older_than(200.0) == 0, "strictly older"
    assert f.add("a") is True  # new again: first seen now 300
    clock.t = 400.0
    assert f.forget_older_than(250.0) == 1  # c
    assert f.contains_many(["a", "b", "c"]) == [True, False, False]
    assert f.forget_older_than(10**9) == 1 and len(f) == 0


@pytest.mark.parametrize(
    "cache, write_back",
    [
        (0, True),
        (0, False),
        (1024, False),
        (1024, True),
    ],
)
def test_forget_older_than_last_seen(cache, write_back):
    clock = Clock(100.0)
    f = ExactFilter(1000, cache_entries=cache, write_back=write_back, clock=clock)
    f.add_many(["a", "b"])
    clock.t = 200.0
    f.add("c")
    clock.t = 300.0
    f.add("a")  # a: first seen 100, last seen 300
    clock.t = 400.0
    assert f.forget_older_than(250.0, by="last_seen") == 2  # b (100) and c (200)
    assert f.contains_many(["a", "b", "c"]) == [True, False, False]
    assert f.forget_older_than(350.0, by="last_seen") == 1  # a: last seen 300
    assert len(f) == 0


# ---- reference counts ----------------------------------------------------------------------------


@pytest.mark.parametrize("cache", [0, 8, DEFAULT_CACHE])
@pytest.mark.parametrize("write_back", [True, False])
def test_refs_with_write_back(tmp_path, cache, write_back):
    folder = tmp_path / "s"
    f = ExactFilter.create(folder, 100, cache_entries=cache, write_back=write_back)
    assert f.add_many(["a", "a", "b"]) == [True, False, True]
    f.add("a")
    f.add_many(["a", "c"] + [f"fill{i}" for i in range(30)])  # fill evicts from a small cache
    assert (f.refs("a"), f.refs("b"), f.refs("zzz")) == (4, 1, 0)
    assert f.refs("a") == 4, "refs() must not consume the pending count"
    assert f.remove("a") is True and f.refs("a") == 3
    f.flush()
    assert f.library.records([md5("a")])[md5("a")].refs == 3, "flush writes pending back"
    f.add("a")
    f.close()
    with reopen(folder) as g:
        assert g.refs("a") == 4 and g.refs("b") == 1
        assert g.remove_many(["a"] * 5) == [True] * 4 + [False]
        assert "a" not in g and "b" in g


# ---- persistence --------------------------------------------------------------------------------


def test_create_add_close_open_keeps_everything(tmp_path):
    folder = tmp_path / "state"
    keys = [f"https://p.example/{i}" for i in range(500)]
    with ExactFilter.create(folder, 1000, counter_bits=2, k=5) as f:
        assert {"counters.urlseen", "library.sqlite"} <= set(os.listdir(folder))
        f.add_many(keys)
        f.add_many(keys[:10])
        f.forget_many(keys[400:])
        counters = [f.counters._get(i) for i in range(f.counters.ncounters)]
        shape = (f.counters.ncounters, f.counters.k, f.counters.counter_bits)
    with reopen(folder) as g:
        assert (g.counters.ncounters, g.counters.k, g.counters.counter_bits) == shape
        assert [g.counters._get(i) for i in range(g.counters.ncounters)] == counters
        assert len(g) == 400 and g.contains_many(keys) == [True] * 400 + [False] * 100
        assert g.refs(keys[0]) == 2 and g.refs(keys[20]) == 1
        assert g.add_many(keys[395:405]) == [False] * 5 + [True] * 5
        s = g.stats()
        assert (s.kind, s.count, s.error_rate) == ("exact", 405, 0.0)
        assert s.details["library"] == str(folder / "library.sqlite")
    with pytest.raises(FileExistsError):
        ExactFilter.create(folder, 10)
    with pytest.raises(FileNotFoundError):
        ExactFilter.open(tmp_path / "nothing-here")


def test_readonly_open(tmp_path):
    folder = tmp_path / "state"
    with ExactFilter.create(folder, 100) as f:
        f.add_many(["a", "b", "a"])
    before = files_digest(folder)
    with reopen(folder, readonly=True) as g:
        assert g.contains_many(["a", "b", "c"]) == [True, True, False]
        assert len(g) == 2 and g.refs("a") == 2
        for write in (
            lambda: g.add("c"),
            lambda: g.add_many(["a"]),
            lambda: g.remove("a"),
            lambda: g.forget("b"),
            lambda: g.forget_older_than(1e12),
        ):
            with pytest.raises(ReadOnlyError):
                write()
        assert g.contains_many(["a", "b", "c"]) == [True, True, False]
    assert files_digest(folder) == before, "a read-only open changed the state"
    with ExactFilter.open(folder, readonly=True) as r1, ExactFilter.open(folder, readonly=True):
        assert "a" in r1  # readers share


def test_one_writer_at_a_time(tmp_path):
    folder = tmp_path / "state"
    f = ExactFilter.create(folder, 100)
    with pytest.raises(StateInUseError):
        ExactFilter.open(folder)
    with pytest.raises(StateInUseError):
        FingerprintLibraryFilter.open(folder)
    f.add("a")
    f.close()
    with pytest.raises(ClosedError):
        f.add("b")
    with pytest.raises(ClosedError):
        f.contains_many(["a"])
    with reopen(folder) as g:
        assert "a" in g


def test_invalid_options():
    for kwargs in (
        {"cache_entries": -1},
        {"cache_entries": 2**32 + 1},
        {"cache_entries": True},
        {"hash": "murmur3_x64_128"},
        {"counter_bits": 3},
        {"capacity": 0},
    ):
        with pytest.raises(ConfigError):
            ExactFilter(**{"capacity": 10, **kwargs})


# ---- rebuilding the counters from the library ----------------------------------------------------


def test_swapped_counter_files_are_rebuilt(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    with ExactFilter.create(one, 100) as f:
        f.add_many(["a", "b"])
    with ExactFilter.create(two, 100) as f:
        f.add_many(["x", "y", "z"])
    a, b = one / "counters.urlseen", two / "counters.urlseen"
    tmp = tmp_path / "swap"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    for folder, ins, outs in ((one, "ab", "xyz"), (two, "xyz", "ab")):
        with pytest.warns(CountersRebuiltWarning, match="another library"):
            g = ExactFilter.open(folder)
        with g:
            assert all(g.contains_many(list(ins))) and not any(g.contains_many(list(outs)))
            assert len(g) == len(ins) and g.add_many(list(outs)) == [True] * len(outs)
            assert_counters_exact(g, {as_bytes(k) for k in ins + outs})


def test_rebuilt_counters_of_another_library_are_in_sync_after_a_clean_close(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    ExactFilter.create(one, 100).close()
    ExactFilter.create(two, 100).close()
    shutil.copyfile(two / "counters.urlseen", one / "counters.urlseen")
    with pytest.warns(CountersRebuiltWarning, match="another library"):
        ExactFilter.open(one).close()
    reopen(one).close()


def test_changes_made_by_the_library_only_filter_are_seen(tmp_path):
    folder = tmp_path / "state"
    with ExactFilter.create(folder, 100, counter_bits=2) as f:
        f.add_many([f"old{i}" for i in range(30)])
    with FingerprintLibraryFilter.open(folder) as lib_only:
        assert lib_only.add_many(["old3", "new1", "new2"]) == [False, True, True]
    with pytest.warns(CountersRebuiltWarning, match="library changed"):
        g = ExactFilter.open(folder)
    with g:
        assert g.add_many(["new1", "new2", "old4", "new3"]) == [False, False, False, True]
        assert g.refs("old3") == 2 and len(g) == 33
        assert_counters_exact(
            g, {as_bytes(k) for k in [f"old{i}" for i in range(30)]} | {b"new1", b"new2", b"new3"}
        )


def test_readonly_open_of_stale_counters_rebuilds_in_memory(tmp_path):
    folder = tmp_path / "state"
    with ExactFilter.create(folder, 100) as f:
        f.add("a")
    with FingerprintLibraryFilter.open(folder) as lib_only:
        lib_only.add("b")
    before = files_digest(folder)
    with pytest.warns(CountersRebuiltWarning):
        g = ExactFilter.open(folder, readonly=True)
    with g:
        assert g.contains_many(["a", "b", "c"]) == [True, True, False]
    assert files_digest(folder) == before


KILLED = r"""
import os, sys
from urlseen import ExactFilter
f = ExactFilter.create(sys.argv[1], 1000, counter_bits=2)
f.add_many([f"old{i}" for i in range(200)])
f.add_many(["old1"] * 3)
if sys.argv[2] == "in-batch":
    def die(flags):
        assert flags == [True] * 50 + [False]
        os._exit(0)  # counters already incremented, library not yet committed
    f.add_many([f"new{i}" for i in range(50)] + ["old2"], before_commit=die)
os._exit(0)  # no close
"""


@pytest.mark.parametrize("when", ["after-batch", "in-batch"])
def test_a_killed_writer_loses_no_acknowledged_key(tmp_path, when):
    folder = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-c", KILLED, str(folder), when],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    with pytest.warns(CountersRebuiltWarning, match="did not close"):
        g = ExactFilter.open(folder)
    with g:
        assert g.add_many([f"old{i}" for i in range(200)]) == [False] * 200
        assert g.add_many([f"new{i}" for i in range(50)]) == [True] * 50
        assert len(g) == 250
        assert_counters_exact(
            g, {f"old{i}".encode() for i in range(200)} | {f"new{i}".encode() for i in range(50)}
        )


# ---- damaged state ------------------------------------------------------------------------------


def open_and_use(folder: Path) -> None:
    """Open and touch every record: corruption must surface here as FormatError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CountersRebuiltWarning)
        f = ExactFilter.open(folder)
    try:
        f.contains_many(USE_KEYS)
        f.add_many([*USE_KEYS, "https://brand-new.example/"])
        f.forget_many(USE_KEYS[:100])
    finally:
        f.close()


USE_KEYS = [f"https://use.example/{i}" for i in range(3000)]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    with ExactFilter.create(folder, 5000) as f:
        f.add_many(USE_KEYS)
    return folder


def assert_library_refused(folder: Path, *fragments: str) -> None:
    with pytest.raises(FormatError) as info:
        open_and_use(folder)
    message = str(info.value)
    # Collect the half-opened library now, while its file descriptor number is still free
    # (see test_library_store.py::test_a_failed_open_does_not_close_a_reused_descriptor).
    del info
    gc.collect()
    assert str(folder / "library.sqlite") in message
    for fragment in fragments:
        assert fragment in message, message


def test_garbage_library(state):
    (state / "library.sqlite").write_bytes(random.Random(1).randbytes(50_000))
    assert_library_refused(state, "not a readable urlseen library")


def test_foreign_sqlite_library(state):
    lib = state / "library.sqlite"
    lib.unlink()
    db = sqlite3.connect(lib)
    db.execute("CREATE TABLE fingerprints (fp BLOB PRIMARY KEY)")
    db.commit()
    db.close()
    assert_library_refused(state, "not a urlseen library")


def test_library_overwritten_page_by_page(tmp_path, state):
    # Every page but the header page in turn, each on a fresh copy. A damaged page of the
    # fingerprint table (most of the file) must stop open-and-use; a page that use does not
    # read (the empty overflow table's) must at least be found by SQLiteLibrary.verify().
    db = sqlite3.connect(state / "library.sqlite")
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    db.close()
    assert pages >= 6, "test precondition: a multi-page library"
    found_in_use = 0
    for page in range(1, pages):
        folder = tmp_path / f"copy{page}"
        shutil.copytree(state, folder)
        lib = folder / "library.sqlite"
        raw = bytearray(lib.read_bytes())
        raw[page * page_size : (page + 1) * page_size] = random.Random(page).randbytes(page_size)
        lib.write_bytes(bytes(raw))
        try:
            assert_library_refused(folder)
            found_in_use += 1
        except pytest.fail.Exception:
            checker = SQLiteLibrary(lib, readonly=True)
            with pytest.raises(FormatError):
                checker.verify()
            checker.close()
    assert found_in_use >= pages - 3, (found_in_use, pages)


def test_truncated_library(state):
    lib = state / "library.sqlite"
    lib.write_bytes(lib.read_bytes()[: 4096 * 6])
    assert_library_refused(state)


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "header-flip", "empty"],
)
def test_damaged_counter_file(state, damage):
    path = state / "counters.urlseen"
    raw = bytearray(path.read_bytes())
    if damage == "garbage":
        raw = bytearray(random.Random(2).randbytes(len(raw)))
    elif damage == "truncated":
        raw = raw[: len(raw) - 100]
    elif damage == "header-flip":
        raw[50] ^= 0x04
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    for readonly in (False, True):
        with pytest.raises(FormatError) as info:
            ExactFilter.open(state, readonly=readonly)
        assert str(path) in str(info.value) and "delete it" in str(info.value)
    # A failed open leaves the library usable and unlocked.
    with FingerprintLibraryFilter.open(state) as lib_only:
        assert lib_only.contains_many(USE_KEYS[:5]) == [True] * 5


def test_a_deleted_counter_file_is_rebuilt_with_its_sizing(state):
    # What the FormatError for a damaged counter file advises: delete it, open rebuilds it.
    with ExactFilter.open(state, readonly=True) as f:
        shape = (f.counters.ncounters, f.counters.k, f.counters.counter_bits)
    (state / "counters.urlseen").unlink()
    with pytest.warns(CountersRebuiltWarning, match="missing"):
        r = ExactFilter.open(state, readonly=True)  # rebuilt in memory, no file written
    with r:
        assert all(r.contains_many(USE_KEYS[:100]))
    assert not (state / "counters.urlseen").exists()
    with pytest.warns(CountersRebuiltWarning, match="missing"):
        g = ExactFilter.open(state)
    with g:
        assert (g.counters.ncounters, g.counters.k, g.counters.counter_bits) == shape
        assert all(g.contains_many(USE_KEYS)) and len(g) == len(USE_KEYS)
        assert g.add_many([*USE_KEYS[:3], "fresh"]) == [False, False, False, True]
    reopen(state).close()


def test_a_library_only_folder_opens_as_an_exact_filter(tmp_path):
    folder = tmp_path / "s"
    with FingerprintLibraryFilter.create(folder) as lib_only:
        lib_only.add_many(["a", "b", "a"])
    with pytest.warns(CountersRebuiltWarning):
        g = ExactFilter.open(folder)
    with g:
        assert g.add_many(["a", "b", "c"]) == [False, False, True] and g.refs("a") == 3
    with reopen(folder) as h:
        assert h.contains_many(["a", "b", "c", "d"]) == [True, True, True, False]


def test_damaged_counter_data_never_gives_a_wrong_answer(state):
    path = state / "counters.urlseen"
    raw = bytearray(path.read_bytes())
    for i in range(4096, len(raw), 3):  # zero some non-zero counters
        raw[i] = 0
    path.write_bytes(bytes(raw))
    seen_flags: list[bool] = []
    with pytest.warns(CountersRebuiltWarning, match="checksum"):
        g = ExactFilter.open(state)  # the data fails its checksum: rebuilt from the library
    with g:
        assert all(g.contains_many(USE_KEYS)), "false negative"
        g.add_many(USE_KEYS, before_commit=seen_flags.extend)
        assert not any(seen_flags), "a seen URL was reported new"


# ---- failed batches ------------------------------------------------------------------------------


class FailingLibrary(MemoryLibrary):
    """A MemoryLibrary whose next apply() fails before changing anything (a real library
    whose commit fails: a full disk, a lost connection)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def apply(self, changes: Changes) -> None:
        if self.fail and changes:
            self.fail = False
            raise OSError("injected commit failure")
        super().apply(changes)


FAIL_OPTIONS = [
    pytest.param(0, True, id="no-cache"),
    pytest.param(DEFAULT_CACHE, False, id="cache-write-through"),
    pytest.param(DEFAULT_CACHE, True, id="cache-write-back"),
]


def snapshot(f: ExactFilter, keys) -> tuple:
    return (len(f), f.contains_many(keys), [f.refs(k) for k in keys])


@pytest.mark.parametrize("cache, write_back", FAIL_OPTIONS)
@pytest.mark.parametrize("how", ["before_commit", "commit"])
def test_a_failed_add_batch_leaves_everything_as_it_was(how, cache, write_back):
    lib = FailingLibrary()
    f = ExactFilter(
        20, counter_bits=2, k=3, counters_per_key=4, cache_entries=cache,
        write_back=write_back, library=lib,
    )  # fmt: skip
    # 80 counters: the batch has keys the counters answer, keys that need the library, and
    # counters that saturate.
    old = [f"old{i}" for i in range(40)]
    f.add_many(old)
    f.add_many(old[:5])
    batch = [f"new{i}" for i in range(20)] + old[:10] + ["new0"]
    before = snapshot(f, old)
    seen: list[list[bool]] = []

    def boom(flags: list[bool]) -> None:
        seen.append(list(flags))
        raise RuntimeError("the caller failed")

    if how == "before_commit":
        with pytest.raises(RuntimeError):
            f.add_many(batch, before_commit=boom)
        assert seen == [[True] * 20 + [False] * 11]
    else:
        lib.fail = True
        with pytest.raises(OSError, match="injected"):
            f.add_many(batch)
    assert lib.count() == 40
    assert not any(f.contains_many(batch[:20])), "the failed batch's keys are still new"
    assert snapshot(f, old) == before
    f.flush()
    assert snapshot(f, old) == before, "nothing of the failed batch is written back later"
    assert f.add_many(batch) == [True] * 20 + [False] * 11
    assert_counters_exact(f, {as_bytes(k) for k in old + batch})


def test_a_failed_batch_does_not_lose_evicted_reference_counts():
    f = ExactFilter(1000, cache_entries=8)  # one bucket of 8
    f.add_many([f"k{i}" for i in range(8)])
    f.add("k0")
    assert f.refs("k0") == 2
    with pytest.raises(RuntimeError):
        f.add_many([f"n{i}" for i in range(8)], before_commit=_raise)
    assert f.refs("k0") == 2


def _raise(flags: list[bool]) -> None:
    raise RuntimeError("the caller failed")


@pytest.mark.parametrize("cache", [0, DEFAULT_CACHE])
@pytest.mark.parametrize("purge", [False, True])
def test_a_failed_delete_leaves_everything_as_it_was(cache, purge):
    lib = FailingLibrary()
    f = ExactFilter(20, counter_bits=2, k=3, counters_per_key=4, cache_entries=cache, library=lib)
    keys = [f"k{i}" for i in range(40)]
    f.add_many(keys)
    f.add_many(keys[:10])
    before = snapshot(f, keys)
    counters = [f.counters._get(i) for i in range(f.counters.ncounters)]
    lib.fail = True
    with pytest.raises(OSError, match="injected"):
        (f.forget_many if purge else f.remove_many)(keys[:20])
    assert snapshot(f, keys) == before
    assert [f.counters._get(i) for i in range(f.counters.ncounters)] == counters
    assert (f.forget_many if purge else f.remove_many)(keys[:20]) == [True] * 20
    left = keys[20:] if purge else keys[:10] + keys[20:]  # keys[:10] were added twice
    assert f.contains_many(keys) == [k in left for k in keys]
    assert_counters_exact(f, {as_bytes(k) for k in left})


# ---- the library-only baseline ------------------------------------------------------------------


@PROPERTY
@given(
    batches=st.lists(st.lists(st.sampled_from(POOL), max_size=10), max_size=25),
    capacity=st.sampled_from([3, 50]),
    cache=st.sampled_from([0, 8]),
)
def test_the_library_only_filter_agrees(batches, capacity, cache):
    exact = ExactFilter(capacity, counter_bits=2, cache_entries=cache)
    baseline = FingerprintLibraryFilter()
    for batch in batches:
        assert exact.add_many(batch) == baseline.add_many(batch)
        assert exact.contains_many(POOL) == baseline.contains_many(POOL)
        assert len(exact) == len(baseline)


def test_an_exact_filter_over_a_library_the_baseline_made():
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "s"
        rng = random.Random(3)
        stream = [[rng.choice(POOL) for _ in range(rng.randint(1, 9))] for _ in range(40)]
        with FingerprintLibraryFilter.create(folder, batched_lookups=False) as baseline:
            model = Model()
            for batch in stream:
                assert baseline.add_many(batch) == model.add(batch, 0)
            assert baseline.io.round_trips >= baseline.io.lookups > 0
        # An in-memory ExactFilter around that library builds its counters from it.
        lib = SQLiteLibrary(folder / "library.sqlite")
        exact = ExactFilter(100, library=lib)
        assert exact.contains_many(POOL) == model.contains(POOL)
        assert [exact.refs(k) for k in POOL] == [model.refs.get(as_bytes(k), 0) for k in POOL]
        exact.close()
        shutil.rmtree(folder)
