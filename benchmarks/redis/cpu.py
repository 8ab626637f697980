#!/usr/bin/env python3
"""Redis server CPU per URL of urlseen's shared filters against pipelined SADD (issue 17 A, G).

One private redis-server (started here on a free port, stopped at the end) serves every way, in
one run, one way at a time from an empty database: SADD of each URL's SHA1 hex pipelined in
batches of 1000 (scrapy-redis's fingerprint), RedisBloomFilter (blocked layout, batches of 1000
and 8192, auto-acknowledged; since redis-new-cpu it decides new keys from its native read and
the script checks and writes their blocks; "-native" turns that off and forces the native read
of repeats on every batch, "-lua" turns both off, "-1e7" sizes it for 10^7 URLs, so the native
read fetches blocks instead of the whole bits), SplittableBloomFilter (sized for the distinct
URLs, 16 KiB leaves, batches of 1000) and FingerprintLibraryFilter on a RedisLibrary (batches
of 8192). Each way runs in a subprocess whose urlseen comes from a source tree given with
--tree, so the code before and after a change are measured side by side, against the same
server and peer.

Server CPU is the `INFO cpu` used_cpu_sys + used_cpu_user delta around the check-and-add calls
(filter creation excluded), in seconds per million URLs checked, with its ratio to SADD's in
the same run; `INFO commandstats` deltas say which commands spent it. Data (keys are raw
lines, empty ones dropped, no canonicalization):

  repeats: the first 1,000,000 lines of the dev set (90% repeats)
  new:     the first 500,000 distinct lines of the dev set (every URL new)

Usage (from the repository root, a venv with urlseen installed):

    python benchmarks/redis/cpu.py                            # this tree only
    python benchmarks/redis/cpu.py --tree before=/path/to/old/src --tree after=src
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "cpu"
NAME = "bench"
WAYS = ("sadd", "bloom-1000", "bloom-8192", "dsbf", "library")
BLOOM_VARIANTS = ("bloom-8192-native", "bloom-8192-lua", "bloom-8192-1e7")
DSBF_VARIANTS = ("dsbf-default",)  # the default leaves (8,388,608 bits) instead of 16 KiB
URLSEEN_WAYS = WAYS[1:] + BLOOM_VARIANTS + DSBF_VARIANTS


def lines(which: str) -> list[str]:
    path = Path(os.environ.get("URLSEEN_DEV_URLS", DEV))
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        raw = (line.rstrip("\n") for line in f)
        if which == "repeats":
            return [u for u in itertools.islice(raw, 1_000_000) if u]
        return list(itertools.islice(dict.fromkeys(u for u in raw if u), 500_000))


def server_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    return {k[8:]: (v["calls"], v["usec"]) for k, v in client.info("commandstats").items()}


def sadd_pipelined(client: Any, part: list[str]) -> int:
    """The peer: SADD of each URL's SHA1 hex into one set, one pipeline (no MULTI) per batch."""
    pipe = client.pipeline(transaction=False)
    for key in part:
        pipe.sadd("seen", hashlib.sha1(key.encode()).hexdigest())
    return sum(pipe.execute())


