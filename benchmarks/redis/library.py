#!/usr/bin/env python3
"""The shared exact filter (RedisLibrary): where its memory goes, against SADD.

The study that chose the library's Redis layout (bucket hashes, field and value sizes): memory
with and without receipts, after SCRIPT FLUSH, and by MEMORY USAGE. The fleet's comparison of
every shared way (issue 17: server CPU, memory, throughput, Cluster) is shared.py, which
also runs the exact library.

Every way checks-and-adds the same URLs, in one run, against its own fresh redis-server that
this script starts (loopback, no persistence, default configuration), so that INFO memory and
INFO cpu see nothing but the way being measured:

* URLs/s: client wall time of the check-and-add calls (hashing and formatting included).
* correctness: each new/seen answer against a Python set fed the same lines (exact ways must
  have no wrong answer at all).
* memory: INFO ``used_memory`` after the run minus before (scripts already loaded; the way's
  connection closed, so its query buffer is not counted), per distinct URL; for urlseen also
  after any receipts are deleted (since format urlseen-redis-library/4 only a release or
  forget leaves one, for RECEIPT_SECONDS; a claim leaves none), then also after SCRIPT FLUSH (a
  check: Redis 7 keeps the Lua heap out of used_memory, so this changes nothing), and the sum
  of MEMORY USAGE over the library's keys (which leaves out allocator rounding).
* server CPU: INFO cpu used_cpu_sys + used_cpu_user, seconds per million URLs checked.

Ways:

1. urlseen: FingerprintLibraryFilter on a RedisLibrary (`urlseen dedup --filter exact
   --redis`), add_many in batches of 1000 and 8192; MD5 fingerprints; one library_batch.lua
   call per batch (per 8192 keys) and one acknowledging call. Capacity = the distinct URLs of
   the data (since format 4 the buckets grow with the URLs whatever it says).
2. the scrapy-redis way: SADD of the SHA1 hex digest (40 characters) of each URL, pipelined in
   batches of 1000 (no MULTI); new = SADD returned 1.
3. the naive compact reference: SADD of the 16 raw MD5 bytes, pipelined likewise.

Keys are the raw lines of the dev set (no canonicalization, empty lines dropped), in file order.

Usage (from the repository root; needs redis-server on PATH):

    python benchmarks/redis/library.py    # writes key library of results.json here
    python benchmarks/redis/library.py --lines 100000          # quick
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import itertools
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

import shared  # the sibling benchmark: same data, reference answers and private servers
from shared import Server, reference  # the sibling's
from urlseen.exact.library_filter import FingerprintLibraryFilter
from urlseen.shared.client import RECEIPT_SECONDS
from urlseen.shared.library import RedisLibrary

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "library"
NAME = "bench"
Step = Callable[[dict[str, Any], list[str]], list[bool]]


def load_lines(path: Path, n: int) -> list[str]:
    return shared.load_lines(path, n)[0]


def urlseen_way(capacity: int) -> Callable[[Server], dict[str, Any]]:
    def run(server: Server) -> dict[str, Any]:
        library = RedisLibrary(server.url, NAME, capacity)
        seen = FingerprintLibraryFilter(library=library)
        library.contains([bytes(16)])  # loads the script; writes nothing
        return {"filter": seen, "library": library}

    return run


def measure(
    label: str,
    lines: list[str],
    prepare: Callable[[Server], dict[str, Any]] | None,
    step: Step,
    batch: int,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="urlseen-bench-") as folder:
        server = Server(Path(folder))
        try:
            own = redis.Redis.from_url(server.url)  # the way's connection, closed before reading
            state = prepare(server) if prepare else {"client": own}
            time.sleep(0.2)
            used0, cpu0 = server.used(), server.cpu()
            wall0, proc0 = time.perf_counter(), time.process_time()
            answers: list[bool] = []
            for start in range(0, len(lines), batch):
                answers += step(state, lines[start : start + batch])
            wall, client_cpu = time.perf_counter() - wall0, time.process_time() - proc0
            # Its query buffer (up to a whole batch) is freed with the connection: not data.
            for client in (own, state["library"]._client if "library" in state else own):
                client.connection_pool.disconnect()
            time.sleep(0.2)
            used1, cpu1 = server.used(), server.cpu()
            truth = reference(lines)
            distinct = sum(truth)
            row: dict[str, Any] = {
                "way": label,
                "batch": batch,
                "urls": len(lines),
                "distinct": distinct,
                "reported_new": sum(answers),
                "wrong": sum(a != t for a, t in zip(answers, truth, strict=True)),
                "seconds": wall,
                "urls_per_second": len(lines) / wall,
                "client_cpu_us_per_url": client_cpu / len(lines) * 1e6,
                "server_cpu_s_per_million": (cpu1 - cpu0) / len(lines) * 1e6,
                "bytes_per_distinct_url": (used1 - used0) / distinct,
                "redis_version": server.version(),
            }
            if "library" in state:
                library: RedisLibrary = state["library"]
                receipts = list(server.client.scan_iter(match="*:receipt:*", count=1000))
                row["receipts"] = len(receipts)
                if receipts:
                    server.client.delete(*receipts)
                time.sleep(0.2)
                row["bytes_per_distinct_url_without_receipts"] = (server.used() - used0) / distinct
                # The Lua heap holds the last calls' garbage until its GC runs; SCRIPT FLUSH
                # frees it (Redis 7 reports it apart, as used_memory_vm_eval: a check).
                row["lua_heap_bytes"] = int(server.client.info("memory")["used_memory_vm_eval"])
                server.client.script_flush()
                time.sleep(0.2)
                row["bytes_per_distinct_url_data"] = (server.used() - used0) / distinct
                row["memory_usage_bytes_per_distinct_url"] = library.memory_usage() / distinct
                library._client.connection_pool.disconnect()
                row["records"] = library.count()
                row["buckets"] = len(library._bucket_keys())
                row["groups"] = library.groups
                encodings = {
                    server.client.object("encoding", key)
                    for key in itertools.islice(
                        server.client.scan_iter(match="urlseen:*:f:*", count=1000), 2000
                    )
                }
                row["bucket_encodings"] = sorted(e.decode() for e in encodings)
            return row
        finally:
            server.stop()


def sadd_step(digest: Callable[[bytes], bytes]) -> Step:
    def step(state: dict[str, Any], chunk: list[str]) -> list[bool]:
        pipe = state["client"].pipeline(transaction=False)
        for url in chunk:
            pipe.sadd("bench:fingerprints", digest(url.encode()))
        return [r == 1 for r in pipe.execute()]

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, default=RESULTS, help="write the raw numbers here")
    args = parser.parse_args()

    lines = load_lines(args.data, args.lines)
    distinct = len(set(lines))
    print(f"{len(lines):,} URLs, {distinct:,} distinct, from {args.data}", file=sys.stderr)

    def urlseen_step(state: dict[str, Any], chunk: list[str]) -> list[bool]:
        return list(state["filter"].add_many(chunk))

    rows = []
    for label, prepare, step, batch in (
        ("urlseen RedisLibrary claim (exact, shared)", urlseen_way(distinct),
         urlseen_step, 1000),
        ("urlseen RedisLibrary claim (exact, shared)", urlseen_way(distinct),
         urlseen_step, 8192),
        ("scrapy-redis: SADD sha1 hex (40 chars), pipelined", None,
         sadd_step(lambda b: hashlib.sha1(b).hexdigest().encode()), 1000),
        ("naive compact: SADD of the 16 raw MD5 bytes, pipelined", None,
         sadd_step(lambda b: hashlib.md5(b).digest()), 1000),
    ):  # fmt: skip
        row = measure(label, lines, prepare, step, batch)
        rows.append(row)
        print(
            f"  {label}, batch {batch}: {row['urls_per_second']:,.0f} URLs/s, "
            f"{row['bytes_per_distinct_url']:.1f} B per distinct URL, "
            f"server {row['server_cpu_s_per_million']:.2f} s CPU per 1M, wrong {row['wrong']}",
            file=sys.stderr,
        )

    result = {
        "command": " ".join(["python", *sys.argv]),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "redis_py": redis.__version__,
        "machine": f"{platform.machine()} {platform.platform()}",
        "data": str(args.data),
        "lines": args.lines,
        "urls": len(lines),
        "distinct": distinct,
        "receipt_seconds": RECEIPT_SECONDS,
        "rows": rows,
    }
    print(table(rows))
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(json.dumps(kept | {"library": result}, indent=1) + "\n")


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| way | batch | URLs/s | wrong | B per distinct URL (INFO used_memory) | without "
        "receipts | and after SCRIPT FLUSH | MEMORY USAGE of the keys | server CPU s per 1M URLs "
        "| client CPU µs per URL |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['way']} | {r['batch']} | {r['urls_per_second']:,.0f} | {r['wrong']} | "
            f"{r['bytes_per_distinct_url']:.1f} | "
            f"{r.get('bytes_per_distinct_url_without_receipts', float('nan')):.1f} | "
            f"{r.get('bytes_per_distinct_url_data', float('nan')):.1f} | "
            f"{r.get('memory_usage_bytes_per_distinct_url', float('nan')):.1f} | "
            f"{r['server_cpu_s_per_million']:.2f} | {r['client_cpu_us_per_url']:.2f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    main()
