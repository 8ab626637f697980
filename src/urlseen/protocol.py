"""The one protocol every urlseen filter implements, the stats it reports, and `creator`, which
makes a filter's create() from its constructor (one parameter list per filter). The lifecycle
every filter (and store) class builds on is `Closeable`, in urlseen/_lifecycle.py."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypeVar,
    runtime_checkable,
)

from urlseen.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from urlseen._core import BitFilter, CountingFilter, LineEngine

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


@runtime_checkable
class Acknowledging(Protocol):
    """Optional for a filter: it holds each answer (claimed) until acknowledge() says the
    caller has it, so that a process killed in between loses no URL. With auto_acknowledge
    True (the default) add_many acknowledges its answers before it returns them."""

    auto_acknowledge: bool

    def acknowledge(self) -> int: ...


@dataclass(frozen=True)
class ClaimCounts:
    """What a shared filter's client could not settle alone since it opened (shared/claims.py).

    Attributes:
        unconfirmed: distinct URLs answered seen only because another client's claim (from an
            older batch) outlived the wait: that client may never deliver them (it died with a
            long lease); they go to the next asker after its lease ends.
        lapsed: answers "new" whose claim's lease ended before they were acknowledged: another
            client may have been given them too (acknowledge() counts those taken over).
    """

    unconfirmed: int = 0
    lapsed: int = 0


@runtime_checkable
class WaitsOnClaims(Protocol):
    """Optional for a filter that claims its answers (a shared one): wait_for_claims False (the
    default) waits about one lease of its own for another client's older claim, then answers
    the URL seen and counts it unconfirmed; True waits until the claim is acknowledged or its
    lease ends (at most the longest lease, a day)."""

    wait_for_claims: bool

    @property
    def claim_counts(self) -> ClaimCounts: ...


class PassesClaimsOn:
    """WaitsOnClaims for a filter whose claims are made by a part of it (a shared library, a
    leaf store), _claimer(): a part that makes none (local) never waits and counts nothing."""

    def _claimer(self) -> object:
        raise NotImplementedError

    @property
    def wait_for_claims(self) -> bool:
        """See WaitsOnClaims (False: local, no claims)."""
        return bool(getattr(self._claimer(), "wait_for_claims", False))

    @wait_for_claims.setter
    def wait_for_claims(self, value: bool) -> None:
        part = self._claimer()
        if isinstance(part, WaitsOnClaims):
            part.wait_for_claims = bool(value)

    @property
    def claim_counts(self) -> ClaimCounts:
        """See WaitsOnClaims (all 0: local, no claims)."""
        part = self._claimer()
        return part.claim_counts if isinstance(part, WaitsOnClaims) else ClaimCounts()


Batch: TypeAlias = "list[Key] | LineEngine"
"""One batch of the dedup job: its keys, or the line engine that holds them in its buffers."""


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


class CommitAfterWrite:
    """DedupStep for a filter whose add_many(keys, before_commit=f) calls f(flags) once the
    answers are known and before it commits any of them: the job writes the new lines there,
    in the same pass. The line engine's batches come as lists of keys."""

    __slots__ = ()

    def dedup_hasher(self) -> BitFilter | CountingFilter | None:
        return None

    def dedup_step(
        self, batch: Batch, write: Callable[[list[bool] | None], object], transactional: bool
    ) -> int | None:
        if not isinstance(batch, list):
            return None  # the job hands the engine's batch over again as a list
        flags: list[bool] = self.add_many(batch, before_commit=write)  # type: ignore[attr-defined]
        return flags.count(True)


def check_given(stored: Mapping[str, Any], given: Mapping[str, Any], what: str) -> None:
    """A filter keeps the parameters it was created with: refuse (ConfigError) a value given
    (not None) that differs from the stored one."""
    for field, value in given.items():
        if value is not None and value != stored[field]:
            raise ConfigError(f"{what} exists with {field}={stored[field]!r}, not {value!r}")


def key_batch(keys: Iterable[Key]) -> list[Key]:
    """keys as a list. A single str or bytes is refused: iterating it would check its
    characters one by one, a common slip (add_many("https://...") for add_many([...]))."""
    if isinstance(keys, (str, bytes, bytearray)):
        raise TypeError(
            f"expected an iterable of keys, not a single {type(keys).__name__!r} "
            "(wrap it in a list)"
        )
    return list(keys)


P = ParamSpec("P")
F = TypeVar("F")
StrPath = str | os.PathLike[str]


def new_in_batch(seen: SeenFilter, keys: Sequence[Key]) -> list[bool]:
    """Which keys are new, testing only (nothing is added): absent from the filter, and the
    first of their repeats in the batch. For callers that must persist what is new before
    the filter records it."""
    present = seen.contains_many(keys)
    firsts: set[bytes] = set()  # as bytes: the filter hashes "x" and b"x" alike
    flags = []
    for key, hit in zip(keys, present, strict=True):
        fresh = False
        if not hit:
            as_bytes = key.encode() if isinstance(key, str) else bytes(key)
            fresh = as_bytes not in firsts
            firsts.add(as_bytes)
        flags.append(fresh)
    return flags


def creator(
    init: Callable[Concatenate[F, P], None], doc: str
) -> classmethod[F, Concatenate[StrPath, P], F]:
    """`create = creator(__init__, doc)` in a filter class: `X.create(path, *args, **kwargs)` is
    `X(*args, path=path, **kwargs)`, typed (for mypy and IDEs) and documented (help()) by the
    constructor's own parameter list, so that list is written once."""

    def create(cls: type[F], path: StrPath, /, *args: P.args, **kwargs: P.kwargs) -> F:
        return cls(*args, path=path, **kwargs)  # type: ignore[call-arg]  # the constructor's

    signature = inspect.signature(init)
    self_param, *params = signature.parameters.values()
    path = inspect.Parameter(
        "path", inspect.Parameter.POSITIONAL_ONLY, annotation="str | os.PathLike[str]"
    )
    create.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            self_param.replace(name="cls", kind=inspect.Parameter.POSITIONAL_ONLY),
            path,
            *(p for p in params if p.name != "path"),
        ],
        return_annotation=init.__qualname__.rpartition(".")[0],
    )
    create.__module__ = init.__module__
    create.__qualname__ = init.__qualname__.rpartition(".")[0] + ".create"
    create.__doc__ = doc
    return classmethod(create)


Made = TypeVar("Made")


def in_temporary_folder(make: Callable[[Path], Made]) -> Made:
    """make(folder) in a new temporary folder (removed at once if make fails), kept by what it
    made as `_temporary`, which removes it on close: a filter that persists nothing but keeps
    its library on disk, so memory stays bounded however many URLs come."""
    import shutil  # these three here: a filter in memory (`urlseen dedup`) does not pay for them
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="urlseen-"))
    try:
        made = make(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    made._temporary = folder  # type: ignore[attr-defined]
    return made
