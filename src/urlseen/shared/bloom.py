"""RedisBloomFilter: one Bloom filter shared by every crawler process, its bits in Redis.

The bits are split in shards (shared/bloom_shard.py), each a Redis string in a hash slot of
its own: one on a single server, one per primary on a Cluster (so that every primary does a
share of the work). A URL belongs to one shard, chosen by its hash, and each shard holds
exactly the bytes a local BloomFilter of the shard's size would hold for its URLs. The client
hashes and computes positions in C (urlseen._core.byte_masks) and sends each shard its part of
a batch in one call of a Lua script (shared/lua/bloom_batch.lua) that tests and sets the bits
atomically: among all clients, a URL is reported new exactly once (false positives aside, as
for any Bloom filter), and reaches a caller even if its client dies before the caller has it
(claims with leases: shared/claims.py). One round trip per shard a batch touches, against one
per bit (GETBIT/SETBIT) or one per URL, plus one to acknowledge a batch that had new URLs.

Repeats skip the script: on a crawl most URLs were seen, and the script's work per key in Lua
costs the server more than native reads (benchmarks/redis/cpu.py). A batch first reads the
bits its keys need (and, when some claims are held, those keys' claims) with native commands
in one MULTI/EXEC per shard (shared/bits.py); a key found set whose claim says seen is
answered from that snapshot, since bits are never cleared while the filter's instance lives.
Only the other keys, each distinct one once, go to the script, which decides them
atomically. When the last batch found most keys new, the read would answer little, so the
next batch skips it.

A script call claims the keys it answers new in one record (claims.lua, claims_record: one
field of the shard's records holding their fingerprints), which the acknowledgement deletes
with one native HDEL: no claim work per key on the server unless a claim is read or released
one by one (then the records are expanded into per-key claims first).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable
from typing import Any

from urlseen import _core, defaults
from urlseen.bloom import sizing
from urlseen.bloom.bloom import DEFAULT_HASH, HASHES, LAYOUT_CODES, _params
from urlseen.errors import ConfigError, FilterLostError, FormatError
from urlseen.protocol import FilterStats, Key, check_given, key_batch
from urlseen.shared import client as redis_store
from urlseen.shared import marks
from urlseen.shared.bits import NATIVE_FROM
from urlseen.shared.bloom_shard import FP_BYTES, BloomShard, shard_of
from urlseen.shared.claims import (
    RELEASE_CHUNK,
    ClaimedAnswers,
    Claims,
    ask_until_decided,
    record_size,
)
from urlseen.shared.client import LOST_HELP, retrying
from urlseen.shared.marks import ForgetsMarks, WriteMarks
from urlseen.shared.scripts import Op

MAX_BITS = 1 << 32  # a Redis string holds at most 512 MiB: a shard's bits at most
FORMAT = "urlseen-redis-bloom/3"  # shards; format 2 (one string) is read as one shard
FORMAT_ONE_KEY = "urlseen-redis-bloom/2"
KIND = "bloom"
MAX_SHARDS = 1024
SALTS = 100_000  # tags tried per shard for one on the wanted Cluster primary
_RELEASE = {"ack": Op.ACK, "abandon": Op.ABANDON, "renew": Op.RENEW}


class RedisBloomFilter(ForgetsMarks, ClaimedAnswers):
    """A Bloom filter whose bits live in Redis, shared by any number of processes. close()
    forgets the connection; the bits stay in Redis.

    Args:
        redis: a Redis URL ("redis://host:6379/0") or a redis-py client.
        name: the filter's name (non-empty UTF-8, no braces, '#' or control characters);
            its keys are urlseen:{name}:kind and :meta, and per shard :bits, :meta, :claims
            and :records, in a slot of the shard's own (the name escaped in the hash tag;
            a filter of one shard keeps them all in the name's slot).
        capacity, error_rate, layout, seed, hash: as for BloomFilter; used when the filter
            does not exist yet. An existing filter keeps its own parameters; passing
            different ones raises ConfigError.
        shards: how many shards a new filter's bits are split in (default: one per primary
            on a Redis Cluster, each placed on another primary; one on a single server).
        lease: seconds an answer "new" stays claimed by this client until acknowledged
            (default 10): if this client dies first, the next client that meets the URL after
            the lease gets it as new.
        allow_eviction: use a server whose maxmemory-policy may evict the filter's keys
            (refused by default: EvictionPolicyError).

    Answers are acknowledged just before add_many returns them; set auto_acknowledge = False
    to keep them claimed until acknowledge() (after the caller has persisted them).

    Raises FilterLostError from a batch when the filter's keys vanished from Redis since it
    was opened (never re-created silently).

    Example:
        >>> seen = RedisBloomFilter("redis://127.0.0.1:6379/0", "crawl", capacity=10**7)
        >>> seen.add_many(["https://a.example/", "https://a.example/"])  # doctest: +SKIP
        [True, False]
    """

    def __init__(
        self,
        redis: Any,
        name: str,
        capacity: int | None = None,
        error_rate: float | None = None,
        *,
        layout: str = "blocked",
        seed: int = 0,
        hash: str = DEFAULT_HASH,
        shards: int | None = None,
        lease: float | None = None,
        allow_eviction: bool = False,
    ) -> None:
        self.name = redis_store.check_name(name)
        if shards is not None and not (
            isinstance(shards, int) and not isinstance(shards, bool) and 1 <= shards <= MAX_SHARDS
        ):
            raise ConfigError(f"shards is a whole number from 1 to {MAX_SHARDS}, not {shards!r}")
        self._claims = Claims(lease)
        self._client = redis_store.connect(redis)
        self._what = f"bloom filter {name!r}"
        self._meta = redis_store.key(name, "meta")
        self._cluster = redis_store.is_cluster(self._client)
        self._script = redis_store.load_script(self._client, "bloom_batch.lua")
        redis_store.check_eviction(self._client, allow_eviction, self._what)
        wanted = dict(capacity=capacity, error_rate=error_rate, layout=layout, seed=seed, hash=hash)
        stored = _open(self._client, self.name, wanted, shards, self._cluster)
        self._params = stored
        self.k = int(stored["k"])
        self._instance = stored["instance"]
        self._layout = LAYOUT_CODES[stored["layout"]]
        self._hash = HASHES[stored["hash"]]
        self.seed = int(stored["seed"])
        # The blocked layout reads every batch's blocks first and sends the script its own
        # answers and blocks to write, checked unchanged (bits.lua, bits_agreed).
        self.optimistic = self._layout == _core.LAYOUT_BLOCKED
        self.native_from = NATIVE_FROM  # NativeReads.start
        self._marks = WriteMarks()  # this client's write marks in the shards' metas
        tags = stored.get("tags") or [redis_store.escape(name)]
        self._shards = [BloomShard(self, tag, int(stored["shard_bits"])) for tag in tags]
        self.shards = len(self._shards)
        self.nbits = self.shards * int(stored["shard_bits"])
        # Where a batch starts among its shards, in turn from a random one: the first shard's
        # claims are held while the others are asked, so other clients wait on it longest
        self._turn = random.randrange(MAX_SHARDS)

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a Bloom filter called name."""
        return redis_store.holds(redis_store.connect(redis), redis_store.check_name(name), KIND)

    # -- the seen-test ------------------------------------------------------------------

    def _split(self, fps: list[bytes]) -> list[tuple[BloomShard, list[int] | None]]:
        """The shards a batch touches, each with its keys' places (None: every key)."""
        if self.shards == 1:
            return [(self._shards[0], None)]
        groups: dict[int, list[int]] = {}
        for i, fp in enumerate(fps):
            groups.setdefault(shard_of(fp, self.shards), []).append(i)
        return [(self._shards[s], idx) for s, idx in sorted(groups.items())]

    def _by_shard(self, fps: list[bytes]) -> list[tuple[BloomShard, list[bytes]]]:
        """fps grouped by shard."""
        return [
            (shard, fps if idx is None else [fps[i] for i in idx])
            for shard, idx in self._split(fps)
        ]

    def add(self, key: Key) -> bool:
        """Check-and-add one URL (one round trip: use add_many for throughput)."""
        return self.add_many([key])[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch, each key atomically; True where new. Per shard it touches, a
        batch of repeats takes one round trip (two while claims are held), one with new keys
        a read, the script and the acknowledgement. Waits (about one lease at most) for URLs
        another client answered new and has not acknowledged."""
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        fps = _core.digests(keys, self._hash, self.seed)
        claims = self._claims
        answers = [False] * len(keys)
        groups = self._split(fps)
        self._turn += 1
        start = self._turn % len(groups)
        with claims.batch(self._abandon, fps) as priority:
            waits: list[tuple[int, Any]] = []  # pending keys: (place in the batch, ask again)
            for shard, idx in groups[start:] + groups[:start]:
                if idx is None:
                    got, pending, again = shard.start(keys, fps, priority)
                    answers = got
                    waits += [(i, (again, i)) for i in pending]
                    continue
                got, pending, again = shard.start(
                    [keys[i] for i in idx], [fps[i] for i in idx], priority
                )
                for i, answer in zip(idx, got, strict=True):
                    answers[i] = answer
                waits += [(idx[i], (again, i)) for i in pending]
            if waits:  # every shard asked once before any waiting: no claim held meanwhile
                got = ask_until_decided(
                    lambda pos: _ask_again([waits[p][1] for p in pos]),
                    [fps[i] for i, _ in waits],
                    claims,
                    self._renew,
                )
                for (i, _), answer in zip(waits, got, strict=True):
                    answers[i] = answer
        if claims.auto:
            self.acknowledge()
        return answers

    def acknowledge(self) -> int:
        """As ClaimedAnswers.acknowledge; claims younger than half a lease (the usual case: each
        batch's, just before add_many returns) are deleted unread (none can have been taken
        over): when all of them are in this client's records, by one native HDEL of those per
        shard; else by one script call per shard with one argument each and no per-key Lua
        work."""
        shards = [s for s in self._shards if s.records or s.per_key_claims]
        per_key = any(s.per_key_claims for s in shards)
        if not shards or per_key or not self._claims.young():
            for shard in shards:
                shard.records, shard.per_key_claims = {}, False
            return self._acknowledge_by(self._drop)  # the script expands records first
        self._usable()
        fps = self._claims.take()
        gone: set[bytes] = set()
        for shard in shards:
            gone |= shard.delete_records()
        # What is left was expanded into per-key claims by another call's lookup (or is per key)
        rest = list(dict.fromkeys(fp for fp in fps if fp not in gone))
        return sum(
            self._drop(rest[s : s + RELEASE_CHUNK]) for s in range(0, len(rest), RELEASE_CHUNK)
        )

    def _drop(self, fps: list[bytes]) -> int:
        """DROP: delete this client's young claims of fps unread (records expanded first);
        how many of fps it did not find."""
        return sum(shard.drop(part) for shard, part in self._by_shard(fps) if part)

    def _release(self, fps: list[bytes], how: str) -> int:
        if how != "renew":
            for shard in self._shards:  # the script expands them: per key
                shard.records, shard.per_key_claims = {}, False
        op, lost = _RELEASE[how], 0
        for shard, part in self._by_shard(fps):
            for start in range(0, len(part), RELEASE_CHUNK):
                lost += shard.release(op, part[start : start + RELEASE_CHUNK], how)
        return lost

    def claims_held(self) -> int:
        self._usable()

        def count(shard: BloomShard) -> int:
            pipe = self._client.pipeline(transaction=True)
            pipe.hlen(shard.claims_key)
            pipe.hvals(shard.records_key)
            held, records = pipe.execute()
            return int(held) + sum(record_size(v, FP_BYTES) for v in records)

        what = f"{self._what}: claims"
        return sum(retrying(lambda s=s: count(s), what) for s in self._shards)  # type: ignore[misc]

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        """Whether each key is in the filter (read only: claims do not matter)."""
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        fps = _core.digests(keys, self._hash, self.seed) if self.shards > 1 else []
        answers = [False] * len(keys)
        for shard, idx in self._split(fps):
            if idx is None:
                return shard.contains(keys)
            for i, answer in zip(idx, shard.contains([keys[i] for i in idx]), strict=True):
                answers[i] = answer
        return answers

    def __len__(self) -> int:
        self._usable()
        total = 0
        for shard in self._shards:
            count, instance = retrying(
                lambda s=shard: self._client.hmget(s.meta, "count", "instance"),  # type: ignore[misc]
                f"{self._what}: count",
            )
            if instance is None or instance.decode() != self._instance:
                raise FilterLostError(
                    f"{self._what}: {shard.meta} is gone or replaced; " + LOST_HELP
                )
            total += marks.meta_number(self._what, shard.meta, "count", count)
        return total

    def stats(self) -> FilterStats:
        count, p = len(self), self._params
        layout, nbits, k = p["layout"], self.nbits, self.k
        details = {"name": self.name, "k": k, "layout": layout, "hash": p["hash"]}
        details["shards"] = self.shards
        details["likely_dropped"] = sizing.likely_dropped(layout, nbits, k, count, p["capacity"])
        estimated = sizing.error_rate_at(layout, nbits, k, count)
        return FilterStats(
            kind="redis-bloom",
            capacity=p["capacity"],
            count=count,
            bits=nbits,
            error_rate=p["error_rate"],
            estimated_error_rate=estimated,
            details=details,
        )

    def popcount(self) -> int:
        """Set bits (BITCOUNT of each shard, counted by the servers)."""
        self._usable()
        return sum(
            int(retrying(lambda s=s: self._client.bitcount(s.bits), f"{self._what}: popcount"))  # type: ignore[misc]
            for s in self._shards
        )

    def memory_usage(self) -> int:
        """Bytes Redis uses for the bits and the metadata (MEMORY USAGE)."""
        self._usable()
        parts = {self._meta, *(k for s in self._shards for k in (s.bits, s.meta))}

        def usage() -> int:
            return sum(int(self._client.memory_usage(k) or 0) for k in parts)

        return retrying(usage, f"{self._what}: memory usage")

    def destroy(self) -> None:
        """Delete the filter's keys from Redis (its receipts expire on their own)."""
        self._usable()
        kind = redis_store.key(self.name, "kind")
        _delete(self._client, [k for s in self._shards for k in s.stored_keys()], self._what)
        retrying(lambda: self._client.delete(self._meta, kind), f"{self._what}: destroy")
        self._claims.take()  # nothing left to release
        self.close()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} nbits={self.nbits} k={self.k} "
            f"shards={self.shards}>"
        )


