"""A Bloom filter given no capacity grows by layers: its memory follows the keys met, its error
rate stays at most the one set, and `urlseen dedup` answers as awk's first occurrences."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from urlseen import _core
from urlseen.bloom.bloom import BloomFilter
from urlseen.bloom.growing import GrowingBloomFilter
from urlseen.kinds import open_filter


def test_layers_grow_and_no_key_is_ever_new_twice():
    seen = GrowingBloomFilter(1e-6, start_capacity=1000)
    keys = [f"https://g.example/{i}" for i in range(30_000)]
    for start in range(0, len(keys), 2500):
        batch = keys[start : start + 2500]
        old = keys[:start:3]
        assert seen.add_many([*batch, *old, *batch[:5]]) == [True] * len(batch) + [False] * (
            len(old) + 5
        )
    stats = seen.stats()
    assert stats.details["layers"] >= 3 and stats.count == len(seen) == len(keys)
    assert stats.count <= stats.capacity < 4 * 4 * len(keys)
    assert all(seen.contains_many(keys)) and f"https://g.example/{10**9}" not in seen
    seen.close()


def test_the_compound_error_rate_stays_under_the_one_set():
    rate = 0.01
    seen = GrowingBloomFilter(rate, start_capacity=500)
    for start in range(0, 20_000, 500):
        seen.add_many([f"in-{i}" for i in range(start, start + 500)])
    assert seen.stats().details["layers"] >= 3
    one = GrowingBloomFilter(rate, start_capacity=500)
    one.add_many([f"in-{i}" for i in range(20_000)])
    assert one.stats().details["layers"] == 1 and one.capacity >= 20_000, "sized for a batch"
    probes = [f"out-{i}" for i in range(100_000)]
    false = sum(seen.contains_many(probes))
    assert false / len(probes) < rate, false
    assert seen.stats().estimated_error_rate < rate


def test_only_a_filter_without_capacity_or_state_grows(tmp_path):
    with open_filter("bloom") as grows:
        assert isinstance(grows, GrowingBloomFilter)
        assert grows.stats().bits < 16 << 20, "2 MiB, not 46"
    with open_filter("bloom", capacity=1000) as sized:
        assert not isinstance(sized, GrowingBloomFilter) and sized.stats().capacity == 1000
    with open_filter("bloom", state=tmp_path / "s.bloom") as kept:
        assert not isinstance(kept, GrowingBloomFilter)
        assert kept.stats().capacity == 10_000_000, "a state keeps today's default"


@pytest.mark.parametrize("canonicalize", [False, True])
def test_dedup_with_a_growing_filter_prints_awks_first_occurrences(tmp_path, canonicalize):
    rng = random.Random(7)
    urls = [
        f"https://h{rng.randrange(5000)}.example/p/{rng.randrange(200)}" for _ in range(500_000)
    ]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(urls) + "\n")
    args = [sys.executable, "-m", "urlseen", "dedup", str(path)]
    done = subprocess.run(
        args if canonicalize else [*args, "--no-canonicalize"], capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    expected = list(dict.fromkeys(urls))
    assert len(expected) > 1 << 18, "past the first layer"
    assert done.stdout.decode().splitlines() == expected
    assert b"warning" not in done.stderr


def test_the_engine_answers_the_keys_an_older_layer_holds_seen():
    older, newest = BloomFilter(10_000, 1e-9), BloomFilter(10_000, 1e-9)
    older.add_many([b"http://k.example/%d" % i for i in range(100)])
    engine = _core.LineEngine(False, 64 * 1024)
    engine.feed(b"".join(b"http://k.example/%d\n" % (i % 300) for i in range(600)))
    engine.end_input()
    assert engine.next_batch(1000, final=True)
    with pytest.raises(RuntimeError, match="bloom_test first"):
        engine.bloom_test_also(older)
    assert engine.bloom_test(newest) == 300
    assert engine.bloom_test_also(older) == 200
    assert engine.bloom_commit(newest) == 200
    assert len(newest) == 200 and b"http://k.example/250" in newest
    assert b"http://k.example/50" not in newest