def command_deltas(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """commandstats' (calls, usec) added between two readings, the readings' own left out."""
    return {
        name: (calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
        for name, (calls, usec) in after.items()
        if calls != before.get(name, (0, 0))[0] and name not in ("info", "commandstats")
    }


def filter_for(way: str, url: str, keys: list[str]) -> tuple[Any, int]:
    from urlseen.exact.library_filter import FingerprintLibraryFilter
    from urlseen.shared.bloom import RedisBloomFilter
    from urlseen.shared.library import RedisLibrary
    from urlseen.splittable.filter import SplittableBloomFilter

    n = len(set(keys))
    if way.startswith("bloom-"):
        batch, _, variant = way[6:].partition("-")
        capacity = 10**7 if variant == "1e7" else n
        bloom = RedisBloomFilter(url, NAME, capacity=capacity, error_rate=0.001)
        if variant in ("native", "lua"):  # a tree before the native read ignores it
            bloom.native_from = 0.0 if variant == "native" else 2.0
            bloom.optimistic = False  # the script decides new keys (always before redis-new-cpu)
        return bloom, int(batch)
    if way.startswith("dsbf"):
        leaves = {} if way == "dsbf-default" else {"leaf_bits": 1 << 17}
        return SplittableBloomFilter(n, 0.001, redis=url, name=NAME, **leaves), 1000
    library = RedisLibrary(url, NAME, n)
    library.contains([bytes(16)])  # loads the script; writes nothing
    return FingerprintLibraryFilter(library=library), 8192


def worker(way: str, url: str, data: str) -> dict[str, Any]:
    """Run one way against the server at url; its server CPU and commands."""
    keys = lines(data)
    client = redis.Redis.from_url(url)
    seen, batch = (None, 1000) if way == "sadd" else filter_for(way, url, keys)
    time.sleep(0.2)
    stats0, cpu0, wall0 = commandstats(client), server_cpu(client), time.perf_counter()
    new = 0
    for start in range(0, len(keys), batch):
        part = keys[start : start + batch]
        if seen is None:
            new += sadd_pipelined(client, part)
        else:
            new += sum(seen.add_many(part))
    wall, cpu = time.perf_counter() - wall0, server_cpu(client) - cpu0
    commands = {
        name: {"calls": calls, "s_per_1M": usec / len(keys)}
        for name, (calls, usec) in command_deltas(stats0, commandstats(client)).items()
    }
    if seen is not None:
        seen.close()
    return {"way": way, "data": data, "urls": len(keys), "new": new, "batch": batch,
            "server_cpu_s_per_1M": cpu * 1e6 / len(keys), "wall_s": wall,
            "commands": commands}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_way(tree: str, way: str, url: str, data: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=tree) if tree else dict(os.environ)
    code = "import sys, json, runpy; m = runpy.run_path(sys.argv[1]); " \
        "print(json.dumps(m['worker'](sys.argv[2], sys.argv[3], sys.argv[4])))"  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code, __file__, way, url, data],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode:
        raise SystemExit(f"{way} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=SRC",
        help="a source tree to take urlseen from (repeatable); default: installed",
    )
    ap.add_argument("--data", action="append", choices=("repeats", "new"), default=[])
    also = ", ".join(BLOOM_VARIANTS + DSBF_VARIANTS)
    ap.add_argument("--ways", default=",".join(WAYS), help=f"also: {also}")
    ap.add_argument("--json", type=Path, default=RESULTS, help="write the raw results here")
    args = ap.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("installed", "")]
    ways = args.ways.split(",")
    folder = tempfile.mkdtemp(prefix="urlseen-redis-cpu-")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", folder],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    results = []
    try:
        client = redis.Redis.from_url(url)
        for _ in range(50):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        version = client.info("server")["redis_version"]
        print(f"redis-server {version} on port {port}; trees: {trees}", flush=True)
        for data in args.data or ["repeats", "new"]:
            sadd = None
            for way in ways:
                for label, tree in trees if way in URLSEEN_WAYS else [("peer", "")]:
                    client.flushall()
                    r = run_way(tree, way, url, data)
                    r["tree"] = label
                    results.append(r)
                    if way == "sadd":
                        sadd = r["server_cpu_s_per_1M"]
                    ratio = f"{r['server_cpu_s_per_1M'] / sadd:5.2f}x SADD" if sadd else ""
                    top = sorted(r["commands"].items(), key=lambda kv: -kv[1]["s_per_1M"])[:4]
                    detail = ", ".join(f"{k} {v['s_per_1M']:.2f}" for k, v in top)
                    print(f"{data:8s} {way:11s} {label:9s} new {r['new']:7d}  server CPU "
                          f"{r['server_cpu_s_per_1M']:6.2f} s/1M URLs {ratio}  ({detail})",
                          flush=True)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(json.dumps(kept | {"cpu": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
