"""Where a SplittableBloomFilter keeps its tree and leaves: the protocol, and the in-memory form.

A store does the few operations that must be atomic, so that of clients racing on one URL only
one is told it is new and no split loses a URL: check-and-add a batch of fingerprints in one
leaf, seal a leaf, and change the tree under a fenced split lock. The filter
(splittable/filter.py) does everything else: routing, sizing, when and how to split. A store
shared by several clients also keeps each answer "new" claimed until its caller has it: the
filter sees answers new, seen or pending (another client's claim holds the key: ask again),
and tells the store when the caller has its answers (acknowledge). This wing knows no
particular store: the shared one (Redis) lives with the host code (urlseen.shared.leaves)
and implements this protocol; this in-memory form has the same semantics, one lock standing
in for Redis's one-script-at-a-time, so tests of the algorithm need no server.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

from urlseen import _core
from urlseen.bloom.bloom import LAYOUT_CODES
from urlseen.errors import ConfigError, FilterLostError

MOVED = None  # check_and_add's answer for a leaf that no longer takes writes
MISSING = "missing"  # ... for a leaf that does not exist (freed after a split, or lost)
PENDING = 0x50  # a shared leaf's answer byte (b"P") for a URL another client's claim holds
LEASE_SECONDS = 10.0  # how long an answer stays claimed by default; split locks last leases too
MAX_LEASE_SECONDS = 86_400.0
_M64 = (1 << 64) - 1


class LeafOp(IntEnum):
    """What LeafStore.check_and_add does to each key of a batch in its leaf.

    The values are what a shared store's leaf script receives as its operation.
    """

    CONTAINS = 0
    """Test only: True where some bit is 0 (absent). Writes nothing."""
    ADD = 1
    """The seen-test: test and set, True where some bit was 0 (new); new keys' fingerprints
    are appended to the leaf. Refused (MOVED) by a leaf at its write limit or sealed."""
    COPY = 2
    """A split copying fingerprints into a child: set, and count every key as new (none may
    be dropped as a false positive, or a later split would lose it)."""
    ACK = 3
    """Release the caller's claims of these fingerprints (True where still the caller's). A
    sealed leaf releases them and answers MOVED: its claims may be in its children too."""
    ABANDON = 4
    """End the lease of the caller's claims now (its caller never got the answers)."""
    RENEW = 5
    """Start a new lease for the caller's claims (it is still waiting inside its batch)."""
    DROP = 6
    """ACK of claims younger than half a lease (none can have been taken over), deleted
    unread: as many True as were deleted (a store without claims never gets a release). Each
    key's `records` entry (check_and_add) names the call whose record holds its claim: a
    record is deleted whole, with no work per key."""


class Follow(Protocol):
    """The filter's routing, lent to a store's claims: do `op` to fingerprints, each from the
    leaf it was answered in down through the splits since (`records`: per leaf and key, the
    number check_and_add's DROP takes); how many answered False (no longer the caller's)."""

    def __call__(
        self,
        held: Mapping[str, Sequence[bytes]],
        op: LeafOp,
        records: Mapping[str, Sequence[int]] | None = None,
    ) -> int: ...


def loc_hash(fingerprint: int, seed: int) -> int:
    """A node's LocHash: a 64-bit mix of the fingerprint and the node's own random seed.

    murmur3's fmix64 finalizer of (fp XOR seed): a bijection that avalanches every bit, so
    the routes of nodes with different seeds are independent of each other and of MapHash
    (xxh3 of the fingerprint bytes). Hand-written because it runs per URL per tree level.
    """
    x = fingerprint ^ seed
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _M64
    return x ^ (x >> 33)


def write_limit(params: Mapping[str, Any], bits: int) -> int:
    """The count at which a leaf of `bits` bits takes no more writes until it splits or grows
    (the tree's leaf_sizes: splittable/filter.py)."""
    for size, _, limit in params["leaf_sizes"]:
        if size == bits:
            return int(limit)
    raise ValueError(f"no leaf of {bits} bits in this tree")


def bit_filter(buffer: bytearray, nbits: int, params: Mapping[str, Any]) -> _core.BitFilter:
    """A leaf's Bloom filter over `buffer` (its first nbits bits), shaped by the tree's
    parameters: the bits every store sets for a fingerprint."""
    p = params
    layout = LAYOUT_CODES[p["layout"]]
    return _core.BitFilter(buffer, 0, nbits, p["k"], layout, p["seed"], 0, -1, p["hash_id"])


