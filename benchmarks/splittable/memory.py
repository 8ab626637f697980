#!/usr/bin/env python3
"""The splittable filter's memory: bits per distinct URL after growing 10x past its capacity,
its false-positive rate on held-out real URLs, and what a small filter planned for many URLs
costs; against SADD (the exact set it replaces) and the 8-byte fingerprints of format 3, in one
run, on one private redis-server that this script starts and stops.

Data: the distinct lines of the dev set (/work/shared/data/urls-dev.txt.gz), in first-seen
order; the first 10 * capacity are inserted, the next --probes (never inserted) measure the
false-positive rate.

Memory, per distinct URL inserted:
* Redis: the sum of MEMORY USAGE over the filter's live keys (tree, and each live leaf's
  meta, bits, fingerprints; split leaves not freed yet are not counted), and INFO used_memory
  minus before: at the end of the fill, as it is (split leaves not freed yet, receipts), and
  at rest (once no key waits on a timer: receipts and, in a format before 7, split leaves
  kept for stale readers; at most REST_WAIT seconds later);
* in memory: the filter's own accounting (its leaves' bit buffers and fingerprint buffers);
* the split of it, from the filter's leaves: Bloom bits, fingerprint bytes kept (count x
  width), and the rest (the fingerprint strings' room to grow, keys, allocator).

Usage (from the repository root; needs redis-server on PATH):
    python benchmarks/splittable/memory.py [--capacity 90000] [--probes 100000] [--json PATH]
    (--json: results.json beside this script by default, key memory)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "redis"))
from library import DEFAULT_DATA, Server  # benchmarks/redis/library.py
from shared import distinct_lines  # benchmarks/redis/shared.py
from urlseen.splittable.filter import SplittableBloomFilter

BATCH = 1000
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "memory"
REST_WAIT = 200.0  # seconds: longer than any key's timer (receipts: 120 s)


def breakdown(seen: SplittableBloomFilter, n: int) -> dict[str, float]:
    """Bits per URL of the live leaves: Bloom bits, fingerprints kept (format 5: the coded
    blocks, and fingerprint_bytes per URL kept raw), their room to grow."""
    leaves = seen.leaves()
    raw = sum(leaf["count"] - leaf["coded"] for leaf in leaves) * seen.fingerprint_bytes
    kept = raw + sum(leaf["code_bytes"] for leaf in leaves)
    allocated = sum(leaf["fingerprint_bytes"] for leaf in leaves)
    return {
        "leaves": len(leaves),
        "mean_fill": sum(leaf["fill"] for leaf in leaves) / len(leaves),
        "bloom_bits_per_url": sum(leaf["bits"] for leaf in leaves) / n,
        "fingerprint_bits_per_url": 8 * kept / n,
        "coded_share": sum(leaf["coded"] for leaf in leaves) / n,
        "fingerprint_room_bits_per_url": 8 * (allocated - kept) / n,
    }


def fill(seen: SplittableBloomFilter, urls: list[str]) -> int:
    new = 0
    for i in range(0, len(urls), BATCH):
        new += sum(seen.add_many(urls[i : i + BATCH]))
    return new


def false_positives(seen: SplittableBloomFilter, probes: list[str]) -> float:
    hits = 0
    for i in range(0, len(probes), 10 * BATCH):
        hits += sum(seen.contains_many(probes[i : i + 10 * BATCH]))
    return hits / len(probes)


def dsbf_row(
    server: Server | None, label: str, urls: list[str], probes: list[str], **params: Any
) -> dict[str, Any]:
    before = server.used() if server else 0
    redis = {"redis": server.url, "name": "bench-" + label} if server else {}
    seen = SplittableBloomFilter(**params, **redis)  # type: ignore[arg-type]
    started = time.perf_counter()
    reported = fill(seen, urls)
    seconds = time.perf_counter() - started
    n = len(urls)
    if server:  # as the fill left it, before anything else reads the tree
        end, volatile = (server.used() - before) / n, volatile_keys(server)
    row: dict[str, Any] = {
        "way": label,
        "store": "redis" if server else "memory",
        "params": params,
        "fingerprint_bytes": seen.fingerprint_bytes,
        "first_leaf_bits": seen.first_leaf_bits,
        "inserted": n,
        "reported_new": reported,
        "grows": seen.grows_done,
        "splits": seen.splits_done,
        "compactions": seen.compactions_done,
        "seconds": seconds,
        "live_bytes_per_url": seen.memory_usage() / n,
        "fp_rate": false_positives(seen, probes),
        "estimated_error_rate": seen.stats().estimated_error_rate,
        **breakdown(seen, n),
    }
    if server:
        row["used_memory_end_bytes_per_url"] = end
        row["volatile_keys_end"] = volatile
        row["rest_wait_seconds"] = at_rest(server)
        row["used_memory_bytes_per_url"] = (server.used() - before) / n
    seen.destroy()
    return row


def volatile_keys(server: Server) -> int:
    """Keys with a timer (INFO keyspace's `expires`, database 0)."""
    return int(server.client.info("keyspace").get("db0", {}).get("expires", 0))


def at_rest(server: Server) -> float:
    """Wait until no key has a timer (at most REST_WAIT s); the seconds waited."""
    started = time.perf_counter()
    while volatile_keys(server) and time.perf_counter() - started < REST_WAIT:
        time.sleep(1.0)
    return time.perf_counter() - started


def sadd_row(server: Server, urls: list[str]) -> dict[str, Any]:
    """The exact set the filter replaces: SADD of each URL's SHA1 hex (scrapy-redis's way)."""
    before = server.used()
    pipe = server.client.pipeline(transaction=False)
    for i, url in enumerate(urls):
        pipe.sadd("bench:set", hashlib.sha1(url.encode()).hexdigest())
        if i % BATCH == BATCH - 1:
            pipe.execute()
    pipe.execute()
    row = {
        "way": "SADD sha1 hex",
        "store": "redis",
        "inserted": len(urls),
        "live_bytes_per_url": int(server.client.memory_usage("bench:set") or 0) / len(urls),
        "used_memory_bytes_per_url": (server.used() - before) / len(urls),
        "fp_rate": 0.0,
    }
    server.client.delete("bench:set")
    return row


def small_filters(server: Server, urls: list[str]) -> dict[str, Any]:
    """Planned for 10^8 URLs, holding 1,000 (Redis); planned for 10^9, empty (this process)."""
    seen = SplittableBloomFilter(10**8, 1e-3, redis=server.url, name="bench-small")
    first_leaves = seen.tree.params["first_leaves"]
    empty = seen.memory_usage()
    seen.add_many(urls[:1000])
    holding = seen.memory_usage()
    seen.destroy()
    tracemalloc.start()
    big = SplittableBloomFilter(10**9, 1e-3)
    allocated, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "redis_capacity_1e8_empty_bytes": empty,
        "redis_capacity_1e8_holding_1000_bytes": holding,
        "memory_capacity_1e9_empty_allocated_bytes": allocated,
        "memory_capacity_1e9_leaves_bytes": big.memory_usage(),
        "redis_capacity_1e8_first_leaves": first_leaves,
        "memory_capacity_1e9_first_leaves": big.tree.params["first_leaves"],
    }


