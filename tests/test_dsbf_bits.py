"""tests/dsbf_bits_model.py, the model behind benchmarks/splittable/REPORT.md: its fingerprint
coder round-trips near the entropy bound, its model of the splittable tree agrees with the real
SplittableBloomFilter on the same URLs, and no design loses a URL through splits and grows."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest

from conftest import REPO_ROOT
from urlseen.splittable.filter import SplittableBloomFilter

np = pytest.importorskip("numpy")  # the benchmark's (the bench extra brings it)

CAPACITY, LEAF_BITS, F = 1000, 1 << 15, 1e-3


def _load() -> ModuleType:
    path = REPO_ROOT / "tests" / "dsbf_bits_model.py"
    spec = importlib.util.spec_from_file_location("dsbf_bits_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dsbf_bits_model"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bits = _load()


def _urls(n: int, start: int = 0) -> list[str]:
    return [f"https://site{i % 97}.example/page/{i}?q={i * 7919}" for i in range(start, start + n)]


def _grown(design: str, n: int) -> tuple[Any, list[str]]:
    """A model grown with n URLs, and those it answered new."""
    model = bits.Model(bits.DESIGNS[design], CAPACITY, F, LEAF_BITS)
    urls = _urls(n)
    digests = bits._core.digests(urls, bits._core.HASH_XXH3_128, 0)
    new: list[str] = []
    for start in range(0, n, bits.BATCH):
        answers = model.add(*model.keys(digests[start : start + bits.BATCH]))
        new += [url for url, fresh in zip(urls[start:], answers, strict=False) if fresh]
    return model, new


@pytest.mark.parametrize(("n", "universe"), [(1, 8), (2, 3), (64, 20), (4500, 33), (3000, 12)])
def test_elias_fano_round_trip_near_the_bound(n: int, universe: int) -> None:
    rng = np.random.default_rng(n)
    values = np.unique(rng.integers(0, 1 << universe, 3 * n, dtype=np.uint64))[:n]
    rng.shuffle(values)
    values = np.sort(values[:n])
    data, size = bits.ef_encode(values, universe)
    assert 8 * len(data) >= size
    assert np.array_equal(bits.ef_decode(data, len(values), universe), values)
    assert size <= bits.entropy_bits(len(values), universe) + 2 * len(values) + 1


def test_model_agrees_with_the_filter() -> None:
    """The built design (v5) in the model and the real filter (in-memory store), grown 10x on
    the same URLs: the same leaves, fill and bits within a few percent (the root's seed is
    random)."""
    n = 10 * CAPACITY
    model, _ = _grown("v5", n)
    urls = _urls(n)
    seen = SplittableBloomFilter(CAPACITY, F, leaf_bits=LEAF_BITS)
    for start in range(0, n, bits.BATCH):
        seen.add_many(urls[start : start + bits.BATCH])
    leaves = seen.leaves()
    row = model.bits(n, 0)
    assert model.width == seen.fingerprint_bits
    assert abs(row["leaves"] - len(leaves)) <= max(1, len(leaves) // 10)
    real_bloom = sum(leaf["bits"] for leaf in leaves) / n
    assert row["bloom"] == pytest.approx(real_bloom, rel=0.1)
    real_fill = sum(leaf["fill"] for leaf in leaves) / len(leaves)
    assert row["mean_fill"] == pytest.approx(real_fill, rel=0.1)
    kept = sum(leaf["fingerprint_bytes"] for leaf in leaves)  # coded and raw
    assert row["fingerprints"] == pytest.approx(8 * kept / n, rel=0.05)


@pytest.mark.parametrize("design", list(bits.DESIGNS))
def test_no_design_loses_a_url(design: str) -> None:
    """Every URL answered new is found after the splits and grows (its fingerprint survives the
    store's coding and the children's rebuilt bits); never-inserted URLs mostly are not. (A URL
    answered seen, a false positive, kept no fingerprint: it may be absent after a split, as in
    the filter.)"""
    n = 12 * CAPACITY
    model, urls = _grown(design, n)
    assert len(urls) > n - 10 * F * n
    assert model.stats.splits > 0 and model.stats.grows > 0
    counts = sum(leaf.count for leaf in model.leaves.values())
    assert counts == model.stats.reported_new
    assert all(len(leaf.store.take()) == leaf.count for leaf in model.leaves.values())
    fps, roots = model.keys(bits._core.digests(urls, bits._core.HASH_XXH3_128, 0))
    assert model.contains(fps, roots) == len(urls)
    probes = _urls(20_000, start=n)
    fps, roots = model.keys(bits._core.digests(probes, bits._core.HASH_XXH3_128, 0))
    assert model.contains(fps, roots) <= 2 * F * len(probes)


def test_prefix_leaves_keep_only_the_bits_below_their_prefix() -> None:
    """A leaf at depth d keeps W - d bits per URL, and the coded store stays within 2.5 bits per
    URL of the entropy of what it keeps."""
    model, _ = _grown("prefix-ef", 12 * CAPACITY)
    depths = {leaf.depth for leaf in model.leaves.values()}
    assert max(depths) >= 2
    for leaf in model.leaves.values():
        assert leaf.store.universe == model.width - leaf.depth
        assert int(leaf.store.take().max()) < 1 << (model.width - leaf.depth)
    row = model.bits(12 * CAPACITY, 0)
    assert row["fingerprints"] <= row["fingerprint_bound"] + 2.5


def test_prefix_collisions_are_urls_under_the_root_child_over_2_to_the_w() -> None:
    """With a short W the FP rate is the collision rate the design counts on, (URLs under a
    child of the root) / 2^W, whatever the depth: a leaf keeping W - d bits loses nothing that
    its d routing bits do not give back."""
    width, n = 20, 12 * CAPACITY
    model = bits.Model(bits.DESIGNS["prefix-ef"], CAPACITY, F, LEAF_BITS, width=width)
    digests = bits._core.digests(_urls(n), bits._core.HASH_XXH3_128, 0)
    for start in range(0, n, bits.BATCH):
        model.add(*model.keys(digests[start : start + bits.BATCH]))
    assert max(leaf.depth for leaf in model.leaves.values()) >= 2
    assert len(model.root.children) == 1  # so the estimate is exact: every URL under one child
    probes = _urls(40_000, start=n)
    fps, roots = model.keys(bits._core.digests(probes, bits._core.HASH_XXH3_128, 0))
    expected = model.collision_rate() + model.leaf_error_rate()  # an upper bound on the second
    measured = model.contains(fps, roots) / len(probes)
    assert 0.75 * model.collision_rate() <= measured <= 1.25 * expected