@dataclass(frozen=True)
class Split:
    """An internal node: its children, in order, and how it routes a fingerprint to one: by
    its LocHash seed (the root), or, with `shift` >= 0, by the fingerprint's bits from `shift`
    up (prefix routing below the root: splittable/filter.py). A leaf that grew has one child."""

    seed: int
    children: tuple[str, ...]
    shift: int = -1

    def child(self, fingerprint: int) -> str:
        """The child this node routes a fingerprint to."""
        if len(self.children) == 1:
            return self.children[0]
        if self.shift >= 0:
            return self.children[(fingerprint >> self.shift) % len(self.children)]
        return self.children[loc_hash(fingerprint, self.seed) % len(self.children)]

    def describe(self) -> str:
        if self.shift >= 0:
            return f"bits {self.shift} {','.join(self.children)}"
        return f"split {self.seed} {','.join(self.children)}"

    @staticmethod
    def parse(text: str) -> Split:
        how, number, children = text.split(" ")
        if how == "bits":
            return Split(0, tuple(children.split(",")), int(number))
        return Split(int(number), tuple(children.split(",")))

    @staticmethod
    def describes(text: str) -> bool:
        """Whether a tree node's text is an internal node's (else a leaf's: "leaf <bits>")."""
        return text.startswith(("split ", "bits "))


@dataclass(frozen=True)
class Tree:
    """A snapshot of the tree: version, parameters, every internal node by id (any id that is
    a child and not in `splits` is a leaf), and every leaf's size in bits (leaves start small
    and grow: splittable/filter.py)."""

    version: int
    params: dict[str, Any]
    splits: dict[str, Split]
    ready: bool = True  # False until the first leaves exist (a creator may have died first)
    sizes: dict[str, int] = field(default_factory=dict)

    def leaves(self) -> list[tuple[str, int]]:
        """Every leaf and its depth, in tree order (children of the root have depth 1)."""
        out, stack = [], [("root", 0)]
        while stack:
            node, depth = stack.pop()
            split = self.splits.get(node)
            if split is None:
                out.append((node, depth))
            else:
                stack.extend((child, depth + 1) for child in reversed(split.children))
        return out


@dataclass(frozen=True)
class LeafAnswer:
    """One leaf's part of a batch: per key True where new (absent), the leaf's count, and
    the positions of keys another client's claim holds (ask again)."""

    new: list[bool]
    count: int
    pending: list[int] = field(default_factory=list)
    claimed_per_key: list[int] = field(default_factory=list)  # keys answered new and claimed
    # one by one, not in their call's record (a takeover, a resent call)
    deferred: list[int] = field(default_factory=list)  # keys not done: past the call's room
    # (check_and_add); their `new` is False until they are sent again


LeafReply = LeafAnswer | None | str  # an answer, MOVED or MISSING


@dataclass(frozen=True)
class LeafInfo:
    state: str
    count: int
    fingerprint_bytes: int
    claims: int = 0  # answers "new" not acknowledged yet
    coded: int = 0  # URLs whose fingerprints are in the coded block ...
    code_bytes: int = 0  # ... of this many bytes (of fingerprint_bytes; the rest: raw, room)


