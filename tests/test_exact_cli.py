"""`urlseen dedup --filter exact|library` and `urlseen info DIR` from the outside (CliRunner).

The exact filters print exactly what a first-occurrence pass prints (no false positives, unlike
a Bloom filter in general), keep their state in a folder, and can forget URLs (--remove,
--forget-older-than) so that they are printed again: a re-crawl.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import assert_clean_error, dedup, info_rows, invoke, lines, summary
from urlseen.canonical import canonicalize
from urlseen.errors import InvalidKeyError

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "sample-urls.txt.gz"
SMALL = ("--capacity", "20000")  # a small counter file: fast to create and to rebuild


def info(path: Path) -> dict[str, Any]:
    result = invoke("info", "--json", path)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def _canonical_key(line: bytes) -> str | bytes | None:
    """The default profile's key, from urlseen.canonical (not from the CLI's LineKeyer)."""
    line = line[:-1] if line.endswith(b"\r") else line
    if not line.strip():
        return None
    try:
        return canonicalize(line.decode("utf-8"))
    except (UnicodeDecodeError, InvalidKeyError):
        return line


def _exact_key(line: bytes) -> bytes | None:
    line = line[:-1] if line.endswith(b"\r") else line
    return line if line.strip() else None


def first_occurrences(data: bytes, canonical: bool = True) -> list[bytes]:
    key = _canonical_key if canonical else _exact_key
    seen: set[object] = set()
    out = []
    for line in data.split(b"\n"):
        k = key(line)
        if k is not None and k not in seen:
            seen.add(k)
            out.append(line)
    return out


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """The shipped real-data sample (examples/), unpacked: ~8.4k lines, 3,000 distinct URLs
    with repeats and spelling variants."""
    assert SAMPLE.is_file(), f"{SAMPLE} is part of the repository"
    data = gzip.decompress(SAMPLE.read_bytes())
    path = tmp_path_factory.mktemp("sample") / "sample.txt"
    path.write_bytes(data)
    return path, data


def _halves(data: bytes) -> tuple[bytes, bytes]:
    all_lines = data.splitlines(keepends=True)
    return b"".join(all_lines[: len(all_lines) // 2]), b"".join(all_lines[len(all_lines) // 2 :])


# -- without state: the same lines as a first-occurrence pass --------------------------------


@pytest.mark.parametrize("canonical", [True, False], ids=["canonical", "no-canonicalize"])
def test_exact_library_and_bloom_print_the_first_occurrences(
    sample: tuple[Path, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    canonical: bool,
) -> None:
    path, data = sample
    expected = lines(*first_occurrences(data, canonical))
    assert expected.count(b"\n") == (3000 if canonical else 3919)
    flags = [] if canonical else ["--no-canonicalize"]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the temporary library goes
    printed = {}
    for filter_name in ("exact", "library", "bloom"):
        result = dedup("--filter", filter_name, *flags, "--json", path)
        printed[filter_name] = result.stdout_bytes
        s = summary(result)
        assert s["new"] == expected.count(b"\n")
        assert s["filter_kind"] == filter_name
    assert printed["exact"] == expected
    assert printed["library"] == expected
    assert printed["bloom"] == expected
    assert list(scratch.iterdir()) == [], "the temporary library was left behind"


def test_exact_from_stdin_with_small_batches_and_no_cache(sample: tuple[Path, bytes]) -> None:
    _, data = sample
    expected = lines(*first_occurrences(data))
    for extra in (["--batch-size", "7"], ["--cache-entries", "0"], ["--error-rate", "0.5"]):
        assert dedup("--filter", "exact", *SMALL, *extra, input=data).stdout_bytes == expected


# -- --state: resume -------------------------------------------------------------------------


@pytest.mark.parametrize("filter_name", ["exact", "library"])
def test_state_folder_resumes(sample: tuple[Path, bytes], tmp_path: Path, filter_name: str) -> None:
    _, data = sample
    first, _ = _halves(data)
    state = tmp_path / "state"
    run1 = dedup("--filter", filter_name, "--state", state, *SMALL, "--json", input=first)
    assert run1.stdout_bytes == lines(*first_occurrences(first))
    assert sorted(p.name for p in state.iterdir() if not p.name.startswith("library.sqlite-")) == (
        ["counters.urlseen", "library.sqlite", "library.sqlite.seal"]
        if filter_name == "exact"
        else ["library.sqlite", "library.sqlite.seal"]
    )
    again = dedup("--filter", filter_name, "--state", state, "--json", input=first)
    assert again.stdout_bytes == b""
    assert summary(again)["new"] == 0
    assert "warning" not in again.stderr  # closed cleanly: no rebuild
    rest = dedup("--filter", filter_name, "--state", state, "--json", input=data)
    whole = first_occurrences(data)
    earlier = set(first_occurrences(first))
    assert rest.stdout_bytes == lines(*[u for u in whole if u not in earlier])
    assert summary(rest)["filter_count"] == len(whole)
    desc = info(state)
    assert desc["kind"] == filter_name
    assert desc["records"] == len(whole)
    assert desc["fingerprint"] == "md5"
    if filter_name == "exact":
        assert desc["counters_in_sync"] is True
        assert desc["counters_closed_cleanly"] is True
        assert desc["capacity"] == 20000
    else:
        assert "counters_in_sync" not in desc


def test_exact_and_library_share_a_state_folder(sample: tuple[Path, bytes], tmp_path: Path) -> None:
    """Either filter opens the other's folder; after the library-only filter wrote to it,
    the exact filter's counters are rebuilt (with a warning) and nothing is printed twice."""
    _, data = sample
    first, _ = _halves(data)
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, input=first)
    by_library = dedup("--filter", "library", "--state", state, input=data)
    seen_first = set(first_occurrences(first))
    assert by_library.stdout_bytes == lines(
        *[u for u in first_occurrences(data) if u not in seen_first]
    )
    assert info(state)["counters_in_sync"] is False
    back = dedup("--filter", "exact", "--state", state, input=data + lines("http://new.example/"))
    assert back.stdout_bytes == lines("http://new.example/")
    assert "counters rebuilt" in back.stderr and "the library changed" in back.stderr
    assert info(state)["counters_in_sync"] is True


