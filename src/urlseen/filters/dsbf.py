"""SplittableBloomFilter: the dynamic splittable Bloom filter (patent CN104809182).

A tree of leaf Bloom filters of `leaf_bits` bits each. A URL's 64-bit fingerprint is routed
from the root by per-node LocHash functions to exactly one leaf, where its k bits are tested
and set. A leaf that reaches `leaf_capacity` URLs (the most it holds at false-positive rate
<= error_rate) splits: its fingerprints, kept packed beside its bits, are re-inserted into
`fanout` fresh children and the leaf becomes an internal node. A query touches one leaf, and
no leaf holds much more than leaf_capacity URLs, so the false-positive rate stays <= error_rate
however many URLs come, unlike one fixed filter.

Shared by many processes through Redis (stores/redis_leaves.py) or kept in this process
(stores/splittable.py). A split takes a lock with a deadline in the tree hash; writers keep
writing to the splitting leaf (its fingerprints are copied as they come, so no URL added during
a split is lost), the leaf is sealed, the rest copied, then the tree swaps the leaf for the
children atomically, only for the lock's holder (a splitter whose lock expired cannot install
stale children). Writers that hit a sealed leaf reload the tree; if its splitter died, they
finish the split.
"""

from __future__ import annotations

import secrets
import struct
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from urlseen import _core
from urlseen._lifecycle import Closeable
from urlseen.errors import ConfigError, FormatError
from urlseen.filters import _sizing
from urlseen.filters.base import FilterStats, Key, key_batch
from urlseen.stores import _space
from urlseen.stores.redis_store import RemoteError
from urlseen.stores.splittable import (
    FP_BYTES,
    MOVED,
    LeafOp,
    LeafStore,
    MemoryLeafStore,
    Split,
    Tree,
)

FORMAT = "urlseen-dsbf/2"  # /1 named its params n, f, m, b, u, c, cap
DEFAULT_LEAF_BITS = 1 << 23  # 1 MiB per leaf: 541,607 URLs at error_rate 0.001 (blocked)
LOCK_MS = 30_000  # a split lock's lease, renewed after every copied chunk
GRACE_SECONDS = 60.0  # a split leaf's keys outlive the swap this long, for stale readers
COPY_CHUNK = 8 * 8192  # fingerprint bytes copied per step of a split
REROUTE_SECONDS = 60.0  # how long a batch waits for a stuck split before RemoteError
MAX_FINGERPRINT_BYTES = 1 << 29  # one Redis string: 512 MiB


def _new_seed() -> int:
    return secrets.randbits(64)


