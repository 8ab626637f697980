"""Leases a fleet of `urlseen dedup --redis` processes cannot keep silent about, on real URLs
(the dev set), for each shared kind:

- a process killed with a long lease leaves its batch claimed: a rerun with a short lease says
  how many URLs it left under those claims and exits with status 4; with --wait-for-claims it
  waits for the lease to end, prints them and exits 0; a later rerun prints what was left;
- a lease shorter than a batch takes: one process alone never prints a URL twice, and says that
  its claims lapsed; a lapse another process took over is counted;
- a lease under the front ends' floor is refused with the reason.
"""

from __future__ import annotations

import gzip
import io
import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import require_dev_urls_path
from urlseen import kinds
from urlseen.errors import OptionError
from urlseen.job.dedup import dedup
from urlseen.job.streams import Inputs

SHARED = ("bloom", "exact", "dsbf")
SIZES = {"bloom": ("--capacity", "100000"), "exact": ("--capacity", "100000"),
         "dsbf": ("--capacity", "20000", "--error-rate", "1e-6")}  # fmt: skip
LINES = 20_000  # the dev set's first lines: ~3,900 distinct URLs, most repeated
LONG = 12.0  # the killed process's lease, seconds: long enough to outlast a loaded rerun
SHORT = "1"  # the reruns' lease: the shortest the CLI takes


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with gzip.open(require_dev_urls_path(), "rb") as source:
        head = b"".join(itertools.islice(source, LINES))
    path = tmp_path_factory.mktemp("leases") / "feed.txt"
    path.write_bytes(head)
    return path


def _distinct(path: Path) -> set[bytes]:
    return set(path.read_bytes().splitlines()) - {b""}


def _command(url: str, name: str, kind: str, lease: float | str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "urlseen", "dedup", "--redis", url, "--name", name,
            "--filter", kind, *SIZES[kind], "--lease", str(lease), "--batch-size", "2000",
            "--no-canonicalize", "--no-progress", *extra]  # fmt: skip


def _claims(url: str, name: str) -> int:
    try:
        return int(kinds.describe(redis=url, name=name)["claims"])  # `urlseen info --redis`
    except OptionError:  # not made yet
        return 0


