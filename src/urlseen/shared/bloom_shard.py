"""One shard of a RedisBloomFilter: a Bloom filter of its own in one hash slot.

A shard holds its bits, its meta (instance, count, write marks), its claims and records, and
each client's staged bits, all under one hash tag, so that bloom_batch.lua tests and sets a
batch's keys atomically on the one server that owns the slot. A URL belongs to one shard
(chosen by its hash: shard_of), so a check-and-add of a URL never spans shards, and each
shard keeps the whole single-key protocol: native reads of repeats, the optimistic path, the
staged rewrite of a client alone on it, claims in records, write marks.

A filter of one shard (the default on a single server, and every filter of format 2) keeps
the filter's own keys (urlseen:{name}:bits, ...); the shards of a larger one are tagged by
the name, the shard's number and the filter's instance (so two clients racing to create the
filter never write the same shard keys).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from urlseen import _core
from urlseen.shared import client as redis_store
from urlseen.shared import marks
from urlseen.shared.bits import (
    BitsRead,
    ClaimsRead,
    NativeReads,
    fell_back,
    optimistic_args,
    seen_by_claims,
    server_ms,
)
from urlseen.shared.claims import ask_each_once
from urlseen.shared.client import retrying
from urlseen.shared.marks import marked_ack
from urlseen.shared.scripts import BLOOM_BATCH, STAGED, Answer, Op, claim_fields

FP_BYTES = 16  # a claim's field: the key's digest
STAGE_MS = 60_000  # the expiry of a client's staged bits (renamed or deleted by the next call)


def shard_of(fp: bytes, shards: int) -> int:
    """The shard of a key from its digest: the low 32 bits of its first hash word, which the
    Bloom positions barely use (the block, or each standard index, is the top of a 64x64-bit
    product: us_reduce), scaled to the shard count."""
    return (int.from_bytes(fp[:4], "little") * shards) >> 32


class _Snapshot(NamedTuple):
    """A native read of a batch's bits: per key 1 if its bits were all set; the claims held;
    the bits read (the whole string, or 64-byte blocks placed by `number`: block offset ->
    its place); the shard's count (bloom_batch.lua adds to it whenever it writes bits); the
    per-key claims held (the others are in records)."""

    present: bytes
    held: int
    bits: bytes
    number: dict[int, int] | None
    count_read: bytes
    per_key: int


class BloomShard:
    """One shard's keys and this client's state for it: its script calls, native reads and
    acknowledgements. `owner` is the RedisBloomFilter (its client, script, claims, marks and
    hashing parameters, read at each call)."""

    def __init__(self, owner: Any, tag: str, nbits: int) -> None:
        self._f = owner
        self.nbits = nbits
        self.nbytes = (nbits + 7) // 8
        key = functools.partial(redis_store.tagged, tag)
        self.bits, self.meta = key("bits"), key("meta")
        self.claims_key, self.records_key = key("claims"), key("records")
        # this client's staged whole bits (bloom_batch.lua's rewrite): set, then renamed over
        # the bits by the script or deleted by it; the expiry covers a client that dies between
        self._stage = key(f"stage:{owner._claims.owner}")
        self._keys = {
            "bits": self.bits,
            "meta": self.meta,
            "claims": self.claims_key,
            "records": self.records_key,
            "stage": self._stage,
        }
        self._fields = {
            "instance": owner._instance,
            "nbytes": self.nbytes,
            "fp_bytes": FP_BYTES,
            "layout": owner._params["layout"],
        }
        self._reads = NativeReads()
        # The count the next read finds if no other client writes meanwhile: if it does, this
        # client is likely the only writer (_sole_writer), and may send a small shard's whole
        # bits (optimistic_args) and skip reading them: they are as its last batch left them
        # (_last_bits: that count and those bits; every write of bits adds to the count)
        self._count_after: bytes | None = None
        self._sole_writer = False
        self._last_bits: tuple[bytes, bytes] | None = None
        self._staging: bytes | None = None
        self.records: dict[str, list[bytes]] = {}  # this client's records: field -> keys
        self.per_key_claims = False  # some claims held may be per key, not in those records
        self._claim_gone: list[bool] = []  # the last poll's keys with no claim: acknowledged

    def stored_keys(self) -> list[str]:
        """The shard's keys that stay (stages expire)."""
        return [self.bits, self.meta, self.claims_key, self.records_key]

    def _masks(self, keys: Sequence[Any]) -> bytes:
        f = self._f
        return _core.byte_masks(keys, self.nbits, f.k, f._layout, f.seed, f._hash)

    # -- check-and-add ----------------------------------------------------------------------

    def start(
        self, keys: Sequence[Any], fps: list[bytes], priority: int
    ) -> tuple[list[bool], list[int], Callable[[list[int]], bytes]]:
        """Check-and-add this shard's keys of a batch (fps: their digests) up to the keys
        another client's older claim holds: the answers (True where new), the places of those
        pending keys, and how to ask about some of them again (by their places: the script,
        unless a native read finds them all still pending)."""
        f, masks, answers = self._f, self._masks(keys), [False] * len(keys)
        read_first, send = self._reads.start(f.optimistic, f.native_from)
        snapshot = self._present(masks, len(keys)) if read_first else None
        todo, pending = list(range(len(keys))), []  # pending: another's older claim holds it
        if snapshot is not None:
            todo, pending = self._undecided(snapshot, fps, priority)
        snapshots = [snapshot] if send and snapshot is not None else []

        def script(idx: list[int]) -> bytes:
            part = masks if len(idx) == len(keys) else self._masks([keys[i] for i in idx])
            return self._ask(part, [fps[i] for i in idx], priority, snapshots)

        def ask_again(idx: list[int]) -> bytes:  # keys answered pending: present, polled
            still = self._still_pending([fps[i] for i in idx], priority)
            gone = self._claim_gone
            rest = [i for i, p, g in zip(idx, still, gone, strict=True) if not (p or g)]
            said = iter(script(rest) if rest else b"")
            return bytes(
                Answer.PENDING if p else Answer.SEEN if g else next(said)
                for p, g in zip(still, gone, strict=True)
            )

        if todo:
            for i, c in zip(todo, ask_each_once(todo, fps, script), strict=True):
                if c == Answer.PENDING:
                    pending.append(i)
                else:
                    answers[i] = c == Answer.NEW
        self._reads.answered(answers.count(False), len(keys))
        return answers, pending, lambda idx: ask_each_once(idx, fps, ask_again)

    def _call(
        self, op: Op, masks: bytes, fps: bytes, claim: Sequence[Any], what: str, extra: Any = ()
    ) -> Any:
        """One bloom_batch.lua call; extra: the operation's tail. For the tail's rewrite
        (STAGED), the whole bits in _staging are staged first, in the same round trip."""
        f = self._f
        staged, self._staging = self._staging, None
        if len(extra) < 3 or extra[2] != STAGED:
            staged = None
        fields = {**self._fields, "op": op, "masks": masks, "fps": fps, **claim_fields(claim)}
        fields["mark"] = f._marks.expected(self.meta)
        keys, args = BLOOM_BATCH.call(self._keys, fields, extra)
        call = functools.partial(f._script, keys=keys, args=args)
        if staged is not None:
            client, cluster = f._client, f._cluster
            call = functools.partial(_set_then_call, client, cluster, f._script, staged, keys, args)
        reply = retrying(call, f"{f._what}: {what}")
        f._marks.advanced(self.meta)
        return reply

    def _ask(
        self, masks: bytes, fps: list[bytes], priority: int, snapshots: list[_Snapshot]
    ) -> bytes:
        """One check-and-add call of the script for these keys: their answers (OWN as NEW),
        their claims held. The first call of a batch read natively (snapshots) sends the
        answers and blocks that read decided (optimistic_args)."""
        claims = self._f._claims
        extra: list[bytes] = []
        work = count = None
        if snapshots:
            s = snapshots.pop()
            work = bytearray(s.bits) if s.number is None else None
            extra = optimistic_args(
                masks, s.bits, s.number, s.count_read, rewrite=self._sole_writer, work=work
            )
            count = s.count_read
        claim = claims.args(priority)
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
            self.per_key_claims = True
            answer = answer.replace(bytes([Answer.OWN]), bytes([Answer.NEW]))
        got = [fp for fp, c in zip(fps, answer, strict=True) if c == Answer.NEW]
        if got:
            self.records[f"{claim[0]} {claim[2]}"] = got
        claims.hold(got, priority)
        return answer

    # -- native reads: repeats answered without the script ---------------------------------

    def alive(self, found: bytes | None, length: int) -> None:
        f = self._f
        redis_store.check_alive(
            f._what, self.meta, found, f._instance, self.bits, int(length), self.nbytes
        )

    def _present(self, masks: bytes, n: int) -> _Snapshot | None:
        """Whether each of n keys finds its bits set, how many claims the shard holds, and the
        bits read, in one MULTI/EXEC (atomic: no script or command runs between its reads),
        which also checks that the shard is still the one opened (BitsRead; None when a
        script must read the bits). The only writer of the shard reads no bits: its last
        batch's (_last_bits) are the shard's while the count is the one they go with (else it
        reads again, bits too)."""
        f = self._f
        plan = BitsRead(masks, self.nbytes, f._layout, n)
        if not plan.possible:
            return None
        last = self._last_bits if plan.whole and self._sole_writer else None

        def read(bits: bool) -> list[Any]:
            pipe = f._client.pipeline(transaction=True)
            pipe.hmget(self.meta, "instance", "count", "rolled_back")
            pipe.strlen(self.bits)
            pipe.hlen(self.claims_key)
            pipe.hlen(self.records_key)
            if bits:
                plan.queue(pipe, self.bits)
            return pipe.execute()  # type: ignore[no-any-return]

        (found, count, marked), length, held, records, *data = retrying(
            lambda: read(last is None), f"{f._what}: read"
        )
        self.alive(found, length)
        marks.check_read(f._what, self.meta, marked, count)
        if last is not None and last[0] != (count or b""):
            last = None  # another client wrote: read again, with the bits
            (found, count, marked), length, held, records, *data = retrying(
                lambda: read(True), f"{f._what}: read"
            )
            self.alive(found, length)
        marks.check_read(f._what, self.meta, marked, count)
        count = count or b""
        self._sole_writer = count == self._count_after
        bits = last[1] if last is not None else plan.bits(data)
        held = int(held)
        return _Snapshot(plan.present(bits), held + int(records), bits, plan.number, count, held)

    def _undecided(self, snapshot: _Snapshot, fps: list[bytes], priority: int) -> Any:
        """The keys a native read cannot answer seen, for the script: a bit missing, or a claim
        not plainly seen (ClaimsRead); apart, those another client's older live claim holds
        (the script would say pending: polled). The others are seen: their bits stay set (never
        cleared while the instance lives), so the answer holds when their claims were read."""
        f = self._f
        found = [i for i, bit in enumerate(snapshot.present) if bit]
        held: list[int] = []
        if snapshot.held and found:
            wanted = [fps[i] for i in found]
            per_key = snapshot.per_key > 0  # else records only, unless some came since
            while True:
                claims = ClaimsRead(
                    self.claims_key, self.records_key, wanted, not f._cluster, per_key
                )

                def read(claims: ClaimsRead = claims) -> list[Any]:
                    pipe = f._client.pipeline(transaction=True)
                    pipe.hget(self.meta, "instance")
                    pipe.strlen(self.bits)
                    pipe.hlen(self.claims_key)
                    claims.queue(pipe)
                    return pipe.execute()  # type: ignore[no-any-return]

                replies = retrying(read, f"{f._what}: read claims")
                self.alive(replies[0], replies[1])
                if per_key or not int(replies[2]):
                    break
                per_key = True
            now, values = claims.values(replies[3:], FP_BYTES)
            owner, pairs = f._claims.owner, list(zip(found, values, strict=True))
            held = [i for i, v in pairs if _pending(v, owner, priority, now)]
            found = seen_by_claims(found, values, owner, priority, now)
        skip = {*found, *held}
        return [i for i in range(len(fps)) if i not in skip], held

    def _still_pending(self, fps: list[bytes], priority: int) -> list[bool]:
        """Per key of fps (answered pending), whether it is still held by another client's
        live claim from an older batch, read natively (MULTI/EXEC with the server's time; on a
        Cluster, whose transactions take no TIME, the node's time is read first): the script
        would answer those pending again: a waiting batch asks it about the others only (those
        whose claim is gone are seen: kept in _claim_gone), polling without its work per call."""
        f = self._f
        claims = ClaimsRead(self.claims_key, self.records_key, fps, not f._cluster)
        clock = None
        if f._cluster:  # the shard's node's time, read just before (a claim live then: next poll)
            node = f._client.get_node_from_key(self.meta)
            reply = retrying(lambda: f._client.time(target_nodes=node), f"{f._what}: time")
            clock = server_ms(reply)

        def read() -> list[Any]:
            pipe = f._client.pipeline(transaction=True)
            pipe.hget(self.meta, "instance")
            pipe.strlen(self.bits)
            claims.queue(pipe)
            return pipe.execute()  # type: ignore[no-any-return]

        found, length, *replies = retrying(read, f"{f._what}: read claims")
        self.alive(found, length)  # a filter lost meanwhile has no claims: none is "gone"
        now, values = claims.values(replies, FP_BYTES)
        now = now if clock is None else clock
        self._claim_gone = [v is None for v in values]
        return [_pending(v, f._claims.owner, priority, now) for v in values]

    def contains(self, keys: Sequence[Any]) -> list[bool]:
        """Whether each key is in the shard (read only: claims do not matter)."""
        masks = self._masks(keys)
        snapshot = self._present(masks, len(keys))
        if snapshot is not None:
            return [bit == 1 for bit in snapshot.present]
        answer = self._call(Op.CONTAINS, masks, b"", self._f._claims.args(0), "contains")
        return [c == Answer.SEEN for c in answer]  # every bit was set

    # -- claims -----------------------------------------------------------------------------

    def delete_records(self) -> set[bytes]:
        """Delete this client's records of the shard with one native HDEL each (advancing its
        write mark): the fingerprints of the records found (the others were expanded into
        per-key claims by another call's lookup)."""
        f = self._f
        records, self.records = self.records, {}
        ids = list(records)

        def hdel() -> list[Any]:
            pipe = f._client.pipeline(transaction=True)
            for field in ids:
                pipe.hdel(self.records_key, field)
            marked_ack(pipe, self.meta, f._claims.owner)
            return pipe.execute()  # type: ignore[no-any-return]

        *deleted, mark, instance, marked = retrying(hdel, f"{f._what}: ack")
        alive = functools.partial(self.alive, length=self.nbytes)
        owner = f._claims.owner
        f._marks.acked(f._what, f._client, self.meta, owner, (mark, instance, marked), alive)
        return {fp for field, d in zip(ids, deleted, strict=True) if d for fp in records[field]}

    def drop(self, fps: list[bytes]) -> int:
        """DROP: delete this client's young claims of fps unread (records expanded first);
        how many of fps it did not find."""
        claim = self._f._claims.args(0)
        return len(fps) - int(self._call(Op.DROP, b"", b"", claim, "ack", fps))

    def release(self, op: Op, fps: list[bytes], how: str) -> int:
        """Release this client's claims of fps (op: ACK, ABANDON or RENEW): how many were no
        longer its."""
        answer = self._call(op, b"", b"".join(fps), self._f._claims.args(0), how)
        return int(answer.count(Answer.SEEN))


def _pending(value: bytes | None, owner: str, priority: int, now_ms: int | None) -> bool:
    """Whether claims.lua answers pending for a URL present whose claim is `value`: another
    client's claim, live at now_ms, from an older batch than the asker's (`priority`)."""
    parts = (value or b"").split(b" ")
    if now_ms is None or len(parts) != 4 or not (parts[1].isdigit() and parts[3].isdigit()):
        return False
    holder, prio, deadline = parts[0].decode("ascii", "replace"), int(parts[1]), int(parts[3])
    older = prio < priority or (prio == priority and holder < owner)
    return holder != owner and deadline > now_ms and older


def _count_after(count: bytes, said: bytes) -> bytes:
    """The shard's count (as a snapshot read it: b"" before any write) once a script took
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
