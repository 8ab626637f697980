"""Careless input, one test per case: an error of one line naming the file, a non-zero exit,
and nothing lost; or, where the input has a sensible meaning, the right answer.

Cases: an output that is an input or the state, a missing input beside an existing output,
a cut or damaged .gz, gzip bytes on stdin, FIFOs, absurd capacities, an interrupted creation,
wrong-kind folders, a foreign generation file, two processes creating one state, a state cut
short under its writer. Full and read-only disks are in test_disk_full.py.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import Result

import urlseen
from cli_helpers import dedup, invoke, lines, one_line_error, summary
from urlseen import kinds
from urlseen.bloom import sizing
from urlseen.errors import ConfigError, FormatError
from urlseen.state import space

URLS = [f"https://example.com/page/{i}" for i in range(300)]
DATA = lines(*URLS, *URLS[:100])  # 400 lines, 300 distinct


def run(*args: str | os.PathLike[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    """The real command in a child process (real file descriptors, or a crash stays there)."""
    command = [sys.executable, "-m", "urlseen", *map(os.fspath, args)]
    return subprocess.run(command, capture_output=True, timeout=120, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture
def infile(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_bytes(DATA)
    return path


# -- an output that would destroy an input or the state ----------------------------------------


def test_output_equal_to_an_input_is_refused_before_it_is_touched(infile: Path) -> None:
    for extra in ([], ["--append"]):
        result = invoke("dedup", infile, "-o", infile, *extra)
        one_line_error(result, str(infile), "also the input")
        assert infile.read_bytes() == DATA


def test_output_equal_to_an_input_by_another_name_is_refused(infile: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias.txt"
    os.link(infile, alias)
    one_line_error(invoke("dedup", infile, "-o", alias), "also the input")
    assert infile.read_bytes() == DATA


def test_an_existing_output_is_kept_when_an_input_is_missing(infile: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"yesterday's result\n")
    missing = tmp_path / "missing.txt"
    one_line_error(invoke("dedup", infile, missing, "-o", out), str(missing))
    assert out.read_bytes() == b"yesterday's result\n"


@pytest.mark.parametrize("exists", [False, True], ids=["new-state", "existing-state"])
def test_output_equal_to_the_state_file_is_refused(
    infile: Path, tmp_path: Path, exists: bool
) -> None:
    state = tmp_path / "s.bloom"
    if exists:
        dedup("--state", state, "--capacity", "1000", infile)
    before = state.read_bytes() if exists else None
    one_line_error(invoke("dedup", "--state", state, "-o", state, infile), "state file")
    assert (state.read_bytes() if state.exists() else None) == before


def test_output_inside_a_state_folder_is_refused(infile: Path, tmp_path: Path) -> None:
    state = tmp_path / "exact"
    result = invoke("dedup", "--filter", "exact", "--state", state, "-o",
                    state / "library.sqlite", infile)  # fmt: skip
    one_line_error(result, "inside the state folder")
    assert not state.exists()


def test_stdin_read_from_the_output_file_is_refused(infile: Path) -> None:
    with open(infile, "rb") as stdin:
        done = run("dedup", "-o", infile, stdin=stdin)
    assert done.returncode == 1 and b"also the input stdin" in done.stderr, done.stderr
    assert infile.read_bytes() == DATA


def test_stdout_appended_to_the_state_file_is_refused(infile: Path, tmp_path: Path) -> None:
    state = tmp_path / "s.bloom"
    dedup("--state", state, "--capacity", "1000", infile)
    before = state.read_bytes()
    command = [sys.executable, "-m", "urlseen", "dedup", "--state", str(state), str(infile)]
    with open(state, "ab") as stdout:
        done = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 1 and b"stdout: the output is the state file" in done.stderr
    assert state.read_bytes() == before


def test_stdout_appended_to_an_input_is_refused(infile: Path) -> None:
    with open(infile, "ab") as stdout:
        done = subprocess.run([sys.executable, "-m", "urlseen", "dedup", str(infile)],
                              stdout=stdout, stderr=subprocess.PIPE, timeout=120)  # fmt: skip
    assert done.returncode == 1 and b"stdout: the output is also the input" in done.stderr
    assert infile.read_bytes() == DATA


# -- gzip ------------------------------------------------------------------------------------


def test_a_cut_gz_names_the_file_after_the_summary_and_keeps_what_was_done(
    tmp_path: Path,
) -> None:
    many = [f"https://example.com/cut/{i}" for i in range(50_000)]
    whole = gzip.compress(lines(*many))
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    state = tmp_path / "s.bloom"
    result = invoke("dedup", "--state", state, "--json", cut)
    one_line_error(result, str(cut), "cut short")
    done = summary_before_error(result)
    printed = result.stdout_bytes.splitlines()
    assert 0 < done["new"] == len(printed) < len(many)
    assert [p.decode() for p in printed] == many[: len(printed)]  # whole lines, in order
    with urlseen.BloomFilter.open(state, readonly=True) as seen:  # the state holds them all
        assert all(seen.contains_many([p.decode() for p in printed]))


def summary_before_error(result: Result) -> dict[str, object]:
    """The --json summary printed before the error line."""
    kept = [line for line in result.stderr.splitlines() if not line.startswith("Error:")]
    data = json.loads(kept[-1])
    assert isinstance(data, dict)
    return data


def test_damaged_gz_data_names_the_file(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(DATA))
    data[-6] ^= 0x01  # the stored CRC: found at the end of the stream
    damaged = tmp_path / "damaged.gz"
    damaged.write_bytes(bytes(data))
    one_line_error(invoke("dedup", damaged), str(damaged), "damaged gzip data")


def test_gzip_bytes_on_stdin_are_decompressed() -> None:
    result = dedup("--json", input=gzip.compress(DATA))
    assert result.stdout_bytes == lines(*URLS)
    assert summary(result)["skipped"]["invalid_utf8"] == 0


@pytest.mark.parametrize("url_filter", ["bloom", "exact"])
def test_ctrl_c_while_stdin_is_silent_exits_cleanly_and_a_rerun_prints_the_lines(
    tmp_path: Path, url_filter: str
) -> None:
    """Ctrl-C while the read-ahead thread waits on a pipe that says nothing: an orderly exit
    (not an abort of the interpreter on stdin's lock), and the unfinished batch, which never
    reached the state, is printed by the rerun."""
    state = tmp_path / "seen"
    read, write = os.pipe()
    command = [
        sys.executable,
        "-m",
        "urlseen",
        "dedup",
        "--filter",
        url_filter,
        "--state",
        state,
        "-",
    ]
    child = subprocess.Popen(
        command, stdin=read, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    os.close(read)
    try:
        os.write(write, b"https://a.example/\nhttps://b.example/\n")
        time.sleep(2)  # started, read the two lines, waiting for more
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        os.close(write)
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode in (1, 130), (child.returncode, err)
    assert b"Fatal Python error" not in err, err
    rerun = run("dedup", "--filter", url_filter, "--state", state, input=b"https://a.example/\n")
    assert rerun.returncode == 0, rerun.stderr
    assert set(out.splitlines()) | set(rerun.stdout.splitlines()) >= {b"https://a.example/"}


def test_gzip_is_recognised_by_its_bytes_not_its_name(tmp_path: Path) -> None:
    plain, packed = tmp_path / "plain.txt.gz", tmp_path / "packed.txt"
    plain.write_bytes(DATA)  # a .gz name on plain text
    packed.write_bytes(gzip.compress(DATA))  # gzip without the suffix
    assert dedup(plain).stdout_bytes == dedup(packed).stdout_bytes == lines(*URLS)


# -- FIFOs -----------------------------------------------------------------------------------


def test_a_fifo_input_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "urls.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(gzip.compress(DATA))

    writer = threading.Thread(target=feed)
    writer.start()
    done = run("dedup", fifo)
    writer.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == lines(*URLS)


@pytest.mark.parametrize("command", [["info"], ["info", "--verify"], ["dedup", "--state"]])
def test_a_fifo_is_not_a_state(tmp_path: Path, command: list[str]) -> None:
    fifo = tmp_path / "seen.bloom"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = invoke(*command, fifo, input=DATA)
    assert time.monotonic() - started < 10, "waited for a writer to the FIFO"
    one_line_error(result, str(fifo), "not a regular file")


# -- absurd capacities -------------------------------------------------------------------------


def test_an_absurd_capacity_is_refused_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    for make in (
        lambda: urlseen.BloomFilter(10**27),
        lambda: urlseen.BloomFilter(10**27, layout="standard"),
        lambda: urlseen.MultiDimensionalBloomFilter(10**27),
        lambda: urlseen.ExactFilter(10**27),
        lambda: urlseen.RotatingBloomFilter(10**27),
        lambda: urlseen.SplittableBloomFilter(10**27),
        lambda: urlseen.SimilarityFilter(10**27),
    ):
        with pytest.raises(ConfigError):
            make()
    result = invoke("dedup", "--capacity", "1e27", "--state", tmp_path / "s.bloom")
    one_line_error(result, "more than any filter can hold")
    assert time.monotonic() - started < 10
    assert not (tmp_path / "s.bloom").exists()
    # written as a number is written: 1e3 is 1000; a fraction or a negative is a usage error
    assert summary(dedup("--capacity", "1e3", "--json", input=DATA))["filter_capacity"] == 1000
    for bad in ("1.5", "-5", "0", "1e400x"):
        assert invoke("dedup", "--capacity", bad, input=DATA).exit_code == 2


def _capacity_for(nbytes: int) -> int:
    """A capacity whose Bloom filter at error rate 0.5 takes more than nbytes."""
    return int(nbytes * 8 / 1.44 * 1.2)


def test_a_state_larger_than_the_free_disk_is_refused(tmp_path: Path) -> None:
    stats = os.statvfs(tmp_path)
    capacity = _capacity_for(stats.f_bavail * stats.f_frsize * 2)
    if capacity * 1.5 > sizing.MAX_BITS:
        pytest.skip("this disk is larger than any filter may be")
    state = tmp_path / "s.bloom"
    started = time.monotonic()
    result = invoke("dedup", "--capacity", str(capacity), "--error-rate", "0.5",
                    "--state", state, input=DATA)  # fmt: skip
    one_line_error(result, str(state), "of disk", "is free there")
    assert time.monotonic() - started < 10
    assert not state.exists() and os.listdir(tmp_path) == []


def test_a_filter_larger_than_the_memory_is_refused() -> None:
    available = space.available_memory()
    assert available is not None
    capacity = _capacity_for(available * 2)
    for make in (
        lambda: urlseen.BloomFilter(capacity, 0.5),
        lambda: urlseen.MultiDimensionalBloomFilter(capacity, 0.5),
    ):
        with pytest.raises(ConfigError, match="of memory"):
            make()
    splittable = urlseen.SplittableBloomFilter  # its first layer, at its first size, at once
    with pytest.raises(ConfigError, match="of memory"):
        splittable(capacity * 8, 0.5, leaf_bits=4096)  # ~2,800 URLs per 1 KiB leaf
    one_line_error(invoke("dedup", "--capacity", str(capacity), "--error-rate", "0.5",
                          input=DATA), "of memory")  # fmt: skip


# -- interrupted creation ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["exact", "library"])
@pytest.mark.parametrize("left", ["empty-file", "sqlite-header-only"])
def test_a_creation_killed_half_way_is_made_again(
    tmp_path: Path, infile: Path, kind: str, left: str
) -> None:
    """What an older urlseen left when killed while creating: refused forever, until now."""
    state = tmp_path / "ex0"
    state.mkdir()
    library = state / "library.sqlite"
    if left == "empty-file":
        library.write_bytes(b"")
    else:  # the page size set and WAL mode on, killed before the tables were committed
        db = sqlite3.connect(library)
        db.execute("PRAGMA page_size=16384")
        db.execute("PRAGMA journal_mode=WAL")
        db.close()
    result = dedup("--filter", kind, "--state", state, infile)
    assert result.stdout_bytes == lines(*URLS)
    assert dedup("--filter", kind, "--state", state, infile).stdout_bytes == b""
    assert invoke("info", "--verify", state).exit_code == 0


def test_a_killed_creation_leaves_no_half_made_state(tmp_path: Path, infile: Path) -> None:
    """A creation is built under another name and linked into place: killed at any point, it
    leaves either nothing at the state's name, or a whole state."""
    script = (
        "import os, sys, threading\n"
        "from urlseen import kinds\n"
        "threading.Timer(float(sys.argv[2]), lambda: os._exit(9)).start()\n"
        "kinds.open_filter('exact', capacity=100_000, state=sys.argv[1])\n"
        "os._exit(0)\n"
    )
    for attempt, delay in enumerate([0.0, 0.02, 0.05, 0.1, 0.2]):
        state = tmp_path / f"ex{attempt}"
        subprocess.run([sys.executable, "-c", script, state, str(delay)], timeout=60)
        result = dedup("--filter", "exact", "--state", state, infile)
        assert result.stdout_bytes == lines(*URLS), (delay, result.stderr)


# -- wrong-kind folders and foreign generation files -----------------------------------------------


@pytest.mark.parametrize(
    ("made", "asked"),
    [("rotating", "exact"), ("exact", "rotating"), ("rotating", "library"), ("bloom", "exact")],
)
def test_a_folder_holding_another_kind_is_refused(
    tmp_path: Path, infile: Path, made: str, asked: str
) -> None:
    state = tmp_path / "state"
    if made == "bloom":  # a file kind kept in the folder, as Scrapy's JOBDIR/urlseen does
        state.mkdir()
        dedup("--state", kinds.state_in(state, "bloom"), "--capacity", "1000", infile)
    else:
        dedup("--filter", made, "--state", state, "--capacity", "1000", infile)
    before = sorted(p.name for p in state.iterdir())
    one_line_error(invoke("dedup", "--filter", asked, "--state", state, infile), str(state))
    assert sorted(p.name for p in state.iterdir()) == before


def test_a_foreign_generation_file_is_refused(tmp_path: Path, infile: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for state in (mine, theirs):  # the same configuration, so the same-sized generations
        dedup("--filter", "rotating", "--state", state, "--capacity", "1000", infile)
    generation = next(mine.glob("gen-*.urlseen"))
    shutil.copyfile(next(theirs.glob("gen-*.urlseen")), generation)
    one_line_error(invoke("dedup", "--filter", "rotating", "--state", mine, infile),
                   str(generation), "does not belong")  # fmt: skip
    # a plain Bloom filter's file of the right size is no generation either
    with urlseen.RotatingBloomFilter(1000, 1e-6) as model:
        gen = model.generations[0]
        plain = tmp_path / "plain.bloom"
        urlseen.BloomFilter.create(plain, gen.capacity, gen.error_rate).close()
    shutil.copyfile(plain, generation)
    with pytest.raises(FormatError, match="does not belong"):
        urlseen.RotatingBloomFilter.open(mine)


# -- two processes creating one state --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bloom", "exact", "rotating"])
def test_two_processes_creating_one_state(tmp_path: Path, kind: str) -> None:
    """One wins; the other opens the winner's state, or is told it is in use: never a stray
    temporary file's name, and never a second filter."""
    many = tmp_path / "many.txt"
    many.write_bytes(lines(*[f"https://example.com/r/{i}" for i in range(100_000)]))
    for attempt in range(3):
        state = tmp_path / f"s{attempt}.{kind}"
        command = [sys.executable, "-m", "urlseen", "dedup", "--filter", kind,
                   "--capacity", "200000", "--state", str(state), str(many)]  # fmt: skip
        procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(2)]  # fmt: skip
        outcomes = [(p.wait(timeout=120), p.communicate()[1].decode()) for p in procs]
        assert any(code == 0 for code, _ in outcomes), outcomes
        for code, err in outcomes:
            assert ".tmp" not in err and "Traceback" not in err, err
            if code:
                assert code == 1 and "elsewhere" in err, err
        assert invoke("info", "--verify", state).exit_code == 0


# -- a state cut short under its writer ------------------------------------------------------------

CUT_UNDER = r"""
import os, sys
from pathlib import Path
from urlseen import kinds
from urlseen.errors import FormatError
kind, state = sys.argv[1], Path(sys.argv[2])
seen = kinds.open_filter(kind, capacity=100_000, state=state)
seen.add_many(["https://a.example/%d" % i for i in range(100)])
files = [p for p in state.iterdir() if p.name.endswith("urlseen")] if state.is_dir() else [state]
for f in files:
    os.truncate(f, 100)
for batch in (seen.add_many, seen.contains_many):
    try:
        batch(["https://b.example/"])
    except FormatError as exc:
        print("refused:", exc)
try:
    seen.close()
except FormatError as exc:
    print("not sealed:", exc)
"""


@pytest.mark.parametrize("kind", ["bloom", "mdbf", "similar", "exact", "rotating"])
def test_a_state_cut_short_under_its_writer_is_an_error_not_a_sigbus(
    tmp_path: Path, kind: str
) -> None:
    state = tmp_path / ("state" if kinds.KINDS[kind].state == "folder" else f"s.{kind}")
    done = subprocess.run([sys.executable, "-c", CUT_UNDER, kind, state],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr)  # -7 would be SIGBUS
    refusals = done.stdout.splitlines()
    assert len(refusals) == 3 and all("cut to 100 bytes" in r for r in refusals), done.stdout
    assert invoke("info", "--verify", state).exit_code == 1


CUT_UNDER_DEDUP = r"""
import io, os, sys
from pathlib import Path
from urlseen import BloomFilter
from urlseen.job.dedup import dedup
from urlseen.errors import FormatError
from urlseen.job.streams import Inputs
state, urls = Path(sys.argv[1]), sys.argv[2]
seen = BloomFilter.create(state, capacity=100_000, error_rate=0.01)
assert seen.dedup_hasher() is seen, "the line engine no longer probes a state file's filter"

class Cutting(io.BytesIO):  # the state is cut short by someone else after the first batch
    def flush(self):
        os.truncate(state, 100)

try:
    dedup(Inputs((urls,)), seen, Cutting(), transactional=True, batch_size=100)
except FormatError as exc:
    print("refused:", exc)
"""


def test_the_line_engine_checks_the_state_before_each_batch(tmp_path: Path, infile: Path) -> None:
    """The C line engine probes a Bloom filter's map directly (its fast path, kept for state
    files too); it runs the state file's check before each batch, as add_many does."""
    state = tmp_path / "s.bloom"
    done = subprocess.run([sys.executable, "-c", CUT_UNDER_DEDUP, state, infile],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr)  # -7 would be SIGBUS
    assert "refused:" in done.stdout and "cut to 100 bytes" in done.stdout, done.stdout
