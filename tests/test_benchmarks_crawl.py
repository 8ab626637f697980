"""benchmarks/crawl/run.py --quick: the crawl over a delayed network still runs, every way
crawls the whole site, Redis really is a round trip of ~1 ms further away, and nothing is left
behind (namespace, veth, servers). Needs root (ip netns): skipped without it, failed in CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from doc_site import in_ci

SCRIPT = REPO_ROOT / "benchmarks" / "crawl" / "run.py"
URLSEEN_WAYS = (
    "scrapy-redis+urlseen",
    "scrapy+urlseen-redis",
    "scrapy-redis+urlseen+prefetch",
    "scrapy+urlseen-redis+prefetch",
)
WAYS = ("scrapy-redis", *URLSEEN_WAYS, "scrapy")


def _ours(what: list[str]) -> set[str]:
    """Namespaces or links the benchmark names (usc<pid>...)."""
    out = subprocess.run(["ip", *what], capture_output=True, text=True).stdout
    return {word.rstrip(":@") for word in out.split() if word.startswith("usc")}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict:
    missing = [t for t in ("ip", "tc", "redis-server", "redis-cli", "gcc") if not shutil.which(t)]
    reason = "needs root (ip netns)" if os.geteuid() != 0 else None
    reason = reason or (f"needs {', '.join(missing)}" if missing else None)
    if reason:
        if in_ci():
            pytest.fail(f"the crawl benchmark {reason}, and CI must run it")
        pytest.skip(f"the crawl benchmark {reason}")
    before = _ours(["netns", "list"]) | _ours(["-o", "link"])
    out = tmp_path_factory.mktemp("crawl") / "crawl.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    left = (_ours(["netns", "list"]) | _ours(["-o", "link"])) - before
    assert not left, f"the benchmark left {sorted(left)} behind"
    return json.loads(out.read_text())


def test_every_way_crawls_the_whole_site(quick: dict) -> None:
    pages = quick["site"]["pages"]
    assert pages == 300
    rows = {r["way"]: r for r in quick["rows"]}
    assert set(rows) == set(WAYS)
    for way, r in rows.items():
        assert r["pages"] == pages, way
        assert r["finish_reason"] == "finished", way
        assert r["wall_seconds"] > 0 and r["pages_per_second"] > 0, way
    checked = {r["checked"] for r in rows.values()}
    assert len(checked) == 1, rows  # the same site: the same requests met
    assert rows["scrapy"]["repeat_share"] > 0.85  # link-rich, as a real site


def test_redis_is_one_delayed_round_trip_away(quick: dict) -> None:
    latency = quick["latency"]
    added = latency["rtt_delayed"]["median_us"] - latency["rtt_before_delay"]["median_us"]
    assert 800 <= added <= 2500, latency  # 1 ms asked; the relay adds a little of its own
    for way in WAYS[:-1]:
        r = next(r for r in quick["rows"] if r["way"] == way)
        assert r["server_reads"] > 0 and r["round_trips"].get("filter", 0) > 0, way
        # the client's count and the server's agree (the server also reads the pings and
        # hellos of connections the client opened)
        assert abs(r["client_round_trips"] - r["server_reads"]) <= 0.1 * r["server_reads"], r
    no_redis = next(r for r in quick["rows"] if r["way"] == "scrapy")
    assert no_redis["server_reads"] == 0 and no_redis["client_round_trips"] == 0


def test_summary_checks_the_targets(quick: dict) -> None:
    targets = quick["summary"]["targets"]
    assert set(targets) >= {"urlseen_filter_trips_per_checked", "trips_met", "speedup_median"}
    assert isinstance(targets["trips_met"], bool) and targets["speedup_median"] > 0
    assert set(quick["summary"]["targets_per_way"]) == set(URLSEEN_WAYS)
    for way in WAYS:
        assert quick["summary"]["per_way"][way]["pages_per_second"]["median"] > 0
