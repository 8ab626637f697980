#!/usr/bin/env python3
"""What checking every persisted byte costs: opening and verifying a 1 GB state file, and an
exact filter's folder, warm (in the page cache) and cold (its pages evicted first).

Usage (from the repository root; about a minute, and 1 GB of disk in FOLDER):

    python benchmarks/exact/state_checks.py /tmp/state-checks
    python benchmarks/exact/state_checks.py /tmp/state-checks --exact ../shared/data/urls-dev.txt.gz

The Bloom filter's file is made once: capacity 880M at error rate 0.01 (1.0 GiB of bits), its
data filled with random bytes, as a full filter's would be, then closed (sealed). Cold means
its pages were dropped from the page cache with posix_fadvise(POSIX_FADV_DONTNEED) on this
file only (nothing else on the machine is evicted). Each figure is the best of three. With
--exact, a URL file is deduplicated into an exact filter's folder once, and its opening and
`urlseen info --verify` are timed the same way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import urlseen
from exact import evict  # the sibling benchmark's

ROUNDS = 3


def evict_state(path: Path) -> None:
    """Drop this file's (or this folder's files') pages from the page cache."""
    evict([str(f) for f in (path.iterdir() if path.is_dir() else [path])])


def best(action: Callable[[], None], before: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(ROUNDS):
        before()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def command(*args: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(["urlseen", *args], check=True, capture_output=True)

    return run


def make_bloom(path: Path) -> None:
    if path.exists():
        return
    seen = urlseen.BloomFilter.create(path, capacity=880_000_000, error_rate=0.01)
    with open(path, "r+b") as f:  # random bits, as a full filter's
        f.seek(4096)
        left = path.stat().st_size - 4096
        while left:
            piece = min(left, 64 << 20)
            f.write(os.urandom(piece))
            left -= piece
    seen.close()


def report(label: str, state: Path, opener: Callable[[bool], None], info: bool = True) -> None:
    def cold() -> None:
        evict_state(state)

    for readonly, what in ((True, "open read-only"), (False, "open for writing + close")):
        warm_s = best(lambda r=readonly: opener(r))
        cold_s = best(lambda r=readonly: opener(r), cold)
        print(f"{label}: {what}: {warm_s:.2f} s warm, {cold_s:.2f} s cold")
    if info:
        verify = command("info", "--verify", str(state))
        print(
            f"{label}: urlseen info --verify: {best(verify):.2f} s warm, "
            f"{best(verify, cold):.2f} s cold; urlseen info: "
            f"{best(command('info', str(state))):.2f} s (the process's start)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--exact", type=Path, help="a URL file to build an exact state from")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    bloom = args.folder / "1gb.bloom"
    make_bloom(bloom)
    print(f"{bloom}: {bloom.stat().st_size / 2**30:.2f} GiB")

    def open_bloom(readonly: bool) -> None:
        urlseen.BloomFilter.open(bloom, readonly=readonly).close()

    report("bloom 1 GiB", bloom, open_bloom)
    if args.exact is None:
        return
    state = args.folder / "exact"
    if not state.exists():
        subprocess.run(["urlseen", "dedup", "--filter", "exact", "--state", str(state),
                        str(args.exact), "-o", os.devnull], check=True)  # fmt: skip
    size = sum(f.stat().st_size for f in state.iterdir())
    print(f"{state}: {size / 2**20:.0f} MiB ({', '.join(sorted(f.name for f in state.iterdir()))})")

    def open_exact(readonly: bool) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a rebuild would not be the cost measured here
            urlseen.ExactFilter.open(state, readonly=readonly).close()

    report(f"exact {size / 2**20:.0f} MiB", state, open_exact)


if __name__ == "__main__":
    sys.exit(main())
