"""State files: the documented header layout, and FormatError for anything corrupted,
truncated or foreign; verify(); an open that checks the data of a cleanly closed file and only
the header of one whose writer was killed; version 1 files still read.

The header is parsed and rewritten here by an independent codec written from the layout table
in state/format.py (not by importing its encoder), so these tests also pin the format.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import struct
import subprocess
import sys
import time
import warnings
import zipfile
import zlib
from pathlib import Path

import pytest

from urlseen import BloomFilter, FormatError, UncleanShutdownWarning

# offset 0: magic (8s), 8: version (u16), 10: reserved (u16), 12: data offset (u32),
# 16: data length (u64), 24: params length (u32); 28: header CRC (u32);
# 32: count (u64), 40: flags (u32), 44: data CRC (u32); 48: params (JSON); 4092: seal, the
# CRC32 of bytes 32..4091 with the count read as 0 while the open flag is set (version 2).
STATIC = struct.Struct("<8sHHIQI")
LIVE = struct.Struct("<QII")
MAGIC = b"\x89URLSEEN"
PARAMS_AT = 48
SEAL_AT = 4092
FLAG_OPEN, FLAG_DATA_CRC = 1, 2


def seal_of(raw: bytes | bytearray) -> int:
    page = bytearray(raw[:SEAL_AT])
    if struct.unpack_from("<I", page, 40)[0] & FLAG_OPEN:
        page[32:40] = bytes(8)
    return zlib.crc32(bytes(page[32:SEAL_AT]))


def reseal(raw: bytearray) -> None:
    struct.pack_into("<I", raw, SEAL_AT, seal_of(raw))


def parse(path: Path) -> dict:
    raw = path.read_bytes()
    magic, version, reserved, data_offset, data_length, params_len = STATIC.unpack_from(raw)
    (crc,) = struct.unpack_from("<I", raw, 28)
    count, flags, data_crc = LIVE.unpack_from(raw, 32)
    params_raw = raw[PARAMS_AT : PARAMS_AT + params_len]
    return {
        "raw": raw,
        "magic": magic,
        "version": version,
        "reserved": reserved,
        "data_offset": data_offset,
        "data_length": data_length,
        "params_len": params_len,
        "crc": crc,
        "crc_ok": zlib.crc32(params_raw, zlib.crc32(raw[:28])) == crc,
        "count": count,
        "flags": flags,
        "data_crc": data_crc,
        "params_raw": params_raw,
        "seal_ok": len(raw) >= 4096 and seal_of(raw) == struct.unpack_from("<I", raw, SEAL_AT)[0],
    }


def rewrite(path: Path, *, params_raw: bytes | None = None, fix_crc: bool = True, **fields) -> None:
    """Change static header fields and/or the params bytes, then (by default) recompute the
    header CRC and the seal so that only the intended check can trip."""
    h = parse(path)
    raw = bytearray(h["raw"])
    if params_raw is None:
        params_raw = h["params_raw"]
    values = {k: h[k] for k in ("magic", "version", "reserved", "data_offset", "data_length")}
    values.update(fields)
    params_len = fields.get("params_len", len(params_raw))
    raw[: STATIC.size] = STATIC.pack(
        values["magic"],
        values["version"],
        values["reserved"],
        values["data_offset"],
        values["data_length"],
        params_len,
    )
    raw[PARAMS_AT : PARAMS_AT + h["params_len"]] = bytes(h["params_len"])
    raw[PARAMS_AT : PARAMS_AT + len(params_raw)] = params_raw
    if fix_crc:
        crc = zlib.crc32(bytes(raw[PARAMS_AT : PARAMS_AT + len(params_raw)]), zlib.crc32(raw[:28]))
        raw[28:32] = struct.pack("<I", crc)
        reseal(raw)
    path.write_bytes(bytes(raw))


def edit_params(path: Path, **changes) -> None:
    """Set (or, with value ..., delete) params fields, keeping the header CRC valid."""
    params = json.loads(parse(path)["params_raw"])
    for key, value in changes.items():
        if value is ...:
            params.pop(key, None)
        else:
            params[key] = value
    rewrite(path, params_raw=json.dumps(params).encode())


def set_live(path: Path, *, count=None, flags=None, data_crc=None, fix_seal=True) -> None:
    h = parse(path)
    raw = bytearray(h["raw"])
    raw[32 : 32 + LIVE.size] = LIVE.pack(
        h["count"] if count is None else count,
        h["flags"] if flags is None else flags,
        h["data_crc"] if data_crc is None else data_crc,
    )
    if fix_seal:
        reseal(raw)
    path.write_bytes(bytes(raw))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


KEYS = [f"https://example.com/{i}" for i in range(200)]


@pytest.fixture
def good_file(state_path: Path) -> Path:
    """A cleanly closed blocked filter (capacity 1000 at 0.01: 10240 bits) holding KEYS."""
    with BloomFilter.create(state_path, capacity=1000, error_rate=0.01) as f:
        f.update(KEYS)
    return state_path


def assert_format_error(path: Path, *fragments: str, unchanged: bool = True) -> None:
    """Both open modes raise FormatError naming the file and the problem; the file is left
    as it was (unless unchanged=False: see test_failed_open_leaves_the_file_alone)."""
    before = digest(path)
    for readonly in (True, False):
        with pytest.raises(FormatError) as info:
            BloomFilter.open(path, readonly=readonly)
        message = str(info.value)
        assert str(path) in message
        for fragment in fragments:
            assert fragment in message, message
        assert isinstance(info.value, ValueError)
    if unchanged:
        assert digest(path) == before


# ---- the layout ---------------------------------------------------------------------------


def test_header_layout_matches_the_documented_table(state_path):
    f = BloomFilter.create(state_path, capacity=1000, error_rate=0.01, layout="standard", seed=9)
    h = parse(state_path)
    assert h["flags"] & FLAG_OPEN and not h["flags"] & FLAG_DATA_CRC
    f.update(KEYS)
    count = len(f)
    h = parse(state_path)
    assert h["count"] == count, "the live count is kept in the mapping while open"
    positions = {key: f.positions(key) for key in KEYS[:20]}
    f.close()

    h = parse(state_path)
    assert h["magic"] == MAGIC and h["version"] == 2 and h["reserved"] == 0
    assert h["data_offset"] == 4096 and h["data_length"] == (f.nbits + 7) // 8
    assert len(h["raw"]) == h["data_offset"] + h["data_length"]
    assert h["crc_ok"] and h["seal_ok"]
    assert h["raw"][PARAMS_AT + h["params_len"] : SEAL_AT] == bytes(
        SEAL_AT - PARAMS_AT - h["params_len"]
    )
    assert h["count"] == count and h["flags"] == FLAG_DATA_CRC
    data = h["raw"][h["data_offset"] :]
    assert h["data_crc"] == zlib.crc32(data)
    assert json.loads(h["params_raw"]) == {
        "kind": "bloom",
        "layout": "standard",
        "nbits": f.nbits,
        "k": f.k,
        "seed": 9,
        "hash": "xxh3_64",
        "capacity": 1000,
        "error_rate": 0.01,
    }
    # The bits are the filter's bits: bit j in byte j // 8, least significant first.
    for key in KEYS[:20]:
        for j in positions[key]:
            assert data[j >> 3] >> (j & 7) & 1


# ---- foreign files --------------------------------------------------------------------------


def _png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0\0"))
        + chunk(b"IEND", b"")
    )


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("hello.txt", "hello " * 2000)
    return buf.getvalue()


FOREIGN = {
    "empty": b"",
    "one-byte": b"\x89",
    "magic-only": MAGIC,
    "random": random.Random(1).randbytes(10_000),
    "png": _png(),
    "zip": _zip(),
    "text": b"https://example.com/\n" * 500,
    "json": json.dumps({"kind": "bloom", "nbits": 1024, "k": 3}).encode() * 100,
    "zeros": bytes(8192),
}


@pytest.mark.parametrize("name", list(FOREIGN))
def test_foreign_files(name, state_path):
    state_path.write_bytes(FOREIGN[name])
    assert_format_error(state_path)
    with pytest.raises(FormatError, match=r"too short|not a urlseen state file"):
        BloomFilter.open(state_path)


# ---- corrupted headers ----------------------------------------------------------------------


def test_flipped_magic(good_file):
    for i in range(8):
        raw = bytearray(good_file.read_bytes())
        raw[i] ^= 0x20
        good_file.write_bytes(bytes(raw))
        assert_format_error(good_file, "not a urlseen state file")
        raw[i] ^= 0x20
        good_file.write_bytes(bytes(raw))
    BloomFilter.open(good_file).close()  # restored: the test really flipped only the magic


def test_flipped_bytes_under_the_header_crc(good_file):
    h = parse(good_file)
    original = h["raw"]
    # Every byte of the static fields and of the params is covered by the CRC; so is the CRC.
    positions = list(range(10, 32)) + list(range(PARAMS_AT, PARAMS_AT + h["params_len"]))
    for pos in positions:
        for bit in (0x01, 0x80):
            raw = bytearray(original)
            raw[pos] ^= bit
            good_file.write_bytes(bytes(raw))
            with pytest.raises(FormatError) as info:
                BloomFilter.open(good_file, readonly=True)
            assert str(good_file) in str(info.value)
            assert "corrupted header" in str(info.value), (pos, str(info.value))
    good_file.write_bytes(original)
    BloomFilter.open(good_file, readonly=True).close()


@pytest.mark.parametrize("version", [3, 7, 0xFFFF])
def test_newer_format_version(good_file, version):
    rewrite(good_file, version=version)
    assert parse(good_file)["crc_ok"]
    assert_format_error(good_file, f"format version {version}", "newer")


def test_version_zero(good_file):
    rewrite(good_file, version=0)
    assert_format_error(good_file, "invalid format version 0")


def test_flipped_version_byte_without_crc_fix(good_file):
    rewrite(good_file, version=2 ^ 0x0100, fix_crc=False)  # version 258
    assert_format_error(good_file, "version 258")


@pytest.mark.parametrize("params_len", [4096, 0xFFFFFFFF, 4096 - PARAMS_AT + 1])
def test_params_length_out_of_range(good_file, params_len):
    rewrite(good_file, params_len=params_len)
    assert_format_error(good_file, "corrupted header", f"params length {params_len}")


def test_data_offset_inside_the_params(good_file):
    rewrite(good_file, data_offset=PARAMS_AT + 1)
    assert_format_error(good_file, "corrupted header", "data offset")


# ---- truncated files ------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [-1, -640, 4096 + 1, 4096, 4095, 100, PARAMS_AT, 47, 10])
def test_truncated(good_file, keep):
    raw = good_file.read_bytes()
    good_file.write_bytes(raw[:keep])
    assert_format_error(good_file)
    with pytest.raises(FormatError, match=r"truncated|too short|corrupted header"):
        BloomFilter.open(good_file)


def test_truncated_message_gives_both_sizes(good_file):
    size = good_file.stat().st_size
    os.truncate(good_file, size - 1)
    assert_format_error(good_file, "truncated", str(size - 1), str(size))


def test_data_length_beyond_the_file(good_file):
    rewrite(good_file, data_length=parse(good_file)["data_length"] + 1)
    assert_format_error(good_file, "truncated")


# ---- params that pass the CRC but do not describe a usable Bloom filter -----------------------


def test_params_not_json(good_file):
    rewrite(good_file, params_raw=b"{not json")
    assert_format_error(good_file, "unreadable parameters")


@pytest.mark.parametrize("doc", [b"[1, 2]", b"42", b'"bloom"', b"null"])
def test_params_not_an_object(good_file, doc):
    rewrite(good_file, params_raw=doc)
    assert_format_error(good_file, "not an object")


@pytest.mark.parametrize(
    "kind",
    ["cuckoo", "counting", "", None, ...],
    ids=["cuckoo", "counting", "empty", "null", "absent"],
)
def test_another_kind_of_filter(good_file, kind):
    edit_params(good_file, kind=kind)
    assert_format_error(good_file, "not a Bloom filter")


@pytest.mark.parametrize(
    "field", ["nbits", "k", "seed", "capacity", "layout", "hash", "error_rate"]
)
def test_missing_field(good_file, field):
    edit_params(good_file, **{field: ...})
    assert_format_error(good_file, repr(field), "missing or invalid")


@pytest.mark.parametrize(
    "changes",
    [
        {"nbits": "10240"},
        {"nbits": 10240.0},
        {"nbits": True},
        {"nbits": None},
        {"k": "5"},
        {"k": 5.5},
        {"k": False},
        {"seed": "0"},
        {"capacity": "1000"},
        {"capacity": 1000.0},
        {"layout": 1},
        {"hash": None},
        {"error_rate": "0.01"},
        {"error_rate": None},
    ],
    ids=repr,
)
def test_field_of_the_wrong_type(good_file, changes):
    edit_params(good_file, **changes)
    (field,) = changes
    assert_format_error(good_file, repr(field), "missing or invalid")


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"nbits": 10240 + 512}, "data length 1280 does not match 10752 bits"),
        ({"nbits": 512}, "data length 1280 does not match 512 bits"),
        ({"nbits": 2**70}, "does not match"),
        ({"nbits": 10239}, "invalid filter shape"),  # same byte length, not whole blocks
        ({"nbits": 0}, "invalid filter shape"),
        ({"nbits": -512}, "invalid filter shape"),
        ({"k": 0}, "invalid filter shape"),
        ({"k": 65}, "invalid filter shape"),
        ({"k": -1}, "invalid filter shape"),
        ({"seed": -1}, "invalid seed"),
        ({"seed": 2**32}, "invalid seed"),
        ({"hash": "sha1"}, "unknown hash"),
        ({"layout": "cuckoo"}, "unknown layout"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else "",
)
def test_params_that_do_not_fit(good_file, changes, fragment):
    edit_params(good_file, **changes)
    assert_format_error(good_file, fragment)


def test_data_length_field_disagreeing_with_nbits(good_file):
    # Shrink the announced data (the file is then long enough): nbits no longer fits it.
    rewrite(good_file, data_length=640)
    assert_format_error(good_file, "data length 640 does not match 10240 bits", unchanged=False)


# Files that pass the header CRC but describe an impossible filter, and failed opens.


@pytest.mark.parametrize(
    "changes",
    [
        {"capacity": 0},
        {"capacity": -5},
        {"error_rate": 0.0},
        {"error_rate": 1.5},
        {"error_rate": -0.1},
        {"error_rate": float("nan")},
    ],
    ids=repr,
)
def test_out_of_range_sizing_params(good_file, changes):
    edit_params(good_file, **changes)
    assert_format_error(good_file)


def test_impossible_count(good_file):
    set_live(good_file, count=2**64 - 1)
    assert_format_error(good_file)


@pytest.mark.parametrize("case", ["foreign-kind-unclean", "data-length-mismatch"])
def test_failed_open_leaves_the_file_alone(good_file, case):
    if case == "foreign-kind-unclean":
        edit_params(good_file, kind="cuckoo")
        set_live(good_file, flags=FLAG_OPEN)  # its last writer was killed
    else:
        rewrite(good_file, data_length=640)  # the seal checksums 640 bytes: a new data CRC
    before = digest(good_file)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncleanShutdownWarning)
        with pytest.raises(FormatError):
            BloomFilter.open(good_file)
    assert digest(good_file) == before


# ---- verify ---------------------------------------------------------------------------------


def test_verify_after_a_clean_close(good_file):
    with BloomFilter.open(good_file, readonly=True) as f:
        assert f.verify() is True
        h = parse(good_file)
        raw = bytearray(h["raw"])
        raw[h["data_offset"] + 17] ^= 0x04  # one flipped data bit, under the reader's feet
        with open(good_file, "r+b") as damage:
            damage.write(bytes(raw))
        with pytest.raises(FormatError, match="corrupted data"):
            f.verify()
    # Opening a cleanly closed file checks its data, so the damage shows at open too, in both
    # modes, and nothing is sealed over it.
    assert_format_error(good_file, "corrupted data", "checksum mismatch")


def test_verify_of_an_in_memory_filter_and_of_an_open_writer(good_file):
    assert BloomFilter(capacity=10, error_rate=0.1).verify() is False
    with BloomFilter.open(good_file) as f:  # a writer's data changes: no checksum to compare
        assert f.verify() is False


ABANDON = r"""
import os, sys
from urlseen import BloomFilter
f = BloomFilter.create(sys.argv[1], capacity=int(sys.argv[2]), error_rate=0.01)
f.update(["a", "b", "c"])
os._exit(0)  # no close(), no finalizers: the file stays flagged open
"""


def abandon(path: Path, capacity: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", ABANDON, str(path), str(capacity)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_verify_after_an_unclean_close(state_path):
    abandon(state_path, 1000)
    assert parse(state_path)["flags"] & FLAG_OPEN
    with pytest.warns(UncleanShutdownWarning):
        f = BloomFilter.open(state_path, readonly=True)
    with f:
        assert f.verify() is False
        assert len(f) == 3 and all(f.contains_many(["a", "b", "c"]))


# ---- open reads the header only -------------------------------------------------------------


def rchar() -> int | None:
    """Bytes this process has read through read-like syscalls (Linux /proc/self/io)."""
    try:
        with open("/proc/self/io") as io_stats:
            for line in io_stats:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def timed_open(path: Path, **kwargs) -> tuple[BloomFilter, float, int | None]:
    before_bytes = rchar()
    start = time.perf_counter()
    f = BloomFilter.open(path, **kwargs)
    elapsed = time.perf_counter() - start
    after_bytes = rchar()
    read = None if before_bytes is None or after_bytes is None else after_bytes - before_bytes
    return f, elapsed, read


def test_opening_a_1gb_filter_reads_the_header_only(state_path):
    # Created in a child that exits without close(), so that no one checksums 1 GB here (a
    # clean close would); the file is sparse, so it costs no disk space either.
    abandon(state_path, 880_000_000)
    size = state_path.stat().st_size
    assert 0.9 * 2**30 < size < 1.2 * 2**30, "test precondition: a ~1 GiB state file"
    try:
        with pytest.warns(UncleanShutdownWarning):
            f, elapsed, read = timed_open(state_path, readonly=True)
        with f:
            assert elapsed < 1.0
            if read is not None:
                assert read < 2**20, f"open read {read} bytes"
            assert "a" in f and len(f) == 3
    finally:
        state_path.unlink()


def test_opening_a_clean_file_checks_its_data_in_well_under_a_second(state_path):
    BloomFilter.create(state_path, capacity=50_000_000, error_rate=0.01).close()  # ~60 MB
    assert state_path.stat().st_size > 50 * 2**20
    for readonly in (True, False):
        f, elapsed, read = timed_open(state_path, readonly=readonly)
        with f:
            assert elapsed < 1.0
            if read is not None:  # the data is read through the map, not read()
                assert read < 2**20, f"open read {read} bytes"
    with open(state_path, "r+b") as damage:  # the last data byte, a page the filter never set
        damage.seek(-1, os.SEEK_END)
        damage.write(b"\x10")
    for readonly in (True, False):
        with pytest.raises(FormatError, match="corrupted data"):
            BloomFilter.open(state_path, readonly=readonly)


# ---- version 1 files --------------------------------------------------------------------------


def as_version_1(path: Path) -> None:
    """Rewrite a version 2 file as the previous version wrote it: version 1, no seal."""
    h = parse(path)
    raw = bytearray(h["raw"])
    raw[8:10] = (1).to_bytes(2, "little")
    raw[28:32] = struct.pack("<I", zlib.crc32(h["params_raw"], zlib.crc32(bytes(raw[:28]))))
    raw[SEAL_AT : SEAL_AT + 4] = bytes(4)
    path.write_bytes(bytes(raw))


def test_a_version_1_file_is_read_and_its_writer_upgrades_it(good_file):
    as_version_1(good_file)
    with BloomFilter.open(good_file, readonly=True) as f:
        assert all(f.contains_many(KEYS)) and f.verify() is True
    assert parse(good_file)["version"] == 1, "a reader changes nothing"
    with BloomFilter.open(good_file) as f:
        assert not f.add(KEYS[0]) and f.add("https://example.com/new")
    h = parse(good_file)
    assert (h["version"], h["crc_ok"], h["seal_ok"], h["flags"]) == (2, True, True, FLAG_DATA_CRC)
    with BloomFilter.open(good_file, readonly=True) as f:
        assert all(f.contains_many([*KEYS, "https://example.com/new"]))


def test_info_reports_the_version_a_file_has(good_file):
    def info_version() -> int:
        proc = subprocess.run(
            [sys.executable, "-m", "urlseen", "info", "--json", str(good_file)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return int(json.loads(proc.stdout)["format_version"])

    as_version_1(good_file)
    assert info_version() == 1
    with BloomFilter.open(good_file) as f:
        f.add("https://example.com/new")
    assert info_version() == 2


def test_a_version_1_file_with_damaged_data_is_refused(good_file):
    as_version_1(good_file)
    raw = bytearray(good_file.read_bytes())
    raw[4096 + 5] ^= 0x02
    good_file.write_bytes(bytes(raw))
    assert_format_error(good_file, "corrupted data")
