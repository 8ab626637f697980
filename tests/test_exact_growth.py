"""The exact filter without a capacity: counters that start small and grow with the URLs held,
as exact, resumable and verifiable as counters sized up front; and `info --verify` on a folder
a writer is using, or one of an older library format."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from urlseen import ExactFilter
from urlseen.errors import CountersRebuiltWarning
from urlseen.exact import folder, growth

URLS = [f"https://grow.example/page/{i}" for i in range(5000)]


def _run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "urlseen", *args], input=stdin, capture_output=True, timeout=120
    )


def _state_bytes(state: Path) -> int:
    return sum(p.stat().st_size for p in state.iterdir())


def test_an_exact_run_over_a_handful_of_urls_leaves_a_state_of_their_size(tmp_path):
    state, urls = tmp_path / "st", [f"https://a.example/{i}" for i in range(5)]
    done = _run("dedup", "--filter", "exact", "--state", str(state), stdin="\n".join(urls).encode())
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split() == urls
    assert _state_bytes(state) < 1 << 20, "five URLs: not counters for ten million"
    info = _run("info", "--verify", str(state))
    assert info.returncode == 0, info.stderr
    text = info.stdout.decode()
    assert "counters_verified        True" in text and "library_verified         True" in text
    assert f"capacity                 {growth.START_CAPACITY}" in text
    again = _run("dedup", "--filter", "exact", "--state", str(state),
                 stdin="\n".join([*urls, "https://a.example/new"]).encode())  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout.decode().split() == ["https://a.example/new"]


def test_a_given_capacity_keeps_counters_sized_for_it(tmp_path):
    state = tmp_path / "st"
    done = _run("dedup", "--filter", "exact", "--capacity", "2000000", "--state", str(state),
                stdin=b"https://a.example/\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (state / folder.COUNTERS_FILE).stat().st_size > 8 << 20
    with ExactFilter.open(state) as seen:
        assert seen.counters.capacity == 2_000_000
        seen.add_many(URLS)
        assert seen.counters.capacity == 2_000_000, "sized as asked: it never grows"


@pytest.fixture
def small_start(monkeypatch):
    monkeypatch.setattr(growth, "START_CAPACITY", 256)


@pytest.mark.usefixtures("small_start")
@pytest.mark.parametrize("where", ["folder", "memory"])
def test_counters_grow_with_the_urls_and_every_answer_stays_exact(tmp_path, where):
    path = tmp_path / "st" if where == "folder" else None
    seen = ExactFilter(path=path)
    assert seen.counters.capacity == 256
    for start in range(0, len(URLS), 500):
        batch = URLS[start : start + 500]
        assert seen.add_many([*batch, *URLS[:start:7]]) == [True] * len(batch) + [False] * len(
            URLS[:start:7]
        )
    assert seen.counters.capacity >= len(URLS) - 500, "grown as the library outgrew them"
    assert seen.add_many(URLS) == [False] * len(URLS)
    assert seen.forget(URLS[3]) and seen.add(URLS[3])
    seen.close()
    if path is None:
        return
    assert not (path / folder.GROWING_FILE).exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CountersRebuiltWarning)  # closed cleanly: in sync
        with ExactFilter.open(path) as again:
            assert again.add_many([*URLS, "https://grow.example/new"]) == [False] * len(URLS) + [
                True
            ]
    desc = folder.describe_state(path, verify=True)
    assert desc["counters_verified"] and desc["library_verified"] and desc["counters_in_sync"]
    assert desc["capacity"] >= len(URLS) - 500


@pytest.mark.usefixtures("small_start")
def test_a_growth_that_fails_changes_no_answer(tmp_path, monkeypatch):
    seen = ExactFilter.create(tmp_path / "st")
    assert all(seen.add_many(URLS[:300]))
    real = os.replace

    def full_disk(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        seen.add_many(URLS[300:400])
    monkeypatch.setattr(os, "replace", real)
    assert seen.add_many(URLS[:400]) == [False] * 300 + [True] * 100
    assert seen.counters.capacity > 256
    seen.close()
    with ExactFilter.open(tmp_path / "st") as again:
        assert again.add_many(URLS[:401]) == [False] * 400 + [True]


WRITER = textwrap.dedent(
    """
    import sys, time
    from urlseen import ExactFilter
    seen = ExactFilter.create(sys.argv[1])
    i = 0
    while True:
        seen.add_many([f"https://w.example/{i}/{j}" for j in range(200)])
        i += 1
        if i == 3:
            print("ready", flush=True)
        time.sleep(0.002)
    """
)


def test_info_verify_beside_a_running_writer_answers(tmp_path):
    """The reader's checks read one commit of the library, while the writer commits on."""
    state = tmp_path / "st"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(state)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
        deadline = time.monotonic() + 3
        checks = 0
        while time.monotonic() < deadline or checks < 5:
            desc = folder.describe_state(state, verify=True)
            assert desc["records"] >= 600 and desc["counters_verified"] is None
            checks += 1
        done = _run("info", "--verify", str(state))
        assert done.returncode == 0, done.stderr
        assert b"Traceback" not in done.stderr
    finally:
        writer.kill()
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()


@pytest.mark.parametrize("version", [1, 2])
def test_info_verify_reads_an_exact_folder_of_the_previous_library_format(tmp_path, version):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_library_store import _version_1_file

    state = tmp_path / "st"
    with ExactFilter.create(state, capacity=10_000) as seen:
        seen.add_many(URLS[:300])
    _version_1_file(state / folder.LIBRARY_FILE, fill=False, version=version)
    done = _run("info", "--verify", str(state))
    assert done.returncode == 0, done.stderr
    assert "records                  300" in done.stdout.decode()
