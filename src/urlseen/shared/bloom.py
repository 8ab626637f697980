"""RedisBloomFilter: one Bloom filter shared by every crawler process, its bits in Redis.

The bits are a Redis string holding exactly the bytes a local BloomFilter of the same
parameters would hold. The client hashes and computes positions in C (urlseen._core.byte_masks)
and sends a whole batch to a Lua script (shared/lua/bloom_batch.lua) that tests and sets the
bits atomically: among all clients, a URL is reported new exactly once (false positives aside,
as for any Bloom filter), and reaches a caller even if its client dies before the caller has
it (claims with leases: shared/claims.py). One round trip per batch, against one per bit
(GETBIT/SETBIT) or one per URL, plus one to acknowledge a batch that had new URLs.

Repeats skip the script (issue 17 G): on a crawl most URLs were seen, and the script's per-key
work in Lua cost 2-3x pipelined SADD's server CPU. A batch first reads the bits its keys need
(and, when some claims are held, those keys' claims) with native commands in one MULTI/EXEC; a
key found set whose claim says seen (claim_seen, the script's rule) is answered from that
snapshot, since bits are never cleared while the filter's instance lives. Only the other keys,
each distinct one once, go to the script, which decides them atomically as before. When the
last batch found most keys new, the read would answer little, so the next batch skips it.

A script call claims the keys it answers new in one record (claims.lua, claims_record: one
field of :records holding their fingerprints), which the acknowledgement deletes with one
native HDEL: no claim work per key on the server unless a claim is read or released one by
one (then the records are expanded into per-key claims first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from urlseen import _core
from urlseen.bloom import sizing
from urlseen.bloom.bloom import DEFAULT_HASH, HASHES, _params
from urlseen.errors import ConfigError, FilterLostError, FormatError
from urlseen.protocol import FilterStats, Key, key_batch
from urlseen.shared import client as redis_store
from urlseen.shared import native as redis_native
from urlseen.shared.claims import (
    RELEASE_CHUNK,
    Claimant,
    Claims,
    ask_each_once,
    record_parts,
    recorded_claims,
    settle,
)
from urlseen.shared.client import LOST_HELP, retrying
from urlseen.shared.native import BitsRead, seen_by_claims, server_ms
from urlseen.shared.scripts import BLOOM_BATCH, STAGED, Answer, Op, claim_fields

_LAYOUT_CODES = {"standard": _core.LAYOUT_STANDARD, "blocked": _core.LAYOUT_BLOCKED}
MAX_BITS = 1 << 32  # a Redis string holds at most 512 MiB
FORMAT = "urlseen-redis-bloom/2"  # /1: no kind record, no instance id, no claims
KIND = "bloom"
FP_BYTES = 16  # a claim's field: the key's digest
_RELEASE = {"ack": Op.ACK, "abandon": Op.ABANDON, "renew": Op.RENEW}
STAGE_MS = 60_000  # the expiry of a client's staged bits (renamed or deleted by the next call)
NATIVE_FROM = 0.5  # a batch reads natively first when this share of the last one was seen
# (native_from on a filter: 0 always reads first, above 1 never; benchmarks/redis_cpu.py)


class _Snapshot(NamedTuple):
    """A native read of a batch's bits: per key 1 if its bits were all set; the claims held;
    the bits read (the whole string, or 64-byte blocks in the order of `number`: block
    offset -> its place); the filter's count (bloom_batch.lua adds to it whenever it writes
    bits)."""

    present: bytes
    held: int
    bits: bytes
    number: dict[int, int] | None
    written: bytes  # the filter's count


class RedisBloomFilter(Claimant):
    """A Bloom filter whose bits live in Redis, shared by any number of processes. close()
    forgets the connection; the bits stay in Redis.

    Args:
        redis: a Redis URL ("redis://host:6379/0") or a redis-py client.
        name: the filter's name (non-empty UTF-8, no braces, '#' or control characters);
            its keys are urlseen:{name}:kind, :meta, :bits, :claims and :records, the name
            escaped in
            the hash tag (Redis Cluster keeps them in one slot).
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
        self._loose = False  # some claims held may be per key (not only in those records)
        self._script = redis_store.load_script(self._client, "bloom_batch.lua", claims=True)
        redis_store.check_eviction(self._client, allow_eviction, self._what)
        stored = self._record()
        if stored is None:
            if capacity is None:
                raise ConfigError(f"no filter {name!r} in Redis: give a capacity to create it")
            wanted = _params(
                capacity, 0.001 if error_rate is None else error_rate, layout, seed, hash
            )
            if wanted["nbits"] > MAX_BITS:
                raise ConfigError(
                    f"{wanted['nbits']} bits exceed one Redis string (2**32 bits); lower the "
                    "capacity or raise the error rate"
                )
            wanted = {**wanted, "format": FORMAT, "instance": redis_store.new_instance()}
            stored = self._record(wanted)
            assert stored is not None
        else:
            given = {"capacity": capacity, "error_rate": error_rate}
            redis_store.check_given(stored, given, f"filter {name!r}")
        self._params = stored
        self.nbits, self.k = int(stored["nbits"]), int(stored["k"])
        self._nbytes = (self.nbits + 7) // 8
        self._instance = stored["instance"]
        self._layout = _LAYOUT_CODES[stored["layout"]]
        self._hash = HASHES[stored["hash"]]
        self.seed = int(stored["seed"])
        self.native_from = NATIVE_FROM
        self._seen_share = 1.0
        # The blocked layout reads every batch's blocks first and sends the script its own
        # answers and blocks to write, checked unchanged (bloom_batch.lua, agreed()).
        # A script that had to fall back (blocks written since the read) says so: the next
        # batches go without (Optimism).
        self.optimistic = self._layout == _core.LAYOUT_BLOCKED
        self._optimism = redis_native.Optimism()
        # The count the next read finds if no other client writes meanwhile: if it does, this
        # client is likely alone (_alone), and may send a small filter's whole bits
        # (optimistic_args) and skip reading them: they are as its last batch left them
        # (_kept: that count and those bits; every write of bits adds to the count)
        self._expect: bytes | None = None
        self._alone = False
        self._kept: tuple[bytes, bytes] | None = None
        self._staging: bytes | None = None

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a Bloom filter called name."""
        return redis_store.holds(redis_store.connect(redis), redis_store.check_name(name), KIND)

    def _record(self, create: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The stored parameters (created from `create`, bits allocated, if none)."""
        allocate = None if create is None else (self._bits, (create["nbits"] + 7) // 8)

        def validate(params: dict[str, Any]) -> None:
            if params.get("layout") not in _LAYOUT_CODES or params.get("hash") not in HASHES:
                raise FormatError(f"Redis key {self._meta}: unknown layout or hash")

        return redis_store.record(
            self._client,
            self.name,
            KIND,
            self._meta,
            FORMAT,
            "Redis Bloom filter",
            validate,
            create,
            allocate,
        )

    # -- the seen-test ------------------------------------------------------------------

    def _call(
        self, op: Op, masks: bytes, fps: bytes, claim: Sequence[Any], what: str, extra: Any = ()
    ) -> Any:
        """One bloom_batch.lua call; extra: the operation's tail. For the tail's rewrite
        (STAGED), the whole bits in _staging are staged first, in the same round trip."""
        staged, self._staging = self._staging, None
        if len(extra) < 3 or extra[2] != STAGED:
            staged = None
        keys, args = BLOOM_BATCH.call(
            {
                "bits": self._bits,
                "meta": self._meta,
                "claims": self._claims_key,
                "records": self._records_key,
                "stage": self._stage,
            },
            {
                "op": op,
                "instance": self._instance,
                "nbytes": self._nbytes,
                "layout": self._params["layout"],
                "fp_bytes": FP_BYTES,
                "masks": masks,
                "fps": fps,
                **claim_fields(claim),
            },
            extra,
        )
        if staged is None:
            return retrying(lambda: self._script(keys=keys, args=args), f"{self._what}: {what}")

        from redis.exceptions import NoScriptError

        def stage_then_call() -> Any:
            if self._cluster:  # redis-py's Cluster pipelines refuse EVALSHA: two round trips
                self._client.set(self._stage, staged, px=STAGE_MS)
                return self._script(keys=keys, args=args)
            for attempt in range(2):
                pipe = self._client.pipeline(transaction=False)
                pipe.set(self._stage, staged, px=STAGE_MS)
                pipe.evalsha(self._script.sha, len(keys), *keys, *args)
                try:
                    return pipe.execute()[-1]
                except NoScriptError:  # a SCRIPT FLUSH: load it, send both again
                    if attempt:
                        raise
                    self._client.script_load(self._script.script)
            raise AssertionError("unreachable")

        return retrying(stage_then_call, f"{self._what}: {what}")

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
            snapshots: list[_Snapshot] = []
            hopeful = self.optimistic and self._optimism.now()
            if hopeful or self._seen_share >= self.native_from:
                snapshot = self._present(masks, len(keys))
                if snapshot is not None:
                    todo = self._undecided(snapshot, fps, priority)
                    snapshots = [snapshot] if hopeful else []

            def ask(idx: list[int]) -> bytes:
                whole = len(idx) == len(keys)
                part = masks if whole else self._masks([keys[i] for i in idx])
                extra: list[bytes] = []
                work = None
                if snapshots:  # the first ask only
                    s = snapshots.pop()
                    work = bytearray(s.bits) if s.number is None else None
                    extra = redis_native.optimistic_args(
                        part, s.bits, s.number, s.written, rewrite=self._alone, work=work
                    )
                claim = claims.args(priority)
                left = None if work is None else bytes(work)  # the bits as the batch leaves them
                self._staging = left  # _call stages them if extra says so
                reply = self._call(
                    Op.ADD, part, b"".join(fps[i] for i in idx), claim, "check-and-add", extra
                )
                answer, fell = redis_native.fell_back(reply)
                if extra:
                    self._optimism.heard(1, fell)
                self._expect = None if fell or not extra else _count_after(s.written, extra[1])
                self._kept = None
                if left is not None and self._expect is not None:
                    self._kept = (self._expect, left)
                if Answer.OWN in answer:  # new keys claimed one by one, not in the call's record
                    self._loose = True
                    answer = answer.replace(bytes([Answer.OWN]), bytes([Answer.NEW]))
                got = [fps[i] for i, c in zip(idx, answer, strict=True) if c == Answer.NEW]
                if got:
                    self._records[f"{claim[0]} {claim[2]}"] = got
                claims.hold(got, priority)
                return answer

            if todo:
                got = settle(
                    lambda idx: ask_each_once([todo[j] for j in idx], fps, ask),
                    len(todo),
                    claims.lease,
                    self._renew,
                )
                for i, answer in zip(todo, got, strict=True):
                    answers[i] = answer
        self._seen_share = answers.count(False) / len(keys)
        if claims.auto:
            self.acknowledge()
        return answers

    # -- native reads: repeats answered without the script ---------------------------------

    def _alive(self, found: bytes | None, length: int) -> None:
        redis_store.check_alive(
            self._what, self._meta, found, self._instance, self._bits, int(length), self._nbytes
        )

    def _present(self, masks: bytes, n: int) -> _Snapshot | None:
        """Whether each of n keys finds its bits set, how many claims the filter holds, and the
        bits read, in one MULTI/EXEC (atomic: no script or command runs between its reads),
        which also checks that the filter is still the one opened. The whole bits in one GET
        when small next to the batch, else (blocked layout) one GETRANGE per distinct block;
        None for a large filter of the standard layout (its bytes are scattered: the script
        reads them). A client alone on the filter reads no bits: its last batch's (_kept) are
        the filter's while the count is the one they go with (else it reads again, bits too):
        the whole GET cost about a third of the server CPU of a batch of new URLs."""
        plan = BitsRead(masks, self._nbytes, self._layout, n)
        if not plan.possible:
            return None
        kept = self._kept if plan.whole and self._alone else None

        def read(bits: bool) -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.hmget(self._meta, "instance", "count")
            pipe.strlen(self._bits)
            pipe.hlen(self._claims_key)
            pipe.hlen(self._records_key)
            if bits:
                plan.queue(pipe, self._bits)
            return pipe.execute()  # type: ignore[no-any-return]

        (found, count), length, held, records, *data = retrying(
            lambda: read(kept is None), f"{self._what}: read"
        )
        self._alive(found, length)
        if kept is not None and kept[0] != (count or b""):
            kept = None  # another client wrote: read again, with the bits
            (found, count), length, held, records, *data = retrying(
                lambda: read(True), f"{self._what}: read"
            )
            self._alive(found, length)
        count = count or b""
        self._alone = count == self._expect
        bits = kept[1] if kept is not None else plan.bits(data)
        held = int(held) + int(records)
        return _Snapshot(plan.present(bits), held, bits, plan.number, count)

    def _claims_of(self, fps: list[bytes]) -> tuple[list[bytes | None], int | None]:
        """The claims of fps and the server's time (ms; None on a Redis Cluster, whose
        transactions take keyed commands only), in one MULTI/EXEC that checks the filter too."""
        clock = not redis_store.is_cluster(self._client)

        def read() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.hget(self._meta, "instance")
            pipe.strlen(self._bits)
            if clock:
                pipe.time()
            pipe.hmget(self._claims_key, fps)
            pipe.hgetall(self._records_key)
            return pipe.execute()  # type: ignore[no-any-return]

        replies = retrying(read, f"{self._what}: read claims")
        self._alive(replies[0], replies[1])
        now = server_ms(replies[2]) if clock else None
        values: list[bytes | None] = replies[-2]
        if replies[-1]:
            recorded = recorded_claims(replies[-1].values(), set(fps), FP_BYTES)
            values = [
                v if v is not None else recorded.get(fp) for v, fp in zip(values, fps, strict=True)
            ]
        return values, now

    def _undecided(self, snapshot: _Snapshot, fps: list[bytes], priority: int) -> list[int]:
        """The keys a native read cannot answer seen, for the script to decide: those with a
        bit missing, or a claim that is not plainly seen (claim_seen). The others are seen:
        their bits are set and stay set (bits are never cleared while the instance lives), so
        the answer holds at the moment their claims were read."""
        found = [i for i, bit in enumerate(snapshot.present) if bit]
        if snapshot.held and found:
            values, now = self._claims_of([fps[i] for i in found])
            found = seen_by_claims(found, values, self._claims.owner, priority, now)
        seen = set(found)
        return [i for i in range(len(fps)) if i not in seen]

    def acknowledge(self) -> int:
        """As Claimant.acknowledge; claims younger than half a lease (the usual case: each
        batch's, just before add_many returns) are deleted unread (none can have been taken
        over): when all of them are in this client's records, by one native HDEL of those;
        else by one script call with one argument each and no per-key Lua work."""
        records, loose = self._records, self._loose
        self._records, self._loose = {}, False
        if not records or loose or not self._claims.young():
            return self._acknowledge_by(self._drop)  # the script expands records first
        self._usable()
        fps = self._claims.take()
        ids = list(records)

        def hdel() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for field in ids:
                pipe.hdel(self._records_key, field)
            return pipe.execute()  # type: ignore[no-any-return]

        deleted = retrying(hdel, f"{self._what}: ack")
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
            self._records, self._loose = {}, False  # the script expands them: per key now
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
            return int(held) + sum(len(record_parts(v)[1]) // FP_BYTES for v in records)

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
        return int(count or 0)

    def stats(self) -> FilterStats:
        count = len(self)
        p = self._params
        return FilterStats(
            kind="redis-bloom",
            capacity=p["capacity"],
            count=count,
            bits=self.nbits,
            error_rate=p["error_rate"],
            estimated_error_rate=sizing.error_rate_at(p["layout"], self.nbits, self.k, count),
            details={"name": self.name, "k": self.k, "layout": p["layout"], "hash": p["hash"]},
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
        parts = (
            self._bits,
            self._meta,
            self._claims_key,
            self._records_key,
            redis_store.key(self.name, "kind"),
        )
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
