"""RedisBloomFilter: one Bloom filter shared by every crawler process, its bits in Redis.

The bits are a Redis string holding exactly the bytes a local BloomFilter of the same
parameters would hold. The client hashes and computes positions in C (urlseen._core.byte_masks)
and sends a whole batch to a Lua script (shared/lua/bloom_batch.lua) that tests and sets the
bits atomically: among all clients, a URL is reported new exactly once (false positives aside,
as for any Bloom filter), and reaches a caller even if its client dies before the caller has
it (claims with leases: shared/claims.py). One round trip per batch, against one per bit
(GETBIT/SETBIT) or one per URL, plus one to acknowledge a batch that had new URLs.

Repeats skip the script: on a crawl most URLs were seen, and the script's work per key in Lua
costs the server more than native reads (benchmarks/redis/cpu.py). A batch first reads the
bits its keys need (and, when some claims are held, those keys' claims) with native commands
in one MULTI/EXEC (shared/bits.py); a key found set whose claim says seen is answered from
that snapshot, since bits are never cleared while the filter's instance lives. Only the other
keys, each distinct one once, go to the script, which decides them atomically. When the last
batch found most keys new, the read would answer little, so the next batch skips it.

A script call claims the keys it answers new in one record (claims.lua, claims_record: one
field of :records holding their fingerprints), which the acknowledgement deletes with one
native HDEL: no claim work per key on the server unless a claim is read or released one by
one (then the records are expanded into per-key claims first).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from urlseen import _core, defaults
from urlseen.bloom import sizing
from urlseen.bloom.bloom import DEFAULT_HASH, HASHES, LAYOUT_CODES, _params
from urlseen.errors import ConfigError, FilterLostError, FormatError
from urlseen.protocol import FilterStats, Key, check_given, key_batch
from urlseen.shared import client as redis_store
from urlseen.shared import marks
from urlseen.shared.bits import (
    NATIVE_FROM,
    BitsRead,
    ClaimsRead,
    NativeReads,
    fell_back,
    optimistic_args,
)
from urlseen.shared.claims import (
    RELEASE_CHUNK,
    ClaimedAnswers,
    Claims,
    ask_each_once,
    ask_until_decided,
    record_size,
)
from urlseen.shared.client import LOST_HELP, retrying
from urlseen.shared.marks import ForgetsMarks, WriteMarks, marked_ack
from urlseen.shared.scripts import BLOOM_BATCH, STAGED, Answer, Op, claim_fields

MAX_BITS = 1 << 32  # a Redis string holds at most 512 MiB
FORMAT = "urlseen-redis-bloom/2"
KIND = "bloom"
FP_BYTES = 16  # a claim's field: the key's digest
_RELEASE = {"ack": Op.ACK, "abandon": Op.ABANDON, "renew": Op.RENEW}
STAGE_MS = 60_000  # the expiry of a client's staged bits (renamed or deleted by the next call)


class _Snapshot(NamedTuple):
    """A native read of a batch's bits: per key 1 if its bits were all set; the claims held;
    the bits read (the whole string, or 64-byte blocks placed by `number`: block offset ->
    its place); the filter's count (bloom_batch.lua adds to it whenever it writes bits)."""

    present: bytes
    held: int
    bits: bytes
    number: dict[int, int] | None
    count_read: bytes


