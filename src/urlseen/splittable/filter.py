"""SplittableBloomFilter: the dynamic splittable Bloom filter (patent CN104809182).

A tree of leaf Bloom filters of up to `leaf_bits` bits each. A URL's 128-bit digest routes it
from the root (a LocHash of digest bytes 8-15) to exactly one leaf, where the k bits of its
fingerprint F (the low W = fingerprint_bits bits of bytes 0-7) are tested and set. A leaf that
reaches its capacity (the most URLs it holds at false-positive rate <= 0.7 error_rate) splits:
its fingerprints, kept beside its bits, are re-inserted into `fanout` fresh children, routed by
F's top bits below those the leaf's place already fixes (prefix routing), and the leaf becomes
an internal node. A query touches one leaf, and no leaf holds much more than its capacity, so
the false-positive rate stays <= error_rate however many URLs come, unlike one fixed filter
(the last 3/10 is for URLs with equal fingerprints: see _fingerprint_bits).

Memory follows what was inserted, not the capacity planned (format urlseen-dsbf/5):
- Leaf sizes step by 1.2-1.33x (jemalloc's size classes (1, 1.25, 1.5, 1.75) * 2^j bits at
  least MIN_STEP apart, each kept one 64-byte block smaller: _stored_bits), from MIN_LEAF_BITS
  up to leaf_bits. The first layer
  starts at the smallest (196 leaves of 448 B for 10^8 URLs with the defaults); a leaf that
  fills below leaf_bits grows into one larger child, a full one splits; either way children
  start at the smallest size holding CHILD_FIT times their URLs, so leaves stay 0.8-1.0 full
  (about 4 copies of each URL while leaves grow and split, against 1.2-1.6 in format 4).
- A leaf keeps the fingerprints a split or growth gave it sorted and Elias-Fano coded
  (splittable/coding.py: about W - depth - log2(n) + 2 bits each, the depth's bits
  being known from its place), and those it reported new since raw (ceil(W / 8) bytes each),
  until it splits or grows and its children code them.
Bits per URL = Bloom bits / the leaves' mean fill + coded and raw fingerprints + the raw
strings' room (and, in Redis, keys): measured in benchmarks/REDIS.md, "dsbf-v5".

Shared by many processes through Redis (shared/leaves.py) or kept in this process
(splittable/tree.py). A split takes a lock with a deadline in the tree hash; writers keep
writing to the splitting leaf (its fingerprints are copied as they come, so no URL added during
a split is lost), the leaf is sealed, the rest copied, then the tree swaps the leaf for the
children atomically, only for the lock's holder (a splitter whose lock expired cannot install
stale children). Writers that hit a sealed leaf reload the tree; if its splitter died, they
finish the split.

In Redis each URL answered new is claimed in its leaf until acknowledged (shared/claims.py),
so it reaches a caller even if the client it was answered to dies first; a split copies the
sealed leaf's claims into the children. A call claims a leaf's new URLs in one record (format
urlseen-dsbf/6), which the acknowledgement deletes whole (shared/leaves.py). Every call
checks the filter's instance id: a tree or leaf whose keys vanished stops the client with
FilterLostError instead of a wait.
"""

from __future__ import annotations

import itertools
import math
import secrets
import struct
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from urlseen import _core, defaults
from urlseen.bloom import sizing
from urlseen.errors import ConfigError, FilterLostError, FormatError, RemoteError
from urlseen.protocol import FilterStats, Key, key_batch
from urlseen.shared.claims import Claimant, Claims, Patience
from urlseen.shared.client import LOST_HELP, new_instance
from urlseen.splittable import coding as fingerprint_code
from urlseen.splittable.sizing import size_splittable
from urlseen.splittable.tree import (
    MISSING,
    LeafAnswer,
    LeafOp,
    LeafStore,
    MemoryLeafStore,
    Split,
    Tree,
)
from urlseen.state import space

