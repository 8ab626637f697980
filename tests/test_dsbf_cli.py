"""`urlseen dedup --filter dsbf` and `urlseen info --redis` for a splittable filter: a fleet of
CLI processes on real URLs through splits, the tree view, and usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import invoke
from conftest import fleet_streams
from urlseen.splittable.filter import SplittableBloomFilter

WORKERS = 4
LINES = 60_000
WINDOW = 36_000  # worker w reads lines [w * 8,000, w * 8,000 + WINDOW): overlapping streams


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return fleet_streams(tmp_path_factory.mktemp("dsbf-fleet"), LINES, WINDOW, WORKERS)


def test_a_fleet_of_dedup_processes_prints_each_url_at_most_once(streams, redis_url, redis_name):
    """Through splits (a filter sized for 1/4 of the URLs, small leaves), four processes print
    each distinct URL at most once between them; those never printed are false positives,
    at f = 0.001 a handful."""
    command = [sys.executable, "-m", "urlseen", "dedup", "--filter", "dsbf"]
    command += ["--redis", redis_url, "--name", redis_name, "--capacity", "2000"]
    command += ["--error-rate", "0.001", "--leaf-bits", str(1 << 15), "--no-canonicalize"]
    command += ["--batch-size", "500", "--json"]
    procs = [
        subprocess.Popen([*command, str(p), "-o", f"{p}.out"], stderr=subprocess.PIPE)
        for p in streams
    ]
    summaries = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        summaries.append(json.loads(err.decode().strip().splitlines()[-1]))
    printed = [line for p in streams for line in Path(f"{p}.out").read_bytes().splitlines()]
    assert len(printed) == len(set(printed)), "a URL was printed by two processes"
    wanted = {line for p in streams for line in p.read_bytes().splitlines() if line}
    assert set(printed) <= wanted
    assert len(wanted) - len(printed) <= max(5, 0.003 * len(wanted))
    assert sum(s["new"] for s in summaries) == len(printed)
    seen = SplittableBloomFilter(redis=redis_url, name=redis_name)
    splits = [s for node, s in seen.tree.splits.items() if node != "root" and s.shift >= 0]
    assert len(splits) >= 2 * seen.tree.params["first_leaves"], "it did not split"
    assert len(seen) == len(printed)

    text = invoke("info", "--redis", redis_url, "--name", redis_name)
    assert text.exit_code == 0, text.output
    assert "kind" in text.stdout and "dsbf" in text.stdout and "tree:" in text.stdout
    leaf_lines = [line for line in text.stdout.splitlines() if "URLs," in line]
    assert len(leaf_lines) == seen.stats().details["leaves"]
    as_json = json.loads(
        invoke("info", "--json", "--redis", redis_url, "--name", redis_name).stdout
    )
    assert as_json["count"] == len(printed) and len(as_json["tree"]) == len(leaf_lines)
    assert max(leaf["depth"] for leaf in as_json["tree"]) == as_json["depth"] >= 2


def test_dsbf_in_memory_and_usage_errors(tmp_path, redis_url, redis_name):
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\nhttps://b.example/\nhttps://a.example/\n")
    ok = invoke("dedup", "--filter", "dsbf", "--leaf-bits", "4096", src)
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.splitlines() == ["https://a.example/", "https://b.example/"]
    with_state = invoke("dedup", "--filter", "dsbf", "--state", tmp_path / "s", src)
    assert with_state.exit_code == 2 and "--redis" in with_state.stderr
    bad = invoke("dedup", "--filter", "dsbf", "--leaf-bits", "1000", src)
    assert bad.exit_code != 0 and "multiple of 512" in bad.stderr
    first = ["dedup", "--filter", "dsbf", "--redis", redis_url, "--name", redis_name]
    assert invoke(*first, "--leaf-bits", "4096", "--capacity", "100", src).exit_code == 0
    again = invoke(*first, src)  # reopens with its own parameters
    assert again.exit_code == 0 and again.stdout == ""
    clash = invoke(*first, "--leaf-bits", "8192", src)
    assert (
        clash.exit_code == 2
        and "--leaf-bits 8192 differs from the shared filter's 4096" in clash.stderr
    )
