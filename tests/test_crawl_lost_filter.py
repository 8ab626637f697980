"""`urlseen crawl --redis` whose shared filter is lost mid-crawl (FLUSHDB on a private
redis-server) stops promptly with a one-line error naming the loss and exit status 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import in_ci
from doc_site import slowed, wait_served

if not in_ci():  # CI installs urlseen[test], Scrapy included: there a missing one fails
    pytest.importorskip("scrapy")


def test_crawl_stops_with_status_1_when_the_shared_filter_is_lost(
    server: Any, site: str, redis_servers: Any, tmp_path: Path
) -> None:
    private = redis_servers(persist=False)
    command = [sys.executable, "-m", "urlseen", "crawl", site + "index.html", "--prefix", site]
    command += ["--no-progress", "--concurrency", "4"]
    command += ["--redis", private.url, "--name", "lost", "--capacity", "100000"]
    with slowed(server, 0.2) as procs:  # a crawl of ~5 s: the fault lands mid-crawl
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        wait_served(server, 4, procs)
        private.client().flushdb()
        out, err = proc.communicate(timeout=40)
    assert proc.returncode == 1, f"exit {proc.returncode}\n{out}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: the crawl stopped (urlseen_filter_lost)"), last
    assert "FilterLostError" in last and "passed on unchecked" in last
    # Nothing written back. A frontier call that met the flush first leaves the marker that
    # stops every other client (mark.lua: its write marks went back in time), and only that.
    client = private.client()
    left = {k: set(client.hkeys(k)) for k in client.keys("*")}
    assert all(k.endswith(b":marks") and f == {b"rolled_back"} for k, f in left.items()), left
