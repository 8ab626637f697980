"""A Crawlee crawl (ParselCrawler, UrlseenRequestManager) whose shared filter is lost
mid-crawl (a private redis-server restarted empty) stops with FilterLostError, promptly, and
leaves nothing in Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import in_ci
from doc_site import slowed, wait_served

if not in_ci():  # CI installs urlseen[test], Crawlee included: there a missing one fails
    pytest.importorskip("crawlee")

from test_crawlee import _job


def test_crawl_stops_when_the_shared_filter_is_lost(
    server: Any, site: str, redis_servers: Any, tmp_path: Path
) -> None:
    private = redis_servers(persist=False)
    options = {"redis_url": private.url, "redis_name": "lost", "capacity": 100_000}
    with slowed(server, 0.2) as procs:  # a crawl of ~5 s: the fault lands mid-crawl
        proc = _job(site, tmp_path, "one", manager="urlseen", state=None, options=options)
        procs.append(proc)
        wait_served(server, 4, procs)
        private.kill()
        private.start()  # empty: the filter is gone
        out, _ = proc.communicate(timeout=40)
    assert proc.returncode != 0, out[-3000:]
    assert "FilterLostError" in out and "crawling will be terminated" in out, out[-3000:]
    assert not private.client().keys("*")  # no fleet member written back
