#!/usr/bin/env python3
"""Where the splittable filter's Redis CPU per new URL goes (issue 17, part E).

On private redis-servers (benchmarks/redis/shared.py's Server: loopback, no persistence, one per
measurement), server CPU from `INFO cpu` used_cpu_sys + used_cpu_user deltas:

1. per new URL, RedisBloomFilter against SplittableBloomFilter (sized for the URLs, the
   leaves of benchmarks/redis/shared.py's table), batch 1000, alternately twice each: what
   the splittable filter costs beyond the Bloom filter's batch script;
2. the share of it spent in the splits' and growths' copies (the COPY calls, timed one by one);
3. the fixed cost per leaf of one check-and-add plus its acknowledgement: batches of one new
   key in each of L fresh leaves (far below their write limit), for two values of L.

Data: the first --new distinct lines of the dev set (raw lines, no canonicalization).

    python benchmarks/splittable/cpu.py   # writes key cpu of results.json here
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "redis"))
import shared as rs  # benchmarks/redis/shared.py
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.splittable.filter import SplittableBloomFilter
from urlseen.splittable.tree import LeafOp

BATCH = 1000
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "cpu"


def per_new_url(server: rs.Server, kind: str, urls: list[str]) -> dict[str, Any]:
    """Server CPU per new URL of one filter kind; for the splittable one, its copies apart."""
    n, copy = len(urls), {"cpu": 0.0, "keys": 0}
    if kind == "bloom":
        seen: Any = RedisBloomFilter(server.url, "b", capacity=n, error_rate=rs.ERROR_RATE)
    else:
        SplittableBloomFilter(n, rs.ERROR_RATE, redis=server.url, name="b", leaf_bits=rs.LEAF_BITS)
        seen = SplittableBloomFilter(redis=server.url, name="b")
        store = seen._store
        real: Callable[..., Any] = store.check_and_add

        def timed(groups: Any, op: LeafOp, *args: Any) -> Any:
            if op != LeafOp.COPY:
                return real(groups, op, *args)
            before = server.cpu()
            out = real(groups, op, *args)
            copy["cpu"] += server.cpu() - before
            copy["keys"] += sum(map(len, groups.values()))
            return out

        store.check_and_add = timed
    before = server.cpu()
    for start in range(0, n, BATCH):
        seen.add_many(urls[start : start + BATCH])
    total = server.cpu() - before
    seen.close()
    out = {"kind": kind, "urls": n, "us_per_new_url": 1e6 * total / n}
    if kind == "dsbf":
        out |= {"copy_us_per_url": 1e6 * copy["cpu"] / n, "copies_per_url": copy["keys"] / n}
    return out


def per_leaf(server: rs.Server, leaves: int, rounds: int) -> dict[str, Any]:
    """Server CPU of one ADD and its ACK with one new key in each of `leaves` fresh leaves."""
    SplittableBloomFilter(10**7, rs.ERROR_RATE, redis=server.url, name="leaves", leaf_bits=1 << 17)
    seen = SplittableBloomFilter(redis=server.url, name="leaves")
    store = seen._store
    store.native_from = 2.0  # every key new: the snapshot would answer nothing
    ids = [leaf for leaf, _ in seen.tree.leaves()][:leaves]
    width = seen.fingerprint_bytes
    before = server.cpu()
    for _ in range(rounds):
        groups = {leaf: [os.urandom(width)] for leaf in ids}
        store.check_and_add(groups, LeafOp.ADD)  # claimed by the store's own claims ...
        store.check_and_add(groups, LeafOp.ACK)  # ... and released
    cpu = server.cpu() - before
    seen.close()
    return {"leaves": len(ids), "rounds": rounds, "us_per_call_pair": 1e6 * cpu / rounds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new", type=int, default=200_000, help="distinct dev lines (all new)")
    ap.add_argument("--data", type=Path, default=rs.DEFAULT_DATA)
    ap.add_argument("--json", type=Path, default=RESULTS, help="write the raw numbers here")
    args = ap.parse_args(argv)
    urls = rs.distinct_lines(args.data, args.new)
    load0 = os.getloadavg()[0]
    results: dict[str, Any] = {"command": "python " + " ".join(sys.argv), "new_urls": len(urls)}
    with tempfile.TemporaryDirectory(prefix="urlseen-dsbf-cpu-") as tmp:
        runs = []
        for kind in ("bloom", "dsbf", "bloom", "dsbf"):
            with rs.private_server(Path(tmp)) as server:
                runs.append(per_new_url(server, kind, urls))
            print(runs[-1], flush=True)
        leaves = []
        for count in (12, 96):  # first-layer leaves of a filter planned for 10^7 URLs
            with rs.private_server(Path(tmp)) as server:
                leaves.append(per_leaf(server, count, 300))
            print(leaves[-1], flush=True)
    small, large = leaves
    fixed = (large["us_per_call_pair"] - small["us_per_call_pair"]) / (
        large["leaves"] - small["leaves"]
    )
    results |= {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": f"{load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end",
        "per_new_url": runs,
        "per_leaf": leaves,
        "us_per_extra_leaf": fixed,
    }
    print(f"server CPU per extra leaf in a batch (check-and-add + acknowledgement): {fixed:.1f} us")
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(json.dumps(kept | {"cpu": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
