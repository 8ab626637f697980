"""The rounds of a batch: each leaf's queue of keys sent to the store until every leaf has
answered, through splits and other clients' claims (the engine of splittable/filter.py)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from urlseen.errors import RemoteError
from urlseen.splittable.split import COMPACT_STEPS, LeafSplits
from urlseen.splittable.tree import MISSING, LeafAnswer, LeafOp, LeafReply

REROUTE_SECONDS = 60.0  # how long a batch waits for a stuck split before RemoteError
MAX_SPREAD = 1024  # a round sends a leaf up to this many times its room if its keys are seen


@dataclass
class _Round:
    """What one round's replies leave to do: per leaf, the keys to send again (in order) and
    those of them past the leaf's room; the leaves that moved (sealed, split), went missing
    or filled up; and, for ADD, the keys sent and those that may have been new."""

    again: dict[str, list[int]] = field(default_factory=dict)
    later: dict[str, list[int]] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    full: list[str] = field(default_factory=list)
    compact: list[str] = field(default_factory=list)
    sent: int = 0
    maybe_new: int = 0

    def waiting(self) -> bool:
        """Whether some keys wait on another client's claims, not just past a room."""
        rerouted = self.moved + self.missing
        return any(
            leaf not in rerouted and len(idx) > len(self.later.get(leaf, ()))
            for leaf, idx in self.again.items()
        )

    def give_up_waiting(self) -> None:
        """Keys whose claims outlived the wait are answered seen: only the rerouted and
        deferred keys are sent again."""
        rerouted = self.moved + self.missing
        self.again = {
            leaf: idx if leaf in rerouted else self.later.get(leaf, [])
            for leaf, idx in self.again.items()
        }


