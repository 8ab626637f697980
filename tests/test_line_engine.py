"""The C line engine (urlseen._core.LineEngine) against the Python reference loop of the dedup job.

The engine must give exactly what the reference gives: the same keys for every line of the dev
file, and the same output, summary and filter state on generated streams full of odd input
(CRLF, empty and blank lines, NULs, invalid UTF-8, lines across chunk and batch boundaries,
lines longer than a chunk, over-long lines), with every filter path the engine has: the C Bloom
filter, a callback filter (exact) and any other filter (Python, through keys()); and the same
from the engine with its worker thread (the default) and without it (URLSEEN_LINE_WORKER=0).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import signal
import string
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import filter_bits, require_dev_urls_path
from urlseen import BloomFilter, ExactFilter, _core
from urlseen.errors import ConfigError
from urlseen.job.dedup import DedupSummary, dedup
from urlseen.job.linekeys import LineKeyer
from urlseen.job.streams import Inputs
from urlseen.protocol import FilterStats


class MemoryInputs:
    """Inputs held in memory: lines as input_lines gives them, or chunks of the given sizes."""

    def __init__(self, datas: list[bytes], chunk_sizes: Iterable[int] = (1 << 20,)) -> None:
        self.datas = datas
        self.chunk_sizes = list(chunk_sizes) or [1 << 20]

    def __iter__(self) -> Iterator[bytes]:
        for data in self.datas:
            yield from io.BytesIO(data)

    def chunks(self) -> Iterator[bytes | None]:
        k = 0
        for data in self.datas:
            at = 0
            while at < len(data):
                size = self.chunk_sizes[k % len(self.chunk_sizes)]
                k += 1
                yield data[at : at + size]
                at += size
            yield None


class SetFilter:
    """A filter in plain Python (a set): the engine's generic path, through keys()."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()

    @staticmethod
    def _b(key: str | bytes) -> bytes:
        return key.encode() if isinstance(key, str) else key

    def add_many(self, keys: Iterable[str | bytes]) -> list[bool]:
        flags = []
        for key in keys:
            b = self._b(key)
            flags.append(b not in self.keys)
            self.keys.add(b)
        return flags

    def contains_many(self, keys: Iterable[str | bytes]) -> list[bool]:
        return [self._b(key) in self.keys for key in keys]

    def stats(self) -> FilterStats:
        return FilterStats("set", 0, len(self.keys), 0, 0.0, 0.0, {})


def _run(inputs: Any, seen: Any, engine: str, **kwargs: Any) -> tuple[bytes, DedupSummary]:
    out = io.BytesIO()
    summary = dedup(inputs, seen, out, engine=engine, **kwargs)
    return out.getvalue(), summary


@contextlib.contextmanager
def line_worker(on: bool) -> Iterator[None]:
    """The engine with its worker thread (dedup's default) or without (all on one thread)."""
    before = os.environ.get("URLSEEN_LINE_WORKER")
    os.environ["URLSEEN_LINE_WORKER"] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["URLSEEN_LINE_WORKER"]
        else:
            os.environ["URLSEEN_LINE_WORKER"] = before


def _same(a: DedupSummary, b: DedupSummary) -> None:
    assert (a.lines, a.new, a.duplicates) == (b.lines, b.new, b.duplicates)
    assert a.skipped == b.skipped
    assert (a.filter_count, a.filter_kind) == (b.filter_count, b.filter_kind)


# -- the dev file: every line's key, and the whole job ------------------------------------------


@pytest.fixture(scope="module")
def dev_bytes() -> bytes:
    with gzip.open(require_dev_urls_path(), "rb") as f:
        return f.read()


def _engine_keys(data: bytes, keyer: LineKeyer, batch: int = 8192) -> list[Any]:
    """The keys of every URL line from the engine, in order (empty lines have none)."""
    engine = _core.LineEngine(keyer.profile != "none", keyer.max_canonical_bytes)
    engine.feed(data)
    engine.end_input()
    keys: list[Any] = []
    while engine.next_batch(batch, final=True):
        keyer.counts.empty += engine.empty
        if engine.ndeferred:
            engine.set_deferred([keyer.key(line) for line in engine.deferred()])
        keys += engine.keys()
    return keys


