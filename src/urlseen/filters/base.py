"""The one protocol every urlseen filter implements, and the stats it reports. The lifecycle
every filter (and store) class builds on is `Closeable`, in urlseen/_lifecycle.py."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

Key = str | bytes
"""A key: a str (hashed as UTF-8) or bytes. URLs are canonicalized before they become keys."""


@dataclass(frozen=True)
class FilterStats:
    """What a filter holds and costs.

    Attributes:
        kind: the algorithm ("bloom", ...).
        capacity: distinct keys the filter was sized for.
        count: keys reported new so far (len(filter)).
        bits: memory of the filter's data, in bits.
        error_rate: the configured false-positive rate at capacity.
        estimated_error_rate: the false-positive rate at the current count, from the formula.
        details: algorithm-specific values (k, layout, seed, path, ...).
    """

    kind: str
    capacity: int
    count: int
    bits: int
    error_rate: float
    estimated_error_rate: float
    details: dict[str, Any]

    @property
    def bits_per_key(self) -> float:
        """Bits per key at capacity."""
        return self.bits / self.capacity

    @property
    def over_capacity(self) -> bool:
        """True once more keys were added than the filter was sized for."""
        return self.count > self.capacity

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bits_per_key": self.bits_per_key}


@runtime_checkable
class SeenFilter(Protocol):
    """The URL-seen test: check-and-add in one call, batch forms, stats, context manager."""

    def add(self, key: Key) -> bool:
        """Add key; True if it was new (the crawler should fetch it)."""
        ...

    def __contains__(self, key: object) -> bool: ...

    def add_many(self, keys: Iterable[Key]) -> list[bool]: ...

    def contains_many(self, keys: Iterable[Key]) -> list[bool]: ...

    def __len__(self) -> int: ...

    def stats(self) -> FilterStats: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


def key_batch(keys: Iterable[Key]) -> list[Key]:
    """keys as a list. A single str or bytes is refused: iterating it would check its
    characters one by one, a common slip (add_many("https://...") for add_many([...]))."""
    if isinstance(keys, (str, bytes, bytearray)):
        raise TypeError(
            f"expected an iterable of keys, not a single {type(keys).__name__!r} "
            "(wrap it in a list)"
        )
    return list(keys)
