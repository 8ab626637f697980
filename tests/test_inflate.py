"""urlseen.job.inflate against gzip.GzipFile: the same bytes out, and the same kind of error (cut
short, damaged) after them, on multi-member, padded, truncated and corrupted gzip data."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from urlseen.errors import InputError
from urlseen.job.inflate import inflated
from urlseen.job.streams import Inputs

Outcome = tuple[bytes, str | None]


def _kind(exc: BaseException) -> str:
    """What read_errors makes of an error: cut short, or damaged."""
    if isinstance(exc, EOFError):
        return "cut short"
    assert isinstance(exc, (zlib.error, gzip.BadGzipFile)), repr(exc)
    return "damaged"


def by_gzip(data: bytes) -> Outcome:
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            while part := f.read1(1 << 16):
                out += part
    except Exception as exc:  # (compared below)
        return bytes(out), _kind(exc)
    return bytes(out), None


def by_zlib(data: bytes, size: int = 1 << 20, step: int = 1 << 18) -> Outcome:
    out = bytearray()
    try:
        for chunk in inflated(io.BytesIO(data).read, size, step):
            assert 0 < len(chunk) <= size
            out += chunk
    except Exception as exc:  # (compared below)
        return bytes(out), _kind(exc)
    return bytes(out), None


def assert_same(
    data: bytes, size: int = 1 << 20, step: int = 1 << 18, damaged: bool = False
) -> None:
    """The same bytes and the same error; on damaged data, an error from both (zlib checks the
    CRC32 before the length field, so damage that also ends the data early can be "damaged"
    where GzipFile, which reads both first, says "cut short")."""
    want, want_error = by_gzip(data)
    got, got_error = by_zlib(data, size, step)
    if damaged and want_error is not None and got_error is not None:
        want_error = got_error
    assert got_error == want_error
    if want_error != "damaged":
        assert got == want
    else:  # both drop the output of the read that failed, reads of different sizes
        shorter, longer = sorted((got, want), key=len)
        assert longer.startswith(shorter)


members = st.lists(st.binary(max_size=3000), min_size=1, max_size=4)
padding = st.lists(st.integers(0, 5), min_size=4, max_size=4)
reads = st.sampled_from([(1 << 20, 1 << 18), (7, 3), (1000, 1), (100, 50)])


def _gz(parts: list[bytes], pads: list[int], level: int = 6) -> bytes:
    return b"".join(
        gzip.compress(p, level) + b"\0" * pad for p, pad in zip(parts, pads, strict=False)
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members, padding, reads)
def test_members_and_padding(parts: list[bytes], pads: list[int], read: tuple[int, int]) -> None:
    data = _gz(parts, pads)
    assert_same(data, *read)
    assert by_zlib(data, *read) == (b"".join(parts), None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members, padding, st.data(), reads)
def test_cut_anywhere(
    parts: list[bytes], pads: list[int], draw: st.DataObject, read: tuple[int, int]
) -> None:
    data = _gz(parts, pads)
    cut = draw.draw(st.integers(1, len(data) - 1))
    assert_same(data[:cut], *read)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members, st.data(), reads)
def test_a_damaged_byte_anywhere(
    parts: list[bytes], draw: st.DataObject, read: tuple[int, int]
) -> None:
    packed = [gzip.compress(p) for p in parts]
    data = bytearray(b"".join(packed))
    at = draw.draw(st.integers(0, len(data) - 1))
    data[at] ^= draw.draw(st.integers(1, 255))
    flags = [sum(map(len, packed[:i])) + 3 for i in range(len(packed))]
    if at in flags and data[at] & 0xE2:  # a header CRC or reserved flags: zlib refuses them
        return  # (as gzip(1) does), the gzip module does not look
    assert_same(bytes(data), *read, damaged=True)


@pytest.mark.parametrize(
    ("tail", "error"),
    [
        (b"", None),
        (b"\0" * 1000, None),  # zero padding, as gzip accepts it
        (b"\x1f", "damaged"),  # a member's first byte alone: "Not a gzipped file"
        (b"\x1f\x8b", "cut short"),  # a header cut short
        (b"\0\0garbage", "damaged"),
        (gzip.compress(b"second\n", mtime=0)[:-4], "cut short"),  # its length field missing
    ],
)
def test_what_follows_a_member(tail: bytes, error: str | None) -> None:
    data = gzip.compress(b"http://a/\n" * 1000) + tail
    assert by_gzip(data)[1] == error
    assert_same(data)


def test_a_wrong_crc_is_damage_after_the_lines_before() -> None:
    body = b"".join(b"http://c.example/%d\n" % i for i in range(200_000))
    data = bytearray(gzip.compress(body))
    data[-8] ^= 1  # CRC32
    got, error = by_zlib(bytes(data), 1 << 16)
    assert error == "damaged" and len(got) > len(body) // 2 and body.startswith(got)


def test_long_runs_come_out_whole_in_small_chunks() -> None:
    """Output zlib holds without more input (a long match) is not lost at the end."""
    body = b"x" * 5_000_000 + b"\n"
    assert_same(gzip.compress(body, 9), 1000, 1 << 18)
    assert by_zlib(gzip.compress(body, 9), 1000)[0] == body


def test_inputs_chunks_read_members_and_stop_at_a_cut(tmp_path: Path) -> None:
    lines = [b"http://m.example/%d\n" % i for i in range(30_000)]
    whole, cut = tmp_path / "whole.gz", tmp_path / "cut.gz"
    whole.write_bytes(_gz([b"".join(lines[:10_000]), b"".join(lines[10_000:])], [3, 0]))
    packed = gzip.compress(b"".join(lines))
    cut.write_bytes(packed[: len(packed) * 3 // 4])
    inputs = Inputs((str(whole), str(cut)), stop_on_error=True)
    chunks = list(inputs.chunks(1 << 16))
    ends = [i for i, c in enumerate(chunks) if c is None]
    assert len(ends) == 1 and b"".join(chunks[: ends[0]]) == b"".join(lines)
    read = b"".join(c for c in chunks[ends[0] + 1 :] if c is not None)
    assert read and b"".join(lines).startswith(read)
    error = inputs.failed()
    assert isinstance(error, InputError) and "cut short" in str(error) and str(cut) in str(error)
