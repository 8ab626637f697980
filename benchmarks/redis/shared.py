#!/usr/bin/env python3
"""The fleet's bill (issue 17): Redis CPU, memory and throughput of a shared URL-seen test.

One command measures, in one run on the same data, every way a crawler fleet can share its
seen-test through Redis, each against a fresh private redis-server that this script starts
(loopback, no persistence) and stops, so that INFO sees nothing but the way being measured:

* SADD pipelined: the scrapy-redis way (SHA1 hex fingerprint of each URL, SADD, pipelined in
  batches of 1000, no MULTI); new = SADD returned 1. The baseline of every ratio.
* urlseen RedisBloomFilter (blocked layout), add_many in batches of 1000 and 8192.
* urlseen SplittableBloomFilter, batches of 1000, leaves of --leaf-bits bits: sized for the
  distinct URLs, and created for a tenth of them so that splits grow it 10x past its plan
  (that one also in batches of 8192: a leaf's fixed cost per call spread over more URLs).
* urlseen's exact library in Redis (RedisLibrary under FingerprintLibraryFilter, what
  `urlseen dedup --filter exact --redis` runs), batches of 1000 and 8192; and in batches of
  1000 as the crawler plug-ins open the shared default (SeenHandle: the client's memory of
  seen answers in front, shared/seen_cache.py), the row a crawl's server meets.
* BF.MADD (RedisBloom / valkey-bloom): not measured. Neither module can be installed from the
  package registries this machine reaches (PyPI's redisbloom is a client; npm's valkey-bloom
  ships no module; Debian bookworm has RediSearch, not RedisBloom): see BF_MADD.

Two streams of keys (raw lines of the dev set, no canonicalization, empty lines dropped):
"repeats", the first --lines lines (a phishing feed polled every few hours: ~90% repeats), and
"new", the first --new distinct lines (every check answers new). Per way and stream:

* server CPU per 1M URLs checked: INFO cpu used_cpu_sys + used_cpu_user deltas (the whole
  server: protocol, syscalls, commands), and INFO commandstats usec deltas per command (a
  script's time includes the commands it calls, which are also listed under their own names);
* memory per distinct URL: "keys", the sum of MEMORY USAGE (every element counted) over the
  keys that stay, i.e. without those that expire on their own (leaves a split replaced,
  receipts): what the targets use. Also INFO used_memory after the run minus before the
  filter was created, with and without the expiring keys, the way's connections killed and
  the script cache flushed first (buffers and scripts are per server, not data; latency
  tracking is off for the same reason); it still counts ~0.1 MB the Lua state keeps; for the
  splittable filter also after a reload: once every client's announcement of the tree it
  read has lapsed, a fresh client's load frees the leaves splits retired (closing frees none);
* throughput: client wall time of the check-and-add calls, one client process;
* correctness against a Python set: FP (new answered seen), FN (seen answered new), URLs
  answered new twice; and, for the "new" stream, the FP rate of the filled filter on --probe
  distinct lines never inserted;
* attempts: a run whose window saw a connection it did not open is measured again.

Then the splittable filter's memory when small (capacity 10^8 holding 1,000 URLs, in Redis and
in this process) and the fleet: 1, 4 and 16 client processes against one private server and
against a 3-primary Redis Cluster started here, each way checking the first --fleet-lines lines
split among the clients (SADD spreads its set over 16 keys by the fingerprint's first hex digit,
so that a Cluster can spread it; a RedisBloomFilter created on the Cluster has one shard per
primary), with the server CPU per node, the commands called, and the memory per distinct URL at
the end of the run (used_memory), at rest (clients gone, script caches flushed, expiring keys
deleted) and of the keys that stay (MEMORY USAGE). The targets of issues 17 and 27 are checked
and printed (27: on the Cluster the busiest primary does <= 40% of the servers' CPU and all of
them <= 1.15x one server's; 16 clients cost <= 1.5x one client's server CPU per URL).

`--kinds bloom --no-table` measures the fleet of one kind alone (with SADD, its peer).
`--bloom-capacity data,default` runs the fleet's RedisBloomFilter both sized for the run's
distinct URLs (a small filter: every writer meets the others in most blocks) and at the
library's default capacity (10^7 URLs, as a crawl that names none gets it), labelled apart.

Usage (from the repository root; needs redis-server and redis-cli on PATH):

    python benchmarks/redis/shared.py       # ~15 min; writes key shared of results.json here
    python benchmarks/redis/shared.py --quick                                # smoke test
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from run import cpu_model  # benchmarks/peers/run.py
from urlseen import defaults
from urlseen.exact.library_filter import FingerprintLibraryFilter
from urlseen.integrations._handle import SeenHandle
from urlseen.shared import client as redis_store
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.shared.library import RedisLibrary
from urlseen.splittable.filter import SplittableBloomFilter

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "shared"
ERROR_RATE = 0.001
NAME = "bench"
SET_KEY = "bench:fingerprints"
LEAF_BITS = 1 << 17  # 16 KiB leaves: the 1M-line stream fills a dozen, so splits happen
ATTEMPTS = 3
SETTLE_SECONDS = 0.2
FLEET_CLIENTS = (1, 4, 16)
FLEET_SHARDS = 16  # SADD keys in the fleet runs, by the fingerprint's first hex digit
SMALL_CAPACITY, SMALL_URLS = 10**8, 1000
PORTS: list[int] = []  # of every server started: the JSON lists them (none may outlive the run)
BF_MADD = (
    "not measured: neither RedisBloom nor valkey-bloom can be installed from the registries "
    "this machine reaches (PyPI 'redisbloom' 0.4.1 is a Python client only, npm "
    "'valkey-bloom' 0.0.1 ships no module, Debian bookworm packages RediSearch, not RedisBloom)"
)
TARGETS = {
    "bloom_cpu": 1.0,  # RedisBloomFilter server CPU per URL <= 1.0x SADD pipelined
    "dsbf_cpu": 1.5,  # splittable <= 1.5x
    "small_bytes": 2 * 2**20,  # capacity 10^8 holding 1,000 URLs < 2 MB
    "grown_bits": 48.0,  # grown 10x: <= 48 bits per distinct URL, FP <= f
    "bloom_memory": 1 / 40,  # RedisBloomFilter <= 1/40 of SADD's memory
    "cluster": 2.5,  # 16 clients on the cluster >= 2.5x one server's
    "cluster_busiest": 0.40,  # the busiest primary's share of the cluster's server CPU
    "cluster_sum": 1.15,  # the cluster's server CPU <= 1.15x one server's, same clients
    "fleet_growth": 1.5,  # 16 clients' server CPU per URL <= 1.5x one client's
    "exact_cpu_new": 1.5,  # the exact library's server CPU per URL <= 1.5x SADD on new URLs
    "exact_cpu_repeats": 1.0,  # and <= 1x on repeats
    "grown_end_vs_rest": 2.0,  # splittable grown: used_memory at the end <= 2x at rest
    "grown_rest_bits": 40.0,  # and at rest <= 40 bits per distinct URL by used_memory
}

# --------------------------------------------------------------------------- data


def load_lines(path: Path, n: int) -> tuple[list[str], int]:
    """The first n lines, raw (only the newline removed), minus empty ones; and how many."""
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as fh:
        raw = [line.rstrip("\n") for line in itertools.islice(fh, n)]
    lines = [u for u in raw if u]
    return lines, len(raw) - len(lines)


def distinct_lines(path: Path, n: int) -> list[str]:
    """The first n distinct non-empty lines, in file order."""
    seen: dict[str, None] = {}
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as fh:
        for line in fh:
            url = line.rstrip("\n")
            if url:
                seen[url] = None
                if len(seen) == n:
                    break
    return list(seen)


def reference(lines: list[str]) -> list[bool]:
    """The exact answers: True where a line appears for the first time."""
    seen: set[str] = set()
    out = []
    for url in lines:
        out.append(url not in seen)
        seen.add(url)
    return out


def fingerprint(url: str) -> str:
    """40 hex chars, like a scrapy-redis request fingerprint (SHA1 of the raw URL here)."""
    return hashlib.sha1(url.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- private servers


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(bus: bool = False) -> int:
    """A free loopback port; bus: port + 10000 free too (a Cluster node's bus)."""
    rng = random.Random()
    while True:
        port = rng.randrange(20000, 45000)
        if _port_free(port) and (not bus or _port_free(port + 10000)):
            return port


class Server:
    """A private redis-server: nothing but this benchmark touches its memory or CPU."""

    def __init__(self, folder: Path, *, cluster: bool = False) -> None:
        for _ in range(3):  # a port found free may be taken before the server binds it
            self.port = free_port(bus=cluster)
            node = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf"]
            options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            # No per-command latency histograms: each is allocated on a command's first call
            # and would count in used_memory as if it were the filter's.
            options += ["--dir", str(folder), "--latency-tracking", "no"]
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), *options, *(node if cluster else [])],
                stdout=subprocess.DEVNULL,
            )
            self.client = redis.Redis(port=self.port)
            if self._answers():
                PORTS.append(self.port)
                return
            self.stop()
        raise RuntimeError("could not start a private redis-server")

    def _answers(self) -> bool:
        """Whether this process's server answers (never someone else's on the same port)."""
        for _ in range(250):
            if self.proc.poll() is not None:
                return False
            try:
                return int(self.client.info("server")["process_id"]) == self.proc.pid
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def nodes(self) -> list[Server]:
        return [self]

    def cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def used(self) -> int:
        """used_memory once the server freed what closed connections held."""
        time.sleep(SETTLE_SECONDS)
        return int(self.client.info("memory")["used_memory"])

    def commandstats(self) -> dict[str, tuple[int, int]]:
        stats = self.client.info("commandstats")
        return {k.removeprefix("cmdstat_"): (v["calls"], v["usec"]) for k, v in stats.items()}

    def connections(self) -> int:
        return int(self.client.info("stats")["total_connections_received"])

    def drop_clients(self) -> None:
        """Close every other connection: their query and reply buffers are not data."""
        self.client.client_kill_filter(_type="normal", skipme=True)

    def flush(self) -> None:
        self.client.flushall()

    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=20)


