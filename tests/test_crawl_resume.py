"""Crawls killed with SIGKILL at random moments, then run again until they finish: every page
of a generated 1,000-page site is fetched at least once across the runs, and each kill costs
at most the requests that were in flight (refetched).

The site is written by `write_site` and served on loopback by a threaded http.server that
records every request (the refetches are counted there). Each crawl records the pages it got
(--fetched, or the spider's own file): a page counts as fetched once a response reached the
crawler. Kills land after a random number of the site's requests (seeded per test; the seed
is printed, `-s` shows it), so they hit start-up, admission, fetching and closing alike.
"""

from __future__ import annotations

import functools
import http.server
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import in_ci

if not in_ci():  # CI installs urlseen[test], Scrapy included: there a missing one fails
    pytest.importorskip("scrapy")

PAGES = 1000
LINKS = 8  # random links per page, besides the next page's: every page is reachable
CONCURRENCY = 8
# Requests in flight at a kill, refetched after it: at most CONCURRENT_REQUESTS downloading
# plus the responses whose callbacks Scrapy's scraper holds (few on this site).
REFETCH_BOUND = 2 * CONCURRENCY


def write_site(root: Path, pages: int = PAGES, seed: int = 25) -> set[str]:
    """A site of `pages` cross-linked HTML pages; the paths a complete crawl fetches."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = set()
    for i in range(pages):
        links = [(i + 1) % pages, *(rng.randrange(pages) for _ in range(LINKS))]
        body = " ".join(f'<a href="/p{j}.html">page {j}</a>' for j in links)
        name = "index.html" if i == 0 else f"p{i}.html"
        (root / name).write_text(f"<html><body><h1>{i}</h1>{body}</body></html>")
        paths.add("/" if i == 0 else f"/{name}")
    (root / "p0.html").write_text('<html><body><a href="/">home</a></body></html>')
    return paths | {"/p0.html"}


class _Recording(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        site: Site = self.server.site  # type: ignore[attr-defined]
        with site.lock:
            site.requests.append(self.path)
        if self.path in site.broken:
            self.send_error(503)
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Site:
    url: str
    root: Path
    pages: set[str]
    requests: list[str] = field(default_factory=list)
    broken: set[str] = field(default_factory=set)  # paths answered 503
    lock: threading.Lock = field(default_factory=threading.Lock)

    def served(self) -> int:
        return len(self.requests)


def serve(site: Site, port: int = 0) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(_Recording, directory=str(site.root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    server.site = site  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def generated_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("site")
    site = Site("", root, write_site(root))
    server = serve(site)
    site.url = f"http://127.0.0.1:{server.server_address[1]}/"
    yield site
    server.shutdown()
    server.server_close()


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("URLSEEN_KILL_SEED", random.randrange(2**32)))
    print(f"{name}: kill moments seeded with {seed} (URLSEEN_KILL_SEED={seed} repeats them)")
    return random.Random(seed)


def kill_at_random(command: list[str], site: Site, rng: random.Random, **popen: object) -> bool:
    """Start the command and kill it at a random moment (kill_after); False if it ended
    first."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **popen)
    return kill_after(proc, site, rng)


def kill_after(proc: subprocess.Popen, site: Site, rng: random.Random) -> bool:
    """SIGKILL proc after a random number of the site's requests from now (1-80, then
    0-50 ms: ten kills stay within a 1,001-page site); False if it ended first."""
    until = site.served() + rng.randint(1, 80)
    deadline = time.monotonic() + 60
    while site.served() < until and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.05))
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    return killed


def run(command: list[str], status: int = 0, **popen: object) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, **popen)
    assert done.returncode == status, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def paths(lines: list[str], site: Site) -> list[str]:
    return [line[len(site.url) - 1 :] for line in lines if line.startswith(site.url)]


def check_every_page(
    site: Site,
    fetched: list[str],
    mark: int,
    kills: int,
    bound: int = REFETCH_BOUND,
    in_flight: int | None = None,
) -> None:
    """Every page fetched at least once; refetches (requests the server got more than once
    since mark) within the bound per kill, or, given in_flight (the requests the frontier
    had handed out and not seen done at the kills, read from its state), at most those."""
    missing = site.pages - set(fetched)
    assert not missing, f"{len(missing)} pages never fetched, e.g. {sorted(missing)[:5]}"
    requested = site.requests[mark:]
    refetched = len(requested) - len(set(requested))
    most = kills * bound if in_flight is None else in_flight
    print(f"{kills} kills: {len(requested)} requests for {len(site.pages)} pages, {refetched} "
          f"refetched (at most {most})")  # fmt: skip
    assert refetched <= most, f"{refetched} refetched after {kills} kills (at most {most})"


def crawl_command(site: Site, fetched: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "urlseen", "crawl", site.url, "--no-progress",
        "--concurrency", str(CONCURRENCY), "--fetched", str(fetched), *args,
    ]  # fmt: skip


def test_local_crawl_killed_ten_times_fetches_every_page(
    generated_site: Site, tmp_path: Path
) -> None:
    site, rng = generated_site, seeded("local crawl")
    fetched = tmp_path / "fetched.txt"
    command = crawl_command(site, fetched, "--jobdir", str(tmp_path / "job"))
    mark = site.served()
    kills = sum(kill_at_random(command, site, rng) for _ in range(10))
    assert kills >= 8, "the crawls ended before their kills"
    final = run(command)
    assert "(finished)" in final.stdout and "left to fetch" not in final.stdout
    check_every_page(site, paths(fetched.read_text().splitlines(), site), mark, kills)


def test_a_crawl_of_a_site_down_fails_in_one_line_and_resumes_when_it_is_back(
    tmp_path: Path,
) -> None:
    root = tmp_path / "site"
    site = Site("", root, write_site(root, pages=50))
    down = serve(site)  # a free port, closed again: the site is down
    port = down.server_address[1]
    down.shutdown()
    down.server_close()
    site.url = f"http://127.0.0.1:{port}/"
    fetched = tmp_path / "fetched.txt"
    command = crawl_command(site, fetched, "--jobdir", str(tmp_path / "job"))
    failed = run(command, status=3)  # 3: pages left to fetch
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no page fetched: "), lines
    assert site.url in lines[0] and "refused" in lines[0]
    up = serve(site, port)
    try:
        done = run(command)
    finally:
        up.shutdown()
        up.server_close()
    assert "(finished)" in done.stdout
    assert set(paths(fetched.read_text().splitlines(), site)) == site.pages
