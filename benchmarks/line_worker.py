#!/usr/bin/env python3
"""The line engine with and without its worker thread: how much of the dedup job leaves the
job's own thread (issue 14, part A).

Each run is one subprocess calling `urlseen.job.dedup.dedup` on a streams.Inputs of the file (the
CLI's path: feeder reading and inflating, worker) with URLSEEN_LINE_WORKER=1 or 0, the two
alternating round by round. It reports, per setting, the median over the rounds of: wall time
of the dedup call, CPU time of the job's thread (`time.thread_time`: the filter, the writes,
Python around the batches, and, without the worker, splitting, keying and hashing) and CPU time
of the whole process (every thread). Output goes to /dev/null; exact filters live in a
temporary folder. The job's-thread CPU time is what the worker changes; neighbours on a shared
machine move wall time far more than it.

Usage:
    python benchmarks/line_worker.py [--file urls-dev.txt.gz] [--kinds bloom,exact]
        [--profiles none] [--rounds 7] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DEV = Path(os.environ.get("URLSEEN_DEV_URLS", REPO.parent / "shared/data/urls-dev.txt.gz"))

ONE_RUN = """
import os, resource, sys, tempfile, time
from urlseen import BloomFilter, ExactFilter
from urlseen.job.dedup import dedup
from urlseen.kinds import LIBRARY_BATCH, SMALL_BATCH
from urlseen.job.linekeys import LineKeyer
from urlseen.job.streams import Inputs

kind, profile, path = sys.argv[1:4]
with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "wb") as out:
    if kind == "bloom":  # urlseen dedup's defaults for each kind
        seen, batch = BloomFilter(10_000_000, 1e-6), SMALL_BATCH
    else:
        seen, batch = ExactFilter.create(tmp + "/state", capacity=10_000_000), LIBRARY_BATCH
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall, thread = time.perf_counter(), time.thread_time()
    summary = dedup(Inputs((path,)), seen, out, keyer=LineKeyer(profile=profile),
                    batch_size=batch)
    wall, thread = time.perf_counter() - wall, time.thread_time() - thread
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    seen.close()
print(wall, thread, cpu, summary.new)
"""


def run(kind: str, profile: str, path: Path, worker: bool) -> tuple[float, float, float, int]:
    env = {**os.environ, "URLSEEN_LINE_WORKER": "1" if worker else "0"}
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN, kind, profile, str(path)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall, thread, cpu, new = done.stdout.split()
    return float(wall), float(thread), float(cpu), int(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_DEV)
    parser.add_argument("--kinds", default="bloom,exact")
    parser.add_argument("--profiles", default="none", help="none (raw), w3lib (canonical)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    started = time.time()
    rows = []
    for kind in args.kinds.split(","):
        for profile in args.profiles.split(","):
            runs: dict[bool, list[tuple[float, float, float, int]]] = {True: [], False: []}
            for _ in range(args.rounds):
                for worker in (True, False):
                    runs[worker].append(run(kind, profile, args.file, worker))
            news = {r[3] for rs in runs.values() for r in rs}
            assert len(news) == 1, f"the runs disagree on the new lines: {news}"
            for worker in (True, False):
                med = [statistics.median(r[i] for r in runs[worker]) for i in range(3)]
                row = {"kind": kind, "profile": profile, "worker": worker,
                       "wall_s": med[0], "job_thread_cpu_s": med[1], "process_cpu_s": med[2],
                       "runs": runs[worker]}  # fmt: skip
                rows.append(row)
                print(f"{kind:6} {profile:6} worker={'on ' if worker else 'off'} "
                      f"wall {med[0]:6.3f} s  job thread CPU {med[1]:6.3f} s  "
                      f"process CPU {med[2]:6.3f} s  (medians of {args.rounds})",
                      flush=True)  # fmt: skip
    if args.json:
        meta = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "file": str(args.file),
            "load_average": os.getloadavg(),
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
