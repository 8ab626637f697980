"""Splittable-filter sizing: k, a leaf's capacity, the first layer's leaves, the sizes a leaf
grows through, the fingerprint's width, and the stored parameters that hold them all.

Apart from bloom/sizing.py because only the splittable filter needs it: its dataclass is
not made at every `urlseen dedup` start (benchmarks/tools/callgrind_startup.py).

Memory follows what was inserted, not the capacity planned: leaf sizes step by 1.2-1.33x
(jemalloc's size classes (1, 1.25, 1.5, 1.75) * 2^j bits at least MIN_STEP apart, each kept
one 64-byte block smaller: stored_bits), from MIN_LEAF_BITS up to leaf_bits. The first layer
starts at the smallest (196 leaves of 448 B for 10^8 URLs with the defaults); a leaf that fills
below leaf_bits grows into one larger child, a full one splits; either way children start at
the smallest size holding CHILD_FIT times their URLs, so leaves stay 0.8-1.0 full.
"""

from __future__ import annotations

import itertools
import math
import uuid
from dataclasses import dataclass
from typing import Any

from urlseen import _core
from urlseen.bloom import sizing
from urlseen.bloom.sizing import (
    BLOCK_BITS,
    MAX_K,
    blocked_error_rate,
    check_target,
    smallest,
    standard_capacity,
)
from urlseen.errors import ConfigError, FormatError

# The stored parameters' format: the only one this version reads (7: a leaf's raw fingerprints
# are coded again under its split lock, a seal fenced by its coded count, so no client of an
# older one may share the filter; a split's leaf is freed once no client reads an older tree).
FORMAT = "urlseen-dsbf/7"
UPGRADE = "this version reads urlseen-dsbf/7 only: rebuild the filter (or use a new name)"
DEFAULT_LEAF_BITS = 1 << 23  # 1 MiB per leaf: 541,607 URLs at error_rate 0.001 (blocked)
MAX_FINGERPRINT_BYTES = 1 << 29  # one Redis string: 512 MiB
CHILD_FIT = 1.15  # a split's (or growth's) children hold this many times their URLs
MIN_STEP = 1.15  # leaf sizes: allocator classes (1, 1.25, 1.5, 1.75) * 2^j bits, this far apart
MIN_LEAF_BITS = 4096  # the first layer's leaves: at least this many bits ...
MIN_LEAF_URLS = 64  # ... holding at least this many URLs at the error rate
LEAF_OVERHEAD_BYTES = 512  # a leaf's keys and objects besides its bits (memory check)
GROWTH_ALLOWANCE = 1024  # fingerprints stay exact enough until a first-layer subtree holds ...
COLLISION_SHARE = 0.3  # ... this many full leaves' URLs at this share of the error rate
MIN_FINGERPRINT_BITS = 32


@dataclass(frozen=True)
class SplittableSize:
    """A dynamic splittable Bloom filter's shape: k probes per leaf, the most URLs a leaf holds
    at the error rate (leaf_capacity: reaching it, a leaf splits), and the first layer's leaves
    for the expected URLs."""

    k: int
    leaf_capacity: int
    first_leaves: int


