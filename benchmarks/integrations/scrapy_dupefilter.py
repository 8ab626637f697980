#!/usr/bin/env python3
"""urlseen's Scrapy dupefilter against Scrapy's own RFPDupeFilter, in one run.

Two measurements, each against the same peer (scrapy.dupefilters.RFPDupeFilter):

1. Memory for N = 10M fingerprints. Each dupefilter, in a fresh process of its own, gets N
   distinct `scrapy.Request` objects through `request_seen`, as the scheduler calls it. The
   dupefilter's resident memory is the process's RSS after the N requests minus its RSS just
   after the dupefilter was built (the requests are made one at a time and dropped, so they
   are not counted). Fingerprints: SHA-1 of the URL (20 raw bytes, the size and kind Scrapy's
   default fingerprinter returns): Scrapy's own fingerprinter canonicalizes first, which costs
   both filters the same, is too slow for the time budget at 10M, and changes nothing either
   filter stores. The URLs are synthetic (https://host<i % 1000>.example/page/<i>): N
   distinct ones are needed and the dev data has 2.75M.
   urlseen: exact (the default; its library in a temporary folder on disk, as without
   JOBDIR) and bloom (error rate 1e-6); both sized for N.

2. Crawl wall time: `urlseen crawl` (one process per crawl) of a local copy of a real site,
   the Python documentation from Debian's python3-doc package, its library/ section (317
   pages, ~27,000 links), served by `python -m http.server` on 127.0.0.1. Crawls with
   `--filter scrapy` (RFPDupeFilter), `--filter exact` and `--filter bloom` alternate (the
   order reversed every other round), --rounds rounds, one at a time, before part 1; the
   report gives each one's median wall time (process start to exit) and CPU time (user + sys
   of the crawl process), and every single run.

Part 1's three processes run at the same time (to stay within 15 minutes): their request
rates are recorded but are not a comparison.

Usage:
    python3 benchmarks/integrations/scrapy_dupefilter.py   # key scrapy_dupefilter of results.json
    python3 benchmarks/integrations/scrapy_dupefilter.py --n 1000000 --rounds 1 \
        --out /tmp/quick.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC_ROOTS = ("/usr/share/doc/python3-doc/html", "/usr/share/doc/python3.11-doc/html")
SECTION = "library/"


class Sha1Fingerprinter:
    """20 raw bytes per request, like Scrapy's default fingerprinter, without its URL
    canonicalization (which costs the same for both dupefilters)."""

    def fingerprint(self, request: object) -> bytes:
        return hashlib.sha1(request.url.encode()).digest()  # type: ignore[attr-defined]


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def memory_child(kind: str, n: int) -> dict[str, object]:
    """Runs in its own process: build one dupefilter, feed it n requests, measure."""
    import gc

    from scrapy import Request
    from scrapy.dupefilters import RFPDupeFilter

    from urlseen.integrations.scrapy import UrlseenDupeFilter

    Request("https://warm.example/")  # imports and caches on the path, before the baseline
    gc.collect()
    if kind == "scrapy":
        df = RFPDupeFilter(fingerprinter=Sha1Fingerprinter())
    else:
        df = UrlseenDupeFilter(kind, capacity=n, fingerprinter=Sha1Fingerprinter())
    gc.collect()
    before = _rss()
    started = time.perf_counter()
    seen = 0
    for i in range(n):
        seen += df.request_seen(Request(f"https://host{i % 1000}.example/page/{i}"))
    seconds = time.perf_counter() - started
    gc.collect()
    after = _rss()
    result: dict[str, object] = {
        "kind": kind,
        "n": n,
        "reported_seen": seen,  # false positives for bloom, 0 for the exact ones
        "rss_before": before,
        "rss_after": after,
        "dupefilter_bytes": after - before,
        "bytes_per_request": (after - before) / n,
        "seconds": seconds,  # run alongside the other two: not a speed comparison
        "requests_per_second": n / seconds,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if kind != "scrapy":
        result["filter_bits"] = df.seen.stats().bits
        folder = getattr(getattr(df.seen, "seen", None), "folder", None)
        if folder is not None:
            result["library_bytes_on_disk"] = sum(p.stat().st_size for p in folder.iterdir())
    df.close("finished")
    return result


def measure_memory(n: int) -> list[dict[str, object]]:
    """One process per dupefilter, all three at once (RSS is per process, so running them
    together changes no memory figure; their speeds are then not comparable, and are not
    compared)."""
    kinds = ("scrapy", "exact", "bloom")
    print(f"memory: {', '.join(kinds)} at once, {n:,} requests each ...", file=sys.stderr)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", kind, "--n", str(n)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for kind in kinds
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            sys.exit(f"a memory child failed (exit {proc.returncode})")
        results.append(json.loads(out))
        print(f"  {results[-1]}", file=sys.stderr, flush=True)
    return results


def _doc_root() -> Path:
    for root in [Path(p) for p in DOC_ROOTS] + sorted(
        Path("/usr/share/doc").glob("python3*-doc/html")
    ):
        if (root / SECTION / "index.html").is_file():
            return root
    sys.exit("python3-doc is not installed: apt-get install python3-doc")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_crawl(site: str, kind: str) -> dict[str, object]:
    command = [sys.executable, "-m", "urlseen", "crawl", site + "index.html", "--prefix", site]
    command += ["--filter", kind, "--json", "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = json.loads(out)
    return {"kind": kind, "wall_seconds": wall, "cpu_seconds": cpu, "report": report}


def measure_crawls(rounds: int) -> dict[str, object]:
    root, port = _doc_root(), _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    site = f"http://127.0.0.1:{port}/{SECTION}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        runs = []
        kinds = ("scrapy", "exact", "bloom")
        for r in range(rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:  # alternate the order
                runs.append(_one_crawl(site, kind))
                print(f"crawl {r}: {kind} {runs[-1]['wall_seconds']:.2f} s", file=sys.stderr)
    finally:
        server.terminate()
        server.wait()
    summary = {}
    for kind in ("scrapy", "exact", "bloom"):
        mine = [x for x in runs if x["kind"] == kind]
        summary[kind] = {
            "median_wall_seconds": statistics.median(x["wall_seconds"] for x in mine),
            "median_cpu_seconds": statistics.median(x["cpu_seconds"] for x in mine),
            "pages": sorted({x["report"]["pages"] for x in mine}),
        }
    return {"site": f"python3-doc {root} {SECTION}", "rounds": rounds, "summary": summary,
            "runs": runs}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="requests for the memory part")
    parser.add_argument("--rounds", type=int, default=3, help="crawls per dupefilter")
    parser.add_argument("--out", type=Path, default=HERE / "results.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(memory_child(args.child, args.n)))
        return
    import scrapy

    started = time.time()
    crawls = measure_crawls(args.rounds)
    memory = measure_memory(args.n)
    by_kind = {m["kind"]: m for m in memory}
    crawl_summary = crawls["summary"]
    results = {
        "command": "python3 benchmarks/integrations/scrapy_dupefilter.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"CPython {platform.python_version()}, Scrapy {scrapy.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "memory": memory,
        "crawl": crawls,
        "ratios": {
            "exact_memory_vs_scrapy": by_kind["exact"]["dupefilter_bytes"]
            / by_kind["scrapy"]["dupefilter_bytes"],
            "bloom_memory_vs_scrapy": by_kind["bloom"]["dupefilter_bytes"]
            / by_kind["scrapy"]["dupefilter_bytes"],
            "exact_wall_vs_scrapy": crawl_summary["exact"]["median_wall_seconds"]
            / crawl_summary["scrapy"]["median_wall_seconds"],
            "bloom_wall_vs_scrapy": crawl_summary["bloom"]["median_wall_seconds"]
            / crawl_summary["scrapy"]["median_wall_seconds"],
            "exact_cpu_vs_scrapy": crawl_summary["exact"]["median_cpu_seconds"]
            / crawl_summary["scrapy"]["median_cpu_seconds"],
        },
        "total_seconds": time.time() - started,
    }
    kept = json.loads(args.out.read_text()) if args.out.exists() else {}
    args.out.write_text(json.dumps(kept | {"scrapy_dupefilter": results}, indent=1) + "\n")
    print(json.dumps(results["ratios"], indent=2))


if __name__ == "__main__":
    main()
