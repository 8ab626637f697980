"""The dedup job behind `urlseen dedup`: a stream of lines in, first occurrences out, in order.

It is library code (the CLI only parses options), so a crawler's own pipeline can call it too.

Crash safety with a persistent filter (`transactional=True`): the new lines of a batch are
written and flushed before their keys are committed to the filter. A Bloom filter is first only
tested, then added to; an exact filter (`commits_after_callback`) does both in one pass and
writes the lines from its before_commit callback. The filter therefore never gets ahead of the
output: a run killed at any moment and run again on the same input prints every distinct line
at least once across the two runs, and at most one batch (`batch_size` lines) twice.

A filter that holds its answers until they are acknowledged (a shared one: `acknowledge()`)
is switched to explicit acknowledgement for the run, and acknowledged once a batch's new lines
are written and flushed: a process killed before that leaves the answers claimed, and the next
run (or another process) that meets those URLs after the lease prints them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, BinaryIO

from urlseen.filters.base import SeenFilter
from urlseen.linekeys import LineCounts, LineKeyer

DEFAULT_BATCH_SIZE = 8192


@dataclass
class DedupSummary:
    """What a dedup run did (the multi-dimensional Bloom filter paper's crawl metrics: speed =
    new URLs/s, duplicate rate, space)."""

    lines: int = 0
    new: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    filter_bits: int = 0
    filter_count: int = 0
    filter_capacity: int = 0
    filter_kind: str = ""
    skipped: LineCounts = field(default_factory=LineCounts)

    @property
    def duplicate_rate(self) -> float:
        """Duplicates over URL lines (empty lines excluded)."""
        urls = self.new + self.duplicates
        return self.duplicates / urls if urls else 0.0

    @property
    def new_per_second(self) -> float:
        return self.new / self.seconds if self.seconds > 0 else 0.0

    @property
    def lines_per_second(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "new": self.new,
            "duplicates": self.duplicates,
            "duplicate_rate": self.duplicate_rate,
            "seconds": self.seconds,
            "new_per_second": self.new_per_second,
            "lines_per_second": self.lines_per_second,
            "filter_bits": self.filter_bits,
            "filter_count": self.filter_count,
            "filter_capacity": self.filter_capacity,
            "filter_kind": self.filter_kind,
            "over_capacity": self.filter_count > self.filter_capacity,
            "skipped": self.skipped.as_dict(),
        }


def _batches(lines: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    it = iter(lines)
    while batch := list(islice(it, size)):
        yield batch


def _strip_newline(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\n") else line


def _new_in_batch(seen: SeenFilter, keys: list[Any], transactional: bool) -> list[bool]:
    """Which keys are new. Transactional: test only, and drop repeats within the batch."""
    if not transactional:
        return seen.add_many(keys)
    present = seen.contains_many(keys)
    firsts: set[bytes] = set()  # as bytes: the filter hashes "x" and b"x" alike
    flags = []
    for key, hit in zip(keys, present, strict=True):
        fresh = False
        if not hit:
            as_bytes = key.encode() if isinstance(key, str) else key
            fresh = as_bytes not in firsts
            firsts.add(as_bytes)
        flags.append(fresh)
    return flags


def _write_new(out: BinaryIO, lines: list[bytes], flags: list[bool], flush: bool) -> list[bool]:
    """Write the lines flagged new; with flush, they are out before their keys are committed."""
    chunks = [line for line, fresh in zip(lines, flags, strict=True) if fresh]
    if chunks:
        out.write(b"\n".join(chunks) + b"\n")
    if flush:
        out.flush()
    return flags


def dedup(
    lines: Iterable[bytes],
    seen: SeenFilter,
    out: BinaryIO,
    *,
    keyer: LineKeyer | None = None,
    transactional: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> DedupSummary:
    """Write to `out` each line whose key `seen` has not seen, in input order.

    Args:
        lines: raw lines, with or without their b"\\n".
        seen: the filter; keys of new lines are added to it.
        out: binary stream; each new line is written as read, plus b"\\n".
        keyer: line-to-key rules (canonicalization); default LineKeyer().
        transactional: add keys only after their lines are flushed to `out` (for persistent
            filters: see the module docstring).
        batch_size: lines per batch (the most a killed transactional run can print twice).
        progress: called with the number of input bytes after each batch.
    """
    keyer = keyer or LineKeyer()
    summary = DedupSummary(skipped=keyer.counts)
    start = time.perf_counter()
    acknowledge = getattr(seen, "acknowledge", None)
    if acknowledge is not None:
        seen.auto_acknowledge = False  # type: ignore[attr-defined]  # answers wait for the output
    for batch in _batches(lines, batch_size):
        raw = [_strip_newline(line) for line in batch]
        keyed = [(line, keyer.key(line)) for line in raw]
        urls = [(line, key) for line, key in keyed if key is not None]
        keys = [key for _, key in urls]
        lines_out = [line for line, _ in urls]
        if getattr(seen, "commits_after_callback", False):
            write = functools.partial(_write_new, out, lines_out, flush=transactional)
            flags = seen.add_many(keys, before_commit=write)  # type: ignore[call-arg]
        else:
            flags = _new_in_batch(seen, keys, transactional)
            _write_new(out, lines_out, flags, transactional)
            if transactional:
                fresh_keys = [key for key, fresh in zip(keys, flags, strict=True) if fresh]
                if fresh_keys:
                    seen.add_many(fresh_keys)
        if acknowledge is not None:
            out.flush()
            acknowledge()  # the batch's new lines are out: release their claims
        written = sum(flags)
        summary.lines += len(batch)
        summary.new += written
        summary.duplicates += len(keys) - written
        if progress is not None:
            progress(sum(len(line) for line in batch))
    out.flush()
    summary.seconds = time.perf_counter() - start
    stats = seen.stats()
    summary.filter_bits, summary.filter_count = stats.bits, stats.count
    summary.filter_capacity, summary.filter_kind = stats.capacity, stats.kind
    return summary
