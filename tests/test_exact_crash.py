"""Crash safety of the exact filters (IMP-CBFilter): SIGKILL at any moment.

The library (library.sqlite) is the source of truth; the counter file is rebuilt from it when
its writer did not close it. A process killed at any point must leave a state that opens (with
a CountersRebuiltWarning), keeps every URL it acknowledged (add_many returned), never reports
a URL new twice, and whose counters agree with the library. End to end, `urlseen dedup
--filter exact|library --state` killed mid-run and rerun with `-a` prints every distinct line
at least once and at most one batch twice. Damaged state files give clean CLI errors.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import invoke, output_reaches
from conftest import dev_urls_path
from urlseen import CountersRebuiltWarning, ExactFilter, FingerprintLibraryFilter
from urlseen.exact.sqlite_library import STORED_RECORDS

ENV = {**os.environ, "PYTHONWARNINGS": "default"}
LIBRARY, COUNTERS = "library.sqlite", "counters.urlseen"


def _seed() -> int:
    seed = int(os.environ.get("URLSEEN_CRASH_SEED", random.randrange(2**32)))
    print(f"URLSEEN_CRASH_SEED={seed}")  # shown on failure, to replay the same kill points
    return seed


def _library_rows(folder: Path) -> int:
    """Records actually in the file (not the library's own record counter): rows of the
    fingerprints table and fingerprints in staged insert rows (exact/staging.py)."""
    db = sqlite3.connect(f"{(folder / LIBRARY).resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(db.execute(STORED_RECORDS).fetchone()[0])
    finally:
        db.close()


# -- a child process that adds or forgets, and is killed ---------------------------------------

CHILD = r"""
import json, sys, warnings
from pathlib import Path
from urlseen import CountersRebuiltWarning, ExactFilter

mode, state, data_path, start = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
data = json.loads(Path(data_path).read_text(encoding="utf-8"))
if (state / "library.sqlite").exists():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = ExactFilter.open(state, cache_entries=512)
    rebuilt = any(issubclass(w.category, CountersRebuiltWarning) for w in caught)
else:
    seen = ExactFilter.create(state, capacity=2000, error_rate=0.01, cache_entries=512)
    rebuilt = False
print(json.dumps({"ready": True, "rebuilt": rebuilt, "count": len(seen)}), flush=True)
if mode == "add":
    keys, batch = data["keys"], data["batch"]
    for pos in range(start, len(keys), batch):
        flags = seen.add_many(keys[pos : pos + batch])
        new = [pos + i for i, fresh in enumerate(flags) if fresh]
        print(json.dumps({"pos": pos, "end": pos + len(flags), "new": new}), flush=True)
else:
    keys = data["keys"]
    for i, (op, arg) in enumerate(data["ops"][start:], start):
        if op == "many":
            result = seen.forget_many([keys[j] for j in arg])
        else:
            result = seen.forget_older_than(arg)
        print(json.dumps({"op": i, "result": result}), flush=True)
seen.close()
print(json.dumps({"done": True}), flush=True)
"""


def _spawn(tmp_path: Path, mode: str, state: Path, data: Path, start: int) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    if not script.exists():
        script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), mode, str(state), str(data), str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def _run_round(
    proc: subprocess.Popen[str], kill_after: int | None, delay: float
) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """Read the child's lines; after `kill_after` lines past "ready" (None: never; negative:
    do not wait for "ready"), sleep `delay` and SIGKILL it. Returns the ready line ({} if the
    kill came first), the acknowledged lines, and whether it was killed (False: it finished
    and closed the filter first)."""
    assert proc.stdout is not None and proc.stderr is not None
    try:
        ready: dict[str, Any] = {}
        acked: list[dict[str, Any]] = []
        killed = False
        if kill_after is not None and kill_after < 0:  # by time: maybe before it is ready
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            killed = True
        else:
            first = proc.stdout.readline()
            if not first:
                pytest.fail(f"the child died before it was ready: {proc.stderr.read()}")
            ready = json.loads(first)
        while not killed:
            if kill_after is not None and len(acked) >= kill_after:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"the child failed: {proc.stderr.read()}")
            record = json.loads(line)
            if record.get("done"):
                break
            acked.append(record)
        signalled = killed
        if killed:  # lines printed before the kill are still in the pipe: all acknowledged
            for line in proc.stdout.read().splitlines():
                if line.endswith("}"):
                    record = json.loads(line)
                    if record.get("done"):
                        killed = False  # it finished between our last read and the kill
                    elif record.get("ready"):
                        ready = record
                    else:
                        acked.append(record)
        proc.wait(timeout=60)
        err = proc.stderr.read()
        if not signalled:
            assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        return ready, acked, killed
    finally:
        proc.kill()
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()


def _reopen_readonly(state: Path, unclean: bool | None) -> ExactFilter:
    """Reopen after a round: after an unclean kill the counters must be rebuilt (with a
    warning), after a clean close not (unclean=None: the kill may have come after close())."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = ExactFilter.open(state, readonly=True)
    rebuilt = [w for w in caught if issubclass(w.category, CountersRebuiltWarning)]
    if unclean:
        assert rebuilt, "an unclean kill must be answered by a CountersRebuiltWarning"
    elif unclean is not None:
        assert not caught, [str(w.message) for w in caught]
    assert all("nothing was lost" in str(w.message) for w in rebuilt)
    return seen


