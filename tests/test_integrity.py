"""Every persisted byte checked: a corruption fuzz over a state of every kind.

For each kind, a small state is made through the table of kinds (as `urlseen dedup --state`
makes it) and closed; then, on fresh copies, one bit is flipped or one file cut short, in the
header region (its first page) or in the data, of every file the state has. What must happen:

- the damage is detected: opening the state for writing (what `urlseen dedup --state` does)
  raises FormatError or OSError naming a file of the state, or, for the exact filter's
  counters, which are derived data, rebuilds them from the library with a warning;
- `urlseen info --verify` (kinds.describe(verify=True)) raises too, unless the writer rebuilt;
- a refused writer leaves the damaged state exactly as it was, so no later run seals damage
  in; a state that was recovered answers exactly: every URL added is seen, and, for the exact
  kinds, unseen URLs are new.

So no trial can end in a silent wrong answer. Small filters keep it quick (~20 s).
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest

import urlseen
from cli_helpers import dedup, invoke, lines
from urlseen import kinds
from urlseen.errors import CountersRebuiltWarning, FormatError

FLIPS = 100  # per kind, each kind's files in turn, header and data regions alternating
CUTS = 100
ADDED = [f"https://example.com/page/{i}" for i in range(200)]
UNSEEN = [f"https://example.com/other/{i}" for i in range(200)]
EXACT = {"exact", "library"}
HEADER = 4096  # the header region: a state file's header page, a SQLite file's first page
OPTIONS = {"rotating": {"generations": 2}}  # two generation files and a manifest


def _state_of(kind: str, root: Path) -> Path:
    row = kinds.KINDS[kind]
    return root / (kind if row.state == "folder" else f"state.{kind}")


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("states")
    made = {}
    for kind in (k.name for k in kinds.KINDS.values() if k.state):
        state = _state_of(kind, root)
        with kinds.open_filter(kind, capacity=300, state=state, **OPTIONS.get(kind, {})) as f:
            f.add_many(ADDED)
        made[kind] = state
    return made


def _files(state: Path) -> list[Path]:
    return sorted(p for p in state.iterdir() if p.is_file()) if state.is_dir() else [state]


def _digest(state: Path) -> str:
    sha = hashlib.sha256()
    for path in _files(state):
        sha.update(path.name.encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()


def _damage(state: Path, trial: int, cut: bool) -> str:
    """Flip one bit, or cut one file short, in the header region (even trials) or the data
    (odd ones) of the trial's file of the state; what was done, for the failure message."""
    rng = random.Random(trial * 2 + cut)
    files = _files(state)
    path = files[(trial // 2) % len(files)]
    raw = bytearray(path.read_bytes())
    header = trial % 2 == 0 or len(raw) <= HEADER
    low, high = (0, min(len(raw), HEADER)) if header else (HEADER, len(raw))
    offset = rng.randrange(low, high)
    if cut:
        path.write_bytes(bytes(raw[:offset]))
        return f"{path.name} cut to {offset} of {len(raw)} bytes"
    bit = rng.randrange(8)
    raw[offset] ^= 1 << bit
    path.write_bytes(bytes(raw))
    return f"{path.name} byte {offset} bit {bit} flipped"


def _answers_exactly(kind: str, seen: object) -> bool:
    """Every URL added is seen; for the exact kinds, none of the others is."""
    hits = seen.contains_many(ADDED)  # type: ignore[attr-defined]
    if not all(hits):
        return False
    return kind not in EXACT or not any(seen.contains_many(UNSEEN))  # type: ignore[attr-defined]


@pytest.mark.parametrize("cut", [False, True], ids=["flips", "cuts"])
@pytest.mark.parametrize("kind", [k.name for k in kinds.KINDS.values() if k.state])
def test_every_single_corruption_is_detected_and_never_sealed(
    kind: str, cut: bool, states: dict[str, Path], tmp_path: Path
) -> None:
    rebuilt = 0
    for trial in range(CUTS if cut else FLIPS):
        state = _state_of(kind, tmp_path / str(trial))
        state.parent.mkdir()
        if states[kind].is_dir():
            shutil.copytree(states[kind], state)
        else:
            shutil.copyfile(states[kind], state)
        what = f"{kind}: {_damage(state, trial, cut)}"
        before = _digest(state)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                seen = kinds.open_filter(kind, state=state)
            except (FormatError, OSError) as exc:
                assert str(state) in str(exc), (what, str(exc))
                seen = None
        if seen is None:  # refused: left as it was, and still reported damaged
            assert _digest(state) == before, f"{what}: a refused writer changed the state"
            with pytest.raises((FormatError, OSError)):
                kinds.describe(state, verify=True)
            shutil.rmtree(state.parent)
            continue
        # Opened: only derived data (an exact filter's counters) may have been damaged, and it
        # was rebuilt from the library, saying so.
        with seen:
            assert kind == "exact", f"{what}: not detected"
            assert any(issubclass(w.category, CountersRebuiltWarning) for w in caught), what
            assert _answers_exactly(kind, seen), f"{what}: a wrong answer after the rebuild"
            rebuilt += 1
        described = kinds.describe(state, verify=True)
        assert described["counters_verified"] is True, what
        shutil.rmtree(state.parent)
    assert kind == "exact" or not rebuilt


@pytest.mark.parametrize("kind", [k.name for k in kinds.KINDS.values() if k.state])
def test_a_dedup_run_on_a_damaged_state_seals_nothing(
    kind: str, states: dict[str, Path], tmp_path: Path
) -> None:
    """The issue's case: one `dedup --state` run re-sealed a damaged bloom file, after which
    `info --verify` called it clean. A flipped data bit now stops the run, and stays found."""
    state = _state_of(kind, tmp_path)
    if states[kind].is_dir():
        shutil.copytree(states[kind], state)
    else:
        shutil.copyfile(states[kind], state)
    damaged = max(_files(state), key=lambda p: p.stat().st_size)  # the data: bits, records
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) - 7] ^= 0x08
    damaged.write_bytes(bytes(raw))
    run = invoke("dedup", "--filter", kind, "--state", state, input=lines(*ADDED))
    if kind == "exact" and damaged.name == "counters.urlseen":  # derived data: rebuilt
        assert run.exit_code == 0 and run.stdout == "", run.stderr
        assert "counters rebuilt" in run.stderr
        assert invoke("info", "--verify", state).exit_code == 0
        return
    assert run.exit_code == 1 and run.stdout == "", (run.exit_code, run.stderr)
    assert str(damaged) in run.stderr, run.stderr
    for _ in range(2):  # and the next run, and info --verify, still find it
        again = invoke("info", "--verify", state)
        assert again.exit_code == 1 and str(damaged) in again.stderr, again.stderr
        assert invoke("dedup", "--filter", kind, "--state", state, input=b"").exit_code == 1


