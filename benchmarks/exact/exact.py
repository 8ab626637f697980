#!/usr/bin/env python3
"""IMP-CBFilter (ExactFilter) against the fingerprint library alone: the paper's Figure 3, ours.

The IMP-CBFilter paper claims that a counting Bloom filter in front of the MD5 fingerprint
library makes the exact URL-seen test much faster than the library alone. This script repeats
its experiment on real URLs with the library on disk and NOT in memory, takes apart which step
of ours helps how much, extends the run to 10M URLs, and checks urlseen's own targets.

Usage (from the repository root; the full run takes about 30 minutes on 2 cores):

    python benchmarks/exact/exact.py       # writes key "exact" of results.json here
    python benchmarks/exact/exact.py --quick          # smoke run on small prefixes, under a minute
    python benchmarks/exact/exact.py --parts a        # only part (a); parts: a b c m
    python benchmarks/exact/exact.py --replot benchmarks/exact/results.json   # redraw figures/

Parts
-----
(a) The paper's experiment (its Figure 3): the first 0.5M, 1M, 1.5M and 2M non-empty lines of
    the dev set, each prefix a separate run from an empty library. Keys are the raw lines (no
    canonicalization). Paper settings: k = 8, m/N = 20 counters per key, 4-bit counters, N =
    the number of distinct lines in the prefix, MD5 fingerprints. Six methods on SQLite
    libraries, from the paper's two to urlseen's default (see METHODS).
(b) Growth to 10M URLs: the dev file again and again; round r >= 1 inserts the query parameter
    `urlseen-round=<r>` into every line (see `round_key`), so every round is new URLs with the
    dev file's duplicate structure. Checkpoints at 2.5M, 5M, 7.5M, 10M; slow methods stop at
    --time-limit seconds of wall time.
(c) Targets: FP/FN of ExactFilter against a Python set over the whole dev set (every answer
    compared), check-and-add throughput with the batch API (lines preloaded, only add_many
    timed, batch 65536, no eviction, best of 3) on SQLite and MemoryLibrary, MD5 and XXH3-128,
    and the fingerprint's own cost per URL.
(m) Memory: bytes per distinct URL, RSS growth of fresh subprocesses that stream the dev file in
    batches and keep no lines: ExactFilter on a SQLite library against Python sets.

The library not in memory (parts a, b)
--------------------------------------
SQLite's page cache is 1 MiB (library_cache_kib=1024), and after every batch's commit the
benchmark evicts the library's files (database and WAL) from the OS page cache: os.fsync, then
posix_fadvise(POSIX_FADV_DONTNEED). So every batch finds the library on storage, as a library
much larger than memory would be. /proc/self/io read_bytes shows what was really read from the
block device. The eviction itself is not timed (it is the experiment's artifice, not the
method's cost); its wall time is reported beside. Batches of 8192 URLs, as `urlseen dedup`.

Timed: the add_many calls and, at the end, flush() (which writes back pending reference counts).
Per method the time is split into library look-ups (`present`), library writes (`apply`),
COMMIT, and the rest (hashing, counters, cache, Python), by wrapping the library's methods.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import gzip
import hashlib
import json
import os
import platform
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from run import cpu_model  # benchmarks/peers/run.py
from urlseen import _core
from urlseen.exact.filter import DEFAULT_CACHE_ENTRIES, ExactFilter
from urlseen.exact.library_filter import FingerprintLibraryFilter
from urlseen.exact.library_protocol import Changes, FingerprintLibrary
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import DEFAULT_CACHE_KIB, SQLiteLibrary

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "exact"

BATCH = 8192  # lines per add_many in parts (a) and (b), as `urlseen dedup`
THROUGHPUT_BATCH = 65536  # part (c)
PAPER_K, PAPER_CPK = 8, 20  # the IMP-CBFilter paper's experiment: k = 8, m/N = 20
LIBRARY_CACHE_KIB = 1024  # SQLite page cache in parts (a) and (b)
PREFIXES = (500_000, 1_000_000, 1_500_000, 2_000_000)
GROWTH = (2_500_000, 5_000_000, 7_500_000, 10_000_000)
TIME_LIMIT = 600.0  # seconds of wall time per method in part (b)
QUICK_PREFIXES = (25_000, 50_000, 75_000, 100_000)
QUICK_GROWTH_BASE = 50_000  # quick (b): rounds of the first 50k lines
QUICK_GROWTH = (30_000, 60_000, 90_000, 120_000)
QUICK_LINES = 200_000  # quick (c) and (m)
ROUND_PARAM = "urlseen-round"


# --------------------------------------------------------------------------- data


def load_lines(path: Path, limit: int | None = None) -> list[str]:
    """The non-empty lines of the dev file in file order, raw (no canonicalization)."""
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line:
                out.append(line)
                if limit is not None and len(out) >= limit:
                    break
    return out


def first_seen(lines: Sequence[str]) -> bytes:
    """1 where a line occurs for the first time: the exact answer every method must give."""
    seen: set[str] = set()
    flags = bytearray(len(lines))
    for i, line in enumerate(lines):
        if line not in seen:
            seen.add(line)
            flags[i] = 1
    return bytes(flags)


def round_key(line: str, r: int) -> str:
    """Line as a URL of round r: round 0 is the line, round r >= 1 inserts a query parameter.

    `urlseen-round=<r>` becomes the first query parameter (`?a=1` -> `?urlseen-round=r&a=1`,
    no query -> `?urlseen-round=r` before any fragment). The map is injective for each r, and
    rounds cannot collide: after the first `?` of a key, `urlseen-round=<r>` is followed by `&`,
    `#` or the end, which fixes r and the case, and no dev line contains the parameter
    (checked at load). A canonicalizer would keep it, unlike a fragment.
    """
    if r == 0:
        return line
    param = f"{ROUND_PARAM}={r}"
    q, h = line.find("?"), line.find("#")
    if q != -1 and (h == -1 or q < h):
        return f"{line[: q + 1]}{param}&{line[q + 1 :]}"
    if h == -1:
        return f"{line}?{param}"
    return f"{line[:h]}?{param}{line[h:]}"


def stream(
    base: Sequence[str], flags: bytes, total: int, batch: int, cuts: Sequence[int] = ()
) -> Iterator[tuple[list[str], bytes]]:
    """`total` keys from rounds of `base`, in batches that never straddle a round or a cut,
    each with the exact answers (a line of round r is new iff it is new in round 0)."""
    done = 0
    stops = sorted({c for c in cuts if 0 < c < total} | {total})
    while done < total:
        r, pos = divmod(done, len(base))
        stop = next(s for s in stops if s > done)
        end = min(pos + batch, len(base), pos + stop - done)
        keys = [round_key(line, r) for line in base[pos:end]] if r else list(base[pos:end])
        yield keys, flags[pos:end]
        done += end - pos


# --------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class Method:
    """One configuration of part (a): each adds one step to the one before."""

    name: str
    label: str
    exact: bool  # ExactFilter (IMP-CBFilter) or the library alone
    batched: bool
    cache: bool = False
    write_back: bool = False


METHODS = (
    Method("lib-url", "library only, per-URL look-ups (paper's baseline)", False, False),
    Method("lib-batch", "library only, batched look-ups", False, True),
    Method("imp-paper", "IMP-CBFilter as the paper (no cache, per-URL look-ups)", True, False),
    Method("imp-batch", "IMP-CBFilter + batched look-ups", True, True),
    Method("imp-cache", "+ hot cache, no write-back", True, True, cache=True),
    Method("imp-default", "+ write-back (urlseen default)", True, True, True, True),
)
GROWTH_METHODS = ("lib-url", "lib-batch", "imp-paper", "imp-default")
BY_NAME = {m.name: m for m in METHODS}

Filter = ExactFilter | FingerprintLibraryFilter


def build(method: Method, capacity: int, library: FingerprintLibrary) -> Filter:
    """The method's filter on `library`; ExactFilters get the paper's sizing (k=8, m/N=20)."""
    if not method.exact:
        return FingerprintLibraryFilter(library=library, batched_lookups=method.batched)
    return ExactFilter(
        capacity, k=PAPER_K, counters_per_key=PAPER_CPK, library=library,
        cache_entries=DEFAULT_CACHE_ENTRIES if method.cache else 0,
        write_back=method.write_back, batched_lookups=method.batched,
    )  # fmt: skip


# --------------------------------------------------------------------------- measuring


def proc_io() -> dict[str, int]:
    """This process's I/O counters; read_bytes is what the block device delivered."""
    try:
        with open("/proc/self/io", encoding="ascii") as fh:
            return {k: int(v) for k, v in (line.split(": ") for line in fh)}
    except OSError:
        return {}


