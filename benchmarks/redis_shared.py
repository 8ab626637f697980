#!/usr/bin/env python3
"""A URL-seen test shared through Redis: urlseen's RedisBloomFilter against the usual ways.

Every way checks-and-adds the same URLs against one Redis server, from an empty database, in
one run, and is measured the same way:

* URLs/s: client wall time of the check-and-add calls (client hashing and formatting
  included; connecting and creating the filter not).
* correctness: each new/seen answer against a Python set fed the same lines. A Bloom filter
  may call a new URL seen (a false positive, counted); it must never call a seen URL new. The
  DSBF may, once, for a URL whose earlier sightings were all false positives: a split
  re-inserts only what was reported new, so the child no longer answers for it (counted as
  FN). No way may report a URL new twice ("new twice", counted).
* DSBF: 5. below; memory also without the leaves a split replaced (kept GRACE_SECONDS for
  clients whose cached tree still routes to them, then deleted by expiry).
* memory: Redis ``used_memory`` after the run minus before (empty database, scripts already
  loaded), per distinct URL. For urlseen also without its receipts (one per batch, kept
  RECEIPT_SECONDS so a resent batch gets the same answer).
* server CPU: ``INFO cpu`` used_cpu_sys + used_cpu_user deltas (the whole server: protocol,
  syscalls, commands) and ``INFO commandstats`` usec deltas of the way's top-level commands (a
  script's EVALSHA time includes the commands it calls). Hence URLs/s per Redis core.

The Redis server is shared with other users of the machine, so a way whose measuring window
saw commands it did not send (found by commandstats: other command names, or call counts that
do not match) is run again, up to ATTEMPTS times; the report says how many attempts it took.

Ways:

1. urlseen RedisBloomFilter.add_many, batches of 1000 and 8192, blocked and standard layouts
   (capacity = distinct URLs in the data, error rate 0.001 or --error-rate).
2. the scrapy-redis way: SADD of the SHA1 hex fingerprint (40 hex chars) of each URL, pipelined
   in batches of 1000 (redis-py pipeline, no MULTI); new = SADD returned 1. scrapy-redis itself
   sends one SADD per request; that is also measured, on a prefix, for context.
3. the scrapy-redis-bloomfilter way: per URL, k GETBIT round trips (all k, as that library ANDs
   them without stopping early), then, if some bit was 0, k SETBIT round trips. No pipeline, not
   atomic (two processes can both get "new"). Bit positions are urlseen's blocked ones (that
   library hashes the SHA1 fingerprint with k seeded pure-Python hashes into a fixed 2^30-bit
   map; only its access pattern is reproduced here). It runs on a prefix: too slow for N.
4. a naive Lua script: one EVALSHA per batch of 1000 carrying k bit positions per URL as
   decimal arguments; the script calls SETBIT k times per URL and reports "new" when some
   SETBIT returned 0. Positions are urlseen's blocked ones, written in Redis's bit order, so its
   string must end byte-identical to urlseen's (checked).

5. urlseen SplittableBloomFilter.add_many, batches of 1000, leaves of DSBF_LEAF_BITS bits,
   blocked layout: sized for the distinct URLs (capacity / leaf_capacity first leaves, no
   split), and grown by splits from a filter sized for n/8 (the steady state of a crawl that
   outgrew its plan).

Keys are the raw lines of the data file (no canonicalization, empty lines dropped), in file
order, repeats included: the first N lines of the dev set repeat a lot (a phishing feed polled
every few hours), so most checks answer "seen".

Usage (from the repository root; Redis at 127.0.0.1:6379, database 14 is flushed):

    python benchmarks/redis_shared.py                  # 1M lines, ~3 min
    python benchmarks/redis_shared.py --quick          # 100k lines, ~20 s
    python benchmarks/redis_shared.py --json /tmp/redis-results.json   # raw numbers too
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import hashlib
import importlib.util
import itertools
import json
import math
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import redis

from peers import cpu_model  # the sibling benchmark's
from urlseen import _core
from urlseen.filters import _sizing
from urlseen.filters.bloom import DEFAULT_HASH, HASHES, _params
from urlseen.filters.dsbf import SplittableBloomFilter
from urlseen.filters.redis_bloom import RedisBloomFilter
from urlseen.stores.redis_store import RECEIPT_SECONDS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"
DEFAULT_REDIS = "redis://127.0.0.1:6379/14"
ERROR_RATE = 0.001  # default; --error-rate
ATTEMPTS = 3
SETTLE_SECONDS = 0.3
NAME = "bench"  # urlseen filter name
SET_KEY = "bench:fingerprints"
BITS_KEY = "bench:bits"
LUA_FILE = "bloom_batch.lua"  # urlseen's check-and-add script
DSBF_LUA = ("dsbf_tree.lua", "dsbf_leaf.lua")  # the splittable filter's tree and leaf scripts
DSBF_LEAF_BITS = 1 << 17  # 16 KiB leaves: the 1M-line sample fills a dozen of them
LAYOUTS = {"blocked": _core.LAYOUT_BLOCKED, "standard": _core.LAYOUT_STANDARD}

# k SETBITs per URL, "1" where one of them returned 0 (some bit was clear: new).
NAIVE_LUA = """
local k = tonumber(ARGV[1])
local out, a = {}, 2
for i = 1, (#ARGV - 1) / k do
  local new = false
  for _ = 1, k do
    if redis.call('SETBIT', KEYS[1], ARGV[a], 1) == 0 then new = true end
    a = a + 1
  end
  out[i] = new and '1' or '0'
end
return table.concat(out)
"""

# --------------------------------------------------------------------------- data


def load_lines(path: Path, n: int) -> tuple[list[str], int]:
    """The first n lines, raw (only the newline removed), minus empty ones; and how many."""
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as fh:
        raw = [line.rstrip("\n") for line in itertools.islice(fh, n)]
    lines = [u for u in raw if u]
    return lines, len(raw) - len(lines)


def reference(lines: list[str]) -> list[bool]:
    """The exact answers: True where a line appears for the first time."""
    seen: set[str] = set()
    out = []
    for url in lines:
        out.append(url not in seen)
        seen.add(url)
    return out


@dataclass(frozen=True)
class Shape:
    """One Bloom filter's shape, as urlseen sizes it; the GETBIT and naive ways reuse it."""

    layout: str
    nbits: int
    k: int
    error_rate: float

    @property
    def nbytes(self) -> int:
        return (self.nbits + 7) // 8

    @classmethod
    def sized(cls, capacity: int, layout: str, error_rate: float) -> Shape:
        p = _params(capacity, error_rate, layout, 0, DEFAULT_HASH)
        return cls(layout, int(p["nbits"]), int(p["k"]), error_rate)

    def redis_offsets(self, url: str) -> list[int]:
        """urlseen bit p is bit p % 8 (LSB first) of byte p // 8; Redis numbers bits MSB
        first, so the same bit is Redis offset p ^ 7."""
        pos = _core.positions(
            url, self.nbits, self.k, LAYOUTS[self.layout], 0, HASHES[DEFAULT_HASH]
        )
        return [p ^ 7 for p in pos]


# --------------------------------------------------------------------------- ways


Runner = Callable[[list[str]], list[bool]]


@dataclass
class Way:
    """One way to run a shared check-and-add, and what its commandstats must look like."""

    label: str
    batch: int | None  # URLs per round trip; None: round trips per URL
    prepare: Callable[[Any], Runner]  # called with the client, outside the timed region
    top: tuple[str, ...]  # commands whose usec is the way's server time
    allowed: frozenset[str]  # every command the way may send (scripts: also inner calls)
    calls: Callable[[list[str]], dict[str, int]]  # exact call counts we can predict
    limit: int | None = None  # a prefix of the lines, for the slow ways
    bits: tuple[str, int] | None = None  # (key, filter bytes): compared across ways
    shape: str = ""  # ways with the same shape must end with the same bits
    urlseen: bool = False
    note: str = ""


def batches(lines: list[str], size: int) -> list[list[str]]:
    return [lines[i : i + size] for i in range(0, len(lines), size)]


def batched(f: Any, batch: int) -> Runner:
    """A runner that check-and-adds the lines through f.add_many, batch lines per call."""

    def run(lines: list[str]) -> list[bool]:
        out: list[bool] = []
        for chunk in batches(lines, batch):
            out += f.add_many(chunk)
        return out

    return run


def urlseen_way(shape: Shape, capacity: int, batch: int) -> Way:
    """urlseen's own client: byte masks in C, one EVALSHA per batch (bloom_batch.lua)."""

    def prepare(client: Any) -> Runner:
        f = RedisBloomFilter(
            client, NAME, capacity=capacity, error_rate=shape.error_rate, layout=shape.layout
        )
        assert (f.nbits, f.k) == (shape.nbits, shape.k)

        return batched(f, batch)

    def calls(lines: list[str]) -> dict[str, int]:
        n = math.ceil(len(lines) / batch)
        return {"evalsha": n, "get": n, "set": n}  # receipt read and write per batch

    return Way(
        f"urlseen RedisBloomFilter {shape.layout}",
        batch,
        prepare,
        ("evalsha",),
        frozenset({"evalsha", "get", "set", "bitfield", "getrange", "hincrby", "info"}),
        calls,
        bits=(f"urlseen:{{{NAME}}}:bits", shape.nbytes),
        shape=shape.layout,
        urlseen=True,
        note=f"k={shape.k}, {shape.nbits:,} bits",
    )


def dsbf_way(
    capacity: int, error_rate: float, batch: int, grown_from: int = 1, leaf_bits: int = 0
) -> Way:
    """urlseen's SplittableBloomFilter: leaves of DSBF_LEAF_BITS bits plus 8-byte fingerprints.
    grown_from > 1: created for capacity / grown_from URLs, so that splits make the rest."""

    leaf_bits = leaf_bits or DSBF_LEAF_BITS

    def prepare(client: Any) -> Runner:
        f = SplittableBloomFilter(
            max(1, capacity // grown_from), error_rate, redis=client, name=NAME,
            leaf_bits=leaf_bits,
        )  # fmt: skip

        return batched(f, batch)

    label = "urlseen SplittableBloomFilter (DSBF)"
    return Way(
        label + (f", grown by splits from n/{grown_from}" if grown_from > 1 else ", sized for n"),
        batch,
        prepare,
        ("evalsha",),
        frozenset(
            {
                "evalsha",
                "get",
                "set",
                "bitfield",
                "getrange",
                "hincrby",
                "hget",
                "append",
                "hgetall",
                "strlen",
                "hmget",
                "pexpire",
                "del",
                "hsetnx",
                "hset",
                "setrange",
                "hdel",
                "time",
                "info",
                "script|exists",
            }
        ),
        lambda lines: {},
        shape="dsbf",
        urlseen=True,
        note=f"leaf_bits={leaf_bits:,}, error_rate={error_rate}",
    )


def fingerprint(url: str) -> str:
    """40 hex chars, like a scrapy-redis request fingerprint (SHA1 of the raw URL here)."""
    return hashlib.sha1(url.encode("utf-8")).hexdigest()


def sadd_pipelined(batch: int) -> Way:
    def prepare(client: Any) -> Runner:
        def run(lines: list[str]) -> list[bool]:
            out: list[bool] = []
            for chunk in batches(lines, batch):
                pipe = client.pipeline(transaction=False)
                for url in chunk:
                    pipe.sadd(SET_KEY, fingerprint(url))
                out += [added == 1 for added in pipe.execute()]
            return out

        return run

    return Way(
        "scrapy-redis: SADD sha1 hex, pipelined",
        batch,
        prepare,
        ("sadd",),
        frozenset({"sadd", "info"}),
        lambda lines: {"sadd": len(lines)},
    )


def sadd_round_trips(limit: int) -> Way:
    def prepare(client: Any) -> Runner:
        def run(lines: list[str]) -> list[bool]:
            sadd = client.sadd
            return [sadd(SET_KEY, fingerprint(url)) == 1 for url in lines]

        return run

    return Way(
        "scrapy-redis as shipped: SADD per URL (context)",
        None,
        prepare,
        ("sadd",),
        frozenset({"sadd", "info"}),
        lambda lines: {"sadd": len(lines)},
        limit=limit,
    )


def getbit_setbit(shape: Shape, limit: int) -> Way:
    def prepare(client: Any) -> Runner:
        def run(lines: list[str]) -> list[bool]:
            getbit, setbit, out = client.getbit, client.setbit, []
            for url in lines:
                offsets = shape.redis_offsets(url)
                present = 1
                for off in offsets:  # all k, no early exit, as the library does
                    present &= getbit(BITS_KEY, off)
                if not present:
                    for off in offsets:
                        setbit(BITS_KEY, off, 1)
                out.append(not present)
            return out

        return run

    return Way(
        "scrapy-redis-bloomfilter: k GETBIT, then k SETBIT if new",
        None,
        prepare,
        ("getbit", "setbit"),
        frozenset({"getbit", "setbit", "info"}),
        lambda lines: {"getbit": shape.k * len(lines)},
        limit=limit,
        note=f"k={shape.k}, round trips",
    )


def naive_lua(shape: Shape, batch: int) -> Way:
    def prepare(client: Any) -> Runner:
        script = client.register_script(NAIVE_LUA)

        def run(lines: list[str]) -> list[bool]:
            out: list[bool] = []
            for chunk in batches(lines, batch):
                args: list[int] = [shape.k]
                for url in chunk:
                    args += shape.redis_offsets(url)
                out += [c == 0x31 for c in script(keys=[BITS_KEY], args=args)]
            return out

        return run

    return Way(
        "naive Lua: k SETBIT per URL in one EVALSHA",
        batch,
        prepare,
        ("evalsha",),
        frozenset({"evalsha", "setbit", "info"}),
        lambda lines: {"evalsha": math.ceil(len(lines) / batch), "setbit": shape.k * len(lines)},
        bits=(BITS_KEY, shape.nbytes),
        shape=shape.layout,
        note=f"k={shape.k}",
    )


# --------------------------------------------------------------------------- measuring


@dataclass
class Result:
    """One way's numbers; per-URL figures are per line checked unless they say distinct."""

    label: str
    batch: int | None
    note: str
    urlseen: bool
    shape: str
    urls: int = 0
    distinct: int = 0
    seconds: float = 0.0
    client_cpu_seconds: float = 0.0
    reported_new: int = 0
    false_positives: int = 0  # new URL answered seen
    false_negatives: int = 0  # seen URL answered new
    memory_bytes: int = 0
    memory_bytes_no_receipts: int | None = None
    receipts: int = 0
    new_twice: int = 0  # URLs reported new more than once: must be 0 for every way
    script_calls: int = 0  # EVALSHA calls: URLs per call sizes the per-call overhead
    memory_bytes_live: int | None = None  # DSBF: also without leaves retired by splits
    leaves: int = 0
    retired_leaves: int = 0
    server_cpu_user: float = 0.0
    server_cpu_sys: float = 0.0
    command_usec: dict[str, int] = field(default_factory=dict)
    top_usec: int = 0
    top: tuple[str, ...] = ()
    bits_sha256: str | None = None
    attempts: int = 0
    foreign: list[str] = field(default_factory=list)

    @property
    def server_cpu_seconds(self) -> float:
        return self.server_cpu_user + self.server_cpu_sys

    @property
    def urls_per_s(self) -> float:
        return self.urls / self.seconds

    @property
    def bytes_per_distinct(self) -> float:
        return self.memory_bytes / self.distinct

    @property
    def cpu_s_per_million(self) -> float:
        return self.server_cpu_seconds / self.urls * 1e6

    @property
    def top_s_per_million(self) -> float:
        return self.top_usec / 1e6 / self.urls * 1e6

    @property
    def urls_per_core_s(self) -> float:
        return self.urls / self.server_cpu_seconds if self.server_cpu_seconds else math.inf


def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """Command name -> (calls, usec) since the server started (or CONFIG RESETSTAT)."""
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): (v["calls"], v["usec"]) for k, v in stats.items()}


