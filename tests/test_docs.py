"""The documentation keeps its promises: CLI help with examples, README commands, docstrings."""

from __future__ import annotations

import gzip
import inspect
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import urlseen
from urlseen.cli import cli

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CI_RUN = REPO / ".ci" / "run"
CI_MARKER = "# The README's test command:"


def _code_blocks(markdown: str) -> list[str]:
    """The bodies of the fenced code blocks of a Markdown text."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


def test_cli_has_commands() -> None:
    assert {"dedup", "info"} <= set(cli.commands)


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_has_help_and_an_example(name: str) -> None:
    command = cli.commands[name]
    assert command.help and command.help.strip(), f"urlseen {name} has no help text"
    assert command.get_short_help_str().strip(), f"urlseen {name} has no short help"
    assert "Example:" in command.help, f"urlseen {name} has no Example: section"
    example = command.help.split("Example:", 1)[1]
    assert f"urlseen {name}" in example, f"urlseen {name}'s example does not run urlseen {name}"


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_help_output_shows_the_example(name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    # \b keeps click from re-wrapping the example lines into one paragraph.
    assert re.search(rf"^\s+urlseen {name}\b", result.output, flags=re.MULTILINE)


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_option_has_help(name: str) -> None:
    for param in cli.commands[name].params:
        if isinstance(param, click.Option):
            assert param.help, f"urlseen {name} {param.opts[0]} has no help text"


def test_group_has_help() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in cli.commands:
        assert name in result.output


def _ci_test_command() -> str:
    lines = CI_RUN.read_text().splitlines()
    idx = [i for i, line in enumerate(lines) if line.strip() == CI_MARKER]
    assert len(idx) == 1, f"{CI_RUN} must hold the line {CI_MARKER!r} exactly once"
    assert idx[0] + 1 < len(lines), f"nothing follows {CI_MARKER!r} in {CI_RUN}"
    command = lines[idx[0] + 1].strip()
    assert command and not command.startswith("#")
    return command


def test_readme_has_the_ci_test_command_verbatim() -> None:
    command = _ci_test_command()
    assert "pytest" in command
    blocks = _code_blocks(README.read_text())
    assert blocks, "README.md has no fenced code block"
    in_blocks = [b for b in blocks if command in (line.strip() for line in b.splitlines())]
    assert in_blocks, f"README.md has no code block with the line {command!r} (from .ci/run)"


def _first_setup_command() -> str:
    text = README.read_text()
    match = re.search(r"^## Set-up.*?$(.*?)(?=^## )", text, flags=re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Set-up' section"
    blocks = _code_blocks(match.group(1))
    assert blocks, "the Set-up section has no code block"
    lines = [line.strip() for line in blocks[0].splitlines() if line.strip()]
    assert lines, "the Set-up section's first code block is empty"
    return lines[0]


def test_readme_first_setup_command_uses_the_shipped_sample() -> None:
    command = _first_setup_command()
    assert "examples/sample-urls.txt.gz" in command
    sample = REPO / "examples" / "sample-urls.txt.gz"
    assert sample.is_file()
    with gzip.open(sample, "rb") as f:
        lines = f.read().splitlines()
    assert len(lines) > 1000
    assert sum(line.startswith(b"http") for line in lines) > 0.9 * len(lines)


def test_readme_first_setup_command_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `urlseen ...` part of the set-up command works as written (from the repo root)."""
    command = _first_setup_command()
    parts = [p.strip() for p in command.split("&&")]
    urlseen_part = next(p for p in parts if p.startswith("urlseen "))
    argv = shlex.split(urlseen_part)[1:]
    # Inputs are read from the repository, the output goes to a temp dir.
    argv = [str(REPO / a) if a.startswith("examples/") else a for a in argv]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    written = [p for p in tmp_path.iterdir() if p.is_file()]
    assert len(written) == 1
    out = written[0].read_bytes().splitlines()
    with gzip.open(REPO / "examples" / "sample-urls.txt.gz", "rb") as f:
        read = [line for line in f.read().splitlines() if line.strip()]
    assert 0 < len(out) < len(read)  # the sample has repeats
    assert len(set(out)) == len(out)


def test_all_names_exist() -> None:
    missing = [name for name in urlseen.__all__ if not hasattr(urlseen, name)]
    assert not missing
    assert len(set(urlseen.__all__)) == len(urlseen.__all__)


@pytest.mark.parametrize("name", [n for n in urlseen.__all__ if not n.startswith("__")])
def test_every_public_name_has_its_own_docstring(name: str) -> None:
    obj = getattr(urlseen, name)
    assert inspect.isclass(obj) or callable(obj), f"{name} is neither a class nor a function"
    # A class must document itself, not inherit Exception's or object's docstring.
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    assert doc and doc.strip(), f"urlseen.{name} has no docstring"
    assert len(doc.strip()) >= 20, f"urlseen.{name}'s docstring says too little: {doc!r}"


def test_version_is_a_string() -> None:
    assert isinstance(urlseen.__version__, str) and urlseen.__version__


def test_package_docstring() -> None:
    assert urlseen.__doc__ and "Example" in urlseen.__doc__