class SplittableBloomFilter(Closeable):
    """A Bloom filter that grows by splitting full leaves: FP rate <= error_rate at any size.

    Args:
        capacity: the URLs expected; sizes the first layer (first_leaves = ceil(capacity /
            leaf_capacity) leaves). Growth beyond it is absorbed by splits.
        error_rate: the false-positive bound every leaf keeps.
        redis: a Redis URL or client to share the filter (None: this process only).
        name: the shared filter's name (its keys are urlseen:{name}:* and urlseen:{name:leaf:*}:*).
        leaf_bits: bits per leaf (a multiple of 512, at most 2**32).
        fanout: children per split.
        layout: "blocked" (one 64-byte block per URL: one read per URL in Redis) or
            "standard" (k bits anywhere in the leaf; leaf_capacity by the exact Bloom formula).
        seed: the MapHash / fingerprint seed.

    Attributes (from the stored parameters): capacity, error_rate, leaf_bits, fanout, seed, k
    (bits per URL in its leaf) and leaf_capacity (the URLs a leaf holds at error_rate: a leaf
    that reaches it splits).

    An existing shared filter keeps its own parameters; passing different ones is an error.

    Example:
        >>> seen = SplittableBloomFilter(capacity=10_000, error_rate=0.001, leaf_bits=1 << 16)
        >>> seen.add_many(["https://a.example/", "https://a.example/"])
        [True, False]
    """

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
        store: LeafStore | None = None,
    ) -> None:
        if store is None:
            if redis is None:
                store = MemoryLeafStore()
            else:
                from urlseen.stores.redis_leaves import RedisLeafStore

                store = RedisLeafStore(redis, name)
        self._store = store
        self.name = name
        tree = store.load()
        given = {"capacity": capacity, "error_rate": error_rate, "leaf_bits": leaf_bits,
                 "fanout": fanout, "layout": layout, "seed": seed}  # fmt: skip
        if tree is None:
            if capacity is None:
                raise ConfigError(f"no splittable filter {name!r}: give a capacity to create it")
            params = _params(
                capacity,
                0.001 if error_rate is None else error_rate,
                DEFAULT_LEAF_BITS if leaf_bits is None else leaf_bits,
                2 if fanout is None else fanout,
                "blocked" if layout is None else layout,
                0 if seed is None else seed,
            )
            if isinstance(store, MemoryLeafStore):  # the whole first layer, allocated now
                first_layer = params["first_leaves"] * params["leaf_bits"] // 8
                _space.check_memory(first_layer, _space.describe({"kind": "dsbf", **params}))
            root = Split(_new_seed(), tuple(str(i) for i in range(params["first_leaves"])))
            store.make_leaves(root.children, params)
            store.create(params, root)
            tree = store.load()
            assert tree is not None
        _check_params(tree.params, name)
        for field, value in given.items():
            if value is not None and value != tree.params[field]:
                raise ConfigError(
                    f"splittable filter {name!r} exists with {field}={tree.params[field]!r}, "
                    f"not {value!r}"
                )
        self._tree = tree
        p = tree.params
        self.capacity, self.error_rate = p["capacity"], p["error_rate"]
        self.leaf_bits, self.fanout, self.seed = p["leaf_bits"], p["fanout"], p["seed"]
        self.k, self.leaf_capacity = p["k"], p["leaf_capacity"]
        self.splits_done = 0

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a splittable filter called name."""
        from urlseen.stores.redis_leaves import RedisLeafStore

        return RedisLeafStore(redis, name).load() is not None

    # -- routing ---------------------------------------------------------------------------

    def _fingerprints(self, keys: list[Key]) -> tuple[list[bytes], list[int]]:
        digests = _core.digests(keys, _core.HASH_XXH3_128, self.seed)
        fps = [d[:FP_BYTES] for d in digests]
        return fps, list(struct.unpack(f"<{len(fps)}Q", b"".join(fps)))

    def _route(self, value: int) -> str:
        splits = self._tree.splits
        split = splits["root"]
        while True:
            child = split.child(value)
            nxt = splits.get(child)
            if nxt is None:
                return child
            split = nxt

    def _reload(self) -> None:
        tree = self._store.load()
        if tree is None:
            raise FormatError(f"splittable filter {self.name!r} was deleted")
        self._tree = tree

    # -- the seen-test ---------------------------------------------------------------------

    def _run(self, keys: Iterable[Key], op: LeafOp) -> list[bool]:
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        fps, values = self._fingerprints(keys)
        answers: list[bool | None] = [None] * len(keys)
        pending = list(range(len(keys)))
        deadline = time.monotonic() + REROUTE_SECONDS
        stuck_wait = 0.005
        room = max(1, self.leaf_capacity // 16)  # keys per leaf per round (see leaf_write_limit)
        while pending:
            groups: dict[str, list[int]] = defaultdict(list)
            later: list[int] = []
            for i in pending:
                group = groups[self._route(values[i])]
                (group if op != LeafOp.ADD or len(group) < room else later).append(i)
            replies = self._store.check_and_add(
                {leaf: [fps[i] for i in idx] for leaf, idx in groups.items()}, op
            )
            moved: list[int] = []
            full: list[str] = []
            for leaf, idx in groups.items():
                reply = replies[leaf]
                if reply is MOVED:
                    moved.extend(idx)
                    continue
                for i, new in zip(idx, reply.new, strict=True):
                    answers[i] = new
                if op == LeafOp.ADD and reply.count >= self.leaf_capacity:
                    full.append(leaf)
            for leaf in full:
                self._split(leaf)
            if not moved:
                pending = later
                continue
            version = self._tree.version
            self._reload()
            if self._tree.version == version:  # a sealed leaf still in the tree: a split
                for leaf in {self._route(values[i]) for i in moved}:  # is on, or died
                    self._split(leaf)
                if time.monotonic() > deadline:
                    raise RemoteError(
                        f"splittable filter {self.name!r}: a split did not finish within "
                        f"{REROUTE_SECONDS:.0f} s"
                    )
                time.sleep(stuck_wait)
                stuck_wait = min(stuck_wait * 2, 0.5)
            pending = sorted(moved + later)
        return [bool(a) for a in answers]

    def add(self, key: Key) -> bool:
        """Check-and-add one URL (use add_many for throughput)."""
        return self._run([key], LeafOp.ADD)[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch; True where new. Atomic per URL across all clients."""
        return self._run(keys, LeafOp.ADD)

    def __contains__(self, key: object) -> bool:
        return not self._run([key], LeafOp.CONTAINS)[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        return [not absent for absent in self._run(keys, LeafOp.CONTAINS)]

    # -- splitting --------------------------------------------------------------------------

    def _split(self, leaf: str) -> bool:
        """Split a full leaf, unless another client holds its lock; True if this one did."""
        store, token = self._store, uuid.uuid4().hex
        status, stale = store.lock(leaf, token, LOCK_MS)
        if status != "ok":
            if status == "done":
                self._reload()
            return False
        store.drop(stale)  # children of an attempt whose lock expired: never installed
        # An error below leaves the lock held: it lists the children, and whoever takes it
        # over once it expires drops them before splitting again.
        children = store.new_leaf_ids(self.fanout)
        if not store.refresh(leaf, token, LOCK_MS, children):
            return False
        store.make_leaves(children, self._tree.params)
        split = Split(_new_seed(), tuple(children))
        copied = self._copy(leaf, split, 0, None, token)
        end = store.seal(leaf)  # no more writes to the leaf: the rest is final
        if copied is None or end < 0 or self._copy(leaf, split, copied, end, token) is None:
            store.drop(children)
            return False
        if not store.swap(leaf, token, split):
            store.drop(children)
            return False
        store.retire(leaf, GRACE_SECONDS)
        self.splits_done += 1
        self._reload()
        return True

    def _copy(self, leaf: str, split: Split, start: int, end: int | None, token: str) -> int | None:
        """Re-insert the leaf's fingerprints [start, end) into the split's children (all of
        them while end is None: the leaf may still grow). The new offset, or None if the lock
        was lost."""
        store = self._store
        while end is None or start < end:
            stop = start + COPY_CHUNK if end is None else min(end, start + COPY_CHUNK)
            data = store.fingerprints(leaf, start, stop)
            if not data:
                break
            groups: dict[str, list[bytes]] = defaultdict(list)
            values = struct.unpack(f"<{len(data) // FP_BYTES}Q", data)
            for j, value in enumerate(values):
                groups[split.child(value)].append(data[j * FP_BYTES : (j + 1) * FP_BYTES])
            store.check_and_add(groups, LeafOp.COPY)
            start += len(data)
            if not store.refresh(leaf, token, LOCK_MS, split.children):
                return None
        return start

    # -- what it holds ---------------------------------------------------------------------

    def leaves(self) -> list[dict[str, Any]]:
        """Every live leaf: id, depth, count, fill (count / leaf_capacity), state, fingerprint
        bytes."""
        self._usable()
        self._reload()
        order = self._tree.leaves()
        infos = self._store.leaf_info([leaf for leaf, _ in order])
        return [
            {"leaf": leaf, "depth": depth, "count": info.count,
             "fill": info.count / self.leaf_capacity, "state": info.state,
             "fingerprint_bytes": info.fingerprint_bytes}
            for (leaf, depth), info in zip(order, infos, strict=True)
            if info is not None
        ]  # fmt: skip

    def __len__(self) -> int:
        return sum(leaf["count"] for leaf in self.leaves())

    def stats(self) -> FilterStats:
        leaves = self.leaves()
        count = sum(leaf["count"] for leaf in leaves)
        worst = max((leaf["count"] for leaf in leaves), default=0)
        p = self._tree.params
        return FilterStats(
            kind="dsbf",
            capacity=self.capacity,
            count=count,
            bits=len(leaves) * self.leaf_bits + 8 * sum(f["fingerprint_bytes"] for f in leaves),
            error_rate=self.error_rate,
            estimated_error_rate=_sizing.error_rate_at(p["layout"], self.leaf_bits, self.k, worst),
            details={
                "name": self.name, "k": self.k, "leaf_capacity": self.leaf_capacity,
                "leaf_bits": self.leaf_bits, "fanout": self.fanout, "layout": p["layout"],
                "leaves": len(leaves), "depth": max((leaf["depth"] for leaf in leaves), default=0),
                "first_leaves": p["first_leaves"], "tree_version": self._tree.version,
            },
        )  # fmt: skip

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


def _params(
    capacity: object,
    error_rate: object,
    leaf_bits: object,
    fanout: object,
    layout: object,
    seed: object,
) -> dict[str, Any]:
    if layout not in _sizing.LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(_sizing.LAYOUTS)}, not {layout!r}")
    if (
        isinstance(leaf_bits, bool)
        or not isinstance(leaf_bits, int)
        or leaf_bits % 512
        or not 512 <= leaf_bits <= 1 << 32
    ):
        raise ConfigError(f"leaf_bits must be a multiple of 512 in [512, 2**32], not {leaf_bits!r}")
    if isinstance(fanout, bool) or not isinstance(fanout, int) or not 2 <= fanout <= 64:
        raise ConfigError(f"fanout must be an int in [2, 64], not {fanout!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 32:
        raise ConfigError(f"seed must be an int in [0, 2**32), not {seed!r}")
    size = _sizing.size_splittable(capacity, leaf_bits, error_rate, layout)  # type: ignore[arg-type]
    if size.first_leaves * leaf_bits > _sizing.MAX_BITS:
        raise ConfigError(
            f"capacity {capacity} needs a first layer of {size.first_leaves:,} leaves of "
            f"{leaf_bits} bits, more than the {_sizing.MAX_BITS // 8 // 2**40} TiB a filter may "
            "take"
        )
    # A leaf reaching leaf_capacity splits; while the split runs, writers go on writing to it
    # (the copy takes their fingerprints too, so no URL added during a split is lost) up to
    # this limit, then wait for the split. With at most leaf_capacity / 16 keys per leaf per
    # round, a leaf never holds more than leaf_capacity * (1 + 1/8) URLs.
    write_limit = size.leaf_capacity + max(1, size.leaf_capacity // 16)
    if (write_limit + write_limit // 16) * FP_BYTES > MAX_FINGERPRINT_BYTES:
        raise ConfigError(
            f"a leaf of {leaf_bits} bits holds {size.leaf_capacity:,} URLs at error_rate "
            f"{error_rate}: their fingerprints would not fit one Redis string (512 MiB); use "
            "smaller leaves"
        )
    return {
        "format": FORMAT, "capacity": capacity, "error_rate": float(error_rate),  # type: ignore[arg-type]
        "leaf_bits": leaf_bits, "fanout": fanout, "layout": layout, "seed": seed,
        "k": size.k, "leaf_capacity": size.leaf_capacity, "first_leaves": size.first_leaves,
        "leaf_write_limit": write_limit,
        "hash": "xxh3", "hash_id": _core.HASH_XXH3_128,
    }  # fmt: skip


_INT_PARAMS = ("capacity", "leaf_bits", "fanout", "seed", "k", "leaf_capacity", "first_leaves",
               "leaf_write_limit", "hash_id")  # fmt: skip


def _check_params(p: dict[str, Any], name: str) -> None:
    if p.get("format") != FORMAT:
        raise FormatError(
            f"{name!r}: not a urlseen splittable filter this version can read (format "
            f"{p.get('format')!r}, not {FORMAT!r})"
        )
    if (
        any(not isinstance(p.get(field), int) for field in _INT_PARAMS)
        or p.get("layout") not in _sizing.LAYOUTS
        or p.get("hash_id") != _core.HASH_XXH3_128
        or not isinstance(p.get("error_rate"), float)
    ):
        raise FormatError(f"{name!r}: not a urlseen splittable filter this version can read")
