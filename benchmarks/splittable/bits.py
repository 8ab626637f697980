#!/usr/bin/env python3
"""Bits per URL of the splittable filter by design (issue 17's <= 48 bits per distinct URL at
f = 1e-3 after growing 10x past capacity, with measured FP <= f), on real URLs, through the
model of its tree in tests/dsbf_bits_model.py (what the designs are, and why a model).

Measured per design: bits per distinct URL of the live leaves at every half capacity from 5x
to 15x, the FP rate on never-inserted URLs at 10x, and the process CPU of splits and grows.
`--check` runs the real SplittableBloomFilter (in-memory store) beside the model.

Data: /work/shared/data/urls-dev.txt.gz, raw lines (no canonicalization), distinct, in file
order: `dev` (the whole file), and its sections `phish` (OpenPhish feed), `news` (news-site
article URLs) and `archive` (ArchiveTeam seed lists); per set, the first 10 x capacity
distinct lines are inserted, the next --probes measure the FP rate. Needs numpy.

Usage (from the repository root; writes results.json beside this script, key "bits"):
    python benchmarks/splittable/bits.py [--sets dev news] [--capacity 50000] [--json PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from dsbf_bits_model import BATCH, DATA, DESIGNS, LEAF_OVERHEAD_BYTES, SECTIONS, Design, Model
from urlseen import _core
from urlseen.splittable import filter as dsbf

RESULTS = Path(__file__).resolve().parent / "results.json"

# -- the runs -------------------------------------------------------------------------------


def distinct_section(name: str, n: int) -> list[str]:
    first, last = SECTIONS[name]
    seen: dict[str, None] = {}
    with gzip.open(DATA, "rt", encoding="utf-8", newline="\n") as fh:
        for number, line in enumerate(fh, 1):
            if number < first:
                continue
            if number > last or len(seen) == n:
                break
            url = line.rstrip("\n")
            if url:
                seen[url] = None
    return list(seen)


def run_design(
    design: Design,
    urls: list[str],
    probes: list[str],
    capacity: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    model = Model(design, capacity, args.error_rate, args.leaf_bits)
    digests = _core.digests(urls, _core.HASH_XXH3_128, 0)
    probe_fps, probe_roots = model.keys(_core.digests(probes, _core.HASH_XXH3_128, 0))
    checkpoints = {int(capacity * m / 2): m / 2 for m in range(10, 31)}
    out: dict[str, Any] = {"design": design.name, "width": model.width, "checkpoints": []}
    started = time.process_time()
    for start in range(0, len(urls), BATCH):
        fps, roots = model.keys(digests[start : start + BATCH])
        model.add(fps, roots)
        done = min(len(urls), start + BATCH)
        if done in checkpoints:
            row = model.bits(done, args.leaf_overhead_bytes)
            out["checkpoints"].append({"growth": checkpoints[done], **row})
        if done == 10 * capacity:
            out["at_10x"] = model.bits(done, args.leaf_overhead_bytes)
            out["fp_rate"] = model.contains(probe_fps, probe_roots) / len(probes)
            out["collision_rate"] = model.collision_rate()
            out["leaf_error_rate"] = model.leaf_error_rate()
    out["cpu_seconds"] = time.process_time() - started
    s = model.stats
    out.update(
        splits=s.splits,
        grows=s.grows,
        copied=s.copied,
        split_seconds=s.split_seconds,
        code_seconds=s.code_seconds,
        compact_seconds=model.compact_seconds(),
        reported_new=s.reported_new,
        inserted=len(urls),
    )
    return out


def check_filter(urls: list[str], probes: list[str], capacity: int, args: Any) -> dict[str, Any]:
    """The real SplittableBloomFilter (in-memory store) on the same URLs: its leaves at 10x
    (compare with the v5 design)."""
    seen = dsbf.SplittableBloomFilter(capacity, args.error_rate, leaf_bits=args.leaf_bits)
    for start in range(0, 10 * capacity, BATCH):
        seen.add_many(urls[start : start + BATCH])
    leaves = seen.leaves()
    n = 10 * capacity
    hits = sum(seen.contains_many(probes))
    return {
        "leaves": len(leaves),
        "mean_fill": sum(leaf["fill"] for leaf in leaves) / len(leaves),
        "bloom": sum(leaf["bits"] for leaf in leaves) / n,
        "fingerprints": 8 * sum(leaf["fingerprint_bytes"] for leaf in leaves) / n,
        "fp_rate": hits / len(probes),
        "splits": seen.splits_done,
        "grows": seen.grows_done,
    }


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| set | design | W bits | leaves (fill) | bits/URL at 10x | Bloom / fp / room / keys | "
        "fp bound | bits/URL 5x-15x (min-max) | FP at 10x | collisions | splits+grows | "
        "copies/URL | split CPU µs/URL copied (coding) | compaction µs/URL |",
        "|---|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        if "design" not in r:
            continue
        t = r["at_10x"]
        totals = [c["total"] for c in r["checkpoints"]]
        lines.append(
            f"| {r['set']} | {r['design']} | {r['width']} | {t['leaves']} ({t['mean_fill']:.2f}) "
            f"| **{t['total']:.1f}** | {t['bloom']:.1f} / {t['fingerprints']:.1f} / "
            f"{t['room']:.1f} / {t['leaf_overhead']:.1f} | {t['fingerprint_bound']:.1f} | "
            f"{min(totals):.1f}-{max(totals):.1f} | {r['fp_rate']:.5f} | "
            f"{r['collision_rate']:.1e} | {r['splits']}+{r['grows']} | "
            f"{r['copied'] / r['inserted']:.2f} | "
            f"{1e6 * r['split_seconds'] / max(1, r['copied']):.2f} "
            f"({1e6 * r['code_seconds'] / max(1, r['copied']):.2f}) | "
            f"{1e6 * r['compact_seconds'] / r['inserted']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["dev", "news", "archive"], choices=SECTIONS)
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    ap.add_argument("--capacity", type=int, default=50_000, help="dev's; other sets: 30,000")
    ap.add_argument("--probes", type=int, default=100_000)
    ap.add_argument("--error-rate", type=float, default=1e-3)
    ap.add_argument("--leaf-bits", type=int, default=1 << 17)
    ap.add_argument("--leaf-overhead-bytes", type=int, default=LEAF_OVERHEAD_BYTES)
    ap.add_argument("--check", action="store_true", help="also run the real filter (today)")
    ap.add_argument("--json", type=Path, default=RESULTS, help='merged under key "bits"')
    args = ap.parse_args(argv)
    results: list[dict[str, Any]] = []
    for name in args.sets:
        capacity = args.capacity if name == "dev" else min(args.capacity, 30_000)
        probes = args.probes if name == "dev" else min(args.probes, 50_000)
        lines = distinct_section(name, 15 * capacity + probes)
        if len(lines) < 10 * capacity + probes:
            sys.exit(f"{name}: {len(lines)} distinct lines, fewer than {10 * capacity + probes}")
        grown = min(15 * capacity, len(lines) - probes)
        urls, held_out = lines[:grown], lines[grown : grown + probes]
        if args.check:
            results.append({"set": name, "check": check_filter(urls, held_out, capacity, args)})
            print(json.dumps(results[-1]), file=sys.stderr)
        for design in args.designs:
            row = run_design(DESIGNS[design], urls, held_out, capacity, args)
            results.append({"set": name, "capacity": capacity, "probes": probes, **row})
            print(json.dumps({k: v for k, v in row.items() if k != "checkpoints"}), file=sys.stderr)
    print(f"error rate {args.error_rate}, leaf_bits {args.leaf_bits}, load {os.getloadavg()}")
    print(report(results))
    payload = {"args": vars(args) | {"json": str(args.json)}, "results": results}
    kept = json.loads(args.json.read_text()) if args.json.exists() else {}
    args.json.write_text(json.dumps(kept | {"bits": payload}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
