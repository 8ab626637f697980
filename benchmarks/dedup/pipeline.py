#!/usr/bin/env python3
"""`urlseen dedup` end to end against the everyday tools, in one run, on three URL sets.

Each row is one command under `/usr/bin/time -f "%M %U %S"`: wall time (s, from Python's clock
around it, so to the millisecond; the wrapper's ~2 ms count for every tool alike), CPU time
(user + sys of all its processes: `zcat` too, and urlseen's reading threads; steadier than
wall time when other work shares the machine) and peak RSS (for a shell pipeline, its largest
process); the fastest of --repeat runs (rows over 20 s run once),
the runs of all tools interleaved round by round. Throughput is input lines / wall time, so
start-up, reading and decompression count, as they do for a user. Ratios are taken against
`awk '!seen[$0]++'` measured in the same run (this 2-core machine is shared and noisy).

Sets:
- dev: the development file (`urls-dev.txt.gz`, 2,754,359 lines, three public sources; see its
  README), read compressed (the peers get it through `zcat |`).
- feed: its first section alone, lines 1-1,842,391: the OpenPhish community feed polled every
  ~4 h (`openphish/public_feed`, 86.9% repeats, short lines): the workload of a crawler that
  re-reads the same listings. Written to the work folder as a plain file at run time (its terms
  allow local benchmarking, not redistribution; nothing is copied into the repository).
- startup: one line (`https://example.com/`): the fixed cost of each tool (interpreter,
  imports, filter set-up, summary) against awk's.
- synthetic: 20,000,000 distinct generated URLs (no repeats, ~60 bytes each), plain file in the
  work folder: the filter far beyond the CPU cache, and every peer holding 20M lines.

urlseen's bytecode is compiled first (`compileall`, as installing a wheel does): with
PYTHONDONTWRITEBYTECODE set, as on the development machines, every run would otherwise compile
the package's modules from source again, ~80 ms that no installed copy pays.

Rows: awk, `sort -u` (LC_ALL=C; sorted output, not first occurrences), a Python set script
(the obvious 5-line dedup), and `urlseen dedup` with each --filter kind, raw (--no-canonicalize)
and canonicalizing (the default). urlseen runs use the defaults (capacity 10M at the kind's
error rate) except on the synthetic set, which gets --capacity 20000000. With --serial-engine,
each urlseen row also runs with URLSEEN_LINE_WORKER=0 ("... serial"): the line engine without its
worker thread, all its work on the filter's thread, as before issue 14's two-core engine (an A/B
in one run).

By input size (--by-size; --quick for a smoke run of the small sizes, once each): the first 1,
1,000, 10,000, 100,000 and 1,000,000 lines of the dev file (`lines-N`, plain files in the work
folder), the dev file, the feed and the 20M synthetic set (generated into the work folder and
deleted after its rows), with three urlseen rows: bloom raw, bloom canonicalizing and exact
canonicalizing with --state (`--urlseen kind:mode,...` to choose), and pydeduplines (a line
de-duplicator from PyPI, Rust; `pip install pydeduplines`) when it is installed: it needs a
plain file, so the dev file is inflated once into the work folder for it. Runs per row: --repeat
up to 100,000 lines, half of it up to the dev file, one on the synthetic set (and rows over 20 s
once); every run's wall time and RSS are kept (`runs`, `rss_runs`: the spread), the fastest is
the row. The results go to results.json under "by_size" ("by_size_quick" for --quick), beside
the earlier rows; `python benchmarks/dedup/plot.py` draws them.

Usage:
    python benchmarks/dedup/pipeline.py --by-size [--quick] [--repeat 7]
    python benchmarks/dedup/pipeline.py [--sets dev,feed,synthetic] [--kinds bloom,exact,...]
        [--workdir /tmp/urlseen-pipeline] [--json PATH] [--timeout 900] [--repeat 3]
        [--serial-engine]          # --json: results.json beside this script by default
    python benchmarks/dedup/pipeline.py --sets startup --kinds bloom --repeat 21   # fixed cost
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import itertools
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DEV = Path(os.environ.get("URLSEEN_DEV_URLS", REPO.parent / "shared/data/urls-dev.txt.gz"))
RESULTS = Path(__file__).resolve().parent / "results.json"
FEED_LINES = 1_842_391
HEADS = {"lines-1": 1, "lines-1k": 1_000, "lines-10k": 10_000, "lines-100k": 100_000,
         "lines-1m": 1_000_000}  # fmt: skip
BY_SIZE = [*HEADS, "dev", "feed", "synthetic"]
BY_SIZE_URLSEEN = "bloom:raw,bloom:canonical,exact:canonical"
SYNTHETIC_LINES = 20_000_000
REPEAT_UNDER = 20.0  # seconds: slower rows run once
ALL_KINDS = ("bloom", "exact", "library", "mdbf", "rotating", "dsbf", "similar")

PYTHON_SET = """
import sys
seen = set()
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    if line not in seen:
        seen.add(line)
        out.write(line)
