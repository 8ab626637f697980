"""SplittableBloomFilter: the dynamic splittable Bloom filter (patent CN104809182).

A tree of leaf Bloom filters of up to `leaf_bits` bits each. A URL's 128-bit digest routes it
from the root (a LocHash of digest bytes 8-15) to exactly one leaf, where the k bits of its
fingerprint F (the low W = fingerprint_bits bits of bytes 0-7) are tested and set. A leaf that
reaches its capacity (the most URLs it holds at false-positive rate <= 0.7 error_rate) splits:
its fingerprints, kept beside its bits, are re-inserted into `fanout` fresh children, routed by
F's top bits below those the leaf's place already fixes (prefix routing), and the leaf becomes
an internal node (splittable/split.py). A query touches one leaf, and no leaf holds much more
than its capacity, so the false-positive rate stays <= error_rate however many URLs come,
unlike one fixed filter (the last 3/10 is for URLs with equal fingerprints:
sizing.fingerprint_bits).

Memory follows what was inserted, not the capacity planned: leaves start small and grow
through allocator-sized steps (splittable/sizing.py), and a leaf keeps the fingerprints a
split or growth gave it sorted and Elias-Fano coded (splittable/coding.py: about W - depth -
log2(n) + 2 bits each, the depth's bits being known from its place), and those it reported new
since raw (ceil(W / 8) bytes each), until it splits or grows and its children code them. Bits
per URL: measured by benchmarks/splittable/memory.py.

The tree and leaves live in a LeafStore (splittable/tree.py): this process's memory, or one
shared by many processes (Redis: urlseen.shared.leaves, opened through urlseen.kinds). A shared
store keeps each answer "new" claimed until the caller acknowledges it, so it reaches a caller
even if the client it was answered to dies first; the filter sees answers new, seen or pending
and tells the store when its caller has them. Every call checks the filter's instance id: a
tree or leaf whose data vanished stops the client with FilterLostError instead of a wait.
"""

from __future__ import annotations

import secrets
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from urlseen import _core, defaults
from urlseen._lifecycle import Closeable
from urlseen.bloom import sizing as bloom_sizing
from urlseen.errors import ConfigError, FilterLostError
from urlseen.protocol import FilterStats, Key, PassesClaimsOn, check_given, key_batch
from urlseen.splittable import sizing
from urlseen.splittable.rounds import LeafRounds
from urlseen.splittable.tree import (
    LeafOp,
    LeafStore,
    MemoryLeafStore,
    Split,
    Tree,
)
from urlseen.state import space


def _new_seed() -> int:
    return secrets.randbits(64)


