"""Persistence the C-backed filters share.

The lifecycle (context manager, idempotent close, finalizer, ClosedError) is `Closeable`
(urlseen/_lifecycle.py), as for every filter and store. `StoreBacked` builds on it: create,
open, save, flush, close, verify, stats details and repr for the Python subclasses of the C
filter types (BloomFilter, CountingBloomFilter, MultiDimensionalBloomFilter): they keep their
store in `_store`, say how their params are checked (`_check_header`, which starts with
`stored_params`), how many data bytes they describe (`_data_bytes`) and which shape arguments
their C type takes between the data offset and the seed (`_shape`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from urlseen import _core
from urlseen._lifecycle import Closeable
from urlseen.errors import FormatError
from urlseen.hashes import HASHES, require_stored_hash, require_stored_seed
from urlseen.state.memory import MemoryStore

# The state file's modules (mmapfile, _format, and json, uuid, pathlib under them) are imported
# by the methods that touch a file: a filter in memory (`urlseen dedup`) starts without them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from typing_extensions import Self

    from urlseen.state.format import Header
    from urlseen.state.store import BufferStore

    class _CFilter(Closeable):
        """What the C filter type after StoreBacked in a subclass's MRO gives it."""

        count: int

        def __init__(self, buffer: Any, offset: int, *shape_seed_count_hash: int) -> None: ...

        @property
        def seed(self) -> int: ...

        @property
        def readonly(self) -> bool: ...

        def _release(self) -> None: ...

        def add_many(self, keys: Iterable[_core.Key]) -> list[bool]: ...

        def contains_many(self, keys: Iterable[_core.Key]) -> list[bool]: ...

else:
    _CFilter = Closeable


