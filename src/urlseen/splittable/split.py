"""The split protocol: how a full leaf becomes children without losing a URL.

A split takes a lock with a deadline in the tree; writers keep writing to the splitting leaf
(its fingerprints are copied as they come, so no URL added during a split is lost), the leaf is
sealed, the rest copied, then the tree swaps the leaf for the children atomically, only for the
lock's holder (a splitter whose lock expired cannot install stale children). Writers that hit a
sealed leaf reload the tree; if its splitter died, they finish the split. A leaf below full size
grows instead: the same steps, into one child.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import numpy as np

from urlseen.errors import FilterLostError, FormatError, RemoteError
from urlseen.splittable import coding as fingerprint_code
from urlseen.splittable.sizing import CHILD_FIT
from urlseen.splittable.tree import MISSING, LeafAnswer, LeafOp, LeafStore, Split, Tree

LOCK_LEASES = 3  # a split lock lasts 3 of the store's leases, renewed after each chunk
MIN_LOCK_MS = 2000  # and 2 s at least: a split takes longer than a tiny lease
COPY_CHUNK = 8192  # fingerprints copied per step of a split
COMPACT_STEPS = 16  # a leaf's raw fingerprints are coded each 1/16 of its capacity (_compact)
SMALL_LEAF = 4  # leaves below 1/4 of leaf_bits ...
SMALL_GROW = 2  # ... grow 2x at least


class LeafSplits:
    """The splitting side of a SplittableBloomFilter (splittable/filter.py): the filter gives
    its store, tree, shape and how it reloads the tree."""

    name: str
    fanout: int
    fingerprint_bits: int
    fingerprint_bytes: int
    splits_done: int
    grows_done: int
    compactions_done: int
    _store: LeafStore
    _tree: Tree
    _full_bits: int
    _chain: list[tuple[int, int]]
    _attempt: tuple[str, str, list[str]]  # the split this client runs: leaf, token, children

    def _reload(self) -> None:
        raise NotImplementedError

    def _lost_leaf(self, leaf: str) -> FilterLostError:
        raise NotImplementedError

    def _capacity(self, leaf: str) -> int:
        raise NotImplementedError

    def _lock_ms(self) -> int:
        return max(MIN_LOCK_MS, LOCK_LEASES * self._store.lease_ms)

    def _child_gone(self, child: str) -> Exception:
        """A child of this client's split (_attempt: leaf, token, children) vanished: another
        client took the split over (this one's lock expired, and the taker dropped the
        children), or the data is lost."""
        leaf, token, children = self._attempt
        if not self._store.refresh(leaf, token, self._lock_ms(), children):
            return _TakenOver()
        return self._lost_leaf(child)

    def _split(self, leaf: str) -> bool:
        """Split a full leaf, unless another client holds its lock; True if this one did. A
        leaf below full size grows instead: the same steps, into one child. The children start
        at the smallest size that holds CHILD_FIT times their URLs (a growth: one step more at
        least) and get the fingerprints held so far, coded (fill_coded); those written until the
        leaf is sealed are copied after, raw. A split routes by the fingerprint's top bits below
        the leaf's prefix, so a child codes fanout's bits fewer per URL."""
        store, token = self._store, uuid.uuid4().hex
        bits = self._tree.sizes.get(leaf, self._full_bits)
        grows = bits < self._full_bits
        status, stale = store.lock(leaf, token, self._lock_ms())
        if status != "ok":
            if status == "done":
                self._reload()
            return False
        store.drop(stale)  # children of an attempt whose lock expired: never installed
        # An error below leaves the lock held: it lists the children, and whoever takes it
        # over once it expires drops them before splitting again.
        children = store.new_leaf_ids(1 if grows else self.fanout)
        if not store.refresh(leaf, token, self._lock_ms(), children):
            return False
        universe = self._universe(leaf)
        held, start, coded = self._held(leaf, universe)
        split = self._new_split(leaf, children, grows, universe)
        parts = route_values(split, held)
        child_bits = self._fitted(max(len(v) for v in parts.values()), bits if grows else 0)
        store.make_leaves(children, child_bits, self._tree.params)
        self._attempt = (leaf, token, children)
        try:
            for child, values in parts.items():
                self._fill(child, values, universe if grows else split.shift)
            if not store.refresh(leaf, token, self._lock_ms(), children):
                return False
            end = store.seal(leaf, coded)  # no more writes to the leaf: the rest is final
            copied = None if end < 0 else self._copy(leaf, split, start, end, token)
        except _TakenOver:
            return False  # the taker drops this attempt's children and splits again
        if copied is None:
            store.drop(children)
            return False
        store.copy_claims(leaf, split)  # sealed: no new claims; acknowledgements come again
        if not store.swap(leaf, token, split, child_bits):  # and retires the leaf
            store.drop(children)
            return False
        if grows:
            self.grows_done += 1
        else:
            self.splits_done += 1
        self._reload()
        return True

    def _compact(self, leaf: str) -> bool:
        """Code the leaf's raw fingerprints with its coded ones, under its split lock (their
        offsets change: a splitter whose lock expired meanwhile is refused its seal), if
        1/(2 COMPACT_STEPS) of its capacity at least is raw. A full-size leaf takes URLs from
        about half its capacity (a split) to all of it, raw ones ceil(W / 8) bytes each: about
        twice what they take coded. True if it did."""
        store, token = self._store, uuid.uuid4().hex
        status, stale = store.lock(leaf, token, self._lock_ms())
        if status != "ok":
            return False
        try:
            store.drop(stale)  # children of an attempt whose lock expired: never installed
            universe = self._universe(leaf)
            held, raw_bytes, coded = self._held(leaf, universe)
            least = self._capacity(leaf) // (2 * COMPACT_STEPS)
            if raw_bytes < max(1, least) * self.fingerprint_bytes:
                return False
            code = fingerprint_code.encode(held, universe, int(held[0]) >> universe)
            done = store.compact(leaf, code, coded, raw_bytes)
        finally:
            store.unlock(leaf, token)
        self.compactions_done += done
        return done

    def _new_split(self, leaf: str, children: list[str], grows: bool, universe: int) -> Split:
        """The node the leaf becomes: one child for a growth, else prefix routing by the
        fingerprint's top log2(fanout) bits of those the leaf does not know from its place."""
        if grows:
            return Split(0, tuple(children))
        shift = universe - (self.fanout.bit_length() - 1)
        if shift < 0:
            raise RemoteError(
                f"splittable filter {self.name!r}: leaf {leaf} cannot split: its "
                f"{self.fingerprint_bits}-bit fingerprints are all routing bits"
            )
        return Split(0, tuple(children), shift)

    def _universe(self, leaf: str) -> int:
        """The fingerprint bits a leaf does not know from its place in the tree: those below
        the shift of the nearest prefix split above it (all of them under the root)."""
        splits = self._tree.splits
        parents = {child: node for node, split in splits.items() for child in split.children}
        node = leaf
        while node in parents:
            node = parents[node]
            if splits[node].shift >= 0:
                return splits[node].shift
        return int(self.fingerprint_bits)

    def _held(self, leaf: str, universe: int) -> tuple[np.ndarray, int, int]:
        """The fingerprints the leaf holds now (coded and raw), its raw tail's length in bytes
        and the URLs coded. A coded block that fails its checks, or fingerprints of another
        prefix, raise FormatError: a split never routes what it cannot trust."""
        store = self._store
        code = store.code(leaf)
        coded = np.zeros(0, dtype=np.uint64)
        if code:
            coded, coded_universe, _ = fingerprint_code.decode(code)
            if coded_universe != universe:
                raise FormatError(f"{self._damaged(leaf)}: coded for {coded_universe} bits")
        raw = store.fingerprints(leaf, 0, 1 << 62)
        values = np.concatenate([coded, fingerprint_code.from_bytes(raw, self.fingerprint_bytes)])
        if len(values) and universe < 64:
            top = values >> np.uint64(universe)
            if (top != top[0]).any() or (values >> np.uint64(self.fingerprint_bits)).any():
                raise FormatError(f"{self._damaged(leaf)}: fingerprints of another prefix")
        return values, len(raw), len(coded)

    def _damaged(self, leaf: str) -> str:
        return f"splittable filter {self.name!r}: leaf {leaf} is damaged"

    def _fitted(self, count: int, above: int) -> int:
        """The smallest leaf size over `above` bits that holds CHILD_FIT * count URLs; a leaf
        below 1/SMALL_LEAF of leaf_bits grows to SMALL_GROW times its size at least (a growth
        costs a few store calls whatever the size: small leaves hold few of the URLs)."""
        if above * SMALL_LEAF < self._full_bits:
            above = int(above * SMALL_GROW) - 1
        for bits, capacity in self._chain:
            if bits > above and capacity >= CHILD_FIT * count:
                return int(bits)
        return int(self._full_bits)

    def _fill(self, child: str, values: np.ndarray, universe: int) -> None:
        """Give a fresh child these fingerprints: its bits and their coded block at once; a
        child that is not fresh (fill_coded answers MOVED) takes them raw, copied."""
        fps = fingerprint_code.to_bytes(values, self.fingerprint_bytes)
        prefix = int(values[0]) >> universe if len(values) else 0
        reply = self._store.fill_coded(
            child, fps, fingerprint_code.encode(values, universe, prefix)
        )
        if reply is MISSING:
            raise self._child_gone(child)
        if isinstance(reply, LeafAnswer):
            return
        for at in range(0, len(fps), COPY_CHUNK):
            copied = self._store.check_and_add({child: fps[at : at + COPY_CHUNK]}, LeafOp.COPY)
            if not isinstance(copied[child], LeafAnswer):  # fresh children take every copy
                raise self._child_gone(child)

    def _copy(self, leaf: str, split: Split, start: int, end: int, token: str) -> int | None:
        """Re-insert the sealed leaf's raw fingerprints [start, end) (bytes of its tail: those
        written since its fingerprints were read) into the split's children. The new offset,
        or None if the lock was lost."""
        store, width = self._store, self.fingerprint_bytes
        while start < end:
            data = store.fingerprints(leaf, start, min(end, start + COPY_CHUNK * width))
            if not data:
                break
            groups: dict[str, list[bytes]] = defaultdict(list)
            for j in range(0, len(data), width):
                fp = data[j : j + width]
                groups[split.child(int.from_bytes(fp, "little"))].append(fp)
            for child, reply in store.check_and_add(groups, LeafOp.COPY).items():
                if not isinstance(reply, LeafAnswer):  # fresh children take every copy
                    raise self._child_gone(child)
            start += len(data)
            if not store.refresh(leaf, token, self._lock_ms(), split.children):
                return None
        return start


class _TakenOver(Exception):
    """This client's split was taken over by another client (its lock had expired)."""


def route_values(split: Split, values: np.ndarray) -> dict[str, np.ndarray]:
    """Fingerprints by the child of `split` each goes to (prefix routing, or a growth's one)."""
    if len(split.children) == 1:
        return {split.children[0]: values}
    side = (values >> np.uint64(split.shift)) & np.uint64(len(split.children) - 1)
    return {child: values[side == i] for i, child in enumerate(split.children)}