def test_every_dev_line_gets_the_reference_key(dev_bytes: bytes) -> None:
    """Keys identical to LineKeyer.key's (canonical: w3lib's, through the C shortcut) on all
    2.75M lines, and the same counts."""
    lines = dev_bytes.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    reference = LineKeyer()
    per_line = [reference.key(line) for line in lines]
    want = [k for k in per_line if k is not None]
    ours = LineKeyer()
    got = _engine_keys(dev_bytes, ours)
    assert len(got) == len(want)
    mismatches = [(w, g) for w, g in zip(want, got, strict=True) if w != g]
    assert mismatches[:5] == []
    assert [type(k) for k in got] == [type(k) for k in want]
    assert ours.counts == reference.counts

    # and the job's output: the first line of each key, as read
    firsts, seen = [], set()
    for line, key in zip(lines, per_line, strict=True):
        if key is not None and key not in seen:
            seen.add(key)
            firsts.append(line + b"\n")
    out, summary = _run(MemoryInputs([dev_bytes]), SetFilter(), "c")
    assert out == b"".join(firsts)
    assert summary.new == len(firsts) == 1_022_698


def test_dev_file_raw_dedup_matches_the_reference(dev_bytes: bytes) -> None:
    """--no-canonicalize on the whole dev file: same output, counts and filter bits."""
    inputs = MemoryInputs([dev_bytes])
    keyer = LineKeyer(profile="none")
    got = _run(inputs, BloomFilter(2_000_000, 1e-4), "c", keyer=keyer)
    want = _run(inputs, BloomFilter(2_000_000, 1e-4), "python", keyer=LineKeyer(profile="none"))
    assert got[0] == want[0]
    _same(got[1], want[1])


def test_dev_file_exact_dedup_matches_the_reference(dev_bytes: bytes, tmp_path: Path) -> None:
    """The exact filter on the dev file's first 300,000 lines, canonicalizing and raw: the
    engine's keys hashed in C (MD5 several at a time) against the reference loop's."""
    data = b"".join(dev_bytes.splitlines(keepends=True)[:300_000])
    for profile in ("none", "w3lib"):
        runs = []
        for engine in ("c", "python"):
            with ExactFilter.create(tmp_path / f"{profile}-{engine}", capacity=400_000) as seen:
                out, summary = _run(MemoryInputs([data]), seen, engine,
                                    keyer=LineKeyer(profile=profile))  # fmt: skip
                runs.append((out, summary, _library_of(seen)))
        assert runs[0][0] == runs[1][0]
        _same(runs[0][1], runs[1][1])
        assert runs[0][2] == runs[1][2]


# -- generated streams ------------------------------------------------------------------------

PIECES = [
    b"http://a.example/",
    b"https://b.example/x?b=2&a=1",
    b"HTTP://A.example/#f",
    b"http://a.example",
    b"http://c.example/p?q=%41&z",
    b"http://d.example/a/./b",
    b"http://e.example:8080/?&x=1&&",
    b"http://f.example/?a=b=c",
    b"\xff\xfe",
    b"caf\xc3\xa9",
    b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8
    b"\x00",
    b"\x01",
    b" ",
    b"\t",
    b"\r",
    b"\r\n",
    b"\n",
    b"\n\n",
    b"/relative",
    b"x",
    b"%",
    b";",
]

