#!/usr/bin/env python3
"""Two or more builds of urlseen._core against each other (and abloom) in one process.

Each build's .so is loaded from its own path (dlopen keeps them apart), so rounds interleave
on the same keys, the same process and the same machine state: on a shared machine that is
what makes a few percent visible. Batch check-and-add of N fresh `str` keys (the data and
suffix rule of benchmarks/peers/run.py) into a blocked filter at error rate 0.001 on a
private, huge-paged anonymous map (as urlseen's MemoryStore), timed with the filter's creation;
wall and process CPU time per round, best and median at the end.

Usage: N=20000000 R=4 API=update AB=1 python3 benchmarks/tools/ab_builds.py \\
           old=/tmp/old_core.so new=src/urlseen/_core.cpython-311-x86_64-linux-gnu.so
(N keys, R rounds, API update | add_many | contains_many, AB=1 adds abloom's update).
"""

from __future__ import annotations

import gc
import importlib.util
import mmap
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from run import DEFAULT_DATA, Workload, load_distinct  # benchmarks/peers/run.py
from urlseen.bloom import sizing


def load_build(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("urlseen._core", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    n = int(os.environ.get("N", 20_000_000))
    rounds = int(os.environ.get("R", 3))
    api = os.environ.get("API", "update")
    builds: dict[str, Any] = {}
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        builds[name] = load_build(path)
    if os.environ.get("AB"):
        import abloom

        builds["abloom"] = None
    base, _ = load_distinct(DEFAULT_DATA)
    wl = Workload(base, n)
    size = sizing.size_filter(n, 0.001, "blocked")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in builds}
    for r in range(rounds):
        for name, mod in builds.items():
            keys = wl.fresh()
            gc.collect()
            gc.disable()
            t0, c0 = time.perf_counter(), time.process_time()
            if mod is None:
                f = abloom.BloomFilter(n, 0.001, serializable=True)
                f.update(keys)
            else:
                m = mmap.mmap(-1, size.nbytes, flags=mmap.MAP_PRIVATE)
                m.madvise(mmap.MADV_HUGEPAGE)
                f = mod.BitFilter(
                    m, 0, size.nbits, size.k, mod.LAYOUT_BLOCKED, hash=mod.HASH_XXH3_64
                )
                getattr(f, api)(keys)
            t, c = time.perf_counter() - t0, time.process_time() - c0
            gc.enable()
            del f, keys
            gc.collect()
            times[name].append((t, c))
            print(
                f"round {r} {name:10s} wall {n / t / 1e6:6.2f} cpu {n / c / 1e6:6.2f} M/s "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for name, runs in times.items():
        cpu = sorted(c for _, c in runs)
        print(
            f"{name:10s} best wall {n / min(t for t, _ in runs) / 1e6:6.2f}  "
            f"best cpu {n / cpu[0] / 1e6:6.2f}  median cpu {n / cpu[len(cpu) // 2] / 1e6:6.2f}"
        )


if __name__ == "__main__":
    main()