def server_cpu(client: Any) -> tuple[float, float]:
    """(user, sys) CPU seconds the server has used: every thread, all its work."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]), float(cpu["used_cpu_sys"])


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def foreign_activity(way: Way, lines: list[str], delta: dict[str, tuple[int, int]]) -> list[str]:
    """Commands in the window that this way did not send: someone else used the server."""
    odd = [f"{c} x{n}" for c, (n, _) in delta.items() if c not in way.allowed]
    for command, expected in way.calls(lines).items():
        got = delta.get(command, (0, 0))[0]
        if got != expected:
            odd.append(f"{command} {got} calls, expected {expected}")
    return odd


def settled_memory(ctl: Any) -> int:
    """used_memory once the server has freed a closed connection's buffers."""
    time.sleep(SETTLE_SECONDS)
    return used_memory(ctl)


def measure_once(url: str, ctl: Any, way: Way, lines: list[str], expected: list[bool]) -> Result:
    """One timed run from an empty database (scripts already loaded: see main).

    The way runs on its own connection, closed before memory is read: a connection's query
    and reply buffers (hundreds of KB after a big batch) count in used_memory, not the data.
    ctl, a second connection, only reads INFO (and cleans up).
    """
    ctl.flushdb()
    before_mem = settled_memory(ctl)  # before creating the filter: its bits count
    client = redis.Redis.from_url(url)
    client.ping()  # connect (and SELECT) outside the command window
    run = way.prepare(client)
    before_cs, before_cpu = commandstats(ctl), server_cpu(ctl)
    c0, t0 = time.process_time(), time.perf_counter()
    answers = run(lines)
    seconds, client_cpu = time.perf_counter() - t0, time.process_time() - c0
    after_cpu, after_cs = server_cpu(ctl), commandstats(ctl)
    client.close()
    after_mem = settled_memory(ctl)

    delta = {
        c: (calls - before_cs.get(c, (0, 0))[0], usec - before_cs.get(c, (0, 0))[1])
        for c, (calls, usec) in after_cs.items()
        if (calls, usec) != before_cs.get(c, (0, 0))
    }
    res = Result(way.label, way.batch, way.note, way.urlseen, way.shape, len(lines), sum(expected))
    res.seconds, res.client_cpu_seconds = seconds, client_cpu
    res.reported_new = sum(answers)
    res.false_positives = sum(1 for e, a in zip(expected, answers, strict=True) if e and not a)
    res.false_negatives = sum(1 for e, a in zip(expected, answers, strict=True) if a and not e)
    claims = Counter(url for url, a in zip(lines, answers, strict=True) if a)
    res.new_twice = sum(1 for times in claims.values() if times > 1)
    res.memory_bytes = after_mem - before_mem
    res.server_cpu_user = after_cpu[0] - before_cpu[0]
    res.server_cpu_sys = after_cpu[1] - before_cpu[1]
    res.command_usec = {c: usec for c, (_, usec) in sorted(delta.items()) if c != "info"}
    res.script_calls = delta.get("evalsha", (0, 0))[0] + delta.get("eval", (0, 0))[0]
    res.top, res.top_usec = way.top, sum(delta.get(c, (0, 0))[1] for c in way.top)
    res.foreign = foreign_activity(way, lines, delta)
    if way.bits:
        key, nbytes = way.bits  # SETBIT grows a string only up to the highest bit set
        bits = (ctl.get(key) or b"").ljust(nbytes, b"\0")
        res.bits_sha256 = hashlib.sha256(bits).hexdigest()
    if way.urlseen:
        receipts = list(ctl.scan_iter(match=f"urlseen:{{{NAME}*:receipt:*", count=1000))
        res.receipts = len(receipts)
        for i in range(0, len(receipts), 1000):
            ctl.delete(*receipts[i : i + 1000])
        res.memory_bytes_no_receipts = settled_memory(ctl) - before_mem
    if way.shape == "dsbf":  # leaves replaced by a split linger GRACE_SECONDS for stale readers
        res.leaves = sum(1 for _ in ctl.scan_iter(match=f"urlseen:{{{NAME}:leaf:*}}:bits"))
        retired = [k for k in ctl.scan_iter(match=f"urlseen:{{{NAME}:leaf:*", count=1000)
                   if ctl.pttl(k) > 0]  # fmt: skip
        res.retired_leaves = sum(1 for k in retired if k.endswith(b":bits"))
        if retired:
            ctl.delete(*retired)
        res.memory_bytes_live = settled_memory(ctl) - before_mem
    ctl.flushdb()
    return res


