#!/usr/bin/env python3
"""A model of its tree whose leaves' split
fingerprint store, routing and split rule are pluggable (issue 17: <= 48 bits per distinct URL
at f = 1e-3 after growing 10x past capacity, with measured FP <= f).

Why a model: the filter's fingerprint format is shared by its Redis and in-memory stores and
read by running clients, so candidates are compared here first, in one process, on the same
URLs. The model keeps what decides memory and FP as the filter does, with urlseen's own code:
xxh3-128 digests (_core.digests), leaf Bloom filters (_core.BitFilter, blocked layout), sizing
(k, leaf capacities at 0.9 f, the leaf size chain, fingerprint width: splittable/filter.py), root
and LocHash routing (stores/splittable.Split), the batch rounds of at most capacity / 16 keys
per leaf, grow-then-split. It leaves out what does not change bits: claims, locks, Redis.
`--check` runs the real SplittableBloomFilter (in-memory store) beside the model on the same
URLs, so the model's leaves, fill and bits can be compared with the filter's.

Designs (DESIGNS; bits.py --designs picks some):
* today: format 4, the filter when this model was written: LocHash routing, fingerprints of
  8 * fp_bytes bits packed in one string per leaf, leaf sizes by 4x, 10% of f for collisions.
* ef: the same fingerprints, sorted and Elias-Fano coded per leaf (plus a raw tail of recent
  appends, compacted when it reaches 1/8 of the coded part).
* prefix-ef: below the root, depth d routes by bit d of a W-bit fingerprint (from its top
  bit down), so a leaf at depth d knows d bits of each fingerprint and keeps only the other W - d,
  Elias-Fano coded; W = ceil(log2(GROWTH_ALLOWANCE * leaf_capacity / (0.1 f))) bits, the
  filter's own collision rule without the rounding to bytes.
* prefix-ef-fit: prefix-ef with leaves sized to what they hold: the size chain steps by sqrt 2
  (not 4) and a split's children start at the smallest size holding 1.25 x their URLs (not
  at full size, half empty).
* prefix-ef-fit-30: prefix-ef-fit with 30% of f for equal fingerprints (not 10%): leaves at
  0.7 f, W 2 bits shorter.
* prefix-ef-fine-30: prefix-ef-fit-30 with the size chain stepping by 2^(1/4), children fit to
  1.15 x their URLs: fuller leaves, more copies.
* v5: the format built from prefix-ef-fit-30 (urlseen-dsbf/5, the filter now): its own sizes
  (allocator classes 2^j and 1.5 * 2^j bits), a growth fitted like a split's children, the
  fingerprints a split gives a child coded once and those it reports new kept raw (ceil(W / 8)
  bytes each) with no compaction; `--check` compares it with the real filter.

Measured per design: bits per distinct URL of the live leaves (Bloom bits, fingerprint store,
the store's room to grow in Redis modelled by bloom_batch.lua's own rule, and a per-leaf key
overhead: --leaf-overhead-bytes, measured by benchmarks/splittable/memory.py in Redis), at every
half capacity from 5x to 15x (splits come in waves), the FP rate on never-inserted URLs at 10x,
and the process CPU of splits and grows (decode, route, rebuild the children's bits, encode)
and of the store's compactions (on the insert path).

benchmarks/splittable/bits.py runs the designs on real URLs (its REPORT.md); tests/test_dsbf_bits.py
checks the model against the real filter. Needs numpy (the `bench` extra brings it).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from urlseen import _core
from urlseen.bloom import sizing as _sizing
from urlseen.splittable import sizing as dsbf
from urlseen.splittable.sizing import size_splittable
from urlseen.splittable.tree import Split, loc_hash

DATA = Path("/work/shared/data/urls-dev.txt.gz")
SECTIONS = {  # name: (first line, last line), 1-based, inclusive (the data's README)
    "dev": (1, 2_754_359),
    "phish": (1, 1_842_391),
    "news": (1_842_392, 2_213_377),
    "archive": (2_213_378, 2_754_359),
}
BATCH = 1000
LEAF_OVERHEAD_BYTES = (
    755  # a Redis leaf's keys besides bits and fingerprints (benchmarks/splittable/memory.py)
)
TAIL_SHARE = 8  # an Elias-Fano store compacts its raw tail when it reaches coded / 8 ...
MIN_TAIL = 64  # ... or this many entries, whichever is more


# -- fingerprint stores ---------------------------------------------------------------------


def string_class(size: int) -> int:
    """Bytes jemalloc gives a Redis string of `size` bytes written whole with SET (16 of header
    and terminator; 4 size classes per power of two), less those 16."""
    want = size + 16
    step = max(8, (1 << (want - 1).bit_length()) // 8)
    return -(-want // step) * step - 16


def redis_alloc(need: int, have: int) -> int:
    """Bytes Redis allocates for a fingerprint string of `need` bytes that had `have`: the rule
    of shared/lua/bloom_batch.lua (at least 1/8 larger, jemalloc's 4 classes per power of 2)."""
    if need <= have:
        return have
    if need > 1 << 20:
        return need + (1 << 20)  # SETRANGE: Redis grows by at most 1 MiB
    want = max(need, have + have // 8, 4096) + 16
    step = (1 << (want - 1).bit_length()) // 8
    return -(-want // step) * step - 16


def ef_low_bits(n: int, universe_bits: int) -> int:
    """Elias-Fano's low-part width: the one of floor(log2(U n)) - 1 .. + 1 that makes the code
    shortest (n L + n + U / 2^L bits; at 2^L ~ U ln 2 / n it costs what Golomb-Rice coding of
    the gaps costs, and keeps EF's split by a bit: one search in the high part)."""
    if n == 0:
        return 0
    base = math.floor(universe_bits - math.log2(n))
    widths = [w for w in (base - 1, base, base + 1) if 0 <= w <= universe_bits]
    return min(widths, key=lambda w: n * w + n + (1 << (universe_bits - w)))


def ef_encode(values: np.ndarray, universe_bits: int) -> tuple[bytes, int]:
    """Elias-Fano code of sorted distinct values < 2**universe_bits: (bytes, size in bits).

    Each value's low L bits packed, its high part in unary (bit high + i set). numpy does the
    packing; the Elias-Fano coders on PyPI here (ppef, sbits) are young."""
    n = len(values)
    if n == 0:
        return b"", 0
    low_bits = ef_low_bits(n, universe_bits)
    low = values & np.uint64((1 << low_bits) - 1)
    high = (values >> np.uint64(low_bits)).astype(np.int64)
    upper = np.zeros(n + int(high[-1]) + 1, dtype=np.uint8)
    upper[high + np.arange(n)] = 1
    shifts = np.arange(low_bits, dtype=np.uint64)
    lows = ((low[:, None] >> shifts) & np.uint64(1)).astype(np.uint8)
    data = np.packbits(lows.ravel()).tobytes() + np.packbits(upper).tobytes()
    return data, n * low_bits + len(upper)


def ef_decode(data: bytes, n: int, universe_bits: int) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    low_bits = ef_low_bits(n, universe_bits)
    low_bytes = -(-n * low_bits // 8)
    bits = np.unpackbits(np.frombuffer(data[:low_bytes], dtype=np.uint8))[: n * low_bits]
    weights = np.uint64(1) << np.arange(low_bits, dtype=np.uint64)
    low = bits.reshape(n, low_bits).astype(np.uint64) @ weights if low_bits else 0
    upper = np.unpackbits(np.frombuffer(data[low_bytes:], dtype=np.uint8))
    high = (np.flatnonzero(upper)[:n] - np.arange(n)).astype(np.uint64)
    return (high << np.uint64(low_bits)) | np.uint64(low)


class Store(Protocol):
    """A leaf's fingerprints (the bits below its known prefix), kept so that it can split."""

    universe: int
    compact_seconds: float

    def add(self, values: np.ndarray) -> None: ...

    def take(self) -> np.ndarray: ...

    def size_bits(self) -> int: ...

    def room_bits(self) -> int: ...


class PackedStore:
    """Today's layout: each fingerprint's bytes appended to one string (dsbf_batch.lua)."""

    compact_seconds = 0.0

    def __init__(self, universe_bits: int) -> None:
        self.universe = universe_bits
        self.width = -(-universe_bits // 8)
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.alloc = 0

    def add(self, values: np.ndarray) -> None:
        self.parts.append(values)
        self.n += len(values)
        self.alloc = redis_alloc(self.n * self.width, self.alloc)

    def take(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.uint64)

    def size_bits(self) -> int:
        return 8 * self.width * self.n

    def room_bits(self) -> int:
        return 8 * self.alloc - self.size_bits()


class EliasFanoStore:
    """Sorted fingerprints, Elias-Fano coded, and a raw tail of the latest appends: the tail is
    merged into the code when it reaches 1/TAIL_SHARE of it (a rewrite: amortized O(1) copies
    per URL), so appends stay cheap and most of the store is coded."""

    def __init__(self, universe_bits: int, raw_bytes: int = 0, compact: bool = True) -> None:
        self.universe = universe_bits
        self.width = raw_bytes or -(-universe_bits // 8)
        self.compact = compact  # False: only seed() codes (format 5: a split codes, no merges)
        self.coded, self.coded_n, self.coded_bits = b"", 0, 0
        self.tail: list[np.ndarray] = []
        self.tail_n = 0
        self.alloc = 0
        self.compact_seconds = 0.0

    def add(self, values: np.ndarray) -> None:
        self.tail.append(values)
        self.tail_n += len(values)
        if self.compact and self.tail_n >= max(MIN_TAIL, self.coded_n // TAIL_SHARE):
            started = time.process_time()
            merged = self.take()
            self.coded, self.coded_bits = ef_encode(merged, self.universe)
            self.coded_n, self.tail, self.tail_n = len(merged), [], 0
            self.alloc = string_class(self._bytes())  # rewritten whole with SET
            self.compact_seconds += time.process_time() - started
        else:
            self.alloc = redis_alloc(self._bytes(), self.alloc)

    def seed(self, values: np.ndarray) -> None:
        """A fresh store's first fingerprints, coded at once (a split's children)."""
        self.coded, self.coded_bits = ef_encode(np.sort(values), self.universe)
        self.coded_n = len(values)
        self.alloc = string_class(self._bytes())

    def _bytes(self) -> int:
        return len(self.coded) + 16 + self.tail_n * self.width  # 16: counts and widths

    def take(self) -> np.ndarray:
        parts = [ef_decode(self.coded, self.coded_n, self.universe), *self.tail]
        return np.sort(np.concatenate(parts))

    def size_bits(self) -> int:
        return self.coded_bits + 8 * (16 + self.tail_n * self.width)

    def room_bits(self) -> int:
        return 8 * self.alloc - self.size_bits()


STORES = {"packed": PackedStore, "ef": EliasFanoStore}


def entropy_bits(n: int, universe_bits: int) -> float:
    """log2 C(2^u, n): the fewest bits any code of n distinct u-bit values can take."""
    if universe_bits > 40:  # lgamma loses the difference; n << U: log2(U^n / n!)
        return n * universe_bits - math.lgamma(n + 1) / math.log(2)
    u = 2.0**universe_bits
    return (math.lgamma(u + 1) - math.lgamma(n + 1) - math.lgamma(u - n + 1)) / math.log(2)


# -- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Design:
    name: str
    routing: str  # "loc": LocHash of the fingerprint (today); "prefix": bit d at depth d
    store: str  # a key of STORES
    exact_width: bool = False  # W from the collision rule in bits, not rounded to bytes
    grow: float = 4.0  # the leaf size chain's ratio (format 4's)
    child_fit: float | None = None  # None: split children at full size; x: fit x * count
    collision_share: float = 0.1  # of f for equal fingerprints (the rest: bits; format 4's)
    built: bool = False  # the filter's own sizing and raw tail (format 5: v5)


DESIGNS = {
    "today": Design("today", "loc", "packed"),
    "ef": Design("ef", "loc", "ef"),
    "prefix-ef": Design("prefix-ef", "prefix", "ef", exact_width=True),
    "prefix-ef-fit": Design(
        "prefix-ef-fit", "prefix", "ef", exact_width=True, grow=math.sqrt(2), child_fit=1.25
    ),
    "prefix-ef-fit-30": Design(
        "prefix-ef-fit-30", "prefix", "ef", True, math.sqrt(2), 1.25, collision_share=0.3
    ),
    "prefix-ef-fine-30": Design(
        "prefix-ef-fine-30", "prefix", "ef", True, 2**0.25, 1.15, collision_share=0.3
    ),
    "v5": Design("v5", "prefix", "ef", True, 0.0, dsbf.CHILD_FIT, dsbf.COLLISION_SHARE, True),
}


@dataclass
class Leaf:
    size: int  # index in the size chain
    bits: _core.BitFilter
    buffer: bytearray
    depth: int  # splits between it and the root's child it is under
    prefix: int  # the top `depth` fingerprint bits of its URLs (prefix routing)
    store: Store
    count: int = 0


@dataclass
class Stats:
    splits: int = 0
    grows: int = 0
    copied: int = 0
    split_seconds: float = 0.0
    compact_seconds: float = 0.0  # of the leaves split so far
    code_seconds: float = 0.0  # of split_seconds: the stores' decoding and encoding
    reported_new: int = 0
    checkpoints: list[dict[str, Any]] = field(default_factory=list)


class Model:
    """A splittable filter's tree in one process: the filter's routing and sizing, a Design's
    fingerprint store, routing below the root and split rule."""

    def __init__(
        self,
        design: Design,
        capacity: int,
        error_rate: float,
        leaf_bits: int,
        width: int | None = None,
    ) -> None:
        self.design = design
        share = design.collision_share
        if design.built:  # the filter's own parameters
            p = dsbf.params(capacity, error_rate, leaf_bits, 2, "blocked", 0)
            self.k = p["k"]
            self.chain = [(bits, cap) for bits, cap, _ in p["leaf_sizes"]]
        else:
            rate = _sizing.check_target(capacity, error_rate)[1] * (1 - share)
            full = dsbf.stored_bits(leaf_bits)
            self.k = size_splittable(capacity, full, rate, "blocked").k
            self.chain = _chain(leaf_bits, design.grow, self.k, rate)
        self.full = len(self.chain) - 1
        if width is not None:  # a given W (tests of the collision rate)
            self.width = width
        elif design.built:
            self.width = p["fp_bits"]
        elif design.exact_width:
            need = dsbf.GROWTH_ALLOWANCE * self.chain[-1][1] / (share * error_rate)
            self.width = math.ceil(math.log2(need))
        else:  # format 4's rule: whole bytes
            need = dsbf.GROWTH_ALLOWANCE * self.chain[-1][1] / (share * error_rate)
            self.width = 8 * min(8, max(4, math.ceil(math.log2(need) / 8)))
        first = -(-capacity // self.chain[-1][1])  # as size_splittable: capacity / leaf's
        self.root = Split(0x5EED, tuple(str(i) for i in range(first)))
        self.nodes: dict[str, Any] = {}  # internal node -> Split, or ("prefix", (c0, c1))
        self.leaves: dict[str, Leaf] = {}
        self.next_id = first
        self.stats = Stats()
        self.rng = np.random.default_rng(7)
        for child in self.root.children:
            self.leaves[child] = self._leaf(0, 0, 0)

    def _leaf(self, size: int, depth: int, prefix: int) -> Leaf:
        bits = self.chain[size][0]
        buffer = bytearray(bits // 8)
        bloom = _core.BitFilter(
            buffer, 0, bits, self.k, _core.LAYOUT_BLOCKED, 0, 0, -1, _core.HASH_XXH3_128
        )
        store: Store
        if self.design.built:
            store = EliasFanoStore(self._universe(depth), -(-self.width // 8), compact=False)
        else:
            store = STORES[self.design.store](self._universe(depth))
        return Leaf(size, bloom, buffer, depth, prefix, store)

    def _universe(self, depth: int) -> int:
        return self.width - depth if self.design.routing == "prefix" else self.width

    # -- keys and routing

    def keys(self, digests: Sequence[bytes]) -> tuple[np.ndarray, list[str]]:
        """Fingerprint values (W bits) and root children of a batch of 16-byte digests: the
        root routes by bytes 8-15 as the filter does; the fingerprint is the low W bits of the
        first 8 (little-endian): today's first fp_bytes bytes, a prefix design's a part of them
        (so a format-4 leaf's fingerprints hold a prefix design's when W <= 8 fp_bytes)."""
        words = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)
        fps = words[:, 0] & np.uint64((1 << self.width) - 1)
        return fps.astype(np.uint64), [self.root.child(int(v)) for v in words[:, 1]]

    def bloom_keys(self, fps: np.ndarray) -> list[bytes]:
        raw = fps.astype("<u8").tobytes()
        loc = self.design.routing == "loc" or self.design.built
        width = -(-self.width // 8) if loc else 8
        return [raw[i : i + width] for i in range(0, len(raw), 8)]

    def route(self, node: str, fp: int) -> str:
        while node in self.nodes:
            split = self.nodes[node]
            if isinstance(split, Split):
                node = split.child(fp)
            else:
                leaf_depth, children = split
                node = children[(fp >> (self.width - 1 - leaf_depth)) & 1]
        return node

    # -- inserting and splitting

    def add(self, fps: np.ndarray, roots: list[str]) -> np.ndarray:
        """One batch, as SplittableBloomFilter._each_leaf: rounds of at most capacity / 16
        keys per leaf, full leaves split or grow between rounds. True where new."""
        answers = np.zeros(len(fps), dtype=bool)
        pending = list(range(len(fps)))
        while pending:
            groups: dict[str, list[int]] = defaultdict(list)
            later: list[int] = []
            for i in pending:
                leaf = self.route(roots[i], int(fps[i]))
                group = groups[leaf]
                room = max(1, self.chain[self.leaves[leaf].size][1] // 16)
                (group if len(group) < room else later).append(i)
            for leaf_id, idx in groups.items():
                leaf = self.leaves[leaf_id]
                chosen = fps[idx]
                new = np.array(leaf.bits.add_many(self.bloom_keys(chosen)), dtype=bool)
                answers[idx] = new
                fresh = chosen[new]
                leaf.store.add(self._kept(fresh, leaf.depth))
                leaf.count += len(fresh)
                self.stats.reported_new += len(fresh)
            for leaf_id in groups:
                leaf = self.leaves[leaf_id]
                if leaf.count >= self.chain[leaf.size][1]:
                    self._split(leaf_id)
            pending = later
        return answers

    def _kept(self, fps: np.ndarray, depth: int) -> np.ndarray:
        """What a leaf at this depth keeps of fingerprints: the bits below its prefix."""
        return fps & np.uint64((1 << self._universe(depth)) - 1)

    def _split(self, leaf_id: str) -> None:
        started = time.process_time()
        leaf = self.leaves.pop(leaf_id)
        self.stats.compact_seconds += leaf.store.compact_seconds
        kept = leaf.store.take()
        self.stats.code_seconds += time.process_time() - started
        rest = self._universe(leaf.depth)
        fps = (np.uint64(leaf.prefix) << np.uint64(rest)) | kept if rest < 64 else kept
        if leaf.size < self.full:  # a small leaf grows: one child, the next size (v5: or more)
            child = self._new_id()
            self.nodes[leaf_id] = Split(0, (child,))
            size = max(leaf.size + 1, self._child_size(len(fps))) if self.design.built else 0
            parts = {child: (fps, size or leaf.size + 1, leaf.depth, leaf.prefix)}
            self.stats.grows += 1
        else:
            c0, c1 = self._new_id(), self._new_id()
            if self.design.routing == "prefix":
                self.nodes[leaf_id] = (leaf.depth, (c0, c1))
                side = ((kept >> np.uint64(rest - 1)) & np.uint64(1)).astype(bool)
            else:
                split = Split(int(self.rng.integers(1 << 63)), (c0, c1))
                self.nodes[leaf_id] = split
                side = np.array([loc_hash(int(v), split.seed) & 1 for v in fps], dtype=bool)
            size = self._child_size(len(fps) / 2)
            depth = leaf.depth + 1
            shift = 1 if self.design.routing == "prefix" else 0  # LocHash: no prefix known
            parts = {
                c0: (fps[~side], size, depth, leaf.prefix << shift),
                c1: (fps[side], size, depth, (leaf.prefix << shift) | shift),
            }
            self.stats.splits += 1
        for child_id, (values, size, depth, prefix) in parts.items():
            child = self._leaf(size, depth, prefix)
            child.bits.add_many(self.bloom_keys(values))  # LeafOp.COPY: every one counts
            coding = time.process_time()
            if isinstance(child.store, EliasFanoStore) and not child.store.compact:
                child.store.seed(self._kept(values, depth))
            else:
                child.store.add(self._kept(values, depth))
            self.stats.code_seconds += time.process_time() - coding
            child.store.compact_seconds = 0.0  # its first coding is the split's work
            child.count = len(values)
            self.leaves[child_id] = child
        self.stats.copied += len(fps)
        self.stats.split_seconds += time.process_time() - started

    def _child_size(self, count: float) -> int:
        if self.design.child_fit is None:
            return self.full
        for size, (_, capacity) in enumerate(self.chain):
            if capacity >= self.design.child_fit * count:
                return size
        return self.full

    def _new_id(self) -> str:
        self.next_id += 1
        return str(self.next_id)

    # -- what it holds

    def contains(self, fps: np.ndarray, roots: list[str]) -> int:
        """How many of these are answered present."""
        groups: dict[str, list[int]] = defaultdict(list)
        for i, root in enumerate(roots):
            groups[self.route(root, int(fps[i]))].append(i)
        return sum(
            sum(self.leaves[leaf].bits.contains_many(self.bloom_keys(fps[idx])))
            for leaf, idx in groups.items()
        )

    def bits(self, n: int, overhead_bytes: int) -> dict[str, float]:
        leaves = self.leaves.values()
        counts = [leaf.count for leaf in leaves]
        capacity = [self.chain[leaf.size][1] for leaf in leaves]
        bloom = sum(self.chain[leaf.size][0] for leaf in leaves)
        store = sum(leaf.store.size_bits() for leaf in leaves)
        room = sum(leaf.store.room_bits() for leaf in leaves)
        bound = sum(entropy_bits(leaf.count, leaf.store.universe) for leaf in leaves)
        over = 8 * overhead_bytes * len(counts)
        return {
            "urls": n,
            "leaves": len(counts),
            "mean_fill": sum(c / cap for c, cap in zip(counts, capacity, strict=True))
            / len(counts),
            "bloom": bloom / n,
            "fingerprints": store / n,
            "fingerprint_bound": bound / n,
            "room": room / n,
            "leaf_overhead": over / n,
            "total": (bloom + store + room + over) / n,
            "payload": (bloom + store) / n,
        }

    def collision_rate(self) -> float:
        """The FP rate from equal fingerprints in the fullest child of the root (dsbf's
        _collision_rate): its URLs / 2^W."""
        under: dict[str, int] = defaultdict(int)
        for leaf_id, leaf in self.leaves.items():
            top = leaf_id
            while top not in self.root.children:
                top = self._parent(top)
            under[top] += leaf.count
        return max(under.values()) / 2.0**self.width

    def leaf_error_rate(self) -> float:
        """The worst leaf's Bloom FP rate by the blocked formula (dsbf's stats())."""
        return max(
            _sizing.error_rate_at("blocked", self.chain[leaf.size][0], self.k, leaf.count)
            for leaf in self.leaves.values()
        )

    def _parent(self, node: str) -> str:
        if not hasattr(self, "_parents"):
            self._parents: dict[str, str] = {}
        for parent, split in self.nodes.items():
            for child in split.children if isinstance(split, Split) else split[1]:
                self._parents[child] = parent
        return self._parents[node]

    def compact_seconds(self) -> float:
        live = sum(leaf.store.compact_seconds for leaf in self.leaves.values())
        return self.stats.compact_seconds + live


def _chain(leaf_bits: int, ratio: float, k: int, leaf_rate: float) -> list[tuple[int, int]]:
    """(bits, capacity) of each leaf size, smallest first: leaf_bits / ratio^j in multiples of
    512 bits, at least dsbf.MIN_LEAF_BITS and MIN_LEAF_URLS URLs, as dsbf.leaf_sizes for
    GROW."""
    sizes = [dsbf.stored_bits(leaf_bits)]
    while True:
        smaller = int(sizes[0] / ratio) // 512 * 512
        if smaller < dsbf.MIN_LEAF_BITS or smaller >= sizes[0]:
            break
        if dsbf.leaf_capacity_at(smaller, k, leaf_rate, "blocked") < dsbf.MIN_LEAF_URLS:
            break
        sizes.insert(0, smaller)
    return [(bits, dsbf.leaf_capacity_at(bits, k, leaf_rate, "blocked")) for bits in sizes]
