#!/usr/bin/env python3
"""Standard vs cache-line-blocked layout, with and without software prefetch and huge pages.

Answers the foundation issue's question "does a blocked layout with prefetch beat the standard
layout on this machine, and at what memory cost?" end to end through the Python batch API
(`update`, check-and-add) on the real dev URLs, for a cache-resident (1M) and a far larger
(20M) filter. Same data and suffix rule as benchmarks/peers/run.py (imported from it).

Rows: layout x prefetch distance (0 = off; set process-wide with
_core.set_prefetch_distance) x huge pages (madvise MADV_HUGEPAGE on the anonymous map, as
urlseen's MemoryStore does, or plain 4 KiB pages). Each timed run gets fresh str objects.
Also prints bits per key against the standard formula 1.44*log2(1/p) and the measured
false-positive rate on 1M never-inserted keys.

Usage: python3 benchmarks/peers/layouts.py [--sizes 1000000 20000000] [--data PATH]
"""

from __future__ import annotations

import argparse
import gc
import math
import mmap
import time

from run import DEFAULT_DATA, Workload, load_distinct, probe_keys
from urlseen import _core
from urlseen.bloom import sizing

ERROR_RATE = 0.001
LAYOUT_CODES = {"standard": _core.LAYOUT_STANDARD, "blocked": _core.LAYOUT_BLOCKED}


def make_filter(size: sizing.BloomSize, huge: bool) -> _core.BitFilter:
    # Private, as urlseen's MemoryStore maps it: mmap(-1)'s default, MAP_SHARED, is shmem, where
    # MADV_HUGEPAGE does nothing unless /sys/kernel/mm/transparent_hugepage/shmem_enabled allows.
    buf = mmap.mmap(-1, size.nbytes, flags=mmap.MAP_PRIVATE)
    if huge:
        buf.madvise(mmap.MADV_HUGEPAGE)
    return _core.BitFilter(buf, 0, size.nbits, size.k, LAYOUT_CODES[size.layout])


def run(
    workload: Workload, size: sizing.BloomSize, ahead: int, huge: bool, runs: int
) -> tuple[float, _core.BitFilter]:
    _core.set_prefetch_distance(ahead)
    best, f = 0.0, None
    for _ in range(runs):
        keys = workload.fresh()
        gc.collect()
        gc.disable()
        start = time.perf_counter()
        f = make_filter(size, huge)
        f.update(keys)
        elapsed = time.perf_counter() - start
        gc.enable()
        best = max(best, workload.n / elapsed)
        del keys
    assert f is not None
    return best, f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 20_000_000])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    args = ap.parse_args()
    base, _ = load_distinct(args.data)
    probes = probe_keys(base, 1_000_000)
    ideal = 1.44 * math.log2(1 / ERROR_RATE)
    print(f"error rate {ERROR_RATE}; standard formula 1.44*log2(1/p) = {ideal:.2f} bits/key\n")
    print(
        "| N | layout | bits/key | vs formula | k | prefetch | huge pages | M keys/s "
        "| measured FP |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    default_ahead = _core.set_prefetch_distance(16)
    for n in args.sizes:
        workload = Workload(base, n)
        runs = 3 if n <= 2_000_000 else 1
        for layout in ("standard", "blocked"):
            size = sizing.size_filter(n, ERROR_RATE, layout)
            for ahead in (0, 8, 16, 32):
                for huge in (False, True):
                    rate, f = run(workload, size, ahead, huge, runs)
                    fp = sum(f.contains_many(probes)) / len(probes)
                    print(
                        f"| {n:,} | {layout} | {size.nbits / n:.2f} | "
                        f"{size.nbits / n / ideal - 1:+.1%} | {size.k} | {ahead or 'off'} | "
                        f"{'yes' if huge else 'no'} | {rate / 1e6:.2f} | {fp:.5f} |",
                        flush=True,
                    )
                    del f
        del workload
        gc.collect()
    _core.set_prefetch_distance(default_ahead)


if __name__ == "__main__":
    main()