# -- forgetting: --remove and --forget-older-than ----------------------------------------------


def test_remove_makes_exactly_those_urls_new_again(
    sample: tuple[Path, bytes], tmp_path: Path
) -> None:
    path, data = sample
    state = tmp_path / "state"
    firsts = first_occurrences(data)
    dedup("--filter", "exact", "--state", state, *SMALL, path)
    chosen = firsts[5:400:13]
    # Spelling variants name the same URLs (the remove list is canonicalized too); a URL
    # that was never seen is ignored.
    variants = [u.replace(b"https://www.", b"https://WWW.", 1) + b"#frag" for u in chosen]
    remove = tmp_path / "remove.txt"
    remove.write_bytes(lines(*variants, "http://never-seen.example/", ""))
    run = dedup("--filter", "exact", "--state", state, "--remove", remove, "--json", path)
    assert f"forgot {len(chosen):,} URLs" in run.stderr
    assert run.stdout_bytes == lines(*chosen), "only the removed URLs are new again"
    assert summary(run)["new"] == len(chosen)
    assert dedup("--filter", "exact", "--state", state, path).stdout_bytes == b""
    assert info(state)["records"] == len(firsts)
    # From stdin, with no input files to dedup: only forgets.
    gone = dedup("--filter", "exact", "--state", state, "--remove", "-", os.devnull,
                 input=lines(*chosen[:3]))  # fmt: skip
    assert "forgot 3 URLs" in gone.stderr
    assert info(state)["records"] == len(firsts) - 3


@pytest.mark.parametrize(
    ("age", "forgets_all"),
    [
        ("0s", True),  # older than now: everything
        ("1000d", False),
        ("12h", False),
        ("90m", False),
        ("2w", False),
        ("unix-future", True),
        ("unix-past", False),
        ("2000-01-01", False),
        ("2999-12-31T23:59:59", True),
        ("2000-01-01T00:00:00+00:00", False),
    ],
)
def test_forget_older_than(
    sample: tuple[Path, bytes], tmp_path: Path, age: str, forgets_all: bool
) -> None:
    path, data = sample
    state = tmp_path / "state"
    firsts = first_occurrences(data)
    dedup("--filter", "exact", "--state", state, *SMALL, path)
    time.sleep(0.01)  # first-seen times are kept in milliseconds
    if age == "unix-future":
        age = str(int(time.time()) + 3600)
    elif age == "unix-past":
        age = f"{time.time() - 3600:.3f}"
    run = dedup("--filter", "exact", "--state", state, "--forget-older-than", age, path)
    assert f"forgot {len(firsts) if forgets_all else 0:,} URLs" in run.stderr
    assert run.stdout_bytes == (lines(*firsts) if forgets_all else b"")
    assert info(state)["records"] == len(firsts)


