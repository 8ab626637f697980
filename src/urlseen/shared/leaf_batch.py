"""Check-and-add on a splittable filter's Redis leaves: a batch's script calls.

A batch's repeats are answered from a native snapshot of its leaves (shared/leaf_reads.py); the
rest go in one script call for all leaves on a single server (dsbf_batch.lua, a loop over the
Bloom filter's batch script in its leaf mode), or one per leaf on a Cluster, side by side. A
call claims each leaf's new keys in one record (one field of `:records`); a young
acknowledgement deletes it whole (DROP), with no claim work per key. Claims answer a call sent
again after a lost reply as the first time; a split's copies leave receipts.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from urlseen import _core
from urlseen.bloom.bloom import LAYOUT_CODES
from urlseen.shared import client as redis_store
from urlseen.shared import scripts
from urlseen.shared.bits import NATIVE_FROM, NativeReads, fell_back, optimistic_args
from urlseen.shared.claims import first_of_each
from urlseen.shared.client import RECEIPT_SECONDS, retrying
from urlseen.shared.leaf_reads import LeafReads, Read
from urlseen.shared.marks import WriteMarks
from urlseen.shared.scripts import LEAF_BATCH, Answer, claim_fields, leaves_argv, lua_text
from urlseen.splittable.tree import (
    MISSING,
    MOVED,
    LeafAnswer,
    LeafOp,
    LeafReply,
    write_limit,
)

_MASKED = (LeafOp.CONTAINS, LeafOp.ADD, LeafOp.COPY)  # the operations that read or set bits
NO_CLAIM = ("", 0, 0, 1)  # the claim arguments of a call that claims nothing


class LeafCall(NamedTuple):
    """One leaf's call of leaf_batch.lua: its KEYS and own ARGV by name, its tail."""

    keys: dict[str, str]
    own: dict[str, Any]
    extra: list[Any]


@dataclass
class _Plan:
    """What a batch asks the scripts, per leaf: the keys' positions to send (`ask`), the
    snapshot's answers and reads, the repeats within the call (position -> its first's), and
    the keys past the leaf's room (deferred)."""

    ask: dict[str, list[int]]
    optimistic: bool = False
    seen: dict[str, LeafAnswer] = field(default_factory=dict)
    reads: dict[str, Read] = field(default_factory=dict)
    repeats: dict[str, dict[int, int]] = field(default_factory=dict)
    deferred: dict[str, list[int]] = field(default_factory=dict)


