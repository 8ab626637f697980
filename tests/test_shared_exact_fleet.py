"""A fleet of `urlseen dedup --filter exact --redis` processes on real URLs (the dev set): run at
once over overlapping streams, together they print every distinct URL exactly once, on one
Redis server, on a 3-master Redis Cluster, and across a Redis kill and restart."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import fleet_streams
from urlseen.shared.library import RedisLibrary

WORKERS = 4
LINES = 80_000  # the dev set's first lines: a feed polled many times, so streams overlap a lot
WINDOW = 50_000  # worker w reads lines [w * 10,000, w * 10,000 + WINDOW)


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return fleet_streams(tmp_path_factory.mktemp("fleet"), LINES, WINDOW, WORKERS)


def _run_fleet(url: str, name: str, inputs: list[Path], *extra: str) -> list[list[bytes]]:
    command = [sys.executable, "-m", "urlseen", "dedup", "--filter", "exact", "--redis", url]
    command += ["--name", name, "--capacity", "100000", "--no-canonicalize"]
    command += extra or ("--batch-size", "5000")
    procs = [
        subprocess.Popen([*command, str(path), "-o", f"{path}.{name}.out"], stderr=subprocess.PIPE)
        for path in inputs
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    return [Path(f"{path}.{name}.out").read_bytes().splitlines() for path in inputs]


def _check(outputs: list[list[bytes]], inputs: list[Path]) -> None:
    printed = [line for out in outputs for line in out]
    assert len(printed) == len(set(printed)), "a URL was printed by two workers"
    wanted = {line for path in inputs for line in path.read_bytes().splitlines() if line}
    assert set(printed) == wanted, "a URL was never printed"
    assert sum(map(bool, outputs)) >= 2, "one worker printed everything"
    overlap = set(inputs[0].read_bytes().splitlines()) & set(inputs[-1].read_bytes().splitlines())
    assert len(overlap) > 1000, "the streams hardly overlap: the test proves little"


def test_a_fleet_on_one_redis_prints_each_url_once(streams, redis_url, redis_name):
    try:
        outputs = _run_fleet(redis_url, redis_name, streams)
        _check(outputs, streams)
        distinct = len({line for out in outputs for line in out})
        assert RedisLibrary(redis_url, redis_name).count() == distinct
    finally:
        RedisLibrary(redis_url, redis_name).destroy()


def test_a_fleet_on_a_redis_cluster_prints_each_url_once(streams, redis_cluster_url):
    name = "fleet-exact"
    try:
        _check(_run_fleet(redis_cluster_url, name, streams), streams)
    finally:
        RedisLibrary(redis_cluster_url, name).destroy()


def test_a_fleet_across_a_redis_kill_and_restart_prints_each_url_once(streams, private_redis):
    """Redis (appendfsync always) is killed once the fleet has claimed a quarter of the URLs and
    restarted 0.7 s later, within the clients' retry window: no URL is lost or printed twice. A
    batch whose reply was lost is resent with its receipt, so its answers stay the same."""
    import time

    distinct = len({line for p in streams for line in p.read_bytes().splitlines() if line})
    at_kill: list[int] = []

    def outage() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if RedisLibrary.exists(private_redis.url, "fleet"):
                    count = RedisLibrary(private_redis.url, "fleet").count()
                    if count >= distinct // 4:
                        private_redis.kill()
                        at_kill.append(count)
                        time.sleep(0.7)
                        private_redis.start()
                        return
            except Exception:  # the library may be half-created, or Redis restarting
                pass
            time.sleep(0.01)

    monitor = threading.Thread(target=outage)
    monitor.start()
    outputs = _run_fleet(private_redis.url, "fleet", streams, "--batch-size", "300")
    monitor.join()
    _check(outputs, streams)
    assert at_kill and at_kill[0] < distinct, f"Redis was not killed mid-run ({at_kill})"


def test_dedup_exact_redis_forgets_refuses_and_fails_clearly(
    redis_url, redis_name, tmp_path, monkeypatch
):
    """--remove and --forget-older-than act on the shared library; an explicit --capacity that
    differs from the library's is a usage error; an unreachable Redis is exit status 1."""
    from cli_helpers import dedup, invoke
    from urlseen.shared import client as redis_store

    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\nhttps://b.example/\nhttps://a.example/\n")
    gone = tmp_path / "gone.txt"
    gone.write_text("https://a.example/\n")
    shared = ["--filter", "exact", "--redis", redis_url, "--name", redis_name]
    try:
        assert dedup(*shared, src).stdout.split() == ["https://a.example/", "https://b.example/"]
        assert dedup(*shared, "--filter", "library", src).stdout == ""
        again = dedup(*shared, "--remove", gone, src)
        assert again.stdout.split() == ["https://a.example/"] and "forgot 1 URLs" in again.stderr
        later = dedup(*shared, "--forget-older-than", "0s", src)  # everything is older than now
        assert later.stdout.split() == ["https://a.example/", "https://b.example/"]
        clash = invoke("dedup", *shared, "--capacity", "5", src)
        assert clash.exit_code == 2 and "--capacity 5 differs" in clash.stderr
    finally:
        RedisLibrary(redis_url, redis_name).destroy()
    monkeypatch.setattr(redis_store, "RETRIES", 1)
    down = invoke("dedup", "--filter", "exact", "--redis", "redis://127.0.0.1:1/0", src)
    assert down.exit_code == 1 and "unreachable" in down.stderr
