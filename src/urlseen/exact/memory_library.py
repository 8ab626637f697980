"""A fingerprint library in a dict: for tests and small jobs (about 200 bytes per record)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from urlseen._lifecycle import Closeable
from urlseen.errors import ReadOnlyError
from urlseen.exact.library_protocol import (
    Changes,
    LibraryIO,
    Record,
    time_index,
)
from urlseen.state.sqlite import from_millis, to_millis

_ABSENT = object()


class MemoryLibrary(Closeable):
    """The FingerprintLibrary protocol on Python dicts; gone with the process."""

    _noun = "library"
    path = None

    def __init__(self) -> None:
        self._records: dict[bytes, list[int]] = {}  # fp -> [refs, first_ms, last_ms]
        self._overflow: dict[int, int] = {}
        self._meta: dict[str, str] = {}
        self.io = LibraryIO()
        self.readonly = False
        self._depth = 0
        self._undo: list[tuple[dict[Any, Any], Any, Any]] = []  # this transaction's changes

    def present(self, fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]:
        self._usable()
        if not fps:
            return set()
        self.io.lookups += len(fps)
        self.io.round_trips += 1 if batched else len(fps)
        return {fp for fp in fps if fp in self._records}

    def records(self, fps: Iterable[bytes]) -> dict[bytes, Record]:
        self._usable()
        out = {}
        for fp in set(fps):
            self.io.lookups += 1
            rec = self._records.get(fp)
            if rec is not None:
                out[fp] = Record(rec[0], from_millis(rec[1]), from_millis(rec[2]))
        return out

    def apply(self, changes: Changes) -> None:
        """All or nothing, like SQLite: updates of absent fingerprints do nothing, a present
        insert raises ValueError before anything changes."""
        self._usable()
        if not changes:
            return
        now = to_millis(changes.now)
        clash = [fp for fp in changes.inserts if fp in self._records]
        if clash or len(set(changes.inserts)) != len(changes.inserts):
            raise ValueError(f"inconsistent changes: {len(clash)} inserts already present")
        undo = self._undo  # (table, key, value before): how to put every change back
        for fp in changes.inserts:
            undo.append((self._records, fp, _ABSENT))
            self._records[fp] = [1, now, now]
        for fp, delta in changes.refs.items():
            rec = self._records.get(fp)
            if rec is None:
                continue
            undo.append((self._records, fp, list(rec)))
            rec[0] += delta
            rec[2] = max(rec[2], to_millis(changes.seen[fp]) if fp in changes.seen else now)
        for fp in set(changes.deletes):
            if fp in self._records:
                undo.append((self._records, fp, self._records.pop(fp)))
        for counter, value in changes.overflow.items():
            undo.append((self._overflow, counter, self._overflow.get(counter, _ABSENT)))
            if value is None:
                self._overflow.pop(counter, None)
            else:
                self._overflow[counter] = value
        for name, text in changes.meta.items():
            undo.append((self._meta, name, self._meta.get(name, _ABSENT)))
            self._meta[name] = text
        if not self._depth:
            undo.clear()
        self.io.writes += len(changes.inserts) + len(changes.refs) + len(changes.deletes)
        self.io.round_trips += 1

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Changes applied inside are undone if the block raises (nesting joins the outer)."""
        self._usable()
        if self.readonly:
            raise ReadOnlyError("the library was opened read-only")
        self._depth += 1
        try:
            yield
        except BaseException:
            if self._depth == 1:
                for table, key, before in reversed(self._undo):
                    if before is _ABSENT:
                        table.pop(key, None)
                    else:
                        table[key] = before
                self._undo.clear()
            raise
        finally:
            self._depth -= 1
        if not self._depth:
            self._undo.clear()

    def count(self) -> int:
        self._usable()
        return len(self._records)

    def fingerprints(self, chunk: int = 65536) -> Iterator[list[bytes]]:
        self._usable()
        keys = list(self._records)
        for start in range(0, len(keys), chunk):
            yield keys[start : start + chunk]

    def older_than(self, timestamp: float, *, by: str = "first_seen") -> list[bytes]:
        self._usable()
        column = time_index(by)  # the record list has Record's layout
        limit = to_millis(timestamp)
        return [fp for fp, rec in self._records.items() if rec[column] < limit]

    def overflow(self, counters: Iterable[int]) -> dict[int, int]:
        self._usable()
        return {c: self._overflow[c] for c in counters if c in self._overflow}

    def replace_overflow(self, counts: dict[int, int], meta: dict[str, str]) -> None:
        self._usable()
        self._overflow = dict(counts)
        self._meta.update(meta)

    def get_meta(self, name: str) -> str | None:
        self._usable()
        return self._meta.get(name)
