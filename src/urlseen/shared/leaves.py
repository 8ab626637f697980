"""A SplittableBloomFilter's tree and leaves in Redis, single server or Cluster, with the
claims of the answers it gives (urlseen.splittable.tree's LeafStore, shared by many clients).

The store is built in layers, each in its own file: the keys, tree and leaves
(shared/leaf_tree.py), the reads answered in the client (shared/leaf_reads.py), the batches'
script calls (shared/leaf_batch.py), and here the claims: each URL answered new is claimed in
its leaf until acknowledged (shared/claims.py), so it reaches a caller even if the client it
was answered to dies first. The store remembers each claim by its fingerprint and the leaf it
was answered in, and releases claims through the filter's routing (tree.Follow), which follows
the splits since.

Acknowledgements racing a split (copy_claims). A split seals the leaf, then copies its claims
and records into the children, then swaps. A DROP (or any release) is one script call that
deletes in the leaf and, if the leaf is sealed, answers MOVED: the filter then waits for the
swap and releases again in the children. So a release that ran before the seal left nothing
to copy; one that ran after it is repeated in the children once the swap shows them, and the
swap comes after the copy is written there: a copy never outlives its acknowledgement. Records
are copied as records (each child gets, under the same field, the record's keys it routes to),
read with the claims in one MULTI/EXEC: a release on the sealed leaf may expand records into
per-key claims between two separate reads, and a claim read in neither would be lost. A
DROP finding no record (expanded since) deletes its keys' claims one by one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from urlseen.errors import UrlseenError
from urlseen.shared.claims import RELEASE_CHUNK, Claims, HoldsClaims, PendingWait, record_parts
from urlseen.shared.client import RECEIPT_SECONDS, retrying
from urlseen.shared.leaf_batch import NO_CLAIM, LeafBatches
from urlseen.splittable.tree import Follow, LeafAnswer, LeafOp, LeafReply, Split


class RedisLeafStore(HoldsClaims, LeafBatches):
    """LeafStore on a redis-py client (redis.Redis or redis.RedisCluster), with claims.

    A claim is remembered as its handle: the fingerprint, then the id of the leaf it was
    answered in; with the call whose record holds it (0: claimed by a field of its own)."""

    claims = True

    def __init__(
        self,
        redis: Any,
        name: str,
        receipt_seconds: int = RECEIPT_SECONDS,
        lease: float | None = None,
    ) -> None:
        self._claims = Claims(lease)  # checks the lease before connecting
        self.lease_ms = self._claims.lease_ms
        super().__init__(redis, name, receipt_seconds)
        self.owner = self._claims.owner  # write marks (shared/marks.py) under the claims' id
        self.reader_ms = max(self.reader_ms, self.lease_ms)  # announced as it reads the tree
        self._record_calls: dict[bytes, int] = {}  # held handle -> the call whose record claims it
        self._priority: int | None = None  # the running batch's
        self._patience: PendingWait | None = None  # the running batch's wait on others' claims
        self._sent: list[Mapping[str, list[bytes]]] = []  # the running batch's ADDs
        self._held_in_batch: set[bytes] = set()
        self._pending: list[bytes] = []  # the fingerprints the last ADD answered pending

    def check_and_add(
        self,
        groups: Mapping[str, list[bytes]],
        op: LeafOp,
        records: Mapping[str, Sequence[int]] | None = None,
        room: Mapping[str, int] | None = None,
    ) -> dict[str, LeafReply]:
        """The op on each leaf's fingerprints (LeafStore); an ADD claims the keys it answers
        new, at its batch's priority, and remembers them."""
        claims = self._claims
        if op != LeafOp.ADD:
            claim = NO_CLAIM if op == LeafOp.COPY else claims.args(0)
            return self._check_and_add(groups, op, claim, records, room)
        priority = claims.priority() if self._priority is None else self._priority
        claim = claims.args(priority)
        self._sent.append(groups)
        out = self._check_and_add(groups, op, claim, records, room)
        self._hold(groups, out, int(claim[2]), priority)
        self._pending = [  # not handles: a key pending in a leaf may be pending in its child next
            groups[leaf][j]
            for leaf, answer in out.items()
            if isinstance(answer, LeafAnswer)
            for j in answer.pending
        ]
        return out

    def _hold(
        self,
        groups: Mapping[str, list[bytes]],
        out: Mapping[str, LeafReply],
        call: int,
        priority: int,
    ) -> None:
        """Remember the keys an ADD answered new as this client's claims, each with its call
        (0 for those claimed one by one)."""
        handles, width = [], self._fp_bytes()
        for leaf, answer in out.items():
            if not isinstance(answer, LeafAnswer) or not any(answer.new):
                continue
            tag, fps, per_key = leaf.encode(), groups[leaf], set(answer.claimed_per_key)
            for j, new in enumerate(answer.new):
                if new:
                    handle = fps[j] + tag
                    self._record_calls[handle] = 0 if j in per_key else call
                    handles.append(handle)
        self._claims.hold(handles, priority)
        self._claims.answered_new(handle[:width] for handle in handles)
        self._held_in_batch.update(handles)

    @contextlib.contextmanager
    def batch(self, follow: Follow) -> Iterator[None]:
        """One batch of ADDs at its priority. If it fails, its claims are abandoned (their
        lease ends now, best effort): those it knows of, and any key it sent not held from an
        earlier batch, which a call whose every reply was lost may have claimed unknown to it
        (an abandoned claim is new again to every client, this one included)."""
        self._sent, self._held_in_batch, self._patience = [], set(), None

        def abandon(handles: list[bytes]) -> None:
            self._release(handles, LeafOp.ABANDON, follow)

        try:
            with self._claims.batch(abandon) as priority:
                self._priority = priority
                yield
        except BaseException:
            held = set(self._claims.unacked) | self._held_in_batch
            sent = (
                fp + leaf.encode()
                for part in self._sent
                for leaf, fps in part.items()
                for fp in fps
            )
            unknown = [handle for handle in dict.fromkeys(sent) if handle not in held]
            if unknown:
                self._claims.abandon_or_defer(abandon, unknown)
            raise
        finally:
            self._priority, self._sent, self._held_in_batch = None, [], set()

    def wait(self, follow: Follow) -> bool:
        """Keys of the batch wait on other clients' claims: sleep a little before the next
        ask, renewing this client's own claims if due; False once patience is over (about one
        lease: the keys still pending are then answered seen)."""
        if self._patience is None:
            self._patience = self._claims.patience()
        waited = not self._claims.waited_out(self._pending) and self._patience.wait()
        if not waited:  # the keys the last ADD found pending are answered seen
            self._claims.unconfirmed(self._pending)
        handles = self._claims.renewal()
        if handles:
            self._release(handles, LeafOp.RENEW, follow)
        return waited

    def acknowledge(self, follow: Follow) -> int:
        """Release every claim held: claims younger than half a lease (each batch's, just
        before add_many returns) are deleted unread (DROP: per leaf one HDEL of each call's
        record, no work per key), as RedisBloomFilter does; older ones are released one by
        one (ACK). How many another client had taken over meanwhile."""
        calls, self._record_calls = self._record_calls, {}
        claims = self._claims
        if not claims.young():
            return self._release(claims.take(), LeafOp.ACK, follow)
        handles = list(dict.fromkeys(claims.take()))
        return sum(
            self._release(handles[s : s + RELEASE_CHUNK], LeafOp.DROP, follow, calls)
            for s in range(0, len(handles), RELEASE_CHUNK)
        )

    def close(self, follow: Follow) -> None:
        """Abandon the answers never acknowledged (best effort), so the next client to meet
        them takes them at once instead of after the lease."""
        self._claims.close(lambda handles: self._release(handles, LeafOp.ABANDON, follow))
        with contextlib.suppress(UrlseenError):  # a tree gone or rolled back: nothing to free
            self.withdraw()
        self._marks.forget(self.client, self.owner)
        self._tree_marks.forget(self.client, self.owner)

    def _release(
        self,
        handles: Sequence[bytes],
        op: LeafOp,
        follow: Follow,
        calls: Mapping[bytes, int] | None = None,
    ) -> int:
        """Release this client's claims of these handles by op (through the filter's
        routing); with `calls`, a DROP told each key's record. How many were no longer its."""
        width = self._fp_bytes()
        held: dict[str, list[bytes]] = {}
        records: dict[str, list[int]] | None = None if calls is None else {}
        for handle in handles:
            leaf = handle[width:].decode()
            held.setdefault(leaf, []).append(handle[:width])
            if records is not None and calls is not None:
                records.setdefault(leaf, []).append(calls.get(handle, 0))
        return follow(held, op, records) if held else 0

    def copy_claims(self, leaf: str, split: Split) -> None:
        """Copy the sealed leaf's claims into the split's children (before the swap), so
        that claims not yet acknowledged, and those of clients that died, stay claims: per-key
        claims as they are, each record as a record of the same field in every child its keys
        route to, holding those keys. Both read in one MULTI/EXEC, and why a copy never
        outlives an acknowledgement: the module's docstring."""
        per_key, records = self._claims_to_copy(leaf, split)

        def write(pipe: Any, child: str) -> None:
            if child in per_key:
                pipe.hset(self._keys(child)[3], mapping=per_key[child])
            if child in records:
                pipe.hset(self._records(child), mapping=records[child])

        self._pipelined(list({**per_key, **records}), write)

    def _claims_to_copy(
        self, leaf: str, split: Split
    ) -> tuple[dict[str, dict[bytes, bytes]], dict[str, dict[bytes, bytes]]]:
        """copy_claims's read: per child, the per-key claims and the records it gets."""
        width = self._fp_bytes()

        def read() -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self._keys(leaf)[3])
            pipe.hgetall(self._records(leaf))
            held, records = pipe.execute()
            return held, records

        held, records = retrying(read, f"{self._what}: copy claims")
        per_key: dict[str, dict[bytes, bytes]] = {}
        for fp, value in held.items():
            per_key.setdefault(split.child(int.from_bytes(fp, "little")), {})[fp] = value
        by_child: dict[str, dict[bytes, bytes]] = {}
        for call, value in records.items():
            claim, body = record_parts(value)
            routed: dict[str, list[bytes]] = {}
            for s in range(0, len(body), width):
                fp = body[s : s + width]
                routed.setdefault(split.child(int.from_bytes(fp, "little")), []).append(fp)
            for child, fps in routed.items():
                by_child.setdefault(child, {})[call] = claim + b"\n" + b"".join(fps)
        return per_key, by_child


def open_leaf_store(
    redis: Any, name: str, *, lease: float | None = None, allow_eviction: bool = False
) -> RedisLeafStore:
    """The Redis store of the splittable filter `name` (urlseen.kinds hands it to the
    filter), on a server whose eviction policy is checked."""
    store = RedisLeafStore(redis, name, lease=lease)
    store.check_eviction(allow_eviction)
    return store
