"""The kill tests' harness (crawl_site.py): the generated site is deterministic and served
whole, its failure modes fail as they say, and a killed crawl is really dead."""

from __future__ import annotations

import random
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from crawl_site import (
    ServedSite,
    fetched_pages,
    generate_site,
    kill_after,
    missing,
    start_crawl,
)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_same_seed_same_site_other_seed_other_links(tmp_path: Path) -> None:
    one, two = generate_site(tmp_path / "a", 200, 3), generate_site(tmp_path / "b", 200, 3)
    other = generate_site(tmp_path / "c", 200, 4)
    page = "p/0042.html"
    assert (one.root / page).read_text() == (two.root / page).read_text()
    assert (one.root / page).read_text() != (other.root / page).read_text()
    assert one.paths == two.paths
    with_query = {p for p in one.paths if "?" in p}
    assert with_query and all(p.endswith("?a=1&b=2") for p in with_query)
    assert len(one.paths) == 1 + 200 + len(with_query)


def test_served_site_holds_every_page_and_its_links(crawl_site: ServedSite) -> None:
    assert len(crawl_site.site.paths) >= 1000
    status, body = get(crawl_site.url)
    assert status == 200 and b'href="/p/0000.html"' in body
    status, body = get(crawl_site.base + "/p/0007.html")
    assert status == 200 and body.count(b"<a href=") == 11  # ten links, one of them twice
    assert crawl_site.served == 2 and crawl_site.requests["/p/0007.html"] == 1
    assert crawl_site.base + "/p/0007.html" in crawl_site.urls


def test_failures_then_pages(serve_site: Callable[..., ServedSite]) -> None:
    served = serve_site(pages=50)
    served.fail_next(2)
    assert get(served.url)[0] == 503 and get(served.url)[0] == 503
    assert get(served.url)[0] == 200
    served.fail_next(1, status=None)
    with pytest.raises((ConnectionError, urllib.error.URLError, OSError)):
        get(served.url)
    served.down()
    with pytest.raises(urllib.error.URLError):
        get(served.url)
    served.up()
    assert get(served.url)[0] == 200
    assert served.served == 2


def test_kill_after_a_seeded_delay_or_some_lines(tmp_path: Path) -> None:
    out = tmp_path / "lines.txt"
    writer = f"import time\nwith open({str(out)!r}, 'a', buffering=1) as f:\n" + (
        "    for i in range(10**6): f.write(f'http://x.test/{i}\\n'); time.sleep(0.005)\n"
    )
    crawl = start_crawl([sys.executable, "-c", writer], tmp_path / "log")
    said = kill_after(crawl, lines=(out, 20))
    assert crawl.proc.returncode == -9 and "at 20 lines" in said
    written = len(out.read_text().splitlines())
    assert 20 <= written < 200
    crawl = start_crawl([sys.executable, "-c", writer], tmp_path / "log")
    said = kill_after(crawl, random.Random(1), seconds=(0.2, 0.4))
    assert crawl.proc.returncode == -9 and said.startswith("killed after 0.")
    counts = fetched_pages([out, tmp_path / "never-written"])
    assert counts["http://x.test/0"] == 2 and len(counts) >= written


def test_missing_counts_canonical_urls(crawl_site: ServedSite, tmp_path: Path) -> None:
    fetched = tmp_path / "fetched"
    query = next(p for p in crawl_site.site.paths if "?" in p)
    reordered = query.replace("?a=1&b=2", "?b=2&a=1")
    fetched.write_text(f"{crawl_site.url}\n{crawl_site.base}{reordered}#top\n")
    left = missing(crawl_site, fetched_pages([fetched]))
    assert len(left) == len(crawl_site.urls) - 2