FORMAT = "urlseen-dsbf/6"  # /5: claims per key only (no :records per leaf); /4: 5-byte
# fingerprints kept raw, LocHash below the root, sizes by 4x; /3: full-size leaves from the
# start; /2: no instance id, no claims; /1 named its params n, f, m, b, u, c
UPGRADE = (
    "urlseen-dsbf/6 keeps each call's claims in one record per leaf; urlseen-dsbf/5 kept "
    "them per URL, and older formats differ more: rebuild the filter (or use a new name)"
)
DEFAULT_LEAF_BITS = 1 << 23  # 1 MiB per leaf: 541,607 URLs at error_rate 0.001 (blocked)
LOCK_LEASES = 3  # a split lock lasts 3 leases (30 s by default), renewed after each chunk
GRACE_SECONDS = 60.0  # a split leaf's keys outlive the swap this long, for stale readers
COPY_CHUNK = 8192  # fingerprints copied per step of a split
REROUTE_SECONDS = 60.0  # how long a batch waits for a stuck split before RemoteError
MAX_FINGERPRINT_BYTES = 1 << 29  # one Redis string: 512 MiB
CHILD_FIT = 1.15  # a split's (or growth's) children hold this many times their URLs
MIN_STEP = 1.15  # leaf sizes: allocator classes (1, 1.25, 1.5, 1.75) * 2^j bits, this far apart
SMALL_LEAF = 4  # leaves below 1/4 of leaf_bits ...
SMALL_GROW = 2  # ... grow 2x at least
MIN_LEAF_BITS = 4096  # the first layer's leaves: at least this many bits ...
MIN_LEAF_URLS = 64  # ... holding at least this many URLs at the error rate
LEAF_OVERHEAD_BYTES = 512  # a leaf's keys and objects besides its bits (memory check)
GROWTH_ALLOWANCE = 1024  # fingerprints stay exact enough until a first-layer subtree holds ...
COLLISION_SHARE = 0.3  # ... this many full leaves' URLs at this share of the error rate
MIN_FINGERPRINT_BITS = 32
MAX_SPREAD = 1024  # a round sends a leaf up to this many times its room if its keys are seen


def _new_seed() -> int:
    return secrets.randbits(64)