def test_remove_and_forget_together(sample: tuple[Path, bytes], tmp_path: Path) -> None:
    path, data = sample
    first, second = _halves(data)
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, input=first)
    time.sleep(0.01)
    cut = time.time()
    time.sleep(0.01)
    dedup("--filter", "exact", "--state", state, input=second)
    older = set(first_occurrences(first))
    newer = [u for u in first_occurrences(data) if u not in older]
    remove = tmp_path / "remove.txt"
    remove.write_bytes(lines(newer[0], newer[1]))
    run = dedup("--filter", "exact", "--state", state, "--remove", remove,
                "--forget-older-than", f"{cut:.3f}", path)  # fmt: skip
    assert f"forgot {len(older) + 2:,} URLs" in run.stderr
    again = older | set(newer[:2])
    assert run.stdout_bytes == lines(*[u for u in first_occurrences(data) if u in again])


@pytest.mark.parametrize("age", ["yesterday", "5x", "-5d", "", "2024-13-01", "d", "1.2.3s"])
def test_bad_age_is_a_usage_error(tmp_path: Path, age: str) -> None:
    state = tmp_path / "state"
    result = invoke("dedup", "--filter", "exact", "--state", state, *SMALL,
                    "--forget-older-than", age, input=lines("http://a/"))  # fmt: skip
    message = assert_clean_error(result, 2, "--forget-older-than", repr(age))
    assert "30d" in message and "ISO date" in message
    assert "Usage:" in result.stderr


@pytest.mark.parametrize("age", ["nan", "inf", "-inf", "1e400", "1e20", "99999999999999999999d"])
def test_absurd_age_is_a_usage_error(tmp_path: Path, age: str) -> None:
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, input=lines("http://a/"))
    result = invoke("dedup", "--filter", "exact", "--state", state,
                    "--forget-older-than", age, input=b"")  # fmt: skip
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)
    if result.exit_code != 0:  # rejected (or, for inf, forgetting everything is fine too)
        assert_clean_error(result, 2, "--forget-older-than")


def test_bad_age_changes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, input=lines("http://a/", "http://b/"))
    remove = tmp_path / "remove.txt"
    remove.write_bytes(lines("http://a/"))
    bad = invoke("dedup", "--filter", "exact", "--state", state, "--remove", remove,
                 "--forget-older-than", "bogus", input=b"")  # fmt: skip
    assert bad.exit_code == 2
    fresh = tmp_path / "fresh"
    assert invoke("dedup", "--filter", "exact", "--state", fresh,
                  "--forget-older-than", "bogus", input=b"").exit_code == 2  # fmt: skip
    problems = []
    if info(state)["records"] != 2:
        problems.append("--remove was applied")
    if fresh.exists():
        problems.append("the state folder was created")
    assert not problems, problems


# -- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("filter_name", ["bloom", "library"])
@pytest.mark.parametrize("option", [("--remove", "FILE"), ("--forget-older-than", "30d")])
def test_forget_options_need_the_exact_filter(
    tmp_path: Path, filter_name: str, option: tuple[str, str]
) -> None:
    name, value = option
    if value == "FILE":
        value = str(tmp_path / "remove.txt")
        Path(value).write_bytes(lines("http://a/"))
    state = tmp_path / ("seen.bloom" if filter_name == "bloom" else "state")
    result = invoke("dedup", "--filter", filter_name, "--state", state, name, value,
                    input=lines("http://a/"))  # fmt: skip
    assert_clean_error(result, 2, "--filter exact")
    assert not state.exists(), "a usage error must not create the state"


@pytest.mark.parametrize("filter_name", ["exact", "library"])
def test_state_file_for_an_exact_filter_is_a_usage_error(tmp_path: Path, filter_name: str) -> None:
    state = tmp_path / "seen.bloom"
    dedup("--state", state, "--capacity", "1000", input=lines("http://a/"))
    before = state.read_bytes()
    result = invoke("dedup", "--filter", filter_name, "--state", state, input=lines("http://b/"))
    assert_clean_error(result, 2, str(state), "folder")
    assert state.read_bytes() == before


def test_state_folder_for_bloom_is_a_usage_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, input=lines("http://a/"))
    result = invoke("dedup", "--filter", "bloom", "--state", state, input=lines("http://b/"))
    assert_clean_error(result, 2, str(state), "folder")


@pytest.mark.parametrize(
    ("option", "value", "stored"),
    [("--capacity", "5000", "20000"), ("--error-rate", "0.01", "0.001")],
)
def test_parameters_differing_from_the_state_are_usage_errors(
    tmp_path: Path, option: str, value: str, stored: str
) -> None:
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, input=lines("http://a/"))
    out = tmp_path / "out.txt"
    out.write_bytes(b"keep me\n")
    result = invoke("dedup", "--filter", "exact", "--state", state, option, value,
                    "-o", out, input=lines("http://new/"))  # fmt: skip
    message = assert_clean_error(result, 2, option, value, stored)
    assert "state" in message
    assert out.read_bytes() == b"keep me\n"
    # Given equal to the stored value, or not given: fine, and the state keeps its own.
    same = dedup("--filter", "exact", "--state", state, option, stored, "--json",
                 input=lines("http://new/"))  # fmt: skip
    assert same.stdout_bytes == lines("http://new/")
    assert summary(same)["filter_capacity"] == 20000
    assert info(state)["counters_in_sync"] is True