def evict(paths: Sequence[str]) -> None:
    """Push the library's files out of the OS page cache (dirty pages must be written first,
    or DONTNEED keeps them)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class LibraryClock:
    """Splits a filter's time into library look-ups, writes and commits by wrapping the library
    instance's methods (the filters call them through the instance)."""

    def __init__(self, library: FingerprintLibrary) -> None:
        self.lookup = self.write = self.commit = 0.0
        self.depth = 0
        present, apply, transaction = library.present, library.apply, library.transaction

        def timed_present(fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]:
            started = time.perf_counter()
            try:
                return present(fps, batched=batched)
            finally:
                self.lookup += time.perf_counter() - started

        def timed_apply(changes: Changes) -> None:
            started = time.perf_counter()
            try:
                apply(changes)
            finally:
                self.write += time.perf_counter() - started

        def timed_transaction() -> contextlib.AbstractContextManager[None]:
            return _TimedTransaction(transaction(), self)

        # Instance attributes shadow the methods; the protocol type does not know that.
        vars(library).update(
            present=timed_present, apply=timed_apply, transaction=timed_transaction
        )

    def split(self, total: float) -> dict[str, float]:
        return {
            "lookup": self.lookup,
            "write": self.write,
            "commit": self.commit,
            "other": max(total - self.lookup - self.write - self.commit, 0.0),
        }


class _TimedTransaction:
    """A library transaction whose outermost exit (the COMMIT) is timed."""

    def __init__(self, inner: contextlib.AbstractContextManager[None], clock: LibraryClock):
        self.inner, self.clock = inner, clock

    def __enter__(self) -> None:
        self.inner.__enter__()
        self.clock.depth += 1

    def __exit__(self, *exc: Any) -> bool | None:
        self.clock.depth -= 1
        started = time.perf_counter()
        try:
            return self.inner.__exit__(*exc)
        finally:
            if self.clock.depth == 0:
                self.clock.commit += time.perf_counter() - started


@dataclass
class Point:
    """Cumulative measurements after `urls` keys."""

    urls: int
    seconds: float  # timed: add_many calls (+ the final flush)
    new: int
    lookups: int
    writes: int
    round_trips: int
    read_bytes: int  # physical, /proc/self/io
    write_bytes: int
    evict_seconds: float
    wall_seconds: float
    split: dict[str, float]

    def per_url(self) -> dict[str, float]:
        n = max(self.urls, 1)
        return {
            "urls_per_s": self.urls / self.seconds if self.seconds else 0.0,
            "lookups": self.lookups / n,
            "writes": self.writes / n,
            "round_trips": self.round_trips / n,
            "read_bytes": self.read_bytes / n,
            "write_bytes": self.write_bytes / n,
        }


