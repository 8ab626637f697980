#!/usr/bin/env python3
"""The README's pictures, drawn from the studies' results.json (nothing is measured here).

- dedup/throughput-by-size.png: `urlseen dedup` and its peers by input size, from
  dedup/results.json's "by_size" (else "by_size_quick"): lines per second (wall time, start-up
  included) and peak RSS against input lines, log-log, one line per tool. The dev file's heads
  and the dev file are one series; the feed (another real set) and the 20M synthetic set are
  drawn as their own markers at their sizes.
- redis/server-cpu-by-kind.png: Redis server CPU seconds per million URLs checked, per shared
  way, on the stream of repeats and the stream of new URLs (redis/results.json, "shared").
- integrations/memory-per-request.png: bytes per request of each dupefilter or request queue
  at the end of its run (integrations/results.json): the Scrapy process after 10M requests,
  Redis after 200,000, the Crawlee process after 50,000.
- integrations/memory-as-a-crawl-grows.png: the same memory sampled as the crawl grows
  (integrations/memory.py's "samples"): Redis under scrapy-redis's scheduler, the Crawlee
  process's resident set.

Usage:
    python benchmarks/tools/plots.py [dedup] [redis] [integrations] [growth]   # default: all
Needs matplotlib (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BENCH = Path(__file__).resolve().parents[1]
SERIES = ("lines-1", "lines-1k", "lines-10k", "lines-100k", "lines-1m", "dev")
ALONE = {"feed": ("s", "feed (2nd real set)"), "synthetic": ("D", "20M distinct, generated")}


def _load(study: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BENCH / study / "results.json").read_text())
    return data


def _save(fig: Any, title: str, study: str, name: str) -> Path:
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out = BENCH / study / name
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def dedup_by_size() -> Path:
    data = _load("dedup")
    result = data.get("by_size") or data.get("by_size_quick")
    if result is None:
        raise SystemExit("dedup/results.json has no by_size rows: run pipeline.py --by-size")
    rows = [r for r in result["rows"] if r["ok"]]
    tools = list(dict.fromkeys(r["tool"] for r in rows))
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(13, 5.2))
    own = [tool for tool in tools if not tool.startswith("base ")]
    for tool in tools:  # a base build's row (pipeline.py --base): dashed, its branch row's color
        color = f"C{own.index(tool.removeprefix('base '))}" if tool not in own else ""
        color = color or f"C{own.index(tool)}"
        style = "o--" if tool not in own else "o-"
        mine = {r["set"]: r for r in rows if r["tool"] == tool}
        line = [mine[s] for s in SERIES if s in mine]
        for axis, value in ((speed, "lines_per_second"), (memory, "rss_mib")):
            axis.plot([r["lines"] for r in line], [max(r[value], 1e-3) for r in line], style,
                      color=color, label=tool)  # fmt: skip
            for name, (marker, _) in ALONE.items():
                if name in mine:
                    axis.plot(mine[name]["lines"], max(mine[name][value], 1e-3), marker,
                              color=color, markersize=7, markerfacecolor="none")  # fmt: skip
    for marker, text in ALONE.values():
        speed.plot([], [], marker, color="grey", markerfacecolor="none", label=text)
    speed.set(xscale="log", yscale="log", xlabel="input lines",
              ylabel="lines per second (wall time, start-up included)",
              title="Throughput by input size (dev file's first N lines)")  # fmt: skip
    memory.set(xscale="log", yscale="log", xlabel="input lines", ylabel="peak RSS (MiB)",
               title="Peak memory by input size")  # fmt: skip
    for axis in (speed, memory):
        axis.grid(True, which="both", alpha=0.3)
    speed.legend(fontsize=8, loc="upper left")
    meta = result["meta"]
    quick = " (--quick run)" if "by_size" not in data else ""
    title = (f"urlseen dedup against line de-duplicators{quick}: {meta['date']}, "
             f"{meta['cpus']} CPUs, {meta.get('load', '')}")  # fmt: skip
    return _save(fig, title, "dedup", "throughput-by-size.png")


def redis_cpu_by_kind() -> Path:
    rows = _load("redis")["shared"]["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    labels = list(dict.fromkeys(f"{r['label']}, batch {r['batch']}" for r in rows))
    streams = (("repeats", "1M dev lines, 90% repeats"), ("new", "500k distinct URLs, all new"))
    for axis, (stream, title) in zip(axes, streams, strict=True):
        mine = {f"{r['label']}, batch {r['batch']}": r for r in rows if r["stream"] == stream}
        values = [mine[label]["cpu_s_per_million"] if label in mine else 0.0 for label in labels]
        colors = ["C3" if "SADD" in label else "C0" for label in labels]
        axis.barh(range(len(labels)), values, color=colors)
        for y, value in enumerate(values):
            axis.text(value, y, f" {value:.2f}", va="center", fontsize=8)
        axis.set(title=title, xlabel="Redis server CPU seconds per million URLs")
        axis.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(labels)), labels, fontsize=8)
    axes[0].invert_yaxis()
    meta = _load("redis")["shared"]["meta"]
    title = f"Redis CPU per way (red: scrapy-redis's SADD): {meta['date'][:10]}, {meta['cpu']}"
    return _save(fig, title, "redis", "server-cpu-by-kind.png")


def integrations_memory() -> Path:
    data = _load("integrations")
    scrapy = {r["kind"]: r for r in data["scrapy_dupefilter"]["memory"]}
    redis = data["memory"]["scrapy_redis"]
    crawlee = data["memory"]["crawlee"]
    panels = [
        (f"Scrapy process, {scrapy['scrapy']['n']:,} requests",
         {"Scrapy RFPDupeFilter": scrapy["scrapy"]["bytes_per_request"],
          "urlseen exact": scrapy["exact"]["bytes_per_request"],
          "urlseen bloom": scrapy["bloom"]["bytes_per_request"]}),
        (f"Redis, {redis['requests']:,} requests",
         {"scrapy-redis set": redis["scrapy_redis_set_bytes_per_request"],
          "scrapy-redis-bloomfilter default (a fixed 160 MiB)":
          redis["scrapy_redis_bloomfilter_default"] / redis["requests"],
          "urlseen exact (shared)": redis["urlseen_exact_bytes_per_request"],
          "urlseen bloom (shared)": redis["urlseen_bloom_bytes_per_request"]}),
        (f"Crawlee process, {crawlee['requests']:,} requests",
         {"Crawlee queue, memory": crawlee["crawlee-memory"]["rss_bytes_per_request"],
          "Crawlee queue, file system": crawlee["crawlee-filesystem"]["rss_bytes_per_request"],
          "UrlseenRequestManager": crawlee["urlseen"]["rss_bytes_per_request"]}),
    ]  # fmt: skip
    fig, axes = plt.subplots(3, 1, figsize=(9, 7.5))
    for axis, (title, bars) in zip(axes, panels, strict=True):
        names = list(bars)
        colors = ["C0" if name.startswith("urlseen") or "Urlseen" in name else "C3"
                  for name in names]  # fmt: skip
        axis.barh(range(len(names)), list(bars.values()), color=colors)
        for y, value in enumerate(bars.values()):
            axis.text(value, y, f" {value:,.1f}", va="center", fontsize=8)
        axis.set_yticks(range(len(names)), names, fontsize=8)
        axis.invert_yaxis()
        axis.set(title=title, xlabel="bytes per request (at the end of the run)")
        axis.set_xlim(0, 1.25 * max(bars.values()))
    title = ("Memory per request against each crawler's own (blue: urlseen); end points of "
             "each run, not sampled as the crawl grows")  # fmt: skip
    return _save(fig, title, "integrations", "memory-per-request.png")


def crawl_memory_growth() -> Path:
    """Memory sampled as a crawl grows: the dupefilter's keys in Redis under scrapy-redis's
    scheduler (the largest crawl of memory.py), and the Crawlee process's resident set."""
    data = _load("integrations")["memory"]
    crawl = max(data["scrapy_redis_crawl"]["crawls"], key=lambda c: c["distinct"])
    crawlee = data["crawlee"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    ways = {"scrapy_redis_set": "scrapy-redis set", "urlseen_exact": "urlseen exact (shared)",
            "urlseen_bloom": "urlseen bloom (shared)"}  # fmt: skip
    for way, label in ways.items():
        samples = crawl[way].get("samples")
        if samples:
            color = {"scrapy_redis_set": "C3", "urlseen_exact": "C0"}.get(way, "C2")
            mib = [s[2] / 2**20 for s in samples]
            left.plot([s[0] for s in samples], mib, label=label, color=color)
    left.set(title=f"Redis, scrapy-redis's scheduler ({crawl['distinct']:,} distinct URLs)",
             xlabel="requests checked", ylabel="dupefilter keys, MiB (MEMORY USAGE)",
             yscale="log")  # fmt: skip
    ways = {"crawlee-memory": "Crawlee queue, memory", "crawlee-filesystem":
            "Crawlee queue, file system", "urlseen": "UrlseenRequestManager"}  # fmt: skip
    for way, label in ways.items():
        samples = crawlee[way].get("samples")
        if samples:
            right.plot(
                [s[0] for s in samples],
                [s[1] / 2**20 for s in samples],
                label=label,
                color="C0" if way == "urlseen" else ("C3" if "memory" in way else "C1"),
            )
        color = "C0" if way == "urlseen" else ("C3" if "memory" in way else "C1")
        right.plot(crawlee[way]["requests"], crawlee[way]["rss_growth"] / 2**20, "o", color=color)
    right.plot([], [], "o", color="grey", label="after fetching every request")
    right.set(title=f"Crawlee process ({crawlee['requests']:,} requests added, then fetched)",
              xlabel="requests added", ylabel="resident set growth, MiB")  # fmt: skip
    for axis in (left, right):
        axis.xaxis.set_major_formatter(lambda value, _: f"{value / 1000:g}k")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    title = "Memory as a crawl grows (benchmarks/integrations/memory.py)"
    return _save(fig, title, "integrations", "memory-as-a-crawl-grows.png")


PLOTS = {
    "dedup": dedup_by_size,
    "redis": redis_cpu_by_kind,
    "integrations": integrations_memory,
    "growth": crawl_memory_growth,
}


def main() -> None:
    names = sys.argv[1:] or list(PLOTS)
    unknown = [n for n in names if n not in PLOTS]
    if unknown:
        raise SystemExit(f"unknown plot {unknown}: choose from {', '.join(PLOTS)}")
    for name in names:
        print(PLOTS[name]())


if __name__ == "__main__":
    main()
