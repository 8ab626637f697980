"""Shared fixtures: state-file paths and the real-world URL development set.

The development set (/work/shared/data/urls-dev.txt.gz, see its README) lives outside the
repository and is never copied into it. Tests that need it skip with a clear reason when it is
missing locally, and fail when CI is set: CI must run them.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import pytest

from crawl_site import crawl_site, serve_site  # noqa: F401 - fixtures of the kill tests
from doc_site import Gate, fetched_once, in_ci, server, site  # noqa: F401 - fixtures and helpers for the tests

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEV_URLS = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"


# The modules that take longest, run first (in this order) so that none of them starts near
# the end and keeps the run waiting on one process. pyproject.toml's addopts send each module
# to one process as a whole (--dist loadscope: a module fixture runs once) in this order
# (--no-loadscope-reorder).
SLOW_FIRST = (
    "test_extras_install.py",
    "test_dsbf.py",
    "test_expiry_integrations.py",
    "test_scrapy_roundtrips.py",
    "test_fleet_leases.py",
    "test_shared_rollback.py",
    "test_shared_at_least_once.py",
    "test_crawl_resume_redis.py",
    "test_crawl_resume_scrapy.py",
    "test_line_engine.py",
    "test_benchmarks_redis.py",
    "test_redis_bloom.py",
    "test_benchmarks_crawl.py",
    "test_crawlee_kill.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        return SLOW_FIRST.index(module) if module in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


def filter_bits(seen: Any) -> bytes:
    """A local Bloom filter's bits, from its store's data offset (an in-memory store may start
    its data past the map's start, on a 2 MiB boundary: state/memory.py)."""
    store = seen._store
    start = store.data_offset
    return bytes(store.buffer[start : start + (seen.nbits + 7) // 8])


def dev_urls_path() -> Path:
    """Where the development set is: $URLSEEN_DEV_URLS, else <repo>/../shared/data/."""
    override = os.environ.get("URLSEEN_DEV_URLS")
    return Path(override) if override else DEFAULT_DEV_URLS


def _read_distinct(path: Path) -> list[str]:
    # One URL per line, UTF-8, LF endings (README). Keep first-appearance order so that every
    # run sees the same list; drop the empty line, which is not a URL.
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as lines:
        distinct = dict.fromkeys(line.rstrip("\n") for line in lines)
    distinct.pop("", None)
    return list(distinct)


def require_dev_urls_path() -> Path:
    """The development set's path; when it is missing, skip, or fail in CI."""
    path = dev_urls_path()
    if not path.is_file():
        if in_ci():
            pytest.fail(
                f"URL development set not found at {path} and CI is set: CI must run the "
                "real-data tests (set URLSEEN_DEV_URLS to its path)"
            )
        pytest.skip(
            f"URL development set not found at {path}; set URLSEEN_DEV_URLS to the path of "
            "urls-dev.txt.gz to run this test"
        )
    return path


@pytest.fixture(scope="session")
def dev_urls_optional() -> list[str] | None:
    """The distinct URLs of the development set, or None if it is missing (not in CI)."""
    path = dev_urls_path()
    if not path.is_file():
        if in_ci():
            pytest.fail(
                f"URL development set not found at {path} and CI is set: CI must run the "
                "real-data tests (set URLSEEN_DEV_URLS to its path)"
            )
        return None
    return _read_distinct(path)


@pytest.fixture(scope="session")
def dev_urls(dev_urls_optional: list[str] | None) -> list[str]:
    """The distinct URLs of the development set; skips (fails in CI) if it is missing."""
    if dev_urls_optional is None:
        require_dev_urls_path()
    assert dev_urls_optional is not None
    return dev_urls_optional


def fleet_streams(folder: Path, lines: int, window: int, workers: int = 4) -> list[Path]:
    """Overlapping input files for a fleet, from the dev set's first `lines` lines: worker w
    reads `window` lines starting at w * (lines - window) / (workers - 1)."""
    import itertools

    with gzip.open(require_dev_urls_path(), "rb") as source:
        head = list(itertools.islice(source, lines))
    step = (lines - window) // (workers - 1)
    paths = []
    for w in range(workers):
        path = folder / f"worker{w}.txt"
        path.write_bytes(b"".join(head[w * step : w * step + window]))
        paths.append(path)
    return paths


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    """A path for a state file that does not exist yet, in a fresh directory."""
    return tmp_path / "seen.urlseen"


@pytest.fixture
def other_state_path(tmp_path: Path) -> Path:
    """A second, distinct state-file path in the same directory as state_path."""
    return tmp_path / "other.urlseen"


# ---- Redis ------------------------------------------------------------------------------------

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"  # database 15: tests keep clear of real data


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A real Redis server's URL ($URLSEEN_REDIS_URL, else 127.0.0.1:6379 database 15).

    No server: skip with the reason, or fail in CI (.ci/run starts one)."""
    url = os.environ.get("URLSEEN_REDIS_URL", DEFAULT_REDIS_URL)
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:
        if in_ci():
            pytest.fail(f"Redis at {url} does not answer ({exc}) and CI is set: CI starts one")
        pytest.skip(f"no Redis server at {url} ({exc}); start one or set URLSEEN_REDIS_URL")
    return url


@pytest.fixture
def redis_name(redis_url: str, request: pytest.FixtureRequest):
    """A filter name unique to this test; every key holding it is deleted afterwards: urlseen's
    (`urlseen:{name...`, `urlseen:{scrapy:name}...`) and other packages' (scrapy-redis's
    `name:requests`, ...).

    The name holds only letters, digits, '-', '_' and '.': a parametrized test's id (`[...]`)
    would be a character class in the SCAN pattern, so its keys would never be found."""
    import re
    import uuid

    import redis

    plain = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:40]
    name = f"test-{plain}-{uuid.uuid4().hex[:8]}"
    yield name
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"*{name}*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory):
    """A Redis Cluster of 3 masters on loopback, started for the test session with
    `redis-cli --cluster create`; its URL is redis-cluster://127.0.0.1:<port>."""
    import random
    import shutil
    import socket
    import subprocess
    import time

    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        if in_ci():
            pytest.fail("redis-server and redis-cli are needed for the cluster tests in CI")
        pytest.skip("redis-server / redis-cli not installed: no Redis Cluster tests")

    def free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
            return True

    # A cluster node also listens on port + 10000 (its bus): both must be free and <= 65535.
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < 3:
        port = rng.randrange(20000, 45000)
        if port not in ports and free(port) and free(port + 10000):
            ports.append(port)
    folder = tmp_path_factory.mktemp("redis-cluster")
    procs = [
        subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(p),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{p}.conf",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
            ],
            stdout=subprocess.DEVNULL,
        )
        for p in ports
    ]
    try:
        for p in ports:
            for _ in range(100):
                if subprocess.run(["redis-cli", "-p", str(p), "ping"], capture_output=True).stdout:
                    break
                time.sleep(0.05)
        create = ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports]]
        subprocess.run([*create, "--cluster-replicas", "0", "--cluster-yes"], check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        for _ in range(200):
            info = subprocess.run(
                ["redis-cli", "-p", str(ports[0]), "cluster", "info"], capture_output=True
            ).stdout
            if b"cluster_state:ok" in info:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the Redis Cluster did not reach cluster_state:ok")
        yield f"redis-cluster://127.0.0.1:{ports[0]}"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


class PrivateRedis:
    """A redis-server of this test's own, persisting every write (appendfsync always; with
    persist=False nothing: a restart comes back empty), that the test can kill with SIGKILL and
    start again on the same port and files. `config`: more redis-server options, e.g.
    ("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")."""

    def __init__(self, folder, *config: str, persist: bool = True) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.folder = folder
        self.config = config
        self.persist = persist
        self.proc = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis(port=self.port)

    def start(self) -> None:
        import subprocess
        import time

        import redis

        durability = ("--appendonly", "yes", "--appendfsync", "always") if self.persist else (
            "--appendonly", "no")  # fmt: skip
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", *durability,
             "--save", "", "--dir", str(self.folder), *self.config],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(200):
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError("private redis-server did not start")

    def kill(self) -> None:
        import signal

        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def _need_redis_server() -> None:
    import shutil

    if not shutil.which("redis-server"):
        if in_ci():
            pytest.fail("redis-server is needed for the outage tests in CI")
        pytest.skip("redis-server not installed: no outage tests")


@pytest.fixture
def private_redis(tmp_path, redis_url):  # redis_url: skip (or fail in CI) without Redis
    _need_redis_server()
    private = PrivateRedis(tmp_path)
    private.start()
    yield private
    if private.proc is not None and private.proc.poll() is None:
        private.kill()


@pytest.fixture
def redis_servers(tmp_path, redis_url):
    """Start private redis-servers: redis_servers(*config, persist=True) -> a started
    PrivateRedis; each one is killed after the test."""
    _need_redis_server()
    servers: list[PrivateRedis] = []

    def start(*config: str, persist: bool = True) -> PrivateRedis:
        folder = tmp_path / f"redis-{len(servers)}"
        folder.mkdir()
        private = PrivateRedis(folder, *config, persist=persist)
        servers.append(private)
        private.start()
        return private

    yield start
    for private in servers:
        if private.proc is not None and private.proc.poll() is None:
            private.kill()