class LeafStore(Protocol):
    """The atomic operations of a splittable filter's storage (see module docstring).

    check_and_add does one LeafOp to every key of a batch, leaf by leaf. claims: whether
    answers "new" are claimed until acknowledged (a store shared by several clients). Such a
    store keeps the claims it made and releases them through the filter's routing (Follow):
    acknowledge() when the caller has every answer so far, on failure of a `batch` those it
    made (their lease ends at once), on close those never acknowledged; a filter told
    "pending" calls wait() between its asks. A DROP is told, per leaf and key, the number the
    store's claims gave it (`records`). An ADD given `room` adds at
    most room[leaf] new keys to the leaf (the bound on how far one call can overfill it; in
    one process, whose leaf count is exact, as many as fit under its write limit if more);
    keys it finds seen don't count, and those past the room are left undone (`deferred`), so
    a batch of mostly repeats is answered in one call instead of one per room's worth.

    A leaf keeps its URLs' fingerprints in two parts: `code`, those a
    split or growth gave it, sorted and coded once (splittable/coding.py, written by
    fill_coded into a fresh leaf, never changed after), and the raw tail that check-and-add
    appends to (fp_bytes per URL reported new; `fingerprints` reads it by byte offset, `seal`
    answers its final length). Its count is both parts' URLs. `compact` codes the coded part
    and the raw tail's first raw_bytes together, under the leaf's split lock (its raw offsets
    change): refused (False) if the leaf was sealed or its code changed since it was read, as
    `seal` refuses (-2) a splitter whose read of the code is stale.

    swap retires the leaf it replaces: its keys are freed once no client routes by a tree
    older than the swap (a shared store learns which each client does from its loads, and
    tree_due says when a working client should load again to say so). A key sent to a leaf
    freed meanwhile is answered MISSING: the filter reloads the tree and routes it below.
    """

    claims: bool
    lease_ms: int  # an answer's claim lasts this long; a split lock, LOCK_LEASES of it
    auto_acknowledge: bool  # acknowledge each batch just before its answers are returned

    def batch(self, follow: Follow) -> AbstractContextManager[None]: ...

    def wait(self, follow: Follow) -> bool: ...

    def acknowledge(self, follow: Follow) -> int: ...

    def close(self, follow: Follow) -> None: ...

    def lost(self, what: str) -> FilterLostError: ...

    def load(self) -> Tree | None: ...

    def create(self, params: Mapping[str, Any], root: Split, bits: int) -> dict[str, Any]: ...

    def mark_ready(self) -> None: ...

    def make_leaves(self, leaves: Sequence[str], bits: int, params: Mapping[str, Any]) -> None: ...

    def new_leaf_ids(self, count: int) -> list[str]: ...

    def check_and_add(
        self,
        groups: Mapping[str, list[bytes]],
        op: LeafOp,
        records: Mapping[str, Sequence[int]] | None = None,
        room: Mapping[str, int] | None = None,
    ) -> dict[str, LeafReply]: ...

    def fingerprints(self, leaf: str, start: int, end: int) -> bytes: ...

    def code(self, leaf: str) -> bytes: ...

    def fill_coded(self, leaf: str, fps: list[bytes], code: bytes) -> LeafReply: ...

    def copy_claims(self, leaf: str, split: Split) -> None: ...

    def seal(self, leaf: str, coded: int | None = None) -> int: ...

    def compact(self, leaf: str, code: bytes, coded: int, raw_bytes: int) -> bool: ...

    def lock(self, leaf: str, token: str, ms: int) -> tuple[str, list[str]]: ...

    def refresh(self, leaf: str, token: str, ms: int, children: Sequence[str]) -> bool: ...

    def swap(self, leaf: str, token: str, split: Split, bits: int) -> int: ...

    def unlock(self, leaf: str, token: str) -> None: ...

    def tree_due(self) -> bool: ...

    def drop(self, leaves: Sequence[str]) -> None: ...

    def leaf_info(self, leaves: Sequence[str]) -> list[LeafInfo | None]: ...

    def memory_usage(self, leaves: Sequence[str]) -> int: ...

    def destroy(self) -> None: ...


@dataclass
class _Leaf:
    bits: _core.BitFilter
    buffer: bytearray
    fps: bytearray = field(default_factory=bytearray)  # the raw tail
    code: bytes = b""  # the coded part (fill_coded)
    coded: int = 0  # URLs in it
    state: str = "active"


def check_lease(lease: object) -> float:
    """A lease in seconds, checked: a positive finite number of at most MAX_LEASE_SECONDS."""
    if (
        isinstance(lease, bool)
        or not isinstance(lease, (int, float))
        or not math.isfinite(lease)
        or not 0 < lease <= MAX_LEASE_SECONDS
    ):
        raise ConfigError(f"lease must be seconds in (0, {MAX_LEASE_SECONDS:g}], not {lease!r}")
    return float(lease)


