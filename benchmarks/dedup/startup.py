#!/usr/bin/env python3
"""The fixed cost of `urlseen dedup`: one input line, against the interpreter and awk.

Every command runs under `/usr/bin/time -f %M` (no shell), stdout to /dev/null, timed by this
Python's clock from spawn to exit (time's own ~1 ms counts for every row alike), its CPU time
(user + sys of time and the command, from wait4, to the microsecond: steadier than wall time
when other work shares the machine) and peak RSS from time; the commands run interleaved, round
after round (--repeat rounds, in a new random order each round), so a change in the machine's load
reaches every command alike. The `--state` folder of the exact rows is removed before each run
(the cost of a first run). Each build's bytecode is compiled first (`compileall`, as installing
a wheel does): with PYTHONDONTWRITEBYTECODE set, as on the development machines, every run would
otherwise compile the package's modules again.

Rows: `python -c pass` and `python -S -c pass` (the interpreter's floor), `awk '!seen[$0]++'`,
and for each build `urlseen dedup --no-canonicalize` (bloom, raw), `urlseen dedup` (bloom,
canonicalizing) and `urlseen dedup --filter exact --state DIR`, each on a 1-line file.

--instructions adds each row's instruction count, one run under `valgrind --tool=callgrind`
(PYTHONHASHSEED=0; the exact rows on a new state folder): the same on a busy machine as on a
quiet one, where wall time on this shared 2-core VM moves by several times within one run.

Usage (from the repository root):
    python benchmarks/dedup/startup.py [--repeat 21] [--build NAME=VENV_BIN ...] [--json PATH]
        [--instructions]
A build is a virtualenv's bin folder holding `python` and `urlseen` (default: this Python's,
named "this"); give two to compare, e.g. main's worktree and a branch's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "startup.json"
LINE = "https://example.com/\n"


def compile_build(bin_dir: Path) -> str:
    """Compile the build's urlseen bytecode where its Python looks for it; its folder."""
    python = str(bin_dir / "python")
    where = subprocess.run(
        [python, "-c", "import urlseen, os; print(os.path.dirname(urlseen.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([python, "-m", "compileall", "-q", where], check=True, capture_output=True)
    return where


def commands(builds: dict[str, Path], source: Path, state: Path) -> dict[str, list[str]]:
    """Row name -> argv."""
    first = next(iter(builds.values()))
    rows = {
        "python -c pass": [str(first / "python"), "-c", "pass"],
        "python -S -c pass": [str(first / "python"), "-S", "-c", "pass"],
        "awk '!seen[$0]++'": ["awk", "!seen[$0]++", str(source)],
    }
    for name, bin_dir in builds.items():
        urlseen = str(bin_dir / "urlseen")
        rows[f"{name}: dedup --no-canonicalize"] = [urlseen, "dedup", "--no-canonicalize",
                                                   str(source)]  # fmt: skip
        rows[f"{name}: dedup"] = [urlseen, "dedup", str(source)]
        rows[f"{name}: dedup --filter exact --state"] = [
            urlseen, "dedup", "--filter", "exact", "--state", str(state), str(source)
        ]  # fmt: skip
    return rows


def run_once(argv: list[str], state: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of one run; a failed run stops
    the benchmark. The peak comes from /usr/bin/time around the command: a child spawned by
    this Python would report this process's own peak (Linux keeps the larger of the pre-exec
    and post-exec peaks)."""
    shutil.rmtree(state, ignore_errors=True)
    peak_file = state.with_name("peak")
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        child = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", str(peak_file), *argv],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=errors)  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)  # its CPU time, and its child's, to the µs
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            errors.seek(0)
            tail = errors.read()[-500:]
            raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}): {tail!r}")
    peak = peak_file.read_text().split()[-1]
    return wall, usage.ru_utime + usage.ru_stime, int(peak) / 1024


def instructions(argv: list[str], state: Path) -> int:
    """Instructions one run of argv executes, counted by callgrind (its summary on stderr)."""
    shutil.rmtree(state, ignore_errors=True)
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"}, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no callgrind count for {' '.join(argv)}: {done.stderr[-500:]!r}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--build", action="append", default=[], metavar="NAME=VENV_BIN")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--instructions", action="store_true", help="count them (valgrind)")
    args = parser.parse_args()
    builds = {"this": Path(sys.executable).parent}
    if args.build:
        builds = {k: Path(v) for k, _, v in (b.partition("=") for b in args.build)}
    packages = {name: compile_build(bin_dir) for name, bin_dir in builds.items()}
    with tempfile.TemporaryDirectory(prefix="urlseen-startup-") as work:
        source, state = Path(work) / "one.txt", Path(work) / "state"
        source.write_text(LINE, encoding="ascii")
        rows = commands(builds, source, state)
        walls: dict[str, list[float]] = {name: [] for name in rows}
        rss: dict[str, list[float]] = {name: [] for name in rows}
        cpu: dict[str, list[float]] = {name: [] for name in rows}
        loads = [os.getloadavg()[0]]
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        order = list(rows)
        for _ in range(args.repeat):
            random.shuffle(order)
            for name in order:
                wall, used, peak = run_once(rows[name], state)
                walls[name].append(wall)
                cpu[name].append(used)
                rss[name].append(peak)
            loads.append(os.getloadavg()[0])
        counted = {name: instructions(rows[name], state) for name in rows if args.instructions}
    table = [
        {
            "command": name,
            "argv": " ".join(rows[name]),
            "median_ms": round(statistics.median(walls[name]) * 1000, 1),
            "min_ms": round(min(walls[name]) * 1000, 1),
            "max_ms": round(max(walls[name]) * 1000, 1),
            "cpu_median_ms": round(statistics.median(cpu[name]) * 1000, 1),
            "cpu_min_ms": round(min(cpu[name]) * 1000, 1),
            "peak_rss_mib": round(statistics.median(rss[name]), 1),
            "runs": len(walls[name]),
            **({"instructions_m": round(counted[name] / 1e6, 1)} if name in counted else {}),
        }
        for name in rows
    ]
    meta = {
        "started": started,
        "repeat": args.repeat,
        "load_1min": {"min": min(loads), "max": max(loads)},
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "builds": {name: str(path) for name, path in builds.items()},
        "packages": packages,
        "environment": {k: os.environ[k] for k in ("PYTHONDONTWRITEBYTECODE",) if k in os.environ},
    }
    args.json.write_text(json.dumps({"meta": meta, "rows": table}, indent=1) + "\n")
    print(f"{args.repeat} interleaved rounds, load {min(loads):.2f}-{max(loads):.2f}")
    print("| command | wall median ms | min | max | CPU median ms | min | peak RSS MiB "
          "| instructions |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in table:
        print(f"| `{row['command']}` | {row['median_ms']} | {row['min_ms']} | {row['max_ms']} "
              f"| {row['cpu_median_ms']} | {row['cpu_min_ms']} | {row['peak_rss_mib']} "
              f"| {row.get('instructions_m', '-')}M |")  # fmt: skip


if __name__ == "__main__":
    main()
