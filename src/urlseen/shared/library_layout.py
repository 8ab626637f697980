"""Where RedisLibrary keeps what (shared/lua/library_batch.lua describes the layout): the
parameters of a new library, the check of a stored one, a record's value, the group and
bucket of a fingerprint, the claims held."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from urlseen import defaults
from urlseen.errors import ConfigError, FormatError
from urlseen.exact.library_protocol import Record
from urlseen.shared import client as redis_store
from urlseen.shared.claims import record_size

FORMAT = "urlseen-redis-library/4"
FP_BYTES = 16
PER_BUCKET = 40  # records per bucket on average: a bucket not yet split holds ~2x (limit 128)
DEFAULT_GROUPS = 16  # on a Redis Cluster: its slots spread the groups over its primaries
SINGLE_SERVER_GROUPS = 1  # each group a call touches costs it fixed work (redis/REPORT.md)
_VALUE = 12  # refs, first_seen, last_seen: u32 little-endian each


def group_of(fp: bytes, groups: int) -> int:
    """The group of a fingerprint: its first 4 bytes (big-endian) mod groups."""
    return int.from_bytes(fp[:4], "big") % groups


_BIT_REVERSED = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def bucket_order(fp: bytes, groups: int) -> tuple[int, bytes]:
    """A sort key that puts a group's fingerprints of one bucket together at every level and
    split (the bucket is the low bits of bytes 5-8: their bits reversed; a stable sort keeps
    a fingerprint's repeats in order), for library_batch.lua to read and write each bucket's
    run with one command."""
    return group_of(fp, groups), fp[7:3:-1].translate(_BIT_REVERSED)


def bucket_in(fp: bytes, level: int, split: int) -> int:
    """The bucket of a fingerprint in a group at (level, split): linear hashing on its bytes
    5-8 (library_batch.lua)."""
    h = int.from_bytes(fp[4:8], "big")
    b = h % (1 << level)
    return h % (2 << level) if b < split else b


def new_params(
    capacity: int | None, fingerprint: str | None, groups: int | None, *, cluster: bool
) -> dict[str, Any]:
    """A new library's parameters (checked), defaults for the rest (cluster: on a Cluster)."""
    capacity = defaults.CAPACITY if capacity is None else capacity
    fingerprint = "md5" if fingerprint is None else fingerprint
    if groups is None:
        groups = DEFAULT_GROUPS if cluster else SINGLE_SERVER_GROUPS
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigError(f"capacity must be an int >= 1, not {capacity!r}")
    if fingerprint not in ("md5", "xxh3_128"):
        raise ConfigError(f"fingerprint must be 'md5' or 'xxh3_128', not {fingerprint!r}")
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= 1024:
        raise ConfigError(f"groups must be an int in [1, 1024], not {groups!r}")
    return {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "capacity": capacity,
        "groups": groups,
        "per_bucket": PER_BUCKET,
        "created": int(time.time()),
        "instance": redis_store.new_instance(),
    }


def validator(meta: str, noun: str) -> Callable[[dict[str, Any]], None]:
    """The check of a stored library's parameters (FormatError naming the key `meta`)."""

    def validate(params: dict[str, Any]) -> None:
        ok = params.get("fingerprint") in ("md5", "xxh3_128") and all(
            isinstance(params.get(f), int) for f in ("groups", "per_bucket", "capacity")
        )
        if not ok:
            raise FormatError(f"Redis key {meta}: not a urlseen {noun}")
        if not (1 <= params["groups"] <= 1024 and 1 <= params["per_bucket"] <= 60):
            raise FormatError(f"Redis key {meta}: parameters out of range")

    return validate


def record_of(value: bytes) -> Record:
    """A record's value: refs, first and last seen."""
    if len(value) != _VALUE:
        raise FormatError(f"a library record is {_VALUE} bytes, not {len(value)}")
    refs = int.from_bytes(value[0:4], "little")
    first = int.from_bytes(value[4:8], "little")
    last = int.from_bytes(value[8:12], "little")
    return Record(refs, float(first), float(last))


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def held_claims(client: Any, prefix: str, groups: int) -> int:
    """Claims in a library's groups (prefix: its group keys' up to the group number): per key,
    and in call records."""
    pipe = client.pipeline(transaction=False)
    for g in range(groups):
        pipe.hlen(f"{prefix}{g}}}:c")
        pipe.hvals(f"{prefix}{g}}}:r")
    found = pipe.execute()
    per_key, records = found[0::2], found[1::2]
    return int(sum(per_key)) + sum(record_size(v, FP_BYTES) for r in records for v in r)
