"""A fleet of `urlseen crawl --redis` processes sharing one filter and one frontier in a
private redis-server that persists every write (appendonly yes, appendfsync always): killed
with SIGKILL at random moments and run again, every page is fetched and the work is shared;
a Redis stopped past the client's retries, then back, lets the crawl resume and finish."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import test_crawl_resume
from conftest import in_ci
from test_crawl_resume import (
    REFETCH_BOUND,
    Site,
    check_every_page,
    crawl_command,
    kill_after,
    kill_at_random,
    paths,
    run,
    seeded,
)
from urlseen.integrations.scheduler import DONE_PER_COMMIT

generated_site = test_crawl_resume.generated_site  # the module's fixture, shared

if not in_ci():
    pytest.importorskip("scrapy")

LEASE = "2"  # seconds: a killed process's requests and claims come back soon


def _fleet(site: Site, url: str, tmp: Path, slot: str) -> list[str]:
    fetched = tmp / f"fetched-{slot}.txt"
    return crawl_command(site, fetched, "--redis", url, "--name", "fleet", "--lease", LEASE)


def _lines(tmp: Path, slot: str, site: Site) -> list[str]:
    path = tmp / f"fetched-{slot}.txt"
    return paths(path.read_text().splitlines(), site) if path.exists() else []


def test_two_redis_processes_killed_and_rerun_share_the_work_and_fetch_every_page(
    generated_site: Site, redis_servers: Any, tmp_path: Path
) -> None:
    site, rng = generated_site, seeded("redis fleet")
    private = redis_servers(persist=True)
    commands = {slot: _fleet(site, private.url, tmp_path, slot) for slot in "ab"}
    mark = site.served()
    kills = 0
    for _ in range(2):  # both processes at once, each killed at its own random moment
        other = subprocess.Popen(commands["b"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        kills += kill_at_random(commands["a"], site, rng)
        kills += kill_after(other, site, rng)
    assert kills >= 3, "the crawls ended before their kills"
    for _ in range(3):  # the last processes end together, or the next run finishes
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in commands.values()]
        outs = [p.communicate(timeout=180)[0] for p in procs]
        if all(p.returncode == 0 for p in procs):
            break
        assert all(p.returncode in (0, 3) for p in procs), outs
    else:
        pytest.fail(f"the fleet did not finish in 3 runs: {outs}")
    assert all("(finished)" in out for out in outs), outs
    one, two = _lines(tmp_path, "a", site), _lines(tmp_path, "b", site)
    assert one and two, "one process of the fleet fetched nothing: the work was not shared"
    # a shared frontier also refetches the fewer than DONE_PER_COMMIT handled since its commit
    check_every_page(site, one + two, mark, kills, bound=REFETCH_BOUND + DONE_PER_COMMIT)
    private.client().flushdb()


def test_a_redis_stopped_past_the_retries_then_back_resumes_the_crawl(
    generated_site: Site, redis_servers: Any, tmp_path: Path
) -> None:
    site = generated_site
    private = redis_servers(persist=True)
    command = crawl_command(
        site, tmp_path / "fetched.txt", "--redis", private.url, "--name", "outage", "--lease", LEASE
    )  # the short lease: the stopped process's requests come back soon
    mark = site.served()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while site.served() < mark + 100 and proc.poll() is None:
        time.sleep(0.005)
    private.kill()  # SIGKILL; its append-only file has every acknowledged write
    out, err = proc.communicate(timeout=60)  # the client's retries (~7 s), then it stops
    assert proc.returncode == 1, f"exit {proc.returncode}\n{out}\n{err[-2000:]}"
    assert "Traceback" not in err and "unreachable" in err.strip().splitlines()[-1]
    private.start()
    done = run(command)
    assert "(finished)" in done.stdout
    fetched = paths((tmp_path / "fetched.txt").read_text().splitlines(), site)
    # Refetched: the requests in flight, and those handled while the client retried (the
    # commits that would have marked them done failed): about twice a kill's.
    check_every_page(site, fetched, mark, kills=1, bound=2 * REFETCH_BOUND)
    private.client().flushdb()
