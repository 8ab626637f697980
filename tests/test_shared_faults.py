"""What a shared filter does when Redis loses its data, may evict it, runs out of memory half
way through a batch, or is given names and URLs that could collide or mislead: every case is a
clear error or a correct answer, never a silent reset, a hang or a traceback. Each test that
breaks a server starts its own (redis_servers)."""

from __future__ import annotations

import gzip
import itertools
import subprocess
import sys
import time
from itertools import permutations
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import assert_clean_error, invoke
from conftest import require_dev_urls_path
from urlseen import ConfigError, kinds
from urlseen.errors import EvictionPolicyError, FilterLostError, RemoteError
from urlseen.shared import client as redis_store

SHARED = ("bloom", "exact", "dsbf")
SIZES = {"bloom": {"capacity": 100_000, "error_rate": 1e-9}, "exact": {"capacity": 100_000},
         "dsbf": {"capacity": 2_000, "error_rate": 1e-9, "leaf_bits": 16384}}  # fmt: skip


def _open(kind: str, url: str, name: str, **options: object):
    return kinds.open_filter(kind, redis=url, name=name, lease=1.0, **SIZES[kind], **options)


def _urls(n: int, tag: str = "") -> list[str]:
    return [f"https://site{i % 37}.example/{tag}page/{i}" for i in range(n)]


@pytest.fixture(scope="module")
def many_urls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[bytes]]:
    """~46k real lines (every 13th of the dev set's first 600k), ~31k distinct."""
    with gzip.open(require_dev_urls_path(), "rb") as source:
        lines = list(itertools.islice(source, 0, 600_000, 13))
    path = tmp_path_factory.mktemp("faults") / "urls.txt"
    path.write_bytes(b"".join(lines))
    return path, {line.rstrip(b"\n") for line in lines if line.strip()}


# ---- keys that vanish ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["flushdb", "restart empty", "made again"])
@pytest.mark.parametrize("kind", SHARED)
def test_keys_vanishing_mid_run_stop_the_next_batch(kind, how, redis_servers):
    """FLUSHDB, a restart without persistence, or the filter deleted and made again by another
    client: the next batch raises FilterLostError within seconds and writes nothing (the server
    stays empty: no silent re-creation); len() says so too."""
    server = redis_servers(persist=False)
    seen = _open(kind, server.url, "crawl")
    assert all(seen.add_many(_urls(500)))
    if how == "restart empty":
        server.kill()
        server.start()
    else:
        server.client().flushdb()
    if how == "made again":
        _open(kind, server.url, "crawl").close()
    keys_before = server.client().dbsize()
    started = time.monotonic()
    with pytest.raises(FilterLostError, match=r"is gone|another filter|another library") as lost:
        seen.add_many(_urls(500, "more-"))
    assert time.monotonic() - started < 15
    assert "FLUSHDB" in str(lost.value) and "crawl" in str(lost.value)
    assert server.client().dbsize() == keys_before, "the lost filter was written to again"
    with pytest.raises(FilterLostError):
        len(seen)
    seen.close()


@pytest.mark.parametrize("kind", SHARED)
def test_dedup_stops_with_an_error_when_redis_is_flushed_mid_run(kind, many_urls, redis_servers):
    """`urlseen dedup --redis` whose filter is flushed while it runs exits 1 with the reason
    (the splittable filter no longer waits for a split that cannot finish)."""
    path, _ = many_urls
    server = redis_servers(persist=False)
    out = path.with_suffix(f".{kind}.out")
    command = [sys.executable, "-m", "urlseen", "dedup", "--filter", kind, "--redis", server.url,
               "--name", "crawl", "--batch-size", "500", "--no-canonicalize", "--no-progress",
               "--lease", "1", str(path), "-o", str(out)]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (out.exists() and out.stat().st_size > 0):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.002)
    server.client().flushdb()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err.decode()
    message = err.decode()
    assert "Traceback" not in message and "Error:" in message and "is gone" in message
    assert server.client().dbsize() == 0


# ---- servers that may evict -------------------------------------------------------------------