def size_splittable(
    capacity: int, leaf_bits: int, error_rate: float, layout: str = "standard"
) -> SplittableSize:
    """The shape of a splittable filter expecting `capacity` URLs in leaves of `leaf_bits` bits
    that each keep false-positive rate <= error_rate.

    k is floor or ceil of log2(1 / error_rate), whichever lets a leaf hold more URLs; the leaf
    capacity is the exact largest load within the rate (standard_capacity: never the closed
    form, which overshoots); first_leaves = ceil(capacity / leaf_capacity).

    For the blocked layout the leaf capacity is the largest count whose blocked false-positive
    rate stays <= error_rate (a blocked leaf holds fewer URLs than a standard one at the same
    rate), and k is searched a little wider, since the blocked optimum sits below
    log2(1 / error_rate).
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigError(f"capacity (expected URLs) must be a positive int, not {capacity!r}")
    if (
        isinstance(leaf_bits, bool)
        or not isinstance(leaf_bits, int)
        or not 64 <= leaf_bits <= 1 << 32
    ):
        raise ConfigError(f"leaf_bits must be an int in [64, 2**32], not {leaf_bits!r}")
    check_target(capacity, error_rate)
    ideal_k = math.log2(1.0 / error_rate)
    if layout == "blocked":
        candidates = {
            min(MAX_K, max(1, k)) for k in range(math.floor(ideal_k) - 4, math.ceil(ideal_k) + 1)
        }

        def holds(k: int) -> int:
            top = standard_capacity(leaf_bits, k, error_rate)
            blocks = leaf_bits // BLOCK_BITS
            over = smallest(lambda n: blocked_error_rate(n, blocks, k) > error_rate, 1, top + 1)
            return over - 1

    else:
        candidates = {
            min(MAX_K, max(1, math.floor(ideal_k))),
            min(MAX_K, max(1, math.ceil(ideal_k))),
        }

        def holds(k: int) -> int:
            return standard_capacity(leaf_bits, k, error_rate)

    best = max(candidates, key=lambda k: (holds(k), -k))
    leaf_capacity = holds(best)
    if leaf_capacity < 1:
        raise ConfigError(
            f"a leaf of {leaf_bits} bits cannot hold one URL at error_rate {error_rate}"
        )
    return SplittableSize(best, leaf_capacity, -(-capacity // leaf_capacity))


def params(
    capacity: object,
    error_rate: object,
    leaf_bits: object,
    fanout: object,
    layout: object,
    seed: object,
    fingerprint_bytes: object = None,
) -> dict[str, Any]:
    """A new filter's stored parameters (format FORMAT, a fresh instance id), checked."""
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
    full = stored_bits(leaf_bits)
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
    write_limit = write_limit_of(size.leaf_capacity)
    if fingerprint_bytes is None:
        fp_bits = fingerprint_bits(size.leaf_capacity, rate)
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
    sizes = leaf_sizes(leaf_bits, size.k, leaf_rate, layout)
    sizes[-1] = (full, size.leaf_capacity, write_limit)
    return {
        "format": FORMAT, "instance": uuid.uuid4().hex[:16],
        "capacity": capacity, "error_rate": rate,
        "leaf_bits": leaf_bits, "fanout": fanout, "layout": layout, "seed": seed,
        "k": size.k, "leaf_capacity": size.leaf_capacity, "first_leaves": size.first_leaves,
        "leaf_write_limit": write_limit,
        "first_leaf_bits": sizes[0][0], "leaf_sizes": [list(shape) for shape in sizes],
        "fp_bytes": fingerprint_bytes, "fp_bits": fp_bits,
        "hash": "xxh3", "hash_id": _core.HASH_XXH3_128,
    }  # fmt: skip


def fingerprint_bits(leaf_capacity: int, error_rate: float) -> int:
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


def leaf_capacity_at(bits: int, k: int, error_rate: float, layout: str) -> int:
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


def write_limit_of(capacity: int) -> int:
    return capacity + max(1, capacity // 16)


def stored_bits(bits: int) -> int:
    """A leaf size as kept: an allocator class ((1, 1.25, 1.5 or 1.75) * 2^j bits) one 64-byte
    block smaller, so that a string of its bytes plus a 16-byte header fits jemalloc's size
    class of that many bytes instead of spilling into the next one, a quarter larger."""
    odd = bits // (bits & -bits)  # 1 for 2^j, 3, 5, 7 for 1.5, 1.25, 1.75 * 2^j
    return bits - 512 if bits >= 1024 and odd in (1, 3, 5, 7) else bits


def leaf_sizes(
    leaf_bits: int, k: int, error_rate: float, layout: str
) -> list[tuple[int, int, int]]:
    """(bits, capacity, write limit) of each size a leaf passes through, smallest first: leaf_bits,
    then the allocator classes below it ((1, 1.25, 1.5, 1.75) * 2^j bits) at least MIN_STEP
    apart (steps of 1.2-1.33), down to MIN_LEAF_BITS and MIN_LEAF_URLS URLs; each as
    stored_bits keeps it. Small steps keep leaves full: a split's children start at the size
    that fits their URLs (CHILD_FIT), a leaf that fills grows one step or more."""
    sizes = [leaf_bits]
    classes = sorted(
        {c << (j - 2) for j in range(12, 33) for c in (4, 5, 6, 7)}, reverse=True
    )  # jemalloc's 4 size classes per power of two, from 4096 bits (MIN_LEAF_BITS) to 2^32
    for smaller in classes:
        if smaller * MIN_STEP > sizes[0] or smaller < MIN_LEAF_BITS:
            continue
        if leaf_capacity_at(stored_bits(smaller), k, error_rate, layout) < MIN_LEAF_URLS:
            break
        sizes.insert(0, smaller)
    out = []
    for bits in map(stored_bits, sizes):
        capacity = leaf_capacity_at(bits, k, error_rate, layout)
        out.append((bits, capacity, write_limit_of(capacity)))
    return out


_INT_PARAMS = ("capacity", "leaf_bits", "fanout", "seed", "k", "leaf_capacity", "first_leaves",
               "leaf_write_limit", "hash_id", "first_leaf_bits", "fp_bytes", "fp_bits")  # fmt: skip


def check_params(p: dict[str, Any], name: str) -> None:
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
        and sizes[-1][0] == stored_bits(p["leaf_bits"])
        and all(a[0] < b[0] for a, b in itertools.pairwise(sizes))
    )
