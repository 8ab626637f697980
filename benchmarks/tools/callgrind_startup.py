#!/usr/bin/env python3
"""The fixed cost of `urlseen dedup`, counted by callgrind (noise-free): instructions and
modules imported for a one-line input, next to the floors it cannot go under.

Wall-clock start-up on this shared machine moves by ±30%; instruction counts move by <0.1%.
Each row is one process under `valgrind --tool=callgrind` reading a one-line file; "modules"
is the number of `-X importtime` lines (every module the run imports). urlseen's bytecode is
compiled first, as installing a wheel does (benchmarks/dedup/pipeline.py does the same).

Rows: the interpreter alone (`python -c pass`), the interpreter importing click (the CLI
library: the floor of any click command), then `urlseen dedup` raw and canonicalizing through
the console script, and `python -m urlseen dedup`.

--against SRC compares with another source tree (its `src` folder, holding a built `_core`;
e.g. `git worktree add /tmp/before main && cp src/urlseen/_core*.so /tmp/before/src/urlseen/`):
`python -m urlseen dedup --no-canonicalize` of each tree through PYTHONPATH, counted, then
timed --runs times each, the two trees interleaved (CPU time: user + sys of the process).

Usage: python benchmarks/tools/callgrind_startup.py [--against SRC] [--runs 41]   (needs valgrind)
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import urlseen

URLSEEN = str(Path(sys.executable).parent / "urlseen")
RAW = ["dedup", "--no-canonicalize", "{input}"]
ROWS = {  # label -> command; {input} is the one-line file
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import click'": [sys.executable, "-c", "import click"],
    "urlseen dedup --no-canonicalize": [URLSEEN, *RAW],
    "urlseen dedup (canonicalizing)": [URLSEEN, "dedup", "{input}"],
    "python -m urlseen dedup --no-canonicalize": [sys.executable, "-m", "urlseen", *RAW],
}


def instructions(command: list[str], env: dict[str, str]) -> int:
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}", *command],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from callgrind:\n{run.stderr}")
    return int(found.group(1))


def modules(command: list[str], env: dict[str, str]) -> int:
    """Modules the command imports: one `-X importtime` line each (PYTHONPROFILEIMPORTTIME
    reaches the console script's interpreter too)."""
    env = {**env, "PYTHONPROFILEIMPORTTIME": "1"}
    run = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return sum(1 for line in run.stderr.splitlines() if line.startswith("import time:")) - 1


def cpu_seconds(command: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def compile_tree(where: str) -> None:
    if not compileall.compile_dir(where, quiet=1):
        raise SystemExit(f"could not compile the bytecode of {where}")


def compare(against: Path, one: Path, runs: int) -> None:
    """This tree and another, counted, then timed interleaved."""
    compile_tree(str(against))
    mine = Path(urlseen.__file__).resolve().parent.parent
    trees = {"this tree": mine, f"{against}": against.resolve()}
    argv = [sys.executable, "-m", "urlseen", "dedup", "--no-canonicalize", str(one)]
    envs = {name: {**os.environ, "PYTHONPATH": str(src)} for name, src in trees.items()}
    print("\n| `python -m urlseen dedup --no-canonicalize` | instructions | modules |")
    print("|---|---:|---:|")
    for name, env in envs.items():
        print(f"| {name} | {instructions(argv, env) / 1e6:.1f}M | {modules(argv, env)} |")
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    wall: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(runs):
        for name, env in envs.items():
            start = time.perf_counter()
            cpu[name].append(cpu_seconds(argv, env))
            wall[name].append(time.perf_counter() - start)
    print(f"\n| tree ({runs} runs each, interleaved) | CPU min ms | CPU median ms | wall min ms |")
    print("|---|---:|---:|---:|")
    for name in trees:
        c, w = cpu[name], wall[name]
        print(f"| {name} | {min(c) * 1e3:.1f} | {statistics.median(c) * 1e3:.1f} | "
              f"{min(w) * 1e3:.1f} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another tree's src folder to compare with")
    ap.add_argument("--runs", type=int, default=41, help="timed runs per tree with --against")
    args = ap.parse_args()
    compile_tree(os.path.dirname(urlseen.__file__))
    with tempfile.TemporaryDirectory() as work:
        one = Path(work, "one.txt")
        one.write_text("https://example.com/\n", encoding="ascii")
        print("| command (one-line input) | instructions | modules |\n|---|---:|---:|")
        for label, command in ROWS.items():
            argv = [str(one) if part == "{input}" else part for part in command]
            env = dict(os.environ)
            print(f"| {label} | {instructions(argv, env) / 1e6:.1f}M | {modules(argv, env)} |")
        if args.against is not None:
            compare(args.against, one, args.runs)


if __name__ == "__main__":
    main()