"""


@dataclass
class Row:
    set: str
    tool: str
    command: str
    lines: int
    seconds: float
    rss_mib: float
    output_lines: int
    ok: bool
    note: str = ""
    cpu_seconds: float = 0.0  # user + sys of every process of the command
    runs: list[float] = field(default_factory=list)  # wall seconds of every run, in order
    rss_runs: list[float] = field(default_factory=list)

    @property
    def lines_per_second(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else 0.0


def count_lines(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def make_head(dev: Path, path: Path, lines: int) -> None:
    """The dev file's first `lines` lines, as a plain file."""
    if path.exists():
        return
    with gzip.open(dev, "rb") as src, open(path, "wb") as dst:
        for i, line in enumerate(src):
            if i == lines:
                break
            dst.write(line)


def plain_copy(path: Path, work: Path) -> Path:
    """A plain file of `path` (inflated into the work folder when it is gzip)."""
    if path.suffix != ".gz":
        return path
    plain = work / path.with_suffix("").name
    if not plain.exists():
        with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return plain


def has_pydeduplines() -> bool:
    probe = [sys.executable, "-c", "import pydeduplines"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def make_startup(path: Path) -> None:
    path.write_text("https://example.com/\n", encoding="ascii")


def compile_urlseen(python: str = sys.executable) -> str:
    """Compile urlseen's bytecode where Python looks for it; the package's folder."""
    where = subprocess.run(
        [python, "-c", "import urlseen, os; print(os.path.dirname(urlseen.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not compileall.compile_dir(where, quiet=1):
        raise SystemExit(f"could not compile the bytecode of {where}")
    return where


def make_synthetic(path: Path, n: int) -> None:
    """n distinct URLs: hosts, sections, ids and queries from a seeded generator; distinct by
    construction (the counter is in every path)."""
    if path.exists():
        return
    rng = random.Random(20_000_000)
    words = ["news", "shop", "blog", "docs", "forum", "video", "wiki", "help", "api", "cdn"]
    tlds = ["com", "org", "net", "de", "co.uk", "io", "fr", "jp"]
    hosts = [
        f"{rng.choice(['www.', '', 'm.', 'en.'])}{rng.choice(words)}{i}.example.{rng.choice(tlds)}"
        for i in range(50_000)
    ]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        batch = []
        for i in range(n):
            host = hosts[rng.randrange(len(hosts))]
            section = words[i % len(words)]
            if i % 3 == 0:
                url = f"https://{host}/{section}/{i:x}/item-{rng.randrange(10**6)}.html\n"
            elif i % 3 == 1:
                url = f"https://{host}/{section}?id={i}&page={rng.randrange(100)}\n"
            else:
                url = f"http://{host}/{section}/{rng.randrange(1000)}/{i}\n"
            batch.append(url)
            if len(batch) == 100_000:
                f.write("".join(batch))
                batch.clear()
        f.write("".join(batch))
    tmp.rename(path)


def timed(set_name: str, tool: str, command: str, lines: int, out: Path, timeout: float) -> Row:
    """Run `command` (a shell line writing to `out`) under /usr/bin/time."""
    stats = out.with_suffix(".time")
    shell = f"/usr/bin/time -o {shlex.quote(str(stats))} -f '%M %U %S' sh -c {shlex.quote(command)}"
    started = time.perf_counter()
    try:
        done = subprocess.run(shell, shell=True, timeout=timeout, capture_output=True)
        wall = time.perf_counter() - started
    except subprocess.TimeoutExpired:
        return Row(set_name, tool, command, lines, timeout, 0.0, 0, False, f"timeout {timeout:g}s")
    ok = done.returncode == 0
    rss_kb, user, system = stats.read_text().split()[-3:]
    note = "" if ok else done.stderr.decode(errors="replace").strip().splitlines()[-1][:200]
    output_lines = count_lines(out) if ok else 0
    return Row(set_name, tool, command, lines, wall, int(rss_kb) / 1024, output_lines,
               ok, note, float(user) + float(system))  # fmt: skip


def run_set(
    name: str,
    path: Path,
    kinds: list[str],
    work: Path,
    timeout: float,
    repeat: int,
    serial: bool = False,
    modes: list[tuple[str, str]] | None = None,
    dedupers: bool = False,
    base: Path | None = None,
) -> list[Row]:
    """Every tool on one set; each row is the fastest of `repeat` runs (one for rows slower
    than REPEAT_UNDER seconds). `modes`: (kind, "raw" or "canonical") rows instead of every
    kind both ways; `dedupers`: also the installed line de-duplicators (pydeduplines); `base`:
    another urlseen executable (main's), each urlseen row run with it too ("base ...")."""
    lines = count_lines(path)
    gz = path.suffix == ".gz"
    cat = f"zcat {shlex.quote(str(path))}" if gz else f"cat {shlex.quote(str(path))}"
    src = shlex.quote(str(path))
    out = work / f"{name}.out"
    o = shlex.quote(str(out))
    builds = [("", shlex.quote(str(Path(sys.executable).parent / "urlseen")))]
    if base is not None:
        builds.append(("base ", shlex.quote(str(base))))
    extra = " --capacity 20000000" if name == "synthetic" else ""
    commands = [
        ("awk '!seen[$0]++'", f"{cat} | awk '!seen[$0]++' > {o}"),
        ("sort -u", f"{cat} | LC_ALL=C sort -u -S 25% > {o}"),
        ("python set", f"{cat} | {shlex.quote(sys.executable)} -c {shlex.quote(PYTHON_SET)} > {o}"),
    ]
    if dedupers:
        plain = shlex.quote(str(plain_copy(path, work)))
        splits = max(1, lines // 2_000_000)  # its temporary files: one per split
        scratch = str(work / "pydeduplines.tmp")  # it removes its working folder at the end
        call = (f"import pydeduplines; pydeduplines.compute_unique_lines("
                f"{scratch!r}, [{plain!r}], {str(out)!r}, {splits})")  # fmt: skip
        commands.append(("pydeduplines", f"{shlex.quote(sys.executable)} -c {shlex.quote(call)}"))
    pairs = modes or [(k, m) for k in kinds for m in ("raw", "canonical")]
    states: dict[str, Path] = {}
    engines = (("", ""), (" serial", "URLSEEN_LINE_WORKER=0 ")) if serial else (("", ""),)
    for (kind, mode), (build, urlseen) in itertools.product(pairs, builds):
        flag = " --no-canonicalize" if mode == "raw" else ""
        for suffix, env in engines:
            tool, state = f"{build}urlseen {kind} {mode}{suffix}", ""
            if kind in ("exact", "library", "rotating"):  # folder kinds keep a library on disk
                states[tool] = work / f"state-{name}-{build.strip()}{kind}-{mode}{suffix.strip()}"
                state = f" --state {shlex.quote(str(states[tool]))}"
            commands.append((
                tool,
                f"{env}{urlseen} dedup --no-progress --filter {kind}{flag}{extra}{state} "
                f"{src} -o {o}",
            ))  # fmt: skip
    best: dict[str, Row] = {}
    for round_ in range(repeat):  # rounds interleave the tools, so that each sees the same load
        for tool, command in commands:
            if round_ and best[tool].seconds > REPEAT_UNDER:
                continue
            if tool in states:  # every run starts without a state
                shutil.rmtree(states[tool], ignore_errors=True)
            row = timed(name, tool, command, lines, out, timeout)
            runs = [*best[tool].runs, row.seconds] if tool in best else [row.seconds]
            rss_runs = [*best[tool].rss_runs, row.rss_mib] if tool in best else [row.rss_mib]
            if tool not in best or (row.ok and row.seconds < best[tool].seconds):
                best[tool] = row
            best[tool].runs, best[tool].rss_runs = runs, rss_runs
            speed = row.lines_per_second / 1e6
            rss, out_lines = row.rss_mib, row.output_lines
            print(f"{name:9} {tool:28} {row.seconds:8.3f} s {speed:6.2f} M lines/s "
                  f"CPU {row.cpu_seconds:6.2f} s {rss:8.1f} MiB  out {out_lines:,} {row.note}",
                  flush=True)  # fmt: skip
    return [best[tool] for tool, _ in commands]


def markdown(rows: list[Row]) -> str:
    text = []
    for name in dict.fromkeys(r.set for r in rows):
        group = [r for r in rows if r.set == name]
        awk = next(r for r in group if r.tool.startswith("awk"))
        text.append(f"\n{name}: {group[0].lines:,} lines\n")
        text.append("| tool | wall s | M lines/s | × awk | CPU s | × awk (CPU) | peak RSS MiB "
                    "| lines out |")  # fmt: skip
        text.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in group:
            ratio = awk.seconds / r.seconds if r.ok and r.seconds else 0.0
            shown = (
                (f"{r.seconds:.3f}" if r.seconds < 1 else f"{r.seconds:.2f}") if r.ok else r.note
            )
            cpu = awk.cpu_seconds / r.cpu_seconds if r.ok and r.cpu_seconds else 0.0
            text.append(f"| {r.tool} | {shown} | {r.lines_per_second / 1e6:.2f} | {ratio:.2f}× | "
                        f"{r.cpu_seconds:.2f} | {cpu:.2f}× | {r.rss_mib:.0f} "
                        f"| {r.output_lines:,} |")  # fmt: skip
    return "\n".join(text)


def repeats_for(name: str, lines: int, repeat: int) -> int:
    """Fewer runs as the set grows: all up to 100k lines, half up to the dev file, one above."""
    if name == "synthetic":
        return 1
    return repeat if lines <= 100_000 else max(1, repeat // 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, default=DEFAULT_DEV)
    parser.add_argument("--sets", default="dev,feed,synthetic")
    parser.add_argument("--kinds", default=",".join(ALL_KINDS))
    parser.add_argument(
        "--synthetic-kinds",
        default="bloom,exact,mdbf",
        help="kinds run on the synthetic set (the others are Python-bound)",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/urlseen-pipeline"))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the fastest counts")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument(
        "--serial-engine",
        action="store_true",
        help="also run each urlseen row with URLSEEN_LINE_WORKER=0 (the engine without its "
        "worker thread)",
    )
    parser.add_argument(
        "--by-size",
        action="store_true",
        help=f"the sets by input size ({','.join(BY_SIZE)}), the urlseen rows of --urlseen "
        "and the line de-duplicators; results under results.json's by_size",
    )
    parser.add_argument("--quick", action="store_true", help="--by-size up to 100k lines, once")
    parser.add_argument(
        "--urlseen",
        default=None,
        help=f"urlseen rows as kind:mode (raw or canonical) [--by-size: {BY_SIZE_URLSEEN}]",
    )
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="another urlseen executable (e.g. main's, in its own venv): every urlseen row is "
        "run with it too, interleaved, as 'base urlseen ...' (its bytecode compiled first)",
    )
    args = parser.parse_args()
    args.by_size = args.by_size or args.quick
    args.workdir.mkdir(parents=True, exist_ok=True)
    sets = args.sets.split(",")
    modes = None
    if args.by_size:
        sets = [*HEADS][:4] if args.quick else BY_SIZE
        args.repeat = 1 if args.quick else args.repeat
        modes = [tuple(m.split(":")) for m in (args.urlseen or BY_SIZE_URLSEEN).split(",")]
    elif args.urlseen:
        modes = [tuple(m.split(":")) for m in args.urlseen.split(",")]
    dedupers = args.by_size and has_pydeduplines()
    started = time.time()
    rows: list[Row] = []
    package = compile_urlseen()
    if args.base is not None:
        compile_urlseen(str(args.base.parent / "python"))
    for name in sets:
        kinds = args.kinds.split(",")
        synthetic = None
        if name == "dev":
            path = args.dev
        elif name in HEADS:
            path = args.workdir / f"{name}.txt"
            make_head(args.dev, path, HEADS[name])
        elif name == "feed":
            path = args.workdir / "feed.txt"
            make_head(args.dev, path, FEED_LINES)
        elif name == "startup":
            path = args.workdir / "startup.txt"
            make_startup(path)
        elif name == "synthetic":
            path = synthetic = args.workdir / "synthetic-20m.txt"
            make_synthetic(path, SYNTHETIC_LINES)
            kinds = [k for k in kinds if k in args.synthetic_kinds.split(",")]
        else:
            parser.error(f"unknown set {name!r}")
        repeat = repeats_for(name, count_lines(path), args.repeat) if args.by_size else args.repeat
        rows += run_set(
            name, path, kinds, args.workdir, args.timeout, repeat, args.serial_engine,
            modes, dedupers, args.base,
        )  # fmt: skip
        if synthetic is not None and args.by_size:  # 1.2 GB: not kept between runs
            synthetic.unlink()
    print(markdown(rows))
    if args.json:
        meta = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "python": platform.python_version(),
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "urlseen": package,
            "bytecode": "compiled before the runs (compileall)",
            "load": f"load average {os.getloadavg()[0]:.2f} at the end (1-minute)",
            "line_dedupers": "pydeduplines (PyPI)" if dedupers else "none installed",
        }
        rows_out = [{**asdict(r), "lines_per_second": r.lines_per_second} for r in rows]
        result = {"meta": meta, "rows": rows_out}
        if args.by_size:  # beside the earlier rows, which REPORT.md's tables quote
            kept = json.loads(args.json.read_text()) if args.json.exists() else {}
            kept["by_size_quick" if args.quick else "by_size"] = result
            result = kept
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
