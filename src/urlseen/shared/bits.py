"""Native reads of Bloom bits in Redis: the one path that answers repeats without a script and
decides the other keys for it, for RedisBloomFilter (shared/bloom.py) and the splittable
filter's Redis leaves (shared/leaves.py).

A batch script's work per key in Lua costs the server several times pipelined SADD's CPU, and
on a crawl most keys were seen. Bits are never cleared while a filter (or a leaf) lives, so a
key whose bits a MULTI/EXEC snapshot finds set is seen at that moment, unless its claim says
otherwise (claims.claim_seen, the client's twin of claims.lua's rule); only the other keys
need the script. A caller queues these reads (BitsRead, ClaimsRead) into its own transactions
beside the checks its script makes, and NativeReads says when a batch reads first.

The same snapshot decides the other keys (the optimistic path, blocked layout): the client
sends the script its answers and the blocks they change (optimistic_args), the script takes
them if nothing it relies on changed since the read, and says when it had to decide the batch
itself instead (OptimisticBackoff: a client then stops sending them for a while).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from urlseen import _core
from urlseen.shared.claims import claim_seen, recorded_claims
from urlseen.shared.scripts import FELL_BACK, STAGED

NATIVE_FROM = 0.5  # a batch reads natively first when this share of the last one was seen
# (native_from: 0 always reads first, above 1 never; benchmarks/redis/cpu.py)
WHOLE_PER_KEY = 1024  # a native read GETs the whole bits up to this many bytes per key, for a
# GETRANGE in MULTI costs the server about as much as a GET of 1-2 KB (benchmarks/redis/cpu.py)


class BitsRead:
    """The reads that tell whether each key of a batch (its byte_masks) finds its bits set in
    a bit string of `nbytes` bytes: the whole string in one GET when small next to the batch,
    else (blocked layout) one GETRANGE per distinct 64-byte block. `possible` is False for a
    large string of the standard layout (its bytes are scattered: a script reads them)."""

    def __init__(self, masks: bytes, nbytes: int, layout: int, n: int) -> None:
        self.masks, self.layout = masks, layout
        self.whole = nbytes <= WHOLE_PER_KEY * n
        self.possible = self.whole or layout == _core.LAYOUT_BLOCKED
        self.bases: list[int] = []
        self.index: bytes | None = None
        if self.possible and not self.whole:
            bases = _core.mask_blocks(masks)
            number: dict[int, int] = {}
            for base in bases:
                number.setdefault(base, len(number))
            self.index = struct.pack(f"<{len(bases)}I", *[number[b] for b in bases])
            self.bases = list(number)

    @property
    def replies(self) -> int:
        """How many replies queue() adds to a pipeline."""
        return 1 if self.whole else len(self.bases)

    def queue(self, pipe: Any, key: str) -> None:
        """Queue the reads of the bit string `key` into a pipeline (a MULTI/EXEC)."""
        if self.whole:
            pipe.get(key)
        for base in self.bases:
            pipe.getrange(key, base, base + 63)

    def bits(self, data: Sequence[bytes | None]) -> bytes:
        """The bits the replies of queue() (in order) read: the whole string, or the blocks one
        after another in the order of `bases`."""
        if self.whole:
            return data[0] or b""
        return b"".join((d or b"").ljust(64, b"\0") for d in data)

    @property
    def number(self) -> dict[int, int] | None:
        """Where each block read sits in bits() (block offset -> its place); None for the
        whole string."""
        return None if self.whole else {base: i for i, base in enumerate(self.bases)}

    def present(self, bits: bytes) -> bytes:
        """Per key, 1 if the bits read (bits()) set all its bits."""
        return _core.masks_present(self.masks, self.layout, bits, self.index)


def server_ms(reply: Sequence[int]) -> int:
    """The server's clock (TIME's reply) in ms, as claims.lua reads it."""
    return int(reply[0]) * 1000 + int(reply[1]) // 1000


def seen_by_claims(
    found: list[int],
    values: Sequence[bytes | None],
    owner: str,
    priority: int,
    now_ms: int | None,
) -> list[int]:
    """The keys of `found` (present in the data) whose claims `values` (read in one snapshot
    at the server's time now_ms) answer them seen to `owner` asking at `priority`."""
    return [i for i, v in zip(found, values, strict=True) if claim_seen(v, owner, priority, now_ms)]


_ASCII = bytes.maketrans(b"\x00\x01", b"01")  # masks_apply's answers as the script's


REWRITE_PER_BLOCK = 4096  # bytes of whole bits staged (SET of the stage, RENAME over the bits:
# bloom_batch.lua's rewrite) instead of each changed block written by a SETRANGE from Lua,
# below the break-even of about 6 KB per block (benchmarks/redis/cpu.py)


def optimistic_args(
    masks: bytes,
    bits: bytes,
    number: dict[int, int] | None,
    count: bytes,
    rewrite: bool = False,
    work: bytearray | None = None,
) -> list[bytes]:
    """ADD's optimistic tail (bits.lua, bits_agreed) for the keys of `masks`, decided from the
    `bits` a snapshot read (BitsRead.bits, placed by `number`) when the filter or leaf counted
    `count`: the count, per key "1" new / "0" seen by the script's own rule
    (_core.masks_apply), and the blocks the new keys change, as the batch leaves them (offset,
    4 bytes little-endian, and 64 bytes) and as read. The script takes the answers and writes
    the blocks as they are if no bits were written since (the count) or each block is still as
    read; else it decides the batch itself. `work`, if given, is a copy of `bits` the caller
    keeps: it is left holding the bits as the batch leaves them. With `rewrite` (a client
    likely alone on the filter), `work` and the whole bits read, small next to the blocks
    changed (REWRITE_PER_BLOCK), STAGED instead of the blocks and no block as read: the caller
    stages `work`, which the script takes only if the count is as read."""
    bases = _core.mask_blocks(masks)
    rewrite = rewrite and work is not None  # the caller stages it
    index = None
    if number is not None:
        index = struct.pack(f"<{len(bases)}I", *[number[b] for b in bases])
    work = bytearray(bits) if work is None else work
    said = _core.masks_apply(masks, work, index)
    if rewrite and number is None and bits:
        changed = len({bases[i] for i, new in enumerate(said) if new})
        if len(bits) <= REWRITE_PER_BLOCK * changed:
            return [count, said.translate(_ASCII), STAGED, b""]
    blocks, olds = bytearray(), bytearray()
    done: set[int] = set()
    for i in [i for i, new in enumerate(said) if new]:
        base = bases[i]
        if base not in done:
            done.add(base)
            at = base if number is None else number[base] * 64
            blocks += base.to_bytes(4, "little") + work[at : at + 64]
            olds += bits[at : at + 64]
    return [count, said.translate(_ASCII), bytes(blocks), bytes(olds)]


STREAK = 3  # fallbacks in a row before a pause: at a fleet's usual rate, trying still pays
PAUSE_FIRST, PAUSE_MAX = 4, 256  # batches without the optimistic path after such a streak


@dataclass
class OptimisticBackoff:
    """Whether a client sends the optimistic arguments: always, unless its last STREAK tries
    fell back (another client wrote a block between its read and its script: a fleet writing
    one small filter or leaf). A fallback costs little more than no try (the arguments and a
    comparison; the script then decides as without them) and an agreed try saves the Lua work
    per key, so a client keeps trying until fallbacks come in a row; then it sends none for
    PAUSE_FIRST batches, doubled after each further fallback up to PAUSE_MAX, back to the
    start when a try agrees (benchmarks/redis/)."""

    skip: int = 0
    pause: int = PAUSE_FIRST
    streak: int = 0
    fallbacks: int = 0  # batches that fell back, in all (for tests and measurements)

    def sends(self) -> bool:
        """Whether this batch sends them (each call is one batch)."""
        if self.skip:
            self.skip -= 1
            return False
        return True

    def record(self, tried: int, fell: int) -> None:
        """A batch sent them to `tried` scripts (a RedisBloomFilter's one, or one per leaf) and
        `fell` of them fell back: more than half counts as a fallback."""
        if not tried:
            return
        if 2 * fell <= tried:
            self.streak, self.pause = 0, PAUSE_FIRST
            return
        self.fallbacks += 1
        self.streak += 1
        if self.streak >= STREAK:
            self.skip, self.pause = self.pause, min(self.pause * 2, PAUSE_MAX)

    now = sends  # the names shared/leaves.py calls until it uses NativeReads
    heard = record


class NativeReads:
    """When a batch of check-and-add reads natively first, and sends the optimistic arguments:
    one per filter or leaf store, which keeps `native_from` (read first when at least this
    share of the last batch was seen: 0 always, above 1 never) and `optimistic` (decide the new
    keys from the read too: blocked layout only) where its users set them."""

    def __init__(self) -> None:
        self.backoff = OptimisticBackoff()
        self._seen_share = 1.0

    def start(self, optimistic: bool, native_from: float) -> tuple[bool, bool]:
        """For a new batch: whether it reads first, and whether it sends the optimistic
        arguments (then it reads first), unless the backoff pauses them."""
        send = optimistic and self.backoff.sends()
        return send or self._seen_share >= native_from, send

    def answered(self, seen: int, total: int) -> None:
        """The batch answered `seen` of its `total` keys seen."""
        self._seen_share = seen / total if total else 1.0

    def tried(self, tried: int, fell: int) -> None:
        """The batch sent the optimistic arguments to `tried` scripts, `fell` of which fell
        back (OptimisticBackoff.record)."""
        self.backoff.record(tried, fell)


class ClaimsRead:
    """The read of the claims of the keys a native read found present, queued into a
    MULTI/EXEC beside the caller's checks: the server's time (unless `clock` is False: a Redis
    Cluster's transactions take keyed commands only, and a claim then goes to the script), the
    per-key claims of `fps` (unless `per_key` is False: the caller's snapshot found none) and
    the records of whole calls. A record's claim of a key outranks a per-key one (as in
    batch_claims.lua: only a call that failed before setting its bits leaves both)."""

    def __init__(
        self, claims_key: str, records_key: str, fps: list[bytes], clock: bool, per_key: bool = True
    ) -> None:
        self.claims_key, self.records_key = claims_key, records_key
        self.fps, self.clock, self.per_key = fps, clock, per_key

    def queue(self, pipe: Any) -> int:
        """Queue the reads; how many replies they add."""
        if self.clock:
            pipe.time()
        if self.per_key:
            pipe.hmget(self.claims_key, self.fps)
        pipe.hgetall(self.records_key)
        return 1 + self.clock + self.per_key

    def seen(
        self, found: list[int], replies: Sequence[Any], owner: str, priority: int, width: int
    ) -> list[int]:
        """Of `found` (a key's place per fingerprint of fps), those whose claims, in the replies
        of queue() in order, answer them seen to `owner` asking at `priority` (claim_seen)."""
        now, values = self.values(replies, width)
        return seen_by_claims(found, values, owner, priority, now)

    def values(self, replies: Sequence[Any], width: int) -> tuple[int | None, list[bytes | None]]:
        """The server's time read (None without the clock) and each fingerprint's claim (None:
        none), from the replies of queue() in order."""
        now = server_ms(replies[0]) if self.clock else None
        values: list[bytes | None] = list(replies[-2]) if self.per_key else [None] * len(self.fps)
        if replies[-1]:
            recorded = recorded_claims(replies[-1].values(), set(self.fps), width)
            values = [recorded.get(fp, v) for v, fp in zip(values, self.fps, strict=True)]
        return now, values


def fell_back(reply: bytes) -> tuple[bytes, bool]:
    """A script's reply without its fallback mark (FELL_BACK), and whether it had one."""
    if reply.endswith(FELL_BACK):
        return reply[: -len(FELL_BACK)], True
    return reply, False
