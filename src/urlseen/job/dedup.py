"""The dedup job behind `urlseen dedup`: a stream of lines in, first occurrences out, in order.

It is library code (the CLI only parses options), so a crawler's own pipeline can call it too.

Crash safety with a persistent filter (`transactional=True`): the new lines of a batch are
written and flushed before their keys are committed to the filter. A filter is first only
tested, then added to, unless it runs the batch itself (protocol.DedupStep: an exact filter
tests, writes the lines and commits in one pass). The filter therefore never gets ahead of the
output: a run killed at any moment and run again on the same input prints every distinct line
at least once across the two runs, and at most one batch (`batch_size` lines) twice.

Two loops do the same job. Given a streams.Inputs, the C line engine (_core.LineEngine) reads
the bytes in large chunks and splits, keys and (for the C Bloom filter) probes each batch in C;
Python keys only the lines the C rules defer (LineKeyer.key, w3lib) and runs the other filters
on the engine's keys. Given any other iterable of lines, the reference loop runs, one Python
object per line; the tests hold the two equal (output, summary and filter state).

The engine runs on three threads, so that the filter's thread is not the only one working: a
feeder thread reads the input (through streams' read-ahead, which inflates gzip) and hands the
bytes to the engine; the engine's C worker splits, keys and hashes (with the hash the filter
names, DedupStep.dedup_hasher) the batches a few ahead; the calling thread takes them in order and
runs the filter, the writes and the flushes, so the output and crash-safety rules are those of
one thread. URLSEEN_LINE_WORKER=0 in the environment keeps all the engine's work on the calling
thread (the engine before the worker: for A/B measurements).

A filter that holds its answers until they are acknowledged (protocol.Acknowledging: a shared
one) is switched to explicit acknowledgement for the run, and acknowledged once a batch's new lines
are written and flushed: a process killed before that leaves the answers claimed, and the next
run (or another process) that meets those URLs after the lease prints them. The summary says
what the run could not settle alone (protocol.WaitsOnClaims): URLs left under another client's
claims (unconfirmed: printed by no one yet if that client died), claims that outlived the lease
before their acknowledgement (lapsed), and of those, how many another client took over.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from itertools import islice

from urlseen import _core
from urlseen._frozen import Record
from urlseen.errors import ConfigError
from urlseen.job.linekeys import LineCounts, LineKeyer
from urlseen.protocol import can, new_in_batch

TYPE_CHECKING = False  # typing, dataclasses and inspect stay off a run's start
if TYPE_CHECKING:
    from typing import Any, BinaryIO

    from urlseen.protocol import Acknowledging, DedupStep, SeenFilter

DEFAULT_BATCH_SIZE = 8192
UNCONFIRMED_STATUS = 4  # `urlseen dedup`'s exit status when URLs were left under others' claims
# The worker's feeder reads 256 KiB at a time, and its ring holds a few such chunks: larger ones
# raise the peak RSS above the serial engine's (measured by benchmarks/dedup/).
WORKER_CHUNK_SIZE = 1 << 18
# ...but 4 MiB for a counting filter's hash (the exact filter): its batch step holds the GIL for
# milliseconds at a time, and the feeder waits for the GIL after every chunk it reads (up to the
# 5 ms switch interval), so small chunks starve the worker (measured by
# benchmarks/dedup/pipeline.py).
EXACT_CHUNK_SIZE = 1 << 22


class DedupSummary(Record):
    """What a dedup run did (the multi-dimensional Bloom filter paper's crawl metrics: speed =
    new URLs/s, duplicate rate, space).

    Fields (all counts 0 by default): lines, new, duplicates, seconds, filter_bits,
    filter_count, filter_capacity, filter_kind; filter_likely_dropped (new URLs a Bloom-like
    filter likely dropped, or None); skipped (LineCounts); unconfirmed (URLs answered seen while
    another client's claim still held them); lapsed (answers whose claims outlived the lease
    before their acknowledgement); taken_over (of those, answered new to another client too,
    printed twice)."""

    __slots__ = (  # noqa: RUF023
        "lines", "new", "duplicates", "seconds", "filter_bits", "filter_count", "filter_capacity",
        "filter_kind", "filter_likely_dropped", "skipped", "unconfirmed", "lapsed", "taken_over",
    )  # fmt: skip
    lines: int
    new: int
    duplicates: int
    seconds: float
    filter_bits: int
    filter_count: int
    filter_capacity: int
    filter_kind: str
    filter_likely_dropped: float | None
    skipped: LineCounts
    unconfirmed: int
    lapsed: int
    taken_over: int

    def __init__(
        self,
        lines: int = 0,
        new: int = 0,
        duplicates: int = 0,
        seconds: float = 0.0,
        filter_bits: int = 0,
        filter_count: int = 0,
        filter_capacity: int = 0,
        filter_kind: str = "",
        filter_likely_dropped: float | None = None,
        skipped: LineCounts | None = None,
        unconfirmed: int = 0,
        lapsed: int = 0,
        taken_over: int = 0,
    ) -> None:
        skipped = LineCounts() if skipped is None else skipped
        self._init(lines, new, duplicates, seconds, filter_bits, filter_count, filter_capacity,
                   filter_kind, filter_likely_dropped, skipped, unconfirmed, lapsed,
                   taken_over)  # fmt: skip

    @property
    def exit_status(self) -> int:
        """What `urlseen dedup` exits with after a run that stopped on no error: 0, or
        UNCONFIRMED_STATUS when URLs were left under another client's claims."""
        return UNCONFIRMED_STATUS if self.unconfirmed else 0

    def claim_warnings(self) -> str:
        """The summary's lines about claims (a shared filter's), each after a newline."""
        out = ""
        if self.unconfirmed:
            out += (
                f"\nwarning: {self.unconfirmed:,} URLs not printed: another process claimed them"
                " and has not acknowledged them within this run's wait (its lease is longer, or"
                " it died); the next run after its lease prints them (exit status"
                f" {UNCONFIRMED_STATUS}; --wait-for-claims waits instead)"
            )
        if self.lapsed or self.taken_over:
            out += (
                f"\nwarning: {self.lapsed:,} URLs stayed claimed past the lease before their"
                f" lines were written; {self.taken_over:,} of them were taken over (printed by"
                " another process too): use a longer --lease"
            )
        return out

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
            "likely_dropped": self.filter_likely_dropped,
            "skipped": self.skipped.as_dict(),
            "unconfirmed": self.unconfirmed,
            "lapsed": self.lapsed,
            "taken_over": self.taken_over,
        }


