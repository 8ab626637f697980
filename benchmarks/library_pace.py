#!/usr/bin/env python3
"""The fingerprint library's designs on the exact filter's workload, in one run: which one
keeps up with `urlseen dedup --filter exact` (issue 14)?

Workload per batch of 65,536 new fingerprints (random 16-byte digests, as MD5 gives): look up
1% of the batch among fingerprints already in (the counting filter's "maybe seen" that the
cache could not answer: the dev file sends 1.6% of its lines there) and 1% that are absent
(its false positives), then one `apply`: the batch's inserts (known absent, as the exact filter
knows them) and reference increments for 1% of known fingerprints. Until N fingerprints are
in. Peak RSS includes the workload's own list of the fingerprints in (~65 bytes each).

Designs (each in its own process, for its peak RSS):
- staged: SQLiteLibrary as it is (new records staged as one row per batch, merged into the
  B-tree in one sorted pass every DEFAULT_STAGE_LIMIT fingerprints; stores/_staging.py).
- btree: SQLiteLibrary(stage_limit=1): every batch goes into the B-tree at once, as the library
  did before the stage.
- lmdb: the same operations on LMDB (the `lmdb` package, if installed): sorted putmulti of the
  inserts, get + put for the increments, one write transaction per batch, sync at commit (the
  crash safety the SQLite library has).

Usage:
    python benchmarks/library_pace.py --n 1000000,10000000 [--designs staged,btree,lmdb]
        [--workdir /tmp/urlseen-library-pace] [--timeout 900] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

BATCH = 65_536


def workload(n: int):  # type: ignore[no-untyped-def]
    """(now, lookups, inserts, increments) per batch, deterministic."""
    rng = random.Random(n)
    known: list[bytes] = []
    for start in range(0, n, BATCH):
        inserts = [rng.randbytes(16) for _ in range(min(BATCH, n - start))]
        sample = rng.sample(known, min(len(known), BATCH // 100))
        lookups = sample + [rng.randbytes(16) for _ in range(BATCH // 100)]
        increments = {fp: 1 for fp in rng.sample(known, min(len(known), BATCH // 100))}
        yield float(start), lookups, inserts, increments
        known.extend(inserts)


def run_sqlite(folder: Path, n: int, stage_limit: int | None) -> float:
    from urlseen.stores.library_protocol import Changes
    from urlseen.stores.sqlite_library import SQLiteLibrary

    options = {} if stage_limit is None else {"stage_limit": stage_limit}
    spent = 0.0  # in the library (the workload's making is left out)
    lib = SQLiteLibrary(folder / "library.sqlite", create=True, **options)
    for now, lookups, inserts, increments in workload(n):
        start = time.perf_counter()
        with lib.transaction():
            lib.present(lookups)
            lib.apply(Changes(now, inserts=inserts, refs=increments, known_absent=True))
        spent += time.perf_counter() - start
    assert lib.count() == n
    start = time.perf_counter()
    lib.close()
    return spent + time.perf_counter() - start


def run_lmdb(folder: Path, n: int) -> float:
    import lmdb

    env = lmdb.open(str(folder), map_size=1 << 40, sync=True, metasync=True)
    record = struct.Struct("<qqq")  # refs, first seen, last seen (ms)
    spent = 0.0
    for now, lookups, inserts, increments in workload(n):
        start = time.perf_counter()
        ms = int(now * 1000)
        with env.begin(write=True) as txn:
            _ = [txn.get(fp) is not None for fp in sorted(lookups)]
            value = record.pack(1, ms, ms)
            txn.cursor().putmulti([(fp, value) for fp in sorted(inserts)], overwrite=False)
            for fp in sorted(increments):
                refs, first, _last = record.unpack(txn.get(fp))
                txn.put(fp, record.pack(refs + 1, first, ms))
        spent += time.perf_counter() - start
    start = time.perf_counter()
    env.close()
    return spent + time.perf_counter() - start


def child(design: str, folder: Path, n: int) -> None:
    """One design's run, in this process: prints the seconds spent in the library (making
    the workload left out) and the peak RSS as JSON."""
    if design == "staged":
        seconds = run_sqlite(folder, n, None)
    elif design == "btree":
        seconds = run_sqlite(folder, n, 1)
    elif design == "lmdb":
        seconds = run_lmdb(folder, n)
    else:
        raise SystemExit(f"unknown design {design}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = sum(f.stat().st_size for f in folder.iterdir())
    print(json.dumps({"seconds": seconds, "peak_rss_mib": rss, "bytes": size}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="1000000,10000000")
    parser.add_argument("--designs", default="staged,btree,lmdb")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/urlseen-library-pace"))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        design, folder, n = args.child
        child(design, Path(folder), int(n))
        return
    results = []
    for n in (int(x) for x in args.n.split(",")):
        for design in args.designs.split(","):
            folder = args.workdir / f"{design}-{n}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            command = [sys.executable, __file__, "--child", design, str(folder), str(n)]
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=args.timeout, check=True
                )
                row = {"design": design, "n": n, **json.loads(done.stdout.splitlines()[-1])}
                row["records_per_second"] = n / row["seconds"]
            except subprocess.TimeoutExpired:
                row = {"design": design, "n": n, "seconds": None, "timeout": args.timeout}
            except subprocess.CalledProcessError as exc:
                row = {"design": design, "n": n, "seconds": None, "error": exc.stderr[-400:]}
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
