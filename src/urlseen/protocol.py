"""The one protocol every urlseen filter implements, the stats it reports, and `creator`, which
makes a filter's create() from its constructor (one parameter list per filter). The lifecycle
every filter (and store) class builds on is `Closeable`, in urlseen/_lifecycle.py.

The Protocol classes (SeenFilter, Acknowledging, WaitsOnClaims, DedupStep) live in
urlseen/_protocols.py and are imported from here on first use: `typing`, `dataclasses` and
`inspect` stay off the start of a run that only needs a filter (`urlseen dedup`), which asks
what a filter can do with `can()` instead of isinstance.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

from urlseen._frozen import Frozen
from urlseen.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Concatenate, ParamSpec, TypeAlias, TypeVar

    from urlseen._core import BitFilter, CountingFilter, LineEngine
    from urlseen._protocols import Acknowledging as Acknowledging
    from urlseen._protocols import DedupStep as DedupStep
    from urlseen._protocols import SeenFilter as SeenFilter
    from urlseen._protocols import WaitsOnClaims as WaitsOnClaims

    P = ParamSpec("P")
    F = TypeVar("F")
    Made = TypeVar("Made")

_PROTOCOLS = ("SeenFilter", "Acknowledging", "WaitsOnClaims", "DedupStep")


def __getattr__(name: str) -> Any:
    if name in _PROTOCOLS:
        from urlseen import _protocols

        value = getattr(_protocols, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'urlseen.protocol' has no attribute {name!r}")


MEMBERS: dict[str, tuple[str, ...]] = {
    "Acknowledging": ("auto_acknowledge", "acknowledge"),
    "WaitsOnClaims": ("wait_for_claims", "claim_counts"),
    "DedupStep": ("dedup_hasher", "dedup_step"),
}
"""The members of each optional protocol, as isinstance on the runtime-checkable Protocol tests
them (tests/test_protocol.py holds the two equal)."""


def can(obj: object, protocol: str) -> bool:
    """isinstance(obj, the Protocol named protocol), without importing typing: obj has every
    member of it (MEMBERS)."""
    return all(hasattr(obj, member) for member in MEMBERS[protocol])


Key = str | bytes
"""A key: a str (hashed as UTF-8) or bytes. URLs are canonicalized before they become keys."""


class FilterStats(Frozen):
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

    __slots__ = (  # noqa: RUF023
        "kind", "capacity", "count", "bits", "error_rate", "estimated_error_rate", "details"
    )  # fmt: skip
    kind: str
    capacity: int
    count: int
    bits: int
    error_rate: float
    estimated_error_rate: float
    details: dict[str, Any]

    def __init__(
        self,
        kind: str,
        capacity: int,
        count: int,
        bits: int,
        error_rate: float,
        estimated_error_rate: float,
        details: dict[str, Any],
    ) -> None:
        self._init(kind, capacity, count, bits, error_rate, estimated_error_rate, details)

    @property
    def bits_per_key(self) -> float:
        """Bits per key at capacity."""
        return self.bits / self.capacity

    @property
    def over_capacity(self) -> bool:
        """True once more keys were added than the filter was sized for."""
        return self.count > self.capacity

    def as_dict(self) -> dict[str, Any]:
        """The fields (details copied deep, as dataclasses.asdict does) and bits_per_key."""
        import copy

        fields = {name: getattr(self, name) for name in self.__slots__}
        return {**fields, "details": copy.deepcopy(self.details), "bits_per_key": self.bits_per_key}


class ClaimCounts(Frozen):
    """What a shared filter's client could not settle alone since it opened (shared/claims.py).

    Attributes:
        unconfirmed: distinct URLs answered seen only because another client's claim (from an
            older batch) outlived the wait: that client may never deliver them (it died with a
            long lease); they go to the next asker after its lease ends.
        lapsed: answers "new" whose claim's lease ended before they were acknowledged: another
            client may have been given them too (acknowledge() counts those taken over).
    """

    __slots__ = ("unconfirmed", "lapsed")  # noqa: RUF023
    unconfirmed: int
    lapsed: int

    def __init__(self, unconfirmed: int = 0, lapsed: int = 0) -> None:
        self._init(unconfirmed, lapsed)


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
        if can(part, "WaitsOnClaims"):
            part.wait_for_claims = bool(value)  # type: ignore[attr-defined]

    @property
    def claim_counts(self) -> ClaimCounts:
        """See WaitsOnClaims (all 0: local, no claims)."""
        part = self._claimer()
        if can(part, "WaitsOnClaims"):
            counts: ClaimCounts = part.claim_counts  # type: ignore[attr-defined]
            return counts
        return ClaimCounts()


Batch: TypeAlias = "list[Key] | LineEngine"
"""One batch of the dedup job: its keys, or the line engine that holds them in its buffers."""


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
    return classmethod(_Create(init, doc))


class _Create:
    """A filter class's create(cls, path, ...): its signature (inspect.signature, help()) is the
    constructor's, worked out when first asked for, not when the class is made (inspect is
    costly to import and a run of `urlseen dedup` never asks)."""

    def __init__(self, init: Callable[..., None], doc: str) -> None:
        self._init = init
        self._signature: object = None
        self.__module__ = init.__module__
        self.__qualname__ = init.__qualname__.rpartition(".")[0] + ".create"
        self.__name__ = "create"
        self.__doc__ = doc

    def __call__(self, cls: Callable[..., Any], path: StrPath, /, *args: Any, **kwargs: Any) -> Any:
        return cls(*args, path=path, **kwargs)

    @property
    def __signature__(self) -> object:
        if self._signature is None:
            import inspect

            signature = inspect.signature(self._init)
            self_param, *params = signature.parameters.values()
            path = inspect.Parameter(
                "path", inspect.Parameter.POSITIONAL_ONLY, annotation="str | os.PathLike[str]"
            )
            self._signature = signature.replace(
                parameters=[
                    self_param.replace(name="cls", kind=inspect.Parameter.POSITIONAL_ONLY),
                    path,
                    *(p for p in params if p.name != "path"),
                ],
                return_annotation=self._init.__qualname__.rpartition(".")[0],
            )
        return self._signature


def in_temporary_folder(make: Callable[[Path], Made]) -> Made:
    """make(folder) in a new temporary folder (removed at once if make fails), kept by what it
    made as `_temporary`, which removes it on close: a filter that persists nothing but keeps
    its library on disk, so memory stays bounded however many URLs come."""
    import tempfile  # these two here: a filter in memory (`urlseen dedup`) does not pay for them
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="urlseen-"))
    try:
        made = make(folder)
    except BaseException:
        remove_temporary(folder)
        raise
    made._temporary = folder  # type: ignore[attr-defined]
    return made


def remove_temporary(folder: Path) -> None:
    """Remove what in_temporary_folder made (shutil imported here: it imports bz2 and lzma)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