class StoreBacked(_CFilter):
    """Persistence on top of a C filter type that has `_release()` and `count`.

    The subclasses are slotted (no per-instance dict, for the C methods' speed), so they keep
    no closed flag: the filter is closed when its store is.
    """

    __slots__ = ()
    _store: BufferStore | None

    @staticmethod
    def _data_bytes(params: dict[str, Any]) -> int:
        raise NotImplementedError

    @staticmethod
    def _check_header(header: Header, where: str) -> None:
        """Refuse params this filter cannot use (FormatError), before the file is touched."""
        raise NotImplementedError

    @staticmethod
    def _shape(params: dict[str, Any]) -> tuple[int, ...]:
        raise NotImplementedError

    def _attach(self, store: BufferStore) -> None:
        """Point the C filter at the store's data and its live count (none when read-only)."""
        params = store.params()
        self._store = store  # in the subclass's __slots__
        super().__init__(  # the C filter type, next in the MRO
            store.buffer,
            store.data_offset,
            *self._shape(params),
            params["seed"],
            store.stored_count(),
            store.count_offset if not store.readonly else -1,
            HASHES[params["hash"]],
        )

    @classmethod
    def _new_store(
        cls, params: dict[str, Any], path: str | os.PathLike[str] | None, overwrite: bool
    ) -> BufferStore:
        """Room for an empty filter: a new state file at path (FileExistsError if it exists,
        unless overwrite), or memory when path is None."""
        size = cls._data_bytes(params)
        if path is None:
            return MemoryStore(size, params)
        from urlseen.state.mmapfile import MappedFile

        return MappedFile.create(path, params, size, overwrite=overwrite)

    @classmethod
    def _create_file(
        cls, path: str | os.PathLike[str], params: dict[str, Any], overwrite: bool
    ) -> Self:
        """An empty filter in a new state file (FileExistsError unless overwrite)."""
        return cls.from_store(cls._new_store(params, path, overwrite))

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, readonly: bool = False) -> Self:
        """Open a state file made by create() or save(). Checks its header and, if its writer
        closed it, its data (a read of all of it).

        Raises:
            FormatError: the file is not this filter's state file, or is corrupted (header or
                data), truncated or of a newer format.
            StateInUseError: another process has it open for writing.
            OSError: the file cannot be opened (for writing: a read-only file or disk), or its
                blocks cannot be reserved (a full disk).
        """
        from urlseen.state.mmapfile import MappedFile

        return cls.from_store(MappedFile.open(path, readonly=readonly, check=cls._check_header))

    @classmethod
    def from_store(cls, store: BufferStore) -> Self:
        """A filter on an open store (memory or file), whose params describe it."""
        self = cls.__new__(cls)
        self._store = None  # in the subclass's __slots__
        self._attach(store)
        return self

    @classmethod
    def _in_memory(cls, params: dict[str, Any]) -> Self:
        """An empty filter on a new in-memory store (a copy of params)."""
        return cls.from_store(MemoryStore(cls._data_bytes(params), dict(params)))

    @property
    def capacity(self) -> int:
        return int(self._live_store().params()["capacity"])

    @property
    def error_rate(self) -> float:
        return float(self._live_store().params()["error_rate"])

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write this filter to a new state file (atomically: temp file, then link or rename)."""
        from urlseen.state.mmapfile import save_copy

        store = self._live_store()
        count = self.count
        save_copy(store, self._data_bytes(store.params()), count, path, overwrite)

    def _store_details(self, params: dict[str, Any]) -> dict[str, Any]:
        """The stats details every store-backed filter ends with."""
        return {
            "seed": self.seed,
            "hash": params["hash"],
            "path": self.path,
            "readonly": self.readonly,
        }

    def _repr_fields(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        if self.closed:
            return f"<{type(self).__name__} closed>"
        return (
            f"<{type(self).__name__} capacity={self.capacity} error_rate={self.error_rate} "
            f"{self._repr_fields()}>"
        )

    def flush(self) -> None:
        """Push the data and count of a file-backed filter to disk (msync)."""
        self._live_store().flush()

    @property
    def closed(self) -> bool:
        store: BufferStore | None = getattr(self, "_store", None)
        return store is None or store.closed

    def close(self) -> None:
        """Release the data; a file-backed filter is sealed (count, checksum, clean flag)."""
        if not self.closed:
            self._close()

    def _close(self) -> None:
        store = self._store
        assert store is not None  # not closed
        try:
            self._release()
        finally:
            store.close()

    def verify(self) -> bool:
        """Check a file-backed filter's data against its checksum (reads all of it).

        True if it matches. False if there is nothing to check: an in-memory filter, a file
        opened for writing (the checksum is rewritten only when it is closed), or one that was
        not closed cleanly. Raises FormatError if it does not match.
        """
        from urlseen.state.mmapfile import MappedFile

        store = self._live_store()
        return store.verify() if isinstance(store, MappedFile) else False

    def _live_store(self) -> BufferStore:
        self._usable()
        store = self._store
        assert store is not None  # not closed
        return store

    # Batches check the store first (one fstat for a file): a state file cut short by another
    # process is then a FormatError, not a SIGBUS. Single-key calls stay bare C calls.

    def check_store(self) -> None:
        """FormatError if the state file was cut short underneath (nothing for memory)."""
        self._live_store().check()

    def add_many(self, keys: Iterable[_core.Key]) -> list[bool]:
        """Check-and-add every key, in order; element i is True if key i was new."""
        self._live_store().check()
        return super().add_many(keys)

    def contains_many(self, keys: Iterable[_core.Key]) -> list[bool]:
        """Test every key without adding; element i is True if key i may have been added."""
        self._live_store().check()
        return super().contains_many(keys)

    @property
    def path(self) -> str | None:
        store = getattr(self, "_store", None)
        return store.path if store is not None else None

    def __reduce__(self) -> Any:
        name = type(self).__name__
        raise TypeError(f"{name} cannot be pickled; use save() and {name}.open()")


def stored_params(
    header: Header, where: str, kind: str, name: str, **types: type
) -> dict[str, Any]:
    """A state file's params if it holds a `kind` filter (`name` in the error) whose fields have
    the given types, an error_rate, a seed in range and a hash this code knows; else
    FormatError."""
    from urlseen.state import format

    params = header.params
    if params.get("kind") != kind:
        raise FormatError(f"{where}: holds a {params.get('kind')!r} filter, not {name}")
    format.require(params, where, **types)
    format.require(params, where, error_rate=float)
    require_stored_hash(params, where)
    require_stored_seed(params, where)
    return params
