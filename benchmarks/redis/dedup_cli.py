#!/usr/bin/env python3
"""The fleet's bill as a user meets it: `urlseen dedup --redis` against pipelined SADD.

Issue 17 opened on this figure: 500,000 distinct dev URLs through `urlseen dedup
--no-canonicalize --redis` cost the server 11.5 s of CPU with `--filter bloom` and 7.7 s with
`--filter dsbf`, against 0.60 s for pipelined SADD of the same URLs. benchmarks/redis/shared.py
measures the filters through the library with the parameters of its table (filters sized for the
URLs); this script runs the command line itself, with its defaults (capacity 10^7, bloom at
f = 10^-6 and dsbf at 10^-3, batches of 8192 lines), so that a large filter's path (blocks read
and written one by one, no whole rewrite) is measured too.

For each stream, one private redis-server (started here on a free port, stopped at the end) is
flushed before each way; the server's CPU is the `INFO cpu` used_cpu_sys + used_cpu_user delta
over the run (the command's start-up included: it writes nothing to Redis before its first
batch), its memory the used_memory delta. Streams (raw lines, no canonicalization):

  new:     the first 500,000 distinct lines of the dev set (every line new)
  repeats: the first 1,000,000 lines of the dev set (90% repeats)

Usage (from the repository root, in a venv with urlseen installed):

    python benchmarks/redis/dedup_cli.py   # writes key dedup_cli of results.json here
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from shared import DEFAULT_DATA, Server, distinct_lines, load_lines  # the sibling's

SADD_BATCH = 1000  # as shared.py's peer: scrapy-redis's fingerprint, pipelined
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "dedup_cli"


def sadd(url: str, path: Path) -> int:
    """Pipelined SADD of each line's SHA1 hex into one set; how many were new."""
    client = redis.Redis.from_url(url)
    lines = path.read_text(encoding="utf-8").splitlines()
    new = 0
    for start in range(0, len(lines), SADD_BATCH):
        pipe = client.pipeline(transaction=False)
        for line in lines[start : start + SADD_BATCH]:
            pipe.sadd("seen", hashlib.sha1(line.encode()).hexdigest())
        new += sum(pipe.execute())
    client.close()
    return new


def dedup(url: str, path: Path, kind: str) -> int:
    """`urlseen dedup --redis` of the file with --filter kind; how many lines it printed."""
    command = [sys.executable, "-m", "urlseen", "dedup", "--no-canonicalize", "--no-progress",
               "--redis", url, "--filter", kind, str(path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, check=True)
    return done.stdout.count(b"\n")


def measure(server: Server, way: str, path: Path) -> dict[str, Any]:
    server.flush()
    used0, cpu0, wall0 = server.used(), server.cpu(), time.perf_counter()
    new = sadd(server.url, path) if way == "sadd" else dedup(server.url, path, way)
    wall, cpu = time.perf_counter() - wall0, server.cpu() - cpu0
    return {"way": way, "new": new, "server_cpu_s": cpu, "wall_s": wall,
            "used_memory_bytes": server.used() - used0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--new", type=int, default=500_000, help="distinct lines of the new stream")
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines of the repeats stream")
    ap.add_argument("--runs", type=int, default=3, help="runs of each way (the median is shown)")
    ap.add_argument("--ways", default="sadd,bloom,dsbf")
    ap.add_argument("--json", type=Path, default=RESULTS, help="write the raw numbers here")
    args = ap.parse_args(argv)
    ways = args.ways.split(",")
    if "sadd" not in ways:
        ways.insert(0, "sadd")  # every ratio's peer
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="urlseen-dedup-cli-") as tmp:
        folder = Path(tmp)
        streams = {
            "new": distinct_lines(args.data, args.new),
            "repeats": load_lines(args.data, args.lines)[0],
        }
        server = Server(folder)
        try:
            print(f"redis-server {server.version()} on port {server.port}; data {args.data}")
            for stream, lines in streams.items():
                path = folder / f"{stream}.txt"
                path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
                distinct = len(set(lines))
                for run in range(args.runs):
                    for way in ways:  # interleaved: the machine's load falls on every way
                        row = measure(server, way, path)
                        row |= {"stream": stream, "run": run, "lines": len(lines),
                                "distinct": distinct}  # fmt: skip
                        results.append(row)
                        cpu, wall = row["server_cpu_s"], row["wall_s"]
                        print(f"  [{stream} run {run}] {way:5s} server CPU {cpu:.3f} s, wall "
                              f"{wall:.1f} s, {row['new']:,} new of {distinct:,} distinct",
                              flush=True)  # fmt: skip
        finally:
            server.stop()
    print(
        "\n| stream | way | server CPU s per 1M lines (median) | × SADD | wall s | new / distinct |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for stream in streams:
        rows = {w: [r for r in results if r["stream"] == stream and r["way"] == w] for w in ways}
        peer = statistics.median(r["server_cpu_s"] for r in rows["sadd"])
        for way, runs in rows.items():
            cpu = statistics.median(r["server_cpu_s"] for r in runs)
            wall = statistics.median(r["wall_s"] for r in runs)
            per = cpu * 1e6 / runs[0]["lines"]
            print(f"| {stream} | {way} | {per:.2f} | {cpu / peer:.2f} | {wall:.1f} | "
                  f"{runs[0]['new']:,} / {runs[0]['distinct']:,} |")  # fmt: skip
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "data": str(args.data)}
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(
            json.dumps(kept | {"dedup_cli": {"meta": meta, "results": results}}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