@dataclass
class Run:
    """One method over one stream."""

    method: str
    label: str
    part: str
    capacity: int
    points: list[Point] = field(default_factory=list)
    false_pos: int = 0  # reported seen, but new
    false_neg: int = 0  # reported new, but seen before
    stopped: str = ""  # why the run ended before its stream did
    library_bytes: int = 0  # database + WAL at the end
    wal_bytes: int = 0
    records: int = 0
    accounted_bytes: int = 0  # ExactFilter: counters + cache
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def last(self) -> Point:
        return self.points[-1]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_url"] = [p.per_url() for p in self.points]
        return d


def check(flags: list[bool], expected: bytes, run: Run) -> None:
    """Count the answers that differ from the exact ones (cheap when all agree)."""
    got = bytes(flags)
    if got != expected:
        run.false_pos += sum(1 for g, e in zip(got, expected, strict=True) if e and not g)
        run.false_neg += sum(1 for g, e in zip(got, expected, strict=True) if g and not e)


def library_bytes(library: FingerprintLibrary) -> int:
    files = library.files() if isinstance(library, SQLiteLibrary) else []
    return sum(os.path.getsize(p) for p in files if os.path.exists(p))


def drive(
    run: Run,
    filt: Filter,
    library: FingerprintLibrary,
    batches: Iterator[tuple[list[str], bytes]],
    *,
    cuts: Sequence[int],
    evicting: bool,
    time_limit: float | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> None:
    """Feed the batches, time add_many only, and record a Point at every cut (and at a stop)."""
    clock = LibraryClock(library)
    io0 = proc_io()
    timed = evict_s = 0.0
    urls = new = 0
    wall0 = time.perf_counter()
    pending_cuts = sorted(cuts)

    def point(final: bool) -> None:
        nonlocal timed
        if final:  # pending reference counts reach the library: part of the method's work
            started = time.perf_counter()
            filt.flush()
            run.extra["flush_seconds"] = time.perf_counter() - started
            timed += run.extra["flush_seconds"]
        io1, lio = proc_io(), filt.io
        run.points.append(
            Point(
                urls, timed, new, lio.lookups, lio.writes, lio.round_trips,
                io1.get("read_bytes", 0) - io0.get("read_bytes", 0),
                io1.get("write_bytes", 0) - io0.get("write_bytes", 0),
                evict_s, time.perf_counter() - wall0, clock.split(timed),
            )
        )  # fmt: skip
        p = run.points[-1]
        log(
            f"    {run.method:<11} {urls:>10,} URLs {timed:8.2f} s "
            f"{p.per_url()['urls_per_s']:>11,.0f} URLs/s  read {p.per_url()['read_bytes']:7.0f} "
            f"B/URL  evict {evict_s:.1f} s"
        )

    gc.collect()
    gc.disable()
    try:
        for keys, expected in batches:
            started = time.perf_counter()
            flags = filt.add_many(keys)
            timed += time.perf_counter() - started
            if evicting:
                started = time.perf_counter()
                evict(library.files())  # type: ignore[attr-defined]
                evict_s += time.perf_counter() - started
            check(flags, expected, run)
            urls += len(keys)
            new += sum(flags)
            if pending_cuts and urls >= pending_cuts[0]:
                pending_cuts.pop(0)
                point(final=not pending_cuts)
            elif time_limit is not None and time.perf_counter() - wall0 > time_limit:
                run.stopped = f"time limit: stopped after {time_limit:.0f} s of wall time"
                point(final=True)
                break
    finally:
        gc.enable()
    run.library_bytes = library_bytes(library)
    wal = f"{library.path}-wal" if isinstance(library, SQLiteLibrary) else ""
    run.wal_bytes = os.path.getsize(wal) if wal and os.path.exists(wal) else 0
    run.records = len(filt)
    if isinstance(filt, ExactFilter):
        details = filt.stats().details
        run.accounted_bytes = int(details["counter_bytes"]) + int(details["cache_bytes"])


@contextlib.contextmanager
def sqlite_library(root: Path, cache_kib: int | None = None) -> Iterator[SQLiteLibrary]:
    """A fresh SQLite library in a temp folder under root, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="urlseen-exact-", dir=root) as folder:
        options = {} if cache_kib is None else {"cache_kib": cache_kib}
        library = SQLiteLibrary(Path(folder) / "library.sqlite", create=True, **options)
        try:
            yield library
        finally:
            library.close()


# --------------------------------------------------------------------------- parts


def part_a(
    lines: list[str],
    flags: bytes,
    prefixes: Sequence[int],
    root: Path,
    repeats: int,
    log: Callable[[str], None],
) -> list[Run]:
    """The paper's experiment: each prefix from an empty library, library evicted per batch.
    Every (prefix, method) runs `repeats` times, interleaved, so that a noisy phase of the
    shared machine spreads over all methods; the tables take the fastest run."""
    runs = []
    for rep in range(repeats):
        for n in prefixes:
            distinct = sum(flags[:n])
            log(f"  (a) run {rep + 1}/{repeats}: first {n:,} lines, {distinct:,} distinct")
            for method in METHODS:
                run = Run(method.name, method.label, "a", distinct)
                with sqlite_library(root, LIBRARY_CACHE_KIB) as library:
                    filt = build(method, distinct, library)
                    drive(
                        run, filt, library, stream(lines, flags, n, BATCH),
                        cuts=[n], evicting=True, log=log,
                    )  # fmt: skip
                    filt.close()
                runs.append(run)
                gc.collect()
    return runs


def fastest(runs: list[Run]) -> dict[tuple[str, int], Run]:
    """The fastest run of each (method, URLs)."""
    best: dict[tuple[str, int], Run] = {}
    for r in runs:
        key = (r.method, r.last.urls)
        if key not in best or r.last.seconds < best[key].last.seconds:
            best[key] = r
    return best


def part_b(
    base: list[str],
    flags: bytes,
    cuts: Sequence[int],
    root: Path,
    time_limit: float,
    log: Callable[[str], None],
) -> list[Run]:
    """Growth: rounds of the dev file, checkpoints at cuts, slow methods stopped at time_limit."""
    total = max(cuts)
    rounds, rest = divmod(total, len(base))
    distinct = rounds * sum(flags) + sum(flags[:rest])
    log(f"  (b) {total:,} URLs, {distinct:,} distinct, {rounds + (rest > 0)} rounds")
    runs = []
    for name in GROWTH_METHODS:
        method = BY_NAME[name]
        run = Run(method.name, method.label, "b", distinct)
        with sqlite_library(root, LIBRARY_CACHE_KIB) as library:
            filt = build(method, distinct, library)
            drive(
                run, filt, library, stream(base, flags, total, BATCH, cuts),
                cuts=cuts, evicting=True, time_limit=time_limit, log=log,
            )  # fmt: skip
            filt.close()
        runs.append(run)
        gc.collect()
    return runs


@dataclass(frozen=True)
class Throughput:
    """One row of part (c)'s throughput table."""

    name: str
    hash: str = "md5"
    memory: bool = False  # MemoryLibrary instead of SQLite
    create: bool = False  # ExactFilter.create: memory-mapped counter file


THROUGHPUTS = (
    Throughput("SQLite library (urlseen default)"),
    Throughput("SQLite library, ExactFilter.create (mmapped counters)", create=True),
    Throughput("MemoryLibrary", memory=True),
    Throughput("SQLite library, hash=xxh3_128", hash="xxh3_128"),
    Throughput("MemoryLibrary, hash=xxh3_128", hash="xxh3_128", memory=True),
)


def part_c(
    lines: list[str], flags: bytes, root: Path, repeats: int, log: Callable[[str], None]
) -> tuple[list[list[Run]], dict[str, Any]]:
    """Exactness against a set and batch throughput of ExactFilter's defaults (no eviction).

    Each row runs `repeats` times from an empty library, rows interleaved so that a noisy
    phase of the shared machine hits all rows; every answer of every run is checked."""
    runs: list[list[Run]] = [[] for _ in THROUGHPUTS]
    for _ in range(repeats):
        for i, row in enumerate(THROUGHPUTS):
            runs[i].append(throughput_run(row, lines, flags, root, log))
            gc.collect()
    return runs, md5_cost(lines, log)


def throughput_run(
    row: Throughput, lines: list[str], flags: bytes, root: Path, log: Callable[[str], None]
) -> Run:
    """One pass of the whole stream through a fresh ExactFilter with default settings."""
    distinct = sum(flags)
    run = Run(row.name, row.name, "c", distinct)
    with tempfile.TemporaryDirectory(prefix="urlseen-exact-", dir=root) as folder:
        if row.create:
            filt = ExactFilter.create(Path(folder) / "state", distinct, hash=row.hash)
            library = filt.library
        else:
            library = (
                MemoryLibrary()
                if row.memory
                else SQLiteLibrary(
                    Path(folder) / "library.sqlite", create=True, fingerprint=row.hash
                )
            )
            filt = ExactFilter(distinct, hash=row.hash, library=library)
        drive(
            run, filt, library, stream(lines, flags, len(lines), THROUGHPUT_BATCH),
            cuts=[len(lines)], evicting=False, log=log,
        )  # fmt: skip
        run.extra["k"] = filt.counters.k
        run.extra["ncounters"] = filt.counters.ncounters
        filt.close()
    return run


def md5_cost(lines: list[str], log: Callable[[str], None]) -> dict[str, Any]:
    """ns per URL of the fingerprint alone, best of 3, through the C batch call."""
    out: dict[str, Any] = {"urls": len(lines), "mean_bytes": _mean_bytes(lines)}
    for name, hash_id in (("md5", _core.HASH_MD5), ("xxh3_128", _core.HASH_XXH3_128)):
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            _core.digests(lines, hash_id)
            best = min(best, time.perf_counter() - started)
        out[name] = best / len(lines) * 1e9
    log(f"  (c) digests: md5 {out['md5']:.1f} ns/URL, xxh3_128 {out['xxh3_128']:.1f} ns/URL")
    return out


def _mean_bytes(lines: list[str]) -> float:
    return sum(len(line.encode("utf-8")) for line in lines) / max(len(lines), 1)


MEMORY_KINDS = {
    "stream": "nothing kept: the streaming loop alone (baseline)",
    "set-str": "Python set of the URL strings",
    "set-md5": "Python set of 16-byte MD5 digests (bytes)",
    "exact-default": f"ExactFilter defaults (error_rate 0.001, cache {DEFAULT_CACHE_ENTRIES:,}), "
    "SQLite on disk",
    "exact-paper": "ExactFilter k=8, m/N=20 (paper sizing, default cache), SQLite on disk",
    "exact-nocache": "ExactFilter k=8, m/N=20, cache_entries=0, SQLite on disk",
}


def part_m(data: Path, limit: int | None, capacity: int, log: Callable[[str], None]) -> list[Any]:
    """Each memory measurement in a fresh interpreter: RSS growth is then the structure's."""
    out = []
    for kind in MEMORY_KINDS:
        cmd = [sys.executable, __file__, "--child-memory", kind, "--data", str(data)]
        cmd += ["--capacity", str(capacity)] + (["--limit", str(limit)] if limit else [])
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["label"] = MEMORY_KINDS[kind]
        log(
            f"  (m) {kind}: {result['rss_growth'] / result['distinct']:.1f} B/distinct URL "
            f"(RSS +{result['rss_growth'] / 2**20:.1f} MiB)"
        )
        out.append(result)
    return out


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def child_memory(kind: str, data: Path, limit: int | None, capacity: int) -> dict[str, Any]:
    """Stream the dev file in batches into one structure; keep no lines of our own."""
    gc.collect()
    rss0 = _status_kib("VmRSS") * 1024
    result: dict[str, Any] = {"kind": kind, "sources": sources()}
    with tempfile.TemporaryDirectory(prefix="urlseen-exact-mem-") as folder:
        seen: set[Any] = set()
        filt: ExactFilter | None = None
        if kind.startswith("exact"):
            library = SQLiteLibrary(Path(folder) / "library.sqlite", create=True)
            paper = {} if kind == "exact-default" else {"k": PAPER_K, "counters_per_key": PAPER_CPK}
            cache = {"cache_entries": 0} if kind == "exact-nocache" else {}
            filt = ExactFilter(capacity, library=library, **paper, **cache)  # type: ignore[arg-type]
        lines = 0
        with gzip.open(data, "rt", encoding="utf-8", newline="\n") as fh:
            while True:
                batch = [line.rstrip("\n") for line in fh.readlines(1 << 20)]
                if not batch:
                    break
                batch = [line for line in batch if line]
                if limit is not None:
                    batch = batch[: max(limit - lines, 0)]
                    if not batch:
                        break
                lines += len(batch)
                if filt is not None:
                    filt.add_many(batch)
                elif kind == "stream":
                    seen.update(batch[:0])
                elif kind == "set-md5":
                    seen.update(_core.digests(batch, _core.HASH_MD5))
                else:
                    seen.update(batch)
        del batch
        gc.collect()
        result["rss_growth"] = _status_kib("VmRSS") * 1024 - rss0
        result["peak_growth"] = _status_kib("VmHWM") * 1024 - rss0
        result["lines"] = lines
        if filt is not None:
            details = filt.stats().details
            result["distinct"] = len(filt)
            result["counter_bytes"] = int(details["counter_bytes"])
            result["cache_bytes"] = int(details["cache_bytes"])
            result["k"], result["ncounters"] = details["k"], details["ncounters"]
            result["sqlite_cache_kib"] = DEFAULT_CACHE_KIB
            filt.close()  # checkpoints the WAL into the database: its size is the library's
            result["library_bytes"] = os.path.getsize(Path(folder) / "library.sqlite")
        else:  # the stream baseline has no set: per URL of the same distinct count
            result["distinct"] = len(seen) if kind != "stream" else capacity
            if seen:  # what the set holds by sys.getsizeof: its table plus the objects
                result["set_bytes"] = sys.getsizeof(seen) + sum(map(sys.getsizeof, seen))
    return result


# --------------------------------------------------------------------------- report


def mount_of(path: Path) -> str:
    """The device and file system a path lives on (from /proc/mounts)."""
    best = ("", "?", "?")
    target = str(path.resolve())
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            dev, point, fs = line.split()[:3]
            inside = target == point or target.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[0]):
                best = (point, dev, fs)
    return f"{best[1]} ({best[2]}, mounted on {best[0]})"