def _kill_holding_claims(url: str, name: str, kind: str, feed: Path) -> tuple[list[bytes], int]:
    """Run a process with a long lease whose output nobody reads: it blocks writing a batch
    whose URLs it has claimed; kill it there with SIGKILL. What it printed, and its claims."""
    proc = subprocess.Popen(
        _command(url, name, kind, LONG, str(feed)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        held, deadline = 0, time.monotonic() + 15
        while time.monotonic() < deadline:  # stuck on the full pipe: its claims stay put
            time.sleep(0.2)
            now = _claims(url, name)
            if now and now == held and _writing_to_a_pipe(proc.pid):
                break
            held = now
        assert proc.poll() is None and held > 0, "the process did not block holding claims"
    finally:
        proc.kill()
    out, _ = proc.communicate(timeout=10)  # the pipe still holds what it wrote
    lines = out.split(b"\n")
    return lines[:-1], held  # the last one cut short (or empty): not printed


def _writing_to_a_pipe(pid: int) -> bool:
    """Whether the process's main thread sleeps in a pipe write (Linux; elsewhere: assumed)."""
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return True


def _run(command: list[str], path: Path) -> tuple[int, list[bytes], str]:
    done = subprocess.run([*command, str(path)], capture_output=True, timeout=120)
    return done.returncode, done.stdout.splitlines(), done.stderr.decode()


@pytest.mark.parametrize("kind", SHARED)
def test_a_rerun_says_how_many_urls_a_dead_long_lease_holds_and_exits_4(
    kind, feed, redis_url, redis_name
):
    printed_first, held = _kill_holding_claims(redis_url, redis_name, kind, feed)
    killed = time.monotonic()
    rc, printed, err = _run(_command(redis_url, redis_name, kind, SHORT), feed)
    assert rc == 4, err
    assert f"warning: {held:,} URLs not printed: another process claimed them" in err, err
    assert len(printed) == len(set(printed))
    assert not set(printed) & set(printed_first)
    left = _distinct(feed) - set(printed_first) - set(printed)
    # At most its claims; none when the kill came after their lines reached the pipe.
    assert len(left) <= held, "the URLs printed by no one are the dead process's claims"
    time.sleep(max(0.0, killed + LONG + 0.3 - time.monotonic()))  # its lease is over
    rc, last, err = _run(_command(redis_url, redis_name, kind, SHORT), feed)
    assert rc == 0 and "warning" not in err, err
    assert len(last) == held and left <= set(last), "the next run prints what was left"
    assert not set(last) & set(printed)


@pytest.mark.parametrize("kind", SHARED)
def test_waiting_for_claims_prints_them_once_the_lease_ends(kind, feed, redis_url, redis_name):
    printed_first, held = _kill_holding_claims(redis_url, redis_name, kind, feed)
    killed = time.monotonic()
    waiting = _command(redis_url, redis_name, kind, SHORT, "--wait-for-claims")
    rc, printed, err = _run(waiting, feed)
    waited = time.monotonic() - killed
    assert rc == 0 and "warning" not in err, err
    assert waited > LONG - 1.5, f"returned {waited:.1f} s after the kill: before the lease ended"
    assert len(printed) == len(set(printed))
    assert not set(printed) & set(printed_first) - _last_batch(printed_first, held)
    assert set(printed) | set(printed_first) == _distinct(feed), "a URL was printed by no one"
    assert _claims(redis_url, redis_name) == 0


def _last_batch(printed: list[bytes], held: int) -> set[bytes]:
    """The killed process's last lines, at most as many as it held claims: those it had
    claimed and partly written when it died (printed again by the next run, as promised)."""
    return set(printed[-held:])


def _shared(kind: str, url: str, name: str, lease: float):
    """A shared filter with a lease below the front ends' floor (the library takes it)."""
    from urlseen.exact.library_filter import FingerprintLibraryFilter
    from urlseen.shared.bloom import RedisBloomFilter
    from urlseen.shared.library import RedisLibrary
    from urlseen.splittable.filter import SplittableBloomFilter

    if kind == "bloom":
        return RedisBloomFilter(url, name, 100_000, 1e-6, lease=lease)
    if kind == "exact":
        return FingerprintLibraryFilter(library=RedisLibrary(url, name, 100_000, lease=lease))
    return SplittableBloomFilter(2_000, 1e-6, redis=url, name=name, lease=lease, leaf_bits=1 << 14)


class _SlowFlush(io.BytesIO):
    """An output whose flush takes longer than a 10 ms lease."""

    def flush(self) -> None:
        time.sleep(0.03)
        super().flush()


@pytest.mark.parametrize("kind", SHARED)
def test_one_process_with_a_lease_shorter_than_a_batch_prints_no_url_twice(
    kind, feed, redis_url, redis_name
):
    """A 10 ms lease runs out between the script calls of a batch (the exact filter's chunks,
    the splittable filter's rounds) and before every acknowledgement: the process meets its own
    lapsed claims again, and still answers each URL new once; the summary counts the lapses."""
    with _shared(kind, redis_url, redis_name, 0.01) as seen:
        out = _SlowFlush()  # every batch's acknowledgement comes after its lease, however fast
        summary = dedup(Inputs([str(feed)]), seen, out, batch_size=65536)
        printed = out.getvalue().splitlines()
        assert len(printed) == len(set(printed)), f"{len(printed) - len(set(printed))} twice"
        assert len(printed) > 0.99 * len(_distinct(feed))  # 1e-6: no false positive expected
        assert summary.lapsed > 0 and summary.taken_over == 0 and summary.unconfirmed == 0
        assert seen.claim_counts.lapsed == summary.lapsed
        (seen.library if kind == "exact" else seen).destroy()


class _SlowReader(threading.Thread):
    """Reads a pipe 4 KiB at a time with a pause between reads: the writer's batches block."""

    def __init__(self, pipe) -> None:
        super().__init__(daemon=True)
        self.pipe, self.data = pipe, bytearray()

    def run(self) -> None:
        while chunk := self.pipe.read1(4096):
            self.data += chunk
            time.sleep(0.05)


@pytest.mark.parametrize("kind", SHARED)
def test_the_cli_says_when_its_claims_lapsed_before_their_lines_were_written(
    kind, feed, redis_url, redis_name
):
    """The shortest lease the CLI takes, and an output read slowly (a batch's lines take about
    a second and a half to write): the claims lapse before the acknowledgement, the summary
    says so, and no URL is printed twice."""
    command = _command(redis_url, redis_name, kind, SHORT, str(feed))
    command[command.index("--batch-size") + 1] = "20000"  # one batch, written slowly
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader = _SlowReader(proc.stdout)
    reader.start()
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    proc.wait(timeout=60)
    reader.join(timeout=60)
    printed = bytes(reader.data).splitlines()
    assert proc.returncode == 0, err
    assert len(printed) == len(set(printed)) == len(_distinct(feed))
    assert "URLs stayed claimed past the lease before their lines were written; 0 of them" in err


def test_a_lapse_another_client_took_over_is_counted(redis_url, redis_name):
    """A run stalls writing a batch past its lease; another client meets the batch's URLs
    meanwhile and takes them over (it prints them too): the summary counts them."""
    urls = [f"https://lapse.example/{i}" for i in range(200)]
    lease = 0.3
    other = _shared("bloom", redis_url, redis_name, lease)
    taken: list[int] = []

    class Stalling(io.BytesIO):
        def flush(self) -> None:
            if not taken and self.getvalue():
                time.sleep(lease + 0.1)
                taken.append(sum(other.add_many(urls)))

    with _shared("bloom", redis_url, redis_name, lease) as seen:
        out = Stalling()
        summary = dedup([url.encode() for url in urls], seen, out, batch_size=1000)
        assert len(out.getvalue().splitlines()) == 200
        assert taken == [200] and summary.taken_over == 200 and summary.lapsed == 200
        seen.destroy()
    other.close()


def test_a_lease_under_the_floor_is_refused_with_the_reason(feed, redis_url, redis_name):
    rc, printed, err = _run(_command(redis_url, redis_name, "exact", "0.01"), feed)
    assert rc == 2 and not printed
    assert err.strip().endswith(
        "Error: --lease must be at least 1 second, not 0.01: a shorter lease runs out before "
        "a batch's URLs are written and acknowledged, and other processes would print them again"
    ), err
    with pytest.raises(OptionError, match=r"^URLSEEN_LEASE must be at least 1 second"):
        kinds.open_filter("bloom", redis=redis_url, name=redis_name, lease=0.5,
                          spell=lambda name: f"URLSEEN_{name.upper()}")  # fmt: skip
    assert _claims(redis_url, redis_name) == 0  # nothing was made