def _unclean_after(
    unclean: bool | None, killed: bool, ready: bool, finished_work: bool
) -> bool | None:
    """Whether the state is now unclean: True, False, or None when it cannot be known (killed
    after its last operation, maybe inside close(); or before it opened a clean state)."""
    if not killed:
        return False
    if finished_work:
        return None
    if ready:
        return True
    return True if unclean else None


def _add_stream(dev_urls: list[str] | None) -> list[str]:
    """A deterministic crawl-like stream with duplicates: real URLs when we have them."""
    rng = random.Random(20240611)
    if dev_urls is not None:
        pool = dev_urls[::97][:6000]
    else:
        pool = [f"https://site{i % 61}.example/page/{i}?q={i % 7}" for i in range(6000)]
    return [rng.choice(pool) if rng.random() < 0.5 else pool[i % len(pool)] for i in range(24000)]


def test_sigkill_during_add_many_loses_no_acknowledged_url(
    tmp_path: Path, dev_urls_optional: list[str] | None
) -> None:
    """Rounds of a child adding batches, SIGKILLed at random points (the first very early),
    each resumed from the reopened state; a last round runs to the end."""
    rng = random.Random(_seed())
    keys = _add_stream(dev_urls_optional)
    batch = 300
    data = tmp_path / "stream.json"
    data.write_text(json.dumps({"keys": keys, "batch": batch}), encoding="utf-8")
    state = tmp_path / "state"
    reported: dict[str, tuple[int, int]] = {}  # key -> (round, position) when reported new
    acked_keys: set[str] = set()  # keys of batches whose add_many returned
    submitted: set[str] = set()  # keys of every batch that may have reached add_many
    start, kills, unclean = 0, 0, False
    plan: list[tuple[int | None, float]] = [(0, 0.0)]  # very early: right after create
    plan += [(rng.randint(1, 12), rng.uniform(0, 0.004)) for _ in range(3)]
    plan += [(-1, rng.uniform(0.02, 0.25))]  # by time: in start-up, in open's rebuild, or later
    plan.insert(rng.randint(2, len(plan)), (rng.randint(0, 1), 0.0))
    plan += [(None, 0.0)]  # to the end, closed cleanly
    for round_no, (kill_after, delay) in enumerate(plan):
        proc = _spawn(tmp_path, "add", state, data, start)
        ready, acked, killed = _run_round(proc, kill_after, delay)
        if ready and unclean is not None:
            assert ready["rebuilt"] is unclean, "the child's open must rebuild after a kill"
        kills += killed
        end = acked[-1]["end"] if acked else start
        submitted.update(keys[start : min(end + batch, len(keys))] if killed else keys[start:])
        for record in acked:
            acked_keys.update(keys[record["pos"] : record["end"]])
            for pos in record["new"]:
                key = keys[pos]
                assert key not in reported, (
                    f"{key!r} reported new twice: round {reported[key]} and {(round_no, pos)}"
                )
                reported[key] = (round_no, pos)

        print(
            f"round {round_no} {kill_after, round(delay, 4)}: from {start}, "
            f"{'ready, ' if ready else ''}{len(acked)} batches acknowledged, "
            f"{'killed' if killed else 'finished'}"
        )
        finished = bool(acked) and acked[-1]["end"] == len(keys)
        unclean = _unclean_after(unclean, killed, bool(ready), finished)
        with _reopen_readonly(state, unclean) as seen:
            distinct = list(dict.fromkeys(keys))
            flags = dict(zip(distinct, seen.contains_many(distinct), strict=True))
            assert all(flags[k] for k in reported), "a URL reported new is not seen"
            assert all(flags[k] for k in acked_keys), "a URL of an acknowledged batch is lost"
            in_state = {k for k, hit in flags.items() if hit}
            assert in_state <= submitted, "the state holds URLs never submitted"
            assert len(reported) <= len(seen) <= len(submitted)
            assert len(seen) == len(in_state) == _library_rows(state)
            print(f"  {len(seen)} in the state, {len(in_state - acked_keys)} beyond acknowledged")
            if not killed:
                assert len(seen) == len(distinct)
        if not killed:
            break
        # Resume a little before the last acknowledged batch: re-adding is exercised too.
        start = max(0, end - batch * rng.randint(0, 2))
    assert kills >= 3, f"only {kills} rounds were really killed"
    # A URL whose batch committed but whose report was lost is never reported: at most one
    # batch per kill.
    assert len(reported) >= len(set(keys)) - kills * batch

    # Closed cleanly by the last round: opens without a rebuild, in sync.
    info = json.loads(invoke("info", "--json", state).stdout)
    assert info["counters_in_sync"] is True and info["records"] == len(set(keys))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ExactFilter.open(state) as seen:
            assert not any(seen.add_many(keys[:1000]))


