"""The library's sorted runs (exact/runs.py, csrc/runs.h): the C kernels against plain
Python, and runs of a few records a chunk, so that merges cross many chunks and windows."""

from __future__ import annotations

import random
import sqlite3
import struct

import pytest

from urlseen import _core
from urlseen.exact import runs as _runs
from urlseen.exact.library_protocol import Changes
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import STORED_RECORDS, SQLiteLibrary

RECORD = struct.Struct("<16sqqq")


def records(keys, tag: int = 0) -> bytes:
    return b"".join(RECORD.pack(k, tag, 0, 0) for k in sorted(keys))


def test_merge_takes_keys_up_to_the_bound_and_keeps_the_first_buffers_repeat():
    rng = random.Random(1)
    a = [rng.randbytes(16) for _ in range(300)]
    b = [rng.randbytes(16) for _ in range(200)] + a[:7]
    everything = sorted(set(a) | set(b))
    out, used, repeats = _core.run_merge([records(a, 1), records(b, 2)], None)
    got = list(RECORD.iter_unpack(out))
    assert [r[0] for r in got] == everything and used == [300, 207] and repeats == 7
    assert all(r[1] == 1 for r in got if r[0] in set(a)), "the first buffer's record"
    bound = everything[100]
    out, used, _ = _core.run_merge([records(a), records(b), b""], bound)
    assert [r[0] for r in RECORD.iter_unpack(out)] == [k for k in everything if k <= bound]
    assert used[0] == sum(k <= bound for k in a) and used[2] == 0
    with pytest.raises(ValueError, match="whole 40-byte records"):
        _core.run_merge([b"x" * 41], None)
    with pytest.raises(ValueError, match="bound must be"):
        _core.run_merge([b""], b"short")


