"""Crash safety of `urlseen dedup --state`: killed mid-run, rerun, nothing lost, little repeated.

The promise (README, urlseen.job.dedup): a run killed at any moment and rerun on the same input
with `-a` prints every distinct URL at least once across the two runs, and at most
`--batch-size` lines twice, because a batch's keys go into the state only after its lines
are flushed. Checked end to end on real URLs with SIGKILL, and in the library with a filter
and an output stream that fail mid-run.
"""

from __future__ import annotations

import errno
import gzip
import io
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli_helpers import output_reaches
from conftest import require_dev_urls_path
from urlseen import BloomFilter, UncleanShutdownWarning
from urlseen.canonical import canonicalize
from urlseen.cli import cli
from urlseen.errors import InvalidKeyError
from urlseen.job.dedup import dedup
from urlseen.job.linekeys import LineKeyer
from urlseen.protocol import FilterStats

REPO = Path(__file__).resolve().parents[1]
BATCH = 1000
STRIDE = 13  # every 13th dev line: ~212k lines from all three sections of the file
KILL_BANDS = [(0.05, 0.25), (0.35, 0.55), (0.65, 0.85)]  # share of the full output at the kill


@pytest.fixture(scope="module")
def crash_input(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    """A ~212k-line input file sampled from the dev URLs (in a temp dir, never the repo)."""
    source = require_dev_urls_path()
    with gzip.open(source, "rb") as f:
        sample = list(itertools.islice(f, 0, None, STRIDE))
    assert len(sample) > 150_000, f"{source} is smaller than expected"
    path = tmp_path_factory.mktemp("crash") / "urls.txt"
    path.write_bytes(b"".join(sample))
    return path, [line.rstrip(b"\n") for line in sample]


def _exact_key(line: bytes) -> bytes | None:
    line = line[:-1] if line.endswith(b"\r") else line
    return line if line.strip() else None


def _canonical_key(line: bytes) -> str | bytes | None:
    """The key under the default profile, computed from urlseen.canonical, not LineKeyer."""
    line = line[:-1] if line.endswith(b"\r") else line
    if not line.strip():
        return None
    if len(line) > 64 * 1024:
        return line
    try:
        return canonicalize(line.decode("utf-8"))
    except (UnicodeDecodeError, InvalidKeyError):
        return line


KEYS: dict[str, Callable[[bytes], Any]] = {"canonical": _canonical_key, "exact": _exact_key}
FLAGS = {"canonical": [], "exact": ["--no-canonicalize"]}


class Expected:
    """First occurrences of each key, in input order: what one uninterrupted run prints."""

    def __init__(self, lines: list[bytes], key: Callable[[bytes], Any]) -> None:
        seen: set[Any] = set()
        self.firsts: list[bytes] = []
        self.keys: list[Any] = []
        for line in lines:
            k = key(line)
            if k is not None and k not in seen:
                seen.add(k)
                self.firsts.append(line)
                self.keys.append(k)
        self.index = {line: i for i, line in enumerate(self.firsts)}
        self.total_bytes = sum(len(line) + 1 for line in self.firsts)


@pytest.fixture(scope="module")
def expected(crash_input: tuple[Path, list[bytes]]) -> dict[str, Expected]:
    _, lines = crash_input
    return {mode: Expected(lines, key) for mode, key in KEYS.items()}


def _command(src: Path, state: Path, mode: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "urlseen",
        "dedup",
        "--state",
        str(state),
        "--batch-size",
        str(BATCH),
        "--no-progress",
        *FLAGS[mode],
        *extra,
        str(src),
    ]


ENV = {**os.environ, "PYTHONWARNINGS": "default"}


def _kill_point(exp: Expected, band: int) -> int:
    seed = int(os.environ.get("URLSEEN_CRASH_SEED", random.randrange(2**32)))
    print(f"URLSEEN_CRASH_SEED={seed}")  # shown on failure, to replay the same kill point
    lo, hi = KILL_BANDS[band]
    return int(exp.total_bytes * random.Random(seed).uniform(lo, hi))


def _ended_early(proc: subprocess.Popen[bytes], threshold: int) -> None:
    err = proc.stderr.read().decode() if proc.stderr else ""
    pytest.fail(
        f"the run ended (status {proc.returncode}) before the kill point "
        f"({threshold} bytes of output): {err}"
    )


def _kill_when_file_reaches(proc: subprocess.Popen[bytes], out: Path, threshold: int) -> None:
    """SIGKILL proc as soon as the file `out` holds `threshold` bytes."""
    if not output_reaches(proc, out, threshold):
        _ended_early(proc, threshold)
    proc.send_signal(signal.SIGKILL)


def _blocked_writing_a_pipe(pid: int) -> bool:
    try:
        return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def _kill_stalled_reader(proc: subprocess.Popen[bytes], threshold: int) -> bytes:
    """Read proc's stdout up to `threshold` bytes, stop reading until proc is stuck in a
    write (mid-batch: lines partly out, keys not added), SIGKILL it, then drain the pipe."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    got = bytearray()
    while len(got) < threshold:
        chunk = os.read(fd, min(65536, threshold - len(got)))
        if not chunk:
            proc.wait(timeout=60)
            _ended_early(proc, threshold)
        got += chunk
    deadline = time.monotonic() + 5  # without /proc wchan, 5 s is ample to fill a pipe
    while not _blocked_writing_a_pipe(proc.pid) and time.monotonic() < deadline:
        if proc.poll() is not None:
            _ended_early(proc, threshold)
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    while chunk := os.read(fd, 65536):  # what the killed process had written stays readable
        got += chunk
    return bytes(got)


def _check_killed_state(state: Path, exp: Expected, run1: bytes) -> tuple[list[bytes], int]:
    """Run 1's output is a prefix of first occurrences, and the state is never ahead of it."""
    assert 0 < len(run1) < exp.total_bytes
    *run1_lines, partial = run1.split(b"\n")  # a write cut by the kill may end mid-line
    n1 = len(run1_lines)
    assert run1_lines == exp.firsts[:n1], "run 1 did not print first occurrences in order"
    if partial:
        assert exp.firsts[n1].startswith(partial)

    info = CliRunner().invoke(cli, ["info", "--json", str(state)])
    assert info.exit_code == 0, info.output
    assert json.loads(info.stdout)["closed_cleanly"] is False
    with pytest.warns(UncleanShutdownWarning, match="not closed cleanly"):
        killed = BloomFilter.open(state, readonly=True)
    with killed:
        in_state = killed.contains_many(exp.keys)
    marked = [i for i, hit in enumerate(in_state) if hit]
    assert not marked or marked[-1] < n1, (
        f"{exp.firsts[marked[-1]]!r} is in the state but was not written before the kill"
    )
    assert n1 - len(marked) <= BATCH, "the state lags the output by more than one batch"
    return run1_lines, len(marked)


def _check_resumed(
    rerun: subprocess.CompletedProcess[bytes],
    state: Path,
    exp: Expected,
    run1_lines: list[bytes],
    run2: bytes,
) -> int:
    """Run 2 printed the rest in order; together the runs cover every distinct URL."""
    assert rerun.returncode == 0, rerun.stderr.decode()
    err = rerun.stderr.decode()
    assert "not closed cleanly" in err  # the unclean-shutdown warning, however formatted
    assert "Traceback" not in err
    assert run2.endswith(b"\n")
    run2_lines = run2[:-1].split(b"\n")
    positions = [exp.index.get(line, -1) for line in run2_lines]
    assert -1 not in positions, "run 2 printed a line that is no first occurrence"
    assert positions == sorted(set(positions)), "run 2 is not in input order or repeats itself"

    printed = set(run1_lines) | set(run2_lines)
    missing = [line for line in exp.firsts if line not in printed]
    assert not missing, f"{len(missing)} distinct URLs never printed, e.g. {missing[:3]}"
    twice = set(run1_lines) & set(run2_lines)
    assert len(twice) <= BATCH, f"{len(twice)} lines printed twice; the bound is {BATCH}"
    assert json.loads(err.strip().splitlines()[-1])["new"] == len(run2_lines)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # closed cleanly this time: no warning
        final = BloomFilter.open(state, readonly=True)
    with final:
        assert final.verify() is True
        assert all(final.contains_many(exp.keys))
        # A kill inside add_many can set bits whose count was not yet added.
        assert len(exp.firsts) - BATCH <= len(final) <= len(exp.firsts)
    return len(twice)


@pytest.mark.parametrize("band", range(len(KILL_BANDS)))
@pytest.mark.parametrize("mode", ["exact", "canonical"])
def test_sigkill_mid_run_then_resume_with_append(
    crash_input: tuple[Path, list[bytes]],
    expected: dict[str, Expected],
    tmp_path: Path,
    mode: str,
    band: int,
) -> None:
    """`dedup --state S -o OUT` killed at a random output size, rerun with `-a`."""
    src, _ = crash_input
    exp = expected[mode]
    threshold = _kill_point(exp, band)
    state, out = tmp_path / "seen.bloom", tmp_path / "out.txt"
    cmd = _command(src, state, mode, "-o", str(out))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    try:
        _kill_when_file_reaches(proc, out, threshold)
    finally:
        proc.kill()
        proc.wait(timeout=60)
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    run1 = out.read_bytes()
    run1_lines, marked = _check_killed_state(state, exp, run1)

    rerun = subprocess.run([*cmd, "-a", "--json"], capture_output=True, env=ENV, timeout=120)
    both = out.read_bytes()
    # A line the kill cut in half is removed by `-a` (with a warning) and printed again whole.
    whole = run1[: run1.rfind(b"\n") + 1]
    assert both.startswith(whole), "--append lost or changed run 1's output"
    if whole != run1:
        assert b"removed a partial last line" in rerun.stderr
    twice = _check_resumed(rerun, state, exp, run1_lines, both[len(whole) :])
    print(
        f"killed at {len(run1)} of {exp.total_bytes} bytes: {len(run1_lines)} lines out, "
        f"{marked} in the state; {twice} printed twice"
    )


@pytest.mark.parametrize("mode", ["exact", "canonical"])
def test_sigkill_while_blocked_writing_then_resume(
    crash_input: tuple[Path, list[bytes]],
    expected: dict[str, Expected],
    tmp_path: Path,
    mode: str,
) -> None:
    """Killed inside a batch's write (a stalled reader): the batch's keys must not be in."""
    src, _ = crash_input
    exp = expected[mode]
    threshold = _kill_point(exp, 1)
    state = tmp_path / "seen.bloom"
    proc = subprocess.Popen(
        _command(src, state, mode), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV
    )
    try:
        run1 = _kill_stalled_reader(proc, threshold)
    finally:
        proc.kill()
        proc.wait(timeout=60)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    run1_lines, marked = _check_killed_state(state, exp, run1)

    out2 = tmp_path / "out2.txt"
    rerun = subprocess.run(
        _command(src, state, mode, "-o", str(out2), "--json"),
        capture_output=True,
        env=ENV,
        timeout=120,
    )
    twice = _check_resumed(rerun, state, exp, run1_lines, out2.read_bytes())
    print(
        f"killed at {len(run1)} of {exp.total_bytes} bytes: {len(run1_lines)} lines out, "
        f"{marked} in the state; {twice} printed twice"
    )


# -- library level: dedup(transactional=True) with failures it does not control -------------


class FailingFilter:
    """A SeenFilter around a BloomFilter whose add_many fails on its n-th call, half done."""

    def __init__(self, fail_on_call: int | None) -> None:
        self.inner = BloomFilter(capacity=10_000, error_rate=1e-7)
        self.fail_on_call = fail_on_call
        self.add_many_calls = 0

    def add(self, key: str | bytes) -> bool:
        return self.inner.add(key)

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def add_many(self, keys: Iterable[str | bytes]) -> list[bool]:
        self.add_many_calls += 1
        keys = list(keys)
        if self.add_many_calls == self.fail_on_call:
            self.inner.add_many(keys[: len(keys) // 2])
            raise OSError(errno.EIO, "state store failed mid-batch")
        return self.inner.add_many(keys)

    def contains_many(self, keys: Iterable[str | bytes]) -> list[bool]:
        return self.inner.contains_many(keys)

    def __len__(self) -> int:
        return len(self.inner)

    def stats(self) -> FilterStats:
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> FailingFilter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FailingOutput(io.BytesIO):
    """An output whose n-th write stores only part of its data, then fails (disk full)."""

    def __init__(self, fail_on_write: int) -> None:
        super().__init__()
        self.fail_on_write = fail_on_write
        self.writes = 0

    def write(self, data: Any) -> int:
        self.writes += 1
        if self.writes == self.fail_on_write:
            super().write(bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def _library_input() -> list[bytes]:
    rng = random.Random(7)
    urls = [f"http://site{i % 17}.example/page/{i}".encode() for i in range(400)]
    lines = [rng.choice(urls) + b"\n" for _ in range(1500)]
    # Spelling variants, blanks, invalid UTF-8 and CRLF take their own key paths.
    lines[10:10] = [b"HTTP://SITE1.EXAMPLE/page/1#x\n", b"\n", b"http://x/\xff\n", b"http://y/\r\n"]
    return lines


def _written_lines(data: bytes) -> set[bytes]:
    """Complete lines of an output (a failed write may leave a partial last line)."""
    return set(data.split(b"\n")[:-1])


def _assert_state_not_ahead(inner: BloomFilter, lines: list[bytes], written: set[bytes]) -> None:
    keyer = LineKeyer()
    written_keys = {keyer.key(line) for line in written}
    for line in lines:
        raw = line.rstrip(b"\n")
        key = keyer.key(raw)
        if key is not None and key in inner:
            assert key in written_keys, f"{raw!r} is marked seen but its line was not written"


def test_filter_failing_mid_run_marks_nothing_unwritten() -> None:
    lines = _library_input()
    seen = FailingFilter(fail_on_call=4)
    out = io.BytesIO()
    with pytest.raises(OSError, match="mid-batch"):
        dedup(lines, seen, out, transactional=True, batch_size=100)
    written = _written_lines(out.getvalue())
    assert out.getvalue().endswith(b"\n")
    assert 0 < len(seen.inner) < len(written)  # batch 4 was written, then half added
    _assert_state_not_ahead(seen.inner, lines, written)

    # Resume with the same state: everything is printed once more at most one batch.
    seen.fail_on_call = None
    again = io.BytesIO()
    dedup(lines, seen, again, transactional=True, batch_size=100)
    rerun = _written_lines(again.getvalue())
    keyer = LineKeyer()
    distinct = {keyer.key(line.rstrip(b"\n")) for line in lines} - {None}
    assert {keyer.key(line) for line in written | rerun} == distinct
    assert len(written & rerun) <= 100


def test_output_failing_mid_run_marks_nothing_unwritten() -> None:
    lines = _library_input()
    seen = FailingFilter(fail_on_call=None)
    out = FailingOutput(fail_on_write=3)
    with pytest.raises(OSError, match="No space"):
        dedup(lines, seen, out, transactional=True, batch_size=100)
    data = out.getvalue()
    assert not data.endswith(b"\n")  # the failed write left half a batch, mid-line
    written = _written_lines(data)
    assert seen.add_many_calls == 2  # the failing batch's keys never went in
    _assert_state_not_ahead(seen.inner, lines, written)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_cli_with_state_adds_nothing_when_the_output_fails(tmp_path: Path) -> None:
    """`-o /dev/full`: every flush fails (ENOSPC), so no key may reach the state file."""
    state = tmp_path / "seen.bloom"
    data = b"".join(b"http://example.com/%d\n" % i for i in range(50))
    result = CliRunner().invoke(
        cli, ["dedup", "--state", str(state), "-o", "/dev/full", "--batch-size", "10"], input=data
    )
    assert result.exit_code == 1
    assert "No space left on device" in result.output
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # closed cleanly despite the failure
        with BloomFilter.open(state, readonly=True) as seen:
            assert len(seen) == 0
            assert not any(seen.contains_many([f"http://example.com/{i}" for i in range(50)]))