def _batches(lines: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    it = iter(lines)
    while batch := list(islice(it, size)):
        yield batch


def _strip_newline(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\n") else line


def _new_in_batch(seen: SeenFilter, keys: list[Any], transactional: bool) -> list[bool]:
    """Which keys are new. Transactional: test only, and drop repeats within the batch."""
    return new_in_batch(seen, keys) if transactional else seen.add_many(keys)


def _write_new(out: BinaryIO, lines: list[bytes], flags: list[bool] | None, flush: bool) -> None:
    """Write the lines flagged new; with flush, they are out before their keys are committed.
    (flags are None only for a line engine's batch, which the engine loop writes itself.)"""
    assert flags is not None
    chunks = [line for line, fresh in zip(lines, flags, strict=True) if fresh]
    if chunks:
        out.write(b"\n".join(chunks) + b"\n")
    if flush:
        out.flush()


ENGINES = ("auto", "c", "python")


def dedup(
    lines: Iterable[bytes],
    seen: SeenFilter,
    out: BinaryIO,
    *,
    keyer: LineKeyer | None = None,
    transactional: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
    engine: str = "auto",
) -> DedupSummary:
    """Write to `out` each line whose key `seen` has not seen, in input order.

    Args:
        lines: raw lines, with or without their b"\\n"; or a streams.Inputs, whose bytes the
            C line engine reads in large chunks (the same lines, the same output).
        seen: the filter; keys of new lines are added to it.
        out: binary stream; each new line is written as read, plus b"\\n".
        keyer: line-to-key rules (canonicalization); default LineKeyer().
        transactional: add keys only after their lines are flushed to `out` (for persistent
            filters: see the module docstring).
        batch_size: lines per batch (the most a killed transactional run can print twice).
        progress: called with the number of input bytes after each batch.
        engine: "auto" (the C line engine when `lines` is a streams.Inputs, else Python),
            "c" (the engine; `lines` must be a streams.Inputs) or "python" (the reference
            loop, one Python object per line).
    """
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    keyer = keyer or LineKeyer()
    summary = DedupSummary(skipped=keyer.counts)
    start = time.perf_counter()
    if can(seen, "Acknowledging"):  # it holds its answers until their lines are out
        seen.auto_acknowledge = False  # type: ignore[attr-defined]  # (_Job.settle acknowledges them)
    fleet: Any = seen if can(seen, "WaitsOnClaims") else None
    before = fleet.claim_counts if fleet is not None else None
    chunks = getattr(lines, "chunks", None)
    if engine == "c" and (chunks is None or type(keyer) is not LineKeyer):
        raise ConfigError("engine='c' needs a streams.Inputs and a plain LineKeyer")
    job = _Job(seen, out, keyer, transactional, batch_size, progress, summary)
    if engine != "python" and chunks is not None and type(keyer) is LineKeyer:
        _run_engine(job, lines)
    else:
        _run_python(job, lines)
    out.flush()
    summary.seconds = time.perf_counter() - start
    stats = seen.stats()
    summary.filter_bits, summary.filter_count = stats.bits, stats.count
    summary.filter_capacity, summary.filter_kind = stats.capacity, stats.kind
    if fleet is not None and before is not None:
        after = fleet.claim_counts
        summary.unconfirmed = max(0, after.unconfirmed - before.unconfirmed)
        summary.lapsed = after.lapsed - before.lapsed
    summary.filter_likely_dropped = stats.details.get("likely_dropped")
    return summary


class _Job:
    """One dedup run's parameters, shared by the two loops."""

    def __init__(
        self,
        seen: SeenFilter,
        out: BinaryIO,
        keyer: LineKeyer,
        transactional: bool,
        batch_size: int,
        progress: Callable[[int], None] | None,
        summary: DedupSummary,
    ) -> None:
        self.seen, self.out, self.keyer = seen, out, keyer
        self.transactional, self.batch_size = transactional, batch_size
        self.progress, self.summary = progress, summary
        self.step: DedupStep | None = seen if can(seen, "DedupStep") else None  # type: ignore[assignment]
        self.acknowledging: Acknowledging | None = (
            seen if can(seen, "Acknowledging") else None  # type: ignore[assignment]
        )

    def filter_step(self, keys: list[Any], write: Callable[[list[bool] | None], object]) -> int:
        """A batch's keys through the filter in Python: the answers, the new lines written by
        `write` (before the keys are committed, when transactional); returns how many new."""
        if self.step is not None:
            new = self.step.dedup_step(keys, write, self.transactional)
            if new is not None:
                return new
        seen = self.seen
        flags = _new_in_batch(seen, keys, self.transactional)
        write(flags)
        if self.transactional:
            fresh_keys = [key for key, fresh in zip(keys, flags, strict=True) if fresh]
            if fresh_keys:
                seen.add_many(fresh_keys)
        return sum(flags)

    def settle(self) -> None:
        """The batch's new lines are written: a filter that holds its answers until they are
        acknowledged (a shared one) gets them acknowledged once the lines are flushed."""
        if self.acknowledging is not None:
            self.out.flush()
            self.summary.taken_over += self.acknowledging.acknowledge()

    def tally(self, lines: int, keys: int, new: int, nbytes: int) -> None:
        summary = self.summary
        summary.lines += lines
        summary.new += new
        summary.duplicates += keys - new
        if self.progress is not None:
            self.progress(nbytes)


def _run_python(job: _Job, lines: Iterable[bytes]) -> None:
    """The reference loop: one Python object per line."""
    for batch in _batches(lines, job.batch_size):
        raw = [_strip_newline(line) for line in batch]
        keyed = [(line, job.keyer.key(line)) for line in raw]
        urls = [(line, key) for line, key in keyed if key is not None]
        keys = [key for _, key in urls]
        lines_out = [line for line, _ in urls]
        write = functools.partial(_write_new, job.out, lines_out, flush=job.transactional)
        new = job.filter_step(keys, write)
        job.settle()
        job.tally(len(batch), len(keys), new, sum(len(line) for line in batch))


def _engine_batches(
    chunks: Iterator[bytes | None], engine: _core.LineEngine, batch_size: int
) -> Generator[int, None, None]:
    """Feed the chunks to the engine; yield once per batch it has ready."""
    for chunk in chunks:
        if chunk is None:
            engine.end_input()
            continue
        engine.feed(chunk)
        while engine.next_batch(batch_size):
            yield engine.lines
    while engine.next_batch(batch_size, final=True):
        yield engine.lines


def _worker_batches(
    chunks: Iterator[bytes | None],
    engine: _core.LineEngine,
    batch_size: int,
    hasher: _core.BitFilter | _core.CountingFilter | None,
) -> Generator[int, None, None]:
    """The same batches as _engine_batches, built ahead by the engine's C worker from the
    chunks a feeder thread hands it. An error of the chunks is raised here after the batches
    completed before it (the unfinished one is dropped), as _engine_batches raises it."""
    from urlseen.job.streams import pump  # loaded with the Inputs already

    engine.start(batch_size, hasher)
    failure: list[BaseException] = []

    def take(chunk: bytes | None) -> bool:
        if chunk is not None:
            return engine.feed(chunk)  # False: the job has stopped the engine
        engine.end_input()
        return True

    def end(error: BaseException | None) -> None:  # an error: raised by the job's thread, in order
        if error is not None:
            failure.append(error)
        engine.close_input(failed=error is not None)

    feeder = pump(chunks, take, end, "urlseen-feed")
    try:
        while nlines := engine.next_batch(batch_size):
            yield nlines
    finally:
        engine.stop()
    feeder.join()
    if failure:
        raise failure[0]


def _feed_chunks(inputs: Any, size: int) -> Iterator[bytes | None]:
    """The chunks for the worker's feeder thread, which reads (and inflates) them itself: a
    read-ahead thread's queue in front of the worker's ring would only hold more chunks (peak
    RSS; Inputs.chunks)."""
    from urlseen.job.streams import Inputs  # loaded with the Inputs already

    if isinstance(inputs, Inputs):
        return inputs.chunks(size, ahead=False)
    chunks: Iterator[bytes | None] = inputs.chunks()
    return chunks


def _run_engine(job: _Job, inputs: Any) -> None:
    """The C line engine: lines split and keyed in C; Python keys the lines the C rules defer.
    A filter that runs the batch itself (DedupStep) gets the engine, the others its keys."""
    keyer, out, transactional = job.keyer, job.out, job.transactional
    engine = _core.LineEngine(keyer.profile != "none", keyer.max_canonical_bytes)

    def write(flags: list[bool] | None) -> None:
        if flags is not None:
            engine.set_flags(flags)
        _write_out(out, engine.output(), transactional)

    if os.environ.get("URLSEEN_LINE_WORKER", "1") == "0":
        batches: Generator[int, None, None] = _engine_batches(
            inputs.chunks(), engine, job.batch_size
        )
    else:  # the keys hashed ahead with the filter's own hash, where the engine knows it
        hasher = job.step.dedup_hasher() if job.step is not None else None
        size = EXACT_CHUNK_SIZE if isinstance(hasher, _core.CountingFilter) else WORKER_CHUNK_SIZE
        batches = _worker_batches(_feed_chunks(inputs, size), engine, job.batch_size, hasher)
    try:
        for nlines in batches:
            keyer.counts.empty += engine.empty
            if engine.ndeferred:
                engine.set_deferred([keyer.key(line) for line in engine.deferred()])
            new = None
            if job.step is not None:
                new = job.step.dedup_step(engine, write, transactional)
            if new is None:
                new = job.filter_step(engine.keys(), write)
            job.settle()
            job.tally(nlines, engine.nkeys, new, engine.input_bytes)
    finally:
        batches.close()  # the worker and the feeder stop now, not when collected


def _write_out(out: BinaryIO, data: bytes, flush: bool) -> None:
    if data:
        out.write(data)
    if flush:
        out.flush()
