"""The library's staging area: recent changes kept as whole-batch rows, mirrored in memory.

Why: a new fingerprint is a random key, and inserting a batch of them into a B-tree of N
records dirties almost every leaf page once N is large: SQLite's insert cost per record grows
with the table (measured by benchmarks/exact/library_pace.py). Staged, a batch's
inserts are one row (the fingerprints in one blob) and its reference-count changes another,
written in the same transaction as everything else, so crash safety is SQLite's.
The memory mirror answers look-ups of staged fingerprints; when it holds `limit` of them the
stage is merged into the B-tree in one sorted pass (one touch of each page for many batches),
and the staged rows go in the same transaction.

A record is the B-tree's row combined with what is staged for it: a staged insert is a whole
record (refs 1, first and last seen at its batch's time), a staged delta adds to the
reference count and raises the last-seen time. Deltas are staged only for present records,
and a delete merges the stage first, so a record is never both deleted and staged.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

from urlseen import _core

FP_BYTES = 16
STAGE_TABLE = (
    "CREATE TABLE staged (batch INTEGER PRIMARY KEY, now INTEGER NOT NULL, fps BLOB NOT NULL, "
    "deltas BLOB)"
)


def split(blob: bytes) -> list[bytes]:
    """The fingerprints packed in a blob."""
    return [blob[i : i + FP_BYTES] for i in range(0, len(blob), FP_BYTES)]


def unpack_deltas(blob: bytes) -> tuple[array[int], array[int]]:
    """Reference deltas and last-seen times (ms) of a staged row: interleaved little-endian
    int64s, one pair per fingerprint (written by _core.pack_refs)."""
    values = array("q")
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return values[0::2], values[1::2]


class Stage:
    """The staged changes in memory: inserted fingerprints with their batch time (ms), and
    reference deltas with the latest last-seen time (ms) per fingerprint. The inserts are in a
    FingerprintMap (csrc/fpmap.h: ~24-48 bytes each, no Python object per fingerprint).

    Look-ups need only the inserts; the deltas are kept as their rows were written and folded
    into one table when a record is read or the stage is merged (most batches never need it).
    """

    def __init__(self) -> None:
        self.new = _core.FingerprintMap()  # fingerprint -> batch time (ms)
        self._rows: list[tuple[bytes, bytes]] = []  # delta rows not folded yet
        self._deltas: dict[bytes, list[int]] = {}
        self.rows = 0  # fingerprints in the staged rows (a hot one counts once per batch)

    def insert(self, fps: Sequence[bytes], now: int) -> None:
        """Stage new records; ValueError if one is staged already or repeated (the stage is
        then unusable: the caller reads it again from the file)."""
        added = self.new.add_many(fps, now)
        self.rows += len(fps)
        if added != len(fps):
            raise ValueError("inconsistent changes: inserts already present")

    def add_deltas(self, fps: bytes, deltas: bytes) -> None:
        """Stage one row of reference deltas (fps packed, deltas as _core.pack_refs gives them)."""
        self._rows.append((fps, deltas))
        self.rows += len(fps) // FP_BYTES

    @property
    def deltas(self) -> dict[bytes, list[int]]:
        """fingerprint -> [reference delta, last seen ms], every staged row folded in."""
        table = self._deltas
        for fps, blob in self._rows:
            changes, seen = unpack_deltas(blob)
            for fp, delta, when in zip(split(fps), changes, seen, strict=True):
                entry = table.get(fp)
                if entry is None:
                    table[fp] = [delta, when]
                else:
                    entry[0] += delta
                    entry[1] = max(entry[1], when)
        self._rows.clear()
        return table

    def load_row(self, now: int, fps: bytes, deltas: bytes | None) -> None:
        """One staged row, as read back from the file; ValueError if it is not well formed."""
        if len(fps) % FP_BYTES or (deltas is not None and len(deltas) != len(fps)):
            raise ValueError(f"{len(fps)} bytes of fingerprints, {len(deltas or b'')} of deltas")
        if deltas is None:
            self.insert(split(fps), now)
        else:
            self.add_deltas(fps, deltas)

    def record(self, fp: bytes, main: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
        """(refs, first seen ms, last seen ms) of fp: its B-tree row `main` (or None) with what
        is staged for it."""
        first = self.new.get(fp)
        base = (1, first, first) if first is not None else main
        delta = self.deltas.get(fp)
        if base is None or delta is None:
            return base
        return base[0] + delta[0], base[1], max(base[2], delta[1])