streams = st.lists(
    st.lists(st.sampled_from(PIECES), max_size=30).map(b"".join), min_size=1, max_size=3
)
chunkings = st.lists(st.integers(1, 40), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    datas=streams,
    chunks=chunkings,
    batch=st.integers(1, 7),
    profile=st.sampled_from(["none", "w3lib"]),
    transactional=st.booleans(),
    kind=st.sampled_from(["bloom", "set", "exact"]),
    worker=st.booleans(),
)
def test_generated_streams_match_the_reference(
    datas: list[bytes],
    chunks: list[int],
    batch: int,
    profile: str,
    transactional: bool,
    kind: str,
    worker: bool,
) -> None:
    def make() -> Any:
        if kind == "exact":  # the engine hashes the keys itself (LineEngine.exact_step)
            return ExactFilter(1_000, cache_entries=8)
        return BloomFilter(10_000, 1e-9) if kind == "bloom" else SetFilter()

    inputs = MemoryInputs(datas, chunks)
    options = {"batch_size": batch, "transactional": transactional}
    seen_c, seen_py = make(), make()
    progress_c: list[int] = []
    progress_py: list[int] = []
    with line_worker(worker):
        got = _run(inputs, seen_c, "c", keyer=LineKeyer(profile=profile),
                   progress=progress_c.append, **options)  # fmt: skip
    want = _run(inputs, seen_py, "python", keyer=LineKeyer(profile=profile),
                progress=progress_py.append, **options)  # fmt: skip
    assert got[0] == want[0]
    _same(got[1], want[1])
    assert progress_c == progress_py  # one call per batch, the same bytes
    if kind == "bloom":
        assert filter_bits(seen_c) == filter_bits(seen_py)
    if kind == "exact":
        assert _library_of(seen_c) == _library_of(seen_py)


def _library_of(seen: ExactFilter) -> dict[bytes, int]:
    """An exact filter's fingerprints and reference counts, pending increments written back."""
    seen.flush()
    fps = [fp for chunk in seen.library.fingerprints() for fp in chunk]
    return {fp: record.refs for fp, record in seen.library.records(fps).items()}


URL_CHARS = string.ascii_letters + string.digits + "._~!$&'()*+,=:@/-?#%; \x7f\"<>[]{}|\\^`"
URL_TOKENS = ["%2f", "%2F", "%2e", "%2E", "%25", "%3b", "%3F", "%41", "%7e", "%20", "%e2%82%ac"]
URL_TOKENS += ["%zz", "%4", "+", "=", "&", "&&", "/./", "/../", "?", "#", "%3D", "%26", "%2B"]
URL_STARTS = [b"http://", b"https://", b"http://a.b", b"https://X:8", b"HTTP://Ab.C"]
URL_STARTS += [b"Https://a.b:65", b"http://a.b:0", b""]
url_tails = st.lists(
    st.one_of(st.sampled_from(URL_TOKENS), st.text(alphabet=URL_CHARS, max_size=6)), max_size=10
)
urls = st.builds(
    bytes.__add__,
    st.sampled_from(URL_STARTS),
    url_tails.map(lambda parts: "".join(parts).encode()),
)


@settings(max_examples=1000, deadline=None)
@given(st.lists(urls, min_size=1, max_size=20))
def test_generated_urls_get_the_reference_key(lines: list[bytes]) -> None:
    """The C canonicalizers key a URL exactly as urlseen.canonical (w3lib) does, or defer it."""
    reference = LineKeyer()
    want = [k for k in (reference.key(line) for line in lines) if k is not None]
    assert _engine_keys(b"\n".join(lines) + b"\n", LineKeyer()) == want


def test_a_line_longer_than_every_chunk_and_over_64_kib() -> None:
    huge = b"http://h.example/" + b"a" * 70_000
    data = b"\n".join([huge, b"http://x/", huge + b"\r", b"\xff" * 66_000, huge]) + b"\n"
    for profile in ("none", "w3lib"):
        inputs = MemoryInputs([data], [4096, 333])
        got = _run(inputs, BloomFilter(1000, 1e-6), "c", keyer=LineKeyer(profile=profile),
                   batch_size=2)  # fmt: skip
        want = _run(inputs, BloomFilter(1000, 1e-6), "python", keyer=LineKeyer(profile=profile),
                    batch_size=2)  # fmt: skip
        assert got[0] == want[0]
        _same(got[1], want[1])
    assert got[1].skipped.oversized == 4


