#!/usr/bin/env python3
"""What a small Scrapy crawl pays for urlseen's default dupefilter: peak RSS and state on disk.

A crawl of the whole Python documentation (Debian's python3-doc, ~530 pages, served by
`python -m http.server` on 127.0.0.1), with JOBDIR set (so every filter persists), once per
dupefilter per round, the order rotated each round:

- `scrapy`: Scrapy's own `RFPDupeFilter` (the peer);
- `exact`: urlseen's `UrlseenDupeFilter` with no setting but JOBDIR (the default kind);
- `bloom`: the same with `URLSEEN_FILTER = "bloom"`.

Each crawl runs in a fresh process; peak RSS is that process's `ru_maxrss` (read by its parent), the
state is the bytes under JOBDIR after the crawl (`exact`/`bloom`: also what `JOBDIR/urlseen/`
alone holds). Every crawl must fetch as many pages, and as many distinct ones (the site
serves one page under two addresses: 528 fetches, 527 distinct URLs, with every filter). The
report gives the median and the spread over the rounds, and each peak's ratio to Scrapy's in
the same round.

Usage:
    python3 benchmarks/integrations/footprint.py              # writes footprint.json here
    python3 benchmarks/integrations/footprint.py --rounds 1 --out /tmp/fp.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WAYS = ("scrapy", "exact", "bloom")
DOC_ROOTS = ("/usr/share/doc/python3-doc/html", "/usr/share/doc/python3.11-doc/html")

CHILD = r"""
import json, sys
from urllib.parse import urlparse
from scrapy import Spider
from scrapy.crawler import CrawlerProcess

way, start, jobdir = sys.argv[1:4]
settings = {"JOBDIR": jobdir, "LOG_LEVEL": "ERROR", "ROBOTSTXT_OBEY": False,
            "TELNETCONSOLE_ENABLED": False, "CONCURRENT_REQUESTS": 16}
if way != "scrapy":
    settings["DUPEFILTER_CLASS"] = "urlseen.integrations.scrapy.UrlseenDupeFilter"
if way == "bloom":
    settings["URLSEEN_FILTER"] = "bloom"
host = urlparse(start).netloc
fetched = []

class Follow(Spider):
    name = "footprint"
    start_urls = [start]

    def parse(self, response):
        fetched.append(response.url)
        if not hasattr(response, "css"):
            return
        for link in response.css("a::attr(href)").getall():
            url = response.urljoin(link.split("#")[0])
            if urlparse(url).netloc == host:
                yield response.follow(url, callback=self.parse)

process = CrawlerProcess(settings)
crawler = process.create_crawler(Follow)
process.crawl(crawler)
process.start()
stats = crawler.stats.get_stats()
print(json.dumps({"pages": len(fetched), "distinct": len(set(fetched)),
                  "filtered": stats.get("dupefilter/filtered", 0)}))
"""


def doc_root() -> Path:
    for root in map(Path, DOC_ROOTS):
        if (root / "index.html").is_file():
            return root
    sys.exit("the Python documentation is not installed: apt-get install python3-doc")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# A fresh parent per crawl: RUSAGE_CHILDREN's ru_maxrss is then the one crawl's peak RSS.
PROBE = r"""
import json, resource, subprocess, sys
out = subprocess.run(sys.argv[1:], check=True, stdout=subprocess.PIPE, text=True).stdout
result = json.loads(out.strip().splitlines()[-1])
result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps(result))
"""


def one_crawl(way: str, start: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="urlseen-footprint-") as tmp:
        jobdir = Path(tmp) / "job"
        spider = Path(tmp) / "crawl.py"  # a file: Scrapy reads its callbacks' source
        spider.write_text(CHILD)
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", PROBE, sys.executable, str(spider), way, start, str(jobdir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        wall = time.perf_counter() - began
        if done.returncode != 0:
            sys.exit(f"the {way} crawl failed with exit status {done.returncode}")
        result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
        own = jobdir / "urlseen"
        result.update(
            way=way,
            wall_s=round(wall, 3),
            state_bytes=tree_bytes(jobdir),
            urlseen_state_bytes=tree_bytes(own) if own.exists() else 0,
        )
        return result


def run_rounds(rounds: int, start: str) -> list[dict[str, object]]:
    runs = []
    for number in range(rounds):
        order = WAYS[number % len(WAYS) :] + WAYS[: number % len(WAYS)]
        for way in order:
            run = one_crawl(way, start)
            run["round"] = number
            runs.append(run)
            print(json.dumps(run), flush=True)
    return runs


def summarize(runs: list[dict[str, object]]) -> dict[str, object]:
    summary: dict[str, object] = {}
    for way in WAYS:
        mine = [r for r in runs if r["way"] == way]
        peaks = [int(r["peak_rss_bytes"]) / 2**20 for r in mine]  # type: ignore[call-overload]
        states = [int(r["state_bytes"]) / 2**20 for r in mine]  # type: ignore[call-overload]
        ratios = [
            int(r["peak_rss_bytes"]) / int(p["peak_rss_bytes"])  # type: ignore[call-overload]
            for r in mine
            for p in runs
            if p["way"] == "scrapy" and p["round"] == r["round"]
        ]
        summary[way] = {
            "peak_rss_mib_median": round(statistics.median(peaks), 1),
            "peak_rss_mib_range": [round(min(peaks), 1), round(max(peaks), 1)],
            "peak_rss_vs_scrapy_median": round(statistics.median(ratios), 3),
            "peak_rss_vs_scrapy_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "state_mib_median": round(statistics.median(states), 2),
            "pages": sorted({int(r["pages"]) for r in mine}),  # type: ignore[call-overload]
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "footprint.json")
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=doc_root(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        runs = run_rounds(args.rounds, f"http://127.0.0.1:{port}/index.html")
    finally:
        server.terminate()
        server.wait()
    if len({(r["pages"], r["distinct"]) for r in runs}) != 1:
        sys.exit(f"the crawls fetched different pages: {runs}")
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_at_end": os.getloadavg()[0],
        "rounds": args.rounds,
        "summary": summarize(runs),
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