class SplittableBloomFilter(Claimant):
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
            _fingerprint_bits).
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
        self._claims = Claims(lease)
        if store is None:
            if redis is None:
                store = MemoryLeafStore()
            else:
                from urlseen.shared.leaves import RedisLeafStore

                store = RedisLeafStore(redis, name)
                store.check_eviction(allow_eviction)
        self._store = store
        self.name = name
        tree = store.load()
        given = {"capacity": capacity, "error_rate": error_rate, "leaf_bits": leaf_bits,
                 "fanout": fanout, "layout": layout, "seed": seed,
                 "fp_bytes": fingerprint_bytes}  # fmt: skip
        if tree is None:
            if capacity is None:
                raise ConfigError(f"no splittable filter {name!r}: give a capacity to create it")
            params = _params(
                capacity,
                defaults.EXACT_ERROR_RATE if error_rate is None else error_rate,
                DEFAULT_LEAF_BITS if leaf_bits is None else leaf_bits,
                2 if fanout is None else fanout,
                "blocked" if layout is None else layout,
                0 if seed is None else seed,
                fingerprint_bytes,
            )
            if isinstance(store, MemoryLeafStore):  # the first layer, at its first size, now
                first_layer = params["first_leaves"] * (
                    params["first_leaf_bits"] // 8 + LEAF_OVERHEAD_BYTES
                )
                space.check_memory(first_layer, space.describe({"kind": "dsbf", **params}))
            root = Split(_new_seed(), tuple(str(i) for i in range(params["first_leaves"])))
            store.create(params, root, params["first_leaf_bits"])  # of two at once, one wins
            tree = store.load()
            assert tree is not None
        _check_params(tree.params, name)
        if not tree.ready:  # its creator may have died before making the first leaves
            first = tree.params["first_leaf_bits"]
            store.make_leaves(tree.splits["root"].children, first, tree.params)
            store.mark_ready()
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
        self.first_leaf_bits, self.fingerprint_bytes = p["first_leaf_bits"], p["fp_bytes"]
        self.fingerprint_bits = p["fp_bits"]
        self._capacities = {bits: capacity for bits, capacity, _ in p["leaf_sizes"]}
        chain = [bits for bits, _, _ in p["leaf_sizes"]]
        self._full_bits = chain[-1]  # leaf_bits as stored (see _stored_bits)
        self._chain = [(bits, capacity) for bits, capacity, _ in p["leaf_sizes"]]
        self._instance = p["instance"]
        self.splits_done = 0
        self.grows_done = 0
        self._calls: dict[bytes, int] = {}  # held digest -> the call whose record claims it
        self._spread = 1.0  # keys sent per key that may be new, as the last round found

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a splittable filter called name."""
        from urlseen.shared.leaves import RedisLeafStore

        return RedisLeafStore(redis, name).holds_kind()

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
            raise FilterLostError(f"splittable filter {self.name!r}: its tree {what}; {LOST_HELP}")
        self._tree = tree

    def _capacity(self, leaf: str) -> int:
        """The URLs this leaf holds at error_rate (it grows or splits on reaching them)."""
        return int(self._capacities[self._tree.sizes.get(leaf, self._full_bits)])

    def _lost_leaf(self, leaf: str) -> FilterLostError:
        return FilterLostError(f"splittable filter {self.name!r}: leaf {leaf} is gone; {LOST_HELP}")

    # -- the seen-test ---------------------------------------------------------------------

    def _run(self, keys: Iterable[Key], op: LeafOp) -> list[bool]:
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        digests = _core.digests(keys, _core.HASH_XXH3_128, self.seed)
        if op != LeafOp.ADD:
            return self._each_leaf(digests, op, 0)
        claims = self._claims
        with claims.batch(self._abandon, digests) as priority:
            answers = self._each_leaf(digests, op, priority)
        if claims.auto:
            self.acknowledge()
        return answers

    def _each_leaf(
        self, digests: list[bytes], op: LeafOp, priority: int, calls: list[int] | None = None
    ) -> list[bool]:
        """One LeafOp on each fingerprint in the leaf the tree routes it to, until every leaf
        has answered: through splits (rerouted), and for ADD through other clients' claims
        (asked again, about one lease at most). Claims are held as digests (for routing), with
        the call whose record holds each (DROP's `calls`: 0 for one claimed by itself).

        Keys wait in a queue per leaf, in batch order (a repeat within the batch follows its
        first): a round sends each leaf the head of its queue, and only the keys of a leaf
        that split or grew since are routed again, from it down. (Routing the whole batch
        each round made a batch of 8192 into small, growing leaves quadratic: ~100 rounds,
        29 s of a 48 s `urlseen dedup` of 200k lines.) An ADD may add a leaf's room
        (capacity / 16) per round, the most one call can overfill it; keys found seen don't
        count, so a round sends as many more as the last one found seen (up to MAX_SPREAD
        times the room) and the store defers those past the room. (One room per round made a
        batch of 65,536 mostly repeats into a small leaf take hundreds of rounds: `urlseen
        dedup --filter dsbf --redis` of 1M dev lines cost Redis 3.3x pipelined SADD's CPU.)"""
        fps, roots, values = self._keys(digests)
        answers = [False] * len(fps)
        queues: dict[str, list[int]] = defaultdict(list)
        for i in range(len(fps)):
            queues[self._route(roots[i], values[i])].append(i)
        deadline = time.monotonic() + REROUTE_SECONDS
        stuck_wait = 0.005
        patience: Patience | None = None
        while queues:
            splits = self._tree.splits
            for node in [leaf for leaf in queues if leaf in splits]:
                for i in queues.pop(node):  # in order: each child's queue stays in order
                    leaf = node
                    while leaf in splits:
                        leaf = splits[leaf].child(values[i])
                    queues[leaf].append(i)
            groups: dict[str, list[int]] = {}
            rooms: dict[str, int] | None = {} if op == LeafOp.ADD else None
            for leaf, idx in queues.items():
                send = len(idx)
                if rooms is not None:  # (see leaf_write_limit)
                    rooms[leaf] = max(1, self._capacity(leaf) // 16)
                    send = int(rooms[leaf] * self._spread)
                groups[leaf], queues[leaf] = idx[:send], idx[send:]
            claim = self._claims.args(priority)
            records = None
            if calls is not None:
                records = {leaf: [calls[i] for i in idx] for leaf, idx in groups.items()}
            replies = self._store.check_and_add(
                {leaf: [fps[i] for i in idx] for leaf, idx in groups.items()},
                op,
                claim,
                records,
                rooms,
            )
            again: dict[str, list[int]] = {}  # keys asked again, per leaf, in order
            later: dict[str, list[int]] = {}  # ... of them, those past the leaf's room
            moved: list[str] = []
            full: list[str] = []
            missing: list[str] = []
            sent = maybe_new = 0
            for leaf, idx in groups.items():
                reply = replies[leaf]
                if not isinstance(reply, LeafAnswer):
                    again[leaf] = idx
                    (missing if reply is MISSING else moved).append(leaf)
                    continue
                for i, new in zip(idx, reply.new, strict=True):
                    answers[i] = new
                if reply.pending or reply.deferred:
                    again[leaf] = [idx[j] for j in sorted(reply.pending + reply.deferred)]
                    later[leaf] = [idx[j] for j in reply.deferred]
                if op == LeafOp.ADD:
                    sent += len(idx)
                    maybe_new += sum(reply.new) + len(reply.pending) + len(reply.deferred)
                    if self._store.claims:
                        got = [i for i in idx if answers[i]]
                        loose = {idx[j] for j in reply.loose}
                        for i in got:
                            self._calls[digests[i]] = 0 if i in loose else int(claim[2])
                        self._claims.hold([digests[i] for i in got], priority)
                    if reply.count >= self._capacity(leaf):
                        full.append(leaf)
            if sent:  # ADD only: an acknowledgement's answers say nothing of what is seen
                self._spread = min(MAX_SPREAD, max(1.0, sent / max(1, maybe_new)))
            for leaf in full:
                self._split(leaf)
            waiting = any(  # keys another client's claims hold, not just deferred ones
                leaf not in moved + missing and len(idx) > len(later.get(leaf, ()))
                for leaf, idx in again.items()
            )
            if waiting:
                patience = patience or Patience(self._claims.lease)
                if not patience.wait():  # claims that outlive this wait: answered seen
                    again = {
                        leaf: idx if leaf in moved + missing else later.get(leaf, [])
                        for leaf, idx in again.items()
                    }
                self._renew()
            if moved or missing:
                version = self._tree.version
                self._reload()
                live = {leaf for leaf, _ in self._tree.leaves()}
                for leaf in missing:
                    if leaf in live:  # not split and expired: lost
                        raise self._lost_leaf(leaf)
                if self._tree.version == version and not missing:  # a sealed leaf still in
                    for leaf in moved:  # the tree: a split is on, or died
                        self._split(leaf)
                    if time.monotonic() > deadline:
                        raise RemoteError(
                            f"splittable filter {self.name!r}: a split did not finish within "
                            f"{REROUTE_SECONDS:.0f} s"
                        )
                    time.sleep(stuck_wait)
                    stuck_wait = min(stuck_wait * 2, 0.5)
            for leaf, idx in again.items():  # the head of the leaf's queue: before the rest
                queues[leaf] = idx + queues[leaf]
            queues = defaultdict(list, {leaf: idx for leaf, idx in queues.items() if idx})
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

    def _release(self, digests: list[bytes], how: str) -> int:
        if not digests:
            return 0
        return self._each_leaf(digests, LeafOp[how.upper()], 0).count(False)

    def acknowledge(self) -> int:
        """As Claimant.acknowledge; claims younger than half a lease (each batch's, just
        before add_many returns) are deleted unread (LeafOp.DROP: per leaf one HDEL of each
        call's record, no work per key), as RedisBloomFilter does. A DROP on a sealed leaf
        answers MOVED and is sent again to the children after the swap (_each_leaf), after
        the split copied its claims there (shared/leaves.py)."""
        calls, self._calls = self._calls, {}

        def drop(digests: list[bytes]) -> int:
            marks = [calls.get(d, 0) for d in digests]
            return self._each_leaf(digests, LeafOp.DROP, 0, marks).count(False)

        return self._acknowledge_by(drop)

    # -- splitting --------------------------------------------------------------------------

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
        lock_ms = LOCK_LEASES * self._claims.lease_ms
        status, stale = store.lock(leaf, token, lock_ms)
        if status != "ok":
            if status == "done":
                self._reload()
            return False
        store.drop(stale)  # children of an attempt whose lock expired: never installed
        # An error below leaves the lock held: it lists the children, and whoever takes it
        # over once it expires drops them before splitting again.
        children = store.new_leaf_ids(1 if grows else self.fanout)
        if not store.refresh(leaf, token, lock_ms, children):
            return False
        universe = self._universe(leaf)
        held, start = self._held(leaf, universe)
        if grows:
            split = Split(0, tuple(children))
        else:
            shift = universe - (self.fanout.bit_length() - 1)
            if shift < 0:
                raise RemoteError(
                    f"splittable filter {self.name!r}: leaf {leaf} cannot split: its "
                    f"{self.fingerprint_bits}-bit fingerprints are all routing bits"
                )
            split = Split(0, tuple(children), shift)
        parts = _parts(split, held)
        child_bits = self._fitted(max(len(v) for v in parts.values()), bits if grows else 0)
        store.make_leaves(children, child_bits, self._tree.params)
        for child, values in parts.items():
            self._fill(child, values, universe if grows else split.shift)
        if not store.refresh(leaf, token, lock_ms, children):
            return False
        end = store.seal(leaf)  # no more writes to the leaf: the rest is final
        if end < 0 or self._copy(leaf, split, start, end, token) is None:
            store.drop(children)
            return False
        store.copy_claims(leaf, split)  # sealed: no new claims; acknowledgements come again
        if not store.swap(leaf, token, split, child_bits):
            store.drop(children)
            return False
        store.retire(leaf, GRACE_SECONDS)
        if grows:
            self.grows_done += 1
        else:
            self.splits_done += 1
        self._reload()
        return True

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

    def _held(self, leaf: str, universe: int) -> tuple[np.ndarray, int]:
        """The fingerprints the leaf holds now (coded and raw) and its raw tail's length in
        bytes. A coded block that fails its checks, or fingerprints of another prefix, raise
        FormatError: a split never routes what it cannot trust."""
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
        return values, len(raw)

    def _damaged(self, leaf: str) -> str:
        return f"splittable filter {self.name!r}: leaf {leaf} is damaged"

    def _fitted(self, count: int, above: int) -> int:
        """The smallest leaf size over `above` bits that holds CHILD_FIT * count URLs; a leaf
        below 1/SMALL_LEAF of leaf_bits grows to SMALL_GROW times its size at least (a growth
        costs a few script calls whatever the size: small leaves hold few of the URLs)."""
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
            raise self._lost_leaf(child)
        if isinstance(reply, LeafAnswer):
            return
        for at in range(0, len(fps), COPY_CHUNK):
            copied = self._store.check_and_add({child: fps[at : at + COPY_CHUNK]}, LeafOp.COPY)
            if not isinstance(copied[child], LeafAnswer):  # fresh children take every copy
                raise self._lost_leaf(child)

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
                    raise self._lost_leaf(child)
            start += len(data)
            if not store.refresh(leaf, token, LOCK_LEASES * self._claims.lease_ms, split.children):
                return None
        return start

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

    def claims_held(self) -> int:
        return sum(leaf["claims"] for leaf in self.leaves())

    def stats(self) -> FilterStats:
        leaves = self.leaves()
        count = sum(leaf["count"] for leaf in leaves)
        p = self._tree.params
        worst = max(
            (sizing.error_rate_at(p["layout"], leaf["bits"], self.k, leaf["count"])
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


def _parts(split: Split, values: np.ndarray) -> dict[str, np.ndarray]:
    """Fingerprints by the child of `split` each goes to (prefix routing, or a growth's one)."""
    if len(split.children) == 1:
        return {split.children[0]: values}
    side = (values >> np.uint64(split.shift)) & np.uint64(len(split.children) - 1)
    return {child: values[side == i] for i, child in enumerate(split.children)}


def _params(
    capacity: object,
    error_rate: object,
    leaf_bits: object,
    fanout: object,
    layout: object,
    seed: object,
    fingerprint_bytes: object = None,
) -> dict[str, Any]:
    if layout not in sizing.LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(sizing.LAYOUTS)}, not {layout!r}")
    if (
        isinstance(leaf_bits, bool)
        or not isinstance(leaf_bits, int)
        or leaf_bits % 512
        or not 512 <= leaf_bits <= 1 << 32
    ):
        raise ConfigError(f"leaf_bits must be a multiple of 512 in [512, 2**32], not {leaf_bits!r}")
    if (
        isinstance(fanout, bool)
        or not isinstance(fanout, int)
        or not 2 <= fanout <= 64
        or fanout & (fanout - 1)
    ):
        raise ConfigError(f"fanout must be a power of two in [2, 64], not {fanout!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 32:
        raise ConfigError(f"seed must be an int in [0, 2**32), not {seed!r}")
    full = _stored_bits(leaf_bits)
    _, rate = sizing.check_target(capacity, error_rate)
    leaf_rate = rate * (1 - COLLISION_SHARE)  # the rest is for equal fingerprints
    size = size_splittable(capacity, full, leaf_rate, layout)  # type: ignore[arg-type]
    if size.first_leaves * leaf_bits > sizing.MAX_BITS:
        raise ConfigError(
            f"capacity {capacity} needs a first layer of {size.first_leaves:,} leaves of "
            f"{leaf_bits} bits, more than the {sizing.MAX_BITS // 8 // 2**40} TiB a filter may "
            "take"
        )
    # A leaf reaching leaf_capacity splits; while the split runs, writers go on writing to it
    # (the copy takes their fingerprints too, so no URL added during a split is lost) up to
    # this limit, then wait for the split. With at most leaf_capacity / 16 keys per leaf per
    # round, a leaf never holds more than leaf_capacity * (1 + 1/8) URLs.
    write_limit = _write_limit(size.leaf_capacity)
    if fingerprint_bytes is None:
        fp_bits = _fingerprint_bits(size.leaf_capacity, rate)
        fingerprint_bytes = -(-fp_bits // 8)
    elif (
        isinstance(fingerprint_bytes, bool)
        or not isinstance(fingerprint_bytes, int)
        or not 4 <= fingerprint_bytes <= 8
    ):
        raise ConfigError(f"fingerprint_bytes must be an int in [4, 8], not {fingerprint_bytes!r}")
    else:
        fp_bits = 8 * fingerprint_bytes
    if (write_limit + write_limit // 16) * fingerprint_bytes > MAX_FINGERPRINT_BYTES:
        raise ConfigError(
            f"a leaf of {leaf_bits} bits holds {size.leaf_capacity:,} URLs at error_rate "
            f"{error_rate}: their fingerprints would not fit one Redis string (512 MiB); use "
            "smaller leaves"
        )
    sizes = _leaf_sizes(leaf_bits, size.k, leaf_rate, layout)
    sizes[-1] = (full, size.leaf_capacity, write_limit)
    return {
        "format": FORMAT, "instance": new_instance(),
        "capacity": capacity, "error_rate": rate,
        "leaf_bits": leaf_bits, "fanout": fanout, "layout": layout, "seed": seed,
        "k": size.k, "leaf_capacity": size.leaf_capacity, "first_leaves": size.first_leaves,
        "leaf_write_limit": write_limit,
        "first_leaf_bits": sizes[0][0], "leaf_sizes": [list(shape) for shape in sizes],
        "fp_bytes": fingerprint_bytes, "fp_bits": fp_bits,
        "hash": "xxh3", "hash_id": _core.HASH_XXH3_128,
    }  # fmt: skip


def _fingerprint_bits(leaf_capacity: int, error_rate: float) -> int:
    """Bits of fingerprint per URL (W, 32 to 64): the fewest that keep collisions rare.

    A query whose fingerprint equals that of a URL under the same child of the root (which
    routes by other bits of the digest) is a false positive whatever the leaf's bits say: its
    rate is (URLs under that child) / 2^W. The children of the root hold leaf_capacity URLs
    each at the planned capacity; W keeps the rate <= COLLISION_SHARE * error_rate (the share
    the leaves leave for it) until they hold GROWTH_ALLOWANCE times that. Beyond, stats() adds
    the rate reached to its estimate. Kept raw, a fingerprint takes ceil(W / 8) bytes; coded
    (splittable/coding.py), a leaf at prefix depth d takes about W - d - log2(n) + 2 bits
    per URL.
    """
    need = GROWTH_ALLOWANCE * leaf_capacity / (COLLISION_SHARE * error_rate)
    return min(64, max(MIN_FINGERPRINT_BITS, math.ceil(math.log2(need))))


def _leaf_capacity(bits: int, k: int, error_rate: float, layout: str) -> int:
    """The most URLs a leaf of `bits` bits holds with k probes at error_rate (0 if none)."""
    top = sizing.standard_capacity(bits, k, error_rate)
    if layout == "standard":
        return top
    blocks, lo, hi = bits // sizing.BLOCK_BITS, 0, max(0, top)
    while lo < hi:  # the largest n <= top within the rate (the blocked rate rises with n)
        mid = (lo + hi + 1) // 2
        if sizing.blocked_error_rate(mid, blocks, k) <= error_rate:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _write_limit(capacity: int) -> int:
    return capacity + max(1, capacity // 16)


def _stored_bits(bits: int) -> int:
    """A leaf size as kept: an allocator class ((1, 1.25, 1.5 or 1.75) * 2^j bits) one 64-byte
    block smaller,
    so that its Redis string (bits + a 16-byte header) fits jemalloc's size class of that many
    bytes (MEMORY USAGE of a 16,384-byte string: 20,536 B; of 16,320 bytes: 16,440 B, Redis
    7.0.15)."""
    odd = bits // (bits & -bits)  # 1 for 2^j, 3, 5, 7 for 1.5, 1.25, 1.75 * 2^j
    return bits - 512 if bits >= 1024 and odd in (1, 3, 5, 7) else bits


def _leaf_sizes(
    leaf_bits: int, k: int, error_rate: float, layout: str
) -> list[tuple[int, int, int]]:
    """(bits, capacity, write limit) of each size a leaf passes through, smallest first: leaf_bits,
    then the allocator classes below it ((1, 1.25, 1.5, 1.75) * 2^j bits) at least MIN_STEP
    apart (steps of 1.2-1.33), down to MIN_LEAF_BITS and MIN_LEAF_URLS URLs; each as
    _stored_bits keeps it. Small steps keep leaves full: a split's children start at the size
    that fits their URLs (CHILD_FIT), a leaf that fills grows one step or more."""
    sizes = [leaf_bits]
    classes = sorted(
        {c << (j - 2) for j in range(12, 33) for c in (4, 5, 6, 7)}, reverse=True
    )  # jemalloc's 4 size classes per power of two, from 4096 bits (MIN_LEAF_BITS) to 2^32
    for smaller in classes:
        if smaller * MIN_STEP > sizes[0] or smaller < MIN_LEAF_BITS:
            continue
        if _leaf_capacity(_stored_bits(smaller), k, error_rate, layout) < MIN_LEAF_URLS:
            break
        sizes.insert(0, smaller)
    out = []
    for bits in map(_stored_bits, sizes):
        capacity = _leaf_capacity(bits, k, error_rate, layout)
        out.append((bits, capacity, _write_limit(capacity)))
    return out


_INT_PARAMS = ("capacity", "leaf_bits", "fanout", "seed", "k", "leaf_capacity", "first_leaves",
               "leaf_write_limit", "hash_id", "first_leaf_bits", "fp_bytes", "fp_bits")  # fmt: skip


def _check_params(p: dict[str, Any], name: str) -> None:
    if p.get("format") != FORMAT:
        raise FormatError(
            f"{name!r}: not a urlseen splittable filter this version can read (format "
            f"{p.get('format')!r}, not {FORMAT!r}): {UPGRADE}"
        )
    if (
        any(not isinstance(p.get(field), int) for field in _INT_PARAMS)
        or p.get("layout") not in sizing.LAYOUTS
        or p.get("hash_id") != _core.HASH_XXH3_128
        or not isinstance(p.get("instance"), str)
        or not isinstance(p.get("error_rate"), float)
        or not _sizes_ok(p.get("leaf_sizes"), p)
        or not 4 <= p["fp_bytes"] <= 8
        or p["fp_bytes"] != -(-p["fp_bits"] // 8)
        or p["fanout"] & (p["fanout"] - 1)
    ):
        raise FormatError(f"{name!r}: not a urlseen splittable filter this version can read")


def _sizes_ok(sizes: object, p: dict[str, Any]) -> bool:
    """leaf_sizes: [bits, capacity, write limit] rows of ints, growing from first_leaf_bits up
    to leaf_bits as stored."""
    return (
        isinstance(sizes, list)
        and bool(sizes)
        and all(
            isinstance(row, list) and len(row) == 3 and all(type(v) is int and v > 0 for v in row)
            for row in sizes
        )
        and sizes[0][0] == p.get("first_leaf_bits")
        and sizes[-1][0] == _stored_bits(p["leaf_bits"])
        and all(a[0] < b[0] for a, b in itertools.pairwise(sizes))
    )
