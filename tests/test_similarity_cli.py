"""`urlseen dedup --filter similar`: each mode's output, the state file resumed, the URL_DB,
and usage errors for options that contradict the state or the mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import dedup, invoke
from urlseen.similarity.url_db import SQLiteUrlDB

LINES = [
    b"http://x.com/a/y/p.html",
    b"http://x.com/a/z/p.html",  # same pattern as the first: dropped by every mode
    b"http://x.com/b/x/q.html",
    b"http://x.com/a/x/q.html",  # each feature seen before, never together
    b"HTTP://X.com/a/y/p.html#frag",  # the first URL again, spelled differently
    b"http://y.com/a/y/p.html",
]
INPUT = b"\n".join(LINES) + b"\n"


@pytest.mark.parametrize(
    ("mode", "kept"),
    [("composite", [0, 2, 3, 5]), ("exact4", [0, 2, 5]), ("patent", [0, 2, 5])],
)
def test_modes(mode: str, kept: list[int]) -> None:
    result = dedup(
        "--filter",
        "similar",
        "--similarity-mode",
        mode,
        "--capacity",
        "1000",
        "--json",
        input=INPUT,
    )
    assert result.stdout_bytes == b"".join(LINES[i] + b"\n" for i in kept)
    summary = json.loads(result.stderr.strip().splitlines()[-1])
    assert summary["filter_kind"] == "similarity"
    assert (summary["new"], summary["duplicates"]) == (len(kept), len(LINES) - len(kept))


def test_state_file_resumes_and_url_db_records(tmp_path: Path) -> None:
    state, db = tmp_path / "seen.similar", tmp_path / "audit.sqlite"
    args = ["--filter", "similar", "--similarity-mode", "exact4", "--state", state]
    first = dedup(*args, "--capacity", "1000", "--url-db", db, input=b"\n".join(LINES[:3]) + b"\n")
    assert first.stdout_bytes == LINES[0] + b"\n" + LINES[2] + b"\n"
    second = dedup(*args, "--url-db", db, input=b"\n".join(LINES[3:]) + b"\n")
    assert second.stdout_bytes == LINES[5] + b"\n"
    with SQLiteUrlDB(db, readonly=True) as log:
        decisions = list(log.decisions())
    assert [d.new for d in decisions] == [True, False, True, False, False, True]
    assert decisions[4].url == "http://x.com/a/y/p.html"  # the canonical key
    assert decisions[3].matched == ("site", "depth", "dir1", "tail")


def test_index_option_and_contradictions(tmp_path: Path) -> None:
    state = tmp_path / "seen.similar"
    base = ["--filter", "similar", "--state", state]
    dedup(*base, "--similarity-mode", "patent", "--similarity-index", "prime", input=INPUT)
    clash = invoke("dedup", *base, "--similarity-mode", "composite", input=INPUT)
    assert clash.exit_code == 2 and "patent" in clash.stderr
    clash = invoke("dedup", *base, "--error-rate", "0.2", input=INPUT)
    assert clash.exit_code == 2 and "--error-rate" in clash.stderr
    assert dedup(*base, input=INPUT).stdout_bytes == b""  # every URL is in the state already
    regions = invoke("dedup", "--filter", "similar", "--similarity-index", "regions", input=INPUT)
    assert regions.exit_code == 2 and "--similarity-index" in regions.stderr


def test_a_foreign_state_file_is_an_error(tmp_path: Path) -> None:
    bloom = tmp_path / "seen.bloom"
    dedup("--state", bloom, input=INPUT)
    result = invoke("dedup", "--filter", "similar", "--state", bloom, input=INPUT)
    assert result.exit_code == 1 and "not a similarity" in result.stderr