def test_the_exact_filter_through_the_engine(tmp_path: Path) -> None:
    data = b"".join(b"http://e%d.example/p?b=1&a=%d\n" % (i % 50, i % 7) for i in range(2000))
    outs = []
    for engine in ("c", "python"):
        with ExactFilter.create(tmp_path / engine, capacity=10_000) as seen:
            out, summary = _run(MemoryInputs([data], [1000]), seen, engine, batch_size=64,
                                transactional=True)  # fmt: skip
            outs.append((out, summary.new, summary.duplicates, len(seen)))
    assert outs[0] == outs[1]


def test_known_digests_belong_to_one_filter() -> None:
    """The engine remembers digests known to be in a filter; another filter starts afresh."""
    data = b"".join(b"http://k.example/%d\n" % (i % 300) for i in range(3000))
    engine = _core.LineEngine(False, 64 * 1024)
    first, second = BloomFilter(10_000, 1e-9), BloomFilter(10_000, 1e-9)
    news = []
    for seen in (first, first, second):
        engine.feed(data)
        engine.end_input()
        new = 0
        while engine.next_batch(1000, final=True):
            new += engine.bloom_add(seen)
        news.append(new)
    assert news == [300, 0, 300]
    assert len(first) == len(second) == 300


def test_engine_c_needs_inputs_with_chunks() -> None:
    with pytest.raises(ConfigError, match=r"streams\.Inputs"):
        dedup([b"http://a/\n"], BloomFilter(10, 0.01), io.BytesIO(), engine="c")
    with pytest.raises(ConfigError, match="engine must be"):
        dedup([b"http://a/\n"], BloomFilter(10, 0.01), io.BytesIO(), engine="rust")


def test_files_and_gz_through_inputs(tmp_path: Path) -> None:
    plain = tmp_path / "a.txt"
    plain.write_bytes(b"http://a/\nhttp://b/")  # no final newline: the line still ends there
    packed = tmp_path / "b.txt.gz"
    packed.write_bytes(gzip.compress(b"http://b/\nhttp://c/\n"))
    names = (str(plain), str(packed))
    got = _run(Inputs(names), BloomFilter(100, 1e-6), "c")
    want = _run(Inputs(names), BloomFilter(100, 1e-6), "python")
    assert got[0] == want[0] == b"http://a/\nhttp://b/\nhttp://c/\n"


# -- the worker thread ------------------------------------------------------------------------


def test_dev_file_through_the_worker_matches_the_engine_alone() -> None:
    """The dev file read from its .gz (the CLI's path: Inputs, read-ahead, feeder, worker),
    canonicalizing: the same output, summary and filter bits with and without the worker."""
    runs = []
    for worker in (True, False):
        seen = BloomFilter(2_000_000, 1e-6)
        with line_worker(worker):
            out, summary = _run(Inputs((str(require_dev_urls_path()),)), seen, "c")
        runs.append((out, summary, filter_bits(seen)))
    assert runs[0][0] == runs[1][0]
    _same(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]
    assert runs[0][1].new == 1_022_698


def _worker_run(
    datas: list[bytes], chunk: int, batch: int, hasher: Any = None, failed: bool = False
) -> list[tuple[int, int, int, list[Any]]]:
    """(lines, input bytes, empty lines, keys) of each batch the worker builds, fed by a
    thread (feed waits while the worker is a few blocks behind)."""
    engine = _core.LineEngine(False, 64 * 1024)
    engine.start(batch, hasher)

    def feed() -> None:
        for data in datas:
            for at in range(0, len(data), chunk):
                assert engine.feed(data[at : at + chunk])
            engine.end_input()
        engine.close_input(failed=failed)

    feeder = threading.Thread(target=feed)
    feeder.start()
    got = []
    while n := engine.next_batch(batch):
        got.append((n, engine.input_bytes, engine.empty, engine.keys()))
    feeder.join()
    engine.stop()
    return got


def _serial_run(
    datas: list[bytes], chunk: int, batch: int
) -> list[tuple[int, int, int, list[Any]]]:
    engine = _core.LineEngine(False, 64 * 1024)
    got = []
    for data in datas:
        for at in range(0, len(data), chunk):
            engine.feed(data[at : at + chunk])
            while n := engine.next_batch(batch):
                got.append((n, engine.input_bytes, engine.empty, engine.keys()))
        engine.end_input()
    while n := engine.next_batch(batch, final=True):
        got.append((n, engine.input_bytes, engine.empty, engine.keys()))
    return got


