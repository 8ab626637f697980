#!/usr/bin/env python3
"""Per-call `add` of N fresh URLs: urlseen against abloom, in interleaved rounds of one process.

peers.py's "add loop" rows (bound method hoisted, fresh `str` keys, the filter's creation timed)
as an A/B: every round runs each variant once, back to back, so a noisy phase of a shared
machine hits them alike; the verdict is the median over rounds of each variant's per-round
ratio of CPU time against abloom's (serializable=True, its XXH64 path). Variants:

  urlseen     urlseen.BloomFilter as shipped (in-memory store: data on a 2 MiB boundary).
  urlseen-4k  the same C filter on a plain private map without huge-page advice: the memory
              placement before the store aligned it (a 1M-URL table then spans ~474 4 KiB pages).
  len         `len` in the same loop: the interpreter's share of a call, no filter at all.

Usage: N=1000000 R=30 V=urlseen,urlseen-4k,len python3 benchmarks/percall_ab.py
"""

from __future__ import annotations

import gc
import mmap
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import abloom

import urlseen
from peers import DEFAULT_DATA, Workload, load_distinct
from urlseen import _core
from urlseen.bloom import sizing


class _Len:
    add = staticmethod(len)


def makers(n: int) -> dict[str, Callable[[], Any]]:
    size = sizing.size_filter(n, 0.001, "blocked")

    def plain_map() -> Any:
        m = mmap.mmap(-1, size.nbytes, flags=mmap.MAP_PRIVATE)
        return _core.BitFilter(
            m, 0, size.nbits, size.k, _core.LAYOUT_BLOCKED, hash=_core.HASH_XXH3_64
        )

    return {
        "urlseen": lambda: urlseen.BloomFilter(n, 0.001),
        "urlseen-4k": plain_map,
        "len": _Len,
        "abloom": lambda: abloom.BloomFilter(n, 0.001, serializable=True),
    }


def run(make: Callable[[], Any], keys: list[str]) -> float:
    """CPU seconds to create a filter and add every key, one call each."""
    c0 = time.process_time()
    add = make().add
    for key in keys:
        add(key)
    return time.process_time() - c0


def main() -> None:
    n = int(os.environ.get("N", 1_000_000))
    rounds = int(os.environ.get("R", 30))
    chosen = [*os.environ.get("V", "urlseen,urlseen-4k").split(","), "abloom"]
    make = makers(n)
    base, _ = load_distinct(DEFAULT_DATA)
    wl = Workload(base, n)
    cpu: dict[str, list[float]] = {v: [] for v in chosen}
    for _ in range(rounds):
        for v in chosen:
            keys = wl.fresh()
            gc.collect()
            gc.disable()
            cpu[v].append(run(make[v], keys))
            gc.enable()
            del keys
    print(f"N={n:,} rounds={rounds} load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        "| variant | best M/CPU s | median M/CPU s | median per-round ratio to abloom (min–max) |"
    )
    print("|---|---:|---:|---|")
    for v, runs in cpu.items():
        ratios = [a / c for c, a in zip(runs, cpu["abloom"], strict=True)]
        print(
            f"| {v} | {n / min(runs) / 1e6:.2f} | {n / statistics.median(runs) / 1e6:.2f} | "
            f"{statistics.median(ratios):.3f} ({min(ratios):.2f}–{max(ratios):.2f}) |"
        )


if __name__ == "__main__":
    main()
