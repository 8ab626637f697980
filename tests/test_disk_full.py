"""Full and read-only disks: clean one-line errors naming the file, and nothing lost.

The full disk is a small tmpfs mounted by the test, the read-only one a read-only bind mount:
both need root, and skip with the reason without it (tests/mounts.py); they are always
unmounted. A state file's blocks are reserved when it is made, so a full disk is an error at
create (or when the output is written), never a SIGBUS while the file is mapped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cli_helpers import dedup, invoke, lines, one_line_error
from mounts import read_only_view, tmpfs
from urlseen import kinds
from urlseen.state import space as _space

URLS = [f"https://example.com/a-rather-long-path/to/page/{i}" for i in range(60_000)]
FILE_KINDS = [k.name for k in kinds.KINDS.values() if k.state == "file"]
STATEFUL = [k.name for k in kinds.KINDS.values() if k.state]


@pytest.fixture
def infile(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_bytes(lines(*URLS, *URLS[:1000]))
    return path


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_state_file_larger_than_the_disk_is_refused_at_create(
    tmp_path: Path, infile: Path, kind: str
) -> None:
    with tmpfs(tmp_path / "small", "1m") as disk:
        state = disk / f"s.{kind}"
        result = invoke("dedup", "--filter", kind, "--capacity", "1000000", "--state", state,
                        infile)  # fmt: skip
        one_line_error(result, str(state), "of disk")
        assert os.listdir(disk) == []


def test_when_the_blocks_cannot_be_reserved_the_error_names_the_state(
    tmp_path: Path, infile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_space, "check_disk", lambda *args: None)  # straight to fallocate
    with tmpfs(tmp_path / "small", "1m") as disk:
        state = disk / "s.bloom"
        result = invoke("dedup", "--capacity", "1000000", "--state", state, infile)
        one_line_error(result, str(state), "No space left on device")
        assert os.listdir(disk) == [], "a temporary file was left behind"


@pytest.mark.parametrize("kind", ["bloom", "rotating"])
def test_an_output_that_fills_the_disk_loses_nothing(
    tmp_path: Path, infile: Path, kind: str
) -> None:
    """The run stops naming the output; resumed elsewhere with --append (which drops the
    partial last line the full disk left), every URL is printed. (An error rate of 1e-9 keeps
    false positives out of the count.)"""
    moved = tmp_path / "out.txt"
    with tmpfs(tmp_path / "small", "1m") as disk:
        state = disk / ("state" if kinds.KINDS[kind].state == "folder" else f"s.{kind}")
        out = disk / "out.txt"
        result = invoke("dedup", "--filter", kind, "--capacity", "70000", "--error-rate",
                        "1e-9", "--batch-size", "4000", "--state", state, "-o", out,
                        infile)  # fmt: skip
        one_line_error(result, str(out), "No space left on device")
        assert invoke("info", "--verify", state).exit_code == 0
        shutil.copyfile(out, moved)
        kept = tmp_path / "state"
        (shutil.copytree if state.is_dir() else shutil.copyfile)(state, kept)
    dedup("--filter", kind, "--state", kept, "-a", "-o", moved, infile)
    printed = moved.read_bytes().splitlines()
    assert set(printed) == {u.encode() for u in URLS}, "a URL was lost"
    assert len(printed) - len(URLS) <= 4000, "more than a batch printed twice"


def test_the_exact_filter_on_a_full_disk(tmp_path: Path, infile: Path) -> None:
    first = tmp_path / "first.txt"
    kept = tmp_path / "state"
    with tmpfs(tmp_path / "small", "2m") as disk:
        state = disk / "exact"
        result = invoke("dedup", "--filter", "exact", "--capacity", "100000", "--batch-size",
                        "5000", "--state", state, "-o", first, infile)  # fmt: skip
        one_line_error(result, str(state / "library.sqlite"), "No space left on device")
        shutil.copytree(state, kept)
    again = invoke("dedup", "--filter", "exact", "--state", kept, infile)
    assert again.exit_code == 0, again.stderr
    printed = first.read_bytes().splitlines() + again.stdout_bytes.splitlines()
    assert set(printed) == {u.encode() for u in URLS}, "a URL was lost"
    assert len(printed) - len(set(printed)) <= 5000, "more than a batch printed twice"
    assert invoke("info", "--verify", kept).exit_code == 0


@pytest.mark.parametrize("kind", STATEFUL)
def test_a_read_only_state_is_described_and_verified_but_not_written(
    tmp_path: Path, infile: Path, kind: str
) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    name = "state" if kinds.KINDS[kind].state == "folder" else f"s.{kind}"
    dedup("--filter", kind, "--capacity", "100000", "--state", folder / name, infile)
    with read_only_view(folder, tmp_path / "ro") as view:
        state = view / name
        result = invoke("dedup", "--filter", kind, "--state", state, infile)
        one_line_error(result, str(state), "Read-only file system")
        for args in (["info"], ["info", "--verify"]):
            described = invoke(*args, state)
            assert described.exit_code == 0, described.stderr
        assert "True" in invoke("info", "--verify", state).stdout
