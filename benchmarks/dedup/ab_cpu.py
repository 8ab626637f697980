#!/usr/bin/env python3
"""`urlseen dedup` of two source trees against awk, interleaved, by CPU time and wall time.

On a shared machine wall time moves by ±50% between runs; the CPU time of a process (user +
sys, from `os.wait4`, its threads included) moves by a few percent. Each round runs every tool
once, in a fresh order, on the same file, output to a file in the work folder (compared with
`cmp` against the first tool's output where the rows should agree). The exact rows get a new
`--state` folder each run (removed before the run, as a first run sees it).

Rows: `awk '!seen[$0]++' FILE` (`zcat FILE | awk ...` for a .gz FILE), then for each tree
(NAME=SRC: its `src` folder with a built `_core`, put first on PYTHONPATH for the console script
of this interpreter) the mode asked:
raw (`dedup --no-canonicalize FILE`), canonical (`dedup FILE`), exact (`dedup --filter exact
--state DIR FILE`). Prints each run, then per row the median and min-max of CPU and wall time,
and the ratio of awk's median to the row's (× awk), with the load average.

Usage: python benchmarks/dedup/ab_cpu.py FILE --mode exact --rounds 7 base=/tmp/base/src new=src
"""

from __future__ import annotations

import argparse
import filecmp
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = {
    "raw": ["dedup", "--no-canonicalize"],
    "canonical": ["dedup"],
    "exact": ["dedup", "--filter", "exact", "--state", "{state}"],
}


def run(command: list[str], out: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + sys of the process and its threads) of one run."""
    with out.open("wb") as sink:
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{command} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", type=Path)
    parser.add_argument("trees", nargs="+", help="NAME=SRC")
    parser.add_argument("--mode", choices=sorted(MODES), default="exact")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/urlseen-ab-cpu"))
    parser.add_argument("--no-awk", action="store_true")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    console = str(Path(sys.executable).parent / "urlseen")
    rows: dict[str, tuple[list[str], dict[str, str]]] = {}
    if not args.no_awk:  # a .gz file through `zcat |` (urlseen reads it itself)
        awk = ["awk", "!seen[$0]++", str(args.file)]
        if args.file.suffix == ".gz":
            awk = ["sh", "-c", "zcat \"$0\" | awk '!seen[$0]++'", str(args.file)]
        rows["awk"] = (awk, dict(os.environ))
    for tree in args.trees:
        name, src = tree.split("=", 1)
        env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
        rows[name] = ([console, *MODES[args.mode], str(args.file)], env)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    loads: list[float] = []
    state = args.workdir / "state"
    for r in range(args.rounds):
        order = list(rows)
        random.shuffle(order)
        for name in order:
            command, env = rows[name]
            command = [part.replace("{state}", str(state)) for part in command]
            shutil.rmtree(state, ignore_errors=True)
            wall, cpu = run(command, args.workdir / f"{name}.out", env)
            runs[name].append((wall, cpu))
            loads.append(os.getloadavg()[0])
            print(f"round {r} {name:8s} wall {wall:7.3f} cpu {cpu:7.3f} load {loads[-1]:.1f}")
        names = [n for n in rows if n != "awk"]
        for name in names[1:]:
            same = filecmp.cmp(
                args.workdir / f"{names[0]}.out", args.workdir / f"{name}.out", False
            )
            if not same:
                raise SystemExit(f"output of {name} differs from {names[0]}'s")
    shutil.rmtree(state, ignore_errors=True)
    load = f"load {min(loads):.1f}-{max(loads):.1f}"
    print(f"\n{args.file} mode {args.mode}, {args.rounds} rounds, {load}")
    med = {
        n: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for n, v in runs.items()
    }
    for name, values in runs.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        ratio = ""
        if "awk" in med:
            wall, cpu = med["awk"][0] / med[name][0], med["awk"][1] / med[name][1]
            ratio = f"  × awk wall {wall:5.2f} cpu {cpu:5.2f}"
        print(
            f"{name:8s} cpu {med[name][1]:.3f} ({min(cpus):.3f}-{max(cpus):.3f})"
            f"  wall {med[name][0]:.3f} ({min(walls):.3f}-{max(walls):.3f}){ratio}"
        )


if __name__ == "__main__":
    main()
