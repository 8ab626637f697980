"""What a splittable filter's Redis leaves answer from reads in the client: the native
snapshot of a batch's leaves (their bits, and the claims of keys found set), and a split's
copies written whole (the children's bits set in the client, then one `fill` per child,
dsbf_leaf.lua).

Bits are never cleared while a leaf lives, so a key whose bits a MULTI/EXEC snapshot finds
set is seen at that moment, unless its claim says otherwise (claims.claim_seen, the twin of
claims.lua's rule): such keys need no script. The same snapshot lets the client decide the
other keys (optimistic_args), which the script takes if nothing it relies on changed since the
read. The reads are shared/bits.py's, as RedisBloomFilter's are.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from typing import Any

from urlseen.bloom.bloom import LAYOUT_CODES
from urlseen.shared.bits import BitsRead, ClaimsRead
from urlseen.shared.client import retrying
from urlseen.shared.leaf_tree import LeafTree
from urlseen.splittable.tree import (
    MISSING,
    MOVED,
    LeafAnswer,
    LeafReply,
    bit_filter,
    write_limit,
)

Read = tuple[bytes, "dict[int, int] | None", bytes]  # a leaf's bits as read, placed, its count


class LeafReads(LeafTree):
    """The reads that answer keys in the client, and the copies written whole."""

    def _native(
        self,
        groups: Mapping[str, list[bytes]],
        masks: Mapping[str, bytes],
        owner: str,
        priority: int,
    ) -> tuple[dict[str, LeafAnswer], dict[str, Read]]:
        """The leaves whose keys a snapshot can answer: per leaf, its answer with the keys
        found seen False and the others True (still to ask), and what it read (the bits, where
        each block sits in them, the count: what optimistic_args decides from). One MULTI/EXEC
        reads every leaf (on a Cluster one per leaf, each in its own slot), the same checks as
        the script first: a leaf missing, of another instance, sealed, at its write limit or
        damaged is left to the script, which answers it as before (FilterLostError, or ask the
        tree). A key found set is seen unless its claim says otherwise (claim_seen): then a second
        snapshot reads those claims (and the leaf's instance again, so that a leaf gone
        meanwhile is not read as one without claims)."""
        p = self._params
        assert p is not None, "load or create the tree first"
        plans: dict[str, BitsRead] = {}
        for leaf, fps in groups.items():
            nbits = self._sizes.get(leaf, p["leaf_bits"])
            plan = BitsRead(masks[leaf], nbits // 8, LAYOUT_CODES[p["layout"]], len(fps))
            if plan.possible:
                plans[leaf] = plan

        def queue(pipe: Any, leaf: str) -> int:
            meta, bits, fps_key, claims = self._keys(leaf)
            pipe.hmget(meta, "instance", "state", "count", "coded", "code_bytes", "rolled_back")
            pipe.strlen(bits)
            pipe.strlen(fps_key)
            pipe.exists(claims, self._records(leaf))  # any claims: per key or in records
            plans[leaf].queue(pipe, bits)
            return 4 + plans[leaf].replies

        replies = self._snapshot(list(plans), queue, "read")
        found: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        reads: dict[str, Read] = {}
        claimed: list[str] = []
        for leaf, reply in replies.items():
            (instance, state, count, coded, code_bytes, marked), length, fps_length, held, *data = (
                reply
            )
            nbits = self._sizes.get(leaf, p["leaf_bits"])
            ok = instance is not None and instance.decode() == self._instance
            ok = ok and state == b"active" and length == nbits // 8 and marked is None
            # anything else (a leaf marked rolled back, a field not a number): the script says
            ok = ok and all(v is not None and v.isdigit() for v in (count, coded or b"0"))
            ok = ok and (code_bytes or b"0").isdigit()
            ok = ok and int(count) < write_limit(p, nbits)
            if not ok:
                continue
            raw = (int(count) - int(coded or 0)) * p["fp_bytes"]
            if int(code_bytes or 0) + raw > fps_length:
                continue
            plan = plans[leaf]
            bits = plan.bits(data)
            present = plan.present(bits)
            found[leaf] = [j for j, bit in enumerate(present) if bit]
            counts[leaf] = int(count)
            reads[leaf] = (bits, plan.number, count)
            if held and found[leaf]:
                claimed.append(leaf)
        if claimed:
            self._judge_claims(claimed, groups, found, owner, priority)
        out = {}
        for leaf, keys in found.items():
            new = [True] * len(groups[leaf])
            for j in keys:
                new[j] = False
            out[leaf] = LeafAnswer(new, counts[leaf])
        return out, reads

    def _judge_claims(
        self,
        leaves: list[str],
        groups: Mapping[str, list[bytes]],
        found: dict[str, list[int]],
        owner: str,
        priority: int,
    ) -> None:
        """Keep in found[leaf] only the keys whose claims answer them seen (claim_seen), from
        one more snapshot of the leaves' claims, records and instances and the server's clock
        (none on a Cluster, whose transactions take keyed commands only: a claim then goes to
        the script)."""
        reads = {
            leaf: ClaimsRead(
                self._keys(leaf)[3],
                self._records(leaf),
                [groups[leaf][j] for j in found[leaf]],
                clock=not self._cluster,
            )
            for leaf in leaves
        }

        def queue(pipe: Any, leaf: str) -> int:
            pipe.hget(self._keys(leaf)[0], "instance")
            return 1 + reads[leaf].queue(pipe)

        width = self._fp_bytes()
        for leaf, reply in self._snapshot(leaves, queue, "read claims").items():
            instance = reply[0]
            if instance is None or instance.decode() != self._instance:
                found[leaf] = []
                continue
            found[leaf] = reads[leaf].seen(found[leaf], reply[1:], owner, priority, width)

    def _fill(self, groups: Mapping[str, list[bytes]]) -> dict[str, LeafReply]:
        """A split's COPY without a loop in Lua (a script's work per copied URL is much of the
        server CPU of a growing filter): one snapshot reads each child's state, count and
        bits, the client sets the copied fingerprints' bits (the same bytes leaf_batch.lua
        would set) and dsbf_leaf.lua's fill writes them back with the fingerprints, if the
        child has not changed since (a child is written only by its splitter until the swap;
        else, and for a child whose bits are not as made, the script copies). A resent fill
        is answered by its token, as a COPY by its receipt."""
        p = self._params
        assert p is not None, "load or create the tree first"

        def queue(pipe: Any, leaf: str) -> int:
            meta, bits, _, _ = self._keys(leaf)
            pipe.hmget(meta, "instance", "state", "count")
            pipe.get(bits)
            return 2

        out: dict[str, LeafReply] = {}
        for leaf, ((instance, state, count), bits) in self._snapshot(
            list(groups), queue, "read child"
        ).items():
            nbits = self._sizes.get(leaf, p["leaf_bits"])
            if instance is None or instance.decode() != self._instance:
                out[leaf] = MISSING
                continue
            if state != b"active" or count is None or bits is None or len(bits) != nbits // 8:
                continue  # the script answers it (moved, or lost)
            buffer = bytearray(bits)
            bit_filter(buffer, nbits, p).update(groups[leaf])
            meta, bits_key, fps_key, _ = self._keys(leaf)
            fps = b"".join(groups[leaf])
            args = ["fill", self._instance, int(count), uuid.uuid4().hex, bytes(buffer), fps,
                    p["fp_bytes"]]  # fmt: skip
            reply = retrying(
                functools.partial(self._leaf_script, keys=[meta, bits_key, fps_key], args=args),
                f"{self._what}: copy",
            )
            if reply == b"X":
                out[leaf] = MISSING
            elif reply == 1:
                out[leaf] = LeafAnswer([True] * len(groups[leaf]), int(count) + len(groups[leaf]))
        return out

    def fill_coded(self, leaf: str, fps: list[bytes], code: bytes) -> LeafReply:
        """Into a fresh child: its bits set in the client (as _fill), written with the code
        by one fill (resent safely: its token). MOVED when the child is not fresh."""
        p = self._params
        assert p is not None, "load or create the tree first"
        meta, bits_key, fps_key, _ = self._keys(leaf)

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(meta, "instance", "state", "count")
            pipe.get(bits_key)
            return list(pipe.execute())

        (instance, state, count), bits = retrying(read, f"{self._what}: read child")
        if instance is None or instance.decode() != self._instance:
            return MISSING
        nbits = self._sizes.get(leaf, p["leaf_bits"])
        if state != b"active" or count != b"0" or bits is None or len(bits) != nbits // 8:
            return MOVED
        buffer = bytearray(bits)
        bit_filter(buffer, nbits, p).update(fps)
        args = ["fill", self._instance, 0, uuid.uuid4().hex, bytes(buffer), b"", p["fp_bytes"],
                code, len(fps)]  # fmt: skip
        keys = [meta, bits_key, fps_key]
        reply = retrying(
            functools.partial(self._leaf_script, keys=keys, args=args), f"{self._what}: copy"
        )
        if reply == b"X":
            return MISSING
        if reply != 1:
            return MOVED
        return LeafAnswer([True] * len(fps), len(fps))
