"""The typing.Protocol classes of urlseen.protocol (which names them): a module apart, imported on
first use, so that a run that never asks for one (`urlseen dedup`) starts without `typing`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from urlseen._core import BitFilter, CountingFilter
    from urlseen.protocol import Batch, ClaimCounts, FilterStats, Key


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


@runtime_checkable
class Acknowledging(Protocol):
    """Optional for a filter: it holds each answer (claimed) until acknowledge() says the
    caller has it, so that a process killed in between loses no URL. With auto_acknowledge
    True (the default) add_many acknowledges its answers before it returns them."""

    auto_acknowledge: bool

    def acknowledge(self) -> int: ...


@runtime_checkable
class WaitsOnClaims(Protocol):
    """Optional for a filter that claims its answers (a shared one): wait_for_claims False (the
    default) waits about one lease of its own for another client's older claim, then answers
    the URL seen and counts it unconfirmed; True waits until the claim is acknowledged or its
    lease ends (at most the longest lease, a day)."""

    wait_for_claims: bool

    @property
    def claim_counts(self) -> ClaimCounts: ...


@runtime_checkable
class DedupStep(Protocol):
    """Optional for a filter: it runs the dedup job's batches itself (urlseen.job.dedup), where
    it can do better than add_many: probe keys in the line engine's buffers without a Python
    object per line, or commit the batch after its new lines are written in one pass."""

    def dedup_hasher(self) -> BitFilter | CountingFilter | None:
        """The C filter whose hash the line engine's worker computes for each key ahead of the
        batch (dedup_step then finds the keys hashed), or None."""
        ...

    def dedup_step(
        self, batch: Batch, write: Callable[[list[bool] | None], object], transactional: bool
    ) -> int | None:
        """Check-and-add one batch; return how many keys were new, or None to leave the batch
        to the job (which then hands an engine's batch over again as a list of keys, and does
        a list with add_many or contains_many).

        write(flags) writes the batch's new lines; flags None: the engine holds the answers
        (its probe set them). It is called once per batch, after the answers are known; when
        transactional, before any of the batch's keys are committed to the filter.
        """
        ...
