"""The exact filter's write-back bookkeeping in C (_core.fold_entries, _core.pack_refs) against
the Python it replaced: the same counts, times and staged bytes on any input."""

from __future__ import annotations

import struct
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from urlseen import _core
from urlseen.exact.staging import unpack_deltas

FPS = [bytes([i]) * 16 for i in range(8)]
fps_st = st.sampled_from(FPS)
u32 = st.integers(0, 2**32 - 1)


@given(
    counts=st.dictionaries(fps_st, st.integers(1, 2**40)),
    seen=st.dictionaries(fps_st, u32),
    entries=st.lists(st.tuples(fps_st, u32, u32, u32)),
)
def test_fold_entries_is_the_python_loop(counts, seen, entries):
    want_counts, want_seen = defaultdict(int, counts), dict(seen)
    for fp, pending, batch, when in entries:
        if pending + batch:
            want_counts[fp] += pending + batch
            if when > want_seen.get(fp, 0):
                want_seen[fp] = when
    got_counts, got_seen = defaultdict(int, counts), dict(seen)
    _core.fold_entries(got_counts, got_seen, entries)
    assert got_counts == want_counts and got_seen == want_seen


times = st.one_of(
    st.integers(0, 2**40),
    st.floats(0, 2e9, allow_nan=False),
    st.integers(0, 2**20).map(lambda n: n / 1000 + 0.0005),  # ties of round(x * 1000)
)


@given(
    refs=st.dictionaries(fps_st, st.integers(-(2**40), 2**40), min_size=1),
    seen=st.dictionaries(fps_st, times),
    now=times,
)
def test_pack_refs_is_the_python_formula(refs, seen, now):
    fps = list(refs)
    blob, deltas = _core.pack_refs(fps, refs, seen, now)
    assert blob == b"".join(fps)
    got_refs, got_times = unpack_deltas(deltas)
    assert list(got_refs) == [refs[fp] for fp in fps]
    assert list(got_times) == [round(seen.get(fp, now) * 1000) for fp in fps]
    assert deltas[:16] == struct.pack("<qq", refs[fps[0]], got_times[0])


def test_pack_refs_refuses_what_it_cannot_pack():
    with pytest.raises(ValueError, match="16 bytes"):
        _core.pack_refs([b"short"], {b"short": 1}, {}, 0)
    with pytest.raises(KeyError):
        _core.pack_refs([FPS[0]], {}, {}, 0)
    with pytest.raises(OverflowError):
        _core.pack_refs([FPS[0]], {FPS[0]: 1}, {FPS[0]: 2**62}, 0)
    with pytest.raises(TypeError):
        _core.pack_refs([FPS[0]], {FPS[0]: 1}, {FPS[0]: "soon"}, 0)