def test_info_on_a_folder_without_a_library_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "stuff.txt").write_bytes(b"x\n")
    result = invoke("info", tmp_path)
    assert_clean_error(result, 2, "library.sqlite")
    assert invoke("info", "--json", tmp_path).exit_code == 2


def test_info_text_json_and_verify(sample: tuple[Path, bytes], tmp_path: Path) -> None:
    path, _ = sample
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, path)
    rows = info_rows(state)
    assert rows["kind"] == "exact"
    assert rows["records"] == "3000"
    assert rows["counters_in_sync"] == "True"
    assert rows["capacity"] == "20000"
    desc = info(state)
    assert (desc["kind"], desc["records"], desc["counters_in_sync"]) == ("exact", 3000, True)
    assert desc["counter_bits"] == 4 and desc["k"] >= 1 and desc["ncounters"] > 20000
    assert desc["library_bytes"] > 0
    verified = invoke("info", "--json", "--verify", state)
    assert verified.exit_code == 0, verified.stderr
    checked = json.loads(verified.stdout)
    assert checked["library_verified"] is True
    assert checked["counters_verified"] is True
    lib_state = tmp_path / "lib"
    dedup("--filter", "library", "--state", lib_state, path)
    lib = info(lib_state)
    assert (lib["kind"], lib["records"]) == ("library", 3000)


def test_stray_counter_file_without_a_library_is_a_clean_error(tmp_path: Path) -> None:
    good = tmp_path / "good"
    dedup("--filter", "exact", "--state", good, *SMALL, input=lines("http://a/"))
    state = tmp_path / "state"
    state.mkdir()
    (state / "counters.urlseen").write_bytes((good / "counters.urlseen").read_bytes())
    result = invoke("dedup", "--filter", "exact", "--state", state, input=lines("http://a/"))
    assert_clean_error(result, 1, str(state / "counters.urlseen"))
    assert "Error: : " not in result.stderr, result.stderr  # no empty filename prefix


def test_a_state_whose_library_is_missing_is_named_not_blamed_on_the_output(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\n")
    state, out = tmp_path / "st", tmp_path / "OUT"
    assert invoke("dedup", "--filter", "exact", "--state", state, "--capacity", "1000",
                  "-o", tmp_path / "first.txt", src).exit_code == 0  # fmt: skip
    for part in state.glob("library.sqlite*"):
        part.unlink()
    error = assert_clean_error(
        invoke("dedup", "--filter", "exact", "--state", state, "-o", out, src), 1
    )
    assert "no library.sqlite" in error and str(state) in error and "OUT" not in error
    assert not out.exists()


def test_info_counts_urls_by_first_seen_age(
    sample: tuple[Path, bytes], tmp_path: Path, redis_url: str, redis_name: str
) -> None:
    """info shows how many URLs an expiry age would forget, for a state folder and for the
    library in Redis; counted again two days on, every URL is over an hour and a day old."""
    from urlseen.exact.sqlite_library import SQLiteLibrary
    from urlseen.kinds._describers import first_seen_ages
    from urlseen.shared.library import RedisLibrary

    path, _ = sample
    state = tmp_path / "state"
    dedup("--filter", "exact", "--state", state, *SMALL, path)
    assert dedup("--filter", "exact", "--redis", redis_url, "--name", redis_name, path)
    ages = ("first_seen_over_1h_ago", "first_seen_over_1d_ago", "first_seen_over_7d_ago")
    local = info(state)
    assert [local[a] for a in ages] == [0, 0, 0]
    shared = json.loads(invoke("info", "--json", "--redis", redis_url, "--name", redis_name).stdout)
    assert [shared[a] for a in ages] == [0, 0, 0]
    later = time.time() + 2 * 86400
    library = SQLiteLibrary(state / "library.sqlite", readonly=True)
    try:
        counted = first_seen_ages(library.older_than, now=later)
    finally:
        library.close()
    assert [counted[a] for a in ages] == [3000, 3000, 0]
    remote = RedisLibrary(redis_url, redis_name, allow_eviction=True)
    try:
        counted = first_seen_ages(remote.older_than, now=later)
    finally:
        remote.close()
    assert [counted[a] for a in ages] == [3000, 3000, 0]
