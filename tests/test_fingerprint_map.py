"""FingerprintMap (csrc/fpmap.h), the library's staged fingerprints: it must behave as a dict
from 16-byte keys to ints, first value kept, across growth and for the all-zero key."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen import _core

fingerprints = st.one_of(st.binary(min_size=16, max_size=16), st.just(bytes(16)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(fingerprints, max_size=40), st.integers(0, 2**64 - 1))))
def test_it_behaves_as_a_dict_that_keeps_the_first_value(batches):
    m, model = _core.FingerprintMap(), {}
    for fps, value in batches:
        fresh = len({fp for fp in fps if fp not in model})
        assert m.add_many(fps, value) == fresh
        for fp in fps:
            model.setdefault(fp, value)
        assert len(m) == len(model)
    assert sorted(m.items()) == sorted(model.items())
    assert sorted(m.keys()) == sorted(model)
    records = m.sorted_records()  # byte order, as the runs keep it (csrc/runs.h)
    order = sorted(model)
    assert records == b"".join(struct.pack("<16sqQQ", fp, 1, model[fp], model[fp]) for fp in order)
    for fp in [*list(model)[:20], b"\x01" * 16]:
        assert (fp in m) == (fp in model) and m.get(fp) == model.get(fp)


def test_growth_keeps_every_entry_and_partition_keeps_order():
    rng = random.Random(7)
    fps = [rng.randbytes(16) for _ in range(50_000)]
    m = _core.FingerprintMap()
    for start in range(0, len(fps), 5000):  # many doublings, each batch reserved ahead
        assert m.add_many(fps[start : start + 5000], start) == 5000
    assert len(m) == 50_000 and m.nbytes >= 50_000 * 24 * 4 // 3
    assert all(m.get(fp) == (i // 5000) * 5000 for i, fp in enumerate(fps))
    others = [rng.randbytes(16) for _ in range(100)]
    mixed = [x for pair in zip(fps[:100], others, strict=True) for x in pair]
    inside, outside = m.partition(mixed)
    assert inside == fps[:100] and outside == others


@pytest.mark.parametrize("bad", [b"short", b"x" * 17, "a" * 16, 5])
def test_a_key_that_is_not_16_bytes_changes_nothing(bad):
    m = _core.FingerprintMap()
    with pytest.raises((ValueError, TypeError)):
        m.add_many([b"y" * 16, bad], 1)
    assert len(m) == 0
    with pytest.raises((ValueError, TypeError)):
        m.partition([bad])
    with pytest.raises((ValueError, TypeError)):
        m.get(bad)
