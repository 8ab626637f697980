"""At least once across client death, for every shared filter (bloom, exact, dsbf).

A fleet of four `urlseen dedup --redis` processes over overlapping streams of real URLs (a
slice of the dev set) is killed with SIGKILL at random moments; each killed process is rerun on
its input (appending to its output) until every one has finished a run. Together the runs print
every distinct URL, and a URL is printed twice only for a kill: at most one batch per kill (the
answers a killed process had not acknowledged), as README's "What happens when…" states. At the
end no claim is left: every URL answered new was acknowledged. The same through the library
API, in processes that call add_many, write, flush and acknowledge().

URLSEEN_KILL_SEED replays the kill moments of a failed run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import fleet_streams
from urlseen import kinds

WORKERS = 4
SLICE = 24_000  # the dev set's first lines: a feed polled many times, so streams overlap a lot
WINDOW = 12_000  # worker w reads lines [w * 4,000, w * 4,000 + WINDOW)
BATCH = 100
LEASE = 1.0  # seconds: a rerun waits at most about this long for its dead run's claims
KILLS = 17  # per kind: 51 for the three
LIBRARY_KILLS = 6
# Filter options: sized so that a false positive (a URL never printed) has odds of ~1e-5; the
# splittable filter's small leaves split many times during the run.
KIND_OPTIONS = {
    "bloom": ["--capacity", "100000", "--error-rate", "1e-9"],
    "exact": ["--capacity", "100000"],
    "dsbf": ["--capacity", "1000", "--error-rate", "1e-9", "--leaf-bits", "16384"],
}
LIBRARY_WORKER = """  # argv: kind url name input output
import os, sys
from urlseen import kinds
kind, url, name, source, out_path = sys.argv[1:6]
options = {"dsbf": {"capacity": 1000, "error_rate": 1e-9, "leaf_bits": 16384},
           "bloom": {"capacity": 100000, "error_rate": 1e-9},
           "exact": {"capacity": 100000}}[kind]
seen = kinds.open_filter(kind, redis=url, name=name, lease=LEASE, **options)
seen.auto_acknowledge = False
lines = [line for line in open(source, "rb").read().split(b"\\n") if line]
kept = b""
if os.path.exists(out_path):
    data = open(out_path, "rb").read()
    kept = data[: data.rfind(b"\\n") + 1]  # a line a killed run left unfinished: written again
with open(out_path, "ab") as out:
    out.truncate(len(kept))
    for start in range(0, len(lines), BATCH):
        batch = lines[start : start + BATCH]
        fresh = [line for line, new in zip(batch, seen.add_many(batch)) if new]
        out.write(b"".join(line + b"\\n" for line in fresh))
        out.flush()
        seen.acknowledge()