def measure(
    url: str,
    ctl: Any,
    way: Way,
    lines: list[str],
    expected: list[bool],
    log: Callable[[str], None],
) -> Result:
    """measure_once, again while someone else's commands show up in the window."""
    if way.limit is not None:
        lines, expected = lines[: way.limit], expected[: way.limit]
    for attempt in range(1, ATTEMPTS + 1):
        res = measure_once(url, ctl, way, lines, expected)
        res.attempts = attempt
        batch = f"batch {way.batch}" if way.batch else "round trips"
        log(
            f"  {way.label}, {batch}: {res.urls_per_s:,.0f} URLs/s, server "
            f"{res.cpu_s_per_million:.2f} s CPU per 1M URLs, "
            f"{res.bytes_per_distinct:.1f} B per distinct URL"
            + (f"; foreign commands: {', '.join(res.foreign)}" if res.foreign else "")
        )
        if not res.foreign:
            break
    return res


def same_bits(results: list[Result]) -> dict[str, bool]:
    """Whether each way ended with the bytes of the first way of its shape (layout)."""
    first: dict[str, str] = {}
    same = {}
    for r in results:
        if r.bits_sha256 is not None:
            first.setdefault(r.shape, r.bits_sha256)
            same[f"{r.label} batch {r.batch} ({r.shape})"] = r.bits_sha256 == first[r.shape]
    return same


