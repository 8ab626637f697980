#!/usr/bin/env python3
"""The exact library's server CPU against pipelined SADD, source trees interleaved.

One redis-server serves every way (started here on a free loopback port, no persistence; or
given with --redis: a private one, whose database this flushes before each way), in one run,
for several rounds; each round runs SADD and then each source tree's library on each stream,
from an empty database, so a load that drifts during the run shifts neighbours alike. Ways:

* sadd: SADD of each URL's SHA1 hex digest into one set, pipelined `--batch` per round trip
  (scrapy-redis's fingerprint; its users run this with redis-py).
* library: FingerprintLibraryFilter on a RedisLibrary (`urlseen dedup --filter exact
  --redis`), add_many in batches of `--batch`, auto-acknowledged; its urlseen from the tree.

Server CPU is the `INFO cpu` used_cpu_sys + used_cpu_user delta around the check-and-add calls
(creation excluded), in seconds per million URLs; its ratio to SADD's of the same round;
`INFO commandstats` deltas say which commands spent it (µs per URL, calls per 1000 URLs).
Streams (raw lines as keys, empty ones dropped, no canonicalization), as shared.py's:

  new:     the first 500,000 distinct dev lines, each once (every URL new)
  repeats: the first 1,000,000 dev lines (95,489 distinct: 90% repeats)

Every answer is checked: the URLs answered new must be exactly the distinct ones.

Usage (from the repository root, a venv with urlseen installed):

    python benchmarks/redis/library_cpu.py --tree before=/path/to/old/src --tree after=src \\
        --rounds 3 --native
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling, also under runpy
import cpu  # the sibling benchmark: same streams and server readings
from cpu import command_deltas, commandstats, sadd_pipelined, server_cpu

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "library_cpu"
NAME = "bench-cpu"


def lines(path: Path, which: str) -> list[str]:
    """cpu.py's streams, from the dev file at path."""
    os.environ["URLSEEN_DEV_URLS"] = str(path)
    return cpu.lines(which)


def worker(way: str, url: str, path: str, data: str, batch: int) -> dict[str, Any]:
    """Run one way against the server at url: its server CPU, commands and answers."""
    keys = lines(Path(path), data)
    client = redis.Redis.from_url(url)
    seen = None
    if way == "library":
        from urlseen.exact.library_filter import FingerprintLibraryFilter
        from urlseen.shared.library import RedisLibrary

        library = RedisLibrary(url, NAME, len(set(keys)))
        library.contains([bytes(16)])  # loads the script; writes nothing
        seen = FingerprintLibraryFilter(library=library)
    if way == "native":
        step = native_step(client, len(set(keys)), batch)
    time.sleep(0.2)
    used0 = int(client.info("memory")["used_memory"])
    stats0, cpu0, wall0 = commandstats(client), server_cpu(client), time.perf_counter()
    new = 0
    for start in range(0, len(keys), batch):
        part = keys[start : start + batch]
        if way == "native":
            new += step(part)
        elif seen is None:
            new += sadd_pipelined(client, part)
        else:
            new += sum(seen.add_many(part))
    wall, cpu = time.perf_counter() - wall0, server_cpu(client) - cpu0
    commands = {
        name: {"calls_per_1000": calls * 1000 / len(keys), "us_per_url": usec / len(keys)}
        for name, (calls, usec) in command_deltas(stats0, commandstats(client)).items()
    }
    if seen is not None:
        seen.close()
    client.connection_pool.disconnect()  # its query buffer is not data
    time.sleep(0.2)
    used = int(redis.Redis.from_url(url).info("memory")["used_memory"]) - used0
    return {"way": way, "data": data, "urls": len(keys), "distinct": len(set(keys)),
            "bytes_per_distinct_url": used / len(set(keys)), "new": new, "batch": batch,
            "server_cpu_s_per_1M": cpu * 1e6 / len(keys),
            "wall_s": wall, "commands": commands}  # fmt: skip


