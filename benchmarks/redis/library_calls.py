#!/usr/bin/env python3
"""The exact library's server work per call, by batch size: what a crawl's small batches cost.

A crawler asks the shared seen-test about a few URLs at a time (Scrapy one request, or one
callback's links when prefetching; Crawlee one enqueueLinks call), not 8192. This counts the
instructions a redis-server executes for the library's check-and-add calls of B URLs each
(B in --batches), with no load effect: the server runs under `valgrind --tool=callgrind` on a
unix socket, its counters zeroed before the measured calls and dumped after them
(`callgrind_control`). Kernel time is not counted. Ways, each on a fresh server:

* sadd: SADD of each URL's SHA1 hex into one set, B per pipelined round trip (scrapy-redis's
  fingerprint; B = 1 is its dupefilter as shipped, one SADD per request);
* library: RedisLibrary.claim of B fingerprints per call, acknowledged after each (what
  FingerprintLibraryFilter and the plug-ins send), its urlseen from each --tree.

Streams: "repeats", URLs already in the library (it holds --fill URLs, every one claimed
before the measured calls); "new", URLs it does not hold. Keys are MD5 digests of numbers.
Every answer is checked (repeats all seen, new all new).

Where a call's instructions go (`--stages`, the repeats stream): the library's script cut
short before each of its stages (it then answers every URL seen, which repeats are), so each
stage's cost is the difference between two cuts. What single commands cost inside a script
(`--commands`): a script of one command (or Lua operation) against the empty script.

Usage (from the repository root, a venv with urlseen installed; needs valgrind):

    python benchmarks/redis/library_calls.py --batches 1,10,100,1000 \\
        --tree before=/path/to/old/src --tree after=src [--groups 16] [--json FILE]
    python benchmarks/redis/library_calls.py --stages --batches 10 --urls 1000
    python benchmarks/redis/library_calls.py --commands
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results.json"  # key "library_calls"
# library_batch.lua's stages: each a line its stage starts with, and what the stage does
STAGES = (
    ("local hash_at, seg_start", "the call, its arguments, the scripts' function definitions"),
    ("local expect = {}", "the call's groups and segments (buckets_segments)"),
    ("local level, split, count, head", "the caller's marks parsed"),
    ("local claims\n", "each group's counters and write mark (groups_open)"),
    ("-- Claims looked up", "the claims context"),
    ("local buckets, adds, total", "claims records and per-key claims looked up"),
    ("records_bump(met_key", "the URLs looked up in their buckets"),
    ("-- The new URLs: their claims", "the references written back (records_bump)"),
    (None, "the new URLs' claims and records, the counters, the answer"),
)
# --commands: what each costs inside a script, over the empty script
COMMANDS = (
    ("HMGET of 6 fields", "redis.call('HMGET', 'h', 'a', 'b', 'c', 'd', 'e', 'f')"),
    ("HSET of one field", "redis.call('HSET', 'h', 'e', '8')"),
    ("HGET", "redis.call('HGET', 'h', 'a')"),
    ("TIME", "redis.call('TIME')"),
    ("HLEN", "redis.call('HLEN', 'h')"),
    ("tostring of a number", "local s = tostring(123456789)"),
    ("tonumber of a string", "local s = tonumber('123456789')"),
    ("an empty table", "local t = {}"),
    ("a table of 10 fields", "local t = {a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9, j=10}"),
)


def keys(start: int, n: int) -> list[bytes]:
    return [hashlib.md5(str(i).encode()).digest() for i in range(start, start + n)]


def dumped_total(folder: str) -> int:
    """The instructions of callgrind's newest dump in folder."""
    newest = max(glob.glob(f"{folder}/cg.out.*"), key=os.path.getmtime)
    with open(newest) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("summary:"))


def measured(pid: int, folder: str, run: Any) -> int:
    """Instructions the server executed during run()."""
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    run()
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    time.sleep(0.2)
    return dumped_total(folder)