class Cluster:
    """A Redis Cluster of private primaries (no replicas), created with redis-cli."""

    def __init__(self, folder: Path, primaries: int = 3) -> None:
        self._nodes: list[Server] = []
        try:
            for _ in range(primaries):
                self._nodes.append(Server(folder, cluster=True))
            create = [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{n.port}" for n in self._nodes],
            ]
            subprocess.run(
                [*create, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            for _ in range(400):
                states = [n.client.cluster("info")["cluster_state"] for n in self._nodes]
                if all(s == "ok" for s in states):
                    return
                time.sleep(0.05)
            raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis-cluster://127.0.0.1:{self._nodes[0].port}"

    @property
    def nodes(self) -> list[Server]:
        return self._nodes

    def flush(self) -> None:
        for node in self._nodes:
            node.flush()

    def stop(self) -> None:
        for node in self._nodes:
            node.stop()


@contextmanager
def private_server(folder: Path) -> Iterator[Server]:
    server = Server(folder)
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- ways


@dataclass
class Opened:
    """One client's handle on a way: check-and-add, look up (no insert), close."""

    add_many: Callable[[list[str]], list[bool]]
    contains_many: Callable[[list[str]], list[bool]]
    close: Callable[[], None]

    def run(self, lines: list[str], batch: int, op: str = "add") -> list[bool]:
        call = self.add_many if op == "add" else self.contains_many
        out: list[bool] = []
        for start in range(0, len(lines), batch):
            out += call(lines[start : start + batch])
        return out


@dataclass(frozen=True)
class Way:
    """One way to share the seen-test: create its (empty) state, open a client on it."""

    label: str
    kind: str  # sadd, bloom, dsbf, exact: which targets apply
    batch: int
    create: Callable[[str, int], None]  # (url, distinct URLs expected)
    open: Callable[[str], Opened]
    note: str = ""


def sadd_way(batch: int, shards: int = 1) -> Way:
    """The scrapy-redis way; shards > 1: the set split by the fingerprint's first hex digit."""

    def key(fp: str) -> str:
        return SET_KEY if shards == 1 else f"bench:{{{int(fp[0], 16) % shards}}}:fingerprints"

    def open_(url: str) -> Opened:
        client = redis_store.connect(url)
        client.ping()  # connected before any measuring window

        def send(command: str, lines: list[str]) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for u in lines:
                fp = fingerprint(u)
                getattr(pipe, command)(key(fp), fp)
            return list(pipe.execute())

        return Opened(
            lambda lines: [r == 1 for r in send("sadd", lines)],
            lambda lines: [bool(r) for r in send("sismember", lines)],
            client.close,
        )

    label = "SADD sha1 hex, pipelined (scrapy-redis's way, batched)"
    note = f"{shards} keys" if shards > 1 else "1 key"
    return Way(label, "sadd", batch, lambda url, n: None, open_, note)


def bloom_way(batch: int, error_rate: float, capacity: int | None = None) -> Way:
    """capacity None: sized for the distinct URLs of the run; else created for that many (the
    library's default, defaults.CAPACITY, is what a crawl that names none plans for)."""

    def create(url: str, n: int) -> None:
        RedisBloomFilter(url, NAME, capacity=capacity or n, error_rate=error_rate).close()

    def open_(url: str) -> Opened:
        f = RedisBloomFilter(url, NAME)
        return Opened(f.add_many, f.contains_many, f.close)

    label = "RedisBloomFilter (blocked)"
    if capacity is not None:
        label += f", capacity {capacity:,}"
    return Way(label, "bloom", batch, create, open_, f"f={error_rate}")


def dsbf_way(batch: int, error_rate: float, leaf_bits: int, grown: int = 1) -> Way:
    """grown > 1: created for distinct / grown URLs, so that splits make the rest."""

    def create(url: str, n: int) -> None:
        SplittableBloomFilter(
            max(1, n // grown), error_rate, redis=url, name=NAME, leaf_bits=leaf_bits
        ).close()

    def open_(url: str) -> Opened:
        f = SplittableBloomFilter(redis=url, name=NAME)
        return Opened(f.add_many, f.contains_many, f.close)

    how = f"grown {grown}x past its capacity by splits" if grown > 1 else "sized for n"
    return Way(
        f"SplittableBloomFilter, {how}",
        "dsbf",
        batch,
        create,
        open_,
        f"leaf_bits={leaf_bits:,}, f={error_rate}",
    )


def exact_way(batch: int, integrations: bool = False) -> Way:
    """integrations: opened as Scrapy's, scrapy-redis's and Crawlee's plug-ins open the shared
    default (integrations/_handle.py SeenHandle): the library behind the client's memory of
    seen answers (shared/seen_cache.py, 200,000 entries), which answers this client's repeats
    without a round trip and without touching their counts."""

    def create(url: str, n: int) -> None:
        RedisLibrary(url, NAME, n).close()

    def open_(url: str) -> Opened:
        if integrations:
            handle = SeenHandle("exact", redis=url, name=NAME)
            cached = handle.seen
            cached.add_many([])  # its tracking connection opened before the measured window
            return Opened(cached.add_many, cached.contains_many, handle.close)
        seen = FingerprintLibraryFilter(library=RedisLibrary(url, NAME))
        return Opened(
            lambda lines: list(seen.add_many(lines)),
            lambda lines: list(seen.contains_many(lines)),
            seen.close,
        )

    label = "exact library in Redis (RedisLibrary)"
    if integrations:
        label = "exact library as the integrations open it (seen cache in front)"
    return Way(label, "exact", batch, create, open_, "MD5")


def table_ways(error_rate: float, leaf_bits: int) -> list[Way]:
    return [
        sadd_way(1000),
        bloom_way(1000, error_rate),
        bloom_way(8192, error_rate),
        dsbf_way(1000, error_rate, leaf_bits),
        dsbf_way(1000, error_rate, leaf_bits, grown=10),
        dsbf_way(8192, error_rate, leaf_bits, grown=10),
        exact_way(1000),
        exact_way(8192),
        exact_way(1000, integrations=True),
    ]


def fleet_ways(
    error_rate: float, leaf_bits: int, bloom_sizes: tuple[str, ...] = ("data",)
) -> list[Way]:
    """bloom_sizes: "data" (the Bloom filter sized for the fleet's distinct URLs) and/or
    "default" (created at defaults.CAPACITY, as a crawl that names no capacity gets it)."""
    sized = {"data": None, "default": defaults.CAPACITY}
    return [
        sadd_way(1000, FLEET_SHARDS),
        *[bloom_way(1000, error_rate, sized[s]) for s in bloom_sizes],
        dsbf_way(1000, error_rate, leaf_bits),
        exact_way(1000),
        exact_way(1000, integrations=True),
    ]


# --------------------------------------------------------------------------- one client


@dataclass
class Row:
    """One way on one stream; per-URL figures are per URL checked unless they say distinct."""

    stream: str
    label: str
    kind: str
    batch: int
    note: str
    urls: int = 0
    distinct: int = 0
    seconds: float = 0.0
    client_cpu_seconds: float = 0.0
    reported_new: int = 0
    false_positives: int = 0  # new URL answered seen
    false_negatives: int = 0  # seen URL answered new
    new_twice: int = 0
    memory_bytes: int = 0
    memory_bytes_live: int = 0  # without the keys that expire by themselves
    memory_bytes_reloaded: int = 0  # splittable: then once a fresh client has loaded the tree
    expiring_keys: int = 0
    key_bytes: int = 0  # MEMORY USAGE (every element) of the keys that stay
    server_cpu_seconds: float = 0.0
    command_usec: dict[str, int] = field(default_factory=dict)
    command_calls: dict[str, int] = field(default_factory=dict)
    probe_urls: int = 0
    probe_false_positives: int = 0
    attempts: int = 0
    foreign_connections: int = 0

    @property
    def cpu_s_per_million(self) -> float:
        return self.server_cpu_seconds / self.urls * 1e6

    @property
    def urls_per_s(self) -> float:
        return self.urls / self.seconds

    @property
    def bytes_per_distinct(self) -> float:
        return self.memory_bytes / self.distinct

    @property
    def live_bytes_per_distinct(self) -> float:
        return self.memory_bytes_live / self.distinct

    @property
    def reloaded_bytes_per_distinct(self) -> float:
        return self.memory_bytes_reloaded / self.distinct

    @property
    def key_bytes_per_distinct(self) -> float:
        return self.key_bytes / self.distinct

    @property
    def probe_fp_rate(self) -> float | None:
        return self.probe_false_positives / self.probe_urls if self.probe_urls else None


def _delta(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]) -> dict[str, Any]:
    out = {}
    for command, (calls, usec) in after.items():
        c0, u0 = before.get(command, (0, 0))
        if command != "info" and calls != c0:
            out[command] = (calls - c0, usec - u0)
    return out


def expiring_keys(server: Server) -> list[bytes]:
    """Keys with a TTL: a split's replaced leaves, receipts; they go by themselves."""
    keys = list(server.client.scan_iter(count=1000))
    pipe = server.client.pipeline(transaction=False)
    for k in keys:
        pipe.pttl(k)
    return [k for k, ttl in zip(keys, pipe.execute(), strict=True) if ttl > 0]


def key_bytes(server: Server) -> int:
    """MEMORY USAGE of every key, every element counted: the data alone, without what a server
    holds whatever it stores (a used_memory delta also counts the Lua state's residue)."""
    keys = list(server.client.scan_iter(count=1000))
    pipe = server.client.pipeline(transaction=False)
    for k in keys:
        pipe.memory_usage(k, samples=0)
    return sum(pipe.execute())


def measure_once(
    server: Server, way: Way, row: Row, lines: list[str], expected: list[bool], probe: list[str]
) -> None:
    before_mem = server.used()  # before creating the filter: its allocation counts
    way.create(server.url, row.distinct)
    opened = way.open(server.url)
    conn0, cpu0, cs0 = server.connections(), server.cpu(), server.commandstats()
    c0, t0 = time.process_time(), time.perf_counter()
    answers = opened.run(lines, way.batch)
    row.seconds, row.client_cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    cpu1, cs1 = server.cpu(), server.commandstats()
    row.foreign_connections = server.connections() - conn0
    row.server_cpu_seconds = cpu1 - cpu0
    delta = _delta(cs1, cs0)
    row.command_calls = {c: n for c, (n, _) in sorted(delta.items())}
    row.command_usec = {c: u for c, (_, u) in sorted(delta.items())}
    row.reported_new = sum(answers)
    pairs = list(zip(expected, answers, strict=True))
    row.false_positives = sum(1 for e, a in pairs if e and not a)
    row.false_negatives = sum(1 for e, a in pairs if a and not e)
    claims = Counter(u for u, a in zip(lines, answers, strict=True) if a)
    row.new_twice = sum(1 for times in claims.values() if times > 1)
    if probe:
        row.probe_urls = len(probe)
        row.probe_false_positives = sum(opened.run(probe, way.batch, op="contains"))
    opened.close()
    server.drop_clients()
    server.client.script_flush()  # the script cache is per server, not per URL
    row.memory_bytes = server.used() - before_mem
    expiring = expiring_keys(server)
    row.expiring_keys = len(expiring)
    for start in range(0, len(expiring), 1000):
        server.client.delete(*expiring[start : start + 1000])
    row.memory_bytes_live = server.used() - before_mem
    row.key_bytes = key_bytes(server)
    if way.kind == "dsbf":
        row.memory_bytes_reloaded = reloaded(server, way, lines[:1]) - before_mem


def reloaded(server: Server, way: Way, lines: list[str]) -> int:
    """used_memory once every client's announcement of the tree it read has lapsed and a fresh
    client has loaded the tree (a load frees the leaves splits retired that no reader needs;
    closing a client frees none), its connection gone: a splittable filter left at rest."""
    deadline = time.monotonic() + 120
    while any(server.client.exists(k) for k in server.client.scan_iter(match="*:readers")):
        if time.monotonic() > deadline:
            raise RuntimeError("a readers' announcement outlived 120 s")
        time.sleep(0.5)
    opened = way.open(server.url)
    opened.run(lines, 1, op="contains")
    opened.close()
    server.drop_clients()
    server.client.script_flush()
    for k in expiring_keys(server):  # the fresh client's own announcement
        server.client.delete(k)
    return server.used()


def measure_row(
    folder: Path,
    way: Way,
    stream: str,
    lines: list[str],
    expected: list[bool],
    probe: list[str],
    log: Callable[[str], None],
) -> Row:
    """The way on a fresh private server; again if its window saw another connection."""
    for attempt in range(1, ATTEMPTS + 1):
        row = Row(stream, way.label, way.kind, way.batch, way.note, len(lines), sum(expected))
        row.attempts = attempt
        with private_server(folder) as server:
            measure_once(server, way, row, lines, expected, probe)
        log(
            f"  [{stream}] {way.label}, batch {way.batch}: {row.urls_per_s:,.0f} URLs/s, "
            f"server {row.cpu_s_per_million:.2f} s CPU per 1M URLs, "
            f"{row.bytes_per_distinct:.1f} B per distinct URL, FP/FN/twice "
            f"{row.false_positives}/{row.false_negatives}/{row.new_twice}"
        )
        if not row.foreign_connections:
            break
    return row


def small_filter(folder: Path, urls: list[str], error_rate: float) -> dict[str, Any]:
    """A splittable filter planned for 10^8 URLs holding 1,000: in Redis and in memory (default
    leaf size: what a user who names only the capacity gets)."""
    out: dict[str, Any] = {"capacity": SMALL_CAPACITY, "urls": len(urls), "error_rate": error_rate}
    with private_server(folder) as server:
        before = server.used()
        f = SplittableBloomFilter(SMALL_CAPACITY, error_rate, redis=server.url, name=NAME)
        f.add_many(urls)
        out["redis_leaf_bits"], out["redis_memory_usage"] = f.leaf_bits, f.memory_usage()
        f.close()
        server.drop_clients()
        server.client.script_flush()
        out["redis_used_memory"] = server.used() - before
    tracemalloc.start()
    try:
        g = SplittableBloomFilter(SMALL_CAPACITY, error_rate)
        g.add_many(urls)
        out["memory_traced_bytes"] = tracemalloc.get_traced_memory()[1]  # peak
        out["memory_memory_usage"] = g.memory_usage()
        g.close()
    finally:
        tracemalloc.stop()
    return out


# --------------------------------------------------------------------------- the fleet


def _fleet_client(way: Way, url: str, index: int, lines: list[str], barrier: Any, out: Any) -> None:
    """One client process (forked): open, wait for the others, check-and-add its share."""
    try:
        opened = way.open(url)
        barrier.wait(timeout=300)  # every client open: the parent reads the servers' CPU
        barrier.wait(timeout=300)  # go
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
        answers = opened.run(lines, way.batch)
        t1 = time.perf_counter()
        opened.close()
        out.put((index, t0, t1, [i for i, a in enumerate(answers) if a], None))
    except BaseException as exc:
        barrier.abort()
        out.put((index, 0.0, 0.0, [], f"{type(exc).__name__}: {exc}"))


def fleet_cell(
    target: Server | Cluster, where: str, way: Way, clients: int, lines: list[str], distinct: int
) -> dict[str, Any]:
    """`clients` processes share the lines (client i checks lines i, i + clients, ...); URLs/s
    from the first start to the last finish; server CPU per node over the same window."""
    target.flush()
    used0 = sum(n.used() for n in target.nodes)
    cs0 = [n.commandstats() for n in target.nodes]
    way.create(target.url, distinct)
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [
        ctx.Process(
            target=_fleet_client, args=(way, target.url, i, lines[i::clients], barrier, out)
        )
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    errors: list[str] = []
    cpu0 = [n.cpu() for n in target.nodes]
    try:
        barrier.wait(timeout=300)
        cpu0 = [n.cpu() for n in target.nodes]
        barrier.wait(timeout=300)
    except Exception as exc:  # a client failed to open; it says why below
        errors.append(f"start: {type(exc).__name__}")
    replies = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    cpu = [n.cpu() - c for n, c in zip(target.nodes, cpu0, strict=True)]
    commands: Counter[str] = Counter()
    usec: Counter[str] = Counter()
    for n, before in zip(target.nodes, cs0, strict=True):
        for c, (calls, us) in _delta(n.commandstats(), before).items():
            commands[c] += calls
            usec[c] += us
    memory = at_rest(target, used0)
    errors += [str(r[4]) for r in replies if r[4]]
    ok = [r for r in replies if r[4] is None]
    claims = Counter(lines[i + j * clients] for i, _, _, new, _ in ok for j in new)
    wall = max(r[2] for r in ok) - min(r[1] for r in ok) if ok else math.nan
    busiest = max(cpu)
    return {
        "where": where,
        "way": way.label,
        "note": way.note,
        "batch": way.batch,
        "clients": clients,
        "urls": len(lines),
        "distinct": distinct,
        "seconds": wall,
        "urls_per_s": len(lines) / wall,
        "reported_new": sum(claims.values()),
        "new_twice": sum(1 for n in claims.values() if n > 1),
        "server_cpu_seconds": cpu,
        "server_cpu_s_per_million": sum(cpu) / len(lines) * 1e6,
        "busiest_server_cpu_seconds": busiest,
        "urls_per_busiest_server_cpu_s": len(lines) / busiest if busiest > 0 else math.inf,
        "command_calls": dict(sorted(commands.items())),
        "command_usec": dict(sorted(usec.items())),
        **memory,
        "errors": errors,
    }


def at_rest(target: Server | Cluster, used0: int) -> dict[str, int]:
    """used_memory over the servers minus `used0` at the end of a fleet run, then at rest (the
    clients' connections closed, the script caches flushed, the keys that expire on their own
    deleted), and the MEMORY USAGE of the keys that stay."""
    end = sum(n.used() for n in target.nodes) - used0
    for n in target.nodes:
        n.drop_clients()
        n.client.script_flush()
        pipe = n.client.pipeline(transaction=False)
        for k in expiring_keys(n):  # one by one: a Cluster node refuses keys of two slots
            pipe.delete(k)
        pipe.execute()
    rest = sum(n.used() for n in target.nodes) - used0
    return {
        "memory_end_bytes": end,
        "memory_rest_bytes": rest,
        "key_bytes": sum(key_bytes(n) for n in target.nodes),
    }


def fleet(
    folder: Path,
    ways: list[Way],
    clients: tuple[int, ...],
    lines: list[str],
    log: Callable[[str], None],
    wheres: tuple[str, ...] = ("single", "cluster"),
    repeat: int = 1,
) -> list[dict[str, Any]]:
    """Every way with 1, 4 and 16 clients on one private server, then on a 3-primary Cluster;
    with `repeat`, each round of every cell again (interleaved: the spread of each cell)."""
    distinct = len(set(lines))
    cells = []
    with ExitStack() as stack:
        targets: list[tuple[str, Server | Cluster]] = []
        if "single" in wheres:
            single = Server(folder / "single")
            stack.callback(single.stop)
            targets.append(("1 server", single))
        if "cluster" in wheres:
            cluster = Cluster(folder / "cluster")
            stack.callback(cluster.stop)
            targets.append(("3-primary cluster", cluster))
        for (where, target), rep in itertools.product(targets, range(repeat)):
            for way in ways:
                for n in clients:
                    cell = fleet_cell(target, where, way, n, lines, distinct)
                    cell["repeat"] = rep
                    cells.append(cell)
                    log(
                        f"  [fleet] {where}, {way.label} ({way.note}), {n} clients: "
                        f"{cell['urls_per_s']:,.0f} URLs/s, server CPU "
                        f"{'+'.join(f'{c:.2f}' for c in cell['server_cpu_seconds'])} s"
                        + (f"; ERRORS {cell['errors']}" if cell["errors"] else "")
                    )
    return cells


# --------------------------------------------------------------------------- targets


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def targets(
    rows: list[Row], small: dict[str, Any], cells: list[dict[str, Any]], error_rate: float
) -> list[dict[str, Any]]:
    """Issues 17 and 27's targets, each with its measured value and whether it holds."""
    out: list[dict[str, Any]] = []

    def add(target: str, value: float, limit: float, met: bool, detail: str) -> None:
        out.append({"target": target, "value": value, "limit": limit, "met": met, "detail": detail})

    def at_most(target: str, value: float, key: str, detail: str) -> None:
        add(target, value, TARGETS[key], value <= TARGETS[key], detail)

    for stream in dict.fromkeys(r.stream for r in rows):
        sadd = next(r for r in rows if r.stream == stream and r.kind == "sadd")
        for r in rows:
            if r.stream != stream or r.kind not in ("bloom", "dsbf"):
                continue
            limit = TARGETS["bloom_cpu"] if r.kind == "bloom" else TARGETS["dsbf_cpu"]
            ratio = r.cpu_s_per_million / sadd.cpu_s_per_million
            add(
                f"Redis CPU per URL, {r.label} batch {r.batch}, {stream} stream",
                ratio,
                limit,
                ratio <= limit,
                f"{ratio:.2f}x SADD pipelined (<= {limit}x)",
            )
            if r.kind == "bloom":
                share = r.key_bytes_per_distinct / sadd.key_bytes_per_distinct
                add(
                    f"Redis memory, {r.label} batch {r.batch}, {stream} stream",
                    share,
                    TARGETS["bloom_memory"],
                    share <= TARGETS["bloom_memory"],
                    f"1/{1 / share:.1f} of SADD's (<= 1/40)",
                )
    for where, size in (
        ("Redis", small["redis_used_memory"]),
        ("in memory", small["memory_traced_bytes"]),
    ):
        add(
            f"splittable filter, capacity 10^8 holding {small['urls']:,} URLs, {where}",
            size,
            TARGETS["small_bytes"],
            size < TARGETS["small_bytes"],
            f"{size / 2**20:.2f} MiB (< 2 MiB)",
        )
    for r in rows:
        if r.kind == "dsbf" and "grown" in r.label and r.probe_urls:
            bits = r.key_bytes_per_distinct * 8
            fp = r.probe_fp_rate or 0.0
            met = bits <= TARGETS["grown_bits"] and fp <= error_rate
            add(
                f"splittable filter grown 10x, {r.stream} stream: bits per distinct URL",
                bits,
                TARGETS["grown_bits"],
                met,
                f"{bits:.1f} bits (<= 48) with measured FP {fp:.5f} on {r.probe_urls:,} URLs "
                f"never inserted (<= {error_rate})",
            )
    for r in rows:
        sadd = next(s for s in rows if s.stream == r.stream and s.kind == "sadd")
        if r.kind == "exact":
            ratio = r.cpu_s_per_million / sadd.cpu_s_per_million
            key = "exact_cpu_new" if r.stream == "new" else "exact_cpu_repeats"
            at_most(
                f"Redis CPU per URL, {r.label} batch {r.batch}, {r.stream} stream",
                ratio,
                key,
                f"{ratio:.2f}x SADD pipelined (<= {TARGETS[key]}x)",
            )
        if r.kind == "dsbf" and "grown" in r.label:
            left = r.live_bytes_per_distinct * 8  # no client since: retired leaves stay
            rest = r.reloaded_bytes_per_distinct * 8 if r.memory_bytes_reloaded else left
            end = r.bytes_per_distinct * 8 / rest
            what = f"splittable filter grown, batch {r.batch}, {r.stream} stream"
            at_most(
                f"{what}: used_memory at the end vs at rest",
                end,
                "grown_end_vs_rest",
                f"{end:.2f}x ({r.bytes_per_distinct * 8:.1f} vs {rest:.1f} bits per distinct "
                f"URL once a fresh client loaded the tree; {left:.1f} as the last client left "
                "it, timers' keys deleted; <= 2x)",
            )
            at_most(
                f"{what}: bits per distinct URL at rest (used_memory)",
                rest,
                "grown_rest_bits",
                f"{rest:.1f} bits (<= 40)",
            )
    by = {(c["where"], c["way"], c["clients"]): c for c in cells}
    counts = sorted({c["clients"] for c in cells})
    for way in dict.fromkeys(c["way"] for c in cells):
        pairs = [
            (by.get(("1 server", way, n)), by.get(("3-primary cluster", way, n))) for n in counts
        ]
        if not all(one and many for one, many in pairs):
            continue
        one, many = pairs[-1]
        wall = many["urls_per_s"] / one["urls_per_s"]
        bound = ", ".join(  # one server's CPU / the busiest primary's, for the same URLs
            f"{o['busiest_server_cpu_seconds'] / m['busiest_server_cpu_seconds']:.2f}x with "
            f"{o['clients']}"
            for o, m in pairs
        )
        add(
            f"{counts[-1]} clients on the 3-primary cluster vs one server, {way}",
            wall,
            TARGETS["cluster"],
            wall >= TARGETS["cluster"],
            f"{wall:.2f}x the URLs/s (>= 2.5x); server-bound (one server's CPU / the busiest "
            f"primary's, same URLs and clients): {bound} clients",
        )
    for where in dict.fromkeys(c["where"] for c in cells):
        for way in dict.fromkeys(c["way"] for c in cells):
            one, many = by.get((where, way, counts[0])), by.get((where, way, counts[-1]))
            if not (one and many) or one is many:
                continue
            growth = many["server_cpu_s_per_million"] / one["server_cpu_s_per_million"]
            at_most(
                f"{counts[-1]} clients vs {counts[0]}, server CPU per URL, {way}, {where}",
                growth,
                "fleet_growth",
                f"{growth:.2f}x ({many['server_cpu_s_per_million']:.2f} vs "
                f"{one['server_cpu_s_per_million']:.2f} s per 1M URLs; <= 1.5x)",
            )
    for (where, way, n), c in by.items():
        single = by.get(("1 server", way, n))
        if where != "3-primary cluster" or single is None:
            continue
        share = max(c["server_cpu_seconds"]) / sum(c["server_cpu_seconds"])
        at_most(
            f"cluster, busiest primary's share of the server CPU, {way}, {n} clients",
            share,
            "cluster_busiest",
            f"{share:.0%} (<= 40%)",
        )
        total = sum(c["server_cpu_seconds"]) / sum(single["server_cpu_seconds"])
        at_most(
            f"cluster's server CPU vs one server's, {way}, {n} clients",
            total,
            "cluster_sum",
            f"{total:.2f}x (<= 1.15x)",
        )
    return out


# --------------------------------------------------------------------------- report


def _bits(b: float) -> str:
    return f"{b:.1f} B ({b * 8:.0f} bits)"


def markdown(
    rows: list[Row],
    small: dict[str, Any],
    cells: list[dict[str, Any]],
    checks: list[dict[str, Any]],
    meta: dict[str, Any],
) -> str:
    out = [
        f"- {k}: {meta[k]}"
        for k in (
            "command",
            "date",
            "python",
            "redis_py",
            "hiredis",
            "redis_server",
            "cpu",
            "load",
            "data",
            "bf_madd",
        )
    ]
    for stream in dict.fromkeys(r.stream for r in rows):
        part = [r for r in rows if r.stream == stream]
        sadd = next(r for r in part if r.kind == "sadd")
        out += ["", f'### Stream "{stream}": {meta["streams"][stream]}', ""]
        out += [
            "| way | batch | Redis CPU s per 1M URLs | × SADD | URLs/s (1 client) | × SADD "
            "| Redis memory per distinct URL (keys) | × SADD | used_memory delta "
            "| without expiring keys | FP / FN / new twice | FP rate, never-inserted URLs "
            "| attempts |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in part:
            probe = f"{r.probe_fp_rate:.5f}" if r.probe_fp_rate is not None else "—"
            out.append(
                f"| {r.label} ({r.note}) | {r.batch} | {r.cpu_s_per_million:.2f} "
                f"| {r.cpu_s_per_million / sadd.cpu_s_per_million:.2f} "
                f"| {r.urls_per_s:,.0f} | {r.urls_per_s / sadd.urls_per_s:.2f} "
                f"| {_bits(r.key_bytes_per_distinct)} "
                f"| 1/{sadd.key_bytes_per_distinct / r.key_bytes_per_distinct:.1f} "
                f"| {_bits(r.bytes_per_distinct)} | {_bits(r.live_bytes_per_distinct)}"
                + (
                    f"; after a reload {_bits(r.reloaded_bytes_per_distinct)} "
                    if r.memory_bytes_reloaded
                    else " "
                )
                + f"| {r.false_positives:,} / {r.false_negatives:,} / {r.new_twice:,} "
                f"| {probe} | {r.attempts} |"
            )
        out += [
            "",
            "| way | batch | commandstats µs per URL checked, by command (calls per 1000 URLs) "
            "| client CPU µs per URL |",
            "|---|---:|---|---:|",
        ]
        for r in part:
            big = sorted(r.command_usec.items(), key=lambda cu: -cu[1])
            cmds = ", ".join(
                f"{c} {u / r.urls:.2f} ({r.command_calls[c] / r.urls * 1000:.1f} calls)"
                for c, u in big
                if u / r.urls >= 0.01  # the rest (JSON: command_usec) are noise
            )
            out.append(
                f"| {r.label} | {r.batch} | {cmds} | {r.client_cpu_seconds / r.urls * 1e6:.2f} |"
            )
    out += [
        "",
        f"Splittable filter, capacity {small['capacity']:.0e} holding {small['urls']:,} URLs "
        f"(default leaves: {small['redis_leaf_bits']:,} bits): Redis used_memory "
        f"{small['redis_used_memory'] / 2**20:.2f} MiB (memory_usage() "
        f"{small['redis_memory_usage'] / 2**20:.2f} MiB); in memory, peak traced "
        f"{small['memory_traced_bytes'] / 2**20:.2f} MiB (memory_usage() "
        f"{small['memory_memory_usage'] / 2**20:.2f} MiB).",
    ]
    if cells:
        out += ["", f"Fleet: {meta['fleet']}", ""]
        out += [
            "| way | where | clients | URLs/s (all clients) | reported new / distinct "
            "| new twice | server CPU s per 1M URLs (all servers) | CPU s per server "
            "| URLs per busiest server's CPU s | memory per distinct URL: end of run / at rest "
            "/ keys |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in cells:
            out.append(
                f"| {c['way']} ({c['note']}) | {c['where']} | {c['clients']} "
                f"| {c['urls_per_s']:,.0f} | {c['reported_new']:,} / {c['distinct']:,} "
                f"| {c['new_twice']} | {c['server_cpu_s_per_million']:.2f} "
                f"| {' + '.join(f'{s:.2f}' for s in c['server_cpu_seconds'])} "
                f"| {c['urls_per_busiest_server_cpu_s']:,.0f} "
                f"| {c['memory_end_bytes'] / c['distinct']:.1f} / "
                f"{c['memory_rest_bytes'] / c['distinct']:.1f} / "
                f"{c['key_bytes'] / c['distinct']:.1f} B |"
                + (f" errors: {c['errors']}" if c["errors"] else "")
            )
    out += ["", "Targets (issues 17 and 27):", ""]
    out += [f"- {_verdict(c['met'])}: {c['target']}: {c['detail']}" for c in checks]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke test: small streams")
    ap.add_argument("--lines", type=int, help="repeats stream: first lines (default 1M)")
    ap.add_argument("--new", type=int, help="new stream: distinct lines (default 500k)")
    ap.add_argument("--probe", type=int, help="never-inserted lines for FP (default 100k)")
    ap.add_argument("--fleet-lines", type=int, help="lines the fleet checks (default 500k)")
    ap.add_argument("--no-fleet", action="store_true", help="skip the fleet runs")
    ap.add_argument("--no-table", action="store_true", help="skip the one-client table")
    ap.add_argument(
        "--clients",
        default=",".join(map(str, FLEET_CLIENTS)),
        help="the fleet's client counts (comma-separated)",
    )
    ap.add_argument(
        "--where",
        default="single,cluster",
        help="the fleet's servers: single (one server), cluster (3 primaries), or both",
    )
    ap.add_argument("--repeat", type=int, default=1, help="fleet rounds (each cell once per round)")
    ap.add_argument(
        "--kinds",
        default="sadd,bloom,dsbf,exact",
        help="only these ways (comma-separated among sadd, bloom, dsbf, exact; SADD is always "
        "measured: it is every ratio's peer)",
    )
    ap.add_argument(
        "--bloom-capacity",
        default="data",
        help="the fleet's RedisBloomFilter: data (sized for the distinct URLs), default (the "
        f"library's default capacity, {defaults.CAPACITY:,}), or both (comma-separated)",
    )
    ap.add_argument("--error-rate", type=float, default=ERROR_RATE)
    ap.add_argument("--leaf-bits", type=int, help=f"splittable leaves (default {LEAF_BITS:,})")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument(
        "--json",
        type=Path,
        help='raw numbers, key "shared" (default: results.json here; none with --quick)',
    )
    args = ap.parse_args(argv)
    kinds = {"sadd", *args.kinds.split(",")}
    if not kinds <= {"sadd", "bloom", "dsbf", "exact"}:
        ap.error(f"--kinds: unknown kind among {args.kinds!r}")
    if not args.data.is_file():
        ap.error(f"no data file at {args.data} (--data: the URL development set, urls-dev.txt.gz)")
    q = args.quick
    n_lines = args.lines or (10_000 if q else 1_000_000)
    n_new = args.new or (5_000 if q else 500_000)
    n_probe = args.probe or (2_000 if q else 100_000)
    n_fleet = args.fleet_lines or (5_000 if q else 500_000)
    leaf_bits = args.leaf_bits or (1 << 14 if q else LEAF_BITS)
    clients = (1, 4) if q else tuple(int(c) for c in args.clients.split(","))
    wheres = tuple(args.where.split(","))
    if not clients or min(clients) < 1 or not set(wheres) <= {"single", "cluster"}:
        ap.error("--clients: positive counts; --where: single and/or cluster")
    bloom_sizes = tuple(args.bloom_capacity.split(","))
    if not bloom_sizes or not set(bloom_sizes) <= {"data", "default"}:
        ap.error("--bloom-capacity: data and/or default")
    load0 = os.getloadavg()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    repeats, empty = load_lines(args.data, n_lines)
    fresh = distinct_lines(args.data, n_new + n_probe)
    new, probe = fresh[:n_new], fresh[n_new:]
    streams = {
        "repeats": (repeats, reference(repeats), []),
        "new": (new, [True] * len(new), probe),
    }
    log(
        f"repeats: {len(repeats):,} lines, {sum(streams['repeats'][1]):,} distinct; new: "
        f"{len(new):,} distinct, {len(probe):,} more for FP"
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="urlseen-redis-bench-") as tmp:
        folder = Path(tmp)
        for name, (lines, expected, never) in streams.items():
            for way in table_ways(args.error_rate, leaf_bits):
                if way.kind not in kinds or args.no_table:
                    continue
                rows.append(measure_row(folder, way, name, lines, expected, never, log))
        small = small_filter(folder, new[:SMALL_URLS], args.error_rate)
        log(f"  small splittable filter: {small}")
        cells: list[dict[str, Any]] = []
        if not args.no_fleet:
            (folder / "single").mkdir()
            (folder / "cluster").mkdir()
            all_ways = fleet_ways(args.error_rate, leaf_bits, bloom_sizes)
            ways = [w for w in all_ways if w.kind in kinds]
            cells = fleet(folder, ways, clients, repeats[:n_fleet], log, wheres, args.repeat)
        with private_server(folder) as server:
            version = server.version()
    checks = targets(rows, small, cells, args.error_rate)
    load1 = os.getloadavg()
    meta: dict[str, Any] = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "redis_py": redis.__version__,
        "hiredis": redis.utils.HIREDIS_AVAILABLE,
        "redis_server": f"{version}, private servers started by this script (loopback, "
        "no persistence), a fresh one per table row",
        "cpu": f"{cpu_model()} ({os.cpu_count()} logical CPUs), {platform.platform()}",
        "load": f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end "
        "(1-minute; other users of the machine included)",
        "data": str(args.data),
        "bf_madd": "BF.MADD " + BF_MADD,
        "streams": {
            "repeats": f"the first {n_lines:,} dev lines ({empty} empty dropped): "
            f"{len(repeats):,} URLs checked, {sum(streams['repeats'][1]):,} distinct",
            "new": f"the first {len(new):,} distinct dev lines, each checked once (all new); "
            f"FP rate on the next {len(probe):,} distinct lines, never inserted",
        },
        "fleet": f"the first {min(n_fleet, len(repeats)):,} lines of the repeats stream, "
        "split among the client processes (client i takes lines i, i+C, ...), batch 1000; "
        f"the machine has {os.cpu_count()} cores for all clients and servers",
        "error_rate": args.error_rate,
        "leaf_bits": leaf_bits,
    }
    print(markdown(rows, small, cells, checks, meta))
    args.json = args.json or (None if args.quick else RESULTS)
    if args.json:
        payload = {
            "meta": meta,
            "rows": [
                {
                    **asdict(r),
                    "cpu_s_per_million": r.cpu_s_per_million,
                    "urls_per_s": r.urls_per_s,
                    "bytes_per_distinct": r.bytes_per_distinct,
                    "live_bytes_per_distinct": r.live_bytes_per_distinct,
                    "key_bytes_per_distinct": r.key_bytes_per_distinct,
                    "reloaded_bytes_per_distinct": r.reloaded_bytes_per_distinct,
                    "probe_fp_rate": r.probe_fp_rate,
                }
                for r in rows
            ],
            "small_splittable": small,
            "fleet": cells,
            "targets": checks,
            "ports": PORTS,
        }
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(json.dumps(kept | {"shared": payload}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
