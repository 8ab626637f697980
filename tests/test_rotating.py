"""RotatingBloomFilter (our reconstruction): generational expiry by count and by time,
removal that makes a URI collectable again, no false negatives inside the window, the error
target split across generations, persistence, and refused input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen import ClosedError, ConfigError, FormatError, RotatingBloomFilter
from urlseen.bloom.rotating import MANIFEST, generation_error_rate

R = RotatingBloomFilter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def fill(f: R, n: int, tag: str) -> None:
    f.add_many([f"https://filler.example/{tag}/{i}" for i in range(n)])


@pytest.mark.parametrize("counting", [False, True])
def test_expiry_after_g_rotations(counting):
    g = 3
    f = R(300, 0.01, generations=g, counting=counting)
    assert f.add("https://cms.example/old")
    assert not f.add("https://cms.example/old"), "seen in the current window"
    for rotation in range(1, g):
        f.rotate()
        f.add(f"https://cms.example/new/{rotation}")
        assert "https://cms.example/old" in f, f"forgotten after {rotation} rotations"
        assert not f.add("https://cms.example/old")
    assert len(f.generations) == g
    f.rotate()  # rotation number G: the generation that holds it is dropped
    assert "https://cms.example/old" not in f
    assert f.add("https://cms.example/old"), "inserted G generations ago: new again"
    assert "https://cms.example/new/2" in f


def test_a_full_generation_rotates_and_is_never_overfilled():
    f = R(300, 0.01, generations=3)  # 100 keys per generation
    seen_sizes = []
    for i in range(50):
        f.add_many([f"https://filler.example/{i}/{j}" for j in range(37)])
        seen_sizes.append(len(f.generations))
        assert all(len(x) <= 100 for x in f.generations)
    assert seen_sizes[0] == 1 and seen_sizes[-1] == 3
    assert [len(x) for x in f.generations][:-1] == [100, 100], "older generations are full"
    assert len(f) <= 300


def test_expiry_by_time_window():
    clock = FakeClock()
    f = R(10_000, 0.01, generations=4, window=60.0, clock=clock)
    f.add("https://cms.example/a")
    clock.now += 3 * 60 + 59  # three rotations: still inside the window of 4 generations
    assert "https://cms.example/a" in f
    assert not f.add("https://cms.example/a")
    clock.now += 1  # the fourth rotation drops the generation that holds it
    assert "https://cms.example/a" not in f
    assert f.add("https://cms.example/a")


def test_a_long_pause_forgets_everything_once():
    clock = FakeClock()
    f = R(1000, 0.01, generations=3, window=10.0, clock=clock)
    f.add_many(["a", "b"])
    clock.now += 10_000
    assert f.contains_many(["a", "b"]) == [False, False]
    assert len(f.generations) == 3 and len(f) == 0


def test_duplicates_do_not_refresh():
    f = R(30, 0.01, generations=3)
    f.add("x")
    f.rotate()
    assert not f.add("x")  # seen again in generation 2: expiry still counts from generation 1
    f.rotate()
    f.rotate()
    assert "x" not in f


def test_remove_makes_a_uri_collectable_again():
    f = R(3000, 0.001, generations=3, counting=True)
    urls = [f"https://cms.example/article/{i}" for i in range(500)]
    assert all(f.add_many(urls))
    assert f.remove(urls[7])  # an editor deleted the article
    assert urls[7] not in f
    assert f.add(urls[7]), "re-published: collected again"
    assert all(f.contains_many(urls)), "removal took nothing from other keys"
    assert not f.remove("https://cms.example/never-added-xyz")


def test_remove_targets_the_generation_the_key_was_added_to():
    f = R(3000, 0.01, generations=3, counting=True)
    f.add("old")
    fill(f, 9, "a")
    f.rotate()
    fill(f, 10, "b")  # "old" lives in the oldest generation, the newest is another one
    counts = [len(g) for g in f.generations]
    assert f.remove("old")
    assert [len(g) for g in f.generations] == [counts[0] - 1, *counts[1:]]
    assert "old" not in f


def test_remove_needs_counting():
    with pytest.raises(ConfigError, match="counting"):
        R(100, 0.01).remove("a")


PROPERTY = settings(max_examples=60, deadline=None)


@PROPERTY
@given(
    ks=st.lists(st.binary(max_size=20), max_size=120),
    generations=st.integers(1, 5),
    counting=st.booleans(),
)
def test_no_false_negatives_inside_the_window(ks, generations, counting):
    # Capacity above the number of keys: no generation is ever dropped, nothing may be lost.
    f = R(generations * 200, 0.01, generations=generations, counting=counting)
    flags = f.add_many(ks)
    assert all(f.contains_many(ks)) and all(k in f for k in ks)
    assert not any(f.add_many(ks))
    for k in set(ks):  # new at most once, and only at its first occurrence
        assert sum(new for key, new in zip(ks, flags, strict=True) if key == k) <= 1
        assert not any(
            new
            for i, (key, new) in enumerate(zip(ks, flags, strict=True))
            if key == k and i != ks.index(k)
        )


@PROPERTY
@given(ks=st.lists(st.binary(max_size=8), max_size=200), generations=st.integers(1, 4))
def test_batch_equals_sequential_across_rotations(ks, generations):
    a = R(generations * 15, 0.01, generations=generations)
    b = R(generations * 15, 0.01, generations=generations)
    assert a.add_many(ks) == [b.add(k) for k in ks]
    assert all(len(g) <= 15 for g in a.generations)


def test_error_target_is_split_across_generations():
    g, p = 4, 0.01
    f = R(40_000, p, generations=g)
    p_g = generation_error_rate(p, g)
    assert 1 - (1 - p_g) ** g == pytest.approx(p)
    fill(f, 40_000, "in")
    assert len(f.generations) == g and len(f) >= 39_000  # a few keys were false positives
    queries = 100_000
    got = sum(f.contains_many([f"https://foreign.example/{i}" for i in range(queries)])) / queries
    # Binomial bound as in test_fpr.py: at most 1.1 p + 4.5 sigma (sizing keeps each generation
    # at or below p_g, so the union at or below p); and not absurdly below the model.
    assert got <= 1.1 * p + 4.5 * math.sqrt(p / queries)
    assert got >= 0.3 * p
    assert f.stats().estimated_error_rate <= p * 1.0001


def test_memory_is_bounded_by_g_generations():
    f = R(1000, 0.01, generations=3)
    for i in range(20):
        fill(f, 1000, f"x{i}")
    s = f.stats()
    assert len(f.generations) == 3 and len(f) <= 1000
    assert s.bits == 3 * f.generations[0].stats().bits


# -- persistence -------------------------------------------------------------------------------


@pytest.mark.parametrize("counting", [False, True])
def test_folder_round_trip(tmp_path: Path, counting: bool):
    clock = FakeClock()
    folder = tmp_path / "seen"
    with R.create(folder, 300, 0.01, generations=3, counting=counting, clock=clock) as f:
        f.add("kept")
        fill(f, 50, "a")
        f.rotate()
        fill(f, 50, "b")
        f.rotate()
        f.add("newest")
        counts = [len(g) for g in f.generations]
    with R.open(folder, clock=clock) as g:
        assert [len(x) for x in g.generations] == counts
        assert "kept" in g and "newest" in g and not g.add("kept")
        g.rotate()  # the generation that held "kept" is dropped
        assert "kept" not in g
    assert len(list(folder.glob("gen-*.urlseen"))) == 3
    with R.open(folder, clock=clock) as h:
        assert "kept" not in h and "newest" in h


def test_window_survives_reopen(tmp_path: Path):
    clock = FakeClock()
    R.create(tmp_path / "s", 1000, 0.01, generations=2, window=100.0, clock=clock).close()
    with R.open(tmp_path / "s", clock=clock) as f:
        f.add("a")
    clock.now += 250
    with R.open(tmp_path / "s", clock=clock) as f:
        assert "a" not in f


def test_damaged_or_foreign_folder_is_refused(tmp_path: Path):
    with pytest.raises(FormatError, match="manifest missing"):
        R.open(tmp_path)
    folder = tmp_path / "seen"
    R.create(folder, 300, 0.01, generations=3).close()
    manifest = folder / MANIFEST
    good = manifest.read_text()
    changed = good.replace('"generations":3', '"generations":4')
    assert changed != good
    manifest.write_text(changed)
    with pytest.raises(FormatError, match="checksum"):
        R.open(folder)
    manifest.write_text("not json")
    with pytest.raises(FormatError):
        R.open(folder)
    manifest.write_text(good)
    gen = next(folder.glob("gen-*.urlseen"))
    gen.write_bytes(b"garbage" * 100)
    with pytest.raises(FormatError):
        R.open(folder)
    gen.unlink()
    with pytest.raises(FormatError, match="missing"):
        R.open(folder)
    with pytest.raises(FileExistsError):
        R.create(folder, 300, 0.01)
    assert json.loads(good)["body"]["format"] == "urlseen-rotating"


# -- refused input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"error_rate": 0.0},
        {"generations": 0},
        {"generations": 65},
        {"window": 0},
        {"window": float("inf")},
        {"counting": 1},
        {"layout": "fancy"},
        {"hash": "sha1"},
    ],
)
def test_bad_config_is_config_error(kwargs):
    args = {"capacity": 1000, "error_rate": 0.01, **kwargs}
    with pytest.raises(ConfigError):
        R(**args)


def test_bad_key_in_a_rotating_batch_changes_nothing():
    f = R(30, 0.01, generations=3)
    with pytest.raises(TypeError):
        f.add_many([f"k{i}" for i in range(25)] + [3])  # type: ignore[list-item]
    assert len(f) == 0 and len(f.generations) == 1
    with pytest.raises(TypeError, match="single"):
        f.add_many("abc")


def test_closed_filter_raises():
    f = R(100, 0.01)
    f.close()
    with pytest.raises(ClosedError):
        f.add("a")


# -- urlseen dedup --filter rotating ------------------------------------------------------------


def test_cli_dedup_with_rotating_state_folder(tmp_path: Path):
    from cli_helpers import dedup, invoke

    text = b"https://a.example/1\nhttps://a.example/2\nhttps://a.example/1\n"
    state = tmp_path / "seen"
    first = dedup("--filter", "rotating", "--generations", "2", "--state", state, input=text)
    assert first.stdout == "https://a.example/1\nhttps://a.example/2\n"
    assert dedup("--filter", "rotating", "--state", state, input=text).stdout == ""
    with R.open(state) as f:
        assert f.stats().details["generations"] == 2 and len(f) == 2
    clash = invoke("dedup", "--filter", "rotating", "--generations", "3", "--state", state)
    assert clash.exit_code == 2 and "--generations 3 differs" in clash.stderr
    file_state = tmp_path / "file"
    file_state.write_bytes(b"x")
    bad = invoke("dedup", "--filter", "rotating", "--state", file_state, input=text)
    assert bad.exit_code == 2 and "keeps a folder" in bad.stderr


def test_cli_rotating_forgets_after_g_generations_of_capacity():
    from cli_helpers import dedup

    # capacity 20, G = 2: generations of 10 URLs; 25 distinct URLs later, the first is new again.
    urls = [f"https://x.example/{i}" for i in range(25)] + ["https://x.example/0"]
    text = "\n".join(urls).encode() + b"\n"
    out = dedup("--filter", "rotating", "--capacity", "20", "--generations", "2", input=text)
    assert out.stdout.splitlines()[-1] == "https://x.example/0"


def test_info_describes_a_rotating_folder_without_opening_it_for_writing(tmp_path: Path):
    from cli_helpers import invoke

    folder = tmp_path / "gens"
    with RotatingBloomFilter.create(folder, capacity=40, generations=2) as seen:
        seen.add_many([f"https://a.example/{i}" for i in range(30)])  # rotates once
        counts = [len(g) for g in seen.generations]
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    result = invoke("info", "--json", folder)
    assert result.exit_code == 0, result.stderr
    desc = json.loads(result.stdout)
    assert desc["kind"] == "rotating" and desc["generations"] == 2
    assert [g["count"] for g in desc["live_generations"]] == counts
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    (folder / MANIFEST).write_text("{}")
    damaged = invoke("info", folder)
    assert damaged.exit_code != 0 and "manifest" in damaged.stderr