class SplittableBloomFilter(LeafRounds, PassesClaimsOn, Closeable):
    """A Bloom filter that grows by splitting full leaves: FP rate <= error_rate at any size.

    Args:
        capacity: the URLs expected; sets the first layer's width (first_leaves = ceil(capacity
            / leaf_capacity) leaves, each starting small and growing to leaf_bits as URLs come).
            Growth beyond it is absorbed by splits.
        error_rate: the false-positive bound: every leaf keeps 7/10 of it, and equal
            fingerprints stay below the other 3/10 (see fingerprint_bytes).
        redis: a Redis URL or client to share the filter (None: this process only).
        name: the shared filter's name (its keys are urlseen:{name}:* and urlseen:{name:leaf:*}:*).
        leaf_bits: bits of a full-grown leaf (a multiple of 512, at most 2**32).
        fanout: children per split, a power of two (each split routes by log2(fanout) more
            bits of the fingerprint).
        layout: "blocked" (one 64-byte block per URL: one read per URL in Redis) or
            "standard" (k bits anywhere in the leaf; leaf_capacity by the exact Bloom formula).
        seed: the MapHash / fingerprint seed.
        fingerprint_bytes: bytes of fingerprint per URL (W = 8 * this bits), 4 to 8 (default:
            the fewest bits W that keep fingerprint collisions below 0.3 error_rate until the
            filter has grown 1024 times past its capacity, in ceil(W / 8) bytes; see
            sizing.fingerprint_bits).
        store: where the tree and leaves live (default: Redis if `redis` is given, else this
            process's memory).
        lease: (Redis) seconds an answer "new" stays claimed until acknowledged (default 10);
            a split's lock lasts three leases (renewed as the split goes on), so the leaf of a
            splitter that died waits that long before another client finishes its split.
        allow_eviction: (Redis) use a server whose maxmemory-policy may evict keys.

    Attributes (from the stored parameters): capacity, error_rate, leaf_bits, fanout, seed, k
    (bits per URL in its leaf), leaf_capacity (the URLs a full-grown leaf holds at 0.7 error_rate:
    a leaf that reaches it splits), first_leaf_bits (the size leaves start at),
    fingerprint_bits and fingerprint_bytes.

    An existing shared filter keeps its own parameters; passing different ones is an error.
    Answers are acknowledged just before add_many returns them; with auto_acknowledge = False
    they stay claimed until acknowledge().

    Example:
        >>> seen = SplittableBloomFilter(capacity=10_000, error_rate=0.001, leaf_bits=1 << 16)
        >>> seen.add_many(["https://a.example/", "https://a.example/"])
        [True, False]
    """

    _instance = ""  # the stored filter's id, once open

    def __init__(
        self,
        capacity: int | None = None,
        error_rate: float | None = None,
        *,
        redis: Any = None,
        name: str = "dsbf",
        leaf_bits: int | None = None,
        fanout: int | None = None,
        layout: str | None = None,
        seed: int | None = None,
        fingerprint_bytes: int | None = None,
        store: LeafStore | None = None,
        lease: float | None = None,
        allow_eviction: bool = False,
    ) -> None:
        if store is None:
            if redis is None:
                store = MemoryLeafStore(lease)
            else:  # the host code keeps leaves in Redis; this wing knows only the protocol
                from urlseen.kinds import remote_leaf_store

                store = remote_leaf_store(redis, name, lease=lease, allow_eviction=allow_eviction)
        self._store = store
        self.name = name
        given = {"capacity": capacity, "error_rate": error_rate, "leaf_bits": leaf_bits,
                 "fanout": fanout, "layout": layout, "seed": seed,
                 "fp_bytes": fingerprint_bytes}  # fmt: skip
        tree = self._opened(given)
        check_given(tree.params, given, f"splittable filter {name!r}")
        self._tree = tree
        p = tree.params
        self.capacity, self.error_rate = p["capacity"], p["error_rate"]
        self.leaf_bits, self.fanout, self.seed = p["leaf_bits"], p["fanout"], p["seed"]
        self.k, self.leaf_capacity = p["k"], p["leaf_capacity"]
        self.first_leaf_bits, self.fingerprint_bytes = p["first_leaf_bits"], p["fp_bytes"]
        self.fingerprint_bits = p["fp_bits"]
        self._capacities = {bits: capacity for bits, capacity, _ in p["leaf_sizes"]}
        self._full_bits = p["leaf_sizes"][-1][0]  # leaf_bits as stored (sizing.stored_bits)
        self._chain = [(bits, capacity) for bits, capacity, _ in p["leaf_sizes"]]
        self._instance = p["instance"]
        self.splits_done = 0
        self.grows_done = 0
        self.compactions_done = 0
        self._keys_per_maybe_new = 1.0  # see LeafRounds._take_round
        self._compact_marks: dict[str, int] = {}  # see LeafRounds._compact_due

    def _opened(self, given: Mapping[str, Any]) -> Tree:
        """The store's tree, created from the given parameters if the store holds none, and
        its first leaves made if its creator died before making them."""
        store, name = self._store, self.name
        tree = store.load()
        if tree is None:
            if given["capacity"] is None:
                raise ConfigError(f"no splittable filter {name!r}: give a capacity to create it")
            params = sizing.params(
                given["capacity"],
                defaults.EXACT_ERROR_RATE if given["error_rate"] is None else given["error_rate"],
                sizing.DEFAULT_LEAF_BITS if given["leaf_bits"] is None else given["leaf_bits"],
                2 if given["fanout"] is None else given["fanout"],
                "blocked" if given["layout"] is None else given["layout"],
                0 if given["seed"] is None else given["seed"],
                given["fp_bytes"],
            )
            if isinstance(store, MemoryLeafStore):  # the first layer, at its first size, now
                first_layer = params["first_leaves"] * (
                    params["first_leaf_bits"] // 8 + sizing.LEAF_OVERHEAD_BYTES
                )
                space.check_memory(first_layer, space.describe({"kind": "dsbf", **params}))
            root = Split(_new_seed(), tuple(str(i) for i in range(params["first_leaves"])))
            store.create(params, root, params["first_leaf_bits"])  # of two at once, one wins
            tree = store.load()
            assert tree is not None
        sizing.check_params(tree.params, name)
        if not tree.ready:  # its creator may have died before making the first leaves
            first = tree.params["first_leaf_bits"]
            store.make_leaves(tree.splits["root"].children, first, tree.params)
            store.mark_ready()
        return tree

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a splittable filter called name."""
        from urlseen.kinds import remote_leaf_store_exists

        return remote_leaf_store_exists(redis, name)

    # -- routing ---------------------------------------------------------------------------

    def _keys(self, digests: list[bytes]) -> tuple[list[bytes], list[int], list[int]]:
        """A batch's 16-byte digests as (fingerprints, root values, fingerprint values): the
        root routes by bytes 8-15, every split below by the fingerprint F (the low
        fingerprint_bits bits of bytes 0-7, little-endian: what a leaf keeps, hashes and
        claims, as fingerprint_bytes bytes), so fingerprints need only be told apart among the
        URLs of one child of the root."""
        width, mask = self.fingerprint_bytes, (1 << self.fingerprint_bits) - 1
        words = struct.unpack(f"<{2 * len(digests)}Q", b"".join(digests))
        values = [w & mask for w in words[0::2]]
        fps = [v.to_bytes(width, "little") for v in values]
        return fps, list(words[1::2]), values

    def _route(self, root_value: int, value: int) -> str:
        splits = self._tree.splits
        child = splits["root"].child(root_value)
        split = splits.get(child)
        if split is None:
            return child
        while True:
            child = split.child(value)
            nxt = splits.get(child)
            if nxt is None:
                return child
            split = nxt

    def _reload(self) -> None:
        tree = self._store.load()
        if tree is None or tree.params.get("instance") != self._instance:
            what = "is gone" if tree is None else "belongs to another filter of the same name"
            raise self._store.lost(f"splittable filter {self.name!r}: its tree {what}")
        self._tree = tree

    def _capacity(self, leaf: str) -> int:
        """The URLs this leaf holds at error_rate (it grows or splits on reaching them)."""
        return int(self._capacities[self._tree.sizes.get(leaf, self._full_bits)])

    def _lost_leaf(self, leaf: str) -> FilterLostError:
        return self._store.lost(f"splittable filter {self.name!r}: leaf {leaf} is gone")

    # -- the seen-test ---------------------------------------------------------------------

    def _run(self, keys: Iterable[Key], op: LeafOp) -> list[bool]:
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        if self._store.tree_due():  # a shared store: say which tree this client reads
            self._reload()
        fps, roots, values = self._keys(_core.digests(keys, _core.HASH_XXH3_128, self.seed))
        queues: dict[str, list[int]] = defaultdict(list)
        for i in range(len(fps)):
            queues[self._route(roots[i], values[i])].append(i)
        if op != LeafOp.ADD:
            return self._each_leaf(fps, values, queues, op)
        store = self._store
        with store.batch(self._follow):
            answers = self._each_leaf(fps, values, queues, op)
        if store.auto_acknowledge:
            store.acknowledge(self._follow)
        return answers

    def add(self, key: Key) -> bool:
        """Check-and-add one URL (use add_many for throughput)."""
        return self._run([key], LeafOp.ADD)[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch; True where new. Atomic per URL across all clients; waits
        (about one lease at most) for URLs another client answered new and has not
        acknowledged."""
        return self._run(keys, LeafOp.ADD)

    def __contains__(self, key: object) -> bool:
        return not self._run([key], LeafOp.CONTAINS)[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        return [not absent for absent in self._run(keys, LeafOp.CONTAINS)]

    # -- acknowledgement -------------------------------------------------------------------

    @property
    def auto_acknowledge(self) -> bool:
        """True (default): answers are acknowledged just before they are returned. False: they
        stay claimed until acknowledge()."""
        return self._store.auto_acknowledge

    @auto_acknowledge.setter
    def auto_acknowledge(self, value: bool) -> None:
        self._store.auto_acknowledge = bool(value)

    def acknowledge(self) -> int:
        """Every answer given so far has reached the caller (and is persisted, if the caller
        persists them): the store releases their claims. Returns how many another client had
        taken over meanwhile (their lease had ended: those URLs were answered new twice)."""
        self._usable()
        return self._store.acknowledge(self._follow)

    def _claimer(self) -> object:
        return self._store

    def claims_held(self) -> int:
        """Claims in the store, of every client: URLs answered new whose delivery no caller has
        acknowledged yet (a live client's, or a dead one's waiting for the next asker)."""
        return sum(leaf["claims"] for leaf in self.leaves())

    def _close(self) -> None:
        if self._instance:  # else it never opened: nothing claimed
            self._store.close(self._follow)

    # -- what it holds ---------------------------------------------------------------------

    def leaves(self) -> list[dict[str, Any]]:
        """Every live leaf: id, depth, bits, count, fill (count / its capacity), state,
        fingerprint bytes (coded and raw, with the raw string's room), claims, the URLs coded
        and their code's bytes."""
        self._usable()
        self._reload()
        order = self._tree.leaves()
        infos = self._store.leaf_info([leaf for leaf, _ in order])
        for (leaf, _), info in zip(order, infos, strict=True):
            if info is None:  # a leaf of the tree is never deleted (a split retires it later)
                raise self._lost_leaf(leaf)
        return [
            {"leaf": leaf, "depth": depth, "bits": self._tree.sizes.get(leaf, self._full_bits),
             "count": info.count, "fill": info.count / self._capacity(leaf), "state": info.state,
             "fingerprint_bytes": info.fingerprint_bytes, "claims": info.claims,
             "coded": info.coded, "code_bytes": info.code_bytes}
            for (leaf, depth), info in zip(order, infos, strict=True)
            if info is not None
        ]  # fmt: skip

    def __len__(self) -> int:
        return sum(leaf["count"] for leaf in self.leaves())

    def stats(self) -> FilterStats:
        leaves = self.leaves()
        count = sum(leaf["count"] for leaf in leaves)
        p = self._tree.params
        worst = max(
            (bloom_sizing.error_rate_at(p["layout"], leaf["bits"], self.k, leaf["count"])
             for leaf in leaves),
            default=0.0,
        )  # fmt: skip
        collisions = self._collision_rate({leaf["leaf"]: leaf["count"] for leaf in leaves})
        return FilterStats(
            kind="dsbf",
            capacity=self.capacity,
            count=count,
            bits=sum(leaf["bits"] + 8 * leaf["fingerprint_bytes"] for leaf in leaves),
            error_rate=self.error_rate,
            estimated_error_rate=worst + collisions,
            details={
                "name": self.name, "k": self.k, "leaf_capacity": self.leaf_capacity,
                "leaf_bits": self.leaf_bits, "fanout": self.fanout, "layout": p["layout"],
                "leaves": len(leaves), "depth": max((leaf["depth"] for leaf in leaves), default=0),
                "first_leaves": p["first_leaves"], "first_leaf_bits": p["first_leaf_bits"],
                "fingerprint_bytes": self.fingerprint_bytes, "collision_rate": collisions,
                "fingerprint_bits": self.fingerprint_bits,
                "tree_version": self._tree.version,
            },
        )  # fmt: skip

    def _collision_rate(self, counts: dict[str, int]) -> float:
        """The false-positive rate from equal fingerprints, in the fullest child of the root:
        its URLs / 2^fingerprint_bits (see _fingerprint_bits)."""
        splits, fullest = self._tree.splits, 0
        for child in splits["root"].children:
            total, stack = 0, [child]
            while stack:
                node = stack.pop()
                split = splits.get(node)
                if split is None:
                    total += counts.get(node, 0)
                else:
                    stack.extend(split.children)
            fullest = max(fullest, total)
        return float(fullest / 2.0 ** int(self.fingerprint_bits))

    def memory_usage(self) -> int:
        """Bytes of the live leaves and the tree, as the store counts them."""
        self._usable()
        self._reload()
        return self._store.memory_usage([leaf for leaf, _ in self._tree.leaves()])

    @property
    def tree(self) -> Tree:
        return self._tree

    def destroy(self) -> None:
        """Delete the filter from its store."""
        self._usable()
        self._store.destroy()
        self.close()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} leaf_bits={self.leaf_bits} k={self.k} "
            f"leaf_capacity={self.leaf_capacity} version={self._tree.version}>"
        )
