#!/usr/bin/env python3
"""The exact filter's counters, standard against blocked layout, in one run.

Each round makes a fresh in-memory CountingBloomFilter per layout (capacity 10M at 1e-3, MD5,
the exact filter's defaults) and times, in CPU seconds of this thread, the exact filter's C
step (`_exact_step`, no cache) over N distinct new keys in batches of 65,536, then
`contains_many` over the same keys (all present: every counter read). The step includes MD5 of
each key and a bytes object per new fingerprint, the same in both layouts.

Usage:
    python benchmarks/counter_layout.py [--n 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time

from urlseen.bloom.counting import CountingBloomFilter

BATCH = 65536


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    keys = [f"https://example.com/{i}/{os.urandom(4).hex()}" for i in range(args.n)]
    print(f"{args.n:,} distinct keys, load average {os.getloadavg()[0]:.1f}")
    print("| round | layout | counters | k | _exact_step CPU s | contains_many CPU s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for round_ in range(1, args.rounds + 1):
        for layout in ("standard", "blocked"):
            c = CountingBloomFilter(10_000_000, 0.001, hash="md5", layout=layout)
            started = time.thread_time()
            for s in range(0, len(keys), BATCH):
                c._exact_step(keys[s : s + BATCH], None)
            step = time.thread_time() - started
            started = time.thread_time()
            for s in range(0, len(keys), BATCH):
                assert all(c.contains_many(keys[s : s + BATCH]))
            check = time.thread_time() - started
            print(f"| {round_} | {layout} | {c.ncounters:,} | {c.k} | {step:.3f} | {check:.3f} |")


if __name__ == "__main__":
    main()
