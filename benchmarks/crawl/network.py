"""The benchmark's plumbing: a private network namespace holding a redis-server one delayed
round trip away, a generated site served on loopback, and the clean-up of all of it.

Everything started is registered on an ExitStack (run.py closes it in a finally and at exit),
so a failure or Ctrl-C leaves no namespace, veth, qdisc, relay, server or temp dir behind.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAV = 6  # pages every page links to (a site's menu): pages 0..NAV-1
RANDOM_LINKS = 9  # other pages each page links to, drawn at random, besides the next one
SEED = 28  # the site's random links


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def wait_port(host: str, port: int, timeout: float = 10.0) -> None:
    """Until something accepts connections at host:port (from the root namespace)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens at {host}:{port} after {timeout} s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[str], name: str) -> None:
    """Terminate a process we started (its id only), killing it if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            print(f"{name} ignored SIGTERM: killed", file=sys.stderr)
            proc.kill()
            proc.wait(5)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the site -----------------------------------------------------------------------------


def generate_site(root: Path, pages: int, seed: int = SEED) -> int:
    """`pages` HTML files under root/p/, deterministic from seed; returns the links written.

    Page i links to the site's NAV menu pages, to page i+1 (every page reachable from page 0),
    and to RANDOM_LINKS pages drawn at random, one of them with a fragment (Scrapy's
    fingerprint drops it: a repeat); about 16 links a page, so ~94% of the requests a full
    crawl meets are repeats."""
    rng = random.Random(seed)
    folder = root / "p"
    folder.mkdir(parents=True)
    links = 0
    for i in range(pages):
        targets = [*range(min(NAV, pages)), (i + 1) % pages]
        targets += [rng.randrange(pages) for _ in range(RANDOM_LINKS)]
        hrefs = [f"/p/{t:05d}.html" for t in targets]
        hrefs[-1] += "#s1"
        links += len(hrefs)
        body = "\n".join(f'<li><a href="{h}">page {h[3:8]}</a></li>' for h in hrefs)
        text = (
            f"<!doctype html><html><head><title>Page {i}</title></head><body>"
            f"<h1>Page {i}</h1><p>{'Some text of a generated page. ' * 20}</p>"
            f"<ul>\n{body}\n</ul></body></html>\n"
        )
        (folder / f"{i:05d}.html").write_text(text)
    return links


def serve_site(stack: contextlib.ExitStack, root: Path) -> tuple[str, subprocess.Popen[str]]:
    """Twisted's static file server (Scrapy's own dependency) on 127.0.0.1, in its own process
    in the root namespace; returns the start URL and the process (for its CPU)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "twisted", "web", "--listen",
         f"tcp:port={port}:interface=127.0.0.1", "--path", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    stack.callback(stop, proc, "site server")
    wait_port("127.0.0.1", port)
    return f"http://127.0.0.1:{port}/p/00000.html", proc


# -- the namespace and Redis ----------------------------------------------------------------


@dataclass
class DelayedRedis:
    """redis-server in a private namespace: `url` (what crawls use, delayed), `direct_url`
    (the same server over the veth, not delayed: for INFO and the baseline RTT), its process,
    and how the delay is made (`method`: "netem" or "relay")."""

    url: str
    direct_url: str
    proc: subprocess.Popen[str]
    method: str
    delay_ms: float
    rtt_before: dict[str, float]  # PING over the veth before any delay


def _netem(dev: str, half_ms: float, netns: str | None) -> bool:
    argv = ["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", f"{half_ms}ms"]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    return sh(*argv, check=False).returncode == 0