def git_state() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


def sqlite_settings(root: Path) -> str:
    """The library's SQLite settings as this run used them (the store is still evolving)."""
    from urlseen.exact import sqlite_library as module

    with tempfile.TemporaryDirectory(dir=root) as folder:
        path = Path(folder) / "probe.sqlite"
        SQLiteLibrary(path, create=True).close()
        with contextlib.closing(sqlite3.connect(path)) as db:
            (page,) = db.execute("PRAGMA page_size").fetchone()
    checkpoint = getattr(module, "WAL_CHECKPOINT_PAGES", 1000)
    return (
        f"SQLite {sqlite3.sqlite_version}, {page // 1024} KiB pages, WAL, synchronous=NORMAL, "
        f"wal_autocheckpoint={checkpoint} pages"
    )


def sources() -> dict[str, str]:
    """Digests of the code measured, so that a result can be tied to it in a moving tree."""
    package = Path(_core.__file__).parent
    names = [
        "exact/filter.py", "exact/library_filter.py", "bloom/counting.py",
        "exact/sqlite_library.py", "exact/memory_library.py", Path(_core.__file__).name,
    ]  # fmt: skip
    return {name: sha256(package / name)[:12] for name in names if (package / name).exists()}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def millions(n: float) -> str:
    return f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k"


