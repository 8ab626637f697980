"""A Scrapy crawl with its Redis one real network delay away: scrapy-redis's dupefilter against
urlseen's, same site, same scheduler, same network, rounds interleaved.

    sudo python benchmarks/crawl/run.py                 # 5,000 pages, 3 rounds, 1 ms
    sudo python benchmarks/crawl/run.py --quick --json out.json   # 300 pages, 1 round

Redis runs in a private network namespace reached over a veth pair with --delay-ms added to
every round trip (netem on both veth ends; on a kernel without sch_netem, a C relay in the
namespace that holds each chunk half the delay each way). The site is generated (--pages
pages, ~16 links each, ~94% of the requests a crawl meets are repeats) and served by Twisted's
static server from the root namespace on loopback. Each crawl is a fresh process (spider.py).

Ways: scrapy-redis (its scheduler and RFPDupeFilter), scrapy-redis+urlseen (its scheduler,
urlseen's UrlseenDupeFilter shared through the same Redis), scrapy+urlseen-redis (Scrapy's
scheduler, URLSEEN_REDIS_URL), the two urlseen ways "+prefetch" (with urlseen's
UrlseenPrefetchMiddleware), scrapy (Scrapy's defaults, no Redis: the ceiling).

Per crawl: pages (distinct URLs fetched; must equal --pages), wall time, pages/s, requests
the dupefilter checked (the requests the spider yielded), Redis round trips counted
by the server (INFO stats total_reads_processed delta) and by the client per origin (filter,
queue), INFO commandstats, and the CPU of redis-server, the site server and the crawler.
Writes benchmarks/crawl/results.json (--quick: only with --json). Needs root.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import network
from spider import REDIS_WAYS, WAYS

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
TARGET_TRIPS = 0.2  # urlseen's filter: Redis round trips per request checked, at most
TARGET_SPEEDUP = 1.5  # urlseen under scrapy-redis against scrapy-redis's own, pages/s


def _server_info(client: redis.Redis) -> dict[str, Any]:
    info: dict[str, Any] = client.info("all")  # type: ignore[assignment]
    commands = {
        k.removeprefix("cmdstat_"): v["calls"] for k, v in info.items() if k.startswith("cmdstat_")
    }
    return {
        "reads": info["total_reads_processed"],
        "commands": info["total_commands_processed"],
        "cpu": info["used_cpu_user"] + info["used_cpu_sys"],
        "commandstats": commands,
    }


def _key_patterns(client: redis.Redis) -> dict[str, int]:
    """Keys in Redis counted by pattern: each ':'-part holding a digit becomes '*'."""
    found: Counter[str] = Counter()
    for key in client.scan_iter(count=1000):
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        parts = text.split(":")
        found[":".join("*" if any(c.isdigit() for c in p) else p for p in parts)] += 1
    return dict(found.most_common(20))


def crawl(way: str, start: str, db: network.DelayedRedis, site_proc: subprocess.Popen[str],
          tmp: Path, concurrency: int, timeout: float) -> dict[str, Any]:  # fmt: skip
    """One crawl in a fresh process; its stats with the servers' counts around it."""
    admin = redis.Redis.from_url(db.direct_url)
    try:
        admin.flushall()
        admin.config_resetstat()
        before = _server_info(admin)
        site_cpu = network.cpu_seconds(site_proc.pid)
        out = tmp / f"{way}.json"
        argv = [sys.executable, str(HERE / "spider.py"), way, start, db.url, str(out),
                "--concurrency", str(concurrency)]  # fmt: skip
        began = time.perf_counter()
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        wall = time.perf_counter() - began
        if run.returncode != 0:
            raise RuntimeError(f"{way} crawl failed (rc {run.returncode}):\n{run.stderr[-4000:]}")
        after = _server_info(admin)
        left = admin.dbsize()
        left_by_pattern = _key_patterns(admin)
    finally:
        admin.close()
    row: dict[str, Any] = json.loads(out.read_text())
    stats = row.pop("stats")
    checked = row["checked"]  # scrapy-redis's RFPDupeFilter counts no dupefilter/filtered
    new = stats.get("scheduler/enqueued", stats.get("scheduler/enqueued/redis", 0)) - 1
    trips = row["round_trips"]
    server_reads = after["reads"] - before["reads"] - 1  # our own INFO
    seconds = row["elapsed_seconds"] or row["wall_seconds"]
    row |= {
        "process_wall_seconds": round(wall, 3),
        "pages_per_second": round(row["pages"] / seconds, 1),
        "responses": stats.get("downloader/response_count", 0),
        "requests_per_second": round(stats.get("downloader/response_count", 0) / seconds, 1),
        "new": new,  # enqueued, less the start request (not checked)
        "repeat_share": round(1 - new / max(checked, 1), 4),
        "server_reads": server_reads,
        "server_commands": after["commands"] - before["commands"] - 1,
        "client_round_trips": sum(trips.values()),
        "trips_per_checked": round(server_reads / max(checked, 1), 4),
        "filter_trips_per_checked": round(trips.get("filter", 0) / max(checked, 1), 4),
        "commandstats": {
            k: n for k, n in after["commandstats"].items() if k not in ("info", "config|resetstat")
        },
        "redis_cpu_seconds": round(after["cpu"] - before["cpu"], 3),
        "site_server_cpu_seconds": round(network.cpu_seconds(site_proc.pid) - site_cpu, 3),
        "redis_keys_left": left,
        "redis_keys_left_by_pattern": left_by_pattern,
        "urlseen_stats": {k: v for k, v in stats.items() if k.startswith("urlseen/")},
    }
    return row


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def summarize(rows: list[dict[str, Any]], ways: list[str]) -> dict[str, Any]:
    """Medians and spread per way; the urlseen way against scrapy-redis's, round by round."""
    fields = ("pages_per_second", "wall_seconds", "trips_per_checked",
              "filter_trips_per_checked", "redis_cpu_seconds", "site_server_cpu_seconds",
              "crawler_cpu_seconds")  # fmt: skip
    per_way = {
        way: {f: _spread([r[f] for r in rows if r["way"] == way]) for f in fields} for way in ways
    }
    summary: dict[str, Any] = {"per_way": per_way}
    if "scrapy-redis" not in ways:
        return summary
    rounds = sorted({r["round"] for r in rows})
    per_target = {}
    for way in (w for w in ways if "urlseen" in w):
        ratio = [
            _pick(rows, way, n)["pages_per_second"]
            / _pick(rows, "scrapy-redis", n)["pages_per_second"]
            for n in rounds
        ]
        trips = per_way[way]["filter_trips_per_checked"]["median"]
        speedup = statistics.median(ratio)
        per_target[way] = {
            "urlseen_filter_trips_per_checked": trips,
            "trips_target": TARGET_TRIPS,
            "trips_met": trips <= TARGET_TRIPS,
            "speedup_per_round": [round(x, 3) for x in ratio],
            "speedup_median": round(speedup, 3),
            "speedup_target": TARGET_SPEEDUP,
            "speedup_met": speedup >= TARGET_SPEEDUP,
        }
    summary["targets_per_way"] = per_target
    summary["targets_met_by"] = [
        w for w, t in per_target.items() if t["trips_met"] and t["speedup_met"]
    ]
    if "scrapy-redis+urlseen" in per_target:  # the README's setup: the headline
        summary["targets"] = per_target["scrapy-redis+urlseen"]
    return summary