def client(args: argparse.Namespace) -> dict[str, Any]:
    """One way on the server at args.socket (run in a process whose urlseen is the tree's)."""
    import redis

    r = redis.Redis(unix_socket_path=args.socket)
    if args.way == "commands":
        return {"commands": commands(args, r)}
    batch, n = args.batch, args.urls
    todo = keys(0, n) if args.stream == "repeats" else keys(args.fill, n)
    new: list[int] = []
    if args.way == "sadd":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from cpu import sadd_pipelined  # the sibling benchmark's peer

        for s in range(0, args.fill, 8192):
            sadd_pipelined(r, [k.hex() for k in keys(s, min(8192, args.fill - s))])
        sent = [k.hex() for k in todo]

        def run() -> None:
            for s in range(0, n, batch):
                new.append(sadd_pipelined(r, sent[s : s + batch]))

    else:
        lib = filled_library(args)
        if args.way == "stages":
            return {"stages": stages(args, r, todo)}

        def run() -> None:
            for s in range(0, n, batch):
                new.append(sum(lib.claim(todo[s : s + batch])))

    total = measured(args.pid, args.folder, run)
    want = 0 if args.stream == "repeats" else n
    if sum(new) != want:
        raise SystemExit(f"{args.way}: {sum(new)} of {n} {args.stream} URLs answered new")
    calls = -(-n // batch)
    return {"instructions": total, "per_call": total / calls, "per_url": total / n}


def filled_library(args: argparse.Namespace) -> Any:
    """A RedisLibrary holding keys(0, args.fill), its script loaded."""
    from urlseen.shared.library import RedisLibrary

    lib = RedisLibrary(f"unix://{args.socket}", "calls", groups=args.groups)
    for s in range(0, args.fill, 8192):
        lib.claim(keys(s, min(8192, args.fill - s)))
    lib.contains([bytes(16)])  # loads the script; writes nothing
    return lib


def stages(args: argparse.Namespace, r: Any, todo: list[bytes]) -> list[dict[str, Any]]:
    """Instructions per call of args.batch repeats, the script cut before each stage (a fresh
    client each: the cut scripts write no marks the next would expect)."""
    from urlseen.shared.library import RedisLibrary
    from urlseen.shared.scripts import LIBRARY_BATCH

    source = LIBRARY_BATCH.source()
    body = source.index("local mode, data, prefix")
    seen_all = "\ndo return string.rep('0', #ARGV[2] / 16) end\n"
    out, before = [], 0.0
    for marker, what in STAGES:
        cut = source.index(marker, body) if marker else len(source)
        sha = r.script_load(source[:cut] + (seen_all if marker else "") + source[cut:])
        lib = RedisLibrary(f"unix://{args.socket}", "calls")
        lib._script = lambda keys, args, sha=sha: r.evalsha(sha, len(keys), *keys, *args)
        lib.claim(todo[: args.batch])

        def run(lib: Any = lib) -> None:
            for s in range(0, len(todo), args.batch):
                if any(lib.claim(todo[s : s + args.batch])):
                    raise SystemExit("a repeat was answered new")

        per_call = measured(args.pid, args.folder, run) / -(-len(todo) // args.batch)
        out.append({"stage": what, "per_call": per_call - before, "cut_at": per_call})
        before = per_call
    return out


def commands(args: argparse.Namespace, r: Any) -> list[dict[str, Any]]:
    """Instructions each of COMMANDS costs a script, over the empty script (2,000 calls each,
    pipelined), on a hash of six short fields."""
    r.hset("h", mapping={"a": "abcdef", "b": 20000, "c": 8, "d": 100, "e": 7, "f": ""})

    def cost(text: str) -> float:
        sha = r.script_load(text)

        def run() -> None:
            pipe = r.pipeline(transaction=False)
            for _ in range(2000):
                pipe.evalsha(sha, 0)
            pipe.execute()

        return measured(args.pid, args.folder, run) / 2000

    empty = cost("return 'x'")
    return [{"what": "the empty script", "instructions": empty}] + [
        {"what": what, "instructions": cost(f"{line} return 'x'") - empty}
        for what, line in COMMANDS
    ]


def server(folder: str) -> tuple[subprocess.Popen[bytes], str]:
    sock = f"{folder}/r.sock"
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.out",
         "redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
         "--appendonly", "no", "--dir", folder],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not os.path.exists(sock):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("redis-server under callgrind did not start")
        time.sleep(0.2)
    return proc, sock


def one(way: str, tree: str, stream: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        proc, sock = server(folder)
        try:
            env = dict(os.environ, PYTHONPATH=tree) if tree else dict(os.environ)
            cmd = [
                sys.executable,
                __file__,
                "--client",
                way,
                "--stream",
                stream,
                "--batch",
                str(batch),
                "--socket",
                sock,
                "--pid",
                str(proc.pid),
                "--folder",
                folder,
                "--fill",
                str(args.fill),
                "--urls",
                str(args.urls),
            ]
            if args.groups is not None:
                cmd += ["--groups", str(args.groups)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode:
                raise RuntimeError(f"{way} ({tree or 'installed'}) failed:\n{out.stderr[-3000:]}")
            return json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,10,100,1000")
    ap.add_argument("--streams", default="repeats,new")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=SRC")
    ap.add_argument("--groups", type=int, help="the library's groups (default: the library's)")
    ap.add_argument("--fill", type=int, default=20000, help="URLs the library holds first")
    ap.add_argument("--urls", type=int, default=2000, help="URLs measured per cell")
    ap.add_argument("--json", default=None, help="write key library_calls of this file")
    ap.add_argument("--stages", action="store_true", help="where a call of repeats goes")
    ap.add_argument("--commands", action="store_true", help="single commands in a script")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    for hidden in ("--stream", "--socket", "--folder"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--pid", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        args.way = args.client
        print(json.dumps(client(args)))
        return 0
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("installed", "")]
    if args.stages or args.commands:
        return breakdown(args, trees[0][1])
    rows = []
    print("| stream | B | way | instructions per call | per URL | × SADD |")
    print("|---|---:|---|---:|---:|---:|")
    for stream in args.streams.split(","):
        for batch in map(int, args.batches.split(",")):
            peer = one("sadd", "", stream, batch, args)
            rows.append({"stream": stream, "batch": batch, "way": "sadd", **peer})
            print(f"| {stream} | {batch} | SADD | {peer['per_call']:,.0f} | "
                  f"{peer['per_url']:,.0f} | 1.00 |", flush=True)  # fmt: skip
            for label, tree in trees:
                got = one("library", tree, stream, batch, args)
                ratio = got["per_url"] / peer["per_url"]
                rows.append({"stream": stream, "batch": batch, "way": label, **got, "x": ratio})
                print(f"| {stream} | {batch} | library, {label} | {got['per_call']:,.0f} | "
                      f"{got['per_url']:,.0f} | {ratio:.2f} |", flush=True)  # fmt: skip
    save(args, "library_calls", {"groups": args.groups, "fill": args.fill, "urls": args.urls,
                                 "rows": rows})  # fmt: skip
    return 0


def breakdown(args: argparse.Namespace, tree: str) -> int:
    """--stages (a call of repeats, stage by stage) or --commands, printed and saved."""
    if args.stages:
        batch = int(args.batches.split(",")[0])
        got = one("stages", tree, "repeats", batch, args)["stages"]
        print(f"| stage (calls of {batch} repeats) | instructions per call |\n|---|---:|")
        for row in got:
            print(f"| {row['stage']} | {row['per_call']:,.0f} |")
        print(f"| whole call | {got[-1]['cut_at']:,.0f} |")
        save(args, "library_calls_stages", {"batch": batch, "fill": args.fill,
                                            "urls": args.urls, "stages": got})  # fmt: skip
    if args.commands:
        got = one("commands", tree, "repeats", 1, args)["commands"]
        print("| in a script | instructions |\n|---|---:|")
        for row in got:
            print(f"| {row['what']} | {row['instructions']:,.0f} |")
        save(args, "library_calls_commands", {"rows": got})
    return 0


def save(args: argparse.Namespace, key: str, record: dict[str, Any]) -> None:
    """Write record as `key` of the --json file, if one was given."""
    if args.json is None:
        return
    path = Path(args.json)
    data = json.loads(path.read_text()) if path.exists() else {}
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    data[key] = {"command": " ".join(sys.argv), "at": stamp, **record}
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
