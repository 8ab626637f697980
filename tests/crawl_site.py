"""A generated site for the crawl kill tests, served on loopback, and the helpers that start a
crawl in a subprocess, kill it with SIGKILL mid-crawl and count the pages fetched across runs.

The site (`generate_site`): `pages` HTML files (default 1,000), deterministic from `seed`.
`/` is the start page; every page `/p/NNNN.html` links to the next one (so all are reachable)
and to about ten others drawn at random, some of them twice, some with a fragment
(`#s3`), and every seventh page also with a query in two orders (`?a=1&b=2`, `?b=2&a=1`):
one more page after canonicalisation (w3lib's rule, and Crawlee's unique key, agree on it).
`Site.urls` is the set of canonical URLs a complete crawl fetches; all are lower-case.

Fixtures (registered in conftest.py):
- `serve_site(pages=1000, seed=0)` -> a started `ServedSite`; every one is stopped at teardown.
- `crawl_site`: `serve_site()` with the defaults.

`ServedSite` (a threaded `http.server` on 127.0.0.1, a free port):
- `.url` (the start URL), `.prefix` (what a crawl follows), `.site` (the `Site`),
  `.served` (requests not failed on purpose), `.requests` (a Counter of their paths, query
  included);
- `.delay = s`: every request waits s seconds first (a slower crawl, so a kill lands mid-crawl);
- `.fail_next(m, status=503)`: the next m requests get that HTTP status, or with status=None
  the connection is reset unanswered;
- `.failing[path] = status`: every request for that path gets that status (None: a reset
  connection) until the entry is removed;
- `.down()` / `.up()`: stop listening (connections refused) and listen again on the same port.

Crawls in subprocesses (each in its own process group, output to a log file):
- `start_crawl(argv, log, cwd=..., env=...)` -> `Crawl` (`.proc`, `.log_text()`);
- `kill_after(crawl, rng, seconds=(lo, hi))` or `kill_after(crawl, lines=(file, k))`: SIGKILL
  the crawl's process group after a random delay drawn from `rng` or once `file` has k lines;
  returns a description ("killed after 1.84 s", or "ended by itself, rc 0") for messages;
- `finish(crawl, timeout)` -> return code, the group killed if it overruns;
- `fetched_pages(files)` -> Counter of canonical URLs over `--fetched` files (one URL a line);
- `missing(site, counts)`: the site's pages fetched in none of the runs.

A kill test seeds its `random.Random` from $URLSEEN_KILL_SEED (default: a fixed number) and
puts the seed and each kill's description in its assertion messages, so a failure replays.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from urlseen.canonical import canonicalize

DEFAULT_PAGES = 1000
LINKS_PER_PAGE = 10
QUERY_EVERY = 7  # every 7th page is also linked with a query, in two orders


def kill_seed() -> int:
    """The kill tests' seed: $URLSEEN_KILL_SEED, else a fixed one (a failure replays)."""
    return int(os.environ.get("URLSEEN_KILL_SEED", "20261129"))


def page_path(number: int) -> str:
    return f"/p/{number:04d}.html"


@dataclass(frozen=True)
class Site:
    """A generated site in `root`; `paths` are the distinct pages a complete crawl fetches
    (start page included), as URL paths with their canonical query."""

    root: Path
    pages: int
    seed: int
    paths: frozenset[str]

    def urls(self, base: str) -> set[str]:
        """The canonical URLs of every page, under `base` (http://host:port)."""
        return {canonicalize(base + path) for path in self.paths}


def _links(number: int, pages: int, rng: random.Random) -> list[str]:
    targets = [(number + 1) % pages, *rng.sample(range(pages), LINKS_PER_PAGE - 1)]
    targets.append(targets[rng.randrange(len(targets))])  # one link twice
    links = []
    for target in targets:
        href = page_path(target)
        shape = rng.randrange(6)
        if shape == 0:
            href += f"#s{rng.randrange(5)}"
        elif target % QUERY_EVERY == 0 and shape in (1, 2):
            href += "?a=1&b=2" if shape == 1 else "?b=2&a=1"
        links.append(href)
    return links


def generate_site(root: Path, pages: int = DEFAULT_PAGES, seed: int = 0) -> Site:
    """Write the site into `root` (which must not hold another one): `/index.html` and
    `/p/NNNN.html` for NNNN < pages. The same pages and seed give the same site."""
    rng = random.Random(seed)
    (root / "p").mkdir(parents=True)
    paths = {"/", *(page_path(n) for n in range(pages))}
    for number in range(pages):
        links = _links(number, pages, rng)
        paths.update(link.split("#")[0].replace("?b=2&a=1", "?a=1&b=2") for link in links)
        anchors = "\n".join(f'<a href="{href}">link {i}</a>' for i, href in enumerate(links))
        body = f"<h1>page {number}</h1>\n{anchors}\n"
        (root / page_path(number)[1:]).write_text(_html(f"page {number}", body))
    start = f'<a href="{page_path(0)}">first</a> <a href="{page_path(pages // 2)}">middle</a>'
    (root / "index.html").write_text(_html("start", start))
    return Site(root, pages, seed, frozenset(paths))


