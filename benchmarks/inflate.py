#!/usr/bin/env python3
"""CPU time to inflate a gzip file in the line engine's chunks: gzip.GzipFile (the chunk path
before issue 14 part A2: read1 parts gathered into 1 MiB chunks) against urlseen.job.inflate
(zlib.decompressobj with the gzip wrapper), alternating round by round; the median of the
rounds of each (process CPU time: neighbours on a shared machine move it less than wall time).

Usage:
    python benchmarks/inflate.py [--file urls-dev.txt.gz] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from urlseen.job.inflate import inflated

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DEV = Path(os.environ.get("URLSEEN_DEV_URLS", REPO.parent / "shared/data/urls-dev.txt.gz"))
CHUNK = 1 << 20


def by_gzipfile(path: Path) -> int:
    total, buffer = 0, bytearray()
    with open(path, "rb") as f, gzip.GzipFile(fileobj=f) as packed:
        while part := packed.read1(CHUNK - len(buffer)):
            buffer += part
            if len(buffer) >= CHUNK:
                total += len(bytes(buffer))
                buffer.clear()
    return total + len(buffer)


def by_zlib(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(len(chunk) for chunk in inflated(f.read1, CHUNK))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_DEV)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ways: dict[str, Callable[[Path], int]] = {"gzip.GzipFile": by_gzipfile, "zlib": by_zlib}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    sizes = set()
    for _ in range(args.rounds):
        for name, way in ways.items():
            start = time.process_time()
            sizes.add(way(args.file))
            seconds[name].append(time.process_time() - start)
    assert len(sizes) == 1, sizes
    print(
        f"{args.file.name}: {sizes.pop():,} bytes inflated, {args.rounds} rounds, load "
        f"{os.getloadavg()[0]:.1f}"
    )
    for name, times in seconds.items():
        print(
            f"{name:14} median CPU {statistics.median(times):.3f} s "
            f"(min {min(times):.3f}, max {max(times):.3f})"
        )


if __name__ == "__main__":
    main()