seen.close()
""".replace("LEASE", repr(LEASE)).replace("BATCH", str(BATCH))


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return fleet_streams(tmp_path_factory.mktemp("kills"), SLICE, WINDOW, WORKERS)


@dataclass
class Fleet:
    """What a fleet run did: kills (and how many hit a process that had printed already),
    runs started, every line printed (all outputs together), seconds."""

    kills: int = 0
    kills_after_output: int = 0
    runs: int = 0
    printed: list[bytes] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Run:
    proc: subprocess.Popen[bytes]
    output_at_start: int
    kill_after_bytes: int | None  # None: this run is not to be killed
    kill_at: float
    started: float


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _run_fleet(commands: list[list[str]], outputs: list[Path], kills: int, seed: int) -> Fleet:
    """Run the fleet (one process per command at once) in rounds until `kills` SIGKILLs
    happened: a run is killed at a random moment (once it has written a random number of
    bytes, or at a random time within the run if that comes first: 0.8 to 3 s until a run of
    that command has finished, then up to the last finished run's length, so that runs with
    nothing left to print, which finish fast, are still killed inside) and rerun on the same
    input; a round ends when every command has finished a run."""
    rng = random.Random(seed)
    fleet = Fleet()
    started = time.monotonic()
    deadline = started + 240
    runs: dict[int, Run] = {}
    lasted: dict[int, float] = {}  # the last finished (not killed) run's length, per command

    def start(w: int) -> None:
        due = fleet.kills + sum(r.kill_after_bytes is not None for r in runs.values())
        kill_after = rng.randrange(1, 15_000) if due < kills else None
        proc = subprocess.Popen(commands[w], stderr=subprocess.PIPE)
        now = time.monotonic()
        kill_at = now + (rng.uniform(0.8, 3.0) if w not in lasted else rng.uniform(0, lasted[w]))
        runs[w] = Run(proc, _size(outputs[w]), kill_after, kill_at, now)
        fleet.runs += 1

    try:
        while fleet.kills < kills:
            for w in range(len(commands)):
                start(w)
            while runs:
                assert time.monotonic() < deadline, "the fleet did not finish within 240 s"
                for w, run in list(runs.items()):
                    proc = run.proc
                    if proc.poll() is None and run.kill_after_bytes is not None:
                        grown = _size(outputs[w]) - run.output_at_start
                        if grown >= run.kill_after_bytes or time.monotonic() >= run.kill_at:
                            proc.send_signal(signal.SIGKILL)
                            if proc.wait() == -signal.SIGKILL:  # else it had just finished
                                fleet.kills += 1
                                fleet.kills_after_output += grown > 0
                    if proc.poll() is None:
                        continue
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    del runs[w]
                    if proc.returncode == -signal.SIGKILL:
                        start(w)  # rerun the killed one on the same input
                    elif proc.returncode != 0:
                        pytest.fail(f"worker {w} failed ({proc.returncode}): {err}")
                    else:
                        lasted[w] = time.monotonic() - run.started
                time.sleep(0.005)
    finally:  # a failed fleet leaves no process behind to write after the test's clean-up
        for run in runs.values():
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()
    fleet.seconds = time.monotonic() - started
    fleet.printed = [line for out in outputs for line in out.read_bytes().splitlines()]
    return fleet


def _seed() -> int:
    seed = int(os.environ.get("URLSEEN_KILL_SEED", random.randrange(2**32)))
    print(f"URLSEEN_KILL_SEED={seed}")  # shown on failure, to replay the same kill moments
    return seed


def _claims_left(url: str, name: str) -> int:
    """Claims in the filter (`urlseen info`'s count): answers no caller acknowledged."""
    return int(kinds.describe(redis=url, name=name)["claims"])


def _check(fleet: Fleet, streams: list[Path], kills: int, kind: str) -> None:
    wanted = {line for path in streams for line in path.read_bytes().splitlines() if line}
    distinct = set(fleet.printed)
    repeats = len(fleet.printed) - len(distinct)
    print(
        f"{kind}: {fleet.kills} kills ({fleet.kills_after_output} after some output), "
        f"{fleet.runs} runs, {len(wanted)} distinct URLs, {len(fleet.printed)} printed, "
        f"{repeats} repeats, {fleet.seconds:.1f} s"
    )
    assert fleet.kills == kills
    assert not wanted - distinct, f"{len(wanted - distinct)} URLs were never printed"
    assert distinct <= wanted
    assert repeats <= kills * BATCH, "more repeats than one batch per kill"


def _cli_commands(kind: str, url: str, name: str, streams: list[Path]) -> list[list[str]]:
    base = [sys.executable, "-m", "urlseen", "dedup", "--filter", kind, "--redis", url, "--name",
            name, "--lease", str(LEASE), "--no-canonicalize", "--no-progress", "--batch-size",
            str(BATCH), *KIND_OPTIONS[kind]]  # fmt: skip
    return [[*base, str(path), "-a", "-o", f"{path}.{name}.out"] for path in streams]


@pytest.mark.parametrize("kind", sorted(KIND_OPTIONS))
def test_a_fleet_killed_at_random_moments_prints_every_url(kind, streams, redis_url, redis_name):
    outputs = [Path(f"{path}.{redis_name}.out") for path in streams]
    fleet = _run_fleet(_cli_commands(kind, redis_url, redis_name, streams), outputs, KILLS, _seed())
    _check(fleet, streams, KILLS, kind)
    assert _claims_left(redis_url, redis_name) == 0, "an answer was never acknowledged"


@pytest.mark.parametrize("kind", sorted(KIND_OPTIONS))
def test_library_callers_killed_at_random_moments_deliver_every_url(
    kind, streams, redis_url, redis_name
):
    outputs = [Path(f"{path}.{redis_name}.lib.out") for path in streams]
    commands = [
        [sys.executable, "-c", LIBRARY_WORKER, kind, redis_url, redis_name, str(path), str(out)]
        for path, out in zip(streams, outputs, strict=True)
    ]
    fleet = _run_fleet(commands, outputs, LIBRARY_KILLS, _seed())
    _check(fleet, streams, LIBRARY_KILLS, kind)
    assert _claims_left(redis_url, redis_name) == 0, "an answer was never acknowledged"
