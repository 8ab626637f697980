"""Native reads of Bloom bits in Redis: what answers repeats without a script (issue 17).

A batch script's per-key work in Lua costs the server several times pipelined SADD's CPU, and
on a crawl most keys were seen. Bits are never cleared while a filter (or a splittable
filter's leaf) lives, so a key whose bits a MULTI/EXEC snapshot finds set is seen at that
moment, unless its claim says otherwise (redis_claims.claim_seen, the twin of claims.lua's
rule); only the other keys need the script. Shared by RedisBloomFilter and the splittable
filter's Redis leaves (shared/leaves.py), which queue these reads into their own
transactions beside the checks their scripts make.

The same snapshot decides the other keys (the optimistic path, blocked layout): the client
sends bloom_batch.lua its answers and the blocks they change (optimistic_args), the script
takes them if nothing it relies on changed since the read, and says when it had to decide the
batch itself instead (Optimism: a client then stops sending them for a while).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from urlseen import _core
from urlseen.shared.claims import claim_seen

WHOLE_PER_KEY = 1024  # a native read GETs the whole bits up to this many bytes per key: a
# GETRANGE in MULTI costs the server ~0.75 us, a GET ~0.4-0.75 ns per byte (measured, 7.0.15)


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
FELL_BACK = b"F"  # bloom_batch.lua's reply ends with it when it could not take a client's own
# answers (a block changed since the read): the client then decides by the script for a while


REWRITE_PER_BLOCK = 4096  # bytes of whole bits staged instead of each changed block written (a
# SETRANGE from Lua, ~1-2.3 us with its slicing, against ~0.37 ns per byte of a staged rewrite:
# SET of the stage, RENAME over the bits; measured on one server under load, break-even ~6 KB
# per block): bloom_batch.lua's rewrite
STAGED = b"S"  # optimistic_args's third argument for a rewrite: stage `work` (bloom_batch.lua)


def optimistic_args(
    masks: bytes,
    bits: bytes,
    number: dict[int, int] | None,
    count: bytes,
    rewrite: bool = False,
    work: bytearray | None = None,
) -> list[bytes]:
    """ADD's ARGV[14..17] (bloom_batch.lua, agreed()) for the keys of `masks`, decided from the
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
class Optimism:
    """Whether a client sends the optimistic arguments: always, unless its last STREAK tries
    fell back (another client wrote a block between our read and our script: a fleet writing
    one small filter or leaf). A fallback costs little more than no try (the arguments and a
    comparison; the script then decides as without them) and an agreed try saves the Lua work
    per key, so a client keeps trying until fallbacks come in a row; then it sends none for
    PAUSE_FIRST batches, doubled after each further fallback up to PAUSE_MAX, back to the
    start when a try agrees. (benchmarks/redis_optimism_ab.py, 16 clients on one small filter:
    pausing after every fallback cost RedisBloomFilter more server CPU than never pausing in 3
    rounds of 3; this rule cost less in 2 of 3; noisy, see benchmarks/REDIS.md.)"""

    skip: int = 0
    pause: int = PAUSE_FIRST
    streak: int = 0
    fallbacks: int = 0  # batches that fell back, in all (for tests and measurements)

    def now(self) -> bool:
        """Whether this batch sends them (each call is one batch)."""
        if self.skip:
            self.skip -= 1
            return False
        return True

    def heard(self, tried: int, fell: int) -> None:
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


def fell_back(reply: bytes) -> tuple[bytes, bool]:
    """A script's reply without its fallback mark (FELL_BACK), and whether it had one."""
    if reply.endswith(FELL_BACK):
        return reply[: -len(FELL_BACK)], True
    return reply, False