def test_sigkill_during_forget_keeps_counters_and_library_consistent(tmp_path: Path) -> None:
    """A child forgetting (forget_many, forget_older_than) is killed; the state reopens and
    every URL is either still seen or forgotten, as the library says, and saturated 2-bit
    counters (recounted from the overflow table) stay exact."""
    rng = random.Random(_seed())
    state = tmp_path / "state"
    n_batches, per_batch = 40, 150
    keys = [f"https://forget.example/{b}/{i}" for b in range(n_batches) for i in range(per_batch)]
    batch_of = {key: idx // per_batch for idx, key in enumerate(keys)}
    t0 = 1_000_000_000.0
    clock = [t0]
    with ExactFilter.create(
        state, capacity=1500, error_rate=0.05, counter_bits=2, clock=lambda: clock[0]
    ) as seen:
        for b in range(n_batches):
            clock[0] = t0 + b
            assert all(seen.add_many(keys[b * per_batch : (b + 1) * per_batch]))
        assert seen.counters.histogram()[-1] > 0, "the test needs saturated counters"

    ops: list[tuple[str, Any]] = []
    order = list(range(len(keys)))
    rng.shuffle(order)
    for step in range(30):
        if step % 3 == 2:
            ops.append(("older", t0 + 1 + step // 3))  # first seen in batches < 1 + step // 3
        else:
            ops.append(("many", order[step * 100 : step * 100 + 100]))
    data = tmp_path / "ops.json"
    data.write_text(json.dumps({"keys": keys, "ops": ops}), encoding="utf-8")

    forgotten: set[str] = set()  # acknowledged forgotten
    start, kills, unclean = 0, 0, False
    for kill_after in [rng.randint(0, 3), rng.randint(1, 6), rng.randint(1, 6), None]:
        proc = _spawn(tmp_path, "forget", state, data, start)
        ready, acked, killed = _run_round(proc, kill_after, rng.uniform(0, 0.003))
        if ready and unclean is not None:
            assert ready["rebuilt"] is unclean
        kills += killed
        for record in acked:
            op, arg = ops[record["op"]]
            if op == "many":
                forgotten.update(keys[j] for j in arg)
            else:
                forgotten.update(k for k in keys if t0 + batch_of[k] < arg)
        done = acked[-1]["op"] + 1 if acked else start
        touched = set(forgotten)  # acknowledged, plus what the op in flight may have forgotten
        if killed and done < len(ops):
            op, arg = ops[done]
            touched.update(
                [keys[j] for j in arg]
                if op == "many"
                else [k for k in keys if t0 + batch_of[k] < arg]
            )
        print(f"{len(acked)} forget operations acknowledged, {'killed' if killed else 'done'}")
        unclean = _unclean_after(unclean, killed, bool(ready), done == len(ops))
        with _reopen_readonly(state, unclean) as seen:
            flags = seen.contains_many(keys)
        with FingerprintLibraryFilter.open(state, readonly=True) as library:
            in_library = library.contains_many(keys)
        assert flags == in_library, "the counting filter disagrees with the library"
        for key, hit in zip(keys, flags, strict=True):
            if key in forgotten:
                assert not hit, f"{key} was forgotten (acknowledged) but is still seen"
            elif key not in touched:
                assert hit, f"{key} was never forgotten but is no longer seen"
        assert sum(flags) == _library_rows(state)
        if not killed:
            break
        start = done
    assert kills >= 2, f"only {kills} rounds were really killed"

    # After the last, clean round the counters equal a fresh build over the remaining URLs
    # (an unsaturated counter is exactly the number of records mapping to it).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ExactFilter.open(state) as seen:
            remaining = [k for k, hit in zip(keys, seen.contains_many(keys), strict=True) if hit]
            fresh = ExactFilter(capacity=1500, error_rate=0.05, counter_bits=2)
            fresh.add_many(remaining)
            assert seen.counters.histogram() == fresh.counters.histogram()
            assert seen.counters.params["ncounters"] == fresh.counters.params["ncounters"]
            # Adding everything back: new exactly for the forgotten ones.
            assert seen.add_many(keys) == [k not in set(remaining) for k in keys]
            assert len(seen) == len(keys)
            assert seen.forget_older_than(t0 + n_batches) == len(remaining)
            assert len(seen) == len(keys) - len(remaining)


# -- end to end: `urlseen dedup --filter exact|library --state DIR` killed, rerun with -a ------

E2E_LINES = 300_000
E2E_BATCH = 1000


@pytest.fixture(scope="module")
def e2e_input(
    tmp_path_factory: pytest.TempPathFactory, dev_urls_optional: list[str] | None
) -> tuple[Path, list[bytes]]:
    """The first 300k lines of the dev set (crawl-like: snapshots repeating URLs), or
    generated lines with duplicates when it is missing."""
    if dev_urls_optional is not None:
        with gzip.open(dev_urls_path(), "rb") as f:
            raw = list(itertools.islice(f, E2E_LINES))
    else:
        rng = random.Random(5)
        picks = (rng.randrange(35_000) for _ in range(E2E_LINES))
        raw = [b"https://gen%d.example/p/%d\n" % (k % 53, k) for k in picks]
    path = tmp_path_factory.mktemp("e2e") / "urls.txt"
    path.write_bytes(b"".join(raw))
    return path, [line.rstrip(b"\n") for line in raw]


def _first_occurrences(lines: list[bytes]) -> list[bytes]:
    """What one uninterrupted --no-canonicalize run prints (blank lines are skipped)."""
    return [line for line in dict.fromkeys(lines) if line.strip()]


def _dedup_cmd(filter_name: str, src: Path, state: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "urlseen", "dedup", "--filter", filter_name, "--state", str(state),
        "--capacity", "200000", "--batch-size", str(E2E_BATCH), "--no-canonicalize",
        "--no-progress", "-o", str(out), *extra, str(src),
    ]  # fmt: skip


def _kill_when_output_reaches(cmd: list[str], out: Path, threshold: int, delay: float) -> bool:
    """Start cmd, SIGKILL it `delay` s after `out` holds `threshold` bytes (anywhere in the
    next few batches). False if it finished first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    try:
        if output_reaches(proc, out, threshold):
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            return proc.wait(timeout=60) == -signal.SIGKILL  # else it ended in the delay
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert proc.returncode == 0, err
        return False
    finally:
        proc.kill()
        proc.wait(timeout=60)
        assert proc.stderr is not None
        proc.stderr.close()


def _open_killed_state(filter_name: str, state: Path) -> Any:
    if filter_name == "library":
        return FingerprintLibraryFilter.open(state, readonly=True)
    with pytest.warns(CountersRebuiltWarning, match="did not close it"):
        return ExactFilter.open(state, readonly=True)


@pytest.mark.parametrize("filter_name", ["exact", "library"])
def test_sigkill_mid_dedup_then_resume_with_append(
    e2e_input: tuple[Path, list[bytes]], tmp_path: Path, filter_name: str
) -> None:
    src, lines = e2e_input
    firsts = _first_occurrences(lines)
    total = sum(len(line) + 1 for line in firsts)
    rng = random.Random(_seed())
    state, out = tmp_path / "state", tmp_path / "out.txt"
    for attempt in range(4):  # a noisy machine may let a run finish between two polls
        shutil.rmtree(state, ignore_errors=True)
        out.unlink(missing_ok=True)
        threshold = int(total * rng.uniform(0.1, 0.7) / (attempt + 1))
        delay = rng.uniform(0, 0.02)  # anywhere in the next few batches
        if _kill_when_output_reaches(
            _dedup_cmd(filter_name, src, state, out), out, threshold, delay
        ):
            break
    else:
        pytest.fail("4 runs finished before the kill point")

    run1 = out.read_bytes()
    *run1_lines, partial = run1.split(b"\n")
    n1 = len(run1_lines)
    assert 0 < n1 < len(firsts)
    assert run1_lines == firsts[:n1], "run 1 did not print first occurrences in order"
    if partial:
        assert firsts[n1].startswith(partial)
    info = json.loads(invoke("info", "--json", state).stdout)
    assert info["kind"] == filter_name
    if filter_name == "exact":
        assert info["counters_in_sync"] is False and info["counters_closed_cleanly"] is False

    # The state is never ahead of the output, and lags it by at most one batch.
    with _open_killed_state(filter_name, state) as seen:
        marked = [i for i, hit in enumerate(seen.contains_many(firsts)) if hit]
        assert len(seen) == len(marked)
    assert not marked or marked[-1] < n1, f"{firsts[marked[-1]]!r} is in the state, not printed"
    assert n1 - len(marked) <= E2E_BATCH

    rerun = subprocess.run(
        _dedup_cmd(filter_name, src, state, out, "-a", "--json"),
        capture_output=True,
        env=ENV,
        timeout=120,
    )
    err = rerun.stderr.decode()
    assert rerun.returncode == 0, err
    assert "Traceback" not in err
    if filter_name == "exact":
        assert "counters rebuilt" in err
    both = out.read_bytes()
    cut = len(run1) - len(partial)
    assert both.startswith(run1[:cut]), "--append lost or changed run 1's complete lines"
    assert both.endswith(b"\n")
    run2_lines = both[cut:-1].split(b"\n")
    index = {line: i for i, line in enumerate(firsts)}
    positions = [index.get(line, -1) for line in run2_lines]
    assert -1 not in positions, "run 2 printed a line that is no first occurrence"
    assert positions == sorted(set(positions)), "run 2 is out of order or repeats itself"
    printed = set(run1_lines) | set(run2_lines)
    missing = [line for line in firsts if line not in printed]
    assert not missing, f"{len(missing)} distinct lines never printed, e.g. {missing[:3]}"
    twice = set(run1_lines) & set(run2_lines)
    assert len(twice) <= E2E_BATCH, f"{len(twice)} lines printed twice; bound {E2E_BATCH}"
    assert json.loads(err.strip().splitlines()[-1])["new"] == len(run2_lines)
    info = json.loads(invoke("info", "--json", state).stdout)
    assert info["records"] == len(firsts)
    if filter_name == "exact":
        assert info["counters_in_sync"] is True
    print(
        f"{filter_name}: killed at {len(run1)} of {total} bytes; {n1} lines out, "
        f"{len(marked)} in the state; {len(twice)} printed twice (bound {E2E_BATCH})"
    )


# -- damaged state files: clean CLI errors ------------------------------------------------------


@pytest.fixture(scope="module")
def good_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A closed exact state holding 40k URLs (a library file of over 512 KiB, staged as 16
    bytes a record), and its input file."""
    base = tmp_path_factory.mktemp("damage")
    src = base / "in.txt"
    src.write_bytes(b"".join(b"https://d%d.example/page/%d\n" % (i % 37, i) for i in range(40_000)))
    state = base / "good"
    result = invoke("dedup", "--filter", "exact", "--state", state, "--capacity", "50000",
                    "--no-canonicalize", "-o", base / "out.txt", src)  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return state, src


def _damaged_copy(good: Path, tmp_path: Path, how: str) -> Path:
    state = tmp_path / how
    shutil.copytree(good, state)
    library, counters = state / LIBRARY, state / COUNTERS
    data = bytearray(library.read_bytes())
    assert len(data) > 8 * 65536
    rng = random.Random(how)
    if how == "library-middle":  # whole B-tree pages (of up to 32 KiB) in the middle: garbage
        start = (len(data) // 2) & ~32767
        data[start : start + 65536] = rng.randbytes(65536)
        library.write_bytes(bytes(data))
    elif how == "library-garbage":
        library.write_bytes(rng.randbytes(len(data)))
    elif how == "library-truncated":
        library.write_bytes(bytes(data[: len(data) // 3]))
    elif how == "library-foreign":  # somebody else's SQLite database
        library.unlink()
        db = sqlite3.connect(library)
        db.execute("CREATE TABLE fingerprints (fp BLOB PRIMARY KEY, refs INTEGER)")
        db.execute("INSERT INTO fingerprints VALUES (x'00', 1)")
        db.commit()
        db.close()
    elif how == "library-text":  # a URL list given as the library by mistake
        library.write_bytes(b"https://example.com/\n" * 500)
    elif how == "counters-magic":
        with counters.open("r+b") as f:
            f.write(b"NOTMAGIC")
    elif how == "counters-truncated":
        size = counters.stat().st_size
        with counters.open("r+b") as f:
            f.truncate(size - 100)
    elif how == "counters-garbage":
        counters.write_bytes(rng.randbytes(counters.stat().st_size))
    else:
        raise AssertionError(how)
    return state


@pytest.mark.parametrize(
    ("how", "needle"),
    [
        ("library-middle", "corrupted library"),  # its seal, at open, before any use
        ("library-garbage", "not a"),
        ("library-truncated", LIBRARY),
        ("library-foreign", "not a urlseen library"),
        ("library-text", "not a"),
        ("counters-magic", "not a urlseen state file"),
        ("counters-truncated", "truncated"),
        ("counters-garbage", COUNTERS),
    ],
)
def test_damaged_state_is_a_clean_cli_error(
    good_state: tuple[Path, Path], tmp_path: Path, how: str, needle: str
) -> None:
    good, src = good_state
    state = _damaged_copy(good, tmp_path, how)
    damaged = state / (LIBRARY if how.startswith("library") else COUNTERS)
    out = tmp_path / "out.txt"
    # The same input again: every URL is looked up, so every library page is read.
    result = invoke("dedup", "--filter", "exact", "--state", state, "--no-canonicalize",
                    "-o", out, src)  # fmt: skip
    assert result.exit_code == 1, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert str(damaged) in errors[0] and needle in errors[0], errors[0]
    assert not out.exists() or out.read_bytes() == b"", "a damaged state printed URLs as new"

    verify = invoke("info", "--verify", state)
    assert verify.exit_code == 1, verify.stdout
    assert "Traceback" not in verify.stderr
    assert str(damaged) in verify.stderr, verify.stderr
    if how == "library-middle":  # only a full read finds damage in the middle
        described = invoke("info", state)
        assert described.exit_code == 0, described.stderr
        assert "first_seen_ages" in described.stdout and "unreadable" in described.stdout


def test_damaged_counter_data_is_rebuilt_from_the_library(
    good_state: tuple[Path, Path], tmp_path: Path
) -> None:
    """Counter data that fails its checksum (the header is intact) is never used as it is:
    zeroed counters would call every seen URL 'certainly new'."""
    good, src = good_state
    state = tmp_path / "state"
    shutil.copytree(good, state)
    counters = state / COUNTERS
    data_bytes = json.loads(invoke("info", "--json", good).stdout)["counter_bytes"]
    size = counters.stat().st_size
    with counters.open("r+b") as f:  # lost pages: the data area reads back as zeros
        f.seek(size - data_bytes)
        f.write(bytes(data_bytes))
    verify = invoke("info", "--verify", state)
    assert verify.exit_code == 1 and "checksum" in verify.stderr
    out = tmp_path / "out.txt"
    result = invoke("dedup", "--filter", "exact", "--state", state, "--no-canonicalize",
                    "-o", out, src)  # fmt: skip
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert out.read_bytes() == b"", "already-seen URLs printed as new"
    assert "counters rebuilt" in result.stderr and "checksum" in result.stderr
    assert invoke("info", "--verify", state).exit_code == 0
    assert json.loads(invoke("info", "--json", state).stdout)["counters_in_sync"] is True


@pytest.mark.parametrize("how", ["deleted-as-advised", "killed-during-create"])
def test_state_without_counter_file_is_rebuilt(
    good_state: tuple[Path, Path], tmp_path: Path, how: str
) -> None:
    """A damaged counter file header is refused with advice to delete the file; deleted, it is
    rebuilt from the library. A kill between the library's creation and the counter file's
    leaves the same situation."""
    good, src = good_state
    state = tmp_path / "state"
    if how == "deleted-as-advised":
        shutil.copytree(good, state)
        with (state / COUNTERS).open("r+b") as f:
            f.write(b"NOTMAGIC")
        first = invoke("dedup", "--filter", "exact", "--state", state, src)
        assert first.exit_code == 1
        assert "delete it" in first.stderr
        (state / COUNTERS).unlink()
    else:  # what ExactFilter.create leaves when killed right after the library's commit
        from urlseen.exact.sqlite_library import SQLiteLibrary

        state.mkdir()
        SQLiteLibrary(state / LIBRARY, create=True).close()
    out = tmp_path / "out.txt"
    result = invoke("dedup", "--filter", "exact", "--state", state, "--no-canonicalize",
                    "-o", out, src)  # fmt: skip
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "counters rebuilt" in result.stderr and "missing" in result.stderr
    expected = b"" if how == "deleted-as-advised" else src.read_bytes()
    assert out.read_bytes() == expected
    desc = json.loads(invoke("info", "--json", state).stdout)
    assert (desc["kind"], desc["counters_in_sync"]) == ("exact", True)
    assert desc["records"] == 40_000