def _html(title: str, body: str) -> str:
    return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _SiteHTTPServer

    def do_GET(self) -> None:
        owner = self.server.owner
        if owner.delay:
            time.sleep(owner.delay)
        status = owner.take_failure(self.path)
        if status is _RESET:
            # SO_LINGER 0: close() sends RST, the client sees the connection reset.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            self.close_connection = True
            return
        if status is not None:
            self.send_error(int(status), "failing on purpose")
            return
        owner.count(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


class _SiteHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: ServedSite


_RESET = object()


@dataclass
class ServedSite:
    """A `Site` served by a threaded http.server on 127.0.0.1 (see the module's docstring)."""

    site: Site
    port: int = 0
    delay: float = 0.0
    served: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    _failures: list[object] = field(default_factory=list)
    failing: dict[str, int | None] = field(default_factory=dict)  # path -> status (None: reset)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: _SiteHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/"

    @property
    def prefix(self) -> str:
        return self.base + "/"

    @property
    def urls(self) -> set[str]:
        """The canonical URLs of every page: what a complete crawl fetches."""
        return self.site.urls(self.base)

    def up(self) -> None:
        """Listen (again, on the same port once it had one) and serve."""
        handler = functools.partial(_Handler, directory=str(self.site.root))
        httpd = _SiteHTTPServer(("127.0.0.1", self.port), handler)
        httpd.owner = self
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Stop listening: connections to the port are refused until up()."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def fail_next(self, count: int, status: int | None = 503) -> None:
        """The next `count` requests get HTTP `status`, or (None) a reset connection."""
        with self._lock:
            self._failures.extend([_RESET if status is None else status] * count)

    def take_failure(self, path: str = "") -> object | None:
        with self._lock:
            if path in self.failing:
                status = self.failing[path]
                return _RESET if status is None else status
            return self._failures.pop(0) if self._failures else None

    def count(self, path: str) -> None:
        with self._lock:
            self.served += 1
            self.requests[path] += 1


_generated: dict[tuple[int, int], Site] = {}


@pytest.fixture
def serve_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ServedSite]]:
    """serve_site(pages=1000, seed=0) -> a started ServedSite (a site generated once per
    session for each (pages, seed)); each is stopped after the test."""
    started: list[ServedSite] = []

    def serve(pages: int = DEFAULT_PAGES, seed: int = 0) -> ServedSite:
        if (pages, seed) not in _generated:
            root = tmp_path_factory.mktemp(f"site-{pages}-{seed}")
            _generated[pages, seed] = generate_site(root, pages, seed)
        served = ServedSite(_generated[pages, seed])
        served.up()
        started.append(served)
        return served

    yield serve
    for served in started:
        served.down()


@pytest.fixture
def crawl_site(serve_site: Callable[..., ServedSite]) -> ServedSite:
    """The default generated site (1,000 pages, seed 0), served for this test."""
    return serve_site()


# -- crawls in subprocesses ----------------------------------------------------------------------


@dataclass
class Crawl:
    """A crawl running in its own process group; its output goes to `log`."""

    proc: subprocess.Popen[bytes]
    log: Path

    def log_text(self, tail: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-tail:] if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group (the crawl and any child it started)."""
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def start_crawl(
    argv: Sequence[str], log: Path, *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Crawl:
    """Start `argv` in a new session (its own process group), stdout and stderr to `log`."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return Crawl(proc, log)


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def kill_after(
    crawl: Crawl,
    rng: random.Random | None = None,
    *,
    seconds: tuple[float, float] = (1.0, 4.0),
    lines: tuple[Path, int] | None = None,
    timeout: float = 120,
) -> str:
    """SIGKILL `crawl` after a delay drawn uniformly from `seconds` by `rng`, or (with `lines`
    = (file, k)) once the file has k lines; returns what happened, for assertion messages. A
    crawl that ends first is left alone ("ended by itself, rc N")."""
    start = time.monotonic()
    if lines is None:
        assert rng is not None, "kill_after needs rng (a delay) or lines (file, k)"
        delay = rng.uniform(*seconds)
    while crawl.proc.poll() is None:
        elapsed = time.monotonic() - start
        if lines is None and elapsed >= delay:
            crawl.kill()
            return f"killed after {delay:.2f} s"
        if lines is not None and _lines(lines[0]) >= lines[1]:
            crawl.kill()
            return f"killed at {lines[1]} lines of {lines[0].name}, after {elapsed:.2f} s"
        if elapsed >= timeout:
            crawl.kill()
            raise AssertionError(f"no kill cue in {timeout} s:\n{crawl.log_text()}")
        time.sleep(0.01)
    return f"ended by itself, rc {crawl.proc.returncode}"


def finish(crawl: Crawl, timeout: float = 120) -> int:
    """Wait for the crawl's end; past `timeout` kill it and fail with its log."""
    try:
        return crawl.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        crawl.kill()
        raise AssertionError(f"the crawl ran past {timeout} s:\n{crawl.log_text()}") from None


def fetched_pages(files: Iterable[Path]) -> Counter[str]:
    """How many times each canonical URL appears across `--fetched` files (missing files
    count as empty: a run killed before its first page)."""
    counts: Counter[str] = Counter()
    for path in files:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    counts[canonicalize(line)] += 1
    return counts


def missing(served: ServedSite, counts: Counter[str]) -> set[str]:
    """The site's pages that no run fetched."""
    return served.urls - set(counts)