@pytest.mark.parametrize("kind", SHARED)
def test_an_evicting_server_is_refused_unless_allowed(kind, redis_servers, tmp_path):
    lru = redis_servers("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    with pytest.raises(EvictionPolicyError, match=r"allkeys-lru.*allow_eviction"):
        _open(kind, lru.url, "crawl")
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\nhttps://b.example/\n")
    shared = ["dedup", "--filter", kind, "--redis", lru.url, "--name", "crawl", src]
    assert_clean_error(invoke(*shared), 1, "allkeys-lru", "--allow-eviction")
    allowed = invoke(*shared, "--allow-eviction")
    assert allowed.exit_code == 0 and allowed.stdout.split() == ["https://a.example/",
                                                                 "https://b.example/"]  # fmt: skip
    volatile = redis_servers("--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
    with _open(kind, volatile.url, "crawl") as seen:  # only keys with a TTL go: never these
        assert all(seen.add_many(_urls(10)))
    usage = invoke("dedup", "--filter", kind, "--allow-eviction", src)
    assert_clean_error(usage, 2, "--allow-eviction", "--redis")


def test_an_evicted_key_stops_a_filter_that_allowed_eviction(redis_servers):
    server = redis_servers("--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
    seen = _open("bloom", server.url, "crawl", allow_eviction=True)
    assert all(seen.add_many(_urls(1000)))
    client = server.client()
    meta, bits = redis_store.key("crawl", "meta"), redis_store.key("crawl", "bits")
    for i in range(100_000):
        client.set(f"junk:{i}", b"x" * 4096)
        if not (client.exists(meta) and client.exists(bits)):
            break
    else:
        pytest.fail("Redis never evicted the filter's keys")
    with pytest.raises(FilterLostError, match="is gone"):
        seen.add_many(_urls(10, "after-"))


# ---- a batch that fails half way ----------------------------------------------------------------


def test_a_batch_that_fails_half_way_loses_no_url(many_urls, redis_servers, tmp_path):
    """The exact filter on a Redis at maxmemory with noeviction: the first run's batch (four
    script calls) fails part way (exit 1: used memory > maxmemory); the URLs its first calls
    recorded are claimed, not lost: once the limit is raised, the rerun prints every distinct
    URL, each once."""
    path, distinct = many_urls
    server = redis_servers("--maxmemory-policy", "noeviction")
    client = server.client()
    client.config_set("maxmemory", client.info("memory")["used_memory"] + 2 * 2**20)
    out = tmp_path / "out.txt"
    # one batch (--batch-size above the lines): nothing printed before it fails
    command = ["dedup", "--filter", "exact", "--redis", server.url, "--name", "crawl",
               "--no-canonicalize", "--lease", "1", "--batch-size", "65536", path, "-a", "-o",
               out]  # fmt: skip
    first = invoke(*command)
    assert_clean_error(first, 1, "used memory > 'maxmemory'")
    library = kinds.open_filter("exact", redis=server.url, name="crawl")
    recorded = len(library)
    library.close()
    assert 8192 <= recorded < len(distinct), "the batch did not fail half way"
    client.config_set("maxmemory", 0)
    again = invoke(*command)
    assert again.exit_code == 0, again.stderr
    printed = out.read_bytes().splitlines()
    assert set(printed) == distinct and len(printed) == len(distinct)


# ---- one key namespace --------------------------------------------------------------------------

NAMES = ["c", "c:leaf:0", "c:leaf:0:bits", "c%3Aleaf", "c:", "c:tree", "c:kind", "ünï cödé",
         "scrapy:spider", "c/leaf/0", "c:library", "c:meta"]  # fmt: skip


def test_no_two_names_share_a_key(redis_servers):
    """Names that embed other names' key parts, in every shared kind: each filter keeps its own
    keys (every key belongs to exactly one name) and its own answers. The issue's case: a Bloom
    filter named c:leaf:0 and a splittable filter named c."""
    server = redis_servers()
    filters = {}
    for i, name in enumerate(NAMES):
        kind = SHARED[i % len(SHARED)]
        filters[name] = _open(kind, server.url, name)
        assert all(filters[name].add_many(_urls(300, f"{i}-")))
    tags = {redis_store.escape(name): name for name in NAMES}
    for key in server.client().scan_iter(count=1000):
        tag = key.decode().split("{", 1)[1].split("}", 1)[0]
        owners = [n for e, n in tags.items() if tag == e or tag.startswith((e + ":", e + "#"))]
        assert len(owners) == 1, (key, owners)
    for i, name in enumerate(NAMES):
        for j in range(len(NAMES)):
            hits = filters[name].contains_many(_urls(300, f"{j}-"))
            assert all(hits) if i == j else not any(hits), (name, NAMES[j])


def test_one_name_holds_one_kind(redis_url, redis_name):
    for first, second in permutations(SHARED, 2):
        name = f"{redis_name}-{first}-{second}"
        _open(first, redis_url, name).close()
        held = "library" if first == "exact" else first
        with pytest.raises(ConfigError, match=f"holds a {held} filter named"):
            _open(second, redis_url, name)
        result = invoke("dedup", "--filter", second, "--redis", redis_url, "--name", name, "-")
        assert_clean_error(result, 1, f"holds a {held} filter")


@given(st.lists(st.text(min_size=1, max_size=30), min_size=2, max_size=2, unique=True))
def test_escaped_names_are_distinct_and_leave_the_separators_to_urlseen(names):
    escaped = []
    for name in names:
        try:
            escaped.append(redis_store.escape(name))
        except ConfigError:
            continue
        assert not set(escaped[-1]) & set(":{}#*?[]\\ ")
    assert len(set(escaped)) == len(escaped)


@pytest.mark.parametrize(
    ("name", "problem"),
    [("", "not empty"), ("a{b}", "braces"), ("a#b", "'#'"), ("a\nb", "control characters"),
     ("x" * 201, "at most 200 bytes"), ("caf\udce9", "UTF-8")],
)  # fmt: skip
def test_names_are_checked_with_a_clear_message(name, problem, redis_url):
    with pytest.raises(ConfigError, match=problem):
        _open("bloom", redis_url, name)


def test_a_name_that_is_not_utf8_on_the_command_line_is_a_clear_error(redis_url, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\n")
    command = [sys.executable.encode(), b"-m", b"urlseen", b"dedup", b"--redis",
               redis_url.encode(), b"--name", b"caf\xe9", bytes(src)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, timeout=60)
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 1 and "Traceback" not in err, err
    assert "not UTF-8" in err


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1/abc", "redis://127.0.0.1:6379/0/1", "redis://:abc", "redis://h:99999/0",
     "redis://[::1", "redis://h:-1/0", "unix://", "redis://h/0?db=x",
     "redis://h/0?socket_timeout=abc", "redis-cluster://127.0.0.1:7000/3", "http://h:6379/0",
     "redis://user:secret@h:6379/x"],
)  # fmt: skip
def test_malformed_redis_urls_are_clear_errors(url, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\n")
    result = invoke("dedup", "--redis", url, "--name", "crawl", src)
    error = assert_clean_error(result, 1)
    assert "secret" not in error
    with pytest.raises(ConfigError):
        redis_store.connect(url)


def test_a_database_that_is_no_number_is_refused_not_read_as_0():
    with pytest.raises(ConfigError, match="the database is a number"):
        redis_store.connect("redis://127.0.0.1:6379/abc")
    assert (
        redis_store.connect("redis://127.0.0.1:6379/7").connection_pool.connection_kwargs["db"] == 7
    )


def test_a_plain_server_named_as_a_cluster_is_a_clear_error(redis_url):
    with pytest.raises(RemoteError, match=r"not enabled|cluster"):
        redis_store.connect("redis-cluster://" + redis_url.split("://", 1)[1].split("/")[0])


def test_every_primary_of_a_cluster_is_asked_its_eviction_policy(redis_cluster_url):
    client = redis_store.connect(redis_cluster_url)
    assert redis_store.eviction_policies(client) == {"noeviction"}
    primaries = client.get_primaries()
    target = primaries[-1]
    client.config_set("maxmemory-policy", "allkeys-lfu", target_nodes=target)
    try:
        with pytest.raises(EvictionPolicyError, match="allkeys-lfu"):
            _open("exact", redis_cluster_url, "evicting")
    finally:
        client.config_set("maxmemory-policy", "noeviction", target_nodes=target)


def test_scrapy_settings_carry_the_lease_and_the_eviction_override(redis_servers):
    pytest.importorskip("scrapy")
    from scrapy.settings import Settings

    from urlseen.integrations.scrapy import UrlseenDupeFilter

    lru = redis_servers("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    settings = {"URLSEEN_REDIS_URL": lru.url, "URLSEEN_REDIS_NAME": "crawl"}
    with pytest.raises(EvictionPolicyError, match="URLSEEN_ALLOW_EVICTION"):
        UrlseenDupeFilter.from_settings(Settings(settings))
    allowed = {**settings, "URLSEEN_ALLOW_EVICTION": True, "URLSEEN_LEASE": 2.5}
    dupefilter = UrlseenDupeFilter.from_settings(Settings(allowed))
    try:
        assert dupefilter.seen.library._claims.lease == 2.5  # exact: the shared library
    finally:
        dupefilter.close("finished")
