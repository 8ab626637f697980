"""Running the `urlseen` command in-process, for the CLI test modules."""

from __future__ import annotations

import os

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


def dedup(*args: str | os.PathLike[str], input: bytes | None = None) -> Result:
    """Run `urlseen dedup ARGS` and require success."""
    result = invoke("dedup", *args, input=input)
    assert result.exception is None, (result.stderr, result.exception)
    assert result.exit_code == 0, result.stderr
    return result