@settings(max_examples=200, deadline=None)
@given(datas=streams, chunk=st.integers(1, 50), batch=st.integers(1, 9))
def test_the_worker_builds_the_serial_engines_batches(
    datas: list[bytes], chunk: int, batch: int
) -> None:
    """Batch by batch: the same lines, bytes (an added newline not counted), empty lines and
    keys, across chunk, batch and input boundaries."""
    assert _worker_run(datas, chunk, batch) == _serial_run(datas, chunk, batch)


def test_big_batches_one_built_ahead() -> None:
    """Batches over 16,384 lines (the library kinds' 65,536) are built one ahead, in one slot."""
    data = b"".join(b"http://b.example/%d\r\n" % (i % 5000) for i in range(100_000))
    data += b"\n \nhttp://last"
    assert _worker_run([data], 1 << 16, 20_000) == _serial_run([data], 1 << 16, 20_000)


def test_a_line_longer_than_the_worker_buffers() -> None:
    huge = b"http://h.example/" + b"b" * 3_000_000  # beyond a chunk and a batch's first buffer
    data = b"x\n" + huge + b"\r\n" + huge  # the last line without its newline
    got = _worker_run([data, b"y\n"], 1 << 20, 2)
    assert got == _serial_run([data, b"y\n"], 1 << 20, 2)
    assert [len(k) for _, _, _, keys in got for k in keys] == [1, len(huge), len(huge), 1]


def test_a_failed_input_drops_the_unfinished_batch() -> None:
    """close_input(failed=True): the complete batches only (dedup then raises the error)."""
    data = b"".join(b"http://f.example/%d\n" % i for i in range(10))
    got = _worker_run([data + b"http://cut"], 7, 4, failed=True)
    assert [n for n, *_ in got] == [4, 4]


def test_the_worker_hashes_with_the_filters_hash() -> None:
    """Digests made ahead (XXH3 for a Bloom filter, MD5 for the exact filter's counters) give
    the answers the engine gives hashing itself; digests of another hash are not used."""
    data = b"".join(b"http://h.example/%d\n" % (i % 700) for i in range(5000))
    news = []
    for hasher_of in (lambda f: f, lambda f: None, lambda f: BloomFilter(10, 0.1, seed=7)):
        seen = BloomFilter(10_000, 1e-9)
        engine = _core.LineEngine(False, 64 * 1024)
        engine.start(512, hasher_of(seen))
        engine.feed(data)  # one block: the worker holds it whole
        engine.close_input()
        new = 0
        while engine.next_batch(512):
            new += engine.bloom_add(seen)
        news.append((new, filter_bits(seen)))
    assert news[0] == news[1] == news[2]
    assert news[0][0] == 700


def test_the_exact_filter_through_the_worker(tmp_path: Path) -> None:
    data = b"".join(b"http://x%d.example/p?b=1&a=%d\n" % (i % 90, i % 3) for i in range(3000))
    outs = []
    for worker, engine in ((True, "c"), (False, "c"), (False, "python")):
        with (
            line_worker(worker),
            ExactFilter.create(tmp_path / f"{worker}{engine}", capacity=5000) as seen,
        ):
            out, summary = _run(MemoryInputs([data], [777]), seen, engine, batch_size=100)
            outs.append((out, summary.new, summary.duplicates, _library_of(seen)))
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("profile", ["none", "w3lib"])
def test_repeats_in_a_batch_take_their_first_lines_key(tmp_path: Path, profile: str) -> None:
    """A batch's repeated lines (csrc/repeats.h): deferred ones, CRLF and blank copies, and
    near-copies that differ in one byte, give the reference's output and reference counts."""
    lines = [
        b"http://r.example/a",
        b"http://R.example/a",
        b"http://r.example/a\r",
        b"  ",
        b"http://r.example/\xc3\xa9",
        b"http://r.example/a ",
        b"http://r.example/b?y=1&x=2",
    ]
    data = b"".join(lines[i * 7 % 11 % len(lines)] + b"\n" for i in range(2000))
    outs = []
    for worker, engine in ((True, "c"), (False, "c"), (False, "python")):
        keyer = LineKeyer(profile=profile)
        with (
            line_worker(worker),
            ExactFilter.create(tmp_path / f"{profile}{worker}{engine}") as seen,
        ):
            out, summary = _run(MemoryInputs([data], [333]), seen, engine, keyer=keyer,
                                batch_size=300)  # fmt: skip
            outs.append((out, summary.new, summary.duplicates, _library_of(seen)))
    assert outs[0] == outs[1] == outs[2]


