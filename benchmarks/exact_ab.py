#!/usr/bin/env python3
"""`urlseen dedup --filter exact` of an earlier tree against this one and awk, in one run.

Why: on this shared 2-core machine the load moves wall times by 2x within minutes, so a change
to the exact filter's dedup path is only measured against its "before" in the same run, runs
interleaved round by round. "before" is another copy of urlseen, installed elsewhere (e.g.
`git archive main | tar -x -C /tmp/before && pip install --no-deps --target /tmp/before-site
/tmp/before`), run with PYTHONPATH pointing at it; "after" is the urlseen this Python imports.
Each run starts without a state (--state in the work folder, as benchmarks/pipeline.py runs
it); in every round "before" and "after" must write the same bytes, else the script fails
(awk's line count is shown beside theirs: it keeps one empty line). Rows are pipeline.py's
(/usr/bin/time: wall, CPU of all processes, peak RSS); the table gives each tool's fastest and
mean run and the ratios of awk's throughput.

Usage:
    python benchmarks/exact_ab.py --before /tmp/before-site [--repeat 5] [--canonical]
        [--dev urls-dev.txt.gz] [--workdir /tmp/urlseen-exact-ab] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline import DEFAULT_DEV, compile_urlseen, count_lines, timed


def commands(dev: Path, before: Path, work: Path, canonical: bool) -> dict[str, tuple[str, Path]]:
    """tool -> (shell command, its output file)."""
    urlseen = shlex.quote(str(Path(sys.executable).parent / "urlseen"))
    flag = "" if canonical else " --no-canonicalize"
    src = shlex.quote(str(dev))
    tools = {"awk '!seen[$0]++'": (f"zcat {src} | awk '!seen[$0]++' > {work / 'out-awk.txt'}",
                                   work / "out-awk.txt")}  # fmt: skip
    for name, env in (("before", f"PYTHONPATH={shlex.quote(str(before))} "), ("after", "")):
        state, out = work / f"state-{name}", work / f"out-{name}.txt"
        tools[f"urlseen exact {name}"] = (
            f"{env}{urlseen} dedup --no-progress --filter exact{flag} --state {state} {src} "
            f"-o {out}",
            out,
        )
    return tools


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="site folder of 'before'")
    parser.add_argument("--dev", type=Path, default=DEFAULT_DEV)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/urlseen-exact-ab"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--canonical", action="store_true", help="canonicalize (the default)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    compile_urlseen()
    lines = count_lines(args.dev)
    tools = commands(args.dev, args.before, work, args.canonical)
    rows: dict[str, list] = {tool: [] for tool in tools}
    loads = []
    for round_ in range(args.repeat):
        for tool, (command, out) in tools.items():
            for name in ("before", "after"):
                shutil.rmtree(work / f"state-{name}", ignore_errors=True)
            loads.append(os.getloadavg()[0])
            row = timed("dev", tool, command, lines, out, args.timeout)
            if not row.ok:
                raise SystemExit(f"{tool} failed: {row.note}")
            rows[tool].append(row)
        if (work / "out-before.txt").read_bytes() != (work / "out-after.txt").read_bytes():
            raise SystemExit("urlseen before and after wrote different lines")
        print(f"round {round_ + 1}: " + ", ".join(f"{t} {r[-1].seconds:.2f} s" for t, r in
              rows.items()), file=sys.stderr)  # fmt: skip
    awk = rows["awk '!seen[$0]++'"]
    best_awk, mean_awk = min(r.seconds for r in awk), statistics.mean(r.seconds for r in awk)
    cpu_awk = min(r.cpu_seconds for r in awk)
    print(f"dev file {args.dev.name}: {lines:,} lines, {args.repeat} rounds, load average "
          f"{min(loads):.1f}-{max(loads):.1f}")  # fmt: skip
    print("| tool | wall s (best) | x awk | wall s (mean) | x awk | CPU s (best) | x awk (CPU) "
          "| peak RSS MiB | lines out |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tool, runs in rows.items():
        best = min(r.seconds for r in runs)
        mean = statistics.mean(r.seconds for r in runs)
        cpu = min(r.cpu_seconds for r in runs)
        print(f"| {tool} | {best:.2f} | {best_awk / best:.2f}x | {mean:.2f} | "
              f"{mean_awk / mean:.2f}x | {cpu:.2f} | {cpu_awk / cpu:.2f}x | "
              f"{max(r.rss_mib for r in runs):.0f} | {runs[-1].output_lines:,} |")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps({t: [asdict(r) for r in rs] for t, rs in rows.items()}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