# --------------------------------------------------------------------------- capacity plan


def max_capacity_per_string(error_rate: float, layout: str) -> int:
    """The most URLs one Redis string (2^32 bits) holds at this error rate."""
    lo, hi = 1, 1 << 33
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _sizing.size_filter(mid, error_rate, layout).nbits <= 1 << 32:
            lo = mid
        else:
            hi = mid - 1
    return lo


def capacity_plan(total: int, results: list[Result]) -> dict[str, Any]:
    """Filter memory and key count for `total` URLs, and Redis cores for some check rates."""
    plan: dict[str, Any] = {"urls": total, "filters": []}
    for rate in (1e-3, 1e-6):
        for layout in ("blocked", "standard"):
            per_string = max_capacity_per_string(rate, layout)
            keys = math.ceil(total / per_string)
            bits = _sizing.size_filter(math.ceil(total / keys), rate, layout).nbits * keys
            plan["filters"].append(
                {
                    "error_rate": rate,
                    "layout": layout,
                    "bits_per_url": bits / total,
                    "gib": bits / 8 / 2**30,
                    "max_urls_per_string": per_string,
                    "strings": keys,
                }
            )
    plan["cores"] = {
        f"{r.label} batch {r.batch}": r.urls_per_core_s for r in results if r.server_cpu_seconds
    }
    return plan


