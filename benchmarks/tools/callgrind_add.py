#!/usr/bin/env python3
"""Instructions per per-call add, urlseen vs abloom, counted by callgrind (noise-free).

Wall-clock per-call numbers on this shared machine move by ±10%; instruction counts do not.
Runs 200k `add` calls of each library on distinct dev URLs under `valgrind --tool=callgrind`
and prints the inclusive instructions of each library's add function per call, and for urlseen
the part spent in the probes (csrc/bloom.h) and in XXH3.

Usage: python3 benchmarks/tools/callgrind_add.py [--data PATH]   (needs valgrind and abloom)
"""

from __future__ import annotations

import argparse
import gzip
import re
import subprocess
import sys
import tempfile
from pathlib import Path

N = 200_000
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/data/urls-dev.txt.gz"
FUNCTIONS = {  # library -> (callgrind_annotate line patterns, label)
    "urlseen": [
        (r"bit_filter\.c:BitFilter_add\b", "add, inclusive"),
        (r"bloom\.h:BitFilter_add\b", "probes (bloom.h)"),
        (r"xxh3\.h:BitFilter_add\b", "XXH3-64 (the default hash, inline)"),
    ],
    "abloom": [(r"_abloom\.c:BloomFilter_add\b", "add, inclusive")],
}


def child(library: str, data: str) -> None:
    seen: dict[str, None] = {}
    with gzip.open(data, "rt", encoding="utf-8") as f:
        for line in f:  # the first N distinct non-empty URLs, in file order
            if len(seen) == N:
                break
            if line.strip():
                seen[line.rstrip("\n")] = None
    urls = list(seen)
    if library == "urlseen":
        import urlseen

        add = urlseen.BloomFilter(1_000_000, 0.001).add
    else:
        import abloom

        add = abloom.BloomFilter(1_000_000, 0.001, serializable=True).add
    for url in urls:
        add(url)
    print(len(urls))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.data)
        return
    print("| library | what | instructions per add |\n|---|---|---:|")
    for library, patterns in FUNCTIONS.items():
        with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
            run = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out.name}",
                    sys.executable,
                    __file__,
                    "--child",
                    library,
                    "--data",
                    args.data,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            calls = int(run.stdout.split()[-1])
            report = subprocess.run(
                ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out.name],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        for pattern, label in patterns:
            match = re.search(r"^\s*([\d,]+) .*" + pattern, report, re.MULTILINE)
            count = int(match.group(1).replace(",", "")) / calls if match else float("nan")
            print(f"| {library} | {label} | {count:.0f} |")


if __name__ == "__main__":
    main()
