#!/usr/bin/env python3
"""urlseen against its peers: check-and-add over real URLs, one process, one table.

Every filter is built for capacity N at error rate 0.001 and then fed all N keys.
For each row the script reports throughput, the filter's own size in bits per URL,
the false-positive rate measured with never-inserted keys, and how many times
faster urlseen is.

Usage (from the repository root):

    python3 benchmarks/peers/run.py                      # 1M and 20M URLs, ~5 min, ~5.5 GB RAM
    python3 benchmarks/peers/run.py --quick              # 200k URLs only, smoke run, ~15 s
    python3 benchmarks/peers/run.py --sizes 1000000      # pick the sizes
    python3 benchmarks/peers/run.py --data PATH.txt.gz   # writes results.json here
    python3 benchmarks/peers/run.py --only urlseen rbloom   # rows whose label contains a word

The default data file is ``../shared/data/urls-dev.txt.gz`` relative to the
repository root (gzip, one URL per line). It is read in place, never copied.

Workloads
---------
* N up to the number of distinct dev URLs (1,029,818): the first N distinct
  non-empty lines in file order.
* Larger N: the distinct URLs again and again; round r >= 1 appends ``#r<r>``
  to every URL. The benchmark hashes raw keys with no canonicalization, so a
  fragment is enough to make keys distinct (``w3lib.url.canonicalize_url`` would
  strip it, but no crawler-side normalization happens here). The suffix sits
  at the end of the key, where it costs the hash functions the same as a
  path or query suffix would. Keys are distinct by construction: after the
  last ``#r``, a key has only digits, and no dev URL ends in ``#r<digits>``
  (checked at load time, offending URLs would be dropped and counted).
* False-positive probes: the first 1M (200k for --quick and for pure-Python
  peers) distinct URLs with ``#q`` appended, never inserted.

Measurement
-----------
* Timed: creating the filter plus inserting all N keys (creation included for
  every row, so peers that zero their memory eagerly and ones that let the
  kernel do it lazily pay the same thing).
* Each timed run gets freshly built ``str`` objects, split from a joined
  string outside the timed region. CPython caches a str's hash in the object,
  so re-using a list would flatter every peer that calls ``hash()``.
* The cyclic GC is off inside the timed region (as ``timeit`` does); nothing
  in it creates container cycles, so this only removes unrelated noise.
* Best of 3 runs for N <= 2M, a single run above (shared, noisy 2-core
  machine). Runs are interleaved across rows so that a noisy phase hits all
  rows, not one.
* Pure-Python pybloom-live is capped at 200k keys at every size.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import gzip
import importlib
import json
import math
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

ERROR_RATE = 0.001
PROBES = 1_000_000
SLOW_CAP = 200_000  # N cap and probe count for pure-Python peers
QUICK_SIZE = 200_000
BEST_OF_LIMIT = 2_000_000  # sizes up to this get best-of-3
CHUNK = 1 << 16  # keys per joined chunk (see Workload)
NOMINAL_BITS = -math.log(ERROR_RATE) / math.log(2) ** 2  # optimal classic Bloom filter
# A key that ends like this would break the distinctness argument of the suffixes.
RESERVED_END = re.compile(r"#(?:r\d+|q)\Z")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = Path(__file__).resolve().parent / "results.json"


# --------------------------------------------------------------------------- data


def load_distinct(path: Path) -> tuple[list[str], dict[str, int]]:
    """Distinct non-empty lines in first-seen order, plus counts for the header."""
    with gzip.open(path, "rb") as fh:
        text = fh.read().decode("utf-8", errors="replace")
    lines = text.split("\n")
    del text
    if lines and lines[-1] == "":
        lines.pop()  # the terminating newline, not a line
    n_lines = len(lines)
    # rstrip("\r") only matters for foreign CRLF files; the dev file is LF-only.
    distinct = [u for u in dict.fromkeys(u.rstrip("\r") for u in lines) if u]
    del lines
    reserved = [u for u in distinct if RESERVED_END.search(u)]
    if reserved:
        bad = set(reserved)
        distinct = [u for u in distinct if u not in bad]
    return distinct, {
        "lines": n_lines,
        "distinct_nonempty": len(distinct) + len(reserved),
        "dropped_reserved_suffix": len(reserved),
    }


class Workload:
    """N distinct keys, handed out as new str objects on every call.

    The keys live in "\\n"-joined chunks of CHUNK keys rather than one string:
    a single non-ASCII URL would make one big joined string 2-4 bytes per
    character (GBs at 20M), while a chunk only widens itself.
    """

    def __init__(self, base: list[str], n: int) -> None:
        self.n = n
        self._chunks: list[str] = []
        left, r = n, 0
        while left > 0:
            part = base if left >= len(base) else base[:left]
            sfx = f"#r{r}" if r else ""
            for i in range(0, len(part), CHUNK):
                block = part[i : i + CHUNK]
                # Joining with "<sfx>\n" appends the suffix without building
                # 20M temporary strings.
                self._chunks.append((sfx + "\n").join(block) + sfx)
            left -= len(part)
            r += 1
        self.rounds = r  # 1 + number of suffixed passes

    def fresh(self, n: int | None = None) -> list[str]:
        """The first n (default all) keys as newly allocated str objects."""
        n = self.n if n is None else min(n, self.n)
        out: list[str] = []
        for chunk in self._chunks:
            if len(out) >= n:
                break
            out += chunk.split("\n")
        del out[n:]
        return out


def probe_keys(base: list[str], count: int) -> list[str]:
    count = min(count, len(base))
    return ("#q\n".join(base[:count]) + "#q").split("\n")


# --------------------------------------------------------------------------- rows


@dataclass
class Row:
    peer: str  # library + configuration
    api: str  # what the timed region calls
    answers: str  # what the API says per key
    make: Callable[[int], Any]  # capacity -> empty filter
    insert: Callable[[Any, list[str]], Any]
    bits: Callable[[Any], int]  # size the peer reports, in bits
    hits: Callable[[Any, list[str]], int] | None = None  # probe positives
    cap: int | None = None  # max N actually inserted
    reported_new: Callable[[Any], int] | None = None
    skip: str = ""  # reason if not runnable
    reference: bool = False  # the row ratios are taken against


def add_loop(method: str = "add") -> Callable[[Any, list[str]], None]:
    """Per-call loop with the bound method hoisted, as a careful user writes it."""

    def insert(f: Any, urls: list[str]) -> None:
        add = getattr(f, method)
        for u in urls:
            add(u)

    return insert


def count_in(f: Any, keys: list[str]) -> int:
    return sum(map(f.__contains__, keys))


def set_bits(s: set[str]) -> int:
    # A set keeps every key alive, so its real footprint is the hash table plus
    # the str objects (sys.getsizeof of each; shared interned strs don't occur
    # for freshly split keys).
    return 8 * (sys.getsizeof(s) + sum(map(sys.getsizeof, s)))


def try_import(name: str) -> tuple[Any, str]:
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # ImportError, or a broken extension module
        return None, f"not importable: {type(exc).__name__}: {exc}"


def version_of(dist: str, module: Any = None) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return str(getattr(module, "__version__", "?"))


def build_rows() -> tuple[list[Row], dict[str, str]]:
    versions: dict[str, str] = {}
    rows: list[Row] = []

    # urlseen is being written alongside this script: an import failure or a
    # missing class is reported as a skipped row, never as a crash.
    us, why = try_import("urlseen")
    if us is not None and not hasattr(us, "BloomFilter"):
        us, why = None, "urlseen has no BloomFilter yet"
    if us is not None:
        versions["urlseen"] = f"{version_of('urlseen', us)} ({Path(us.__file__).parent})"
    for layout in ("blocked", "standard"):

        def make(n: int, layout: str = layout) -> Any:
            return us.BloomFilter(n, ERROR_RATE, layout=layout)

        common = dict(
            peer=f"urlseen {layout}",
            make=make,
            bits=lambda f: f.stats().bits,
            hits=lambda f, k: sum(f.contains_many(k)),
            reported_new=len,
            skip=why,
        )
        rows.append(
            Row(
                api="add_many",
                answers="list[bool] new",
                insert=lambda f, u: f.add_many(u),
                reference=(layout == "blocked"),
                **common,
            )
        )
        # update: the same batch check-and-add, returning only the count of new keys, like
        # the peers' update (which return None); the fair row to compare batch against batch.
        rows.append(
            Row(api="update", answers="int count new", insert=lambda f, u: f.update(u), **common)
        )
        rows.append(Row(api="add loop", answers="bool new", insert=add_loop(), **common))

    rb, why = try_import("rbloom")
    versions["rbloom"] = version_of("rbloom", rb) if rb else why
    rb_common = dict(
        peer="rbloom",
        make=lambda n: rb.Bloom(n, ERROR_RATE),
        bits=lambda f: f.size_in_bits,
        hits=count_in,
        skip=why,
    )
    rows.append(Row(api="update", answers="none", insert=lambda f, u: f.update(u), **rb_common))
    rows.append(Row(api="add loop", answers="none", insert=add_loop(), **rb_common))

    pbf, why = try_import("pybloomfilter")
    versions["pybloomfiltermmap3"] = version_of("pybloomfiltermmap3", pbf) if pbf else why
    # No filename: the in-memory variant, so no disk or mmap sync is timed.
    pbf_common = dict(
        peer="pybloomfiltermmap3",
        make=lambda n: pbf.BloomFilter(n, ERROR_RATE),
        bits=lambda f: f.num_bits,
        hits=count_in,
        skip=why,
    )
    rows.append(Row(api="update", answers="none", insert=lambda f, u: f.update(u), **pbf_common))
    rows.append(
        Row(api="add loop", answers="bool already-present", insert=add_loop(), **pbf_common)
    )

    fb, why = try_import("fastbloom_rs")
    versions["fastbloom-rs"] = version_of("fastbloom-rs", fb) if fb else why
    # add_str skips the type dispatch the generic add()/add_if_not_contains()
    # wrappers do in Python, making it the fastest public per-call API.
    fb_common = dict(
        peer="fastbloom-rs",
        make=lambda n: fb.BloomFilter(n, ERROR_RATE),
        bits=lambda f: f.config().size(),
        hits=lambda f, k: sum(f.contains_str_batch(k)),
        skip=why,
    )
    rows.append(
        Row(
            api="add_str_batch", answers="none", insert=lambda f, u: f.add_str_batch(u), **fb_common
        )
    )
    rows.append(Row(api="add_str loop", answers="none", insert=add_loop("add_str"), **fb_common))

    ab, why = try_import("abloom")
    versions["abloom"] = version_of("abloom", ab) if ab else why
    for ser in (True, False):

        def make_ab(n: int, ser: bool = ser) -> Any:
            return ab.BloomFilter(n, ERROR_RATE, serializable=ser)

        ab_common = dict(
            peer=f"abloom serializable={ser}",
            make=make_ab,
            bits=lambda f: f.bit_count,
            hits=count_in,
            skip=why,
        )
        rows.append(Row(api="update", answers="none", insert=lambda f, u: f.update(u), **ab_common))
        rows.append(Row(api="add loop", answers="bool new", insert=add_loop(), **ab_common))

    pbl, why = try_import("pybloom_live")
    versions["pybloom-live"] = version_of("pybloom-live", pbl) if pbl else why
    # Pure Python, ~0.5M keys/s: no batch API, and 20M keys would take minutes.
    rows.append(
        Row(
            peer="pybloom-live",
            api="add loop",
            answers="bool already-present",
            make=lambda n: pbl.BloomFilter(n, ERROR_RATE),
            insert=add_loop(),
            bits=lambda f: f.num_bits,
            hits=count_in,
            cap=SLOW_CAP,
            skip=why,
        )
    )

    set_common = dict(peer="python set", make=lambda n: set(), bits=set_bits, hits=count_in)
    rows.append(Row(api="update", answers="none", insert=lambda s, u: s.update(u), **set_common))
    rows.append(Row(api="add loop", answers="none", insert=add_loop(), **set_common))
    return rows, versions


# --------------------------------------------------------------------------- running


@dataclass
class Result:
    size: int
    peer: str
    api: str
    answers: str
    n: int = 0
    runs: list[float] = field(default_factory=list)  # seconds per run
    cpu: list[float] = field(default_factory=list)  # process CPU seconds per run (user + sys)
    bits: int | None = None
    probes: int = 0
    fp_hits: int | None = None
    false_negatives: int | None = None
    fn_checked: int = 0
    reported_new: int | None = None
    error: str = ""
    reference: bool = False

    @property
    def mps(self) -> float | None:
        return self.n / min(self.runs) / 1e6 if self.runs else None

    @property
    def cpu_mps(self) -> float | None:
        """Per CPU second: on a shared machine, time other processes ran here is not counted."""
        return self.n / min(self.cpu) / 1e6 if self.cpu else None

    @property
    def bits_per_url(self) -> float | None:
        return self.bits / self.n if self.bits is not None and self.n else None

    @property
    def fp_rate(self) -> float | None:
        return self.fp_hits / self.probes if self.fp_hits is not None and self.probes else None

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()}
        d.update(
            mps=self.mps, cpu_mps=self.cpu_mps, bits_per_url=self.bits_per_url, fp_rate=self.fp_rate
        )
        return d


def timed_run(row: Row, keys: list[str]) -> tuple[float, float, Any]:
    """Wall and process CPU seconds of creating the filter and inserting the keys."""
    gc.collect()
    gc.disable()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        f = row.make(len(keys))
        row.insert(f, keys)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
    finally:
        gc.enable()
    return dt, dc, f


def check_filter(row: Row, res: Result, f: Any, keys: list[str], probes: list[str]) -> None:
    """Untimed checks on the filled filter from the last run."""
    res.bits = int(row.bits(f))
    if row.hits is not None:
        res.probes = len(probes)
        res.fp_hits = int(row.hits(f, probes))
        # A Bloom filter must never forget a key: a cheap guard against a
        # broken binding (or a broken urlseen build) producing nice numbers.
        sample = keys[:: max(1, len(keys) // 100_000)]
        res.fn_checked = len(sample)
        res.false_negatives = len(sample) - int(row.hits(f, sample))
    if row.reported_new is not None:
        res.reported_new = int(row.reported_new(f))


def run_size(
    rows: list[Row], wl: Workload, probes_all: list[str], runs: int, log: Callable[[str], None]
) -> list[Result]:
    results = {
        id(r): Result(
            wl.n,
            r.peer,
            r.api,
            r.answers,
            reference=r.reference,
            error=("skipped: " + r.skip) if r.skip else "",
        )
        for r in rows
    }
    active = [r for r in rows if not r.skip]
    # Interleave runs across rows: a noisy neighbour phase then spreads over
    # all peers instead of sinking one of them.
    for run in range(runs):
        last = run == runs - 1
        for row in active:
            res = results[id(row)]
            if res.error:
                continue
            n = min(wl.n, row.cap) if row.cap else wl.n
            keys = wl.fresh(n)
            try:
                dt, dc, f = timed_run(row, keys)
                res.n = n
                res.runs.append(dt)
                res.cpu.append(dc)
                log(
                    f"  N={wl.n:,} {row.peer}, {row.api}: run {run + 1}/{runs} "
                    f"{n / dt / 1e6:.2f} M/s, {n / dc / 1e6:.2f} per CPU s, "
                    f"load {os.getloadavg()[0]:.1f}"
                )
                if last:
                    probes = probes_all[:SLOW_CAP] if row.cap else probes_all
                    check_filter(row, res, f, keys, probes)
            except Exception as exc:  # keep the other rows going
                res.error = f"error: {type(exc).__name__}: {exc}"
                log(f"  N={wl.n:,} {row.peer}, {row.api}: {res.error}")
            # At 20M a key list is ~2 GB: release it before the next row builds one.
            f = None
            del keys
            gc.collect()
    return [results[id(r)] for r in rows]


# --------------------------------------------------------------------------- report


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fmt_n(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k"


def markdown(size: int, results: list[Result]) -> str:
    ref = next((r for r in results if r.reference and r.mps), None)
    out = [
        f"### N = {size:,} distinct URLs",
        "",
        "| peer | API | per-key answer | N timed | M URLs/s | urlseen ÷ row "
        "| M URLs/CPU s | urlseen ÷ row (CPU) | bits/URL | FP measured | false neg. |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.mps is None:
            out.append(
                f"| {r.peer} | {r.api} | {r.answers} | "
                f"| {(r.error or 'no result').replace('|', '/')} | | | | | | |"
            )
            continue
        capped = "*" if r.n != size else ""
        bpu = f"{r.bits_per_url:.2f}" if r.bits_per_url is not None else "n/a"
        fp = (
            f"{r.fp_rate:.5f} ({r.fp_hits:,}/{fmt_n(r.probes)})" if r.fp_rate is not None else "n/a"
        )
        fn = f"{r.false_negatives}" if r.false_negatives is not None else "n/a"
        ratio = f"{ref.mps / r.mps:.2f}×" if ref else "n/a"
        both = ref and ref.cpu_mps and r.cpu_mps
        cpu_ratio = f"{ref.cpu_mps / r.cpu_mps:.2f}×" if both else "n/a"
        cpu = f"{r.cpu_mps:.2f}" if r.cpu_mps else "n/a"
        out.append(
            f"| {r.peer} | {r.api} | {r.answers} | {fmt_n(r.n)}{capped} "
            f"| {r.mps:.2f} | {ratio}{capped} | {cpu} | {cpu_ratio}{capped} | {bpu} | {fp} | {fn} |"
        )

    # One line per peer: its fastest API against urlseen's reference row.
    best: dict[str, Result] = {}
    for r in results:
        if r.mps is not None and (r.peer not in best or r.mps > best[r.peer].mps):
            best[r.peer] = r
    if best:
        out += [
            "",
            f"Fastest API per peer, N = {size:,}"
            + (
                f" (reference: {ref.peer} {ref.api}, {ref.mps:.2f} M/s)"
                if ref
                else " (urlseen not measured: no ratios)"
            ),
            "",
            "| peer | fastest API | M URLs/s | urlseen ÷ peer |",
            "|---|---|---:|---:|",
        ]
        for peer, r in best.items():
            capped = "*" if r.n != size else ""
            ratio = f"{ref.mps / r.mps:.2f}×{capped}" if ref else "n/a"
            out.append(f"| {peer} | {r.api} | {r.mps:.2f}{capped} | {ratio} |")

    notes = []
    if any(r.n and r.n != size for r in results):
        notes.append(
            f"\\* pure-Python peer capped at N = {fmt_n(SLOW_CAP)} "
            f"({fmt_n(SLOW_CAP)} probes): not comparable with the other rows."
        )
    for r in results:
        if r.reported_new is not None and r.n:
            notes.append(
                f"{r.peer} {r.api}: len(f) = {r.reported_new:,} keys reported new, "
                f"{r.n - r.reported_new:,} distinct keys wrongly reported as seen."
            )
        if r.fp_hits is not None and r.probes:
            # Binomial z-score against the target rate: |z| > 4 is not noise.
            expect = ERROR_RATE * r.probes
            z = (r.fp_hits - expect) / math.sqrt(expect * (1 - ERROR_RATE))
            if z > 4:
                notes.append(
                    f"**{r.peer} {r.api}: measured FP {r.fp_rate:.5f} is "
                    f"{r.fp_rate / ERROR_RATE:.1f}× the {ERROR_RATE} target "
                    f"(z = {z:.0f}): the filter is undersized for its error rate.**"
                )
        if r.error and r.mps is not None:
            notes.append(f"{r.peer} {r.api}: timed fine, then {r.error}")
        if r.false_negatives:
            notes.append(
                f"**{r.peer} {r.api}: {r.false_negatives} FALSE NEGATIVES "
                f"in {r.fn_checked:,} inserted keys checked.**"
            )
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    return "\n".join(out)


def header(args: argparse.Namespace, meta: dict[str, Any], versions: dict[str, str]) -> str:
    vers = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "urlseen")
    us = versions.get("urlseen", "not importable, urlseen rows skipped")
    sfx = (
        "N above the distinct count: round r >= 1 repeats the distinct URLs with "
        "`#r<r>` appended. Keys are hashed raw, without canonicalization "
        "(w3lib would strip this fragment, but nothing canonicalizes here), so each "
        "key is distinct."
    )
    lines = [
        "# urlseen vs peers: check-and-add over real URLs",
        "",
        f"- date: {meta['date']}",
        f"- python: {meta['python']}",
        f"- CPU: {meta['cpu']} ({os.cpu_count()} logical CPUs), {platform.platform()}",
        f"- urlseen: {us}",
        f"- peers: {vers}",
        f"- data: `{args.data}`: {meta['data']['lines']:,} lines, "
        f"{meta['data']['distinct_nonempty']:,} distinct non-empty URLs"
        + (
            f" ({meta['data']['dropped_reserved_suffix']} dropped: they end like a "
            "benchmark suffix)"
            if meta["data"]["dropped_reserved_suffix"]
            else ""
        ),
        "- N up to the distinct count: the first N distinct URLs in file order. " + sfx,
        f"- every filter: capacity = N, error rate {ERROR_RATE}; nominal optimum for a "
        f"classic Bloom filter: {NOMINAL_BITS:.2f} bits/URL",
        "- time: filter creation + inserting all N fresh `str` keys (new objects every "
        "run, so no cached hashes); GC off while timed; "
        f"best of 3 for N <= {BEST_OF_LIMIT:,}, 1 run above (or --runs); wall time, and "
        "the process's CPU time (user + sys, page faults included), which time other "
        "processes of a shared machine held the core does not count",
        "- FP measured: after inserting N, never-inserted keys (distinct URLs + `#q`) "
        "queried; false neg.: inserted keys (a 100k sample) that test absent",
        "- bits/URL: the size each peer reports (urlseen `stats().bits`, rbloom "
        "`size_in_bits`, pybloomfilter `num_bits`, fastbloom-rs `config().size()`, abloom "
        "`bit_count`, pybloom-live `num_bits`); `set`: sys.getsizeof of the set plus of "
        "every key str it keeps alive",
        "- per-key answer: whether the timed call tells the caller if the URL was new "
        "(a URL-seen test needs that; batch `update` calls of the peers don't)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="gzip file, one URL per line (default: %(default)s)",
    )
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1_000_000, 20_000_000],
        metavar="N",
        help="numbers of distinct keys (default: %(default)s)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: N = {QUICK_SIZE:,} only, {SLOW_CAP:,} probes",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        metavar="WORD",
        help="run only rows whose 'peer API' label contains one of the words",
    )
    ap.add_argument("--runs", type=int, help="override the best-of count for every size")
    ap.add_argument(
        "--json", type=Path, help="raw results (default: results.json here; none with --quick)"
    )
    args = ap.parse_args(argv)
    args.json = args.json or (None if args.quick else RESULTS)
    sizes = [QUICK_SIZE] if args.quick else args.sizes
    n_probes = SLOW_CAP if args.quick else PROBES

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    rows, versions = build_rows()
    if args.only:
        rows = [r for r in rows if any(w.lower() in f"{r.peer} {r.api}".lower() for w in args.only)]
    for r in rows:
        if r.skip:
            log(f"skipping {r.peer} {r.api}: {r.skip}")

    log(f"loading {args.data} ...")
    base, data_meta = load_distinct(args.data)
    if not base:
        ap.error(f"{args.data}: no usable URLs")
    probes = probe_keys(base, n_probes)
    meta = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "cpu": cpu_model(),
        "data": data_meta,
        "versions": versions,
        "error_rate": ERROR_RATE,
        "sizes": sizes,
        "probes": len(probes),
    }
    print(header(args, meta, versions), flush=True)

    all_results: list[Result] = []
    for size in sizes:
        log(f"building {size:,} keys ...")
        wl = Workload(base, size)
        log(f"  {wl.rounds} round(s) over the distinct URLs")
        meta.setdefault("rounds", {})[size] = wl.rounds
        runs = args.runs or (3 if size <= BEST_OF_LIMIT else 1)
        results = run_size(rows, wl, probes, runs, log)
        del wl
        gc.collect()
        all_results += results
        print("\n" + markdown(size, results), flush=True)

    if args.json:
        args.json.write_text(
            json.dumps({"meta": meta, "results": [r.to_json() for r in all_results]}, indent=1)
        )
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