# --------------------------------------------------------------------------- report


def markdown(results: list[Result], meta: dict[str, Any], plan: dict[str, Any]) -> str:
    """The tables REDIS.md quotes."""
    out = [f"- {k}: {meta[k]}" for k in ("command", "date", "python", "redis_py", "hiredis")]
    out += [f"- {k}: {meta[k]}" for k in ("redis_server", "cpu", "data")]
    out += [
        f"- {meta['lines']:,} lines ({meta['empty_dropped']} empty dropped), "
        f"{meta['distinct']:,} distinct; error rate {meta['error_rate']}; shapes {meta['shapes']}",
        "",
        "| way | batch | URLs checked | URLs/s (client wall) | reported new "
        "| wrong: FP / FN / new twice "
        "| B per distinct URL | client CPU µs per URL | server CPU s per 1M URLs "
        "| commandstats s per 1M | URLs/s per Redis core | attempts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        mem = f"{r.bytes_per_distinct:.1f}"
        if r.memory_bytes_no_receipts is not None:
            mem += f" ({r.memory_bytes_no_receipts / r.distinct:.2f} without receipts"
            if r.memory_bytes_live is not None:
                mem += (
                    f", {r.memory_bytes_live / r.distinct:.2f} without the "
                    f"{r.retired_leaves} split leaves; {r.leaves - r.retired_leaves} live "
                    f"leaves; {r.urls / max(1, r.script_calls):.0f} URLs per script call"
                )
            mem += ")"
        out.append(
            f"| {r.label}{' (' + r.note + ')' if r.note else ''} | {r.batch or '1 URL'} "
            f"| {r.urls:,} | {r.urls_per_s:,.0f} | {r.reported_new:,} "
            f"| {r.false_positives:,} / {r.false_negatives:,} / {r.new_twice:,} | {mem} "
            f"| {r.client_cpu_seconds * 1e6 / r.urls:.2f} "
            f"| {r.cpu_s_per_million:.2f} | {r.top_s_per_million:.2f} ({'+'.join(r.top)}) "
            f"| {r.urls_per_core_s:,.0f} | {r.attempts}{' !' if r.foreign else ''} |"
        )
    out += ["", "Server time by command (commandstats, µs per URL checked; a script's EVALSHA"]
    out += ["includes the commands it calls, listed after it):", ""]
    out += ["| way | batch | µs per URL by command | INFO cpu µs per URL |", "|---|---:|---|---:|"]
    for r in results:
        parts = ", ".join(f"{c} {u / r.urls:.2f}" for c, u in r.command_usec.items())
        out.append(
            f"| {r.label} | {r.batch or '1 URL'} | {parts} "
            f"| {r.server_cpu_seconds * 1e6 / r.urls:.2f} |"
        )
    out += ["", "Same bytes as the first way of the same layout:", ""]
    out += [f"- {way}: {'yes' if same else 'NO'}" for way, same in meta["same_bits"].items()]
    out += [""]
    out += [
        f"Capacity plan inputs for {plan['urls']:.0e} URLs (one Redis string <= 2^32 bits):",
        "",
        "| error rate | layout | bits/URL | filter GiB | max URLs per string | strings |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for f in plan["filters"]:
        out.append(
            f"| {f['error_rate']:g} | {f['layout']} | {f['bits_per_url']:.2f} | "
            f"{f['gib']:.1f} | {f['max_urls_per_string']:,} | {f['strings']} |"
        )
    return "\n".join(out)


def targets(results: list[Result]) -> list[str]:
    """The issue's three ratios, for every urlseen row."""
    sadd = next(r for r in results if r.label.startswith("scrapy-redis: SADD"))
    bits = next(r for r in results if r.label.startswith("scrapy-redis-bloomfilter"))
    naive = next(r for r in results if r.label.startswith("naive Lua"))
    out = []
    for r in results:
        if not r.urlseen:
            continue
        memory = f"1/{sadd.bytes_per_distinct / r.bytes_per_distinct:.1f} of SADD"
        if r.memory_bytes_no_receipts is not None:
            without = sadd.bytes_per_distinct * r.distinct / r.memory_bytes_no_receipts
            memory += f" with receipts, 1/{without:.1f} without"
        if r.memory_bytes_live is not None:
            live = sadd.bytes_per_distinct * r.distinct / r.memory_bytes_live
            memory += f", 1/{live:.1f} without split leaves awaiting deletion"
        target = "<= 1/8" if r.shape == "dsbf" else "<= 1/20"
        out.append(
            f"{r.label} batch {r.batch}: throughput {r.urls_per_s / sadd.urls_per_s:.2f}x "
            f"SADD pipelined (>= 1), {r.urls_per_s / bits.urls_per_s:.1f}x GETBIT/SETBIT "
            f"(>= 5), {r.urls_per_s / naive.urls_per_s:.2f}x naive Lua; memory {memory} "
            f"({target}); server CPU {r.cpu_s_per_million / sadd.cpu_s_per_million:.1f}x "
            "SADD's per URL"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k lines, 10k for the slow ways")
    ap.add_argument("--lines", type=int, help="lines of the data file (default 1M)")
    ap.add_argument("--slow-lines", type=int, help="prefix for round-trip ways (default 100k)")
    ap.add_argument("--error-rate", type=float, default=ERROR_RATE, help="of the Bloom filters")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--redis", default=DEFAULT_REDIS, help="its database is FLUSHed")
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    ap.add_argument("--dsbf-leaf-bits", type=int, default=DSBF_LEAF_BITS, help="bits per DSBF leaf")
    args = ap.parse_args(argv)
    n = args.lines or (100_000 if args.quick else 1_000_000)
    slow = args.slow_lines or (10_000 if args.quick else 100_000)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    lines, empty = load_lines(args.data, n)
    expected = reference(lines)
    capacity = sum(expected)
    blocked = Shape.sized(capacity, "blocked", args.error_rate)
    standard = Shape.sized(capacity, "standard", args.error_rate)
    ways = [
        urlseen_way(blocked, capacity, 1000),
        urlseen_way(blocked, capacity, 8192),
        urlseen_way(standard, capacity, 1000),
        urlseen_way(standard, capacity, 8192),
        dsbf_way(capacity, args.error_rate, 1000, leaf_bits=args.dsbf_leaf_bits),
        dsbf_way(capacity, args.error_rate, 1000, grown_from=8, leaf_bits=args.dsbf_leaf_bits),
        sadd_pipelined(1000),
        naive_lua(blocked, 1000),
        getbit_setbit(blocked, slow),
        sadd_round_trips(slow),
    ]
    ctl = redis.Redis.from_url(args.redis)
    info = ctl.info("server")
    # Scripts stay cached across FLUSHDB: load them once, before any memory or command window.
    ctl.script_load(NAIVE_LUA)
    for script in (LUA_FILE, *DSBF_LUA):
        ctl.script_load(resources.files("urlseen.stores").joinpath("lua", script).read_text())
    log(f"{len(lines):,} lines ({empty} empty dropped), {capacity:,} distinct; {args.redis}")
    results = [measure(args.redis, ctl, way, lines, expected, log) for way in ways]
    ctl.flushdb()

    meta: dict[str, Any] = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "redis_py": redis.__version__,
        "hiredis": importlib.util.find_spec("hiredis") is not None,
        "redis_server": f"{info['redis_version']} at {args.redis}",
        "cpu": f"{cpu_model()} ({os.cpu_count()} logical CPUs), {platform.platform()}",
        "data": str(args.data),
        "lines": len(lines),
        "empty_dropped": empty,
        "distinct": capacity,
        "error_rate": args.error_rate,
        "receipt_seconds": RECEIPT_SECONDS,
        "shapes": {"blocked": asdict(blocked), "standard": asdict(standard)},
        "same_bits": same_bits(results),
    }
    plan = capacity_plan(10**10, results)
    print(markdown(results, meta, plan))
    print()
    for line in targets(results):
        print("- " + line)
    if args.json:
        payload = {
            "meta": meta,
            "results": [
                {
                    **asdict(r),
                    "urls_per_s": r.urls_per_s,
                    "bytes_per_distinct": r.bytes_per_distinct,
                    "cpu_s_per_million": r.cpu_s_per_million,
                    "top_s_per_million": r.top_s_per_million,
                    "urls_per_core_s": r.urls_per_core_s,
                }
                for r in results
            ],
            "plan": plan,
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
