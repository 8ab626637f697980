"""The website the crawl tests crawl: the Python documentation from Debian's python3-doc
package, served by a real HTTP server (http.server, threaded) on loopback. The fixtures
`server` and `site` are registered in conftest.py; `Gate` makes crawls started together start
together."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest


def in_ci() -> bool:
    """True when the environment says we run in CI (CI=true, as most CI services set it)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


DOC_ROOTS = ("/usr/share/doc/python3-doc/html", "/usr/share/doc/python3.11-doc/html")
SECTION = "c-api/"


def doc_root() -> Path:
    candidates = [Path(p) for p in DOC_ROOTS] + sorted(
        Path("/usr/share/doc").glob("python3*-doc/html")
    )
    for root in candidates:
        if (root / SECTION / "index.html").is_file():
            return root
    message = "the Python documentation (Debian package python3-doc) is not installed"
    if in_ci():
        pytest.fail(f"{message}, and CI is set: .ci/run installs it")
    pytest.skip(f"{message}: apt-get install python3-doc to run the crawl tests")


_served_lock = threading.Lock()


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the documentation; the first `server.hold` requests wait for one another, so
    crawls started together really start together (whatever their start-up times). Counts
    the requests it was sent (`server.served`): a test can act mid-crawl."""

    def do_GET(self) -> None:
        with _served_lock:
            self.server.served = getattr(self.server, "served", 0) + 1  # type: ignore[attr-defined]
        delay = getattr(self.server, "delay", 0.0)
        if delay:  # a slower site: crawls that start apart still overlap
            time.sleep(delay)
        gate = getattr(self.server, "gate", None)
        if gate is not None:
            with contextlib.suppress(threading.BrokenBarrierError):
                gate.wait()
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


class Gate:
    """Holds the first `parties` requests until all of them have arrived; then none."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=60)
        self.lock, self.left = threading.Lock(), parties

    def wait(self) -> None:
        with self.lock:
            if self.left == 0:
                return
            self.left -= 1
        self.barrier.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    """A real HTTP server (http.server, threaded) on 127.0.0.1, a free port."""
    root = doc_root()
    handler = functools.partial(_Handler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="session")
def site(server: http.server.ThreadingHTTPServer) -> str:
    """The section's base URL."""
    return f"http://127.0.0.1:{server.server_address[1]}/{SECTION}"


def fetched_once(urls: list[str]) -> set[str]:
    """The set of URLs, after checking that none was fetched twice."""
    twice = [u for u, n in Counter(urls).items() if n > 1]
    assert not twice, f"fetched more than once: {twice[:5]}"
    return set(urls)


def wait_served(
    server: http.server.ThreadingHTTPServer, more: int, procs: list, seconds: float = 60
) -> None:
    """Until the server was sent `more` requests from now on, while every crawl in `procs`
    runs: a test's fault then lands mid-crawl."""
    until = getattr(server, "served", 0) + more
    end = time.monotonic() + seconds
    while getattr(server, "served", 0) < until:
        assert all(p.poll() is None for p in procs), "a crawl ended before the fault"
        assert time.monotonic() < end, f"fewer than {more} requests in {seconds} s"
        time.sleep(0.02)


@contextlib.contextmanager
def slowed(server: http.server.ThreadingHTTPServer, delay: float) -> Iterator[list]:
    """The site slowed by `delay` s a page (a fault then lands mid-crawl); yields a list for
    the crawls' processes, each killed afterwards if still running (none left writing to a
    Redis after the test)."""
    procs: list = []
    server.delay = delay  # type: ignore[attr-defined]
    try:
        yield procs
    finally:
        server.delay = 0.0  # type: ignore[attr-defined]
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
