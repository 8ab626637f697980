"""`urlseen dedup`'s command line read without click (cli/_dedup_args.py) against click's own
reading: the same values for every line it takes, click for the rest, the same messages either
way, and a run that does not import click."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from urlseen.cli import _dedup_args
from urlseen.cli._dedup_click import dedup_command


def _click_values(args: list[str]) -> dict[str, Any] | None:
    """What click passes the command for args, or None where click refuses them."""
    try:
        ctx = dedup_command.make_context("dedup", list(args))
    except click.exceptions.Exit:  # --help
        return None
    except click.ClickException:
        return None
    return dict(ctx.params)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "in.txt").write_text("https://a.example/\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "bad.bloom").write_bytes(b"not a state file")
    names = {"in": "in.txt", "dir": "folder", "new": "new.txt", "state": "st", "bad": "bad.bloom"}
    return {key: str(tmp_path / name) for key, name in names.items()}


TAKEN = [  # lines the fast reader must read itself (the common ones), as click does
    [],
    ["{in}"],
    ["-", "{in}"],
    ["--no-canonicalize", "{in}"],
    ["{in}", "-o", "{new}", "--append"],
    ["-a", "--output={new}", "--json", "{in}"],
    ["--filter", "exact", "--state", "{state}", "{in}"],
    ["--filter=exact", "--state={dir}", "--capacity", "1e6", "--error-rate", "0.01", "{in}"],
    ["--capacity", "10_000", "--batch-size", "100", "--no-progress", "{in}"],
    ["--progress", "--no-progress", "--canonicalize", "none", "{in}"],
    ["--redis", "redis://127.0.0.1:1/0", "--name", "n", "{in}"],
    ["--filter", "exact", "--remove", "-", "--forget-older-than", "30d", "{in}"],
    ["--layout", "blocked", "{in}"],
    ["--filter", "mdbf", "--groups", "4", "--query", "any", "{in}"],
    ["--filter", "similar", "--url-db", "{new}", "{in}"],
    ["--", "-o", "{in}"],
]
LEFT_TO_CLICK = [  # help, refused values and spellings the fast reader does not take
    ["--help"],
    ["-h"],
    ["--version"],
    ["--nope", "{in}"],
    ["--capacity", "0", "{in}"],
    ["--capacity", "x", "{in}"],
    ["--error-rate", "1", "{in}"],
    ["--error-rate", "nan", "{in}"],
    ["--batch-size", "0", "{in}"],
    ["--filter", "nope", "{in}"],
    ["--filter", "EXACT", "{in}"],
    ["{dir}"],
    ["-o", "{dir}", "{in}"],
    ["--json=1", "{in}"],
    ["-ao", "{new}", "{in}"],
    ["-o=x", "{in}"],
    ["--output"],
    ["--name", "-x", "{in}"],
    ["-x"],
]


def _fill(args: list[str], files: dict[str, str]) -> list[str]:
    return [a.format(**files) for a in args]


@pytest.mark.parametrize("args", TAKEN, ids=" ".join)
def test_the_fast_reader_reads_common_lines_as_click_does(
    args: list[str], files: dict[str, str]
) -> None:
    line = _fill(args, files)
    fast = _dedup_args.parse(line)
    assert fast is not None, line
    assert fast == _click_values(line)


@pytest.mark.parametrize("args", LEFT_TO_CLICK, ids=" ".join)
def test_the_fast_reader_leaves_the_rest_to_click(args: list[str], files: dict[str, str]) -> None:
    assert _dedup_args.parse(_fill(args, files)) is None


def test_the_fast_reader_knows_every_option_click_declares() -> None:
    """A new option declared for click only would send every line that uses it to click (still
    right, just slower); declare it in both."""
    declared = {  # params: the declared ones, without the help option click adds
        spelling
        for param in dedup_command.params
        if isinstance(param, click.Option)
        for spelling in (*param.opts, *param.secondary_opts)
    }
    fast = {spelling for names, _ in _dedup_args.options().values() for spelling in names}
    assert fast == declared


def _both_ways(args: list[str], cwd: Path) -> tuple[Any, Any]:
    """`urlseen dedup ARGS` through main() (the fast reader) and through the click group, each
    in its own process with the same program name."""
    runs = []
    for call in ("from urlseen.cli import main; main()", "from urlseen.cli import cli; cli()"):
        probe = f"import sys; sys.argv = ['urlseen', 'dedup', *{args!r}]; {call}"
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              cwd=cwd, stdin=subprocess.DEVNULL)  # fmt: skip
        runs.append(done)
    return runs[0], runs[1]


@pytest.mark.parametrize(
    "args, status",
    [
        (["--remove", "x", "{in}"], 2),  # a usage error the run raises: click's usage line
        (["--forget-older-than", "soon", "--filter", "exact", "--state", "{state}", "{in}"], 2),
        (["--filter", "bloom", "--state", "{dir}", "{in}"], 2),  # refused by kinds.open_filter
        (["--state", "{bad}", "{in}"], 1),  # a library error (FormatError)
        (["{new}"], 1),  # a missing input, met while reading
    ],
)
def test_errors_read_the_same_either_way(
    args: list[str], status: int, files: dict[str, str], tmp_path: Path
) -> None:
    line = _fill(args, files)
    assert _dedup_args.parse(line) is not None  # the fast path is the one tested
    fast, slow = _both_ways(line, tmp_path)
    assert "Traceback" not in fast.stderr
    assert "Error:" in fast.stderr
    assert (fast.returncode, fast.stdout, fast.stderr) == (status, slow.stdout, slow.stderr)
    assert slow.returncode == status


def test_a_run_reads_the_same_either_way(files: dict[str, str], tmp_path: Path) -> None:
    source = Path(files["in"])
    source.write_text("https://a.example/\nhttps://A.example/\nhttps://b.example/\n\n")
    fast, slow = _both_ways(["--json", files["in"]], tmp_path)
    assert fast.returncode == slow.returncode == 0, (fast.stderr, slow.stderr)
    assert fast.stdout == slow.stdout == "https://a.example/\nhttps://b.example/\n"
    timing = {"seconds", "lines_per_second", "new_per_second"}
    fast_summary, slow_summary = (json.loads(r.stderr.splitlines()[-1]) for r in (fast, slow))
    assert {k: v for k, v in fast_summary.items() if k not in timing} == {
        k: v for k, v in slow_summary.items() if k not in timing
    }


def _imported(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return {line.rpartition("|")[2].strip() for line in done.stderr.splitlines()}


def _under(modules: set[str], *heavy: str) -> set[str]:
    return {m for m in modules for h in heavy if (m + ".").startswith(h + ".")}


# Modules no one-line run needs: dataclasses (and the inspect it imports, ~40M instructions:
# value classes are urlseen._frozen's), gzip (plain input), uuid (-> platform; ids are
# os.urandom's) and shutil (-> bz2, lzma; only a temporary folder is removed).
NEVER_AT_START = ("dataclasses", "inspect", "gzip", "uuid", "platform", "shutil", "bz2", "lzma")


@pytest.mark.parametrize(
    "options, unwanted",
    [  # canonicalizing a plain URL is C's work: w3lib stays out too
        ([], ("click", "w3lib", "sqlite3", "redis", "json", "pathlib", "urlseen.exact",
              *NEVER_AT_START)),
        (["--no-canonicalize"], ("click", "w3lib", "sqlite3", "redis", "tqdm", "decimal",
                                 *NEVER_AT_START)),
        (["--filter", "exact", "--state", "{state}"], ("click", "w3lib", "redis", "scrapy",
                                                       "uuid", "platform", "shutil", "bz2",
                                                       "lzma", "gzip")),
    ],
)  # fmt: skip
def test_dedup_imports_only_what_its_kind_needs(
    options: list[str], unwanted: tuple[str, ...], files: dict[str, str]
) -> None:
    imported = _imported("-m", "urlseen", "dedup", *_fill(options, files), files["in"])
    assert "urlseen.cli.dedup" in imported  # the listing is the run's
    assert not _under(imported, *unwanted), sorted(_under(imported, *unwanted))


def test_the_dedup_command_and_the_job_import_no_typing() -> None:
    """What `urlseen dedup` imports before it opens a filter (the command, its reader, the job,
    the kinds table, the protocol) imports neither typing nor dataclasses: annotations are
    strings and the protocol classes wait in urlseen._protocols until asked for."""
    probe = "import urlseen.cli._dedup_args, urlseen.cli.dedup, urlseen.job.dedup, urlseen.protocol"
    imported = _imported("-c", probe)
    assert "urlseen.job.dedup" in imported
    assert not _under(imported, "typing", *NEVER_AT_START)


def test_the_protocol_classes_come_on_first_use() -> None:
    from urlseen import protocol
    from urlseen._protocols import Acknowledging, DedupStep, SeenFilter, WaitsOnClaims

    assert protocol.SeenFilter is SeenFilter and protocol.DedupStep is DedupStep
    assert protocol.Acknowledging is Acknowledging and protocol.WaitsOnClaims is WaitsOnClaims
    with pytest.raises(AttributeError):
        protocol.Unknown  # noqa: B018


def test_import_urlseen_loads_no_filter_until_one_is_used() -> None:
    probe = (
        "import sys, urlseen\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('urlseen'))))\n"
        "urlseen.BloomFilter\n"
        "print('urlseen.bloom.bloom' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    first, second = done.stdout.splitlines()
    assert first.split() == ["urlseen", "urlseen.errors"]
    assert second == "True"
    assert not _under(_imported("-c", "import urlseen"), "typing_extensions", "sqlite3", "redis",
                      "w3lib", "scrapy", "click", "inspect", "dataclasses")  # fmt: skip
