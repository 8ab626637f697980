"""benchmarks/redis/shared.py --quick: the issue-17 benchmark still runs, answers correctly,
checks its targets and leaves no server behind (a broken benchmark fails CI, not the next
person who measures)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, require_dev_urls_path
from doc_site import in_ci

SCRIPT = REPO_ROOT / "benchmarks" / "redis" / "shared.py"


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(7) == b"+PONG\r\n"
    except OSError:
        return False


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        if in_ci():
            pytest.fail("redis-server and redis-cli are needed for the benchmark test in CI")
        pytest.skip("redis-server / redis-cli not installed")
    data = require_dev_urls_path()
    out = tmp_path_factory.mktemp("bench") / "redis.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--data", str(data), "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT / "benchmarks" / "redis",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    payload = json.loads(out.read_text())["shared"]
    assert len(payload["ports"]) >= 1 + 3 + 2 * 7  # fleet: 1 + 3; a server per table row
    left = [port for port in payload["ports"] if _answers(port)]
    assert not left, f"the benchmark left redis-server running on ports {left}"
    return payload, run.stdout


def test_every_way_on_both_streams_answers_correctly(quick: tuple[dict, str]) -> None:
    payload, _ = quick
    rows = payload["rows"]
    kinds = {(r["stream"], r["kind"]) for r in rows}
    for stream in ("repeats", "new"):
        assert {(stream, k) for k in ("sadd", "bloom", "dsbf", "exact")} <= kinds
    for r in rows:
        assert r["new_twice"] == 0, r["label"]
        assert r["server_cpu_seconds"] > 0 and r["key_bytes"] > 0, r["label"]
        assert r["attempts"] >= 1
        if r["kind"] in ("sadd", "exact"):  # exact: no wrong answer at all
            assert r["false_positives"] == r["false_negatives"] == 0, r["label"]
            assert r["reported_new"] == r["distinct"]
        if r["kind"] == "bloom":  # a Bloom filter never calls a seen URL new
            assert r["false_negatives"] == 0
        if r["stream"] == "new":
            assert r["probe_urls"] > 0


def test_fleet_on_one_server_and_a_cluster(quick: tuple[dict, str]) -> None:
    payload, _ = quick
    cells = payload["fleet"]
    assert {c["where"] for c in cells} == {"1 server", "3-primary cluster"}
    for c in cells:
        assert not c["errors"], c
        assert c["new_twice"] == 0, c
        assert len(c["server_cpu_seconds"]) == (3 if c["where"] != "1 server" else 1)
        if not c["way"].startswith(("RedisBloomFilter", "SplittableBloomFilter")):
            assert c["reported_new"] == c["distinct"], c


def test_targets_checked_and_printed(quick: tuple[dict, str]) -> None:
    payload, stdout = quick
    checks = payload["targets"]
    names = " ".join(c["target"] for c in checks)
    for part in ("Redis CPU per URL", "Redis memory", "capacity 10^8", "grown 10x", "cluster"):
        assert part in names
    for c in checks:
        assert f"{'met' if c['met'] else 'MISSED'}: {c['target']}" in stdout
    assert "BF.MADD not measured" in stdout
    assert payload["small_splittable"]["capacity"] == 10**8


def test_no_data_file_is_a_clear_error(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--data", str(tmp_path / "none.txt.gz")],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT / "benchmarks" / "redis",
    )  # fmt: skip
    assert run.returncode != 0
    assert "none.txt.gz" in run.stderr


def test_the_command_line_benchmark_runs_and_answers_as_sadd(tmp_path: Path) -> None:
    """benchmarks/redis/dedup_cli.py on a few thousand lines: `urlseen dedup --redis` prints
    each distinct line once (bloom and dsbf, false positives aside), as SADD counts them."""
    if not shutil.which("redis-server"):
        if in_ci():
            pytest.fail("redis-server is needed for the benchmark test in CI")
        pytest.skip("redis-server not installed")
    data = require_dev_urls_path()
    out = tmp_path / "cli.json"
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "redis" / "dedup_cli.py"), "--data",
         str(data), "--new", "3000", "--lines", "6000", "--runs", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT / "benchmarks" / "redis",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["dedup_cli"]["results"]
    assert {(r["stream"], r["way"]) for r in rows} == {
        (s, w) for s in ("new", "repeats") for w in ("sadd", "bloom", "dsbf")
    }
    for r in rows:
        assert r["server_cpu_s"] > 0, r
        if r["way"] == "sadd":
            assert r["new"] == r["distinct"], r
        else:  # f = 1e-6 (bloom) and 1e-3 (dsbf): a few false positives at most
            assert r["distinct"] - 10 <= r["new"] <= r["distinct"], r
    assert "| new | dsbf |" in run.stdout


def _callgrind_servers() -> int:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return sum("callgrind" in line and "redis-server" in line for line in ps.splitlines())


def test_the_per_call_benchmark_counts_checks_and_stops_its_servers(tmp_path: Path) -> None:
    """benchmarks/redis/library_calls.py on a few hundred URLs: each cell answered as it should
    (the script checks every answer and exits non-zero otherwise), the stages of a call and the
    single commands counted, and no callgrind server left running."""
    if not (shutil.which("redis-server") and shutil.which("valgrind")):
        if in_ci():
            pytest.fail("redis-server and valgrind are needed for the benchmark test in CI")
        pytest.skip("redis-server / valgrind not installed")
    before, out = _callgrind_servers(), tmp_path / "calls.json"
    script = str(REPO_ROOT / "benchmarks" / "redis" / "library_calls.py")
    small = ["--urls", "100", "--fill", "500", "--json", str(out)]
    for extra in (["--batches", "1,10"], ["--batches", "10", "--stages", "--commands"]):
        run = subprocess.run(
            [sys.executable, script, *extra, *small], capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, run.stderr[-3000:]
    saved = json.loads(out.read_text())
    rows = saved["library_calls"]["rows"]
    assert {(r["stream"], r["batch"], r["way"]) for r in rows} == {
        (s, b, w) for s in ("repeats", "new") for b in (1, 10) for w in ("sadd", "installed")
    }
    assert all(r["per_url"] > 0 for r in rows)
    stages = saved["library_calls_stages"]["stages"]
    assert len(stages) == 9 and stages[-1]["cut_at"] > 2 * stages[0]["cut_at"]  # whole vs bare
    looked_up = next(s for s in stages if s["stage"].startswith("the URLs looked up"))
    assert looked_up["per_call"] > 0
    commands = {r["what"]: r["instructions"] for r in saved["library_calls_commands"]["rows"]}
    assert commands["HMGET of 6 fields"] > 0 and commands["the empty script"] > 0
    assert _callgrind_servers() == before