def table(rows: list[dict[str, Any]], sadd: float) -> str:
    out = [
        "| way | store | fp bytes | leaves (fill) | bits/URL live | of which Bloom / fp / fp room "
        "| B/URL used_memory end / at rest | vs SADD | FP on held-out | grows / splits |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "leaves" not in r:
            out.append(
                f"| {r['way']} | {r['store']} | | | {8 * r['live_bytes_per_url']:.1f} | "
                f"| — / {r['used_memory_bytes_per_url']:.1f} | 1 | 0 | |"
            )
            continue
        used = r.get("used_memory_bytes_per_url")
        end = r.get("used_memory_end_bytes_per_url")
        out.append(
            f"| {r['way']} | {r['store']} | {r['fingerprint_bytes']} | {r['leaves']} "
            f"({r['mean_fill']:.2f}) | {8 * r['live_bytes_per_url']:.1f} | "
            f"{r['bloom_bits_per_url']:.1f} / {r['fingerprint_bits_per_url']:.1f} / "
            f"{r['fingerprint_room_bits_per_url']:.1f} | "
            f"{'' if used is None else f'{end:.1f} / {used:.1f}'} | "
            f"1/{sadd / r['live_bytes_per_url']:.1f} | {r['fp_rate']:.5f} | "
            f"{r['grows']} / {r['splits']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--capacity", type=int, default=90_000)
    ap.add_argument("--probes", type=int, default=100_000)
    ap.add_argument("--error-rate", type=float, default=1e-3)
    ap.add_argument("--leaf-bits", type=int, nargs="+", default=[1 << 17, 1 << 20])
    ap.add_argument(
        "--widths", nargs="+", default=["8", "auto"], choices=["8", "auto"],
        help="fingerprint widths: 8 bytes (format 3's), or the filter's own",
    )  # fmt: skip
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    grown = 10 * args.capacity
    lines = distinct_lines(args.data, grown + args.probes)
    if len(lines) < grown + args.probes:
        sys.exit(f"{args.data} has {len(lines)} distinct lines, fewer than {grown + args.probes}")
    urls, probes = lines[:grown], lines[grown:]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on a kill too
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        server = Server(folder)
        try:
            rows.append(sadd_row(server, urls))
            for leaf_bits in args.leaf_bits:
                base = {"capacity": args.capacity, "error_rate": args.error_rate,
                        "leaf_bits": leaf_bits}  # fmt: skip
                widths = ((8, "format-3 width"), (None, "fingerprint_bytes auto"))
                for width, label in [w for w in widths if str(w[0] or "auto") in args.widths]:
                    for store in (server, None):
                        name = f"dsbf {leaf_bits} bits/leaf, {label}"
                        rows.append(
                            dsbf_row(store, name, urls, probes, **base, fingerprint_bytes=width)
                        )
                        print(json.dumps(rows[-1]), file=sys.stderr)
            small = small_filters(server, urls)
            version = server.version()
        finally:
            server.stop()
    sadd = rows[0]["live_bytes_per_url"]
    print(
        f"{len(urls):,} distinct dev URLs inserted (10 x capacity {args.capacity:,}); "
        f"{len(probes):,} held-out probes; error rate {args.error_rate}; Redis {version}\n"
    )
    print(table(rows, sadd))
    print()
    for key, value in small.items():
        print(f"- {key}: {value:,}")
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(
            json.dumps(kept | {"memory": {"rows": rows, "small": small}}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