def test_start_checks_its_arguments() -> None:
    engine = _core.LineEngine(False, 100)
    with pytest.raises(TypeError, match="hasher must be"):
        engine.start(10, object())
    with pytest.raises(ValueError, match="batch_size"):
        engine.start(0)
    with pytest.raises(RuntimeError, match="close_input needs start"):
        engine.close_input()
    engine.start(10)
    with pytest.raises(RuntimeError, match="started already"):
        engine.start(10)
    with pytest.raises(ValueError, match="batch size given to start"):
        engine.next_batch(11)
    engine.stop()
    engine.stop()  # idempotent
    assert engine.feed(b"x\n") is False  # the worker has stopped: dropped
    with pytest.raises(RuntimeError, match="stopped"):
        engine.next_batch(10)
    fed = _core.LineEngine(False, 100)
    fed.feed(b"x")
    with pytest.raises(RuntimeError, match="holds no input"):
        fed.start(10)


class Failing(MemoryInputs):
    """Inputs whose reading fails after the first chunks (as a damaged .gz does)."""

    def chunks(self) -> Iterator[bytes | None]:
        for chunk in super().chunks():
            if chunk is None:
                raise OSError("the input broke off")
            yield chunk


@pytest.mark.parametrize("worker", [True, False])
def test_an_input_error_comes_after_the_complete_batches(worker: bool) -> None:
    data = b"".join(b"http://e.example/%d\n" % i for i in range(1000))
    out = io.BytesIO()
    with line_worker(worker), pytest.raises(OSError, match="broke off"):
        dedup(Failing([data], [300]), BloomFilter(10_000, 1e-6), out, batch_size=64)
    assert out.getvalue() == b"".join(b"http://e.example/%d\n" % i for i in range(15 * 64))
    assert not [t for t in threading.enumerate() if t.name == "urlseen-feed"]


class Slow(MemoryInputs):
    """Inputs that give their first chunk, then nothing until `go` is set (a silent pipe)."""

    def __init__(self, datas: list[bytes]) -> None:
        super().__init__(datas)
        self.go = threading.Event()

    def chunks(self) -> Iterator[bytes | None]:
        yield self.datas[0]
        self.go.wait(30)
        yield None


def test_the_job_stops_the_worker_when_it_fails_and_ctrl_c_reaches_it() -> None:
    """A filter that fails, and Ctrl-C while the engine waits for a silent input: the error
    reaches the caller, and the worker and feeder end."""
    data = b"".join(b"http://s.example/%d\n" % i for i in range(100))

    class Broken(SetFilter):
        def add_many(self, keys: Iterable[str | bytes]) -> list[bool]:
            raise ZeroDivisionError("the filter broke")

    slow = Slow([data])
    with pytest.raises(ZeroDivisionError):
        dedup(slow, Broken(), io.BytesIO(), batch_size=10)
    slow.go.set()

    slow = Slow([data])
    out = io.BytesIO()

    def interrupt_later(nbytes: int) -> None:  # once the first batch is out
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()

    with pytest.raises(KeyboardInterrupt):
        dedup(slow, SetFilter(), out, batch_size=60, progress=interrupt_later)
    slow.go.set()
    assert out.getvalue() == b"".join(b"http://s.example/%d\n" % i for i in range(60))
    for thread in threading.enumerate():
        if thread.name == "urlseen-feed":
            thread.join(5)
            assert not thread.is_alive()
