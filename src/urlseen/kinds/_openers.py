"""How each kind is opened or created from a Request: one opener per kind and place (local
state, or shared through Redis), and the one rule for values given against stored ones."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping

from urlseen._frozen import Frozen
from urlseen.errors import FormatError, OptionError, ParameterConflict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from urlseen.protocol import SeenFilter
    from urlseen.splittable.tree import LeafStore

Spell = Callable[[str], str]
"""How a front end writes a parameter's name in messages: "--leaf-bits", "URLSEEN_CAPACITY"."""


def plain(name: str) -> str:
    return name


class Request(Frozen):
    """What a front end asked for. None means "not given": the stored value if the filter
    exists, else `defaults` (the kind's). given: the kind's options that were given (not
    None); defaults: capacity, error_rate and options ({} when left out)."""

    # the fields, in order (not sorted): eq, hash, repr and __init__ follow it
    __slots__ = (  # noqa: RUF023
        "kind", "capacity", "error_rate", "state", "redis", "name", "given", "defaults", "spell"
    )  # fmt: skip
    kind: str
    capacity: int | None
    error_rate: float | None
    state: Path | None
    redis: str | None
    name: str
    given: Mapping[str, Any]
    defaults: Mapping[str, Any]
    spell: Spell

    def __init__(
        self,
        kind: str,
        capacity: int | None,
        error_rate: float | None,
        state: Path | None,
        redis: str | None,
        name: str,
        given: Mapping[str, Any],
        defaults: Mapping[str, Any] | None = None,
        spell: Spell = plain,
    ) -> None:
        self._init(kind, capacity, error_rate, state, redis, name, given,
                   {} if defaults is None else defaults, spell)  # fmt: skip

    def value(self, name: str) -> Any:
        """The value to create with: given, else the kind's default."""
        given = getattr(self, name) if name in ("capacity", "error_rate") else self.given.get(name)
        return self.defaults.get(name) if given is None else given

    def explicit(self) -> dict[str, Any]:
        """Every value that was given, by name."""
        top = {"capacity": self.capacity, "error_rate": self.error_rate}
        return {k: v for k, v in {**top, **self.given}.items() if v is not None}


def checked(
    request: Request, opened: Any, stored: Mapping[str, Any], what: str, keeper: str = ""
) -> Any:
    """`opened` if every value given agrees with the stored one; else it is closed and
    ParameterConflict raised ("a state file keeps the parameters it was created with")."""
    for name, value in request.explicit().items():
        if name in stored and value != stored[name]:
            opened.close()
            raise ParameterConflict(
                f"{request.spell(name)} {value} differs from the {what}'s {stored[name]}; "
                f"a {keeper or what} keeps the parameters it was created with"
            )
    return opened


# -- local state ----------------------------------------------------------------------------


def _file_state(request: Request) -> Path | None:
    path = request.state
    if path is not None and path.is_dir():
        raise OptionError(
            f"{request.spell('state')} {path} is a folder: a {request.kind} filter's state is "
            "a file"
        )
    return path


def _created(path: Path, create: Callable[[], SeenFilter]) -> SeenFilter | None:
    """A filter made by create() at path, or None if path exists: already, or because another
    process made it a moment ago (then the caller opens theirs: one wins, the other opens it
    or is told it is in use)."""
    if path.exists():
        return None
    try:
        return create()
    except FileExistsError:
        if not path.exists():
            raise
        return None


def _folder_state(request: Request, marker: str) -> tuple[Path | None, bool]:
    """The folder, and whether it holds the kind's state already (its marker file). A folder
    that holds another kind's state is refused: a second filter would grow beside it."""
    from urlseen.exact.sqlite_library import SQLiteLibrary
    from urlseen.kinds import KINDS

    folder = request.state
    if folder is None:
        return None, False
    if folder.exists() and not folder.is_dir():
        raise OptionError(
            f"{request.spell('state')} {folder} is a file: {request.spell('filter')} "
            f"{request.kind} keeps a folder"
        )
    for row in KINDS.values():
        held = row.marker if row.state == "folder" else f"seen.{row.name}"
        if held and held != marker and (folder / held).exists():
            kind = "exact or library" if held == KINDS["exact"].marker else row.name
            raise FormatError(
                f"{folder}: holds {_a(kind)} filter's state ({held}), not {_a(request.kind)} "
                f"one: choose another folder for {request.spell('state')}"
            )
    made = (folder / marker).exists() and not SQLiteLibrary.half_made(folder / marker)
    return folder, made


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


@contextlib.contextmanager
def _creating(folder: Path) -> Iterator[None]:
    """Hold the folder's lock while its state is made, so that two processes creating the
    same state at once take turns: the second finds the first one's (and opens it)."""
    import fcntl  # here: a filter in memory takes no lock

    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a creation takes moments
        yield
    finally:
        os.close(fd)