def test_find_and_the_bloom_filter_have_no_false_negative():
    rng = random.Random(2)
    keys = sorted(rng.randbytes(16) for _ in range(5000))
    data = records(keys)
    assert all(_core.run_find(data, k) == i for i, k in enumerate(keys))
    others = [rng.randbytes(16) for _ in range(5000)]
    assert all(_core.run_find(data, k) == -1 for k in others)
    bits = bytearray(64 * (5000 * _runs.BLOOM_BITS // 512 + 1))
    _core.run_bloom_add(bits, data, 40)
    assert _core.run_bloom_check(bits, b"".join(keys)) == b"\x01" * 5000
    false = sum(_core.run_bloom_check(bits, b"".join(others)))
    assert false < 5000 * 0.02, "about 1% expected at 10 bits a key"


@pytest.mark.parametrize("stage_limit", [3, 20])
def test_tiny_chunks_and_windows_read_as_the_memory_library(tmp_path, monkeypatch, stage_limit):
    """Chunks of 3 records, merge windows of 2 chunks: random inserts, reference changes and
    deletes over many merges; every read answers as MemoryLibrary does, and the rows agree."""
    monkeypatch.setattr(_runs, "CHUNK", 3)
    monkeypatch.setattr(_runs, "WINDOW", 2)
    rng = random.Random(stage_limit)
    universe = [rng.randbytes(16) for _ in range(400)]
    memory = MemoryLibrary()
    path = tmp_path / "library.sqlite"
    disk = SQLiteLibrary(path, create=True, stage_limit=stage_limit)
    for step in range(80):
        present = memory.present(universe)
        absent = [f for f in universe if f not in present]
        changes = Changes(100.0 + step)
        changes.inserts = rng.sample(absent, min(len(absent), rng.randrange(0, 15)))
        changes.refs = {f: rng.randrange(-1, 4) for f in rng.sample(universe, 8)}
        if step % 7 == 6:
            changes.deletes = rng.sample(universe, 10)
        for library in (memory, disk):
            library.apply(changes)
        assert disk.present(universe) == memory.present(universe)
        if step % 10 == 9:
            assert disk.records(universe) == memory.records(universe)
            assert sorted({f for c in disk.fingerprints(chunk=5) for f in c}) == sorted(
                f for c in memory.fingerprints() for f in c
            )
            assert disk.count() == memory.count()
            assert sorted(disk.older_than(150.0)) == sorted(memory.older_than(150.0))
    disk.compact()
    assert disk.records(universe) == memory.records(universe)
    disk.close()
    reader = SQLiteLibrary(path, readonly=True)
    assert reader.verify() is True
    assert reader.present(universe) == memory.present(universe)
    (stored,) = reader._db.execute(STORED_RECORDS).fetchone()
    assert stored == memory.count()
    reader.close()


def test_a_reader_keeps_what_it_read_of_old_runs_and_reads_new_ones(tmp_path):
    """A run's id is never used again: a run emptied by deletes goes, the next one gets a new
    id, and a reader that cached the old run's Bloom filter answers for the new one."""
    path = tmp_path / "library.sqlite"
    writer = SQLiteLibrary(path, create=True, stage_limit=5)
    first = [bytes([1]) * 15 + bytes([i]) for i in range(5)]
    writer.apply(Changes(1.0, inserts=first))  # run 1
    reader = SQLiteLibrary(path, readonly=True, check_seal=False)
    assert reader.present(first) == set(first)
    writer.apply(Changes(2.0, deletes=first))  # run 1 emptied: gone
    second = [bytes([2]) * 15 + bytes([i]) for i in range(5)]
    writer.apply(Changes(3.0, inserts=second))  # run 2, not a new run 1
    assert [run for run, _ in writer._db.execute("SELECT id, rows FROM runs")] == [2]
    assert reader.present(first + second) == set(second)
    assert reader.records(second[:1]) == writer.records(second[:1])
    reader.close()
    writer.close()


KILLED_WRITER = r"""
import hashlib, json, sys
from urlseen.exact import runs as _runs
from urlseen.exact.library_protocol import Changes
from urlseen.exact.sqlite_library import SQLiteLibrary

_runs.CHUNK, _runs.WINDOW = 3, 2  # merges across many chunks and windows
path, start = sys.argv[1], int(sys.argv[2])
lib = SQLiteLibrary(path, create=start == 0, stage_limit=40)
while lib.present([hashlib.md5(b"%d" % (start * 25)).digest()]):
    print(start, flush=True)  # committed by the killed writer, not acknowledged
    start += 1
for batch in range(start, 10**6):
    fps = [hashlib.md5(b"%d" % (batch * 25 + i)).digest() for i in range(25)]
    old = [hashlib.md5(b"%d" % i).digest() for i in range(0, batch * 25, 97)][:5]
    lib.apply(Changes(float(batch), inserts=fps, refs=dict.fromkeys(old, 1), known_absent=True))
    print(batch, flush=True)
"""


def test_a_writer_killed_at_any_moment_keeps_every_acknowledged_record(tmp_path):
    """SIGKILL during stage writes, run writes and merges (a stage of 40, chunks of 3): each
    reopening holds every record of every batch whose apply returned, the rows agree with the
    count, verify() passes, and the next writer goes on."""
    import hashlib
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "library.sqlite"
    rng = random.Random(5)
    done = 0  # batches acknowledged
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(path), str(done)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(rng.uniform(0.8, 2.0))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        acknowledged = [int(line) for line in out.split()]
        if acknowledged:
            done = acknowledged[-1] + 1
        lib = SQLiteLibrary(path, readonly=True)
        lib.verify()
        expected = [hashlib.md5(b"%d" % i).digest() for i in range(done * 25)]
        assert lib.present(expected) == set(expected), "an acknowledged record was lost"
        (stored,) = lib._db.execute(STORED_RECORDS).fetchone()
        assert lib.count() == stored and stored in (done * 25, done * 25 + 25)
        lib.close()
    assert done > 20, "the writer made progress between kills"
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] >= 1
    db.close()
