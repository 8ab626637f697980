#!/usr/bin/env python3
"""Where a BloomFilter batch spends its time: perf samples of the timed region only.

Loads the benchmarks/peers/run.py workload (N fresh `str` keys), then runs `update` (or another
batch API) twice on a new default BloomFilter, telling perf to record only around each call
through a control FIFO, so loading the data is not in the profile. cpu-clock sampling works
where the hardware counters are hidden (a VM).

Usage (from the repository root):
    mkfifo /tmp/perf-ctl /tmp/perf-ack
    PERF_CTL=/tmp/perf-ctl PERF_ACK=/tmp/perf-ack perf record -e cpu-clock -g -D -1 \\
        --control fifo:/tmp/perf-ctl,/tmp/perf-ack -o /tmp/batch.data \\
        python3 benchmarks/tools/batch_profile.py 20000000 update
    perf report -i /tmp/batch.data --stdio --no-children
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

import urlseen

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from run import DEFAULT_DATA, Workload, load_distinct  # benchmarks/peers/run.py


def perf(command: str) -> None:
    """Enable or disable perf's recording, if run under perf --control."""
    ctl, ack = os.environ.get("PERF_CTL"), os.environ.get("PERF_ACK")
    if not (ctl and ack):
        return
    with open(ctl, "w") as fh:
        fh.write(command + "\n")
    with open(ack) as fh:
        fh.read(5)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000_000
    api = sys.argv[2] if len(sys.argv) > 2 else "update"
    base, _ = load_distinct(DEFAULT_DATA)
    wl = Workload(base, n)
    for _ in range(2):
        keys = wl.fresh()
        gc.collect()
        gc.disable()
        perf("enable")
        t0 = time.perf_counter()
        f = urlseen.BloomFilter(n, 0.001)
        getattr(f, api)(keys)
        dt = time.perf_counter() - t0
        perf("disable")
        gc.enable()
        print(f"{api}: {n / dt / 1e6:.2f} M keys/s", flush=True)
        del keys, f
        gc.collect()


if __name__ == "__main__":
    main()