class RedisBloomFilter(ForgetsMarks, ClaimedAnswers):
    """A Bloom filter whose bits live in Redis, shared by any number of processes. close()
    forgets the connection; the bits stay in Redis.

    Args:
        redis: a Redis URL ("redis://host:6379/0") or a redis-py client.
        name: the filter's name (non-empty UTF-8, no braces, '#' or control characters);
            its keys are urlseen:{name}:kind, :meta, :bits, :claims and :records, the name
            escaped in the hash tag (Redis Cluster keeps them in one slot).
        capacity, error_rate, layout, seed, hash: as for BloomFilter; used when the filter
            does not exist yet. An existing filter keeps its own parameters; passing
            different ones raises ConfigError.
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
        lease: float | None = None,
        allow_eviction: bool = False,
    ) -> None:
        self.name = redis_store.check_name(name)
        self._claims = Claims(lease)
        self._client = redis_store.connect(redis)
        self._what = f"bloom filter {name!r}"
        self._bits = redis_store.key(name, "bits")
        self._meta = redis_store.key(name, "meta")
        self._claims_key = redis_store.key(name, "claims")
        self._records_key = redis_store.key(name, "records")
        # this client's staged whole bits (bloom_batch.lua's rewrite): set, then renamed over
        # the bits by the script or deleted by it; the expiry covers a client that dies between
        self._stage = redis_store.key(name, f"stage:{self._claims.owner}")
        self._cluster = redis_store.is_cluster(self._client)
        self._records: dict[str, list[bytes]] = {}  # this client's records: field -> keys
        self._per_key_claims = False  # some claims held may be per key, not in those records
        self._script = redis_store.load_script(self._client, "bloom_batch.lua")
        redis_store.check_eviction(self._client, allow_eviction, self._what)
        stored = _open(self._client, self.name, capacity, error_rate, layout, seed, hash)
        self._params = stored
        self.nbits, self.k = int(stored["nbits"]), int(stored["k"])
        self._nbytes = (self.nbits + 7) // 8
        self._instance = stored["instance"]
        self._layout = LAYOUT_CODES[stored["layout"]]
        self._hash = HASHES[stored["hash"]]
        self.seed = int(stored["seed"])
        self._keys = {
            "bits": self._bits,
            "meta": self._meta,
            "claims": self._claims_key,
            "records": self._records_key,
            "stage": self._stage,
        }
        self._fields = {
            "instance": self._instance,
            "nbytes": self._nbytes,
            "fp_bytes": FP_BYTES,
            "layout": stored["layout"],
        }
        # The blocked layout reads every batch's blocks first and sends the script its own
        # answers and blocks to write, checked unchanged (bits.lua, bits_agreed).
        self.optimistic = self._layout == _core.LAYOUT_BLOCKED
        self.native_from = NATIVE_FROM  # NativeReads.start
        self._reads = NativeReads()
        # The count the next read finds if no other client writes meanwhile: if it does, this
        # client is likely the only writer (_sole_writer), and may send a small filter's whole
        # bits (optimistic_args) and skip reading them: they are as its last batch left them
        # (_last_bits: that count and those bits; every write of bits adds to the count)
        self._count_after: bytes | None = None
        self._sole_writer = False
        self._last_bits: tuple[bytes, bytes] | None = None
        self._staging: bytes | None = None
        self._marks = WriteMarks()  # this client's write mark in the meta (shared/marks.py)

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a Bloom filter called name."""
        return redis_store.holds(redis_store.connect(redis), redis_store.check_name(name), KIND)

    # -- the seen-test ------------------------------------------------------------------

    def _call(
        self, op: Op, masks: bytes, fps: bytes, claim: Sequence[Any], what: str, extra: Any = ()
    ) -> Any:
        """One bloom_batch.lua call; extra: the operation's tail. For the tail's rewrite
        (STAGED), the whole bits in _staging are staged first, in the same round trip."""
        staged, self._staging = self._staging, None
        if len(extra) < 3 or extra[2] != STAGED:
            staged = None
        fields = {**self._fields, "op": op, "masks": masks, "fps": fps, **claim_fields(claim)}
        fields["mark"] = self._marks.expected(self._meta)
        keys, args = BLOOM_BATCH.call(self._keys, fields, extra)
        call = functools.partial(self._script, keys=keys, args=args)
        if staged is not None:
            client, cluster = self._client, self._cluster
            call = functools.partial(
                _set_then_call, client, cluster, self._script, staged, keys, args
            )
        reply = retrying(call, f"{self._what}: {what}")
        self._marks.advanced(self._meta)
        return reply

    def _masks(self, keys: list[Key]) -> bytes:
        return _core.byte_masks(keys, self.nbits, self.k, self._layout, self.seed, self._hash)

    def add(self, key: Key) -> bool:
        """Check-and-add one URL (one round trip: use add_many for throughput)."""
        return self.add_many([key])[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch, each key atomically; True where new. A batch of repeats takes
        one round trip (two while claims are held), one with new keys a read, the
        script and the acknowledgement. Waits (about one lease at most) for URLs another client
        answered new and has not acknowledged."""
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        masks = self._masks(keys)
        fps = _core.digests(keys, self._hash, self.seed)
        claims = self._claims
        answers = [False] * len(keys)
        with claims.batch(self._abandon, fps) as priority:
            todo = list(range(len(keys)))
            read_first, send = self._reads.start(self.optimistic, self.native_from)
            snapshot = self._present(masks, len(keys)) if read_first else None
            if snapshot is not None:
                todo = self._undecided(snapshot, fps, priority)
            snapshots = [snapshot] if send and snapshot is not None else []

            def ask(idx: list[int]) -> bytes:
                part = masks if len(idx) == len(keys) else self._masks([keys[i] for i in idx])
                return self._ask(part, [fps[i] for i in idx], priority, snapshots)

            if todo:
                got = ask_until_decided(
                    lambda idx: ask_each_once([todo[j] for j in idx], fps, ask),
                    [fps[i] for i in todo],
                    claims,
                    self._renew,
                )
                for i, answer in zip(todo, got, strict=True):
                    answers[i] = answer
        self._reads.answered(answers.count(False), len(keys))
        if claims.auto:
            self.acknowledge()
        return answers

    def _ask(
        self, masks: bytes, fps: list[bytes], priority: int, snapshots: list[_Snapshot]
    ) -> bytes:
        """One check-and-add call of the script for these keys: their answers (OWN as NEW),
        their claims held. The first call of a batch read natively (snapshots) sends the
        answers and blocks that read decided (optimistic_args)."""
        extra: list[bytes] = []
        work = count = None
        if snapshots:
            s = snapshots.pop()
            work = bytearray(s.bits) if s.number is None else None
            extra = optimistic_args(
                masks, s.bits, s.number, s.count_read, rewrite=self._sole_writer, work=work
            )
            count = s.count_read
        claim = self._claims.args(priority)
        left = None if work is None else bytes(work)  # the bits as the batch leaves them
        self._staging = left  # _call stages them if extra says so
        reply = self._call(Op.ADD, masks, b"".join(fps), claim, "check-and-add", extra)
        answer, fell = fell_back(reply)
        if extra:
            self._reads.tried(1, fell)
        after = None if fell or count is None else _count_after(count, extra[1])
        self._count_after = after
        self._last_bits = None if left is None or after is None else (after, left)
        if Answer.OWN in answer:  # new keys claimed one by one, not in the call's record
            self._per_key_claims = True
            answer = answer.replace(bytes([Answer.OWN]), bytes([Answer.NEW]))
        got = [fp for fp, c in zip(fps, answer, strict=True) if c == Answer.NEW]
        if got:
            self._records[f"{claim[0]} {claim[2]}"] = got
        self._claims.hold(got, priority)
        return answer

    # -- native reads: repeats answered without the script ---------------------------------

    def _alive(self, found: bytes | None, length: int) -> None:
        redis_store.check_alive(
            self._what, self._meta, found, self._instance, self._bits, int(length), self._nbytes
        )

    def _present(self, masks: bytes, n: int) -> _Snapshot | None:
        """Whether each of n keys finds its bits set, how many claims the filter holds, and the
        bits read, in one MULTI/EXEC (atomic: no script or command runs between its reads),
        which also checks that the filter is still the one opened (BitsRead; None when a
        script must read the bits). The only writer of the filter reads no bits: its last
        batch's (_last_bits) are the filter's while the count is the one they go with (else it
        reads again, bits too)."""
        plan = BitsRead(masks, self._nbytes, self._layout, n)
        if not plan.possible:
            return None
        last = self._last_bits if plan.whole and self._sole_writer else None

        def read(bits: bool) -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.hmget(self._meta, "instance", "count", "rolled_back")
            pipe.strlen(self._bits)
            pipe.hlen(self._claims_key)
            pipe.hlen(self._records_key)
            if bits:
                plan.queue(pipe, self._bits)
            return pipe.execute()  # type: ignore[no-any-return]

        (found, count, marked), length, held, records, *data = retrying(
            lambda: read(last is None), f"{self._what}: read"
        )
        self._alive(found, length)
        marks.check_read(self._what, self._meta, marked, count)
        if last is not None and last[0] != (count or b""):
            last = None  # another client wrote: read again, with the bits
            (found, count, marked), length, held, records, *data = retrying(
                lambda: read(True), f"{self._what}: read"
            )
            self._alive(found, length)
        marks.check_read(self._what, self._meta, marked, count)
        count = count or b""
        self._sole_writer = count == self._count_after
        bits = last[1] if last is not None else plan.bits(data)
        return _Snapshot(plan.present(bits), int(held) + int(records), bits, plan.number, count)

    def _undecided(self, snapshot: _Snapshot, fps: list[bytes], priority: int) -> list[int]:
        """The keys a native read cannot answer seen, for the script to decide: those with a
        bit missing, or a claim that is not plainly seen (ClaimsRead). The others are seen:
        their bits are set and stay set (bits are never cleared while the instance lives), so
        the answer holds at the moment their claims were read."""
        found = [i for i, bit in enumerate(snapshot.present) if bit]
        if snapshot.held and found:
            wanted = [fps[i] for i in found]
            claims = ClaimsRead(self._claims_key, self._records_key, wanted, not self._cluster)

            def read() -> list[Any]:
                pipe = self._client.pipeline(transaction=True)
                pipe.hget(self._meta, "instance")
                pipe.strlen(self._bits)
                claims.queue(pipe)
                return pipe.execute()  # type: ignore[no-any-return]

            replies = retrying(read, f"{self._what}: read claims")
            self._alive(replies[0], replies[1])
            found = claims.seen(found, replies[2:], self._claims.owner, priority, FP_BYTES)
        seen = set(found)
        return [i for i in range(len(fps)) if i not in seen]

    def acknowledge(self) -> int:
        """As ClaimedAnswers.acknowledge; claims younger than half a lease (the usual case: each
        batch's, just before add_many returns) are deleted unread (none can have been taken
        over): when all of them are in this client's records, by one native HDEL of those;
        else by one script call with one argument each and no per-key Lua work."""
        records, per_key = self._records, self._per_key_claims
        self._records, self._per_key_claims = {}, False
        if not records or per_key or not self._claims.young():
            return self._acknowledge_by(self._drop)  # the script expands records first
        self._usable()
        fps = self._claims.take()
        ids = list(records)

        def hdel() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            for field in ids:
                pipe.hdel(self._records_key, field)
            marked_ack(pipe, self._meta, self._claims.owner)
            return pipe.execute()  # type: ignore[no-any-return]

        *deleted, mark, instance, marked = retrying(hdel, f"{self._what}: ack")
        alive, owner = functools.partial(self._alive, length=self._nbytes), self._claims.owner
        self._marks.acked(
            self._what, self._client, self._meta, owner, (mark, instance, marked), alive
        )
        gone = {fp for field, d in zip(ids, deleted, strict=True) if d for fp in records[field]}
        # What is left was expanded into per-key claims by another call's lookup (or is per key)
        rest = list(dict.fromkeys(fp for fp in fps if fp not in gone))
        return sum(
            self._drop(rest[s : s + RELEASE_CHUNK]) for s in range(0, len(rest), RELEASE_CHUNK)
        )

    def _drop(self, fps: list[bytes]) -> int:
        """DROP: delete this client's young claims of fps unread (records expanded first);
        how many of fps it did not find."""
        return len(fps) - int(self._call(Op.DROP, b"", b"", self._claims.args(0), "ack", fps))

    def _release(self, fps: list[bytes], how: str) -> int:
        if how != "renew":
            self._records, self._per_key_claims = {}, False  # the script expands them: per key
        op, lost = _RELEASE[how], 0
        for start in range(0, len(fps), RELEASE_CHUNK):
            part = b"".join(fps[start : start + RELEASE_CHUNK])
            answer = self._call(op, b"", part, self._claims.args(0), how)
            lost += answer.count(Answer.SEEN)
        return lost

    def claims_held(self) -> int:
        self._usable()

        def count() -> int:
            pipe = self._client.pipeline(transaction=True)
            pipe.hlen(self._claims_key)
            pipe.hvals(self._records_key)
            held, records = pipe.execute()
            return int(held) + sum(record_size(v, FP_BYTES) for v in records)

        return retrying(count, f"{self._what}: claims")

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        """Whether each key is in the filter (read only: claims do not matter)."""
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        masks = self._masks(keys)
        snapshot = self._present(masks, len(keys))
        if snapshot is not None:
            return [bit == 1 for bit in snapshot.present]
        answer = self._call(Op.CONTAINS, masks, b"", self._claims.args(0), "contains")
        return [c == Answer.SEEN for c in answer]  # every bit was set

    def __len__(self) -> int:
        self._usable()
        count, instance = retrying(
            lambda: self._client.hmget(self._meta, "count", "instance"), f"{self._what}: count"
        )
        if instance is None or instance.decode() != self._instance:
            raise FilterLostError(f"{self._what}: {self._meta} is gone or replaced; " + LOST_HELP)
        return marks.meta_number(self._what, self._meta, "count", count)

    def stats(self) -> FilterStats:
        count, p = len(self), self._params
        layout, nbits, k = p["layout"], self.nbits, self.k
        details = {"name": self.name, "k": k, "layout": layout, "hash": p["hash"]}
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
        """Set bits (BITCOUNT, counted by the server)."""
        self._usable()
        return int(retrying(lambda: self._client.bitcount(self._bits), f"{self._what}: popcount"))

    def memory_usage(self) -> int:
        """Bytes Redis uses for the bits and the metadata (MEMORY USAGE)."""
        self._usable()

        def usage() -> int:
            return sum(int(self._client.memory_usage(k) or 0) for k in (self._bits, self._meta))

        return retrying(usage, f"{self._what}: memory usage")

    def destroy(self) -> None:
        """Delete the filter's keys from Redis (its receipts expire on their own)."""
        self._usable()
        kind = redis_store.key(self.name, "kind")
        parts = (self._bits, self._meta, self._claims_key, self._records_key, kind)
        retrying(lambda: self._client.delete(*parts), f"{self._what}: destroy")
        self._claims.take()  # nothing left to release
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} nbits={self.nbits} k={self.k}>"