def _relay(stack: contextlib.ExitStack, tmp: Path, netns: str, listen: str, target: int,
           delay_ms: float) -> int:  # fmt: skip
    """The delay relay (delay_relay.c, built here) inside the namespace; returns its port."""
    binary = tmp / "delay_relay"
    sh("gcc", "-O2", "-std=c11", "-pthread", str(HERE / "delay_relay.c"), "-o", str(binary))
    port = target + 1
    proc = subprocess.Popen(
        ["ip", "netns", "exec", netns, str(binary), listen, str(port), "127.0.0.1",
         str(target), str(round(delay_ms * 500))],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    stack.callback(stop, proc, "delay relay")
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the delay relay did not start")
    return port


def delayed_redis(stack: contextlib.ExitStack, tmp: Path, delay_ms: float) -> DelayedRedis:
    """A namespace joined to the root one by a veth pair, a redis-server in it, and delay_ms
    added to every round trip to it: netem on both ends of the veth (delay_ms/2 each way), or,
    on a kernel without sch_netem, the delay relay in the namespace (delay_ms/2 each way)."""
    pid = os.getpid()
    netns, host_dev, ns_dev = f"usc{pid}", f"usc{pid}h", f"usc{pid}n"
    net = f"10.213.{(pid >> 6) & 255}.{(pid & 63) * 4}"
    base = net.rsplit(".", 1)
    host_ip, ns_ip = f"{base[0]}.{int(base[1]) + 1}", f"{base[0]}.{int(base[1]) + 2}"
    sh("ip", "netns", "add", netns)
    stack.callback(sh, "ip", "netns", "delete", netns, check=False)  # takes its veth end
    sh("ip", "link", "add", host_dev, "type", "veth", "peer", "name", ns_dev)
    stack.callback(sh, "ip", "link", "delete", host_dev, check=False)  # and its qdisc
    sh("ip", "link", "set", ns_dev, "netns", netns)
    sh("ip", "addr", "add", f"{host_ip}/30", "dev", host_dev)
    sh("ip", "link", "set", host_dev, "up")
    sh("ip", "-n", netns, "addr", "add", f"{ns_ip}/30", "dev", ns_dev)
    sh("ip", "-n", netns, "link", "set", ns_dev, "up")
    sh("ip", "-n", netns, "link", "set", "lo", "up")
    port = 26480  # inside the namespace: its own loopback and address, no one else's port
    proc = subprocess.Popen(
        ["ip", "netns", "exec", netns, "redis-server", "--bind", f"127.0.0.1 {ns_ip}", "--port",
         str(port), "--save", "", "--appendonly", "no", "--protected-mode", "no",
         "--dir", str(tmp), "--logfile", str(tmp / "redis.log")],
        text=True,
    )  # fmt: skip
    stack.callback(stop, proc, "redis-server")
    wait_port(ns_ip, port)
    direct = f"redis://{ns_ip}:{port}/0"
    before = ping_rtt_us(direct)
    if delay_ms and _netem(host_dev, delay_ms / 2, None):
        if not _netem(ns_dev, delay_ms / 2, netns):
            raise RuntimeError("netem worked on one end of the veth only")
        return DelayedRedis(direct, direct, proc, "netem", delay_ms, before)
    relay = _relay(stack, tmp, netns, ns_ip, port, delay_ms)
    return DelayedRedis(f"redis://{ns_ip}:{relay}/0", direct, proc, "relay", delay_ms, before)


def ping_rtt_us(url: str, count: int = 300) -> dict[str, float]:
    """Round-trip time of PING from a redis-py client in the root namespace: median, p10, p90."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
        times = []
        for _ in range(count):
            began = time.perf_counter()
            client.ping()
            times.append((time.perf_counter() - began) * 1e6)
    finally:
        client.close()
    times.sort()
    return {
        "median_us": round(statistics.median(times), 1),
        "p10_us": round(times[count // 10], 1),
        "p90_us": round(times[count * 9 // 10], 1),
    }


def redis_cli_latency(url: str) -> str:
    """redis-cli --latency's one-second sample (min, max, avg ms, samples) as it prints it."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    out = sh("redis-cli", "-h", host, "-p", port, "--latency", "--csv", check=False)
    return out.stdout.strip() or out.stderr.strip()


def tool_missing() -> str | None:
    """What this benchmark needs and the machine lacks (None: nothing)."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth, tc)"
    for tool in ("ip", "tc", "redis-server", "redis-cli", "gcc"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH"
    return None
