"""Hypothesis properties of BloomFilter: no false negatives, the URL-seen contract against a set
model, batch == sequential, persistence round trips, and union."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen import BloomFilter

# Any str without lone surrogates (NULs, empty, astral characters included), or any bytes.
texts = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40)
keys = st.one_of(texts, st.binary(max_size=40), st.sampled_from(["", "\x00", b"", b"\x00"]))
key_lists = st.lists(keys, max_size=150)
layouts = st.sampled_from(["blocked", "standard"])
seeds = st.integers(0, 2**32 - 1)
# Small filters are the interesting ones for false negatives: they run over capacity fast.
small = st.tuples(st.integers(1, 200), st.sampled_from([0.5, 0.1, 0.01]), layouts, seeds)

PROPERTY = settings(max_examples=150, deadline=None)


def as_bytes(key: str | bytes) -> bytes:
    """The filter's identity of a key: a str is its UTF-8 bytes."""
    return key.encode("utf-8") if isinstance(key, str) else key


def build(shape) -> BloomFilter:
    capacity, error_rate, layout, seed = shape
    return BloomFilter(capacity=capacity, error_rate=error_rate, layout=layout, seed=seed)


@PROPERTY
@given(shape=small, ks=key_lists, batch=st.booleans())
def test_no_false_negatives(shape, ks, batch):
    f = build(shape)
    if batch:
        f.add_many(ks)
    else:
        for k in ks:
            f.add(k)
    assert all(k in f for k in ks)
    assert all(f.contains_many(ks))
    assert all(as_bytes(k) in f for k in ks)
    assert not any(f.add_many(ks)), "every key is already in"


@PROPERTY
@given(shape=small, ks=key_lists)
def test_add_against_a_set_model(shape, ks):
    # A seen key is never new; a new key may be reported seen (a false positive).
    f = build(shape)
    model: set[bytes] = set()
    reported_new = 0
    for k in ks:
        new = f.add(k)
        if as_bytes(k) in model:
            assert new is False
        reported_new += new
        model.add(as_bytes(k))
    assert len(f) == reported_new <= len(model)


@PROPERTY
@given(ks=key_lists, layout=layouts, seed=seeds)
def test_add_is_exact_when_the_filter_is_huge(ks, layout, seed):
    # 150 keys in a filter sized for 10**6 at 1e-9: a false positive has probability ~1e-12
    # per key, so add must say exactly what the model says.
    f = BloomFilter(capacity=10**6, error_rate=1e-9, layout=layout, seed=seed)
    model: set[bytes] = set()
    for k in ks:
        assert f.add(k) is (as_bytes(k) not in model)
        model.add(as_bytes(k))
    assert len(f) == len(model)


@PROPERTY
@given(shape=small, ks=key_lists, probes=key_lists)
def test_add_many_equals_sequential_add(shape, ks, probes):
    one, many = build(shape), build(shape)
    assert many.add_many(ks) == [one.add(k) for k in ks]
    assert len(many) == len(one)
    assert many.popcount() == one.popcount()
    assert many.contains_many(probes) == [p in one for p in probes]
    counted = build(shape)
    assert counted.update(ks) == len(one)


@settings(max_examples=40, deadline=None)
@given(shape=small, ks=key_lists, probes=key_lists)
def test_save_open_round_trip(shape, ks, probes):
    f = build(shape)
    f.add_many(ks)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.urlseen"
        f.save(path)
        with BloomFilter.open(path, readonly=True) as g:
            assert len(g) == len(f)
            assert (g.nbits, g.k, g.layout, g.seed) == (f.nbits, f.k, f.layout, f.seed)
            assert (g.capacity, g.error_rate) == (f.capacity, f.error_rate)
            assert all(g.contains_many(ks))
            assert g.contains_many(probes) == f.contains_many(probes)
            assert g.popcount() == f.popcount()


@PROPERTY
@given(shape=small, left=key_lists, right=key_lists, probes=key_lists)
def test_union_contains_both_sets(shape, left, right, probes):
    a, b = build(shape), build(shape)
    a.add_many(left)
    b.add_many(right)
    u, v = a | b, b.union(a)
    assert all(u.contains_many(left + right))
    assert u.contains_many(probes) == v.contains_many(probes)
    # Monotone: whatever either operand answers yes to, the union does too.
    in_a, in_b, in_u = a.contains_many(probes), b.contains_many(probes), u.contains_many(probes)
    assert all(z >= (x or y) for x, y, z in zip(in_a, in_b, in_u, strict=True))
    assert max(a.popcount(), b.popcount()) <= u.popcount() <= a.popcount() + b.popcount()


def data_of(path: Path) -> bytes:
    raw = path.read_bytes()
    data_offset = int.from_bytes(raw[12:16], "little")  # header layout: state/format.py
    return raw[data_offset:]


@settings(max_examples=25, deadline=None)
@given(shape=small, left=key_lists, right=key_lists)
def test_union_bits_are_the_or_of_the_operands(shape, left, right):
    a, b = build(shape), build(shape)
    a.add_many(left)
    b.add_many(right)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / name for name in ("a", "b", "u")]
        for f, path in zip((a, b, a | b), paths, strict=True):
            f.save(path)
        da, db, du = map(data_of, paths)
    assert du == bytes(x | y for x, y in zip(da, db, strict=True))
