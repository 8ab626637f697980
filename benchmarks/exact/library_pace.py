#!/usr/bin/env python3
"""The fingerprint library's designs on the exact filter's workload, in one run: which one
keeps up with `urlseen dedup --filter exact` (issue 14)?

Workload per batch of 65,536 new fingerprints (random 16-byte digests, as MD5 gives): look up
1% of the batch among fingerprints already in (the counting filter's "maybe seen" that the
cache could not answer: the dev file sends 1.6% of its lines there) and 1% that are absent
(its false positives), then one `apply`: the batch's inserts (known absent, as the exact filter
knows them) and reference increments for 1% of known fingerprints. Until N fingerprints are
in. Peak RSS includes the workload's own packed copy of the fingerprints in (16 bytes each).

Designs (each in its own process, for its peak RSS):
- staged: SQLiteLibrary as this tree has it (new records staged as one row per batch; since
  format 3 a full stage becomes a sorted run, runs merged by size tier; exact/runs.py).
- before: SQLiteLibrary as the tree at --before has it (a folder holding an urlseen package
  with its extension built, e.g. `src` of a checkout of an older commit after `pip install
  -e`); each row names the package it ran.
- lmdb: the same operations on LMDB (the `lmdb` package, if installed): sorted putmulti of the
  inserts, get + put for the increments, one write transaction per batch, sync at commit (the
  crash safety the SQLite library has).
Each row gives wall seconds and CPU seconds in the library (CPU time is less inflated by other
sessions on a shared machine; the gap is I/O waits and time descheduled) and the load average
before and after it.

Usage:
    python benchmarks/exact/library_pace.py --n 1000000,10000000 [--designs staged,before,lmdb]
        [--before OLD/src] [--workdir /tmp/urlseen-library-pace] [--timeout 900]
        [--json PATH (default: results.json here, key library_pace)] [--profile FOLDER]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

BATCH = 65_536
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "library_pace"


class Clock:
    """Wall and CPU seconds spent inside `with clock:` blocks (CPU time is less inflated by
    other sessions' load on a shared machine)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> None:
        self._start = (time.perf_counter(), time.process_time())

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._start[0]
        self.cpu += time.process_time() - self._start[1]


def workload(n: int):  # type: ignore[no-untyped-def]
    """(now, lookups, inserts, increments) per batch, deterministic. The fingerprints in are
    kept packed (16 bytes each), so 100M fit in 1.6 GB of the workload's own memory."""
    rng = random.Random(n)
    known = bytearray()

    def sample(k: int) -> list[bytes]:
        count = len(known) // 16
        picks = rng.sample(range(count), min(count, k))
        return [bytes(known[i * 16 : i * 16 + 16]) for i in picks]

    for start in range(0, n, BATCH):
        blob = rng.randbytes(16 * min(BATCH, n - start))
        inserts = [blob[i : i + 16] for i in range(0, len(blob), 16)]
        lookups = sample(BATCH // 100) + [rng.randbytes(16) for _ in range(BATCH // 100)]
        increments = dict.fromkeys(sample(BATCH // 100), 1)
        yield float(start), lookups, inserts, increments
        known += blob


def run_sqlite(folder: Path, n: int, stage_limit: int | None) -> Clock:
    from urlseen.exact.library_protocol import Changes
    from urlseen.exact.sqlite_library import SQLiteLibrary

    options = {} if stage_limit is None else {"stage_limit": stage_limit}
    clock = Clock()  # in the library (the workload's making is left out)
    lib = SQLiteLibrary(folder / "library.sqlite", create=True, **options)
    for now, lookups, inserts, increments in workload(n):
        with clock, lib.transaction():
            lib.present(lookups)
            lib.apply(Changes(now, inserts=inserts, refs=increments, known_absent=True))
    assert lib.count() == n
    with clock:
        lib.close()
    return clock


def run_lmdb(folder: Path, n: int) -> Clock:
    import lmdb

    env = lmdb.open(str(folder), map_size=1 << 40, sync=True, metasync=True)
    record = struct.Struct("<qqq")  # refs, first seen, last seen (ms)
    clock = Clock()
    for now, lookups, inserts, increments in workload(n):
        ms = int(now * 1000)
        with clock, env.begin(write=True) as txn:
            _ = [txn.get(fp) is not None for fp in sorted(lookups)]
            value = record.pack(1, ms, ms)
            txn.cursor().putmulti([(fp, value) for fp in sorted(inserts)], overwrite=False)
            for fp in sorted(increments):
                refs, first, _last = record.unpack(txn.get(fp))
                txn.put(fp, record.pack(refs + 1, first, ms))
    with clock:
        env.close()
    return clock


def child(design: str, folder: Path, n: int, profile: str) -> None:
    """One design's run, in this process: prints the seconds spent in the library (making
    the workload left out) and the peak RSS as JSON; with a profile path, the run's cProfile
    (the 25 largest cumulative times, the 15 largest own times) is written there."""
    if profile != "-":
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            child(design, folder, n, "-")
        finally:
            profiler.disable()
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            stats.sort_stats("cumulative").print_stats(25)
            stats.sort_stats("tottime").print_stats(15)
            Path(profile).write_text(text.getvalue())
        return
    if design == "staged":
        clock = run_sqlite(folder, n, None)
    elif design == "lmdb":
        clock = run_lmdb(folder, n)
    else:
        raise SystemExit(f"unknown design {design}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = sum(f.stat().st_size for f in folder.iterdir())
    import urlseen

    package = str(Path(urlseen.__file__).parent)
    row = {"seconds": clock.wall, "cpu_seconds": clock.cpu, "peak_rss_mib": rss, "bytes": size}
    print(json.dumps({**row, "urlseen": package}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="1000000,10000000")
    parser.add_argument("--designs", default="staged,lmdb")
    parser.add_argument("--before", type=Path, help="the folder holding the 'before' urlseen")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/urlseen-library-pace"))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument(
        "--profile", type=Path, help="a folder for each run's cProfile (profile-DESIGN-N.txt)"
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        design, folder, n, profile = args.child
        child(design, Path(folder), int(n), profile)
        return
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    results = []
    for n in (int(x) for x in args.n.split(",")):
        for design in args.designs.split(","):
            folder = args.workdir / f"{design}-{n}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            profile = "-" if args.profile is None else args.profile / f"profile-{design}-{n}.txt"
            inner = "staged" if design == "before" else design
            command = [sys.executable, __file__, "--child", inner, str(folder), str(n)]
            command.append(str(profile))
            env = dict(os.environ)
            if design == "before":
                if args.before is None:
                    raise SystemExit("the before design needs --before")
                env["PYTHONPATH"] = str(args.before.resolve())
            load = os.getloadavg()[0]
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=args.timeout, check=True,
                    env=env,
                )  # fmt: skip
                row = {"design": design, "n": n, **json.loads(done.stdout.splitlines()[-1])}
                row["records_per_second"] = n / row["seconds"]
                row["load_before_after"] = [load, os.getloadavg()[0]]
            except subprocess.TimeoutExpired:
                row = {"design": design, "n": n, "seconds": None, "timeout": args.timeout}
            except subprocess.CalledProcessError as exc:
                row = {"design": design, "n": n, "seconds": None, "error": exc.stderr[-400:]}
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.write_text(
            json.dumps(kept | {"library_pace": {"argv": sys.argv, "results": results}}, indent=1)
            + "\n"
        )


if __name__ == "__main__":
    main()