class LeafRounds(LeafSplits):
    """The batch engine of a SplittableBloomFilter: the filter gives its capacities per leaf
    and the store's routing state (LeafSplits)."""

    _keys_per_maybe_new: float
    _compact_marks: dict[str, int]  # per leaf, its count // its compaction step, as last seen

    def _follow(
        self,
        held: Mapping[str, Sequence[bytes]],
        op: LeafOp,
        records: Mapping[str, Sequence[int]] | None = None,
    ) -> int:
        """The store's claims' routing (tree.Follow): `op` on fingerprints from the leaves
        they were answered in, through the splits since; how many answered False."""
        fps: list[bytes] = []
        marks: list[int] = []
        queues: dict[str, list[int]] = defaultdict(list)
        for leaf, part in held.items():
            queues[leaf] = list(range(len(fps), len(fps) + len(part)))
            fps += part
            marks += records[leaf] if records is not None else []
        if not fps:
            return 0
        values = [int.from_bytes(fp, "little") for fp in fps]
        answers = self._each_leaf(fps, values, queues, op, marks if records is not None else None)
        return answers.count(False)

    def _each_leaf(
        self,
        fps: list[bytes],
        values: list[int],
        queues: dict[str, list[int]],
        op: LeafOp,
        marks: list[int] | None = None,
    ) -> list[bool]:
        """One LeafOp on each fingerprint in the leaf its queue is in, until every leaf has
        answered: through splits (rerouted), and for ADD through other clients' claims (asked
        again, about one lease at most). `marks`: per key, the number the store gave it for
        a DROP.

        Keys wait in a queue per leaf, in batch order (a repeat within the batch follows its
        first): a round sends each leaf the head of its queue (_take_round), and only the keys
        of a leaf that split or grew since are routed again, from it down (_reroute), so a
        batch into small, growing leaves costs rounds in proportion to its splits, not to the
        batch times them."""
        answers = [False] * len(fps)
        deadline = time.monotonic() + REROUTE_SECONDS
        stuck_wait = 0.005
        while queues:
            self._reroute(queues, values)
            groups, rooms = self._take_round(queues, op)
            records = None
            if marks is not None:
                records = {leaf: [marks[i] for i in idx] for leaf, idx in groups.items()}
            replies = self._store.check_and_add(
                {leaf: [fps[i] for i in idx] for leaf, idx in groups.items()}, op, records, rooms
            )
            done = self._read_round(groups, replies, answers, op)
            if done.sent:  # ADD only: an acknowledgement's answers say nothing of what is seen
                spread = done.sent / max(1, done.maybe_new)
                self._keys_per_maybe_new = min(MAX_SPREAD, max(1.0, spread))
            for leaf in done.full:
                self._split(leaf)
            for leaf in done.compact:
                self._compact(leaf)
            if done.waiting() and not self._store.wait(self._follow):
                done.give_up_waiting()  # claims that outlive the wait: answered seen
            if done.moved or done.missing:
                stuck_wait = self._after_moves(done, deadline, stuck_wait)
            for leaf, idx in done.again.items():  # the head of the leaf's queue: before the rest
                queues[leaf] = idx + queues[leaf]
            queues = defaultdict(list, {leaf: idx for leaf, idx in queues.items() if idx})
        return answers

    def _reroute(self, queues: dict[str, list[int]], values: list[int]) -> None:
        """Move the queues of nodes that split or grew since to the leaves below them, in
        order: each child's queue stays in order."""
        splits = self._tree.splits
        for node in [leaf for leaf in queues if leaf in splits]:
            for i in queues.pop(node):
                leaf = node
                while leaf in splits:
                    leaf = splits[leaf].child(values[i])
                queues[leaf].append(i)

    def _take_round(
        self, queues: dict[str, list[int]], op: LeafOp
    ) -> tuple[dict[str, list[int]], dict[str, int] | None]:
        """The head of each leaf's queue this round sends, and for ADD each leaf's room.

        An ADD may add a leaf's room (capacity / 16) per round, the most one call can overfill
        it (see sizing.params, leaf_write_limit); keys found seen don't count, so a round
        sends as many more as the last one found seen (up to MAX_SPREAD times the room) and
        the store defers those past the room: a batch of mostly repeats into a small leaf
        takes a few rounds, not one per room's worth."""
        groups: dict[str, list[int]] = {}
        rooms: dict[str, int] | None = {} if op == LeafOp.ADD else None
        for leaf, idx in queues.items():
            send = len(idx)
            if rooms is not None:
                rooms[leaf] = max(1, self._capacity(leaf) // 16)
                send = int(rooms[leaf] * self._keys_per_maybe_new)
            groups[leaf], queues[leaf] = idx[:send], idx[send:]
        return groups, rooms

    def _read_round(
        self,
        groups: Mapping[str, list[int]],
        replies: Mapping[str, LeafReply],
        answers: list[bool],
        op: LeafOp,
    ) -> _Round:
        """Each leaf's reply into the batch's answers, and what is left to do."""
        done = _Round()
        for leaf, idx in groups.items():
            reply = replies[leaf]
            if not isinstance(reply, LeafAnswer):
                done.again[leaf] = idx
                (done.missing if reply is MISSING else done.moved).append(leaf)
                continue
            for i, new in zip(idx, reply.new, strict=True):
                answers[i] = new
            if reply.pending or reply.deferred:
                done.again[leaf] = [idx[j] for j in sorted(reply.pending + reply.deferred)]
                done.later[leaf] = [idx[j] for j in reply.deferred]
            if op == LeafOp.ADD:
                done.sent += len(idx)
                done.maybe_new += sum(reply.new) + len(reply.pending) + len(reply.deferred)
                if reply.count >= self._capacity(leaf):
                    done.full.append(leaf)
                elif self._compact_due(leaf, reply.count):
                    done.compact.append(leaf)
        return done

    def _compact_due(self, leaf: str, count: int) -> bool:
        """Whether the leaf's count passed a multiple of 1/COMPACT_STEPS of its capacity since
        this client last saw it (each client sees some of a shared leaf's adds: the
        compaction checks how many of its fingerprints are raw)."""
        step = max(1, self._capacity(leaf) // COMPACT_STEPS)
        mark, last = count // step, self._compact_marks.get(leaf)
        self._compact_marks[leaf] = mark
        return last is not None and mark > last

    def _after_moves(self, done: _Round, deadline: float, stuck_wait: float) -> float:
        """Reload the tree after leaves answered MOVED or MISSING. A missing leaf still in
        the tree is lost; a sealed leaf still in it has a split on, or one whose splitter
        died: finish it (or wait for it, up to the deadline). The next wait between tries."""
        version = self._tree.version
        self._reload()
        live = {leaf for leaf, _ in self._tree.leaves()}
        for leaf in done.missing:
            # not split and expired, or a node the tree no longer has (it went back): lost
            if leaf in live or leaf not in self._tree.splits:
                raise self._lost_leaf(leaf)
        if self._tree.version != version or done.missing:  # missing: split, routed below
            return stuck_wait
        for leaf in done.moved:
            self._split(leaf)
        if time.monotonic() > deadline:
            raise RemoteError(
                f"splittable filter {self.name!r}: a split did not finish within "
                f"{REROUTE_SECONDS:.0f} s"
            )
        time.sleep(stuck_wait)
        return min(stuck_wait * 2, 0.5)