class LeafBatches(LeafReads):
    """Check-and-add of a batch on Redis leaves (see module docstring); the claims whose
    arguments it sends are RedisLeafStore's."""

    def __init__(self, redis: Any, name: str, receipt_seconds: int = RECEIPT_SECONDS) -> None:
        super().__init__(redis, name)
        self.receipt_seconds = receipt_seconds
        self._batch_script = redis_store.load_script(self.client, "leaf_batch.lua")
        self._multi_script = self.client.register_script(_multi_source())
        self.native_from = NATIVE_FROM
        self.native_copy = True  # a split's copies set the bits in the client (_fill)
        self.optimistic = True  # (blocked layout) the snapshot decides new keys too
        self._native_reads = NativeReads()
        self._marks = WriteMarks()  # this client's write mark per leaf (shared/marks.py)

    def _masks(self, leaf: str, fps: list[bytes]) -> bytes:
        p = self._params
        assert p is not None, "load or create the tree first"
        nbits = self._sizes.get(leaf, p["leaf_bits"])
        layout = LAYOUT_CODES[p["layout"]]
        return _core.byte_masks(fps, nbits, p["k"], layout, p["seed"], p["hash_id"])

    def _leaf_call(
        self, leaf: str, fps: list[bytes], op: LeafOp, masks: bytes | None, extra: list[Any]
    ) -> LeafCall:
        """One leaf's call of leaf_batch.lua: its KEYS, its own ARGV (masks, fingerprints, write
        limit, length of the bits) and the operation's tail `extra` (ADD's optimistic
        arguments; DROP's pairs, _drop_pairs, with no fingerprints); the ARGV every leaf
        shares are _shared_args."""
        p = self._params
        assert p is not None, "load or create the tree first"
        nbits = self._sizes.get(leaf, p["leaf_bits"])
        if masks is None:
            masks = self._masks(leaf, fps) if op in _MASKED else b""
        meta, bits, fps_key, claims = self._keys(leaf)
        # A receipt only for COPY: claims answer a resent ADD; the others write nothing to keep
        receipt = redis_store.tagged(f"{self._escaped}:leaf:{leaf}", f"receipt:{uuid.uuid4().hex}")
        keys = {"bits": bits, "meta": meta, "receipt": receipt, "claims": claims,
                "fps": fps_key, "records": self._records(leaf)}  # fmt: skip
        own = {"masks": masks, "fps": b"".join(fps), "write_limit": write_limit(p, nbits),
               "nbytes": nbits // 8}  # fmt: skip
        return LeafCall(keys, own, extra)

    def _shared_args(self, op: LeafOp, claim: Sequence[Any]) -> dict[str, Any]:
        p = self._params
        assert p is not None, "load or create the tree first"
        ttl = self.receipt_seconds if op == LeafOp.COPY else 0
        return {"op": op, "receipt_ttl": ttl, "layout": p["layout"], "fp_bytes": p["fp_bytes"],
                "instance": self._instance, **claim_fields(claim)}  # fmt: skip

    def _check_and_add(
        self,
        groups: Mapping[str, list[bytes]],
        op: LeafOp,
        claim: Sequence[Any],
        records: Mapping[str, Sequence[int]] | None = None,
        room: Mapping[str, int] | None = None,
    ) -> dict[str, LeafReply]:
        """The op on each leaf's fingerprints, with these claim arguments. An ADD first
        answers, from one native snapshot, the keys found seen; the rest, up to the leaf's
        room (the rest deferred), go to the scripts (_run). With the blocked layout each
        leaf's call carries the snapshot's answers and blocks (optimistic_args), unless most
        leaves of a recent batch fell back (bits.OptimisticBackoff)."""
        groups = {leaf: fps for leaf, fps in groups.items() if fps}
        filled: dict[str, LeafReply] = {}
        if op == LeafOp.COPY and self.native_copy:
            filled = self._fill(groups)
            groups = {leaf: fps for leaf, fps in groups.items() if leaf not in filled}
        masks = {}
        if op in _MASKED:
            masks = {leaf: self._masks(leaf, fps) for leaf, fps in groups.items()}
        plan = _Plan({leaf: list(range(len(fps))) for leaf, fps in groups.items()})
        if op == LeafOp.ADD:
            self._plan_add(plan, groups, masks, claim, room or {})
        calls = self._script_calls(plan, groups, op, masks, claim, records or {})
        replies = dict(zip(calls, self._run(calls, op, claim), strict=True))
        for leaf, call in calls.items():
            if call.own["mark"] != "" and replies[leaf] != scripts.MISSING:
                self._marks.advanced(call.keys["meta"])
        out: dict[str, LeafReply] = dict(filled)
        tried = fallbacks = 0
        for leaf, fps in groups.items():
            if leaf not in replies:  # every key answered seen by the snapshot
                out[leaf] = plan.seen[leaf]
                continue
            reply = replies[leaf]
            if calls[leaf].extra and op == LeafOp.ADD:
                reply, back = fell_back(reply)
                tried, fallbacks = tried + 1, fallbacks + back
            out[leaf] = self._answer(plan, leaf, len(fps), reply, op)
        if op == LeafOp.ADD:
            self._native_reads.tried(tried, fallbacks)
            self._learn_seen_share(out)
        return out

    def _plan_add(
        self,
        plan: _Plan,
        groups: Mapping[str, list[bytes]],
        masks: Mapping[str, bytes],
        claim: Sequence[Any],
        room: Mapping[str, int],
    ) -> None:
        """An ADD's plan: the keys a native snapshot finds seen are not asked; of the rest,
        each fingerprint's first only (a repeat sent to the script would make its call decide
        keys found present, expanding the leaf's records into claims one by one), and up to
        the leaf's room of them (the rest, and their repeats, deferred)."""
        p = self._params
        assert p is not None, "load or create the tree first"
        blocked = p["layout"] == "blocked"
        read_first, plan.optimistic = self._native_reads.start(
            self.optimistic and blocked, self.native_from
        )
        if read_first:
            plan.seen, plan.reads = self._native(groups, masks, str(claim[0]), int(claim[1]))
            for leaf, answer in plan.seen.items():
                plan.ask[leaf] = [j for j, new in enumerate(answer.new) if new]
        for leaf, idx in plan.ask.items():
            plan.ask[leaf], plan.repeats[leaf] = first_of_each(groups[leaf], idx)
        for leaf, limit in room.items():
            idx = plan.ask.get(leaf, [])
            if len(idx) > max(1, limit):
                plan.ask[leaf], held = idx[: max(1, limit)], set(idx[max(1, limit) :])
                held |= {j for j, first in plan.repeats[leaf].items() if first in held}
                plan.deferred[leaf] = sorted(held)

    def _script_calls(
        self,
        plan: _Plan,
        groups: Mapping[str, list[bytes]],
        op: LeafOp,
        masks: Mapping[str, bytes],
        claim: Sequence[Any],
        records: Mapping[str, Sequence[int]],
    ) -> dict[str, LeafCall]:
        """Each leaf's script call for the keys its plan asks (none: no call)."""
        calls = {}
        for leaf, idx in plan.ask.items():
            if not idx:
                continue
            whole = len(idx) == len(groups[leaf])
            fps = groups[leaf] if whole else [groups[leaf][j] for j in idx]
            part = masks.get(leaf) if whole else None
            extra: list[Any] = []
            if plan.optimistic and leaf in plan.reads:
                part = part or self._masks(leaf, fps)
                extra = optimistic_args(part, *plan.reads[leaf])
            if op == LeafOp.DROP:
                extra = _drop_pairs(str(claim[0]), fps, records.get(leaf))
                fps = []
            calls[leaf] = call = self._leaf_call(leaf, fps, op, part, extra)
            call.own["mark"] = self._marks.expected(call.keys["meta"]) if claim[0] else ""
        return calls

    @staticmethod
    def _answer(plan: _Plan, leaf: str, n_keys: int, reply: Any, op: LeafOp) -> LeafReply:
        """A leaf's reply as its answer: per key new, pending (and repeats of pending keys),
        claimed one by one (OWN), deferred; a DROP's: how many claims it deleted."""
        if reply in (scripts.MOVED, scripts.MISSING):
            return MOVED if reply == scripts.MOVED else MISSING
        if op == LeafOp.DROP:  # how many claims it deleted: the rest were not there
            deleted = int(reply)
            return LeafAnswer([j < deleted for j in range(n_keys)], 0)
        idx, n = plan.ask[leaf], len(plan.ask[leaf])
        new = [False] * n_keys
        for j, c in zip(idx, reply[:n], strict=True):
            new[j] = c in (Answer.NEW, Answer.OWN)
        pending = [idx[j] for j, c in enumerate(reply[:n]) if c == Answer.PENDING]
        per_key = [idx[j] for j, c in enumerate(reply[:n]) if c == Answer.OWN]
        repeats = plan.repeats.get(leaf)
        if repeats:  # a repeat within the call: seen, or pending as its first is
            waits = set(pending)
            pending = sorted(pending + [j for j, a in repeats.items() if a in waits])
        deferred = plan.deferred.get(leaf, [])
        return LeafAnswer(new, int(reply[n:] or 0), pending, per_key, deferred)

    def _learn_seen_share(self, out: Mapping[str, LeafReply]) -> None:
        """How many of an ADD's keys were found seen: the next ADD reads natively first if
        their share reaches native_from."""
        answers = [a for a in out.values() if isinstance(a, LeafAnswer)]
        total = sum(len(a.new) - len(a.deferred) for a in answers)
        seen_keys = sum(a.new.count(False) - len(a.deferred) for a in answers)
        self._native_reads.answered(seen_keys, total)

    def _run(self, calls: Mapping[str, LeafCall], op: LeafOp, claim: Sequence[Any]) -> list[Any]:
        """The scripts' answers for each leaf's call, in order: on a single server one call
        for all leaves (dsbf_batch.lua: the ARGV every leaf shares, then each leaf's own and
        its tail, counted), on a Cluster one per leaf, side by side."""
        if not calls:
            return []
        what = f"{self._what}: {op.name.lower()}"
        shared = self._shared_args(op, claim)
        if not self._cluster:
            keys = [call.keys[name] for call in calls.values() for name in LEAF_BATCH.keys]
            args = leaves_argv(shared, [(call.own, call.extra) for call in calls.values()])
            return list(retrying(functools.partial(self._multi_script, keys=keys, args=args), what))

        def one(call: LeafCall) -> Any:
            keys, args = LEAF_BATCH.call(call.keys, {**shared, **call.own}, call.extra)
            return retrying(functools.partial(self._batch_script, keys=keys, args=args), what)

        if len(calls) == 1:
            return [one(next(iter(calls.values())))]
        # one script per leaf on its own node: the calls run side by side
        return list(self._pool().map(one, calls.values()))


def _drop_pairs(owner: str, fps: list[bytes], calls: Sequence[int] | None) -> list[Any]:
    """A leaf's DROP arguments (leaf_batch.lua): per call whose record holds some of fps
    (calls: per key its call id, 0 or None for a key claimed one by one), the record's field
    and those keys packed; the keys claimed one by one after "" the same way."""
    groups: dict[int, list[bytes]] = {}
    for fp, call in zip(fps, calls or [0] * len(fps), strict=True):
        groups.setdefault(call, []).append(fp)
    out: list[Any] = []
    for call, part in groups.items():
        out += [f"{owner} {call}" if call else "", b"".join(part)]
    return out


def _multi_source() -> str:
    """dsbf_batch.lua's source: what leaf_batch.lua needs in front, leaf_batch.lua as the
    function leaf_batch, then the loop over the leaves (one leaf's rules stay in
    leaf_batch.lua alone)."""
    needs = "\n".join(lua_text(name) for name in LEAF_BATCH.needs)
    batch, multi = lua_text("leaf_batch.lua"), lua_text("dsbf_batch.lua")
    return f"{needs}\nlocal function leaf_batch(KEYS, ARGV)\n{batch}\nend\n{multi}"