def _count_after(count: bytes, said: bytes) -> bytes:
    """The filter's count (as a snapshot read it: b"" before any write) once a script took
    the answers `said` (each b"1" adds one)."""
    fresh = said.count(Answer.NEW)
    return str(int(count or 0) + fresh).encode() if fresh else count


def _set_then_call(
    client: Any, cluster: bool, script: Any, staged: bytes, keys: list[str], args: list[Any]
) -> Any:
    """SET the staged bits (KEYS' stage, with an expiry), then run the script: in one round
    trip on a single server, in two on a Cluster (redis-py's Cluster pipelines refuse EVALSHA)."""
    from redis.exceptions import NoScriptError

    stage = keys[BLOOM_BATCH.keys.index("stage")]
    if cluster:
        client.set(stage, staged, px=STAGE_MS)
        return script(keys=keys, args=args)
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.set(stage, staged, px=STAGE_MS)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        try:
            return pipe.execute()[-1]
        except NoScriptError:  # a SCRIPT FLUSH: load it, send both again
            if attempt:
                raise
            client.script_load(script.script)
    raise AssertionError("unreachable")


def _open(
    client: Any,
    name: str,
    capacity: int | None,
    error_rate: float | None,
    layout: str,
    seed: int,
    hash: str,
) -> dict[str, Any]:
    """The filter's stored parameters; when there are none, made from the arguments (its bits
    allocated). An existing filter's are checked against the capacity and error rate given."""
    meta, bits = redis_store.key(name, "meta"), redis_store.key(name, "bits")

    def validate(params: dict[str, Any]) -> None:
        if params.get("layout") not in LAYOUT_CODES or params.get("hash") not in HASHES:
            raise FormatError(f"Redis key {meta}: unknown layout or hash")

    def record(create: dict[str, Any] | None = None) -> dict[str, Any] | None:
        allocate = None if create is None else (bits, (create["nbits"] + 7) // 8)
        noun = "Redis Bloom filter"
        return redis_store.record(
            client, name, KIND, meta, FORMAT, noun, validate, create, allocate
        )

    stored = record()
    if stored is not None:
        given = {"capacity": capacity, "error_rate": error_rate}
        check_given(stored, given, f"filter {name!r}")
        return stored
    if capacity is None:
        raise ConfigError(f"no filter {name!r} in Redis: give a capacity to create it")
    wanted = _params(
        capacity,
        defaults.BLOOM_ERROR_RATE if error_rate is None else error_rate,
        layout,
        seed,
        hash,
    )
    if wanted["nbits"] > MAX_BITS:
        raise ConfigError(
            f"{wanted['nbits']} bits exceed one Redis string (2**32 bits); lower the "
            "capacity or raise the error rate"
        )
    stored = record({**wanted, "format": FORMAT, "instance": redis_store.new_instance()})
    assert stored is not None
    return stored
