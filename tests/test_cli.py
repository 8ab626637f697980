"""`urlseen dedup` and `urlseen info` from the outside: CliRunner, plus a few real processes."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import urlseen
from cli_helpers import assert_clean_error, dedup, info_rows, invoke, lines, summary

FIVE_MB = 5 * 1024 * 1024


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    """A state file made by the CLI, closed cleanly, holding 3 URLs (capacity 1000)."""
    path = tmp_path / "seen.bloom"
    dedup(
        "--state",
        path,
        "--capacity",
        "1000",
        input=lines("http://a.example/", "http://b.example/", "http://c.example/"),
    )
    return path


# -- dedup: what comes out -------------------------------------------------------------------


def test_first_occurrences_in_input_order() -> None:
    result = dedup(
        input=lines("http://c/", "http://a/", "http://c/", "http://b/", "http://a/", "http://d/")
    )
    assert result.stdout_bytes == lines("http://c/", "http://a/", "http://b/", "http://d/")


def test_last_line_without_newline_is_printed_with_one() -> None:
    result = dedup(input=b"http://a/\nhttp://b/")
    assert result.stdout_bytes == b"http://a/\nhttp://b/\n"


def test_empty_input_prints_nothing() -> None:
    result = dedup("--json", input=b"")
    assert result.stdout_bytes == b""
    assert summary(result)["lines"] == 0


def test_files_gz_and_stdin_are_read_in_argument_order(tmp_path: Path) -> None:
    plain = tmp_path / "a.txt"
    plain.write_bytes(lines("http://1/", "http://2/", "http://1/"))
    packed = tmp_path / "b.txt.gz"
    with gzip.open(packed, "wb") as f:
        f.write(lines("http://3/", "http://2/", "http://4/"))
    stdin = lines("http://5/", "http://4/", "http://1/", "http://6/")
    result = dedup("--json", plain, "-", packed, input=stdin)
    assert result.stdout_bytes == lines(
        "http://1/", "http://2/", "http://5/", "http://4/", "http://6/", "http://3/"
    )
    s = summary(result)
    assert (s["lines"], s["new"], s["duplicates"]) == (10, 6, 4)


def test_gz_input_alone(tmp_path: Path) -> None:
    packed = tmp_path / "links.gz"
    with gzip.open(packed, "wb") as f:
        f.write(lines(*[f"http://x.example/{i % 7}" for i in range(50)]))
    result = dedup(packed)
    assert result.stdout_bytes == lines(*[f"http://x.example/{i}" for i in range(7)])


def test_no_inputs_means_stdin() -> None:
    assert dedup(input=lines("http://a/", "http://a/")).stdout_bytes == lines("http://a/")


def test_output_option_writes_the_file_not_stdout(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    result = dedup("-o", out, input=lines("http://a/", "http://a/", "http://b/"))
    assert result.stdout_bytes == b""
    assert out.read_bytes() == lines("http://a/", "http://b/")


def test_output_is_replaced_without_append_and_kept_with_it(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"old\n")
    dedup("-o", out, input=lines("http://a/"))
    assert out.read_bytes() == lines("http://a/")
    dedup("-o", out, "--append", input=lines("http://b/"))
    assert out.read_bytes() == lines("http://a/", "http://b/")
    dedup("-o", out, "-a", input=lines("http://c/"))
    assert out.read_bytes() == lines("http://a/", "http://b/", "http://c/")


def test_append_after_a_cut_write_keeps_urls_on_their_own_lines(tmp_path: Path) -> None:
    """A run killed mid-write (or out of disk space) can leave half a line; its key was never
    added, so the resumed run prints that URL again, and it must not be glued to the half."""
    out = tmp_path / "out.txt"
    out.write_bytes(b"http://first/\nhttp://a")
    dedup("-o", out, "-a", input=lines("http://a/", "http://b/"))
    printed = out.read_bytes().split(b"\n")
    assert b"http://a/" in printed
    assert b"http://first/" in printed


# -- dedup --state ---------------------------------------------------------------------------


def test_state_resume_keeps_earlier_urls_seen(tmp_path: Path) -> None:
    state = tmp_path / "seen.bloom"
    first = dedup("--state", state, "--json", input=lines("http://a/", "http://b/", "http://a/"))
    assert first.stdout_bytes == lines("http://a/", "http://b/")
    assert summary(first)["filter_count"] == 2
    second = dedup(
        "--state",
        state,
        "--json",
        input=lines("http://b/", "HTTP://A/#top", "http://c/", "http://c/"),
    )
    assert second.stdout_bytes == lines("http://c/")
    s = summary(second)
    assert (s["lines"], s["new"], s["duplicates"]) == (4, 1, 3)
    assert s["filter_count"] == 3
    info = json.loads(invoke("info", "--json", state).stdout)
    assert info["count"] == 3
    assert info["closed_cleanly"] is True


def test_state_keeps_its_parameters_when_none_are_given(state_file: Path) -> None:
    # Created with --capacity 1000; the default (10M) does not conflict when not given.
    result = dedup("--state", state_file, "--json", input=lines("http://d.example/"))
    assert summary(result)["filter_capacity"] == 1000
    # The same value given explicitly is fine too.
    dedup("--state", state_file, "--capacity", "1000", input=b"")
    assert json.loads(invoke("info", "--json", state_file).stdout)["capacity"] == 1000


@pytest.mark.parametrize(
    ("option", "value", "stored"),
    [
        ("--capacity", "5000", "1000"),
        ("--error-rate", "0.01", "1e-06"),
        ("--layout", "standard", "blocked"),
    ],
)
def test_conflicting_parameter_with_state_is_a_usage_error(
    state_file: Path, tmp_path: Path, option: str, value: str, stored: str
) -> None:
    before = state_file.read_bytes()
    out = tmp_path / "out.txt"
    out.write_bytes(b"keep me\n")
    result = invoke(
        "dedup", "--state", state_file, option, value, "-o", out, input=lines("http://new.example/")
    )
    message = assert_clean_error(result, 2, option, value, stored)
    assert "state file" in message
    assert "Usage:" in result.stderr
    assert out.read_bytes() == b"keep me\n"  # nothing was started
    assert state_file.read_bytes() == before


def test_state_in_use_by_another_writer(tmp_path: Path) -> None:
    path = tmp_path / "busy.bloom"
    with urlseen.BloomFilter.create(path, capacity=100):
        result = invoke("dedup", "--state", path, input=lines("http://a/"))
        assert_clean_error(result, 1, str(path), "another process")


@pytest.mark.parametrize("damage", ["header", "magic", "version", "truncated", "foreign", "empty"])
def test_dedup_on_a_bad_state_file_fails_cleanly_and_touches_nothing(
    state_file: Path, tmp_path: Path, damage: str
) -> None:
    damaged = _damage(state_file, damage)
    before = damaged.read_bytes()
    out = tmp_path / "out.txt"
    out.write_bytes(b"keep me\n")
    result = invoke("dedup", "--state", damaged, "-o", out, input=lines("http://z/"))
    assert_clean_error(result, 1, str(damaged))
    assert damaged.read_bytes() == before, "a bad state file must not be rewritten"
    assert out.read_bytes() == b"keep me\n"


# -- dedup: canonicalization and odd lines ---------------------------------------------------

VARIANTS = [
    "http://Example.com/a?b=2&a=1#top",
    "http://example.com/a?a=1&b=2",
    "HTTP://EXAMPLE.COM/a?a=1&b=2#",
    "http://example.com/a?b=2&a=1",
]


def test_canonicalization_folds_spelling_variants_and_prints_the_first_as_read() -> None:
    result = dedup("--json", input=lines(*VARIANTS, "http://example.com/b"))
    assert result.stdout_bytes == lines(VARIANTS[0], "http://example.com/b")
    assert summary(result)["duplicates"] == 3


@pytest.mark.parametrize("flag", [["--no-canonicalize"], ["--canonicalize", "none"]])
def test_no_canonicalize_compares_exact_lines(flag: list[str]) -> None:
    result = dedup(*flag, "--json", input=lines(*VARIANTS, VARIANTS[1]))
    assert result.stdout_bytes == lines(*VARIANTS)
    assert summary(result)["duplicates"] == 1


def test_empty_and_blank_lines_are_skipped_and_counted() -> None:
    data = b"\nhttp://a/\n   \n\r\nhttp://a/\n\t\n\n"
    result = dedup("--json", input=data)
    assert result.stdout_bytes == lines("http://a/")
    s = summary(result)
    assert s["skipped"]["empty"] == 5
    assert (s["lines"], s["new"], s["duplicates"]) == (7, 1, 1)
    assert s["duplicate_rate"] == pytest.approx(0.5)  # empty lines are no URLs


def test_text_summary_reports_counts_and_skips() -> None:
    result = dedup(input=b"http://a/\n\nhttp://a/\nhttp://x/\xff\n")
    err = result.stderr
    assert "4 lines, 2 new, 1 duplicates" in err
    assert "1 empty skipped" in err
    assert "1 invalid UTF-8 kept verbatim" in err
    assert "new URLs/s" in err and "MiB in memory" in err


@pytest.mark.parametrize("flag", [[], ["--no-canonicalize"]])
def test_invalid_utf8_lines_are_kept_byte_for_byte_and_deduplicated(flag: list[str]) -> None:
    odd1, odd2 = b"http://x/\xff\xfe", b"http://x/\xfe"
    data = lines(odd1, "http://y/", odd1, odd2, b"HTTP://X/\xff\xfe", odd2)
    result = dedup(*flag, "--json", input=data)
    assert result.stdout_bytes == lines(odd1, "http://y/", odd2, b"HTTP://X/\xff\xfe")
    s = summary(result)
    assert (s["new"], s["duplicates"]) == (4, 2)
    if not flag:
        assert s["skipped"]["invalid_utf8"] == 5


def test_five_megabyte_line_is_printed_and_deduplicated() -> None:
    huge = b"http://example.com/" + b"a" * FIVE_MB
    result = dedup("--json", input=lines(huge, "http://b/", huge))
    assert result.stdout_bytes == lines(huge, "http://b/")
    s = summary(result)
    assert s["skipped"]["oversized"] == 2
    assert (s["new"], s["duplicates"]) == (2, 1)


def test_crlf_input_is_deduplicated_and_printed_as_read() -> None:
    data = b"http://a/\r\nhttp://a/\nhttp://b/\r\nhttp://a/\r\n"
    result = dedup("--json", input=data)
    assert result.stdout_bytes == b"http://a/\r\nhttp://b/\r\n"
    assert summary(result)["duplicates"] == 2
    exact = dedup("--no-canonicalize", input=data)
    assert exact.stdout_bytes == b"http://a/\r\nhttp://b/\r\n"


def test_over_capacity_warning(tmp_path: Path) -> None:
    urls = [f"http://example.com/{i}" for i in range(60)]
    result = dedup("--capacity", "10", input=lines(*urls))
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1
    assert "sized for 10" in warning[0] and "--capacity" in warning[0]
    quiet = dedup("--capacity", "1000", input=lines(*urls))
    assert "warning" not in quiet.stderr
    assert quiet.stdout_bytes == lines(*urls)


def test_over_capacity_is_visible_in_json(tmp_path: Path) -> None:
    result = dedup("--capacity", "10", "--json", input=lines(*[f"http://e/{i}" for i in range(30)]))
    s = summary(result)
    assert s["filter_capacity"] == 10
    assert s["filter_count"] > s["filter_capacity"]


def test_missing_input_file_is_a_clean_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    assert_clean_error(invoke("dedup", missing), 1, "nope.txt")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--capacity", "0"], "--capacity"),
        (["--error-rate", "1.5"], "--error-rate"),
        (["--batch-size", "0"], "--batch-size"),
        (["--canonicalize", "bogus"], "--canonicalize"),
    ],
)
def test_bad_option_values_are_usage_errors(args: list[str], needle: str) -> None:
    result = invoke("dedup", *args, input=b"")
    assert result.exit_code == 2
    assert needle in result.stderr


# -- info ------------------------------------------------------------------------------------


def test_info_text(state_file: Path) -> None:
    rows = info_rows(state_file)
    assert rows["kind"] == "bloom"
    assert rows["count"] == "3"
    assert rows["capacity"] == "1000"
    assert rows["closed_cleanly"] == "True"
    assert rows["layout"] == "blocked"
    assert "verified" not in rows


def test_info_json_and_verify(state_file: Path) -> None:
    result = invoke("info", "--json", "--verify", state_file)
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["verified"] is True
    assert info["count"] == 3
    assert info["capacity"] == 1000
    assert info["error_rate"] == pytest.approx(1e-6)
    assert info["file_bytes"] == state_file.stat().st_size
    assert info["bits_per_key"] == pytest.approx(info["nbits"] / 1000)
    assert 0 <= info["estimated_error_rate"] < 1e-6


def test_info_on_a_file_still_open_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "live.bloom"
    with urlseen.BloomFilter.create(path, capacity=100) as seen:
        seen.add_many(["http://a/", "http://b/"])
        result = invoke("info", "--json", "--verify", path)
        assert result.exit_code == 0, result.stderr
        info = json.loads(result.stdout)
        assert info["closed_cleanly"] is False
        assert info["count"] == 2  # the live count, not the one of the last close
        assert info["verified"] is None  # no checksum until a clean close


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        ("header", "corrupted header"),
        ("magic", "not a urlseen state file"),
        ("version", "version"),
        ("truncated", "truncated"),
        ("foreign", "not a urlseen state file"),
        ("short", "too short"),
        ("empty", "too short"),
    ],
)
def test_info_on_a_bad_file_is_a_one_line_error(state_file: Path, damage: str, needle: str) -> None:
    damaged = _damage(state_file, damage)
    for args in (["info"], ["info", "--json"], ["info", "--verify"]):
        assert_clean_error(invoke(*args, damaged), 1, str(damaged), needle)


def test_info_verify_catches_corrupted_data(state_file: Path) -> None:
    damaged = _damage(state_file, "data")
    assert invoke("info", damaged).exit_code == 0  # the header alone is fine
    assert_clean_error(invoke("info", "--verify", damaged), 1, str(damaged), "checksum")


def test_info_on_a_directory_or_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    assert invoke("info", tmp_path).exit_code == 2
    assert invoke("info", tmp_path / "missing.bloom").exit_code == 2


def _damage(state_file: Path, how: str) -> Path:
    """A copy of a good state file, damaged in one way."""
    good = state_file.read_bytes()
    target = state_file.with_name(f"{how}.bloom")
    data = bytearray(good)
    if how == "header":  # a byte of the params, under the header CRC
        data[60] ^= 0x20
    elif how == "magic":
        data[0:8] = b"NOTMAGIC"
    elif how == "version":
        data[8:10] = (99).to_bytes(2, "little")
    elif how == "truncated":
        data = data[: len(data) - 100]
    elif how == "data":  # a bit of the filter, under the data CRC only
        data[4096 + 7] ^= 0x01
    elif how == "foreign":  # a URL list passed as --state by mistake
        data = bytearray(lines(*[f"http://example.com/page/{i}" for i in range(500)]))
    elif how == "short":
        data = bytearray(b"hello\n")
    elif how == "empty":
        data = bytearray()
    else:
        raise AssertionError(how)
    target.write_bytes(bytes(data))
    return target


# -- real processes --------------------------------------------------------------------------


def _console_script() -> str:
    bindir = os.path.dirname(sys.executable)
    script = shutil.which("urlseen", path=bindir) or shutil.which("urlseen")
    if script is None:
        pytest.fail("the `urlseen` console script is not installed (pip install -e .)")
    return script


def test_console_script_runs_dedup(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(lines("http://a/", "http://b/", "http://a/"))
    proc = subprocess.run(
        [_console_script(), "dedup", "--json", str(src)], capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == lines("http://a/", "http://b/")
    assert json.loads(proc.stderr.decode().strip().splitlines()[-1])["new"] == 2


def test_python_dash_m_reads_stdin_and_reports_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "urlseen", "dedup"],
        input=lines("http://a/", "http://a/", "http://b/"),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == lines("http://a/", "http://b/")
    version = subprocess.run(
        [sys.executable, "-m", "urlseen", "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0
    assert urlseen.__version__ in version.stdout


@pytest.mark.parametrize("flag", [[], ["--no-canonicalize"]])
def test_broken_pipe_exits_quietly(tmp_path: Path, flag: list[str]) -> None:
    """`urlseen dedup big | head -1`: no traceback, no 'Exception ignored', status 0."""
    big = tmp_path / "big.txt"
    big.write_bytes(b"".join(b"http://example.com/page/%d\n" % i for i in range(200_000)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "urlseen", "dedup", *flag, str(big)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    err = proc.stderr.read()
    proc.stderr.close()
    status = proc.wait(timeout=60)
    assert first == b"http://example.com/page/0\n"
    assert b"Traceback" not in err and b"Exception ignored" not in err, err.decode()
    assert b"Error" not in err, err.decode()
    assert status == 0


# -- start-up: a command imports what it needs -------------------------------------------------


def test_dedup_imports_neither_the_other_commands_nor_what_only_they_need(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("https://a.example/\nhttps://a.example/\n")
    probe = (
        "import sys\n"
        "from urlseen.cli import cli\n"
        "try:\n"
        f"    cli(['dedup', '--no-progress', {str(source)!r}, '-o', {str(tmp_path / 'o')!r}])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "heavy = ['urlseen.cli.crawl', 'urlseen.cli.info', 'sqlite3', 'redis', 'scrapy', 'tqdm']\n"
        "print(' '.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert (tmp_path / "o").read_text() == "https://a.example/\n"
    assert done.stdout.split() == []  # tqdm too: --no-progress draws no bar


# What `python -m urlseen dedup --no-canonicalize` (a filter in memory, a plain file, no TTY)
# must not import: modules only other options, kinds or commands need. Each was imported at
# start-up before issue 14's start-up work (314M instructions then: benchmarks/dedup/REPORT.md);
# -X importtime lists every module the process imports, so the check is exact, not a timing.
NOT_AT_START = (
    "w3lib",  # canonicalization left to w3lib (--no-canonicalize: none)
    "redis",
    "sqlite3",  # the exact filter's library
    "tqdm",  # the progress bar: stderr is not a terminal
    "rich",
    "scrapy",
    "importlib.metadata",  # --version only
    "json",  # --json, and state files' headers
    "decimal",  # --capacity's parser
    "pathlib",  # state paths
    "tempfile",  # filters that keep a temporary library
    "urlseen.state.mmapfile",  # state files
    "urlseen.state.format",
    "urlseen.splittable.sizing",
    "urlseen.bloom.counting",  # the other kinds' filters
    "urlseen.exact.filter",
    "urlseen.splittable.filter",
    "urlseen.bloom.mdbf",
    "urlseen.bloom.rotating",
    "urlseen.shared.bloom",
    "urlseen.similarity",
    "urlseen.integrations",
    "urlseen.cli.crawl",
    "urlseen.cli.info",
)


def _imported(*args: str) -> set[str]:
    """Every module a `python -X importtime ...` process imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_dedup_starts_without_what_it_does_not_need(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("https://a.example/\nhttps://a.example/\n")
    run = ("-m", "urlseen", "dedup", "--no-canonicalize", str(source), "-o", str(tmp_path / "o"))
    # what the interpreter's own start imports here (site hooks) is not the run's doing
    imported = _imported(*run) - _imported("-c", "pass")
    assert (tmp_path / "o").read_text() == "https://a.example/\n"
    assert "urlseen.bloom.bloom" in imported  # the listing is the run's
    unwanted = {m for m in imported for heavy in NOT_AT_START if (m + ".").startswith(heavy + ".")}
    assert not unwanted, f"imported at start-up: {sorted(unwanted)}"