def _ask_again(asks: list[tuple[Any, int]]) -> bytes:
    """The answers to asking again about pending keys, each (its shard's ask, its place in the
    shard's part), one call per shard."""
    by: dict[int, tuple[Any, list[int], list[int]]] = {}
    for n, (again, i) in enumerate(asks):
        entry = by.setdefault(id(again), (again, [], []))
        entry[1].append(i)
        entry[2].append(n)
    out = bytearray(len(asks))
    for again, places, ns in by.values():
        for n, c in zip(ns, again(places), strict=True):
            out[n] = c
    return bytes(out)


def _delete(client: Any, keys: list[str], what: str) -> None:
    """Delete keys that may lie in several slots (one DEL per key's slot on a Cluster)."""
    by_slot: dict[str, list[str]] = {}
    for k in keys:
        by_slot.setdefault(k[: k.index("}") + 1], []).append(k)
    for group in by_slot.values():
        retrying(lambda g=group: client.delete(*g), f"{what}: destroy")  # type: ignore[misc]


def _tags(client: Any, name: str, instance: str, shards: int, cluster: bool) -> list[str]:
    """The hash tags of a new filter's shards: the name, the shard's number and the instance;
    on a Cluster, with a salt that puts shard i on the i-th primary (in turn), so that every
    primary holds its share."""
    escaped = redis_store.escape(name)
    tags = [f"{escaped}:s{i}:{instance}" for i in range(shards)]
    if not cluster:
        return tags
    primaries = sorted(node.name for node in client.get_primaries())
    placed = []
    for i, tag in enumerate(tags):
        want = primaries[i % len(primaries)]
        for salt in range(SALTS):
            candidate = f"{tag}.{salt}" if salt else tag
            if client.get_node_from_key(redis_store.tagged(candidate, "meta")).name == want:
                break
        placed.append(candidate)
    return placed