def split_text(p: Point) -> str:
    total = max(p.seconds, 1e-12)
    return " / ".join(f"{p.split[k] / total:.0%}" for k in ("lookup", "write", "commit", "other"))


def table_a(runs: list[Run], prefixes: Sequence[int]) -> str:
    names = list(dict.fromkeys(r.method for r in runs))
    by = fastest(runs)
    base = {n: by[("lib-url", n)].last.seconds for n in prefixes if ("lib-url", n) in by}
    repeats = len(runs) // max(len(by), 1)
    out = [
        f"Seconds (timed: add_many calls + final flush) for the first N lines, fastest of "
        f"{repeats} runs:",
        "",
        "| method | " + " | ".join(f"N = {millions(n)}" for n in prefixes) + " | ÷ lib-url at "
        f"{millions(prefixes[-1])} |",
        "|---|" + "---:|" * (len(prefixes) + 1),
    ]
    for name in names:
        cells = [f"{by[(name, n)].last.seconds:.2f}" for n in prefixes]
        last = by[(name, prefixes[-1])].last.seconds
        ratio = base.get(prefixes[-1], 0.0) / last if last else 0.0
        out.append(f"| {name}: {BY_NAME[name].label} | " + " | ".join(cells) + f" | {ratio:.2f}× |")
    n = prefixes[-1]
    out += [
        "",
        f"Per URL at N = {millions(n)} ({by[(names[0], n)].capacity:,} distinct):",
        "",
        "| method | URLs/s | look-ups | writes | round trips | read B (physical) "
        "| written B | read MB/s | time: look-up / write / commit / other | evict s "
        "| all runs (s) | FP | FN |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    for name in names:
        r = by[(name, n)]
        p, u = r.last, r.last.per_url()
        same = [x for x in runs if (x.method, x.last.urls) == (name, n)]
        every = ", ".join(f"{x.last.seconds:.2f}" for x in same)
        out.append(
            f"| {name} | {u['urls_per_s']:,.0f} | {u['lookups']:.3f} | {u['writes']:.3f} "
            f"| {u['round_trips']:.4f} | {u['read_bytes']:,.0f} | {u['write_bytes']:,.0f} "
            f"| {p.read_bytes / max(p.seconds, 1e-12) / 1e6:,.0f} | {split_text(p)} "
            f"| {p.evict_seconds:.1f} | {every} | {sum(x.false_pos for x in same)} "
            f"| {sum(x.false_neg for x in same)} |"
        )
    out += [
        "",
        "FP / FN: answers that differ from a Python set's, summed over all runs. Library at the "
        "end: "
        + ", ".join(
            f"{name} {by[(name, n)].library_bytes / 2**20:.0f} MiB "
            f"(WAL {by[(name, n)].wal_bytes / 2**20:.0f})"
            for name in names
        )
        + ".",
    ]
    return "\n".join(out)


def table_b(runs: list[Run]) -> str:
    out = [
        "| method | URLs | seconds | URLs/s (cumulative) | URLs/s since last row "
        "| look-ups/URL | writes/URL | read B/URL | time: look-up / write / commit / other "
        "| FP | FN |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in runs:
        before = Point(0, 0.0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, {})
        for p in r.points:
            u = p.per_url()
            step = (p.urls - before.urls) / max(p.seconds - before.seconds, 1e-12)
            before = p
            out.append(
                f"| {r.method} | {p.urls:,} | {p.seconds:.1f} | {u['urls_per_s']:,.0f} "
                f"| {step:,.0f} "
                f"| {u['lookups']:.3f} | {u['writes']:.3f} | {u['read_bytes']:,.0f} "
                f"| {split_text(p)} | {r.false_pos} | {r.false_neg} |"
            )
    notes = [
        f"- {r.method}: {r.stopped} at {r.last.urls:,} URLs (wall {r.last.wall_seconds:.0f} s "
        f"incl. eviction and key generation)."
        for r in runs
        if r.stopped
    ]
    lib = [
        f"{r.method} {r.library_bytes / 2**20:.0f} MiB (WAL {r.wal_bytes / 2**20:.0f})"
        for r in runs
    ]
    notes.append("- Library at the end, database + WAL: " + ", ".join(lib) + ".")
    return "\n".join([*out, "", *notes])


def add_many_rate(run: Run) -> float:
    """URLs per second of the add_many calls alone (the final flush excluded)."""
    p = run.last
    return p.urls / max(p.seconds - run.extra.get("flush_seconds", 0.0), 1e-12)


def table_c(rows: list[list[Run]], md5: dict[str, Any]) -> str:
    out = [
        "| library, fingerprint | URLs | M URLs/s, add_many (best; all runs) | look-ups/URL "
        "| writes/URL | time: look-up / write / commit / other | flush s | FP | FN |",
        "|---|---:|---|---:|---:|---|---:|---:|---:|",
    ]
    for runs in rows:
        best = max(runs, key=add_many_rate)
        p, u = best.last, best.last.per_url()
        every = ", ".join(f"{add_many_rate(r) / 1e6:.2f}" for r in runs)
        out.append(
            f"| {best.method} | {p.urls:,} | **{add_many_rate(best) / 1e6:.2f}** ({every}) "
            f"| {u['lookups']:.4f} | {u['writes']:.3f} | {split_text(p)} "
            f"| {best.extra.get('flush_seconds', 0.0):.2f} "
            f"| {sum(r.false_pos for r in runs)} | {sum(r.false_neg for r in runs)} |"
        )
    out += [
        "",
        f"FP / FN: answers that differ from a Python set's, summed over all {len(rows[0])} "
        "runs of the row (every add_many answer compared).",
    ]
    out += [
        "",
        f"Fingerprint alone (`_core.digests` on the {md5['urls']:,} dev lines, mean "
        f"{md5['mean_bytes']:.1f} bytes, best of 3): MD5 {md5['md5']:.1f} ns/URL, XXH3-128 "
        f"{md5['xxh3_128']:.1f} ns/URL; MD5 costs {md5['md5'] - md5['xxh3_128']:.1f} ns/URL "
        "more.",
    ]
    return "\n".join(out)


def table_m(results: list[dict[str, Any]], parent: dict[str, str]) -> str:
    out = [
        "| structure | distinct URLs | RSS growth | bytes / distinct URL | peak growth "
        "| accounted (filter: counters + cache) | library file (closed) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        d = r["distinct"]
        acc = "n/a"
        if "counter_bytes" in r:
            acc = f"{r['counter_bytes'] / d:.1f} + {r['cache_bytes'] / d:.1f} B/URL"
        elif "set_bytes" in r:
            acc = f"getsizeof: {r['set_bytes'] / d:.1f} B/URL"
        disk = f"{r['library_bytes'] / d:.0f} B/URL" if "library_bytes" in r else "n/a"
        out.append(
            f"| {r['label']} | {d:,} | {r['rss_growth'] / 2**20:.1f} MiB "
            f"| {r['rss_growth'] / d:.1f} | {r['peak_growth'] / 2**20:.1f} MiB | {acc} "
            f"| {disk} |"
        )
    moved = sorted({k for r in results for k, v in r.get("sources", {}).items() if parent[k] != v})
    if moved:  # the tree changed while the run went on: say which code each part measured
        note = "these subprocesses imported newer code than the rest of the run"
        out += ["", f"Note: {note}: {', '.join(moved)}."]
    return "\n".join(out)


def targets(results: dict[str, Any]) -> str:
    """The issue's targets from this run's numbers (whatever parts ran)."""
    out = ["| target | measured |", "|---|---|"]
    if "a_ratios" in results:
        r = results["a_ratios"]
        n = millions(max(run["points"][-1]["urls"] for run in results["a"]))
        out.append(
            f"| speed vs library only (paper's baseline, lib-url) at {n}, library not in memory "
            f"| urlseen default {r['imp-default']:.2f}×, paper config {r['imp-paper']:.2f}× |"
        )
    if "c" in results:
        rows = results["c"]["rows"]
        fp = sum(r["false_pos"] for rs in rows for r in rs)
        fn = sum(r["false_neg"] for rs in rows for r in rs)
        urls = sum(r["points"][-1]["urls"] for rs in rows for r in rs)
        out.append(f"| FP = FN = 0 against a Python set | FP {fp}, FN {fn} in {urls:,} answers |")
        for rs in rows[:1] + rows[2:3]:
            best = max(
                r["points"][-1]["urls"]
                / (r["points"][-1]["seconds"] - r["extra"].get("flush_seconds", 0.0))
                for r in rs
            )
            out.append(
                f"| batch check-and-add ≥ 1M URLs/s ({rs[0]['method']}) | {best / 1e6:.2f}M "
                f"URLs/s ({best / 1e6:.2f}× the target) |"
            )
        d = results["c"]["digests"]
        out.append(f"| MD5 cost per URL | {d['md5']:.0f} ns (XXH3-128 {d['xxh3_128']:.0f} ns) |")
    if "m" in results:
        mem = {r["kind"]: r for r in results["m"]}
        if "exact-default" in mem and "set-str" in mem:
            e, s = mem["exact-default"], mem["set-str"]
            per_e, per_s = e["rss_growth"] / e["distinct"], s["rss_growth"] / s["distinct"]
            out.append(
                f"| memory per distinct URL, ExactFilter (default) vs Python set of URLs "
                f"| {per_e:.1f} B vs {per_s:.1f} B RSS growth ({per_s / per_e:.1f}× less) |"
            )
    return "\n".join(out)


def plot_lines(
    runs: list[Run], path: Path, title: str, xmax: int, limit_note: bool = False
) -> None:
    """Time against URLs, one line per method (the paper's Figure 3 style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    series: dict[str, list[tuple[int, float]]] = {}
    for r in runs:
        series.setdefault(r.method, []).extend((p.urls, p.seconds) for p in r.points)
    order = [m.name for m in METHODS]
    for name, pts in series.items():
        pts.sort()
        i = order.index(name)  # one colour and marker per method in every figure
        ax.plot(
            [x / 1e6 for x, _ in pts], [y for _, y in pts], color=f"C{i}", marker="os^vDP"[i],
            label=f"{name}: {BY_NAME[name].label}",
        )  # fmt: skip
        stopped = next((r for r in runs if r.method == name and r.stopped), None)
        if stopped is not None and limit_note:
            ax.annotate(
                "time limit", (stopped.last.urls / 1e6, stopped.last.seconds),
                textcoords="offset points", xytext=(4, -12), fontsize=8,
            )  # fmt: skip
    ax.set_xlim(0, xmax / 1e6 * 1.03)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("URLs checked and added (millions)")
    ax.set_ylabel("time (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_a(runs: list[Run], folder: Path) -> None:
    best = list(fastest(runs).values())
    plot_lines(
        best, folder / "figure3.png",
        "Check-and-add the first N dev URLs; k=8, m/N=20; SQLite library evicted after every "
        "batch", max(r.last.urls for r in best),
    )  # fmt: skip


def plot_b(runs: list[Run], folder: Path) -> None:
    plot_lines(
        runs, folder / "growth.png",
        f"Growth: rounds of the dev file ({ROUND_PARAM}=r); library evicted per batch",
        max(r.last.urls for r in runs), limit_note=True,
    )  # fmt: skip


def run_from_json(d: dict[str, Any]) -> Run:
    """A Run back from the --json file (to redraw the figures without measuring again)."""
    names = {f for f in Run.__dataclass_fields__ if f != "points"}
    run = Run(**{k: v for k, v in d.items() if k in names})
    run.points = [Point(**p) for p in d["points"]]
    return run


def replot(results_path: Path, folder: Path) -> None:
    results = json.loads(results_path.read_text())
    results = results.get("exact", results)
    if "a" in results:
        plot_a([run_from_json(d) for d in results["a"]], folder)
    if "b" in results:
        plot_b([run_from_json(d) for d in results["b"]], folder)


# --------------------------------------------------------------------------- main


def header(args: argparse.Namespace, meta: dict[str, Any]) -> str:
    return "\n".join(
        [
            "# IMP-CBFilter (ExactFilter) vs the fingerprint library alone",
            "",
            f"- command: `{meta['command']}`",
            f"- date: {meta['date']}",
            f"- machine: {meta['cpu']}, {meta['cores']} logical CPUs, {meta['ram_gib']:.0f} GiB "
            f"RAM, {meta['platform']}, {meta['python']}",
            f"- libraries in: {meta['tmp']} on {meta['tmp_mount']}; {meta['sqlite']}",
            f"- urlseen: git {meta['git']}; sources (sha256/12): "
            + ", ".join(f"{k} {v}" for k, v in meta["sources"].items()),
            f"- data: `{args.data}` (sha256 {meta['data_sha256'][:16]}…): "
            f"{meta['lines']:,} non-empty lines, {meta['distinct']:,} distinct; raw lines as "
            "keys, empty lines skipped, no canonicalization",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--data", type=Path, default=_default_data(),
        help="gzip, one URL a line (default: $URLSEEN_DEV_URLS, else ../shared/data/)",
    )  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="small prefixes: a smoke run")
    ap.add_argument("--parts", nargs="+", default=["a", "b", "c", "m"], choices="abcm")
    ap.add_argument(
        "--json",
        type=Path,
        help='raw results, key "exact" (default: results.json here; none with --quick)',
    )
    ap.add_argument("--plots", type=Path, help="folder for the PNGs (default: benchmarks/)")
    ap.add_argument(
        "--tmp", type=Path, default=Path(tempfile.gettempdir()),
        help="where the SQLite libraries are made (default: %(default)s)",
    )  # fmt: skip
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="part (b), per method")
    ap.add_argument("--replot", type=Path, metavar="JSON", help="redraw the PNGs from --json")
    ap.add_argument("--child-memory", choices=list(MEMORY_KINDS), help=argparse.SUPPRESS)
    ap.add_argument("--capacity", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_memory:
        print(json.dumps(child_memory(args.child_memory, args.data, args.limit, args.capacity)))
        return 0
    figures = Path(__file__).resolve().parent / "figures"
    plots = args.plots or (None if args.quick else figures)
    if args.replot:
        replot(args.replot, plots or figures)
        return 0

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.perf_counter()
    log(f"loading {args.data} ...")
    lines = load_lines(args.data)
    marked = sum(1 for line in lines if f"{ROUND_PARAM}=" in line)
    if marked:
        ap.error(f"{marked} dev lines contain {ROUND_PARAM}=: the round keys would not be new")
    flags = first_seen(lines)
    meta: dict[str, Any] = {
        "command": shlex.join(["python", "benchmarks/exact/exact.py", *(argv or sys.argv[1:])]),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "tmp": str(args.tmp),
        "tmp_mount": mount_of(args.tmp),
        "git": git_state(),
        "data_sha256": sha256(args.data),
        "sqlite": sqlite_settings(args.tmp),
        "defaults": {
            "cache_entries": DEFAULT_CACHE_ENTRIES,
            "library_cache_kib": DEFAULT_CACHE_KIB,
        },
        "sources": sources(),
        "lines": len(lines),
        "distinct": sum(flags),
        "batch": BATCH,
        "throughput_batch": THROUGHPUT_BATCH,
        "library_cache_kib": LIBRARY_CACHE_KIB,
        "paper": {"k": PAPER_K, "counters_per_key": PAPER_CPK, "counter_bits": 4},
        "time_limit": args.time_limit,
        "load_average_start": os.getloadavg(),
    }
    print(header(args, meta), flush=True)
    results: dict[str, Any] = {"meta": meta}
    prefixes = QUICK_PREFIXES if args.quick else PREFIXES

    if "c" in args.parts:
        part = lines[:QUICK_LINES] if args.quick else lines
        runs_c, md5 = part_c(part, flags[: len(part)], args.tmp, 3, log)
        results["c"] = {"rows": [[r.to_json() for r in rs] for rs in runs_c], "digests": md5}
        print("\n## (c) Exactness and batch throughput, no eviction\n", flush=True)
        print(table_c(runs_c, md5), flush=True)

    if "a" in args.parts:
        runs_a = part_a(lines, flags, prefixes, args.tmp, 1 if args.quick else 3, log)
        results["a"] = [r.to_json() for r in runs_a]
        print("\n## (a) The paper's experiment, library not in memory\n", flush=True)
        print(table_a(runs_a, prefixes), flush=True)
        if plots:
            plot_a(runs_a, plots)
        if len(prefixes) and any(r.method == "imp-default" for r in runs_a):
            n = prefixes[-1]
            sec = {m: r.last.seconds for (m, urls), r in fastest(runs_a).items() if urls == n}
            results["a_ratios"] = {
                m: sec["lib-url"] / sec[m] for m in sec if m != "lib-url" and sec[m]
            }

    if "b" in args.parts:
        base = lines[:QUICK_GROWTH_BASE] if args.quick else lines
        cuts = QUICK_GROWTH if args.quick else GROWTH
        runs_b = part_b(base, flags[: len(base)], cuts, args.tmp, args.time_limit, log)
        results["b"] = [r.to_json() for r in runs_b]
        print("\n## (b) Growth to 10M URLs, library not in memory\n", flush=True)
        print(table_b(runs_b), flush=True)
        if plots:
            plot_b(runs_b, plots)

    if "m" in args.parts:
        limit = QUICK_LINES if args.quick else None
        capacity = sum(flags[:limit]) if limit else sum(flags)
        mem = part_m(args.data, limit, capacity, log)
        results["m"] = mem
        print("\n## (m) Memory per distinct URL (fresh subprocesses)\n", flush=True)
        print(table_m(mem, meta["sources"]), flush=True)

    print("\n## Targets\n", flush=True)
    print(targets(results), flush=True)
    meta["run_seconds"] = time.perf_counter() - started
    meta["load_average_end"] = os.getloadavg()
    print(
        f"\nWhole run: {meta['run_seconds'] / 60:.1f} min. Load average (1, 5, 15 min) at the "
        f"start {_loads(meta['load_average_start'])}, at the end "
        f"{_loads(meta['load_average_end'])}.",
        flush=True,
    )
    args.json = args.json or (None if args.quick else RESULTS)
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(json.dumps(kept | {"exact": results}, indent=1) + "\n")
        log(f"wrote {args.json}")
    return 0


def _loads(loads: Sequence[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in loads)


def _default_data() -> Path:
    override = os.environ.get("URLSEEN_DEV_URLS")
    return Path(override) if override else DEFAULT_DATA


if __name__ == "__main__":
    sys.exit(main())