def native_step(client: Any, distinct: int, batch: int) -> Any:
    """The commands alone that a library without Lua would send per batch (a bound, not a
    filter): in one MULTI per batch, per group touched a write mark (HINCRBY) and a call's
    claim record (HSET, its fingerprints packed), then HSETNX of each distinct MD5 into its
    bucket hash (the 12-byte record), buckets sized as format 4's (~40 records each, fixed
    here: no splits), then the acknowledgement (HDEL of the claim records)."""
    groups, per_group = 16, max(1, distinct // (16 * 40))
    value = bytes(12)

    def step(part: list[str]) -> int:
        fps = list(dict.fromkeys(hashlib.md5(u.encode()).digest() for u in part))
        by_group: dict[int, list[bytes]] = {}
        for fp in fps:
            by_group.setdefault(int.from_bytes(fp[:4], "big") % groups, []).append(fp)
        pipe = client.pipeline(transaction=True)
        for g, mine in by_group.items():
            pipe.hincrby(f"n{{{g}}}", "w:me", 1)
            pipe.hset(f"r{{{g}}}", "me 1", b"claim\n" + b"".join(mine))
        for fp in fps:
            g, b = int.from_bytes(fp[:4], "big") % groups, int.from_bytes(fp[4:8], "big")
            pipe.hsetnx(f"f{{{g}}}:{b % per_group}", fp, value)
        new = sum(pipe.execute()[2 * len(by_group) :])
        pipe = client.pipeline(transaction=False)
        for g in by_group:
            pipe.hdel(f"r{{{g}}}", "me 1")
        pipe.execute()
        return new

    return step


def run_way(tree: str, way: str, url: str, path: Path, data: str, batch: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=tree) if tree else dict(os.environ)
    code = (
        "import sys, json, runpy; m = runpy.run_path(sys.argv[1]); "
        "print(json.dumps(m['worker'](*sys.argv[2:6], int(sys.argv[6]))))"
    )
    argv = [sys.executable, "-c", code, __file__, way, url, str(path), data, str(batch)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{way} failed:\n{out.stderr}")
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if row["new"] != row["distinct"]:
        raise SystemExit(f"{way} answered {row['new']} new of {row['distinct']} distinct")
    return row


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def summary(results: list[dict[str, Any]]) -> list[str]:
    """Per stream and way: median (min-max) server CPU and ratio to SADD of its round."""
    out = []
    for data in dict.fromkeys(r["data"] for r in results):
        rows = [r for r in results if r["data"] == data]
        sadd = {r["round"]: r["server_cpu_s_per_1M"] for r in rows if r["way"] == "sadd"}
        for label in dict.fromkeys(r["tree"] for r in rows):
            mine = [r for r in rows if r["tree"] == label]
            cpu = [r["server_cpu_s_per_1M"] for r in mine]
            ratio = [r["server_cpu_s_per_1M"] / sadd[r["round"]] for r in mine]
            last = mine[-1]["commands"]
            top = sorted(last.items(), key=lambda kv: -kv[1]["us_per_url"])[:7]
            detail = ", ".join(
                f"{k} {v['us_per_url']:.2f} µs ({v['calls_per_1000']:.1f} calls)" for k, v in top
            )
            out.append(
                f"{data:8s} {label:10s} server CPU s/1M URLs {spread(cpu)}  x SADD "
                f"{spread(ratio)}  [{len(mine)} rounds; last round: {detail}]"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis", help="a private server's URL (its db is flushed); default: own")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=SRC")
    ap.add_argument("--data", type=Path, default=DEV)
    ap.add_argument("--streams", default="new,repeats")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--native", action="store_true", help="also the native-commands bound")
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--json", default=str(RESULTS), help="results.json to add a key to; '': none")
    ap.add_argument("--key", default="library_cpu", help="the key of results.json it writes")
    args = ap.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("installed", "")]
    with own_server(args.redis) as url:
        run(args, trees, url)


@contextlib.contextmanager
def own_server(url: str | None) -> Iterator[str]:
    """url, or a redis-server started on a free loopback port (no persistence), stopped after."""
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="urlseen-library-cpu-") as folder:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", folder]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            for _ in range(100):
                with contextlib.suppress(redis.ConnectionError):
                    redis.Redis.from_url(url).ping()
                    break
                time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def run(args: argparse.Namespace, trees: list[tuple[str, ...]], url: str) -> None:
    """Every round of every stream and way against the server at url; the summary."""
    client = redis.Redis.from_url(url)
    print(f"redis-server {client.info('server')['redis_version']}; trees {trees}", flush=True)
    results = []
    for rnd in range(args.rounds):
        for data in args.streams.split(","):
            native = [("native", "")] if args.native else []
            for label, tree in [("sadd", ""), *trees, *native]:
                client.flushdb()
                way = label if label in ("sadd", "native") else "library"
                row = run_way(tree, way, url, args.data, data, args.batch)
                row |= {"round": rnd, "tree": label}
                results.append(row)
                print(f"round {rnd} {data:8s} {label:10s} "
                      f"{row['server_cpu_s_per_1M']:.2f} s/1M", flush=True)  # fmt: skip
    client.flushdb()
    lines_out = summary(results)
    print("\n".join(lines_out))
    if args.json:
        target = Path(args.json)
        kept = json.loads(target.read_text()) if target.exists() else {}
        record = {"argv": sys.argv[1:], "load": os.getloadavg(), "results": results,
                  "summary": lines_out, "at": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                            time.gmtime())}  # fmt: skip
        target.write_text(json.dumps(kept | {args.key: record}, indent=1) + "\n")


if __name__ == "__main__":
    main()
