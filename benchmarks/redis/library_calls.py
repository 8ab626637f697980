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

Usage (from the repository root, a venv with urlseen installed; needs valgrind):

    python benchmarks/redis/library_calls.py --batches 1,10,100,1000 \\
        --tree before=/path/to/old/src --tree after=src [--groups 16] [--json FILE]
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
    batch, n = args.batch, args.urls
    todo = keys(0, n) if args.stream == "repeats" else keys(args.fill, n)
    if args.way == "sadd":
        hexes = [hashlib.sha1(k).hexdigest() for k in keys(0, args.fill)]
        for s in range(0, len(hexes), 8192):
            r.sadd("peer", *hexes[s : s + 8192])
        sent = [hashlib.sha1(k).hexdigest() for k in todo]

        def run() -> None:
            for s in range(0, n, batch):
                pipe = r.pipeline(transaction=False)
                for h in sent[s : s + batch]:
                    pipe.sadd("peer", h)
                pipe.execute()

    else:
        from urlseen.shared.library import RedisLibrary

        lib = RedisLibrary(f"unix://{args.socket}", "calls", groups=args.groups)
        for s in range(0, args.fill, 8192):
            lib.claim(keys(s, min(8192, args.fill - s)))
        lib.claim(keys(10**9, batch))  # the script loaded, the level cache warm

        def run() -> None:
            for s in range(0, n, batch):
                lib.claim(todo[s : s + batch])

    total = measured(args.pid, args.folder, run)
    calls = -(-n // batch)
    return {"instructions": total, "per_call": total / calls, "per_url": total / n}


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
    if args.json is not None:
        path = Path(args.json)
        data = json.loads(path.read_text()) if path.exists() else {}
        data["library_calls"] = {"command": " ".join(sys.argv), "groups": args.groups,
                                 "fill": args.fill, "urls": args.urls, "rows": rows}  # fmt: skip
        path.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