def _pick(rows: list[dict[str, Any]], way: str, round_: int) -> dict[str, Any]:
    return next(r for r in rows if r["way"] == way and r["round"] == round_)


def _versions() -> dict[str, str]:
    found = {}
    for dist in ("urlseen", "scrapy", "scrapy-redis", "redis", "twisted"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    found["commit"] = commit
    found["redis-server"] = network.sh("redis-server", "--version").stdout.split()[2]
    return found


def _print_table(summary: dict[str, Any]) -> None:
    head = ("way", "pages/s", "wall s", "trips/chk", "filter", "redis cpu")
    print("{:<22} {:>16} {:>8} {:>10} {:>8} {:>9}".format(*head))
    for way, s in summary["per_way"].items():
        pps = s["pages_per_second"]
        print(
            f"{way:<22} {pps['median']:>7.1f} ({pps['min']:.0f}-{pps['max']:.0f})"
            f" {s['wall_seconds']['median']:>8.1f} {s['trips_per_checked']['median']:>10.3f}"
            f" {s['filter_trips_per_checked']['median']:>8.3f}"
            f" {s['redis_cpu_seconds']['median']:>9.2f}"
        )
    for way, targets in summary.get("targets_per_way", {}).items():
        print(way, json.dumps(targets))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 pages, 1 round")
    parser.add_argument("--pages", type=int, help="site size (default 5000; --quick 300)")
    parser.add_argument("--rounds", type=int, help="rounds of every way (default 3; --quick 1)")
    parser.add_argument("--delay-ms", type=float, default=1.0, help="added round-trip time")
    parser.add_argument("--concurrency", type=int, default=16, help="CONCURRENT_REQUESTS")
    parser.add_argument(
        "--ways", default=",".join(WAYS), help="comma-separated: " + ", ".join(WAYS)
    )
    parser.add_argument("--json", type=Path, help="where to write the results")
    args = parser.parse_args(argv)
    missing = network.tool_missing()
    if missing:
        print(f"benchmarks/crawl: {missing}", file=sys.stderr)
        return 2
    pages = args.pages or (300 if args.quick else 5000)
    rounds = args.rounds or (1 if args.quick else 3)
    ways = args.ways.split(",")
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways {sorted(unknown)}")
    out = args.json or (None if args.quick else RESULTS)

    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the finally
    try:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="urlseen-crawl-")))
        links = network.generate_site(tmp / "site", pages)
        start, site_proc = network.serve_site(stack, tmp / "site")
        db = network.delayed_redis(stack, tmp, args.delay_ms)
        latency = {
            "method": db.method,
            "rtt_before_delay": db.rtt_before,
            "rtt_delayed": network.ping_rtt_us(db.url),
            "redis_cli_latency_csv_delayed": network.redis_cli_latency(db.url),
            "redis_cli_latency_csv_direct": network.redis_cli_latency(db.direct_url),
        }
        print(f"delay by {db.method}: {json.dumps(latency)}", flush=True)
        load_before = os.getloadavg()
        rows = []
        timeout = 60 + pages * 0.2
        for n in range(rounds):
            order = ways[n % len(ways) :] + ways[: n % len(ways)]  # rotate: no way always first
            for way in order:
                load = os.getloadavg()[0]
                row = crawl(way, start, db, site_proc, tmp, args.concurrency, timeout)
                row["round"] = n
                row["load_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                rows.append(row)
                print(
                    f"round {n} {way}: {row['pages']} pages in {row['wall_seconds']:.1f} s, "
                    f"{row['pages_per_second']} pages/s, {row['trips_per_checked']} trips/checked "
                    f"(filter {row['filter_trips_per_checked']})",
                    flush=True,
                )
    finally:
        stack.close()
    summary = summarize(rows, ways)
    _print_table(summary)
    payload = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": _versions(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "site": {
            "pages": pages,
            "links": links,
            "redis_ways": [w for w in ways if w in REDIS_WAYS],
        },
        "delay_ms": args.delay_ms,
        "concurrency": args.concurrency,
        "latency": latency,
        "rows": rows,
        "summary": summary,
    }
    if out is not None:
        out.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {out}")
    bad = [r for r in rows if r["pages"] != pages]
    if bad:
        print(f"crawls that missed pages: {[(r['way'], r['pages']) for r in bad]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