def _file_filter(
    request: Request,
    make: Callable[[Path | None], Any],
    open_: Callable[[Path], Any],
    stored: Callable[[Any], Mapping[str, Any]],
) -> SeenFilter:
    """A file kind's filter: make(None) in memory, make(path) for a new state file, or the
    existing file opened and its stored values checked against the ones given."""
    path = _file_state(request)
    if path is None:
        return make(None)  # type: ignore[no-any-return]
    made = _created(path, lambda: make(path))
    if made is not None:
        return made
    seen = open_(path)
    return checked(request, seen, stored(seen), "state file")  # type: ignore[no-any-return]


def _sizing(request: Request) -> tuple[Any, Any]:
    return request.value("capacity"), request.value("error_rate")


def open_bloom(request: Request) -> SeenFilter:
    """No capacity and no state: a filter that grows with the keys met (a state file keeps a
    capacity chosen up front, the default's, for runs to come)."""
    from urlseen.bloom.bloom import BloomFilter

    layout = request.value("layout")
    if request.capacity is None and _file_state(request) is None:
        from urlseen.bloom.growing import GrowingBloomFilter

        return GrowingBloomFilter(request.value("error_rate"), layout=layout)
    return _file_filter(
        request,
        lambda path: BloomFilter(*_sizing(request), layout=layout, path=path),
        BloomFilter.open,
        lambda seen: {
            "capacity": seen.capacity,
            "error_rate": seen.error_rate,
            "layout": seen.stats().details["layout"],
        },
    )


def open_mdbf(request: Request) -> SeenFilter:
    from urlseen.bloom.mdbf import MultiDimensionalBloomFilter as Mdbf

    shape = {"groups": request.value("groups"), "query": request.value("query")}
    return _file_filter(
        request,
        lambda path: Mdbf(*_sizing(request), **shape, path=path),
        Mdbf.open,
        lambda seen: {
            "capacity": seen.capacity,
            "error_rate": seen.error_rate,
            "groups": seen.size.groups,
            "query": seen.query,
        },
    )


def open_similar(request: Request) -> SeenFilter:
    """Keys reach it canonicalized by the front end already (or raw by choice), so it does
    not canonicalize again."""
    from urlseen.similarity.filter import SimilarityFilter

    mode, index = request.value("similarity_mode"), request.value("similarity_index")
    if mode == "composite" and index != "shared":
        index_option = request.spell("similarity_index")
        raise OptionError(f"{index_option} applies to the patent and exact4 modes")
    url_db = request.value("url_db")
    shape = {"mode": mode, "index": index, "canonicalize": "none", "url_db": url_db}

    def stored(seen: Any) -> dict[str, Any]:
        stats = seen.stats()
        return {
            "capacity": stats.capacity,
            "error_rate": stats.error_rate,
            "similarity_mode": stats.details["mode"],
            "similarity_index": stats.details["index"],
        }

    return _file_filter(
        request,
        lambda path: SimilarityFilter(*_sizing(request), **shape, path=path),
        lambda path: SimilarityFilter.open(path, url_db=url_db),
        stored,
    )


def open_rotating(request: Request) -> SeenFilter:
    from urlseen.bloom.rotating import MANIFEST, RotatingBloomFilter

    folder, exists = _folder_state(request, MANIFEST)
    sizing = (request.value("capacity"), request.value("error_rate"))
    shape = {name: request.value(name) for name in ("generations", "window", "layout")}
    if folder is None:
        return RotatingBloomFilter(*sizing, **shape)
    if not exists:
        with _creating(folder):
            if not (folder / MANIFEST).exists():
                return RotatingBloomFilter.create(folder, *sizing, **shape)
    seen = RotatingBloomFilter.open(folder)
    details = seen.stats().details
    stored = {
        "capacity": seen.capacity,
        "error_rate": seen.error_rate,
        **{name: details[name] for name in ("generations", "window")},
    }
    return checked(request, seen, stored, "state")  # type: ignore[no-any-return]


def open_exact(request: Request) -> SeenFilter:
    """Without a state the library still lives on disk (a temporary folder), so memory stays
    bounded however many URLs come."""
    from urlseen.exact.filter import ExactFilter
    from urlseen.exact.folder import LIBRARY_FILE

    folder, exists = _folder_state(request, LIBRARY_FILE)
    sizing = (request.capacity, request.value("error_rate"))  # no capacity: counters that grow
    cache = {"cache_entries": request.value("cache_entries")}
    if folder is None:
        return ExactFilter.temporary(*sizing, **cache)
    if not exists:
        with _creating(folder):
            if not _folder_state(request, LIBRARY_FILE)[1]:
                return ExactFilter.create(folder, *sizing, **cache)
    seen = ExactFilter.open(folder, **cache)
    stored = {"capacity": seen.counters.capacity, "error_rate": seen.counters.error_rate}
    return checked(request, seen, stored, "state")  # type: ignore[no-any-return]