def _create_shards(client: Any, tags: list[str], instance: str, nbytes: int) -> list[str]:
    """Each shard's meta and zeroed bits (before the filter's record names them, so that no
    client finds a shard missing); the keys written."""
    written = []
    for tag in tags:
        meta, bits = redis_store.tagged(tag, "meta"), redis_store.tagged(tag, "bits")

        def create(meta: str = meta, bits: str = bits) -> None:
            pipe = client.pipeline(transaction=True)
            pipe.hset(meta, mapping={"instance": instance, "count": 0})
            pipe.setrange(bits, nbytes - 1, b"\0")
            pipe.execute()

        written += [meta, bits]
        retrying(create, "create a shard")
    return written


def _open(
    client: Any, name: str, wanted: dict[str, Any], shards: int | None, cluster: bool
) -> dict[str, Any]:
    """The filter's stored parameters (format 2 read as one shard); when there are none, made
    from `wanted` (its shards' bits allocated). An existing filter's are checked against the
    capacity and error rate wanted."""
    meta, bits = redis_store.key(name, "meta"), redis_store.key(name, "bits")

    def validate(params: dict[str, Any]) -> None:
        if params.get("layout") not in LAYOUT_CODES or params.get("hash") not in HASHES:
            raise FormatError(f"Redis key {meta}: unknown layout or hash")
        if params["format"] == FORMAT_ONE_KEY:
            params.update(shard_bits=params["nbits"], tags=None)
        tags, size = params.get("tags"), params.get("shard_bits")
        if (
            not isinstance(size, int)
            or size <= 0
            or not (
                tags is None or (isinstance(tags, list) and all(isinstance(t, str) for t in tags))
            )
        ):
            raise FormatError(f"Redis key {meta}: unreadable shards")

    def record(fmt: str, create: dict[str, Any] | None = None, alloc: Any = None) -> Any:
        noun = "Redis Bloom filter"
        return redis_store.record(client, name, KIND, meta, fmt, noun, validate, create, alloc)

    try:
        stored = record(FORMAT)
    except FormatError as exc:
        if repr(FORMAT_ONE_KEY) not in str(exc):
            raise
        stored = record(FORMAT_ONE_KEY)
    if stored is not None:
        given = {"capacity": wanted["capacity"], "error_rate": wanted["error_rate"]}
        check_given(stored, given, f"filter {name!r}")
        return stored  # type: ignore[no-any-return]
    if wanted["capacity"] is None:
        raise ConfigError(f"no filter {name!r} in Redis: give a capacity to create it")
    rate = wanted["error_rate"]
    params = _params(
        wanted["capacity"],
        defaults.BLOOM_ERROR_RATE if rate is None else rate,
        wanted["layout"],
        wanted["seed"],
        wanted["hash"],
    )
    count = shards or (len(client.get_primaries()) if cluster else 1)
    # each shard a whole number of 64-byte blocks (the blocked layout's unit), or of bytes
    unit = 512 if params["layout"] == "blocked" else 8
    size = -(-params["nbits"] // (count * unit)) * unit
    if size > MAX_BITS:
        raise ConfigError(
            f"{size} bits per shard exceed one Redis string (2**32 bits); lower the "
            "capacity, raise the error rate or use more shards"
        )
    instance = redis_store.new_instance()
    params.update(format=FORMAT, instance=instance, shard_bits=size, tags=None)
    if count == 1:
        created = record(FORMAT, params, (bits, (size + 7) // 8))
        assert created is not None
        return created  # type: ignore[no-any-return]
    params["tags"] = _tags(client, name, instance, count, cluster)
    written = _create_shards(client, params["tags"], instance, (size + 7) // 8)
    created = None
    try:
        created = record(FORMAT, params)
    finally:
        if created is None or created["instance"] != instance:  # another client's won
            with contextlib.suppress(Exception):
                _delete(client, written, "create")
    if created["instance"] != instance:
        return _open(client, name, wanted, shards, cluster)  # read the winner's
    return created  # type: ignore[no-any-return]
