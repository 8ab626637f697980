"""Running the `urlseen` command in-process, for the CLI test modules."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from urlseen.cli import cli


def runner() -> CliRunner:
    """stdout and stderr kept apart (click >= 8.2 always does; 8.1 needs mix_stderr=False)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def invoke(*args: str | os.PathLike[str], input: bytes | None = None) -> Result:
    return runner().invoke(cli, [os.fspath(a) for a in args], input=input)


def lines(*urls: str | bytes) -> bytes:
    """The input a file of these lines would give."""
    return b"".join((u.encode() if isinstance(u, str) else u) + b"\n" for u in urls)


def summary(result: Result) -> dict[str, Any]:
    """The --json summary: the last line of stderr, which must be JSON."""
    err_lines = result.stderr.strip().splitlines()
    assert err_lines, "no summary on stderr"
    data = json.loads(err_lines[-1])
    assert isinstance(data, dict)
    return data


def assert_clean_error(result: Result, exit_code: int, *needles: str) -> str:
    """A CLI failure: the given status, one short message naming the problem, no traceback."""
    assert result.exit_code == exit_code, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def dedup(*args: str | os.PathLike[str], input: bytes | None = None) -> Result:
    """Run `urlseen dedup ARGS` and require success."""
    result = invoke("dedup", *args, input=input)
    assert result.exception is None, (result.stderr, result.exception)
    assert result.exit_code == 0, result.stderr
    return result


def info_rows(path: str | os.PathLike[str]) -> dict[str, str]:
    """`urlseen info PATH` (which must succeed) as {row name: value}."""
    result = invoke("info", path)
    assert result.exit_code == 0, result.stderr
    return dict(line.split(None, 1) for line in result.stdout.splitlines())


def output_reaches(proc: subprocess.Popen[bytes], out: Path, size: int) -> bool:
    """Poll until the file `out` holds `size` bytes (True) or proc ends first (False); a run
    that does neither within 60 s fails the test."""
    deadline = time.monotonic() + 60
    while proc.poll() is None:
        try:
            current = out.stat().st_size
        except FileNotFoundError:
            current = 0
        if current >= size:
            return True
        if time.monotonic() > deadline:
            pytest.fail("the run did not reach the kill point within 60 s")
        time.sleep(0.0005)
    return False


def one_line_error(result: Result, *needles: str) -> str:
    """Status 1, no traceback, exactly one `Error:` line, naming what it must; stdout may hold
    what was done before the error."""
    assert result.exit_code == 1, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]
