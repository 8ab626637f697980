#!/usr/bin/env python3
"""The library's batch of URLs against the command line's: canonicalize and check-and-add.

On the first N lines of the dev file (default 1,000,000; blank lines dropped, they are no
URLs), three ways to the same answers, in rounds that interleave them:

- slow: ``seen.add_many([canonicalize(u) for u in urls])`` (the key per URL in Python);
- add_urls: ``urlseen.canonical.add_urls(seen, urls)`` (the line engine's keying in C);
- CLI: ``urlseen dedup`` on the same lines as a plain file (start-up included, as a user
  pays it), its wall time.

Each library run decodes its URLs anew from bytes (no str caches its hash from an earlier
run) and starts with a new default filter (GrowingBloomFilter, as ``urlseen dedup``'s); the
times are wall seconds of the call alone. Prints each way's median and spread, checks that
add_urls answers as the slow path does, and the ratio add_urls / CLI.

Usage (from the repository root):
    python benchmarks/dedup/batch_api.py [--lines 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from urlseen.bloom.growing import GrowingBloomFilter
from urlseen.canonical import add_urls, canonicalize

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/data/urls-dev.txt.gz"


def slow(urls: list[str]) -> list[bool]:
    return GrowingBloomFilter().add_many([canonicalize(url) for url in urls])


def fast(urls: list[str]) -> list[bool]:
    return add_urls(GrowingBloomFilter(), urls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with gzip.open(args.data, "rb") as f:
        raw = [line.rstrip(b"\n") for line in itertools.islice(f, args.lines)]
    raw = [line for line in raw if line.strip()]
    urlseen = Path(sys.executable).parent / "urlseen"
    times: dict[str, list[float]] = {"slow": [], "add_urls": [], "CLI": []}
    ways: dict[str, Callable[[list[str]], list[bool]]] = {"slow": slow, "add_urls": fast}
    answers: dict[str, list[bool]] = {}
    with tempfile.NamedTemporaryFile(suffix=".txt") as plain:
        plain.write(b"\n".join(raw) + b"\n")
        plain.flush()
        cli = [str(urlseen), "dedup", "--no-progress", plain.name, "-o", "/dev/null"]
        for _ in range(args.repeat):
            for name, way in ways.items():
                urls = [line.decode() for line in raw]
                started = time.perf_counter()
                answers[name] = way(urls)
                times[name].append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run(cli, check=True, capture_output=True)
            times["CLI"].append(time.perf_counter() - started)
    same = answers["slow"] == answers["add_urls"]
    new = sum(answers["add_urls"])
    print(f"{len(raw):,} URLs (first {args.lines:,} lines of {args.data.name}), {new:,} new; "
          f"add_urls answers as the slow path: {same}")  # fmt: skip
    for name, runs in times.items():
        print(f"{name:9} median {statistics.median(runs):.3f} s  "
              f"(runs {min(runs):.3f}-{max(runs):.3f} s)")  # fmt: skip
    ratio = statistics.median(times["add_urls"]) / statistics.median(times["CLI"])
    print(f"add_urls / CLI (medians): {ratio:.2f}")
    if not same:
        raise SystemExit("add_urls disagrees with the slow path")


if __name__ == "__main__":
    main()