def test_a_live_writer_s_state_is_described_without_false_alarms(tmp_path: Path) -> None:
    """While a writer has it open there is no checksum to compare yet: None, not an error."""
    state = tmp_path / "exact"
    dedup("--filter", "exact", "--state", state, "--capacity", "1000", input=lines(*ADDED))
    with kinds.open_filter("exact", state=state) as seen:
        seen.add_many(UNSEEN[:10])
        desc = kinds.describe(state, verify=True)
        assert desc["library_verified"] is None and desc["counters_verified"] is None
    assert kinds.describe(state, verify=True)["library_verified"] is True


def test_a_flipped_fingerprint_bit_passes_sqlite_but_not_the_seal(tmp_path: Path) -> None:
    """The case SQLite's own integrity check misses: a bit of a stored fingerprint."""
    state = tmp_path / "exact"
    with kinds.open_filter("exact", capacity=1000, state=state) as seen:
        seen.add_many(ADDED)
        fp = seen.counters._digest(ADDED[7])  # type: ignore[attr-defined]
    library = state / "library.sqlite"
    raw = bytearray(library.read_bytes())
    at = raw.find(fp)
    assert at > 0 and raw.count(fp) == 1
    raw[at + 5] ^= 0x04
    library.write_bytes(bytes(raw))
    db = sqlite3.connect(f"{library.as_uri()}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]  # SQLite: fine
        lost = db.execute("SELECT count(*) FROM fingerprints WHERE fp = ?", (fp,)).fetchone()
        assert lost == (0,), "the URL would be new again"
    finally:
        db.close()
    for open_it in (
        lambda: kinds.open_filter("exact", state=state),
        lambda: urlseen.ExactFilter.open(state, readonly=True),
        lambda: kinds.describe(state, verify=True),
    ):
        with pytest.raises(FormatError, match="checksum mismatch with its seal"):
            open_it()