def open_library(request: Request) -> SeenFilter:
    from urlseen.exact.folder import LIBRARY_FILE
    from urlseen.exact.library_filter import FingerprintLibraryFilter

    folder, exists = _folder_state(request, LIBRARY_FILE)
    if folder is None:
        return FingerprintLibraryFilter.temporary()
    if not exists:
        with _creating(folder):
            if not _folder_state(request, LIBRARY_FILE)[1]:
                return FingerprintLibraryFilter.create(folder)
    return FingerprintLibraryFilter.open(folder)


def open_dsbf(request: Request) -> SeenFilter:
    """In this process's memory; shared_dsbf keeps it in Redis."""
    from urlseen.splittable.filter import SplittableBloomFilter

    if request.state is not None:
        raise OptionError(
            f"{request.kind} keeps its state in Redis ({request.spell('redis')}), not "
            f"{request.spell('state')}"
        )
    return SplittableBloomFilter(
        request.value("capacity"),
        request.value("error_rate"),
        leaf_bits=request.value("leaf_bits"),
        layout=request.value("layout"),
    )


# -- shared through Redis -------------------------------------------------------------------

MIN_LEASE = 1.0  # seconds: the shortest lease a front end takes (the library takes any > 0)


def refuse_short_lease(lease: object, spell: Spell) -> None:
    """A front end's lease under MIN_LEASE is refused with the reason: a shorter one runs out
    while a batch is answered, written and acknowledged, and other processes then print the
    batch's URLs too."""
    if isinstance(lease, (int, float)) and not isinstance(lease, bool) and lease < MIN_LEASE:
        raise OptionError(
            f"{spell('lease')} must be at least {MIN_LEASE:g} second, not {lease!r}: a shorter "
            "lease runs out before a batch's URLs are written and acknowledged, and other "
            "processes would print them again"
        )


def _sharing(request: Request) -> dict[str, Any]:
    """What every shared filter takes besides its sizing: its lease and the eviction override."""
    return {
        "lease": request.value("lease"),
        "allow_eviction": bool(request.value("allow_eviction")),
    }


def shared_bloom(request: Request) -> SeenFilter:
    from urlseen.shared.bloom import RedisBloomFilter

    url, name = request.redis, request.name
    assert url is not None
    if not RedisBloomFilter.exists(url, name):
        sizing = (request.value("capacity"), request.value("error_rate"))
        return RedisBloomFilter(
            url, name, *sizing, layout=request.value("layout"), **_sharing(request)
        )
    seen = RedisBloomFilter(url, name, **_sharing(request))
    stats = seen.stats()
    stored = {
        "capacity": stats.capacity,
        "error_rate": stats.error_rate,
        "layout": stats.details["layout"],
    }
    return checked(request, seen, stored, "shared filter")  # type: ignore[no-any-return]


def shared_library(request: Request) -> SeenFilter:
    """Exact and shared: with several writers local counters prove nothing, so the library
    in Redis decides every URL atomically (exact and library are one thing here)."""
    from urlseen.exact.library_filter import FingerprintLibraryFilter
    from urlseen.shared.library import RedisLibrary

    url, name = request.redis, request.name
    assert url is not None
    if not RedisLibrary.exists(url, name):
        library = RedisLibrary(url, name, request.value("capacity"), **_sharing(request))
    else:
        library = RedisLibrary(url, name, **_sharing(request))
        stored = {"capacity": library.params["capacity"]}
        checked(request, library, stored, "shared library", keeper="library")
    return FingerprintLibraryFilter(library=library)


def remote_leaf_store(
    redis: Any, name: str, *, lease: float | None = None, allow_eviction: bool = False
) -> LeafStore:
    """A splittable filter's store in Redis: the host code's (urlseen.shared.leaves), which the
    Redis-blind filter is handed (SplittableBloomFilter(redis=...) asks for it here)."""
    from urlseen.shared.leaves import open_leaf_store

    return open_leaf_store(redis, name, lease=lease, allow_eviction=allow_eviction)


def remote_leaf_store_exists(redis: Any, name: str) -> bool:
    """Whether Redis holds a splittable filter called name."""
    from urlseen.shared.leaves import RedisLeafStore

    return RedisLeafStore(redis, name).holds_kind()


def shared_dsbf(request: Request) -> SeenFilter:
    from urlseen.splittable.filter import SplittableBloomFilter

    url, name = request.redis, request.name
    assert url is not None
    store = remote_leaf_store(url, name, **_sharing(request))
    if store.load() is None:
        return SplittableBloomFilter(
            request.value("capacity"),
            request.value("error_rate"),
            name=name,
            leaf_bits=request.value("leaf_bits"),
            layout=request.value("layout"),
            store=store,
        )
    seen = SplittableBloomFilter(name=name, store=store)
    stats = seen.stats()
    stored = {
        "capacity": stats.capacity,
        "error_rate": stats.error_rate,
        **{key: stats.details[key] for key in ("layout", "leaf_bits")},
    }
    return checked(request, seen, stored, "shared filter")  # type: ignore[no-any-return]
