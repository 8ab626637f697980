#!/usr/bin/env python3
"""A fleet writing one small filter: the optimistic path's pause after a fallback, on and off.

RedisBloomFilter and the splittable filter's leaves decide new keys from a native snapshot and
let bloom_batch.lua check them; when many clients write one small filter, blocks often change
between a batch's read and its script, which then decides the batch itself and says so ("F"),
and the client pauses the optimistic path (urlseen.shared.bits.OptimisticBackoff). This runs
redis_shared.py's fleet cell (C client processes on one private server, the first --lines
lines of the dev set split among them, batch 1000) with the pause as shipped ("pause") and
with it disabled ("always": the optimistic arguments on every batch), alternating the two
--rounds times, and prints the server CPU per 1M URLs of each (`INFO cpu` deltas).

Usage (from the repository root):

    python benchmarks/redis_optimism_ab.py --json benchmarks/redis-optimism-ab.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import tempfile
from pathlib import Path

from redis_shared import (  # the sibling's
    DEFAULT_DATA,
    LEAF_BITS,
    NAME,
    Opened,
    Server,
    Way,
    fleet_cell,
    load_lines,
)
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.splittable.filter import SplittableBloomFilter


def _always(backoff: object) -> None:
    """Never pause: the optimistic arguments on every batch."""
    backoff.record = backoff.heard = lambda tried, fell: None  # type: ignore[attr-defined]


def way(kind: str, arm: str, error_rate: float) -> Way:
    def create(url: str, n: int) -> None:
        if kind == "bloom":
            RedisBloomFilter(url, NAME, capacity=n, error_rate=error_rate).close()
        else:
            SplittableBloomFilter(n, error_rate, redis=url, name=NAME, leaf_bits=LEAF_BITS).close()

    def open_(url: str) -> Opened:
        if kind == "bloom":
            f = RedisBloomFilter(url, NAME)
            optimism = f._reads.backoff
        else:
            f = SplittableBloomFilter(redis=url, name=NAME)  # type: ignore[assignment]
            optimism = f._store._native_reads.backoff  # type: ignore[attr-defined]
        if arm == "always":
            _always(optimism)
        return Opened(f.add_many, f.contains_many, f.close)

    return Way(f"{kind} {arm}", kind, 1000, create, open_)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="bloom,dsbf")
    ap.add_argument("--error-rate", type=float, default=0.001)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    lines, _ = load_lines(args.data, args.lines)
    distinct = len(set(lines))
    load0 = os.getloadavg()[0]
    cells = []
    with tempfile.TemporaryDirectory() as folder:
        server = Server(Path(folder))
        try:
            for r in range(args.rounds):
                for kind in args.kinds.split(","):
                    arms = ("pause", "always") if r % 2 == 0 else ("always", "pause")
                    for arm in arms:
                        w = way(kind, arm, args.error_rate)
                        cell = fleet_cell(server, "1 server", w, args.clients, lines, distinct)
                        cell.update(kind=kind, arm=arm, round=r)
                        cells.append(cell)
                        print(
                            f"round {r} {kind:5} {arm:6}: server CPU "
                            f"{cell['server_cpu_s_per_million']:.2f} s per 1M URLs, "
                            f"{cell['urls_per_s']:,.0f} URLs/s, new twice {cell['new_twice']}"
                            + (f", ERRORS {cell['errors']}" if cell["errors"] else ""),
                            flush=True,
                        )
        finally:
            server.stop()
    print(f"load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    for kind in args.kinds.split(","):
        for arm in ("pause", "always"):
            got = [c["server_cpu_s_per_million"] for c in cells if (c["kind"], c["arm"]) == (
                kind, arm)]  # fmt: skip
            print(f"{kind:5} {arm:6}: median {statistics.median(got):.2f} s per 1M URLs "
                  f"({', '.join(f'{g:.2f}' for g in got)})")  # fmt: skip
    if args.json:
        meta = {
            "command": "python benchmarks/redis_optimism_ab.py "
            + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "load": [load0, os.getloadavg()[0]],
        }
        args.json.write_text(json.dumps({"meta": meta, "cells": cells}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