class MemoryLeafStore:
    """The store in this process's memory: for single-process use and tests. One process makes
    no claims: every answer reaches its caller, so acknowledging has nothing to release."""

    claims = False

    def __init__(self, lease: float | None = None) -> None:
        seconds = LEASE_SECONDS if lease is None else check_lease(lease)
        self.lease_ms = max(1, round(1000 * seconds))
        self.auto_acknowledge = True
        self._guard = threading.RLock()
        self._tree: dict[str, Any] = {}
        self._leaves: dict[str, _Leaf] = {}
        self._locks: dict[str, tuple[str, float, list[str]]] = {}

    @contextlib.contextmanager
    def batch(self, follow: Follow) -> Iterator[None]:
        yield

    def wait(self, follow: Follow) -> bool:
        return False

    def acknowledge(self, follow: Follow) -> int:
        return 0

    def close(self, follow: Follow) -> None:
        """Nothing claimed, nothing to abandon."""

    def lost(self, what: str) -> FilterLostError:
        return FilterLostError(what)

    @staticmethod
    def _bits(nbits: int, p: Mapping[str, Any]) -> tuple[_core.BitFilter, bytearray]:
        buffer = bytearray(nbits // 8)
        return bit_filter(buffer, nbits, p), buffer

    def _live(self, leaf: str) -> _Leaf | None:
        return self._leaves.get(leaf)

    def load(self) -> Tree | None:
        with self._guard:
            if "params" not in self._tree:
                return None
            return Tree(
                self._tree["version"],
                dict(self._tree["params"]),
                dict(self._tree["splits"]),
                ready=self._tree["ready"],
                sizes=dict(self._tree["sizes"]),
            )

    def create(self, params: Mapping[str, Any], root: Split, bits: int) -> dict[str, Any]:
        with self._guard:
            if "params" not in self._tree:
                self._tree.update(
                    params=dict(params), version=1, next=len(root.children) - 1,
                    splits={"root": root}, ready=False,
                    sizes=dict.fromkeys(root.children, bits),
                )  # fmt: skip
            return dict(self._tree["params"])

    def mark_ready(self) -> None:
        with self._guard:
            self._tree["ready"] = True

    def make_leaves(self, leaves: Sequence[str], bits: int, params: Mapping[str, Any]) -> None:
        with self._guard:
            for leaf in leaves:
                if leaf not in self._leaves:
                    bits_filter, buffer = self._bits(bits, params)
                    self._leaves[leaf] = _Leaf(bits_filter, buffer)

    def new_leaf_ids(self, count: int) -> list[str]:
        with self._guard:
            self._tree["next"] += count
            last = self._tree["next"]
            return [str(i) for i in range(last - count + 1, last + 1)]

    def check_and_add(
        self,
        groups: Mapping[str, list[bytes]],
        op: LeafOp,
        records: Mapping[str, Sequence[int]] | None = None,
        room: Mapping[str, int] | None = None,
    ) -> dict[str, LeafReply]:
        """Without claims, ACK, ABANDON and RENEW answer True and DROP has no records."""
        out: dict[str, LeafReply] = {}
        with self._guard:
            width = self._tree["params"]["fp_bytes"]  # a leaf keeps a URL's first bytes
            for leaf, fps in groups.items():
                entry = self._live(leaf)
                if entry is None:
                    out[leaf] = MISSING
                    continue
                count = entry.coded + len(entry.fps) // width
                if op in (LeafOp.ACK, LeafOp.ABANDON, LeafOp.RENEW):
                    out[leaf] = LeafAnswer([True] * len(fps), count)
                    continue
                if op != LeafOp.CONTAINS and entry.state != "active":
                    out[leaf] = MOVED
                    continue
                limit = write_limit(self._tree["params"], 8 * len(entry.buffer))
                if op == LeafOp.ADD and count >= limit:
                    out[leaf] = MOVED  # at its write limit: a split is due
                    continue
                if op == LeafOp.CONTAINS:
                    new = [not hit for hit in entry.bits.contains_many(fps)]
                elif op == LeafOp.COPY:  # every key counted new: none dropped as a false positive
                    entry.bits.add_many(fps)
                    entry.fps += b"".join(fps)
                    new = [True] * len(fps)
                else:
                    within = room.get(leaf) if room is not None else None
                    new = _add_within(
                        entry, fps, len(fps) if within is None else max(within, limit - count)
                    )
                deferred = list(range(len(new), len(fps)))
                count = entry.coded + len(entry.fps) // width
                out[leaf] = LeafAnswer(new + [False] * len(deferred), count, deferred=deferred)
        return out

    def fingerprints(self, leaf: str, start: int, end: int) -> bytes:
        with self._guard:
            entry = self._live(leaf)
            return b"" if entry is None else bytes(entry.fps[start:end])

    def code(self, leaf: str) -> bytes:
        with self._guard:
            entry = self._live(leaf)
            return b"" if entry is None else entry.code

    def fill_coded(self, leaf: str, fps: list[bytes], code: bytes) -> LeafReply:
        """Into a fresh leaf: set the bits of fps and keep `code` (their coded block) as its
        coded part. MOVED if the leaf is not fresh and active, MISSING if it is gone."""
        with self._guard:
            entry = self._live(leaf)
            if entry is None:
                return MISSING
            if entry.state != "active" or entry.coded or entry.fps:
                return MOVED
            entry.bits.update(fps)
            entry.code, entry.coded = code, len(fps)
            return LeafAnswer([True] * len(fps), len(fps))

    def copy_claims(self, leaf: str, split: Split) -> None:
        """No claims in one process."""

    def seal(self, leaf: str, coded: int | None = None) -> int:
        with self._guard:
            entry = self._live(leaf)
            if entry is None:
                return -1
            if coded is not None and entry.coded != coded:
                return -2
            entry.state = "retired"
            return len(entry.fps)

    def compact(self, leaf: str, code: bytes, coded: int, raw_bytes: int) -> bool:
        with self._guard:
            entry = self._live(leaf)
            if entry is None or entry.state != "active" or entry.coded != coded:
                return False
            width = self._tree["params"]["fp_bytes"]
            entry.code, entry.coded = code, coded + raw_bytes // width
            entry.fps = entry.fps[raw_bytes:]
            return True

    def lock(self, leaf: str, token: str, ms: int) -> tuple[str, list[str]]:
        with self._guard:
            if leaf in self._tree["splits"]:
                return "done", []
            now = time.monotonic()
            held = self._locks.get(leaf)
            if held and held[0] != token and held[1] > now:
                return "busy", []
            self._locks[leaf] = (token, now + ms / 1000, [])
            return "ok", list(held[2]) if held and held[0] != token else []

    def refresh(self, leaf: str, token: str, ms: int, children: Sequence[str]) -> bool:
        with self._guard:
            held = self._locks.get(leaf)
            if held is None or held[0] != token:
                return False
            self._locks[leaf] = (token, time.monotonic() + ms / 1000, list(children))
            return True

    def swap(self, leaf: str, token: str, split: Split, bits: int) -> int:
        with self._guard:
            held = self._locks.get(leaf)
            if held is None or held[0] != token or leaf in self._tree["splits"]:
                return 0
            self._tree["splits"][leaf] = split
            self._tree["sizes"].update(dict.fromkeys(split.children, bits))
            del self._locks[leaf]
            self._leaves.pop(leaf, None)  # retired: one process reads its tree as it changes
            self._tree["version"] += 1
            return int(self._tree["version"])

    def unlock(self, leaf: str, token: str) -> None:
        with self._guard:
            held = self._locks.get(leaf)
            if held is not None and held[0] == token:
                del self._locks[leaf]

    def tree_due(self) -> bool:
        """One process's filters read the tree as it changes: never due."""
        return False

    def drop(self, leaves: Sequence[str]) -> None:
        with self._guard:
            for leaf in leaves:
                self._leaves.pop(leaf, None)

    def leaf_info(self, leaves: Sequence[str]) -> list[LeafInfo | None]:
        with self._guard:
            out: list[LeafInfo | None] = []
            width = self._tree["params"]["fp_bytes"]
            for leaf in leaves:
                e = self._live(leaf)
                out.append(
                    None
                    if e is None
                    else LeafInfo(
                        e.state,
                        e.coded + len(e.fps) // width,
                        len(e.fps) + len(e.code),
                        coded=e.coded,
                        code_bytes=len(e.code),
                    )
                )
            return out

    def memory_usage(self, leaves: Sequence[str]) -> int:
        with self._guard:
            return sum(
                len(e.buffer) + len(e.fps) + len(e.code)
                for leaf in leaves
                if (e := self._live(leaf)) is not None
            )

    def destroy(self) -> None:
        with self._guard:
            self._tree.clear()
            self._leaves.clear()
            self._locks.clear()


def _add_within(entry: _Leaf, fps: list[bytes], room: int) -> list[bool]:
    """Add fps in order until room of them were new: the answers of those added (a prefix;
    the rest are deferred). Chunks no longer than the room left, so none overshoots it and no
    key is tested twice (a test of the whole batch first, to find where the room ends, would
    cost a second pass)."""
    new: list[bool] = []
    left = max(1, room)
    while left > 0 and len(new) < len(fps):
        part = fps[len(new) : len(new) + left]
        got = entry.bits.add_many(part)
        entry.fps += b"".join(fp for fp, fresh in zip(part, got, strict=True) if fresh)
        new += got
        left -= sum(got)
    return new
